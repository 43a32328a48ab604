//! The guardian's decision: Codex's Guardian review of MCP elicitations, with
//! rules from the module config in place of the model call, or, when the
//! operator grants the module a model, the rules and then the model.
//!
//! The order of checks is the contract with agents that rely on Codex's
//! behaviour; `host/conformance/suites/guardian/` holds one case per branch.
//!
//! # The assessment of a tool call
//! Once an elicitation is a reviewable tool call (Codex's routing and
//! metadata checks passed, the identity is bound to the catalog), it is
//! assessed in this order; the first step that decides, decides:
//!
//! 1. a `deny` rule covers the tool: decline (Codex's denial message);
//! 2. an `allow` rule covers it: accept;
//! 3. with a model ([`review_with_model`]): the model decides; the catalog's
//!    hints are part of the planned action it assesses, as in Codex, and
//!    decide nothing themselves;
//! 4. without one, the catalog marks it destructive: decline;
//! 5. the catalog marks it read-only: accept;
//! 6. the config's `default`.
//!
//! When the host ties the elicitation to the agent's real tool call (the
//! related call of contract 0.2), the approval request must describe that
//! call ([`model_review::call_mismatch_in_meta`]): a mismatch declines
//! ([`model_review::mismatch_verdict`]) in place of any accept of steps 2 and
//! 5, and before the model and the `default` (so the model is not asked, and
//! a `default` of `allow` or `deny` gives way to it). The declines of steps 1
//! and 4 stand as they are. Without a related call nothing changes.

use serde::Serialize;
use serde_json::{Map, Value};

use crate::config::{Config, Fallback};
use crate::input::{
    Annotations, Catalog, Decision, Input, Mode, Policy, RequestId, Reviewer, Risk, Verdict,
};
use crate::meta::{Meta, Shape};
use crate::model_review::{self, Completion, CompletionRequest, ModelError, RelatedCall};

/// `_meta` key: the server opts in to automated review.
pub const REQUEST_TYPE_KEY: &str = "codex_request_type";
/// The only `codex_request_type` value that asks for review.
pub const REQUEST_TYPE_APPROVAL: &str = "approval_request";
/// `_meta` key: what kind of approval is asked for.
pub const APPROVAL_KIND_KEY: &str = "codex_approval_kind";
/// The only reviewable approval kind.
pub const APPROVAL_KIND_TOOL_CALL: &str = "mcp_tool_call";
/// `_meta` key: strict review; must be exactly JSON `true`.
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

/// Reviews one elicitation. `config` is the module configuration (JSON text).
pub fn review(config: &str, input: &Input<'_>) -> Verdict {
    review_by(config, input, With::<NoModel>::rules(None))
}

/// [`review`], knowing the agent's call behind the elicitation when the host
/// could tie it (`related`): an approval request that does not describe a
/// related tool call is declined instead of accepted, and instead of the
/// config's `default` (see the module documentation). `None` is [`review`].
pub fn review_with_call(
    config: &str,
    input: &Input<'_>,
    related: Option<&RelatedCall<'_>>,
) -> Verdict {
    review_by(config, input, With::<NoModel>::rules(related))
}

/// [`review_with_call`] with a model in place of the config's `default`:
/// where the rules leave a reviewable tool call undecided (no `deny` or
/// `allow` rule covers it and the catalog marks it neither destructive nor
/// read-only), and the approval request does not contradict the related call,
/// `ask` is called once with the model review's request
/// ([`model_review::review_request_with_config`]: the config's `policy` and
/// token cap, the planned action with the related call's arguments, else
/// `_meta.tool_params`) and its answer decides ([`model_review::decide`]).
/// Every other path decides as [`review_with_call`] does and never calls
/// `ask`; the host retries transient model errors itself, so `ask` is not
/// retried.
pub fn review_with_model<F>(
    config: &str,
    input: &Input<'_>,
    related: Option<&RelatedCall<'_>>,
    ask: F,
) -> Verdict
where
    F: FnOnce(&CompletionRequest) -> Result<Completion, ModelError>,
{
    review_by(
        config,
        input,
        With {
            related,
            model: Some(ask),
        },
    )
}

/// The type of the model that [`review`] and [`review_with_call`] do not have.
type NoModel = fn(&CompletionRequest) -> Result<Completion, ModelError>;

/// What a review has beyond the elicitation: the related call and the model.
struct With<'r, 'c, F> {
    related: Option<&'r RelatedCall<'c>>,
    model: Option<F>,
}

impl<'r, 'c> With<'r, 'c, NoModel> {
    /// The rules alone.
    fn rules(related: Option<&'r RelatedCall<'c>>) -> Self {
        With {
            related,
            model: None,
        }
    }
}

fn review_by<F>(config: &str, input: &Input<'_>, with: With<'_, '_, F>) -> Verdict
where
    F: FnOnce(&CompletionRequest) -> Result<Completion, ModelError>,
{
    let meta = match input.meta.map(Meta::parse).transpose() {
        Ok(meta) => meta,
        Err(error) => {
            // The message of the `Map<String, Value>` parse the fields are
            // read as (they agree; this is the rare path).
            let error = input
                .meta
                .and_then(|text| parse_object(text).err())
                .unwrap_or(error);
            return decline_quietly(format!("_meta is not a JSON object: {error}"));
        }
    };
    if let Some(meta) = &meta
        && let Some(marker) = &meta.strict
    {
        return strict_review(config, input, meta, marker, with);
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
    if meta.as_ref().is_some_and(|meta| meta.persist) {
        return defer("a request to remember the approval is left to the user");
    }
    match bind_identity(request, input.catalog) {
        Ok(request) => assess(config, input.meta, request, with),
        Err(why) => decline_quietly(why.to_owned()),
    }
}

/// Assesses the request and attaches it to the verdict. `meta` is the
/// elicitation's `_meta` text (for the related-call check).
fn assess<F>(
    config: &str,
    meta: Option<&str>,
    request: Box<ToolCallReview>,
    with: With<'_, '_, F>,
) -> Verdict
where
    F: FnOnce(&CompletionRequest) -> Result<Completion, ModelError>,
{
    let request = ReviewedCall(request);
    let mut verdict = assess_risk(config, &request, meta, with);
    verdict.request = Some(request);
    verdict
}

fn strict_review<F>(
    config: &str,
    input: &Input<'_>,
    meta: &Meta<'_>,
    marker: &Value,
    with: With<'_, '_, F>,
) -> Verdict
where
    F: FnOnce(&CompletionRequest) -> Result<Completion, ModelError>,
{
    if *marker != Value::Bool(true) {
        return strict_decline(format!(
            "{STRICT_KEY} must be exactly JSON true, got {marker}"
        ));
    }
    if input.reviewer != Reviewer::AutoReview {
        return strict_decline(
            "strict review asked for, but the approvals reviewer is not auto-review".to_owned(),
        );
    }
    if meta.persist {
        return strict_decline(
            "strict review does not handle requests to remember the approval".to_owned(),
        );
    }
    let request = match review_request(input, Some(meta)) {
        Step::NotRequested(why) | Step::Decline(why) => return strict_decline(why.to_owned()),
        Step::Request(request) => request,
    };
    match bind_identity(request, input.catalog) {
        Ok(request) => assess(config, input.meta, request, with),
        Err(why) => strict_decline(why.to_owned()),
    }
}

/// Automated review applies only to `on-request` and `granular` with the
/// auto-review setting.
fn routes_to_automated_review(policy: Policy, reviewer: Reviewer) -> bool {
    matches!(policy, Policy::OnRequest | Policy::Granular { .. })
        && reviewer == Reviewer::AutoReview
}

/// The tool call a verdict was reached on ([`Verdict::request`]), for the log.
#[derive(Debug, Clone, PartialEq)]
pub struct ReviewedCall(Box<ToolCallReview>);

impl ReviewedCall {
    /// The call as JSON: what Codex hands its reviewer model. Built only when
    /// asked for (only a debug log wants it): a review does not build the
    /// arguments' JSON tree or serialise the call.
    pub fn to_json(&self) -> Option<Value> {
        let call = &*self.0;
        let arguments = match &call.arguments {
            Arguments::None => Value::Object(Map::new()),
            Arguments::InMeta(meta) => parse_object(meta)
                .ok()?
                .remove(TOOL_PARAMS_KEY)
                .unwrap_or_default(),
        };
        let id = match &call.request_id {
            OwnedRequestId::Text(text) => format!("mcp_elicitation:{}:{text}", call.server),
            OwnedRequestId::Number(number) => {
                format!("mcp_elicitation:{}:{number}", call.server)
            }
        };
        serde_json::to_value(ToolCallJson {
            id,
            server: &call.server,
            tool_name: &call.tool_name,
            arguments,
            connector_id: &call.connector_id,
            connector_name: &call.connector_name,
            connector_description: &call.connector_description,
            tool_title: &call.tool_title,
            tool_description: &call.tool_description,
            annotations: call.annotations,
        })
        .ok()
    }

    /// The server's configured name.
    pub fn server(&self) -> &str {
        &self.0.server
    }

    /// The tool's name, trimmed (the catalog's name when the catalog lists it).
    pub fn tool_name(&self) -> &str {
        &self.0.tool_name
    }

    /// The connector's id (from `_meta`, checked against the catalog's when
    /// there is a catalog).
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
        match &self.0.arguments {
            Arguments::None => Ok(None),
            Arguments::InMeta(meta) => Ok(parse_object(meta)?.remove(TOOL_PARAMS_KEY)),
        }
    }
}

/// A tool call put to review. The rules read a part of it; all of it is
/// returned in [`Verdict::request`] for the log.
#[derive(Debug, Clone, PartialEq)]
struct ToolCallReview {
    request_id: OwnedRequestId,
    server: String,
    tool_name: String,
    arguments: Arguments,
    connector_id: Option<String>,
    connector_name: Option<String>,
    connector_description: Option<String>,
    tool_title: Option<String>,
    tool_description: Option<String>,
    annotations: Annotations,
}

/// The server's request id, owned.
#[derive(Debug, Clone, PartialEq)]
enum OwnedRequestId {
    Text(String),
    Number(i64),
}

/// Where the tool call's arguments are.
#[derive(Debug, Clone, PartialEq)]
enum Arguments {
    /// None were given: `{}`.
    None,
    /// The `tool_params` object of this `_meta` text.
    InMeta(Box<str>),
}

/// A tool call as Codex hands it to its reviewer model.
#[derive(Serialize)]
struct ToolCallJson<'a> {
    id: String,
    server: &'a str,
    tool_name: &'a str,
    arguments: Value,
    connector_id: &'a Option<String>,
    connector_name: &'a Option<String>,
    connector_description: &'a Option<String>,
    tool_title: &'a Option<String>,
    tool_description: &'a Option<String>,
    #[serde(skip_serializing_if = "Annotations::is_empty")]
    annotations: Annotations,
}

enum Step {
    NotRequested(&'static str),
    Decline(&'static str),
    Request(Box<ToolCallReview>),
}

fn review_request(input: &Input<'_>, meta: Option<&Meta<'_>>) -> Step {
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
    if meta.approval_kind.as_deref() != Some(APPROVAL_KIND_TOOL_CALL) {
        return Step::Decline("metadata must declare mcp_tool_call approval kind");
    }
    if !form_without_properties(Mode::Form { requested_schema }) {
        return Step::Decline("guardian review only supports empty form schemas");
    }
    let Some(tool_name) = non_blank(meta.tool_name.as_deref()) else {
        return Step::Decline("metadata must include a non-empty tool_name");
    };
    let arguments = match (meta.tool_params, input.meta) {
        (Some(Shape::Object), Some(text)) => Arguments::InMeta(text.into()),
        (Some(_), _) => return Step::Decline("tool_params must be an object"),
        (None, _) => Arguments::None,
    };
    Step::Request(Box::new(ToolCallReview {
        request_id: match input.request_id {
            RequestId::Text(text) => OwnedRequestId::Text(text.to_owned()),
            RequestId::Number(number) => OwnedRequestId::Number(number),
        },
        server: input.server_name.to_owned(),
        tool_name,
        arguments,
        connector_id: non_blank(meta.connector_id.as_deref()),
        connector_name: non_blank(meta.connector_name.as_deref()),
        connector_description: non_blank(meta.connector_description.as_deref()),
        tool_title: non_blank(meta.tool_title.as_deref()),
        tool_description: non_blank(meta.tool_description.as_deref()),
        annotations: Annotations::default(),
    }))
}

/// Replaces what the server claims about the tool with what its catalog says,
/// and refuses a request whose tool or connector does not match the catalog.
fn bind_identity(
    mut request: Box<ToolCallReview>,
    catalog: Catalog<'_>,
) -> Result<Box<ToolCallReview>, &'static str> {
    const MISMATCH: &str = "identity does not match the tool catalog";
    let tool = match catalog {
        Catalog::Unavailable => return Ok(request),
        Catalog::NotListed => return Err(MISMATCH),
        Catalog::Listed(tool) => tool,
    };
    if tool.name != request.tool_name {
        return Err(MISMATCH);
    }
    let tool_meta = match tool.meta.map(Meta::parse).transpose() {
        Ok(meta) => meta.unwrap_or_default(),
        Err(_) => return Err(MISMATCH),
    };
    let catalog_connector = non_blank(tool_meta.connector_id.as_deref());
    if catalog_connector != request.connector_id {
        return Err(MISMATCH);
    }
    request.connector_name = non_blank(tool_meta.connector_name.as_deref());
    request.connector_description = non_blank(tool_meta.connector_description.as_deref());
    request.tool_title = non_blank(tool.title);
    request.tool_description = non_blank(tool.description);
    request.annotations = tool.annotations;
    Ok(request)
}

/// The risk assessment: the rules, then the model or the config's `default`
/// (the order is in the module documentation).
fn assess_risk<F>(
    config: &str,
    call: &ReviewedCall,
    meta: Option<&str>,
    with: With<'_, '_, F>,
) -> Verdict
where
    F: FnOnce(&CompletionRequest) -> Result<Completion, ModelError>,
{
    let config = match Config::parse(config) {
        Ok(config) => config,
        Err(error) => return decline_quietly(error),
    };
    let request = &*call.0;
    let (server, tool) = (request.server.as_str(), request.tool_name.as_str());
    let subject = describe(request);
    if let Some(rule) = config.deny.iter().find(|rule| rule.matches(server, tool)) {
        let why = match &rule.reason {
            Some(reason) => reason.to_string(),
            None => format!("{subject} matches a deny rule"),
        };
        return deny(&config, why, Risk::High);
    }
    // What the approval request gets wrong about the agent's call, if the
    // host tied one to it. Checked only where the review would accept or fall
    // back.
    let mismatch = || {
        with.related
            .and_then(|related| model_review::call_mismatch_in_meta(meta, related))
    };
    if let Some(rule) = config.allow.iter().find(|rule| rule.matches(server, tool)) {
        if let Some(finding) = mismatch() {
            return model_review::mismatch_verdict(finding);
        }
        let why = match &rule.reason {
            Some(reason) => reason.to_string(),
            None => format!("{subject} matches an allow rule"),
        };
        return allow(why, Risk::Low);
    }
    // With a model, the catalog's hints do not decide: they are part of the
    // planned action the model assesses, as in Codex.
    if let Some(ask) = with.model {
        if let Some(finding) = mismatch() {
            return model_review::mismatch_verdict(finding);
        }
        return ask_model(&config, call, with.related, ask);
    }
    if request.annotations.destructive == Some(true) {
        return deny(
            &config,
            format!("{subject} is marked destructive and no allow rule covers it"),
            Risk::High,
        );
    }
    if let Some(finding) = mismatch() {
        return model_review::mismatch_verdict(finding);
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

/// The model review of a call the rules left undecided: the planned action
/// (the related call's arguments when there is one), one question, the
/// verdict on the answer.
fn ask_model<F>(
    config: &Config<'_>,
    call: &ReviewedCall,
    related: Option<&RelatedCall<'_>>,
    ask: F,
) -> Verdict
where
    F: FnOnce(&CompletionRequest) -> Result<Completion, ModelError>,
{
    let action = match model_review::planned_action_for(call, related) {
        Ok(action) => action,
        // The related call's arguments are not JSON: fail closed, unasked.
        Err(why) => return model_review::review_failed(&why, config.denial_instructions()),
    };
    let request = model_review::review_request_with_config(config, &action, None);
    model_review::decide(ask(&request), config.denial_instructions())
}

fn describe(request: &ToolCallReview) -> String {
    let mut subject = String::with_capacity(64);
    for part in [
        "tool `",
        &request.tool_name,
        "` on server `",
        &request.server,
        "`",
    ] {
        subject.push_str(part);
    }
    if let Some(connector) = request
        .connector_name
        .as_ref()
        .or(request.connector_id.as_ref())
    {
        for part in [" (connector `", connector, "`)"] {
            subject.push_str(part);
        }
    }
    if let Some(title) = &request.tool_title {
        for part in [" [", title, "]"] {
            subject.push_str(part);
        }
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

fn deny(config: &Config<'_>, rationale: String, risk: Risk) -> Verdict {
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

fn asks_for_review(meta: &Meta<'_>) -> bool {
    meta.request_type.as_deref() == Some(REQUEST_TYPE_APPROVAL)
}

/// Whether the mode is a form whose schema has no properties.
fn form_without_properties(mode: Mode<'_>) -> bool {
    let Mode::Form { requested_schema } = mode else {
        return false;
    };
    crate::meta::has_no_properties(requested_schema)
}

fn parse_object(text: &str) -> Result<Map<String, Value>, serde_json::Error> {
    serde_json::from_str(text)
}

fn non_blank(value: Option<&str>) -> Option<String> {
    value
        .map(str::trim)
        .filter(|value| !value.is_empty())
        .map(str::to_owned)
}

// An explicit path: the model guardian compiles this file from another
// crate, where `mod tests;` would be looked up elsewhere (rustfmt follows it).
#[cfg(test)]
#[path = "logic/tests.rs"]
mod tests;
