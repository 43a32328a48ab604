//! The gateway: gatehouse as an MCP server in front of the MCP runtime. It
//! lists the aggregated tools under qualified names and forwards
//! `tools/call` to the right server; forwards resources and prompts
//! ([`forward`]); tells the upstream client when the catalog changes; and
//! puts what the chain defers in front of the person ([`upstream`]).

mod forward;
mod upstream;

use std::sync::Arc;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ErrorData,
    GetPromptRequestParams, GetPromptResponse, Implementation, ListPromptsResult,
    ListResourceTemplatesResult, ListResourcesResult, ListToolsResult, PaginatedRequestParams,
    ProtocolVersion, ReadResourceRequestParams, ReadResourceResponse, ServerCapabilities,
    ServerConfig,
};
use rmcp::service::{NotificationContext, RequestContext};
use rmcp::{RoleServer, ServerHandler};

pub use forward::Forwarder;
pub use upstream::{REMEMBERED_URL_ELICITATIONS, Upstream};

use crate::mcp::runtime::{McpRuntime, RuntimeError};

/// The MCP server gatehouse presents upstream.
#[derive(Clone)]
pub struct Gateway {
    runtime: McpRuntime,
    upstream: Arc<Upstream>,
    forwarder: Forwarder,
}

impl Gateway {
    /// A gateway over `runtime`; `upstream` must be the router's [`Person`](crate::router::Person).
    pub fn new(runtime: McpRuntime, upstream: Arc<Upstream>) -> Self {
        Gateway {
            runtime,
            upstream,
            forwarder: Forwarder::default(),
        }
    }

    async fn refreshed(&self) -> Arc<crate::mcp::runtime::Snapshot> {
        if let Err(error) = self.runtime.refresh_if_dirty().await {
            tracing::warn!(
                "refresh failed; serving the last catalog: {}",
                crate::escape::Escaped(&error.to_string())
            );
        }
        self.runtime.snapshot()
    }
}

impl ServerHandler for Gateway {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_tool_list_changed()
                .enable_resources()
                .enable_prompts()
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
        let tools = self
            .refreshed()
            .await
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

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        let snapshot = self.refreshed().await;
        Ok(ListResourcesResult::with_all_items(
            self.forwarder.list_resources(&snapshot).await,
        ))
    }

    async fn list_resource_templates(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, ErrorData> {
        let snapshot = self.refreshed().await;
        Ok(ListResourceTemplatesResult::with_all_items(
            self.forwarder.list_resource_templates(&snapshot).await,
        ))
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        let snapshot = self.refreshed().await;
        self.forwarder
            .read_resource(&snapshot, &request.uri)
            .await
            .map(Into::into)
    }

    async fn list_prompts(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, ErrorData> {
        let snapshot = self.refreshed().await;
        Ok(ListPromptsResult::with_all_items(
            self.forwarder.list_prompts(&snapshot).await,
        ))
    }

    async fn get_prompt(
        &self,
        request: GetPromptRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, ErrorData> {
        let snapshot = self.refreshed().await;
        self.forwarder
            .get_prompt(&snapshot, &request.name, request.arguments)
            .await
            .map(Into::into)
    }
}
