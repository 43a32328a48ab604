//! One review through the reference guardian: a fresh sandboxed instance per
//! review, beside the same decision logic compiled natively, and the
//! throughput of two worker threads reviewing at once (each review in its own
//! fresh instance; read reviews/s off the `thrpt` line).
//!
//! The same review with the metrics a gateway records for its decision (the
//! elicitation, its module's review, the audit write: six series), side by
//! side, is what telemetry costs a decision; rendering a scrape is measured
//! apart. So is the same review with its trace span taken by an
//! OpenTelemetry layer and batched for export (the exporter drops the
//! batches: encoding and sending happen on the exporter's own thread),
//! against the default, where no subscriber takes the span.
//!
//! Run: `.ci/build-guests && cargo bench -p gatehouse-bench --bench review`

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use gatehouse_core::chain::{Chain, ChainLink};
use gatehouse_core::context::ReviewContext;
use gatehouse_core::elicitation::{ElicitationParams, RequestId};
use gatehouse_core::request::ReviewRequest;
use gatehouse_core::sandbox::{Limits, Sandbox};
use gatehouse_guardian::input::{Catalog, Input, Mode, Policy, RequestId as GuestId, Reviewer};

const CONFIG: &str = r#"{"allow":[{"server":"docs","tool":"read_*"}],"deny":[{"tool":"drop_*"}]}"#;

fn guardian_path() -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR").map_or_else(
        || PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target"),
        PathBuf::from,
    );
    target.join("wasm32-wasip2/guest/gatehouse_guardian.wasm")
}

/// Worker threads in the concurrent benchmark.
const WORKERS: u64 = 2;

fn bench(c: &mut Criterion) {
    // The same 1 KB approval elicitation `gatehouse bench` uses.
    let params = gatehouse_bench::sample_elicitation();
    let size = params.to_string().len();
    let request = ReviewRequest::new(
        ElicitationParams::from_wire(&params).expect("valid params"),
        ReviewContext::new("docs", RequestId::Number(1)),
    );

    let mut group = c.benchmark_group(format!("guardian review ({size} B elicitation)"));

    let sandbox = Sandbox::new(Limits::default()).expect("sandbox");
    let module = sandbox
        .load_file(guardian_path(), None)
        .unwrap_or_else(|error| panic!("{error} (run .ci/build-guests first)"));
    let chain = Chain::new(vec![ChainLink::new(Arc::new(module)).with_config(CONFIG)]);
    assert!(chain.review(&request).answer().is_some());
    group.bench_function("sandboxed, fresh instance", |b| {
        b.iter(|| chain.review(&request))
    });

    let meta =
        serde_json::Value::Object(request.params().meta.clone().unwrap_or_default()).to_string();
    let schema = r#"{"type":"object","properties":{}}"#;
    let input = Input {
        mode: Mode::Form {
            requested_schema: schema,
        },
        meta: Some(&meta),
        server_name: "docs",
        request_id: GuestId::Number(1),
        policy: Policy::OnRequest,
        reviewer: Reviewer::AutoReview,
        auto_approve_prompts: false,
        catalog: Catalog::Unavailable,
    };
    let metrics = gatehouse_telemetry::series::Metrics::default();
    let digest = chain.links()[0].module.digest().to_owned();
    group.bench_function("sandboxed, fresh instance, metrics recorded", |b| {
        b.iter(|| {
            let started = Instant::now();
            let report = chain.review(&request);
            record_decision(&metrics, &digest, started.elapsed());
            report
        })
    });

    let (subscriber, provider) = traced_subscriber();
    tracing::subscriber::with_default(subscriber, || {
        group.bench_function("sandboxed, fresh instance, trace span exported", |b| {
            b.iter(|| chain.review(&request))
        });
    });
    let _ = provider.shutdown();

    group.bench_function("native logic", |b| {
        b.iter(|| gatehouse_guardian::logic::review(CONFIG, &input))
    });
    // What `gatehouse bench` runs in the sandbox: the empty config, which
    // declines the sample. Beside the sandboxed review of the same, it says
    // what the guardian's own work costs outside the sandbox.
    group.bench_function("native logic, empty config", |b| {
        b.iter(|| gatehouse_guardian::logic::review("{}", &input))
    });

    // `iters` reviews shared out among the workers; the time per element is
    // wall time over all of them, so `thrpt` is reviews/s of all workers.
    group.throughput(Throughput::Elements(1));
    group.bench_function(
        format!("sandboxed, fresh instance, {WORKERS} workers"),
        |b| b.iter_custom(|iters| concurrent_reviews(&chain, &request, iters)),
    );
    group.finish();
}

/// A subscriber that takes gatehouse's trace spans as `gatehouse serve`
/// does with `[traces]` (an OpenTelemetry layer, every span sampled, a batch
/// processor), its exporter dropping what it is given.
fn traced_subscriber() -> (
    impl tracing::Subscriber + Send + Sync,
    opentelemetry_sdk::trace::SdkTracerProvider,
) {
    use opentelemetry::trace::TracerProvider as _;
    use tracing_subscriber::Layer as _;
    use tracing_subscriber::layer::SubscriberExt as _;
    let provider = opentelemetry_sdk::trace::SdkTracerProvider::builder()
        .with_sampler(opentelemetry_sdk::trace::Sampler::AlwaysOn)
        .with_span_processor(opentelemetry_sdk::trace::BatchSpanProcessor::builder(Dropped).build())
        .build();
    let layer = tracing_opentelemetry::layer()
        .with_tracer(provider.tracer("gatehouse"))
        .with_tracked_inactivity(false)
        .with_filter(
            tracing_subscriber::filter::Targets::new()
                .with_target(gatehouse_base::trace::TARGET, tracing::Level::DEBUG),
        );
    (tracing_subscriber::registry().with(layer), provider)
}

/// An exporter that drops every batch.
#[derive(Debug)]
struct Dropped;

impl opentelemetry_sdk::trace::SpanExporter for Dropped {
    async fn export(
        &self,
        batch: Vec<opentelemetry_sdk::trace::SpanData>,
    ) -> opentelemetry_sdk::error::OTelSdkResult {
        drop(batch);
        Ok(())
    }
}

/// What the gateway's `telemetry::record_decision` and `record_audit_write`
/// record for a one-module decision.
fn record_decision(metrics: &gatehouse_telemetry::series::Metrics, digest: &str, took: Duration) {
    use gatehouse_telemetry::families::{
        AUDIT_WRITE_DURATION, AUDIT_WRITES, ELICITATION_DURATION, ELICITATIONS, REVIEW_DURATION,
        REVIEWS,
    };
    let seconds = took.as_secs_f64();
    metrics.count(&AUDIT_WRITES, &["ok"], 1);
    metrics.observe(&AUDIT_WRITE_DURATION, &[], 0.000_002);
    metrics.count(&ELICITATIONS, &["docs", "form", "guest", "accept"], 1);
    metrics.observe(&ELICITATION_DURATION, &["docs", "guest"], seconds);
    metrics.count(&REVIEWS, &["gatehouse_guardian", digest, "accept", ""], 1);
    metrics.observe(&REVIEW_DURATION, &["gatehouse_guardian"], seconds);
}

/// A scrape: the snapshot and its OpenMetrics text, with 10 servers' and 5
/// modules' series recorded.
fn scrape(c: &mut Criterion) {
    use gatehouse_telemetry::exposition::{Format, render};
    let metrics = gatehouse_telemetry::series::Metrics::default();
    for server in 0..10 {
        for module in 0..5 {
            let (server, module) = (format!("server{server}"), format!("module{module}"));
            record_decision(&metrics, &module, Duration::from_micros(40));
            metrics.count(
                &gatehouse_telemetry::families::ELICITATIONS,
                &[&server, "form", "guest", "accept"],
                1,
            );
        }
    }
    let lines = render(&metrics.snapshot(), Format::OpenMetrics)
        .lines()
        .count();
    c.bench_function(&format!("telemetry scrape ({lines} lines)"), |b| {
        b.iter(|| render(&metrics.snapshot(), Format::OpenMetrics))
    });
}

/// What traces cost a call when they are off: the six spans a reviewed,
/// model-backed call with a person's answer creates (upstream request,
/// downstream call, elicitation, review, model call, person), under the
/// subscriber `gatehouse serve` has without `[traces]` (the log at `warn`),
/// beside the same six taken and batched for export.
fn trace_spans(c: &mut Criterion) {
    use gatehouse_base::trace::TARGET;
    use tracing_subscriber::Layer as _;
    use tracing_subscriber::layer::SubscriberExt as _;
    fn six_spans() {
        for _ in 0..6 {
            let span = tracing::debug_span!(
                target: TARGET,
                "review",
                gatehouse.module = "guardian",
                gatehouse.outcome = tracing::field::Empty,
            );
            let _in = span.enter();
            if !span.is_disabled() {
                span.record("gatehouse.outcome", "accept");
            }
        }
    }
    let logs = tracing_subscriber::registry().with(
        tracing_subscriber::fmt::layer()
            .with_writer(std::io::sink)
            .with_filter(tracing_subscriber::EnvFilter::new("warn")),
    );
    tracing::subscriber::with_default(logs, || {
        c.bench_function("six trace spans, traces off (log at warn)", |b| {
            b.iter(six_spans)
        });
    });
    let (traced, provider) = traced_subscriber();
    tracing::subscriber::with_default(traced, || {
        c.bench_function("six trace spans, exported", |b| b.iter(six_spans));
    });
    let _ = provider.shutdown();
}

/// Runs `iters` reviews on `WORKERS` threads at once; the wall time from
/// when all have started to when the last one is done.
fn concurrent_reviews(chain: &Chain, request: &ReviewRequest, iters: u64) -> Duration {
    let start = std::sync::Barrier::new(usize::try_from(WORKERS).expect("few workers") + 1);
    std::thread::scope(|scope| {
        let workers: Vec<_> = (0..WORKERS)
            .map(|worker| {
                // Shares differ by one review at most.
                let share = iters / WORKERS + u64::from(worker < iters % WORKERS);
                let start = &start;
                scope.spawn(move || {
                    start.wait();
                    for _ in 0..share {
                        std::hint::black_box(chain.review(request));
                    }
                })
            })
            .collect();
        start.wait();
        let began = Instant::now();
        for worker in workers {
            worker.join().expect("worker");
        }
        began.elapsed()
    })
}

criterion_group!(benches, bench, scrape, trace_spans);
criterion_main!(benches);
