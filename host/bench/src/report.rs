//! What a run measured, and how two runs compare.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Serialize;

use super::stats::{LatencySummary, Outcomes};

/// What did the reviews.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Runner {
    /// The chain in the sandbox, a fresh instance per review.
    Gatehouse,
    /// A process hook, one process per decision.
    ProcessHook,
}

impl Runner {
    /// `gatehouse` or `process-hook`.
    pub fn name(self) -> &'static str {
        match self {
            Runner::Gatehouse => "gatehouse",
            Runner::ProcessHook => "process-hook",
        }
    }

    /// A label for tables.
    pub fn label(self) -> &'static str {
        match self {
            Runner::Gatehouse => "gatehouse fresh instance",
            Runner::ProcessHook => "process hook",
        }
    }
}

/// Memory around a run, in bytes; `None` where the platform does not say
/// (readings come from Linux's `/proc/self/status` and `getrusage`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct MemoryReport {
    /// This process's RSS just before the measured window, with every worker
    /// idle (after the warm-up).
    #[serde(rename = "rss_before_bytes")]
    pub rss_before: Option<u64>,
    /// This process's peak RSS (`VmHWM`) at the end of the run.
    #[serde(rename = "peak_rss_bytes")]
    pub peak_rss: Option<u64>,
    /// Whether the peak was reset at the start of the measured window, so
    /// that [`peak_rss`](Self::peak_rss) covers the run only (otherwise it
    /// is the process's lifetime peak).
    pub peak_covers_run: bool,
    /// The peak RSS of the largest hook process (process-hook runs only),
    /// shared libraries included.
    #[serde(rename = "hook_peak_rss_bytes")]
    pub hook_peak_rss: Option<u64>,
    /// An estimate of the memory one more review in flight holds. For
    /// gatehouse: (peak RSS with every worker − peak RSS with one worker) /
    /// (concurrency − 1), measured in the warm-up, so one-time costs cancel
    /// out; `None` at concurrency 1 or when the peak cannot be reset. For a
    /// hook: one hook process's peak RSS.
    #[serde(rename = "per_review_in_flight_bytes")]
    pub per_review_in_flight: Option<u64>,
}

/// One run's results.
#[derive(Debug, Clone, Serialize)]
pub struct RunReport {
    /// What did the reviews.
    pub runner: Runner,
    /// The hook's command line (process-hook runs).
    pub command: Option<String>,
    /// Worker threads, each with one review in flight.
    pub concurrency: usize,
    /// Reviews started in the measured window (each one finished and
    /// counted, failures included).
    pub reviews: u64,
    /// From the start of the window until the last review finished.
    #[serde(rename = "wall_s", serialize_with = "seconds")]
    pub wall: Duration,
    /// `reviews` / `wall`.
    pub reviews_per_sec: f64,
    /// The warm-up before the window.
    #[serde(rename = "warmup_s", serialize_with = "seconds")]
    pub warmup: Duration,
    /// Reviews done in the warm-up (not counted anywhere else).
    pub warmup_reviews: u64,
    /// Latency of each review in the window; `None` if there was none.
    pub latency: Option<LatencySummary>,
    /// Reviews by how they ended.
    pub outcomes: Outcomes,
    /// Failed reviews by failure code.
    pub failures: BTreeMap<String, u64>,
    /// The first failure's message, if any failed.
    pub first_failure: Option<String>,
    /// Memory.
    pub memory: MemoryReport,
}

fn seconds<S: serde::Serializer>(duration: &Duration, serializer: S) -> Result<S::Ok, S::Error> {
    serializer.serialize_f64(duration.as_secs_f64())
}

/// One run against another (the baseline): ratios of `subject / baseline`.
///
/// ```
/// use gatehouse_bench::Comparison;
/// let comparison = Comparison::from_numbers(2_000.0, 50.0, 1_000.0, 40_000.0).unwrap();
/// assert_eq!(comparison.p50_ratio, 40.0);
/// assert_eq!(comparison.throughput_ratio, 0.025);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Comparison {
    /// The subject's p50 latency over the baseline's.
    pub p50_ratio: f64,
    /// The subject's reviews per second over the baseline's.
    pub throughput_ratio: f64,
}

impl Comparison {
    /// `subject` against `baseline`; `None` when either has no latency or a
    /// zero, which would make a ratio meaningless.
    pub fn between(subject: &RunReport, baseline: &RunReport) -> Option<Comparison> {
        let p50 = |run: &RunReport| run.latency.map(|latency| latency.p50.as_secs_f64());
        Comparison::from_numbers(
            p50(subject)?,
            p50(baseline)?,
            subject.reviews_per_sec,
            baseline.reviews_per_sec,
        )
    }

    /// From p50 latencies and throughputs (`subject` then `baseline`).
    pub fn from_numbers(
        subject_p50: f64,
        baseline_p50: f64,
        subject_throughput: f64,
        baseline_throughput: f64,
    ) -> Option<Comparison> {
        let usable = |value: f64| value.is_finite() && value > 0.0;
        if !(usable(subject_p50)
            && usable(baseline_p50)
            && usable(subject_throughput)
            && usable(baseline_throughput))
        {
            return None;
        }
        Some(Comparison {
            p50_ratio: subject_p50 / baseline_p50,
            throughput_ratio: subject_throughput / baseline_throughput,
        })
    }
}
