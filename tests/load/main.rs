//! `gatehouse-load`: mixed elicitations through `gatehouse serve` for a
//! while, then an audit of every answer and audit line (see
//! `gatehouse_tests::load`). Exits 1 when anything was lost, doubled or
//! answered unexpectedly.
//!
//! ```sh
//! .ci/build-guests && cargo build --release -p gatehouse -p gatehouse-example-servers
//! cargo run --release -p gatehouse-tests --bin gatehouse-load -- --duration 60 --workers 64
//! ```
//!
//! The soak (docs/BENCHMARKS.md, "Memory over time"): 60,000 calls over
//! HTTP, 8 sessions at a time, each closed after 500 calls:
//!
//! ```sh
//! target/release/gatehouse-load --http --calls-per-session 500 --workers 8 --calls 60000 --duration 3600
//! ```

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use gatehouse_tests::load::{LoadOptions, Transport, run};

/// Drive mixed elicitations through the gateway and check nothing is lost.
#[derive(Debug, Parser)]
struct Args {
    /// Seconds to send calls.
    #[arg(long, default_value_t = 60.0)]
    duration: f64,
    /// Calls in flight at once.
    #[arg(long, default_value_t = 64)]
    workers: usize,
    /// Stop after this many calls, if that comes before `--duration`.
    #[arg(long)]
    calls: Option<u64>,
    /// Serve over streamable HTTP on loopback, a session per worker, instead
    /// of one shared stdio session.
    #[arg(long)]
    http: bool,
    /// With `--http`: close each session after this many calls and open a
    /// new one.
    #[arg(long, requires = "http", value_parser = clap::value_parser!(u64).range(1..))]
    calls_per_session: Option<u64>,
    /// The gatehouse binary (default: beside this one).
    #[arg(long)]
    gatehouse: Option<PathBuf>,
    /// The demo-server binary (default: beside this one).
    #[arg(long)]
    demo_server: Option<PathBuf>,
    /// Where the guests are (default: the workspace's guest build).
    #[arg(long)]
    guests: Option<PathBuf>,
    /// Print the report as JSON.
    #[arg(long)]
    json: bool,
}

fn main() -> anyhow::Result<ExitCode> {
    let args = Args::parse();
    let beside = std::env::current_exe()?
        .parent()
        .map(PathBuf::from)
        .unwrap_or_default();
    let options = LoadOptions {
        gatehouse: args.gatehouse.unwrap_or_else(|| beside.join("gatehouse")),
        demo_server: args
            .demo_server
            .unwrap_or_else(|| beside.join("demo-server")),
        guests: args.guests.unwrap_or_else(gatehouse_tests::guests_dir),
        duration: Duration::from_secs_f64(args.duration.max(0.0)),
        workers: args.workers,
        max_calls: args.calls,
        transport: if args.http {
            Transport::Http {
                calls_per_session: args.calls_per_session,
            }
        } else {
            Transport::Stdio
        },
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let report = runtime.block_on(run(&options))?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        let (first, peak, last) = report.rss_mib();
        println!(
            "{:.1} s, {} workers, {} sessions: {} calls, {} elicitations ({:.0}/s), {} audit lines, {} audited twice",
            report.seconds,
            options.workers,
            report.sessions,
            report.calls,
            report.elicitations,
            report.elicitations_per_second,
            report.audit_lines,
            report.audited_twice
        );
        println!("gateway RSS: first {first:.1} MiB, peak {peak:.1} MiB, last {last:.1} MiB");
        let progress = report.rss_by_progress(&[0.1, 0.25, 0.5, 0.75, 1.0]);
        let progress: Vec<String> = progress
            .iter()
            .map(|(fraction, mib)| format!("{:.0} %: {mib:.1} MiB", fraction * 100.0))
            .collect();
        println!("gateway RSS by calls made: {}", progress.join(", "));
        for (name, count) in &report.scenarios {
            println!(
                "  {name:<28} {:>8} as expected, {:>6} declined unshown, {:>4} not",
                count.expected, count.unshown, count.unexpected
            );
        }
        println!("  decided by: {:?}", report.decided_by);
    }
    let problems = report.problems();
    for problem in &problems {
        eprintln!("problem: {problem}");
    }
    Ok(if problems.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
