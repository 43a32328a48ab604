//! `gatehouse-embed`: gatehouse-core inside a program of its own, the way an
//! agent, an IDE or a CI runner embeds it to review MCP elicitations with a
//! reviewer plugin it loads itself. No MCP client, no config file format:
//! the program gets an `elicitation/create` request from somewhere (here a
//! file or stdin) and knows which server sent it.
//!
//! ```text
//! gatehouse-embed REVIEWER.wasm [REQUEST.json | -] [--server NAME] [--config JSON]
//! ```
//!
//! See README.md beside this file for the input and the output.

use std::error::Error;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use gatehouse_core::chain::{Chain, ChainLink, ChainReport, Verdict};
use gatehouse_core::context::ReviewContext;
use gatehouse_core::elicitation::{ElicitationParams, RequestId};
use gatehouse_core::escape::{Escaped, to_json_string};
use gatehouse_core::request::ReviewRequest;
use gatehouse_core::sandbox::{Limits, Sandbox};

const USAGE: &str =
    "usage: gatehouse-embed REVIEWER.wasm [REQUEST.json | -] [--server NAME] [--config JSON]

Reviews one MCP elicitation/create request with a reviewer component and
prints the decision and the MCP answer.

  REVIEWER.wasm   a reviewer component (wasm32-wasip2, gatehouse:reviewer)
  REQUEST.json    the elicitation/create request as the server sent it (the
                  whole JSON-RPC message, or its params); stdin when absent or -
  --server NAME   the name of the server that sent it (default: server)
  --config JSON   the reviewer's configuration (default: {})";

/// The command line.
struct Args {
    module: PathBuf,
    /// `None` reads the request from stdin.
    request: Option<PathBuf>,
    server: String,
    config: String,
}

fn main() -> ExitCode {
    let args = match parse_args(std::env::args().skip(1)) {
        Ok(Some(args)) => args,
        Ok(None) => {
            println!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Err(message) => {
            eprintln!("gatehouse-embed: {message}\n\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            // gatehouse-core's errors name the file, field or module and say
            // what to do; they are worth showing as they are.
            eprintln!("gatehouse-embed: {error}");
            ExitCode::FAILURE
        }
    }
}

fn run(args: &Args) -> Result<(), Box<dyn Error>> {
    // Once per process: the sandbox (one wasmtime engine, its instance pool
    // and deadline thread), sized and bounded by the limits. Share it; every
    // module loaded into it runs under these limits.
    let sandbox = Sandbox::new(Limits::default())?;

    // Load the reviewer: compiled, checked against the contract, ready to
    // instantiate. Pass `Some(sha256)` instead of `None` to refuse any other
    // build of it than the one you vetted.
    let reviewer = sandbox.load_file(&args.module, None)?;

    // The chain: policies first, the reviewer last; here just one module,
    // with its configuration (JSON text). A failing module declines (fails
    // closed) unless its link says `OnFailure::Defer`.
    let chain = Chain::new(vec![
        ChainLink::new(reviewer).with_config(args.config.clone()),
    ]);

    // Per elicitation: what the server sent, and what the host knows (which
    // server, the request's id, the approval settings in force).
    let (params, id) = read_request(args.request.as_deref())?;
    let context = ReviewContext::new(args.server.clone(), id.unwrap_or(RequestId::Number(0)));
    let request = ReviewRequest::new(params, context);

    // The review: each module in a fresh instance, its outcome checked
    // against the request before it counts. It never panics on what a
    // module does; a misbehaving one is a failure in the report.
    let report = chain.review(&request);
    print_report(&report)
}

/// Reads the request: a whole JSON-RPC `elicitation/create` message (its id
/// is the request id) or just its params, from `path` or stdin.
fn read_request(
    path: Option<&Path>,
) -> Result<(ElicitationParams, Option<RequestId>), Box<dyn Error>> {
    let (origin, text) = match path {
        Some(path) => (
            path.display().to_string(),
            std::fs::read_to_string(path)
                .map_err(|error| format!("{}: cannot read the request: {error}", path.display()))?,
        ),
        None => {
            let mut text = String::new();
            std::io::stdin()
                .read_to_string(&mut text)
                .map_err(|error| format!("cannot read the request from stdin: {error}"))?;
            ("stdin".to_owned(), text)
        }
    };
    let value: serde_json::Value = serde_json::from_str(&text)
        .map_err(|error| format!("{origin}: the request is not valid JSON: {error}"))?;
    // Refuses what MCP does not allow (a nested schema, a URL that is not
    // http(s), ...), naming the field.
    Ok(ElicitationParams::from_captured(&value).map_err(|error| format!("{origin}: {error}"))?)
}

/// Prints what was decided, by whom and why, and the MCP answer to send
/// back. Module names, rationales and messages come from the module: they
/// are escaped before they reach the terminal.
fn print_report(report: &ChainReport) -> Result<(), Box<dyn Error>> {
    let module = report.deciding_step().map_or("-", |step| &*step.module);
    match &report.verdict {
        Verdict::Decided { outcome, .. } => {
            println!("decision:  {}", outcome.decision.name());
            println!("module:    {}", Escaped(module));
            if let Some(risk) = outcome.risk {
                println!("risk:      {}", format!("{risk:?}").to_lowercase());
            }
            if let Some(rationale) = &outcome.rationale {
                println!("rationale: {}", Escaped(rationale));
            }
        }
        Verdict::Failed { failure, .. } => {
            // The answer is the fail-closed decline.
            println!("decision:  failed ({})", failure.code());
            println!("module:    {}", Escaped(module));
            println!("rationale: {}", Escaped(&failure.to_string()));
        }
        Verdict::Deferred => {
            println!("decision:  defer (every module deferred: ask the person)");
        }
    }
    match report.answer() {
        // `to_json_string` escapes control characters inside JSON strings, so
        // the JSON stays valid and means the same.
        Some(answer) => println!("answer:    {}", to_json_string(&answer.to_wire())?),
        None => println!("answer:    none"),
    }
    Ok(())
}

/// Parses the command line by hand; `Ok(None)` for `--help`.
fn parse_args(args: impl Iterator<Item = String>) -> Result<Option<Args>, String> {
    let mut args = args;
    let mut positional = Vec::new();
    let mut server = "server".to_owned();
    let mut config = "{}".to_owned();
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "-h" | "--help" => return Ok(None),
            "--server" => server = args.next().ok_or("--server needs a server name")?,
            "--config" => {
                let text = args
                    .next()
                    .ok_or("--config needs the reviewer's JSON configuration")?;
                // A module gets its configuration as JSON text; check it here
                // rather than let the module refuse it at every review.
                serde_json::from_str::<serde_json::Value>(&text)
                    .map_err(|error| format!("--config is not valid JSON: {error}"))?;
                config = text;
            }
            "-" => positional.push(arg),
            flag if flag.starts_with('-') => return Err(format!("unknown option {flag}")),
            _ => positional.push(arg),
        }
    }
    let mut positional = positional.into_iter();
    let module = positional
        .next()
        .ok_or("give the reviewer component (REVIEWER.wasm)")?;
    let request = positional.next().filter(|path| path != "-");
    if let Some(extra) = positional.next() {
        return Err(format!("unexpected argument {extra}"));
    }
    Ok(Some(Args {
        module: PathBuf::from(module),
        request: request.map(PathBuf::from),
        server,
        config,
    }))
}
