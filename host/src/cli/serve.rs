//! `gatehouse serve`: the gateway.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context;
use gatehouse::audit::AuditLog;
use gatehouse::config::Config;
use gatehouse::gateway::{Gateway, Upstream};
use gatehouse::mcp::runtime::McpRuntime;
use gatehouse::mcp::source::ConfigSource;
use gatehouse::router::Router;
use gatehouse::sandbox::Sandbox;
use gatehouse::watch::FileWatcher;
use rmcp::ServiceExt;

/// Run the gateway: an MCP server (stdio by default) in front of the
/// configured MCP servers, reviewing every elicitation they send.
#[derive(Debug, clap::Args)]
pub struct ServeArgs {
    /// The config file (`[mcp_servers]`, `[review]`, `[elicitations]`, `[capabilities]`).
    #[arg(long, value_name = "gatehouse.toml")]
    config: PathBuf,
    /// Serve streamable HTTP on this address (e.g. 127.0.0.1:8080) at /mcp
    /// instead of stdio.
    #[arg(long, value_name = "ADDR")]
    listen: Option<String>,
}

pub fn run(args: ServeArgs) -> anyhow::Result<ExitCode> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    runtime.block_on(serve(args))
}

async fn serve(args: ServeArgs) -> anyhow::Result<ExitCode> {
    let config = Config::load(&args.config)?;
    let limits = config.review.limits.to_limits();
    let sandbox = Sandbox::new(limits.clone())?;
    let chain = config.build_chain(&sandbox)?;
    let audit_path = config.base_dir().join(
        config
            .elicitations
            .audit_log
            .clone()
            .unwrap_or_else(|| PathBuf::from("gatehouse-audit.jsonl")),
    );
    let audit = Arc::new(AuditLog::open(&audit_path)?);
    let upstream = Arc::new(Upstream::default());
    let router = Arc::new(Router::new(
        chain,
        config.elicitations.clone(),
        audit,
        upstream.clone(),
        limits.concurrent_reviews() as usize,
    ));
    let source = Arc::new(ConfigSource::new(&args.config));
    let mcp = McpRuntime::new(source, Arc::new(router.clone()));
    let catalog = mcp.clone();
    router.set_catalog_source(move |server| catalog.snapshot().catalog_for(server));
    mcp.refresh_if_dirty()
        .await
        .context("cannot start the MCP servers")?;
    let watched = mcp.clone();
    let _watcher = FileWatcher::new(&[args.config.as_path()], move |path| {
        tracing::info!(path = %path.display(), "config changed");
        watched.invalidate();
    })?;
    let gateway = Gateway::new(mcp.clone(), upstream);
    let served = match &args.listen {
        None => {
            let service = gateway
                .serve(rmcp::transport::stdio())
                .await
                .context("MCP initialization on stdio failed")?;
            tokio::select! {
                quit = service.waiting() => quit.map(|_| ()).context("the stdio session failed"),
                () = shutdown_signal() => Ok(()),
            }
        }
        Some(address) => serve_http(gateway, address).await,
    };
    // Nothing is left unanswered: whatever waits for the person is
    // cancelled, and every answer is sent and audited before the servers stop.
    router.drain(std::time::Duration::from_secs(5)).await;
    drop(mcp);
    served.map(|()| ExitCode::SUCCESS)
}

async fn serve_http(gateway: Gateway, address: &str) -> anyhow::Result<()> {
    use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
    use rmcp::transport::streamable_http_server::{
        StreamableHttpServerConfig, StreamableHttpService,
    };
    let listener = tokio::net::TcpListener::bind(address)
        .await
        .with_context(|| format!("cannot listen on {address}"))?;
    let local = listener.local_addr()?;
    let service = StreamableHttpService::new(
        move || Ok(gateway.clone()),
        Arc::new(LocalSessionManager::default()),
        StreamableHttpServerConfig::default(),
    );
    let app = axum::Router::new().nest_service("/mcp", service);
    println!("listening on http://{local}/mcp");
    tokio::select! {
        served = axum::serve(listener, app) => served.context("the HTTP server failed"),
        () = shutdown_signal() => Ok(()),
    }
}

/// SIGINT or SIGTERM.
async fn shutdown_signal() {
    let interrupt = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        () = interrupt => {}
        () = terminate => {}
    }
    tracing::info!("shutting down");
}
