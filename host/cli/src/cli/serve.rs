//! `gatehouse serve`: the gateway.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context;
use gatehouse_audit::AuditLog;
use gatehouse_conformance::Kit;
use gatehouse_core::chain::Chain;
use gatehouse_gateway::config_file::{ConfigFile, Reread};
use gatehouse_gateway::http::HttpServer;
use gatehouse_gateway::reload::Reloader;
use gatehouse_gateway::router::Router;
use gatehouse_gateway::source::ConfigSource;
use gatehouse_gateway::{Gateway, Upstream};
use gatehouse_mcp::runtime::McpRuntime;
use gatehouse_mcp::watch::FileWatcher;

use super::stop::Stop;
use rmcp::ServiceExt;

/// How long a signal's shutdown waits, at most, for the questions waiting
/// for the person to be decided as cancelled before the sessions close.
const QUESTIONS_SETTLE: std::time::Duration = std::time::Duration::from_secs(1);

/// Run the gateway: an MCP server (stdio by default) in front of the
/// configured MCP servers, reviewing every elicitation they send.
#[derive(Debug, clap::Args)]
pub struct ServeArgs {
    /// The config file (`[mcp_servers]`, `[review]`, `[elicitations]`, `[capabilities]`).
    #[arg(long, value_name = "gatehouse.toml")]
    config: PathBuf,
    /// Serve streamable HTTP on this address (e.g. 127.0.0.1:8080) at /mcp
    /// instead of stdio. Clients must send `Authorization: Bearer <token>`:
    /// the token is written to .gatehouse/token beside the config, or taken
    /// from the variable `[gateway] bearer_token_env_var` names (required for
    /// an address other than loopback).
    #[arg(long, value_name = "ADDR")]
    listen: Option<String>,
    /// Host the approvals console too, on ADDR (else `[console] listen`),
    /// unless one already runs for this config: then this instance attaches
    /// to it like the others (see `gatehouse console`).
    #[arg(long, value_name = "ADDR", num_args = 0..=1, default_missing_value = "")]
    console: Option<String>,
    /// Serve this instance's own /metrics, /healthz and /readyz on ADDR
    /// (e.g. 127.0.0.1:9464; loopback unless `[telemetry] allow_remote`).
    /// For many instances, set `[telemetry]` instead: the console process
    /// serves their sum.
    #[arg(long, value_name = "ADDR")]
    metrics: Option<String>,
}

pub fn run(args: ServeArgs) -> anyhow::Result<ExitCode> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let served = runtime.block_on(serve(args));
    // Everything is answered, audited and synced by now. A blocking read of
    // stdin (a socketpair or a terminal, which cannot be read on the
    // reactor) may still sit in the blocking pool, and nothing interrupts
    // it: the runtime is not waited on for long, so a signal always ends
    // the process.
    runtime.shutdown_timeout(std::time::Duration::from_millis(100));
    // What is still batched goes to the collector, spans its last tasks
    // closed included (outside the runtime: the exporter's client blocks).
    super::traces::finish();
    served
}

async fn serve(args: ServeArgs) -> anyhow::Result<ExitCode> {
    let stop = Stop::listen().context("cannot listen for SIGINT and SIGTERM")?;
    // The version of the config being served: a reload replaces it only with
    // a version that settled and parses (`config_file`).
    let file = Arc::new(ConfigFile::open(&args.config)?);
    let config = file.current();
    if let Some(traces) = &config.traces {
        super::traces::start(traces, &config.origin)?;
    }
    // The HTTP listener's address and token are settled first: a refused
    // address or an unset token variable stops here, before anything starts.
    let http = match &args.listen {
        Some(address) => Some(
            HttpServer::with_token(
                address,
                config.gateway.bearer_token_env_var.as_deref(),
                &config.token_file(),
            )?
            .allowed_origins(config.gateway.allowed_origins.iter().cloned())
            .max_sessions(config.gateway.max_http_sessions),
        ),
        None => None,
    };
    if let Some(file) = http.as_ref().and_then(HttpServer::token_file) {
        // The path only: the token itself is never printed.
        let file = std::path::absolute(file).unwrap_or_else(|_| file.to_path_buf());
        eprintln!(
            "gatehouse: HTTP clients must send `Authorization: Bearer <token>`; the token is in {} (new at every start)",
            gatehouse_base::escape::Escaped(&file.display().to_string())
        );
    }
    // Room in the pool for every module's own limits; a reload asking for
    // more is refused with what to do. The compile cache is bounded: every
    // swap to a new build stores one more compiled module.
    let sandbox = config.sandbox_builder().build()?;
    let limits = sandbox.limits().clone();
    // This process among those serving the config: its control socket and
    // every audit line it writes carry the id.
    let instance = gatehouse_gateway::instance::new_id();
    let audit = Arc::new(
        AuditLog::open_with(config.audit_log_path(), config.elicitations.audit_sync)?
            .with_instance(instance.clone()),
    );
    let upstream = Arc::new(Upstream::new(config.gateway.max_pending_per_session));
    let router = Arc::new(
        Router::new(
            Chain::default(),
            config.elicitations.clone(),
            audit.clone(),
            upstream.clone(),
            limits.concurrent_reviews() as usize,
        )
        .with_model_reviews(limits.model_reviews() as usize)
        .loading_first_chain(),
    );
    // The approvals console: this instance attaches to the config's console
    // (hosting it first with --console, unless one runs already).
    let hosted = match &args.console {
        Some(listen) => {
            let listen = Some(listen.as_str()).filter(|listen| !listen.is_empty());
            match super::console::start(&config, listen, true).await {
                Ok(running) => {
                    super::console::running_telemetry(&config, &running).await?;
                    Some(running)
                }
                Err(error) => match error.downcast_ref::<gatehouse_console::ConsoleError>() {
                    Some(gatehouse_console::ConsoleError::Socket(
                        gatehouse_console::socket::SocketError::AlreadyRunning { .. },
                    )) => {
                        tracing::info!("a console already runs for this config; attaching to it");
                        None
                    }
                    _ => return Err(error),
                },
            }
        }
        None => None,
    };
    // Instances report to the console process when there is a console, and
    // when `[telemetry]` asks for every instance's numbers in one place; only
    // a configured console is asked questions.
    let asks_console = config.console.is_some() || args.console.is_some();
    let console_link = (asks_console || config.telemetry.is_some()).then(|| {
        let link = Arc::new(gatehouse_console::link::Link::new(
            config.console_socket(),
            instance.clone(),
        ));
        if asks_console {
            router.set_console(link.clone());
        }
        link
    });
    let kit = if config.review.verify_contract {
        // The same cache as the sandbox: a module is compiled once, not
        // once more for each of the kit's two sandboxes.
        Some(Kit::from_builder(config.sandbox_builder())?)
    } else {
        None
    };
    let reloader = Arc::new(Reloader::new(file.clone(), sandbox, kit, router.clone()));
    // The chain loads in the background (compiling or reading the compiled
    // modules, then the contract checks): the client's `initialize` is
    // answered at once, and an elicitation that comes first waits for the
    // chain (`Router::loading_first_chain`). A chain that does not load, or
    // not within `[review] load_timeout_sec` (a module read from something
    // that never ends, a compile that never finishes), stops gatehouse with
    // its error, as before it served; whatever waited for it is declined and
    // audited. A load given up on is left to its thread (stopping does not
    // wait for it) and dropped if it ends.
    {
        let (reloader, router) = (reloader.clone(), router.clone());
        tokio::spawn(async move {
            let error = match reloader.rebuild_bounded().await {
                Ok(_) => return,
                Err(error) => anyhow::Error::new(error).context("cannot load the reviewer chain"),
            };
            if router.first_chain_failed(&format!("{error:#}")) {
                tracing::error!("{error:#}; stopping");
            } else {
                tracing::warn!(
                    "the first load of the reviewer chain failed, but a chain was put in force meanwhile: {error:#}"
                );
            }
        });
    }
    let source = Arc::new(ConfigSource::following(file.clone()));
    let mcp = McpRuntime::new(source, Arc::new(router.clone()));
    let catalog = mcp.clone();
    // The requests in flight, by server: an elicitation goes only to the
    // session whose request made the server ask.
    let calls = Arc::new(gatehouse_gateway::calls::Calls::default());
    router.set_calls(calls.clone());
    router.set_catalog_source(move |server| {
        gatehouse_gateway::catalog::tool_catalog(&catalog.snapshot(), server)
    });
    // The servers come up in the background, each published as it does:
    // `initialize` is answered at once whatever they do, and a slow or
    // failing server holds nobody else (the gateway's list requests wait
    // for them briefly, then the client hears `tools/list_changed`). A
    // failure is logged; the next request retries it.
    refresh_in_background(&mcp);
    let watched = mcp.clone();
    // `gatehouse plugins trust` and `untrust` take effect at the next refresh.
    let trust_file = config.trust_file();
    let _trust_watcher = FileWatcher::new(&[trust_file.as_path()], move |path| {
        tracing::info!(path = %path.display(), "trust file changed");
        watched.invalidate();
    })?;
    let control_socket = config.control_socket(&instance);
    // What this instance is running, for `gatehouse status` (the control
    // socket) and the console: set once the runtime is up.
    let status_line = Arc::new(std::sync::OnceLock::<StatusLine>::new());
    let reloads = spawn_reloads(
        reloader.clone(),
        file.clone(),
        mcp.clone(),
        audit.clone(),
        &control_socket,
        status_line.clone(),
    )?;
    let status: gatehouse_console::link::StatusSource = {
        let (file, router, mcp) = (file.clone(), router.clone(), mcp.clone());
        Arc::new(move || {
            gatehouse_gateway::console_status::instance_status(
                &file.current(),
                &router,
                &mcp.snapshot(),
            )
        })
    };
    {
        let (status, instance) = (status.clone(), instance.clone());
        let line: StatusLine = Arc::new(move || {
            let mut json = serde_json::to_value(status()).unwrap_or_default();
            json["instance"] = serde_json::Value::String(instance.clone());
            json["pid"] = serde_json::Value::from(std::process::id());
            json.to_string()
        });
        let _ = status_line.set(line);
    }
    // The instance's numbers: its router's counts and histograms, with its
    // levels read at each ask.
    let metrics: gatehouse_console::link::MetricsSource = {
        let (router, status, reloader) = (router.clone(), status.clone(), reloader.clone());
        let mcp = mcp.clone();
        Arc::new(move || {
            let levels = gatehouse_gateway::telemetry::levels(
                &status(),
                &router.chain(),
                &router.waiting_by_channel(),
                reloader.compile_counts(),
                &mcp.starts(),
            );
            gatehouse_gateway::telemetry::snapshot(router.metrics(), levels)
        })
    };
    let stop_endpoint = tokio_util::sync::CancellationToken::new();
    if let Some(listen) = &args.metrics {
        let endpoint = gatehouse_telemetry::endpoint::EndpointConfig {
            listen: listen.clone(),
            ..config.telemetry.clone().unwrap_or_default()
        };
        let required = config
            .mcp_servers
            .iter()
            .filter(|(_, server)| server.required == Some(true))
            .map(|(name, _)| name.clone())
            .collect();
        let source = super::telemetry::instance_source(
            router.clone(),
            metrics.clone(),
            status.clone(),
            audit.clone(),
            required,
        );
        super::telemetry::serve(&endpoint, source, stop_endpoint.clone()).await?;
    }
    // Attached to the console from the start (it lists this instance, its
    // modules and backends, and may ask it to reload).
    let stop_console_link = tokio_util::sync::CancellationToken::new();
    if let Some(link) = &console_link {
        link.set_status(status.clone());
        link.set_metrics(metrics.clone());
        let asked = reloads.asked.clone();
        link.set_reload(Arc::new(move || {
            asked(gatehouse_gateway::control::Request::Reload)
        }));
        tokio::spawn(link.clone().keep_attached(stop_console_link.clone()));
    }
    let gateway = Gateway::new(mcp.clone(), upstream, calls.clone())
        .with_max_calls_per_session(config.gateway.max_calls_per_session);
    let stopper = gateway.clone();
    tracing::info!(
        instance = %instance,
        control_socket = %control_socket.display(),
        "serving"
    );
    // A signal, or a chain that did not load (its error is then what
    // gatehouse exits with), ends the serving. The control socket goes
    // first: a client that signals its servers kills them soon after
    // (Codex: SIGTERM, SIGKILL 2 s later), and on a busy machine the drain
    // may not end first. Then the router's questions: they are answered as
    // cancelled by the shutdown before the sessions close (which would have
    // them answered as their client's going). Each question's task must
    // have seen the cancel before the close, or on a busy machine it wakes
    // to both at once.
    let stopped = {
        let (stop, router) = (stop.clone(), router.clone());
        let socket = control_socket.clone();
        async move {
            tokio::select! {
                () = stop.requested_now() => {}
                () = router.first_chain_failure() => {}
            }
            let _ = std::fs::remove_file(&socket);
            router.drain_questions(QUESTIONS_SETTLE).await;
        }
    };
    let served = if stop.requested() {
        // A signal during start-up: a clean stop, not a failed start.
        Ok(())
    } else {
        match http {
            None => serve_stdio(gateway, &instance, &control_socket, stopped).await,
            Some(http) => serve_http(gateway, http, stopped).await,
        }
    };
    // The control socket goes first (its own only: other instances keep
    // theirs; on stdio it went at the end of stdin already): a client that
    // kills gatehouse soon after, before the drain ends, leaves none behind.
    reloads.stop();
    stop_console_link.cancel();
    drop(status_line);
    let _ = std::fs::remove_file(&control_socket);
    // Nothing is left unanswered: whatever waits for the person is
    // cancelled, and every answer is sent and audited before the servers stop.
    router.drain(std::time::Duration::from_secs(5)).await;
    stop_endpoint.cancel();
    // What reports this instance holds the router and the MCP runtime, and
    // the router holds the link: let go (after the console has the last
    // numbers), so that the servers stop below.
    if let Some(link) = &console_link {
        link.flush_metrics().await;
        link.detach_instance();
    }
    drop(status);
    drop(metrics);
    if let Err(error) = audit.sync() {
        tracing::error!("{error}");
    }
    // Every call still in flight is cancelled at its server before the
    // servers stop (rmcp's own drain gives up at the first answer it cannot
    // send to a client that is gone).
    stopper.stop_calls();
    if !calls.idle_within(std::time::Duration::from_secs(2)).await {
        tracing::warn!("calls still in flight after 2 s; stopping their servers anyway");
    }
    drop(mcp);
    if let Some(console) = hosted {
        console.stop();
        console.stopped().await;
    }
    // However the serving ended, a chain that failed to load is the error
    // (one still loading when the client went is not waited for).
    match router.first_chain_error() {
        Some(why) => Err(anyhow::anyhow!("{why}")),
        None => served.map(|()| ExitCode::SUCCESS),
    }
}

/// The instance's state as the one JSON line `gatehouse status` prints.
type StatusLine = Arc<dyn Fn() -> String + Send + Sync>;

/// What keeps reloads coming: the file watcher, the SIGHUP task and the
/// control socket.
struct Reloads {
    _watcher: FileWatcher,
    tasks: Vec<tokio::task::JoinHandle<()>>,
    /// What answers a reload asked for (the control socket's handler).
    asked: gatehouse_gateway::control::Handler,
}

impl Reloads {
    fn stop(self) {
        for task in self.tasks {
            task.abort();
        }
    }
}

/// Follows the config and the module files, SIGHUP and `gatehouse reload`
/// (a line `reload` on the control socket, answered with `ok ...` or
/// `error: ...`).
///
/// A change the watcher sees is read once the file has settled
/// ([`ConfigFile::settle`]): a new version refreshes the MCP runtime (which
/// keeps every server whose configuration did not change) and rebuilds the
/// chain; an empty, torn or invalid one is refused and the last whole
/// version keeps serving. A changed module file rebuilds the chain. SIGHUP
/// and `gatehouse reload` read the file at once (the operator says the edit
/// is done) and reopen the audit log first (rotation). Each kind of reload
/// is coalesced: one runs, one waits, whatever the number of requests.
/// Failures keep the old chain and are logged and reported to whoever asked.
fn spawn_reloads(
    reloader: Arc<Reloader>,
    file: Arc<ConfigFile>,
    mcp: McpRuntime,
    audit: Arc<AuditLog>,
    socket: &std::path::Path,
    status: Arc<std::sync::OnceLock<StatusLine>>,
) -> anyhow::Result<Reloads> {
    use gatehouse_gateway::control::{Handler, Request};
    use std::sync::atomic::{AtomicBool, Ordering};
    let asked: gatehouse_gateway::control::Job = {
        let (reloader, mcp) = (reloader.clone(), mcp.clone());
        Arc::new(move || Box::pin(reload_now(reloader.clone(), mcp.clone())))
    };
    let coalescer =
        gatehouse_gateway::control::Coalescer::new(std::time::Duration::from_millis(100), asked);
    let modules_changed = Arc::new(AtomicBool::new(false));
    let followed: gatehouse_gateway::control::Job = {
        let (reloader, file, modules_changed) =
            (reloader.clone(), file.clone(), modules_changed.clone());
        Arc::new(move || {
            let modules_changed = modules_changed.swap(false, Ordering::SeqCst);
            Box::pin(follow_change(
                reloader.clone(),
                file.clone(),
                mcp.clone(),
                modules_changed,
            ))
        })
    };
    let follower =
        gatehouse_gateway::control::Coalescer::new(std::time::Duration::from_millis(100), followed);
    let config = std::path::absolute(file.path()).unwrap_or_else(|_| file.path().to_path_buf());
    let mut watched: Vec<PathBuf> = reloader.module_paths();
    watched.push(config.clone());
    let paths: Vec<&std::path::Path> = watched.iter().map(PathBuf::as_path).collect();
    let watcher = FileWatcher::new(&paths, move |path| {
        if path == config {
            tracing::debug!(path = %path.display(), "the config changed; reading it once it settles");
            file.noticed();
        } else {
            tracing::info!(path = %path.display(), "a module changed; rebuilding the chain");
            modules_changed.store(true, Ordering::SeqCst);
        }
        follower.trigger();
    })?;
    // A reload asked for (`gatehouse reload`, the console): the audit log
    // reopened, then the chain rebuilt, coalesced.
    let handler: Handler = {
        let coalescer = coalescer.clone();
        let audit = audit.clone();
        let status = status.clone();
        Arc::new(move |request| match request {
            Request::Status => {
                let line = status
                    .get()
                    .map(|status| status())
                    .unwrap_or_else(|| "error: still starting".to_owned());
                Box::pin(async move { line })
            }
            Request::Reload => {
                let audit = audit.clone();
                let coalescer = coalescer.clone();
                Box::pin(async move {
                    let reopened = reopen_audit(&audit).await;
                    let answer = coalescer.request().await;
                    match reopened {
                        Ok(()) if answer.starts_with("ok") => {
                            format!("{answer}; audit log reopened")
                        }
                        Ok(()) => answer,
                        Err(error) => format!(
                            "error: the audit log was not reopened, records still go to the old file: {error}; the chain: {answer}"
                        ),
                    }
                })
            }
        })
    };
    #[allow(unused_mut)]
    let mut tasks = Vec::new();
    #[cfg(unix)]
    {
        use gatehouse_gateway::control;
        let on_hangup = coalescer.clone();
        let hangup_audit = audit.clone();
        let mut hangups = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())?;
        tasks.push(tokio::spawn(async move {
            while hangups.recv().await.is_some() {
                tracing::info!("SIGHUP: reopening the audit log and reloading the chain");
                let _ = reopen_audit(&hangup_audit).await;
                on_hangup.trigger();
            }
        }));
        let listener = control::bind(socket)
            .with_context(|| format!("cannot listen on the control socket {}", socket.display()))?;
        tasks.push(tokio::spawn(control::serve(listener, handler.clone())));
    }
    #[cfg(not(unix))]
    let _ = socket;
    Ok(Reloads {
        _watcher: watcher,
        tasks,
        asked: handler,
    })
}

/// Reopens the audit log off the async threads; logs a failure.
async fn reopen_audit(audit: &Arc<AuditLog>) -> Result<(), String> {
    let audit = audit.clone();
    match tokio::task::spawn_blocking(move || audit.reopen()).await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(error)) => {
            tracing::error!(
                "the audit log was not reopened; records still go to the old file: {error}"
            );
            Err(error.to_string())
        }
        Err(error) => Err(format!("the reopen task failed: {error}")),
    }
}

/// A reload asked for (SIGHUP, `gatehouse reload`): the config read now,
/// the chain and settings rebuilt; the line `gatehouse reload` prints.
async fn reload_now(reloader: Arc<Reloader>, mcp: McpRuntime) -> String {
    let outcome = reloader.reload_bounded().await;
    if let Ok(reloaded) = &outcome
        && reloaded.config_changed
    {
        refresh_now(&mcp);
    }
    reload_line(outcome)
}

/// Marks the runtime dirty and refreshes it in the background, so the
/// servers follow a new config version without waiting for a client's next
/// request: the status, `/readyz` and the metrics see them come up.
fn refresh_now(mcp: &McpRuntime) {
    mcp.invalidate();
    refresh_in_background(mcp);
}

/// Refreshes the runtime if it is dirty, in the background (coalesced with
/// any refresh under way); a failure is logged and retried at the next
/// request.
fn refresh_in_background(mcp: &McpRuntime) {
    let mcp = mcp.clone();
    tokio::spawn(async move {
        if let Err(error) = mcp.refresh_if_dirty().await {
            tracing::error!(
                "an MCP server did not start; serving the others, and retrying at the next request: {}",
                gatehouse_base::escape::Escaped(&error.to_string())
            );
        }
    });
}

/// A change the watcher saw: the config read once it settled (a new version
/// refreshes the runtime), the chain rebuilt if anything it is built from
/// changed.
async fn follow_change(
    reloader: Arc<Reloader>,
    file: Arc<ConfigFile>,
    mcp: McpRuntime,
    modules_changed: bool,
) -> String {
    let config_changed = match file.settle().await {
        Ok(reread) => reread == Reread::Changed,
        Err(error) => {
            tracing::warn!(
                "config change refused; the last whole version keeps serving: {}",
                gatehouse_base::escape::Escaped(&error.to_string())
            );
            false
        }
    };
    if config_changed {
        tracing::info!(path = %file.path().display(), "config changed; servers and chain follow");
        refresh_now(&mcp);
    }
    if !config_changed && !modules_changed {
        return "ok unchanged".to_owned();
    }
    reload_line(reloader.rebuild_bounded().await)
}

/// The line `gatehouse reload` prints for a reload's outcome (failures are
/// logged too).
fn reload_line(
    outcome: Result<gatehouse_gateway::reload::Reloaded, gatehouse_gateway::reload::ReloadError>,
) -> String {
    match outcome {
        Ok(reloaded) => {
            let modules: Vec<String> = reloaded
                .modules
                .iter()
                .map(|(name, digest)| format!("{name}={digest}"))
                .collect();
            let settings = if reloaded.settings_changed {
                "; [elicitations] updated"
            } else {
                ""
            };
            format!(
                "ok {} ({:?}){settings}",
                modules.join(" "),
                reloaded.elapsed
            )
        }
        Err(error) => {
            tracing::error!("reload refused; the old chain and settings keep serving: {error}");
            format!("error: {error}")
        }
    }
}

/// Serves one upstream session on stdin and stdout until the client closes
/// stdin or a signal comes (during `initialize` too: that is a clean stop,
/// not a failed start).
async fn serve_stdio(
    gateway: Gateway,
    instance: &str,
    control_socket: &std::path::Path,
    stopped: impl std::future::Future<Output = ()>,
) -> anyhow::Result<()> {
    use std::io::IsTerminal;
    if std::io::stdin().is_terminal() {
        // Started by hand: say what this is rather than wait in silence.
        eprintln!(
            "gatehouse serve (instance {instance}): an MCP server on stdin and stdout, for an MCP client \
             (Codex, Claude Code, Cursor) to start; `gatehouse init` prints the entry to give it. \
             Waiting for a client's `initialize` on stdin; Ctrl-C stops."
        );
    }
    // Non-blocking pipes when stdin and stdout are FIFOs (how most MCP
    // clients start us): each message is read and written on the reactor
    // rather than handed to a blocking-pool thread (about 40 µs less per
    // tools/call, docs/BENCHMARKS.md); anything else (a socketpair, a
    // terminal, a file) through blocking reads. The end of stdin ends the
    // session's questions at once (`gateway::stdio`).
    // The control socket goes at the end of stdin, before anything else: a
    // client may kill its servers soon after closing their stdin, and on a
    // busy machine the rest of the shutdown may not come first.
    let socket = control_socket.to_path_buf();
    let transport = gatehouse_gateway::stdio::transport_then(&gateway, move || {
        let _ = std::fs::remove_file(socket);
    });
    let mut stopped = std::pin::pin!(stopped);
    let service = tokio::select! {
        started = gateway.serve(transport) => match started {
            Ok(service) => service,
            // The client went away before its `initialize` (it died while
            // gatehouse started): a clean stop, not a failed start.
            Err(rmcp::service::ServerInitializeError::ConnectionClosed(_)) => {
                tracing::info!("the client went away before initialize; stopping");
                return Ok(());
            }
            Err(error) => return Err(error).context("MCP initialization on stdio failed"),
        },
        () = &mut stopped => return Ok(()),
    };
    tokio::select! {
        quit = service.waiting() => quit.map(|_| ()).context("the stdio session failed"),
        () = stopped => Ok(()),
    }
}

async fn serve_http(
    gateway: Gateway,
    http: HttpServer,
    stopped: impl std::future::Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let listening = http.bind().await?;
    println!("listening on {}", listening.url());
    listening
        .serve(move || Ok(gateway.for_new_http_session()), stopped)
        .await?;
    Ok(())
}
