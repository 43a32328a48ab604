//! `gatehouse bench`: reviews per second, latency and memory of a module in
//! the sandbox (a fresh instance per review), beside the same decisions made
//! by a process hook spawned per decision.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use gatehouse_bench::{
    self, Bench, Comparison, OutcomeKind, ProcessHook, RunReport, load_requests, sample_requests,
};
use gatehouse_core::chain::{Chain, ChainLink};
use gatehouse_core::context::ReviewContext;
use gatehouse_core::elicitation::RequestId;
use gatehouse_core::escape::Escaped;
use gatehouse_core::sandbox::{Limits, Sandbox};
use serde_json::{Value, json};

use super::Format;

/// Exit code when some review failed (every other number is still printed).
const FAILED: u8 = 4;

/// Measure a module: N worker threads doing normal reviews (a fresh sandboxed
/// instance each) for a while after a short warm-up; prints count,
/// reviews/s, latency percentiles, outcomes and memory. With --hook, the same
/// requests also go to a process hook (spawned once per decision, request on
/// stdin, verdict on stdout), for comparison.
///
/// Exit code: 0 measured, 4 some review failed (counted in the report),
/// 1 bad input.
#[derive(Debug, clap::Args)]
pub struct BenchArgs {
    /// The reviewer component.
    #[arg(value_name = "M.wasm")]
    module: PathBuf,
    /// Requests to cycle through: JSON lines, a JSON array, or one JSON
    /// document; each the params of elicitation/create as on the wire or the
    /// whole JSON-RPC message [default: an embedded 1 KB approval elicitation].
    #[arg(long, value_name = "FILE")]
    requests: Option<PathBuf>,
    /// Worker threads, each with one review in flight.
    #[arg(long, value_name = "N", default_value_t = gatehouse_bench::DEFAULT_CONCURRENCY, value_parser = workers)]
    concurrency: usize,
    /// Seconds to measure (fractions allowed).
    #[arg(long, value_name = "S", default_value = "5", value_parser = seconds)]
    duration: Duration,
    /// Seconds of warm-up before measuring [default: a tenth of --duration,
    /// 0.02 to 1].
    #[arg(long, value_name = "S", value_parser = seconds)]
    warmup: Option<Duration>,
    /// The module's configuration (JSON text, or @FILE); the hook gets it too.
    #[arg(long, value_name = "JSON|@FILE")]
    module_config: Option<String>,
    /// The server name in the review context.
    #[arg(long, default_value = "docs")]
    server: String,
    /// The module's own limits, as a [[review.modules]] entry's `limits`
    /// give them.
    #[command(flatten)]
    limits: super::module_limits::ModuleLimitsArgs,
    /// Keep compiled modules in DIR, as `[review] compile_cache` does for
    /// `gatehouse serve`: the first run compiles and stores the module, later
    /// runs load it from there. The report says how long loading took.
    #[arg(long, value_name = "DIR")]
    compile_cache: Option<PathBuf>,
    /// Name the module's functions in /tmp/perf-<pid>.map, so that `perf
    /// record -g -- gatehouse bench --perf-map M.wasm` and `perf report` show
    /// where its reviews spend their time, function by function (build the
    /// module with its names: not stripped). For profiling on your own
    /// machine: the map's path is predictable.
    #[arg(long)]
    perf_map: bool,
    /// A process hook to run the same requests through: spawned once per
    /// decision, one request as JSON on stdin, one verdict line on stdout
    /// (see examples/process-hook).
    #[arg(long, value_name = "CMD")]
    hook: Option<PathBuf>,
    /// An argument for the hook; repeat for several.
    #[arg(
        long = "hook-arg",
        value_name = "ARG",
        requires = "hook",
        allow_hyphen_values = true
    )]
    hook_args: Vec<String>,
    /// Seconds one hook decision may take before the process is killed.
    #[arg(long, value_name = "S", default_value = "5", value_parser = seconds)]
    hook_timeout: Duration,
    /// Output format.
    #[arg(long, value_enum, default_value = "text")]
    format: Format,
}

fn workers(text: &str) -> Result<usize, String> {
    match text.parse::<u16>() {
        Ok(workers) if workers > 0 => Ok(usize::from(workers)),
        _ => Err(format!(
            "`{text}`: give a number of threads from 1 to 65535"
        )),
    }
}

fn seconds(text: &str) -> Result<Duration, String> {
    let seconds: f64 = text
        .parse()
        .map_err(|_| format!("`{text}` is not a number of seconds"))?;
    if !(seconds.is_finite() && seconds > 0.0) {
        return Err(format!("`{text}`: give a positive number of seconds"));
    }
    Duration::try_from_secs_f64(seconds).map_err(|error| format!("`{text}`: {error}"))
}

pub fn run(args: BenchArgs) -> anyhow::Result<ExitCode> {
    let config = match &args.module_config {
        Some(text) => super::review::module_config(text)?,
        None => "{}".to_owned(),
    };
    let context = ReviewContext::new(args.server.clone(), RequestId::Number(1));
    let requests = match &args.requests {
        Some(path) => load_requests(path, &context)?,
        None => sample_requests(&context)?,
    };
    let defaults = Limits::default();
    let pool = u32::try_from(args.concurrency)
        .unwrap_or(u32::MAX)
        .max(defaults.concurrent_reviews());
    let limits = args
        .limits
        .make_room(Limits::builder().concurrent_reviews(pool))
        .build();
    let mut sandbox = Sandbox::builder().limits(limits).perf_map(args.perf_map);
    if let Some(dir) = &args.compile_cache {
        sandbox = sandbox.compile_cache(dir);
    }
    let sandbox = sandbox.build()?;
    let loading = Instant::now();
    let module = sandbox.load_file_with(&args.module, None, &args.limits.to_module_limits())?;
    let load = loading.elapsed();
    let loaded_from = match sandbox.compile_cache_dir() {
        Some(dir) => format!("compile cache {}", dir.display()),
        None => "compiled in memory, no cache".to_owned(),
    };
    let chain = Chain::new(vec![
        ChainLink::new(Arc::new(module)).with_config(config.clone()),
    ]);
    let mut bench = Bench::new(requests)
        .concurrency(args.concurrency)
        .duration(args.duration);
    if let Some(warmup) = args.warmup {
        bench = bench.warmup(warmup);
    }
    let gatehouse = bench.run_chain(&chain)?;
    let hook = match &args.hook {
        Some(program) => {
            let config: Value =
                serde_json::from_str(&config).context("the module config is not JSON")?;
            let hook = ProcessHook::new(program)
                .args(&args.hook_args)
                .config(config)
                .timeout(args.hook_timeout);
            Some(bench.run_hook(&hook)?)
        }
        None => None,
    };
    let runs: Vec<&RunReport> = std::iter::once(&gatehouse).chain(&hook).collect();
    let comparison = hook
        .as_ref()
        .and_then(|hook| Comparison::between(hook, &gatehouse));
    let source = match &args.requests {
        Some(path) => path.display().to_string(),
        None => format!(
            "embedded sample ({} B)",
            gatehouse_bench::sample_elicitation().to_string().len()
        ),
    };
    let perf_map = sandbox
        .perf_map_path()
        .map(|path| path.display().to_string());
    match args.format {
        Format::Text => {
            println!(
                "loaded {} in {:.3} s ({loaded_from})",
                args.module.display(),
                load.as_secs_f64()
            );
            if let Some(path) = &perf_map {
                println!("guest functions named for perf in {path}");
            }
            print_text(&args, &bench, &source, &runs, comparison)
        }
        Format::Json => {
            let document = json!({
                "module": args.module.display().to_string(),
                "requests": {"source": source, "count": bench.requests().len()},
                "concurrency": bench.workers(),
                "duration_s": bench.measured_duration().as_secs_f64(),
                "warmup_s": bench.warmup_duration().as_secs_f64(),
                "load_s": load.as_secs_f64(),
                "compile_cache": sandbox.compile_cache_dir().map(|dir| dir.display().to_string()),
                "perf_map": perf_map,
                "runs": runs,
                "comparison": comparison.map(|comparison| json!({
                    "hook_p50_over_gatehouse_p50": comparison.p50_ratio,
                    "hook_throughput_over_gatehouse": comparison.throughput_ratio,
                })),
            });
            println!("{}", serde_json::to_string_pretty(&document)?);
        }
    }
    drop(sandbox);
    let failed = runs.iter().any(|run| run.outcomes.failed > 0);
    Ok(ExitCode::from(if failed { FAILED } else { 0 }))
}

fn micros(duration: Duration) -> String {
    format!("{:.1}", duration.as_secs_f64() * 1e6)
}

fn mib(bytes: Option<u64>) -> String {
    bytes.map_or_else(
        || "-".to_owned(),
        |bytes| format!("{:.1}", bytes as f64 / f64::from(1 << 20)),
    )
}

fn print_text(
    args: &BenchArgs,
    bench: &Bench,
    source: &str,
    runs: &[&RunReport],
    comparison: Option<Comparison>,
) {
    println!(
        "gatehouse bench: {}, {} request(s) from {source}, concurrency {}, {:.2} s after {:.2} s warm-up",
        args.module.display(),
        bench.requests().len(),
        bench.workers(),
        bench.measured_duration().as_secs_f64(),
        bench.warmup_duration().as_secs_f64(),
    );
    println!();
    println!(
        "{:<26} {:>9} {:>11} {:>10} {:>10} {:>10} {:>10} {:>13}",
        "runner", "reviews", "reviews/s", "p50 µs", "p90 µs", "p99 µs", "max µs", "peak RSS MiB"
    );
    for run in runs {
        let latency = |pick: fn(&gatehouse_bench::LatencySummary) -> Duration| {
            run.latency
                .as_ref()
                .map_or_else(|| "-".to_owned(), |latency| micros(pick(latency)))
        };
        let peak = match run.memory.hook_peak_rss {
            Some(_) => mib(run.memory.hook_peak_rss),
            None => mib(run.memory.peak_rss),
        };
        println!(
            "{:<26} {:>9} {:>11.1} {:>10} {:>10} {:>10} {:>10} {:>13}",
            run.runner.label(),
            run.reviews,
            run.reviews_per_sec,
            latency(|latency| latency.p50),
            latency(|latency| latency.p90),
            latency(|latency| latency.p99),
            latency(|latency| latency.max),
            peak,
        );
    }
    println!();
    for run in runs {
        let outcomes = OutcomeKind::ALL
            .iter()
            .filter(|&&kind| run.outcomes.get(kind) > 0 || kind == OutcomeKind::Failed)
            .map(|&kind| format!("{} {}", kind.name(), run.outcomes.get(kind)))
            .collect::<Vec<_>>()
            .join(", ");
        println!("{:<26} {outcomes}", run.runner.label());
        if !run.failures.is_empty() {
            let codes = run
                .failures
                .iter()
                .map(|(code, count)| format!("{code} {count}"))
                .collect::<Vec<_>>()
                .join(", ");
            println!("{:<26} FAILED: {codes}", "");
            if let Some(first) = &run.first_failure {
                // It quotes the module or the hook: escaped.
                println!("{:<26} first: {}", "", Escaped(first));
            }
        }
    }
    if let Some(comparison) = comparison {
        println!();
        println!(
            "hook / gatehouse: p50 {:.1}x, throughput {:.3}x (gatehouse does {:.1}x the hook's reviews/s)",
            comparison.p50_ratio,
            comparison.throughput_ratio,
            1.0 / comparison.throughput_ratio,
        );
    }
    println!();
    print_memory_notes(runs);
}

fn print_memory_notes(runs: &[&RunReport]) {
    for run in runs {
        let memory = &run.memory;
        match run.runner {
            gatehouse_bench::Runner::Gatehouse => {
                let scope = if memory.peak_covers_run {
                    "during its run"
                } else {
                    "over its lifetime (the peak could not be reset)"
                };
                println!(
                    "peak RSS, gatehouse: this process {scope} (VmHWM; {} idle before the run)",
                    size(memory.rss_before)
                );
                if memory.per_review_in_flight.is_some() {
                    println!(
                        "memory per review in flight, gatehouse (estimate): {} = (peak RSS with {} workers - with 1) / {}, in the warm-up",
                        size(memory.per_review_in_flight),
                        run.concurrency,
                        run.concurrency.saturating_sub(1)
                    );
                }
            }
            gatehouse_bench::Runner::ProcessHook => {
                println!(
                    "peak RSS, process hook: one hook process, sampled from /proc, shared libraries included (this process: {})",
                    size(memory.peak_rss)
                );
                if memory.per_review_in_flight.is_some() {
                    println!(
                        "memory per review in flight, process hook (estimate): {}, one process each",
                        size(memory.per_review_in_flight)
                    );
                }
            }
        }
    }
}

/// Bytes for people: KiB below 1 MiB, else MiB.
fn size(bytes: Option<u64>) -> String {
    match bytes {
        None => "-".to_owned(),
        Some(bytes) if bytes < 1 << 20 => format!("{:.0} KiB", bytes as f64 / 1024.0),
        Some(bytes) => format!("{:.1} MiB", bytes as f64 / f64::from(1 << 20)),
    }
}
