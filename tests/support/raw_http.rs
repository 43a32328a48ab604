//! A hostile MCP server over streamable HTTP, written with raw JSON (axum,
//! no rmcp server) so it can send what rmcp's model forbids.
//!
//! It completes `initialize` (protocol `2025-11-25`, a session id), lists
//! one tool, `go`, and answers a call of `go` with an SSE stream: first the
//! given `elicitation/create` requests, then, once each has been answered by
//! a POST (or after ten seconds), the tool result: a JSON text shaped like
//! `hostile-server`'s report (`answers`, `responses`, `stray`).

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::sse::{Event, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use futures::stream::{self, StreamExt};
use serde_json::{Value, json};
use tokio::sync::mpsc;

const SESSION: &str = "raw-http-session";

/// A running server; stopped when dropped.
pub struct RawHttpServer {
    /// The MCP endpoint, `http://127.0.0.1:PORT/mcp`.
    pub url: String,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for RawHttpServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

#[derive(Clone)]
struct Shared {
    /// `(id, params)` of each elicitation a call of `go` sends.
    elicitations: Arc<Vec<(Value, Value)>>,
    /// Where POSTed responses go while a call collects them.
    responses: Arc<Mutex<Option<mpsc::UnboundedSender<Value>>>>,
}

impl RawHttpServer {
    /// Serves on a free loopback port; a call of `go` sends `elicitations`,
    /// each an `(id, params)` pair.
    pub async fn start(elicitations: Vec<(Value, Value)>) -> RawHttpServer {
        let shared = Shared {
            elicitations: Arc::new(elicitations),
            responses: Arc::new(Mutex::new(None)),
        };
        let app = Router::new()
            .route(
                "/mcp",
                post(on_post)
                    .get(|| async { StatusCode::METHOD_NOT_ALLOWED })
                    .delete(|| async { StatusCode::OK }),
            )
            .with_state(shared);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("a loopback port");
        let address = listener.local_addr().expect("an address");
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        RawHttpServer {
            url: format!("http://{address}/mcp"),
            task,
        }
    }
}

async fn on_post(State(shared): State<Shared>, _headers: HeaderMap, body: String) -> Response {
    let Ok(message) = serde_json::from_str::<Value>(&body) else {
        return StatusCode::BAD_REQUEST.into_response();
    };
    let id = message.get("id").cloned();
    let Some(method) = message.get("method").and_then(Value::as_str) else {
        // A response to one of our requests.
        if let Some(sender) = shared.responses.lock().expect("lock").as_ref() {
            let _ = sender.send(message);
        }
        return StatusCode::ACCEPTED.into_response();
    };
    let Some(id) = id else {
        return StatusCode::ACCEPTED.into_response(); // a notification
    };
    let result = match method {
        "initialize" => json!({
            "protocolVersion": "2025-11-25",
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "raw-http", "version": "0"}
        }),
        "tools/list" => json!({"tools": [{
            "name": "go",
            "description": "Sends the configured elicitations.",
            "inputSchema": {"type": "object"}
        }]}),
        "tools/call" => return go(shared, id).await,
        _ => {
            let error = json!({"jsonrpc": "2.0", "id": id,
                "error": {"code": -32601, "message": format!("method `{method}` not found")}});
            return json_response(error);
        }
    };
    json_response(json!({"jsonrpc": "2.0", "id": id, "result": result}))
}

fn json_response(body: Value) -> Response {
    (
        [
            ("content-type", "application/json"),
            ("mcp-session-id", SESSION),
        ],
        body.to_string(),
    )
        .into_response()
}

/// The responses a call of `go` received.
#[derive(Default)]
struct Collected {
    /// `{"id", "response"}` for each response to one of the call's ids.
    answers: Vec<Value>,
    /// Responses to ids the call never used.
    stray: Vec<Value>,
    /// By id: the id and how often it was answered.
    times: BTreeMap<String, (Value, usize)>,
}

impl Collected {
    fn file(&mut self, response: Value, expected: &[Value]) {
        let id = response.get("id").cloned().unwrap_or(Value::Null);
        if expected.contains(&id) {
            self.times
                .entry(id.to_string())
                .or_insert((id.clone(), 0))
                .1 += 1;
            self.answers.push(json!({"id": id, "response": response}));
        } else {
            self.stray.push(response);
        }
    }
}

/// The SSE answer to `tools/call`: the elicitations, then the report.
async fn go(shared: Shared, call_id: Value) -> Response {
    let (sender, mut receiver) = mpsc::unbounded_channel();
    *shared.responses.lock().expect("lock") = Some(sender);
    let requests: Vec<Value> = shared
        .elicitations
        .iter()
        .map(|(id, params)| {
            json!({"jsonrpc": "2.0", "id": id, "method": "elicitation/create", "params": params})
        })
        .collect();
    let expected: Vec<Value> = shared
        .elicitations
        .iter()
        .map(|(id, _)| id.clone())
        .collect();
    let report = async move {
        let mut collected = Collected::default();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while collected.times.len() < expected.len() {
            let Ok(Some(response)) = tokio::time::timeout_at(deadline, receiver.recv()).await
            else {
                break;
            };
            collected.file(response, &expected);
        }
        // Surplus answers would arrive now.
        while let Ok(Some(response)) =
            tokio::time::timeout(Duration::from_millis(200), receiver.recv()).await
        {
            collected.file(response, &expected);
        }
        let Collected {
            answers,
            stray,
            times,
        } = collected;
        let mut kinds: BTreeMap<String, usize> = BTreeMap::new();
        for answer in &answers {
            let response = &answer["response"];
            let kind = match (
                response["error"]["code"].as_i64(),
                response["result"]["action"].as_str(),
            ) {
                (Some(code), _) => format!("error {code}"),
                (None, Some(action)) => action.to_owned(),
                (None, None) => "result".to_owned(),
            };
            *kinds.entry(kind).or_default() += 1;
        }
        let over_answered: Vec<Value> = times
            .into_values()
            .filter(|(_, count)| *count > 1)
            .map(|(id, _)| id)
            .collect();
        let report = json!({
            "responses": answers.len(),
            "answers": answers,
            "stray": stray,
            "over_answered": over_answered,
            "kinds": kinds,
        });
        json!({"jsonrpc": "2.0", "id": call_id, "result": {
            "content": [{"type": "text", "text": report.to_string()}]
        }})
    };
    let events = stream::iter(requests)
        .chain(stream::once(report))
        .map(|message| Ok::<_, Infallible>(Event::default().data(message.to_string())));
    ([("mcp-session-id", SESSION)], Sse::new(events)).into_response()
}
