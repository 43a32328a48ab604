//! `gatehouse plugins`: the MCP servers discovered in the capability roots,
//! whether each runs, and the operator's trust in them.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, bail};
use gatehouse_base::escape::Escaped;
use gatehouse_gateway::source::{ConfigSource, PluginReport};
use gatehouse_mcp::discovery::{PluginStatus, TrustMode, TrustState, TrustStore};
use gatehouse_mcp::server_config::Transport;
use serde_json::{Value, json};

use super::Format;

/// Review and trust the MCP servers discovered in `[capabilities]` roots.
/// With `trust = "ask"` (the default) a discovered server runs only after
/// `gatehouse plugins trust` recorded the sha256 of its manifest in
/// `gatehouse-trust.toml` beside the config; a changed manifest needs
/// trusting again. A running `gatehouse serve` picks trust changes up at its
/// next refresh.
#[derive(Debug, clap::Args)]
pub struct PluginsArgs {
    #[command(subcommand)]
    command: PluginsCommand,
}

#[derive(Debug, clap::Subcommand)]
enum PluginsCommand {
    List(ListArgs),
    Trust(TrustArgs),
    Untrust(UntrustArgs),
}

/// The config whose roots are searched.
#[derive(Debug, clap::Args)]
struct ConfigArg {
    /// The config file (`[capabilities]`).
    #[arg(long, value_name = "gatehouse.toml")]
    config: PathBuf,
}

/// Show every discovered server: name, root, manifest, the manifest's
/// sha256, its trust state (trusted, new, changed), what it would run, and
/// whether it runs (and why not).
#[derive(Debug, clap::Args)]
struct ListArgs {
    #[command(flatten)]
    config: ConfigArg,
    /// Text for people, or one JSON document.
    #[arg(long, value_enum, default_value = "text")]
    format: Format,
}

/// Trust discovered servers as their manifests are now: records each one's
/// root, manifest and the manifest's sha256 in the trust file. Review them
/// with `gatehouse plugins list` first.
#[derive(Debug, clap::Args)]
struct TrustArgs {
    #[command(flatten)]
    config: ConfigArg,
    /// The servers, as `gatehouse plugins list` names them.
    #[arg(value_name = "NAME", required_unless_present = "all")]
    names: Vec<String>,
    /// Every discovered server not seen before (state `new`). A server whose
    /// trusted manifest changed is left out: review it and trust it by name,
    /// or add `--include-changed`.
    #[arg(long, conflicts_with_all = ["names", "sha256"])]
    all: bool,
    /// With `--all`, also trust servers whose manifest changed since it was
    /// trusted.
    #[arg(long, requires = "all")]
    include_changed: bool,
    /// Trust only if the manifest's sha256 is still this (the one you
    /// reviewed in `gatehouse plugins list`); for one NAME.
    #[arg(long, value_name = "HEX")]
    sha256: Option<String>,
}

/// Forget servers in the trust file: they stop running at the next refresh.
#[derive(Debug, clap::Args)]
struct UntrustArgs {
    #[command(flatten)]
    config: ConfigArg,
    /// The servers, as the trust file names them.
    #[arg(value_name = "NAME", required = true)]
    names: Vec<String>,
}

pub fn run(args: PluginsArgs) -> anyhow::Result<ExitCode> {
    match args.command {
        PluginsCommand::List(args) => list(&args),
        PluginsCommand::Trust(args) => trust(&args),
        PluginsCommand::Untrust(args) => untrust(&args),
    }
}

fn report(config: &Path) -> anyhow::Result<PluginReport> {
    ConfigSource::new(config)
        .plugins()
        .context("cannot list the discovered plugins")
}

fn list(args: &ListArgs) -> anyhow::Result<ExitCode> {
    let config = &args.config.config;
    let report = report(config)?;
    match args.format {
        Format::Json => println!(
            "{}",
            serde_json::to_string_pretty(&json_report(config, &report))?
        ),
        Format::Text => print_text(config, &report),
    }
    Ok(ExitCode::SUCCESS)
}

fn trust(args: &TrustArgs) -> anyhow::Result<ExitCode> {
    let config = &args.config.config;
    let PluginReport {
        mode,
        mut store,
        plugins,
    } = report(config)?;
    let chosen: Vec<&PluginStatus> = if args.all {
        plugins
            .iter()
            .filter(|status| match status.state {
                TrustState::Trusted => false,
                TrustState::New => true,
                TrustState::Changed => args.include_changed,
            })
            .collect()
    } else {
        if args.sha256.is_some() && args.names.len() != 1 {
            bail!("--sha256 checks one server: name exactly one");
        }
        let mut chosen = Vec::new();
        for name in &args.names {
            let Some(status) = plugins.iter().find(|status| &status.server.name == name) else {
                bail!(
                    "no discovered plugin server is named `{}` under the roots of {}; `gatehouse plugins list --config {}` shows the names{}",
                    Escaped(name),
                    Escaped(&config.display().to_string()),
                    Escaped(&config.display().to_string()),
                    known(&plugins)
                );
            };
            if let Some(expected) = &args.sha256
                && !expected.eq_ignore_ascii_case(&status.server.sha256)
            {
                bail!(
                    "{}: its manifest {} has sha256 {} now, not {}: it changed since you reviewed it; review it again with `gatehouse plugins list`",
                    Escaped(name),
                    Escaped(&status.server.source.display().to_string()),
                    status.server.sha256,
                    Escaped(expected)
                );
            }
            chosen.push(status);
        }
        chosen
    };
    if chosen.is_empty() {
        println!("nothing to trust: every discovered server is trusted already");
        return Ok(ExitCode::SUCCESS);
    }
    for status in &chosen {
        store.trust(&status.server);
    }
    store.save()?;
    for status in &chosen {
        println!(
            "trusted {} (sha256 {}): {}",
            Escaped(&status.server.name),
            status.server.sha256,
            runs_what(status)
        );
        for refusal in &status.refused {
            println!("  it still does not run: {}", Escaped(&refusal.to_string()));
        }
    }
    if mode == TrustMode::All {
        println!("note: `[capabilities] trust = \"all\"` runs every discovered server anyway");
    }
    println!(
        "recorded in {}",
        Escaped(&store.path().display().to_string())
    );
    Ok(ExitCode::SUCCESS)
}

fn untrust(args: &UntrustArgs) -> anyhow::Result<ExitCode> {
    let config = gatehouse_gateway::config::Config::load(&args.config.config)?;
    let mut store = TrustStore::load(config.trust_file())?;
    for name in &args.names {
        if !store.untrust(name) {
            let names: Vec<String> = store
                .records()
                .keys()
                .map(|name| format!("`{}`", Escaped(name)))
                .collect();
            bail!(
                "`{}` is not in the trust file {}{}",
                Escaped(name),
                Escaped(&store.path().display().to_string()),
                if names.is_empty() {
                    " (it trusts nothing)".to_owned()
                } else {
                    format!(" (it trusts {})", names.join(", "))
                }
            );
        }
    }
    store.save()?;
    for name in &args.names {
        println!("untrusted {}", Escaped(name));
    }
    Ok(ExitCode::SUCCESS)
}

/// The discovered names, for an error about an unknown one.
fn known(plugins: &[PluginStatus]) -> String {
    if plugins.is_empty() {
        return " (none was discovered)".to_owned();
    }
    let names: Vec<String> = plugins
        .iter()
        .map(|status| format!("`{}`", Escaped(&status.server.name)))
        .collect();
    format!(" (discovered: {})", names.join(", "))
}

/// What the server would run, escaped: the command and its arguments, or
/// the URL.
fn runs_what(status: &PluginStatus) -> String {
    match &status.server.config.transport {
        Transport::Stdio { command, args, .. } => std::iter::once(command)
            .chain(args)
            .map(|part| Escaped(part).to_string())
            .collect::<Vec<_>>()
            .join(" "),
        Transport::Http { url, .. } => format!("HTTP {}", Escaped(url)),
    }
}

/// Why a server does not run, or `None` when it does.
fn why_not(status: &PluginStatus, mode: TrustMode) -> Option<String> {
    if status.runs {
        return None;
    }
    if status.shadowed {
        return Some("a configured server has this name".to_owned());
    }
    let mut why: Vec<String> = status
        .refused
        .iter()
        .map(|refusal| format!("`{}` refused", refusal.field))
        .collect();
    if mode == TrustMode::Ask && status.state != TrustState::Trusted {
        why.push(format!("{} (not trusted)", status.state.name()));
    }
    Some(why.join(", "))
}

fn print_text(config: &Path, report: &PluginReport) {
    let config_text = config.display().to_string();
    println!(
        "trust = \"{}\"; trust file {}",
        report.mode.name(),
        Escaped(&report.store.path().display().to_string())
    );
    if report.plugins.is_empty() {
        println!("no plugin servers discovered");
        return;
    }
    let mut untrusted = false;
    for status in &report.plugins {
        let server = &status.server;
        let runs = match why_not(status, report.mode) {
            None => "runs".to_owned(),
            Some(why) => format!("does not run: {why}"),
        };
        println!();
        println!(
            "{}  {}  ({runs})",
            Escaped(&server.name),
            status.state.name()
        );
        println!(
            "  root      {} ({}){}",
            Escaped(&server.root),
            Escaped(&status.root_path.display().to_string()),
            if status.root_trusted {
                ", trusted = true"
            } else {
                ""
            }
        );
        println!(
            "  manifest  {}",
            Escaped(&server.source.display().to_string())
        );
        println!("  sha256    {}", server.sha256);
        match &server.config.transport {
            Transport::Stdio { cwd, env, .. } => {
                println!("  command   {}", runs_what(status));
                if let Some(cwd) = cwd {
                    println!("  cwd       {}", Escaped(&cwd.display().to_string()));
                }
                if !env.is_empty() {
                    let names: Vec<String> =
                        env.keys().map(|name| Escaped(name).to_string()).collect();
                    println!("  env       {}", names.join(" "));
                }
            }
            Transport::Http { url, .. } => println!("  url       {}", Escaped(url)),
        }
        for refusal in &status.refused {
            println!("  refused   {}", Escaped(&refusal.to_string()));
        }
        untrusted |= status.state != TrustState::Trusted;
    }
    if untrusted && report.mode == TrustMode::Ask {
        println!();
        println!(
            "trust one after reviewing it: gatehouse plugins trust NAME --config {}",
            Escaped(&config_text)
        );
    }
}

fn json_report(config: &Path, report: &PluginReport) -> Value {
    let plugins: Vec<Value> = report
        .plugins
        .iter()
        .map(|status| {
            let server = &status.server;
            let transport = match &server.config.transport {
                Transport::Stdio {
                    command,
                    args,
                    cwd,
                    env,
                    ..
                } => json!({
                    "type": "stdio",
                    "command": command,
                    "args": args,
                    "cwd": cwd.as_deref().map(text),
                    "env": env.keys().collect::<Vec<_>>(),
                }),
                Transport::Http { url, .. } => json!({ "type": "http", "url": url }),
            };
            json!({
                "name": server.name,
                "plugin": server.plugin,
                "root": server.root,
                "root_path": text(&status.root_path),
                "root_trusted": status.root_trusted,
                "manifest": text(&server.source),
                "sha256": server.sha256,
                "state": status.state.name(),
                "runs": status.runs,
                "shadowed": status.shadowed,
                "refused": status.refused.iter().map(|refusal| json!({
                    "field": refusal.field,
                    "reason": refusal.to_string(),
                })).collect::<Vec<_>>(),
                "transport": transport,
            })
        })
        .collect();
    json!({
        "config": text(config),
        "trust": report.mode.name(),
        "trust_file": text(report.store.path()),
        "plugins": plugins,
    })
}

/// A path as JSON text (lossy: a path that is not UTF-8 cannot be JSON).
fn text(path: &Path) -> String {
    path.to_string_lossy().into_owned()
}
