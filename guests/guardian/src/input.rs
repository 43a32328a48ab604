//! What the guardian reviews: a plain-Rust view of the contract's
//! `review-request`, borrowed from the caller so the component glue and a
//! native caller build it without copying; and what it answers: the
//! [`Verdict`] and the tool call it was reached on ([`ReviewedCall`]).

use std::borrow::Cow;
use std::fmt;

use serde_json::Value;

use crate::meta::{TOOL_PARAMS_KEY, parse_object};

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
    pub request: Option<ReviewedCall>,
}

/// The tool call a verdict was reached on ([`Verdict::request`](crate::input::Verdict::request)), for the
/// log: [`planned_action_for`](crate::model_review::planned_action_for) describes it as Codex's planned
/// action.
#[derive(Debug, Clone, PartialEq)]
pub struct ReviewedCall(pub(crate) Box<ToolCallReview<'static>>);

impl ReviewedCall {
    /// The server's configured name.
    pub fn server(&self) -> &str {
        &self.0.server
    }

    /// The tool's name, trimmed (equal to the catalog's name when the
    /// catalog lists it).
    pub fn tool_name(&self) -> &str {
        &self.0.tool_name
    }

    /// The connector's id, trimmed (from `_meta`, checked against the
    /// catalog's when there is a catalog).
    pub fn connector_id(&self) -> Option<&str> {
        self.0.connector_id.as_deref()
    }

    /// The connector's name: the catalog's when there is a catalog, else the
    /// server's claim.
    pub fn connector_name(&self) -> Option<&str> {
        self.0.connector_name.as_deref()
    }

    /// The connector's description, resolved as [`Self::connector_name`].
    pub fn connector_description(&self) -> Option<&str> {
        self.0.connector_description.as_deref()
    }

    /// The tool's title, resolved as [`Self::connector_name`].
    pub fn tool_title(&self) -> Option<&str> {
        self.0.tool_title.as_deref()
    }

    /// The tool's description, resolved as [`Self::connector_name`].
    pub fn tool_description(&self) -> Option<&str> {
        self.0.tool_description.as_deref()
    }

    /// The catalog's annotations (none without a catalog).
    pub fn annotations(&self) -> Annotations {
        self.0.annotations
    }

    /// The `_meta.tool_params` object, or `None` when `_meta` has none.
    /// An error only if the `_meta` text no longer parses, which the review
    /// has already ruled out.
    pub fn tool_params(&self) -> Result<Option<Value>, serde_json::Error> {
        self.0.tool_params()
    }
}

/// A tool call put to review, its fields trimmed and blanks dropped (what is
/// shown and assessed; identity is checked on the raw claims). The rules read
/// a part of it; all of it is returned in [`Verdict::request`](crate::input::Verdict::request) for the log.
///
/// Its texts are borrowed from the request while it is reviewed, and copied
/// only if the verdict keeps it ([`ToolCallReview::into_owned`]).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ToolCallReview<'a> {
    pub(crate) server: Cow<'a, str>,
    pub(crate) tool_name: Cow<'a, str>,
    pub(crate) arguments: Arguments<'a>,
    pub(crate) connector_id: Option<Cow<'a, str>>,
    pub(crate) connector_name: Option<Cow<'a, str>>,
    pub(crate) connector_description: Option<Cow<'a, str>>,
    pub(crate) tool_title: Option<Cow<'a, str>>,
    pub(crate) tool_description: Option<Cow<'a, str>>,
    pub(crate) annotations: Annotations,
}

impl ToolCallReview<'_> {
    /// [`ReviewedCall::tool_params`].
    pub(crate) fn tool_params(&self) -> Result<Option<Value>, serde_json::Error> {
        match &self.arguments {
            Arguments::None => Ok(None),
            Arguments::InMeta(meta) => Ok(parse_object(meta)?.remove(TOOL_PARAMS_KEY)),
        }
    }

    /// The call with its texts copied, to outlive the request.
    pub(crate) fn into_owned(self) -> ToolCallReview<'static> {
        fn owned(text: Option<Cow<'_, str>>) -> Option<Cow<'static, str>> {
            text.map(|text| Cow::Owned(text.into_owned()))
        }
        ToolCallReview {
            server: Cow::Owned(self.server.into_owned()),
            tool_name: Cow::Owned(self.tool_name.into_owned()),
            arguments: match self.arguments {
                Arguments::None => Arguments::None,
                Arguments::InMeta(meta) => Arguments::InMeta(Cow::Owned(meta.into_owned())),
            },
            connector_id: owned(self.connector_id),
            connector_name: owned(self.connector_name),
            connector_description: owned(self.connector_description),
            tool_title: owned(self.tool_title),
            tool_description: owned(self.tool_description),
            annotations: self.annotations,
        }
    }
}

/// Where the tool call's arguments are.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Arguments<'a> {
    /// None were given: `{}`.
    None,
    /// The `tool_params` object of this `_meta` text.
    InMeta(Cow<'a, str>),
}
