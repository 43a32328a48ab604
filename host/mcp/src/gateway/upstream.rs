//! The person: whoever made the upstream request a server is answering.
//! What the chain defers is put in front of that session's client, in a
//! mode it declared, naming the server that asks; the server's
//! `notifications/elicitation/complete` for a URL the person was shown is
//! passed on to the session that was shown it.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use futures::future::BoxFuture;
use rmcp::RoleServer;
use rmcp::model::{
    CustomNotification, ElicitRequestParams, ElicitResult, ErrorData, ServerNotification,
};
use rmcp::service::Peer;
use serde_json::Value;

use crate::calls::SessionId;
use crate::handler::{ELICITATION_COMPLETE, IncomingElicitation};
use crate::router::{NotAsked, Person};
use gatehouse_core::elicitation::strip_transport_keys;

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
}

/// The people behind the upstream sessions.
pub struct Upstream {
    sessions: Mutex<HashMap<SessionId, Session>>,
    shown_urls: Mutex<VecDeque<(String, String, SessionId)>>,
    max_pending_per_session: usize,
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
        }
    }

    /// Registers `peer` as the client of `session`, and forgets sessions
    /// whose transport has closed.
    pub(crate) fn connect(&self, session: SessionId, peer: Peer<RoleServer>) {
        if let Ok(mut sessions) = self.sessions.lock() {
            sessions.retain(|_, known| !known.peer.is_transport_closed());
            sessions.insert(
                session,
                Session {
                    peer,
                    pending: Arc::new(AtomicUsize::new(0)),
                },
            );
        }
    }

    /// How many upstream sessions are connected.
    pub fn sessions(&self) -> usize {
        self.sessions
            .lock()
            .map(|sessions| {
                sessions
                    .values()
                    .filter(|known| !known.peer.is_transport_closed())
                    .count()
            })
            .unwrap_or(0)
    }

    fn peer(&self, session: SessionId) -> Option<(Peer<RoleServer>, Arc<AtomicUsize>)> {
        let sessions = self.sessions.lock().ok()?;
        let known = sessions.get(&session)?;
        (!known.peer.is_transport_closed()).then(|| (known.peer.clone(), known.pending.clone()))
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
/// message prefixed with the server's name, so that one server cannot pose
/// as another.
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
        *message = format!("[{server}] {message}");
    }
    serde_json::from_value(params).map_err(|error| NotAsked::Unforwardable(error.to_string()))
}

impl Person for Upstream {
    fn ask(
        &self,
        elicitation: &IncomingElicitation,
        session: Option<SessionId>,
    ) -> Result<BoxFuture<'static, Result<ElicitResult, ErrorData>>, NotAsked> {
        // Never a guess: no session, no person.
        let session = session.ok_or(NotAsked::NoClient)?;
        let (peer, pending) = self.peer(session).ok_or(NotAsked::NoClient)?;
        let params = forwarded_params(&elicitation.server, &elicitation.params)?;
        let mode = match &params {
            ElicitRequestParams::UrlElicitationParams { .. } => rmcp::service::ElicitationMode::Url,
            _ => rmcp::service::ElicitationMode::Form,
        };
        if !peer.supported_elicitation_modes().contains(&mode) {
            return Err(NotAsked::ModeNotDeclared(match mode {
                rmcp::service::ElicitationMode::Url => "url",
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
        Ok(Box::pin(async move {
            let _slot = slot;
            peer.create_elicitation(params).await.map_err(|error| {
                ErrorData::internal_error(format!("the upstream client failed: {error}"), None)
            })
        }))
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
        let (Some((peer, _)), Ok(runtime)) =
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
                    gatehouse_core::escape::Escaped(&error.to_string())
                );
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
    fn params_that_are_not_an_object_are_not_forwarded() {
        assert!(matches!(
            forwarded_params("git", &serde_json::json!("ask")),
            Err(NotAsked::Unforwardable(_))
        ));
    }
}
