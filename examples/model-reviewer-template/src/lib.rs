//! A gatehouse reviewer module that asks a language model, ready to change.
//!
//! Build: `cargo build --release --target wasm32-wasip2`
//! Check: `gatehouse conformance target/wasm32-wasip2/release/*.wasm` (README.md)
//!
//! World `model-reviewer`: the operator grants it a model (`model = "NAME"`
//! on its `[[review.modules]]` entry); gatehouse chooses the endpoint and the
//! key, bounds the wait and records every call in the audit log.
//!
//! The one rule: an approval of an MCP tool call (a form that asks for
//! nothing, with `codex_approval_kind = "mcp_tool_call"` in its `_meta`) is
//! put to the model, which answers allow or deny; everything else is not
//! this module's to decide and is deferred without asking. When the model
//! cannot be asked or gives no verdict, the module declines: a review that
//! could not happen must not let the call through, nor hand it on as if the
//! model had never been asked.
#![cfg(target_arch = "wasm32")]

wit_bindgen::generate!({
    world: "model-reviewer",
    // The contract, as `gatehouse new` writes it: the WIT of the gatehouse
    // that made this project.
    path: "wit",
});

use exports::gatehouse::reviewer::review::Guest;
use gatehouse::reviewer::model::{self, CompletionRequest, Message, Role};
use gatehouse::reviewer::types::{
    Decision, Elicitation, ModuleInfo, Outcome, ReviewRequest, RiskLevel,
};
use serde_json::Value;

/// What the model is told, before the call it assesses.
const POLICY: &str = "You review actions an AI coding agent wants to take through MCP tools. \
Allow what is read-only or easily undone; deny what deletes, overwrites, publishes, pays or \
sends data outside the organization. Answer only with JSON: \
{\"outcome\": \"allow\" or \"deny\", \"rationale\": \"one sentence\"}.";

/// The answer's shape, sent as the endpoint's response format.
const VERDICT_SCHEMA: &str = r#"{"type":"object","properties":{"outcome":{"type":"string","enum":["allow","deny"]},"rationale":{"type":"string"}},"required":["outcome","rationale"]}"#;

struct Reviewer;

impl Guest for Reviewer {
    fn describe() -> ModuleInfo {
        ModuleInfo {
            name: env!("CARGO_PKG_NAME").to_owned(),
            version: env!("CARGO_PKG_VERSION").to_owned(),
            // "stateless": this module keeps nothing between reviews.
            claims: vec!["stateless".to_owned()],
        }
    }

    fn review(_config: String, request: ReviewRequest) -> Outcome {
        match tool_call(&request) {
            Some((tool, arguments)) => ask(&request.context.server_name, &tool, &arguments),
            None => defer(),
        }
    }
}

/// The tool and its arguments (JSON text), when the request approves an MCP
/// tool call with a form that asks for nothing.
fn tool_call(request: &ReviewRequest) -> Option<(String, String)> {
    let Elicitation::Form(form) = &request.elicitation else {
        return None;
    };
    let schema: Value = serde_json::from_str(&form.requested_schema).ok()?;
    let asks_nothing = schema
        .get("properties")
        .is_none_or(|properties| properties.as_object().is_some_and(|p| p.is_empty()));
    let meta: Value = serde_json::from_str(request.meta.as_deref()?).ok()?;
    if !asks_nothing || meta.get("codex_approval_kind")?.as_str()? != "mcp_tool_call" {
        return None;
    }
    let tool = meta.get("tool_name")?.as_str()?.to_owned();
    let arguments = meta
        .get("tool_params")
        .map_or_else(|| "{}".to_owned(), Value::to_string);
    Some((tool, arguments))
}

/// Asks the model about one tool call and turns its verdict into the answer.
fn ask(server: &str, tool: &str, arguments: &str) -> Outcome {
    let request = CompletionRequest {
        messages: vec![
            Message {
                role: Role::System,
                content: POLICY.to_owned(),
            },
            Message {
                role: Role::User,
                content: format!(
                    "The agent calls the tool `{tool}` of the MCP server `{server}` with these \
                     arguments: {arguments}"
                ),
            },
        ],
        output_schema: Some(VERDICT_SCHEMA.to_owned()),
        max_output_tokens: Some(200),
    };
    let completion = match model::complete(&request) {
        Ok(completion) => completion,
        Err(error) => return decline(format!("the model could not be asked: {error:?}")),
    };
    let verdict: Option<Value> = serde_json::from_str(completion.text.trim()).ok();
    let rationale = verdict
        .as_ref()
        .and_then(|verdict| verdict.get("rationale")?.as_str())
        .unwrap_or("no rationale given")
        .to_owned();
    match verdict
        .as_ref()
        .and_then(|verdict| verdict.get("outcome")?.as_str())
    {
        Some("allow") => Outcome {
            decision: Decision::Accept(Some("{}".to_owned())),
            rationale: Some(format!("the model allows `{tool}`: {rationale}")),
            risk: Some(RiskLevel::Low),
        },
        Some("deny") => decline(format!("the model denies `{tool}`: {rationale}")),
        _ => decline("the model gave no verdict".to_owned()),
    }
}

fn decline(why: String) -> Outcome {
    Outcome {
        decision: Decision::Decline(Some(format!("Not allowed: {why}"))),
        rationale: Some(why),
        risk: Some(RiskLevel::High),
    }
}

fn defer() -> Outcome {
    Outcome {
        decision: Decision::Defer,
        rationale: None,
        risk: None,
    }
}

export!(Reviewer);
