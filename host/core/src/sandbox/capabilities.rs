//! The host side of contract 0.2's imports: `call` (the related call) and
//! `model` (the granted model). They answer from the review's
//! [`Granted`](super::granted::Granted), which the chain set for that module
//! and request.

use std::time::Instant;

use crate::context::CallKind;
use crate::contract::{call, model as wit};
use crate::model::{
    Completion, CompletionRequest, FinishReason, Message, ModelCallRecord, ModelError, ModelReply,
    Role,
};

use super::granted::ModelSession;
use super::state::ReviewState;

/// The most model calls one review may make; past it, `complete` answers
/// `rejected` without asking. The first refused call is recorded, later ones
/// are not (a guest that retries on every error cannot fill the audit line);
/// its own deadline ends such a loop.
pub const MAX_MODEL_CALLS_PER_REVIEW: usize = 8;

/// The most bytes of a model's answer the audit line keeps; a longer answer
/// is cut at a character boundary and marked, with its full sha256 beside it.
pub const MAX_AUDITED_ANSWER_BYTES: usize = 16 << 10;

impl call::Host for ReviewState {
    fn related(&mut self) -> Option<call::RelatedCall> {
        let related = self.granted.related_call.as_deref()?;
        Some(call::RelatedCall {
            session_id: related.session_id.clone(),
            kind: match related.kind {
                CallKind::ToolCall => call::CallKind::ToolCall,
                CallKind::ResourceRead => call::CallKind::ResourceRead,
                CallKind::PromptGet => call::CallKind::PromptGet,
            },
            qualified_name: related.qualified_name.clone(),
            name: related.name.clone(),
            arguments: related.arguments.as_ref().map(ToString::to_string),
            id: related.id.clone(),
        })
    }
}

impl wit::Host for ReviewState {
    fn complete(
        &mut self,
        request: wit::CompletionRequest,
    ) -> Result<wit::Completion, wit::ModelError> {
        let Some(session) = self.granted.model.as_mut() else {
            return Err(wit::ModelError::NotConfigured);
        };
        if session.calls.len() > MAX_MODEL_CALLS_PER_REVIEW {
            // Refused, and already recorded as refused once.
            return Err(wit::ModelError::Rejected(too_many_calls()));
        }
        // A guest past its own deadline asks nothing: the deadline thread
        // interrupts it at its next check.
        if self.deadline.passed() {
            return Err(wit::ModelError::Timeout);
        }
        let request = CompletionRequest {
            messages: request
                .messages
                .into_iter()
                .map(|message| Message {
                    role: match message.role {
                        wit::Role::System => Role::System,
                        wit::Role::User => Role::User,
                        wit::Role::Assistant => Role::Assistant,
                    },
                    content: message.content,
                })
                .collect(),
            output_schema: request.output_schema,
            max_output_tokens: request.max_output_tokens,
        };
        let prompt = request.prompt_json();
        let started = Instant::now();
        let reply = if session.calls.len() == MAX_MODEL_CALLS_PER_REVIEW {
            ModelReply::failed(ModelError::Rejected(too_many_calls()), 0)
        } else if session.cancel.is_cancelled() {
            ModelReply::failed(ModelError::Cancelled, 0)
        } else if started >= session.deadline {
            ModelReply::failed(ModelError::Timeout, 0)
        } else {
            // The wait is the model's time, not the guest's: the guest's
            // deadline stops while it lasts.
            let used = self.deadline.pause();
            let reply = session
                .grant
                .complete(&request, session.deadline, &session.cancel);
            self.deadline.resume(used);
            reply
        };
        let latency = started.elapsed();
        session
            .calls
            .push(record(session, &prompt, &reply, latency));
        match reply.result {
            Ok(completion) => Ok(wire_completion(completion)),
            Err(error) => Err(wire_error(error)),
        }
    }
}

fn too_many_calls() -> String {
    format!("a review may ask its model at most {MAX_MODEL_CALLS_PER_REVIEW} times")
}

/// `answer`, cut to [`MAX_AUDITED_ANSWER_BYTES`] at a character boundary and
/// marked when longer.
fn audited_answer(answer: &str) -> String {
    if answer.len() <= MAX_AUDITED_ANSWER_BYTES {
        return answer.to_owned();
    }
    let mut end = MAX_AUDITED_ANSWER_BYTES;
    while !answer.is_char_boundary(end) {
        end -= 1;
    }
    format!(
        "{}...[cut: {} of {} bytes kept]",
        &answer[..end],
        end,
        answer.len()
    )
}

fn record(
    session: &ModelSession,
    prompt: &str,
    reply: &ModelReply,
    latency: std::time::Duration,
) -> ModelCallRecord {
    let (model, input_tokens, output_tokens, answer, error, limit) = match &reply.result {
        Ok(completion) => (
            completion.model.clone(),
            completion.input_tokens,
            completion.output_tokens,
            Some(audited_answer(&completion.text)),
            None,
            None,
        ),
        Err(error) => (
            String::new(),
            None,
            None,
            None,
            Some(error.code().to_owned()),
            match error {
                ModelError::OverBudget(limit) => Some(limit.clone()),
                _ => None,
            },
        ),
    };
    ModelCallRecord {
        grant: session.grant.name().to_owned(),
        model,
        prompt_sha256: super::sha256_hex(prompt.as_bytes()),
        prompt: session.grant.audit_prompts().then(|| prompt.to_owned()),
        input_tokens,
        output_tokens,
        attempts: reply.attempts,
        latency_us: u64::try_from(latency.as_micros()).unwrap_or(u64::MAX),
        answer_sha256: reply
            .result
            .as_ref()
            .ok()
            .filter(|completion| completion.text.len() > MAX_AUDITED_ANSWER_BYTES)
            .map(|completion| super::sha256_hex(completion.text.as_bytes())),
        answer,
        error,
        limit,
    }
}

fn wire_completion(completion: Completion) -> wit::Completion {
    wit::Completion {
        text: completion.text,
        model: completion.model,
        finish_reason: match completion.finish_reason {
            FinishReason::Stop => wit::FinishReason::Stop,
            FinishReason::Length => wit::FinishReason::Length,
            FinishReason::ContentFilter => wit::FinishReason::ContentFilter,
            FinishReason::Other => wit::FinishReason::Other,
        },
        input_tokens: completion.input_tokens,
        output_tokens: completion.output_tokens,
    }
}

fn wire_error(error: ModelError) -> wit::ModelError {
    match error {
        ModelError::NotConfigured => wit::ModelError::NotConfigured,
        ModelError::Timeout => wit::ModelError::Timeout,
        ModelError::Cancelled => wit::ModelError::Cancelled,
        ModelError::RateLimited(detail) => wit::ModelError::RateLimited(detail),
        ModelError::Transient(detail) => wit::ModelError::Transient(detail),
        ModelError::Rejected(detail) => wit::ModelError::Rejected(detail),
        // The contract's nearest word: refused for now, try later.
        ModelError::OverBudget(detail) => wit::ModelError::RateLimited(detail),
    }
}
