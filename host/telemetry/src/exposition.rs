//! A [`Snapshot`] as Prometheus scrapes it, encoded by
//! `prometheus-client` (which escapes label values: `\`, `"` and line
//! feeds): OpenMetrics for a scraper that asks for it (Prometheus does),
//! the classic text format (0.0.4) otherwise, which is what `curl` and
//! `promtool check metrics` read.

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, NoLabelSet};
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::{Registry, Unit as PromUnit};

use crate::families::{self, Kind, LATENCY_BUCKETS, Unit};
use crate::series::{Snapshot, Value};

/// An exposition format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// OpenMetrics 1.0 (`# UNIT`, ends in `# EOF`).
    OpenMetrics,
    /// Prometheus's classic text format 0.0.4.
    Text,
}

impl Format {
    /// The format an `Accept` header asks for: OpenMetrics when it names
    /// it, the classic text format otherwise.
    pub fn negotiate(accept: Option<&str>) -> Format {
        match accept {
            Some(accept) if accept.contains("application/openmetrics-text") => Format::OpenMetrics,
            _ => Format::Text,
        }
    }

    /// Its `Content-Type`.
    pub fn content_type(self) -> &'static str {
        match self {
            Format::OpenMetrics => "application/openmetrics-text; version=1.0.0; charset=utf-8",
            Format::Text => "text/plain; version=0.0.4; charset=utf-8",
        }
    }
}

/// `snapshot` in `format`, every family listed (one with no series yet has
/// its `# HELP` and `# TYPE` alone).
///
/// ```
/// use gatehouse_telemetry::exposition::{Format, render};
/// use gatehouse_telemetry::families::ELICITATIONS;
/// use gatehouse_telemetry::series::Metrics;
///
/// let metrics = Metrics::default();
/// metrics.count(&ELICITATIONS, &["git", "form", "guest", "accept"], 1);
/// let sample = r#"gatehouse_elicitations_total{server="git",mode="form",decided_by="guest",action="accept"} 1"#;
/// let open = render(&metrics.snapshot(), Format::OpenMetrics);
/// assert!(open.contains("# TYPE gatehouse_elicitations counter"));
/// assert!(open.contains(sample) && open.ends_with("# EOF\n"));
/// let text = render(&metrics.snapshot(), Format::Text);
/// assert!(text.contains("# TYPE gatehouse_elicitations_total counter"));
/// assert!(text.contains(sample) && !text.contains("# EOF"));
/// ```
pub fn render(snapshot: &Snapshot, format: Format) -> String {
    let open = render_open_metrics(snapshot);
    match format {
        Format::OpenMetrics => open,
        Format::Text => to_classic_text(&open),
    }
}

/// The classic format of an OpenMetrics text this module wrote: a counter's
/// `# HELP` and `# TYPE` name its `_total` samples, and there is no
/// `# UNIT` or `# EOF`.
fn to_classic_text(open: &str) -> String {
    let mut text = String::with_capacity(open.len());
    for line in open.lines() {
        if line.starts_with("# UNIT ") || line == "# EOF" {
            continue;
        }
        let renamed = ["# HELP ", "# TYPE "].iter().find_map(|prefix| {
            let rest = line.strip_prefix(prefix)?;
            let (name, tail) = rest.split_once(' ')?;
            let family = families::by_name(name)?;
            (family.kind == Kind::Counter).then(|| format!("{prefix}{name}_total {tail}"))
        });
        match renamed {
            Some(renamed) => text.push_str(&renamed),
            None => text.push_str(line),
        }
        text.push('\n');
    }
    text
}

fn render_open_metrics(snapshot: &Snapshot) -> String {
    let mut registry = Registry::default();
    registry.register_collector(Box::new(Rendered(snapshot.clone())));
    let mut text = String::new();
    // Writing to a String cannot fail; an encoder error would be a bug in
    // the label sets above, and yields what was written so far.
    if prometheus_client::encoding::text::encode(&mut text, &registry).is_err() {
        tracing_free_fallback(&mut text);
    }
    text
}

/// Ends a partial exposition so a scraper sees it as complete but empty of
/// the rest.
fn tracing_free_fallback(text: &mut String) {
    if !text.ends_with("# EOF\n") {
        text.push_str("# EOF\n");
    }
}

#[derive(Debug)]
struct Rendered(Snapshot);

impl Collector for Rendered {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        for family in families::ALL {
            let unit = family.unit.map(|Unit::Seconds| PromUnit::Seconds);
            let metric_type = match family.kind {
                Kind::Counter => MetricType::Counter,
                Kind::Gauge => MetricType::Gauge,
                Kind::Histogram => MetricType::Histogram,
            };
            let mut metric =
                encoder.encode_descriptor(family.name, family.help, unit.as_ref(), metric_type)?;
            for (values, value) in self.0.series(family) {
                let labels: Vec<(&str, &str)> = family
                    .labels
                    .iter()
                    .copied()
                    .zip(values.iter().map(String::as_str))
                    .collect();
                let mut series = metric.encode_family(&labels)?;
                match value {
                    Value::Counter(total) => {
                        series.encode_counter::<NoLabelSet, _, u64>(total, None)?;
                    }
                    Value::Gauge(level) => series.encode_gauge(level)?,
                    Value::Histogram {
                        buckets,
                        sum,
                        count,
                    } => {
                        let buckets: Vec<(f64, u64)> = LATENCY_BUCKETS
                            .iter()
                            .copied()
                            .zip(buckets.iter().copied())
                            .collect();
                        series.encode_histogram::<NoLabelSet>(*sum, *count, &buckets, None)?;
                    }
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::families::{ELICITATIONS, REVIEW_DURATION};
    use crate::series::Metrics;

    #[test]
    fn hostile_label_values_stay_inside_their_quotes() {
        let metrics = Metrics::default();
        metrics.count(
            &ELICITATIONS,
            &["a\"} 1\nevil_total 9\n#", "form\\", "guest", "accept"],
            1,
        );
        let text = render(&metrics.snapshot(), Format::OpenMetrics);
        for line in text.lines() {
            assert!(
                line.starts_with('#') || line.starts_with("gatehouse_"),
                "a line no family wrote: {line:?}"
            );
        }
        assert!(
            text.contains(r##"server="a\"} 1\\nevil_total 9\\n#""##),
            "{text}"
        );
    }

    #[test]
    fn a_histogram_is_cumulative_with_its_sum_and_count() {
        let metrics = Metrics::default();
        metrics.observe(&REVIEW_DURATION, &["m"], 0.000_02);
        metrics.observe(&REVIEW_DURATION, &["m"], 2.0);
        let text = render(&metrics.snapshot(), Format::OpenMetrics);
        assert!(text.contains("gatehouse_review_duration_seconds_count{module=\"m\"} 2"));
        assert!(
            text.contains(
                "gatehouse_review_duration_seconds_bucket{le=\"0.00001\",module=\"m\"} 0"
            )
        );
        assert!(
            text.contains(
                "gatehouse_review_duration_seconds_bucket{le=\"0.000025\",module=\"m\"} 1"
            )
        );
        assert!(
            text.contains("gatehouse_review_duration_seconds_bucket{le=\"2.5\",module=\"m\"} 2")
        );
        assert!(
            text.contains("gatehouse_review_duration_seconds_bucket{le=\"+Inf\",module=\"m\"} 2")
        );
    }
}
