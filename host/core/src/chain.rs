//! The chain: modules in order (policies first, the reviewer last). The first
//! outcome that is not `defer` decides; a failure decides too (fail closed)
//! unless the module is configured to pass failures on.

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::answer::ElicitAnswer;
use crate::failure::ReviewFailure;
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

/// One module in the chain, with its configuration.
#[derive(Debug, Clone)]
pub struct ChainLink {
    /// The module.
    pub module: Arc<ReviewerModule>,
    /// Its configuration (JSON text).
    pub config: String,
    /// What its failure means.
    pub on_failure: OnFailure,
}

impl ChainLink {
    /// A link with config `{}` that fails closed.
    pub fn new(module: Arc<ReviewerModule>) -> Self {
        ChainLink {
            module,
            config: "{}".to_owned(),
            on_failure: OnFailure::Decline,
        }
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

    /// The report of the module that decided or failed, if any.
    pub fn deciding_step(&self) -> Option<&ModuleReport> {
        match &self.verdict {
            Verdict::Decided { step, .. } | Verdict::Failed { step, .. } => self.steps.get(*step),
            Verdict::Deferred => None,
        }
    }
}

/// An ordered list of modules.
///
/// ```no_run
/// use std::sync::Arc;
/// use gatehouse_core::chain::{Chain, ChainLink};
/// use gatehouse_core::sandbox::{Limits, Sandbox};
/// let sandbox = Sandbox::new(Limits::default())?;
/// let guardian = Arc::new(sandbox.load_file("guardian.wasm", None)?);
/// let chain = Chain::new(vec![ChainLink::new(guardian).with_config(r#"{"default":"deny"}"#)]);
/// assert_eq!(chain.len(), 1);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Default)]
pub struct Chain {
    links: Vec<ChainLink>,
}

impl Chain {
    /// A chain of `links`, run in order.
    pub fn new(links: Vec<ChainLink>) -> Self {
        Chain { links }
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
    /// deadline: their deadlines added up. The router waits no longer than
    /// this plus a margin.
    pub fn deadline_sum(&self) -> std::time::Duration {
        self.links
            .iter()
            .map(|link| link.module.limits().deadline())
            .fold(
                std::time::Duration::ZERO,
                std::time::Duration::saturating_add,
            )
    }

    /// Runs the request through the chain.
    pub fn review(&self, request: &ReviewRequest) -> ChainReport {
        let mut steps = Vec::with_capacity(self.links.len());
        for (step, link) in self.links.iter().enumerate() {
            let report = link.module.review(&link.config, request);
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
            steps.push(report);
            if let Some(verdict) = verdict {
                return ChainReport { steps, verdict };
            }
        }
        ChainReport {
            steps,
            verdict: Verdict::Deferred,
        }
    }
}
