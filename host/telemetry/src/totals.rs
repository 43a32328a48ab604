//! The totals a long-running process serves for every instance on a
//! config: each instance sends its cumulative [`Snapshot`] now and then;
//! [`Totals`] keeps the latest per instance and, when an instance ends,
//! keeps its counters and histograms (its gauges leave with it). So a total
//! never goes down when an instance ends, and resending a snapshot never
//! counts anything twice.

use std::collections::{HashMap, VecDeque};

use crate::families::{INSTANCES, Kind};
use crate::series::{Levels, Snapshot};

/// How many ended instances are kept by name (so one that comes back, as
/// after a broken connection, replaces its own numbers) before the oldest
/// is folded into the sum of those that ended.
pub const ENDED_KEPT: usize = 1024;

/// Every instance's numbers.
///
/// ```
/// use gatehouse_telemetry::families::ELICITATIONS;
/// use gatehouse_telemetry::series::{Metrics, Value};
/// use gatehouse_telemetry::totals::Totals;
///
/// let a = Metrics::default();
/// a.count(&ELICITATIONS, &["git", "form", "guest", "accept"], 2);
/// let mut totals = Totals::default();
/// totals.update("a", a.snapshot());
/// totals.update("a", a.snapshot()); // the same numbers again: no change
/// totals.ended("a");
/// let labels = ["git", "form", "guest", "accept"];
/// assert_eq!(totals.sum().get(&ELICITATIONS, &labels), Some(&Value::Counter(2)));
/// ```
#[derive(Debug, Default)]
pub struct Totals {
    live: HashMap<String, Snapshot>,
    ended: HashMap<String, Snapshot>,
    ended_order: VecDeque<String>,
    folded: Snapshot,
}

impl Totals {
    /// `instance`'s cumulative numbers now (checked: see
    /// [`Snapshot::checked`]).
    pub fn update(&mut self, instance: &str, snapshot: Snapshot) {
        if self.ended.remove(instance).is_some() {
            self.ended_order.retain(|name| name != instance);
        }
        self.live.insert(instance.to_owned(), snapshot.checked());
    }

    /// `instance` ended: its counters and histograms stay in the totals.
    pub fn ended(&mut self, instance: &str) {
        let Some(last) = self.live.remove(instance) else {
            return;
        };
        let mut kept = Snapshot::default();
        kept.add_all(&last, |kind| kind != Kind::Gauge);
        self.ended.insert(instance.to_owned(), kept);
        self.ended_order.push_back(instance.to_owned());
        while self.ended_order.len() > ENDED_KEPT {
            if let Some(oldest) = self.ended_order.pop_front()
                && let Some(numbers) = self.ended.remove(&oldest)
            {
                self.folded.add_all(&numbers, |_| true);
            }
        }
    }

    /// Instances reporting now.
    pub fn live(&self) -> usize {
        self.live.len()
    }

    /// The sum over every instance, live or ended, with
    /// `gatehouse_instances` set to the live ones.
    pub fn sum(&self) -> Snapshot {
        let mut sum = self.folded.clone();
        for numbers in self.ended.values().chain(self.live.values()) {
            sum.add_all(numbers, |_| true);
        }
        let mut levels = Levels::default();
        levels.set(
            &INSTANCES,
            &[],
            i64::try_from(self.live.len()).unwrap_or(i64::MAX),
        );
        levels.into_snapshot(sum)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::families::{BACKENDS, ELICITATIONS};
    use crate::series::{Levels, Metrics, Value};

    const LABELS: [&str; 4] = ["git", "form", "guest", "accept"];

    fn with_backend(metrics: &Metrics) -> Snapshot {
        let mut levels = Levels::default();
        levels.set(&BACKENDS, &["git", "connected"], 1);
        levels.into_snapshot(metrics.snapshot())
    }

    #[test]
    fn two_instances_add_up_and_an_ended_ones_counts_stay_but_not_its_gauges() {
        let (a, b) = (Metrics::default(), Metrics::default());
        let mut totals = Totals::default();
        a.count(&ELICITATIONS, &LABELS, 3);
        b.count(&ELICITATIONS, &LABELS, 4);
        totals.update("a", with_backend(&a));
        totals.update("b", with_backend(&b));
        let sum = totals.sum();
        assert_eq!(sum.get(&ELICITATIONS, &LABELS), Some(&Value::Counter(7)));
        assert_eq!(
            sum.get(&BACKENDS, &["git", "connected"]),
            Some(&Value::Gauge(2))
        );
        assert_eq!(sum.get(&INSTANCES, &[]), Some(&Value::Gauge(2)));
        // Each instance says `gatehouse_instances 1` of itself; the sum
        // counts the live ones, never adds theirs to that.
        let mut one = Levels::default();
        one.set(&INSTANCES, &[], 1);
        totals.update("b", one.into_snapshot(with_backend(&b)));
        assert_eq!(totals.sum().get(&INSTANCES, &[]), Some(&Value::Gauge(2)));

        a.count(&ELICITATIONS, &LABELS, 1);
        totals.update("a", with_backend(&a));
        totals.ended("a");
        let sum = totals.sum();
        assert_eq!(sum.get(&ELICITATIONS, &LABELS), Some(&Value::Counter(8)));
        assert_eq!(
            sum.get(&BACKENDS, &["git", "connected"]),
            Some(&Value::Gauge(1))
        );
        assert_eq!(sum.get(&INSTANCES, &[]), Some(&Value::Gauge(1)));

        // "a" comes back (a broken connection) with its cumulative numbers:
        // they replace its ended ones, never add to them.
        totals.update("a", with_backend(&a));
        assert_eq!(
            totals.sum().get(&ELICITATIONS, &LABELS),
            Some(&Value::Counter(8))
        );
    }

    #[test]
    fn ended_instances_past_the_bound_are_folded_without_losing_a_count() {
        let mut totals = Totals::default();
        for instance in 0..(ENDED_KEPT + 10) {
            let metrics = Metrics::default();
            metrics.count(&ELICITATIONS, &LABELS, 1);
            let name = instance.to_string();
            totals.update(&name, metrics.snapshot());
            totals.ended(&name);
        }
        assert_eq!(totals.ended.len(), ENDED_KEPT);
        let expected = u64::try_from(ENDED_KEPT + 10).unwrap();
        assert_eq!(
            totals.sum().get(&ELICITATIONS, &LABELS),
            Some(&Value::Counter(expected))
        );
    }
}
