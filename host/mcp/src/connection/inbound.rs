//! What a server sends, looked at before rmcp's service loop sees it: long
//! request ids cut, and requests sent outside any request of gatehouse's
//! refused, reported to the handler (which audits them) and logged within a
//! budget.
//!
//! **Long ids.** A server picks the JSON-RPC id of each request it sends,
//! of any length. rmcp logs it whole at `warn` when a handler answers with
//! an error (`response error`) or when it refuses the request itself, and
//! the router and the audit carry it. So an id longer than
//! [`MAX_ID_CHARS`] is replaced, on the way in, by the same cut the audit
//! writes ([`cut`]: its start and the sha256 of the whole),
//! and the server's own id is put back on the answer on the way out. rmcp,
//! the router, every log line and the audit record see the cut id; the
//! server sees its own. The server's `notifications/cancelled` for such an
//! id is cut the same way, so it still cancels.
//!
//! **Unsolicited requests.** From protocol 2026-07-28 on (SEP-2260), a
//! server may ask the client something (`elicitation/create`,
//! `sampling/createMessage`, `roots/list`) only while one of the client's
//! requests to it is in flight, and rmcp's service loop refuses one that is
//! not with `-32602` before any handler runs
//! (`rmcp::service::serve_inner`, through
//! `RoleClient::enforce_peer_request_association`), logging the whole id at
//! `warn` each time and writing no audit line. This transport makes the same
//! decision first, as rmcp does: over streamable HTTP by the stream the
//! request came on (`InboundStreamOrigin`), over stdio by whether any
//! request of gatehouse's to the server is in flight (rmcp's "coarse" check;
//! this transport sees every request go out and every answer come back).
//! Such a request never reaches rmcp: it gets the same `-32602` under its own
//! id, an elicitation is reported to the handler ([`Refused`], the reason
//! [`UNSOLICITED_REASON`], through [`ElicitationHandler::refused`]: the
//! router audits it, decided by `policy`, the error as the answer), and a
//! warning names the server
//! and the cut id, at most [`WARN_BURST`] at once and [`WARN_PER_SEC`] a
//! second per server (`LogBudget`, as for the server's stderr), the
//! rest counted and reported with the next warning. Under older protocols
//! nothing is refused here: the router ties the request to no call and the
//! person is not asked (`on_unhandled`), as before.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError};
use std::time::Instant;

use rmcp::RoleClient;
use rmcp::model::{
    ClientJsonRpcMessage, ClientNotification, ErrorData, GetExtensions, JsonRpcMessage, RequestId,
    ServerJsonRpcMessage, ServerNotification, ServerRequest, ServerResult,
};
use rmcp::service::{InboundStreamOrigin, RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::Transport;
use serde_json::Value;

use crate::connection::stdio::LogBudget;
use crate::handler::{ElicitationHandler, Refused, WireArrival};
use crate::server_config::DISCOVER_PROTOCOL_VERSION;
use gatehouse_base::cut::{MAX_ID_CHARS, cut};
use gatehouse_base::escape::Escaped;

/// The error an unsolicited request gets: rmcp's own words.
pub const UNSOLICITED_ERROR: &str =
    "SEP-2260: server-to-client requests must be associated with an in-flight client request";

/// The reason in the audit line of an unsolicited elicitation.
pub const UNSOLICITED_REASON: &str = "refused unreviewed: sent outside any request gatehouse had \
     in flight on this server, which protocol 2026-07-28 forbids (SEP-2260)";

/// How many warnings about refused requests one server may cause at once.
pub const WARN_BURST: u32 = 10;

/// How many more a second, after the burst.
pub const WARN_PER_SEC: u32 = 1;

/// What the transport knows of the connection it serves.
pub(super) struct Context {
    /// The server's configured name.
    pub(super) server: String,
    /// Where refused elicitations are reported, to be audited.
    pub(super) handler: Arc<dyn ElicitationHandler>,
    /// The negotiated protocol version, once known (shared with the client
    /// side; set here when the `initialize` result passes).
    pub(super) protocol_version: Arc<OnceLock<String>>,
    /// Cancelled when the server's side of the transport ends: every
    /// elicitation of the connection learns of it at once
    /// ([`crate::handler::IncomingElicitation::server_gone`]).
    pub(super) closed: tokio_util::sync::CancellationToken,
}

/// A transport that cuts long ids and refuses unsolicited requests (see the
/// [module docs](self)) in front of `T`.
pub(super) struct Inbound<T> {
    inner: T,
    context: Context,
    state: Arc<Mutex<State>>,
}

/// What the two directions share.
struct State {
    /// gatehouse's requests to the server that are in flight.
    pending: HashSet<RequestId>,
    /// The cut ids of the server's requests in flight, with the server's own.
    long_ids: HashMap<RequestId, RequestId>,
    /// Warnings about refused requests.
    budget: LogBudget,
    /// The server's elicitation requests not answered yet, by id as rmcp
    /// sees it: the sha256 of the request, and the token that tells the
    /// last of them it was superseded ([`WireArrival`]).
    elicitations: HashMap<RequestId, ([u8; 32], tokio_util::sync::CancellationToken)>,
}

/// What [`Inbound::inspect`] made of a message.
enum Inspected {
    /// Pass it on to rmcp.
    Pass,
    /// Refused and answered here; read the next.
    Refused,
    /// The same request again under the same id while the first is
    /// unanswered: a redelivery (streamable HTTP replays the events of a
    /// stream it resumes after a dropped connection). The first's answer
    /// answers it; read the next.
    Redelivered,
}

impl<T> Inbound<T> {
    pub(super) fn new(inner: T, context: Context) -> Inbound<T> {
        Inbound {
            inner,
            context,
            state: Arc::new(Mutex::new(State {
                pending: HashSet::new(),
                long_ids: HashMap::new(),
                elicitations: HashMap::new(),
                budget: LogBudget::new(WARN_BURST, WARN_PER_SEC, Instant::now()),
            })),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        lock(&self.state)
    }

    /// Whether the negotiated protocol forbids unsolicited requests.
    fn strict(&self) -> bool {
        self.context
            .protocol_version
            .get()
            .is_some_and(|version| version.as_str() >= DISCOVER_PROTOCOL_VERSION)
    }
}

fn lock(state: &Mutex<State>) -> MutexGuard<'_, State> {
    // Each statement leaves the state consistent.
    state.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The id rmcp should see for the server's `id`: a string longer than
/// [`MAX_ID_CHARS`] cut; `None` when it is fine as it is.
fn cut_id(id: &RequestId) -> Option<RequestId> {
    match id {
        RequestId::String(text) => match cut(text, MAX_ID_CHARS) {
            std::borrow::Cow::Owned(cut) => Some(RequestId::String(cut.into())),
            std::borrow::Cow::Borrowed(_) => None,
        },
        RequestId::Number(_) => None,
    }
}

/// Whether rmcp restricts `request` to the span of a request of the
/// client's (`RoleClient::enforce_peer_request_association`).
fn restricted(request: &ServerRequest) -> bool {
    matches!(
        request,
        ServerRequest::CreateMessageRequest(_)
            | ServerRequest::ListRootsRequest(_)
            | ServerRequest::ElicitRequest(_)
    )
}

fn method(request: &ServerRequest) -> &'static str {
    match request {
        ServerRequest::CreateMessageRequest(_) => "sampling/createMessage",
        ServerRequest::ListRootsRequest(_) => "roots/list",
        ServerRequest::ElicitRequest(_) => crate::ELICITATION_METHOD,
        _ => "a request",
    }
}

impl<T: Transport<RoleClient>> Inbound<T> {
    /// Looks at one message from the server: notes answers to gatehouse's
    /// requests (and the protocol the `initialize` or `server/discover`
    /// result settles), cuts long
    /// ids, and refuses an unsolicited request.
    fn inspect(&mut self, message: &mut ServerJsonRpcMessage) -> Inspected {
        match message {
            JsonRpcMessage::Response(response) => {
                match &response.result {
                    ServerResult::InitializeResult(result) => {
                        let _ = self
                            .context
                            .protocol_version
                            .set(result.protocol_version.to_string());
                    }
                    // The discover handshake (2026-07-28) settles on the one
                    // version gatehouse offers it when the server lists it,
                    // and rmcp's loop runs strict from the next message: so
                    // must this check, before the handshake returns.
                    ServerResult::DiscoverResult(result)
                        if result
                            .supported_versions
                            .iter()
                            .any(|version| version.as_str() == DISCOVER_PROTOCOL_VERSION) =>
                    {
                        let _ = self
                            .context
                            .protocol_version
                            .set(DISCOVER_PROTOCOL_VERSION.to_owned());
                    }
                    _ => {}
                }
                answered(&mut self.lock().pending, &response.id);
                Inspected::Pass
            }
            JsonRpcMessage::Error(error) => {
                if let Some(id) = &error.id {
                    answered(&mut self.lock().pending, id);
                }
                Inspected::Pass
            }
            JsonRpcMessage::Notification(notification) => {
                if let ServerNotification::CancelledNotification(cancelled) =
                    &mut notification.notification
                    && let Some(id) = &mut cancelled.params.request_id
                    && let Some(cut) = cut_id(id)
                {
                    // rmcp drops the answer to a cancelled request: nothing
                    // will come back to put the server's id on.
                    self.lock().long_ids.remove(&cut);
                    *id = cut;
                }
                if let ServerNotification::CancelledNotification(cancelled) =
                    &notification.notification
                    && let Some(id) = &cancelled.params.request_id
                {
                    self.lock().elicitations.remove(id);
                }
                Inspected::Pass
            }
            JsonRpcMessage::Request(request) => {
                let received = Instant::now();
                let own = request.id.clone();
                if let Some(cut) = cut_id(&request.id) {
                    self.lock().long_ids.insert(cut.clone(), own.clone());
                    request.id = cut;
                }
                if matches!(request.request, ServerRequest::ElicitRequest(_)) {
                    let Some(arrival) = self.arrive(&request.id, &request.request) else {
                        tracing::debug!(
                            server = %Escaped(&self.context.server),
                            "an elicitation delivered again while the first delivery is unanswered; the first's answer answers it"
                        );
                        return Inspected::Redelivered;
                    };
                    request.request.extensions_mut().insert(arrival);
                }
                if !restricted(&request.request) || !self.strict() {
                    return Inspected::Pass;
                }
                let associated = {
                    let state = self.lock();
                    match request.request.extensions().get::<InboundStreamOrigin>() {
                        None => !state.pending.is_empty(),
                        Some(InboundStreamOrigin::Unassociated) => false,
                        Some(InboundStreamOrigin::OutboundRequest(id)) => {
                            state.pending.contains(id)
                        }
                    }
                };
                if associated {
                    return Inspected::Pass;
                }
                self.refuse(&request.id, own, &request.request, received);
                Inspected::Refused
            }
        }
    }

    /// An elicitation request came under `id`: its place among the
    /// server's unanswered requests with that id ([`WireArrival`]). An
    /// earlier one still unanswered is told it was superseded, unless this
    /// is the same request again (`None`: a redelivery).
    fn arrive(&self, id: &RequestId, request: &ServerRequest) -> Option<WireArrival> {
        use sha2::{Digest, Sha256};
        let digest: [u8; 32] =
            Sha256::digest(serde_json::to_vec(request).unwrap_or_default()).into();
        let superseded = tokio_util::sync::CancellationToken::new();
        let mut state = self.lock();
        if state
            .elicitations
            .get(id)
            .is_some_and(|(earlier, _)| *earlier == digest)
        {
            return None;
        }
        let earlier = state
            .elicitations
            .insert(id.clone(), (digest, superseded.clone()));
        if let Some((_, earlier)) = &earlier {
            earlier.cancel();
        }
        Some(WireArrival {
            reused: earlier.is_some(),
            superseded,
        })
    }

    /// Answers an unsolicited request (`id` as rmcp would see it, `own` the
    /// server's) with rmcp's error, reports it to the handler if it is an elicitation, and
    /// warns within the budget.
    fn refuse(&mut self, id: &RequestId, own: RequestId, request: &ServerRequest, at: Instant) {
        {
            let mut state = self.lock();
            state.long_ids.remove(id);
            state.elicitations.remove(id);
        }
        let error = ErrorData::invalid_params(UNSOLICITED_ERROR, None);
        let send = self
            .inner
            .send(JsonRpcMessage::error(error.clone(), Some(own)));
        let server = self.context.server.clone();
        // Not awaited here: `receive` stays cancel-safe (rmcp drops it when
        // another event wins), and the refusal goes out all the same.
        tokio::spawn(async move {
            if let Err(error) = send.await {
                tracing::debug!(server = %server, "cannot send the refusal of an unsolicited request: {error}");
            }
        });
        let id_text = match id {
            RequestId::String(text) => text.to_string(),
            RequestId::Number(number) => number.to_string(),
        };
        let method = method(request);
        if let ServerRequest::ElicitRequest(elicitation) = request {
            let mode = match serde_json::to_value(&elicitation.params)
                .ok()
                .as_ref()
                .and_then(|params| params.get("mode"))
            {
                None => "form".to_owned(),
                Some(Value::String(mode)) => mode.clone(),
                Some(_) => "invalid".to_owned(),
            };
            self.context.handler.refused(Refused {
                server: self.context.server.clone(),
                request_id: id.clone(),
                mode,
                reason: UNSOLICITED_REASON,
                error: error.clone(),
                latency: at.elapsed(),
            });
        }
        let mut state = self.lock();
        if state.budget.allow(Instant::now()) {
            let suppressed = state.budget.take_suppressed();
            drop(state);
            let version = self
                .context
                .protocol_version
                .get()
                .cloned()
                .unwrap_or_default();
            tracing::warn!(
                server = %Escaped(&self.context.server),
                id = %Escaped(&id_text),
                suppressed,
                "refused {method} sent outside any request gatehouse had in flight on this server \
                 (protocol {version}, SEP-2260)"
            );
        }
    }
}

impl<T> Drop for Inbound<T> {
    /// The connection ends: the warnings the budget held back are counted
    /// in one last line.
    fn drop(&mut self) {
        let suppressed = self.lock().budget.take_suppressed();
        if suppressed > 0 {
            tracing::warn!(
                server = %Escaped(&self.context.server),
                suppressed,
                "more refused requests were not logged: more than {WARN_BURST} at once or \
                 {WARN_PER_SEC} a second (each elicitation among them is in the audit log)"
            );
        }
    }
}

/// Forgets `id` (an answer to it came), as rmcp does: by the id, or by the
/// number a numeric string names.
fn answered(pending: &mut HashSet<RequestId>, id: &RequestId) {
    if !pending.remove(id)
        && let RequestId::String(text) = id
        && let Ok(number) = text.parse::<i64>()
    {
        pending.remove(&RequestId::Number(number));
    }
}

impl<T: Transport<RoleClient>> Transport<RoleClient> for Inbound<T> {
    type Error = T::Error;

    fn send(
        &mut self,
        mut item: TxJsonRpcMessage<RoleClient>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        let mut sent = None;
        {
            let mut state = self.lock();
            match &mut item {
                ClientJsonRpcMessage::Request(request) => {
                    state.pending.insert(request.id.clone());
                    sent = Some(request.id.clone());
                }
                ClientJsonRpcMessage::Response(response) => {
                    state.elicitations.remove(&response.id);
                    if let Some(own) = state.long_ids.remove(&response.id) {
                        response.id = own;
                    }
                }
                ClientJsonRpcMessage::Error(error) => {
                    if let Some(id) = &mut error.id {
                        state.elicitations.remove(id);
                        if let Some(own) = state.long_ids.remove(id) {
                            *id = own;
                        }
                    }
                }
                ClientJsonRpcMessage::Notification(notification) => {
                    // rmcp forgets a request it cancels.
                    if let ClientNotification::CancelledNotification(cancelled) =
                        &notification.notification
                        && let Some(id) = &cancelled.params.request_id
                    {
                        state.pending.remove(id);
                    }
                }
            }
        }
        let send = self.inner.send(item);
        let state = self.state.clone();
        async move {
            let result = send.await;
            // rmcp forgets a request it could not send.
            if result.is_err()
                && let Some(id) = sent
            {
                lock(&state).pending.remove(&id);
            }
            result
        }
    }

    async fn receive(&mut self) -> Option<RxJsonRpcMessage<RoleClient>> {
        loop {
            let Some(mut message) = self.inner.receive().await else {
                self.context.closed.cancel();
                return None;
            };
            match self.inspect(&mut message) {
                Inspected::Pass => return Some(message),
                Inspected::Refused | Inspected::Redelivered => {}
            }
        }
    }

    fn close(&mut self) -> impl Future<Output = Result<(), Self::Error>> + Send {
        self.inner.close()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::VecDeque;

    use futures::future::BoxFuture;
    use rmcp::model::{ElicitResult, ElicitationAction};
    use serde_json::json;

    use crate::handler::IncomingElicitation;

    /// A transport that yields `incoming` and keeps what is sent.
    struct Fake {
        incoming: VecDeque<ServerJsonRpcMessage>,
        sent: Arc<Mutex<Vec<Value>>>,
    }

    impl Transport<RoleClient> for Fake {
        type Error = std::io::Error;

        fn send(
            &mut self,
            item: TxJsonRpcMessage<RoleClient>,
        ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
            let wire = serde_json::to_value(&item).unwrap_or(Value::Null);
            self.sent
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push(wire);
            std::future::ready(Ok(()))
        }

        fn receive(&mut self) -> impl Future<Output = Option<RxJsonRpcMessage<RoleClient>>> + Send {
            std::future::ready(self.incoming.pop_front())
        }

        fn close(&mut self) -> impl Future<Output = Result<(), Self::Error>> + Send {
            std::future::ready(Ok(()))
        }
    }

    /// Declines everything; keeps what the connection refused.
    struct Recorded(Arc<Mutex<Vec<Refused>>>);

    impl ElicitationHandler for Recorded {
        fn elicit(
            self: Arc<Self>,
            _: IncomingElicitation,
        ) -> BoxFuture<'static, Result<ElicitResult, ErrorData>> {
            Box::pin(async { Ok(ElicitResult::new(ElicitationAction::Decline)) })
        }

        fn refused(&self, refused: Refused) {
            self.0
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push(refused);
        }
    }

    fn message(wire: Value) -> ServerJsonRpcMessage {
        serde_json::from_value(wire).expect("a server message")
    }

    fn elicitation(id: Value) -> ServerJsonRpcMessage {
        message(
            json!({"jsonrpc": "2.0", "id": id, "method": "elicitation/create", "params": {
            "message": "Password?",
            "requestedSchema": {"type": "object", "properties": {"p": {"type": "string"}}}}}),
        )
    }

    struct Setup {
        inbound: Inbound<Fake>,
        sent: Arc<Mutex<Vec<Value>>>,
        refused: Arc<Mutex<Vec<Refused>>>,
    }

    fn setup(protocol: Option<&str>, incoming: Vec<ServerJsonRpcMessage>) -> Setup {
        let sent = Arc::new(Mutex::new(Vec::new()));
        let refused = Arc::new(Mutex::new(Vec::new()));
        let protocol_version = Arc::new(OnceLock::new());
        if let Some(protocol) = protocol {
            let _ = protocol_version.set(protocol.to_owned());
        }
        let inbound = Inbound::new(
            Fake {
                incoming: incoming.into(),
                sent: sent.clone(),
            },
            Context {
                server: "sly".to_owned(),
                handler: Arc::new(Recorded(refused.clone())),
                protocol_version,
                closed: tokio_util::sync::CancellationToken::new(),
            },
        );
        Setup {
            inbound,
            sent,
            refused,
        }
    }

    impl Setup {
        /// What the connection reported to the handler as refused.
        fn refused(&self) -> Vec<Refused> {
            self.refused
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .clone()
        }

        async fn sent(&self) -> Vec<Value> {
            // The refusals are sent from a task of their own.
            for _ in 0..100 {
                tokio::task::yield_now().await;
            }
            self.sent
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .clone()
        }

        async fn send(&mut self, wire: Value) {
            let message: ClientJsonRpcMessage =
                serde_json::from_value(wire).expect("a client message");
            self.inbound.send(message).await.expect("sent");
        }
    }

    fn id_of(message: &ServerJsonRpcMessage) -> Value {
        serde_json::to_value(message).expect("JSON")["id"].clone()
    }

    #[tokio::test]
    async fn a_long_id_is_cut_for_rmcp_and_the_servers_own_goes_back() {
        let own = format!("x-{}", "\u{85}".repeat(1 << 19));
        let cancel = message(
            json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
            "params": {"requestId": own, "reason": "never mind"}}),
        );
        let mut setup = setup(None, vec![elicitation(json!(own)), cancel]);
        let received = setup.inbound.receive().await.expect("passed on");
        let cut = id_of(&received);
        let Value::String(cut) = cut else {
            panic!("a string id: {cut}");
        };
        assert!(cut.chars().count() <= MAX_ID_CHARS, "{}", cut.len());
        assert_eq!(cut, gatehouse_base::cut::cut(&own, MAX_ID_CHARS));
        // The answer goes back under the server's own id.
        setup
            .send(json!({"jsonrpc": "2.0", "id": cut, "result": {"action": "decline"}}))
            .await;
        let sent = setup.sent().await;
        assert_eq!(sent.len(), 1);
        assert_eq!(sent[0]["id"], json!(own));
        // The server's cancellation names the cut id, as rmcp knows it.
        let cancelled = setup.inbound.receive().await.expect("passed on");
        let wire = serde_json::to_value(&cancelled).expect("JSON");
        assert_eq!(wire["params"]["requestId"], json!(cut));
        assert!(lock(&setup.inbound.state).long_ids.is_empty());
        assert!(setup.refused().is_empty(), "nothing refused");
    }

    #[tokio::test]
    async fn an_unsolicited_elicitation_under_2026_07_28_is_refused_here_and_reported() {
        let ping = message(json!({"jsonrpc": "2.0", "id": "p", "method": "ping"}));
        let own = format!("u-{}", "\u{85}".repeat(1 << 19));
        let mut setup = setup(Some("2026-07-28"), vec![elicitation(json!(own)), ping]);
        // The elicitation never reaches rmcp: the next message does.
        let next = setup.inbound.receive().await.expect("the ping");
        assert_eq!(id_of(&next), json!("p"));
        let sent = setup.sent().await;
        assert_eq!(sent.len(), 1, "{sent:?}");
        assert_eq!(sent[0]["id"], json!(own), "under the server's own id");
        assert_eq!(sent[0]["error"]["code"], -32602);
        assert_eq!(sent[0]["error"]["message"], UNSOLICITED_ERROR);
        let refused = setup.refused();
        assert_eq!(refused.len(), 1);
        let refused = &refused[0];
        assert_eq!(refused.server, "sly");
        assert_eq!(refused.mode, "form");
        assert_eq!(refused.reason, UNSOLICITED_REASON);
        assert_eq!(refused.error.code.0, -32602);
        assert_eq!(refused.error.message, UNSOLICITED_ERROR);
        assert_eq!(
            refused.request_id,
            RequestId::String(
                gatehouse_base::cut::cut(&own, MAX_ID_CHARS)
                    .into_owned()
                    .into()
            )
        );
        assert!(lock(&setup.inbound.state).long_ids.is_empty());
    }

    #[tokio::test]
    async fn while_a_request_is_in_flight_the_server_may_ask() {
        let mut setup = setup(
            Some("2026-07-28"),
            vec![
                elicitation(json!(1)),
                message(json!({"jsonrpc": "2.0", "id": 0, "result": {"content": []}})),
                elicitation(json!(2)),
                message(json!({"jsonrpc": "2.0", "id": "p", "method": "ping"})),
            ],
        );
        setup
            .send(json!({"jsonrpc": "2.0", "id": 0, "method": "tools/call",
                "params": {"name": "go"}}))
            .await;
        // Asked during the call: passed on.
        let asked = setup.inbound.receive().await.expect("passed on");
        assert_eq!(id_of(&asked), json!(1));
        // The call's answer, then an elicitation after it: refused.
        let answer = setup.inbound.receive().await.expect("the answer");
        assert_eq!(id_of(&answer), json!(0));
        let next = setup.inbound.receive().await.expect("the ping");
        assert_eq!(id_of(&next), json!("p"));
        let sent = setup.sent().await;
        assert_eq!(sent.len(), 2, "the call, then one refusal: {sent:?}");
        assert_eq!(sent[1]["id"], json!(2));
        assert_eq!(setup.refused().len(), 1);
    }

    #[tokio::test]
    async fn over_http_the_stream_decides_and_older_protocols_pass() {
        // Arrived on the standalone stream while a call is in flight.
        let mut standalone = elicitation(json!(3));
        if let JsonRpcMessage::Request(request) = &mut standalone {
            request
                .request
                .extensions_mut()
                .insert(InboundStreamOrigin::Unassociated);
        }
        let mut setup = setup(Some("2026-07-28"), vec![standalone]);
        setup
            .send(json!({"jsonrpc": "2.0", "id": 0, "method": "tools/call",
                "params": {"name": "go"}}))
            .await;
        assert!(
            setup.inbound.receive().await.is_none(),
            "refused, and no more"
        );
        assert_eq!(setup.refused().len(), 1);

        // Under 2025-11-25 the router decides: passed on.
        let mut older = self::setup(Some("2025-11-25"), vec![elicitation(json!(4))]);
        let passed = older.inbound.receive().await.expect("passed on");
        assert_eq!(id_of(&passed), json!(4));
        assert!(older.refused().is_empty());
    }

    #[tokio::test]
    async fn the_initialize_result_sets_the_protocol() {
        let mut setup = setup(
            None,
            vec![
                message(json!({"jsonrpc": "2.0", "id": 0, "result": {
                    "protocolVersion": "2026-07-28", "capabilities": {},
                    "serverInfo": {"name": "s", "version": "1"}}})),
                elicitation(json!(5)),
            ],
        );
        setup
            .send(
                json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
                "protocolVersion": "2025-11-25", "capabilities": {},
                "clientInfo": {"name": "gatehouse", "version": "0"}}}),
            )
            .await;
        setup.inbound.receive().await.expect("the result");
        assert!(setup.inbound.strict());
        assert!(setup.inbound.receive().await.is_none(), "refused");
        assert_eq!(setup.refused().len(), 1);
    }

    #[tokio::test]
    async fn the_discover_result_sets_the_protocol() {
        // Under the 2026-07-28 discover handshake the version is settled by
        // the discover result: an elicitation right behind it is refused
        // and reported here, not by rmcp's already strict loop.
        let mut setup = setup(
            None,
            vec![
                message(json!({"jsonrpc": "2.0", "id": 0, "result": {
                    "resultType": "complete", "supportedVersions": ["2026-07-28"],
                    "capabilities": {}, "ttlMs": 0, "cacheScope": "private"}})),
                elicitation(json!(6)),
            ],
        );
        setup
            .send(json!({"jsonrpc": "2.0", "id": 0, "method": "server/discover", "params": {}}))
            .await;
        setup.inbound.receive().await.expect("the result");
        assert!(setup.inbound.strict());
        assert!(setup.inbound.receive().await.is_none(), "refused");
        assert_eq!(setup.refused().len(), 1);
    }

    /// The arrival a received elicitation carries.
    fn arrival_of(message: &RxJsonRpcMessage<RoleClient>) -> WireArrival {
        match message {
            JsonRpcMessage::Request(request) => request
                .request
                .extensions()
                .get::<WireArrival>()
                .cloned()
                .expect("an elicitation carries its arrival"),
            other => panic!("not a request: {other:?}"),
        }
    }

    /// Another request under the same id.
    fn other_elicitation(id: Value) -> ServerJsonRpcMessage {
        message(
            json!({"jsonrpc": "2.0", "id": id, "method": "elicitation/create", "params": {
            "message": "Something else?",
            "requestedSchema": {"type": "object", "properties": {}}}}),
        )
    }

    /// Two requests under one id, the second before the first is answered:
    /// told in wire order, whichever task rmcp starts first (the order that
    /// made a form wait for the person after its id's reuse was answered).
    /// The same request delivered again (a resumed HTTP stream replays it)
    /// is no reuse: it never reaches rmcp, and the first's answer answers it.
    #[tokio::test]
    async fn a_reused_id_is_told_in_the_order_the_requests_came() {
        let mut setup = setup(
            None,
            vec![
                elicitation(json!("dup")),
                other_elicitation(json!("dup")),
                other_elicitation(json!("dup")),
                elicitation(json!("dup")),
            ],
        );
        let first = arrival_of(&setup.inbound.receive().await.expect("first"));
        assert!(!first.reused && !first.superseded.is_cancelled());
        // The second; its redelivery is skipped.
        let second = arrival_of(&setup.inbound.receive().await.expect("second"));
        assert!(
            second.reused,
            "the second came while the first was unanswered"
        );
        assert!(
            first.superseded.is_cancelled(),
            "the first is told it was superseded"
        );
        assert!(!second.superseded.is_cancelled());
        // Once the id is answered, the next request under it is new.
        setup
            .send(json!({"jsonrpc": "2.0", "id": "dup", "result": {"action": "cancel"}}))
            .await;
        let third = arrival_of(&setup.inbound.receive().await.expect("third"));
        assert!(!third.reused, "the id was answered before it came");
        assert!(!second.superseded.is_cancelled());
    }
}
