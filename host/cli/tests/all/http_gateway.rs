//! `gatehouse serve --listen 127.0.0.1:0` in a child process, with the
//! bearer token it made, for the tests that talk to the gateway over HTTP
//! as a client would, and `gatehouse reload` to drive it.
//!
//! A module of the gathered test binary `host/cli/tests/all`, shared by its
//! tests.

use std::path::Path;
use std::process::{Child, Command, Stdio};

use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;

/// `gatehouse serve --listen` on a loopback port, killed when dropped.
pub struct HttpGateway {
    /// The `gatehouse` process (for the tests that signal it or wait for it).
    pub child: Child,
    /// The URL it printed on its `listening on` line.
    pub url: String,
    /// The bearer token gatehouse wrote to `.gatehouse/token` beside the
    /// config.
    pub token: String,
}

impl HttpGateway {
    /// Starts it on `config`, its logs going to the test's stderr.
    pub fn start(config: &Path) -> HttpGateway {
        HttpGateway::start_logging(config, Stdio::inherit())
    }

    /// Starts it on `config` with info logs going to `stderr`; returns once
    /// it listens.
    pub fn start_logging(config: &Path, stderr: impl Into<Stdio>) -> HttpGateway {
        let (child, url) = crate::paths::spawn_listening(
            Command::new(env!("CARGO_BIN_EXE_gatehouse"))
                .args(["serve", "--listen", "127.0.0.1:0", "--config"])
                .arg(config)
                .env("RUST_LOG", "gatehouse=info")
                .stderr(stderr),
            "listening on ",
            "gatehouse starts",
        );
        let token = std::fs::read_to_string(config.with_file_name(".gatehouse/token"))
            .expect("the token file");
        HttpGateway { child, url, token }
    }

    /// A client transport sending the token.
    pub fn transport(&self) -> StreamableHttpClientTransport<reqwest::Client> {
        StreamableHttpClientTransport::from_config(
            StreamableHttpClientTransportConfig::with_uri(self.url.clone())
                .auth_header(self.token.clone()),
        )
    }
}

impl Drop for HttpGateway {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Runs `gatehouse reload --config config` (which asks the gateway serving
/// `config` to reload); whether it succeeded, and its stdout then stderr.
pub fn reload(config: &Path) -> (bool, String) {
    let output = Command::new(env!("CARGO_BIN_EXE_gatehouse"))
        .args(["reload", "--config"])
        .arg(config)
        .output()
        .expect("gatehouse reload runs");
    // One line per instance, `<instance>: <answer>`; the answers, for the
    // tests run one instance.
    let answers: String = String::from_utf8_lossy(&output.stdout)
        .lines()
        .map(|line| match line.split_once(": ") {
            Some((instance, answer)) if gatehouse_gateway::instance::is_id(instance) => {
                format!("{answer}\n")
            }
            _ => format!("{line}\n"),
        })
        .collect();
    (
        output.status.success(),
        format!("{answers}{}", String::from_utf8_lossy(&output.stderr)),
    )
}
