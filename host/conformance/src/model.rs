//! The kit's deterministic models: a [`ScriptedModel`] answers a
//! `model-reviewer`'s `complete` calls from a script, at once and without
//! any network, so that what a module does with each answer (and each
//! failure) can be proven.
//!
//! A script is a list of steps, used in order, the last one repeated:
//!
//! ```json
//! [{"error": "transient"}, {"answer": "{\"outcome\":\"allow\",\"risk_level\":\"low\"}"}]
//! ```
//!
//! A step is `{"answer": "TEXT"}` (the model's answer, as text) or
//! `{"error": "timeout" | "transient" | "rate-limited" | "rejected" |
//! "cancelled"}` (what the module sees when its model fails that way). The
//! script starts over for every review: each review is granted a fresh
//! [`ScriptedModel`] ([`ModelScript::grant`]).
//!
//! The stubs are one-step scripts ([`Stub`]): `allow` and `deny` answer a
//! verdict in the shape of Codex's Guardian (`{"outcome":"allow",
//! "risk_level":"low","rationale":"..."}`), `malformed` answers text that is
//! no JSON at all, and the others fail: `error` (transient), `timeout`,
//! `rejected`, `rate-limited`, `cancelled`. None of the stubs' texts but
//! `allow`'s contains the word "allow", so a module that merely looks for
//! it is still told apart.
//!
//! ```
//! use gatehouse_conformance::model::{ModelScript, Stub};
//! use gatehouse_core::model::{Cancel, CompletionRequest, Message, ModelError};
//! use std::time::{Duration, Instant};
//!
//! let script = ModelScript::from_spec("stub:deny")?;
//! assert_eq!(script, ModelScript::stub(Stub::Deny));
//! let grant = script.grant();
//! assert_eq!(grant.name(), "stub:deny");
//! let request = CompletionRequest::new(vec![Message::user("Is `rm -rf /` safe?")]);
//! let deadline = Instant::now() + Duration::from_secs(1);
//! let reply = grant.model().complete(&request, deadline, &Cancel::new());
//! assert!(reply.result?.text.contains(r#""outcome":"deny""#));
//!
//! let script = ModelScript::parse("mine", r#"[{"error": "timeout"}, {"answer": "fine"}]"#)?;
//! let model = script.model();
//! let ask = || model_text(model.complete(&request, deadline, &Cancel::new()).result);
//! # use gatehouse_core::model::{Completion, Model};
//! # fn model_text(result: Result<Completion, ModelError>) -> String {
//! #     result.map_or_else(|error| error.code().to_owned(), |completion| completion.text)
//! # }
//! assert_eq!(ask(), "timeout");
//! assert_eq!(ask(), "fine");
//! assert_eq!(ask(), "fine"); // the last step repeats
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use gatehouse_core::model::{
    Cancel, Completion, CompletionRequest, Model, ModelError, ModelGrant, ModelReply,
};

/// The model name a scripted answer carries (`Completion::model`).
pub const SCRIPTED_MODEL_NAME: &str = "gatehouse-scripted";

/// The `allow` stub's answer: a Codex-shaped verdict that allows.
pub const ALLOW_ANSWER: &str = r#"{"outcome":"allow","risk_level":"low","user_authorization":"unknown","rationale":"The scripted model allows this action (gatehouse conformance kit)."}"#;

/// The `deny` stub's answer: a Codex-shaped verdict that denies. It does not
/// contain the word "allow".
pub const DENY_ANSWER: &str = r#"{"outcome":"deny","risk_level":"high","user_authorization":"unknown","rationale":"The scripted model denies this action (gatehouse conformance kit)."}"#;

/// The `malformed` stub's answer: prose, no JSON, no verdict, and not the
/// word "allow".
pub const MALFORMED_ANSWER: &str =
    "I am not able to assess this request. Please try again later. (gatehouse conformance kit)";

/// The spec forms [`ModelScript::from_spec`] reads, for messages.
pub const SPEC_FORMS: &str =
    "stub:allow|deny|error|timeout|malformed|rejected|rate-limited|cancelled or script:PATH";

/// How a scripted call fails.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum StepError {
    /// The model review's budget ran out ([`ModelError::Timeout`]).
    Timeout,
    /// A transport or server error, after every attempt
    /// ([`ModelError::Transient`]).
    Transient,
    /// The provider kept answering 429 ([`ModelError::RateLimited`]).
    RateLimited,
    /// The provider refused the request ([`ModelError::Rejected`]).
    Rejected,
    /// The elicitation was cancelled while the model was asked
    /// ([`ModelError::Cancelled`]).
    Cancelled,
}

impl StepError {
    /// The error the module sees, with a detail that says it is scripted.
    pub fn to_error(self) -> ModelError {
        match self {
            StepError::Timeout => ModelError::Timeout,
            StepError::Transient => ModelError::Transient(
                "scripted: the provider could not be reached (gatehouse conformance kit)"
                    .to_owned(),
            ),
            StepError::RateLimited => ModelError::RateLimited(
                "scripted: HTTP 429 Too Many Requests (gatehouse conformance kit)".to_owned(),
            ),
            StepError::Rejected => ModelError::Rejected(
                "scripted: HTTP 400 the request was refused (gatehouse conformance kit)".to_owned(),
            ),
            StepError::Cancelled => ModelError::Cancelled,
        }
    }

    /// The attempts a provider would have made: every retry for what is
    /// retried, one for the rest.
    fn attempts(self) -> u32 {
        match self {
            StepError::Transient | StepError::RateLimited => 3,
            StepError::Timeout | StepError::Rejected | StepError::Cancelled => 1,
        }
    }
}

/// One step of a script.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "RawStep", into = "RawStep")]
pub enum Step {
    /// The model answers this text.
    Answer(String),
    /// The call fails so.
    Error(StepError),
}

/// A step as written: exactly one of the two keys.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawStep {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    answer: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    error: Option<StepError>,
}

impl TryFrom<RawStep> for Step {
    type Error = String;

    fn try_from(raw: RawStep) -> Result<Self, String> {
        match (raw.answer, raw.error) {
            (Some(text), None) => Ok(Step::Answer(text)),
            (None, Some(error)) => Ok(Step::Error(error)),
            _ => Err(
                "a step is {\"answer\": \"TEXT\"} or {\"error\": \"timeout|transient|rate-limited|rejected|cancelled\"}"
                    .to_owned(),
            ),
        }
    }
}

impl From<Step> for RawStep {
    fn from(step: Step) -> Self {
        match step {
            Step::Answer(text) => RawStep {
                answer: Some(text),
                error: None,
            },
            Step::Error(error) => RawStep {
                answer: None,
                error: Some(error),
            },
        }
    }
}

/// The stubs: one-step scripts (`stub:NAME`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stub {
    /// Answers [`ALLOW_ANSWER`].
    Allow,
    /// Answers [`DENY_ANSWER`].
    Deny,
    /// Fails as transient (the provider is down).
    Error,
    /// Times out.
    Timeout,
    /// Answers [`MALFORMED_ANSWER`] (no JSON).
    Malformed,
    /// The provider refuses the request.
    Rejected,
    /// The provider rate-limits.
    RateLimited,
    /// The review is cancelled.
    Cancelled,
}

impl Stub {
    /// Every stub.
    pub const ALL: [Stub; 8] = [
        Stub::Allow,
        Stub::Deny,
        Stub::Error,
        Stub::Timeout,
        Stub::Malformed,
        Stub::Rejected,
        Stub::RateLimited,
        Stub::Cancelled,
    ];

    /// Its name, as after `stub:`.
    pub fn name(self) -> &'static str {
        match self {
            Stub::Allow => "allow",
            Stub::Deny => "deny",
            Stub::Error => "error",
            Stub::Timeout => "timeout",
            Stub::Malformed => "malformed",
            Stub::Rejected => "rejected",
            Stub::RateLimited => "rate-limited",
            Stub::Cancelled => "cancelled",
        }
    }

    /// The stub named `name` (`allow`, `deny`, ...).
    pub fn from_name(name: &str) -> Option<Stub> {
        Stub::ALL.into_iter().find(|stub| stub.name() == name)
    }

    /// Its one step.
    pub fn step(self) -> Step {
        match self {
            Stub::Allow => Step::Answer(ALLOW_ANSWER.to_owned()),
            Stub::Deny => Step::Answer(DENY_ANSWER.to_owned()),
            Stub::Malformed => Step::Answer(MALFORMED_ANSWER.to_owned()),
            Stub::Error => Step::Error(StepError::Transient),
            Stub::Timeout => Step::Error(StepError::Timeout),
            Stub::Rejected => Step::Error(StepError::Rejected),
            Stub::RateLimited => Step::Error(StepError::RateLimited),
            Stub::Cancelled => Step::Error(StepError::Cancelled),
        }
    }
}

/// Why a model spec or script cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ModelScriptError {
    /// The spec is neither `stub:NAME` nor `script:PATH`.
    #[error("model `{0}`: expected {SPEC_FORMS}")]
    Spec(String),
    /// The script file could not be read.
    #[error("{}: cannot read the model script: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The script is not a list of steps.
    #[error(
        "{origin}: not a model script (a JSON list of {{\"answer\": \"TEXT\"}} or {{\"error\": \"timeout|transient|rate-limited|rejected|cancelled\"}} steps): {detail}"
    )]
    Parse {
        /// The file, or what the script came from.
        origin: String,
        /// What is wrong, with line and column.
        detail: String,
    },
    /// The script has no step.
    #[error("{0}: a model script needs at least one step")]
    Empty(String),
}

/// A script for the kit's model, named for reports (the grant's name): a
/// [`Stub`] or a list of [`Step`]s.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelScript {
    name: String,
    steps: Arc<[Step]>,
}

impl Default for ModelScript {
    /// The kit's model when none is set: [`Stub::Error`], a provider that
    /// is down.
    fn default() -> Self {
        ModelScript::stub(Stub::Error)
    }
}

impl fmt::Display for ModelScript {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name)
    }
}

impl ModelScript {
    /// The stub's one-step script, named `stub:NAME`.
    pub fn stub(stub: Stub) -> Self {
        ModelScript {
            name: format!("stub:{}", stub.name()),
            steps: Arc::from(vec![stub.step()]),
        }
    }

    /// A script of `steps`, named `name`; refused when empty.
    pub fn new(name: impl Into<String>, steps: Vec<Step>) -> Result<Self, ModelScriptError> {
        let name = name.into();
        if steps.is_empty() {
            return Err(ModelScriptError::Empty(name));
        }
        Ok(ModelScript {
            name,
            steps: Arc::from(steps),
        })
    }

    /// Parses a script (a JSON list of steps); `name` names it in reports and
    /// errors.
    pub fn parse(name: impl Into<String>, text: &str) -> Result<Self, ModelScriptError> {
        let name = name.into();
        let steps: Vec<Step> =
            serde_json::from_str(text).map_err(|error| ModelScriptError::Parse {
                origin: name.clone(),
                detail: error.to_string(),
            })?;
        ModelScript::new(name, steps)
    }

    /// Reads a script file; the script is named `script:PATH`.
    pub fn load(path: &Path) -> Result<Self, ModelScriptError> {
        let text = std::fs::read_to_string(path).map_err(|source| ModelScriptError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        let steps: Vec<Step> =
            serde_json::from_str(&text).map_err(|error| ModelScriptError::Parse {
                origin: path.display().to_string(),
                detail: error.to_string(),
            })?;
        if steps.is_empty() {
            return Err(ModelScriptError::Empty(path.display().to_string()));
        }
        ModelScript::new(format!("script:{}", path.display()), steps)
    }

    /// `stub:NAME` ([`Stub`]) or `script:PATH` ([`ModelScript::load`]).
    pub fn from_spec(spec: &str) -> Result<Self, ModelScriptError> {
        if let Some(name) = spec.strip_prefix("stub:") {
            return Stub::from_name(name)
                .map(ModelScript::stub)
                .ok_or_else(|| ModelScriptError::Spec(spec.to_owned()));
        }
        if let Some(path) = spec.strip_prefix("script:")
            && !path.is_empty()
        {
            return ModelScript::load(Path::new(path));
        }
        Err(ModelScriptError::Spec(spec.to_owned()))
    }

    /// Whether `spec` is meant for [`ModelScript::from_spec`] (starts with
    /// `stub:` or `script:`), rather than the name of a configured model.
    pub fn is_spec(spec: &str) -> bool {
        spec.starts_with("stub:") || spec.starts_with("script:")
    }

    /// Its name: `stub:NAME`, `script:PATH`, or what it was given.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Its steps.
    pub fn steps(&self) -> &[Step] {
        &self.steps
    }

    /// A fresh model at the script's first step.
    pub fn model(&self) -> ScriptedModel {
        ScriptedModel {
            steps: self.steps.clone(),
            next: AtomicUsize::new(0),
        }
    }

    /// A grant of a fresh model, named as the script, with the default
    /// timeout and no prompt text in the audit. Grant one per review: the
    /// script starts over with each.
    pub fn grant(&self) -> ModelGrant {
        ModelGrant::new(self.name.as_str(), Arc::new(self.model()))
    }

    /// Reads a case file's `model`: a stub's name (`"deny"` or
    /// `"stub:deny"`), one step, or a list of steps.
    pub fn from_case_value(value: &Value) -> Result<Self, String> {
        match value {
            Value::String(name) => {
                let stub = name.strip_prefix("stub:").unwrap_or(name);
                Stub::from_name(stub).map(ModelScript::stub).ok_or_else(|| {
                    format!(
                        "model: unknown stub {name:?}; expected one of {}, a step or a list of steps",
                        Stub::ALL.map(Stub::name).join(", ")
                    )
                })
            }
            Value::Object(_) => serde_json::from_value::<Step>(value.clone())
                .map_err(|error| format!("model: {error}"))
                .and_then(|step| {
                    ModelScript::new("case script", vec![step]).map_err(|error| error.to_string())
                }),
            Value::Array(_) => serde_json::from_value::<Vec<Step>>(value.clone())
                .map_err(|error| format!("model: {error}"))
                .and_then(|steps| {
                    ModelScript::new("case script", steps).map_err(|error| error.to_string())
                }),
            _ => Err("model: expected a stub's name, a step or a list of steps".to_owned()),
        }
    }
}

/// A [`Model`] that answers from a script, at once: each call takes the next
/// step, the last one repeating. A call made after the review's model budget
/// ended fails as a timeout, and one made after the review was cancelled as
/// cancelled, as a real provider's would. Never touches the network.
#[derive(Debug)]
pub struct ScriptedModel {
    steps: Arc<[Step]>,
    next: AtomicUsize,
}

impl ScriptedModel {
    /// How many calls it answered.
    pub fn calls(&self) -> usize {
        self.next.load(Ordering::SeqCst)
    }
}

impl Model for ScriptedModel {
    fn complete(
        &self,
        _request: &CompletionRequest,
        deadline: Instant,
        cancel: &Cancel,
    ) -> ModelReply {
        if cancel.is_cancelled() {
            return ModelReply::failed(ModelError::Cancelled, 0);
        }
        if Instant::now() >= deadline {
            return ModelReply::failed(ModelError::Timeout, 0);
        }
        let index = self.next.fetch_add(1, Ordering::SeqCst);
        let Some(step) = self.steps.get(index).or_else(|| self.steps.last()) else {
            return ModelReply::failed(
                ModelError::Rejected("the model script is empty".to_owned()),
                0,
            );
        };
        match step {
            Step::Answer(text) => {
                ModelReply::answered(Completion::text(SCRIPTED_MODEL_NAME, text.clone()))
            }
            Step::Error(error) => ModelReply::failed(error.to_error(), error.attempts()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gatehouse_core::model::Message;
    use std::time::Duration;

    fn ask(model: &dyn Model) -> Result<String, String> {
        let request = CompletionRequest::new(vec![Message::user("?")]);
        model
            .complete(
                &request,
                Instant::now() + Duration::from_secs(5),
                &Cancel::new(),
            )
            .result
            .map(|completion| completion.text)
            .map_err(|error| error.code().to_owned())
    }

    #[test]
    fn stubs_answer_what_they_are_named() {
        let answer = |stub| ask(&ModelScript::stub(stub).model());
        assert!(
            answer(Stub::Allow)
                .unwrap()
                .contains(r#""outcome":"allow""#)
        );
        assert!(answer(Stub::Deny).unwrap().contains(r#""outcome":"deny""#));
        let malformed = answer(Stub::Malformed).unwrap();
        assert!(serde_json::from_str::<Value>(&malformed).is_err());
        for (stub, code) in [
            (Stub::Error, "transient"),
            (Stub::Timeout, "timeout"),
            (Stub::Rejected, "rejected"),
            (Stub::RateLimited, "rate-limited"),
            (Stub::Cancelled, "cancelled"),
        ] {
            assert_eq!(answer(stub), Err(code.to_owned()), "{stub:?}");
        }
    }

    #[test]
    fn only_the_allow_answer_says_allow() {
        for text in [DENY_ANSWER, MALFORMED_ANSWER] {
            assert!(!text.to_lowercase().contains("allow"), "{text}");
        }
        for text in [ALLOW_ANSWER, DENY_ANSWER] {
            let verdict: Value = serde_json::from_str(text).expect("JSON");
            assert!(verdict["outcome"].is_string() && verdict["rationale"].is_string());
        }
    }

    #[test]
    fn specs_name_a_stub_or_a_script() {
        for stub in Stub::ALL {
            let spec = format!("stub:{}", stub.name());
            let script = ModelScript::from_spec(&spec).expect("stub");
            assert_eq!(script.name(), spec);
            assert_eq!(script.grant().name(), spec);
        }
        for bad in ["stub:maybe", "allow", "script:", "openai"] {
            let error = ModelScript::from_spec(bad).expect_err(bad).to_string();
            assert!(error.contains("stub:allow"), "{error}");
        }
        let dir = std::env::temp_dir().join(format!("gatehouse-script-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let path = dir.join("script.json");
        std::fs::write(&path, r#"[{"error": "rate-limited"}, {"answer": "ok"}]"#).expect("write");
        let script = ModelScript::from_spec(&format!("script:{}", path.display())).expect("script");
        assert_eq!(
            script.steps(),
            [
                Step::Error(StepError::RateLimited),
                Step::Answer("ok".to_owned())
            ]
        );
        std::fs::write(&path, "[]").expect("write");
        let error = ModelScript::load(&path).expect_err("empty").to_string();
        assert!(error.contains("at least one step"), "{error}");
        std::fs::write(&path, r#"[{"answer": "a", "error": "timeout"}]"#).expect("write");
        let error = ModelScript::load(&path).expect_err("both").to_string();
        assert!(
            error.contains("script.json") && error.contains("a step is"),
            "{error}"
        );
        std::fs::write(&path, r#"[{"error": "slow"}]"#).expect("write");
        let error = ModelScript::load(&path).expect_err("unknown").to_string();
        assert!(error.contains("slow"), "{error}");
        let _ = std::fs::remove_dir_all(&dir);
        let error = ModelScript::load(&dir.join("missing.json"))
            .expect_err("missing")
            .to_string();
        assert!(error.contains("cannot read"), "{error}");
    }

    #[test]
    fn a_script_is_used_in_order_and_its_last_step_repeats() {
        let script = ModelScript::parse(
            "test",
            r#"[{"error": "transient"}, {"answer": "first"}, {"answer": "last"}]"#,
        )
        .expect("script");
        let model = script.model();
        assert_eq!(ask(&model), Err("transient".to_owned()));
        assert_eq!(ask(&model), Ok("first".to_owned()));
        assert_eq!(ask(&model), Ok("last".to_owned()));
        assert_eq!(ask(&model), Ok("last".to_owned()));
        assert_eq!(model.calls(), 4);
        // A fresh model starts over.
        assert_eq!(ask(&script.model()), Err("transient".to_owned()));
    }

    #[test]
    fn a_spent_budget_or_a_cancelled_review_fails_before_the_script() {
        let model = ModelScript::stub(Stub::Allow).model();
        let request = CompletionRequest::new(vec![Message::user("?")]);
        let reply = model.complete(&request, Instant::now(), &Cancel::new());
        assert_eq!(reply.result, Err(ModelError::Timeout));
        let cancel = Cancel::new();
        cancel.cancel();
        let reply = model.complete(&request, Instant::now() + Duration::from_secs(5), &cancel);
        assert_eq!(reply.result, Err(ModelError::Cancelled));
        assert_eq!(model.calls(), 0);
    }

    #[test]
    fn case_files_name_a_stub_a_step_or_steps() {
        let read = |value: Value| ModelScript::from_case_value(&value);
        assert_eq!(
            read(serde_json::json!("deny")).unwrap(),
            ModelScript::stub(Stub::Deny)
        );
        assert_eq!(
            read(serde_json::json!("stub:timeout")).unwrap(),
            ModelScript::stub(Stub::Timeout)
        );
        assert_eq!(
            read(serde_json::json!({"error": "cancelled"}))
                .unwrap()
                .steps(),
            [Step::Error(StepError::Cancelled)]
        );
        assert_eq!(
            read(serde_json::json!([{"answer": "x"}])).unwrap().steps(),
            [Step::Answer("x".to_owned())]
        );
        for bad in [
            serde_json::json!("perhaps"),
            serde_json::json!([]),
            serde_json::json!(3),
            serde_json::json!({"answer": 3}),
        ] {
            assert!(read(bad.clone()).is_err(), "{bad}");
        }
    }
}
