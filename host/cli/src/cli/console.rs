//! `gatehouse console`: the approvals console for every `gatehouse serve`
//! instance on a config (also hosted by `gatehouse serve --console`).

use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use gatehouse_base::escape::Escaped;
use gatehouse_console::config::{ConsoleConfig, TokenOrigin};
use gatehouse_console::{ConsoleOptions, Running};
use gatehouse_gateway::config::Config;

/// Serve the approvals console: a page where a person answers the questions
/// no module decided, for every `gatehouse serve` on this config, and reads
/// the audit log. Instances attach over .gatehouse/console.sock beside the
/// config; `[console]` must be in the config for them to use it.
#[derive(Debug, clap::Args)]
pub struct ConsoleArgs {
    /// The config file (`[console]`, `[elicitations]`).
    #[arg(long, value_name = "gatehouse.toml")]
    config: PathBuf,
    /// Serve the page on this address instead of `[console] listen`
    /// (default 127.0.0.1:8790; loopback unless `allow_remote`).
    #[arg(long, value_name = "ADDR")]
    listen: Option<String>,
}

pub fn run(args: ConsoleArgs) -> anyhow::Result<ExitCode> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    runtime.block_on(async move {
        let stop = super::stop::Stop::listen().context("cannot listen for SIGINT and SIGTERM")?;
        let config = Config::load(&args.config)?;
        if config.console.is_none() && config.telemetry.is_none() {
            eprintln!(
                "gatehouse console: {} has no [console] table, so its gatehouse serve instances will not use this console; add `[console]` (and `person = \"console\"` under [elicitations] for unattended clients)",
                Escaped(&args.config.display().to_string())
            );
        }
        let running = start(&config, args.listen.as_deref(), false).await?;
        // The addresses on stdout, for scripts; how to log in is on stderr.
        // A reader that closed stdout after the line it wanted (or a service
        // manager that gave none) must not stop the console: a failed write
        // is ignored, where `println!` would panic.
        let mut stdout = std::io::stdout();
        let _ = writeln!(stdout, "console on http://{}/", running.address());
        if let Some(telemetry) = &running_telemetry(&config, &running).await? {
            let _ = writeln!(stdout, "telemetry on http://{telemetry}/metrics");
        }
        let _ = stdout.flush();
        stop.requested_now().await;
        running.stop();
        running.stopped().await;
        Ok(ExitCode::SUCCESS)
    })
}

/// Serves the totals of every instance attached to `running` at
/// `[telemetry] listen`, when the config has `[telemetry]`, until the
/// console stops; where it listens.
pub async fn running_telemetry(
    config: &Config,
    running: &Running,
) -> anyhow::Result<Option<std::net::SocketAddr>> {
    let Some(telemetry) = &config.telemetry else {
        return Ok(None);
    };
    let source = super::telemetry::totals_source(running.hub().clone());
    let address = super::telemetry::serve(telemetry, source, running.stopping()).await?;
    Ok(Some(address))
}

/// Starts the console of `config` on `listen` (else `[console] listen`),
/// and says on stderr where it is and how to log in. A token made here is
/// printed once, unless the console is `hosted` by `gatehouse serve`, whose
/// stderr an MCP client may keep in its logs: then it is written to
/// `.gatehouse/console-token` (0600) beside the config instead.
pub async fn start(config: &Config, listen: Option<&str>, hosted: bool) -> anyhow::Result<Running> {
    let settings = config.console.clone().unwrap_or_default();
    let settings = ConsoleConfig {
        listen: listen.map(str::to_owned).or(settings.listen.clone()),
        ..settings
    };
    let listen = settings.listen()?;
    let public_origin = settings.public_origin()?;
    let (token, origin) = settings.token(config.base_dir())?;
    let running = gatehouse_console::start(ConsoleOptions {
        listen,
        socket: config.console_socket(),
        token,
        audit_log: Some(config.audit_log_path()),
        public_origin,
    })
    .await?;
    let address = running.address();
    match origin {
        TokenOrigin::Generated(text) if hosted => {
            let file = config.base_dir().join(".gatehouse/console-token");
            gatehouse_base::private_fs::replace(&file, &[text.as_bytes(), b"\n"], false)
                .with_context(|| format!("cannot write the console token to {}", file.display()))?;
            eprintln!(
                "gatehouse console: http://{address}/ — log in with the token in {} (new at every start)",
                Escaped(&file.display().to_string())
            );
        }
        TokenOrigin::Generated(text) => eprintln!(
            "gatehouse console: http://{address}/ — log in with the token {text} (new at every start; set ${} or [console] token_file to keep one)",
            gatehouse_console::config::DEFAULT_TOKEN_ENV
        ),
        TokenOrigin::Variable(var) => eprintln!(
            "gatehouse console: http://{address}/ — log in with the token in ${}",
            Escaped(&var)
        ),
        TokenOrigin::File(file) => eprintln!(
            "gatehouse console: http://{address}/ — log in with the token in {}",
            Escaped(&file.display().to_string())
        ),
    }
    Ok(running)
}
