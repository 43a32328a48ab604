//! The series of one process ([`Metrics`]) and what it hands on: a
//! [`Snapshot`], the cumulative value of every series at one moment, which
//! the exposition renders and a long-running process sums across instances
//! ([`crate::totals`]).
//!
//! Bounds hold whatever a caller passes: a label value is made printable
//! (control and bidi characters escaped) and cut to [`MAX_LABEL_BYTES`];
//! a family holds at most [`MAX_SERIES_PER_FAMILY`] series, and what would
//! make more is counted under [`OVERFLOW`] in every label.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;

use serde::{Deserialize, Serialize};

use crate::families::{self, Family, Kind, LATENCY_BUCKETS};

/// The longest label value kept, in bytes.
pub const MAX_LABEL_BYTES: usize = 128;

/// The most series one family holds.
pub const MAX_SERIES_PER_FAMILY: usize = 1024;

/// The label value of what a full family counts together.
pub const OVERFLOW: &str = "_other";

/// One series' value.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Value {
    /// A counter's total.
    Counter(u64),
    /// A gauge's level.
    Gauge(i64),
    /// A histogram: the count in each of [`LATENCY_BUCKETS`] (not
    /// cumulative), the sum and the count of observations.
    Histogram {
        /// Observations per bucket, one entry per bucket.
        buckets: Vec<u64>,
        /// Their sum.
        sum: f64,
        /// How many.
        count: u64,
    },
}

impl Value {
    /// An empty value of `kind`.
    fn zero(kind: Kind) -> Value {
        match kind {
            Kind::Counter => Value::Counter(0),
            Kind::Gauge => Value::Gauge(0),
            Kind::Histogram => Value::Histogram {
                buckets: vec![0; LATENCY_BUCKETS.len()],
                sum: 0.0,
                count: 0,
            },
        }
    }

    /// Whether it is a well-formed value of `kind`.
    fn fits(&self, kind: Kind) -> bool {
        match (self, kind) {
            (Value::Counter(_), Kind::Counter) | (Value::Gauge(_), Kind::Gauge) => true,
            (Value::Histogram { buckets, sum, .. }, Kind::Histogram) => {
                buckets.len() == LATENCY_BUCKETS.len() && sum.is_finite() && *sum >= 0.0
            }
            _ => false,
        }
    }

    /// Adds `other` (of the same kind) to it, saturating.
    pub(crate) fn add(&mut self, other: &Value) {
        match (self, other) {
            (Value::Counter(total), Value::Counter(more)) => *total = total.saturating_add(*more),
            (Value::Gauge(level), Value::Gauge(more)) => *level = level.saturating_add(*more),
            (
                Value::Histogram {
                    buckets,
                    sum,
                    count,
                },
                Value::Histogram {
                    buckets: more_buckets,
                    sum: more_sum,
                    count: more_count,
                },
            ) => {
                for (bucket, more) in buckets.iter_mut().zip(more_buckets) {
                    *bucket = bucket.saturating_add(*more);
                }
                *sum += more_sum;
                *count = count.saturating_add(*more_count);
            }
            _ => {}
        }
    }
}

/// Every series of every family at one moment: family name → label
/// values → value. Families and series are kept sorted, so a rendering is
/// stable.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Snapshot {
    families: BTreeMap<String, SeriesMap>,
}

/// A family's series by label values; on the wire a list of
/// `[labels, value]` pairs (JSON keys are strings, label values are lists).
#[derive(Debug, Clone, Default, PartialEq)]
struct SeriesMap(BTreeMap<Vec<String>, Value>);

impl Serialize for SeriesMap {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(self.0.iter())
    }
}

impl<'de> Deserialize<'de> for SeriesMap {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let pairs = Vec::<(Vec<String>, Value)>::deserialize(deserializer)?;
        Ok(SeriesMap(pairs.into_iter().collect()))
    }
}

impl Snapshot {
    /// The series of `family`, by label values.
    pub fn series(&self, family: &Family) -> impl Iterator<Item = (&[String], &Value)> {
        self.families
            .get(family.name)
            .into_iter()
            .flat_map(|series| {
                series
                    .0
                    .iter()
                    .map(|(labels, value)| (labels.as_slice(), value))
            })
    }

    /// The value of `family` under `labels`, if it has one.
    pub fn get(&self, family: &Family, labels: &[&str]) -> Option<&Value> {
        let key: Vec<String> = labels.iter().map(|value| label_value(value)).collect();
        self.families.get(family.name)?.0.get(&key)
    }

    /// The snapshot with only what a known family could hold: unknown
    /// families, series with the wrong number of labels or the wrong kind of
    /// value dropped, labels bounded, at most [`MAX_SERIES_PER_FAMILY`]
    /// series each. What another process sent goes through this first.
    pub fn checked(self) -> Snapshot {
        let mut checked = Snapshot::default();
        for (name, series) in self.families {
            let Some(family) = families::by_name(&name) else {
                continue;
            };
            for (labels, value) in series.0 {
                if labels.len() != family.labels.len() || !value.fits(family.kind) {
                    continue;
                }
                let labels: Vec<&str> = labels.iter().map(String::as_str).collect();
                checked.add(family, &labels, &value);
            }
        }
        checked
    }

    /// Adds `value` to the series of `family` under `labels` (bounded).
    pub(crate) fn add(&mut self, family: &Family, labels: &[&str], value: &Value) {
        let series = self.families.entry(family.name.to_owned()).or_default();
        slot(&mut series.0, family, labels).add(value);
    }

    /// Adds every series of `other` to this one.
    pub(crate) fn add_all(&mut self, other: &Snapshot, keep: impl Fn(Kind) -> bool) {
        for (name, series) in &other.families {
            let Some(family) = families::by_name(name) else {
                continue;
            };
            if !keep(family.kind) {
                continue;
            }
            for (labels, value) in &series.0 {
                let labels: Vec<&str> = labels.iter().map(String::as_str).collect();
                self.add(family, &labels, value);
            }
        }
    }

    /// Puts every series of `other` in this one, replacing what it had.
    fn set_all(&mut self, other: &Snapshot) {
        for (name, series) in &other.families {
            let Some(family) = families::by_name(name) else {
                continue;
            };
            for (labels, value) in &series.0 {
                let labels: Vec<&str> = labels.iter().map(String::as_str).collect();
                let mine = self.families.entry(family.name.to_owned()).or_default();
                *slot(&mut mine.0, family, &labels) = value.clone();
            }
        }
    }

    /// Sets a gauge of `family` under `labels`.
    pub(crate) fn set_gauge(&mut self, family: &Family, labels: &[&str], level: i64) {
        let series = self.families.entry(family.name.to_owned()).or_default();
        *slot(&mut series.0, family, labels) = Value::Gauge(level);
    }
}

/// The series of `family` under `labels` in `series`, created empty if
/// there is room, else the overflow series.
fn slot<'a>(
    series: &'a mut BTreeMap<Vec<String>, Value>,
    family: &Family,
    labels: &[&str],
) -> &'a mut Value {
    let mut key: Vec<String> = family
        .labels
        .iter()
        .enumerate()
        .map(|(at, _)| label_value(labels.get(at).copied().unwrap_or("")))
        .collect();
    if !series.contains_key(&key) && series.len() >= MAX_SERIES_PER_FAMILY - 1 {
        key = vec![OVERFLOW.to_owned(); family.labels.len()];
    }
    series
        .entry(key)
        .or_insert_with(|| Value::zero(family.kind))
}

/// A label value as a series keeps it: printable, at most
/// [`MAX_LABEL_BYTES`].
pub fn label_value(value: &str) -> String {
    let mut kept = String::new();
    push_label_value(&mut kept, value);
    kept
}

/// The series of this process. Recording takes a short lock on its family
/// and, once a series exists, allocates nothing; share it behind an `Arc`.
///
/// ```
/// use gatehouse_telemetry::families::{ELICITATIONS, REVIEW_DURATION};
/// use gatehouse_telemetry::series::{Metrics, Value};
///
/// let metrics = Metrics::default();
/// metrics.count(&ELICITATIONS, &["git", "form", "guest", "accept"], 1);
/// metrics.observe(&REVIEW_DURATION, &["guardian"], 0.000_008);
/// let snapshot = metrics.snapshot();
/// assert_eq!(
///     snapshot.get(&ELICITATIONS, &["git", "form", "guest", "accept"]),
///     Some(&Value::Counter(1))
/// );
/// ```
#[derive(Debug)]
pub struct Metrics {
    /// Per family (in the order of [`families::ALL`]): its series by their
    /// label values joined with [`KEY_SEPARATOR`].
    families: Vec<Mutex<HashMap<String, Value>>>,
}

/// Joins a series' label values into one key: a control character, which
/// a label value (escaped) never holds.
const KEY_SEPARATOR: char = '\u{1f}';

impl Default for Metrics {
    fn default() -> Self {
        Metrics {
            families: families::ALL.iter().map(|_| Mutex::default()).collect(),
        }
    }
}

thread_local! {
    /// The key being looked up, reused so recording allocates nothing.
    static KEY: std::cell::RefCell<String> = const { std::cell::RefCell::new(String::new()) };
}

impl Metrics {
    /// Adds `by` to the counter `family` under `labels`.
    pub fn count(&self, family: &Family, labels: &[&str], by: u64) {
        debug_assert_eq!(family.kind, Kind::Counter, "{}", family.name);
        self.record(family, labels, |value| {
            if let Value::Counter(total) = value {
                *total = total.saturating_add(by);
            }
        });
    }

    /// Records one observation of `seconds` in the histogram `family`.
    pub fn observe(&self, family: &Family, labels: &[&str], seconds: f64) {
        debug_assert_eq!(family.kind, Kind::Histogram, "{}", family.name);
        let seconds = if seconds.is_finite() {
            seconds.max(0.0)
        } else {
            0.0
        };
        let at = LATENCY_BUCKETS
            .iter()
            .position(|bound| seconds <= *bound)
            .unwrap_or(LATENCY_BUCKETS.len() - 1);
        self.record(family, labels, |value| {
            if let Value::Histogram {
                buckets,
                sum,
                count,
            } = value
            {
                if let Some(bucket) = buckets.get_mut(at) {
                    *bucket = bucket.saturating_add(1);
                }
                *sum += seconds;
                *count = count.saturating_add(1);
            }
        });
    }

    /// Applies `change` to the series of `family` under `labels`, created
    /// empty if there is room, else to the overflow series.
    fn record(&self, family: &Family, labels: &[&str], change: impl FnOnce(&mut Value)) {
        let Some(series) = families::ALL
            .iter()
            .position(|known| std::ptr::eq(*known, family))
            .and_then(|at| self.families.get(at))
        else {
            return;
        };
        KEY.with(|key| {
            let Ok(mut key) = key.try_borrow_mut() else {
                return;
            };
            key.clear();
            for at in 0..family.labels.len() {
                if at > 0 {
                    key.push(KEY_SEPARATOR);
                }
                push_label_value(&mut key, labels.get(at).copied().unwrap_or(""));
            }
            let Ok(mut series) = series.lock() else {
                return;
            };
            if let Some(value) = series.get_mut(key.as_str()) {
                change(value);
                return;
            }
            let key = if series.len() < MAX_SERIES_PER_FAMILY - 1 {
                key.clone()
            } else {
                vec![OVERFLOW; family.labels.len()].join(&KEY_SEPARATOR.to_string())
            };
            change(
                series
                    .entry(key)
                    .or_insert_with(|| Value::zero(family.kind)),
            );
        });
    }

    /// Every counter and histogram now. Gauges are levels its owner reads
    /// when asked: see [`Levels`].
    pub fn snapshot(&self) -> Snapshot {
        let mut snapshot = Snapshot::default();
        for (family, series) in families::ALL.iter().zip(&self.families) {
            let Ok(series) = series.lock() else {
                continue;
            };
            if series.is_empty() {
                continue;
            }
            let map = &mut snapshot
                .families
                .entry(family.name.to_owned())
                .or_default()
                .0;
            for (key, value) in series.iter() {
                let labels = if family.labels.is_empty() {
                    Vec::new()
                } else {
                    key.split(KEY_SEPARATOR).map(str::to_owned).collect()
                };
                map.insert(labels, value.clone());
            }
        }
        snapshot
    }
}

/// Appends `value` as [`label_value`] makes it, copying nothing more.
fn push_label_value(key: &mut String, value: &str) {
    let printable = gatehouse_base::escape::escape(value);
    let mut end = printable.len().min(MAX_LABEL_BYTES);
    while !printable.is_char_boundary(end) {
        end -= 1;
    }
    key.push_str(&printable[..end]);
}

/// What is read at the moment of a snapshot rather than recorded as it
/// happens: gauge levels (elicitations in flight, backends by state) and
/// totals kept elsewhere (the compile cache's counts), added to a
/// [`Snapshot`].
#[derive(Debug, Default)]
pub struct Levels {
    snapshot: Snapshot,
}

impl Levels {
    /// Sets the gauge `family` under `labels` to `level`.
    pub fn set(&mut self, family: &Family, labels: &[&str], level: i64) {
        debug_assert_eq!(family.kind, Kind::Gauge, "{}", family.name);
        self.snapshot.set_gauge(family, labels, level);
    }

    /// Sets the counter `family` under `labels` to `total`, a count kept
    /// elsewhere that only goes up.
    pub fn total(&mut self, family: &Family, labels: &[&str], total: u64) {
        debug_assert_eq!(family.kind, Kind::Counter, "{}", family.name);
        self.snapshot.add(family, labels, &Value::Counter(total));
    }

    /// `snapshot` with these levels and totals in it, in place of any
    /// value it had for the same series.
    pub fn into_snapshot(self, mut snapshot: Snapshot) -> Snapshot {
        snapshot.set_all(&self.snapshot);
        snapshot
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::families::{BACKENDS, ELICITATIONS, REVIEW_DURATION};

    #[test]
    fn an_observation_lands_in_the_first_bucket_that_holds_it() {
        let metrics = Metrics::default();
        metrics.observe(&REVIEW_DURATION, &["m"], 0.000_01);
        metrics.observe(&REVIEW_DURATION, &["m"], 0.003);
        metrics.observe(&REVIEW_DURATION, &["m"], 1e9);
        metrics.observe(&REVIEW_DURATION, &["m"], f64::NAN);
        let snapshot = metrics.snapshot();
        let Some(Value::Histogram {
            buckets,
            count,
            sum,
        }) = snapshot.get(&REVIEW_DURATION, &["m"])
        else {
            panic!("no histogram");
        };
        assert_eq!(*count, 4);
        assert_eq!(buckets[0], 2, "10 µs and the NaN (as 0)");
        assert_eq!(buckets[8], 1, "3 ms is in the 5 ms bucket");
        assert_eq!(buckets[LATENCY_BUCKETS.len() - 1], 1, "+Inf");
        assert!((sum - (1e9 + 0.003 + 0.000_01)).abs() < 1.0);
    }

    #[test]
    fn a_family_never_holds_more_than_its_bound_and_counts_the_rest_together() {
        let metrics = Metrics::default();
        for server in 0..(MAX_SERIES_PER_FAMILY + 500) {
            metrics.count(
                &ELICITATIONS,
                &[&server.to_string(), "form", "guest", "accept"],
                1,
            );
        }
        let snapshot = metrics.snapshot();
        assert_eq!(
            snapshot.series(&ELICITATIONS).count(),
            MAX_SERIES_PER_FAMILY
        );
        assert_eq!(
            snapshot.get(&ELICITATIONS, &[OVERFLOW, OVERFLOW, OVERFLOW, OVERFLOW]),
            Some(&Value::Counter(501))
        );
    }

    #[test]
    fn label_values_are_printable_and_bounded() {
        let metrics = Metrics::default();
        let long = "é".repeat(200);
        metrics.count(&ELICITATIONS, &["a\"b\nc\u{202e}", &long, "x", "y"], 1);
        let snapshot = metrics.snapshot();
        let (labels, _) = snapshot.series(&ELICITATIONS).next().unwrap();
        assert!(!labels[0].contains('\n') && !labels[0].contains('\u{202e}'));
        assert!(labels[1].len() <= MAX_LABEL_BYTES);
        assert!(labels[1].chars().all(|c| c == 'é'));
    }

    #[test]
    fn a_snapshot_from_elsewhere_keeps_only_what_a_known_family_could_hold() {
        let text = r#"{
            "gatehouse_elicitations": [[["s","form","guest","accept"], {"counter": 3}],
                                       [["too","few"], {"counter": 9}],
                                       [["s","form","guest","decline"], {"gauge": 9}]],
            "gatehouse_review_duration": [[["m"], {"histogram": {"buckets": [1], "sum": 1, "count": 1}}]],
            "gatehouse_backends": [[["git","connected"], {"gauge": 1}]],
            "someone_elses": [[[], {"counter": 1}]]
        }"#;
        let snapshot: Snapshot = serde_json::from_str(text).unwrap();
        let checked = snapshot.checked();
        assert_eq!(checked.series(&ELICITATIONS).count(), 1);
        assert_eq!(checked.series(&REVIEW_DURATION).count(), 0);
        assert_eq!(
            checked.get(&BACKENDS, &["git", "connected"]),
            Some(&Value::Gauge(1))
        );
        assert_eq!(checked.families.len(), 2);
    }
}
