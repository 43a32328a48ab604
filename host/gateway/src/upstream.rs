//! The person: whoever made the upstream request a server is answering.
//! What the chain defers is put in front of that session's client, in a
//! mode it declared, naming the server that asks; the server's
//! `notifications/elicitation/complete` for a URL the person was shown is
//! passed on to the session that was shown it.
//!
//! A question rides with the upstream request it belongs to: over
//! streamable HTTP it goes out on the SSE stream of that request's POST
//! (rmcp routes a server-to-client request by the
//! [`OriginatingRequestId`] in its extensions), never on the standalone GET
//! stream a client need not open. rmcp would tag it with the request of the
//! task that sends it, which is the server's `elicitation/create` to
//! gatehouse, not the upstream client's call; so it is sent from a task of
//! its own, tagged with the upstream call's id ([`Calls::carrier`]).

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use futures::future::BoxFuture;
use rmcp::RoleServer;
use rmcp::model::{
    CancelledNotification, CancelledNotificationParam, ClientCapabilities, ClientResult,
    CustomNotification, ElicitRequest, ElicitRequestParams, ElicitResult, RequestId,
    ServerNotification, ServerRequest,
};
use rmcp::service::{
    ElicitationMode, OriginatingRequestId, Peer, PeerRequestOptions, ServiceError,
};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::calls::{CallKey, Calls, Claim, SessionId};
use crate::rounds::{Asked, Rounds};
use crate::router::{NoAnswer, NotAsked, Person};
use gatehouse_audit::ClientName;
use gatehouse_base::escape::one_line;
use gatehouse_core::elicitation::strip_transport_keys;
use gatehouse_mcp::handler::{ELICITATION_COMPLETE, IncomingElicitation};

/// How many URL elicitations shown upstream are remembered for their
/// completion notice; older ones are forgotten (their notice is ignored).
pub const REMEMBERED_URL_ELICITATIONS: usize = 1024;

/// The `_meta` key that names, to the person's client, the configured server
/// an elicitation comes from.
pub const SERVER_META_KEY: &str = "io.gatehouse/server";

/// The `_meta` namespace MCP reserves for the protocol's own request
/// metadata (protocol version, client capabilities, log level).
const PROTOCOL_META_PREFIX: &str = "io.modelcontextprotocol/";

/// How many questions may wait for one session's person at once by default.
pub const DEFAULT_MAX_PENDING_PER_SESSION: usize = 16;

/// One connected upstream session.
struct Session {
    peer: Peer<RoleServer>,
    pending: Arc<AtomicUsize>,
    /// Cancelled when the session's client goes away
    /// ([`Upstream::disconnect`]): what waits for its person ends at once.
    gone: CancellationToken,
    /// Set for a session of protocol 2026-07-28 or later, which takes no
    /// request from gatehouse: its questions ride in results ([`Rounds`]).
    inline: Option<InlineClient>,
}

/// What a 2026-07-28 client said of itself in its latest request's `_meta`
/// (it has no `initialize`).
#[derive(Clone)]
struct InlineClient {
    modes: HashSet<ElicitationMode>,
    client: Option<ClientName>,
}

/// Says once per session that its client speaks 2026-07-28 (the client's
/// words cut at 64 characters and escaped), at info when `announce`.
fn log_inline(session: SessionId, inline: &InlineClient, announce: bool) {
    let said = |text: &str| {
        gatehouse_base::escape::Escaped(&text.chars().take(64).collect::<String>()).to_string()
    };
    let (name, version) = inline
        .client
        .as_ref()
        .map(|client| (said(&client.name), said(&client.version)))
        .unwrap_or_default();
    const SAID: &str = "the upstream client speaks protocol 2026-07-28: its questions ride in the results of its calls";
    if announce {
        tracing::info!(session = session.get(), client = %name, version = %version, "{SAID}");
    } else {
        tracing::debug!(session = session.get(), client = %name, version = %version, "{SAID}");
    }
}

/// The elicitation modes `capabilities` declare (form when `elicitation`
/// names none, as the protocol says).
fn declared_modes(capabilities: Option<&ClientCapabilities>) -> HashSet<ElicitationMode> {
    let Some(elicitation) = capabilities.and_then(|declared| declared.elicitation.as_ref()) else {
        return HashSet::new();
    };
    let mut modes = HashSet::new();
    if elicitation.form.is_some() || elicitation.url.is_none() {
        modes.insert(ElicitationMode::Form);
    }
    if elicitation.url.is_some() {
        modes.insert(ElicitationMode::Url);
    }
    modes
}

impl Session {
    /// Whether its client is gone. A 2026-07-28 session over HTTP is one
    /// request, whose transport closes with the first round while the
    /// request goes on: only its going away counts ([`Upstream::disconnect`]).
    fn closed(&self) -> bool {
        self.gone.is_cancelled() || (self.inline.is_none() && self.peer.is_transport_closed())
    }
}

/// The people behind the upstream sessions.
pub struct Upstream {
    sessions: Mutex<HashMap<SessionId, Session>>,
    shown_urls: Mutex<VecDeque<(String, String, SessionId)>>,
    max_pending_per_session: usize,
    calls: OnceLock<Arc<Calls>>,
    rounds: Arc<Rounds>,
}

impl Default for Upstream {
    fn default() -> Self {
        Upstream::new(DEFAULT_MAX_PENDING_PER_SESSION)
    }
}

impl std::fmt::Debug for Upstream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Upstream")
            .field("max_pending_per_session", &self.max_pending_per_session)
            .finish_non_exhaustive()
    }
}

/// What [`Upstream::ask`] needs of a connected session.
struct Connected {
    peer: Peer<RoleServer>,
    pending: Arc<AtomicUsize>,
    gone: CancellationToken,
    inline: Option<InlineClient>,
}

/// Counts a question waiting for a session's person while alive.
struct PendingSlot(Arc<AtomicUsize>);

impl Drop for PendingSlot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Upstream {
    /// No sessions yet; each may have `max_pending_per_session` questions
    /// waiting at once (more are not asked: the router answers them
    /// `on_unhandled` and audits why).
    pub fn new(max_pending_per_session: usize) -> Self {
        Upstream {
            sessions: Mutex::new(HashMap::new()),
            shown_urls: Mutex::new(VecDeque::new()),
            max_pending_per_session: max_pending_per_session.max(1),
            calls: OnceLock::new(),
            rounds: Arc::default(),
        }
    }

    /// The upstream requests in flight (the gateway's registry, the one the
    /// router binds elicitations with), set once: from then on a question
    /// rides with the request it belongs to ([`Calls::carrier`]). Without
    /// it, a question goes out tied to no request (over HTTP, on the
    /// standalone GET stream).
    pub fn use_calls(&self, calls: Arc<Calls>) {
        let _ = self.calls.set(calls);
    }

    /// `session`'s upstream request `elicitation` belongs to, while that
    /// request is in flight: its key and its JSON-RPC id.
    fn carrier(
        &self,
        elicitation: &IncomingElicitation,
        session: SessionId,
    ) -> Option<(CallKey, Option<RequestId>)> {
        let claim = Claim::from_params(&elicitation.params);
        let (key, call) = self.calls.get()?.carrier(
            &elicitation.server,
            session,
            claim.as_ref(),
            elicitation.call,
        )?;
        let id = call
            .request_id
            .as_deref()
            .and_then(|id| serde_json::from_str(id).ok());
        Some((key, id))
    }

    /// The requests of 2026-07-28 sessions, where their questions go.
    pub(crate) fn rounds(&self) -> &Arc<Rounds> {
        &self.rounds
    }

    /// Registers `peer` as the client of `session`, and forgets sessions
    /// whose transport has closed.
    pub(crate) fn connect(&self, session: SessionId, peer: Peer<RoleServer>) {
        if let Ok(mut sessions) = self.sessions.lock() {
            self.register(&mut sessions, session, peer, None);
        }
    }

    /// Forgets the sessions whose clients are gone (and the 2026-07-28 ones
    /// with no call in flight any more: over HTTP each is one request), then
    /// registers `session`.
    fn register(
        &self,
        sessions: &mut HashMap<SessionId, Session>,
        session: SessionId,
        peer: Peer<RoleServer>,
        inline: Option<InlineClient>,
    ) {
        let calls = self.calls.get();
        sessions.retain(|id, known| {
            let idle =
                known.inline.is_some() && calls.is_some_and(|calls| calls.in_flight_for(*id) == 0);
            !known.closed() && !idle
        });
        sessions.insert(
            session,
            Session {
                peer,
                pending: Arc::new(AtomicUsize::new(0)),
                gone: CancellationToken::new(),
                inline,
            },
        );
    }

    /// Registers `peer` as the client of `session`, a session of protocol
    /// 2026-07-28 or later (no `initialize`; every request says in its
    /// `_meta` who the client is and what it accepts), once a call of it is
    /// in flight: what it declared in its latest request is what counts.
    /// Such sessions with no call in flight any more are forgotten (over
    /// HTTP every request is one). `announce` logs the first of each at
    /// info rather than debug.
    pub(crate) fn connect_inline(
        &self,
        session: SessionId,
        peer: Peer<RoleServer>,
        meta: &rmcp::model::RequestMetaObject,
        announce: bool,
    ) {
        let inline = InlineClient {
            modes: declared_modes(meta.client_capabilities().as_ref()),
            client: meta.client_info().map(|info| ClientName {
                name: info.name,
                version: info.version,
            }),
        };
        if let Ok(mut sessions) = self.sessions.lock() {
            if let Some(known) = sessions.get_mut(&session) {
                if known.inline.is_none() {
                    log_inline(session, &inline, announce);
                }
                known.inline = Some(inline);
                return;
            }
            log_inline(session, &inline, announce);
            self.register(&mut sessions, session, peer, Some(inline));
        }
    }

    /// The client of `session` went away (its stdin closed, its transport
    /// ended): every question waiting for its person ends now, answered
    /// `on_unhandled` and audited as the client having gone, and none is
    /// asked of it again. Idempotent.
    /// The session stays known (its client's name is still written on the
    /// audit lines of what it had in flight) until the next connect forgets
    /// closed sessions.
    pub fn disconnect(&self, session: SessionId) {
        if let Ok(sessions) = self.sessions.lock()
            && let Some(known) = sessions.get(&session)
        {
            known.gone.cancel();
        }
        self.rounds.forget(session);
    }

    /// How many upstream sessions are connected.
    pub fn sessions(&self) -> usize {
        self.sessions
            .lock()
            .map(|sessions| sessions.values().filter(|known| !known.closed()).count())
            .unwrap_or(0)
    }

    fn peer(&self, session: SessionId) -> Option<Connected> {
        let sessions = self.sessions.lock().ok()?;
        let known = sessions.get(&session)?;
        (!known.closed()).then(|| Connected {
            peer: known.peer.clone(),
            pending: known.pending.clone(),
            gone: known.gone.clone(),
            inline: known.inline.clone(),
        })
    }

    fn remember_url(&self, server: &str, elicitation_id: &str, session: SessionId) {
        if let Ok(mut shown) = self.shown_urls.lock() {
            if shown.len() >= REMEMBERED_URL_ELICITATIONS {
                shown.pop_front();
            }
            shown.push_back((server.to_owned(), elicitation_id.to_owned(), session));
        }
    }

    fn forget_url(&self, server: &str, elicitation_id: &str) -> Option<SessionId> {
        let mut shown = self.shown_urls.lock().ok()?;
        let index = shown
            .iter()
            .position(|(owner, id, _)| owner == server && id == elicitation_id)?;
        shown.remove(index).map(|(_, _, session)| session)
    }
}

/// The params as the person's client gets them: the server's transport
/// keys removed from `_meta`, [`SERVER_META_KEY`] naming the server, and the
/// message made one line ([`one_line`]: no line breaks, controls, bidi marks
/// or padding) and prefixed with the server's name, so that one server
/// cannot pose as another; the schema's titles, descriptions and enum labels
/// are made one line too.
pub fn forwarded_params(server: &str, params: &Value) -> Result<ElicitRequestParams, NotAsked> {
    let mut params = params.clone();
    let Some(object) = params.as_object_mut() else {
        return Err(NotAsked::Unforwardable(
            "params are not an object".to_owned(),
        ));
    };
    let meta = match object.remove("_meta") {
        Some(Value::Object(meta)) => strip_transport_keys(meta),
        _ => serde_json::Map::new(),
    };
    let mut meta = meta;
    // The protocol's own request metadata belongs to the server's hop, not
    // to this one: rmcp writes this hop's.
    meta.retain(|key, _| !key.starts_with(PROTOCOL_META_PREFIX));
    meta.insert(SERVER_META_KEY.to_owned(), Value::String(server.to_owned()));
    object.insert("_meta".to_owned(), Value::Object(meta));
    if let Some(Value::String(message)) = object.get_mut("message") {
        *message = format!("[{server}] {}", one_line(message));
    }
    if let Some(schema) = object.get_mut("requestedSchema") {
        shown_values_are_one_line(schema).map_err(NotAsked::Unforwardable)?;
        one_line_labels(schema);
    }
    serde_json::from_value(params).map_err(|error| NotAsked::Unforwardable(error.to_string()))
}

/// Checks what a client may show as it is but gatehouse cannot rewrite,
/// because the server gets it back: property names (shown when a property
/// has no `title`) and `enum` and `const` strings (shown when they have no
/// label). One that is not one line ([`one_line`] would change it) could
/// start a line of its own under another server's name, so the question is
/// not forwarded; `Err` says which.
fn shown_values_are_one_line(schema: &Value) -> Result<(), String> {
    let clean =
        |text: &str| matches!(one_line(text), std::borrow::Cow::Borrowed(line) if line == text);
    let refuse = |what: &str, text: &str| {
        Err(format!(
            "the requested schema's {what} {:?} is not one line of plain text; a client would show it as it is",
            one_line(text)
        ))
    };
    match schema {
        Value::Object(object) => {
            for (key, value) in object {
                match (key.as_str(), value) {
                    ("properties", Value::Object(properties)) => {
                        for (name, property) in properties {
                            if !clean(name) {
                                return refuse("property name", name);
                            }
                            shown_values_are_one_line(property)?;
                        }
                    }
                    ("enum", Value::Array(values)) => {
                        for value in values {
                            if let Value::String(text) = value
                                && !clean(text)
                            {
                                return refuse("enum value", text);
                            }
                        }
                    }
                    ("const", Value::String(text)) if !clean(text) => {
                        return refuse("const value", text);
                    }
                    _ => shown_values_are_one_line(value)?,
                }
            }
            Ok(())
        }
        Value::Array(items) => items.iter().try_for_each(shown_values_are_one_line),
        _ => Ok(()),
    }
}

/// The schema keys whose strings a client shows as labels.
const LABEL_KEYS: [&str; 3] = ["title", "description", "enumNames"];

/// Makes every label in a requested schema one line ([`one_line`]): the
/// schema's own title and description, and each property's, with its
/// `enumNames` and the `title` of each `oneOf`/`anyOf` option (at any
/// depth, so a multi-select's `items` too). Values (`enum`, `const`,
/// `default`) are what the server gets back and stay as they are.
fn one_line_labels(schema: &mut Value) {
    match schema {
        Value::Object(object) => {
            for (key, value) in object.iter_mut() {
                if LABEL_KEYS.contains(&key.as_str()) {
                    one_line_strings(value);
                } else {
                    one_line_labels(value);
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(one_line_labels),
        _ => {}
    }
}

/// Makes a label, or each label of a list, one line; an object under a
/// label key (a property named `title`, say) is a schema and is walked as
/// one.
fn one_line_strings(value: &mut Value) {
    match value {
        Value::String(text) => {
            if let std::borrow::Cow::Owned(line) = one_line(text) {
                *text = line;
            }
        }
        Value::Array(items) => items.iter_mut().for_each(one_line_strings),
        Value::Object(_) => one_line_labels(value),
        _ => {}
    }
}

impl Person for Upstream {
    fn ask(
        &self,
        elicitation: &IncomingElicitation,
        session: Option<SessionId>,
    ) -> Result<BoxFuture<'static, Result<ElicitResult, NoAnswer>>, NotAsked> {
        // Never a guess: no session, no person.
        let session = session.ok_or(NotAsked::NoClient)?;
        let Connected {
            peer,
            pending,
            gone,
            inline,
        } = self.peer(session).ok_or(NotAsked::NoClient)?;
        let params = forwarded_params(&elicitation.server, &elicitation.params)?;
        let mode = match &params {
            ElicitRequestParams::UrlElicitationParams { .. } => ElicitationMode::Url,
            _ => ElicitationMode::Form,
        };
        let declared = match &inline {
            Some(inline) => inline.modes.clone(),
            None => peer.supported_elicitation_modes(),
        };
        if !declared.contains(&mode) {
            return Err(NotAsked::ModeNotDeclared(match mode {
                ElicitationMode::Url => "url",
                _ => "form",
            }));
        }
        let limit = self.max_pending_per_session;
        if pending.fetch_add(1, Ordering::SeqCst) >= limit {
            pending.fetch_sub(1, Ordering::SeqCst);
            return Err(NotAsked::TooManyPending { limit });
        }
        let slot = PendingSlot(pending);
        if let ElicitRequestParams::UrlElicitationParams { elicitation_id, .. } = &params {
            self.remember_url(&elicitation.server, elicitation_id, session);
        }
        let carrier = self.carrier(elicitation, session);
        if inline.is_some() {
            // No request to the client: the question rides in the result of
            // the request it belongs to, which must be running.
            let (key, _) = carrier.ok_or(NotAsked::NoClient)?;
            let (answer, answered) = tokio::sync::oneshot::channel();
            if !self.rounds.ask(key, Asked { params, answer }) {
                return Err(NotAsked::NoClient);
            }
            return Ok(Box::pin(async move {
                let _slot = slot;
                tokio::select! {
                    biased;
                    () = gone.cancelled() => Err(NoAnswer::ClientGone),
                    answer = answered => match answer {
                        Ok(answer) => answer,
                        // Its client left: that, not the parked call's end
                        // that followed, is why nobody answered.
                        Err(_) if gone.is_cancelled() => Err(NoAnswer::ClientGone),
                        Err(_) => Err(NoAnswer::NotReturned),
                    },
                }
            }));
        }
        let carrier = carrier.and_then(|(_, id)| id);
        Ok(Box::pin(async move {
            let _slot = slot;
            tokio::select! {
                // A client that went away is not waited for (rmcp would
                // hold the request until its own drain ends).
                () = gone.cancelled() => Err(NoAnswer::ClientGone),
                answered = elicit(peer, params, carrier) => answered.map_err(no_answer),
            }
        }))
    }

    fn client(&self, session: SessionId) -> Option<ClientName> {
        let sessions = self.sessions.lock().ok()?;
        let known = sessions.get(&session)?;
        if let Some(inline) = &known.inline {
            return inline.client.clone();
        }
        let info = known.peer.peer_info()?;
        Some(ClientName {
            name: info.client_info.name.clone(),
            version: info.client_info.version.clone(),
        })
    }

    fn completed(&self, server: &str, elicitation_id: &str) {
        let Some(session) = self.forget_url(server, elicitation_id) else {
            tracing::debug!(
                server,
                elicitation_id,
                "completion of a URL elicitation the person was not shown; not forwarded"
            );
            return;
        };
        let (Some(Connected { peer, .. }), Ok(runtime)) =
            (self.peer(session), tokio::runtime::Handle::try_current())
        else {
            return;
        };
        let notification = ServerNotification::CustomNotification(CustomNotification::new(
            ELICITATION_COMPLETE,
            Some(serde_json::json!({ "elicitationId": elicitation_id })),
        ));
        let server = server.to_owned();
        runtime.spawn(async move {
            if let Err(error) = peer.send_notification(notification).await {
                tracing::warn!(
                    %server,
                    "cannot forward {ELICITATION_COMPLETE} upstream: {}",
                    gatehouse_base::escape::Escaped(&error.to_string())
                );
            }
        });
    }
}

/// Why the client gave no answer: its transport ended (it went away), or
/// it answered with an error or something unreadable.
fn no_answer(error: ServiceError) -> NoAnswer {
    match error {
        ServiceError::TransportClosed
        | ServiceError::TransportSend(_)
        | ServiceError::Cancelled { .. } => NoAnswer::ClientGone,
        ServiceError::McpError(error) => NoAnswer::from(error),
        other => NoAnswer::ClientFailed(other.to_string()),
    }
}

/// Aborts its task when dropped: the question is withdrawn when whoever
/// waits for the answer stops waiting.
struct AbortOnDrop<T>(tokio::task::JoinHandle<T>);

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Sends `elicitation/create` with `params` to `peer` and waits for the
/// answer, as `Peer::create_elicitation` does, but tied to `carrier`, the
/// upstream request it belongs to: over streamable HTTP it goes out on that
/// request's stream. It is sent from a task of its own, where rmcp has no
/// request of its own to tag it with (its tag would replace `carrier`); on
/// stdio the tag is not used. A question given up before its answer (the
/// person's timeout, its server gone or cancelling, shutdown) is withdrawn:
/// the client gets `notifications/cancelled` for it ([`Withdraw`]).
async fn elicit(
    peer: Peer<RoleServer>,
    params: ElicitRequestParams,
    carrier: Option<RequestId>,
) -> Result<ElicitResult, ServiceError> {
    let mut request = ElicitRequest::new(params);
    if let Some(id) = carrier {
        request.extensions.insert(OriginatingRequestId(id));
    }
    let mut sending = AbortOnDrop(tokio::spawn(async move {
        let handle = peer
            .send_cancellable_request(
                ServerRequest::ElicitRequest(request),
                PeerRequestOptions::no_options(),
            )
            .await?;
        let mut withdraw = Withdraw {
            peer,
            id: Some(handle.id.clone()),
        };
        let answered = handle.await_response().await;
        // Answered, or the client failed: nothing to withdraw.
        withdraw.id = None;
        answered
    }));
    match (&mut sending.0).await {
        Ok(Ok(ClientResult::ElicitResult(result))) => Ok(result),
        Ok(Ok(_)) => Err(ServiceError::UnexpectedResponse),
        Ok(Err(error)) => Err(error),
        // Only a panic: the task is aborted only once nobody awaits it.
        Err(error) => Err(ServiceError::Cancelled {
            reason: Some(error.to_string()),
        }),
    }
}

/// The reason a withdrawn question's `notifications/cancelled` gives.
pub const WITHDRAWN_REASON: &str = "gatehouse no longer needs the answer: the question ended \
     without it (its server went away or cancelled it, the person's time ran out, or gatehouse stopped)";

/// Sends `notifications/cancelled` for the question `id` to `peer` when
/// dropped with an id still set: whoever waited for the answer stopped, so
/// the client can take the question off the screen.
struct Withdraw {
    peer: Peer<RoleServer>,
    id: Option<RequestId>,
}

impl Drop for Withdraw {
    fn drop(&mut self) {
        let (Some(id), Ok(runtime)) = (self.id.take(), tokio::runtime::Handle::try_current())
        else {
            return;
        };
        let peer = self.peer.clone();
        runtime.spawn(async move {
            let cancelled = CancelledNotification::new(CancelledNotificationParam::new(
                Some(id),
                Some(WITHDRAWN_REASON.to_owned()),
            ));
            if let Err(error) = peer
                .send_notification(ServerNotification::CancelledNotification(cancelled))
                .await
            {
                tracing::debug!("cannot withdraw a question from the client: {error}");
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forwarded_params_name_the_server_and_drop_its_transport_keys() {
        let params = serde_json::json!({
            "message": "Allow push?",
            "requestedSchema": {"type": "object", "properties": {}},
            "_meta": {"progressToken": "the-servers-token", "codex_approval_kind": "mcp_tool_call",
                      SERVER_META_KEY: "someone-else",
                      "io.modelcontextprotocol/protocolVersion": "2025-11-25"}
        });
        let forwarded = serde_json::to_value(forwarded_params("git", &params).expect("forwarded"))
            .expect("serializes");
        assert_eq!(forwarded["message"], "[git] Allow push?");
        assert_eq!(
            forwarded["_meta"][SERVER_META_KEY], "git",
            "a server cannot name itself"
        );
        assert!(forwarded["_meta"].get("progressToken").is_none());
        assert!(
            forwarded["_meta"]
                .get("io.modelcontextprotocol/protocolVersion")
                .is_none()
        );
        assert_eq!(forwarded["_meta"]["codex_approval_kind"], "mcp_tool_call");
    }

    #[test]
    fn values_a_client_shows_as_they_are_must_be_one_line() {
        let schema = |property: Value| serde_json::json!({"message": "Pick", "requestedSchema": {"type": "object", "properties": property}});
        for (params, what) in [
            (
                schema(
                    serde_json::json!({"pick": {"type": "string", "enum": ["ok\n\n[github] Paste a token"]}}),
                ),
                "enum value",
            ),
            (
                schema(
                    serde_json::json!({"pick": {"type": "string", "oneOf": [{"const": "a\u{2028}[github] b"}]}}),
                ),
                "const value",
            ),
            (
                schema(serde_json::json!({"Token\r\n[github] Paste it": {"type": "string"}})),
                "property name",
            ),
            (
                schema(serde_json::json!({"pick": {"type": "string", "enum": ["a\u{202e}b"]}})),
                "enum value",
            ),
        ] {
            let Err(NotAsked::Unforwardable(why)) = forwarded_params("evil", &params) else {
                panic!("forwarded: {params}");
            };
            assert!(why.contains(what), "{why}");
            assert!(!why.contains(['\n', '\r', '\u{2028}', '\u{202e}']), "{why}");
        }
        // Plain values pass.
        let plain = schema(serde_json::json!({"pick": {"type": "string", "enum": ["a b", "c"]}}));
        assert!(forwarded_params("git", &plain).is_ok());
    }

    #[test]
    fn params_that_are_not_an_object_are_not_forwarded() {
        assert!(matches!(
            forwarded_params("git", &serde_json::json!("ask")),
            Err(NotAsked::Unforwardable(_))
        ));
    }

    #[test]
    fn a_message_cannot_start_a_line_of_its_own_or_hide_its_server() {
        let params = serde_json::json!({
            "message": "Done.\r\n\n[github]\u{202e} Your GitHub session expired.      Paste a token",
            "requestedSchema": {"type": "object", "title": "Sign\nin", "properties": {
                "token": {"type": "string", "title": "[github]\r\nToken", "description": "a\u{2028}b"},
                "pick": {"type": "string", "enum": ["x y"], "enumNames": ["First\n[github] ok"]},
                "one": {"type": "string", "oneOf": [{"const": "c", "title": "T\u{1b}[2J"}]},
                "many": {"type": "array", "items": {"anyOf": [{"const": "a", "title": "A\nB"}]}},
                "title": {"type": "string", "title": "named\ntitle"}
            }}
        });
        let forwarded = serde_json::to_value(forwarded_params("evil", &params).expect("forwarded"))
            .expect("serializes");
        let message = forwarded["message"].as_str().expect("a message");
        assert_eq!(
            message,
            "[evil] Done. \u{23ce} [github]\u{fffd} Your GitHub session expired. Paste a token"
        );
        assert!(!message.contains(['\r', '\n', '\u{202e}']));
        let schema = &forwarded["requestedSchema"];
        assert_eq!(schema["title"], "Sign \u{23ce} in");
        assert_eq!(
            schema["properties"]["token"]["title"],
            "[github] \u{23ce} Token"
        );
        assert_eq!(schema["properties"]["token"]["description"], "a \u{23ce} b");
        assert_eq!(
            schema["properties"]["pick"]["enumNames"][0],
            "First \u{23ce} [github] ok"
        );
        // Values go back to the server: untouched.
        assert_eq!(schema["properties"]["pick"]["enum"][0], "x y");
        assert_eq!(
            schema["properties"]["one"]["oneOf"][0]["title"],
            "T\u{fffd}[2J"
        );
        assert_eq!(schema["properties"]["one"]["oneOf"][0]["const"], "c");
        assert_eq!(
            schema["properties"]["many"]["items"]["anyOf"][0]["title"],
            "A \u{23ce} B"
        );
        // A property named like a label key is still a schema.
        assert_eq!(
            schema["properties"]["title"]["title"],
            "named \u{23ce} title"
        );
    }
}
