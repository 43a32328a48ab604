//! Review cases as data: a request, its context and the outcome a module must
//! produce. The guardian behaviour, the conformance kit and module authors'
//! own suites are all written in this format (`host/conformance/suites/`).
//!
//! A case file is a JSON array of cases:
//!
//! ```json
//! [{
//!   "name": "read-only tool is approved",
//!   "request": {"message": "Allow?", "requestedSchema": {"type": "object", "properties": {}},
//!               "_meta": {"codex_request_type": "approval_request",
//!                         "codex_approval_kind": "mcp_tool_call", "tool_name": "read_file"}},
//!   "context": {"server_name": "files", "request_id": 1},
//!   "tools": {"tools": [{"name": "read_file", "inputSchema": {"type": "object"},
//!                        "annotations": {"readOnlyHint": true}}]},
//!   "config": {},
//!   "expect": {"decision": "accept", "risk": "low"}
//! }]
//! ```
//! `context` takes the fields of [`ReviewContext`] (`related_call` among
//! them); `tools` is a `tools/list` result used for identity binding; `config`
//! is the module config; `model` is what a `model-reviewer`'s model answers
//! ([`crate::model`]: a stub's name such as `"deny"`, one step such as
//! `{"error": "timeout"}`, or a list of steps). In `expect`, every field but
//! `decision` is optional; `decision` may list alternatives
//! (`"decline|cancel"`); `message` is the exact
//! `_meta.message` of the answer (`null` for none), `message_contains` and
//! `rationale_contains` match substrings, `risk` the risk level, `content` the
//! accept content, `failure` the failure code when `decision` is `"failure"`,
//! `model_calls` how many times the module asked its model.
//!
//! # Cases a `model-reviewer` answers differently
//! A case may say what a `model-reviewer` must answer in its place, as a list
//! of runs, each under its own model ([`ModelRun`]):
//!
//! ```json
//! "with_model": [
//!   {"model": "deny",  "expect": {"decision": "decline", "rationale_contains": "The scripted model denies"}},
//!   {"model": "allow", "expect": {"decision": "accept"}}
//! ]
//! ```
//! A `reviewer` runs `expect` and never `with_model`; a `model-reviewer`
//! runs each entry of `with_model` instead of `expect`, and, unless the
//! entry's `expect.model_calls` says otherwise, must ask its model exactly
//! once: the model's answer is what decides. [`Case::variants`] lists the
//! runs for a module; under [`Unmarked::RulesDecide`] (the guardian suite) a
//! case without `with_model` is one the rules decide, which a
//! `model-reviewer` must answer as `expect` says without asking its model.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use gatehouse_core::answer::MESSAGE_KEY;
use gatehouse_core::chain::{Chain, ChainReport, Verdict};
use gatehouse_core::context::{ReviewContext, ToolCatalog};
use gatehouse_core::contract::World;
use gatehouse_core::elicitation::ElicitationParams;
use gatehouse_core::outcome::{Decision, RiskLevel};
use gatehouse_core::request::ReviewRequest;

use crate::model::ModelScript;

/// The `expect.decision` that accepts any outcome but a failure: the
/// contract suite's "the module answers this input" check.
pub const ANY_DECISION: &str = "any";

/// One case.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Case {
    /// A short, unique name.
    pub name: String,
    /// What the case shows, for people.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// The `elicitation/create` params, as on the wire.
    pub request: Value,
    /// The review context.
    #[serde(default)]
    pub context: Option<Value>,
    /// The server's `tools/list` result.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tools: Option<Value>,
    /// The module config.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config: Option<Value>,
    /// What a `model-reviewer`'s model answers in this case: a stub's name,
    /// one step or a list of steps ([`ModelScript::from_case_value`]).
    /// Without it, the links keep the model they were granted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<Value>,
    /// What must come out.
    pub expect: Expect,
    /// What a `model-reviewer` must answer in place of [`Case::expect`],
    /// one run per entry, each under its own model; empty when it answers
    /// as `expect` says.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub with_model: Vec<ModelRun>,
}

/// One run of a case for a `model-reviewer` ([`Case::with_model`]): the
/// model it is granted and what must come out.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelRun {
    /// What the model answers, as [`Case::model`]: a stub's name, one step
    /// or a list of steps.
    pub model: Value,
    /// What must come out; `model_calls` defaults to 1 (the model decides).
    pub expect: Expect,
}

/// How [`Case::variants`] holds a `model-reviewer` to a case without
/// [`Case::with_model`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unmarked {
    /// As the case is written: its `expect`, model calls checked only when
    /// `expect.model_calls` is given (your own cases, the model suite).
    AsWritten,
    /// The rules decide the case: its `expect`, and the model must not be
    /// asked (`model_calls` 0 unless given). The guardian suite.
    RulesDecide,
}

/// One way a case is run: the model a `model-reviewer` is granted and the
/// expectation ([`Case::variants`]).
#[derive(Debug, Clone)]
pub struct Variant<'a> {
    /// `None` for the case's own `expect`; for a [`ModelRun`], its model:
    /// a stub's name (`stub:deny`) or the script's JSON.
    pub model_name: Option<String>,
    /// The model script, if the run sets one (the case's `model` or the
    /// [`ModelRun`]'s); without one a link keeps the model it was granted.
    pub model: Option<&'a Value>,
    /// What must come out, with the defaults of [`Case::variants`] applied.
    pub expect: Expect,
}

impl Variant<'_> {
    /// The row name for the case `name`: `name`, or for a [`ModelRun`]
    /// `name (with model stub:deny)`.
    pub fn row_name(&self, name: &str) -> String {
        match &self.model_name {
            None => name.to_owned(),
            Some(model) => format!("{name} (with model {model})"),
        }
    }
}

/// The expected result of a case.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Expect {
    /// `accept`, `decline`, `cancel`, `defer`, `failure`, or `any` (any
    /// outcome but a failure); alternatives are separated by `|`
    /// (`decline|cancel`).
    pub decision: String,
    /// The exact `_meta.message` of the answer; `null` for none.
    #[serde(
        default,
        deserialize_with = "present_or_null",
        skip_serializing_if = "Option::is_none"
    )]
    pub message: Option<Option<String>>,
    /// A substring of `_meta.message`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message_contains: Option<String>,
    /// A substring of the rationale.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rationale_contains: Option<String>,
    /// The risk level.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub risk: Option<RiskLevel>,
    /// The accept content.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<Value>,
    /// The failure code, with `decision = "failure"`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure: Option<String>,
    /// How many times the modules asked their model in the review (the
    /// calls the host recorded, refused ones included).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_calls: Option<usize>,
}

/// Tells a field set to `null` (`Some(None)`) from one left out (`None`).
fn present_or_null<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<Option<String>>, D::Error> {
    Option::<String>::deserialize(deserializer).map(Some)
}

/// Why a case file could not be used.
#[derive(Debug, thiserror::Error)]
pub enum CaseError {
    /// The file or directory could not be read.
    #[error("{}: cannot read: {source}", path.display())]
    Read {
        /// The path.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The file is not a JSON array of cases.
    #[error("{}: not a list of cases: {source}", path.display())]
    Parse {
        /// The file.
        path: PathBuf,
        /// What is wrong, with line and column.
        source: serde_json::Error,
    },
    /// A case is malformed.
    #[error("case `{case}`: {detail}")]
    Invalid {
        /// The case.
        case: String,
        /// What is wrong.
        detail: String,
    },
}

/// What running a case gave.
#[derive(Debug, Clone)]
pub struct CaseRun {
    /// The chain's report.
    pub report: ChainReport,
    /// What came out, in the words of [`Expect::decision`].
    pub got: String,
    /// Every expectation that did not hold; empty when the case passed.
    pub mismatches: Vec<String>,
    /// Wall time of the review.
    pub elapsed: Duration,
}

impl CaseRun {
    /// Whether every expectation held.
    pub fn passed(&self) -> bool {
        self.mismatches.is_empty()
    }
}

impl Case {
    /// The request this case describes.
    pub fn review_request(&self) -> Result<ReviewRequest, CaseError> {
        let invalid = |detail: String| CaseError::Invalid {
            case: self.name.clone(),
            detail,
        };
        let params = ElicitationParams::from_wire(&self.request)
            .map_err(|error| invalid(format!("request: {error}")))?;
        let mut context: ReviewContext = match &self.context {
            Some(context) => serde_json::from_value(context.clone())
                .map_err(|error| invalid(format!("context: {error}")))?,
            None => ReviewContext::default(),
        };
        if let Some(tools) = &self.tools {
            let catalog = ToolCatalog::from_wire(tools)
                .map_err(|error| invalid(format!("tools: {error}")))?;
            context.catalog = catalog.entry_for(&params);
        }
        Ok(ReviewRequest::new(params, context))
    }

    /// The module config as JSON text.
    pub fn config_json(&self) -> String {
        self.config
            .as_ref()
            .map_or_else(|| "{}".to_owned(), Value::to_string)
    }

    /// The case's model script, when it has a `model`.
    pub fn model_script(&self) -> Result<Option<ModelScript>, CaseError> {
        self.model
            .as_ref()
            .map(|value| {
                ModelScript::from_case_value(value).map_err(|detail| CaseError::Invalid {
                    case: self.name.clone(),
                    detail,
                })
            })
            .transpose()
    }

    /// Runs the case through `chain` (whose links' configs are replaced by
    /// this case's config, and, with a `model`, the models of its
    /// `model-reviewer` links by a fresh one of the case's script) and
    /// checks every expectation.
    pub fn run(&self, chain: &Chain) -> Result<CaseRun, CaseError> {
        self.run_configured(chain, &self.config_json())
    }

    /// [`Case::run`] with `config` as every link's configuration, whatever
    /// the case's `config` says.
    pub fn run_configured(&self, chain: &Chain, config: &str) -> Result<CaseRun, CaseError> {
        self.run_with(chain, config, self.model.as_ref(), &self.expect)
    }

    /// The runs of this case for a module of `world`. A `reviewer` (and a
    /// `model-reviewer` on a case without [`Case::with_model`]) runs
    /// [`Case::expect`] under the case's `model`; under
    /// [`Unmarked::RulesDecide`] a `model-reviewer` must not ask its model
    /// there (`model_calls` 0 unless the case says). A `model-reviewer` on a
    /// case with `with_model` runs each of its entries instead, under the
    /// entry's model, asking it exactly once unless the entry's
    /// `expect.model_calls` says otherwise.
    pub fn variants(
        &self,
        world: World,
        unmarked: Unmarked,
    ) -> Result<Vec<Variant<'_>>, CaseError> {
        if world != World::ModelReviewer || self.with_model.is_empty() {
            let mut expect = self.expect.clone();
            if world == World::ModelReviewer && unmarked == Unmarked::RulesDecide {
                expect.model_calls.get_or_insert(0);
            }
            return Ok(vec![Variant {
                model_name: None,
                model: self.model.as_ref(),
                expect,
            }]);
        }
        self.with_model
            .iter()
            .map(|run| {
                let script = ModelScript::from_case_value(&run.model).map_err(|detail| {
                    CaseError::Invalid {
                        case: self.name.clone(),
                        detail: format!("with_model: {detail}"),
                    }
                })?;
                let mut expect = run.expect.clone();
                expect.model_calls.get_or_insert(1);
                // A stub by its name (`stub:deny`), a script by its text.
                let model_name = match &run.model {
                    Value::String(_) => script.name().to_owned(),
                    script => script.to_string(),
                };
                Ok(Variant {
                    model_name: Some(model_name),
                    model: Some(&run.model),
                    expect,
                })
            })
            .collect()
    }

    /// Runs one of the case's [`Case::variants`] through `chain`, with
    /// `config` as every link's configuration and, when the variant sets a
    /// model, a fresh grant of it for every `model-reviewer` link.
    pub fn run_variant(
        &self,
        chain: &Chain,
        config: &str,
        variant: &Variant<'_>,
    ) -> Result<CaseRun, CaseError> {
        self.run_with(chain, config, variant.model, &variant.expect)
    }

    fn run_with(
        &self,
        chain: &Chain,
        config: &str,
        model: Option<&Value>,
        expect: &Expect,
    ) -> Result<CaseRun, CaseError> {
        let request = self.review_request()?;
        let script = model
            .map(|value| {
                ModelScript::from_case_value(value).map_err(|detail| CaseError::Invalid {
                    case: self.name.clone(),
                    detail,
                })
            })
            .transpose()?;
        let links = chain
            .links()
            .iter()
            .cloned()
            .map(|link| {
                let link = link.with_config(config.to_owned());
                match &script {
                    Some(script) if link.module.world() == World::ModelReviewer => {
                        link.with_model(script.grant())
                    }
                    _ => link,
                }
            })
            .collect();
        let started = std::time::Instant::now();
        let report = Chain::new(links).review(&request);
        let elapsed = started.elapsed();
        let (got, mismatches) = expect.check(&report);
        Ok(CaseRun {
            report,
            got,
            mismatches,
            elapsed,
        })
    }
}

impl Expect {
    /// Compares a report with the expectation; returns what came out and the
    /// mismatches.
    pub fn check(&self, report: &ChainReport) -> (String, Vec<String>) {
        let mut mismatches = Vec::new();
        let answer = report.answer();
        let message = answer
            .as_ref()
            .and_then(|answer| answer.meta.as_ref())
            .and_then(|meta| meta.get(MESSAGE_KEY))
            .and_then(Value::as_str)
            .map(str::to_owned);
        let (got, rationale, risk, content) = match &report.verdict {
            Verdict::Decided { outcome, .. } => (
                outcome.decision.name().to_owned(),
                outcome.rationale.clone(),
                outcome.risk,
                match &outcome.decision {
                    Decision::Accept { content } => content.clone(),
                    _ => None,
                },
            ),
            Verdict::Failed { failure, .. } => {
                if let Some(code) = &self.failure
                    && code != failure.code()
                {
                    mismatches.push(format!("failure: expected {code}, got {}", failure.code()));
                }
                (
                    format!("failure ({})", failure.code()),
                    Some(failure.to_string()),
                    None,
                    None,
                )
            }
            Verdict::Deferred => (
                "defer".to_owned(),
                report
                    .steps
                    .last()
                    .and_then(|step| step.result.as_ref().ok())
                    .and_then(|outcome| outcome.rationale.clone()),
                None,
                None,
            ),
        };
        let got_decision = got.split(' ').next().unwrap_or_default();
        if self.decision == ANY_DECISION {
            if matches!(report.verdict, Verdict::Failed { .. }) {
                mismatches.push(format!("decision: expected any answer, got {got}"));
            }
        } else if !self
            .decision
            .split('|')
            .any(|decision| decision.trim() == got_decision)
        {
            mismatches.push(format!("decision: expected {}, got {got}", self.decision));
        }
        if let Some(expected) = &self.message
            && *expected != message
        {
            mismatches.push(format!("message: expected {expected:?}, got {message:?}"));
        }
        if let Some(part) = &self.message_contains
            && !message
                .as_deref()
                .is_some_and(|message| message.contains(part.as_str()))
        {
            mismatches.push(format!(
                "message: expected to contain {part:?}, got {message:?}"
            ));
        }
        if let Some(part) = &self.rationale_contains
            && !rationale
                .as_deref()
                .is_some_and(|text| text.contains(part.as_str()))
        {
            mismatches.push(format!(
                "rationale: expected to contain {part:?}, got {rationale:?}"
            ));
        }
        if let Some(expected) = self.risk
            && Some(expected) != risk
        {
            mismatches.push(format!("risk: expected {expected:?}, got {risk:?}"));
        }
        if let Some(expected) = &self.content
            && Some(expected) != content.as_ref()
        {
            mismatches.push(format!("content: expected {expected}, got {content:?}"));
        }
        if let Some(expected) = self.model_calls {
            let calls: usize = report.steps.iter().map(|step| step.model_calls.len()).sum();
            if calls != expected {
                mismatches.push(format!("model calls: expected {expected}, got {calls}"));
            }
        }
        (got, mismatches)
    }
}

/// Reads one case file.
pub fn load_file(path: &Path) -> Result<Vec<Case>, CaseError> {
    let text = std::fs::read_to_string(path).map_err(|source| CaseError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    serde_json::from_str(&text).map_err(|source| CaseError::Parse {
        path: path.to_path_buf(),
        source,
    })
}

/// Reads every `*.json` case file in a directory, sorted by file name.
/// Returns `(file, case)` pairs.
pub fn load_dir(dir: &Path) -> Result<Vec<(PathBuf, Case)>, CaseError> {
    let read_error = |source| CaseError::Read {
        path: dir.to_path_buf(),
        source,
    };
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(read_error)?
        .filter_map(Result::ok)
        .map(|entry| entry.path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "json"))
        .collect();
    files.sort();
    let mut cases = Vec::new();
    for file in files {
        for case in load_file(&file)? {
            cases.push((file.clone(), case));
        }
    }
    Ok(cases)
}
