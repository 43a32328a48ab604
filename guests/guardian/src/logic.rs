//! The guardian's decision: Codex's Guardian review of MCP elicitations, with
//! rules from the module config in place of the model call, or, when the
//! operator grants the module a model, the rules and then the model.
//!
//! The order of checks is the contract with agents that rely on Codex's
//! behaviour; `host/conformance/suites/guardian/` holds one case per branch.
//! "Seed" line numbers below are those of Codex's session MCP code
//! (`session_mcp.rs`), the behavioural reference.
//!
//! # Strict review
//! `_meta.codex_strict_auto_review` asks for strict review only when it is
//! JSON `true` (seed 696-702). `false` is no request: the elicitation takes
//! the normal path as if the key were absent (seed 795 on). Any other value
//! (a string, a number, `null`, an object, an array) fails closed with the
//! strict decline ([`STRICT_DECLINE_MESSAGE`]), unreviewed: Codex's
//! elicitation host refuses such a marker before its reviewer is asked.
//!
//! A strict review declines with the strict text whatever it cannot take:
//! the approvals reviewer is not auto-review (seed 751-757), `_meta` carries
//! `persist` (any value, `null` too: seed 758-763), the elicitation is no
//! reviewable approval request (seed 765-769), or its identity does not bind
//! (below). What it can take
//! is assessed as any review is, and a review that fails there (a config that
//! does not parse, a model that fails) answers with Codex's review-failed
//! denial ("Automatic approval review failed: ..."), not the strict text: the
//! strict text is only for what strict review refuses to take. Outside strict
//! review, `persist` changes nothing: the request is reviewed (seed 795-865
//! never reads it).
//!
//! # Identity
//! Identity is compared on the raw strings the server wrote, untrimmed;
//! trimming (and dropping blanks) is only for what the review shows and
//! assesses. Codex does the same: its identity checks read `_meta` with
//! `metadata_str` (seed 721-729, 951-955, 961-963), and only the fields of
//! the review request go through `metadata_owned_string` (seed 914-946,
//! 964-969). So `" read_file "` is reviewed as `read_file` but is not the
//! identity `read_file`.
//!
//! - **The tool catalog** (every server, both paths): when the host holds the
//!   server's catalog, `_meta.tool_name` must equal the catalog entry's name
//!   exactly and `_meta.connector_id` the entry's `_meta.connector_id`
//!   exactly (both absent counts as equal; a non-string counts as absent, as
//!   `metadata_str` reads it); otherwise "identity does not match the tool
//!   catalog". The catalog's connector name and description, tool title,
//!   description and annotations then replace the server's claims.
//! - **The related call** (every server, both paths; contract 0.2): when the
//!   host ties the elicitation to the agent's call, `_meta.tool_name` (raw)
//!   and `_meta.tool_params` must describe it
//!   ([`model_review::call_mismatch_in_meta`]); a mismatch declines
//!   ([`model_review::mismatch_verdict`]). Codex has no such check; see
//!   below for where it applies.
//! - **`codex_apps` under strict review** (`bind_codex_apps_call`, seed
//!   703-740): Codex binds a strict review of its apps server to the tool
//!   call it registered. Gatehouse's registered call is the related call, and
//!   the registered tool's metadata is its catalog entry. The strict decline,
//!   unreviewed, unless all of these hold:
//!   1. `_meta._codex_apps` is an object whose `call_id` is a string (seed
//!      704-714);
//!   2. there is a related call, and it is a tool call (seed 715-720);
//!   3. `call_id` names it: it equals the related call's JSON-RPC id written
//!      as text the way Codex writes a request id (seed 995-999): a string id
//!      is its string, exactly; an integer id its decimal digits. So `"7"`
//!      names the calls with id `7` and id `"7"`; any other id (absent, not
//!      JSON, fractional) names nothing;
//!   4. `_meta.tool_name`, raw, equals the related call's tool name (seed
//!      724-727);
//!   5. the catalog lists that tool, and `_meta.connector_id`, raw, equals its
//!      `_meta.connector_id` (both absent is equal; seed 722). Without the
//!      catalog entry the registered connector is unknown: declined.
//!
//!   Codex also requires the registered call to have gone to this server
//!   (seed 721); the host only relates calls it forwarded to the server that
//!   asks, so that holds by construction. Codex then reviews the registered
//!   call (seed 731-737, 770); here the review already takes the arguments
//!   from the related call and the metadata from the catalog.
//!
//! `_codex_apps` is read only for the `codex_apps` server under strict
//! review: for other servers, and outside strict review, Codex neither
//! requires nor checks it (seed 704 and 738-740), and neither do we.
//!
//! Each check answers with its own message, Codex's first: for `codex_apps`
//! under strict review the binding above comes before everything else (as in
//! the seed), so a tool name that differs from the agent's call is the strict
//! decline; `tool_params` that differ from the agent's arguments, which
//! Codex's binding does not compare (it reviews the registered call's own
//! arguments), are then the related-call mismatch. On every other server a
//! mismatch is the mismatch message, under strict review too.
//!
//! # The assessment of a tool call
//! Once an elicitation is a reviewable tool call (Codex's routing and
//! metadata checks passed, the identity is bound to the catalog), it is
//! assessed in this order; the first step that decides, decides:
//!
//! 0. the config does not parse: Codex's review-failed denial;
//! 1. a `deny` rule covers the tool: decline (Codex's denial message);
//! 2. an `allow` rule covers it: accept;
//! 3. with a model ([`review_with_model`]): the model decides; the catalog's
//!    hints are part of the planned action it assesses (the spec's planned
//!    action carries annotations; docs/CODEX-PARITY.md, O5) and decide
//!    nothing themselves;
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
//!
//! The call a verdict was reached on is attached to it ([`Verdict::request`])
//! and described, for the guardian's debug log, by the same planned action
//! the model is shown ([`model_review::planned_action_for`]).

use std::borrow::Cow;

use serde_json::Value;

use crate::config::{Config, DEFAULT_DENIAL_INSTRUCTIONS, Fallback};
pub use crate::input::ReviewedCall;
use crate::input::{Annotations, Catalog, Decision, Input, Mode, Policy, Reviewer, Risk, Verdict};
use crate::input::{Arguments, ToolCallReview};
use crate::meta::{Meta, Shape, parse_object};
use crate::model_review::{
    self, CallKind, Completion, CompletionRequest, ModelError, NAME_CAP, RelatedCall,
};

pub use crate::meta::{
    APPROVAL_KIND_KEY, APPROVAL_KIND_TOOL_CALL, CODEX_APPS_CALL_ID_KEY, CODEX_APPS_META_KEY,
    CONNECTOR_DESCRIPTION_KEY, CONNECTOR_ID_KEY, CONNECTOR_NAME_KEY, PERSIST_KEY,
    REQUEST_TYPE_APPROVAL, REQUEST_TYPE_KEY, STRICT_KEY, TOOL_DESCRIPTION_KEY, TOOL_NAME_KEY,
    TOOL_PARAMS_KEY, TOOL_TITLE_KEY,
};

/// The server whose strict reviews must name the agent's call (the module
/// documentation, "Identity").
pub const CODEX_APPS_SERVER: &str = "codex_apps";

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

/// [`review_with_call`], keeping the tool call the verdict was reached on
/// ([`Verdict::request`]) only if `keep_call` says to: it is asked once, and
/// only when the review reached a tool call. Without it the review copies no
/// text out of the request (but a JSON string with escapes, which it must
/// unescape): the verdict's own texts are most of what it allocates.
/// The component asks whether its debug log, the one reader of the call, is
/// on.
///
/// ```
/// use gatehouse_guardian::input::{Catalog, Input, Mode, Policy, RequestId, Reviewer};
/// use gatehouse_guardian::logic::{review_with_call, review_with_call_keeping};
///
/// let input = Input {
///     mode: Mode::Form { requested_schema: r#"{"type":"object","properties":{}}"# },
///     meta: Some(r#"{"codex_request_type":"approval_request","codex_approval_kind":"mcp_tool_call","tool_name":"read_file"}"#),
///     server_name: "docs",
///     request_id: RequestId::Number(1),
///     policy: Policy::OnRequest,
///     reviewer: Reviewer::AutoReview,
///     auto_approve_prompts: false,
///     catalog: Catalog::Unavailable,
/// };
/// let kept = review_with_call(r#"{"allow":[{"tool":"read_*"}]}"#, &input, None);
/// let lean = review_with_call_keeping(r#"{"allow":[{"tool":"read_*"}]}"#, &input, None, || false);
/// assert_eq!(kept.decision, lean.decision);
/// assert_eq!(kept.rationale, lean.rationale);
/// assert_eq!(kept.request.map(|call| call.tool_name().to_owned()).as_deref(), Some("read_file"));
/// assert!(lean.request.is_none());
/// ```
pub fn review_with_call_keeping(
    config: &str,
    input: &Input<'_>,
    related: Option<&RelatedCall<'_>>,
    keep_call: fn() -> bool,
) -> Verdict {
    let with = With {
        keep_call,
        ..With::<NoModel>::rules(related)
    };
    review_by(config, input, with)
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
            keep_call: always,
        },
    )
}

/// The type of the model that [`review`] and [`review_with_call`] do not have.
type NoModel = fn(&CompletionRequest) -> Result<Completion, ModelError>;

/// What a review has beyond the elicitation: the related call and the
/// model; and whether the verdict keeps the tool call it was reached on.
struct With<'r, 'c, F> {
    related: Option<&'r RelatedCall<'c>>,
    model: Option<F>,
    keep_call: fn() -> bool,
}

/// Every verdict keeps its call, but for [`review_with_call_keeping`]'s.
fn always() -> bool {
    true
}

impl<'r, 'c> With<'r, 'c, NoModel> {
    /// The rules alone.
    fn rules(related: Option<&'r RelatedCall<'c>>) -> Self {
        With {
            related,
            model: None,
            keep_call: always,
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
        match marker {
            Value::Bool(true) => return strict_review(config, input, meta, with),
            // No request for strict review: the normal path.
            Value::Bool(false) => {}
            other => {
                return strict_decline(format!(
                    "{STRICT_KEY} must be exactly JSON true to ask for strict review (false for none), got {other}"
                ));
            }
        }
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
    let (mut request, claims) = match review_request(input, meta.as_ref()) {
        Step::NotRequested(why) => return defer(why),
        Step::Decline(why) => return decline_quietly(why.to_owned()),
        Step::Request(request, claims) => (request, claims),
    };
    match bind_identity(&mut request, claims, input.catalog) {
        Ok(()) => assess(config, input.meta, &request, with),
        Err(why) => decline_quietly(why.to_owned()),
    }
}

/// Assesses the request and attaches it to the verdict. `meta` is the
/// elicitation's `_meta` text (for the related-call check).
fn assess<F>(
    config: &str,
    meta: Option<&str>,
    request: &ToolCallReview<'_>,
    with: With<'_, '_, F>,
) -> Verdict
where
    F: FnOnce(&CompletionRequest) -> Result<Completion, ModelError>,
{
    let keep_call = with.keep_call;
    let mut verdict = assess_risk(config, request, meta, with);
    if keep_call() {
        verdict.request = Some(ReviewedCall(Box::new(request.clone().into_owned())));
    }
    verdict
}

/// Strict review (the marker is JSON `true`): what it cannot take is the
/// strict decline; the rest is assessed as any review.
fn strict_review<F>(
    config: &str,
    input: &Input<'_>,
    meta: &Meta<'_>,
    with: With<'_, '_, F>,
) -> Verdict
where
    F: FnOnce(&CompletionRequest) -> Result<Completion, ModelError>,
{
    if input.server_name == CODEX_APPS_SERVER
        && let Err(why) = bind_codex_apps_call(meta, input.catalog, with.related)
    {
        return strict_decline(why);
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
    let (mut request, claims) = match review_request(input, Some(meta)) {
        Step::NotRequested(why) | Step::Decline(why) => return strict_decline(why.to_owned()),
        Step::Request(request, claims) => (request, claims),
    };
    match bind_identity(&mut request, claims, input.catalog) {
        Ok(()) => assess(config, input.meta, &request, with),
        Err(why) => strict_decline(why.to_owned()),
    }
}

/// Codex's binding of a strict review of the `codex_apps` server to the
/// agent's call (the module documentation, "Identity"): `Err` says why the
/// elicitation does not name the related call, which is the strict decline.
fn bind_codex_apps_call(
    meta: &Meta<'_>,
    catalog: Catalog<'_>,
    related: Option<&RelatedCall<'_>>,
) -> Result<(), String> {
    let Some(call_id) = meta.codex_apps_call_id.as_deref() else {
        return Err(format!(
            "strict review of a {CODEX_APPS_SERVER} call needs a string {CODEX_APPS_META_KEY}.{CODEX_APPS_CALL_ID_KEY}"
        ));
    };
    let call_id_shown = model_review::truncate(call_id, NAME_CAP);
    let Some(call) = related else {
        return Err(format!(
            "{CODEX_APPS_META_KEY}.{CODEX_APPS_CALL_ID_KEY} {call_id_shown:?} names no call: the host tied no agent call to this elicitation"
        ));
    };
    if call.kind != CallKind::ToolCall {
        return Err(format!(
            "{CODEX_APPS_META_KEY}.{CODEX_APPS_CALL_ID_KEY} {call_id_shown:?} names no tool call: the agent's request is not a tool call"
        ));
    }
    if related_call_id(call).as_deref() != Some(call_id) {
        return Err(format!(
            "{CODEX_APPS_META_KEY}.{CODEX_APPS_CALL_ID_KEY} {call_id_shown:?} is not the id of the agent's call"
        ));
    }
    if meta.tool_name.as_deref() != Some(call.name) {
        return Err(format!(
            "{TOOL_NAME_KEY} is not exactly the tool of the agent's call {call_id_shown:?}"
        ));
    }
    // The registered tool's metadata: its catalog entry.
    let registered_connector = match catalog {
        Catalog::Listed(tool) if tool.name == call.name => {
            match tool.meta.map(Meta::parse).transpose() {
                Ok(tool_meta) => tool_meta.and_then(|tool_meta| tool_meta.connector_id),
                Err(_) => return Err("the catalog entry's _meta is not a JSON object".to_owned()),
            }
        }
        _ => {
            return Err(format!(
                "the catalog does not list the tool of the agent's call {call_id_shown:?}, so its connector is unknown"
            ));
        }
    };
    if meta.connector_id.as_deref() != registered_connector.as_deref() {
        return Err(format!(
            "{CONNECTOR_ID_KEY} is not exactly the connector of the agent's call {call_id_shown:?}"
        ));
    }
    Ok(())
}

/// The related call's JSON-RPC id as the text Codex writes a request id as
/// (seed 995-999): a string id's string, an integer id's decimal digits;
/// `None` for an absent id or any other.
fn related_call_id(call: &RelatedCall<'_>) -> Option<String> {
    match serde_json::from_str::<Value>(call.id?).ok()? {
        Value::String(id) => Some(id),
        Value::Number(id) if id.is_i64() || id.is_u64() => Some(id.to_string()),
        _ => None,
    }
}

/// Automated review applies only to `on-request` and `granular` with the
/// auto-review setting.
fn routes_to_automated_review(policy: Policy, reviewer: Reviewer) -> bool {
    matches!(policy, Policy::OnRequest | Policy::Granular { .. })
        && reviewer == Reviewer::AutoReview
}

enum Step<'m, 'a> {
    NotRequested(&'static str),
    Decline(&'static str),
    /// A reviewable tool call, with the `_meta` claims it was read from.
    Request(ToolCallReview<'m>, &'m Meta<'a>),
}

fn review_request<'m, 'a>(input: &Input<'m>, meta: Option<&'m Meta<'a>>) -> Step<'m, 'a> {
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
        (Some(Shape::Object), Some(text)) => Arguments::InMeta(Cow::Borrowed(text)),
        (Some(_), _) => return Step::Decline("tool_params must be an object"),
        (None, _) => Arguments::None,
    };
    Step::Request(
        ToolCallReview {
            server: Cow::Borrowed(input.server_name),
            tool_name,
            arguments,
            connector_id: non_blank(meta.connector_id.as_deref()),
            connector_name: non_blank(meta.connector_name.as_deref()),
            connector_description: non_blank(meta.connector_description.as_deref()),
            tool_title: non_blank(meta.tool_title.as_deref()),
            tool_description: non_blank(meta.tool_description.as_deref()),
            annotations: Annotations::default(),
        },
        meta,
    )
}

/// Replaces what the server claims about the tool with what its catalog says,
/// and refuses a request whose tool or connector (`claims`, raw) is not
/// exactly the catalog's (the module documentation, "Identity").
fn bind_identity<'r>(
    request: &mut ToolCallReview<'r>,
    claims: &Meta<'_>,
    catalog: Catalog<'r>,
) -> Result<(), &'static str> {
    const MISMATCH: &str = "identity does not match the tool catalog";
    let tool = match catalog {
        Catalog::Unavailable => return Ok(()),
        Catalog::NotListed => return Err(MISMATCH),
        Catalog::Listed(tool) => tool,
    };
    if claims.tool_name.as_deref() != Some(tool.name) {
        return Err(MISMATCH);
    }
    let tool_meta = match tool.meta.map(Meta::parse).transpose() {
        Ok(meta) => meta.unwrap_or_default(),
        Err(_) => return Err(MISMATCH),
    };
    if claims.connector_id.as_deref() != tool_meta.connector_id.as_deref() {
        return Err(MISMATCH);
    }
    request.connector_name = non_blank_text(tool_meta.connector_name);
    request.connector_description = non_blank_text(tool_meta.connector_description);
    request.tool_title = non_blank(tool.title);
    request.tool_description = non_blank(tool.description);
    request.annotations = tool.annotations;
    Ok(())
}

/// The risk assessment: the rules, then the model or the config's `default`
/// (the order is in the module documentation).
fn assess_risk<F>(
    config: &str,
    request: &ToolCallReview<'_>,
    meta: Option<&str>,
    with: With<'_, '_, F>,
) -> Verdict
where
    F: FnOnce(&CompletionRequest) -> Result<Completion, ModelError>,
{
    let config = match Config::parse(config) {
        Ok(config) => config,
        // The review cannot be made: Codex's review-failed denial, with the
        // default instructions (the config's own are unreadable).
        Err(error) => return model_review::review_failed(&error, DEFAULT_DENIAL_INSTRUCTIONS),
    };
    let (server, tool) = (&*request.server, &*request.tool_name);
    let subject = Subject::of(request);
    if let Some(rule) = config.deny.iter().find(|rule| rule.matches(server, tool)) {
        let why = match &rule.reason {
            Some(reason) => reason.to_string(),
            None => subject.sentence("", " matches a deny rule"),
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
            None => subject.sentence("", " matches an allow rule"),
        };
        return allow(why, Risk::Low);
    }
    // With a model, the catalog's hints do not decide: they are part of the
    // planned action the model assesses (docs/CODEX-PARITY.md, O5).
    if let Some(ask) = with.model {
        if let Some(finding) = mismatch() {
            return model_review::mismatch_verdict(finding);
        }
        return ask_model(&config, request, with.related, ask);
    }
    if request.annotations.destructive == Some(true) {
        return deny(
            &config,
            subject.sentence("", " is marked destructive and no allow rule covers it"),
            Risk::High,
        );
    }
    if let Some(finding) = mismatch() {
        return model_review::mismatch_verdict(finding);
    }
    if request.annotations.read_only == Some(true) {
        return allow(subject.sentence("", " is marked read-only"), Risk::Low);
    }
    match config.default {
        Fallback::Deny => deny(
            &config,
            subject.sentence("no rule allows ", ""),
            Risk::Medium,
        ),
        Fallback::Allow => allow(
            subject.sentence("", " is allowed by the default rule"),
            Risk::Medium,
        ),
    }
}

/// The model review of a call the rules left undecided: the planned action
/// (the related call's arguments when there is one), one question, the
/// verdict on the answer.
fn ask_model<F>(
    config: &Config<'_>,
    call: &ToolCallReview<'_>,
    related: Option<&RelatedCall<'_>>,
    ask: F,
) -> Verdict
where
    F: FnOnce(&CompletionRequest) -> Result<Completion, ModelError>,
{
    let action = match model_review::planned_action_of(call, related) {
        Ok(action) => action,
        // The related call's arguments are not JSON: fail closed, unasked.
        Err(why) => return model_review::review_failed(&why, config.denial_instructions()),
    };
    let request = model_review::review_request_with_config(config, &action, None);
    model_review::decide(ask(&request), config.denial_instructions())
}

/// How a rationale names the tool call: "tool `read_file` on server
/// `docs`", then the connector (its name, else its id) and the tool's title
/// when known.
struct Subject<'r> {
    /// The text, in pieces; the unused ones are empty.
    parts: [&'r str; 11],
}

impl<'r> Subject<'r> {
    fn of(request: &'r ToolCallReview) -> Self {
        let connector = request
            .connector_name
            .as_deref()
            .or(request.connector_id.as_deref());
        let (connector_open, connector, connector_close) = match connector {
            Some(connector) => (" (connector `", connector, "`)"),
            None => ("", "", ""),
        };
        let (title_open, title, title_close) = match request.tool_title.as_deref() {
            Some(title) => (" [", title, "]"),
            None => ("", "", ""),
        };
        Subject {
            parts: [
                "tool `",
                &request.tool_name,
                "` on server `",
                &request.server,
                "`",
                connector_open,
                connector,
                connector_close,
                title_open,
                title,
                title_close,
            ],
        }
    }

    /// `before`, the subject, then `after`, as one string (built in one
    /// allocation: these texts are made on every review).
    fn sentence(&self, before: &str, after: &str) -> String {
        let mut pieces = [""; 13];
        pieces[0] = before;
        pieces[1..12].copy_from_slice(&self.parts);
        pieces[12] = after;
        concat(&pieces)
    }
}

/// The pieces as one string, allocated once at its final length.
fn concat(pieces: &[&str]) -> String {
    let mut text = String::with_capacity(pieces.iter().map(|piece| piece.len()).sum());
    for piece in pieces {
        text.push_str(piece);
    }
    text
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
    let message = concat(&[
        "This action was rejected due to unacceptable risk.\nReason: ",
        &rationale,
        "\n",
        config.denial_instructions(),
    ]);
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

/// The text trimmed, if anything is left, borrowed.
fn non_blank(value: Option<&str>) -> Option<Cow<'_, str>> {
    value
        .map(str::trim)
        .filter(|value| !value.is_empty())
        .map(Cow::Borrowed)
}

/// [`non_blank`] of a text that may be the reader's own (a JSON string with
/// escapes): borrowed where it was.
fn non_blank_text(value: Option<Cow<'_, str>>) -> Option<Cow<'_, str>> {
    match value? {
        Cow::Borrowed(text) => non_blank(Some(text)),
        Cow::Owned(text) => non_blank(Some(&text)).map(|text| Cow::Owned(text.into_owned())),
    }
}

// An explicit path: the model guardian compiles this file from another
// crate, where `mod tests;` would be looked up elsewhere (rustfmt follows it).
#[cfg(test)]
#[path = "logic/tests.rs"]
mod tests;
