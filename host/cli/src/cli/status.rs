//! `gatehouse status`: what each running `gatehouse serve` on a config is
//! doing, asked through its control socket.

use std::path::PathBuf;
use std::process::ExitCode;

use gatehouse_base::escape::Escaped;
use gatehouse_gateway::config::Config;
use serde_json::{Value, json};

use super::Format;

/// Show what every `gatehouse serve` running with this config (or the one
/// `--instance` names) is doing: its chain (modules with their sha256 and
/// signer, live or shadow, whether the conformance kit checked them, the
/// last swap), its backends (connected with their tools, failed with why,
/// starting) and the elicitations in flight. Asked through the control
/// sockets, as `gatehouse reload` is, so only of this user's servers. Exits
/// 0 when every instance answered, 1 otherwise or when none is running.
#[derive(Debug, clap::Args)]
pub struct StatusArgs {
    /// The config file the servers run with.
    #[arg(long, value_name = "gatehouse.toml")]
    config: PathBuf,
    /// Only this instance (the id `gatehouse serve` prints at start).
    #[arg(long, value_name = "ID", value_parser = super::reload::instance_id)]
    instance: Option<String>,
    /// Text for people, or one JSON document (`instances`, each as its
    /// server reported it; `gone`, the instances found dead).
    #[arg(long, value_enum, default_value = "text")]
    format: Format,
}

pub fn run(args: StatusArgs) -> anyhow::Result<ExitCode> {
    let config = Config::load(&args.config)?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let answers = runtime.block_on(gatehouse_gateway::control::request_each(
        &config.control_dir(),
        gatehouse_gateway::control::Request::Status,
        args.instance.as_deref(),
    ))?;
    if answers.answers.is_empty() {
        anyhow::bail!(
            "no gatehouse serve is running with {} (no live control socket in {})",
            args.config.display(),
            config.control_dir().display()
        );
    }
    let mut all_answered = true;
    let mut instances = Vec::new();
    for (instance, outcome) in &answers.answers {
        let status = match outcome {
            Ok(line) => serde_json::from_str::<Value>(line)
                .unwrap_or_else(|_| json!({"instance": instance, "error": line})),
            Err(error) => json!({"instance": instance, "error": error.to_string()}),
        };
        all_answered &= status.get("error").is_none();
        instances.push(status);
    }
    match args.format {
        Format::Json => println!("{}", json!({"instances": instances, "gone": answers.stale})),
        Format::Text => {
            for instance in &answers.stale {
                println!("instance {instance}: gone (killed?); its socket was removed");
            }
            for status in &instances {
                print_text(status);
            }
        }
    }
    Ok(if all_answered {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// One instance's status for people; every string from the status escaped
/// (module names and backends' errors come from configs and servers).
fn print_text(status: &Value) {
    let text = |value: &Value| Escaped(value.as_str().unwrap_or("")).to_string();
    if let Some(error) = status.get("error") {
        println!(
            "instance {}: error: {}",
            text(&status["instance"]),
            text(error)
        );
        return;
    }
    println!(
        "instance {} (pid {}): {}",
        text(&status["instance"]),
        status["pid"],
        text(&status["config"])
    );
    let swapped = status["swapped_at_ms"]
        .as_u64()
        .map(|ms| {
            gatehouse_audit::read::format_time_micros(
                std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms),
            )
        })
        .unwrap_or_else(|| "not yet: it is loading, and elicitations wait for it".to_owned());
    println!(
        "  chain swapped {swapped}; conformance kit: {}; {} elicitation(s) in flight",
        text(&status["kit"]),
        status["in_flight"]
    );
    for module in status["modules"].as_array().into_iter().flatten() {
        let digest = text(&module["digest"]);
        println!(
            "  module {} ({}) sha256 {} signed by {}",
            text(&module["name"]),
            text(&module["mode"]),
            digest,
            module["signer"].as_str().map_or_else(
                || "nobody (a local file or allow_unsigned)".to_owned(),
                |s| Escaped(s).to_string()
            )
        );
    }
    for backend in status["backends"].as_array().into_iter().flatten() {
        println!(
            "  backend {}: {}{}",
            text(&backend["name"]),
            text(&backend["state"]),
            backend["detail"]
                .as_str()
                .map(|detail| format!(" ({})", Escaped(detail)))
                .unwrap_or_default()
        );
    }
}
