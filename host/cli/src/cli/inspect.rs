//! `gatehouse inspect M.wasm`.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use gatehouse_core::escape::Escaped;
use gatehouse_core::inspect::{Inspection, host_contract, inspect_with};
use gatehouse_core::sandbox::Sandbox;

use super::Format;

/// Show what a component is: contract version, imports, exports, size,
/// sha256, pool resources, and whether it loads as a reviewer. Exits 0 when
/// it does, 1 when it does not.
#[derive(Debug, clap::Args)]
pub struct InspectArgs {
    /// The component file.
    module: PathBuf,
    /// The module's own limits, as a [[review.modules]] entry's `limits`
    /// give them: `describe()` runs under them.
    #[command(flatten)]
    limits: super::module_limits::ModuleLimitsArgs,
    #[command(flatten)]
    compile_cache: super::authoring_cache::AuthoringCacheArgs,
    /// Output format.
    #[arg(long, value_enum, default_value = "text")]
    format: Format,
}

pub fn run(args: InspectArgs) -> anyhow::Result<ExitCode> {
    let bytes = std::fs::read(&args.module)
        .with_context(|| format!("{}: cannot read the module", args.module.display()))?;
    let sandbox = args
        .compile_cache
        .apply(Sandbox::builder().limits(args.limits.sandbox_limits()))
        .build()?;
    let report = inspect_with(
        &sandbox,
        &args.module.display().to_string(),
        &bytes,
        &args.limits.to_module_limits(),
    )?;
    match args.format {
        Format::Json => println!(
            "{}",
            gatehouse_core::escape::to_json_string_pretty(&report)?
        ),
        Format::Text => {
            print_text(&report);
            print_compiled(&sandbox);
        }
    }
    Ok(if report.reviewer.is_ok() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// Prints how the module was compiled: taken from the compile cache,
/// compiled and stored there (and how many of its functions earlier
/// compiles had compiled already), or compiled in memory.
fn print_compiled(sandbox: &Sandbox) {
    let counts = sandbox.compile_counts();
    let dir = sandbox
        .compile_cache_dir()
        .map(|dir| Escaped(&dir.display().to_string()).to_string());
    match dir {
        Some(dir) if counts.compiled > 0 => {
            println!("compiled  now, and kept in {dir}");
            if counts.functions_reused > 0 {
                println!(
                    "functions {} of {} taken from earlier compiles in the cache",
                    counts.functions_reused,
                    counts.functions_reused + counts.functions_compiled
                );
            }
        }
        Some(dir) if counts.hits > 0 => println!("compiled  taken from the compile cache {dir}"),
        _ if counts.in_memory > 0 => println!("compiled  now, in memory (no compile cache)"),
        _ => {}
    }
}

/// Prints the report for people. What `describe()` returned and the
/// component's own names come from the module: every piece is escaped.
fn print_text(report: &Inspection) {
    println!("module    {}", Escaped(&report.source));
    println!("size      {} bytes", report.size);
    println!("sha256    {}", report.sha256);
    println!(
        "contract  {} (host implements {})",
        Escaped(report.contract_version.as_deref().unwrap_or("none")),
        host_contract()
    );
    if let Some(world) = report.world {
        let needs = match world {
            gatehouse_core::contract::World::ModelReviewer => {
                " (asks a model: needs `model = \"NAME\"` in its [[review.modules]] entry)"
            }
            gatehouse_core::contract::World::Reviewer => "",
        };
        println!("world     {world}{needs}");
    }
    match &report.reviewer {
        Ok(info) => println!(
            "reviewer  {} {} claims [{}]",
            Escaped(&info.name),
            Escaped(&info.version),
            Escaped(&info.claims.join(", "))
        ),
        Err(error) => println!("reviewer  NOT LOADABLE: {}", Escaped(error)),
    }
    if let Some(resources) = &report.resources {
        println!(
            "needs     {} memories (initial {} bytes), {} tables, {} core instances",
            resources.memories,
            resources
                .initial_memory_bytes
                .map_or_else(|| "?".to_owned(), |bytes| bytes.to_string()),
            resources.tables,
            resources
                .core_instances
                .map_or_else(|| "?".to_owned(), |count| count.to_string()),
        );
    }
    println!("exports");
    for export in &report.exports {
        println!("  {}", Escaped(export));
    }
    println!("imports");
    for import in &report.imports {
        println!("  {}", Escaped(import));
    }
}
