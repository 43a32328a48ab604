//! The person: the upstream client that connected most recently. What the
//! chain defers is put in front of them through that client, in a mode it
//! declared; the server's `notifications/elicitation/complete` for a URL the
//! person was shown is passed on.

use std::collections::VecDeque;
use std::sync::Mutex;

use futures::future::BoxFuture;
use rmcp::RoleServer;
use rmcp::model::{
    CustomNotification, ElicitRequestParams, ElicitResult, ErrorData, ServerNotification,
};
use rmcp::service::Peer;

use crate::mcp::connection::{ELICITATION_COMPLETE, IncomingElicitation};
use crate::router::Person;

/// How many URL elicitations shown upstream are remembered for their
/// completion notice; older ones are forgotten (their notice is ignored).
pub const REMEMBERED_URL_ELICITATIONS: usize = 1024;

/// The person behind the upstream client.
#[derive(Default)]
pub struct Upstream {
    peer: Mutex<Option<Peer<RoleServer>>>,
    shown_urls: Mutex<VecDeque<(String, String)>>,
}

impl std::fmt::Debug for Upstream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Upstream").finish_non_exhaustive()
    }
}

impl Upstream {
    /// Makes `peer` the person's client (the latest to connect wins).
    pub(crate) fn set(&self, peer: Peer<RoleServer>) {
        if let Ok(mut slot) = self.peer.lock() {
            *slot = Some(peer);
        }
    }

    fn peer(&self) -> Option<Peer<RoleServer>> {
        self.peer.lock().ok().and_then(|slot| slot.clone())
    }

    fn remember_url(&self, server: &str, elicitation_id: &str) {
        if let Ok(mut shown) = self.shown_urls.lock() {
            if shown.len() >= REMEMBERED_URL_ELICITATIONS {
                shown.pop_front();
            }
            shown.push_back((server.to_owned(), elicitation_id.to_owned()));
        }
    }

    fn forget_url(&self, server: &str, elicitation_id: &str) -> bool {
        let Ok(mut shown) = self.shown_urls.lock() else {
            return false;
        };
        match shown
            .iter()
            .position(|(owner, id)| owner == server && id == elicitation_id)
        {
            Some(index) => shown.remove(index).is_some(),
            None => false,
        }
    }
}

impl Person for Upstream {
    fn ask(
        &self,
        elicitation: &IncomingElicitation,
    ) -> Option<BoxFuture<'static, Result<ElicitResult, ErrorData>>> {
        let peer = self.peer()?;
        let params: ElicitRequestParams =
            serde_json::from_value(elicitation.params.clone()).ok()?;
        let mode = match &params {
            ElicitRequestParams::UrlElicitationParams { .. } => rmcp::service::ElicitationMode::Url,
            _ => rmcp::service::ElicitationMode::Form,
        };
        if !peer.supported_elicitation_modes().contains(&mode) {
            return None;
        }
        if let ElicitRequestParams::UrlElicitationParams { elicitation_id, .. } = &params {
            self.remember_url(&elicitation.server, elicitation_id);
        }
        Some(Box::pin(async move {
            peer.create_elicitation(params).await.map_err(|error| {
                ErrorData::internal_error(format!("the upstream client failed: {error}"), None)
            })
        }))
    }

    fn completed(&self, server: &str, elicitation_id: &str) {
        if !self.forget_url(server, elicitation_id) {
            tracing::debug!(
                server,
                elicitation_id,
                "completion of a URL elicitation the person was not shown; not forwarded"
            );
            return;
        }
        let (Some(peer), Ok(runtime)) = (self.peer(), tokio::runtime::Handle::try_current()) else {
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
                    crate::escape::Escaped(&error.to_string())
                );
            }
        });
    }
}
