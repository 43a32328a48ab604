//! The HTTP listener of `gatehouse serve --listen`: rmcp's streamable HTTP
//! service at [`PATH`] behind a guard that every request passes first.
//!
//! The guard, in order:
//!
//! 1. A request with an `Origin` header not in `[gateway] allowed_origins`
//!    (exact origins, see [`parse_origin`]) gets 403, whatever else it
//!    carries: a web page the user happens to visit cannot drive the gateway.
//!    A request without `Origin` (a non-browser client) passes this check.
//! 2. A request without `Authorization: Bearer <token>`, or with another
//!    token, gets 401 with `WWW-Authenticate: Bearer`. The token is compared
//!    as SHA-256 digests in constant time ([`BearerToken::matches`]); the
//!    server keeps only the digest.
//! 3. A POST without `Mcp-Session-Id` (an `initialize`, which would open a
//!    session) gets 503 while `[gateway] max_http_sessions` sessions are
//!    open. The session manager enforces the same limit exactly; a session
//!    closed by DELETE, or ended by rmcp's idle timeout, frees its slot.
//!
//! The token ([`HttpAuth`]) comes from the environment variable named by
//! `[gateway] bearer_token_env_var`, or, when none is named, is made at
//! every start (32 random bytes, hex) and written to `.gatehouse/token`
//! beside the config: 0600, through a new file renamed into place (a symbolic
//! link in its way is replaced, never followed), in a directory that must be
//! this user's and is made 0700. Clients read the file; the token is never
//! printed. Without a named variable only a loopback address may be bound
//! ([`gatehouse_base::loopback::is_loopback`]); the address is checked as written and again once bound.
//!
//! The factory handed to [`Listening::serve`] makes the MCP server of each
//! new session. A `DELETE` that ends a session is answered `200 OK` (rmcp
//! says `202`, which clients take for a failed termination).
//!
//! A question a server asks while it handles an upstream client's request
//! goes out on the SSE stream of that request's POST (`upstream`), so a
//! client that never opens the optional GET stream still gets it.

use std::collections::HashSet;
use std::future::Future;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use rmcp::ServerHandler;
use rmcp::model::{ClientJsonRpcMessage, ServerJsonRpcMessage};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::session::{
    ServerSseMessage, SessionId, SessionManager,
};
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use sha2::{Digest, Sha256};

use gatehouse_base::escape::Escaped;
use gatehouse_base::private_fs::PrivateError;

/// The path the MCP endpoint is served at.
pub const PATH: &str = "/mcp";

/// HTTP sessions open at once unless `[gateway] max_http_sessions` says
/// otherwise.
pub const DEFAULT_MAX_SESSIONS: usize = 64;

/// Random bytes in a generated token (written as hex, twice as many
/// characters).
pub const TOKEN_BYTES: usize = 32;

/// The shortest token accepted from the environment, in characters.
pub const MIN_TOKEN_CHARS: usize = 16;

/// The header that names an HTTP session.
const SESSION_HEADER: &str = "mcp-session-id";

/// Seconds a client refused for the session limit is told to wait.
const RETRY_AFTER_SECS: &str = "5";

/// Why the HTTP listener could not be set up or run. Each says what to set.
#[derive(Debug, thiserror::Error)]
pub enum HttpError {
    /// A non-loopback address without a configured token.
    #[error(
        "refusing to serve HTTP on {address}: it is not a loopback address (127.0.0.0/8, ::1, localhost), and without `[gateway] bearer_token_env_var` the token is only written to a local file; set `[gateway] bearer_token_env_var` to the name of an environment variable holding the token clients must send, or listen on 127.0.0.1"
    )]
    NotLoopback {
        /// The address as given, or as bound.
        address: String,
    },
    /// The configured variable is not set.
    #[error(
        "`[gateway] bearer_token_env_var` names {var}, which is not set; set {var} to the token HTTP clients must send (at least {MIN_TOKEN_CHARS} characters, e.g. `openssl rand -hex 32`)"
    )]
    TokenUnset {
        /// The variable's name.
        var: String,
    },
    /// The configured variable is set but unusable.
    #[error(
        "`[gateway] bearer_token_env_var` names {var}, whose value cannot be the token: {problem}; set {var} to at least {MIN_TOKEN_CHARS} printable ASCII characters without spaces, e.g. `openssl rand -hex 32`"
    )]
    TokenInvalid {
        /// The variable's name.
        var: String,
        /// What is wrong with it (never the value).
        problem: String,
    },
    /// A token given directly is unusable.
    #[error(
        "the bearer token cannot be used: {0}; use at least {MIN_TOKEN_CHARS} printable ASCII characters without spaces"
    )]
    BadToken(String),
    /// No randomness for a token.
    #[error("cannot make a random token: {0}; set `[gateway] bearer_token_env_var` instead")]
    Random(String),
    /// The token file could not be written, or its directory is not one
    /// gatehouse may keep it in ([`gatehouse_base::private_fs`]: a symbolic link, not a
    /// directory, or another user's).
    #[error(
        "token file {}: {source}; or set `[gateway] bearer_token_env_var`, and no token file is written",
        path.display()
    )]
    TokenFile {
        /// The token file.
        path: PathBuf,
        /// What failed, naming the file or directory it failed on and what
        /// to do about it.
        source: PrivateError,
    },
    /// No private token file can be made on this platform.
    #[error(
        "token file {}: a private token file cannot be made on this platform; set `[gateway] bearer_token_env_var`",
        path.display()
    )]
    TokenUnsupported {
        /// The token file.
        path: PathBuf,
    },
    /// An allowed origin is not an origin.
    #[error("allowed origin: {0}")]
    Origin(String),
    /// The address could not be bound.
    #[error("cannot listen on {address}: {source}")]
    Bind {
        /// The address.
        address: String,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The server stopped with an error.
    #[error("the HTTP server failed: {0}")]
    Serve(std::io::Error),
}

/// A bearer token, kept only as its SHA-256 digest.
#[derive(Clone)]
pub struct BearerToken {
    digest: [u8; 32],
}

impl std::fmt::Debug for BearerToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("BearerToken(..)")
    }
}

impl BearerToken {
    /// The token `secret`: at least [`MIN_TOKEN_CHARS`] characters, each
    /// printable ASCII other than space (what an `Authorization` header can
    /// carry as is). The error says what is wrong without quoting it.
    pub fn new(secret: &str) -> Result<BearerToken, String> {
        if secret.is_empty() {
            return Err("it is empty".to_owned());
        }
        if let Some(position) = secret.bytes().position(|byte| !byte.is_ascii_graphic()) {
            return Err(format!(
                "character {} is a space, a control character or not ASCII",
                position + 1
            ));
        }
        if secret.len() < MIN_TOKEN_CHARS {
            return Err(format!("it is only {} characters long", secret.len()));
        }
        Ok(BearerToken {
            digest: Sha256::digest(secret.as_bytes()).into(),
        })
    }

    /// A fresh random token and its text ([`TOKEN_BYTES`] bytes, hex).
    pub fn generate() -> Result<(BearerToken, String), HttpError> {
        let mut bytes = [0u8; TOKEN_BYTES];
        getrandom::fill(&mut bytes).map_err(|error| HttpError::Random(error.to_string()))?;
        let secret = hex::encode(bytes);
        let token = BearerToken::new(&secret).map_err(HttpError::BadToken)?;
        Ok((token, secret))
    }

    /// Whether `presented` is this token. Both sides are hashed first and
    /// the digests compared in constant time, so neither the time taken nor
    /// an early exit says how much of it was right, or how long it is.
    pub fn matches(&self, presented: &[u8]) -> bool {
        let presented: [u8; 32] = Sha256::digest(presented).into();
        let difference = presented
            .iter()
            .zip(self.digest.iter())
            .fold(0u8, |difference, (a, b)| difference | (a ^ b));
        std::hint::black_box(difference) == 0
    }
}

/// The credentials of an `Authorization` header value with the `Bearer`
/// scheme (any case, then one or more spaces); `None` for any other scheme
/// or an empty token.
pub fn bearer_credentials(value: &[u8]) -> Option<&[u8]> {
    const SCHEME: &[u8] = b"bearer";
    let scheme = value.get(..SCHEME.len())?;
    if !scheme.eq_ignore_ascii_case(SCHEME) {
        return None;
    }
    let rest = &value[SCHEME.len()..];
    let token_start = rest.iter().position(|&byte| byte != b' ')?;
    if token_start == 0 {
        return None;
    }
    Some(rest[token_start..].trim_ascii_end())
}

/// Where the token came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TokenSource {
    /// The environment variable `[gateway] bearer_token_env_var` names.
    Environment(String),
    /// Given by the program that embeds the listener.
    Given,
    /// Made at start and written to this file.
    Generated(PathBuf),
}

/// The token every request must carry, and where it came from.
#[derive(Debug, Clone)]
pub struct HttpAuth {
    token: BearerToken,
    source: TokenSource,
}

impl HttpAuth {
    /// The token in the environment variable `var`; an error names the
    /// variable and says what to set, never quoting the value.
    pub fn from_env(var: &str) -> Result<HttpAuth, HttpError> {
        let value = std::env::var_os(var).ok_or_else(|| HttpError::TokenUnset {
            var: var.to_owned(),
        })?;
        let invalid = |problem: String| HttpError::TokenInvalid {
            var: var.to_owned(),
            problem,
        };
        let value = value
            .to_str()
            .ok_or_else(|| invalid("it is not valid UTF-8".to_owned()))?;
        let token = BearerToken::new(value).map_err(invalid)?;
        Ok(HttpAuth {
            token,
            source: TokenSource::Environment(var.to_owned()),
        })
    }

    /// The token `secret`, given by the embedding program (it counts as
    /// configured: any address may be bound with it).
    pub fn given(secret: &str) -> Result<HttpAuth, HttpError> {
        Ok(HttpAuth {
            token: BearerToken::new(secret).map_err(HttpError::BadToken)?,
            source: TokenSource::Given,
        })
    }

    /// A fresh random token, written to `file` (see the module docs); only
    /// loopback addresses may be bound with it.
    pub fn generate(file: &Path) -> Result<HttpAuth, HttpError> {
        let (token, secret) = BearerToken::generate()?;
        write_token_file(file, &secret)?;
        Ok(HttpAuth {
            token,
            source: TokenSource::Generated(file.to_path_buf()),
        })
    }

    /// Where the token came from.
    pub fn source(&self) -> &TokenSource {
        &self.source
    }

    /// The file clients read the token from, if gatehouse made it.
    pub fn token_file(&self) -> Option<&Path> {
        match &self.source {
            TokenSource::Generated(file) => Some(file),
            _ => None,
        }
    }

    /// Whether the operator chose the token (only then may a non-loopback
    /// address be bound).
    fn configured(&self) -> bool {
        !matches!(self.source, TokenSource::Generated(_))
    }
}

/// An exact origin from `[gateway] allowed_origins`, checked and lowercased:
/// `scheme://host[:port]`, with no path, query, user or trailing slash, since
/// a browser's `Origin` header never carries those. `null` and `*` are
/// refused: they would let in any sandboxed page, or every page.
pub fn parse_origin(text: &str) -> Result<String, String> {
    let example =
        "write scheme://host[:port] with no path or trailing slash, e.g. \"http://localhost:3000\"";
    if text == "null" || text == "*" {
        return Err(format!(
            "{text:?} would allow pages of any origin; list exact origins ({example})"
        ));
    }
    let not_an_origin = || format!("{text:?} is not an origin; {example}");
    let (scheme, authority) = text.split_once("://").ok_or_else(not_an_origin)?;
    let scheme_ok = scheme.starts_with(|c: char| c.is_ascii_alphabetic())
        && scheme
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'));
    let authority_ok = !authority.is_empty()
        && !authority
            .chars()
            .any(|c| matches!(c, '/' | '?' | '#' | '@' | '\\') || !c.is_ascii_graphic())
        && authority.parse::<http::uri::Authority>().is_ok()
        && origin_port_ok(authority);
    if !scheme_ok || !authority_ok {
        return Err(not_an_origin());
    }
    Ok(text.to_ascii_lowercase())
}

/// Whether an origin's authority has no port, or a port that is a number
/// up to 65535 (`http::uri::Authority` takes any text after the colon).
fn origin_port_ok(authority: &str) -> bool {
    let port = match authority.strip_prefix('[') {
        Some(v6) => match v6.split_once(']') {
            Some((_, "")) => return true,
            Some((_, rest)) => match rest.strip_prefix(':') {
                Some(port) => port,
                None => return false,
            },
            None => return false,
        },
        None => match authority.rsplit_once(':') {
            Some((_, port)) => port,
            None => return true,
        },
    };
    !port.is_empty() && port.bytes().all(|b| b.is_ascii_digit()) && port.parse::<u16>().is_ok()
}

/// Whether an `Origin` header value is one of `allowed` (entries as
/// [`parse_origin`] returns them; compared exactly, ignoring ASCII case).
pub fn origin_allowed(origin: &[u8], allowed: &[String]) -> bool {
    std::str::from_utf8(origin).is_ok_and(|origin| {
        allowed
            .iter()
            .any(|allowed| allowed.eq_ignore_ascii_case(origin))
    })
}

/// The HTTP listener, configured but not yet bound.
#[derive(Debug)]
pub struct HttpServer {
    address: String,
    auth: HttpAuth,
    allowed_origins: Vec<String>,
    max_sessions: usize,
    session_idle_timeout: Option<Duration>,
}

impl HttpServer {
    /// A listener on `address` whose clients send the token in the variable
    /// `bearer_token_env_var` names (`[gateway] bearer_token_env_var`; it
    /// must be set), or without one a token made now and written to
    /// `token_file`, which allows only a loopback address. The address is
    /// checked before a token is made, so a refused address writes nothing.
    /// Allowed origins and the session limit are the builder's to set.
    pub fn with_token(
        address: &str,
        bearer_token_env_var: Option<&str>,
        token_file: &Path,
    ) -> Result<HttpServer, HttpError> {
        let auth = match bearer_token_env_var {
            Some(var) => HttpAuth::from_env(var)?,
            None => {
                refuse_unless_loopback(address)?;
                HttpAuth::generate(token_file)?
            }
        };
        HttpServer::new(address, auth)
    }

    /// A listener on `address` requiring `auth`'s token, with no allowed
    /// origins and [`DEFAULT_MAX_SESSIONS`]. A generated token allows only
    /// a loopback address.
    pub fn new(address: impl Into<String>, auth: HttpAuth) -> Result<HttpServer, HttpError> {
        let address = address.into();
        if !auth.configured() {
            refuse_unless_loopback(&address)?;
        }
        Ok(HttpServer {
            address,
            auth,
            allowed_origins: Vec::new(),
            max_sessions: DEFAULT_MAX_SESSIONS,
            session_idle_timeout: None,
        })
    }

    /// The browser origins allowed (checked at [`HttpServer::bind`]).
    pub fn allowed_origins(mut self, origins: impl IntoIterator<Item = impl Into<String>>) -> Self {
        self.allowed_origins = origins.into_iter().map(Into::into).collect();
        self
    }

    /// At most `limit` sessions open at once (at least 1).
    pub fn max_sessions(mut self, limit: usize) -> Self {
        self.max_sessions = limit.max(1);
        self
    }

    /// How long a session may be idle before it is closed and its slot
    /// freed (rmcp's default, 5 minutes, unless set).
    pub fn session_idle_timeout(mut self, timeout: Duration) -> Self {
        self.session_idle_timeout = Some(timeout);
        self
    }

    /// The token and where it came from.
    pub fn auth(&self) -> &HttpAuth {
        &self.auth
    }

    /// The file clients read the token from, if gatehouse made it.
    pub fn token_file(&self) -> Option<&Path> {
        self.auth.token_file()
    }

    /// Checks the origins and binds the address. With a generated token the
    /// bound address must be loopback too (a name like `localhost` could
    /// resolve elsewhere).
    pub async fn bind(mut self) -> Result<Listening, HttpError> {
        self.allowed_origins = self
            .allowed_origins
            .iter()
            .map(|origin| parse_origin(origin))
            .collect::<Result<_, _>>()
            .map_err(HttpError::Origin)?;
        let bind_error = |source| HttpError::Bind {
            address: self.address.clone(),
            source,
        };
        let listener = tokio::net::TcpListener::bind(&self.address)
            .await
            .map_err(bind_error)?;
        let local = listener.local_addr().map_err(bind_error)?;
        let loopback = local.ip().to_canonical().is_loopback();
        if !loopback && !self.auth.configured() {
            return Err(HttpError::NotLoopback {
                address: format!("{} (bound as {local})", self.address),
            });
        }
        Ok(Listening {
            listener,
            local,
            loopback,
            server: self,
        })
    }
}

fn refuse_unless_loopback(address: &str) -> Result<(), HttpError> {
    if gatehouse_base::loopback::is_loopback(address) {
        Ok(())
    } else {
        Err(HttpError::NotLoopback {
            address: address.to_owned(),
        })
    }
}

/// The bound listener, ready to serve.
#[derive(Debug)]
pub struct Listening {
    listener: tokio::net::TcpListener,
    local: SocketAddr,
    loopback: bool,
    server: HttpServer,
}

impl Listening {
    /// The address bound.
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// The endpoint's URL, `http://<address>/mcp`.
    pub fn url(&self) -> String {
        format!("http://{}{PATH}", self.local)
    }

    /// Serves until `shutdown` completes (or the server fails). `factory`
    /// makes the MCP server of each new session. Sessions still open when
    /// it returns end with the runtime.
    pub async fn serve<S, F>(
        self,
        factory: F,
        shutdown: impl Future<Output = ()> + Send,
    ) -> Result<(), HttpError>
    where
        S: ServerHandler + Send + 'static,
        F: Fn() -> Result<S, std::io::Error> + Send + Sync + 'static,
    {
        let Listening {
            listener,
            local,
            loopback,
            server,
        } = self;
        let mut manager = LocalSessionManager::default();
        if let Some(timeout) = server.session_idle_timeout {
            manager.session_config.keep_alive = Some(timeout);
        }
        let sessions = Arc::new(SessionLimit::new(manager, server.max_sessions));
        let config = if loopback {
            // rmcp's check against DNS rebinding, with the address bound.
            let bound = local.ip().to_string();
            StreamableHttpServerConfig::default().with_allowed_hosts([
                "localhost",
                "127.0.0.1",
                "::1",
                bound.as_str(),
            ])
        } else {
            // Reachable under any name; the token is what keeps others out.
            StreamableHttpServerConfig::default().disable_allowed_hosts()
        };
        let service = StreamableHttpService::new(factory, sessions.clone(), config);
        let guard = Guard {
            token: server.auth.token.clone(),
            allowed_origins: server.allowed_origins.into(),
            sessions: sessions as Arc<dyn Occupancy>,
        };
        let app = axum::Router::new()
            .nest_service(PATH, service)
            .layer(axum::middleware::from_fn_with_state(guard, guard_requests));
        tokio::select! {
            served = axum::serve(listener, app) => served.map_err(HttpError::Serve),
            () = shutdown => Ok(()),
        }
    }
}

/// How full the sessions are.
pub trait Occupancy: Send + Sync {
    /// Whether a new session would be refused.
    fn full(&self) -> bool;
    /// The limit.
    fn limit(&self) -> usize;
}

/// What every request passes before rmcp sees it.
#[derive(Clone)]
pub struct Guard {
    token: BearerToken,
    allowed_origins: Arc<[String]>,
    sessions: Arc<dyn Occupancy>,
}

impl std::fmt::Debug for Guard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Guard")
            .field("allowed_origins", &self.allowed_origins)
            .field("max_sessions", &self.sessions.limit())
            .finish_non_exhaustive()
    }
}

/// Why the guard refused a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// An `Origin` not allowed: 403.
    Origin,
    /// No bearer token (`presented` false) or a wrong one: 401.
    Unauthorized {
        /// Whether credentials were sent at all.
        presented: bool,
    },
    /// A new session while the limit is reached: 503.
    SessionLimit {
        /// The limit.
        limit: usize,
    },
}

impl Guard {
    /// A guard requiring `token`, allowing `allowed_origins` (as
    /// [`parse_origin`] returns them) and refusing new sessions while
    /// `sessions` is full.
    pub fn new(
        token: BearerToken,
        allowed_origins: Vec<String>,
        sessions: Arc<dyn Occupancy>,
    ) -> Self {
        Guard {
            token,
            allowed_origins: allowed_origins.into(),
            sessions,
        }
    }

    /// Checks a request's method and headers: the origin, then the token,
    /// then the session limit (see the module docs).
    pub fn check(&self, method: &Method, headers: &HeaderMap) -> Result<(), Refusal> {
        if headers
            .get_all(header::ORIGIN)
            .iter()
            .any(|origin| !origin_allowed(origin.as_bytes(), &self.allowed_origins))
        {
            return Err(Refusal::Origin);
        }
        let mut authorizations = headers.get_all(header::AUTHORIZATION).iter();
        let authorized = match (authorizations.next(), authorizations.next()) {
            (Some(value), None) => match bearer_credentials(value.as_bytes()) {
                Some(presented) => self.token.matches(presented),
                None => false,
            },
            (None, _) => return Err(Refusal::Unauthorized { presented: false }),
            // Two headers: ambiguous, refused.
            (Some(_), Some(_)) => false,
        };
        if !authorized {
            return Err(Refusal::Unauthorized { presented: true });
        }
        if method == Method::POST && !headers.contains_key(SESSION_HEADER) && self.sessions.full() {
            return Err(Refusal::SessionLimit {
                limit: self.sessions.limit(),
            });
        }
        Ok(())
    }
}

impl IntoResponse for Refusal {
    fn into_response(self) -> Response {
        match self {
            Refusal::Origin => (
                StatusCode::FORBIDDEN,
                "Forbidden: requests from this Origin are not allowed; add it to `[gateway] allowed_origins` in gatehouse.toml\n",
            )
                .into_response(),
            Refusal::Unauthorized { presented } => {
                let challenge = if presented {
                    "Bearer realm=\"gatehouse\", error=\"invalid_token\""
                } else {
                    "Bearer realm=\"gatehouse\""
                };
                (
                    StatusCode::UNAUTHORIZED,
                    [(header::WWW_AUTHENTICATE, HeaderValue::from_static(challenge))],
                    "Unauthorized: send `Authorization: Bearer <token>`; the token is in .gatehouse/token beside gatehouse.toml (made anew at every start), or in the variable `[gateway] bearer_token_env_var` names\n",
                )
                    .into_response()
            }
            Refusal::SessionLimit { limit } => (
                StatusCode::SERVICE_UNAVAILABLE,
                [(header::RETRY_AFTER, HeaderValue::from_static(RETRY_AFTER_SECS))],
                format!("Service Unavailable: {}\n", SessionLimitError::<std::convert::Infallible>::Full { limit }),
            )
                .into_response(),
        }
    }
}

/// The middleware: [`Guard::check`], then rmcp; a session ended by
/// `DELETE` is answered [`session_ended`].
async fn guard_requests(State(guard): State<Guard>, request: Request, next: Next) -> Response {
    match guard.check(request.method(), request.headers()) {
        Ok(()) => {
            let delete = request.method() == Method::DELETE;
            let response = next.run(request).await;
            if delete {
                session_ended(response)
            } else {
                response
            }
        }
        Err(refusal) => {
            match &refusal {
                Refusal::Origin => {
                    let origin = request
                        .headers()
                        .get(header::ORIGIN)
                        .map(|origin| String::from_utf8_lossy(origin.as_bytes()).into_owned())
                        .unwrap_or_default();
                    let origin: String = origin.chars().take(200).collect();
                    tracing::warn!(
                        "HTTP request refused: Origin {} is not in [gateway] allowed_origins",
                        Escaped(&origin)
                    );
                }
                Refusal::Unauthorized { presented } => {
                    tracing::debug!(presented, "HTTP request refused: no valid bearer token");
                }
                Refusal::SessionLimit { limit } => {
                    tracing::warn!(
                        "new HTTP session refused: {limit} are open ([gateway] max_http_sessions)"
                    );
                }
            }
            refusal.into_response()
        }
    }
}

/// rmcp answers a `DELETE` that ended its session `202 Accepted`, which
/// clients read as a failure (the Python SDK logs "Session termination
/// failed: 202"; it takes 200 or 204, as the TypeScript SDK's server
/// answers): the session is closed by then, so `202` becomes `200 OK`.
/// Any other answer (`404` for an unknown session, `400`, `405`) is kept.
fn session_ended(mut response: Response) -> Response {
    if response.status() == StatusCode::ACCEPTED {
        *response.status_mut() = StatusCode::OK;
    }
    response
}

/// Why the session manager refused.
#[derive(Debug, thiserror::Error)]
enum SessionLimitError<E> {
    /// The limit is reached.
    #[error(
        "{limit} HTTP sessions are open, the most `[gateway] max_http_sessions` allows; close one (DELETE /mcp with its Mcp-Session-Id), wait for an idle one to expire, or raise the limit"
    )]
    Full { limit: usize },
    /// The inner manager failed.
    #[error(transparent)]
    Inner(E),
}

/// rmcp's session manager with at most `limit` sessions: a new one is
/// refused while `limit` are open or being created; a closed one (DELETE,
/// or its worker ended, e.g. idle) frees its slot.
struct SessionLimit<M> {
    inner: M,
    limit: usize,
    slots: Mutex<Slots>,
}

#[derive(Default)]
struct Slots {
    live: HashSet<SessionId>,
    reserved: usize,
}

/// A slot held while a session is being created.
struct Reservation<'a> {
    slots: &'a Mutex<Slots>,
}

impl Drop for Reservation<'_> {
    fn drop(&mut self) {
        let mut slots = self.slots.lock().unwrap_or_else(PoisonError::into_inner);
        slots.reserved = slots.reserved.saturating_sub(1);
    }
}

impl<M> SessionLimit<M> {
    fn new(inner: M, limit: usize) -> Self {
        SessionLimit {
            inner,
            limit: limit.max(1),
            slots: Mutex::new(Slots::default()),
        }
    }

    fn slots(&self) -> std::sync::MutexGuard<'_, Slots> {
        self.slots.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn reserve<E>(&self) -> Result<Reservation<'_>, SessionLimitError<E>> {
        let mut slots = self.slots();
        if slots.live.len() + slots.reserved >= self.limit {
            return Err(SessionLimitError::Full { limit: self.limit });
        }
        slots.reserved += 1;
        Ok(Reservation { slots: &self.slots })
    }
}

impl<M: Send + Sync> Occupancy for SessionLimit<M> {
    fn full(&self) -> bool {
        let slots = self.slots();
        slots.live.len() + slots.reserved >= self.limit
    }

    fn limit(&self) -> usize {
        self.limit
    }
}

impl<M: SessionManager> SessionManager for SessionLimit<M> {
    type Error = SessionLimitError<M::Error>;
    type Transport = M::Transport;

    async fn create_session(&self) -> Result<(SessionId, Self::Transport), Self::Error> {
        let reservation = self.reserve()?;
        let (id, transport) = self
            .inner
            .create_session()
            .await
            .map_err(SessionLimitError::Inner)?;
        self.slots().live.insert(id.clone());
        drop(reservation);
        Ok((id, transport))
    }

    async fn initialize_session(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<ServerJsonRpcMessage, Self::Error> {
        self.inner
            .initialize_session(id, message)
            .await
            .map_err(SessionLimitError::Inner)
    }

    async fn has_session(&self, id: &SessionId) -> Result<bool, Self::Error> {
        self.inner
            .has_session(id)
            .await
            .map_err(SessionLimitError::Inner)
    }

    async fn close_session(&self, id: &SessionId) -> Result<(), Self::Error> {
        let closed = self.inner.close_session(id).await;
        self.slots().live.remove(id);
        closed.map_err(SessionLimitError::Inner)
    }

    async fn create_stream(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<impl futures::Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error>
    {
        self.inner
            .create_stream(id, message)
            .await
            .map_err(SessionLimitError::Inner)
    }

    async fn accept_message(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<(), Self::Error> {
        self.inner
            .accept_message(id, message)
            .await
            .map_err(SessionLimitError::Inner)
    }

    async fn create_standalone_stream(
        &self,
        id: &SessionId,
    ) -> Result<impl futures::Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error>
    {
        self.inner
            .create_standalone_stream(id)
            .await
            .map_err(SessionLimitError::Inner)
    }

    async fn resume(
        &self,
        id: &SessionId,
        last_event_id: String,
    ) -> Result<impl futures::Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error>
    {
        self.inner
            .resume(id, last_event_id)
            .await
            .map_err(SessionLimitError::Inner)
    }

    fn event_store(
        &self,
    ) -> Option<Arc<dyn rmcp::transport::streamable_http_server::session::EventStore>> {
        self.inner.event_store()
    }
}

/// Writes `secret` to `path` as a private file
/// ([`gatehouse_base::private_fs::replace`]: a new 0600 file renamed into place, so a
/// symbolic link there is replaced, never followed) in a private directory
/// ([`gatehouse_base::private_fs::private_dir`]: created 0700 if missing, refused
/// unless it is a directory of this user's, made 0700 if loose).
#[cfg(unix)]
fn write_token_file(path: &Path, secret: &str) -> Result<(), HttpError> {
    use gatehouse_base::private_fs;
    let failed = |source| HttpError::TokenFile {
        path: path.to_path_buf(),
        source,
    };
    private_fs::private_dir(path.parent().unwrap_or(Path::new(""))).map_err(failed)?;
    private_fs::replace(path, &[secret.as_bytes()], false).map_err(failed)
}

#[cfg(not(unix))]
fn write_token_file(path: &Path, _secret: &str) -> Result<(), HttpError> {
    Err(HttpError::TokenUnsupported {
        path: path.to_path_buf(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn token() -> BearerToken {
        BearerToken::new("0123456789abcdef-right").expect("a token")
    }

    #[test]
    fn a_token_matches_only_itself() {
        let token = token();
        assert!(token.matches(b"0123456789abcdef-right"));
        for wrong in [
            &b"0123456789abcdef-wrong"[..],
            b"0123456789abcdef-righ",
            b"0123456789abcdef-right ",
            b"0123456789abcdef-rightt",
            b"",
            b"0123456789ABCDEF-RIGHT",
        ] {
            assert!(
                !token.matches(wrong),
                "{:?}",
                String::from_utf8_lossy(wrong)
            );
        }
        assert_eq!(format!("{token:?}"), "BearerToken(..)", "never printed");
    }

    #[test]
    fn tokens_must_be_long_printable_and_without_spaces() {
        assert!(BearerToken::new(&"a".repeat(MIN_TOKEN_CHARS)).is_ok());
        for (secret, problem) in [
            ("", "empty"),
            ("short", "only 5 characters"),
            ("0123456789abcdef ghij", "character 17"),
            ("0123456789abcdef\nghij", "character 17"),
            ("0123456789abcdefé", "character 17"),
        ] {
            let error = BearerToken::new(secret).expect_err(secret);
            assert!(error.contains(problem), "{secret:?}: {error}");
            assert!(secret.is_empty() || !error.contains(secret), "never quoted");
        }
        let (generated, secret) = BearerToken::generate().expect("random");
        assert_eq!(secret.len(), TOKEN_BYTES * 2);
        assert!(secret.bytes().all(|byte| byte.is_ascii_hexdigit()));
        assert!(generated.matches(secret.as_bytes()));
        assert_ne!(BearerToken::generate().expect("random").1, secret);
    }

    #[test]
    fn bearer_credentials_take_the_bearer_scheme_only() {
        assert_eq!(bearer_credentials(b"Bearer abc"), Some(&b"abc"[..]));
        assert_eq!(bearer_credentials(b"bearer abc"), Some(&b"abc"[..]));
        assert_eq!(bearer_credentials(b"BEARER   abc  "), Some(&b"abc"[..]));
        for refused in [
            &b"Basic abc"[..],
            b"Bearer",
            b"Bearer ",
            b"Bearerabc",
            b"abc",
            b"",
            b"Token abc",
        ] {
            assert_eq!(
                bearer_credentials(refused),
                None,
                "{:?}",
                String::from_utf8_lossy(refused)
            );
        }
    }

    #[test]
    fn origins_are_allowed_only_exactly() {
        let allowed = vec![
            parse_origin("http://localhost:3000").expect("origin"),
            parse_origin("https://App.Example.com").expect("origin"),
        ];
        assert_eq!(allowed[1], "https://app.example.com", "lowercased");
        for origin in [
            "http://localhost:3000",
            "HTTP://LOCALHOST:3000",
            "https://app.example.com",
        ] {
            assert!(origin_allowed(origin.as_bytes(), &allowed), "{origin}");
        }
        for origin in [
            "http://localhost:3001",
            "http://localhost",
            "https://localhost:3000",
            "http://localhost:3000/",
            "http://evil.example",
            "https://app.example.com.evil.example",
            "null",
            "",
        ] {
            assert!(!origin_allowed(origin.as_bytes(), &allowed), "{origin}");
        }
        assert!(!origin_allowed(b"http://localhost:3000\xff", &allowed));
        assert!(
            !origin_allowed(b"http://localhost:3000", &[]),
            "an empty list allows no origin"
        );
    }

    #[test]
    fn allowed_origins_must_be_origins() {
        for good in [
            "http://localhost:3000",
            "https://app.example.com",
            "http://[::1]:8080",
            "vscode-webview://abc",
        ] {
            assert!(parse_origin(good).is_ok(), "{good}");
        }
        for bad in [
            "http://localhost:3000/",
            "http://localhost:3000/path",
            "localhost:3000",
            "http://",
            "http://user@host",
            "http://host:port",
            "http://host:",
            "http://host:99999",
            "http://[::1]x",
            "http://host?x",
            "http://ho st",
            "3http://host",
            "null",
            "*",
        ] {
            let error = parse_origin(bad).expect_err(bad);
            assert!(error.contains("http://localhost:3000"), "{bad}: {error}");
        }
    }

    #[test]
    fn a_session_ended_by_delete_is_answered_ok_and_other_answers_are_kept() {
        let status = |status: StatusCode| session_ended(status.into_response()).status();
        assert_eq!(status(StatusCode::ACCEPTED), StatusCode::OK);
        for kept in [
            StatusCode::NOT_FOUND,
            StatusCode::BAD_REQUEST,
            StatusCode::METHOD_NOT_ALLOWED,
            StatusCode::UNAUTHORIZED,
        ] {
            assert_eq!(status(kept), kept);
        }
    }

    struct Fixed {
        full: bool,
    }

    impl Occupancy for Fixed {
        fn full(&self) -> bool {
            self.full
        }
        fn limit(&self) -> usize {
            7
        }
    }

    fn guard(full: bool) -> Guard {
        Guard::new(
            token(),
            vec!["http://localhost:3000".to_owned()],
            Arc::new(Fixed { full }),
        )
    }

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut headers = HeaderMap::new();
        for (name, value) in pairs {
            headers.append(
                http::HeaderName::from_bytes(name.as_bytes()).expect("name"),
                HeaderValue::from_str(value).expect("value"),
            );
        }
        headers
    }

    #[test]
    fn the_guard_checks_origin_then_token_then_sessions() {
        let right = ("authorization", "Bearer 0123456789abcdef-right");
        let open = guard(false);
        let post = Method::POST;
        assert_eq!(open.check(&post, &headers(&[right])), Ok(()));
        assert_eq!(
            open.check(&Method::GET, &headers(&[])),
            Err(Refusal::Unauthorized { presented: false })
        );
        assert_eq!(
            open.check(
                &Method::DELETE,
                &headers(&[("authorization", "Bearer wrong-token-wrong-token")])
            ),
            Err(Refusal::Unauthorized { presented: true })
        );
        assert_eq!(
            open.check(
                &post,
                &headers(&[("authorization", "Basic 0123456789abcdef-right")])
            ),
            Err(Refusal::Unauthorized { presented: true })
        );
        assert_eq!(
            open.check(&post, &headers(&[right, right])),
            Err(Refusal::Unauthorized { presented: true }),
            "two Authorization headers are refused"
        );
        assert_eq!(
            open.check(&post, &headers(&[right, ("origin", "http://evil.example")])),
            Err(Refusal::Origin),
            "a foreign origin is refused even with the token"
        );
        assert_eq!(
            open.check(&post, &headers(&[("origin", "http://evil.example")])),
            Err(Refusal::Origin),
            "the origin is checked first"
        );
        assert_eq!(
            open.check(
                &post,
                &headers(&[
                    right,
                    ("origin", "http://localhost:3000"),
                    ("origin", "null")
                ])
            ),
            Err(Refusal::Origin),
            "every Origin header must be allowed"
        );
        assert_eq!(
            open.check(
                &post,
                &headers(&[right, ("origin", "http://localhost:3000")])
            ),
            Ok(())
        );

        let full = guard(true);
        assert_eq!(
            full.check(&post, &headers(&[right])),
            Err(Refusal::SessionLimit { limit: 7 }),
            "a new session is refused when full"
        );
        assert_eq!(
            full.check(&post, &headers(&[right, ("mcp-session-id", "abc")])),
            Ok(()),
            "requests in an open session pass"
        );
        assert_eq!(full.check(&Method::GET, &headers(&[right])), Ok(()));
        assert_eq!(
            full.check(&post, &headers(&[])),
            Err(Refusal::Unauthorized { presented: false }),
            "the limit says nothing to a client without the token"
        );
    }

    #[test]
    fn refusals_answer_401_with_a_bearer_challenge_403_and_503() {
        let response = Refusal::Unauthorized { presented: false }.into_response();
        assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
        assert_eq!(
            response.headers()[header::WWW_AUTHENTICATE],
            "Bearer realm=\"gatehouse\""
        );
        let response = Refusal::Unauthorized { presented: true }.into_response();
        assert!(
            response.headers()[header::WWW_AUTHENTICATE]
                .to_str()
                .expect("ASCII")
                .starts_with("Bearer ")
        );
        assert_eq!(
            Refusal::Origin.into_response().status(),
            StatusCode::FORBIDDEN
        );
        let response = Refusal::SessionLimit { limit: 3 }.into_response();
        assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert!(response.headers().contains_key(header::RETRY_AFTER));
    }

    #[tokio::test]
    async fn the_session_limit_counts_open_sessions_and_frees_closed_ones() {
        let sessions = SessionLimit::new(LocalSessionManager::default(), 2);
        let (first, _first) = sessions.create_session().await.expect("first");
        let (_second_id, _second) = sessions.create_session().await.expect("second");
        assert!(sessions.full());
        let refused = sessions
            .create_session()
            .await
            .err()
            .expect("the third is refused");
        assert!(matches!(refused, SessionLimitError::Full { limit: 2 }));
        assert!(
            refused.to_string().contains("max_http_sessions"),
            "{refused}"
        );
        sessions.close_session(&first).await.expect("close");
        assert!(!sessions.full());
        sessions
            .close_session(&first)
            .await
            .expect("closing twice is harmless");
        let (_third, _transport) = sessions.create_session().await.expect("the slot is free");
        assert!(sessions.full());
    }

    #[cfg(unix)]
    #[test]
    fn the_token_file_is_private_replaces_a_link_and_refuses_a_linked_directory() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().expect("tempdir");
        let private = dir.path().join(".gatehouse");
        let file = private.join("token");
        std::fs::create_dir(&private).expect("mkdir");
        std::fs::set_permissions(&private, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        let elsewhere = dir.path().join("elsewhere");
        std::fs::write(&elsewhere, "untouched").expect("write");
        std::os::unix::fs::symlink(&elsewhere, &file).expect("symlink");

        let auth = HttpAuth::generate(&file).expect("generate");
        assert_eq!(auth.token_file(), Some(file.as_path()));
        let mode = |path: &Path| {
            std::fs::symlink_metadata(path)
                .expect("exists")
                .permissions()
                .mode()
                & 0o777
        };
        assert_eq!(mode(&file), 0o600);
        assert_eq!(mode(&private), 0o700, "the directory is made private");
        assert!(
            std::fs::symlink_metadata(&file).expect("meta").is_file(),
            "the link is replaced"
        );
        assert_eq!(
            std::fs::read_to_string(&elsewhere).expect("read"),
            "untouched"
        );
        let secret = std::fs::read_to_string(&file).expect("read");
        assert!(auth.token.matches(secret.as_bytes()));
        let again = HttpAuth::generate(&file).expect("generate again");
        assert!(
            !again.token.matches(secret.as_bytes()),
            "a new token at every start"
        );
        let leftovers = std::fs::read_dir(&private).expect("list").count();
        assert_eq!(leftovers, 1, "no temporary file is left");

        let linked = dir.path().join("linked");
        std::os::unix::fs::symlink(&private, &linked).expect("symlink");
        let error = HttpAuth::generate(&linked.join("token")).expect_err("a linked directory");
        assert!(error.to_string().contains("symbolic link"), "{error}");
    }

    #[test]
    fn a_generated_token_allows_only_loopback_and_a_configured_one_any_address() {
        let dir = tempfile::tempdir().expect("tempdir");
        let generated = HttpAuth::generate(&dir.path().join(".gatehouse/token"));
        #[cfg(unix)]
        {
            let generated = generated.expect("generate");
            let error = HttpServer::new("0.0.0.0:8080", generated.clone()).expect_err("refused");
            let message = error.to_string();
            assert!(message.contains("0.0.0.0:8080"), "{message}");
            assert!(message.contains("bearer_token_env_var"), "{message}");
            assert!(HttpServer::new("127.0.0.1:0", generated).is_ok());
        }
        #[cfg(not(unix))]
        let _ = generated;
        let given = HttpAuth::given("0123456789abcdef-right").expect("given");
        assert!(HttpServer::new("0.0.0.0:8080", given).is_ok());
    }

    #[test]
    fn an_unset_or_bad_variable_is_named_and_its_value_never_quoted() {
        let var = "GATEHOUSE_HTTP_UNIT_TEST_NEVER_SET";
        let message = HttpAuth::from_env(var).expect_err("unset").to_string();
        assert!(message.contains(var), "{message}");
        assert!(message.contains("not set"), "{message}");
    }
}
