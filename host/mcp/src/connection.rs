//! One connection to one MCP server, over stdio or streamable HTTP, through
//! rmcp: start it within its startup timeout, list its tools (filtered by
//! `enabled_tools` / `disabled_tools`), call them within the tool timeout,
//! hand every elicitation it sends to an [`ElicitationHandler`], and report
//! `notifications/tools/list_changed`.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use futures::future::BoxFuture;
use rmcp::model::{
    CallToolRequestParams, CallToolResult, ClientCapabilities, ClientConfig, CustomNotification,
    CustomRequest, CustomResult, ElicitRequestParams, ElicitResult, ElicitationAction,
    ElicitationCapability, ErrorCode, ErrorData, FormElicitationCapability, GetPromptRequestParams,
    GetPromptResult, Implementation, JsonObject, Prompt, ProtocolVersion,
    ReadResourceRequestParams, ReadResourceResult, RequestId, Resource, ResourceTemplate,
    ServerCapabilities, Tool, UrlElicitationCapability,
};
use rmcp::service::{
    ClientLifecycleMode, ClientServiceExt, NotificationContext, RequestContext, RunningService,
};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::{ClientHandler, RoleClient};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use super::ELICITATION_METHOD;
use crate::rescue::{RescuingHttpClient, unwrap_params};
use crate::server_config::{Lifecycle, ServerConfig, Transport};
use crate::stdio::StdioServer;
use gatehouse_core::escape::Escaped;

/// Host environment variables every stdio server gets (besides its own
/// `env` and `env_vars`); everything else in the host's environment stays
/// out.
pub const BASE_ENV_VARS: &[&str] = &[
    "HOME", "PATH", "USER", "LOGNAME", "SHELL", "LANG", "TERM", "TMPDIR",
];

/// An elicitation a server sent, as on the wire.
#[derive(Debug, Clone)]
pub struct IncomingElicitation {
    /// The configured name of the server.
    pub server: String,
    /// The JSON-RPC id of the server's request.
    pub request_id: RequestId,
    /// The negotiated protocol version.
    pub protocol_version: String,
    /// The request's `params`, `_meta` included, exactly as sent.
    pub params: Value,
    /// Cancelled when the server cancels the request or disconnects.
    pub cancelled: CancellationToken,
    /// How it arrived.
    pub delivery: Delivery,
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
    fn elicit(
        &self,
        elicitation: IncomingElicitation,
    ) -> BoxFuture<'static, Result<ElicitResult, ErrorData>>;

    /// The server sent `notifications/elicitation/complete` for the URL-mode
    /// elicitation `elicitation_id`. The default ignores it (as MCP asks of
    /// an id the client does not know).
    fn completed(&self, server: &str, elicitation_id: &str) {
        let _ = (server, elicitation_id);
    }
}

/// Declines every elicitation.
#[derive(Debug, Clone, Copy, Default)]
pub struct DeclineAll;

impl ElicitationHandler for DeclineAll {
    fn elicit(
        &self,
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

/// Why a server could not be reached or used. Each names the server.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    /// The configuration cannot be turned into a transport.
    #[error("mcp server `{server}`: {message}")]
    Config {
        /// The server.
        server: String,
        /// What is wrong.
        message: String,
    },
    /// The process could not be started.
    #[error("mcp server `{server}`: cannot start `{command}`: {source}")]
    Spawn {
        /// The server.
        server: String,
        /// The program.
        command: String,
        /// The OS error.
        source: std::io::Error,
    },
    /// It did not finish `initialize` in time.
    #[error("mcp server `{server}`: did not start within {timeout:?} (startup_timeout_sec)")]
    StartupTimeout {
        /// The server.
        server: String,
        /// The limit.
        timeout: Duration,
    },
    /// `initialize` failed.
    #[error("mcp server `{server}`: initialization failed: {message}")]
    Handshake {
        /// The server.
        server: String,
        /// What went wrong.
        message: String,
    },
    /// A request failed.
    #[error("mcp server `{server}`: {request} failed: {message}")]
    Request {
        /// The server.
        server: String,
        /// The request.
        request: &'static str,
        /// What went wrong.
        message: String,
    },
    /// The server answered the request with a JSON-RPC error.
    #[error("mcp server `{server}`: {request} refused: {} ({})", error.message, error.code.0)]
    Refused {
        /// The server.
        server: String,
        /// The request.
        request: &'static str,
        /// The server's error, as sent.
        error: ErrorData,
    },
    /// A tool call ran past `tool_timeout_sec`.
    #[error(
        "mcp server `{server}`: tool `{tool}` did not answer within {timeout:?} (tool_timeout_sec)"
    )]
    ToolTimeout {
        /// The server.
        server: String,
        /// The tool.
        tool: String,
        /// The limit.
        timeout: Duration,
    },
}

impl ConnectError {
    /// The server the error is about.
    pub fn server(&self) -> &str {
        match self {
            ConnectError::Config { server, .. }
            | ConnectError::Spawn { server, .. }
            | ConnectError::StartupTimeout { server, .. }
            | ConnectError::Handshake { server, .. }
            | ConnectError::Request { server, .. }
            | ConnectError::Refused { server, .. }
            | ConnectError::ToolTimeout { server, .. } => server,
        }
    }
}

/// The rmcp client side of a connection.
struct ClientSide {
    server: String,
    lifecycle: Lifecycle,
    hooks: ConnectionHooks,
    protocol_version: Arc<std::sync::OnceLock<String>>,
    tools_stale: Arc<AtomicBool>,
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
            delivery: self.delivery(),
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
            let result = self.hooks.elicitation.elicit(elicitation).await?;
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

/// A digest of the credentials a server's configuration pulls from the
/// environment (bearer token, header variables, passed-through variables),
/// so that a changed credential reconnects the server.
pub fn credential_fingerprint(config: &ServerConfig) -> String {
    use sha2::{Digest, Sha256};
    let variables: Vec<&str> = match &config.transport {
        Transport::Stdio { env_vars, .. } => env_vars.iter().map(String::as_str).collect(),
        Transport::Http {
            bearer_token_env_var,
            env_headers,
            ..
        } => bearer_token_env_var
            .iter()
            .chain(env_headers.values())
            .map(String::as_str)
            .collect(),
    };
    let mut hasher = Sha256::new();
    for variable in variables {
        hasher.update(variable.as_bytes());
        hasher.update([0]);
        if let Some(value) = std::env::var_os(variable) {
            hasher.update(value.as_encoded_bytes());
        }
        hasher.update([0]);
    }
    hex::encode(hasher.finalize())
}

/// A live connection to one server.
pub struct Connection {
    config: ServerConfig,
    credentials: String,
    service: RunningService<RoleClient, ClientSide>,
    protocol_version: String,
    tools_stale: Arc<AtomicBool>,
}

impl std::fmt::Debug for Connection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connection")
            .field("server", &self.config.name)
            .field("protocol_version", &self.protocol_version)
            .finish_non_exhaustive()
    }
}

impl Connection {
    /// Starts the server and completes `initialize` within its startup
    /// timeout.
    pub async fn connect(
        config: ServerConfig,
        hooks: ConnectionHooks,
    ) -> Result<Connection, ConnectError> {
        let server = config.name.clone();
        let credentials = credential_fingerprint(&config);
        let protocol_version = Arc::new(std::sync::OnceLock::new());
        let tools_stale = Arc::new(AtomicBool::new(false));
        let client = ClientSide {
            server: server.clone(),
            lifecycle: config.lifecycle.clone(),
            hooks,
            protocol_version: protocol_version.clone(),
            tools_stale: tools_stale.clone(),
        };
        let timeout = config.startup_timeout;
        let lifecycle = match &config.lifecycle {
            Lifecycle::Initialize | Lifecycle::Pinned(_) => ClientLifecycleMode::Initialize,
            Lifecycle::Discover => ClientLifecycleMode::Discover {
                preferred_versions: vec![ProtocolVersion::V_2026_07_28],
            },
            Lifecycle::Auto => ClientLifecycleMode::Auto {
                preferred_versions: vec![ProtocolVersion::V_2026_07_28],
                legacy_version: None,
            },
        };
        let started = match &config.transport {
            Transport::Stdio { .. } => {
                let transport = StdioServer::spawn(&config)?;
                tokio::time::timeout(timeout, client.serve_with_lifecycle(transport, lifecycle))
                    .await
            }
            Transport::Http { .. } => {
                let transport = http_transport(&config)?;
                tokio::time::timeout(timeout, client.serve_with_lifecycle(transport, lifecycle))
                    .await
            }
        };
        let service = match started {
            Err(_) => return Err(ConnectError::StartupTimeout { server, timeout }),
            Ok(Err(error)) => {
                return Err(ConnectError::Handshake {
                    server,
                    message: error.to_string(),
                });
            }
            Ok(Ok(service)) => service,
        };
        let version = service
            .peer_info()
            .map(|info| info.protocol_version.to_string())
            .unwrap_or_default();
        let _ = protocol_version.set(version.clone());
        Ok(Connection {
            config,
            credentials,
            service,
            protocol_version: version,
            tools_stale,
        })
    }

    /// The server's configuration.
    pub fn config(&self) -> &ServerConfig {
        &self.config
    }

    /// Whether the credentials in the environment still match those the
    /// connection was opened with.
    pub fn credentials_current(&self) -> bool {
        credential_fingerprint(&self.config) == self.credentials
    }

    /// The server's name.
    pub fn name(&self) -> &str {
        &self.config.name
    }

    /// The negotiated protocol version.
    pub fn protocol_version(&self) -> &str {
        &self.protocol_version
    }

    /// Whether the connection has closed (the server exited or hung up).
    pub fn is_closed(&self) -> bool {
        // rmcp's `is_closed` sees only a cancelled service; when the server
        // goes away the service loop ends, which closes the peer's channel.
        self.service.is_closed() || self.service.peer().is_transport_closed()
    }

    /// Whether the server said its tools changed since they were last listed.
    pub fn tools_stale(&self) -> bool {
        self.tools_stale.load(Ordering::SeqCst)
    }

    /// Lists the server's tools, less those the configuration hides.
    pub async fn list_tools(&self) -> Result<Vec<Tool>, ConnectError> {
        self.tools_stale.store(false, Ordering::SeqCst);
        let listed =
            tokio::time::timeout(self.config.startup_timeout, self.service.list_all_tools()).await;
        let tools = match listed {
            Err(_) => {
                self.tools_stale.store(true, Ordering::SeqCst);
                return Err(self.request_error("tools/list", "timed out".to_owned()));
            }
            Ok(Err(error)) => {
                self.tools_stale.store(true, Ordering::SeqCst);
                return Err(self.request_error("tools/list", error.to_string()));
            }
            Ok(Ok(tools)) => tools,
        };
        Ok(tools
            .into_iter()
            .filter(|tool| self.config.exposes(&tool.name))
            .collect())
    }

    /// Calls a tool by its name on this server, within `tool_timeout_sec`.
    pub async fn call_tool(
        &self,
        tool: &str,
        arguments: Option<JsonObject>,
    ) -> Result<CallToolResult, ConnectError> {
        let mut params = CallToolRequestParams::new(tool.to_owned());
        if let Some(arguments) = arguments {
            params = params.with_arguments(arguments);
        }
        let timeout = self.config.tool_timeout;
        match tokio::time::timeout(timeout, self.service.call_tool(params)).await {
            Err(_) => Err(ConnectError::ToolTimeout {
                server: self.config.name.clone(),
                tool: tool.to_owned(),
                timeout,
            }),
            Ok(Err(error)) => Err(self.request_error("tools/call", error.to_string())),
            Ok(Ok(result)) => Ok(result),
        }
    }

    /// What the server declared it can do.
    pub fn capabilities(&self) -> ServerCapabilities {
        self.service
            .peer_info()
            .map(|info| info.capabilities.clone())
            .unwrap_or_default()
    }

    /// Lists the server's resources (empty when it declared none).
    pub async fn list_resources(&self) -> Result<Vec<Resource>, ConnectError> {
        if self.capabilities().resources.is_none() {
            return Ok(Vec::new());
        }
        self.bounded("resources/list", self.service.list_all_resources())
            .await
    }

    /// Lists the server's resource templates (empty when it declared no
    /// resources).
    pub async fn list_resource_templates(&self) -> Result<Vec<ResourceTemplate>, ConnectError> {
        if self.capabilities().resources.is_none() {
            return Ok(Vec::new());
        }
        self.bounded(
            "resources/templates/list",
            self.service.list_all_resource_templates(),
        )
        .await
    }

    /// Reads one resource (input requests on the way are elicitations too).
    pub async fn read_resource(&self, uri: &str) -> Result<ReadResourceResult, ConnectError> {
        self.bounded(
            "resources/read",
            self.service
                .read_resource(ReadResourceRequestParams::new(uri.to_owned())),
        )
        .await
    }

    /// Lists the server's prompts (empty when it declared none).
    pub async fn list_prompts(&self) -> Result<Vec<Prompt>, ConnectError> {
        if self.capabilities().prompts.is_none() {
            return Ok(Vec::new());
        }
        self.bounded("prompts/list", self.service.list_all_prompts())
            .await
    }

    /// Gets one prompt by the server's own name for it.
    pub async fn get_prompt(
        &self,
        name: &str,
        arguments: Option<JsonObject>,
    ) -> Result<GetPromptResult, ConnectError> {
        let mut params = GetPromptRequestParams::new(name.to_owned());
        if let Some(arguments) = arguments {
            params = params.with_arguments(arguments);
        }
        self.bounded("prompts/get", self.service.get_prompt(params))
            .await
    }

    /// Runs a request within the tool timeout, naming it in errors.
    async fn bounded<T>(
        &self,
        request: &'static str,
        call: impl Future<Output = Result<T, rmcp::ServiceError>>,
    ) -> Result<T, ConnectError> {
        match tokio::time::timeout(self.config.tool_timeout, call).await {
            Err(_) => Err(self.request_error(request, "timed out (tool_timeout_sec)".to_owned())),
            Ok(Err(rmcp::ServiceError::McpError(error))) => Err(ConnectError::Refused {
                server: self.config.name.clone(),
                request,
                error,
            }),
            Ok(Err(error)) => Err(self.request_error(request, error.to_string())),
            Ok(Ok(value)) => Ok(value),
        }
    }

    fn request_error(&self, request: &'static str, message: String) -> ConnectError {
        ConnectError::Request {
            server: self.config.name.clone(),
            request,
            message,
        }
    }
}

fn http_transport(
    config: &ServerConfig,
) -> Result<StreamableHttpClientTransport<RescuingHttpClient<reqwest::Client>>, ConnectError> {
    let Transport::Http {
        url,
        bearer_token_env_var,
        headers,
        env_headers,
    } = &config.transport
    else {
        return Err(ConnectError::Config {
            server: config.name.clone(),
            message: "not an HTTP server".to_owned(),
        });
    };
    let config_error = |message: String| ConnectError::Config {
        server: config.name.clone(),
        message,
    };
    let mut custom = HashMap::new();
    let mut add = |name: &str, value: &str| -> Result<(), ConnectError> {
        let header = http::HeaderName::from_bytes(name.as_bytes())
            .map_err(|error| config_error(format!("header name {name:?}: {error}")))?;
        let value = http::HeaderValue::from_str(value)
            .map_err(|error| config_error(format!("header {name:?}: {error}")))?;
        custom.insert(header, value);
        Ok(())
    };
    for (name, value) in headers {
        add(name, value)?;
    }
    for (name, variable) in env_headers {
        let value = std::env::var(variable).map_err(|_| {
            config_error(format!(
                "env_http_headers.{name}: environment variable {variable} is not set"
            ))
        })?;
        add(name, &value)?;
    }
    let mut transport_config =
        StreamableHttpClientTransportConfig::with_uri(url.clone()).custom_headers(custom);
    if let Some(variable) = bearer_token_env_var {
        let token = std::env::var(variable).map_err(|_| {
            config_error(format!(
                "bearer_token_env_var: environment variable {variable} is not set"
            ))
        })?;
        transport_config = transport_config.auth_header(token);
    }
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .redirect(same_origin_redirects())
        .build()
        .map_err(|error| config_error(format!("building the HTTP client: {error}")))?;
    Ok(StreamableHttpClientTransport::with_client(
        RescuingHttpClient::new(client),
        transport_config,
    ))
}

/// Follows only same-origin 307 and 308 redirects (which keep the method and
/// body), at most ten: a cross-origin hop would replay the session id and the
/// configured headers to another host.
fn same_origin_redirects() -> reqwest::redirect::Policy {
    reqwest::redirect::Policy::custom(|attempt| {
        let same_origin = attempt
            .previous()
            .first()
            .is_some_and(|first| first.origin() == attempt.url().origin());
        let keeps_body = matches!(attempt.status().as_u16(), 307 | 308);
        if same_origin && keeps_body && attempt.previous().len() <= 10 {
            attempt.follow()
        } else {
            attempt.stop()
        }
    })
}
