//! Elicitations waiting for the person, by (server, request id). A new one
//! with the same key never silently replaces the earlier: the earlier is
//! answered `cancel` first.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use tokio_util::sync::CancellationToken;

/// The registry.
#[derive(Debug, Default)]
pub struct Pending {
    waiting: Mutex<HashMap<(String, String), (u64, CancellationToken)>>,
    next: AtomicU64,
    /// Set by a cancel of all (shutdown), so a waiter can say which cancel
    /// ended it.
    shutting_down: AtomicBool,
}

/// Removes its entry when dropped (answered, cancelled or timed out).
#[derive(Debug)]
pub struct PendingEntry<'a> {
    registry: &'a Pending,
    key: (String, String),
    serial: u64,
    /// Cancelled when a later elicitation with the same key replaces this one.
    pub replaced: CancellationToken,
}

impl Drop for PendingEntry<'_> {
    fn drop(&mut self) {
        if let Ok(mut waiting) = self.registry.waiting.lock()
            && waiting
                .get(&self.key)
                .is_some_and(|(serial, _)| *serial == self.serial)
        {
            waiting.remove(&self.key);
        }
    }
}

impl Pending {
    /// Registers `(server, id)`; an earlier entry with the same key is
    /// cancelled (its waiter answers `cancel`).
    pub fn register(&self, server: &str, id: &str) -> PendingEntry<'_> {
        let key = (server.to_owned(), id.to_owned());
        let token = CancellationToken::new();
        let serial = self.next.fetch_add(1, Ordering::SeqCst);
        if let Ok(mut waiting) = self.waiting.lock()
            && let Some((_, earlier)) = waiting.insert(key.clone(), (serial, token.clone()))
        {
            tracing::warn!(
                server,
                id,
                "a second elicitation with the same id; the first is cancelled"
            );
            earlier.cancel();
        }
        PendingEntry {
            registry: self,
            key,
            serial,
            replaced: token,
        }
    }

    /// Registers `(server, id)` like [`Pending::register`], and says whether
    /// an earlier entry with the same key was still live (and is now
    /// cancelled).
    pub fn register_checked(&self, server: &str, id: &str) -> (PendingEntry<'_>, bool) {
        let key = (server.to_owned(), id.to_owned());
        let token = CancellationToken::new();
        let serial = self.next.fetch_add(1, Ordering::SeqCst);
        let mut replaced = false;
        if let Ok(mut waiting) = self.waiting.lock()
            && let Some((_, earlier)) = waiting.insert(key.clone(), (serial, token.clone()))
        {
            earlier.cancel();
            replaced = true;
        }
        (
            PendingEntry {
                registry: self,
                key,
                serial,
                replaced: token,
            },
            replaced,
        )
    }

    /// Registers an entry under `(server, id)` made unique with a serial,
    /// for ids that may legitimately repeat (2026-07-28 input-request keys).
    pub fn register_unique(&self, server: &str, id: &str) -> PendingEntry<'_> {
        let serial = self.next.fetch_add(1, Ordering::SeqCst);
        self.register(server, &format!("{id}#{serial}"))
    }

    /// Why a waiter whose entry was cancelled was cancelled (entries made
    /// by [`Pending::register_unique`] are never replaced, so it is one of
    /// the two [`Pending::cancel_all`]s), for its audit line.
    pub fn cancelled_because(&self) -> &'static str {
        if self.shutting_down.load(Ordering::SeqCst) {
            "cancelled: gatehouse is shutting down"
        } else {
            "cancelled: the server disconnected"
        }
    }

    /// How many are waiting.
    pub fn len(&self) -> usize {
        self.waiting
            .lock()
            .map(|waiting| waiting.len())
            .unwrap_or(0)
    }

    /// Whether none is waiting.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Cancels every waiting elicitation of `server` (it disconnected), or
    /// all when `server` is `None` (shutdown).
    pub fn cancel_all(&self, server: Option<&str>) {
        if server.is_none() {
            self.shutting_down.store(true, Ordering::SeqCst);
        }
        if let Ok(waiting) = self.waiting.lock() {
            for ((owner, _), (_, token)) in waiting.iter() {
                if server.is_none_or(|server| server == owner) {
                    token.cancel();
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_duplicate_cancels_the_earlier_and_only_the_latest_owns_the_slot() {
        let pending = Pending::default();
        let first = pending.register("s", "1");
        let second = pending.register("s", "1");
        assert!(first.replaced.is_cancelled());
        assert!(!second.replaced.is_cancelled());
        drop(first);
        assert_eq!(
            pending.len(),
            1,
            "the earlier entry must not remove the later one"
        );
        drop(second);
        assert!(pending.is_empty());
    }

    #[test]
    fn register_checked_says_when_it_replaced_a_live_entry() {
        let pending = Pending::default();
        let (first, replaced) = pending.register_checked("s", "1");
        assert!(!replaced);
        let (second, replaced) = pending.register_checked("s", "1");
        assert!(replaced && first.replaced.is_cancelled());
        drop((first, second));
        let (_third, replaced) = pending.register_checked("s", "1");
        assert!(!replaced, "entries that ended are not duplicates");
    }

    #[test]
    fn unique_entries_never_replace_each_other() {
        let pending = Pending::default();
        let first = pending.register_unique("s", "approval");
        let second = pending.register_unique("s", "approval");
        assert!(!first.replaced.is_cancelled());
        assert!(!second.replaced.is_cancelled());
        assert_eq!(pending.len(), 2);
    }

    #[test]
    fn cancel_all_is_per_server() {
        let pending = Pending::default();
        let a = pending.register("a", "1");
        let b = pending.register("b", "1");
        pending.cancel_all(Some("a"));
        assert!(a.replaced.is_cancelled());
        assert!(!b.replaced.is_cancelled());
        assert_eq!(
            pending.cancelled_because(),
            "cancelled: the server disconnected"
        );
        pending.cancel_all(None);
        assert!(b.replaced.is_cancelled());
        assert_eq!(
            pending.cancelled_because(),
            "cancelled: gatehouse is shutting down"
        );
    }
}
