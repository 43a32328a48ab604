//! The upstream requests in flight on each server, and which of them an
//! elicitation belongs to.
//!
//! MCP lets a server ask for input only while it handles a request: a tool
//! call, a resource read, a prompt get. The gateway records each request it
//! forwards ([`Calls::begin`]) for as long as it is in flight; when a server
//! asks, [`Calls::bind`] says whose request that can be. An elicitation is
//! put in front of a person only when every request in flight on that
//! server comes from one upstream session, that session's; anything else
//! (no request in flight, or requests from several sessions) is never shown
//! to a guess. The same binding names "the related call" a reviewer sees.
//!
//! ```
//! use gatehouse_mcp::calls::{Binding, CallKind, Calls, SessionId, UpstreamCall};
//!
//! let calls = std::sync::Arc::new(Calls::default());
//! let alice = SessionId::next();
//! let call = calls.begin(UpstreamCall::new(alice, CallKind::ToolCall, "git", "git__push", "push"));
//! assert!(matches!(calls.bind("git"), Binding::Call(ref bound) if bound.session == alice));
//! drop(call);
//! assert!(matches!(calls.bind("git"), Binding::Unbound));
//! ```

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use serde_json::Value;

/// One upstream MCP session: the stdio client, or one HTTP session.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SessionId(u64);

impl SessionId {
    /// A session id no other session of this process has.
    pub fn next() -> SessionId {
        static NEXT: AtomicU64 = AtomicU64::new(1);
        SessionId(NEXT.fetch_add(1, Ordering::Relaxed))
    }

    /// The number, for logs and the audit line.
    pub fn get(self) -> u64 {
        self.0
    }
}

impl std::fmt::Display for SessionId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// What kind of upstream request a call is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CallKind {
    /// `tools/call`.
    ToolCall,
    /// `resources/read`.
    ResourceRead,
    /// `prompts/get`.
    PromptGet,
}

/// One upstream request forwarded to a server.
#[derive(Debug, Clone, PartialEq)]
pub struct UpstreamCall {
    /// The session that made it.
    pub session: SessionId,
    /// Its kind.
    pub kind: CallKind,
    /// The configured name of the server it went to.
    pub server: String,
    /// The name the upstream client used (a qualified tool name, a prompt
    /// name, a resource URI).
    pub name: String,
    /// The name the server knows (its own tool name, prompt name or URI).
    pub server_name: String,
    /// The arguments as forwarded, if any.
    pub arguments: Option<Value>,
    /// The upstream request's JSON-RPC id, as JSON text.
    pub request_id: Option<String>,
    /// The agent turn the request belongs to, when its `_meta` said
    /// ([`turn_id`]).
    pub turn_id: Option<String>,
}

/// The `_meta` key of an upstream request that names the agent turn it
/// belongs to (a string). gatehouse reads this one key; it reaches a
/// reviewer as the review context's `turn-id` and the audit line's `turn`.
pub const TURN_ID_META_KEY: &str = "turnId";

/// The longest turn id kept, in bytes; a longer one is ignored.
pub const MAX_TURN_ID_BYTES: usize = 256;

/// The turn id an upstream request's `_meta` carries: a string of at most
/// [`MAX_TURN_ID_BYTES`] under [`TURN_ID_META_KEY`]; anything else is none.
///
/// ```
/// use gatehouse_mcp::calls::turn_id;
/// let meta = serde_json::json!({"turnId": "turn-7"});
/// assert_eq!(turn_id(meta.as_object().unwrap()).as_deref(), Some("turn-7"));
/// assert_eq!(turn_id(serde_json::json!({"turnId": 7}).as_object().unwrap()), None);
/// ```
pub fn turn_id(meta: &serde_json::Map<String, Value>) -> Option<String> {
    meta.get(TURN_ID_META_KEY)
        .and_then(Value::as_str)
        .filter(|id| !id.is_empty() && id.len() <= MAX_TURN_ID_BYTES)
        .map(str::to_owned)
}

impl UpstreamCall {
    /// A call with no arguments and no request id.
    pub fn new(
        session: SessionId,
        kind: CallKind,
        server: impl Into<String>,
        name: impl Into<String>,
        server_name: impl Into<String>,
    ) -> Self {
        UpstreamCall {
            session,
            kind,
            server: server.into(),
            name: name.into(),
            server_name: server_name.into(),
            arguments: None,
            request_id: None,
            turn_id: None,
        }
    }

    /// The same call with its forwarded arguments.
    pub fn with_arguments(mut self, arguments: Option<Value>) -> Self {
        self.arguments = arguments;
        self
    }

    /// The same call with the turn its `_meta` names ([`turn_id`]).
    pub fn with_turn_id(mut self, turn_id: Option<String>) -> Self {
        self.turn_id = turn_id;
        self
    }

    /// The call as a reviewer sees it (contract 0.2's related call).
    pub fn related_call(&self) -> gatehouse_core::context::RelatedCall {
        use gatehouse_core::context::{CallKind as Kind, RelatedCall};
        let kind = match self.kind {
            CallKind::ToolCall => Kind::ToolCall,
            CallKind::ResourceRead => Kind::ResourceRead,
            CallKind::PromptGet => Kind::PromptGet,
        };
        RelatedCall {
            session_id: self.session.to_string(),
            kind,
            qualified_name: self.name.clone(),
            name: self.server_name.clone(),
            arguments: self.arguments.clone(),
            id: self.request_id.clone(),
        }
    }

    /// The same call with the upstream request's id.
    pub fn with_request_id(mut self, id: impl Into<String>) -> Self {
        self.request_id = Some(id.into());
        self
    }
}

/// Whose request an elicitation from a server can belong to.
#[derive(Debug, Clone, PartialEq)]
pub enum Binding {
    /// Exactly one request is in flight on the server: this one.
    Call(Arc<UpstreamCall>),
    /// Several requests are in flight on the server, all from this session.
    Session(SessionId),
    /// No upstream request is in flight on the server.
    Unbound,
    /// Requests from this many sessions are in flight on the server.
    Ambiguous {
        /// How many sessions.
        sessions: usize,
    },
}

impl Binding {
    /// The session the elicitation belongs to, if exactly one.
    pub fn session(&self) -> Option<SessionId> {
        match self {
            Binding::Call(call) => Some(call.session),
            Binding::Session(session) => Some(*session),
            Binding::Unbound | Binding::Ambiguous { .. } => None,
        }
    }

    /// Why it cannot be put in front of a person, when it cannot.
    pub fn why_unbound(&self) -> Option<String> {
        match self {
            Binding::Call(_) | Binding::Session(_) => None,
            Binding::Unbound => {
                Some("asked outside any upstream request, so no session to ask".to_owned())
            }
            Binding::Ambiguous { sessions } => Some(format!(
                "requests from {sessions} upstream sessions are in flight on this server, so it \
                 cannot be tied to one"
            )),
        }
    }
}

/// Each server's requests in flight, keyed by the order they began.
type InFlight = HashMap<String, Vec<(u64, Arc<UpstreamCall>)>>;

/// The upstream requests in flight, by server. Cheap to share behind an
/// `Arc`: the gateway writes it, the router reads it.
#[derive(Debug, Default)]
pub struct Calls {
    in_flight: Mutex<InFlight>,
    next: AtomicU64,
}

impl Calls {
    /// Records `call` as in flight until the returned guard is dropped.
    pub fn begin(self: &Arc<Self>, call: UpstreamCall) -> CallGuard {
        let key = self.next.fetch_add(1, Ordering::Relaxed);
        let server = call.server.clone();
        let call = Arc::new(call);
        self.lock()
            .entry(server.clone())
            .or_default()
            .push((key, call));
        CallGuard {
            calls: self.clone(),
            server,
            key,
        }
    }

    /// Like [`Calls::begin`], unless `call`'s session already has `limit`
    /// requests in flight: then `Err(limit)` and nothing is recorded. The
    /// count and the insert happen under one lock, so concurrent requests
    /// cannot overrun the limit.
    pub fn begin_limited(
        self: &Arc<Self>,
        call: UpstreamCall,
        limit: usize,
    ) -> Result<CallGuard, usize> {
        let key = self.next.fetch_add(1, Ordering::Relaxed);
        let server = call.server.clone();
        let session = call.session;
        let mut in_flight = self.lock();
        if count_for(&in_flight, session) >= limit {
            return Err(limit);
        }
        in_flight
            .entry(server.clone())
            .or_default()
            .push((key, Arc::new(call)));
        drop(in_flight);
        Ok(CallGuard {
            calls: self.clone(),
            server,
            key,
        })
    }

    /// Whose request an elicitation `server` sends now can belong to.
    pub fn bind(&self, server: &str) -> Binding {
        let in_flight = self.lock();
        let Some(calls) = in_flight.get(server).filter(|calls| !calls.is_empty()) else {
            return Binding::Unbound;
        };
        if let [(_, call)] = calls.as_slice() {
            return Binding::Call(call.clone());
        }
        let first = calls[0].1.session;
        if calls.iter().all(|(_, call)| call.session == first) {
            return Binding::Session(first);
        }
        let mut sessions: Vec<SessionId> = calls.iter().map(|(_, call)| call.session).collect();
        sessions.sort_unstable();
        sessions.dedup();
        Binding::Ambiguous {
            sessions: sessions.len(),
        }
    }

    /// How many requests `session` has in flight, on all servers.
    pub fn in_flight_for(&self, session: SessionId) -> usize {
        count_for(&self.lock(), session)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, InFlight> {
        // Each statement leaves the map consistent; a panic elsewhere does
        // not make it wrong.
        self.in_flight
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

/// How many of `in_flight` belong to `session`.
fn count_for(in_flight: &InFlight, session: SessionId) -> usize {
    in_flight
        .values()
        .flatten()
        .filter(|(_, call)| call.session == session)
        .count()
}

/// Keeps a call in flight; dropping it (the request finished, failed or was
/// cancelled) removes it.
#[derive(Debug)]
pub struct CallGuard {
    calls: Arc<Calls>,
    server: String,
    key: u64,
}

impl Drop for CallGuard {
    fn drop(&mut self) {
        let mut in_flight = self.calls.lock();
        if let Some(calls) = in_flight.get_mut(&self.server) {
            calls.retain(|(key, _)| *key != self.key);
            if calls.is_empty() {
                in_flight.remove(&self.server);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(session: SessionId, server: &str) -> UpstreamCall {
        UpstreamCall::new(session, CallKind::ToolCall, server, "q", "t")
    }

    #[test]
    fn one_call_binds_the_call_and_its_session() {
        let calls = Arc::new(Calls::default());
        let alice = SessionId::next();
        let _guard =
            calls.begin(call(alice, "git").with_arguments(Some(serde_json::json!({"a": 1}))));
        let binding = calls.bind("git");
        assert_eq!(binding.session(), Some(alice));
        assert!(
            matches!(&binding, Binding::Call(bound) if bound.arguments == Some(serde_json::json!({"a": 1})))
        );
        assert!(binding.why_unbound().is_none());
        // Another server's calls do not bind it.
        assert_eq!(calls.bind("docs"), Binding::Unbound);
    }

    #[test]
    fn several_calls_of_one_session_bind_the_session() {
        let calls = Arc::new(Calls::default());
        let alice = SessionId::next();
        let _first = calls.begin(call(alice, "git"));
        let _second = calls.begin(call(alice, "git"));
        assert_eq!(calls.bind("git"), Binding::Session(alice));
        assert_eq!(calls.in_flight_for(alice), 2);
    }

    #[test]
    fn calls_from_two_sessions_bind_nobody() {
        let calls = Arc::new(Calls::default());
        let (alice, bob) = (SessionId::next(), SessionId::next());
        let _first = calls.begin(call(alice, "git"));
        let second = calls.begin(call(bob, "git"));
        let binding = calls.bind("git");
        assert_eq!(binding, Binding::Ambiguous { sessions: 2 });
        assert_eq!(binding.session(), None);
        assert!(
            binding
                .why_unbound()
                .is_some_and(|why| why.contains("2 upstream sessions"))
        );
        drop(second);
        assert_eq!(calls.bind("git").session(), Some(alice));
    }

    #[test]
    fn a_session_at_its_limit_is_refused_and_nothing_recorded() {
        let calls = Arc::new(Calls::default());
        let (alice, bob) = (SessionId::next(), SessionId::next());
        let first = calls
            .begin_limited(call(alice, "git"), 1)
            .expect("under the limit");
        assert_eq!(calls.begin_limited(call(alice, "docs"), 1).err(), Some(1));
        assert_eq!(calls.in_flight_for(alice), 1);
        // Another session has its own count.
        let _bob = calls
            .begin_limited(call(bob, "git"), 1)
            .expect("bob's first");
        drop(first);
        assert!(calls.begin_limited(call(alice, "docs"), 1).is_ok());
    }

    #[test]
    fn a_finished_call_binds_nothing() {
        let calls = Arc::new(Calls::default());
        let alice = SessionId::next();
        drop(calls.begin(call(alice, "git")));
        assert_eq!(calls.bind("git"), Binding::Unbound);
        assert_eq!(calls.in_flight_for(alice), 0);
        assert!(calls.lock().is_empty());
    }
}
