//! The run itself: a warm-up phase, then the measured window, each on fresh
//! scoped worker threads; every latency recorded into a per-worker buffer
//! sized from the warm-up rate and paged in before the window opens.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use super::hook::{HookFailure, ProcessHook};
use super::memory;
use super::report::{MemoryReport, RunReport, Runner};
use super::stats::{LatencySummary, OutcomeKind, Outcomes};
use super::{Bench, BenchError};
use gatehouse_core::chain::{Chain, Verdict};
use gatehouse_core::outcome::Outcome;
use gatehouse_core::request::ReviewRequest;

/// The most latencies a worker's buffer holds before growing (32 MiB).
const MAX_PREALLOCATED: usize = 1 << 22;

/// How one review ended, for the tally.
pub(super) enum Reviewed {
    /// An outcome (or a chain that deferred).
    Done(OutcomeKind),
    /// No usable outcome.
    Failed {
        /// The stable failure code.
        code: &'static str,
        /// What happened.
        detail: String,
    },
}

/// One worker's way of reviewing.
pub(super) trait Worker: Send {
    fn review(&mut self, request: &ReviewRequest) -> Reviewed;
}

/// Reviews through a chain: [`Chain::review`], as production does.
#[derive(Debug, Clone, Copy)]
pub(super) struct ChainWorker<'a>(pub &'a Chain);

impl Worker for ChainWorker<'_> {
    fn review(&mut self, request: &ReviewRequest) -> Reviewed {
        let report = self.0.review(request);
        match report.verdict {
            Verdict::Decided { outcome, .. } => Reviewed::Done(OutcomeKind::of(&outcome.decision)),
            Verdict::Deferred => Reviewed::Done(OutcomeKind::Defer),
            Verdict::Failed { step, failure } => Reviewed::Failed {
                code: failure.code(),
                detail: match report.steps.get(step) {
                    Some(module) => format!("module `{}`: {failure}", module.module),
                    None => failure.to_string(),
                },
            },
        }
    }
}

/// Decides through a process hook, on the worker's own single-threaded
/// runtime (which drives the pipes and the timeout).
pub(super) struct HookWorker<'a> {
    hook: &'a ProcessHook,
    runtime: tokio::runtime::Runtime,
}

impl<'a> HookWorker<'a> {
    pub(super) fn new(hook: &'a ProcessHook) -> std::io::Result<Self> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        Ok(HookWorker { hook, runtime })
    }

    pub(super) fn decide(&mut self, request: &ReviewRequest) -> Result<Outcome, HookFailure> {
        self.runtime.block_on(self.hook.decide(request))
    }
}

impl Worker for HookWorker<'_> {
    fn review(&mut self, request: &ReviewRequest) -> Reviewed {
        match self.decide(request) {
            Ok(outcome) => Reviewed::Done(OutcomeKind::of(&outcome.decision)),
            Err(failure) => Reviewed::Failed {
                code: failure.code(),
                detail: failure.to_string(),
            },
        }
    }
}

/// What one worker did in one phase.
struct Tally {
    latencies: Vec<u64>,
    reviews: u64,
    outcomes: Outcomes,
    failures: BTreeMap<&'static str, u64>,
    first_failure: Option<String>,
    finished: Instant,
}

impl Tally {
    fn count(&mut self, reviewed: Reviewed, nanos: u64, record: bool) {
        self.reviews += 1;
        if !record {
            return;
        }
        self.latencies.push(nanos);
        match reviewed {
            Reviewed::Done(kind) => self.outcomes.record(kind),
            Reviewed::Failed { code, detail } => {
                self.outcomes.record(OutcomeKind::Failed);
                *self.failures.entry(code).or_default() += 1;
                if self.first_failure.is_none() {
                    tracing::warn!(
                        code,
                        "bench: a review failed: {}",
                        gatehouse_core::escape::Escaped(&detail)
                    );
                    self.first_failure = Some(detail);
                }
            }
        }
    }
}

/// Runs every worker on its own thread until `end`; worker `i` cycles
/// through the requests from request `i`. Reviews that start before `end`
/// finish and are counted. With `record`, latencies and outcomes are kept.
fn phase<W: Worker>(
    workers: Vec<(W, Vec<u64>)>,
    requests: &[ReviewRequest],
    end: Instant,
    record: bool,
) -> Result<Vec<(W, Tally)>, BenchError> {
    std::thread::scope(|scope| {
        let mut handles = Vec::with_capacity(workers.len());
        for (index, (mut worker, latencies)) in workers.into_iter().enumerate() {
            let handle = std::thread::Builder::new()
                .name(format!("bench-{index}"))
                .spawn_scoped(scope, move || {
                    let mut tally = Tally {
                        latencies,
                        reviews: 0,
                        outcomes: Outcomes::default(),
                        failures: BTreeMap::new(),
                        first_failure: None,
                        finished: Instant::now(),
                    };
                    let mut next = index;
                    loop {
                        let began = Instant::now();
                        if began >= end {
                            break;
                        }
                        let request = &requests[next % requests.len()];
                        next = next.wrapping_add(1);
                        let reviewed = worker.review(request);
                        let nanos = u64::try_from(began.elapsed().as_nanos()).unwrap_or(u64::MAX);
                        tally.count(reviewed, nanos, record);
                    }
                    tally.finished = Instant::now();
                    (worker, tally)
                })
                .map_err(BenchError::Worker)?;
            handles.push(handle);
        }
        handles
            .into_iter()
            .map(|handle| handle.join().map_err(|_| BenchError::WorkerPanicked))
            .collect()
    })
}

/// A latency buffer for the window, sized from the worker's warm-up rate and
/// written once so its pages are resident before the window opens (they then
/// count in the idle RSS, not in the reviews' memory).
fn latency_buffer(warmup_reviews: u64, warmup: Duration, window: Duration) -> Vec<u64> {
    let rate = warmup_reviews as f64 / warmup.as_secs_f64().max(1e-3);
    let expected = rate * window.as_secs_f64() * 1.25 + 1024.0;
    let capacity = if expected.is_finite() {
        (expected as usize).min(MAX_PREALLOCATED)
    } else {
        MAX_PREALLOCATED
    };
    let mut buffer = Vec::with_capacity(capacity);
    // Written, not zero-allocated: calloc'd pages would only be mapped.
    buffer
        .spare_capacity_mut()
        .fill(std::mem::MaybeUninit::new(0));
    std::hint::black_box(&mut buffer);
    buffer
}

/// Warm-up (first one worker, then all of them, which also gives the
/// memory estimate), then the measured window, then the report.
pub(super) fn run<W: Worker>(
    bench: &Bench,
    runner: Runner,
    command: Option<String>,
    workers: Vec<W>,
) -> Result<RunReport, BenchError> {
    let requests = bench.requests();
    let warmup = bench.warmup_duration();
    let window = bench.measured_duration();
    let concurrency = workers.len();
    tracing::info!(
        runner = runner.name(),
        concurrency,
        ?warmup,
        ?window,
        "bench: warming up"
    );

    // One worker, then all: the peak RSS difference is what the other
    // reviews in flight hold, one-time costs (code paged in, first
    // instantiation) excluded.
    let peak_reset = memory::reset_peak_rss();
    let mut workers = workers.into_iter();
    let mut alone = match workers.next() {
        Some(first) => phase(
            vec![(first, Vec::new())],
            requests,
            Instant::now() + warmup / 2,
            false,
        )?,
        None => return Err(BenchError::NoWorkers),
    };
    let peak_alone = memory::peak_rss();
    let mut warmup_reviews: u64 = alone.iter().map(|(_, tally)| tally.reviews).sum();
    let together = alone
        .pop()
        .map(|(first, _)| first)
        .into_iter()
        .chain(workers)
        .map(|worker| (worker, Vec::new()))
        .collect();
    let started = Instant::now();
    let warmed = phase(together, requests, started + warmup / 2, false)?;
    let warm_time = started.elapsed();
    let peak_together = memory::peak_rss();
    let marginal = match (peak_reset, peak_alone, peak_together) {
        (true, Some(alone), Some(together)) if concurrency > 1 => {
            Some(together.saturating_sub(alone) / (concurrency as u64 - 1))
        }
        _ => None,
    };
    warmup_reviews += warmed.iter().map(|(_, tally)| tally.reviews).sum::<u64>();
    let ready: Vec<(W, Vec<u64>)> = warmed
        .into_iter()
        .map(|(worker, tally)| (worker, latency_buffer(tally.reviews, warm_time, window)))
        .collect();

    let peak_covers_run = memory::reset_peak_rss();
    let rss_before = memory::current_rss();
    tracing::info!(runner = runner.name(), "bench: measuring");
    let start = Instant::now();
    let measured = phase(ready, requests, start + window, true)?;
    let peak_rss = memory::peak_rss();

    let mut outcomes = Outcomes::default();
    let mut failures = BTreeMap::<String, u64>::new();
    let mut first_failure = None;
    let mut finished = start;
    let mut latencies = Vec::with_capacity(
        measured
            .iter()
            .map(|(_, tally)| tally.latencies.len())
            .sum(),
    );
    for (_, tally) in measured {
        outcomes.merge(&tally.outcomes);
        for (code, count) in tally.failures {
            *failures.entry(code.to_owned()).or_default() += count;
        }
        first_failure = first_failure.or(tally.first_failure);
        finished = finished.max(tally.finished);
        latencies.extend_from_slice(&tally.latencies);
    }
    let reviews = outcomes.total();
    let wall = finished.duration_since(start);
    let memory = MemoryReport {
        rss_before,
        peak_rss,
        peak_covers_run,
        hook_peak_rss: None,
        per_review_in_flight: marginal,
    };
    let report = RunReport {
        runner,
        command,
        concurrency,
        reviews,
        wall,
        reviews_per_sec: if wall.is_zero() {
            0.0
        } else {
            reviews as f64 / wall.as_secs_f64()
        },
        warmup,
        warmup_reviews,
        latency: LatencySummary::from_nanos(&mut latencies),
        outcomes,
        failures,
        first_failure,
        memory,
    };
    tracing::info!(
        runner = runner.name(),
        reviews,
        failed = report.outcomes.failed,
        reviews_per_sec = report.reviews_per_sec,
        "bench: done"
    );
    Ok(report)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU64, Ordering};

    use super::*;
    use gatehouse_core::context::ReviewContext;
    use gatehouse_core::elicitation::RequestId;

    /// Answers by request id: odd ids accept, even ids fail.
    #[derive(Clone)]
    struct Scripted(Arc<AtomicU64>);

    impl Worker for Scripted {
        fn review(&mut self, request: &ReviewRequest) -> Reviewed {
            self.0.fetch_add(1, Ordering::Relaxed);
            std::thread::sleep(Duration::from_micros(200));
            match request.context().request_id {
                RequestId::Number(id) if id % 2 == 1 => Reviewed::Done(OutcomeKind::Accept),
                _ => Reviewed::Failed {
                    code: "trap",
                    detail: "scripted failure".to_owned(),
                },
            }
        }
    }

    #[test]
    fn every_review_is_counted_and_failures_are_shown() {
        let mut requests = super::super::sample_requests(&ReviewContext::default()).unwrap();
        let mut context = requests[0].context().clone();
        context.request_id = RequestId::Number(2);
        requests.push(ReviewRequest::new(requests[0].params().clone(), context));
        let calls = Arc::new(AtomicU64::new(0));
        let bench = Bench::new(requests)
            .concurrency(2)
            .duration(Duration::from_millis(100))
            .warmup(Duration::from_millis(20));
        let report = run(
            &bench,
            Runner::Gatehouse,
            None,
            vec![Scripted(calls.clone()); 2],
        )
        .unwrap();
        assert!(report.reviews > 0);
        assert_eq!(
            report.reviews + report.warmup_reviews,
            calls.load(Ordering::Relaxed)
        );
        assert_eq!(
            report.latency.map(|latency| latency.count as u64),
            Some(report.reviews)
        );
        assert_eq!(
            report.outcomes.accept + report.outcomes.failed,
            report.reviews
        );
        assert!(report.outcomes.accept > 0 && report.outcomes.failed > 0);
        assert_eq!(report.failures.get("trap"), Some(&report.outcomes.failed));
        assert_eq!(report.first_failure.as_deref(), Some("scripted failure"));
        let latency = report.latency.unwrap();
        assert!(latency.min >= Duration::from_micros(200));
        assert!(latency.p50 <= latency.p99 && latency.p99 <= latency.max);
        assert!(report.wall >= Duration::from_millis(100));
    }

    #[test]
    fn latency_buffers_are_sized_from_the_warm_up() {
        let buffer = latency_buffer(1_000, Duration::from_millis(100), Duration::from_secs(1));
        assert!(buffer.is_empty());
        assert_eq!(buffer.capacity(), 12_500 + 1024);
        let buffer = latency_buffer(u64::MAX, Duration::ZERO, Duration::from_secs(3600));
        assert_eq!(buffer.capacity(), MAX_PREALLOCATED);
    }
}
