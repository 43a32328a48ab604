//! The elicitation router: every elicitation a server sends, in Codex's
//! routing order (auto-deny; strict review; `never` and `granular`
//! short-cuts; the chain of modules; else the person), answered exactly once
//! and recorded in the audit log before the answer leaves.

mod admission;
mod pending;
mod settings;

use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use futures::future::BoxFuture;
use rmcp::model::{ElicitResult, ErrorData};
use serde_json::Value;

pub use pending::{Pending, PendingEntry};
pub use settings::{
    DEFAULT_MAX_IN_FLIGHT_PER_SERVER, Effective, ElicitationSettings, ServerOverrides, Unhandled,
};

use crate::audit::{AuditLog, AuditRecord, AuditStep, DecidedBy, now_rfc3339};
use crate::calls::{Binding, Calls, SessionId};
use crate::connection::{Delivery, ElicitationHandler, IncomingElicitation};
use gatehouse_core::answer::{Action, ElicitAnswer, REVIEW_FAILED_MESSAGE};
use gatehouse_core::chain::{Chain, ChainReport, Verdict};
use gatehouse_core::context::{ApprovalPolicy, ApprovalsReviewer, ReviewContext, ToolCatalog};
use gatehouse_core::elicitation::{Elicitation, ElicitationParams, ParamsError, RequestId};
use gatehouse_core::failure::ReviewFailure;
use gatehouse_core::outcome::Decision;
use gatehouse_core::request::ReviewRequest;
use gatehouse_core::schema;

/// `_meta` key asking for strict automated review.
pub const STRICT_KEY: &str = "codex_strict_auto_review";

/// Why the person was not asked.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NotAsked {
    /// No upstream client is connected (or the session asked for is gone).
    #[error("no upstream client to ask")]
    NoClient,
    /// The client did not declare this elicitation mode.
    #[error("the upstream client does not accept {0} elicitations")]
    ModeNotDeclared(&'static str),
    /// The params cannot be put on the wire as an elicitation.
    #[error("the elicitation cannot be forwarded: {0}")]
    Unforwardable(String),
    /// The session already has this many questions waiting.
    #[error("the upstream session already has {limit} questions waiting (max_pending_per_session)")]
    TooManyPending {
        /// The configured limit.
        limit: usize,
    },
}

/// Puts an elicitation in front of the person (through the upstream client).
pub trait Person: Send + Sync + 'static {
    /// Asks the person behind `session` (the upstream session the
    /// elicitation is tied to; `None` when the router has no call registry,
    /// as in tests and embeddings without a gateway) and returns their
    /// answer, or why nobody was asked.
    fn ask(
        &self,
        elicitation: &IncomingElicitation,
        session: Option<SessionId>,
    ) -> Result<BoxFuture<'static, Result<ElicitResult, ErrorData>>, NotAsked>;

    /// The server finished the URL-mode elicitation `elicitation_id` out of
    /// band; tell the person's client if it was shown there. The default
    /// does nothing.
    fn completed(&self, server: &str, elicitation_id: &str) {
        let _ = (server, elicitation_id);
    }
}

/// Nobody to ask: what the chain leaves undecided gets `on_unhandled`.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoPerson;

impl Person for NoPerson {
    fn ask(
        &self,
        _: &IncomingElicitation,
        _: Option<SessionId>,
    ) -> Result<BoxFuture<'static, Result<ElicitResult, ErrorData>>, NotAsked> {
        Err(NotAsked::NoClient)
    }
}

type CatalogSource = Box<dyn Fn(&str) -> Option<ToolCatalog> + Send + Sync>;

/// The router. Share it behind an `Arc`; `Arc<Router>` is the
/// [`ElicitationHandler`] of every connection.
pub struct Router {
    chain: ArcSwap<Chain>,
    settings: ArcSwap<ElicitationSettings>,
    audit: Arc<AuditLog>,
    person: Arc<dyn Person>,
    catalog: OnceLock<CatalogSource>,
    calls: OnceLock<Arc<Calls>>,
    reviews: admission::Admission,
    pending: Pending,
    arrivals: Pending,
    in_flight: std::sync::atomic::AtomicUsize,
    per_server: std::sync::Mutex<std::collections::HashMap<String, usize>>,
}

/// Counts one of a server's elicitations in flight while alive.
struct ServerSlot<'a> {
    counts: &'a std::sync::Mutex<std::collections::HashMap<String, usize>>,
    server: String,
}

impl Drop for ServerSlot<'_> {
    fn drop(&mut self) {
        if let Ok(mut counts) = self.counts.lock()
            && let Some(count) = counts.get_mut(&self.server)
        {
            *count = count.saturating_sub(1);
            if *count == 0 {
                counts.remove(&self.server);
            }
        }
    }
}

/// Counts a route in flight while alive.
struct InFlight<'a>(&'a std::sync::atomic::AtomicUsize);

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
    }
}

impl std::fmt::Debug for Router {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Router")
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

/// What ties an elicitation to others, learned on arrival.
struct Tie<'a> {
    /// Cancelled when the server reuses the request id while it waits.
    replaced: Option<tokio_util::sync::CancellationToken>,
    /// Whose upstream request it belongs to (with a call registry).
    binding: Option<&'a Binding>,
}

/// How one elicitation was decided.
struct Decided {
    answer: Result<ElicitAnswer, ErrorData>,
    by: DecidedBy,
    reason: String,
    steps: Vec<AuditStep>,
}

impl Decided {
    fn new(answer: ElicitAnswer, by: DecidedBy, reason: impl Into<String>) -> Self {
        Decided {
            answer: Ok(answer),
            by,
            reason: reason.into(),
            steps: Vec::new(),
        }
    }
}

impl Router {
    /// A router over `chain`. `concurrent_reviews` bounds chain runs in
    /// flight (match the sandbox's `Limits::concurrent_reviews`).
    pub fn new(
        chain: Chain,
        settings: ElicitationSettings,
        audit: Arc<AuditLog>,
        person: Arc<dyn Person>,
        concurrent_reviews: usize,
    ) -> Router {
        Router {
            chain: ArcSwap::from_pointee(chain),
            settings: ArcSwap::from_pointee(settings),
            audit,
            person,
            catalog: OnceLock::new(),
            calls: OnceLock::new(),
            reviews: admission::Admission::new(concurrent_reviews),
            pending: Pending::default(),
            arrivals: Pending::default(),
            in_flight: std::sync::atomic::AtomicUsize::new(0),
            per_server: std::sync::Mutex::new(std::collections::HashMap::new()),
        }
    }

    /// Where the servers' tool catalogs come from (for identity binding);
    /// set once, usually to the MCP runtime's snapshot.
    pub fn set_catalog_source(
        &self,
        source: impl Fn(&str) -> Option<ToolCatalog> + Send + Sync + 'static,
    ) {
        let _ = self.catalog.set(Box::new(source));
    }

    /// The upstream requests in flight (the gateway's), set once: from
    /// then on an elicitation is put in front of a person only when it can
    /// be tied to exactly one upstream session, and only that session's.
    /// Without it every deferral goes to the [`Person`] with no session.
    pub fn set_calls(&self, calls: Arc<Calls>) {
        let _ = self.calls.set(calls);
    }

    /// Whose upstream request an elicitation from `server` belongs to, when
    /// the router has a call registry.
    fn bind(&self, server: &str) -> Option<Binding> {
        self.calls.get().map(|calls| calls.bind(server))
    }

    /// Replaces the chain: reviews in flight finish on the old one.
    pub fn swap_chain(&self, chain: Chain) {
        self.chain.store(Arc::new(chain));
    }

    /// Replaces the `[elicitations]` settings: elicitations that arrive
    /// from now on are routed by them; those in flight keep the old ones.
    pub fn swap_settings(&self, settings: ElicitationSettings) {
        self.settings.store(Arc::new(settings));
    }

    /// The settings in force.
    pub fn settings(&self) -> Arc<ElicitationSettings> {
        self.settings.load_full()
    }

    /// The elicitations waiting for the person.
    pub fn pending(&self) -> &Pending {
        &self.pending
    }

    /// How many elicitations are being routed right now.
    pub fn in_flight(&self) -> usize {
        self.in_flight.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Cancels everything waiting for the person and waits (up to `grace`)
    /// until every elicitation in flight is answered and audited.
    pub async fn drain(&self, grace: std::time::Duration) {
        self.pending.cancel_all(None);
        let deadline = Instant::now() + grace;
        while self.in_flight() > 0 && Instant::now() < deadline {
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
    }

    /// Routes one elicitation and writes its audit line; returns the answer.
    pub async fn route(&self, elicitation: IncomingElicitation) -> Result<ElicitResult, ErrorData> {
        self.in_flight
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let _in_flight = InFlight(&self.in_flight);
        let started = Instant::now();
        let (_slot, over_cap) = self.take_server_slot(&elicitation.server);
        // A pushed request's id must be unique among the server's requests
        // in flight. A reuse cancels the earlier one (if it waits for the
        // person) and answers the later `cancel` at once: rmcp keeps one
        // response slot per id, so the server hears one answer either way,
        // and nothing is left waiting.
        let arrival = match elicitation.delivery {
            Delivery::Request => Some(self.arrivals.register_checked(
                &elicitation.server,
                &request_id_text(&elicitation.request_id),
            )),
            Delivery::InputRequest => None,
        };
        let duplicate = arrival.as_ref().is_some_and(|(_, replaced)| *replaced);
        let binding = self.bind(&elicitation.server);
        let parsed = ElicitationParams::from_wire(&elicitation.params).and_then(|params| {
            match &params.elicitation {
                Elicitation::Url { elicitation_id, .. }
                    if elicitation_id.is_empty() && elicitation.delivery == Delivery::Request =>
                {
                    Err(ParamsError::MissingElicitationId)
                }
                _ => Ok(params),
            }
        });
        let mode = match &parsed {
            Ok(params) => params.elicitation.mode().to_string(),
            Err(_) => "invalid".to_owned(),
        };
        let mut decided = if let Some(limit) = over_cap {
            Decided::new(
                ElicitAnswer::plain_decline(),
                DecidedBy::Policy,
                format!(
                    "too many elicitations in flight from this server (max_in_flight_per_server = {limit})"
                ),
            )
        } else if duplicate {
            Decided::new(
                ElicitAnswer::cancel(),
                DecidedBy::Policy,
                "duplicate request id: an earlier request with this id was still in flight; both are cancelled",
            )
        } else {
            match parsed {
                Err(error) => Decided {
                    answer: Err(ErrorData::invalid_params(error.to_string(), None)),
                    by: DecidedBy::Policy,
                    reason: "invalid params".to_owned(),
                    steps: Vec::new(),
                },
                Ok(params) => {
                    let tie = Tie {
                        replaced: arrival.as_ref().map(|(entry, _)| entry.replaced.clone()),
                        binding: binding.as_ref(),
                    };
                    self.decide(&elicitation, params, tie).await
                }
            }
        };
        drop(arrival);
        let record = AuditRecord {
            time: now_rfc3339(),
            server: elicitation.server.clone(),
            request_id: serde_json::to_value(&elicitation.request_id).unwrap_or(Value::Null),
            session: binding
                .as_ref()
                .and_then(Binding::session)
                .map(SessionId::get),
            mode,
            decided_by: decided.by,
            reason: decided.reason.clone(),
            steps: std::mem::take(&mut decided.steps),
            answer: match &decided.answer {
                Ok(answer) => answer.to_wire(),
                Err(error) => {
                    serde_json::json!({"error": {"code": error.code.0, "message": error.message}})
                }
            },
            latency_us: u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX),
        };
        if let Err(error) = self.write_audit(record).await {
            // Reported, never swallowed; and nothing is accepted unaudited.
            tracing::error!(server = %elicitation.server, "{error}");
            if matches!(&decided.answer, Ok(answer) if answer.action == Action::Accept) {
                decided.answer = Ok(ElicitAnswer::failed(
                    &gatehouse_core::failure::ReviewFailure::Trap(
                        "audit log unavailable".to_owned(),
                    ),
                ));
            }
        }
        match decided.answer {
            Ok(answer) => serde_json::from_value(answer.to_wire()).map_err(|error| {
                ErrorData::internal_error(format!("cannot encode the answer: {error}"), None)
            }),
            Err(error) => Err(error),
        }
    }

    /// Writes one audit line. With `audit_sync = "always"` the write waits
    /// for the disk, so it runs on a blocking thread rather than holding up
    /// this runtime worker's other tasks; the other modes only copy into the
    /// page cache and write in place.
    async fn write_audit(&self, record: AuditRecord) -> Result<(), crate::audit::AuditError> {
        if self.audit.sync_mode() != crate::audit::AuditSync::Always {
            return self.audit.write(&record);
        }
        let audit = self.audit.clone();
        match tokio::task::spawn_blocking(move || audit.write(&record)).await {
            Ok(written) => written,
            Err(error) => Err(crate::audit::AuditError {
                path: self.audit.path().to_path_buf(),
                source: std::io::Error::other(format!("the audit write task failed: {error}")),
            }),
        }
    }

    /// Counts one more elicitation of `server` in flight; `Some(limit)` when
    /// that is over the limit (the slot is still held, and released on drop).
    fn take_server_slot(&self, server: &str) -> (ServerSlot<'_>, Option<usize>) {
        let limit = self.settings.load().max_in_flight_per_server.max(1);
        let count = self
            .per_server
            .lock()
            .map(|mut counts| {
                let count = counts.entry(server.to_owned()).or_insert(0);
                *count += 1;
                *count
            })
            .unwrap_or(0);
        let slot = ServerSlot {
            counts: &self.per_server,
            server: server.to_owned(),
        };
        (slot, (count > limit).then_some(limit))
    }

    async fn decide(
        &self,
        elicitation: &IncomingElicitation,
        params: ElicitationParams,
        tie: Tie<'_>,
    ) -> Decided {
        let all = self.settings.load_full();
        let settings = all.for_server(&elicitation.server);
        if settings.auto_deny {
            return Decided::new(
                ElicitAnswer::plain_decline(),
                DecidedBy::Policy,
                "auto-deny",
            );
        }
        let strict = params
            .meta
            .as_ref()
            .and_then(|meta| meta.get(STRICT_KEY))
            .is_some();
        let request = self.review_request(elicitation, params, &settings);
        if strict {
            return self.strict_review(request).await;
        }
        match settings.approval_policy {
            ApprovalPolicy::Never => {
                let empty_form = matches!(&request.params().elicitation,
                    Elicitation::Form { requested_schema, .. }
                        if requested_schema.get("properties").and_then(Value::as_object).is_none_or(|p| p.is_empty()));
                return if settings.auto_approve_prompts && empty_form {
                    let answer = ElicitAnswer {
                        action: Action::Accept,
                        content: Some(Value::Object(serde_json::Map::new())),
                        meta: None,
                    };
                    Decided::new(
                        answer,
                        DecidedBy::Policy,
                        "approval policy never, prompts auto-approved",
                    )
                } else {
                    let answer = ElicitAnswer::automated(&Decision::Decline { message: None })
                        .unwrap_or_else(ElicitAnswer::plain_decline);
                    Decided::new(answer, DecidedBy::Policy, "approval policy never")
                };
            }
            ApprovalPolicy::Granular(flags) if !flags.mcp_elicitations => {
                let answer = ElicitAnswer::automated(&Decision::Decline { message: None })
                    .unwrap_or_else(ElicitAnswer::plain_decline);
                return Decided::new(
                    answer,
                    DecidedBy::Policy,
                    "granular policy without mcp_elicitations",
                );
            }
            _ => {}
        }
        let automated = matches!(
            settings.approval_policy,
            ApprovalPolicy::OnRequest | ApprovalPolicy::Granular(_)
        ) && settings.approvals_reviewer == ApprovalsReviewer::AutoReview;
        if !automated {
            return self
                .ask_person(
                    elicitation,
                    &request,
                    &all,
                    tie,
                    Vec::new(),
                    "routed to the user",
                )
                .await;
        }
        let report = self.run_chain(&request).await;
        let steps = audit_steps(&report);
        match (&report.verdict, report.answer()) {
            (Verdict::Decided { .. }, Some(answer)) => Decided {
                answer: Ok(answer),
                by: DecidedBy::Guest,
                reason: "decided by the chain".to_owned(),
                steps,
            },
            (Verdict::Failed { .. }, Some(answer)) => Decided {
                answer: Ok(answer),
                by: DecidedBy::Failure,
                reason: failure_reason(&report),
                steps,
            },
            _ => {
                self.ask_person(
                    elicitation,
                    &request,
                    &all,
                    tie,
                    steps,
                    "every module deferred",
                )
                .await
            }
        }
    }

    fn review_request(
        &self,
        elicitation: &IncomingElicitation,
        params: ElicitationParams,
        settings: &Effective,
    ) -> ReviewRequest {
        let request_id = serde_json::to_value(&elicitation.request_id)
            .ok()
            .and_then(|id| serde_json::from_value::<RequestId>(id).ok())
            .unwrap_or(RequestId::Number(0));
        let tool_name = params
            .meta
            .as_ref()
            .and_then(|meta| meta.get("tool_name"))
            .and_then(Value::as_str);
        let catalog = self
            .catalog
            .get()
            .and_then(|source| source(&elicitation.server))
            .map(|catalog| catalog.lookup(tool_name))
            .unwrap_or_default();
        let mut context = ReviewContext::new(elicitation.server.clone(), request_id)
            .with_approval_policy(settings.approval_policy)
            .with_approvals_reviewer(settings.approvals_reviewer)
            .with_catalog(catalog);
        context.protocol_version = elicitation.protocol_version.clone();
        context.auto_approve_prompts = settings.auto_approve_prompts;
        ReviewRequest::new(params, context)
    }

    async fn run_chain(&self, request: &ReviewRequest) -> ChainReport {
        let chain = self.chain.load_full();
        let budget = chain.deadline_sum().saturating_add(WATCHDOG_MARGIN);
        // Fair across servers: a flood from one cannot queue ahead of all others.
        let _permit = self.reviews.acquire(&request.context().server_name).await;
        let request = request.clone();
        watched(budget, move || chain.review(&request)).await
    }

    /// Strict review: only a canonical automated answer passes; anything
    /// else is the strict decline.
    async fn strict_review(&self, request: ReviewRequest) -> Decided {
        let report = self.run_chain(&request).await;
        let steps = audit_steps(&report);
        let canonical = match &report.verdict {
            Verdict::Decided { outcome, .. } => match &outcome.decision {
                Decision::Accept { content } => content.as_ref().is_none_or(|content| {
                    content.as_object().is_some_and(|object| object.is_empty())
                }),
                Decision::Decline { .. } | Decision::Cancel => true,
                Decision::Defer => false,
            },
            _ => false,
        };
        match report.answer() {
            Some(answer) if canonical => Decided {
                answer: Ok(answer),
                by: DecidedBy::Guest,
                reason: "strict review".to_owned(),
                steps,
            },
            _ => Decided {
                answer: Ok(ElicitAnswer::automated(&Decision::Decline {
                    message: Some(REVIEW_FAILED_MESSAGE.to_owned()),
                })
                .unwrap_or_else(ElicitAnswer::plain_decline)),
                by: DecidedBy::Failure,
                reason: "strict review without a canonical answer".to_owned(),
                steps,
            },
        }
    }

    async fn ask_person(
        &self,
        elicitation: &IncomingElicitation,
        request: &ReviewRequest,
        settings: &ElicitationSettings,
        tie: Tie<'_>,
        steps: Vec<AuditStep>,
        why: &str,
    ) -> Decided {
        let Tie { replaced, binding } = tie;
        let replaced = replaced.unwrap_or_default();
        let unhandled = |reason: String, steps: Vec<AuditStep>| {
            let answer = match settings.on_unhandled {
                Unhandled::Decline => ElicitAnswer::plain_decline(),
                Unhandled::Cancel => ElicitAnswer::cancel(),
            };
            Decided {
                answer: Ok(answer),
                by: DecidedBy::Unhandled,
                reason,
                steps,
            }
        };
        // The person is whoever made the request the server is answering;
        // an elicitation that cannot be tied to one session is shown to nobody.
        let session = match binding {
            None => None,
            Some(binding) => match binding.session() {
                Some(session) => Some(session),
                None => {
                    let why_unbound = binding.why_unbound().unwrap_or_default();
                    return unhandled(format!("{why}; {why_unbound}"), steps);
                }
            },
        };
        let asking = match self.person.ask(elicitation, session) {
            Ok(asking) => asking,
            Err(not_asked) => return unhandled(format!("{why}; {not_asked}"), steps),
        };
        // Duplicate ids are settled on arrival (`route`); here every waiting
        // elicitation just needs its own entry, for shutdown and disconnects.
        let entry = self.pending.register_unique(
            &elicitation.server,
            &request.context().request_id.to_string(),
        );
        let cancel = |reason: &str, steps: Vec<AuditStep>| Decided {
            answer: Ok(ElicitAnswer::cancel()),
            by: DecidedBy::Person,
            reason: reason.to_owned(),
            steps,
        };
        let answered = tokio::select! {
            answered = asking => answered,
            () = tokio::time::sleep(settings.person_timeout()) => return cancel("the person did not answer in time", steps),
            () = elicitation.cancelled.cancelled() => return cancel("the server cancelled the request or disconnected", steps),
            () = entry.replaced.cancelled() => return cancel("cancelled: replaced by a request with the same id, or shutting down", steps),
            () = replaced.cancelled() => return cancel("cancelled: the server reused this request id while it waited", steps),
        };
        drop(entry);
        let result = match answered {
            Ok(result) => result,
            // The person's client went away or failed: nobody decided, so
            // the server hears `cancel` (MCP: dismissed without a choice).
            Err(error) => {
                return cancel(
                    &format!(
                        "{why}; the person's client disconnected or failed: {}",
                        error.message
                    ),
                    steps,
                );
            }
        };
        let wire = serde_json::to_value(&result).unwrap_or(Value::Null);
        let answer: ElicitAnswer = match serde_json::from_value(wire) {
            Ok(answer) => answer,
            Err(error) => {
                return unhandled(format!("the person's answer is malformed: {error}"), steps);
            }
        };
        if answer.action == Action::Accept
            && let Elicitation::Form {
                requested_schema, ..
            } = &request.params().elicitation
        {
            let content = answer.content.clone().unwrap_or(Value::Null);
            if let Err(error) = schema::validate_content(requested_schema, &content) {
                return Decided::new(
                    ElicitAnswer::plain_decline(),
                    DecidedBy::Policy,
                    format!("the person's content does not match the schema: {error}"),
                );
            }
        }
        Decided {
            answer: Ok(answer),
            by: DecidedBy::Person,
            reason: why.to_owned(),
            steps,
        }
    }
}

/// How much longer than its modules' deadlines added up the router waits for
/// a chain. The sandbox ends every review at its deadline, waits in WASI
/// included; this is the second line, for a host call that would not end.
pub const WATCHDOG_MARGIN: Duration = Duration::from_millis(500);

/// Runs `review` on a blocking thread and waits for it at most `budget`.
/// Past that the review fails closed with the `deadline` failure and the
/// caller answers and audits it, releasing its review permit; the thread, if
/// it ever returns, is ignored.
async fn watched(
    budget: Duration,
    review: impl FnOnce() -> ChainReport + Send + 'static,
) -> ChainReport {
    let failed = |failure: ReviewFailure| ChainReport {
        steps: Vec::new(),
        verdict: Verdict::Failed { step: 0, failure },
    };
    match tokio::time::timeout(budget, tokio::task::spawn_blocking(review)).await {
        Ok(Ok(report)) => report,
        Ok(Err(error)) => failed(ReviewFailure::Trap(format!("review task failed: {error}"))),
        Err(_) => {
            tracing::error!(
                budget_ms = budget.as_millis(),
                "the chain overran its modules' deadlines; failing the review closed"
            );
            failed(ReviewFailure::Deadline(budget))
        }
    }
}

/// The audit steps of a chain run: one per module that ran, or, when the
/// router failed it before any module finished (the watchdog, a crashed
/// task), one step for the router with the failure's code.
fn audit_steps(report: &ChainReport) -> Vec<AuditStep> {
    match (&report.verdict, report.steps.is_empty()) {
        (Verdict::Failed { failure, .. }, true) => vec![AuditStep {
            module: ROUTER_STEP.to_owned(),
            sha256: String::new(),
            outcome: "failure".to_owned(),
            failure: Some(failure.code().to_owned()),
            rationale: Some(failure.to_string()),
            risk: None,
            latency_us: 0,
        }],
        _ => report.steps.iter().map(AuditStep::from).collect(),
    }
}

/// The module name of an audit step the router wrote itself.
pub const ROUTER_STEP: &str = "gatehouse:router";

/// The audit reason for a chain that failed: a module's failure, or the
/// router's own when no module finished (the watchdog, a crashed task).
fn failure_reason(report: &ChainReport) -> String {
    match (&report.verdict, report.steps.is_empty()) {
        (Verdict::Failed { failure, .. }, true) => {
            format!(
                "no module finished ({}): {failure}; failed closed",
                failure.code()
            )
        }
        _ => "a module failed; failed closed".to_owned(),
    }
}

/// A request id as a registry key: `7` and `"7"` stay apart.
fn request_id_text(id: &rmcp::model::RequestId) -> String {
    serde_json::to_string(id).unwrap_or_default()
}

impl ElicitationHandler for Arc<Router> {
    fn elicit(
        &self,
        elicitation: IncomingElicitation,
    ) -> BoxFuture<'static, Result<ElicitResult, ErrorData>> {
        let router = self.clone();
        Box::pin(async move { router.route(elicitation).await })
    }

    fn completed(&self, server: &str, elicitation_id: &str) {
        tracing::info!(
            server,
            elicitation_id,
            "URL elicitation completed by the server"
        );
        self.person.completed(server, elicitation_id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_chain_that_never_returns_is_failed_closed_by_the_watchdog() {
        let (release, wait) = std::sync::mpsc::channel::<()>();
        let report = watched(Duration::from_millis(20), move || {
            // A host call that would never end, until the test lets go.
            let _ = wait.recv();
            ChainReport {
                steps: Vec::new(),
                verdict: Verdict::Deferred,
            }
        })
        .await;
        let _ = release.send(());
        assert!(
            matches!(
                &report.verdict,
                Verdict::Failed {
                    failure: ReviewFailure::Deadline(budget),
                    ..
                } if *budget == Duration::from_millis(20)
            ),
            "{report:?}"
        );
        let answer = report.answer().expect("a failed chain answers");
        assert_eq!(answer.action, Action::Decline);
        assert!(failure_reason(&report).starts_with("no module finished (deadline)"));
        // The audit line carries the code as data, not only in the reason.
        let steps = audit_steps(&report);
        assert_eq!(steps.len(), 1);
        assert_eq!(steps[0].module, ROUTER_STEP);
        assert_eq!(steps[0].failure.as_deref(), Some("deadline"));
    }

    #[tokio::test]
    async fn a_chain_within_its_budget_is_not_touched() {
        let report = watched(Duration::from_secs(5), || ChainReport {
            steps: Vec::new(),
            verdict: Verdict::Deferred,
        })
        .await;
        assert!(matches!(report.verdict, Verdict::Deferred));
    }
}
