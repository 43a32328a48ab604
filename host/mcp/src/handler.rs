//! What a connection hands its owner: every elicitation its server sends
//! (pushed `elicitation/create` requests and 2026-07-28 input requests
//! alike, tagged with their [`Delivery`]) goes to an [`ElicitationHandler`],
//! and `notifications/tools/list_changed` to a callback; the two travel
//! together as [`ConnectionHooks`]. The gateway's router
//! (`gatehouse_gateway::router::Router`) is the handler of every connection
//! the gateway makes; [`DeclineAll`] is the safe default. An elicitation the
//! connection refuses itself, before any handler (one sent outside any
//! request of gatehouse's under protocol 2026-07-28), is reported to the
//! handler as a [`Refused`] ([`ElicitationHandler::refused`]), so its owner
//! can audit it beside what it decides.

use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use rmcp::model::{ElicitResult, ElicitationAction, ErrorData, RequestId};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

/// An elicitation a server sent, as on the wire.
#[derive(Debug, Clone)]
pub struct IncomingElicitation {
    /// The configured name of the server.
    pub server: String,
    /// The JSON-RPC id of the server's request; one longer than 256
    /// characters arrives cut as the audit records it (its start and the
    /// sha256 of the whole: `connection::inbound`), and the answer goes back
    /// under the server's own.
    pub request_id: RequestId,
    /// The negotiated protocol version.
    pub protocol_version: String,
    /// The request's `params`, `_meta` included, exactly as sent.
    pub params: Value,
    /// Cancelled when the server cancels the request or disconnects.
    pub cancelled: CancellationToken,
    /// Cancelled the moment the server's connection ends (its process
    /// exited, its stdout closed, its HTTP transport ended): what waits for
    /// the person is given up at once, rather than when rmcp's own shutdown
    /// of the connection gets round to `cancelled` (up to 5 s later).
    pub server_gone: CancellationToken,
    /// Where it stands among the server's requests under the same id, in
    /// the order they came on the wire (a pushed request only).
    pub arrival: WireArrival,
    /// How it arrived.
    pub delivery: Delivery,
    /// The upstream call the transport says it was sent under, when it says
    /// ([`crate::on_behalf::current_call`]: a 2026-07-28 input request arrives inside
    /// the call the gateway forwarded); `None` leaves the router to bind it
    /// by what is in flight.
    pub call: Option<crate::on_behalf::CallKey>,
}

/// A pushed request's place among the server's requests that share its id,
/// decided by the connection's transport in the order they came on the
/// wire (the tasks rmcp hands them to may start in any order): whether an
/// earlier request under its id was still unanswered when it came, and a
/// token cancelled when a later one comes while it is.
#[derive(Debug, Clone, Default)]
pub struct WireArrival {
    /// It came while an earlier request with its id was unanswered.
    pub reused: bool,
    /// Cancelled when a later request with its id comes before it is
    /// answered.
    pub superseded: CancellationToken,
}

/// How an elicitation reached the host.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Delivery {
    /// A pushed `elicitation/create` request (protocols up to 2025-11-25);
    /// `request_id` is its JSON-RPC id, unique among the server's requests
    /// in flight.
    Request,
    /// An input request inside a tool, prompt or resource result (protocol
    /// 2026-07-28); `request_id` is its key, unique only within that one
    /// result.
    InputRequest,
}

/// The notification a server sends when a URL-mode elicitation finished
/// out of band.
pub const ELICITATION_COMPLETE: &str = "notifications/elicitation/complete";

/// Decides the elicitations servers send. The gateway plugs its router in
/// here; [`DeclineAll`] is the safe default.
pub trait ElicitationHandler: Send + Sync + 'static {
    /// Answers one elicitation. An `Err` is sent to the server as a JSON-RPC
    /// error (for example -32602 for an undeclared mode).
    /// The handler is asked through the `Arc` the connection shares, so
    /// that the future can own it.
    fn elicit(
        self: Arc<Self>,
        elicitation: IncomingElicitation,
    ) -> BoxFuture<'static, Result<ElicitResult, ErrorData>>;

    /// The server sent `notifications/elicitation/complete` for the URL-mode
    /// elicitation `elicitation_id`. The default ignores it (as MCP asks of
    /// an id the client does not know).
    fn completed(&self, server: &str, elicitation_id: &str) {
        let _ = (server, elicitation_id);
    }

    /// The connection refused an elicitation before it reached [`elicit`]
    /// (sent outside any request of gatehouse's, which protocol 2026-07-28
    /// forbids: `connection::inbound`) and has already answered the server
    /// with `refused.error`. A handler that audits what it decides records
    /// it too, so that every elicitation still gets its one line. Called on
    /// the connection's task: a handler that writes to a disk it waits for
    /// does so on a blocking thread. The default only logs it at debug.
    ///
    /// [`elicit`]: ElicitationHandler::elicit
    fn refused(&self, refused: Refused) {
        tracing::debug!(
            server = %gatehouse_base::escape::Escaped(&refused.server),
            "an elicitation refused by the connection, with no handler recording it"
        );
    }
}

/// An elicitation a connection refused itself, before any handler
/// ([`ElicitationHandler::refused`]).
#[derive(Debug, Clone)]
pub struct Refused {
    /// The configured name of the server.
    pub server: String,
    /// The request's id as rmcp, the router and the logs see it (one longer
    /// than 256 characters cut, as for [`IncomingElicitation::request_id`]).
    pub request_id: RequestId,
    /// The elicitation's mode as it claimed it: `form` when it named none,
    /// `invalid` when its `mode` was not a string.
    pub mode: String,
    /// Why it was refused, for the record (e.g.
    /// `connection::inbound::UNSOLICITED_REASON`).
    pub reason: &'static str,
    /// The JSON-RPC error the server was answered with.
    pub error: ErrorData,
    /// From its arrival to its refusal.
    pub latency: Duration,
}

/// Declines every elicitation.
#[derive(Debug, Clone, Copy, Default)]
pub struct DeclineAll;

/// A shared handler, as its owner keeps it (the gateway's router).
impl<T: ElicitationHandler + ?Sized> ElicitationHandler for Arc<T> {
    fn elicit(
        self: Arc<Self>,
        elicitation: IncomingElicitation,
    ) -> BoxFuture<'static, Result<ElicitResult, ErrorData>> {
        T::elicit(Arc::clone(&*self), elicitation)
    }

    fn completed(&self, server: &str, elicitation_id: &str) {
        T::completed(self, server, elicitation_id);
    }

    fn refused(&self, refused: Refused) {
        T::refused(self, refused);
    }
}

impl ElicitationHandler for DeclineAll {
    fn elicit(
        self: Arc<Self>,
        _: IncomingElicitation,
    ) -> BoxFuture<'static, Result<ElicitResult, ErrorData>> {
        Box::pin(async { Ok(ElicitResult::new(ElicitationAction::Decline)) })
    }
}

/// What a connection tells its owner.
#[derive(Clone)]
pub struct ConnectionHooks {
    /// Where elicitations go.
    pub elicitation: Arc<dyn ElicitationHandler>,
    /// Called with the server's name on `notifications/tools/list_changed`.
    pub on_tools_changed: Arc<dyn Fn(&str) + Send + Sync>,
}

impl Default for ConnectionHooks {
    fn default() -> Self {
        ConnectionHooks {
            elicitation: Arc::new(DeclineAll),
            on_tools_changed: Arc::new(|_| {}),
        }
    }
}
