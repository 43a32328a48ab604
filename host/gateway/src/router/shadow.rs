//! Shadow reviews (`mode = "shadow"`): each shadow module reviews, alone, every
//! elicitation the chain reviews, on a blocking thread of its own started
//! beside the chain, under its own limits. It never decides, and the answer
//! never waits for it: once the decision's line is written and the shadow
//! reviews are done, one shadow line ([`gatehouse_audit::shadow`]) records
//! each module's verdict beside what the chain came to. When as many shadow
//! reviews run as live ones may, the next is skipped (recorded as
//! [`SKIPPED`](gatehouse_audit::shadow::SKIPPED)), never queued.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use gatehouse_audit::shadow::{SKIPPED, ShadowRecord};
use gatehouse_audit::{AuditLog, AuditStep, DecidedBy};
use gatehouse_core::chain::{Chain, ChainLink};
use gatehouse_core::request::ReviewRequest;
use serde_json::Value;

/// The shadow reviews of one elicitation: none, or started.
#[derive(Default)]
pub(super) struct Slot(Mutex<Option<Reviews>>);

/// Shadow reviews under way, or their steps when they could not run.
pub(super) enum Reviews {
    /// On a blocking thread.
    Running(tokio::task::JoinHandle<Vec<AuditStep>>),
    /// Skipped: every shadow review slot was busy.
    Skipped(Vec<AuditStep>),
}

/// What the shadow verdicts are compared with.
pub(super) struct Compared {
    pub(super) server: String,
    pub(super) request_id: Value,
    pub(super) mode: String,
    pub(super) decided_by: DecidedBy,
    pub(super) live: String,
    pub(super) action: String,
}

impl Slot {
    /// Starts the shadow modules of `chain` on `request` (nothing when it
    /// has none, or when they were started already for this elicitation).
    pub(super) fn start(
        &self,
        chain: &Arc<Chain>,
        request: &Arc<ReviewRequest>,
        permits: &Arc<tokio::sync::Semaphore>,
    ) {
        if chain.shadow().is_empty() {
            return;
        }
        let Ok(mut slot) = self.0.lock() else {
            return;
        };
        if slot.is_some() {
            return;
        }
        let Ok(permit) = permits.clone().try_acquire_owned() else {
            tracing::debug!("every shadow review slot is busy; this elicitation's are skipped");
            *slot = Some(Reviews::Skipped(
                chain.shadow().iter().map(skipped).collect(),
            ));
            return;
        };
        let chain = chain.clone();
        let request = request.clone();
        // Their review spans are under a span of their own, a child of the
        // elicitation's that may end after it (the answer never waits).
        let span = crate::trace::shadow_reviews();
        *slot = Some(Reviews::Running(tokio::task::spawn_blocking(move || {
            let _in = span.enter();
            let _permit = permit;
            chain
                .shadow()
                .iter()
                .map(|link| {
                    let report = Chain::new(vec![link.clone()]).review(&request);
                    report
                        .steps
                        .first()
                        .map_or_else(|| skipped(link), AuditStep::from)
                })
                .collect()
        })));
    }

    /// The reviews started, if any.
    pub(super) fn take(&self) -> Option<Reviews> {
        self.0.lock().ok().and_then(|mut slot| slot.take())
    }
}

/// A shadow module's step when it did not run.
fn skipped(link: &ChainLink) -> AuditStep {
    AuditStep {
        module: link.module.name().to_owned(),
        sha256: link.module.digest().to_owned(),
        signed_by: link.module.signer().map(str::to_owned),
        outcome: SKIPPED.to_owned(),
        failure: Some("busy".to_owned()),
        rationale: Some("every shadow review slot was busy; shadow reviews never wait".to_owned()),
        risk: None,
        latency_us: 0,
        model_calls: Vec::new(),
    }
}

/// Writes the shadow line once `reviews` are done, off the answer's path;
/// `pending` counts it until it is written.
pub(super) fn write_later(
    reviews: Reviews,
    compared: Compared,
    audit: Arc<AuditLog>,
    pending: Arc<AtomicUsize>,
) {
    pending.fetch_add(1, Ordering::SeqCst);
    let guard = Pending(pending);
    tokio::spawn(async move {
        let _guard = guard;
        let steps = match reviews {
            Reviews::Skipped(steps) => steps,
            Reviews::Running(handle) => match handle.await {
                Ok(steps) => steps,
                Err(error) => {
                    tracing::error!("a shadow review task failed: {error}");
                    return;
                }
            },
        };
        let record = ShadowRecord::new(
            &compared.server,
            compared.request_id,
            &compared.mode,
            compared.decided_by,
            compared.live,
            &compared.action,
            steps,
        );
        let written = tokio::task::spawn_blocking(move || audit.write_shadow(&record)).await;
        match written {
            Ok(Ok(())) => {}
            Ok(Err(error)) => tracing::error!("the shadow line was not written: {error}"),
            Err(error) => tracing::error!("the shadow line's write task failed: {error}"),
        }
    });
}

/// Counts a shadow line not written yet while alive.
struct Pending(Arc<AtomicUsize>);

impl Drop for Pending {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}
