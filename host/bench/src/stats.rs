//! The numbers of a run: latency percentiles (nearest rank) and outcome
//! counts by kind.

use std::time::Duration;

use serde::Serialize;

use gatehouse_core::outcome::Decision;

/// The nearest-rank percentile ([`gatehouse_base::percentile`], the one
/// definition `gatehouse audit --stats` reports too).
pub use gatehouse_base::percentile::percentile;

/// Latencies of a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct LatencySummary {
    /// Samples.
    pub count: usize,
    /// The fastest.
    #[serde(rename = "min_us", serialize_with = "micros")]
    pub min: Duration,
    /// The arithmetic mean.
    #[serde(rename = "mean_us", serialize_with = "micros")]
    pub mean: Duration,
    /// The median.
    #[serde(rename = "p50_us", serialize_with = "micros")]
    pub p50: Duration,
    /// The 90th percentile.
    #[serde(rename = "p90_us", serialize_with = "micros")]
    pub p90: Duration,
    /// The 99th percentile.
    #[serde(rename = "p99_us", serialize_with = "micros")]
    pub p99: Duration,
    /// The slowest.
    #[serde(rename = "max_us", serialize_with = "micros")]
    pub max: Duration,
}

fn micros<S: serde::Serializer>(duration: &Duration, serializer: S) -> Result<S::Ok, S::Error> {
    serializer.serialize_f64(duration.as_secs_f64() * 1e6)
}

impl LatencySummary {
    /// Summarizes latencies in nanoseconds, sorting them in place; `None`
    /// for no samples.
    ///
    /// ```
    /// use std::time::Duration;
    /// use gatehouse_bench::LatencySummary;
    /// let mut samples = vec![3_000, 1_000, 2_000];
    /// let summary = LatencySummary::from_nanos(&mut samples).unwrap();
    /// assert_eq!(summary.p50, Duration::from_micros(2));
    /// assert_eq!(summary.max, Duration::from_micros(3));
    /// ```
    pub fn from_nanos(samples: &mut [u64]) -> Option<LatencySummary> {
        samples.sort_unstable();
        let at = |percent| percentile(samples, percent).map(Duration::from_nanos);
        let count = samples.len();
        let sum: u128 = samples.iter().map(|&nanos| u128::from(nanos)).sum();
        let mean = u64::try_from(sum / (count.max(1) as u128)).unwrap_or(u64::MAX);
        Some(LatencySummary {
            count,
            min: at(0)?,
            mean: Duration::from_nanos(mean),
            p50: at(50)?,
            p90: at(90)?,
            p99: at(99)?,
            max: at(100)?,
        })
    }
}

/// How one review ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum OutcomeKind {
    /// Accepted.
    Accept,
    /// Declined.
    Decline,
    /// Cancelled.
    Cancel,
    /// Deferred (to the next module, then the person).
    Defer,
    /// Failed: no usable outcome (in production, a fail-closed decline).
    Failed,
}

impl OutcomeKind {
    /// Every kind, in report order.
    pub const ALL: [OutcomeKind; 5] = [
        OutcomeKind::Accept,
        OutcomeKind::Decline,
        OutcomeKind::Cancel,
        OutcomeKind::Defer,
        OutcomeKind::Failed,
    ];

    /// The kind of a decision.
    pub fn of(decision: &Decision) -> OutcomeKind {
        match decision {
            Decision::Accept { .. } => OutcomeKind::Accept,
            Decision::Decline { .. } => OutcomeKind::Decline,
            Decision::Cancel => OutcomeKind::Cancel,
            Decision::Defer => OutcomeKind::Defer,
        }
    }

    /// `accept`, `decline`, `cancel`, `defer` or `failed`.
    pub fn name(self) -> &'static str {
        match self {
            OutcomeKind::Accept => "accept",
            OutcomeKind::Decline => "decline",
            OutcomeKind::Cancel => "cancel",
            OutcomeKind::Defer => "defer",
            OutcomeKind::Failed => "failed",
        }
    }
}

/// Reviews by how they ended.
///
/// ```
/// use gatehouse_bench::{OutcomeKind, Outcomes};
/// let mut outcomes = Outcomes::default();
/// outcomes.record(OutcomeKind::Decline);
/// outcomes.record(OutcomeKind::Failed);
/// assert_eq!((outcomes.total(), outcomes.failed), (2, 1));
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Outcomes {
    /// Accepted.
    pub accept: u64,
    /// Declined.
    pub decline: u64,
    /// Cancelled.
    pub cancel: u64,
    /// Deferred.
    pub defer: u64,
    /// Failed.
    pub failed: u64,
}

impl Outcomes {
    /// Counts one review.
    pub fn record(&mut self, kind: OutcomeKind) {
        *self.slot(kind) += 1;
    }

    /// The count of one kind.
    pub fn get(&self, kind: OutcomeKind) -> u64 {
        match kind {
            OutcomeKind::Accept => self.accept,
            OutcomeKind::Decline => self.decline,
            OutcomeKind::Cancel => self.cancel,
            OutcomeKind::Defer => self.defer,
            OutcomeKind::Failed => self.failed,
        }
    }

    /// All reviews.
    pub fn total(&self) -> u64 {
        OutcomeKind::ALL.iter().map(|&kind| self.get(kind)).sum()
    }

    /// Adds another tally.
    pub fn merge(&mut self, other: &Outcomes) {
        for kind in OutcomeKind::ALL {
            *self.slot(kind) += other.get(kind);
        }
    }

    fn slot(&mut self, kind: OutcomeKind) -> &mut u64 {
        match kind {
            OutcomeKind::Accept => &mut self.accept,
            OutcomeKind::Decline => &mut self.decline,
            OutcomeKind::Cancel => &mut self.cancel,
            OutcomeKind::Defer => &mut self.defer,
            OutcomeKind::Failed => &mut self.failed,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_of_a_known_distribution() {
        // 1..=1000 µs, shuffled deterministically.
        let mut samples: Vec<u64> = (1..=1000u64)
            .map(|i| (i * 7919 % 1000 + 1) * 1000)
            .collect();
        let summary = LatencySummary::from_nanos(&mut samples).unwrap();
        assert_eq!(summary.count, 1000);
        assert_eq!(summary.min, Duration::from_micros(1));
        assert_eq!(summary.p50, Duration::from_micros(500));
        assert_eq!(summary.p90, Duration::from_micros(900));
        assert_eq!(summary.p99, Duration::from_micros(990));
        assert_eq!(summary.max, Duration::from_micros(1000));
        assert_eq!(summary.mean, Duration::from_nanos(500_500));
    }

    #[test]
    fn p99_sees_the_slow_tail() {
        // 98 fast reviews and 2 slow ones: p99 is slow, p90 is not.
        let mut samples = vec![10u64; 98];
        samples.extend([5_000, 9_000]);
        let summary = LatencySummary::from_nanos(&mut samples).unwrap();
        assert_eq!(summary.p90, Duration::from_nanos(10));
        assert_eq!(summary.p99, Duration::from_nanos(5_000));
        assert_eq!(summary.max, Duration::from_nanos(9_000));
    }

    #[test]
    fn small_and_empty_inputs() {
        assert_eq!(LatencySummary::from_nanos(&mut []), None);
        let summary = LatencySummary::from_nanos(&mut [u64::MAX, u64::MAX]).unwrap();
        assert_eq!(summary.mean, Duration::from_nanos(u64::MAX));
    }

    #[test]
    fn outcomes_merge_and_total() {
        let mut a = Outcomes::default();
        a.record(OutcomeKind::Accept);
        a.record(OutcomeKind::Defer);
        let mut b = Outcomes::default();
        b.record(OutcomeKind::Failed);
        b.record(OutcomeKind::Accept);
        a.merge(&b);
        assert_eq!(
            a,
            Outcomes {
                accept: 2,
                decline: 0,
                cancel: 0,
                defer: 1,
                failed: 1
            }
        );
        assert_eq!(a.total(), 4);
    }
}
