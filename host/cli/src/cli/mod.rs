//! Argument parsing and dispatch. Each command lives in its own module and
//! returns the process exit code; errors are reported by `main`.

mod audit;
mod bench;
mod conformance;
mod console;
mod demo;
mod init;
mod inspect;
mod module_limits;
mod modules;
mod new;
mod plugins;
mod reload;
mod review;
mod serve;
mod stop;

use std::fmt::{self, Write as _};
use std::io::IsTerminal;
use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};
use gatehouse_core::escape::EscapeWriter;
use tracing::field::{Field, Visit};
use tracing_subscriber::field::RecordFields;
use tracing_subscriber::fmt::FormatFields;
use tracing_subscriber::fmt::format::Writer;

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
    Console(console::ConsoleArgs),
    Demo(demo::DemoArgs),
    Reload(reload::ReloadArgs),
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
        Command::Bench(args) => bench::run(args),
        Command::Plugins(args) => plugins::run(args),
        Command::New(args) => new::run(args),
        Command::Init(args) => init::run(args),
        Command::Audit(args) => audit::run(args),
        Command::Modules(args) => modules::run(args),
    }
}

/// Logs to stderr at `quiet` (or more with -v); `RUST_LOG` overrides.
/// Colours only when stderr is a terminal; every field escaped
/// ([`EscapedFields`]).
///
/// Keep the returned guard until the program ends: dropping it flushes
/// what is still queued.
pub fn init_tracing(verbose: u8, quiet: &str) -> tracing_appender::non_blocking::WorkerGuard {
    let default = match verbose {
        0 => quiet,
        1 => "debug",
        _ => "trace",
    };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    // Logging never blocks the code that logs: lines go through a bounded
    // queue to a thread that writes stderr, and are dropped (and counted)
    // when it is full. Under `gatehouse serve` on stdio, stderr is a pipe
    // the client may stop reading; a blocking write there would hold a
    // guest's review (a guest log is written inside its host call) past its
    // deadline and stall every thread that logs.
    let (writer, guard) = tracing_appender::non_blocking::NonBlockingBuilder::default()
        .lossy(true)
        .thread_name("gatehouse-log")
        .finish(std::io::stderr());
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(writer)
        .with_ansi(std::io::stderr().is_terminal())
        .fmt_fields(EscapedFields)
        .init();
    guard
}

/// Writes an event's fields like tracing's default (the message, then
/// `name=value`), each escaped with [`EscapeWriter`]. The call sites escape
/// what they know comes from a guest, a server or a manifest; this is the
/// backstop for what they do not know, such as our dependencies' own logs
/// (rmcp quoting a server's bytes). Escaping is idempotent, so text escaped
/// at its call site passes through unchanged.
struct EscapedFields;

impl<'writer> FormatFields<'writer> for EscapedFields {
    fn format_fields<R: RecordFields>(&self, writer: Writer<'writer>, fields: R) -> fmt::Result {
        let mut visitor = EscapingVisitor {
            writer,
            result: Ok(()),
            first: true,
        };
        fields.record(&mut visitor);
        visitor.result
    }
}

struct EscapingVisitor<'writer> {
    writer: Writer<'writer>,
    result: fmt::Result,
    first: bool,
}

impl Visit for EscapingVisitor<'_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            self.record_debug(field, &format_args!("{value}"));
        } else {
            self.record_debug(field, &value);
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        let name = field.name();
        // `log` records' metadata, which the formatter has shown already.
        if self.result.is_err() || name.starts_with("log.") {
            return;
        }
        if !std::mem::take(&mut self.first) {
            self.result = self.writer.write_char(' ');
        }
        let mut out = EscapeWriter(&mut self.writer);
        self.result = self.result.and_then(|()| match name {
            "message" => write!(out, "{value:?}"),
            name => write!(out, "{}={value:?}", name.strip_prefix("r#").unwrap_or(name)),
        });
    }
}
