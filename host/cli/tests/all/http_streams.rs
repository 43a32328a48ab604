//! Which HTTP stream carries what, as a raw streamable HTTP client sees it
//! (reqwest, no MCP library on this side): a question a server asks while it
//! handles an upstream `tools/call` comes on the SSE stream of that call's
//! POST, whether or not the client opened the optional GET stream; and
//! `DELETE /mcp` ends the session with a status clients take for success.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};

use crate::gateway::config_with;
use crate::http_gateway::HttpGateway;

/// The protocol version the raw client negotiates: elicitations are
/// server-to-client requests there.
const PROTOCOL: &str = "2025-11-25";

/// How long a message the test waits for may take.
const WAIT: Duration = Duration::from_secs(20);

/// A raw client of one gateway: the URL, the token and, once initialized,
/// the session.
struct Raw {
    url: String,
    token: String,
    session: Option<String>,
    http: reqwest::Client,
}

impl Raw {
    fn new(gateway: &HttpGateway) -> Raw {
        Raw {
            url: gateway.url.clone(),
            token: gateway.token.clone(),
            session: None,
            http: reqwest::Client::new(),
        }
    }

    /// A request with the token, and the session and protocol once there
    /// is one.
    fn request(&self, method: reqwest::Method) -> reqwest::RequestBuilder {
        let mut request = self
            .http
            .request(method, &self.url)
            .header("authorization", format!("Bearer {}", self.token));
        if let Some(session) = &self.session {
            request = request
                .header("mcp-session-id", session)
                .header("mcp-protocol-version", PROTOCOL);
        }
        request
    }

    /// POSTs one JSON-RPC message.
    async fn post(&self, message: Value) -> reqwest::Response {
        self.request(reqwest::Method::POST)
            .header("accept", "application/json, text/event-stream")
            .header("content-type", "application/json")
            .body(message.to_string())
            .send()
            .await
            .expect("POST")
    }

    /// `initialize` (declaring form elicitations) and
    /// `notifications/initialized`: the session is open.
    async fn initialize(&mut self) {
        let response = self
            .post(
                json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
                "protocolVersion": PROTOCOL,
                "capabilities": {"elicitation": {"form": {}}},
                "clientInfo": {"name": "raw-http", "version": "0"}}}),
            )
            .await;
        assert_eq!(response.status(), reqwest::StatusCode::OK);
        self.session = Some(
            response
                .headers()
                .get("mcp-session-id")
                .expect("a session id")
                .to_str()
                .expect("ASCII")
                .to_owned(),
        );
        let mut stream = Sse::new(response);
        let initialized = tokio::time::timeout(WAIT, stream.next())
            .await
            .expect("the initialize result in time")
            .expect("an initialize result");
        assert_eq!(initialized["result"]["protocolVersion"], PROTOCOL);
        let response = self
            .post(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
            .await;
        assert_eq!(response.status(), reqwest::StatusCode::ACCEPTED);
    }

    /// Opens the standalone GET stream; what comes on it is collected.
    async fn open_get_stream(&self) -> Arc<Mutex<Vec<Value>>> {
        let response = self
            .request(reqwest::Method::GET)
            .header("accept", "text/event-stream")
            .send()
            .await
            .expect("GET");
        assert_eq!(response.status(), reqwest::StatusCode::OK, "the GET stream");
        let seen = Arc::new(Mutex::new(Vec::new()));
        let collected = seen.clone();
        tokio::spawn(async move {
            let mut stream = Sse::new(response);
            while let Some(message) = stream.next().await {
                collected.lock().expect("collected").push(message);
            }
        });
        seen
    }
}

/// The JSON-RPC messages of an SSE response, in order.
struct Sse {
    response: reqwest::Response,
    buffer: String,
}

impl Sse {
    fn new(response: reqwest::Response) -> Sse {
        Sse {
            response,
            buffer: String::new(),
        }
    }

    /// The next message with data (priming events have none), or `None`
    /// when the stream ends or breaks.
    async fn next(&mut self) -> Option<Value> {
        loop {
            while let Some(end) = self.buffer.find("\n\n") {
                let event: String = self.buffer.drain(..end + 2).collect();
                let data: Vec<&str> = event
                    .lines()
                    .filter_map(|line| line.strip_prefix("data:"))
                    .map(str::trim_start)
                    .collect();
                let data = data.join("\n");
                if !data.trim().is_empty() {
                    return Some(serde_json::from_str(&data).expect("a JSON-RPC message"));
                }
            }
            // A stream cut (the gateway stopped) ends it too.
            let Ok(Some(chunk)) = self.response.chunk().await else {
                return None;
            };
            self.buffer
                .push_str(&String::from_utf8_lossy(&chunk).replace("\r\n", "\n"));
        }
    }
}

/// `gatehouse serve --listen` with demo-server `git` behind it and the
/// guardian, which leaves `ask_name`'s question to the person.
fn served(dir: &std::path::Path) -> HttpGateway {
    HttpGateway::start(&config_with(dir, "{}", ""))
}

/// Calls `git__ask_name` as request 2 and answers its question on the POST
/// stream of the call itself; returns the tool's text. `get_stream`, if
/// open, is quoted when the question does not come.
async fn ask_name_on_the_post_stream(raw: &Raw, get_stream: Option<&Mutex<Vec<Value>>>) -> String {
    let response = raw
        .post(json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                     "params": {"name": "git__ask_name", "arguments": {}}}))
        .await;
    assert_eq!(response.status(), reqwest::StatusCode::OK);
    let content_type = response
        .headers()
        .get("content-type")
        .and_then(|value| value.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    assert!(
        content_type.starts_with("text/event-stream"),
        "{content_type}"
    );
    let mut call = Sse::new(response);
    let on_get = || {
        get_stream.map_or_else(
            || "no GET stream is open".to_owned(),
            |seen| format!("on the GET stream: {:?}", seen.lock().expect("seen")),
        )
    };
    let question = match tokio::time::timeout(WAIT, call.next()).await {
        Ok(Some(message)) => message,
        Ok(None) => panic!("the call's stream ended without the question; {}", on_get()),
        Err(_) => panic!(
            "no question on the call's POST stream within {WAIT:?}; {}",
            on_get()
        ),
    };
    assert_eq!(
        question["method"],
        "elicitation/create",
        "the first message on the call's stream is the question, not {question}; {}",
        on_get()
    );
    assert!(
        question["params"]["message"]
            .as_str()
            .is_some_and(|message| message.contains("[git]") && message.contains("name")),
        "{question}"
    );
    let answered = raw
        .post(json!({"jsonrpc": "2.0", "id": question["id"],
                     "result": {"action": "accept", "content": {"name": "Ada"}}}))
        .await;
    assert_eq!(answered.status(), reqwest::StatusCode::ACCEPTED);
    let result = tokio::time::timeout(WAIT, call.next())
        .await
        .expect("the tool result in time")
        .expect("the tool result on the call's stream");
    assert_eq!(result["id"], 2, "{result}");
    result["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_get_stream_a_forwarded_question_comes_on_the_calls_post_stream() {
    let dir = tempfile::tempdir().expect("tempdir");
    let gateway = served(dir.path());
    let mut raw = Raw::new(&gateway);
    raw.initialize().await;
    let text = ask_name_on_the_post_stream(&raw, None).await;
    assert!(
        text.contains("hello Ada"),
        "the answer reached the server: {text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_get_stream_open_a_forwarded_question_still_comes_on_the_calls_post_stream() {
    let dir = tempfile::tempdir().expect("tempdir");
    let gateway = served(dir.path());
    let mut raw = Raw::new(&gateway);
    raw.initialize().await;
    let get_stream = raw.open_get_stream().await;
    let text = ask_name_on_the_post_stream(&raw, Some(&get_stream)).await;
    assert!(
        text.contains("hello Ada"),
        "the answer reached the server: {text}"
    );
    let seen = get_stream.lock().expect("seen");
    assert!(
        seen.iter()
            .all(|message| message["method"] != "elicitation/create"),
        "no question on the GET stream: {seen:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_ends_the_session_with_200_or_204() {
    let dir = tempfile::tempdir().expect("tempdir");
    let gateway = served(dir.path());
    let mut raw = Raw::new(&gateway);
    raw.initialize().await;
    let status = raw
        .request(reqwest::Method::DELETE)
        .send()
        .await
        .expect("DELETE")
        .status();
    assert!(
        status == reqwest::StatusCode::OK || status == reqwest::StatusCode::NO_CONTENT,
        "clients take only 200 or 204 for an ended session (the Python SDK logs \
         \"Session termination failed\" otherwise): {status}"
    );
    // The session is gone.
    let response = raw
        .post(json!({"jsonrpc": "2.0", "id": 3, "method": "tools/list"}))
        .await;
    assert_eq!(
        response.status(),
        reqwest::StatusCode::NOT_FOUND,
        "a request in the ended session"
    );
}
