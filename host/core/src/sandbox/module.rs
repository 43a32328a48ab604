//! A loaded module and one review in it: a fresh store and instance, the
//! deadline armed, the call made, the outcome checked, every failure
//! classified.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Serialize;
use wasmtime::component::types::ComponentItem;
use wasmtime::component::{
    ComponentExportIndex, Instance, InstancePre, ResourceTableError, TypedFunc,
};
use wasmtime::{Store, Trap, UpdateDeadline};

use super::Shared;
use super::granted::ModelSession;
use super::state::{LimitHit, ReviewLogs, ReviewState};
use super::wasi::DeniedCall;
use crate::contract::{REVIEW_INTERFACE, World, types as wit};
use crate::failure::ReviewFailure;
use crate::model::{Cancel, ModelCallRecord, ModelGrant};
use crate::outcome::Outcome;
use crate::request::ReviewRequest;

/// Bytes of hostcall fuel beyond the output cap, for the records and lists
/// around the strings.
const HOSTCALL_SLACK: usize = 4096;

/// The text of wasmtime's error when a guest hands the host more data than
/// the hostcall fuel allows.
const HOSTCALL_FUEL_EXHAUSTED: &str = "fuel allocated for hostcalls has been exhausted";
/// wasmtime's message when a store's component handles run out
/// (`Store::set_max_component_handles`); like the one above, a message is
/// the only handle on it.
const STORE_HANDLE_LIMIT: &str = "store handle limit exceeded";

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

/// `review: func(config: json, request: review-request) -> outcome`.
type ReviewFunc<'a> = TypedFunc<(&'a str, &'a wit::ReviewRequest), (wit::Outcome,)>;

/// `describe: func() -> module-info`.
type DescribeFunc = TypedFunc<(), (wit::ModuleInfo,)>;

/// A module ready to instantiate: its pre-instantiation, and the functions of
/// its `review` export, found and type-checked once here so that a review's
/// fresh instance does not check them again.
#[derive(Clone)]
pub(crate) struct Prepared {
    pre: InstancePre<ReviewState>,
    describe: ComponentExportIndex,
    review: ComponentExportIndex,
    /// The contract version the module was built against (its `review`
    /// export's), e.g. `0.1.0`.
    version: Arc<str>,
    world: World,
}

impl Prepared {
    /// Finds the functions of `review@version` in `pre`'s component and
    /// checks their types against the contract (the same types for every
    /// supported version).
    pub(crate) fn new(
        pre: InstancePre<ReviewState>,
        version: &str,
        world: World,
    ) -> wasmtime::Result<Self> {
        let component = pre.component();
        let name = format!("{REVIEW_INTERFACE}@{version}");
        let (_, interface) = component
            .get_export(None, &name)
            .ok_or_else(|| wasmtime::format_err!("no exported instance named `{name}`"))?;
        let types = pre.instance_type();
        let func = |export: &str| {
            let (item, index) = component
                .get_export(Some(&interface), export)
                .ok_or_else(|| wasmtime::format_err!("`{name}` does not export `{export}`"))?;
            match item {
                ComponentItem::ComponentFunc(func) => Ok((func, index)),
                _ => Err(wasmtime::format_err!("`{name}#{export}` is not a function")),
            }
        };
        let (describe_type, describe) = func("describe")?;
        describe_type.typecheck::<(), (wit::ModuleInfo,)>(&types)?;
        let (review_type, review) = func("review")?;
        review_type.typecheck::<(&str, &wit::ReviewRequest), (wit::Outcome,)>(&types)?;
        Ok(Prepared {
            pre,
            describe,
            review,
            version: version.into(),
            world,
        })
    }
}

/// A reviewer, loaded: compiled, checked against the contract and
/// pre-instantiated, ready to review. Made by [`Sandbox::load_file`] or
/// [`Sandbox::load_bytes`], and bound to that sandbox's limits.
///
/// Every [`review`](Self::review) runs in a fresh instance that is dropped
/// after it, so no state survives from one review to the next and one module
/// can review on many threads at once: share it behind an `Arc` (a
/// [`ChainLink`](crate::chain::ChainLink) holds it that way). A review never
/// panics on what the guest does; a guest that traps, overruns its deadline
/// or caps, or answers what was not asked comes back as a
/// [`ReviewFailure`] in the report.
///
/// [`Sandbox::load_file`]: super::Sandbox::load_file
/// [`Sandbox::load_bytes`]: super::Sandbox::load_bytes
///
/// ```
/// use gatehouse_core::context::ReviewContext;
/// use gatehouse_core::elicitation::{ElicitationParams, RequestId};
/// use gatehouse_core::outcome::Decision;
/// use gatehouse_core::request::ReviewRequest;
/// use gatehouse_core::sandbox::{Limits, Sandbox};
/// # let guests = std::env::var_os("CARGO_TARGET_DIR").map_or_else(
/// #     || std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target"),
/// #     std::path::PathBuf::from,
/// # ).join("wasm32-wasip2/guest");
/// # assert!(guests.exists(), "{} is missing: run .ci/build-guests", guests.display());
/// # let guardian_wasm = guests.join("gatehouse_guardian.wasm");
///
/// let sandbox = Sandbox::new(Limits::default())?;
/// let guardian = sandbox.load_file(&guardian_wasm, None)?;
/// assert_eq!(guardian.name(), "gatehouse_guardian");
/// let info = guardian.describe()?;
/// assert!(info.claims.iter().any(|claim| claim == "guardian-compatible"));
///
/// let params = ElicitationParams::from_wire(&serde_json::json!({
///     "message": "Allow the agent to run delete_branch?",
///     "requestedSchema": {"type": "object", "properties": {}},
///     "_meta": {"codex_request_type": "approval_request",
///               "codex_approval_kind": "mcp_tool_call", "tool_name": "delete_branch"}
/// }))?;
/// let request = ReviewRequest::new(params, ReviewContext::new("github", RequestId::Number(1)));
/// // The module's configuration is JSON text; the guardian's `{}` denies
/// // every tool that is neither allowed nor known to be read-only.
/// let report = guardian.review("{}", &request);
/// let outcome = report.result?;
/// assert_eq!(outcome.decision.name(), "decline");
/// assert!(matches!(outcome.decision, Decision::Decline { message: Some(_) }));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct ReviewerModule {
    shared: Arc<Shared>,
    /// The sandbox's limits with the module's own over them.
    limits: super::Limits,
    name: Arc<str>,
    source: String,
    digest: String,
    signed_by: Option<Arc<str>>,
    size: usize,
    prepared: Prepared,
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
    /// Who signed the module, as the host verified it (none for a module
    /// loaded from a file, or allowed unsigned).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub signed_by: Option<Arc<str>>,
    /// The checked outcome, or why there is none.
    #[serde(serialize_with = "serialize_result")]
    pub result: Result<Outcome, ReviewFailure>,
    /// Wall time of the review, instantiation included.
    #[serde(serialize_with = "serialize_micros")]
    pub elapsed: Duration,
    /// What the module logged.
    pub logs: ReviewLogs,
    /// The calls it made to its model, in order (contract 0.2).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub model_calls: Vec<ModelCallRecord>,
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
        limits: super::Limits,
        name: String,
        source: String,
        digest: String,
        size: usize,
        prepared: Prepared,
    ) -> Self {
        ReviewerModule {
            shared,
            limits,
            name: name.into(),
            source,
            digest,
            signed_by: None,
            size,
            prepared,
        }
    }

    /// The same module, recorded as signed by `signer` (as the host verified
    /// it, e.g. `key release (sha256:…)`): every report of it says so, and so
    /// does every audit line. The core verifies nothing itself.
    pub fn signed_by(mut self, signer: impl Into<Arc<str>>) -> ReviewerModule {
        self.signed_by = Some(signer.into());
        self
    }

    /// Who signed it, as the host recorded ([`signed_by`](Self::signed_by)).
    pub fn signer(&self) -> Option<&str> {
        self.signed_by.as_deref()
    }

    /// The module's name (its file stem unless the config names it).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Where it was loaded from.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// The limits its reviews run under: its sandbox's, with its own
    /// ([`ModuleLimits`](super::ModuleLimits)) over them.
    pub fn limits(&self) -> &super::Limits {
        &self.limits
    }

    /// Its sha256, lower-case hex.
    pub fn digest(&self) -> &str {
        &self.digest
    }

    /// Its size in bytes.
    pub fn size(&self) -> usize {
        self.size
    }

    /// The contract version it was built against (its `review` export's),
    /// e.g. `0.1.0`.
    pub fn contract_version(&self) -> &str {
        &self.prepared.version
    }

    /// The world it targets: [`World::ModelReviewer`] when it imports the
    /// model capability, which only a granted module may use.
    pub fn world(&self) -> World {
        self.prepared.world
    }

    /// The same module under another name (for logs and reports).
    pub fn renamed(&self, name: &str) -> ReviewerModule {
        ReviewerModule {
            shared: self.shared.clone(),
            limits: self.limits.clone(),
            name: name.into(),
            source: self.source.clone(),
            digest: self.digest.clone(),
            signed_by: self.signed_by.clone(),
            size: self.size,
            prepared: self.prepared.clone(),
        }
    }

    /// Reviews one request in a fresh instance. `config` is the module's
    /// configuration (JSON text). Never panics on guest behaviour: every
    /// failure comes back as a [`ReviewFailure`] in the report. A module of
    /// the `model-reviewer` world reviewed this way has no model (its calls
    /// answer `not-configured`): see [`review_with`](Self::review_with).
    pub fn review(&self, config: &str, request: &ReviewRequest) -> ModuleReport {
        self.review_with(config, request, None, Cancel::never())
    }

    /// [`review`](Self::review), with the model the operator granted this
    /// module (if any) and the token that cancels a wait on it. The model's
    /// budget ([`ModelGrant::timeout`]) starts with the review; time the
    /// guest waits on its model does not count against its deadline.
    pub fn review_with(
        &self,
        config: &str,
        request: &ReviewRequest,
        model: Option<&ModelGrant>,
        cancel: &Cancel,
    ) -> ModuleReport {
        // A span of a trace ([`gatehouse_base::trace`]): the module, its
        // digest and the outcome; its model calls are its children.
        let span = tracing::debug_span!(
            target: gatehouse_base::trace::TARGET,
            "review",
            otel.name = %format_args!("review {}", gatehouse_base::trace::attribute(&self.name)),
            otel.status_code = tracing::field::Empty,
            gatehouse.module = %gatehouse_base::trace::attribute(&self.name),
            gatehouse.module.digest = %self.digest,
            gatehouse.outcome = tracing::field::Empty,
        );
        let _in = span.enter();
        let started = Instant::now();
        let mut store = self.store();
        let granted = &mut store.data_mut().granted;
        granted.related_call = request.related_call().cloned();
        granted.model = model.map(|grant| ModelSession::new(grant, cancel));
        let result = self
            .instantiate(&mut store)
            .and_then(|instance| self.review_in(instance, &mut store, config, request));
        let elapsed = started.elapsed();
        let mut state = store.into_data();
        let model_calls = state
            .granted
            .model
            .take()
            .map(|session| session.calls)
            .unwrap_or_default();
        let logs = state.into_logs();
        if let Err(failure) = &result {
            tracing::warn!(
                module = %self.name,
                code = failure.code(),
                stderr = %crate::escape::Escaped(&logs.stderr),
                "review failed: {}",
                crate::escape::Escaped(&failure.to_string())
            );
        }
        if !span.is_disabled() {
            match &result {
                Ok(outcome) => span.record("gatehouse.outcome", outcome.decision.name()),
                Err(failure) => {
                    span.record("otel.status_code", "error");
                    span.record("gatehouse.outcome", failure.code())
                }
            };
        }
        ModuleReport {
            module: self.name.clone(),
            digest: self.digest.clone(),
            signed_by: self.signed_by.clone(),
            result,
            elapsed,
            logs,
            model_calls,
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
        let instance = match self.instantiate(&mut store) {
            Ok(instance) => instance,
            Err(failure) => return vec![Err(failure)],
        };
        let mut results = Vec::with_capacity(requests.len());
        for request in requests {
            store.data_mut().deadline.restart();
            store.set_epoch_deadline(1);
            let result = self.review_in(instance, &mut store, config, request);
            let failed = result.is_err();
            results.push(result);
            if failed {
                break;
            }
        }
        results
    }

    /// A fresh instance of the module in `store`.
    fn instantiate(&self, store: &mut Store<ReviewState>) -> Result<Instance, ReviewFailure> {
        self.prepared
            .pre
            .instantiate(&mut *store)
            .map_err(|error| self.classify(store, error, true))
    }

    /// One `review` call on an instance, its outcome checked.
    fn review_in(
        &self,
        instance: Instance,
        store: &mut Store<ReviewState>,
        config: &str,
        request: &ReviewRequest,
    ) -> Result<Outcome, ReviewFailure> {
        let (outcome,) = instance
            .get_func(&mut *store, self.prepared.review)
            .ok_or_else(|| wasmtime::format_err!("the instance lacks its `review` export"))
            .and_then(|func| {
                // SAFETY: `Prepared::new` checked the function's type
                // against this signature when the module was loaded.
                let review: ReviewFunc<'_> = unsafe { TypedFunc::new_unchecked(func) };
                review.call(&mut *store, (config, request.wire()))
            })
            .map_err(|error| self.classify(store, error, false))?;
        Outcome::from_guest(
            outcome,
            &request.params().elicitation,
            self.limits.output_bytes(),
        )
    }

    /// Asks the module to describe itself, in a fresh instance under the same
    /// limits as a review.
    pub fn describe(&self) -> Result<ModuleInfo, ReviewFailure> {
        let mut store = self.store();
        let instance = self.instantiate(&mut store)?;
        let (info,) = instance
            .get_func(&mut store, self.prepared.describe)
            .ok_or_else(|| wasmtime::format_err!("the instance lacks its `describe` export"))
            .and_then(|func| {
                // SAFETY: `Prepared::new` checked the function's type
                // against this signature when the module was loaded.
                let describe: DescribeFunc = unsafe { TypedFunc::new_unchecked(func) };
                describe.call(&mut store, ())
            })
            .map_err(|error| self.classify(&store, error, false))?;
        let size = info.name.len()
            + info.version.len()
            + info.claims.iter().map(String::len).sum::<usize>();
        let limit = self.limits.output_bytes();
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
        let limits = &self.limits;
        let deadline = self.shared.in_flight.enter(limits.deadline());
        let mut store = Store::new(
            &self.shared.engine,
            ReviewState::new(self.name.clone(), limits, deadline),
        );
        store.limiter(|state| &mut state.limiter);
        // The guest's own handles (`resource.new`, and every host resource
        // handed to it) live in host-side tables wasmtime caps per store at
        // 100,000 by default: the same cap as the host's resource table.
        store.set_max_component_handles(limits.handles());
        // The deadline thread starts a new epoch when a review in flight
        // reaches its deadline; at each, this review stops if its own deadline
        // has passed and otherwise runs on to the next.
        store.set_epoch_deadline(1);
        store.epoch_deadline_callback(|store| {
            Ok(if store.data().deadline.passed() {
                UpdateDeadline::Interrupt
            } else {
                UpdateDeadline::Continue(1)
            })
        });
        // Bounds every transfer from guest to host (a log call, the outcome).
        store.set_hostcall_fuel(limits.output_bytes().max(limits.log_bytes()) + HOSTCALL_SLACK);
        store
    }

    fn classify(
        &self,
        store: &Store<ReviewState>,
        error: wasmtime::Error,
        instantiating: bool,
    ) -> ReviewFailure {
        let limits = &self.limits;
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
        if text.contains(STORE_HANDLE_LIMIT) {
            return ReviewFailure::Handles {
                limit: limits.handles(),
            };
        }
        if text.contains(HOSTCALL_FUEL_EXHAUSTED) {
            return ReviewFailure::OutputTooLarge {
                limit: limits.output_bytes().max(limits.log_bytes()),
            };
        }
        if let Some(ResourceTableError::Full) = error.downcast_ref::<ResourceTableError>() {
            return ReviewFailure::Handles {
                limit: limits.handles(),
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

#[cfg(test)]
mod tests {
    use super::super::{Limits, Sandbox, built_guest};

    /// The built reference guardian (`.ci/build-guests`).
    fn guardian() -> std::path::PathBuf {
        built_guest("gatehouse_guardian")
    }

    #[test]
    fn a_review_store_caps_the_guests_own_handles_at_the_handle_limit() {
        // `resource.new` fills wasmtime's host-side handle tables with no
        // host code in the loop; the store-wide cap bounds it like the host's
        // resource table (`handle-flood` in tests/hostile_guests.rs proves
        // the latter end to end).
        let limits = Limits::builder().handles(300).build();
        let sandbox = Sandbox::new(limits).expect("a sandbox");
        let module = sandbox
            .load_file(guardian(), None)
            .expect("run .ci/build-guests: the guardian loads");
        let store = module.store();
        assert_eq!(store.max_component_handles(), 300);
        assert_eq!(store.data().table_capacity(), 300);
    }
}
