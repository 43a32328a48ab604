//! The model capability (contract 0.2): a language model the host lets a
//! module ask, on the operator's terms.
//!
//! A module that imports `gatehouse:reviewer/model` (the `model-reviewer`
//! world) may call `complete` during a review. The module never chooses the
//! endpoint, the model or the key: the operator grants it one model by name
//! ([`ModelGrant`]), and the host makes the call through a [`Model`] the
//! embedder provides (gatehouse's own, in `gatehouse-models`, speaks the
//! OpenAI-compatible `/chat/completions` API). The core knows no HTTP.
//!
//! Time: a model review has a wall-clock budget of its own
//! ([`ModelGrant::timeout`], for all of a review's calls together), while the
//! module's deadline keeps bounding the time it spends running wasm: the
//! deadline is paused for as long as the guest waits on its model.
//!
//! Every call is recorded ([`ModelCallRecord`]) in the module's report and so
//! in the audit line: model, prompt sha256, tokens, attempts, latency and the
//! raw answer; the prompt text only where the grant says so.
//!
//! ```
//! use std::sync::Arc;
//! use std::time::{Duration, Instant};
//! use gatehouse_core::model::*;
//!
//! /// A model that allows everything, for a test.
//! struct AlwaysAllow;
//! impl Model for AlwaysAllow {
//!     fn complete(&self, request: &CompletionRequest, _deadline: Instant, _cancel: &Cancel) -> ModelReply {
//!         assert!(!request.messages.is_empty());
//!         ModelReply::answered(Completion::text("stub", r#"{"outcome":"allow"}"#))
//!     }
//! }
//! let grant = ModelGrant::new("review", Arc::new(AlwaysAllow)).with_timeout(Duration::from_secs(5));
//! let request = CompletionRequest::new(vec![Message::user("Is `ls` safe?")]);
//! let reply = grant.complete(&request, Instant::now() + grant.timeout(), &Cancel::new());
//! assert_eq!(reply.result.unwrap().text, r#"{"outcome":"allow"}"#);
//! ```

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::model_budget::{BudgetLedger, ModelBudget};

/// Who wrote a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Instructions: the policy and the output contract.
    System,
    /// The material to assess.
    User,
    /// An earlier answer of the model.
    Assistant,
}

/// One message of a completion request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Message {
    /// Who wrote it.
    pub role: Role,
    /// Its text.
    pub content: String,
}

impl Message {
    /// A system message.
    pub fn system(content: impl Into<String>) -> Self {
        Message {
            role: Role::System,
            content: content.into(),
        }
    }

    /// A user message.
    pub fn user(content: impl Into<String>) -> Self {
        Message {
            role: Role::User,
            content: content.into(),
        }
    }
}

/// What a module asks its model.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CompletionRequest {
    /// The conversation, in order.
    pub messages: Vec<Message>,
    /// A JSON schema (text) the answer should follow; the provider sends it
    /// as a JSON-schema response format where the endpoint supports one.
    pub output_schema: Option<String>,
    /// The most tokens the module wants back; the operator's
    /// `max_output_tokens` caps it.
    pub max_output_tokens: Option<u32>,
}

impl CompletionRequest {
    /// A request of these messages, no schema, no token limit of its own.
    pub fn new(messages: Vec<Message>) -> Self {
        CompletionRequest {
            messages,
            output_schema: None,
            max_output_tokens: None,
        }
    }

    /// The bytes the audit line's `prompt_sha256` is taken over: the messages
    /// and the schema as compact JSON.
    pub fn prompt_json(&self) -> String {
        serde_json::json!({
            "messages": self.messages,
            "output_schema": self.output_schema,
        })
        .to_string()
    }
}

/// Why the model stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum FinishReason {
    /// It finished its answer.
    Stop,
    /// It reached the token limit.
    Length,
    /// The provider's content filter stopped it.
    ContentFilter,
    /// Anything else the provider said.
    Other,
}

/// The model's answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Completion {
    /// The answer's text.
    pub text: String,
    /// The model that answered, as the provider names it.
    pub model: String,
    /// Why it stopped.
    pub finish_reason: FinishReason,
    /// Tokens in the prompt, when the provider says.
    pub input_tokens: Option<u32>,
    /// Tokens in the answer, when the provider says.
    pub output_tokens: Option<u32>,
}

impl Completion {
    /// A finished answer of `text` from `model`, with no token counts.
    pub fn text(model: impl Into<String>, text: impl Into<String>) -> Self {
        Completion {
            text: text.into(),
            model: model.into(),
            finish_reason: FinishReason::Stop,
            input_tokens: None,
            output_tokens: None,
        }
    }
}

/// Why a completion failed. What a module sees, and what the audit records.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ModelError {
    /// The module has no model: the operator granted none, or the grant
    /// names a model the host does not define.
    #[error("no model is configured for this module")]
    NotConfigured,
    /// The model review's wall-clock budget ran out.
    #[error("the model did not answer in time")]
    Timeout,
    /// The elicitation was cancelled while the model was asked.
    #[error("the review was cancelled")]
    Cancelled,
    /// The provider refused for now (HTTP 429), after every attempt.
    #[error("the model provider is rate limiting: {0}")]
    RateLimited(String),
    /// A transport or server error that may pass, after every attempt.
    #[error("the model provider failed: {0}")]
    Transient(String),
    /// The provider refused the request (bad request, authentication, a
    /// refusal); trying again would not help.
    #[error("the model provider rejected the request: {0}")]
    Rejected(String),
    /// The model's budget ([`ModelGrant::with_budget`]) is spent for now; the
    /// text names the limit. No request was sent.
    #[error("the model's budget is spent: {0}")]
    OverBudget(String),
}

impl ModelError {
    /// A stable one-word code, for the audit line.
    pub fn code(&self) -> &'static str {
        match self {
            ModelError::NotConfigured => "not-configured",
            ModelError::Timeout => "timeout",
            ModelError::Cancelled => "cancelled",
            ModelError::RateLimited(_) => "rate-limited",
            ModelError::Transient(_) => "transient",
            ModelError::Rejected(_) => "rejected",
            ModelError::OverBudget(_) => "over-budget",
        }
    }
}

/// A [`Model`]'s answer to one `complete` call: the result and how many
/// attempts it took.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelReply {
    /// The completion, or why there is none.
    pub result: Result<Completion, ModelError>,
    /// HTTP requests made (retries included); 0 when none was sent.
    pub attempts: u32,
}

impl ModelReply {
    /// An answer on the first attempt.
    pub fn answered(completion: Completion) -> Self {
        ModelReply {
            result: Ok(completion),
            attempts: 1,
        }
    }

    /// A failure after `attempts` attempts.
    pub fn failed(error: ModelError, attempts: u32) -> Self {
        ModelReply {
            result: Err(error),
            attempts,
        }
    }
}

/// A language model the host can ask on a module's behalf.
///
/// `complete` is called on the review's own thread (a blocking one) and
/// returns when the model answers, at `deadline` ([`ModelError::Timeout`]),
/// or when `cancel` fires ([`ModelError::Cancelled`]), whichever is first.
/// Retries, backoff and the operator's limits (`max_output_tokens`,
/// temperature) are the implementation's business; every attempt must end
/// by `deadline`.
pub trait Model: Send + Sync {
    /// Asks the model.
    fn complete(
        &self,
        request: &CompletionRequest,
        deadline: Instant,
        cancel: &Cancel,
    ) -> ModelReply;
}

/// The default wall-clock budget of a model review: Codex's review timeout.
pub const DEFAULT_MODEL_TIMEOUT: Duration = Duration::from_secs(90);

/// The operator's grant of one model to one module: which model, for how
/// long per review, and whether the audit may keep the prompt text.
#[derive(Clone)]
pub struct ModelGrant {
    name: Arc<str>,
    model: Arc<dyn Model>,
    timeout: Duration,
    audit_prompts: bool,
    budget: Option<Arc<BudgetLedger>>,
}

impl fmt::Debug for ModelGrant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ModelGrant")
            .field("name", &self.name)
            .field("timeout", &self.timeout)
            .field("audit_prompts", &self.audit_prompts)
            .finish_non_exhaustive()
    }
}

impl ModelGrant {
    /// Grants the model configured as `name`, with the default timeout
    /// ([`DEFAULT_MODEL_TIMEOUT`]) and no prompt text in the audit.
    pub fn new(name: impl Into<Arc<str>>, model: Arc<dyn Model>) -> Self {
        ModelGrant {
            name: name.into(),
            model,
            timeout: DEFAULT_MODEL_TIMEOUT,
            audit_prompts: false,
            budget: None,
        }
    }

    /// Sets the wall-clock budget of one review's model calls together.
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Lets the audit line carry the prompt text (off by default: prompts
    /// hold what the server and the agent sent).
    pub fn with_audit_prompts(mut self, audit_prompts: bool) -> Self {
        self.audit_prompts = audit_prompts;
        self
    }

    /// Bounds what the model may spend: calls past `budget` are answered
    /// [`ModelError::OverBudget`] without being sent. The budget is the
    /// model's, shared by every clone of this grant (every module granted the
    /// model); a grant made without one spends without bound, so a host should
    /// give every grant one (`gatehouse` gives each `[models.NAME]` its
    /// `budget`, 600 calls and 2,000,000 tokens an hour by default).
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use std::time::{Duration, Instant};
    /// # use gatehouse_core::model::*;
    /// # use gatehouse_core::model_budget::ModelBudget;
    /// # struct Echo;
    /// # impl Model for Echo {
    /// #     fn complete(&self, _: &CompletionRequest, _: Instant, _: &Cancel) -> ModelReply {
    /// #         ModelReply::answered(Completion::text("echo", "{}"))
    /// #     }
    /// # }
    /// let grant = ModelGrant::new("review", Arc::new(Echo))
    ///     .with_budget(ModelBudget::new(100, 200_000, Duration::from_secs(600)));
    /// assert_eq!(grant.budget().map(|budget| budget.calls()), Some(100));
    /// ```
    pub fn with_budget(mut self, budget: ModelBudget) -> Self {
        self.budget = Some(Arc::new(BudgetLedger::new(budget)));
        self
    }

    /// The budget, if the grant has one.
    pub fn budget(&self) -> Option<ModelBudget> {
        self.budget.as_ref().map(|ledger| ledger.budget())
    }

    /// What the budget still allows in its window now (calls, tokens), if
    /// the grant has one.
    pub fn budget_remaining(&self) -> Option<(u32, u64)> {
        self.budget
            .as_ref()
            .map(|ledger| ledger.remaining(Instant::now()))
    }

    /// Asks the model within the grant's budget: a call the budget refuses
    /// is answered [`ModelError::OverBudget`] (no attempt made); one that is
    /// sent counts each of its attempts as a call, and its tokens, when it
    /// returns.
    ///
    /// The call is a span of a trace ([`gatehouse_base::trace`]): `model
    /// call`, with the grant, the attempts, the tokens reported and the
    /// outcome (`answered` or the error's code).
    pub fn complete(
        &self,
        request: &CompletionRequest,
        deadline: Instant,
        cancel: &Cancel,
    ) -> ModelReply {
        let span = tracing::debug_span!(
            target: gatehouse_base::trace::TARGET,
            "model call",
            otel.name = %format_args!("model call {}", gatehouse_base::trace::attribute(&self.name)),
            otel.kind = "client",
            otel.status_code = tracing::field::Empty,
            gen_ai.operation.name = "chat",
            gatehouse.model = %gatehouse_base::trace::attribute(&self.name),
            gatehouse.model.attempts = tracing::field::Empty,
            gen_ai.usage.input_tokens = tracing::field::Empty,
            gen_ai.usage.output_tokens = tracing::field::Empty,
            gatehouse.outcome = tracing::field::Empty,
        );
        let _in = span.enter();
        let reply = self.complete_within_budget(request, deadline, cancel);
        if !span.is_disabled() {
            span.record("gatehouse.model.attempts", reply.attempts);
            match &reply.result {
                Ok(completion) => {
                    span.record("gatehouse.outcome", "answered");
                    if let Some(tokens) = completion.input_tokens {
                        span.record("gen_ai.usage.input_tokens", tokens);
                    }
                    if let Some(tokens) = completion.output_tokens {
                        span.record("gen_ai.usage.output_tokens", tokens);
                    }
                }
                Err(error) => {
                    span.record("gatehouse.outcome", error.code());
                    span.record("otel.status_code", "error");
                }
            }
        }
        reply
    }

    fn complete_within_budget(
        &self,
        request: &CompletionRequest,
        deadline: Instant,
        cancel: &Cancel,
    ) -> ModelReply {
        let Some(ledger) = &self.budget else {
            return self.model.complete(request, deadline, cancel);
        };
        if let Err(limit) = ledger.admit(&self.name, Instant::now()) {
            return ModelReply::failed(ModelError::OverBudget(limit), 0);
        }
        let reply = self.model.complete(request, deadline, cancel);
        // Every HTTP request counts: the admitted call is one, retries more.
        let now = Instant::now();
        ledger.retried(reply.attempts.saturating_sub(1), now);
        ledger.spent(spent_tokens(request, &reply), now);
        reply
    }

    /// The configured name (`[models.NAME]`).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The model.
    pub fn model(&self) -> &Arc<dyn Model> {
        &self.model
    }

    /// The wall-clock budget of one review's model calls.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// Whether the audit keeps the prompt text.
    pub fn audit_prompts(&self) -> bool {
        self.audit_prompts
    }
}

/// The tokens a call spent: for the attempt that answered, what the
/// provider reported (else a token per four bytes of prompt and answer);
/// for every attempt that failed, the prompt's estimate (it was sent).
fn spent_tokens(request: &CompletionRequest, reply: &ModelReply) -> u64 {
    let estimate = |bytes: usize| u64::try_from(bytes.div_ceil(4)).unwrap_or(u64::MAX);
    let prompt_bytes: usize = request
        .messages
        .iter()
        .map(|message| message.content.len())
        .sum();
    let prompt = estimate(prompt_bytes).max(1);
    let (answered, last) = match &reply.result {
        Ok(completion) => (
            1,
            completion
                .input_tokens
                .map_or(prompt, u64::from)
                .saturating_add(
                    completion
                        .output_tokens
                        .map_or_else(|| estimate(completion.text.len()), u64::from),
                ),
        ),
        Err(_) => (0, 0),
    };
    let failed = u64::from(reply.attempts.saturating_sub(answered));
    prompt.saturating_mul(failed).saturating_add(last)
}

/// Cancels what a review is waiting for: set by whoever owns the
/// elicitation (the server cancelled it, the host is shutting down), awaited
/// or polled by a [`Model`]. Cheap to clone; clones share one state.
///
/// ```
/// use gatehouse_core::model::Cancel;
/// let cancel = Cancel::new();
/// let seen = cancel.clone();
/// assert!(!seen.is_cancelled());
/// cancel.cancel();
/// assert!(seen.is_cancelled());
/// Cancel::never().cancel();
/// assert!(!Cancel::never().is_cancelled());
/// ```
#[derive(Debug, Clone, Default)]
pub struct Cancel {
    inner: Arc<CancelInner>,
}

#[derive(Debug, Default)]
struct CancelInner {
    cancelled: AtomicBool,
    notify: tokio::sync::Notify,
    /// Set on [`Cancel::never`]'s token, whose `cancel` does nothing.
    inert: bool,
}

impl Cancel {
    /// A token not yet cancelled.
    pub fn new() -> Self {
        Cancel::default()
    }

    /// A token nobody can cancel (shared; costs no allocation): for reviews
    /// that have nothing to cancel them.
    pub fn never() -> &'static Cancel {
        static NEVER: std::sync::OnceLock<Cancel> = std::sync::OnceLock::new();
        NEVER.get_or_init(|| Cancel {
            inner: Arc::new(CancelInner {
                inert: true,
                ..CancelInner::default()
            }),
        })
    }

    /// Cancels; every waiter wakes. Does nothing on [`Cancel::never`].
    pub fn cancel(&self) {
        if self.inner.inert {
            return;
        }
        self.inner.cancelled.store(true, Ordering::SeqCst);
        self.inner.notify.notify_waiters();
    }

    /// Whether [`cancel`](Self::cancel) was called.
    pub fn is_cancelled(&self) -> bool {
        self.inner.cancelled.load(Ordering::SeqCst)
    }

    /// Completes when the token is cancelled (at once if it already is).
    pub async fn cancelled(&self) {
        loop {
            let notified = self.inner.notify.notified();
            if self.is_cancelled() {
                return;
            }
            notified.await;
        }
    }
}

/// One model call, as the audit line records it (and reads it back:
/// `gatehouse_audit::read`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModelCallRecord {
    /// The grant's name (`[models.NAME]`).
    pub grant: String,
    /// The model that answered (empty when none did).
    pub model: String,
    /// sha256 of [`CompletionRequest::prompt_json`], lower-case hex.
    pub prompt_sha256: String,
    /// The prompt text, only when the grant allows it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prompt: Option<String>,
    /// Tokens in the prompt, when the provider said.
    pub input_tokens: Option<u32>,
    /// Tokens in the answer, when the provider said.
    pub output_tokens: Option<u32>,
    /// Attempts made.
    pub attempts: u32,
    /// Wall time of the call, microseconds.
    pub latency_us: u64,
    /// The raw answer (the assessment), when there is one; cut to 16 KiB
    /// and marked when longer.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub answer: Option<String>,
    /// sha256 of the whole answer, when it was cut.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub answer_sha256: Option<String>,
    /// The error code ([`ModelError::code`]), when the call failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The limit that refused the call ([`ModelError::OverBudget`]'s text),
    /// when the model's budget did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model_budget::ModelBudget;

    /// Fails after three attempts, as a provider that keeps timing out.
    struct Flaky;

    impl Model for Flaky {
        fn complete(&self, _: &CompletionRequest, _: Instant, _: &Cancel) -> ModelReply {
            ModelReply::failed(ModelError::Transient("502".into()), 3)
        }
    }

    #[test]
    fn a_grant_charges_its_budget_for_every_attempt_and_refuses_past_it() {
        let grant = ModelGrant::new("m", Arc::new(Flaky)).with_budget(ModelBudget::new(
            4,
            u64::MAX,
            Duration::from_secs(3600),
        ));
        let request = CompletionRequest::new(vec![Message::user("x".repeat(4000))]);
        let deadline = Instant::now() + Duration::from_secs(5);
        let first = grant.complete(&request, deadline, Cancel::never());
        assert_eq!(first.attempts, 3);
        // Three requests of four: one more call is admitted, and it too
        // makes three, so the next is refused unsent.
        let second = grant.complete(&request, deadline, Cancel::never());
        assert_eq!(second.attempts, 3);
        let third = grant.complete(&request, deadline, Cancel::never());
        assert_eq!(third.attempts, 0);
        assert!(
            matches!(&third.result, Err(ModelError::OverBudget(limit)) if limit.contains("budget.calls")),
            "{third:?}"
        );
    }

    #[test]
    fn failed_attempts_spend_their_prompts_tokens() {
        let grant = ModelGrant::new("m", Arc::new(Flaky)).with_budget(ModelBudget::new(
            100,
            3_000,
            Duration::from_secs(3600),
        ));
        // 4,000 bytes: about 1,000 tokens a prompt, three prompts sent.
        let request = CompletionRequest::new(vec![Message::user("x".repeat(4000))]);
        let deadline = Instant::now() + Duration::from_secs(5);
        assert_eq!(
            grant.complete(&request, deadline, Cancel::never()).attempts,
            3
        );
        let refused = grant.complete(&request, deadline, Cancel::never());
        assert!(
            matches!(&refused.result, Err(ModelError::OverBudget(limit)) if limit.contains("budget.tokens")),
            "{refused:?}"
        );
    }
}
