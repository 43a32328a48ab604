//! Test guest `model-probe`: a `model-reviewer` of contract 0.2.0 that shows
//! the host's side of the new imports. Its config is matched as text:
//!
//! - always: reads the related call (`call.related`) and puts it in its
//!   rationale as `related=KIND QUALIFIED NAME ARGS session=ID id=ID`, or
//!   `related=none`;
//! - `"ask"`: asks its model once (`"loop"`: until the host refuses), with the
//!   related call as the user message and, with `"schema"`, an output schema;
//!   an answer containing `allow` accepts, another declines with
//!   `model said: TEXT`, an error declines with `model error: CODE`;
//! - `"spin_after"`: after its model answers, spins forever (the module's
//!   deadline must still end it);
//! - `"retry"`: asks again and again whatever the answer, never returning
//!   (with `"spin_before"`, after 40 ms of spinning before each call): only
//!   the host's limits end it;
//! - without `"ask"`: declines with the related call as its message.
#![cfg(target_arch = "wasm32")]

wit_bindgen::generate!({
    world: "model-reviewer",
    path: "../../../wit",
});

use gatehouse::reviewer::call::{self, CallKind};
use gatehouse::reviewer::model::{self, CompletionRequest, Message, ModelError, Role};
use gatehouse::reviewer::types::{Decision, Elicitation, ModuleInfo, Outcome, ReviewRequest};

struct Guest;

fn related_text() -> String {
    match call::related() {
        None => "related=none".to_owned(),
        Some(call) => format!(
            "related={} {} {} {} session={} id={}",
            match call.kind {
                CallKind::ToolCall => "tool-call",
                CallKind::ResourceRead => "resource-read",
                CallKind::PromptGet => "prompt-get",
            },
            call.qualified_name,
            call.name,
            call.arguments.as_deref().unwrap_or("-"),
            call.session_id,
            call.id.as_deref().unwrap_or("-"),
        ),
    }
}

fn code(error: &ModelError) -> String {
    match error {
        ModelError::NotConfigured => "not-configured".to_owned(),
        ModelError::Timeout => "timeout".to_owned(),
        ModelError::Cancelled => "cancelled".to_owned(),
        ModelError::RateLimited(detail) => format!("rate-limited {detail}"),
        ModelError::Transient(detail) => format!("transient {detail}"),
        ModelError::Rejected(detail) => format!("rejected {detail}"),
    }
}

impl exports::gatehouse::reviewer::review::Guest for Guest {
    fn describe() -> ModuleInfo {
        ModuleInfo {
            name: "model-probe".to_owned(),
            version: "0.2.0".to_owned(),
            claims: Vec::new(),
        }
    }

    fn review(config: String, request: ReviewRequest) -> Outcome {
        let related = related_text();
        if !config.contains("\"ask\"") {
            return Outcome {
                decision: Decision::Decline(Some(related.clone())),
                rationale: Some(related),
                risk: None,
            };
        }
        let ask = CompletionRequest {
            messages: vec![
                Message {
                    role: Role::System,
                    content: "You are a probe.".to_owned(),
                },
                Message {
                    role: Role::User,
                    content: related.clone(),
                },
            ],
            output_schema: config.contains("\"schema\"").then(|| {
                r#"{"type":"object","properties":{"outcome":{"type":"string"}}}"#.to_owned()
            }),
            max_output_tokens: Some(64),
        };
        if config.contains("\"retry\"") {
            let spin = config.contains("\"spin_before\"");
            loop {
                if spin {
                    let until = std::time::Instant::now() + std::time::Duration::from_millis(40);
                    while std::time::Instant::now() < until {
                        std::hint::spin_loop();
                    }
                }
                let _ = std::hint::black_box(model::complete(&ask));
            }
        }
        let mut answer = model::complete(&ask);
        if config.contains("\"loop\"") {
            while answer.is_ok() {
                answer = model::complete(&ask);
            }
        }
        if config.contains("\"spin_after\"") {
            let mut spins: u64 = 0;
            loop {
                spins = std::hint::black_box(spins.wrapping_add(1));
            }
        }
        let decision = match answer {
            Ok(completion) if completion.text.contains("allow") => match request.elicitation {
                Elicitation::Form(_) => Decision::Accept(Some("{}".to_owned())),
                Elicitation::Url(_) => Decision::Accept(None),
            },
            Ok(completion) => Decision::Decline(Some(format!("model said: {}", completion.text))),
            Err(error) => Decision::Decline(Some(format!("model error: {}", code(&error)))),
        };
        Outcome {
            decision,
            rationale: Some(related),
            risk: None,
        }
    }
}

export!(Guest);
