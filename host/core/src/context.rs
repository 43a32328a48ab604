//! What the host knows about an elicitation beyond what the server sent: the
//! server, the approval settings in force, and the tool catalog used for
//! identity binding.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::elicitation::{ElicitationParams, RequestId};
use crate::schema::json_kind;

/// The flags of the `granular` approval policy. Each defaults to `true`
/// (the category may be put to a reviewer or the person).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct GranularPolicy {
    /// Sandbox escalations may be asked for.
    pub sandbox_approval: bool,
    /// Exec-policy rule prompts may be asked for.
    pub rules: bool,
    /// Skill approvals may be asked for.
    pub skill_approval: bool,
    /// Permission requests may be asked for.
    pub request_permissions: bool,
    /// MCP elicitations may be asked for; `false` declines them all.
    pub mcp_elicitations: bool,
}

impl Default for GranularPolicy {
    fn default() -> Self {
        GranularPolicy {
            sandbox_approval: true,
            rules: true,
            skill_approval: true,
            request_permissions: true,
            mcp_elicitations: true,
        }
    }
}

/// When the agent asks for approval, as Codex's `approval_policy`.
///
/// In TOML: `approval_policy = "on-request"`, or
/// `approval_policy = { granular = { mcp_elicitations = false } }`.
///
/// ```
/// use gatehouse_core::context::ApprovalPolicy;
/// let policy: ApprovalPolicy = serde_json::from_str(r#""on-request""#).unwrap();
/// assert_eq!(policy, ApprovalPolicy::OnRequest);
/// let policy: ApprovalPolicy =
///     serde_json::from_str(r#"{"granular": {"mcp_elicitations": false}}"#).unwrap();
/// assert!(matches!(policy, ApprovalPolicy::Granular(flags) if !flags.mcp_elicitations));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ApprovalPolicy {
    /// Ask for everything not known to be safe.
    Untrusted,
    /// The model decides when to ask (the default).
    #[default]
    OnRequest,
    /// Ask per category.
    Granular(GranularPolicy),
    /// Never ask.
    Never,
}

/// Who answers approval requests, as Codex's `approvals_reviewer`.
///
/// gatehouse defaults to `auto_review`: it exists to review. `user` sends
/// everything to the person.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ApprovalsReviewer {
    /// The person.
    User,
    /// The automated reviewer (the chain of modules).
    #[default]
    #[serde(alias = "auto-review", alias = "guardian_subagent")]
    AutoReview,
}

/// A server's hints about a tool (MCP `ToolAnnotations`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolAnnotations {
    /// The tool does not modify its environment.
    pub read_only_hint: Option<bool>,
    /// The tool may perform destructive updates.
    pub destructive_hint: Option<bool>,
    /// Repeating the call has no further effect.
    pub idempotent_hint: Option<bool>,
    /// The tool reaches an open world of external entities.
    pub open_world_hint: Option<bool>,
}

/// A tool as its server lists it in `tools/list`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CatalogTool {
    /// The tool's name.
    pub name: String,
    /// The display title.
    #[serde(default)]
    pub title: Option<String>,
    /// The description.
    #[serde(default)]
    pub description: Option<String>,
    /// The annotations.
    #[serde(default)]
    pub annotations: ToolAnnotations,
    /// The tool's `_meta` (connector identity lives here).
    #[serde(default, rename = "_meta")]
    pub meta: Option<Map<String, Value>>,
}

/// What the catalog says about the tool an elicitation names.
#[derive(Debug, Clone, Default, PartialEq)]
pub enum CatalogEntry {
    /// No catalog, or the elicitation names no tool.
    #[default]
    Unavailable,
    /// The catalog lists no tool by that name.
    NotListed,
    /// The catalog entry.
    Listed(CatalogTool),
}

/// Why a `tools/list` result could not be read.
#[derive(Debug, thiserror::Error)]
pub enum CatalogError {
    /// The result is not an object with a `tools` array.
    #[error("a tools/list result must be an object with a `tools` array, not {0}")]
    Shape(&'static str),
    /// A tool entry is malformed.
    #[error("tools[{index}] is not a valid tool: {error}")]
    Tool {
        /// Its position.
        index: usize,
        /// What is wrong.
        error: serde_json::Error,
    },
}

/// A server's tool catalog, by tool name.
///
/// ```
/// use gatehouse_core::context::{CatalogEntry, ToolCatalog};
/// let listed = serde_json::json!({"tools": [
///     {"name": "delete_repo", "inputSchema": {"type": "object"},
///      "annotations": {"destructiveHint": true}}
/// ]});
/// let catalog = ToolCatalog::from_wire(&listed).unwrap();
/// assert!(matches!(catalog.lookup(Some(" delete_repo ")), CatalogEntry::Listed(_)));
/// assert_eq!(catalog.lookup(Some("other")), CatalogEntry::NotListed);
/// assert_eq!(catalog.lookup(None), CatalogEntry::Unavailable);
/// ```
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ToolCatalog {
    tools: HashMap<String, CatalogTool>,
}

impl ToolCatalog {
    /// Reads a `tools/list` result as on the wire.
    pub fn from_wire(result: &Value) -> Result<ToolCatalog, CatalogError> {
        let tools = result
            .get("tools")
            .and_then(Value::as_array)
            .ok_or(CatalogError::Shape(json_kind(result)))?;
        let mut catalog = ToolCatalog::default();
        for (index, tool) in tools.iter().enumerate() {
            let tool: CatalogTool = serde_json::from_value(tool.clone())
                .map_err(|error| CatalogError::Tool { index, error })?;
            catalog.insert(tool);
        }
        Ok(catalog)
    }

    /// Adds or replaces a tool.
    pub fn insert(&mut self, tool: CatalogTool) {
        self.tools.insert(tool.name.clone(), tool);
    }

    /// The entry for `tool_name` (trimmed); `Unavailable` when there is none.
    pub fn lookup(&self, tool_name: Option<&str>) -> CatalogEntry {
        match tool_name.map(str::trim).filter(|name| !name.is_empty()) {
            None => CatalogEntry::Unavailable,
            Some(name) => match self.tools.get(name) {
                Some(tool) => CatalogEntry::Listed(tool.clone()),
                None => CatalogEntry::NotListed,
            },
        }
    }

    /// The entry for the tool an elicitation names in `_meta.tool_name`
    /// (Codex's key for the tool an approval is about): [`lookup`] of that
    /// name, so `Unavailable` when `_meta` names no tool or names it with
    /// something other than a string. Every host that binds an elicitation
    /// to its server's catalog goes through here.
    ///
    /// [`lookup`]: ToolCatalog::lookup
    ///
    /// ```
    /// use gatehouse_core::context::{CatalogEntry, ToolCatalog};
    /// use gatehouse_core::elicitation::ElicitationParams;
    /// use serde_json::json;
    ///
    /// let catalog = ToolCatalog::from_wire(&json!({"tools": [
    ///     {"name": "delete_repo", "inputSchema": {"type": "object"}}
    /// ]})).unwrap();
    /// let asking = |meta: serde_json::Value| ElicitationParams::from_wire(&json!({
    ///     "message": "Delete the repository?",
    ///     "requestedSchema": {"type": "object", "properties": {}},
    ///     "_meta": meta,
    /// })).unwrap();
    /// assert!(matches!(
    ///     catalog.entry_for(&asking(json!({"tool_name": "delete_repo"}))),
    ///     CatalogEntry::Listed(tool) if tool.name == "delete_repo"
    /// ));
    /// assert_eq!(catalog.entry_for(&asking(json!({"tool_name": "other"}))), CatalogEntry::NotListed);
    /// assert_eq!(catalog.entry_for(&asking(json!({"tool_name": 5}))), CatalogEntry::Unavailable);
    /// assert_eq!(catalog.entry_for(&asking(json!(null))), CatalogEntry::Unavailable);
    /// ```
    pub fn entry_for(&self, params: &ElicitationParams) -> CatalogEntry {
        let tool_name = params
            .meta
            .as_ref()
            .and_then(|meta| meta.get("tool_name"))
            .and_then(Value::as_str);
        self.lookup(tool_name)
    }

    /// The number of tools.
    pub fn len(&self) -> usize {
        self.tools.len()
    }

    /// Whether the catalog is empty.
    pub fn is_empty(&self) -> bool {
        self.tools.is_empty()
    }
}

/// The MCP protocol version assumed when none is given.
pub const DEFAULT_PROTOCOL_VERSION: &str = "2025-11-25";

/// The host's side of a review: who asks, and the settings in force.
///
/// ```
/// use gatehouse_core::context::{ApprovalPolicy, ReviewContext};
/// use gatehouse_core::elicitation::RequestId;
/// let context = ReviewContext::new("github", RequestId::Number(4))
///     .with_approval_policy(ApprovalPolicy::Never);
/// assert_eq!(context.server_name, "github");
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ReviewContext {
    /// The server's configured name.
    pub server_name: String,
    /// The id of the server's request.
    pub request_id: RequestId,
    /// The negotiated MCP protocol version.
    pub protocol_version: String,
    /// The approval policy.
    pub approval_policy: ApprovalPolicy,
    /// Who answers approvals.
    pub approvals_reviewer: ApprovalsReviewer,
    /// Whether the server's permission profile auto-approves prompts.
    pub auto_approve_prompts: bool,
    /// The agent session (for the gateway: the upstream session the
    /// elicitation is tied to).
    pub session_id: Option<String>,
    /// The agent turn (for the gateway: the turn id the upstream request's
    /// `_meta` carried).
    pub turn_id: Option<String>,
    /// The agent's request the elicitation belongs to, when the host can tie
    /// it to exactly one (contract 0.2's `call` interface).
    pub related_call: Option<RelatedCall>,
    /// The catalog entry for the named tool (filled by the host from its
    /// catalog, never read from a context file).
    #[serde(skip)]
    pub catalog: CatalogEntry,
}

impl Default for ReviewContext {
    fn default() -> Self {
        ReviewContext::new("server", RequestId::Number(0))
    }
}

impl ReviewContext {
    /// A context with the default settings: `on-request`, `auto_review`.
    pub fn new(server_name: impl Into<String>, request_id: RequestId) -> Self {
        ReviewContext {
            server_name: server_name.into(),
            request_id,
            protocol_version: DEFAULT_PROTOCOL_VERSION.to_owned(),
            approval_policy: ApprovalPolicy::default(),
            approvals_reviewer: ApprovalsReviewer::default(),
            auto_approve_prompts: false,
            session_id: None,
            turn_id: None,
            related_call: None,
            catalog: CatalogEntry::Unavailable,
        }
    }

    /// Sets the approval policy.
    pub fn with_approval_policy(mut self, policy: ApprovalPolicy) -> Self {
        self.approval_policy = policy;
        self
    }

    /// Sets who answers approvals.
    pub fn with_approvals_reviewer(mut self, reviewer: ApprovalsReviewer) -> Self {
        self.approvals_reviewer = reviewer;
        self
    }

    /// Sets the catalog entry.
    pub fn with_catalog(mut self, catalog: CatalogEntry) -> Self {
        self.catalog = catalog;
        self
    }

    /// Sets the related call, and the session to the call's.
    pub fn with_related_call(mut self, call: RelatedCall) -> Self {
        self.session_id = Some(call.session_id.clone());
        self.related_call = Some(call);
        self
    }
}

/// What kind of request the agent made.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum CallKind {
    /// `tools/call`.
    ToolCall,
    /// `resources/read`.
    ResourceRead,
    /// `prompts/get`.
    PromptGet,
}

/// The agent's request behind an elicitation: what it really asked the
/// server for, as opposed to what the server's `_meta` claims. The gateway
/// fills it when exactly one request is in flight on the server; a context
/// file may give it (`gatehouse review`).
///
/// ```
/// use gatehouse_core::context::{CallKind, RelatedCall, ReviewContext};
/// use gatehouse_core::elicitation::RequestId;
/// let call = RelatedCall::new("1", CallKind::ToolCall, "github__delete_branch", "delete_branch")
///     .with_arguments(serde_json::json!({"branch": "main"}));
/// let context = ReviewContext::new("github", RequestId::Number(4)).with_related_call(call);
/// assert_eq!(context.session_id.as_deref(), Some("1"));
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RelatedCall {
    /// The upstream session that made it.
    pub session_id: String,
    /// Its kind.
    pub kind: CallKind,
    /// The name the agent used (a qualified tool or prompt name, or a URI).
    pub qualified_name: String,
    /// The name the server knows (its own tool or prompt name, or the URI).
    pub name: String,
    /// The arguments as forwarded.
    #[serde(default)]
    pub arguments: Option<serde_json::Value>,
    /// The upstream request's JSON-RPC id, as JSON text (`7` or `"7"`).
    #[serde(default)]
    pub id: Option<String>,
}

impl RelatedCall {
    /// A call without arguments or id.
    pub fn new(
        session_id: impl Into<String>,
        kind: CallKind,
        qualified_name: impl Into<String>,
        name: impl Into<String>,
    ) -> Self {
        RelatedCall {
            session_id: session_id.into(),
            kind,
            qualified_name: qualified_name.into(),
            name: name.into(),
            arguments: None,
            id: None,
        }
    }

    /// The same call with its forwarded arguments.
    pub fn with_arguments(mut self, arguments: serde_json::Value) -> Self {
        self.arguments = Some(arguments);
        self
    }

    /// The same call with the upstream request's id (JSON text).
    pub fn with_id(mut self, id: impl Into<String>) -> Self {
        self.id = Some(id.into());
        self
    }
}
