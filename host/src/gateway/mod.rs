//! The gateway: gatehouse as an MCP server in front of the MCP runtime. It
//! lists the aggregated tools under qualified names, forwards `tools/call`
//! to the right server, tells the upstream client when the catalog changes,
//! and puts what the chain defers in front of the person through the
//! upstream client, when that client declared the mode.

use std::sync::{Arc, Mutex};

use futures::future::BoxFuture;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ElicitRequestParams,
    ElicitResult, ErrorData, Implementation, ListToolsResult, PaginatedRequestParams,
    ProtocolVersion, ServerCapabilities, ServerConfig,
};
use rmcp::service::{NotificationContext, Peer, RequestContext};
use rmcp::{RoleServer, ServerHandler};

use crate::mcp::connection::IncomingElicitation;
use crate::mcp::runtime::{McpRuntime, RuntimeError};
use crate::router::Person;

/// The person behind the upstream client that connected most recently.
#[derive(Default)]
pub struct Upstream {
    peer: Mutex<Option<Peer<RoleServer>>>,
}

impl std::fmt::Debug for Upstream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Upstream").finish_non_exhaustive()
    }
}

impl Upstream {
    fn set(&self, peer: Peer<RoleServer>) {
        if let Ok(mut slot) = self.peer.lock() {
            *slot = Some(peer);
        }
    }

    fn peer(&self) -> Option<Peer<RoleServer>> {
        self.peer.lock().ok().and_then(|slot| slot.clone())
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
        Some(Box::pin(async move {
            peer.create_elicitation(params).await.map_err(|error| {
                ErrorData::internal_error(format!("the upstream client failed: {error}"), None)
            })
        }))
    }
}

/// The MCP server gatehouse presents upstream.
#[derive(Clone)]
pub struct Gateway {
    runtime: McpRuntime,
    upstream: Arc<Upstream>,
}

impl Gateway {
    /// A gateway over `runtime`; `upstream` must be the router's [`Person`].
    pub fn new(runtime: McpRuntime, upstream: Arc<Upstream>) -> Self {
        Gateway { runtime, upstream }
    }
}

impl ServerHandler for Gateway {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_tool_list_changed()
                .build(),
        )
        .with_protocol_version(ProtocolVersion::LATEST_WITH_INITIALIZE)
        .with_server_info(Implementation::new("gatehouse", env!("CARGO_PKG_VERSION")))
    }

    /// Elicitations go upstream as server-to-client requests, which need a
    /// protocol version with the `initialize` handshake.
    fn supported_protocol_versions(&self) -> std::borrow::Cow<'static, [ProtocolVersion]> {
        std::borrow::Cow::Borrowed(ProtocolVersion::known_up_to(
            &ProtocolVersion::LATEST_WITH_INITIALIZE,
        ))
    }

    async fn on_initialized(&self, context: NotificationContext<RoleServer>) {
        self.upstream.set(context.peer.clone());
        let mut changes = self.runtime.catalog_changes();
        changes.borrow_and_update();
        let peer = context.peer;
        tokio::spawn(async move {
            while changes.changed().await.is_ok() {
                if peer.notify_tool_list_changed().await.is_err() {
                    break;
                }
            }
        });
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        if let Err(error) = self.runtime.refresh_if_dirty().await {
            tracing::warn!("refresh before tools/list failed: {error}");
        }
        let tools = self
            .runtime
            .snapshot()
            .tools()
            .iter()
            .map(|entry| {
                let mut tool = entry.tool.clone();
                tool.name = entry.qualified.clone().into();
                tool
            })
            .collect();
        Ok(ListToolsResult::with_all_items(tools))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        match self
            .runtime
            .call_tool(&request.name, request.arguments)
            .await
        {
            Ok(result) => Ok(result.into()),
            Err(RuntimeError::UnknownTool(name)) => Err(ErrorData::invalid_params(
                format!("no tool named `{name}`"),
                None,
            )),
            Err(error) => {
                Ok(CallToolResult::error(vec![ContentBlock::text(error.to_string())]).into())
            }
        }
    }
}
