//! The operator's address: `/metrics` (OpenMetrics), `/healthz` and
//! `/readyz`, over plain HTTP on loopback unless the operator allows
//! otherwise.
//!
//! A page in a browser must not read it through DNS rebinding (a name of
//! the attacker's that resolves to 127.0.0.1): a request's `Host` must be an
//! IP address, `localhost`, or one of the operator's `hosts`. Only `GET`
//! and `HEAD` are served.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;

use crate::exposition::{Format, render};
use crate::health::Readiness;
use crate::series::Snapshot;

/// What the endpoint reports: the numbers and the readiness, read at each
/// request.
pub trait Source: Send + Sync + 'static {
    /// Every series now.
    fn snapshot(&self) -> Snapshot;
    /// The readiness checks now.
    fn readiness(&self) -> Readiness;
}

/// A [`Source`] made of two functions.
pub struct FnSource<S, R> {
    /// Gives [`Source::snapshot`].
    pub snapshot: S,
    /// Gives [`Source::readiness`].
    pub readiness: R,
}

impl<S, R> Source for FnSource<S, R>
where
    S: Fn() -> Snapshot + Send + Sync + 'static,
    R: Fn() -> Readiness + Send + Sync + 'static,
{
    fn snapshot(&self) -> Snapshot {
        (self.snapshot)()
    }

    fn readiness(&self) -> Readiness {
        (self.readiness)()
    }
}

/// Why the endpoint could not start.
#[derive(Debug, thiserror::Error)]
pub enum EndpointError {
    /// The address is not loopback and remote access was not allowed.
    #[error(
        "the telemetry address {0} is not loopback: metrics name servers and modules; set [telemetry] allow_remote = true to serve them beyond this machine"
    )]
    NotLoopback(String),
    /// Binding failed.
    #[error("cannot listen for telemetry on {address}: {source}")]
    Bind {
        /// The address.
        address: String,
        /// What the system said.
        source: std::io::Error,
    },
}

/// The default operator address.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:9464";

/// Where and for whom the endpoint listens: the `[telemetry]` section of
/// `gatehouse.toml` (or `gatehouse serve --metrics ADDR`).
///
/// ```
/// use gatehouse_telemetry::endpoint::{DEFAULT_LISTEN, EndpointConfig};
///
/// let config: EndpointConfig = serde_json::from_str(r#"{"hosts": ["metrics.internal"]}"#)?;
/// assert_eq!(config.listen, DEFAULT_LISTEN);
/// assert!(!config.allow_remote);
/// # Ok::<(), serde_json::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct EndpointConfig {
    /// `HOST:PORT` (default [`DEFAULT_LISTEN`]; port 0 takes a free one).
    pub listen: String,
    /// Whether an address other than loopback is allowed: metrics name
    /// servers and modules, and the endpoint has no login.
    pub allow_remote: bool,
    /// Host names a request may name besides IP addresses and `localhost`
    /// (the name Prometheus scrapes this machine by).
    pub hosts: Vec<String>,
}

impl Default for EndpointConfig {
    fn default() -> Self {
        EndpointConfig {
            listen: DEFAULT_LISTEN.to_owned(),
            allow_remote: false,
            hosts: Vec::new(),
        }
    }
}

/// A bound endpoint, not yet serving.
pub struct Endpoint {
    listener: tokio::net::TcpListener,
    app: axum::Router,
}

impl Endpoint {
    /// Binds `config.listen` for `source`.
    pub async fn bind(
        config: &EndpointConfig,
        source: Arc<dyn Source>,
    ) -> Result<Endpoint, EndpointError> {
        if !config.allow_remote && !gatehouse_base::loopback::is_loopback(&config.listen) {
            return Err(EndpointError::NotLoopback(
                gatehouse_base::escape::escape(&config.listen).to_string(),
            ));
        }
        let listener = tokio::net::TcpListener::bind(&config.listen)
            .await
            .map_err(|source| EndpointError::Bind {
                address: gatehouse_base::escape::escape(&config.listen).to_string(),
                source,
            })?;
        let state = Arc::new(Served {
            source,
            hosts: config
                .hosts
                .iter()
                .map(|host| host.to_ascii_lowercase())
                .collect(),
        });
        let app = axum::Router::new()
            .route("/metrics", get(metrics))
            .route("/healthz", get(healthz))
            .route("/readyz", get(readyz))
            .with_state(state);
        Ok(Endpoint { listener, app })
    }

    /// The address it is bound to.
    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// Serves until `stop` completes.
    pub async fn serve(self, stop: impl std::future::Future<Output = ()> + Send + 'static) {
        if let Err(error) = axum::serve(self.listener, self.app)
            .with_graceful_shutdown(stop)
            .await
        {
            tracing::warn!("the telemetry endpoint stopped: {error}");
        }
    }
}

struct Served {
    source: Arc<dyn Source>,
    hosts: Vec<String>,
}

impl Served {
    /// Whether the request's `Host` is one this endpoint answers to.
    fn host_allowed(&self, headers: &HeaderMap) -> bool {
        let Some(host) = headers
            .get(header::HOST)
            .and_then(|host| host.to_str().ok())
        else {
            // HTTP/1.0 without Host: no browser sends that.
            return true;
        };
        let name = match host.strip_prefix('[') {
            Some(bracketed) => {
                return bracketed
                    .split(']')
                    .next()
                    .is_some_and(|ip| ip.parse::<std::net::Ipv6Addr>().is_ok());
            }
            None => host.rsplit_once(':').map_or(host, |(name, _)| name),
        };
        let name = name.to_ascii_lowercase();
        name.parse::<std::net::Ipv4Addr>().is_ok()
            || name == "localhost"
            || self.hosts.contains(&name)
    }

    fn refuse(headers: &HeaderMap) -> Response {
        let host = headers
            .get(header::HOST)
            .map(|host| String::from_utf8_lossy(host.as_bytes()).into_owned())
            .unwrap_or_default();
        tracing::warn!(
            host = %gatehouse_base::escape::escape(&host),
            "telemetry request refused: its Host is not an address of this endpoint (add the name to [telemetry] hosts)"
        );
        (StatusCode::MISDIRECTED_REQUEST, "unknown Host\n").into_response()
    }
}

async fn metrics(State(served): State<Arc<Served>>, headers: HeaderMap) -> Response {
    if !served.host_allowed(&headers) {
        return Served::refuse(&headers);
    }
    let format = Format::negotiate(
        headers
            .get(header::ACCEPT)
            .and_then(|accept| accept.to_str().ok()),
    );
    let text = render(&served.source.snapshot(), format);
    (
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static(format.content_type()),
        )],
        text,
    )
        .into_response()
}

async fn healthz(State(served): State<Arc<Served>>, headers: HeaderMap) -> Response {
    if !served.host_allowed(&headers) {
        return Served::refuse(&headers);
    }
    (StatusCode::OK, "ok\n").into_response()
}

async fn readyz(State(served): State<Arc<Served>>, headers: HeaderMap) -> Response {
    if !served.host_allowed(&headers) {
        return Served::refuse(&headers);
    }
    let readiness = served.source.readiness();
    let status = if readiness.ready() {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (status, readiness.to_text()).into_response()
}
