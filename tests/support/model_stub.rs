//! A scripted OpenAI-compatible `/chat/completions` endpoint on a free
//! loopback port, for the model provider's tests (`gatehouse_models`).
//!
//! Each request takes the next [`Step`] of the script (the default step once
//! the script is used up) and is recorded first, headers and body, so a test
//! can check what the provider sent. Plain HTTP/1.1 on a tokio
//! `TcpListener`, one request per connection (`Connection: close`), so a
//! step can also drop the connection without answering.
//!
//! The server runs on a runtime of its own, on a thread of its own: it works
//! the same from a plain `#[test]` and from inside a `#[tokio::test]`. It
//! stops when dropped.
//!
//! ```no_run
//! use gatehouse_tests::model_stub::{ModelStub, Step};
//! let stub = ModelStub::start(vec![Step::Status(500, "busy".into()), Step::verdict("allow")]);
//! assert!(stub.base_url().starts_with("http://127.0.0.1:"));
//! // ... point a `[models.NAME]` at `stub.base_url()` and ask it ...
//! assert_eq!(stub.requests().len(), 0);
//! ```

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// The model name the stub answers with (not the one asked for, so a test
/// can tell which the provider reports).
pub const STUB_MODEL: &str = "stub-model-1";
/// `usage.prompt_tokens` of every answer.
pub const STUB_PROMPT_TOKENS: u32 = 42;
/// `usage.completion_tokens` of every answer.
pub const STUB_COMPLETION_TOKENS: u32 = 7;
/// The path the stub answers: `base_url()` + `/chat/completions`.
pub const COMPLETIONS_PATH: &str = "/v1/chat/completions";

/// What the stub does with one request.
#[derive(Debug, Clone)]
pub enum Step {
    /// 200 with a chat completion whose content is this (JSON) text,
    /// `finish_reason: "stop"`, [`STUB_MODEL`] and the stub's token counts.
    Verdict(String),
    /// 200 with a chat completion whose content is this text, as it is
    /// (malformed output: prose, a truncated object, ...).
    Raw(String),
    /// Waits, then does the inner step.
    Slow(Duration, Box<Step>),
    /// This status with this body (JSON content type when it starts with
    /// `{`), e.g. 429, 500, 400 with an OpenAI error body, or 200 with a
    /// body that is not a chat completion at all.
    Status(u16, String),
    /// This status, these extra headers (`Retry-After`, ...) and this body.
    Response {
        /// The status.
        status: u16,
        /// Extra headers.
        headers: Vec<(String, String)>,
        /// The body.
        body: String,
    },
    /// Closes the connection without answering.
    Drop,
}

impl Step {
    /// A [`Step::Verdict`] of `{"outcome": OUTCOME, "risk_level": ...}`.
    pub fn verdict(outcome: &str) -> Step {
        let risk = if outcome == "allow" { "low" } else { "high" };
        Step::Verdict(
            json!({"outcome": outcome, "risk_level": risk, "rationale": "stub"}).to_string(),
        )
    }

    /// A [`Step::Slow`]: `step` after `delay`.
    pub fn slow(delay: Duration, step: Step) -> Step {
        Step::Slow(delay, Box::new(step))
    }

    /// An OpenAI-style error: `status` with `{"error": {"message": ...}}`.
    pub fn error(status: u16, message: &str) -> Step {
        Step::Status(
            status,
            json!({"error": {"message": message, "type": "stub_error"}}).to_string(),
        )
    }
}

/// One request the stub received.
#[derive(Debug, Clone)]
pub struct StubRequest {
    /// `POST`, ...
    pub method: String,
    /// The request target (`/v1/chat/completions?...`).
    pub path: String,
    /// Headers, names lower-cased, in order.
    pub headers: Vec<(String, String)>,
    /// The body.
    pub body: Vec<u8>,
}

impl StubRequest {
    /// The first header called `name` (any case).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(header, _)| header.eq_ignore_ascii_case(name))
            .map(|(_, value)| value.as_str())
    }

    /// The body as JSON; panics (failing the test) when it is not.
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|error| {
            panic!(
                "the request body is not JSON ({error}): {}",
                String::from_utf8_lossy(&self.body)
            )
        })
    }
}

#[derive(Debug)]
struct Shared {
    script: Mutex<VecDeque<Step>>,
    default: Step,
    requests: Mutex<Vec<StubRequest>>,
}

impl Shared {
    fn next_step(&self) -> Step {
        self.script
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .pop_front()
            .unwrap_or_else(|| self.default.clone())
    }
}

/// A running stub; stopped when dropped.
#[derive(Debug)]
pub struct ModelStub {
    address: std::net::SocketAddr,
    shared: Arc<Shared>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl ModelStub {
    /// Serves `script`, then `{"outcome":"allow"}` verdicts.
    pub fn start(script: Vec<Step>) -> ModelStub {
        ModelStub::with_default(script, Step::verdict("allow"))
    }

    /// Serves `script`, then `default` for every further request.
    pub fn with_default(script: Vec<Step>, default: Step) -> ModelStub {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a loopback port");
        listener
            .set_nonblocking(true)
            .expect("a non-blocking listener");
        let address = listener.local_addr().expect("an address");
        let shared = Arc::new(Shared {
            script: Mutex::new(script.into()),
            default,
            requests: Mutex::new(Vec::new()),
        });
        let (stop, stopped) = tokio::sync::oneshot::channel();
        let serving = Arc::clone(&shared);
        let thread = std::thread::Builder::new()
            .name("model-stub".to_owned())
            .spawn(move || {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .expect("the stub's runtime");
                runtime.block_on(serve(listener, serving, stopped));
            })
            .expect("the stub's thread");
        ModelStub {
            address,
            shared,
            stop: Some(stop),
            thread: Some(thread),
        }
    }

    /// The endpoint's base URL, `http://127.0.0.1:PORT/v1` (what
    /// `[models.NAME] endpoint` takes).
    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.address)
    }

    /// The requests received so far, in order.
    pub fn requests(&self) -> Vec<StubRequest> {
        self.shared
            .requests
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// How many requests were received.
    pub fn request_count(&self) -> usize {
        self.shared
            .requests
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }
}

impl Drop for ModelStub {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

async fn serve(
    listener: std::net::TcpListener,
    shared: Arc<Shared>,
    mut stopped: tokio::sync::oneshot::Receiver<()>,
) {
    let Ok(listener) = tokio::net::TcpListener::from_std(listener) else {
        return;
    };
    loop {
        tokio::select! {
            _ = &mut stopped => return,
            accepted = listener.accept() => {
                if let Ok((stream, _)) = accepted {
                    tokio::spawn(connection(stream, Arc::clone(&shared)));
                }
            }
        }
    }
}

/// Reads one request, records it, and does the next step.
async fn connection(mut stream: TcpStream, shared: Arc<Shared>) {
    let Ok(Some(request)) =
        tokio::time::timeout(Duration::from_secs(10), read_request(&mut stream)).await
    else {
        return;
    };
    let path_ok = request.path.split('?').next() == Some(COMPLETIONS_PATH);
    let method_ok = request.method == "POST";
    shared
        .requests
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .push(request);
    if !path_ok || !method_ok {
        let _ = respond(
            &mut stream,
            404,
            &[],
            &json!({"error": {"message": format!("the stub answers only POST {COMPLETIONS_PATH}")}})
                .to_string(),
        )
        .await;
        return;
    }
    let mut step = shared.next_step();
    loop {
        match step {
            Step::Slow(delay, inner) => {
                tokio::time::sleep(delay).await;
                step = *inner;
            }
            Step::Verdict(content) | Step::Raw(content) => {
                let body = json!({
                    "id": "chatcmpl-stub",
                    "object": "chat.completion",
                    "created": 0,
                    "model": STUB_MODEL,
                    "choices": [{
                        "index": 0,
                        "message": {"role": "assistant", "content": content},
                        "finish_reason": "stop",
                    }],
                    "usage": {
                        "prompt_tokens": STUB_PROMPT_TOKENS,
                        "completion_tokens": STUB_COMPLETION_TOKENS,
                        "total_tokens": STUB_PROMPT_TOKENS + STUB_COMPLETION_TOKENS,
                    },
                });
                let _ = respond(&mut stream, 200, &[], &body.to_string()).await;
                return;
            }
            Step::Status(status, body) => {
                let _ = respond(&mut stream, status, &[], &body).await;
                return;
            }
            Step::Response {
                status,
                headers,
                body,
            } => {
                let _ = respond(&mut stream, status, &headers, &body).await;
                return;
            }
            Step::Drop => return,
        }
    }
}

/// One HTTP/1.1 request with a `Content-Length` body (what reqwest sends);
/// `None` when the connection ends first or the head is malformed.
async fn read_request(stream: &mut TcpStream) -> Option<StubRequest> {
    let mut buffer = Vec::new();
    let head_end = loop {
        if let Some(at) = buffer.windows(4).position(|window| window == b"\r\n\r\n") {
            break at;
        }
        if buffer.len() > 64 * 1024 {
            return None;
        }
        let mut chunk = [0u8; 4096];
        let read = stream.read(&mut chunk).await.ok()?;
        if read == 0 {
            return None;
        }
        buffer.extend_from_slice(&chunk[..read]);
    };
    let head = String::from_utf8_lossy(&buffer[..head_end]).into_owned();
    let mut lines = head.split("\r\n");
    let mut request_line = lines.next()?.split(' ');
    let method = request_line.next()?.to_owned();
    let path = request_line.next()?.to_owned();
    let headers: Vec<(String, String)> = lines
        .filter_map(|line| line.split_once(':'))
        .map(|(name, value)| (name.trim().to_ascii_lowercase(), value.trim().to_owned()))
        .collect();
    let length: usize = headers
        .iter()
        .find(|(name, _)| name == "content-length")
        .and_then(|(_, value)| value.parse().ok())
        .unwrap_or(0);
    let mut body = buffer[head_end + 4..].to_vec();
    while body.len() < length {
        let mut chunk = vec![0u8; (length - body.len()).min(64 * 1024)];
        let read = stream.read(&mut chunk).await.ok()?;
        if read == 0 {
            return None;
        }
        body.extend_from_slice(&chunk[..read]);
    }
    body.truncate(length);
    Some(StubRequest {
        method,
        path,
        headers,
        body,
    })
}

async fn respond(
    stream: &mut TcpStream,
    status: u16,
    headers: &[(String, String)],
    body: &str,
) -> std::io::Result<()> {
    let content_type = if body.trim_start().starts_with('{') {
        "application/json"
    } else {
        "text/plain; charset=utf-8"
    };
    let mut response = format!(
        "HTTP/1.1 {status} Stub\r\ncontent-type: {content_type}\r\ncontent-length: {}\r\nconnection: close\r\n",
        body.len()
    );
    for (name, value) in headers {
        response.push_str(&format!("{name}: {value}\r\n"));
    }
    response.push_str("\r\n");
    response.push_str(body);
    stream.write_all(response.as_bytes()).await?;
    stream.shutdown().await
}
