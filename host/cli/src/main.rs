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
            let error = chain_text(&error);
            eprintln!(
                "gatehouse: error: {}",
                gatehouse_core::escape::Escaped(&error)
            );
            ExitCode::from(1)
        }
    }
}

/// `error` and its causes, joined by `: `, each said once: many errors
/// already end their own message with their source's (`cannot read the
/// config: No such file…`), and the chain would repeat it. A cause is left
/// out only when the text so far ends with `: ` and that cause's message.
fn chain_text(error: &anyhow::Error) -> String {
    let mut text = String::new();
    for cause in error.chain() {
        let cause = cause.to_string();
        if text.is_empty() {
            text = cause;
        } else if !text.ends_with(&format!(": {cause}")) {
            text.push_str(": ");
            text.push_str(&cause);
        }
    }
    text
}

#[cfg(test)]
mod tests {
    use super::chain_text;

    #[derive(Debug, thiserror::Error)]
    #[error("gatehouse.toml: cannot read the config: {source}")]
    struct Quoting {
        source: std::io::Error,
    }

    #[derive(Debug, thiserror::Error)]
    #[error("the chain did not load")]
    struct Silent {
        source: std::io::Error,
    }

    fn missing() -> std::io::Error {
        std::io::Error::new(std::io::ErrorKind::NotFound, "no such file")
    }

    #[test]
    fn a_cause_the_message_already_quotes_is_said_once() {
        let error = anyhow::Error::new(Quoting { source: missing() });
        assert_eq!(
            chain_text(&error),
            "gatehouse.toml: cannot read the config: no such file"
        );
    }

    #[derive(Debug, thiserror::Error)]
    #[error("the model's reply timed out")]
    struct EndsAlike {
        source: std::io::Error,
    }

    #[test]
    fn a_cause_is_dropped_only_when_quoted_after_a_colon() {
        let timed_out = std::io::Error::new(std::io::ErrorKind::TimedOut, "timed out");
        let error = anyhow::Error::new(EndsAlike { source: timed_out });
        assert_eq!(chain_text(&error), "the model's reply timed out: timed out");
    }

    #[test]
    fn a_cause_the_message_does_not_quote_is_kept_and_context_comes_first() {
        let error = anyhow::Error::new(Silent { source: missing() }).context("serving");
        assert_eq!(
            chain_text(&error),
            "serving: the chain did not load: no such file"
        );
    }
}
