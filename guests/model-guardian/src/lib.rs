//! The model guardian: the reference guardian as a `model-reviewer` of
//! contract 0.2, asking the language model the operator grants it where the
//! guardian's rules leave a tool call undecided.
//!
//! The review is the guardian's [`logic::review_with_model`]: Codex's routing
//! and metadata checks, the identity binding, the config's `deny` and `allow`
//! rules and the catalog's destructive and read-only hints decide as in the
//! guardian and never ask the model; an approval request that does not
//! describe the agent's related call is declined unasked; what is left goes to
//! the model once (`model.complete`; the host retries transient errors) and
//! its answer decides. The conversions between the contract and the
//! guardian's types are the guardian's `component_glue!`, plus the model's
//! types here.
//!
//! The host refuses to load a `model-reviewer` the operator has not granted a
//! model; the plain guardian (`gatehouse_guardian.wasm`, world `reviewer`) is
//! the one to run without.
//!
//! # Why the guardian's sources, not the guardian crate
//! The guardian's library modules are compiled into this crate from
//! `guests/guardian/src` (one copy of the source, the modules its `lib.rs`
//! declares except `component`). Depending on the `gatehouse-guardian`
//! package instead does not work: its lib target is a `cdylib` as well as an
//! `rlib`, and Cargo builds a dependency with all its crate types, so
//! - with the guardian's exports behind a cargo feature this crate turns off,
//!   building this crate alone rebuilds `gatehouse_guardian.wasm` without the
//!   feature and overwrites the guardian's component with one that exports
//!   nothing;
//! - building both in one `cargo build` (as `.ci/build-guests` does) unifies
//!   the feature, and the guardian's `review` exports are linked into this
//!   component next to its own: duplicate symbols.
#![cfg(target_arch = "wasm32")]

#[path = "../../guardian/src/config.rs"]
pub mod config;
#[path = "../../guardian/src/glue.rs"]
mod glue;
#[path = "../../guardian/src/input.rs"]
pub mod input;
#[path = "../../guardian/src/logic.rs"]
pub mod logic;
#[path = "../../guardian/src/meta.rs"]
mod meta;
#[path = "../../guardian/src/model_review.rs"]
pub mod model_review;

wit_bindgen::generate!({
    world: "model-reviewer",
    path: "../../wit",
});

use exports::gatehouse::reviewer::review::Guest;
use gatehouse::reviewer::call;
use gatehouse::reviewer::model;
use gatehouse::reviewer::types::{ModuleInfo, Outcome, ReviewRequest};

use crate::input::{Decision, Risk, Verdict};
use crate::model_review as plain;

crate::component_glue!();

/// The module's name in `describe`.
pub const NAME: &str = "model-guardian";
/// What the module claims: the guardian's behaviour (`guardian-compatible`:
/// the kit runs the `guardian` suite, whose cases mark with `with_model`
/// where the model decides here, in place of the catalog's hints and the
/// `default` rule; every other case it must answer as the guardian does
/// without asking its model), no state across reviews, and a model review
/// (`model-reviewer`: the kit's `model` suite).
pub const CLAIMS: &[&str] = &["guardian-compatible", "stateless", "model-reviewer"];

struct ModelGuardian;

impl Guest for ModelGuardian {
    fn describe() -> ModuleInfo {
        module_info(NAME, CLAIMS)
    }

    fn review(config: String, request: ReviewRequest) -> Outcome {
        let related = call::related();
        let related = related.as_ref().map(related_view);
        // What the model answered, for the log (never the prompt); `None`
        // when it was not asked or debug entries are not recorded.
        let mut answered: Option<Vec<(String, String)>> = None;
        let verdict =
            logic::review_with_model(&config, &input_view(&request), related.as_ref(), |ask| {
                let result = complete(ask);
                if debug_enabled() {
                    answered = Some(model_fields(&result));
                }
                result
            });
        log_reviewed(&verdict, related.as_ref());
        if let Some(mut fields) = answered {
            fields.extend(verdict_fields(&verdict));
            log_debug("guardian asked its model", &fields);
        }
        outcome(verdict)
    }
}

/// Asks the host's model, in the guardian's types.
fn complete(request: &plain::CompletionRequest) -> Result<plain::Completion, plain::ModelError> {
    let request = model::CompletionRequest {
        messages: request
            .messages
            .iter()
            .map(|message| model::Message {
                role: match message.role {
                    plain::Role::System => model::Role::System,
                    plain::Role::User => model::Role::User,
                    plain::Role::Assistant => model::Role::Assistant,
                },
                content: message.content.clone(),
            })
            .collect(),
        output_schema: request.output_schema.clone(),
        max_output_tokens: request.max_output_tokens,
    };
    match model::complete(&request) {
        Ok(completion) => Ok(plain::Completion {
            text: completion.text,
            model: completion.model,
            finish_reason: match completion.finish_reason {
                model::FinishReason::Stop => plain::FinishReason::Stop,
                model::FinishReason::Length => plain::FinishReason::Length,
                model::FinishReason::ContentFilter => plain::FinishReason::ContentFilter,
                model::FinishReason::Other => plain::FinishReason::Other,
            },
            input_tokens: completion.input_tokens,
            output_tokens: completion.output_tokens,
        }),
        Err(error) => Err(match error {
            model::ModelError::NotConfigured => plain::ModelError::NotConfigured,
            model::ModelError::Timeout => plain::ModelError::Timeout,
            model::ModelError::Cancelled => plain::ModelError::Cancelled,
            model::ModelError::RateLimited(detail) => plain::ModelError::RateLimited(detail),
            model::ModelError::Transient(detail) => plain::ModelError::Transient(detail),
            model::ModelError::Rejected(detail) => plain::ModelError::Rejected(detail),
        }),
    }
}

/// The log fields of the model's answer or error: the model, why it stopped
/// and the token counts, or the error; not the answer's text, which the
/// verdict's rationale carries as far as it is readable.
fn model_fields(result: &Result<plain::Completion, plain::ModelError>) -> Vec<(String, String)> {
    let field = |key: &str, value: String| (key.to_owned(), value);
    match result {
        Ok(completion) => {
            let mut fields = vec![
                field("model", completion.model.clone()),
                field(
                    "finish_reason",
                    match completion.finish_reason {
                        plain::FinishReason::Stop => "stop",
                        plain::FinishReason::Length => "length",
                        plain::FinishReason::ContentFilter => "content-filter",
                        plain::FinishReason::Other => "other",
                    }
                    .to_owned(),
                ),
            ];
            if let Some(tokens) = completion.input_tokens {
                fields.push(field("input_tokens", tokens.to_string()));
            }
            if let Some(tokens) = completion.output_tokens {
                fields.push(field("output_tokens", tokens.to_string()));
            }
            fields
        }
        Err(error) => {
            let (code, detail) = match error {
                plain::ModelError::NotConfigured => ("not-configured", None),
                plain::ModelError::Timeout => ("timeout", None),
                plain::ModelError::Cancelled => ("cancelled", None),
                plain::ModelError::RateLimited(detail) => ("rate-limited", Some(detail)),
                plain::ModelError::Transient(detail) => ("transient", Some(detail)),
                plain::ModelError::Rejected(detail) => ("rejected", Some(detail)),
            };
            let mut fields = vec![field("error", code.to_owned())];
            if let Some(detail) = detail {
                fields.push(field(
                    "detail",
                    plain::truncate(detail, plain::ERROR_DETAIL_CAP).into_owned(),
                ));
            }
            fields
        }
    }
}

/// The log fields of the verdict on the model's answer.
fn verdict_fields(verdict: &Verdict) -> Vec<(String, String)> {
    let decision = match verdict.decision {
        Decision::Defer => "defer",
        Decision::Accept(_) => "accept",
        Decision::Decline(_) => "decline",
        Decision::Cancel => "cancel",
    };
    let mut fields = vec![("decision".to_owned(), decision.to_owned())];
    if let Some(risk) = verdict.risk {
        let risk = match risk {
            Risk::Low => "low",
            Risk::Medium => "medium",
            Risk::High => "high",
            Risk::Critical => "critical",
        };
        fields.push(("risk".to_owned(), risk.to_owned()));
    }
    if let Some(rationale) = &verdict.rationale {
        fields.push(("rationale".to_owned(), rationale.clone()));
    }
    fields
}

export!(ModelGuardian);
