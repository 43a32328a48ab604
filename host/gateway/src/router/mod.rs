//! The elicitation router: every elicitation a server sends, in Codex's
//! routing order (auto-deny; strict review, which only an explicit
//! `granular` denial or the server's own `user` reviewer refuses unreviewed;
//! `never` and `granular` short-cuts; the chain of modules; else the
//! person), answered exactly once and recorded in the audit log before the
//! answer leaves.
//!
//! By job: the [`Router`] here orchestrates (the registries, the chain on a
//! blocking thread under its watchdog, the audit line); `policy` decides
//! where an elicitation goes and what a chain's report means, as plain
//! functions; `person` asks the [`Person`] (timeout and cancellation);
//! `admission` shares the review pool fairly across servers; `pending` is
//! the registry type; `settings` is `[elicitations]`.

mod admission;
mod pending;
mod person;
mod policy;
mod settings;
mod shadow;
mod spend;

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use futures::future::BoxFuture;
use rmcp::model::{ElicitResult, ErrorData};
use serde_json::Value;

pub use pending::{Pending, PendingEntry};
pub use person::{CALL_ENDED_REASON, NoAnswer, NoPerson, NotAsked, Person, SERVER_GONE_REASON};
pub use policy::{ROUTER_STEP, Routed, STRICT_KEY, UNMATCHED_HEADLINE};
pub use settings::{
    DEFAULT_MAX_IN_FLIGHT_PER_SERVER, DEFAULT_MAX_MODEL_REVIEWS_PER_CALL,
    DEFAULT_MAX_MODEL_REVIEWS_PER_SERVER_PER_MINUTE, Effective, ElicitationSettings, PersonRoute,
    ServerOverrides, Unhandled,
};
pub use spend::SERVER_WINDOW;

use crate::calls::{Binding, Calls, Claim, Related, SessionId, UpstreamCall};
use gatehouse_audit::{AuditLog, AuditRecord, DecidedBy, now_rfc3339};
use gatehouse_base::escape::Escaped;
use gatehouse_core::answer::{Action, ElicitAnswer};
use gatehouse_core::chain::{Chain, ChainReport, ChainRun, Verdict};
use gatehouse_core::context::{ReviewContext, ToolCatalog};
use gatehouse_core::elicitation::{ElicitationParams, RequestId};
use gatehouse_core::failure::ReviewFailure;
use gatehouse_core::model::Cancel;
use gatehouse_core::request::ReviewRequest;
use gatehouse_mcp::handler::{Delivery, ElicitationHandler, IncomingElicitation, Refused};
use person::{Question, Tie};
use policy::{AfterChain, Decided, Route};
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

type CatalogSource = Box<dyn Fn(&str) -> Option<ToolCatalog> + Send + Sync>;

/// The router. Share it behind an `Arc`; `Arc<Router>` is the
/// [`ElicitationHandler`] of every connection.
///
/// [`Router::route`] takes one elicitation from arrival to answer: it
/// counts it against its server's `max_in_flight_per_server`, registers a
/// pushed request by its id, parses the params, asks the policy where it
/// goes, runs the chain or asks the person, writes the audit line and
/// returns the answer. Chain and settings are swapped whole
/// ([`Router::swap_chain`], [`Router::swap_settings`]); an elicitation keeps
/// what it started with.
///
/// # Registries
///
/// The router keeps two registries of [`Pending`] type, keyed by
/// (server, id); each entry is a [`PendingEntry`] guard, owned by the one
/// routing task it belongs to and removed when that guard drops (a dropped
/// entry removes only itself, never a later one under the same key).
///
/// - **arrivals**: the pushed `elicitation/create` requests in flight
///   ([`Delivery::Request`]), by the JSON-RPC id as JSON text (`7` and
///   `"7"` stay apart). `route` adds the entry on arrival, before anything
///   else happens, and drops it once the answer is decided, just before the
///   audit line is written. Input requests ([`Delivery::InputRequest`]) are
///   never in it: their keys repeat across calls by design. Invariant: at
///   most one live entry per key. A request that arrives under a live key
///   cancels the earlier entry's token (handed to the person's wait, so an
///   earlier one waiting for the person answers `cancel`) and is itself
///   answered `cancel` at once, unreviewed: rmcp keeps one response slot per
///   id, so the server hears one answer either way, and nothing is left
///   waiting.
/// - **pending** ([`Router::pending`]): the questions waiting for the
///   person. The person's wait adds the entry once the [`Person`] took the
///   question, under the request id made unique with a serial (so an entry
///   is never replaced), and drops it when the wait ends: answer,
///   `person_timeout_sec`, the server's cancellation or a cancel through
///   this registry. Invariant: every entry has exactly one waiter, and
///   cancelling its token ([`Pending::cancel_all`]: a server disconnected,
///   or [`Router::drain`] at shutdown) makes that waiter answer
///   `on_unhandled` (nobody decided) and write its audit line, which names
///   the cancel.
///
/// Besides them the router counts elicitations in flight, in total
/// ([`Router::in_flight`]) and per server (for
/// `max_in_flight_per_server`); each count is held by a guard for the
/// whole of `route`, audit line included.
pub struct Router {
    chain: ArcSwap<Chain>,
    /// Whether the first chain is in force ([`Router::loading_first_chain`]):
    /// until it is, elicitations wait for it.
    first_chain: tokio::sync::watch::Sender<FirstChain>,
    /// When [`Router::swap_chain`] last ran. Its lock is held across the
    /// whole of a swap, so [`Router::in_force`] reads the chain, the first
    /// chain's state and this time as one.
    swapped_at: Mutex<Option<std::time::SystemTime>>,
    settings: ArcSwap<ElicitationSettings>,
    audit: Arc<AuditLog>,
    person: Arc<dyn Person>,
    /// The approvals console, when `[console]` is configured.
    console: OnceLock<Arc<gatehouse_console::link::Link>>,
    /// What the operator scrapes (`crate::telemetry`).
    metrics: Arc<gatehouse_telemetry::series::Metrics>,
    /// The questions waiting for the person, by channel.
    waiting: person::Waiting,
    catalog: OnceLock<CatalogSource>,
    calls: OnceLock<Arc<Calls>>,
    reviews: admission::Admission,
    /// The pool of reviews waiting on a model: a granted module's stretch of
    /// the chain runs under this one, never under `reviews`.
    model_reviews: admission::Admission,
    /// The questions waiting for the person (see "Registries").
    pending: Pending,
    /// The pushed requests in flight, by id (see "Registries").
    arrivals: Pending,
    in_flight: AtomicUsize,
    per_server: Mutex<HashMap<String, usize>>,
    /// Model-reviewed elicitations per call and per server, and the
    /// verdicts an identical request in the same call reuses.
    spend: spend::Spend,
    /// Cancelled by [`Router::drain`]: reviews waiting on a model stop
    /// waiting, so they are answered and audited before shutdown.
    shutdown: CancellationToken,
    /// Shadow reviews running at once (as many as live ones); one that finds
    /// none free is skipped, never queued (`shadow`).
    shadow_reviews: Arc<tokio::sync::Semaphore>,
    /// Shadow lines not written yet ([`Router::drain`] waits for them).
    shadow_pending: Arc<AtomicUsize>,
}

/// The chain in force, read as one ([`Router::in_force`]).
#[derive(Debug, Clone)]
pub struct InForce {
    /// The chain reviews run on now.
    pub chain: Arc<Chain>,
    /// Whether a chain is in force ([`Router::first_chain_loaded`]).
    pub loaded: bool,
    /// When [`Router::swap_chain`] last ran, if it did.
    pub swapped_at: Option<std::time::SystemTime>,
}

/// Where the first chain stands ([`Router::loading_first_chain`]).
#[derive(Debug, Clone, PartialEq, Eq)]
enum FirstChain {
    /// Being built and checked: elicitations wait.
    Loading,
    /// In force: elicitations are reviewed.
    Loaded,
    /// It did not load (why): elicitations are declined, failing closed.
    Failed(Arc<str>),
}

/// Counts one of a server's elicitations in flight while alive.
struct ServerSlot<'a> {
    counts: &'a Mutex<HashMap<String, usize>>,
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
struct InFlight<'a>(&'a AtomicUsize);

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

impl std::fmt::Debug for Router {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Router")
            .field("settings", &self.settings)
            .finish_non_exhaustive()
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
            first_chain: tokio::sync::watch::Sender::new(FirstChain::Loaded),
            swapped_at: Mutex::new(None),
            settings: ArcSwap::from_pointee(settings),
            audit,
            person,
            console: OnceLock::new(),
            metrics: Arc::default(),
            waiting: person::Waiting::default(),
            catalog: OnceLock::new(),
            calls: OnceLock::new(),
            reviews: admission::Admission::new(concurrent_reviews),
            model_reviews: admission::Admission::new(
                gatehouse_core::sandbox::Limits::default().model_reviews() as usize,
            ),
            pending: Pending::default(),
            arrivals: Pending::default(),
            in_flight: AtomicUsize::new(0),
            per_server: Mutex::new(HashMap::new()),
            spend: spend::Spend::default(),
            shutdown: CancellationToken::new(),
            shadow_reviews: Arc::new(tokio::sync::Semaphore::new(concurrent_reviews.max(1))),
            shadow_pending: Arc::new(AtomicUsize::new(0)),
        }
    }

    /// Sets how many reviews may wait on a model at once (match the
    /// sandbox's `Limits::model_reviews`; default 16). Reviews by modules
    /// granted a model are admitted to this pool, apart from the rule-based
    /// ones, so a slow model never holds a slot a rule-based review needs.
    pub fn with_model_reviews(mut self, model_reviews: usize) -> Router {
        self.model_reviews = admission::Admission::new(model_reviews);
        self
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

    /// Whose upstream request an elicitation belongs to, and the related
    /// call, when the router has a call registry ([`Calls::bind_claim`]).
    fn bind(&self, elicitation: &IncomingElicitation) -> (Option<Binding>, Related) {
        match self.calls.get() {
            Some(calls) => {
                let claim = Claim::from_params(&elicitation.params);
                let (binding, related) =
                    calls.bind_claim(&elicitation.server, claim.as_ref(), elicitation.call);
                (Some(binding), related)
            }
            None => (None, Related::Unknown),
        }
    }

    /// The approvals console, set once (`[console]` configured): questions
    /// `[elicitations] person` routes to it are put there.
    pub fn set_console(&self, console: Arc<gatehouse_console::link::Link>) {
        let _ = self.console.set(console);
    }

    /// Marks the chain given to [`Router::new`] a stand-in while the real
    /// one loads (off the critical path, so that a client's `initialize` is
    /// answered at once): every elicitation waits until the first
    /// [`Router::swap_chain`], or is declined, failing closed, once
    /// [`Router::first_chain_failed`] says it will not come.
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use gatehouse_core::chain::Chain;
    /// # use gatehouse_gateway::router::{NoPerson, Router};
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let audit = Arc::new(gatehouse_audit::AuditLog::open(dir.path().join("audit.jsonl")).unwrap());
    /// let router = Router::new(Chain::default(), Default::default(), audit, Arc::new(NoPerson), 4)
    ///     .loading_first_chain();
    /// assert!(!router.first_chain_loaded());
    /// router.swap_chain(Chain::default());
    /// assert!(router.first_chain_loaded());
    /// ```
    pub fn loading_first_chain(self) -> Router {
        self.first_chain.send_replace(FirstChain::Loading);
        self
    }

    /// The first chain will not come (`why`: the load's error): elicitations
    /// waiting for it, and any after, are declined and audited as failures.
    /// Returns whether it did anything: `false` once a chain is in force
    /// (a reload may have put one in while the first load failed).
    pub fn first_chain_failed(&self, why: &str) -> bool {
        self.first_chain.send_if_modified(|state| {
            let loading = *state == FirstChain::Loading;
            if loading {
                *state = FirstChain::Failed(Arc::from(why));
            }
            loading
        })
    }

    /// Why the first chain did not load ([`Router::first_chain_failed`]),
    /// if it did not.
    pub fn first_chain_error(&self) -> Option<Arc<str>> {
        match &*self.first_chain.borrow() {
            FirstChain::Failed(why) => Some(why.clone()),
            _ => None,
        }
    }

    /// Resolves when the first chain fails to load (at once if it did);
    /// never once a chain is in force.
    pub async fn first_chain_failure(&self) {
        let mut state = self.first_chain.subscribe();
        if state
            .wait_for(|state| matches!(state, FirstChain::Failed(_)))
            .await
            .is_err()
        {
            std::future::pending::<()>().await;
        }
    }

    /// Whether a chain is in force (always, unless
    /// [`Router::loading_first_chain`] and none was swapped in yet).
    pub fn first_chain_loaded(&self) -> bool {
        *self.first_chain.borrow() == FirstChain::Loaded
    }

    /// Waits until a chain is in force (`None`), or answers `elicitation`
    /// without one (`Some`) when none will be in force before it ends: the chain did not load or gatehouse stops
    /// (declined as a failure), or the elicitation ended while it waited (its
    /// server went away or cancelled it, reused its id, or the call it
    /// belongs to ended: cancelled, nobody decided).
    async fn wait_for_first_chain(
        &self,
        elicitation: &IncomingElicitation,
        tie: &Tie<'_>,
    ) -> Option<Decided> {
        if self.first_chain_loaded() {
            return None;
        }
        tracing::info!(
            server = %Escaped(&elicitation.server),
            "an elicitation waits for the reviewer chain to load"
        );
        let mut state = self.first_chain.subscribe();
        let replaced = tie.replaced.clone().unwrap_or_default();
        let call_ended = async {
            match tie.binding {
                Some(Binding::Call(call)) => call.ended().await,
                _ => std::future::pending().await,
            }
        };
        let ended = |why: &str| {
            Some(Decided::new(
                ElicitAnswer::cancel(),
                DecidedBy::Policy,
                format!("{why} while the reviewer chain was loading"),
            ))
        };
        // Biased: a chain in force wins over anything that came after it.
        tokio::select! {
            biased;
            settled = state.wait_for(|state| *state != FirstChain::Loading) => {
                match settled.map(|state| state.clone()) {
                    Ok(FirstChain::Failed(why)) => Some(Decided::without_chain(&why)),
                    Ok(_) => None,
                    Err(_) => Some(Decided::without_chain("the reviewer chain's loader is gone")),
                }
            }
            // The stop a failed first chain causes can wake this first (the
            // watch is cooperative, the token is not): its reason is the
            // failure's, whichever branch saw it.
            () = self.shutdown.cancelled() => Some(Decided::without_chain(
                self.first_chain_error()
                    .as_deref()
                    .unwrap_or("gatehouse is stopping and the reviewer chain has not loaded"),
            )),
            () = elicitation.server_gone.cancelled() => ended("the server went away"),
            () = elicitation.cancelled.cancelled() => {
                ended("the server cancelled the request or disconnected")
            }
            () = replaced.cancelled() => ended("the server reused this request id"),
            () = elicitation.arrival.superseded.cancelled() => {
                ended("the server reused this request id")
            }
            () = call_ended => ended("the request it belongs to ended"),
        }
    }

    /// Replaces the chain: reviews in flight finish on the old one. The
    /// first swap puts a chain in force ([`Router::loading_first_chain`]).
    pub fn swap_chain(&self, chain: Chain) {
        // Held across the swap: a reader of [`Router::in_force`] sees all
        // of it or none of it.
        let mut swapped_at = self
            .swapped_at
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        self.chain.store(Arc::new(chain));
        self.first_chain.send_if_modified(|state| {
            let opened = *state == FirstChain::Loading;
            if opened {
                *state = FirstChain::Loaded;
            }
            opened
        });
        *swapped_at = Some(std::time::SystemTime::now());
    }

    /// The chain in force, whether it is the first chain's, and when it
    /// was swapped in, read as one: never a chain in force without its
    /// time, or the time of a swap with the chain before it (what an
    /// operator's status shows).
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use gatehouse_core::chain::Chain;
    /// # use gatehouse_gateway::router::{NoPerson, Router};
    /// # let audit = Arc::new(gatehouse_audit::AuditLog::in_memory());
    /// let router = Router::new(Chain::default(), Default::default(), audit, Arc::new(NoPerson), 4)
    ///     .loading_first_chain();
    /// let before = router.in_force();
    /// assert!(!before.loaded && before.swapped_at.is_none());
    /// router.swap_chain(Chain::default());
    /// let after = router.in_force();
    /// assert!(after.loaded && after.swapped_at.is_some());
    /// ```
    pub fn in_force(&self) -> InForce {
        let swapped_at = self
            .swapped_at
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        InForce {
            chain: self.chain.load_full(),
            loaded: self.first_chain_loaded(),
            swapped_at: *swapped_at,
        }
    }

    /// The instance's metrics: every decision the router audits is
    /// recorded there ([`crate::telemetry::record_decision`]).
    pub fn metrics(&self) -> &Arc<gatehouse_telemetry::series::Metrics> {
        &self.metrics
    }

    /// How many questions wait for the person now, by channel (`client`,
    /// `console`).
    pub fn waiting_by_channel(&self) -> [(&'static str, usize); 2] {
        self.waiting.by_channel()
    }

    /// The chain in force.
    pub fn chain(&self) -> Arc<Chain> {
        self.chain.load_full()
    }

    /// When a chain was last swapped in, if one was.
    pub fn swapped_at(&self) -> Option<std::time::SystemTime> {
        self.swapped_at.lock().ok().and_then(|at| *at)
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

    /// The elicitations waiting for the person (the pending registry; see
    /// "Registries" above): count them, or cancel a server's or all.
    pub fn pending(&self) -> &Pending {
        &self.pending
    }

    /// How many elicitations are being routed right now.
    pub fn in_flight(&self) -> usize {
        self.in_flight.load(Ordering::SeqCst)
    }

    /// Cancels everything waiting for the person or a model, without
    /// waiting: call it first thing when shutting down, before the upstream
    /// sessions close, so what waits is answered as cancelled by the
    /// shutdown rather than by its client's going. [`Router::drain`] starts
    /// with it.
    pub fn begin_drain(&self) {
        self.pending.cancel_all(None);
        self.shutdown.cancel();
    }

    /// Cancels everything waiting for the person or a model
    /// ([`Router::begin_drain`]) and waits (up to `limit`) until every
    /// question that waited for the person has seen it, so that each is
    /// decided as cancelled by the shutdown. A host that closes the upstream
    /// sessions next calls this first: a question whose task woke to the
    /// close and the cancel at once would be audited as its client's going.
    pub async fn drain_questions(&self, limit: Duration) {
        self.begin_drain();
        settle(|| self.pending.is_empty(), limit, Duration::from_millis(1)).await;
    }

    /// Cancels everything waiting for the person or a model and waits (up to
    /// `grace`) until every elicitation in flight is answered and audited.
    pub async fn drain(&self, grace: Duration) {
        self.begin_drain();
        settle(
            || self.in_flight() == 0 && self.shadow_pending.load(Ordering::SeqCst) == 0,
            grace,
            Duration::from_millis(10),
        )
        .await;
    }

    /// Routes one elicitation and writes its audit line; returns the answer.
    pub async fn route(&self, elicitation: IncomingElicitation) -> Result<ElicitResult, ErrorData> {
        self.in_flight.fetch_add(1, Ordering::SeqCst);
        let _in_flight = InFlight(&self.in_flight);
        let started = Instant::now();
        let (_slot, over_cap) = self.take_server_slot(&elicitation.server);
        // A pushed request's id must be unique among the server's requests
        // in flight (the arrivals registry; see "Registries").
        let arrival = match elicitation.delivery {
            Delivery::Request => Some(self.arrivals.register_checked(
                &elicitation.server,
                &request_id_text(&elicitation.request_id),
            )),
            Delivery::InputRequest => None,
        };
        // A duplicate as the router sees it, or as the wire ordered it (the
        // earlier may not have reached the router yet, or left it already).
        let duplicate = arrival.as_ref().is_some_and(|(_, replaced)| *replaced)
            || (elicitation.delivery == Delivery::Request && elicitation.arrival.reused);
        let (binding, related) = self.bind(&elicitation);
        let call = related.call().or(match &binding {
            Some(Binding::Call(call)) => Some(call),
            _ => None,
        });
        let span =
            crate::trace::elicitation(&elicitation.server, call.map(|call| call.span()).as_ref());
        let shadow_slot = shadow::Slot::default();
        let parsed = policy::parse(&elicitation.params, elicitation.delivery);
        let mode = match &parsed {
            Ok(params) => params.elicitation.mode().to_string(),
            Err(_) => "invalid".to_owned(),
        };
        crate::trace::asked(
            &span,
            &mode,
            parsed
                .as_ref()
                .ok()
                .map(|params| params.elicitation.message()),
        );
        let decided = if let Some(limit) = over_cap {
            Decided::over_cap(limit)
        } else if duplicate {
            Decided::duplicate()
        } else {
            match parsed {
                Err(error) => Decided::invalid_params(&error),
                Ok(params) => {
                    let tie = Tie {
                        replaced: arrival.as_ref().map(|(entry, _)| entry.replaced.clone()),
                        binding: binding.as_ref(),
                    };
                    self.decide(&elicitation, params, tie, &related, &shadow_slot)
                        .instrument(span.clone())
                        .await
                }
            }
        };
        drop(arrival);
        let accepted = matches!(&decided.answer, Ok(answer) if answer.action == Action::Accept);
        // The answer as it goes on the wire, written to the audit line.
        let mut answer = decided.answer.map(|answer| answer.to_wire());
        let record = AuditRecord {
            time: now_rfc3339(),
            server: elicitation.server.clone(),
            request_id: serde_json::to_value(&elicitation.request_id).unwrap_or(Value::Null),
            session: binding
                .as_ref()
                .and_then(Binding::session)
                .map(SessionId::get),
            turn: related.call().and_then(|call| call.turn_id.clone()),
            // Written by the log itself (`AuditLog::with_instance`).
            instance: None,
            client: binding
                .as_ref()
                .and_then(Binding::session)
                .and_then(|session| self.person.client(session)),
            person: decided.person,
            mode,
            decided_by: decided.by,
            reason: decided.reason,
            steps: decided.steps,
            answer: match &answer {
                Ok(wire) => wire.clone(),
                Err(error) => {
                    serde_json::json!({"error": {"code": error.code.0, "message": error.message}})
                }
            },
            latency_us: u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX),
        };
        let shadow_started = shadow_slot.take().map(|reviews| {
            let action = match &answer {
                Ok(wire) => wire
                    .get("action")
                    .and_then(Value::as_str)
                    .unwrap_or("error")
                    .to_owned(),
                Err(_) => "error".to_owned(),
            };
            let compared = shadow::Compared {
                server: record.server.clone(),
                request_id: record.request_id.clone(),
                mode: record.mode.clone(),
                decided_by: record.decided_by,
                live: gatehouse_audit::shadow::live_outcome(record.decided_by, &record.steps),
                action,
            };
            (reviews, compared)
        });
        let mut downgraded = false;
        let writing = Instant::now();
        let written = self.write_audit(&record).await;
        crate::telemetry::record_audit_write(&self.metrics, written.is_ok(), writing.elapsed());
        if let Err(error) = written {
            // Reported, never swallowed; and nothing is accepted unaudited.
            tracing::error!(server = %elicitation.server, "{error}");
            if accepted {
                let failure = ReviewFailure::Trap("audit log unavailable".to_owned());
                answer = Ok(ElicitAnswer::failed(&failure).to_wire());
                downgraded = true;
            }
        }
        crate::telemetry::record_decision(&self.metrics, &record, downgraded);
        crate::trace::decided(
            &span,
            &crate::telemetry::decision_labels(&record, downgraded),
            record.latency_us,
        );
        if let Some((reviews, compared)) = shadow_started {
            shadow::write_later(
                reviews,
                compared,
                self.audit.clone(),
                self.shadow_pending.clone(),
            );
        }
        answer.and_then(|wire| {
            serde_json::from_value(wire).map_err(|error| {
                ErrorData::internal_error(format!("cannot encode the answer: {error}"), None)
            })
        })
    }

    /// Writes one audit line. With `audit_sync = "always"` the write waits
    /// for the disk, so it runs on a blocking thread rather than holding up
    /// this runtime worker's other tasks; the other modes only copy into the
    /// page cache and write in place.
    async fn write_audit(&self, record: &AuditRecord) -> Result<(), gatehouse_audit::AuditError> {
        if self.audit.sync_mode() != gatehouse_audit::AuditSync::Always {
            return self.audit.write(record);
        }
        let audit = self.audit.clone();
        let record = record.clone();
        match tokio::task::spawn_blocking(move || audit.write(&record)).await {
            Ok(written) => written,
            Err(error) => Err(gatehouse_audit::AuditError {
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

    /// Decides valid params: a tool-call approval that describes none of the
    /// calls in flight is declined; otherwise where the policy routes them,
    /// then the chain, the strict review or the person.
    async fn decide(
        &self,
        elicitation: &IncomingElicitation,
        params: ElicitationParams,
        tie: Tie<'_>,
        related: &Related,
        shadow_slot: &shadow::Slot,
    ) -> Decided {
        // Nothing is decided before the chain and settings the config
        // describes are in force; if they never come, it fails closed.
        if let Some(decided) = self.wait_for_first_chain(elicitation, &tie).await {
            return decided;
        }
        if let Related::Unmatched { in_flight } = related {
            return Decided::unmatched(*in_flight);
        }
        let related = related.call();
        let all = self.settings.load_full();
        let settings = all.for_server(&elicitation.server);
        match policy::route(&settings, &params) {
            Route::Settled { answer, reason } => Decided::new(answer, DecidedBy::Policy, reason),
            Route::Strict => {
                // The reviewer in force for a strict request is the server's
                // own setting, else auto_review (`Effective::strict_reviewer`).
                let strict = settings.for_strict_review();
                let request = Arc::new(self.review_request(
                    elicitation,
                    params,
                    &strict,
                    tie.binding,
                    related,
                ));
                shadow_slot.start(&self.chain.load_full(), &request, &self.shadow_reviews);
                self.review(&all, elicitation, &request, &tie, related, policy::strict)
                    .await
                    .unwrap_or_else(|decided| decided)
            }
            Route::Person { why } => {
                let request =
                    self.review_request(elicitation, params, &settings, tie.binding, related);
                let question = Question {
                    elicitation,
                    request: &request,
                    tie,
                    call: related.map(|call| &**call),
                    steps: Vec::new(),
                    why,
                };
                self.ask_person(&all, question).await
            }
            Route::Chain => {
                let request = Arc::new(self.review_request(
                    elicitation,
                    params,
                    &settings,
                    tie.binding,
                    related,
                ));
                let after = |report: &ChainReport| match policy::after_chain(report) {
                    AfterChain::Answered(decided) => Ok(decided),
                    AfterChain::Deferred { steps, why } => Err((steps, why)),
                };
                // The shadow modules review beside the chain, on threads of
                // their own; the answer never waits for them.
                shadow_slot.start(&self.chain.load_full(), &request, &self.shadow_reviews);
                match self
                    .review(&all, elicitation, &request, &tie, related, after)
                    .await
                {
                    Ok(Ok(decided)) | Err(decided) => decided,
                    Ok(Err((steps, why))) => {
                        let question = Question {
                            elicitation,
                            request: &request,
                            tie,
                            call: related.map(|call| &**call),
                            steps,
                            why,
                        };
                        self.ask_person(&all, question).await
                    }
                }
            }
        }
    }

    /// Runs the chain on `request` and reads its report with `read`; or,
    /// as `Err`, what decided without it: the verdict on an identical request
    /// earlier in the same related call, or a bound on model spend. A
    /// verdict the chain reached with a model's help is remembered for the
    /// rest of the related call.
    async fn review<T>(
        &self,
        settings: &ElicitationSettings,
        elicitation: &IncomingElicitation,
        request: &Arc<ReviewRequest>,
        tie: &Tie<'_>,
        related: Option<&Arc<UpstreamCall>>,
        read: impl FnOnce(&ChainReport) -> T,
    ) -> Result<T, Decided>
    where
        T: AsDecided,
    {
        let digest = related.map(|call| (call, spend::request_digest(&elicitation.params)));
        if let Some((call, digest)) = &digest
            && let Some(reused) = self.spend.reused(call, digest)
        {
            return Err(Decided::new(
                reused.answer,
                reused.by,
                format!(
                    "the verdict on an identical request earlier in this agent call, reused \
                     without asking again: {}",
                    reused.reason
                ),
            ));
        }
        let ran = self
            .run_chain(
                request,
                &elicitation.cancelled,
                tie.replaced.as_ref(),
                related,
                settings,
            )
            .await?;
        let read = read(&ran.report);
        if ran.asked_model
            && let Some((call, digest)) = digest
            && let Some(decided) = read.as_decided()
            && let Ok(answer) = &decided.answer
        {
            let verdict = spend::Reusable {
                answer: answer.clone(),
                by: decided.by,
                reason: decided.reason.clone(),
            };
            self.spend
                .remember(call, digest, verdict, self.calls.get().map(Arc::as_ref));
        }
        Ok(read)
    }

    /// The review request for valid params: the server's context under the
    /// settings in force, with the catalog entry of the tool it names, the
    /// upstream session the binding ties it to, and the related call and its
    /// turn.
    fn review_request(
        &self,
        elicitation: &IncomingElicitation,
        params: ElicitationParams,
        settings: &Effective,
        binding: Option<&Binding>,
        related: Option<&Arc<UpstreamCall>>,
    ) -> ReviewRequest {
        let request_id = serde_json::to_value(&elicitation.request_id)
            .ok()
            .and_then(|id| serde_json::from_value::<RequestId>(id).ok())
            .unwrap_or(RequestId::Number(0));
        let catalog = self
            .catalog
            .get()
            .and_then(|source| source(&elicitation.server))
            .map(|catalog| catalog.entry_for(&params))
            .unwrap_or_default();
        let mut context = ReviewContext::new(elicitation.server.clone(), request_id)
            .with_approval_policy(settings.approval_policy)
            .with_approvals_reviewer(settings.approvals_reviewer)
            .with_catalog(catalog);
        context.protocol_version = elicitation.protocol_version.clone();
        context.auto_approve_prompts = settings.auto_approve_prompts;
        if let Some(binding) = binding {
            context.session_id = binding.session().map(|session| session.to_string());
        }
        if let Some(call) = related {
            context.turn_id = call.turn_id.clone();
            context = context.with_related_call(call.related_call());
        }
        ReviewRequest::new(params, context)
    }

    /// Runs the chain a stretch at a time (`ChainRun`): rule-based modules
    /// under a permit of the review pool, a module granted a model under a
    /// permit of the model pool, each stretch on a blocking thread under its
    /// watchdog. The server's cancellation of the elicitation, a second
    /// request with its id, or shutdown, cancels a wait on a model (the module sees `cancelled`); the chain
    /// still ends and is audited. A stretch the watchdog gives up on is
    /// cancelled too, so its thread stops asking the model, and the steps
    /// before it stay in the report.
    ///
    /// Before the first stretch that asks a model, the elicitation is counted
    /// against the bounds on model spend (`spend`); past one, `Err` declines
    /// it with the steps so far, and no model is asked.
    async fn run_chain(
        &self,
        request: &Arc<ReviewRequest>,
        cancelled: &CancellationToken,
        replaced: Option<&CancellationToken>,
        related: Option<&Arc<UpstreamCall>>,
        settings: &ElicitationSettings,
    ) -> Result<ChainRan, Decided> {
        let server = request.context().server_name.clone();
        let mut asked_model = false;
        let cancel = Cancel::new();
        let mut run = ChainRun::new(self.chain.load_full());
        let replaced = replaced.cloned().unwrap_or_default();
        let on_cancel = async {
            tokio::select! {
                () = cancelled.cancelled() => {}
                () = self.shutdown.cancelled() => {}
                // The server reused this request's id: the earlier one is
                // cancelled where it waits (see "Registries").
                () = replaced.cancelled() => {}
            }
            cancel.cancel();
            std::future::pending::<std::convert::Infallible>().await
        };
        tokio::pin!(on_cancel);
        while let Some(asks_model) = run.next_asks_model() {
            if asks_model && !asked_model {
                let admitted = self.spend.admit(
                    &server,
                    related,
                    settings.spend_limits(),
                    Instant::now(),
                    self.calls.get().map(Arc::as_ref),
                );
                if let Err(refused) = admitted {
                    self.metrics.count(
                        &gatehouse_telemetry::families::MODEL_REVIEWS_REFUSED,
                        &[&server, refused.limit],
                        1,
                    );
                    let so_far = ChainReport {
                        steps: run.steps().to_vec(),
                        verdict: Verdict::Deferred,
                    };
                    return Err(Decided::spend_refused(
                        refused.why,
                        policy::audit_steps(&so_far),
                    ));
                }
                asked_model = true;
            }
            let pool = if asks_model {
                &self.model_reviews
            } else {
                &self.reviews
            };
            // Fair across servers: a flood from one cannot queue ahead of all others.
            let permit = pool.acquire(&server);
            let _permit = tokio::select! {
                permit = permit => permit,
                never = &mut on_cancel => match never {},
            };
            let budget = run.next_budget().saturating_add(WATCHDOG_MARGIN);
            // Kept in case the watchdog gives up on this stretch (the run
            // goes to the blocking thread): empty for the first stretch.
            let finished = run.steps().to_vec();
            let stretch = {
                let request = request.clone();
                let cancel = cancel.clone();
                // The modules' review spans are children of the
                // elicitation's, on the blocking thread too.
                let span = tracing::Span::current();
                watched(budget, move || {
                    let _in = span.enter();
                    run.run_stretch(&request, &cancel);
                    run
                })
            };
            tokio::pin!(stretch);
            let ran = tokio::select! {
                ran = &mut stretch => ran,
                never = &mut on_cancel => match never {},
            };
            run = match ran {
                Ok(run) => run,
                Err(failure) => {
                    cancel.cancel();
                    let report = ChainReport {
                        verdict: Verdict::Failed {
                            step: finished.len(),
                            failure,
                        },
                        steps: finished,
                    };
                    return Ok(ChainRan {
                        report,
                        asked_model,
                    });
                }
            };
        }
        Ok(ChainRan {
            report: run.finish(),
            asked_model,
        })
    }

    /// Puts the question to the person (`person::ask`), registered in the
    /// pending registry while it waits.
    async fn ask_person(&self, settings: &ElicitationSettings, question: Question<'_>) -> Decided {
        let channels = person::Channels {
            client: &*self.person,
            console: self.console.get(),
            waiting: &self.waiting,
        };
        let span = crate::trace::person();
        let decided = person::ask(channels, &self.pending, settings, question)
            .instrument(span.clone())
            .await;
        if !span.is_disabled() {
            let channel = decided.person.as_ref().map(crate::telemetry::channel_name);
            let action = match &decided.answer {
                Ok(answer) => answer.action.name().to_owned(),
                Err(_) => "error".to_owned(),
            };
            crate::trace::answered(&span, channel, &action);
        }
        decided
    }
}

/// A chain's report, and whether any of its stretches asked a model.
struct ChainRan {
    report: ChainReport,
    asked_model: bool,
}

/// What a reading of a chain's report decided, if it decided.
trait AsDecided {
    fn as_decided(&self) -> Option<&Decided>;
}

impl AsDecided for Decided {
    fn as_decided(&self) -> Option<&Decided> {
        Some(self)
    }
}

impl<E> AsDecided for Result<Decided, E> {
    fn as_decided(&self) -> Option<&Decided> {
        self.as_ref().ok()
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
async fn watched<T: Send + 'static>(
    budget: Duration,
    review: impl FnOnce() -> T + Send + 'static,
) -> Result<T, ReviewFailure> {
    match tokio::time::timeout(budget, tokio::task::spawn_blocking(review)).await {
        Ok(Ok(done)) => Ok(done),
        Ok(Err(error)) => Err(ReviewFailure::Trap(format!("review task failed: {error}"))),
        Err(_) => {
            tracing::error!(
                budget_ms = budget.as_millis(),
                "the chain overran its modules' deadlines; failing the review closed"
            );
            Err(ReviewFailure::Deadline(budget))
        }
    }
}

/// Waits until `settled` holds, looking every `poll`, at most `limit`.
async fn settle(settled: impl Fn() -> bool, limit: Duration, poll: Duration) {
    let deadline = Instant::now() + limit;
    while !settled() && Instant::now() < deadline {
        tokio::time::sleep(poll).await;
    }
}

/// A request id as a registry key: `7` and `"7"` stay apart.
fn request_id_text(id: &rmcp::model::RequestId) -> String {
    serde_json::to_string(id).unwrap_or_default()
}

impl ElicitationHandler for Router {
    fn elicit(
        self: Arc<Self>,
        elicitation: IncomingElicitation,
    ) -> BoxFuture<'static, Result<ElicitResult, ErrorData>> {
        Box::pin(async move { self.route(elicitation).await })
    }

    fn completed(&self, server: &str, elicitation_id: &str) {
        tracing::info!(
            server,
            elicitation_id,
            "URL elicitation completed by the server"
        );
        self.person.completed(server, elicitation_id);
    }

    /// What a connection refused before routing (an unsolicited request) is
    /// audited beside what the router decides: decided by `policy`, the
    /// error it was answered with as the answer. With `audit_sync =
    /// "always"` the write runs on a blocking thread, as the router's own.
    fn refused(&self, refused: Refused) {
        let record = AuditRecord {
            person: None,
            time: now_rfc3339(),
            server: refused.server.clone(),
            request_id: serde_json::to_value(&refused.request_id).unwrap_or(Value::Null),
            session: None,
            turn: None,
            instance: None,
            client: None,
            mode: refused.mode,
            decided_by: DecidedBy::Policy,
            reason: refused.reason.to_owned(),
            steps: Vec::new(),
            answer: serde_json::json!({"error": {"code": refused.error.code.0, "message": refused.error.message}}),
            latency_us: u64::try_from(refused.latency.as_micros()).unwrap_or(u64::MAX),
        };
        let log = self.audit.clone();
        let server = refused.server;
        let metrics = self.metrics.clone();
        let write = move || {
            let writing = Instant::now();
            let written = log.write(&record);
            crate::telemetry::record_audit_write(&metrics, written.is_ok(), writing.elapsed());
            crate::telemetry::record_decision(&metrics, &record, false);
            if let Err(error) = written {
                tracing::error!(server = %Escaped(&server), "{error}");
            }
        };
        if self.audit.sync_mode() == gatehouse_audit::AuditSync::Always {
            tokio::task::spawn_blocking(write);
        } else {
            write();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The report of a chain the watchdog gave up on: no step finished.
    fn failed_chain(failure: ReviewFailure) -> ChainReport {
        ChainReport {
            steps: Vec::new(),
            verdict: Verdict::Failed { step: 0, failure },
        }
    }

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
        .await
        .unwrap_or_else(failed_chain);
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
        assert!(policy::failure_reason(&report).starts_with("no module finished (deadline)"));
        // The audit line carries the code as data, not only in the reason.
        let steps = policy::audit_steps(&report);
        assert_eq!(steps.len(), 1);
        assert_eq!(steps[0].module, ROUTER_STEP);
        assert_eq!(steps[0].failure.as_deref(), Some("deadline"));
    }

    /// An operator's status reads the chain in force while a reload swaps
    /// it: it never sees the first chain in force without the time it was
    /// swapped in (such a read would show the console a kit passed with no
    /// swap time).
    #[test]
    fn the_chain_in_force_is_never_read_half_swapped() {
        for _ in 0..2_000 {
            let router = Arc::new(
                Router::new(
                    Chain::default(),
                    ElicitationSettings::default(),
                    Arc::new(AuditLog::in_memory()),
                    Arc::new(NoPerson),
                    4,
                )
                .loading_first_chain(),
            );
            let reader = {
                let router = router.clone();
                std::thread::spawn(move || {
                    loop {
                        let in_force = router.in_force();
                        if in_force.loaded {
                            return in_force.swapped_at;
                        }
                        assert!(in_force.swapped_at.is_none(), "{in_force:?}");
                    }
                })
            };
            router.swap_chain(Chain::default());
            let seen = reader.join().expect("the reader");
            assert!(seen.is_some(), "a chain in force with no swap time");
        }
    }

    #[tokio::test]
    async fn a_chain_within_its_budget_is_not_touched() {
        let report = watched(Duration::from_secs(5), || ChainReport {
            steps: Vec::new(),
            verdict: Verdict::Deferred,
        })
        .await
        .unwrap_or_else(failed_chain);
        assert!(matches!(report.verdict, Verdict::Deferred));
    }
}
