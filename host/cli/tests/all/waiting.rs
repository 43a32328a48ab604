//! Waiting in tests for what a running `gatehouse serve` does next.

use std::time::Duration;

/// Waits until `done` holds, looking every 20 ms; fails the test with
/// `what` after 30 s.
pub async fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while !done() {
        assert!(tokio::time::Instant::now() < deadline, "{what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
