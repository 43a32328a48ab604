//! The console's web side: the pages, the live event stream and the answer
//! endpoint, behind the [`guard`] and a login ([`auth`]).
//!
//! | path | what |
//! |---|---|
//! | `GET /login`, `POST /login` | the login form; the token becomes a session cookie |
//! | `POST /logout` | ends the session (CSRF token in the form) |
//! | `GET /` | the questions page |
//! | `GET /audit` | the audit page ([`audit`]) |
//! | `GET /instances` | the instances: their modules and backends |
//! | `POST /api/reload` | asks every instance to reload (`X-Gatehouse-CSRF` header) |
//! | `GET /assets/…` | the page's script and style (no secrets) |
//! | `GET /api/state` | the open and recently closed questions (JSON) |
//! | `GET /api/events` | the same, live (server-sent events) |
//! | `POST /api/answer` | a person's answer (JSON, `X-Gatehouse-CSRF` header) |
//! | `GET /api/audit` | audit records and statistics (JSON) |
//!
//! Pages are a static shell: every word from a server, a guest or a client
//! reaches the browser as JSON and is put into text nodes by the script.

pub mod audit;
pub mod auth;
pub mod guard;

use std::convert::Infallible;
use std::path::PathBuf;
use std::sync::Arc;

use axum::extract::{Form, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{Html, IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use futures::{Stream, StreamExt};
use serde::Deserialize;
use tokio::sync::broadcast::error::RecvError;

use crate::hub::{AnswerError, Hub};
use crate::question::Reply;
use auth::{COOKIE, Session, Sessions, Token};

/// The page's script.
const SCRIPT: &str = include_str!("../../assets/console.js");
/// The page's style.
const STYLE: &str = include_str!("../../assets/console.css");

/// What the web side serves from.
pub struct Web {
    hub: Arc<Hub>,
    token: Token,
    sessions: Sessions,
    audit_log: Option<PathBuf>,
    stop: tokio_util::sync::CancellationToken,
    /// Logins being checked ([`auth::MAX_LOGINS_AT_ONCE`]).
    logins: Arc<tokio::sync::Semaphore>,
    /// Whether the session cookie is `Secure` (served through HTTPS).
    secure_cookie: bool,
}

impl std::fmt::Debug for Web {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Web").finish_non_exhaustive()
    }
}

impl Web {
    /// The web side of `hub`, logged into with `token`; `audit_log` is the
    /// file the audit page reads, if any. Live event streams end when `stop`
    /// is cancelled.
    pub fn new(
        hub: Arc<Hub>,
        token: Token,
        audit_log: Option<PathBuf>,
        stop: tokio_util::sync::CancellationToken,
    ) -> Web {
        Web {
            hub,
            token,
            sessions: Sessions::default(),
            audit_log,
            stop,
            logins: Arc::new(tokio::sync::Semaphore::new(auth::MAX_LOGINS_AT_ONCE)),
            secure_cookie: false,
        }
    }

    /// Marks the session cookie `Secure` (the console is reached through
    /// HTTPS, `[console] public_origin`).
    pub fn with_secure_cookie(mut self, secure: bool) -> Web {
        self.secure_cookie = secure;
        self
    }

    /// The session a request's cookie belongs to. Every `gatehouse_console`
    /// cookie the request carries is tried: a page on another port of the
    /// same host can plant one (cookies do not keep ports apart), and it
    /// must not hide the real one.
    fn session(&self, headers: &HeaderMap) -> Option<(Session, String)> {
        cookies(headers).find_map(|cookie| {
            let session = self.sessions.session(&cookie)?;
            Some((session, cookie))
        })
    }
}

/// The routes, guarded for `hosts`.
pub fn router(web: Arc<Web>, hosts: guard::Hosts) -> Router {
    Router::new()
        .route("/", get(questions_page))
        .route("/audit", get(audit_page))
        .route("/instances", get(instances_page))
        .route("/api/reload", post(reload))
        .route("/login", get(login_page).post(login))
        .route("/logout", post(logout))
        .route("/assets/console.js", get(script))
        .route("/assets/console.css", get(style))
        .route("/api/state", get(state))
        .route("/api/events", get(events))
        .route("/api/answer", post(answer))
        .route("/api/audit", get(audit::records))
        .with_state(web)
        .layer(axum::middleware::from_fn_with_state(
            Arc::new(hosts),
            guard::guard,
        ))
}

/// The values of every session cookie in `headers`.
fn cookies(headers: &HeaderMap) -> impl Iterator<Item = String> + '_ {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .filter(|(name, _)| *name == COOKIE)
        .map(|(_, value)| value.to_owned())
}

/// The refusal of an action whose `X-Gatehouse-CSRF` header is not the
/// session's token, if it is not.
fn csrf_refused(session: &Session, headers: &HeaderMap) -> Option<Response> {
    let csrf = headers
        .get("x-gatehouse-csrf")
        .and_then(|value| value.to_str().ok())
        .unwrap_or_default();
    (!auth::csrf_matches(session, csrf)).then(|| {
        (
            StatusCode::FORBIDDEN,
            Json(serde_json::json!({"error": "the CSRF token is missing or wrong"})),
        )
            .into_response()
    })
}

fn unauthorized() -> Response {
    (
        StatusCode::UNAUTHORIZED,
        "log in first: open /login with the console's token\n",
    )
        .into_response()
}

async fn script() -> Response {
    (
        [(header::CONTENT_TYPE, "text/javascript; charset=utf-8")],
        SCRIPT,
    )
        .into_response()
}

async fn style() -> Response {
    ([(header::CONTENT_TYPE, "text/css; charset=utf-8")], STYLE).into_response()
}

/// A view's page for a logged-in session (else the way to the login).
fn page(web: &Web, headers: &HeaderMap, view: &str, title: &str, main: &str) -> Response {
    match web.session(headers) {
        Some((session, _)) => shell(&session, view, title, main).into_response(),
        None => Redirect::to("/login").into_response(),
    }
}

/// The page around a view: the navigation, the session, the CSRF token
/// (for the script), and `main`. Only the console's own words go in here.
fn shell(session: &Session, view: &str, title: &str, main: &str) -> Html<String> {
    let current = |name: &str| {
        if name == view {
            " aria-current=\"page\""
        } else {
            ""
        }
    };
    Html(format!(
        r#"<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="gatehouse-csrf" content="{csrf}">
<meta name="gatehouse-view" content="{view}">
<title>{title} · gatehouse console</title>
<link rel="stylesheet" href="/assets/console.css">
<script src="/assets/console.js" defer></script>
</head>
<body>
<header>
<strong class="brand">gatehouse console</strong>
<nav aria-label="Views"><a href="/"{questions}>Questions</a> <a href="/instances"{instances}>Modules and backends</a> <a href="/audit"{audit}>Audit</a></nav>
<span class="who">session <code id="session">{id}</code> <span id="link-state" role="status">connecting…</span></span>
<form method="post" action="/logout" class="logout"><input type="hidden" name="csrf" value="{csrf}"><button type="submit">Log out</button></form>
</header>
<main id="main">
{main}
</main>
</body>
</html>
"#,
        csrf = session.csrf,
        id = session.id,
        questions = current("questions"),
        audit = current("audit"),
        instances = current("instances"),
    ))
}

async fn questions_page(State(web): State<Arc<Web>>, headers: HeaderMap) -> Response {
    page(
        &web,
        &headers,
        "questions",
        "Questions",
        r#"<h1>Questions waiting for a person</h1>
<p id="instances" class="muted"></p>
<p id="empty" class="muted">No questions are waiting.</p>
<div id="questions" aria-live="polite"></div>
<h2 id="closed-heading" tabindex="-1">Recently closed</h2>
<ol id="closed" class="closed"></ol>"#,
    )
}

async fn instances_page(State(web): State<Arc<Web>>, headers: HeaderMap) -> Response {
    page(
        &web,
        &headers,
        "instances",
        "Modules and backends",
        r#"<h1>Modules and backends</h1>
<p>Every <code>gatehouse serve</code> attached to this console, with the modules its chain runs and its MCP servers.</p>
<p><button type="button" id="reload-all">Reload every instance</button> <span class="muted">(as <code>gatehouse reload</code>: the config read again, the chain rebuilt and checked)</span></p>
<ol id="reloads" class="closed" aria-live="polite"></ol>
<p id="instances" class="muted"></p>
<div id="instance-list"></div>"#,
    )
}

/// `POST /api/reload`: every instance is asked to reload; their answers
/// arrive as events.
async fn reload(State(web): State<Arc<Web>>, headers: HeaderMap) -> Response {
    let Some((session, _)) = web.session(&headers) else {
        return unauthorized();
    };
    if let Some(refused) = csrf_refused(&session, &headers) {
        return refused;
    }
    let asked = web.hub.reload_all();
    tracing::info!(session = %session.id, asked, "a reload asked for from the console");
    Json(serde_json::json!({"asked": asked})).into_response()
}

async fn audit_page(State(web): State<Arc<Web>>, headers: HeaderMap) -> Response {
    page(&web, &headers, "audit", "Audit", audit::MAIN)
}

fn login_form(problem: Option<&str>) -> Html<String> {
    let problem = problem
        .map(|p| format!("<p class=\"problem\" role=\"alert\">{p}</p>"))
        .unwrap_or_default();
    Html(format!(
        r#"<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>Log in · gatehouse console</title>
<link rel="stylesheet" href="/assets/console.css">
</head>
<body>
<main class="login">
<h1>gatehouse console</h1>
{problem}<form method="post" action="/login">
<label for="token">Console token</label>
<input id="token" name="token" type="password" autocomplete="current-password" required autofocus>
<button type="submit">Log in</button>
</form>
<p class="muted">The token was printed when the console started, or is in the file or variable <code>[console]</code> names.</p>
</main>
</body>
</html>
"#
    ))
}

async fn login_page() -> Response {
    login_form(None).into_response()
}

#[derive(Deserialize)]
struct LoginForm {
    token: String,
}

async fn login(State(web): State<Arc<Web>>, Form(form): Form<LoginForm>) -> Response {
    // A flood of logins gets refused unchecked, never a lockout of the
    // right token once it is checked.
    let Ok(_checking) = web.logins.clone().try_acquire_owned() else {
        return (
            StatusCode::TOO_MANY_REQUESTS,
            login_form(Some("Too many logins at once; try again.")),
        )
            .into_response();
    };
    match web.sessions.login(&web.token, &form.token) {
        Ok((session, cookie)) => {
            tracing::info!(session = %session.id, "a console session started");
            let set_cookie = format!(
                "{COOKIE}={cookie}; HttpOnly; SameSite=Strict; Path=/; Max-Age={}{}",
                auth::SESSION_LIFETIME.as_secs(),
                if web.secure_cookie { "; Secure" } else { "" }
            );
            (
                StatusCode::SEE_OTHER,
                [
                    (header::SET_COOKIE, set_cookie),
                    (header::LOCATION, "/".to_owned()),
                ],
            )
                .into_response()
        }
        Err(auth::LoginRefused::WrongToken) => {
            tracing::warn!("a console login with a wrong token");
            tokio::time::sleep(auth::WRONG_TOKEN_DELAY).await;
            (
                StatusCode::UNAUTHORIZED,
                login_form(Some("That is not the console's token.")),
            )
                .into_response()
        }
    }
}

#[derive(Deserialize)]
struct LogoutForm {
    csrf: String,
}

async fn logout(
    State(web): State<Arc<Web>>,
    headers: HeaderMap,
    Form(form): Form<LogoutForm>,
) -> Response {
    let Some((session, cookie)) = web.session(&headers) else {
        return Redirect::to("/login").into_response();
    };
    if !auth::csrf_matches(&session, &form.csrf) {
        return (
            StatusCode::FORBIDDEN,
            "refused: the CSRF token is missing or wrong\n",
        )
            .into_response();
    }
    web.sessions.logout(&cookie);
    (
        StatusCode::SEE_OTHER,
        [
            (
                header::SET_COOKIE,
                format!("{COOKIE}=; HttpOnly; SameSite=Strict; Path=/; Max-Age=0"),
            ),
            (header::LOCATION, "/login".to_owned()),
        ],
    )
        .into_response()
}

async fn state(State(web): State<Arc<Web>>, headers: HeaderMap) -> Response {
    if web.session(&headers).is_none() {
        return unauthorized();
    }
    Json(web.hub.snapshot()).into_response()
}

async fn events(State(web): State<Arc<Web>>, headers: HeaderMap) -> Response {
    if web.session(&headers).is_none() {
        return unauthorized();
    }
    Sse::new(stream(web.hub.clone()).take_until(web.stop.clone().cancelled_owned()))
        .keep_alive(KeepAlive::default())
        .into_response()
}

/// The hub's state, then every change; the whole state again after falling
/// behind.
fn stream(hub: Arc<Hub>) -> impl Stream<Item = Result<SseEvent, Infallible>> {
    let receiver = hub.subscribe();
    futures::stream::unfold(
        (hub, receiver, true),
        |(hub, mut receiver, first)| async move {
            let snapshot = |hub: &Hub| {
                SseEvent::default()
                    .event("snapshot")
                    .json_data(hub.snapshot())
                    .unwrap_or_default()
            };
            if first {
                let event = snapshot(&hub);
                return Some((Ok(event), (hub, receiver, false)));
            }
            let event = match receiver.recv().await {
                Ok(change) => SseEvent::default()
                    .event("change")
                    .json_data(change)
                    .unwrap_or_default(),
                Err(RecvError::Lagged(_)) => snapshot(&hub),
                Err(RecvError::Closed) => return None,
            };
            Some((Ok(event), (hub, receiver, false)))
        },
    )
}

/// A person's answer, as the page posts it.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Answer {
    id: String,
    #[serde(flatten)]
    reply: Reply,
}

async fn answer(
    State(web): State<Arc<Web>>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Response {
    let Some((session, _)) = web.session(&headers) else {
        return unauthorized();
    };
    if let Some(refused) = csrf_refused(&session, &headers) {
        return refused;
    }
    let json = headers
        .get(header::CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .is_some_and(|value| value.starts_with("application/json"));
    if !json {
        return (
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            Json(serde_json::json!({"error": "send the answer as application/json"})),
        )
            .into_response();
    }
    let answer: Answer = match serde_json::from_slice(&body) {
        Ok(answer) => answer,
        Err(error) => {
            return (
                StatusCode::BAD_REQUEST,
                Json(serde_json::json!({"error": format!("the answer is malformed: {error}")})),
            )
                .into_response();
        }
    };
    match web.hub.answer(&answer.id, answer.reply, &session.id) {
        Ok(()) => Json(serde_json::json!({"ok": true})).into_response(),
        Err(error) => {
            let status = match &error {
                AnswerError::Unknown(_) => StatusCode::NOT_FOUND,
                AnswerError::Closed(_) | AnswerError::TooLate => StatusCode::CONFLICT,
                AnswerError::Invalid(_) => StatusCode::UNPROCESSABLE_ENTITY,
                AnswerError::InstanceGone => StatusCode::GONE,
            };
            let closed = match &error {
                AnswerError::Closed(closed) => serde_json::to_value(&closed.closed).ok(),
                _ => None,
            };
            (
                status,
                Json(serde_json::json!({"error": error.to_string(), "closed": closed})),
            )
                .into_response()
        }
    }
}

/// The audit log the pages read, if any.
fn audit_log(web: &Web) -> Option<&std::path::Path> {
    web.audit_log.as_deref()
}
