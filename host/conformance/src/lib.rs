//! The conformance kit: proves a module honours the reviewer contract.
//!
//! Suites:
//! - `contract`, which every reviewer must pass: it loads (right world,
//!   supported version, allowed imports, fits the pool); `describe` works;
//!   it answers every valid input without failing (form and URL, odd,
//!   unicode, large and deeply nested `_meta`, every approval policy) with
//!   valid output; the same input gives the same outcome; no state is carried
//!   from one review to the next; it never calls for files, environment or
//!   sockets; it stays within the log caps.
//! - `guardian`, for modules that claim `guardian-compatible`: every case of
//!   `host/conformance/suites/guardian/`. A `model-reviewer` (the model
//!   guardian) runs them too: a case the rules decide it must answer as the
//!   rule-based guardian does, without asking its model; a case marked
//!   `with_model` (where the model guardian asks its model in place of the
//!   catalog's hints or the config's `default`) it runs once per entry, each
//!   under that entry's scripted model, and must give that entry's answer,
//!   asking its model exactly once unless the entry says otherwise
//!   ([`cases::Case::variants`]).
//! - `model`, for modules of the `model-reviewer` world (contract 0.2): the
//!   module fails closed on every failure of its model. For each of a
//!   timeout, a transient error, a rate limit, a rejected request, a
//!   cancelled review, an answer with no verdict (malformed) and a denying
//!   verdict, its answer to a tool-call approval request must be `decline`
//!   or `cancel`: not `accept`, not a failure, and not `defer`, which would
//!   hand the decision on as if the model had never been asked (Codex's
//!   Guardian declines). With an allowing model it must answer (it may
//!   accept), and no review may ask the model more than
//!   [`MAX_MODEL_CALLS_PER_REVIEW`] times. The cases are
//!   `host/conformance/suites/model/`, run with the kit's module config.
//! - `cases`: a directory of case files of your own (`--cases DIR`).
//!
//! # Models
//!
//! The kit never reaches a real model: a `model-reviewer` is granted a
//! [`ScriptedModel`](model::ScriptedModel), fresh for every review. The
//! `model` suite scripts its own; every other suite uses the kit's model,
//! [`Kit::with_model`], by default [`Stub::Error`](model::Stub::Error): a
//! provider that is down, so the contract suite proves a module answers every
//! input when its model fails (a case file's own `model` overrides it). The
//! statelessness check reviews many requests in one instance, which the core
//! does without a model, so for a `model-reviewer` it compares those
//! outcomes with fresh reviews without a model too.
//!
//! ```no_run
//! use gatehouse_conformance::{Kit, Suite};
//! use gatehouse_core::sandbox::Limits;
//! let bytes = std::fs::read("my_reviewer.wasm")?;
//! let report = Kit::new(Limits::default())?.run("my_reviewer.wasm", &bytes, Suite::Contract, &[]);
//! assert!(report.passed(), "{}", report.to_text());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

pub mod cases;
mod corpus;
pub mod model;
mod report;

use std::path::PathBuf;
use std::time::{Duration, Instant};

pub use report::{CaseResult, Report};

use crate::cases::{ANY_DECISION, Case, CaseError, Unmarked};
use crate::model::ModelScript;
use gatehouse_core::chain::{Chain, ChainLink};
use gatehouse_core::contract::World;
use gatehouse_core::failure::ReviewFailure;
use gatehouse_core::model::{Cancel, ModelGrant};
use gatehouse_core::outcome::Outcome;
use gatehouse_core::request::ReviewRequest;
use gatehouse_core::sandbox::{
    Limits, MAX_MODEL_CALLS_PER_REVIEW, ModuleLimits, ModuleReport, ReviewerModule, Sandbox,
    SandboxBuilder, SandboxError, WasiPolicy,
};

/// The guardian behaviour, as shipped with the host.
const GUARDIAN_CASES: [(&str, &str); 5] = [
    (
        "routing.json",
        include_str!("../suites/guardian/routing.json"),
    ),
    (
        "strict.json",
        include_str!("../suites/guardian/strict.json"),
    ),
    ("risk.json", include_str!("../suites/guardian/risk.json")),
    (
        "identity.json",
        include_str!("../suites/guardian/identity.json"),
    ),
    (
        "related_call.json",
        include_str!("../suites/guardian/related_call.json"),
    ),
];

/// The model suite: a model-reviewer fails closed.
const MODEL_CASES: [(&str, &str); 1] = [(
    "fail_closed.json",
    include_str!("../suites/model/fail_closed.json"),
)];

/// The claim that makes `Suite::All` run the guardian suite.
pub const GUARDIAN_CLAIM: &str = "guardian-compatible";

/// Which suites to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Suite {
    /// The contract every reviewer must honour.
    Contract,
    /// Codex's Guardian behaviour.
    Guardian,
    /// A `model-reviewer` fails closed when its model does.
    Model,
    /// The contract, the guardian suite if the module claims
    /// `guardian-compatible`, the model suite if it is a `model-reviewer`,
    /// and any extra cases.
    All,
}

/// The guardian cases shipped with the host.
pub fn guardian_cases() -> Result<Vec<Case>, CaseError> {
    embedded_cases("host/conformance/suites/guardian", &GUARDIAN_CASES)
}

/// The model suite's cases shipped with the host.
pub fn model_cases() -> Result<Vec<Case>, CaseError> {
    embedded_cases("host/conformance/suites/model", &MODEL_CASES)
}

fn embedded_cases(dir: &str, files: &[(&str, &str)]) -> Result<Vec<Case>, CaseError> {
    let mut cases = Vec::new();
    for (file, text) in files {
        let parsed: Vec<Case> = serde_json::from_str(text).map_err(|source| CaseError::Parse {
            path: PathBuf::from(dir).join(file),
            source,
        })?;
        cases.extend(parsed);
    }
    Ok(cases)
}

/// Runs suites against modules. Holds two sandboxes with the same limits:
/// one as reviews run in production, one that denies files and sockets so
/// that reaching for them is seen (and records the environment reads it
/// answers empty).
#[derive(Clone)]
pub struct Kit {
    closed: Sandbox,
    denied: Sandbox,
    module_config: String,
    module_limits: ModuleLimits,
    model: ModelScript,
}

impl Kit {
    /// A kit whose reviews run under `limits`. It compiles each module it
    /// runs twice, once for each of its sandboxes:
    /// [`with_compile_cache`](Self::with_compile_cache) compiles it once.
    pub fn new(limits: Limits) -> Result<Kit, SandboxError> {
        Kit::from_builder(Sandbox::builder().limits(limits))
    }

    /// A kit whose reviews run under `limits`, compiling through the
    /// compile cache in `dir` ([`SandboxBuilder::compile_cache`]): both of
    /// its sandboxes, and a host's sandbox with the same limits and cache,
    /// share one compilation of a module. For a module of many megabytes (a
    /// language runtime) that is seconds per load.
    pub fn with_compile_cache(
        limits: Limits,
        dir: impl Into<PathBuf>,
    ) -> Result<Kit, SandboxError> {
        Kit::from_builder(Sandbox::builder().limits(limits).compile_cache(dir))
    }

    /// A kit whose two sandboxes are built as `builder` says (limits,
    /// compile cache and its bound); the kit sets their WASI policies.
    ///
    /// ```
    /// use gatehouse_conformance::Kit;
    /// use gatehouse_core::sandbox::{Limits, Sandbox};
    ///
    /// let cache = std::env::temp_dir().join("gatehouse-doc-kit-cache");
    /// let kit = Kit::from_builder(
    ///     Sandbox::builder()
    ///         .limits(Limits::default())
    ///         .compile_cache(cache)
    ///         .compile_cache_max_bytes(1 << 30),
    /// )?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn from_builder(builder: SandboxBuilder) -> Result<Kit, SandboxError> {
        Ok(Kit {
            closed: builder.clone().wasi(WasiPolicy::Closed).build()?,
            denied: builder.wasi(WasiPolicy::Deny).build()?,
            module_config: "{}".to_owned(),
            module_limits: ModuleLimits::default(),
            model: ModelScript::default(),
        })
    }

    /// The module's own limits, over the kit's (as a `[[review.modules]]`
    /// entry's `limits` are over `[review.limits]`): the kit proves the
    /// module as it will run. The kit's limits must have
    /// [room](gatehouse_core::sandbox::LimitsBuilder::room_for) for them.
    pub fn with_module_limits(mut self, limits: ModuleLimits) -> Self {
        self.module_limits = limits;
        self
    }

    /// The module configuration (JSON text) for the contract and model
    /// suites.
    pub fn with_module_config(mut self, config: impl Into<String>) -> Self {
        self.module_config = config.into();
        self
    }

    /// The model a `model-reviewer` is granted in the contract, guardian and
    /// own-cases suites (default [`Stub::Error`](model::Stub::Error)); each
    /// review gets a fresh one, so a script starts over. The model suite
    /// scripts its own, and so does a case with a `model` or a `with_model`
    /// run.
    pub fn with_model(mut self, model: ModelScript) -> Self {
        self.model = model;
        self
    }

    /// The model of [`Kit::with_model`].
    pub fn model(&self) -> &ModelScript {
        &self.model
    }

    /// A fresh grant of the kit's model for `module`, if it may ask one.
    fn grant_for(&self, module: &ReviewerModule) -> Option<ModelGrant> {
        (module.world() == World::ModelReviewer).then(|| self.model.grant())
    }

    /// A review as the kit makes it: with a fresh grant of the kit's model
    /// for a `model-reviewer`.
    fn review(&self, module: &ReviewerModule, request: &ReviewRequest) -> ModuleReport {
        let grant = self.grant_for(module);
        module.review_with(&self.module_config, request, grant.as_ref(), &Cancel::new())
    }

    /// Runs `suite` (plus `extra` cases with [`Suite::All`]) on the component
    /// in `bytes`; `source` names it. Never panics on module behaviour: every
    /// problem is a failed row.
    pub fn run(
        &self,
        source: &str,
        bytes: &[u8],
        suite: Suite,
        extra: &[(PathBuf, Case)],
    ) -> Report {
        let mut report = Report::new(source);
        let name = source.rsplit('/').next().unwrap_or(source);
        let started = Instant::now();
        let loaded = self
            .closed
            .load_bytes_with(name, source, bytes, None, &self.module_limits);
        let module = match loaded {
            Ok(module) => {
                let module = std::sync::Arc::new(module);
                report.digest = Some(module.digest().to_owned());
                report.push(
                    "contract",
                    "loads as a reviewer",
                    ("loads", "loads"),
                    true,
                    None,
                    started.elapsed(),
                );
                module
            }
            Err(error) => {
                report.push(
                    "contract",
                    "loads as a reviewer",
                    ("loads", "refused"),
                    false,
                    Some(error.to_string()),
                    started.elapsed(),
                );
                return report;
            }
        };
        let claims = self.check_describe(&module, &mut report);
        if matches!(suite, Suite::Contract | Suite::All) {
            self.check_contract(&module, source, bytes, &mut report);
        }
        let claims_guardian = claims.iter().any(|claim| claim == GUARDIAN_CLAIM);
        if suite == Suite::Guardian || (suite == Suite::All && claims_guardian) {
            match guardian_cases() {
                Ok(cases) => {
                    self.run_cases("guardian", &module, cases.iter(), &mut report);
                }
                Err(error) => report.push(
                    "guardian",
                    "case files",
                    ("load", "error"),
                    false,
                    Some(error.to_string()),
                    Duration::ZERO,
                ),
            }
        }
        let model_reviewer = module.world() == World::ModelReviewer;
        if suite == Suite::Model || (suite == Suite::All && model_reviewer) {
            self.check_model(&module, &mut report);
        }
        if !extra.is_empty() {
            self.run_cases(
                "cases",
                &module,
                extra.iter().map(|(_, case)| case),
                &mut report,
            );
        }
        report
    }

    fn check_describe(&self, module: &ReviewerModule, report: &mut Report) -> Vec<String> {
        let started = Instant::now();
        match module.describe() {
            Ok(info) if info.name.trim().is_empty() => {
                report.push(
                    "contract",
                    "describe",
                    ("a name", "an empty name"),
                    false,
                    None,
                    started.elapsed(),
                );
                info.claims
            }
            Ok(info) => {
                let got = format!("{} {}", info.name, info.version);
                report.push(
                    "contract",
                    "describe",
                    ("a name", &got),
                    true,
                    None,
                    started.elapsed(),
                );
                info.claims
            }
            Err(failure) => {
                report.push(
                    "contract",
                    "describe",
                    ("a name", &failed(&failure)),
                    false,
                    Some(failure.to_string()),
                    started.elapsed(),
                );
                Vec::new()
            }
        }
    }

    fn check_contract(
        &self,
        module: &ReviewerModule,
        source: &str,
        bytes: &[u8],
        report: &mut Report,
    ) {
        let inputs = match corpus::contract_inputs() {
            Ok(inputs) => inputs,
            Err(error) => {
                report.push(
                    "contract",
                    "inputs",
                    ("load", "error"),
                    false,
                    Some(error.to_string()),
                    Duration::ZERO,
                );
                return;
            }
        };
        let mut requests = Vec::with_capacity(inputs.len());
        for case in &inputs {
            match case.review_request() {
                Ok(request) => requests.push((case.name.as_str(), request)),
                Err(error) => report.push(
                    "contract",
                    &case.name,
                    ("a valid input", "invalid"),
                    false,
                    Some(error.to_string()),
                    Duration::ZERO,
                ),
            }
        }
        let config = &self.module_config;

        // Total, with valid output and within the log caps.
        let mut first = Vec::with_capacity(requests.len());
        let mut noisy = Vec::new();
        for (name, request) in &requests {
            let review = self.review(module, request);
            let (got, detail) = match &review.result {
                Ok(outcome) => (outcome.decision.name().to_owned(), None),
                Err(failure) => (failed(failure), Some(failure.to_string())),
            };
            let answered = review.result.is_ok();
            report.push(
                "contract",
                &format!("answers: {name}"),
                ("an answer", &got),
                answered,
                detail,
                review.elapsed,
            );
            if review.logs.dropped > 0 {
                noisy.push(format!("{name}: {} entries dropped", review.logs.dropped));
            }
            first.push(review.result);
        }
        report.push(
            "contract",
            "stays within the log caps",
            (
                "nothing dropped",
                if noisy.is_empty() {
                    "nothing dropped"
                } else {
                    "entries dropped"
                },
            ),
            noisy.is_empty(),
            (!noisy.is_empty()).then(|| listing(&noisy)),
            Duration::ZERO,
        );

        // Deterministic.
        let started = Instant::now();
        let differing: Vec<String> = requests
            .iter()
            .zip(&first)
            .filter(|((_, request), before)| self.review(module, request).result != **before)
            .map(|((name, _), _)| (*name).to_owned())
            .collect();
        report.push(
            "contract",
            "deterministic: the same input gives the same outcome",
            (
                "same",
                if differing.is_empty() {
                    "same"
                } else {
                    "differs"
                },
            ),
            differing.is_empty(),
            (!differing.is_empty()).then(|| format!("differs for: {}", listing(&differing))),
            started.elapsed(),
        );

        // No state carried between reviews. The core reviews in one instance
        // without a model, so a model-reviewer's fresh reviews to compare
        // with are made without one too.
        let started = Instant::now();
        let ungranted: Vec<Result<Outcome, ReviewFailure>>;
        let fresh = if module.world() == World::ModelReviewer {
            ungranted = requests
                .iter()
                .map(|(_, request)| module.review(config, request).result)
                .collect();
            &ungranted
        } else {
            &first
        };
        let answered: Vec<(&str, &ReviewRequest, &Outcome)> = requests
            .iter()
            .zip(fresh)
            .filter_map(|((name, request), result)| {
                result
                    .as_ref()
                    .ok()
                    .map(|outcome| (*name, request, outcome))
            })
            .collect();
        let shared: Vec<&ReviewRequest> = answered.iter().map(|(_, request, _)| *request).collect();
        let in_one = module.review_in_one_instance(config, &shared);
        let carried: Vec<String> = answered
            .iter()
            .zip(in_one.iter().map(Some).chain(std::iter::repeat(None)))
            .filter(|((_, _, fresh), again)| {
                again.and_then(|again| again.as_ref().ok()) != Some(*fresh)
            })
            .map(|((name, _, _), _)| (*name).to_owned())
            .collect();
        report.push(
            "contract",
            "stateless: earlier reviews do not change later ones",
            (
                "same as a fresh instance",
                if carried.is_empty() {
                    "same as a fresh instance"
                } else {
                    "changed"
                },
            ),
            carried.is_empty(),
            (!carried.is_empty()).then(|| {
                format!(
                    "outcomes changed in a shared instance for: {}",
                    listing(&carried)
                )
            }),
            started.elapsed(),
        );

        // Never reaches for files or sockets. Reads of the environment are
        // answered as production answers them (nothing) and reported.
        // Inputs the module fails anyway are already reported (a panic, for
        // one, reads RUST_BACKTRACE from the environment).
        let started = Instant::now();
        let answered = requests
            .iter()
            .zip(&first)
            .filter(|(_, result)| result.is_ok())
            .map(|((_, request), _)| request);
        let (got, detail) = self.check_sandboxed(source, bytes, answered);
        report.push(
            "contract",
            "sandboxed: no files or sockets; an empty environment",
            ("nothing", &got),
            got == "nothing",
            detail,
            started.elapsed(),
        );
    }
}

impl Kit {
    /// The `sandboxed` row's result over `requests`, in the denying sandbox:
    /// `nothing`, or `calls denied imports` with what was called; the note
    /// lists the environment reads it answered empty.
    fn check_sandboxed<'a>(
        &self,
        source: &str,
        bytes: &[u8],
        requests: impl Iterator<Item = &'a ReviewRequest>,
    ) -> (String, Option<String>) {
        let name = source.rsplit('/').next().unwrap_or(source);
        let denied =
            match self
                .denied
                .load_bytes_with(name, source, bytes, None, &self.module_limits)
            {
                Ok(denied) => denied,
                Err(error) => return ("refused".to_owned(), Some(error.to_string())),
            };
        let mut reached = Tally::default();
        let mut read = Tally::default();
        for request in requests {
            let review = self.review(&denied, request);
            for import in &review.logs.environment_reads {
                read.add(import);
            }
            if let Err(ReviewFailure::DeniedImport(import)) = review.result {
                reached.add(&import);
            }
        }
        let reads = (!read.is_empty())
            .then(|| format!("read its environment, answered empty: {}", read.listing()));
        if reached.is_empty() {
            return ("nothing".to_owned(), reads);
        }
        let called = format!("called {}", reached.listing());
        let detail = match reads {
            Some(reads) => format!("{called}; {reads}"),
            None => called,
        };
        ("calls denied imports".to_owned(), Some(detail))
    }
}

/// Names, each with the number of inputs it came up on, in first-seen order.
#[derive(Default)]
struct Tally(Vec<(String, usize)>);

impl Tally {
    fn add(&mut self, name: &str) {
        match self.0.iter_mut().find(|(seen, _)| seen == name) {
            Some((_, count)) => *count += 1,
            None => self.0.push((name.to_owned(), 1)),
        }
    }

    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// `NAME (on N inputs)`, the first few.
    fn listing(&self) -> String {
        let names: Vec<String> = self
            .0
            .iter()
            .map(|(name, count)| format!("{name} (on {count} inputs)"))
            .collect();
        listing(&names)
    }
}

impl Kit {
    /// The model suite ([`model_cases`], with the kit's module config unless
    /// a case has its own), then the limit on calls per review over all of
    /// its reviews. A module that cannot ask a model fails one row.
    fn check_model(&self, module: &std::sync::Arc<ReviewerModule>, report: &mut Report) {
        if module.world() != World::ModelReviewer {
            report.push(
                "model",
                "is a model-reviewer",
                (World::ModelReviewer.name(), module.world().name()),
                false,
                Some(format!(
                    "the module does not import `{}`: the model suite is for modules of the `model-reviewer` world",
                    gatehouse_core::contract::MODEL_INTERFACE
                )),
                Duration::ZERO,
            );
            return;
        }
        let cases = match model_cases() {
            Ok(cases) => cases,
            Err(error) => {
                report.push(
                    "model",
                    "case files",
                    ("load", "error"),
                    false,
                    Some(error.to_string()),
                    Duration::ZERO,
                );
                return;
            }
        };
        let runs = self.run_cases("model", module, cases.iter(), report);
        let calls: Vec<(&str, usize)> = runs
            .iter()
            .map(|(name, steps)| {
                let most = steps
                    .iter()
                    .map(|step| step.model_calls.len())
                    .max()
                    .unwrap_or(0);
                (name.as_str(), most)
            })
            .collect();
        let (got, passed, detail) = model_calls_check(&calls);
        report.push(
            "model",
            &format!("asks its model at most {MAX_MODEL_CALLS_PER_REVIEW} times per review"),
            (&format!("at most {MAX_MODEL_CALLS_PER_REVIEW} calls"), &got),
            passed,
            detail,
            Duration::ZERO,
        );
    }

    /// Runs `cases` on `module` (granted the kit's model, or the case's) and
    /// reports one row per run ([`Case::variants`]: one per case, or for a
    /// `model-reviewer` one per `with_model` entry); returns each row's
    /// module reports, for checks across cases. The `model` suite's cases
    /// run with the kit's module config unless they carry their own; the
    /// others with their own or `{}`. In the `guardian` suite a case without
    /// `with_model` is decided by the rules: a `model-reviewer` must not ask
    /// its model there.
    fn run_cases<'a>(
        &self,
        suite: &str,
        module: &std::sync::Arc<ReviewerModule>,
        cases: impl Iterator<Item = &'a Case>,
        report: &mut Report,
    ) -> Vec<(String, Vec<ModuleReport>)> {
        let unmarked = if suite == "guardian" {
            Unmarked::RulesDecide
        } else {
            Unmarked::AsWritten
        };
        let mut runs = Vec::new();
        for case in cases {
            let variants = match case.variants(module.world(), unmarked) {
                Ok(variants) => variants,
                Err(error) => {
                    report.push(
                        suite,
                        &case.name,
                        (&case.expect.decision, "invalid case"),
                        false,
                        Some(error.to_string()),
                        Duration::ZERO,
                    );
                    continue;
                }
            };
            let config = match (&case.config, suite) {
                (None, "model") => self.module_config.clone(),
                _ => case.config_json(),
            };
            for variant in &variants {
                let row = variant.row_name(&case.name);
                // A fresh grant for every run: a script starts over.
                let mut link = ChainLink::new(module.clone());
                if let Some(grant) = self.grant_for(module) {
                    link = link.with_model(grant);
                }
                let chain = Chain::new(vec![link]);
                let expected = &variant.expect.decision;
                match case.run_variant(&chain, &config, variant) {
                    Ok(run) => {
                        let detail = (!run.passed()).then(|| run.mismatches.join("; "));
                        // A pass shows the expectation, unless it allowed more
                        // than one decision: then what came out.
                        let got = if run.passed()
                            && !expected.contains('|')
                            && expected != ANY_DECISION
                        {
                            expected.clone()
                        } else {
                            run.got.clone()
                        };
                        report.push(
                            suite,
                            &row,
                            (expected, &got),
                            run.passed(),
                            detail,
                            run.elapsed,
                        );
                        runs.push((row, run.report.steps));
                    }
                    Err(error) => report.push(
                        suite,
                        &row,
                        (expected, "invalid case"),
                        false,
                        Some(error.to_string()),
                        Duration::ZERO,
                    ),
                }
            }
        }
        runs
    }
}

/// The call-limit row of the model suite, from each case's most model calls
/// in one review: what came out, whether it held, and which cases asked too
/// often. The host refuses every call past [`MAX_MODEL_CALLS_PER_REVIEW`]
/// (the module sees `rejected`) and still records it, so a module that keeps
/// asking shows more.
fn model_calls_check(calls: &[(&str, usize)]) -> (String, bool, Option<String>) {
    let most = calls.iter().map(|(_, count)| *count).max().unwrap_or(0);
    let over: Vec<String> = calls
        .iter()
        .filter(|(_, count)| *count > MAX_MODEL_CALLS_PER_REVIEW)
        .map(|(case, count)| format!("{case}: {count} calls"))
        .collect();
    let got = format!("at most {most} call{}", if most == 1 { "" } else { "s" });
    let detail = (!over.is_empty()).then(|| {
        format!(
            "kept asking after the host refused call {} (the limit is {MAX_MODEL_CALLS_PER_REVIEW} per review; a refused call answers `rejected`, which must end the review): {}",
            MAX_MODEL_CALLS_PER_REVIEW + 1,
            listing(&over)
        )
    });
    (got, over.is_empty(), detail)
}

/// At most five items, then how many more.
fn listing(items: &[String]) -> String {
    const SHOWN: usize = 5;
    let mut text = items
        .iter()
        .take(SHOWN)
        .cloned()
        .collect::<Vec<_>>()
        .join("; ");
    if items.len() > SHOWN {
        text.push_str(&format!("; and {} more", items.len() - SHOWN));
    }
    text
}

fn failed(failure: &ReviewFailure) -> String {
    format!("failure ({})", failure.code())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_call_limit_holds_up_to_the_limit() {
        let (got, passed, detail) = model_calls_check(&[("a", 0), ("b", 1), ("c", 3)]);
        assert!(passed);
        assert_eq!(got, "at most 3 calls");
        assert_eq!(detail, None);
        let (got, passed, _) = model_calls_check(&[("a", MAX_MODEL_CALLS_PER_REVIEW), ("b", 1)]);
        assert!(passed, "{got}");
        let (got, passed, _) = model_calls_check(&[]);
        assert!(passed);
        assert_eq!(got, "at most 0 calls");
    }

    #[test]
    fn a_module_that_keeps_asking_fails_the_call_limit_and_is_named() {
        let over = MAX_MODEL_CALLS_PER_REVIEW + 1;
        let (got, passed, detail) =
            model_calls_check(&[("allows", over), ("times out", 1), ("denies", over + 4)]);
        assert!(!passed);
        assert_eq!(got, format!("at most {} calls", over + 4));
        let detail = detail.expect("detail");
        assert!(
            detail.contains(&format!("allows: {over} calls")),
            "{detail}"
        );
        assert!(detail.contains("denies"), "{detail}");
        assert!(!detail.contains("times out"), "{detail}");
    }

    /// The decisions a case's `with_model` runs expect, and whether any of
    /// them asks the model.
    fn model_runs(case: &Case) -> (Vec<String>, bool) {
        let variants = case
            .variants(World::ModelReviewer, Unmarked::RulesDecide)
            .expect("valid with_model");
        let asks = variants
            .iter()
            .any(|variant| variant.expect.model_calls != Some(0));
        let decisions = variants
            .iter()
            .map(|variant| variant.expect.decision.clone())
            .collect();
        (decisions, asks)
    }

    #[test]
    fn every_guardian_case_the_model_decides_runs_under_a_denying_and_an_allowing_model() {
        // A case marked as decided by the model must show that the model's
        // answer is what decides: one run declines under a model that
        // denies, another accepts under one that allows.
        let cases = guardian_cases().expect("guardian cases");
        let mut decided = 0;
        for case in cases.iter().filter(|case| !case.with_model.is_empty()) {
            let (decisions, asks) = model_runs(case);
            if !asks {
                continue;
            }
            decided += 1;
            let models: Vec<&serde_json::Value> =
                case.with_model.iter().map(|run| &run.model).collect();
            for (model, decision) in [("deny", "decline"), ("allow", "accept")] {
                let at = models
                    .iter()
                    .position(|value| value.as_str() == Some(model))
                    .unwrap_or_else(|| panic!("{}: no run with the {model} stub", case.name));
                assert_eq!(decisions[at], decision, "{}", case.name);
            }
        }
        assert!(decided >= 18, "only {decided} model-decided guardian cases");
    }

    #[test]
    fn variants_hold_a_model_reviewer_to_the_rules_or_to_its_model() {
        let cases = guardian_cases().expect("guardian cases");
        let plain = cases
            .iter()
            .find(|case| case.with_model.is_empty() && case.model.is_none())
            .expect("a rule-decided case");
        let marked = cases
            .iter()
            .find(|case| case.with_model.len() == 2)
            .expect("a model-decided case");
        // A reviewer runs `expect` as written, marked or not.
        for case in [plain, marked] {
            for unmarked in [Unmarked::AsWritten, Unmarked::RulesDecide] {
                let variants = case.variants(World::Reviewer, unmarked).expect("variants");
                assert_eq!(variants.len(), 1);
                assert_eq!(variants[0].expect.model_calls, case.expect.model_calls);
                assert_eq!(variants[0].model_name, None);
                assert_eq!(variants[0].row_name(&case.name), case.name);
            }
        }
        // A model-reviewer: the rules decide unmarked guardian cases...
        let variants = plain
            .variants(World::ModelReviewer, Unmarked::RulesDecide)
            .expect("variants");
        assert_eq!(variants.len(), 1);
        assert_eq!(variants[0].expect.model_calls, Some(0));
        assert_eq!(variants[0].expect.decision, plain.expect.decision);
        let variants = plain
            .variants(World::ModelReviewer, Unmarked::AsWritten)
            .expect("variants");
        assert_eq!(variants[0].expect.model_calls, None);
        // ...and the model, once, the marked ones, under each run's model.
        let variants = marked
            .variants(World::ModelReviewer, Unmarked::AsWritten)
            .expect("variants");
        assert_eq!(variants.len(), 2);
        for variant in &variants {
            assert_eq!(variant.expect.model_calls, Some(1));
            assert!(variant.model.is_some());
        }
        assert_eq!(
            variants[0].row_name("x"),
            format!(
                "x (with model {})",
                variants[0].model_name.as_deref().unwrap_or_default()
            )
        );
        // A run's model must be a model.
        let mut broken = marked.clone();
        broken.with_model[0].model = serde_json::json!("no-such-stub");
        let error = broken
            .variants(World::ModelReviewer, Unmarked::RulesDecide)
            .expect_err("unknown stub");
        assert!(error.to_string().contains("with_model"), "{error}");
    }

    #[test]
    fn the_model_suite_parses_and_covers_every_failure() {
        let cases = model_cases().expect("model cases");
        let mut scripts = Vec::new();
        for case in &cases {
            case.review_request().expect("valid request");
            let script = case.model_script().expect("valid model").expect("a model");
            scripts.push(script.steps().to_vec());
            assert!(
                case.config.is_none(),
                "{}: the kit's config is used",
                case.name
            );
        }
        use crate::model::{Step, StepError, Stub};
        for error in [
            StepError::Timeout,
            StepError::Transient,
            StepError::RateLimited,
            StepError::Rejected,
            StepError::Cancelled,
        ] {
            assert!(
                scripts.contains(&vec![Step::Error(error)]),
                "no case for {error:?}"
            );
        }
        for stub in [Stub::Malformed, Stub::Deny, Stub::Allow] {
            assert!(scripts.contains(&vec![stub.step()]), "no case for {stub:?}");
        }
        let fail_closed = cases
            .iter()
            .filter(|case| case.expect.decision == "decline|cancel")
            .count();
        assert_eq!(fail_closed, cases.len() - 1);
    }
}
