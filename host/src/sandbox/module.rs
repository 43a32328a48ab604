//! A loaded module and one review in it: a fresh store and instance, the
//! deadline armed, the call made, the outcome checked, every failure
//! classified.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Serialize;
use wasmtime::component::Component;
use wasmtime::{Store, Trap};

use super::Shared;
use super::state::{LimitHit, ReviewLogs, ReviewState};
use super::wasi::DeniedCall;
use crate::contract;
use crate::failure::ReviewFailure;
use crate::outcome::Outcome;
use crate::request::ReviewRequest;

/// Bytes of hostcall fuel beyond the output cap, for the records and lists
/// around the strings.
const HOSTCALL_SLACK: usize = 4096;

/// The text of wasmtime's error when a guest hands the host more data than
/// the hostcall fuel allows.
const HOSTCALL_FUEL_EXHAUSTED: &str = "fuel allocated for hostcalls has been exhausted";

/// What a module says about itself (`describe`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ModuleInfo {
    /// Its name.
    pub name: String,
    /// Its version.
    pub version: String,
    /// Its claims, e.g. `guardian-compatible`.
    pub claims: Vec<String>,
}

/// A validated, pre-instantiated reviewer module. Cheap to share behind an
/// `Arc`; every review gets a fresh instance, so no state survives a review.
pub struct ReviewerModule {
    shared: Arc<Shared>,
    name: Arc<str>,
    source: String,
    digest: String,
    size: usize,
    component: Component,
    pre: contract::ReviewerPre<ReviewState>,
}

impl std::fmt::Debug for ReviewerModule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReviewerModule")
            .field("name", &self.name)
            .field("source", &self.source)
            .field("digest", &self.digest)
            .finish_non_exhaustive()
    }
}

/// The result of one module's review of one request.
#[derive(Debug, Clone, Serialize)]
pub struct ModuleReport {
    /// The module's name.
    pub module: Arc<str>,
    /// The module's sha256.
    pub digest: String,
    /// The checked outcome, or why there is none.
    #[serde(serialize_with = "serialize_result")]
    pub result: Result<Outcome, ReviewFailure>,
    /// Wall time of the review, instantiation included.
    #[serde(serialize_with = "serialize_micros")]
    pub elapsed: Duration,
    /// What the module logged.
    pub logs: ReviewLogs,
}

fn serialize_result<S: serde::Serializer>(
    result: &Result<Outcome, ReviewFailure>,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    #[derive(Serialize)]
    #[serde(rename_all = "lowercase")]
    enum Shown<'a> {
        Outcome(&'a Outcome),
        Failure { code: &'static str, detail: String },
    }
    match result {
        Ok(outcome) => Shown::Outcome(outcome).serialize(serializer),
        Err(failure) => Shown::Failure {
            code: failure.code(),
            detail: failure.to_string(),
        }
        .serialize(serializer),
    }
}

fn serialize_micros<S: serde::Serializer>(
    elapsed: &Duration,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    serializer.serialize_u64(u64::try_from(elapsed.as_micros()).unwrap_or(u64::MAX))
}

impl ReviewerModule {
    pub(crate) fn new(
        shared: Arc<Shared>,
        name: String,
        source: String,
        digest: String,
        size: usize,
        component: Component,
        pre: contract::ReviewerPre<ReviewState>,
    ) -> Self {
        ReviewerModule {
            shared,
            name: name.into(),
            source,
            digest,
            size,
            component,
            pre,
        }
    }

    /// The module's name (its file stem unless the config names it).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Where it was loaded from.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// Its sha256, lower-case hex.
    pub fn digest(&self) -> &str {
        &self.digest
    }

    /// Its size in bytes.
    pub fn size(&self) -> usize {
        self.size
    }

    /// The compiled component.
    pub fn component(&self) -> &Component {
        &self.component
    }

    /// The same module under another name (for logs and reports).
    pub fn renamed(&self, name: &str) -> ReviewerModule {
        ReviewerModule {
            shared: self.shared.clone(),
            name: name.into(),
            source: self.source.clone(),
            digest: self.digest.clone(),
            size: self.size,
            component: self.component.clone(),
            pre: self.pre.clone(),
        }
    }

    /// Reviews one request in a fresh instance. `config` is the module's
    /// configuration (JSON text). Never panics on guest behaviour: every
    /// failure comes back as a [`ReviewFailure`] in the report.
    pub fn review(&self, config: &str, request: &ReviewRequest) -> ModuleReport {
        let started = Instant::now();
        let mut store = self.store();
        let config = config.to_owned();
        let result = self
            .pre
            .instantiate(&mut store)
            .map_err(|error| self.classify(&store, error, true))
            .and_then(|reviewer| self.review_in(&reviewer, &mut store, &config, request));
        let elapsed = started.elapsed();
        let logs = store.into_data().into_logs();
        if let Err(failure) = &result {
            tracing::warn!(
                module = %self.name,
                code = failure.code(),
                stderr = %logs.stderr,
                "review failed: {failure}"
            );
        }
        ModuleReport {
            module: self.name.clone(),
            digest: self.digest.clone(),
            result,
            elapsed,
            logs,
        }
    }

    /// Reviews `requests` one after another in a single instance, resetting
    /// the deadline before each. Production reviews never share an instance;
    /// this exists so the conformance kit can prove that a module carries no
    /// state from one review to the next (its outcomes here must equal those
    /// of fresh instances). Stops at the first failure, which ends the list.
    pub fn review_in_one_instance(
        &self,
        config: &str,
        requests: &[&ReviewRequest],
    ) -> Vec<Result<Outcome, ReviewFailure>> {
        let mut store = self.store();
        let reviewer = match self.pre.instantiate(&mut store) {
            Ok(reviewer) => reviewer,
            Err(error) => return vec![Err(self.classify(&store, error, true))],
        };
        let config = config.to_owned();
        let mut results = Vec::with_capacity(requests.len());
        for request in requests {
            store.set_epoch_deadline(self.shared.limits.deadline_ticks());
            let result = self.review_in(&reviewer, &mut store, &config, request);
            let failed = result.is_err();
            results.push(result);
            if failed {
                break;
            }
        }
        results
    }

    /// One `review` call on an instance, its outcome checked.
    fn review_in(
        &self,
        reviewer: &contract::Reviewer,
        store: &mut Store<ReviewState>,
        config: &String,
        request: &ReviewRequest,
    ) -> Result<Outcome, ReviewFailure> {
        let outcome = reviewer
            .gatehouse_reviewer_review()
            .call_review(&mut *store, config, request.wire())
            .map_err(|error| self.classify(store, error, false))?;
        Outcome::from_guest(
            outcome,
            &request.params().elicitation,
            self.shared.limits.output_bytes(),
        )
    }

    /// Asks the module to describe itself, in a fresh instance under the same
    /// limits as a review.
    pub fn describe(&self) -> Result<ModuleInfo, ReviewFailure> {
        let mut store = self.store();
        let info = self.call(&mut store, |reviewer, store| {
            reviewer.gatehouse_reviewer_review().call_describe(store)
        })?;
        let size = info.name.len()
            + info.version.len()
            + info.claims.iter().map(String::len).sum::<usize>();
        let limit = self.shared.limits.output_bytes();
        if size > limit {
            return Err(ReviewFailure::OutputTooLarge { limit });
        }
        Ok(ModuleInfo {
            name: info.name,
            version: info.version,
            claims: info.claims,
        })
    }

    fn store(&self) -> Store<ReviewState> {
        let limits = &self.shared.limits;
        let mut store = Store::new(
            &self.shared.engine,
            ReviewState::new(self.name.clone(), limits),
        );
        store.limiter(|state| &mut state.limiter);
        store.set_epoch_deadline(limits.deadline_ticks());
        store.epoch_deadline_trap();
        // Bounds every transfer from guest to host (a log call, the outcome).
        store.set_hostcall_fuel(limits.output_bytes().max(limits.log_bytes()) + HOSTCALL_SLACK);
        store
    }

    fn call<T>(
        &self,
        store: &mut Store<ReviewState>,
        call: impl FnOnce(&contract::Reviewer, &mut Store<ReviewState>) -> wasmtime::Result<T>,
    ) -> Result<T, ReviewFailure> {
        let reviewer = self
            .pre
            .instantiate(&mut *store)
            .map_err(|error| self.classify(store, error, true))?;
        call(&reviewer, store).map_err(|error| self.classify(store, error, false))
    }

    fn classify(
        &self,
        store: &Store<ReviewState>,
        error: wasmtime::Error,
        instantiating: bool,
    ) -> ReviewFailure {
        let limits = &self.shared.limits;
        match store.data().limiter.hit {
            Some(LimitHit::Memory) => {
                return ReviewFailure::Memory {
                    limit: limits.memory_bytes(),
                };
            }
            Some(LimitHit::Table) => {
                return ReviewFailure::Table {
                    limit: limits.table_elements(),
                };
            }
            None => {}
        }
        // wasmtime's error for exhausted hostcall fuel is a private type;
        // its message is the only handle on it.
        let text = format!("{error:#}");
        if text.contains(HOSTCALL_FUEL_EXHAUSTED) {
            return ReviewFailure::OutputTooLarge {
                limit: limits.output_bytes().max(limits.log_bytes()),
            };
        }
        if let Some(denied) = error.downcast_ref::<DeniedCall>() {
            return ReviewFailure::DeniedImport(denied.0.clone());
        }
        match error.downcast_ref::<Trap>() {
            Some(Trap::Interrupt) => ReviewFailure::Deadline(limits.deadline()),
            Some(Trap::StackOverflow) => ReviewFailure::StackOverflow,
            Some(trap) => ReviewFailure::Trap(trap.to_string()),
            None if instantiating => ReviewFailure::Instantiate(format!("{error:#}")),
            None => ReviewFailure::Trap(format!("{error:#}")),
        }
    }
}
