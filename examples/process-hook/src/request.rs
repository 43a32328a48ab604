//! The stdin document (see the crate docs), parsed, and handed to the
//! guardian's logic as its borrowed [`Input`] view.

use gatehouse_guardian::input::{
    Annotations, Catalog, CatalogTool, Input, Mode, Policy, RequestId as GuestId, Reviewer, Verdict,
};
use serde::Deserialize;
use serde_json::Value;

/// One review request: the module config and the contract's `review-request`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HookInput {
    /// The module configuration (default `{}`).
    #[serde(default = "empty_object")]
    config: Value,
    /// What to review.
    request: Request,
}

fn empty_object() -> Value {
    Value::Object(serde_json::Map::new())
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Request {
    elicitation: Elicitation,
    #[serde(default)]
    meta: Option<Value>,
    context: Context,
}

/// The guardian reads the mode and a form's schema; `message`, `url` and
/// `elicitation_id` are accepted and not used.
#[derive(Debug, Deserialize)]
#[serde(tag = "mode", rename_all = "lowercase")]
enum Elicitation {
    Form { requested_schema: Value },
    Url {},
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum RequestId {
    Number(i64),
    Text(String),
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "kebab-case")]
enum ApprovalPolicy {
    Untrusted,
    #[default]
    OnRequest,
    Granular(GranularFlags),
    Never,
}

/// The `granular` policy's flags; only `mcp_elicitations` matters to the
/// guardian, the others are accepted and not used.
#[derive(Debug, Deserialize)]
struct GranularFlags {
    #[serde(default = "yes")]
    mcp_elicitations: bool,
}

fn yes() -> bool {
    true
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
enum ApprovalsReviewer {
    User,
    #[default]
    AutoReview,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
enum CatalogEntry {
    #[default]
    Unavailable,
    NotListed,
    Listed(ListedTool),
}

#[derive(Debug, Deserialize)]
struct ListedTool {
    name: String,
    #[serde(default)]
    title: Option<String>,
    #[serde(default)]
    description: Option<String>,
    #[serde(default)]
    annotations: ToolAnnotations,
    #[serde(default, rename = "_meta")]
    meta: Option<Value>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct ToolAnnotations {
    #[serde(default)]
    read_only_hint: Option<bool>,
    #[serde(default)]
    destructive_hint: Option<bool>,
    #[serde(default)]
    open_world_hint: Option<bool>,
}

/// What the host knows; `protocol_version`, `session_id` and `turn_id` are
/// accepted and not used by the guardian.
#[derive(Debug, Deserialize)]
struct Context {
    server_name: String,
    request_id: RequestId,
    #[serde(default)]
    approval_policy: ApprovalPolicy,
    #[serde(default)]
    approvals_reviewer: ApprovalsReviewer,
    #[serde(default)]
    auto_approve_prompts: bool,
    #[serde(default)]
    catalog: CatalogEntry,
}

impl HookInput {
    /// Parses the stdin document.
    pub fn parse(text: &str) -> Result<HookInput, serde_json::Error> {
        serde_json::from_str(text)
    }

    /// Runs the guardian's decision on the request, exactly as the component
    /// does: JSON values become the JSON text the contract passes.
    pub fn review(&self) -> Verdict {
        let config = self.config.to_string();
        let request = &self.request;
        let context = &request.context;
        let schema = match &request.elicitation {
            Elicitation::Form {
                requested_schema, ..
            } => Some(requested_schema.to_string()),
            Elicitation::Url { .. } => None,
        };
        let meta = request
            .meta
            .as_ref()
            .filter(|meta| !meta.is_null())
            .map(Value::to_string);
        let tool_meta = match &context.catalog {
            CatalogEntry::Listed(tool) => tool
                .meta
                .as_ref()
                .filter(|meta| !meta.is_null())
                .map(Value::to_string),
            CatalogEntry::Unavailable | CatalogEntry::NotListed => None,
        };
        let catalog = match &context.catalog {
            CatalogEntry::Unavailable => Catalog::Unavailable,
            CatalogEntry::NotListed => Catalog::NotListed,
            CatalogEntry::Listed(tool) => Catalog::Listed(CatalogTool {
                name: &tool.name,
                title: tool.title.as_deref(),
                description: tool.description.as_deref(),
                annotations: Annotations {
                    read_only: tool.annotations.read_only_hint,
                    destructive: tool.annotations.destructive_hint,
                    open_world: tool.annotations.open_world_hint,
                },
                meta: tool_meta.as_deref(),
            }),
        };
        let view = Input {
            mode: match &schema {
                Some(requested_schema) => Mode::Form { requested_schema },
                None => Mode::Url,
            },
            meta: meta.as_deref(),
            server_name: &context.server_name,
            request_id: match &context.request_id {
                RequestId::Number(number) => GuestId::Number(*number),
                RequestId::Text(text) => GuestId::Text(text),
            },
            policy: match &context.approval_policy {
                ApprovalPolicy::Untrusted => Policy::Untrusted,
                ApprovalPolicy::OnRequest => Policy::OnRequest,
                ApprovalPolicy::Granular(flags) => Policy::Granular {
                    mcp_elicitations: flags.mcp_elicitations,
                },
                ApprovalPolicy::Never => Policy::Never,
            },
            reviewer: match context.approvals_reviewer {
                ApprovalsReviewer::User => Reviewer::User,
                ApprovalsReviewer::AutoReview => Reviewer::AutoReview,
            },
            auto_approve_prompts: context.auto_approve_prompts,
            catalog,
        };
        gatehouse_guardian::logic::review(&config, &view)
    }
}

#[cfg(test)]
mod tests {
    use gatehouse_guardian::input::Decision;
    use serde_json::json;

    use super::*;

    fn input(config: Value, context: Value) -> HookInput {
        let document = json!({
            "config": config,
            "request": {
                "elicitation": {"mode": "form", "message": "Allow?",
                                "requested_schema": {"type": "object", "properties": {}}},
                "meta": {"codex_request_type": "approval_request",
                         "codex_approval_kind": "mcp_tool_call", "tool_name": "read_file"},
                "context": context
            }
        });
        HookInput::parse(&document.to_string()).unwrap()
    }

    #[test]
    fn the_config_decides_like_the_component() {
        let context = json!({"server_name": "docs", "request_id": 1});
        let allowed = input(json!({"allow": [{"server": "docs"}]}), context.clone()).review();
        assert_eq!(allowed.decision, Decision::Accept("{}".to_owned()));
        let denied = input(json!({}), context).review();
        assert!(matches!(denied.decision, Decision::Decline(Some(_))));
    }

    #[test]
    fn context_fields_reach_the_logic() {
        let never = input(
            json!({"default": "allow"}),
            json!({"server_name": "docs", "request_id": "a", "approval_policy": "never"}),
        )
        .review();
        assert_eq!(never.decision, Decision::Decline(None));
        let destructive = input(
            json!({"default": "allow"}),
            json!({"server_name": "docs", "request_id": 1, "catalog": {"listed": {
                "name": "read_file", "annotations": {"destructiveHint": true}}}}),
        )
        .review();
        assert!(matches!(destructive.decision, Decision::Decline(Some(_))));
    }

    #[test]
    fn unknown_fields_are_refused() {
        let document = json!({
            "request": {
                "elicitation": {"mode": "url", "message": "Sign in", "url": "https://example.com",
                                "elicitation_id": "e"},
                "context": {"server_name": "docs", "request_id": 1}
            },
            "extra": 1
        });
        let error = HookInput::parse(&document.to_string()).unwrap_err();
        assert!(error.to_string().contains("extra"), "{error}");
        let mut valid = document;
        valid.as_object_mut().unwrap().remove("extra");
        let verdict = HookInput::parse(&valid.to_string()).unwrap().review();
        assert_eq!(verdict.decision, Decision::Defer);
    }
}
