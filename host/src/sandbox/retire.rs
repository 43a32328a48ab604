//! Finished stores are dropped on a background thread, off the review's
//! critical path.
//!
//! Dropping a [`Store`] returns its instance's slots to the pooling
//! allocator, which resets the memory and tables the guest wrote: about a
//! third of a fresh-instance review. A review hands its store to
//! [`Retirer::retire`] once the outcome and logs are out, and returns. The
//! queue is bounded: when the thread falls behind, the store is dropped
//! in place, as it would have been without the thread, so at most
//! [`QUEUE`] + 1 finished instances wait for their reset. The pool is sized
//! for those on top of the concurrent reviews (see `Sandbox::build`).
//!
//! Isolation is unchanged: a slot is reused only after its reset, which
//! happens in the drop, wherever it runs.

use std::sync::mpsc::{SyncSender, TrySendError, sync_channel};
use std::thread::JoinHandle;

use wasmtime::Store;

use super::state::ReviewState;

/// How many finished stores may wait for the thread.
pub(crate) const QUEUE: u32 = 16;

/// Instances the pool needs beyond the concurrent reviews: the queue and
/// the one the thread is dropping.
pub(crate) const POOL_HEADROOM: u32 = QUEUE + 1;

/// The background thread that drops finished stores; stopped and joined
/// (after dropping what is queued) when dropped.
pub(crate) struct Retirer {
    queue: Option<SyncSender<Store<ReviewState>>>,
    thread: Option<JoinHandle<()>>,
}

impl Retirer {
    /// Starts the thread.
    pub(crate) fn start() -> std::io::Result<Retirer> {
        let (queue, finished) = sync_channel::<Store<ReviewState>>(QUEUE as usize);
        let thread = std::thread::Builder::new()
            .name("gatehouse-store-retirer".into())
            .spawn(move || {
                for store in finished {
                    drop(store);
                }
            })?;
        Ok(Retirer {
            queue: Some(queue),
            thread: Some(thread),
        })
    }

    /// Drops `store` on the thread, or here when the queue is full.
    pub(crate) fn retire(&self, store: Store<ReviewState>) {
        let Some(queue) = &self.queue else {
            return;
        };
        match queue.try_send(store) {
            Ok(()) => {}
            Err(TrySendError::Full(store) | TrySendError::Disconnected(store)) => drop(store),
        }
    }
}

impl Drop for Retirer {
    fn drop(&mut self) {
        drop(self.queue.take());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}
