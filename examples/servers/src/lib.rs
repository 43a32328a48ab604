//! Example MCP servers that gatehouse's tests and demo connect to.
//!
//! The crate builds one binary, `demo-server` (see [`cli_main`] for its
//! flags). Its logic lives here so it can be read and reused: [`DemoServer`]
//! is the MCP handler, [`Options`] the parsed command line and [`run`] the
//! entry point that serves it on stdio or streamable HTTP.
#![warn(missing_docs)]

mod mrtr;
mod server;
mod wire;

use std::{io::Write as _, net::SocketAddr, process::ExitCode, sync::Arc, time::Duration};

use anyhow::Context as _;
use rmcp::{
    ServiceExt as _,
    transport::async_rw::AsyncRwTransport,
    transport::streamable_http_server::{
        StreamableHttpServerConfig, StreamableHttpService, session::local::LocalSessionManager,
    },
};

pub use server::{
    DemoServer, ELICITATION_COMPLETE, ElicitRawArgs, LIED_BRANCH, Protocol, ResourceOptions,
};
pub use wire::{NoProgressToken, NoProgressTokenSessions};

/// Usage text printed for `--help` and after a flag error.
pub const USAGE: &str = "\
usage: demo-server [--name NAME] [--http ADDR] [--protocol VERSION] [--fail] [--hang]
                   [--resource URI]... [--template TEMPLATE]... [--answer-any-read]
                   [--reads-log FILE] [--meta-log FILE]

  --name NAME   server name (default: demo); every tool result text starts with `[NAME] `
  --protocol VERSION
                newest protocol revision to offer: 2025-11-25 (default; initialize
                handshake, elicitations are requests to the client) or 2026-07-28
                (also server/discover clients; on their requests the eliciting tools
                return input_required results instead); older clients work either way
  --http ADDR   serve streamable HTTP on ADDR (e.g. 127.0.0.1:0) at path /mcp and print
                `listening on http://HOST:PORT/mcp` once bound; default: MCP on stdio
  --fail        print an error to stderr and exit with status 1 before serving
  --hang        accept the connection (read stdin / HTTP requests) but never answer,
                not even `initialize`
  --resource URI
                also list (and answer reads of) the resource URI; repeatable
  --template TEMPLATE
                list the resource template TEMPLATE; a read of a URI starting with its
                text before the first `{` is answered; repeatable
  --answer-any-read
                answer a read of any URI, listed or not
  --reads-log FILE
                append every URI this server is asked to read to FILE, one JSON string
                a line
  --meta-log FILE
                append the `_meta` of every tools/call this server is sent to FILE, one
                JSON object a line: {\"tool\": NAME, \"meta\": {...}}

tools: echo, read_file, delete_branch (asks for approval with Codex-style _meta),
rename_branch (asks for approval too, but its _meta.tool_params name the branch
`scratch` whatever branch it was called with: a server that lies about the call),
ask_name, open_url, add_tool, elicit_raw, elicit_then_cancel, hold (writes
DIR/held-ID, then stays in flight until DIR/release exists, at most 60 s),
ask_approvals (sends COUNT approval requests for this one call, each with its own
message when DISTINCT, all identical otherwise)";

/// The path the streamable HTTP endpoint is mounted at.
pub const HTTP_PATH: &str = "/mcp";

/// Parsed command line of `demo-server`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Options {
    /// Server name; every tool result text starts with `[name] `.
    pub name: String,
    /// Serve streamable HTTP on this address instead of MCP on stdio.
    pub http: Option<String>,
    /// The newest protocol revision offered (`--protocol`).
    pub protocol: Protocol,
    /// Print an error and exit with status 1 before serving.
    pub fail: bool,
    /// Never answer anything, not even `initialize`.
    pub hang: bool,
    /// Extra resources and templates, and what happens to reads.
    pub resources: ResourceOptions,
    /// Where to append each tools/call's `_meta` (`--meta-log`).
    pub meta_log: Option<std::path::PathBuf>,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            name: "demo".to_owned(),
            http: None,
            protocol: Protocol::default(),
            fail: false,
            hang: false,
            resources: ResourceOptions::default(),
            meta_log: None,
        }
    }
}

impl Options {
    /// Parses the flags (without the program name). Accepts `--flag VALUE`
    /// and `--flag=VALUE` for the flags that take a value.
    pub fn parse<I>(args: I) -> Result<Self, String>
    where
        I: IntoIterator,
        I::Item: Into<String>,
    {
        let mut options = Self::default();
        let mut args = args.into_iter().map(Into::into);
        while let Some(arg) = args.next() {
            let (flag, inline) = match arg.split_once('=') {
                Some((flag, value)) if flag.starts_with("--") => (flag.to_owned(), Some(value)),
                _ => (arg.clone(), None),
            };
            let mut value = |flag: &str| -> Result<String, String> {
                match inline {
                    Some(value) => Ok(value.to_owned()),
                    None => args.next().ok_or_else(|| format!("{flag} needs a value")),
                }
            };
            match flag.as_str() {
                "--name" => options.name = value("--name")?,
                "--http" => options.http = Some(value("--http")?),
                "--protocol" => {
                    let version = value("--protocol")?;
                    options.protocol = Protocol::from_flag(&version).ok_or_else(|| {
                        format!(
                            "unsupported --protocol `{version}` (use {} or {})",
                            Protocol::V2025_11_25.as_str(),
                            Protocol::V2026_07_28.as_str()
                        )
                    })?;
                }
                "--resource" => options.resources.resources.push(value("--resource")?),
                "--template" => options.resources.templates.push(value("--template")?),
                "--reads-log" => options.resources.reads_log = Some(value("--reads-log")?.into()),
                "--meta-log" => options.meta_log = Some(value("--meta-log")?.into()),
                "--fail" | "--hang" | "--answer-any-read" if inline.is_some() => {
                    return Err(format!("{flag} takes no value"));
                }
                "--fail" => options.fail = true,
                "--hang" => options.hang = true,
                "--answer-any-read" => options.resources.answer_any_read = true,
                _ => return Err(format!("unknown argument `{arg}`")),
            }
        }
        Ok(options)
    }
}

/// The whole `demo-server` program: parses `args` (without the program
/// name), then serves until the client goes away.
///
/// Exit status: 0 after a clean shutdown or `--help`, 1 for `--fail` or a
/// runtime error, 2 for a bad command line.
pub fn cli_main<I>(args: I) -> ExitCode
where
    I: IntoIterator,
    I::Item: Into<String>,
{
    let args: Vec<String> = args.into_iter().map(Into::into).collect();
    if args.iter().any(|arg| arg == "-h" || arg == "--help") {
        println!("{USAGE}");
        return ExitCode::SUCCESS;
    }
    let options = match Options::parse(args) {
        Ok(options) => options,
        Err(error) => {
            eprintln!("demo-server: {error}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    if options.fail {
        eprintln!(
            "demo-server [{}]: failing on purpose (--fail)",
            options.name
        );
        return ExitCode::FAILURE;
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("demo-server: cannot start the tokio runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(run(options));
    // A blocking stdin read cannot be cancelled; do not wait for it.
    runtime.shutdown_timeout(Duration::from_millis(100));
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("demo-server: {error:#}");
            ExitCode::FAILURE
        }
    }
}

/// Serves [`DemoServer`] as `options` say: on stdio until stdin closes, or
/// on streamable HTTP until Ctrl-C. `options.fail` is not looked at here
/// (see [`cli_main`]).
pub async fn run(options: Options) -> anyhow::Result<()> {
    match (&options.http, options.hang) {
        (None, false) => serve_stdio(server(&options)).await,
        (None, true) => hang_stdio().await,
        (Some(addr), hang) => {
            let listener = tokio::net::TcpListener::bind(addr.as_str())
                .await
                .with_context(|| format!("cannot bind {addr}"))?;
            let local = listener.local_addr()?;
            let router = if hang {
                hang_router()
            } else {
                mcp_router(server(&options), local)
            };
            announce(local)?;
            // Stop at Ctrl-C without waiting for open SSE streams to end.
            tokio::select! {
                served = axum::serve(listener, router) => served.context("HTTP server failed"),
                _ = tokio::signal::ctrl_c() => Ok(()),
            }
        }
    }
}

/// The server `options` describe.
fn server(options: &Options) -> DemoServer {
    DemoServer::new(&options.name)
        .with_protocol(options.protocol)
        .with_resources(options.resources.clone())
        .with_meta_log(options.meta_log.clone())
}

/// Serves `server` over stdin/stdout until the client closes stdin.
async fn serve_stdio(server: DemoServer) -> anyhow::Result<()> {
    let (stdin, stdout) = rmcp::transport::stdio();
    let transport = NoProgressToken(AsyncRwTransport::new_server(stdin, stdout));
    let running = server
        .serve(transport)
        .await
        .context("MCP initialization on stdio failed")?;
    running
        .waiting()
        .await
        .context("MCP service on stdio failed")?;
    Ok(())
}

/// `--hang` on stdio: read (and drop) everything, answer nothing, exit at EOF.
async fn hang_stdio() -> anyhow::Result<()> {
    tokio::io::copy(&mut tokio::io::stdin(), &mut tokio::io::sink()).await?;
    Ok(())
}

/// The axum router serving `server` at [`HTTP_PATH`], one handler clone per
/// MCP session.
fn mcp_router(server: DemoServer, local: SocketAddr) -> axum::Router {
    let mut config = StreamableHttpServerConfig::default();
    // The default allow-list covers loopback names; also accept the address
    // we were told to bind so e.g. `--http 0.0.0.0:8080` works by IP.
    let ip = local.ip();
    if !ip.is_unspecified() && !ip.is_loopback() {
        config.allowed_hosts.push(ip.to_string());
    }
    let service = StreamableHttpService::new(
        move || Ok(server.clone()),
        Arc::new(NoProgressTokenSessions(LocalSessionManager::default())),
        config,
    );
    axum::Router::new().nest_service(HTTP_PATH, service)
}

/// `--hang` on HTTP: accept requests at [`HTTP_PATH`] and never answer them.
fn hang_router() -> axum::Router {
    async fn never() -> axum::http::StatusCode {
        std::future::pending().await
    }
    axum::Router::new().route(HTTP_PATH, axum::routing::any(never))
}

/// Prints the one `listening on` line tests wait for.
fn announce(local: SocketAddr) -> anyhow::Result<()> {
    let mut stdout = std::io::stdout().lock();
    writeln!(stdout, "listening on http://{local}{HTTP_PATH}")?;
    stdout.flush()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_flags() {
        assert_eq!(Options::parse(Vec::<String>::new()), Ok(Options::default()));
        let parsed = Options::parse(["--name", "alpha", "--http=127.0.0.1:0", "--hang"]).unwrap();
        assert_eq!(
            parsed,
            Options {
                name: "alpha".into(),
                http: Some("127.0.0.1:0".into()),
                protocol: Protocol::V2025_11_25,
                fail: false,
                hang: true,
                resources: ResourceOptions::default(),
                meta_log: None,
            }
        );
        assert_eq!(
            Options::parse(["--meta-log", "/tmp/meta"])
                .unwrap()
                .meta_log,
            Some("/tmp/meta".into())
        );
        let parsed = Options::parse([
            "--resource",
            "demo://shared",
            "--resource=demo://two",
            "--template",
            "demo://x/{id}",
            "--answer-any-read",
            "--reads-log",
            "/tmp/reads",
        ])
        .unwrap();
        assert_eq!(
            parsed.resources,
            ResourceOptions {
                resources: vec!["demo://shared".into(), "demo://two".into()],
                templates: vec!["demo://x/{id}".into()],
                answer_any_read: true,
                reads_log: Some("/tmp/reads".into()),
            }
        );
        assert!(Options::parse(["--answer-any-read=yes"]).is_err());
        assert!(Options::parse(["--template"]).is_err());
        assert!(Options::parse(["--fail"]).unwrap().fail);
        assert!(Options::parse(["--name"]).is_err());
        assert!(Options::parse(["--bogus"]).is_err());
        assert!(Options::parse(["--fail=yes"]).is_err());
        assert_eq!(
            Options::parse(["--protocol", "2026-07-28"])
                .unwrap()
                .protocol,
            Protocol::V2026_07_28
        );
        assert_eq!(
            Options::parse(["--protocol=2025-11-25"]).unwrap().protocol,
            Protocol::V2025_11_25
        );
        assert!(Options::parse(["--protocol", "2024-01-01"]).is_err());
        assert!(Options::parse(["--protocol"]).is_err());
    }
}
