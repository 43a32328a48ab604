//! Traces over OTLP/HTTP: the libraries' spans (target
//! [`gatehouse_base::trace::TARGET`]) go to the collector `[traces]` names.
//!
//! The OpenTelemetry layer is part of the subscriber from the start
//! ([`layer`]), closed by its filter ([`Gate`]) until `gatehouse serve`
//! has read its config and [`start`]s the export: before that, and in every
//! process that never starts it, a span of the target is disabled at its
//! call site (a cached interest, no allocation). Only spans of the target
//! are exported, never a dependency's, and the log's own filter does not
//! see them (they are at debug level), so turning traces on changes no log
//! line.
//!
//! Every span is sampled: a client's `traceparent` that says "not sampled"
//! cannot hide its calls from the operator.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use anyhow::Context as _;
use gatehouse_base::trace::TARGET;
use gatehouse_telemetry::traces::{Propagation, TracesConfig};
use opentelemetry::propagation::{Extractor, Injector, TextMapPropagator};
use opentelemetry::trace::{TraceContextExt, TracerProvider as _};
use opentelemetry_otlp::{Protocol, WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{
    BatchSpanProcessor, Sampler, SdkTracerProvider, SpanData, SpanProcessor,
};
use serde_json::{Map, Value};
use tracing::subscriber::Interest;
use tracing::{Metadata, Subscriber};
use tracing_opentelemetry::OpenTelemetrySpanExt;
use tracing_subscriber::Layer;
use tracing_subscriber::filter::LevelFilter;
use tracing_subscriber::layer::{Context, Filter};
use tracing_subscriber::registry::LookupSpan;

/// Whether spans are exported ([`start`]).
static ON: AtomicBool = AtomicBool::new(false);

/// The process's provider and the relay its exporter is set in, once the
/// subscriber is built ([`layer`]).
static TRACES: OnceLock<Traces> = OnceLock::new();

struct Traces {
    provider: SdkTracerProvider,
    relay: Relay,
}

/// The OpenTelemetry layer of the process's subscriber, behind [`Gate`];
/// nothing leaves it until [`start`].
pub fn layer<S>() -> impl Layer<S> + Send + Sync + 'static
where
    S: Subscriber + for<'span> LookupSpan<'span> + Send + Sync,
{
    let relay = Relay::default();
    let provider = SdkTracerProvider::builder()
        .with_sampler(Sampler::AlwaysOn)
        .with_span_processor(relay.clone())
        .build();
    let tracer = provider.tracer("gatehouse");
    let _ = TRACES.set(Traces { provider, relay });
    tracing_opentelemetry::layer()
        .with_tracer(tracer)
        .with_tracked_inactivity(false)
        .with_filter(Gate)
}

/// Lets through the spans of [`TARGET`] once traces are on, and nothing
/// else.
pub struct Gate;

impl Gate {
    fn takes(metadata: &Metadata<'_>) -> bool {
        ON.load(Ordering::Acquire) && metadata.is_span() && metadata.target() == TARGET
    }
}

impl<S> Filter<S> for Gate {
    fn enabled(&self, metadata: &Metadata<'_>, _: &Context<'_, S>) -> bool {
        Gate::takes(metadata)
    }

    fn callsite_enabled(&self, metadata: &'static Metadata<'static>) -> Interest {
        if Gate::takes(metadata) {
            Interest::always()
        } else {
            Interest::never()
        }
    }

    fn max_level_hint(&self) -> Option<LevelFilter> {
        if ON.load(Ordering::Acquire) {
            Some(LevelFilter::DEBUG)
        } else {
            Some(LevelFilter::OFF)
        }
    }
}

/// Passes finished spans to the batch exporter once there is one.
#[derive(Debug, Clone, Default)]
struct Relay(Arc<OnceLock<BatchSpanProcessor>>);

impl SpanProcessor for Relay {
    fn on_start(&self, span: &mut opentelemetry_sdk::trace::Span, cx: &opentelemetry::Context) {
        if let Some(batch) = self.0.get() {
            batch.on_start(span, cx);
        }
    }

    fn on_end(&self, span: SpanData) {
        if let Some(batch) = self.0.get() {
            batch.on_end(span);
        }
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.0.get().map_or(Ok(()), BatchSpanProcessor::force_flush)
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.0
            .get()
            .map_or(Ok(()), |batch| batch.shutdown_with_timeout(timeout))
    }
}

/// Starts exporting to `config`'s collector: spans from now on are
/// batched and posted over OTLP/HTTP (protobuf), and upstream requests'
/// trace context is continued and carried downstream. Once per process.
pub fn start(config: &TracesConfig, origin: &std::path::Path) -> anyhow::Result<()> {
    let url = config
        .traces_url()
        .with_context(|| format!("{}", origin.display()))?;
    let traces = TRACES
        .get()
        .context("traces cannot start: the subscriber has no OpenTelemetry layer")?;
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_protocol(Protocol::HttpBinary)
        .with_endpoint(url.clone())
        .with_timeout(Duration::from_secs(config.timeout_sec))
        .with_headers(
            config
                .headers
                .clone()
                .into_iter()
                .collect::<HashMap<_, _>>(),
        )
        .build()
        .with_context(|| format!("cannot export traces to {url}"))?;
    let mut batch = BatchSpanProcessor::builder(exporter).build();
    batch.set_resource(
        &Resource::builder()
            .with_service_name(config.service_name.clone())
            .build(),
    );
    if traces.relay.0.set(batch).is_err() {
        anyhow::bail!("traces were started already");
    }
    gatehouse_telemetry::traces::install(
        Box::new(W3cTraceContext(TraceContextPropagator::new())),
        config.content,
    );
    ON.store(true, Ordering::Release);
    tracing::callsite::rebuild_interest_cache();
    tracing::info!(
        "exporting traces to {}",
        gatehouse_base::escape::Escaped(&url)
    );
    Ok(())
}

/// How long [`finish`] waits for the last spans to be exported.
const FINISH_WITHIN: Duration = Duration::from_secs(2);

/// Exports what is still batched and stops the exporter, waiting at most
/// [`FINISH_WITHIN`] (a collector that does not answer costs no more);
/// nothing when traces were never started.
pub fn finish() {
    if !ON.swap(false, Ordering::AcqRel) {
        return;
    }
    tracing::callsite::rebuild_interest_cache();
    if let Some(traces) = TRACES.get()
        && let Err(error) = traces.provider.shutdown_with_timeout(FINISH_WITHIN)
    {
        tracing::warn!("the last spans may not have been exported: {error}");
    }
}

/// W3C trace context (`traceparent`, `tracestate`) in a request's `_meta`.
struct W3cTraceContext(TraceContextPropagator);

impl Propagation for W3cTraceContext {
    fn continue_from(&self, span: &tracing::Span, context: &Map<String, Value>) {
        let parent = self.0.extract(&MetaReader(context));
        if parent.span().span_context().is_valid() {
            // Fails only for a span already started or not exported.
            let _ = span.set_parent(parent);
        }
    }

    fn carry(&self, span: &tracing::Span) -> Map<String, Value> {
        let mut meta = MetaWriter(Map::new());
        self.0.inject_context(&span.context(), &mut meta);
        meta.0
    }
}

struct MetaReader<'a>(&'a Map<String, Value>);

impl Extractor for MetaReader<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(Value::as_str)
    }

    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(String::as_str).collect()
    }
}

struct MetaWriter(Map<String, Value>);

impl Injector for MetaWriter {
    fn set(&mut self, key: &str, value: String) {
        self.0.insert(key.to_owned(), Value::String(value));
    }
}
