//! The guardian's decision logic as it was before the review path was made
//! faster (`_meta` and schemas read into `serde_json::Value`, the tool call
//! serialised on every review, patterns compiled on every match), kept as
//! the reference the current logic must agree with. It was kept verbatim
//! until issue 16 brought the guardian closer to Codex; it follows those
//! changes in the same straightforward style: a strict marker of `false`
//! takes the normal path, `persist` matters only to strict review, identity
//! is compared with the catalog on the raw strings, an unreadable config is
//! Codex's review-failed denial, and the reviewed call is described as
//! Codex's planned action (no id, `tool`, absent fields left out, snake_case
//! hints; the corpus has no string long enough to be truncated).

#![allow(dead_code)]

//! The guardian's decision: Codex's Guardian review of MCP elicitations, with
//! rules from the module config in place of the model call.
//!
//! The order of checks is the contract with agents that rely on Codex's
//! behaviour; `host/conformance/suites/guardian/` holds one case per branch.

use serde_json::{Map, Value, json};

use gatehouse_guardian::input::{
    Annotations, Catalog, Decision, Input, Mode, Policy, Reviewer, Risk,
};
use serde::Deserialize;
use wildmatch::WildMatch;

/// The verdict as the reference computed it, with the tool call as Codex's
/// planned action.
#[derive(Debug, Clone, PartialEq)]
pub struct Verdict {
    pub decision: Decision,
    pub rationale: Option<String>,
    pub risk: Option<Risk>,
    pub request: Option<Value>,
}

/// `_meta` key: the server opts in to automated review.
pub const REQUEST_TYPE_KEY: &str = "codex_request_type";
/// The only `codex_request_type` value that asks for review.
pub const REQUEST_TYPE_APPROVAL: &str = "approval_request";
/// `_meta` key: what kind of approval is asked for.
pub const APPROVAL_KIND_KEY: &str = "codex_approval_kind";
/// The only reviewable approval kind.
pub const APPROVAL_KIND_TOOL_CALL: &str = "mcp_tool_call";
/// `_meta` key: strict review: `true` asks, `false` does not, anything else
/// fails closed.
pub const STRICT_KEY: &str = "codex_strict_auto_review";
/// `_meta` key: a request to remember the approval.
pub const PERSIST_KEY: &str = "persist";
/// `_meta` key: the tool under review.
pub const TOOL_NAME_KEY: &str = "tool_name";
/// `_meta` key: the tool call's arguments.
pub const TOOL_PARAMS_KEY: &str = "tool_params";
/// `_meta` key: the tool's title.
pub const TOOL_TITLE_KEY: &str = "tool_title";
/// `_meta` key: the tool's description.
pub const TOOL_DESCRIPTION_KEY: &str = "tool_description";
/// `_meta` key: the connector behind the tool.
pub const CONNECTOR_ID_KEY: &str = "connector_id";
/// `_meta` key: the connector's name.
pub const CONNECTOR_NAME_KEY: &str = "connector_name";
/// `_meta` key: the connector's description.
pub const CONNECTOR_DESCRIPTION_KEY: &str = "connector_description";

/// The message of every strict-review decline that is not a denial.
pub const STRICT_DECLINE_MESSAGE: &str = "Automated review of this operation failed. Do not proceed without asking the user for explicit approval.";

/// Reviews one elicitation, as the reference does.
pub fn review(config: &str, input: &Input<'_>) -> Verdict {
    let meta = match input.meta.map(parse_object).transpose() {
        Ok(meta) => meta,
        Err(error) => return decline_quietly(format!("_meta is not a JSON object: {error}")),
    };
    if let Some(meta) = &meta
        && let Some(marker) = meta.get(STRICT_KEY)
        && *marker != Value::Bool(false)
    {
        return strict_review(config, input, meta, marker);
    }
    match input.policy {
        Policy::Never => {
            return if input.auto_approve_prompts && form_without_properties(input.mode) {
                Verdict {
                    decision: Decision::Accept("{}".to_owned()),
                    rationale: Some(
                        "approval policy `never` and the permission profile auto-approves prompts"
                            .to_owned(),
                    ),
                    risk: None,
                    request: None,
                }
            } else {
                decline_quietly("approval policy `never` declines elicitations".to_owned())
            };
        }
        Policy::Granular {
            mcp_elicitations: false,
        } => {
            return decline_quietly(
                "the granular approval policy does not allow MCP elicitations".to_owned(),
            );
        }
        Policy::Granular { .. } | Policy::OnRequest | Policy::Untrusted => {}
    }
    if !routes_to_automated_review(input.policy, input.reviewer) {
        return defer("the approval policy and reviewer setting route this to the user");
    }
    let request = match review_request(input, meta.as_ref()) {
        Step::NotRequested(why) => return defer(why),
        Step::Decline(why) => return decline_quietly(why.to_owned()),
        Step::Request(request) => request,
    };
    match bind_identity(request, meta.as_ref(), input.catalog) {
        Ok(request) => assess(config, &request),
        Err(why) => decline_quietly(why.to_owned()),
    }
}

/// Assesses the request and attaches it to the verdict.
fn assess(config: &str, request: &ToolCallReview) -> Verdict {
    let mut verdict = assess_risk(config, request);
    verdict.request = Some(planned_action(request));
    verdict
}

fn strict_review(
    config: &str,
    input: &Input<'_>,
    meta: &Map<String, Value>,
    marker: &Value,
) -> Verdict {
    if *marker != Value::Bool(true) {
        return strict_decline(format!(
            "{STRICT_KEY} must be exactly JSON true to ask for strict review (false for none), got {marker}"
        ));
    }
    if input.reviewer != Reviewer::AutoReview {
        return strict_decline(
            "strict review asked for, but the approvals reviewer is not auto-review".to_owned(),
        );
    }
    if meta.contains_key(PERSIST_KEY) {
        return strict_decline(
            "strict review does not handle requests to remember the approval".to_owned(),
        );
    }
    let request = match review_request(input, Some(meta)) {
        Step::NotRequested(why) | Step::Decline(why) => return strict_decline(why.to_owned()),
        Step::Request(request) => request,
    };
    match bind_identity(request, Some(meta), input.catalog) {
        Ok(request) => assess(config, &request),
        Err(why) => strict_decline(why.to_owned()),
    }
}

/// Automated review applies only to `on-request` and `granular` with the
/// auto-review setting.
fn routes_to_automated_review(policy: Policy, reviewer: Reviewer) -> bool {
    matches!(policy, Policy::OnRequest | Policy::Granular { .. })
        && reviewer == Reviewer::AutoReview
}

/// A tool call put to review. The rules read a part of it; all of it is
/// returned in [`Verdict::request`] for the log, as [`planned_action`].
#[derive(Debug)]
struct ToolCallReview {
    server: String,
    tool_name: String,
    arguments: Value,
    connector_id: Option<String>,
    connector_name: Option<String>,
    connector_description: Option<String>,
    tool_title: Option<String>,
    tool_description: Option<String>,
    annotations: Annotations,
}

/// Codex's planned action of the call: `tool`, the fields present, the
/// hints in snake_case.
fn planned_action(request: &ToolCallReview) -> Value {
    let mut action = json!({
        "tool": "mcp_tool_call",
        "server": request.server,
        "tool_name": request.tool_name,
        "arguments": request.arguments,
    });
    for (key, value) in [
        ("connector_id", &request.connector_id),
        ("connector_name", &request.connector_name),
        ("connector_description", &request.connector_description),
        ("tool_title", &request.tool_title),
        ("tool_description", &request.tool_description),
    ] {
        if let Some(value) = value {
            action[key] = json!(value);
        }
    }
    let mut hints = Map::new();
    for (key, hint) in [
        ("destructive_hint", request.annotations.destructive),
        ("open_world_hint", request.annotations.open_world),
        ("read_only_hint", request.annotations.read_only),
    ] {
        if let Some(hint) = hint {
            hints.insert(key.to_owned(), json!(hint));
        }
    }
    if !hints.is_empty() {
        action["annotations"] = Value::Object(hints);
    }
    action
}

enum Step {
    NotRequested(&'static str),
    Decline(&'static str),
    Request(Box<ToolCallReview>),
}

fn review_request(input: &Input<'_>, meta: Option<&Map<String, Value>>) -> Step {
    let requested_schema = match input.mode {
        Mode::Url => {
            return if meta.is_some_and(asks_for_review) {
                Step::Decline("guardian review only supports form elicitations")
            } else {
                Step::NotRequested("a URL elicitation without an approval request")
            };
        }
        Mode::Form { requested_schema } => requested_schema,
    };
    let Some(meta) = meta else {
        return Step::NotRequested("no _meta: not an approval request");
    };
    if !asks_for_review(meta) {
        return Step::NotRequested("not an approval request");
    }
    if text(meta, APPROVAL_KIND_KEY) != Some(APPROVAL_KIND_TOOL_CALL) {
        return Step::Decline("metadata must declare mcp_tool_call approval kind");
    }
    if !form_without_properties(Mode::Form { requested_schema }) {
        return Step::Decline("guardian review only supports empty form schemas");
    }
    let Some(tool_name) = trimmed(meta, TOOL_NAME_KEY) else {
        return Step::Decline("metadata must include a non-empty tool_name");
    };
    let arguments = match meta.get(TOOL_PARAMS_KEY) {
        Some(value @ Value::Object(_)) => value.clone(),
        Some(_) => return Step::Decline("tool_params must be an object"),
        None => Value::Object(Map::new()),
    };
    Step::Request(Box::new(ToolCallReview {
        server: input.server_name.to_owned(),
        tool_name,
        arguments,
        connector_id: trimmed(meta, CONNECTOR_ID_KEY),
        connector_name: trimmed(meta, CONNECTOR_NAME_KEY),
        connector_description: trimmed(meta, CONNECTOR_DESCRIPTION_KEY),
        tool_title: trimmed(meta, TOOL_TITLE_KEY),
        tool_description: trimmed(meta, TOOL_DESCRIPTION_KEY),
        annotations: Annotations::default(),
    }))
}

/// Replaces what the server claims about the tool with what its catalog says,
/// and refuses a request whose tool or connector (as `meta` spells them,
/// untrimmed) is not exactly the catalog's.
fn bind_identity(
    mut request: Box<ToolCallReview>,
    meta: Option<&Map<String, Value>>,
    catalog: Catalog<'_>,
) -> Result<Box<ToolCallReview>, &'static str> {
    const MISMATCH: &str = "identity does not match the tool catalog";
    let tool = match catalog {
        Catalog::Unavailable => return Ok(request),
        Catalog::NotListed => return Err(MISMATCH),
        Catalog::Listed(tool) => tool,
    };
    let claimed = |key: &str| meta.and_then(|meta| text(meta, key));
    if claimed(TOOL_NAME_KEY) != Some(tool.name) {
        return Err(MISMATCH);
    }
    let tool_meta = match tool.meta.map(parse_object).transpose() {
        Ok(meta) => meta.unwrap_or_default(),
        Err(_) => return Err(MISMATCH),
    };
    if claimed(CONNECTOR_ID_KEY) != text(&tool_meta, CONNECTOR_ID_KEY) {
        return Err(MISMATCH);
    }
    request.connector_name = trimmed(&tool_meta, CONNECTOR_NAME_KEY);
    request.connector_description = trimmed(&tool_meta, CONNECTOR_DESCRIPTION_KEY);
    request.tool_title = non_blank(tool.title);
    request.tool_description = non_blank(tool.description);
    request.annotations = tool.annotations;
    Ok(request)
}

/// The rule-based risk assessment.
fn assess_risk(config: &str, request: &ToolCallReview) -> Verdict {
    let config = match Config::parse(config) {
        Ok(config) => config,
        Err(error) => {
            let reason = format!("Automatic approval review failed: {error}");
            return Verdict {
                decision: Decision::Decline(Some(format!(
                    "This action was rejected due to unacceptable risk.\nReason: {reason}\n{DEFAULT_DENIAL_INSTRUCTIONS}"
                ))),
                rationale: Some(reason),
                risk: Some(Risk::High),
                request: None,
            };
        }
    };
    let (server, tool) = (request.server.as_str(), request.tool_name.as_str());
    let subject = describe(request);
    if let Some(rule) = config.deny.iter().find(|rule| {
        WildMatch::new(&rule.server).matches(server) && WildMatch::new(&rule.tool).matches(tool)
    }) {
        let why = rule
            .reason
            .clone()
            .unwrap_or_else(|| format!("{subject} matches a deny rule"));
        return deny(&config, why, Risk::High);
    }
    if let Some(rule) = config.allow.iter().find(|rule| {
        WildMatch::new(&rule.server).matches(server) && WildMatch::new(&rule.tool).matches(tool)
    }) {
        let why = rule
            .reason
            .clone()
            .unwrap_or_else(|| format!("{subject} matches an allow rule"));
        return allow(why, Risk::Low);
    }
    if request.annotations.destructive == Some(true) {
        return deny(
            &config,
            format!("{subject} is marked destructive and no allow rule covers it"),
            Risk::High,
        );
    }
    if request.annotations.read_only == Some(true) {
        return allow(format!("{subject} is marked read-only"), Risk::Low);
    }
    match config.default {
        Fallback::Deny => deny(&config, format!("no rule allows {subject}"), Risk::Medium),
        Fallback::Allow => allow(
            format!("{subject} is allowed by the default rule"),
            Risk::Medium,
        ),
    }
}

fn describe(request: &ToolCallReview) -> String {
    let mut subject = format!(
        "tool `{}` on server `{}`",
        request.tool_name, request.server
    );
    if let Some(connector) = request
        .connector_name
        .as_ref()
        .or(request.connector_id.as_ref())
    {
        subject.push_str(&format!(" (connector `{connector}`)"));
    }
    if let Some(title) = &request.tool_title {
        subject.push_str(&format!(" [{title}]"));
    }
    subject
}

fn allow(rationale: String, risk: Risk) -> Verdict {
    Verdict {
        decision: Decision::Accept("{}".to_owned()),
        rationale: Some(rationale),
        risk: Some(risk),
        request: None,
    }
}

fn deny(config: &Config, rationale: String, risk: Risk) -> Verdict {
    let message = format!(
        "This action was rejected due to unacceptable risk.\nReason: {rationale}\n{}",
        config.denial_instructions()
    );
    Verdict {
        decision: Decision::Decline(Some(message)),
        rationale: Some(rationale),
        risk: Some(risk),
        request: None,
    }
}

fn defer(why: &str) -> Verdict {
    Verdict {
        decision: Decision::Defer,
        rationale: Some(why.to_owned()),
        risk: None,
        request: None,
    }
}

/// A decline before review: no message for the agent, the reason for the audit.
fn decline_quietly(why: String) -> Verdict {
    Verdict {
        decision: Decision::Decline(None),
        rationale: Some(why),
        risk: None,
        request: None,
    }
}

fn strict_decline(why: String) -> Verdict {
    Verdict {
        decision: Decision::Decline(Some(STRICT_DECLINE_MESSAGE.to_owned())),
        rationale: Some(why),
        risk: None,
        request: None,
    }
}

fn asks_for_review(meta: &Map<String, Value>) -> bool {
    text(meta, REQUEST_TYPE_KEY) == Some(REQUEST_TYPE_APPROVAL)
}

/// Whether the mode is a form whose schema has no properties.
fn form_without_properties(mode: Mode<'_>) -> bool {
    let Mode::Form { requested_schema } = mode else {
        return false;
    };
    match serde_json::from_str::<Value>(requested_schema) {
        Ok(schema) => match schema.get("properties") {
            None | Some(Value::Null) => true,
            Some(Value::Object(properties)) => properties.is_empty(),
            Some(_) => false,
        },
        Err(_) => false,
    }
}

fn parse_object(text: &str) -> Result<Map<String, Value>, serde_json::Error> {
    serde_json::from_str(text)
}

fn text<'m>(meta: &'m Map<String, Value>, key: &str) -> Option<&'m str> {
    meta.get(key).and_then(Value::as_str)
}

fn trimmed(meta: &Map<String, Value>, key: &str) -> Option<String> {
    non_blank(text(meta, key))
}

fn non_blank(value: Option<&str>) -> Option<String> {
    value
        .map(str::trim)
        .filter(|value| !value.is_empty())
        .map(str::to_owned)
}

// The configuration as it was (owned strings), verbatim.

/// The default instructions appended to a denial.
pub const DEFAULT_DENIAL_INSTRUCTIONS: &str = "The agent must not attempt to achieve the same outcome via workaround, indirect execution, or policy circumvention. Proceed only with a materially safer alternative, or if the user explicitly approves the action after being informed of the risk. Otherwise, stop and request user input.";

/// One allow or deny rule. `*` and `?` are wildcards.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Rule {
    /// Server name pattern (default `*`).
    #[serde(default = "any")]
    pub server: String,
    /// Tool name pattern (default `*`).
    #[serde(default = "any")]
    pub tool: String,
    /// Why the rule exists; used as the rationale when it matches.
    #[serde(default)]
    pub reason: Option<String>,
}

fn any() -> String {
    "*".to_owned()
}

impl Rule {
    /// Whether the rule covers `tool` on `server`.
    pub fn matches(&self, server: &str, tool: &str) -> bool {
        WildMatch::new(&self.server).matches(server) && WildMatch::new(&self.tool).matches(tool)
    }
}

/// What happens to a tool no rule or annotation decides.
#[derive(Debug, Default, Clone, Copy, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Fallback {
    /// Deny it (the default: fail closed).
    #[default]
    Deny,
    /// Allow it.
    Allow,
}

/// The guardian's configuration.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// Rules that deny; checked first.
    #[serde(default)]
    pub deny: Vec<Rule>,
    /// Rules that allow; checked after `deny`.
    #[serde(default)]
    pub allow: Vec<Rule>,
    /// What happens to a tool nothing else decides.
    #[serde(default)]
    pub default: Fallback,
    /// Replaces the instructions appended to a denial message.
    #[serde(default)]
    pub denial_instructions: Option<String>,
}

impl Config {
    /// Parses the module configuration (JSON text).
    pub fn parse(text: &str) -> Result<Config, String> {
        serde_json::from_str(text).map_err(|error| format!("invalid guardian config: {error}"))
    }

    /// The instructions appended to a denial message.
    pub fn denial_instructions(&self) -> &str {
        self.denial_instructions
            .as_deref()
            .unwrap_or(DEFAULT_DENIAL_INSTRUCTIONS)
    }
}
