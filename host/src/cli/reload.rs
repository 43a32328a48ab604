//! `gatehouse reload`: asks a running `gatehouse serve` to reopen its audit
//! log and reload its reviewer chain, and prints what it answered.

use std::io::{BufRead, BufReader, Read, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use gatehouse::config::Config;

/// Reload the reviewer chain of a running `gatehouse serve` (through its
/// control socket, `.gatehouse/control.sock` beside the config, which only
/// the server's own user may use) and reopen its audit log (after rotating
/// it). Prints the new modules and digests, or why the reload was refused
/// (the old chain keeps serving). Exits 0 on success, 1 otherwise.
/// `kill -HUP` does the same without the answer.
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
        let mut stream = std::os::unix::net::UnixStream::connect(&socket).with_context(|| {
            format!("{}: no gatehouse serve is listening here", socket.display())
        })?;
        stream.write_all(b"reload\n")?;
        let mut reply = String::new();
        // One line is the answer; a server that says more is cut off.
        BufReader::new(stream.take(64 * 1024)).read_line(&mut reply)?;
        println!("{}", gatehouse::escape::Escaped(reply.trim_end()));
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
