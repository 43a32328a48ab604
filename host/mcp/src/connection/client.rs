//! The rmcp client side of a connection: what gatehouse declares to the
//! server (form and URL elicitations; a pinned protocol version), and how
//! what the server sends reaches the connection's [`ConnectionHooks`]:
//! `elicitation/create` (typed by rmcp, or refused by its decoder and
//! rescued: [`crate::rescue`]) to the elicitation handler with `_meta` put
//! back, `notifications/elicitation/complete` to its `completed`, and
//! `notifications/tools/list_changed` to `on_tools_changed` (marking the
//! tools stale).
//!
//! What arrives here has passed `inbound` first: a server's request id
//! longer than 256 characters is already the cut the audit records
//! (`context.id`), and a request sent outside any request of gatehouse's
//! under protocol 2026-07-28 never arrives (refused there, reported to the
//! handler to be audited, and logged within a budget, where rmcp would have
//! refused it unaudited).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use rmcp::model::{
    ClientCapabilities, ClientConfig, CustomNotification, CustomRequest, CustomResult,
    ElicitRequestParams, ElicitResult, ElicitationCapability, ErrorCode, ErrorData,
    FormElicitationCapability, Implementation, ProtocolVersion, UrlElicitationCapability,
};
use rmcp::service::{NotificationContext, RequestContext};
use rmcp::{ClientHandler, RoleClient};
use serde_json::Value;

use crate::ELICITATION_METHOD;
use crate::handler::{ConnectionHooks, Delivery, ELICITATION_COMPLETE, IncomingElicitation};
use crate::rescue::unwrap_params;
use crate::server_config::Lifecycle;
use gatehouse_base::escape::Escaped;

/// The rmcp client side of a connection.
pub(super) struct ClientSide {
    pub(super) server: String,
    pub(super) lifecycle: Lifecycle,
    pub(super) hooks: ConnectionHooks,
    pub(super) protocol_version: Arc<std::sync::OnceLock<String>>,
    pub(super) tools_stale: Arc<AtomicBool>,
    pub(super) sent_under: super::sent_under::SentUnder,
    /// Cancelled when the transport ends (`inbound`).
    pub(super) closed: tokio_util::sync::CancellationToken,
}

impl ClientSide {
    /// The wire params with `_meta` (which rmcp moves to the context) put
    /// back, and the request's identity.
    fn incoming(
        &self,
        mut params: Value,
        context: &RequestContext<RoleClient>,
    ) -> IncomingElicitation {
        let meta = serde_json::to_value(&context.meta).unwrap_or(Value::Null);
        if let (Some(object), Value::Object(meta)) = (params.as_object_mut(), meta)
            && !meta.is_empty()
        {
            object.insert("_meta".to_owned(), Value::Object(meta));
        }
        IncomingElicitation {
            server: self.server.clone(),
            request_id: context.id.clone(),
            protocol_version: self.protocol_version.get().cloned().unwrap_or_default(),
            params,
            cancelled: context.ct.clone(),
            server_gone: self.closed.clone(),
            arrival: context
                .extensions
                .get::<crate::handler::WireArrival>()
                .cloned()
                .unwrap_or_default(),
            delivery: self.delivery(),
            // An input request is fulfilled inside the call that got it, so
            // the gateway's call is current here; a pushed request's handler
            // runs in a task of its own, where nothing is, but over HTTP the
            // stream it came on names the request it was sent under.
            call: crate::on_behalf::current_call()
                .or_else(|| self.sent_under.call_for(&context.extensions)),
        }
    }

    /// 2026-07-28 has no server-to-client requests: an elicitation there is
    /// an input request that rmcp fulfils while driving a call.
    fn delivery(&self) -> Delivery {
        match self.protocol_version.get() {
            Some(version) if version.as_str() >= DISCOVER_VERSION => Delivery::InputRequest,
            _ => Delivery::Request,
        }
    }
}

const DISCOVER_VERSION: &str = crate::server_config::DISCOVER_PROTOCOL_VERSION;

impl ClientHandler for ClientSide {
    fn get_info(&self) -> ClientConfig {
        let mut capabilities = ClientCapabilities::default();
        capabilities.elicitation = Some(
            ElicitationCapability::new()
                .with_form(FormElicitationCapability::default())
                .with_url(UrlElicitationCapability::new()),
        );
        let config = ClientConfig::new(
            capabilities,
            Implementation::new("gatehouse", env!("CARGO_PKG_VERSION")),
        );
        match &self.lifecycle {
            Lifecycle::Pinned(version) => config.with_protocol_version(
                serde_json::from_value(Value::String(version.clone()))
                    .unwrap_or(ProtocolVersion::LATEST_WITH_INITIALIZE),
            ),
            _ => config,
        }
    }

    /// `notifications/elicitation/complete` is not an rmcp type: it arrives
    /// here.
    fn on_custom_notification(
        &self,
        notification: CustomNotification,
        _context: NotificationContext<RoleClient>,
    ) -> impl Future<Output = ()> + Send + '_ {
        if notification.method == ELICITATION_COMPLETE {
            match notification
                .params
                .as_ref()
                .and_then(|params| params.get("elicitationId"))
                .and_then(Value::as_str)
            {
                Some(id) => self.hooks.elicitation.completed(&self.server, id),
                None => tracing::warn!(
                    server = %self.server,
                    "{ELICITATION_COMPLETE} without a string `elicitationId`; ignored"
                ),
            }
        } else {
            tracing::debug!(server = %self.server, method = %Escaped(&notification.method), "unknown notification ignored");
        }
        std::future::ready(())
    }

    fn create_elicitation(
        &self,
        request: ElicitRequestParams,
        context: RequestContext<RoleClient>,
    ) -> impl Future<Output = Result<ElicitResult, ErrorData>> + Send + '_ {
        let params = serde_json::to_value(&request).unwrap_or(Value::Null);
        self.hooks
            .elicitation
            .clone()
            .elicit(self.incoming(params, &context))
    }

    /// rmcp cannot type an `elicitation/create` whose schema MCP forbids
    /// (nested objects, say) and hands it here; route it all the same, so the
    /// router refuses it with -32602 and audits it.
    fn on_custom_request(
        &self,
        request: CustomRequest,
        context: RequestContext<RoleClient>,
    ) -> impl Future<Output = Result<CustomResult, ErrorData>> + Send + '_ {
        let elicitation = (request.method == ELICITATION_METHOD).then(|| {
            self.incoming(
                unwrap_params(request.params.unwrap_or(Value::Null)),
                &context,
            )
        });
        let method = request.method;
        async move {
            let Some(elicitation) = elicitation else {
                return Err(ErrorData::new(ErrorCode::METHOD_NOT_FOUND, method, None));
            };
            let result = self.hooks.elicitation.clone().elicit(elicitation).await?;
            serde_json::to_value(result)
                .map(CustomResult::new)
                .map_err(|error| ErrorData::internal_error(error.to_string(), None))
        }
    }

    fn on_tool_list_changed(
        &self,
        _context: NotificationContext<RoleClient>,
    ) -> impl Future<Output = ()> + Send + '_ {
        self.tools_stale.store(true, Ordering::SeqCst);
        (self.hooks.on_tools_changed)(&self.server);
        std::future::ready(())
    }
}
