//! Refresh bookkeeping: a dirty flag and a one-at-a-time gate, so that any
//! number of invalidations cause at most one refresh in progress plus one
//! more, and a refresh abandoned half-way leaves the runtime dirty.
//!
//! ```
//! # tokio_test_block_on(async {
//! use gatehouse_mcp::refresh::RefreshState;
//! let state = RefreshState::new();
//! state.invalidate();
//! let ran = state.refresh_if_dirty(|| async { Ok::<(), ()>(()) }).await;
//! assert_eq!(ran, Ok(true));
//! // Nothing changed since: nothing to do.
//! assert_eq!(state.refresh_if_dirty(|| async { Ok::<(), ()>(()) }).await, Ok(false));
//! # });
//! # fn tokio_test_block_on<F: std::future::Future>(f: F) -> F::Output {
//! #     tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(f)
//! # }
//! ```

use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use tokio::sync::Mutex;

/// The dirty flag, the gate, and a count of published refreshes.
#[derive(Debug, Default)]
pub struct RefreshState {
    dirty: AtomicBool,
    gate: Mutex<()>,
    published: AtomicU64,
}

/// Marks the state dirty again when dropped before the refresh published:
/// the cancel-safety of [`RefreshState::refresh_if_dirty`].
struct Reinvalidate<'a> {
    state: &'a RefreshState,
    published: bool,
}

impl Drop for Reinvalidate<'_> {
    fn drop(&mut self) {
        if !self.published {
            self.state.invalidate();
        }
    }
}

impl RefreshState {
    /// A clean state.
    pub fn new() -> Self {
        RefreshState::default()
    }

    /// Something the runtime depends on changed: the next
    /// [`refresh_if_dirty`](Self::refresh_if_dirty) rebuilds.
    pub fn invalidate(&self) {
        self.dirty.store(true, Ordering::SeqCst);
    }

    /// Whether a refresh is owed.
    pub fn is_dirty(&self) -> bool {
        self.dirty.load(Ordering::SeqCst)
    }

    /// Whether a refresh is under way right now (someone holds the gate).
    pub fn is_running(&self) -> bool {
        self.gate.try_lock().is_err()
    }

    /// How many refreshes have published so far.
    pub fn published(&self) -> u64 {
        self.published.load(Ordering::SeqCst)
    }

    /// Runs `refresh` while the state is dirty, one caller at a time: a
    /// caller that finds a refresh in progress waits for it, then refreshes
    /// again only if something was invalidated meanwhile. Returns whether
    /// this caller ran a refresh. If `refresh` fails, or this future is
    /// dropped before it finishes, the state stays dirty.
    pub async fn refresh_if_dirty<F, Fut, E>(&self, mut refresh: F) -> Result<bool, E>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<(), E>>,
    {
        let _gate = self.gate.lock().await;
        let mut ran = false;
        while self.dirty.swap(false, Ordering::SeqCst) {
            let mut guard = Reinvalidate {
                state: self,
                published: false,
            };
            refresh().await?;
            guard.published = true;
            self.published.fetch_add(1, Ordering::SeqCst);
            ran = true;
        }
        Ok(ran)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::AtomicUsize;
    use std::time::Duration;

    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_thousand_invalidations_cause_at_most_two_refreshes() {
        let state = Arc::new(RefreshState::new());
        let builds = Arc::new(AtomicUsize::new(0));
        let mut tasks = Vec::new();
        for _ in 0..1000 {
            let (state, builds) = (state.clone(), builds.clone());
            tasks.push(tokio::spawn(async move {
                state.invalidate();
                state
                    .refresh_if_dirty(|| {
                        let builds = builds.clone();
                        async move {
                            builds.fetch_add(1, Ordering::SeqCst);
                            tokio::time::sleep(Duration::from_millis(50)).await;
                            Ok::<(), ()>(())
                        }
                    })
                    .await
            }));
        }
        for task in tasks {
            task.await.expect("task").expect("refresh");
        }
        let builds = builds.load(Ordering::SeqCst);
        assert!((1..=2).contains(&builds), "{builds} refreshes");
        assert!(!state.is_dirty());
    }

    #[tokio::test]
    async fn a_refresh_dropped_half_way_leaves_the_state_dirty() {
        let state = RefreshState::new();
        state.invalidate();
        let pending = state.refresh_if_dirty(|| async {
            tokio::time::sleep(Duration::from_secs(3600)).await;
            Ok::<(), ()>(())
        });
        // Abandon it while it is building.
        let abandoned = tokio::time::timeout(Duration::from_millis(20), pending).await;
        assert!(abandoned.is_err());
        assert!(state.is_dirty());
        assert_eq!(state.published(), 0);
        // The next call refreshes.
        assert_eq!(
            state.refresh_if_dirty(|| async { Ok::<(), ()>(()) }).await,
            Ok(true)
        );
        assert_eq!(state.published(), 1);
    }

    #[tokio::test]
    async fn a_failed_refresh_stays_dirty() {
        let state = RefreshState::new();
        state.invalidate();
        assert_eq!(
            state
                .refresh_if_dirty(|| async { Err::<(), _>("boom") })
                .await,
            Err("boom")
        );
        assert!(state.is_dirty());
    }

    #[tokio::test]
    async fn invalidations_during_a_refresh_cause_exactly_one_more() {
        let state = Arc::new(RefreshState::new());
        state.invalidate();
        let builds = AtomicUsize::new(0);
        let ran = state
            .refresh_if_dirty(|| {
                let first = builds.fetch_add(1, Ordering::SeqCst) == 0;
                let state = state.clone();
                async move {
                    if first {
                        // Three changes land while the first refresh builds.
                        state.invalidate();
                        state.invalidate();
                        state.invalidate();
                    }
                    Ok::<(), ()>(())
                }
            })
            .await;
        assert_eq!(ran, Ok(true));
        assert_eq!(builds.load(Ordering::SeqCst), 2);
    }
}
