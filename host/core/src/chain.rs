//! The chain: modules in order (policies first, the reviewer last). The first
//! outcome that is not `defer` decides; a failure decides too (fail closed)
//! unless the module is configured to pass failures on.

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::answer::ElicitAnswer;
use crate::contract::World;
use crate::failure::ReviewFailure;
use crate::model::{Cancel, ModelGrant};
use crate::outcome::Outcome;
use crate::request::ReviewRequest;
use crate::sandbox::{ModuleReport, ReviewerModule};

/// What a module's failure means for the chain.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OnFailure {
    /// Decline the elicitation (the default: fail closed).
    #[default]
    Decline,
    /// Treat the failure as `defer`: the next module, then the person.
    Defer,
}

/// One module in a [`Chain`], with its configuration and what its failure
/// means (see the [`Chain`] example).
#[derive(Debug, Clone)]
pub struct ChainLink {
    /// The module.
    pub module: Arc<ReviewerModule>,
    /// Its configuration (JSON text).
    pub config: String,
    /// What its failure means.
    pub on_failure: OnFailure,
    /// The model the operator granted it, if any (contract 0.2).
    pub model: Option<ModelGrant>,
}

/// Why a module cannot join a chain as configured.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GrantError {
    /// The module imports the model capability and has no model granted.
    #[error(
        "module `{module}` imports `{}` (world `model-reviewer`) but is granted no model; add `model = \"NAME\"` to its [[review.modules]] entry and define that model as [models.NAME] (endpoint, model), or use a module that does not ask a model",
        crate::contract::MODEL_INTERFACE
    )]
    NotGranted {
        /// The module's name.
        module: String,
    },
    /// The grant names a model that is not defined.
    #[error(
        "module `{module}` is granted model `{model}`, which is not defined; add a [models.{model}] table (endpoint, model){defined}"
    )]
    UnknownModel {
        /// The module's name.
        module: String,
        /// The model it names.
        model: String,
        /// The models that are defined, as `; defined: a, b`, or empty.
        defined: String,
    },
}

impl ChainLink {
    /// A link with config `{}` that fails closed. Takes the module itself or
    /// an `Arc` of one (to share it between chains).
    pub fn new(module: impl Into<Arc<ReviewerModule>>) -> Self {
        ChainLink {
            module: module.into(),
            config: "{}".to_owned(),
            on_failure: OnFailure::Decline,
            model: None,
        }
    }

    /// Grants the module a model.
    pub fn with_model(mut self, grant: ModelGrant) -> Self {
        self.model = Some(grant);
        self
    }

    /// Checks that a module of the `model-reviewer` world is granted a
    /// model: one that imports the capability without a grant is refused
    /// here, when the chain is built, not at its first review.
    pub fn check_grant(&self) -> Result<(), GrantError> {
        if self.module.world() == World::ModelReviewer && self.model.is_none() {
            return Err(GrantError::NotGranted {
                module: self.module.name().to_owned(),
            });
        }
        Ok(())
    }

    /// Sets the module configuration (JSON text).
    pub fn with_config(mut self, config: impl Into<String>) -> Self {
        self.config = config.into();
        self
    }

    /// Sets what a failure means.
    pub fn with_on_failure(mut self, on_failure: OnFailure) -> Self {
        self.on_failure = on_failure;
        self
    }
}

/// How the chain ended.
#[derive(Debug, Clone, PartialEq)]
pub enum Verdict {
    /// A module decided.
    Decided {
        /// The position of the module that decided.
        step: usize,
        /// Its outcome.
        outcome: Outcome,
    },
    /// A module failed and the failure decides (fail closed).
    Failed {
        /// The position of the module that failed.
        step: usize,
        /// Why.
        failure: ReviewFailure,
    },
    /// Every module deferred: the caller (the person) decides.
    Deferred,
}

/// Everything one pass through the chain did.
#[derive(Debug, Clone)]
pub struct ChainReport {
    /// One report per module that ran, in order.
    pub steps: Vec<ModuleReport>,
    /// How it ended.
    pub verdict: Verdict,
}

impl ChainReport {
    /// The MCP answer, or `None` when every module deferred.
    pub fn answer(&self) -> Option<ElicitAnswer> {
        match &self.verdict {
            Verdict::Decided { outcome, .. } => ElicitAnswer::automated(&outcome.decision),
            Verdict::Failed { failure, .. } => Some(ElicitAnswer::failed(failure)),
            Verdict::Deferred => None,
        }
    }

    /// The MCP answer to `request`, the request this report reviewed:
    /// [`ChainReport::answer`] as Codex sends it for that request
    /// ([`ElicitAnswer::for_request`]: under approval policy `never`, an
    /// accept of a request that does not ask for strict review carries no
    /// `_meta`). A host that puts such requests to its modules rather than
    /// answering them itself wants this one.
    pub fn answer_for(&self, request: &ReviewRequest) -> Option<ElicitAnswer> {
        self.answer().map(|answer| answer.for_request(request))
    }

    /// The report of the module that decided or failed, if any.
    pub fn deciding_step(&self) -> Option<&ModuleReport> {
        match &self.verdict {
            Verdict::Decided { step, .. } | Verdict::Failed { step, .. } => self.steps.get(*step),
            Verdict::Deferred => None,
        }
    }
}

/// Reviewer modules in order: policies first, the reviewer last. The first
/// module whose outcome is not `defer` decides, and its outcome becomes the
/// MCP answer; a module that fails decides too, with a decline (fail
/// closed), unless its link says [`OnFailure::Defer`]. When every module
/// defers, nobody has decided: the caller asks the person.
///
/// A chain is immutable and cheap to clone (its modules are shared); build
/// a new one to change it. It reviews from many threads at once, up to the
/// sandbox's [`concurrent_reviews`](crate::sandbox::Limits::concurrent_reviews);
/// past that, a module finds no free instance and its review fails
/// ([`ReviewFailure::Instantiate`]), so bound concurrency to it.
///
/// ```
/// use gatehouse_core::chain::{Chain, ChainLink, OnFailure, Verdict};
/// use gatehouse_core::context::ReviewContext;
/// use gatehouse_core::elicitation::{ElicitationParams, RequestId};
/// use gatehouse_core::request::ReviewRequest;
/// use gatehouse_core::sandbox::{Limits, Sandbox};
/// # let guests = std::env::var_os("CARGO_TARGET_DIR").map_or_else(
/// #     || std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target"),
/// #     std::path::PathBuf::from,
/// # ).join("wasm32-wasip2/guest");
/// # assert!(guests.exists(), "{} is missing: run .ci/build-guests", guests.display());
///
/// let sandbox = Sandbox::new(Limits::default())?;
/// let allowlist = sandbox.load_file(guests.join("gatehouse_allowlist.wasm"), None)?;
/// let guardian = sandbox.load_file(guests.join("gatehouse_guardian.wasm"), None)?;
/// let chain = Chain::new(vec![
///     // A policy: answers what its rules cover, defers the rest.
///     ChainLink::new(allowlist)
///         .with_config(r#"{"rules": [{"server": "docs", "tool": "read_*", "decision": "accept"}]}"#)
///         .with_on_failure(OnFailure::Defer),
///     // The reviewer, last: fails closed.
///     ChainLink::new(guardian),
/// ]);
///
/// let ask = |server: &str, tool: &str| -> Result<ReviewRequest, Box<dyn std::error::Error>> {
///     let params = ElicitationParams::from_wire(&serde_json::json!({
///         "message": format!("Allow the agent to run {tool}?"),
///         "requestedSchema": {"type": "object", "properties": {}},
///         "_meta": {"codex_request_type": "approval_request",
///                   "codex_approval_kind": "mcp_tool_call", "tool_name": tool}
///     }))?;
///     Ok(ReviewRequest::new(params, ReviewContext::new(server, RequestId::Number(1))))
/// };
///
/// // The allowlist decides: step 0 accepts.
/// let report = chain.review(&ask("docs", "read_file")?);
/// assert!(matches!(report.verdict, Verdict::Decided { step: 0, .. }));
/// assert_eq!(report.answer().map(|answer| answer.to_wire()["action"].clone()),
///            Some("accept".into()));
///
/// // The allowlist defers; the guardian declines.
/// let report = chain.review(&ask("github", "delete_branch")?);
/// assert_eq!(report.deciding_step().map(|step| &*step.module), Some("gatehouse_guardian"));
/// assert_eq!(report.answer().map(|answer| answer.to_wire()["action"].clone()),
///            Some("decline".into()));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Default)]
pub struct Chain {
    links: Vec<ChainLink>,
    shadow: Vec<ChainLink>,
}

impl Chain {
    /// A chain of `links`, run in order.
    pub fn new(links: Vec<ChainLink>) -> Self {
        Chain {
            links,
            shadow: Vec::new(),
        }
    }

    /// The same chain with `shadow` modules: a host reviews each of them
    /// alone beside the chain, for comparison, and never lets one decide
    /// (`mode = "shadow"`). [`Chain::review`] does not run them.
    pub fn with_shadow(mut self, shadow: Vec<ChainLink>) -> Self {
        self.shadow = shadow;
        self
    }

    /// The shadow modules ([`Chain::with_shadow`]).
    pub fn shadow(&self) -> &[ChainLink] {
        &self.shadow
    }

    /// The links.
    pub fn links(&self) -> &[ChainLink] {
        &self.links
    }

    /// The number of modules.
    pub fn len(&self) -> usize {
        self.links.len()
    }

    /// Whether the chain has no module (every request defers).
    pub fn is_empty(&self) -> bool {
        self.links.is_empty()
    }

    /// The longest [`Chain::review`] can take when every module runs to its
    /// deadline: their deadlines added up, with each granted model's budget
    /// (what [`ChainRun::next_budget`] gives stretch by stretch).
    pub fn deadline_sum(&self) -> std::time::Duration {
        self.links
            .iter()
            .map(|link| {
                let model = link
                    .model
                    .as_ref()
                    .map_or(std::time::Duration::ZERO, ModelGrant::timeout);
                link.module.limits().deadline().saturating_add(model)
            })
            .fold(
                std::time::Duration::ZERO,
                std::time::Duration::saturating_add,
            )
    }

    /// Runs the request through the chain.
    pub fn review(&self, request: &ReviewRequest) -> ChainReport {
        self.review_with(request, Cancel::never())
    }

    /// Runs the request through the chain; `cancel` ends a module's wait on
    /// its model (the module sees `cancelled`).
    pub fn review_with(&self, request: &ReviewRequest, cancel: &Cancel) -> ChainReport {
        let mut run = ChainRun::new(self);
        while run.run_stretch(request, cancel) {}
        run.finish()
    }
}

/// A chain's review run a stretch at a time, for a host that schedules the
/// two kinds of work apart: a *stretch* is either the run of consecutive
/// links that ask no model (rule-based, bounded by their deadlines), or one
/// link granted a model (which may wait on it for its model budget). The
/// gateway admits each stretch to its own pool, so that reviews waiting on a
/// model never hold the slots that rule-based reviews need. [`Chain::review`]
/// runs every stretch in turn.
///
/// Generic over how it holds the chain (`&Chain`, `Arc<Chain>`), so that a
/// run can move to another thread with the chain it reviews.
#[derive(Debug)]
pub struct ChainRun<C: std::borrow::Borrow<Chain> = std::sync::Arc<Chain>> {
    chain: C,
    steps: Vec<ModuleReport>,
    verdict: Option<Verdict>,
}

impl<C: std::borrow::Borrow<Chain>> ChainRun<C> {
    /// A run that has not started.
    pub fn new(chain: C) -> Self {
        let steps = Vec::with_capacity(chain.borrow().len());
        ChainRun {
            chain,
            steps,
            verdict: None,
        }
    }

    /// The links of the next stretch, or `None` when the run is over.
    fn next_stretch(&self) -> Option<std::ops::Range<usize>> {
        if self.verdict.is_some() {
            return None;
        }
        let links = self.chain.borrow().links();
        let start = self.steps.len();
        let first = links.get(start)?;
        if first.model.is_some() {
            return Some(start..start + 1);
        }
        let end = links[start..]
            .iter()
            .position(|link| link.model.is_some())
            .map_or(links.len(), |offset| start + offset);
        Some(start..end)
    }

    /// The reports of the modules that ran so far, in order.
    pub fn steps(&self) -> &[ModuleReport] {
        &self.steps
    }

    /// Whether the next stretch is one module granted a model; `None` when
    /// the run is over.
    pub fn next_asks_model(&self) -> Option<bool> {
        let stretch = self.next_stretch()?;
        Some(self.chain.borrow().links()[stretch.start].model.is_some())
    }

    /// The longest the next stretch can take: its modules' deadlines, with
    /// the model budget of a granted one (zero when the run is over).
    pub fn next_budget(&self) -> std::time::Duration {
        self.next_stretch()
            .map_or(std::time::Duration::ZERO, |stretch| {
                self.chain.borrow().links()[stretch]
                    .iter()
                    .map(link_budget)
                    .fold(
                        std::time::Duration::ZERO,
                        std::time::Duration::saturating_add,
                    )
            })
    }

    /// Runs the next stretch. Returns whether anything is left to run.
    pub fn run_stretch(&mut self, request: &ReviewRequest, cancel: &Cancel) -> bool {
        let Some(stretch) = self.next_stretch() else {
            return false;
        };
        for step in stretch {
            let link = &self.chain.borrow().links()[step];
            let report =
                link.module
                    .review_with(&link.config, request, link.model.as_ref(), cancel);
            let verdict = match &report.result {
                Ok(outcome) if outcome.decision == crate::outcome::Decision::Defer => None,
                Ok(outcome) => Some(Verdict::Decided {
                    step,
                    outcome: outcome.clone(),
                }),
                Err(_) if link.on_failure == OnFailure::Defer => None,
                Err(failure) => Some(Verdict::Failed {
                    step,
                    failure: failure.clone(),
                }),
            };
            self.steps.push(report);
            if verdict.is_some() {
                self.verdict = verdict;
                return false;
            }
        }
        self.next_stretch().is_some()
    }

    /// The report: every step that ran, and how it ended. A run finished
    /// before its last stretch fails closed: nobody may read "every module
    /// deferred" into modules that did not run.
    pub fn finish(self) -> ChainReport {
        let verdict = match self.verdict {
            Some(verdict) => verdict,
            None if self.next_stretch().is_some() => Verdict::Failed {
                step: self.steps.len(),
                failure: ReviewFailure::Trap(
                    "the review was stopped before every module ran".to_owned(),
                ),
            },
            None => Verdict::Deferred,
        };
        ChainReport {
            steps: self.steps,
            verdict,
        }
    }
}

/// The longest one link's review can take: its deadline plus its model's
/// budget.
fn link_budget(link: &ChainLink) -> std::time::Duration {
    let model = link
        .model
        .as_ref()
        .map_or(std::time::Duration::ZERO, ModelGrant::timeout);
    link.module.limits().deadline().saturating_add(model)
}
