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
//!   `host/conformance/suites/guardian/`.
//! - `cases`: a directory of case files of your own (`--cases DIR`).
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
mod report;

use std::path::PathBuf;
use std::time::{Duration, Instant};

pub use report::{CaseResult, Report};

use crate::cases::{Case, CaseError};
use gatehouse_core::chain::{Chain, ChainLink};
use gatehouse_core::failure::ReviewFailure;
use gatehouse_core::outcome::Outcome;
use gatehouse_core::request::ReviewRequest;
use gatehouse_core::sandbox::{Limits, ReviewerModule, Sandbox, SandboxError, WasiPolicy};

/// The guardian behaviour, as shipped with the host.
const GUARDIAN_CASES: [(&str, &str); 4] = [
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
];

/// The claim that makes `Suite::All` run the guardian suite.
pub const GUARDIAN_CLAIM: &str = "guardian-compatible";

/// Which suites to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Suite {
    /// The contract every reviewer must honour.
    Contract,
    /// Codex's Guardian behaviour.
    Guardian,
    /// The contract, the guardian suite if the module claims
    /// `guardian-compatible`, and any extra cases.
    All,
}

/// The guardian cases shipped with the host.
pub fn guardian_cases() -> Result<Vec<Case>, CaseError> {
    let mut cases = Vec::new();
    for (file, text) in GUARDIAN_CASES {
        let parsed: Vec<Case> = serde_json::from_str(text).map_err(|source| CaseError::Parse {
            path: PathBuf::from("host/conformance/suites/guardian").join(file),
            source,
        })?;
        cases.extend(parsed);
    }
    Ok(cases)
}

/// Runs suites against modules. Holds two sandboxes with the same limits:
/// one as reviews run in production, one that denies files, environment and
/// sockets so that reaching for them is seen.
pub struct Kit {
    closed: Sandbox,
    denied: Sandbox,
    module_config: String,
}

impl Kit {
    /// A kit whose reviews run under `limits`.
    pub fn new(limits: Limits) -> Result<Kit, SandboxError> {
        Ok(Kit {
            closed: Sandbox::builder()
                .limits(limits.clone())
                .wasi(WasiPolicy::Closed)
                .build()?,
            denied: Sandbox::builder()
                .limits(limits)
                .wasi(WasiPolicy::Deny)
                .build()?,
            module_config: "{}".to_owned(),
        })
    }

    /// The module configuration (JSON text) for the contract suite.
    pub fn with_module_config(mut self, config: impl Into<String>) -> Self {
        self.module_config = config.into();
        self
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
        let module = match self.closed.load_bytes(name, source, bytes, None) {
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
                Ok(cases) => run_cases("guardian", &module, cases.iter(), &mut report),
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
        if !extra.is_empty() {
            run_cases(
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
            let review = module.review(config, request);
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
            .filter(|((_, request), before)| module.review(config, request).result != **before)
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

        // No state carried between reviews.
        let started = Instant::now();
        let answered: Vec<(&str, &ReviewRequest, &Outcome)> = requests
            .iter()
            .zip(&first)
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

        // Never reaches for files, environment or sockets.
        let started = Instant::now();
        let name = source.rsplit('/').next().unwrap_or(source);
        let (got, detail) = match self.denied.load_bytes(name, source, bytes, None) {
            Err(error) => ("refused".to_owned(), Some(error.to_string())),
            Ok(denied) => {
                let mut reached: Vec<(String, usize)> = Vec::new();
                // Inputs the module fails anyway are already reported (a panic,
                // for one, reads RUST_BACKTRACE from the environment).
                let answered = requests
                    .iter()
                    .zip(&first)
                    .filter(|(_, result)| result.is_ok());
                for ((_, request), _) in answered {
                    if let Err(ReviewFailure::DeniedImport(import)) =
                        denied.review(config, request).result
                    {
                        match reached.iter_mut().find(|(name, _)| *name == import) {
                            Some((_, count)) => *count += 1,
                            None => reached.push((import, 1)),
                        }
                    }
                }
                if reached.is_empty() {
                    ("nothing".to_owned(), None)
                } else {
                    let calls: Vec<String> = reached
                        .iter()
                        .map(|(import, count)| format!("{import} (on {count} inputs)"))
                        .collect();
                    (
                        "calls denied imports".to_owned(),
                        Some(format!("called {}", listing(&calls))),
                    )
                }
            }
        };
        report.push(
            "contract",
            "sandboxed: no files, environment or sockets",
            ("nothing", &got),
            got == "nothing",
            detail,
            started.elapsed(),
        );
    }
}

fn run_cases<'a>(
    suite: &str,
    module: &std::sync::Arc<ReviewerModule>,
    cases: impl Iterator<Item = &'a Case>,
    report: &mut Report,
) {
    let chain = Chain::new(vec![ChainLink::new(module.clone())]);
    for case in cases {
        match case.run(&chain) {
            Ok(run) => {
                let detail = (!run.passed()).then(|| run.mismatches.join("; "));
                let expected = &case.expect.decision;
                let got = if run.passed() {
                    expected.clone()
                } else {
                    run.got.clone()
                };
                report.push(
                    suite,
                    &case.name,
                    (expected, &got),
                    run.passed(),
                    detail,
                    run.elapsed,
                );
            }
            Err(error) => report.push(
                suite,
                &case.name,
                (&case.expect.decision, "invalid case"),
                false,
                Some(error.to_string()),
                Duration::ZERO,
            ),
        }
    }
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
