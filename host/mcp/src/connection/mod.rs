//! One connection to one MCP server, over stdio or streamable HTTP, through
//! rmcp: start it within its startup timeout, list its tools (filtered by
//! `enabled_tools` / `disabled_tools`), call them within the tool timeout,
//! read resources and get prompts, and tell when its credentials in the
//! environment changed. What the server sends (elicitations,
//! `list_changed`) goes to the [`ConnectionHooks`] it was opened with
//! ([`crate::handler`]).
//!
//! The transports: a stdio child (`stdio`) or streamable HTTP
//! (`streamable_http`), each behind `inbound` (long request ids cut,
//! requests sent outside any request of gatehouse's refused before rmcp
//! sees them and reported to the handler, which audits them). The rmcp client side, what gatehouse declares and
//! how the server's requests and notifications reach the hooks, is
//! `client`.

mod client;
pub mod inbound;
pub(crate) mod sent_under;
mod stdio;
mod streamable_http;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use rmcp::RoleClient;
use rmcp::model::{
    CallToolRequest, CallToolRequestParams, CallToolResult, CancelledNotification,
    CancelledNotificationParam, ClientNotification, ClientRequest, ErrorData,
    GetPromptRequestParams, GetPromptResult, JsonObject, Prompt, ProtocolVersion,
    ReadResourceRequestParams, ReadResourceResult, Resource, ResourceTemplate, ServerCapabilities,
    ServerResult, Tool,
};
use rmcp::service::{ClientLifecycleMode, ClientServiceExt, PeerRequestOptions, RunningService};

use crate::connection::stdio::StdioServer;
use crate::handler::ConnectionHooks;
use crate::server_config::{Lifecycle, ServerConfig, Transport};
use client::ClientSide;

/// Host environment variables every stdio server gets (besides its own
/// `env` and `env_vars`); everything else in the host's environment stays
/// out.
pub const BASE_ENV_VARS: &[&str] = &[
    "HOME", "PATH", "USER", "LOGNAME", "SHELL", "LANG", "TERM", "TMPDIR",
];

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
    /// The caller gave the tool call up (its upstream client went away or
    /// cancelled it); the server was told.
    #[error("mcp server `{server}`: tool `{tool}` was cancelled: {why}")]
    Abandoned {
        /// The server.
        server: String,
        /// The tool.
        tool: String,
        /// Why it was given up.
        why: &'static str,
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
            | ConnectError::ToolTimeout { server, .. }
            | ConnectError::Abandoned { server, .. } => server,
        }
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
    /// The calls this connection's HTTP requests were sent for.
    sent_under: sent_under::SentUnder,
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
        let sent_under = sent_under::SentUnder::default();
        let closed = tokio_util::sync::CancellationToken::new();
        let inbound = inbound::Context {
            server: server.clone(),
            handler: hooks.elicitation.clone(),
            protocol_version: protocol_version.clone(),
            closed: closed.clone(),
        };
        let client = ClientSide {
            server: server.clone(),
            lifecycle: config.lifecycle.clone(),
            hooks,
            protocol_version: protocol_version.clone(),
            tools_stale: tools_stale.clone(),
            sent_under: sent_under.clone(),
            closed,
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
                let transport = inbound::Inbound::new(StdioServer::spawn(&config)?, inbound);
                tokio::time::timeout(timeout, client.serve_with_lifecycle(transport, lifecycle))
                    .await
            }
            Transport::Http { .. } => {
                let transport = inbound::Inbound::new(
                    streamable_http::transport(&config, sent_under.clone())?,
                    inbound,
                );
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
            sent_under,
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
        self.call_tool_unless(tool, arguments, std::future::pending())
            .await
    }

    /// [`call_tool`](Self::call_tool), given up when `abandoned` resolves
    /// (with why) first. A call given up (abandoned, or past
    /// `tool_timeout_sec`) is cancelled at the server: its
    /// `notifications/cancelled` is written before this returns, so a server
    /// stopped right after has been told.
    pub async fn call_tool_unless(
        &self,
        tool: &str,
        arguments: Option<JsonObject>,
        abandoned: impl Future<Output = &'static str>,
    ) -> Result<CallToolResult, ConnectError> {
        let mut params = CallToolRequestParams::new(tool.to_owned());
        if let Some(arguments) = arguments {
            params = params.with_arguments(arguments);
        }
        let _forget = self.mark(&mut params.meta);
        let timeout = self.config.tool_timeout;
        if self.protocol_version.as_str() >= crate::server_config::DISCOVER_PROTOCOL_VERSION {
            // 2026-07-28: rmcp drives the call's rounds (its input requests)
            // itself, and cancels the round in flight when dropped (queued,
            // not awaited: rmcp offers no more there).
            return tokio::select! {
                biased;
                called = tokio::time::timeout(timeout, self.service.call_tool(params)) => match called {
                    Err(_) => Err(ConnectError::ToolTimeout {
                        server: self.config.name.clone(),
                        tool: tool.to_owned(),
                        timeout,
                    }),
                    Ok(Err(error)) => Err(self.request_error("tools/call", error.to_string())),
                    Ok(Ok(result)) => Ok(result),
                },
                why = abandoned => Err(ConnectError::Abandoned {
                    server: self.config.name.clone(),
                    tool: tool.to_owned(),
                    why,
                }),
            };
        }
        let handle = self
            .service
            .send_cancellable_request(
                ClientRequest::CallToolRequest(CallToolRequest::new(params)),
                PeerRequestOptions::no_options(),
            )
            .await
            .map_err(|error| self.request_error("tools/call", error.to_string()))?;
        let id = handle.id.clone();
        let why = tokio::select! {
            biased;
            answered = tokio::time::timeout(timeout, handle.await_response()) => match answered {
                Ok(Ok(ServerResult::CallToolResult(result))) => return Ok(result),
                Ok(Ok(ServerResult::EmptyResult(_))) => return Ok(CallToolResult::default()),
                Ok(Ok(_)) => {
                    return Err(self.request_error("tools/call", "the server answered with something other than a tool result".to_owned()));
                }
                Ok(Err(error)) => return Err(self.request_error("tools/call", error.to_string())),
                Err(_) => None,
            },
            why = abandoned => Some(why),
        };
        let reason = why.unwrap_or("the call ran past tool_timeout_sec");
        let cancelled = CancelledNotification::new(CancelledNotificationParam::new(
            Some(id),
            Some(format!("gatehouse: {reason}")),
        ));
        if let Err(error) = self
            .service
            .send_notification(ClientNotification::CancelledNotification(cancelled))
            .await
        {
            tracing::debug!(server = %self.config.name, "cannot tell the server a call was cancelled: {error}");
        }
        Err(match why {
            Some(why) => ConnectError::Abandoned {
                server: self.config.name.clone(),
                tool: tool.to_owned(),
                why,
            },
            None => ConnectError::ToolTimeout {
                server: self.config.name.clone(),
                tool: tool.to_owned(),
                timeout,
            },
        })
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
        let mut params = ReadResourceRequestParams::new(uri.to_owned());
        let _forget = self.mark(&mut params.meta);
        self.bounded("resources/read", self.service.read_resource(params))
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
        let _forget = self.mark(&mut params.meta);
        self.bounded("prompts/get", self.service.get_prompt(params))
            .await
    }

    /// Over HTTP, marks a request sent on behalf of a gateway call with the
    /// call's key, so what the server asks on its response stream is tied to
    /// that call (`sent_under`); what it recorded is forgotten when the
    /// returned guard drops.
    ///
    /// Whatever transport, the request also carries what the call's work
    /// carries ([`crate::on_behalf::carrying`]: its trace context).
    fn mark(&self, meta: &mut Option<rmcp::model::RequestMetaObject>) -> sent_under::Forget {
        if let Some(carried) = crate::on_behalf::carried() {
            let meta = meta.get_or_insert_default();
            for (key, value) in carried.iter() {
                if !meta.contains_key(key) {
                    meta.insert(key.clone(), value.clone());
                }
            }
        }
        let key = match self.config.transport {
            Transport::Http { .. } => sent_under::mark(meta),
            Transport::Stdio { .. } => None,
        };
        sent_under::Forget {
            sent_under: self.sent_under.clone(),
            key,
        }
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
