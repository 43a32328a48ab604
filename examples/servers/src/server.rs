//! The demo MCP server handler: its tools and how they are listed and called.

use std::{
    collections::BTreeSet,
    sync::{
        Arc, Mutex,
        atomic::{AtomicU64, Ordering},
    },
};

use rmcp::{
    ErrorData as McpError, Peer, RoleServer, ServerHandler,
    handler::server::{router::tool::ToolRouter, tool::ToolCallContext, wrapper::Parameters},
    model::{
        CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, CustomRequest,
        ElicitRequestParams, ElicitResult, ElicitationAction, ElicitationSchema, Implementation,
        JsonObject, ListToolsResult, PaginatedRequestParams, ProtocolVersion, ServerCapabilities,
        ServerConfig, ServerRequest, Tool, ToolAnnotations,
    },
    schemars::JsonSchema,
    service::RequestContext,
    tool, tool_router,
};
use serde::Deserialize;
use serde_json::{Value, json};

/// Counter making URL-mode elicitation ids unique within the process.
static NEXT_ELICITATION: AtomicU64 = AtomicU64::new(1);

/// The demo MCP server.
///
/// Tools: `echo`, `read_file`, `delete_branch`, `ask_name`, `open_url`,
/// `add_tool` and `elicit_raw`, plus any tool registered at run time with
/// `add_tool`. Every result text starts with `[NAME] `.
///
/// Clones share the tools added at run time, so over HTTP (one clone per
/// session) a tool added in one session is listed in all of them; the
/// `tools/list_changed` notification goes to the session that added it.
#[derive(Clone)]
pub struct DemoServer {
    name: Arc<str>,
    added_tools: Arc<Mutex<BTreeSet<String>>>,
    tool_router: ToolRouter<Self>,
}

/// Arguments of `echo`.
#[derive(Debug, Deserialize, JsonSchema)]
struct EchoArgs {
    /// Text to send back.
    text: String,
}

/// Arguments of `read_file`.
#[derive(Debug, Deserialize, JsonSchema)]
struct ReadFileArgs {
    /// Path of the file to read (nothing is read: the content is made up).
    path: String,
}

/// Arguments of `delete_branch`.
#[derive(Debug, Deserialize, JsonSchema)]
struct DeleteBranchArgs {
    /// Branch to delete (nothing is deleted).
    branch: String,
}

/// Arguments of `open_url`.
#[derive(Debug, Deserialize, JsonSchema)]
struct OpenUrlArgs {
    /// URL the user is asked to open.
    url: String,
}

/// Arguments of `add_tool`.
#[derive(Debug, Deserialize, JsonSchema)]
struct AddToolArgs {
    /// Name of the tool to register; it echoes its `text` argument.
    name: String,
}

/// Arguments of `elicit_raw`.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct ElicitRawArgs {
    /// The exact `params` object of the `elicitation/create` request to send.
    pub params: JsonObject,
}

/// Arguments of `ask_name` (none).
#[derive(Debug, Deserialize, JsonSchema)]
struct NoArgs {}

#[tool_router]
impl DemoServer {
    /// Echo the given text back.
    #[tool(
        description = "Echo the given text back.",
        annotations(
            read_only_hint = true,
            destructive_hint = false,
            open_world_hint = false
        )
    )]
    async fn echo(&self, Parameters(EchoArgs { text }): Parameters<EchoArgs>) -> CallToolResult {
        self.ok(text)
    }

    /// Return made-up content for a file.
    #[tool(
        description = "Read a file (returns made-up content).",
        annotations(
            read_only_hint = true,
            destructive_hint = false,
            open_world_hint = false
        )
    )]
    async fn read_file(
        &self,
        Parameters(ReadFileArgs { path }): Parameters<ReadFileArgs>,
    ) -> CallToolResult {
        self.ok(format!("contents of {path}: lorem ipsum dolor sit amet"))
    }

    /// Ask for approval with a form elicitation carrying Codex-style
    /// approval `_meta`, then report the answer.
    #[tool(
        description = "Delete a git branch (asks for approval first; deletes nothing).",
        annotations(
            read_only_hint = false,
            destructive_hint = true,
            idempotent_hint = true,
            open_world_hint = false
        )
    )]
    async fn delete_branch(
        &self,
        Parameters(DeleteBranchArgs { branch }): Parameters<DeleteBranchArgs>,
        peer: Peer<RoleServer>,
    ) -> CallToolResult {
        let meta = json!({
            "codex_request_type": "approval_request",
            "codex_approval_kind": "mcp_tool_call",
            "tool_name": "delete_branch",
            "tool_params": { "branch": branch },
        });
        let Value::Object(meta) = meta else {
            unreachable!("json! object literal")
        };
        let params = ElicitRequestParams::FormElicitationParams {
            meta: Some(meta.into()),
            message: format!("Allow delete_branch on {branch}?"),
            requested_schema: ElicitationSchema::builder().build_unchecked(),
        };
        match peer.create_elicitation(params).await {
            Ok(answer) => {
                let mut text = format!("elicitation answered: {}", action_name(&answer.action));
                if let Some(message) = answer_message(&answer) {
                    text.push_str(": ");
                    text.push_str(message);
                }
                self.ok(text)
            }
            Err(error) => self.error(format!("elicitation failed: {error}")),
        }
    }

    /// Ask the user for their name with a form elicitation.
    #[tool(
        description = "Ask the user for their name and greet them.",
        annotations(
            read_only_hint = true,
            destructive_hint = false,
            open_world_hint = false
        )
    )]
    async fn ask_name(
        &self,
        Parameters(NoArgs {}): Parameters<NoArgs>,
        peer: Peer<RoleServer>,
    ) -> CallToolResult {
        let params = ElicitRequestParams::FormElicitationParams {
            meta: None,
            message: "What is your name?".to_owned(),
            requested_schema: ElicitationSchema::builder()
                .required_string("name")
                .build_unchecked(),
        };
        match peer.create_elicitation(params).await {
            Ok(answer) if answer.action == ElicitationAction::Accept => {
                match answer
                    .content
                    .as_ref()
                    .and_then(|content| content.get("name"))
                    .and_then(Value::as_str)
                {
                    Some(name) => self.ok(format!("hello {name}")),
                    None => self.error(format!(
                        "accept without a name: {}",
                        answer.content.unwrap_or(Value::Null)
                    )),
                }
            }
            Ok(answer) => self.ok(action_name(&answer.action)),
            Err(error) => self.error(format!("elicitation failed: {error}")),
        }
    }

    /// Ask the user to open a URL with a URL-mode elicitation.
    #[tool(
        description = "Ask the user to open a URL (URL-mode elicitation).",
        annotations(
            read_only_hint = true,
            destructive_hint = false,
            open_world_hint = true
        )
    )]
    async fn open_url(
        &self,
        Parameters(OpenUrlArgs { url }): Parameters<OpenUrlArgs>,
        peer: Peer<RoleServer>,
    ) -> CallToolResult {
        let elicitation_id = format!(
            "{}-{}-{}",
            self.name,
            std::process::id(),
            NEXT_ELICITATION.fetch_add(1, Ordering::Relaxed)
        );
        let params = ElicitRequestParams::UrlElicitationParams {
            meta: None,
            message: format!("Please open {url} to continue."),
            url,
            elicitation_id,
        };
        match peer.create_elicitation(params).await {
            Ok(answer) => self.ok(action_name(&answer.action)),
            Err(error) => self.error(format!("elicitation failed: {error}")),
        }
    }

    /// Register a tool at run time and tell the client the list changed.
    #[tool(
        description = "Register an extra tool NAME (it echoes its `text` argument) and send notifications/tools/list_changed.",
        annotations(
            read_only_hint = false,
            destructive_hint = false,
            open_world_hint = false
        )
    )]
    async fn add_tool(
        &self,
        Parameters(AddToolArgs { name }): Parameters<AddToolArgs>,
        peer: Peer<RoleServer>,
    ) -> CallToolResult {
        if name.is_empty() || self.tool_router.has_route(&name) {
            return self.error(format!("cannot add tool `{name}`: empty or built in"));
        }
        self.added().insert(name.clone());
        if let Err(error) = peer.notify_tool_list_changed().await {
            return self.error(format!(
                "added {name} but could not send tools/list_changed: {error}"
            ));
        }
        self.ok(format!("added {name}"))
    }

    /// Send an `elicitation/create` request with exactly the given params.
    #[tool(
        description = "Send an elicitation/create request whose params are exactly PARAMS; return the raw result JSON or the error.",
        annotations(
            read_only_hint = true,
            destructive_hint = false,
            open_world_hint = false
        )
    )]
    async fn elicit_raw(
        &self,
        Parameters(ElicitRawArgs { params }): Parameters<ElicitRawArgs>,
        peer: Peer<RoleServer>,
    ) -> CallToolResult {
        // A custom request keeps the params verbatim (no typed re-encoding),
        // so schemas rmcp's `ElicitationSchema` cannot express pass through.
        let request = ServerRequest::CustomRequest(CustomRequest::new(
            "elicitation/create",
            Some(Value::Object(params)),
        ));
        match peer.send_request(request).await {
            Ok(result) => match serde_json::to_string(&result) {
                Ok(json) => self.ok(json),
                Err(error) => self.error(format!("cannot encode the result: {error}")),
            },
            Err(error) => self.error(format!("elicitation failed: {error}")),
        }
    }
}

impl DemoServer {
    /// A server whose result texts start with `[name] `.
    pub fn new(name: &str) -> Self {
        Self {
            name: name.into(),
            added_tools: Arc::default(),
            tool_router: Self::tool_router(),
        }
    }

    /// The server name given at construction.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Names of the tools registered at run time with `add_tool`.
    pub fn added_tool_names(&self) -> Vec<String> {
        self.added().iter().cloned().collect()
    }

    fn added(&self) -> std::sync::MutexGuard<'_, BTreeSet<String>> {
        // The set stays consistent even if a holder panicked.
        self.added_tools
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn tag(&self, text: impl std::fmt::Display) -> String {
        format!("[{}] {text}", self.name)
    }

    fn ok(&self, text: impl std::fmt::Display) -> CallToolResult {
        CallToolResult::success(vec![ContentBlock::text(self.tag(text))])
    }

    fn error(&self, text: impl std::fmt::Display) -> CallToolResult {
        CallToolResult::error(vec![ContentBlock::text(self.tag(text))])
    }

    /// The definition of a tool added at run time.
    fn added_tool(name: &str) -> Tool {
        let Value::Object(schema) = json!({
            "type": "object",
            "properties": {
                "text": { "type": "string", "description": "Text to send back." }
            },
        }) else {
            unreachable!("json! object literal")
        };
        Tool::new(
            name.to_owned(),
            "Added at run time by add_tool; echoes its `text` argument.",
            schema,
        )
        .with_annotations(ToolAnnotations::from_raw(
            None,
            Some(true),
            Some(false),
            None,
            Some(false),
        ))
    }

    /// Runs a tool added at run time: `[NAME] <tool>: <text>`.
    fn call_added_tool(&self, request: &CallToolRequestParams) -> CallToolResult {
        let text = request
            .arguments
            .as_ref()
            .and_then(|arguments| arguments.get("text"))
            .and_then(Value::as_str)
            .unwrap_or_default();
        self.ok(format!("{}: {text}", request.name))
    }
}

impl ServerHandler for DemoServer {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_tool_list_changed()
                .build(),
        )
        .with_protocol_version(ProtocolVersion::LATEST_WITH_INITIALIZE)
        .with_server_info(Implementation::new(
            format!("demo-server-{}", self.name),
            env!("CARGO_PKG_VERSION"),
        ))
        .with_instructions(
            "Demo server for gatehouse tests: echo, read_file, delete_branch (asks for \
             approval), ask_name, open_url, add_tool, elicit_raw.",
        )
    }

    /// Only protocol versions with the `initialize` handshake: the tools
    /// send server-to-client requests (elicitation), which `2026-07-28`
    /// forbids.
    fn supported_protocol_versions(&self) -> std::borrow::Cow<'static, [ProtocolVersion]> {
        std::borrow::Cow::Borrowed(ProtocolVersion::known_up_to(
            &ProtocolVersion::LATEST_WITH_INITIALIZE,
        ))
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        let mut tools = self.tool_router.list_all();
        tools.extend(self.added().iter().map(|name| Self::added_tool(name)));
        Ok(ListToolsResult::with_all_items(tools))
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        match self.tool_router.get(name) {
            Some(tool) => Some(tool.clone()),
            None => self.added().contains(name).then(|| Self::added_tool(name)),
        }
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        if !self.tool_router.has_route(&request.name) && self.added().contains(&*request.name) {
            return Ok(self.call_added_tool(&request).into());
        }
        self.tool_router
            .call(ToolCallContext::new(self, request, context))
            .await
    }
}

/// The wire name of an elicitation action (`accept`, `decline`, `cancel`).
fn action_name(action: &ElicitationAction) -> String {
    match serde_json::to_value(action) {
        Ok(Value::String(name)) => name,
        _ => format!("{action:?}").to_lowercase(),
    }
}

/// The answer's `_meta.message`, if it is a string.
fn answer_message(answer: &ElicitResult) -> Option<&str> {
    answer.meta.as_ref()?.0.get("message")?.as_str()
}
