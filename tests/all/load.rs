//! A short pass of the load harness (`gatehouse-load`) in every test run:
//! mixed elicitations through `gatehouse serve`, nothing lost or doubled.

use std::path::PathBuf;
use std::time::Duration;

use gatehouse_tests::load::{LoadOptions, Transport, run};

fn target() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| gatehouse_tests::workspace_root().join("target"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_seconds_of_mixed_load_lose_nothing() {
    let options = LoadOptions {
        gatehouse: target().join("debug/gatehouse"),
        demo_server: gatehouse_tests::demo_server(),
        guests: gatehouse_tests::guests_dir(),
        duration: Duration::from_secs(3),
        workers: 16,
        max_calls: None,
        transport: Transport::Stdio,
    };
    let report = run(&options).await.expect("the harness runs");
    assert_eq!(report.problems(), Vec::<String>::new(), "{report:#?}");
    // Every scenario ran, and the audit saw each kind of decision.
    assert_eq!(report.scenarios.len(), 6, "{report:#?}");
    for who in ["guest", "person", "policy"] {
        assert!(report.decided_by.contains_key(who), "{report:#?}");
    }
    assert!(!report.rss.is_empty(), "the gateway's memory was sampled");
}

/// The soak's shape in brief: sessions over HTTP that close after a few calls
/// and open again. A closed session must free its slot (the config allows
/// one per worker), its questions must still each get one answer and one
/// audit line, and a question no person may be shown (calls from several
/// sessions in flight on its server) must be declined and audited as such.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_opening_and_closing_over_http_lose_nothing() {
    let options = LoadOptions {
        gatehouse: target().join("debug/gatehouse"),
        demo_server: gatehouse_tests::demo_server(),
        guests: gatehouse_tests::guests_dir(),
        duration: Duration::from_secs(3),
        workers: 4,
        max_calls: Some(2_000),
        transport: Transport::Http {
            calls_per_session: Some(12),
        },
    };
    let report = run(&options).await.expect("the harness runs");
    assert_eq!(report.problems(), Vec::<String>::new(), "{report:#?}");
    assert_eq!(report.scenarios.len(), 6, "{report:#?}");
    assert!(
        report.sessions > options.workers as u64,
        "sessions were closed and opened again: {report:#?}"
    );
    assert!(!report.rss.is_empty(), "the gateway's memory was sampled");
}
