//! Which upstream call a request to a server goes out for. The owner of the
//! runtime (the gateway) runs a forwarded call [`on_behalf`] of its
//! [`CallKey`]; a connection reads the key back ([`current_call`]) and
//! carries it with the request, so that what the server asks while
//! handling it (a 2026-07-28 input request inside the result, an
//! elicitation on the request's own HTTP response stream) is known to
//! belong to that call. The key is the runtime's observation of its own
//! tasks, never something a server can name.

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};

/// Names one upstream call while it is in flight. Never reused within a
/// process ([`CallKey::next`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CallKey(u64);

impl CallKey {
    /// A key no other call of this process has had.
    pub fn next() -> CallKey {
        static NEXT: AtomicU64 = AtomicU64::new(1);
        CallKey(NEXT.fetch_add(1, Ordering::Relaxed))
    }

    /// The number, for a transport that carries the key within the process.
    pub(crate) fn get(self) -> u64 {
        self.0
    }

    /// The key a transport carried ([`CallKey::get`]).
    pub(crate) fn from_raw(key: u64) -> CallKey {
        CallKey(key)
    }
}

tokio::task_local! {
    static CURRENT_CALL: CallKey;
}

/// Runs `work` on behalf of the call `key`: whatever the servers ask while
/// `work` itself waits (a 2026-07-28 input request, which rmcp hands to the
/// connection's handler inside the call) is known to be sent under that
/// call ([`current_call`]). Work `work` spawns is not.
pub async fn on_behalf<F: Future>(key: CallKey, work: F) -> F::Output {
    CURRENT_CALL.scope(key, work).await
}

/// The call the current task works [`on_behalf`] of, if any.
pub fn current_call() -> Option<CallKey> {
    CURRENT_CALL.try_with(|key| *key).ok()
}

/// Entries of a request's `_meta`, carried to the servers a call's work
/// sends requests to ([`carrying`]).
pub type CarriedMeta = serde_json::Map<String, serde_json::Value>;

tokio::task_local! {
    static CARRIED: std::sync::Arc<CarriedMeta>;
}

/// Runs `work` so that every `tools/call`, `resources/read` and
/// `prompts/get` it sends to a server (itself, not from tasks it spawns)
/// carries `meta`'s entries in its `_meta`: the owner's trace context
/// (W3C `traceparent`, `tracestate`) of the call it is sent for. An entry
/// the connection sets itself is never replaced.
///
/// ```
/// # tokio::runtime::Runtime::new().unwrap().block_on(async {
/// use gatehouse_mcp::on_behalf::{carried, carrying};
/// let mut meta = serde_json::Map::new();
/// meta.insert("traceparent".into(), "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01".into());
/// let seen = carrying(meta, async { carried().map(|meta| meta.len()) }).await;
/// assert_eq!(seen, Some(1));
/// assert!(carried().is_none());
/// # });
/// ```
pub async fn carrying<F: Future>(meta: CarriedMeta, work: F) -> F::Output {
    if meta.is_empty() {
        return work.await;
    }
    CARRIED.scope(std::sync::Arc::new(meta), work).await
}

/// What the current task's requests carry ([`carrying`]), if anything.
pub fn carried() -> Option<std::sync::Arc<CarriedMeta>> {
    CARRIED.try_with(std::sync::Arc::clone).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_key_is_current_only_inside_the_work_done_on_its_behalf() {
        let (first, second) = (CallKey::next(), CallKey::next());
        assert_ne!(first, second, "keys are never reused");
        assert_eq!(current_call(), None);
        let seen = on_behalf(first, async {
            let inner = on_behalf(second, async { current_call() }).await;
            (current_call(), inner)
        })
        .await;
        assert_eq!(seen, (Some(first), Some(second)));
        let spawned = on_behalf(first, async {
            tokio::spawn(async { current_call() }).await
        })
        .await
        .expect("joins");
        assert_eq!(
            spawned, None,
            "work spawned from the call is not on its behalf"
        );
        assert_eq!(CallKey::from_raw(first.get()), first);
    }
}
