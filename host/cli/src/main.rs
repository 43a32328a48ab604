//! The `gatehouse` command line.

mod cli;

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let args = cli::Cli::parse();
    let _logs = cli::init_tracing(args.verbose, args.quiet_level(), args.log_format);
    match cli::run(args) {
        Ok(code) => code,
        Err(error) => {
            // Errors may quote a guest, a server or a manifest.
            let error = format!("{error:#}");
            eprintln!(
                "gatehouse: error: {}",
                gatehouse_core::escape::Escaped(&error)
            );
            ExitCode::from(1)
        }
    }
}
