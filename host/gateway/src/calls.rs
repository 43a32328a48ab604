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
//! to a guess.
//!
//! "The related call" a reviewer sees is decided apart from the session
//! ([`Calls::bind_claim`], [`Related`]): the request the transport says the
//! elicitation was sent under, when it says ([`CallKey`]: a 2026-07-28 input
//! request arrives inside the very call the gateway forwarded, which runs
//! [`on_behalf`] of its key); else the one request in flight on the
//! server; or, with several in flight, the one a tool-call approval
//! describes (its `_meta.tool_name` and `tool_params`, [`Claim`]), compared
//! exactly. An approval that describes none of the calls in flight is
//! [`Related::Unmatched`], which the router declines unreviewed, so a server
//! cannot turn the reviewer's comparison off by keeping a second call busy.
//!
//! ```
//! use gatehouse_gateway::calls::{Binding, CallKind, Calls, SessionId, UpstreamCall};
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

use gatehouse_json_match::same_json;
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
    /// Cancelled when the call ends ([`UpstreamCall::ended`]).
    ended: Ended,
    /// The upstream request's span ([`crate::trace::upstream_request`]).
    span: CallSpan,
}

/// An upstream call's span, parent of its elicitations' spans, held until
/// the call leaves the registry (whoever still holds the call after that,
/// such as the bounds on model spend, does not keep the span open). Not
/// part of what a call is: every two compare equal.
#[derive(Debug, Clone, Default)]
struct CallSpan(Arc<std::sync::Mutex<Option<tracing::Span>>>);

impl CallSpan {
    fn get(&self) -> tracing::Span {
        self.0
            .lock()
            .ok()
            .and_then(|span| span.clone())
            .unwrap_or_else(tracing::Span::none)
    }

    fn end(&self) {
        let ended = self.0.lock().ok().and_then(|mut span| span.take());
        drop(ended);
    }
}

impl PartialEq for CallSpan {
    fn eq(&self, _: &CallSpan) -> bool {
        true
    }
}

/// Cancelled when its call leaves the registry (the [`CallGuard`] is
/// dropped), with why the gateway gave it up, if it did. Not part of what a
/// call is: every two compare equal.
#[derive(Debug, Clone, Default)]
struct Ended(
    tokio_util::sync::CancellationToken,
    Arc<std::sync::OnceLock<&'static str>>,
);

impl PartialEq for Ended {
    fn eq(&self, _: &Ended) -> bool {
        true
    }
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
/// use gatehouse_gateway::calls::turn_id;
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
            ended: Ended::default(),
            span: CallSpan::default(),
        }
    }

    /// The same call under the upstream request's span
    /// ([`crate::trace::upstream_request`]).
    pub fn with_span(mut self, span: tracing::Span) -> Self {
        self.span = CallSpan(Arc::new(std::sync::Mutex::new(Some(span))));
        self
    }

    /// The upstream request's span while the call is in flight; disabled
    /// after, and unless traces are on.
    pub fn span(&self) -> tracing::Span {
        self.span.get()
    }

    /// Resolves when the call has ended (answered, failed or given up) and
    /// left the registry: a question of its server still waiting for it
    /// then waits for nothing.
    pub fn ended(&self) -> tokio_util::sync::WaitForCancellationFuture<'_> {
        self.ended.0.cancelled()
    }

    /// Why the gateway gave the call up (its client went away or cancelled
    /// it, gatehouse stopped), if it did ([`GiveUp::record`]).
    pub fn given_up(&self) -> Option<&'static str> {
        self.ended.1.get().copied()
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

/// A call's key and the task-local that says which call a request to a
/// server goes out for: the runtime's ([`gatehouse_mcp::on_behalf`]), named
/// here too because [`Calls::begin`] hands the keys out.
pub use gatehouse_mcp::on_behalf::{CallKey, current_call, on_behalf};

/// Whose request an elicitation from a server can belong to.
#[derive(Debug, Clone, PartialEq)]
pub enum Binding {
    /// The request it belongs to: the only one in flight on the server, or
    /// the one it was sent under.
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

/// What a tool-call approval says about the agent's call it asks about:
/// the raw `_meta.tool_name` and `_meta.tool_params` of an elicitation whose
/// `_meta.codex_approval_kind` is `"mcp_tool_call"` (the keys a reviewer
/// compares with the related call). `None` in a field: the approval does not
/// say.
///
/// ```
/// use gatehouse_gateway::calls::Claim;
/// let params = serde_json::json!({"message": "Allow?", "_meta": {
///     "codex_approval_kind": "mcp_tool_call", "tool_name": "push", "tool_params": {"force": true}}});
/// let claim = Claim::from_params(&params).expect("a tool-call approval");
/// assert_eq!(claim.tool_name, Some(serde_json::json!("push")));
/// // Anything else claims no call.
/// assert!(Claim::from_params(&serde_json::json!({"message": "Name?"})).is_none());
/// ```
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Claim {
    /// `_meta.tool_name` as the server wrote it (a non-string matches no
    /// call).
    pub tool_name: Option<Value>,
    /// `_meta.tool_params` as the server wrote it (`null` counts as `{}`).
    pub tool_params: Option<Value>,
}

/// The `_meta` key that marks an approval request's kind.
pub const APPROVAL_KIND_KEY: &str = "codex_approval_kind";
/// The approval kind that claims an agent's tool call.
pub const APPROVAL_KIND_TOOL_CALL: &str = "mcp_tool_call";

impl Claim {
    /// The claim of elicitation `params` (the wire params, `_meta`
    /// included), if they are a tool-call approval.
    pub fn from_params(params: &Value) -> Option<Claim> {
        let meta = params.get("_meta")?.as_object()?;
        if meta.get(APPROVAL_KIND_KEY).and_then(Value::as_str) != Some(APPROVAL_KIND_TOOL_CALL) {
            return None;
        }
        Some(Claim {
            tool_name: meta.get("tool_name").cloned(),
            tool_params: meta.get("tool_params").cloned(),
        })
    }

    /// Whether the claim describes `call`: a tool call whose server-side
    /// name is exactly the claimed `tool_name` and whose arguments equal the
    /// claimed `tool_params` ([`same_json`]; absent or `null` arguments count
    /// as `{}`). What the claim leaves out is not compared.
    pub fn describes(&self, call: &UpstreamCall) -> bool {
        if call.kind != CallKind::ToolCall {
            return false;
        }
        if let Some(name) = &self.tool_name
            && name.as_str() != Some(call.server_name.as_str())
        {
            return false;
        }
        let Some(claimed) = &self.tool_params else {
            return true;
        };
        let empty = Value::Object(serde_json::Map::new());
        let or_empty = |value: Option<&Value>| match value {
            None | Some(Value::Null) => empty.clone(),
            Some(value) => value.clone(),
        };
        same_json(&or_empty(Some(claimed)), &or_empty(call.arguments.as_ref()))
    }
}

/// The related call of an elicitation: the agent's request a reviewer is
/// shown (contract 0.2's `call.related`).
#[derive(Debug, Clone, PartialEq)]
pub enum Related {
    /// This call: the only one in flight on the server, or the one (the
    /// first, when several are alike) a tool-call approval describes.
    Call(Arc<UpstreamCall>),
    /// No call can be named: none in flight, or several and no claim to
    /// pick one by (an elicitation that is no tool-call approval).
    Unknown,
    /// A tool-call approval that describes none of the `in_flight` calls in
    /// flight on the server (none, or two or more): declined unreviewed.
    Unmatched {
        /// How many calls were in flight on the server.
        in_flight: usize,
    },
}

impl Related {
    /// The call, if one is named.
    pub fn call(&self) -> Option<&Arc<UpstreamCall>> {
        match self {
            Related::Call(call) => Some(call),
            Related::Unknown | Related::Unmatched { .. } => None,
        }
    }
}

/// Each server's requests in flight, keyed by the order they began.
type InFlight = HashMap<String, Vec<(CallKey, Arc<UpstreamCall>)>>;

/// The upstream requests in flight, by server. Cheap to share behind an
/// `Arc`: the gateway writes it, the router reads it.
#[derive(Debug, Default)]
pub struct Calls {
    in_flight: Mutex<InFlight>,
    /// Told whenever the last call in flight ends.
    idle: tokio::sync::Notify,
}

impl Calls {
    /// Records `call` as in flight until the returned guard is dropped.
    pub fn begin(self: &Arc<Self>, call: UpstreamCall) -> CallGuard {
        let key = CallKey::next();
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
        let key = CallKey::next();
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
        binding(self.lock().get(server).map_or(&[], Vec::as_slice))
    }

    /// [`Calls::bind`], and the related call (under the same lock): the
    /// call `sent_under` names, if it is in flight on `server` (then it is
    /// the binding too); else the one call in flight; with several, the first
    /// that `claim` describes ([`Claim::describes`]), or
    /// [`Related::Unmatched`] when it describes none; with none in flight, a
    /// claim is [`Related::Unmatched`] too (it describes no call the agent
    /// made); without a claim, [`Related::Unknown`].
    pub fn bind_claim(
        &self,
        server: &str,
        claim: Option<&Claim>,
        sent_under: Option<CallKey>,
    ) -> (Binding, Related) {
        let in_flight = self.lock();
        let calls = in_flight.get(server).map_or(&[][..], Vec::as_slice);
        if let Some(key) = sent_under
            && let Some((_, call)) = calls.iter().find(|(known, _)| *known == key)
        {
            return (Binding::Call(call.clone()), Related::Call(call.clone()));
        }
        let related = match (calls, claim) {
            // A tool-call approval while the agent has no call on this
            // server describes no call it made.
            ([], Some(_)) => Related::Unmatched { in_flight: 0 },
            ([], None) => Related::Unknown,
            ([(_, call)], _) => Related::Call(call.clone()),
            (_, None) => Related::Unknown,
            (_, Some(claim)) => calls.iter().find(|(_, call)| claim.describes(call)).map_or(
                Related::Unmatched {
                    in_flight: calls.len(),
                },
                |(_, call)| Related::Call(call.clone()),
            ),
        };
        (binding(calls), related)
    }

    /// The request of `session` in flight on `server` that an elicitation
    /// `server` sends for `session`'s person rides with upstream (over HTTP,
    /// the stream it goes out on): the call `sent_under` names, if it is
    /// `session`'s and in flight on `server`; else the first of `session`'s
    /// calls there that `claim` describes ([`Claim::describes`]); else the
    /// first of `session`'s calls there. `None` when `session` has no call
    /// in flight on `server`. The call comes with its key.
    pub fn carrier(
        &self,
        server: &str,
        session: SessionId,
        claim: Option<&Claim>,
        sent_under: Option<CallKey>,
    ) -> Option<(CallKey, Arc<UpstreamCall>)> {
        let in_flight = self.lock();
        let calls = in_flight.get(server)?;
        let mut ours = calls.iter().filter(|(_, call)| call.session == session);
        let found = sent_under
            .and_then(|key| ours.clone().find(|(known, _)| *known == key))
            .or_else(|| {
                claim.and_then(|claim| ours.clone().find(|(_, call)| claim.describes(call)))
            })
            .or_else(|| ours.next());
        found.map(|(key, call)| (*key, call.clone()))
    }

    /// Whether `call` (as [`Calls::bind_claim`] named it) is still in
    /// flight.
    pub fn is_in_flight(&self, call: &Arc<UpstreamCall>) -> bool {
        self.lock()
            .get(&call.server)
            .is_some_and(|calls| calls.iter().any(|(_, known)| Arc::ptr_eq(known, call)))
    }

    /// How many requests `session` has in flight, on all servers.
    pub fn in_flight_for(&self, session: SessionId) -> usize {
        count_for(&self.lock(), session)
    }

    /// Waits until no call is in flight, at most `limit`; returns whether
    /// none is. (`gatehouse serve` waits so, before it stops the servers, for
    /// the calls it gave up to tell their servers.)
    pub async fn idle_within(&self, limit: std::time::Duration) -> bool {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            let idle = self.idle.notified();
            if self.lock().is_empty() {
                return true;
            }
            tokio::select! {
                () = idle => {}
                () = tokio::time::sleep_until(deadline) => return self.lock().is_empty(),
            }
        }
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

/// The binding of an elicitation while `calls` are in flight on its server.
fn binding(calls: &[(CallKey, Arc<UpstreamCall>)]) -> Binding {
    let Some((_, first)) = calls.first() else {
        return Binding::Unbound;
    };
    if calls.len() == 1 {
        return Binding::Call(first.clone());
    }
    if calls.iter().all(|(_, call)| call.session == first.session) {
        return Binding::Session(first.session);
    }
    let mut sessions: Vec<SessionId> = calls.iter().map(|(_, call)| call.session).collect();
    sessions.sort_unstable();
    sessions.dedup();
    Binding::Ambiguous {
        sessions: sessions.len(),
    }
}

/// Keeps a call in flight; dropping it (the request finished, failed or was
/// cancelled) removes it.
#[derive(Debug)]
pub struct CallGuard {
    calls: Arc<Calls>,
    server: String,
    key: CallKey,
}

impl CallGuard {
    /// The call's key, for [`on_behalf`].
    pub fn key(&self) -> CallKey {
        self.key
    }

    /// What records why the call was given up, for the task that gives it
    /// up ([`GiveUp::record`]).
    pub fn give_up(&self) -> GiveUp {
        GiveUp {
            calls: self.calls.clone(),
            server: self.server.clone(),
            key: self.key,
        }
    }
}

/// Records why one call was given up ([`CallGuard::give_up`]).
#[derive(Debug, Clone)]
pub struct GiveUp {
    calls: Arc<Calls>,
    server: String,
    key: CallKey,
}

impl GiveUp {
    /// The call was given up because of `why` (its client went away or
    /// cancelled it, gatehouse stopped): a question of its server that
    /// waited for it says so when the call ends ([`UpstreamCall::given_up`]).
    pub fn record(&self, why: &'static str) {
        if let Some(calls) = self.calls.lock().get(&self.server)
            && let Some((_, call)) = calls.iter().find(|(key, _)| *key == self.key)
        {
            let _ = call.ended.1.set(why);
        }
    }
}

impl Drop for CallGuard {
    fn drop(&mut self) {
        let mut in_flight = self.calls.lock();
        if let Some(calls) = in_flight.get_mut(&self.server) {
            calls.retain(|(key, call)| {
                if *key == self.key {
                    call.ended.0.cancel();
                    call.span.end();
                }
                *key != self.key
            });
            if calls.is_empty() {
                in_flight.remove(&self.server);
            }
        }
        if in_flight.is_empty() {
            drop(in_flight);
            self.calls.idle.notify_waiters();
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

    fn approval(tool_name: Value, tool_params: Value) -> Claim {
        Claim::from_params(&serde_json::json!({"message": "Allow?", "_meta": {
            "codex_approval_kind": "mcp_tool_call", "tool_name": tool_name, "tool_params": tool_params}}))
        .expect("a tool-call approval")
    }

    fn tool_call(session: SessionId, tool: &str, arguments: Value) -> UpstreamCall {
        UpstreamCall::new(
            session,
            CallKind::ToolCall,
            "git",
            format!("git__{tool}"),
            tool,
        )
        .with_arguments(Some(arguments))
    }

    #[test]
    fn with_several_calls_in_flight_the_claim_names_the_related_call() {
        let calls = Arc::new(Calls::default());
        let alice = SessionId::next();
        let _ls = calls.begin(tool_call(alice, "run", serde_json::json!({"x": "ls"})));
        let _rm = calls.begin(tool_call(
            alice,
            "run",
            serde_json::json!({"x": "rm -rf /"}),
        ));
        let claim = approval("run".into(), serde_json::json!({"x": "rm -rf /"}));
        let (binding, related) = calls.bind_claim("git", Some(&claim), None);
        assert_eq!(binding, Binding::Session(alice));
        assert!(
            matches!(&related, Related::Call(call) if call.arguments == Some(serde_json::json!({"x": "rm -rf /"}))),
            "{related:?}"
        );
        // A claim that describes neither call is unmatched, not unknown.
        let lie = approval("run".into(), serde_json::json!({"x": "cat"}));
        assert_eq!(
            calls.bind_claim("git", Some(&lie), None).1,
            Related::Unmatched { in_flight: 2 }
        );
        // Nor does a tool name that is not the call's, or not a string.
        for name in [serde_json::json!("other"), serde_json::json!(["run"])] {
            let claim = approval(name, serde_json::json!({"x": "ls"}));
            assert_eq!(
                calls.bind_claim("git", Some(&claim), None).1,
                Related::Unmatched { in_flight: 2 }
            );
        }
        // Without a claim nothing picks one.
        assert_eq!(calls.bind_claim("git", None, None).1, Related::Unknown);
    }

    #[test]
    fn a_claim_is_compared_across_sessions_and_only_with_tool_calls() {
        let calls = Arc::new(Calls::default());
        let (alice, bob) = (SessionId::next(), SessionId::next());
        let _read = calls.begin(UpstreamCall::new(
            alice,
            CallKind::ResourceRead,
            "git",
            "u",
            "u",
        ));
        let _run = calls.begin(tool_call(bob, "run", serde_json::json!({})));
        // Absent and null arguments are {}; a claim that leaves out a field
        // does not compare it.
        let (binding, related) =
            calls.bind_claim("git", Some(&approval("run".into(), Value::Null)), None);
        assert_eq!(binding, Binding::Ambiguous { sessions: 2 });
        assert!(matches!(related, Related::Call(call) if call.session == bob));
        let claim = Claim {
            tool_name: Some("u".into()),
            tool_params: None,
        };
        assert_eq!(
            calls.bind_claim("git", Some(&claim), None).1,
            Related::Unmatched { in_flight: 2 },
            "a resource read is no tool call"
        );
    }

    #[test]
    fn a_claim_with_no_call_in_flight_is_unmatched() {
        let calls = Arc::new(Calls::default());
        let claim = approval("run".into(), serde_json::json!({"x": "ls"}));
        assert_eq!(
            calls.bind_claim("git", Some(&claim), None).1,
            Related::Unmatched { in_flight: 0 }
        );
        // A call that has ended no longer counts.
        drop(calls.begin(tool_call(
            SessionId::next(),
            "run",
            serde_json::json!({"x": "ls"}),
        )));
        assert_eq!(
            calls.bind_claim("git", Some(&claim), None).1,
            Related::Unmatched { in_flight: 0 }
        );
        // Something that is no tool-call approval is just unknown.
        assert_eq!(calls.bind_claim("git", None, None).1, Related::Unknown);
    }

    #[test]
    fn one_call_in_flight_is_the_related_call_whatever_the_claim() {
        // The reviewer compares the claim with it (contract 0.2).
        let calls = Arc::new(Calls::default());
        let _only = calls.begin(tool_call(
            SessionId::next(),
            "run",
            serde_json::json!({"x": 1}),
        ));
        let lie = approval("run".into(), serde_json::json!({"x": 2}));
        assert!(matches!(
            calls.bind_claim("git", Some(&lie), None).1,
            Related::Call(_)
        ));
        // On a server with no call in flight the claim describes none.
        assert_eq!(
            calls.bind_claim("docs", Some(&lie), None).1,
            Related::Unmatched { in_flight: 0 }
        );
    }

    #[test]
    fn only_tool_call_approvals_claim_a_call() {
        let params = |meta: Value| serde_json::json!({"message": "m", "_meta": meta});
        assert!(Claim::from_params(&params(serde_json::json!({"tool_name": "run"}))).is_none());
        assert!(
            Claim::from_params(&params(serde_json::json!({"codex_approval_kind": "other"})))
                .is_none()
        );
        assert_eq!(
            Claim::from_params(&params(
                serde_json::json!({"codex_approval_kind": "mcp_tool_call"})
            )),
            Some(Claim::default())
        );
        assert!(Claim::from_params(&serde_json::json!("m")).is_none());
    }

    #[test]
    fn the_carrier_is_the_sessions_call_sent_under_then_claimed_then_first() {
        let calls = Arc::new(Calls::default());
        let (alice, bob) = (SessionId::next(), SessionId::next());
        assert!(calls.carrier("git", alice, None, None).is_none());
        let bobs = calls.begin(tool_call(bob, "run", serde_json::json!({"x": "bob"})));
        let first = calls.begin(tool_call(alice, "run", serde_json::json!({"x": "ls"})));
        let second = calls.begin(tool_call(alice, "run", serde_json::json!({"x": "rm"})));
        let _other_server = calls.begin(call(alice, "docs"));
        let args = |found: Option<(CallKey, Arc<UpstreamCall>)>| {
            found.and_then(|(_, call)| call.arguments.clone())
        };
        // Sent under a call of the session: that one, with its key.
        assert_eq!(
            calls
                .carrier("git", alice, None, Some(second.key()))
                .map(|(key, _)| key),
            Some(second.key())
        );
        assert_eq!(
            args(calls.carrier("git", alice, None, Some(second.key()))),
            Some(serde_json::json!({"x": "rm"}))
        );
        // Another session's call is never the carrier, even sent under it.
        assert_eq!(
            args(calls.carrier("git", alice, None, Some(bobs.key()))),
            Some(serde_json::json!({"x": "ls"}))
        );
        // The claim picks among the session's calls; without one, the first.
        let claim = approval("run".into(), serde_json::json!({"x": "rm"}));
        assert_eq!(
            args(calls.carrier("git", alice, Some(&claim), None)),
            Some(serde_json::json!({"x": "rm"}))
        );
        let bobs_claim = approval("run".into(), serde_json::json!({"x": "bob"}));
        assert_eq!(
            args(calls.carrier("git", alice, Some(&bobs_claim), None)),
            Some(serde_json::json!({"x": "ls"}))
        );
        drop(first);
        drop(second);
        assert!(calls.carrier("git", alice, None, None).is_none());
        assert!(calls.carrier("docs", alice, None, None).is_some());
    }

    #[tokio::test]
    async fn the_call_an_elicitation_was_sent_under_is_its_call_and_session() {
        let calls = Arc::new(Calls::default());
        let (alice, bob) = (SessionId::next(), SessionId::next());
        let first = calls.begin(tool_call(alice, "run", serde_json::json!({"x": "ls"})));
        let second = calls.begin(tool_call(bob, "run", serde_json::json!({"x": "rm"})));
        let lie = approval("run".into(), serde_json::json!({"x": "ls"}));
        // Sent under bob's call, a claim that describes alice's names bob's:
        // the reviewer compares it with the call it really belongs to.
        let under = on_behalf(second.key(), async { current_call() }).await;
        assert_eq!(under, Some(second.key()));
        let (binding, related) = calls.bind_claim("git", Some(&lie), under);
        assert!(matches!(&binding, Binding::Call(call) if call.session == bob));
        assert!(matches!(&related, Related::Call(call) if call.session == bob));
        // Outside on_behalf nothing is current; a key no longer in flight
        // falls back to the claim.
        assert_eq!(current_call(), None);
        let gone = second.key();
        drop(second);
        let (_, related) = calls.bind_claim("git", Some(&lie), Some(gone));
        assert!(matches!(&related, Related::Call(call) if call.session == alice));
        drop(first);
    }
}
