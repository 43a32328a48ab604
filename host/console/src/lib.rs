//! The approvals console of gatehouse: one page where a person answers the
//! questions no module decided, for every `gatehouse serve` instance on a
//! config, and where operators read the audit log.
//!
//! Clients start one `gatehouse serve` per session, so the console is its
//! own process (`gatehouse console`, or hosted by `gatehouse serve
//! --console`): instances attach to it over a private local socket
//! ([`socket`], same uid only) through a [`link::Link`] and hand over their
//! questions; the [`hub::Hub`] keeps every open question in one place; the
//! [`web`] side shows them live in a browser and takes the first answer.
//! An instance that ends takes its questions off the page; a console that
//! ends leaves every instance's waiting questions to `on_unhandled`, which
//! the instance audits.
//!
//! ```no_run
//! use gatehouse_console::{ConsoleOptions, start};
//! use gatehouse_console::web::auth::Token;
//!
//! # async fn run() -> Result<(), gatehouse_console::ConsoleError> {
//! let (token, text) = Token::generate();
//! let running = start(ConsoleOptions {
//!     listen: "127.0.0.1:0".into(),
//!     socket: ".gatehouse/console.sock".into(),
//!     token,
//!     audit_log: None,
//!     public_origin: None,
//! })
//! .await?;
//! println!("open http://{} and log in with {text}", running.address());
//! running.stopped().await;
//! # Ok(())
//! # }
//! ```

#![deny(missing_docs)]

pub mod config;
pub mod hub;
pub mod link;
pub mod question;
pub mod socket;
pub mod status;
pub mod web;
pub mod wire;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use tokio_util::sync::CancellationToken;

/// How long a stopping console waits for its open pages' connections.
pub const STOP_GRACE: std::time::Duration = std::time::Duration::from_secs(1);

/// What the console runs with.
#[derive(Debug)]
pub struct ConsoleOptions {
    /// The page's address (`host:port`; port 0 picks one).
    pub listen: String,
    /// The socket instances attach to.
    pub socket: PathBuf,
    /// The login token.
    pub token: web::auth::Token,
    /// The audit log the audit page reads.
    pub audit_log: Option<PathBuf>,
    /// The origin a TLS proxy in front serves the console at, if one does.
    pub public_origin: Option<url::Url>,
}

/// Why the console did not start.
#[derive(Debug, thiserror::Error)]
pub enum ConsoleError {
    /// The socket.
    #[error(transparent)]
    Socket(#[from] socket::SocketError),
    /// The page's address.
    #[error("the console cannot listen on {address}: {error}")]
    Listen {
        /// The address.
        address: String,
        /// What binding said.
        error: std::io::Error,
    },
}

/// A running console.
#[derive(Debug)]
pub struct Running {
    address: SocketAddr,
    hub: Arc<hub::Hub>,
    stop: CancellationToken,
    tasks: Vec<tokio::task::JoinHandle<()>>,
    socket: PathBuf,
}

impl Running {
    /// Where the page is served.
    pub fn address(&self) -> SocketAddr {
        self.address
    }

    /// The hub.
    pub fn hub(&self) -> &Arc<hub::Hub> {
        &self.hub
    }

    /// A token cancelled when the console is asked to stop, for what is
    /// served beside it (the telemetry endpoint).
    pub fn stopping(&self) -> CancellationToken {
        self.stop.clone()
    }

    /// Stops serving (the socket file is removed).
    pub fn stop(&self) {
        self.stop.cancel();
    }

    /// Waits until the console is asked to stop ([`Running::stop`]), then
    /// removes its socket (no instance attaches any more) and gives open
    /// pages [`STOP_GRACE`] to close before their connections are dropped.
    pub async fn stopped(self) {
        self.stop.cancelled().await;
        let _ = std::fs::remove_file(&self.socket);
        let deadline = tokio::time::Instant::now() + STOP_GRACE;
        for task in self.tasks {
            let abort = task.abort_handle();
            if tokio::time::timeout_at(deadline, task).await.is_err() {
                abort.abort();
            }
        }
    }
}

/// Binds the socket and the page's address, and serves both until
/// [`Running::stop`].
pub async fn start(options: ConsoleOptions) -> Result<Running, ConsoleError> {
    let listener = socket::bind(&options.socket).await?;
    let tcp = tokio::net::TcpListener::bind(&options.listen)
        .await
        .map_err(|error| ConsoleError::Listen {
            address: options.listen.clone(),
            error,
        })?;
    let address = tcp.local_addr().map_err(|error| ConsoleError::Listen {
        address: options.listen.clone(),
        error,
    })?;
    let hub = Arc::new(hub::Hub::new());
    let stop = CancellationToken::new();
    let secure = options
        .public_origin
        .as_ref()
        .is_some_and(|origin| origin.scheme() == "https");
    let web = Arc::new(
        web::Web::new(hub.clone(), options.token, options.audit_log, stop.clone())
            .with_secure_cookie(secure),
    );
    let mut hosts = web::guard::Hosts::for_address(address);
    if let Some(origin) = &options.public_origin {
        hosts = hosts.with_public_origin(origin);
    }
    let app = web::router(web, hosts);
    let serving = {
        let stop = stop.clone();
        tokio::spawn(async move {
            let shutdown = async move { stop.cancelled().await };
            if let Err(error) = axum::serve(tcp, app).with_graceful_shutdown(shutdown).await {
                tracing::error!("the console's page stopped: {error}");
            }
        })
    };
    let attaching = tokio::spawn(socket::serve(listener, hub.clone(), stop.clone()));
    Ok(Running {
        address,
        hub,
        stop,
        tasks: vec![serving, attaching],
        socket: options.socket,
    })
}
