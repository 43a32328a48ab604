//! `gatehouse conformance M.wasm`.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::ValueEnum;
use gatehouse_conformance::cases;
use gatehouse_conformance::model::ModelScript;
use gatehouse_conformance::{Kit, Suite};

/// Prove a module honours the reviewer contract: runs the suites and prints
/// case, expected, got, pass/fail and time. Exits 0 when every check holds,
/// 2 when any fails, 1 on bad input.
#[derive(Debug, clap::Args)]
pub struct ConformanceArgs {
    /// The component file.
    module: PathBuf,
    /// Which suites: `contract` (every reviewer), `guardian` (Codex's
    /// Guardian behaviour), `model` (a model-reviewer fails closed when its
    /// model fails), or `all` (contract, guardian when the module claims
    /// `guardian-compatible`, model when it is a model-reviewer, and
    /// --cases).
    #[arg(long, value_enum, default_value = "all")]
    suite: SuiteArg,
    /// A directory of your own case files (see host/conformance/suites/README.md).
    #[arg(long, value_name = "DIR")]
    cases: Option<PathBuf>,
    /// Module configuration for the contract and model suites (JSON text or
    /// @FILE).
    #[arg(long, value_name = "JSON|@FILE")]
    module_config: Option<String>,
    /// The model a model-reviewer is granted in the contract, guardian and
    /// --cases suites (the model suite scripts its own):
    /// `stub:allow|deny|error|timeout|malformed|rejected|rate-limited|cancelled`,
    /// or `script:PATH`, a JSON list of {"answer": "TEXT"} or
    /// {"error": "timeout|transient|rate-limited|rejected|cancelled"} steps,
    /// used in order, the last repeated, from the start for each review.
    /// Default `stub:error` (a provider that is down). The kit never reaches
    /// a real model.
    #[arg(long, value_name = "stub:MODE|script:PATH")]
    model: Option<String>,
    /// The module's own limits, as a [[review.modules]] entry's `limits`
    /// give them: prove it as it will run.
    #[command(flatten)]
    limits: super::module_limits::ModuleLimitsArgs,
    #[command(flatten)]
    compile_cache: super::authoring_cache::AuthoringCacheArgs,
    /// Output format.
    #[arg(long, value_enum, default_value = "text")]
    format: FormatArg,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum SuiteArg {
    Contract,
    Guardian,
    Model,
    All,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum FormatArg {
    Text,
    Json,
    Junit,
}

/// Exit code when a check failed.
const CHECK_FAILED: u8 = 2;

pub fn run(args: ConformanceArgs) -> anyhow::Result<ExitCode> {
    let bytes = std::fs::read(&args.module)
        .with_context(|| format!("{}: cannot read the module", args.module.display()))?;
    let extra = match &args.cases {
        Some(dir) => cases::load_dir(dir)?,
        None => Vec::new(),
    };
    if args.cases.is_some() && extra.is_empty() {
        anyhow::bail!(
            "{}: no *.json case files",
            args.cases
                .as_deref()
                .unwrap_or_else(|| std::path::Path::new(""))
                .display()
        );
    }
    // The kit's two sandboxes share one compilation: through the author's
    // cache, which `inspect` and later runs on the same build share too, or
    // (--no-compile-cache) a private one that lives as long as this run.
    let builder = gatehouse_core::sandbox::Sandbox::builder().limits(args.limits.sandbox_limits());
    let (builder, _run_cache) = match args.compile_cache.dir() {
        Some(dir) => (super::authoring_cache::bounded(builder, dir), None),
        None => {
            let cache = tempfile::Builder::new()
                .prefix("gatehouse-conformance-")
                .tempdir()
                .context("cannot create a temporary directory for compiled modules")?;
            (
                builder.compile_cache(cache.path().join("compiled")),
                Some(cache),
            )
        }
    };
    let mut kit = Kit::from_builder(builder)?.with_module_limits(args.limits.to_module_limits());
    if let Some(config) = &args.module_config {
        kit = kit.with_module_config(super::review::module_config(config)?);
    }
    if let Some(spec) = &args.model {
        kit = kit.with_model(ModelScript::from_spec(spec)?);
    }
    let suite = match args.suite {
        SuiteArg::Contract => Suite::Contract,
        SuiteArg::Guardian => Suite::Guardian,
        SuiteArg::Model => Suite::Model,
        SuiteArg::All => Suite::All,
    };
    let report = kit.run(&args.module.display().to_string(), &bytes, suite, &extra);
    match args.format {
        FormatArg::Text => print!("{}", report.to_text()),
        FormatArg::Json => println!(
            "{}",
            gatehouse_core::escape::to_json_string_pretty(&report)?
        ),
        FormatArg::Junit => println!("{}", report.to_junit()),
    }
    Ok(if report.passed() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(CHECK_FAILED)
    })
}
