//! Argument parsing and dispatch. Each command lives in its own module and
//! returns the process exit code; errors are reported by `main`.

mod audit;
mod authoring_cache;
mod bench;
mod conformance;
mod console;
mod demo;
mod init;
mod inspect;
mod logging;
mod module_limits;
mod modules;
mod new;
mod plugins;
mod reload;
mod review;
mod serve;
mod status;
mod stop;
mod telemetry;
mod traces;

use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};

pub use logging::{LogFormat, init_tracing};

/// Review MCP elicitations with sandboxed WebAssembly components.
#[derive(Debug, Parser)]
#[command(name = "gatehouse", version, about)]
pub struct Cli {
    /// Log more (-v: debug, -vv: trace). Logs go to stderr; RUST_LOG overrides.
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    pub verbose: u8,
    /// How log lines look: text for people, or one JSON object per line for
    /// log collectors (text escaped the same way).
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    Review(review::ReviewArgs),
    Inspect(inspect::InspectArgs),
    Conformance(conformance::ConformanceArgs),
    Serve(serve::ServeArgs),
    Console(console::ConsoleArgs),
    Demo(demo::DemoArgs),
    Reload(reload::ReloadArgs),
    Status(status::StatusArgs),
    Bench(bench::BenchArgs),
    Plugins(plugins::PluginsArgs),
    New(new::NewArgs),
    Init(init::InitArgs),
    Audit(audit::AuditArgs),
    Modules(modules::ModulesArgs),
}

/// Where an installed `gatehouse` keeps the reference guests, relative to
/// the directory of the binary (`.ci/install-gatehouse` puts them there:
/// `PREFIX/bin/gatehouse` beside `PREFIX/share/gatehouse/guests`).
pub const INSTALLED_GUESTS: &str = "../share/gatehouse/guests";

/// The directory of the built reference guests: `flag` (`--guests`), else
/// `GATEHOUSE_GUESTS_DIR`, else `wasm32-wasip2/guest` in the target
/// directory this binary was built in, unless only [`INSTALLED_GUESTS`]
/// holds the guardian (an installed binary) (`gatehouse demo` and
/// `gatehouse init`). When neither does, the build tree's is named, with
/// how to build it.
pub fn guests_dir(flag: Option<std::path::PathBuf>) -> anyhow::Result<std::path::PathBuf> {
    use anyhow::Context as _;
    if let Some(dir) = flag.or_else(|| std::env::var_os("GATEHOUSE_GUESTS_DIR").map(Into::into)) {
        return Ok(dir);
    }
    let exe = std::env::current_exe().context("cannot tell where this binary is")?;
    let exe_dir = exe
        .parent()
        .map(std::path::Path::to_path_buf)
        .unwrap_or_default();
    let installed = exe_dir.join(INSTALLED_GUESTS);
    let built = exe_dir.join("../wasm32-wasip2/guest");
    Ok(
        if installed.join("gatehouse_guardian.wasm").is_file()
            && !built.join("gatehouse_guardian.wasm").is_file()
        {
            installed
        } else {
            built
        },
    )
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
            Command::Review(_)
            | Command::Inspect(_)
            | Command::Serve(_)
            | Command::Console(_)
            | Command::Reload(_)
            | Command::Status(_)
            | Command::Plugins(_)
            | Command::New(_)
            | Command::Init(_)
            | Command::Audit(_)
            | Command::Modules(_) => "warn",
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
        Command::Console(args) => console::run(args),
        Command::Demo(args) => demo::run(args),
        Command::Reload(args) => reload::run(args),
        Command::Status(args) => status::run(args),
        Command::Bench(args) => bench::run(args),
        Command::Plugins(args) => plugins::run(args),
        Command::New(args) => new::run(args),
        Command::Init(args) => init::run(args),
        Command::Audit(args) => audit::run(args),
        Command::Modules(args) => modules::run(args),
    }
}
