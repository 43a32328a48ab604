//! `gatehouse reload`: asks each running `gatehouse serve` on a config to
//! reopen its audit log and reload its reviewer chain, and prints what each
//! answered.

use std::path::PathBuf;
use std::process::ExitCode;

use gatehouse_gateway::config::Config;

/// Reload the reviewer chain of every `gatehouse serve` running with this
/// config (or the one `--instance` names), through their control sockets
/// (`.gatehouse/control/<instance>.sock` beside the config, which only the
/// server's own user may use), and reopen their audit logs (after rotating
/// them). Prints one line per instance: the new modules and digests, or why
/// the reload was refused (the old chain keeps serving). Exits 0 when every
/// instance reloaded, 1 otherwise or when none is running. Talks only to
/// servers running as the same user (each one's uid is checked before
/// anything is sent). `kill -HUP` does the same without the answer.
#[derive(Debug, clap::Args)]
pub struct ReloadArgs {
    /// The config file the servers run with.
    #[arg(long, value_name = "gatehouse.toml")]
    config: PathBuf,
    /// Only this instance (the id `gatehouse serve` prints at start and
    /// writes in every audit line).
    #[arg(long, value_name = "ID", value_parser = instance_id)]
    instance: Option<String>,
}

pub(super) fn instance_id(text: &str) -> Result<String, String> {
    if gatehouse_gateway::instance::is_id(text) {
        Ok(text.to_owned())
    } else {
        Err(
            "an instance id is eight lowercase hex digits, as `gatehouse serve` prints it"
                .to_owned(),
        )
    }
}

pub fn run(args: ReloadArgs) -> anyhow::Result<ExitCode> {
    let config = Config::load(&args.config)?;
    match reload_running(&config, args.instance.as_deref())? {
        Some(true) => Ok(ExitCode::SUCCESS),
        Some(false) => Ok(ExitCode::from(1)),
        None => {
            let which = match &args.instance {
                Some(instance) => format!("instance {instance}"),
                None => "gatehouse serve".to_owned(),
            };
            anyhow::bail!(
                "no {which} is running with {} (no live control socket in {})",
                args.config.display(),
                config.control_dir().display()
            )
        }
    }
}

/// Asks every `gatehouse serve` on `config` (or only `instance`) to reload,
/// printing one line per instance; `None` when none is running, else
/// whether every one reloaded.
pub fn reload_running(config: &Config, instance: Option<&str>) -> anyhow::Result<Option<bool>> {
    let dir = config.control_dir();
    #[cfg(unix)]
    {
        use gatehouse_base::escape::Escaped;
        // Each server's uid is checked before anything is sent: a socket
        // another user planted, or their server, gets nothing.
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let answers = runtime.block_on(gatehouse_gateway::control::request_each(
            &dir,
            gatehouse_gateway::control::Request::Reload,
            instance,
        ))?;
        for instance in &answers.stale {
            eprintln!("gatehouse: instance {instance} is gone (killed?); its socket was removed");
        }
        if answers.answers.is_empty() {
            return Ok(None);
        }
        let mut all_ok = true;
        for (instance, outcome) in &answers.answers {
            let line = match outcome {
                Ok(reply) => reply.clone(),
                Err(error) => format!("error: {error}"),
            };
            all_ok &= line.starts_with("ok");
            println!("{instance}: {}", Escaped(&line));
        }
        Ok(Some(all_ok))
    }
    #[cfg(not(unix))]
    {
        let _ = instance;
        anyhow::bail!("{}: control sockets need a Unix system", dir.display())
    }
}
