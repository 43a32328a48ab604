//! Argument parsing and dispatch. Each command lives in its own module and
//! returns the process exit code; errors are reported by `main`.

mod bench;
mod conformance;
mod demo;
mod inspect;
mod reload;
mod review;
mod serve;

use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};

/// Review MCP elicitations with sandboxed WebAssembly components.
#[derive(Debug, Parser)]
#[command(name = "gatehouse", version, about)]
pub struct Cli {
    /// Log more (-v: debug, -vv: trace). Logs go to stderr; RUST_LOG overrides.
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    pub verbose: u8,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    Review(review::ReviewArgs),
    Inspect(inspect::InspectArgs),
    Conformance(conformance::ConformanceArgs),
    Serve(serve::ServeArgs),
    Demo(demo::DemoArgs),
    Reload(reload::ReloadArgs),
    Bench(bench::BenchArgs),
}

/// How results are printed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Format {
    /// For people.
    Text,
    /// One JSON document per result, for tools.
    Json,
}

impl Cli {
    /// The log level when no -v is given: the conformance kit provokes
    /// failures on purpose, so it logs errors only.
    pub fn quiet_level(&self) -> &'static str {
        match self.command {
            Command::Conformance(_) => "error",
            Command::Review(_) | Command::Inspect(_) | Command::Serve(_) | Command::Reload(_) => {
                "warn"
            }
            Command::Demo(_) => "error",
            // Failed reviews are counted in the report, not logged one by one.
            Command::Bench(_) => "error",
        }
    }
}

/// Runs the parsed command.
pub fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.command {
        Command::Review(args) => review::run(args),
        Command::Inspect(args) => inspect::run(args),
        Command::Conformance(args) => conformance::run(args),
        Command::Serve(args) => serve::run(args),
        Command::Demo(args) => demo::run(args),
        Command::Reload(args) => reload::run(args),
        Command::Bench(args) => bench::run(args),
    }
}

/// Logs to stderr at `quiet` (or more with -v); `RUST_LOG` overrides.
pub fn init_tracing(verbose: u8, quiet: &str) {
    let default = match verbose {
        0 => quiet,
        1 => "debug",
        _ => "trace",
    };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
}
