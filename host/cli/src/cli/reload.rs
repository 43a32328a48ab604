//! `gatehouse reload`: asks a running `gatehouse serve` to reopen its audit
//! log and reload its reviewer chain, and prints what it answered.

use std::path::PathBuf;
use std::process::ExitCode;

use gatehouse_mcp::config::Config;

/// Reload the reviewer chain of a running `gatehouse serve` (through its
/// control socket, `.gatehouse/control.sock` beside the config, which only
/// the server's own user may use) and reopen its audit log (after rotating
/// it). Prints the new modules and digests, or why the reload was refused
/// (the old chain keeps serving). Exits 0 on success, 1 otherwise. Talks
/// only to a server running as the same user (its uid is checked before
/// anything is sent). `kill -HUP` does the same without the answer.
#[derive(Debug, clap::Args)]
pub struct ReloadArgs {
    /// The config file the server runs with.
    #[arg(long, value_name = "gatehouse.toml")]
    config: PathBuf,
}

pub fn run(args: ReloadArgs) -> anyhow::Result<ExitCode> {
    let config = Config::load(&args.config)?;
    let socket = config.control_socket();
    #[cfg(unix)]
    {
        // The server's uid is checked before anything is sent: a socket
        // another user planted, or their server, gets nothing.
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let reply = runtime.block_on(gatehouse_mcp::control::request(
            &socket,
            gatehouse_mcp::control::Request::Reload,
        ))?;
        println!("{}", gatehouse_core::escape::Escaped(&reply));
        Ok(if reply.starts_with("ok") {
            ExitCode::SUCCESS
        } else {
            ExitCode::from(1)
        })
    }
    #[cfg(not(unix))]
    {
        anyhow::bail!("{}: control sockets need a Unix system", socket.display())
    }
}
