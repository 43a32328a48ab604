//! What the guardian reviews: a plain-Rust view of the contract's
//! `review-request`, borrowed from the caller so the component glue and a
//! native caller build it without copying.

use std::fmt;

/// What the server asks for.
#[derive(Debug, Clone, Copy)]
pub enum Mode<'a> {
    /// Form mode, with the requested schema as JSON text.
    Form {
        /// The `requestedSchema` object (JSON text).
        requested_schema: &'a str,
    },
    /// URL mode.
    Url,
}

/// The JSON-RPC id of the server's request.
#[derive(Debug, Clone, Copy)]
pub enum RequestId<'a> {
    /// A string id.
    Text(&'a str),
    /// An integer id.
    Number(i64),
}

impl fmt::Display for RequestId<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RequestId::Text(text) => f.write_str(text),
            RequestId::Number(number) => write!(f, "{number}"),
        }
    }
}

/// The approval policy in force.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Policy {
    /// `untrusted`.
    Untrusted,
    /// `on-request`.
    OnRequest,
    /// `granular`, with its `mcp_elicitations` flag.
    Granular {
        /// Whether MCP elicitations may be put to a reviewer or the person.
        mcp_elicitations: bool,
    },
    /// `never`.
    Never,
}

/// Who answers approvals.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reviewer {
    /// The person.
    User,
    /// The automated reviewer.
    AutoReview,
}

/// The server's hints about a tool (the planned action shows them with
/// snake_case keys: `model_review::ActionAnnotations`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Annotations {
    /// `readOnlyHint`.
    pub read_only: Option<bool>,
    /// `destructiveHint`.
    pub destructive: Option<bool>,
    /// `openWorldHint`.
    pub open_world: Option<bool>,
}

impl Annotations {
    /// Whether no hint is set.
    pub fn is_empty(&self) -> bool {
        self.read_only.is_none() && self.destructive.is_none() && self.open_world.is_none()
    }
}

/// A tool as the server's catalog lists it.
#[derive(Debug, Clone, Copy)]
pub struct CatalogTool<'a> {
    /// The tool's name.
    pub name: &'a str,
    /// The tool's title.
    pub title: Option<&'a str>,
    /// The tool's description.
    pub description: Option<&'a str>,
    /// The tool's annotations.
    pub annotations: Annotations,
    /// The tool's `_meta` object (JSON text).
    pub meta: Option<&'a str>,
}

/// What the host's catalog says about the named tool.
#[derive(Debug, Clone, Copy)]
pub enum Catalog<'a> {
    /// No catalog: identity cannot be checked.
    Unavailable,
    /// The catalog lists no such tool.
    NotListed,
    /// The catalog's entry.
    Listed(CatalogTool<'a>),
}

/// One elicitation with its context.
#[derive(Debug, Clone, Copy)]
pub struct Input<'a> {
    /// What the server asks for.
    pub mode: Mode<'a>,
    /// The request's `_meta` object (JSON text), if any.
    pub meta: Option<&'a str>,
    /// The server's configured name.
    pub server_name: &'a str,
    /// The server's request id.
    pub request_id: RequestId<'a>,
    /// The approval policy.
    pub policy: Policy,
    /// Who answers approvals.
    pub reviewer: Reviewer,
    /// Whether the permission profile auto-approves prompts.
    pub auto_approve_prompts: bool,
    /// The catalog entry for the named tool.
    pub catalog: Catalog<'a>,
}

/// How risky the action is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Risk {
    /// Low.
    Low,
    /// Medium.
    Medium,
    /// High.
    High,
    /// Critical.
    Critical,
}

/// What to answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// No decision.
    Defer,
    /// Accept with this content (JSON text).
    Accept(String),
    /// Decline with an optional message for the agent.
    Decline(Option<String>),
    /// Cancel.
    Cancel,
}

/// The guardian's answer.
#[derive(Debug, Clone, PartialEq)]
pub struct Verdict {
    /// What to answer.
    pub decision: Decision,
    /// Why.
    pub rationale: Option<String>,
    /// The assessed risk.
    pub risk: Option<Risk>,
    /// The tool-call review request the verdict was reached on (for the log),
    /// when the elicitation got that far.
    pub request: Option<crate::logic::ReviewedCall>,
}
