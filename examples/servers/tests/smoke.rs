//! Smoke tests: drive the built `demo-server` binary with an rmcp client over
//! stdio (child process) and streamable HTTP.

use std::{
    future::Future,
    process::Stdio,
    sync::{Arc, Mutex},
    time::Duration,
};

use rmcp::{
    ClientHandler, ErrorData, RoleClient, ServiceExt,
    model::{
        CallToolRequestParams, CallToolResult, ClientCapabilities, ClientConfig,
        ElicitRequestParams, ElicitResult, ElicitationAction, ElicitationCapability,
        FormElicitationCapability, Implementation, JsonObject, MetaObject,
        UrlElicitationCapability,
    },
    service::{NotificationContext, RequestContext, RunningService},
    transport::{ConfigureCommandExt, StreamableHttpClientTransport, TokioChildProcess},
};
use serde_json::{Value, json};
use tokio::io::AsyncBufReadExt;

const BIN: &str = env!("CARGO_BIN_EXE_demo-server");
/// Upper bound for any single wait; everything normally takes milliseconds.
const WAIT: Duration = Duration::from_secs(20);

/// Awaits `future`, failing the test if it takes longer than [`WAIT`].
async fn bounded<T>(what: &str, future: impl Future<Output = T>) -> T {
    tokio::time::timeout(WAIT, future)
        .await
        .unwrap_or_else(|_| panic!("timed out waiting for {what}"))
}

/// One elicitation request as the client saw it.
#[derive(Debug, Clone)]
struct Seen {
    mode: &'static str,
    message: String,
    /// `_meta` from the request context (where rmcp puts `params._meta`).
    context_meta: JsonObject,
    /// `_meta` left inside the typed params, if any.
    params_meta: Option<JsonObject>,
    /// The whole params as the client decoded them.
    params: Value,
}

/// A client that records what it receives and answers elicitations.
#[derive(Clone, Default)]
struct TestClient {
    list_changed: Arc<tokio::sync::Notify>,
    elicitations: Arc<Mutex<Vec<Seen>>>,
    /// Decline approval requests with this `_meta.message` instead of accepting.
    decline_approvals: Option<&'static str>,
}

impl TestClient {
    fn seen(&self) -> Vec<Seen> {
        self.elicitations.lock().unwrap().clone()
    }
}

impl ClientHandler for TestClient {
    async fn create_elicitation(
        &self,
        request: ElicitRequestParams,
        context: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, ErrorData> {
        let params = serde_json::to_value(&request).unwrap();
        let (mode, message, params_meta, answer) = match &request {
            ElicitRequestParams::FormElicitationParams {
                meta,
                message,
                requested_schema,
            } => {
                let approval = context.meta.0.0.contains_key("codex_request_type");
                let answer = if let (true, Some(reason)) = (approval, self.decline_approvals) {
                    let Value::Object(meta) = json!({"message": reason}) else {
                        unreachable!()
                    };
                    ElicitResult::new(ElicitationAction::Decline).with_meta(MetaObject(meta))
                } else if requested_schema.properties.contains_key("name") {
                    ElicitResult::new(ElicitationAction::Accept)
                        .with_content(json!({"name": "Ada"}))
                } else {
                    ElicitResult::new(ElicitationAction::Accept).with_content(json!({}))
                };
                (
                    "form",
                    message.clone(),
                    meta.as_ref().map(|m| m.0.0.clone()),
                    answer,
                )
            }
            ElicitRequestParams::UrlElicitationParams { meta, message, .. } => (
                "url",
                message.clone(),
                meta.as_ref().map(|m| m.0.0.clone()),
                ElicitResult::new(ElicitationAction::Accept),
            ),
            _ => panic!("unexpected elicitation mode: {params}"),
        };
        self.elicitations.lock().unwrap().push(Seen {
            mode,
            message,
            context_meta: context.meta.0.0.clone(),
            params_meta,
            params,
        });
        Ok(answer)
    }

    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.list_changed.notify_one();
    }

    fn get_info(&self) -> ClientConfig {
        ClientConfig::new(
            ClientCapabilities::builder()
                .enable_elicitation_with(
                    ElicitationCapability::new()
                        .with_form(FormElicitationCapability::new())
                        .with_url(UrlElicitationCapability::new()),
                )
                .build(),
            Implementation::new("smoke-test", "0.0.0"),
        )
    }
}

type Client = RunningService<RoleClient, TestClient>;

/// Spawns `demo-server ARGS` on stdio and initializes a client with it.
async fn connect_stdio(client: TestClient, args: &[&str]) -> Client {
    let command = tokio::process::Command::new(BIN).configure(|command| {
        command.args(args);
    });
    let transport = TokioChildProcess::new(command).expect("spawn demo-server");
    bounded("initialize over stdio", client.serve(transport))
        .await
        .expect("initialize over stdio")
}

async fn call(client: &Client, tool: &str, arguments: Value) -> CallToolResult {
    let Value::Object(arguments) = arguments else {
        panic!("arguments must be an object")
    };
    let params = CallToolRequestParams::new(tool.to_owned()).with_arguments(arguments);
    bounded(tool, client.call_tool(params))
        .await
        .unwrap_or_else(|error| panic!("calling {tool}: {error}"))
}

/// The text of a result with exactly one text block.
fn text(result: &CallToolResult) -> &str {
    assert_eq!(result.content.len(), 1, "{result:?}");
    &result.content[0].as_text().expect("text content").text
}

async fn tool_names(client: &Client) -> Vec<String> {
    bounded("tools/list", client.list_all_tools())
        .await
        .expect("tools/list")
        .into_iter()
        .map(|tool| tool.name.into_owned())
        .collect()
}

async fn shut_down(client: Client) {
    let _ = bounded("client shutdown", client.cancel()).await;
}

#[tokio::test]
async fn stdio_tools_echo_and_list_changed() {
    let handler = TestClient::default();
    let client = connect_stdio(handler.clone(), &["--name", "alpha"]).await;

    let info = client.peer_info().expect("server info");
    let tools_capability = info.capabilities.tools.clone().expect("tools capability");
    assert_eq!(tools_capability.list_changed, Some(true));

    let tools = bounded("tools/list", client.list_all_tools())
        .await
        .unwrap();
    let mut names: Vec<_> = tools.iter().map(|tool| tool.name.to_string()).collect();
    names.sort();
    assert_eq!(
        names,
        [
            "add_tool",
            "ask_name",
            "delete_branch",
            "echo",
            "elicit_raw",
            "open_url",
            "read_file"
        ]
    );
    let annotations = |name: &str| {
        tools
            .iter()
            .find(|tool| tool.name == name)
            .and_then(|tool| tool.annotations.clone())
            .unwrap_or_else(|| panic!("{name} has annotations"))
    };
    assert_eq!(annotations("delete_branch").destructive_hint, Some(true));
    assert_eq!(annotations("echo").read_only_hint, Some(true));
    assert_eq!(annotations("read_file").read_only_hint, Some(true));
    let echo = tools.iter().find(|tool| tool.name == "echo").unwrap();
    assert_eq!(echo.input_schema["required"], json!(["text"]));

    let result = call(&client, "echo", json!({"text": "hi there"})).await;
    assert_eq!(text(&result), "[alpha] hi there");
    assert_ne!(result.is_error, Some(true));

    let result = call(&client, "read_file", json!({"path": "/etc/motd"})).await;
    assert!(text(&result).starts_with("[alpha] "), "{result:?}");

    let result = call(&client, "add_tool", json!({"name": "shout"})).await;
    assert_eq!(text(&result), "[alpha] added shout");
    bounded("tools/list_changed", handler.list_changed.notified()).await;
    assert!(tool_names(&client).await.contains(&"shout".to_owned()));

    let result = call(&client, "shout", json!({"text": "hey"})).await;
    assert_eq!(text(&result), "[alpha] shout: hey");

    shut_down(client).await;
}

#[tokio::test]
async fn stdio_elicitation_round_trips() {
    let handler = TestClient::default();
    let client = connect_stdio(handler.clone(), &["--name", "beta"]).await;

    let result = call(&client, "delete_branch", json!({"branch": "main"})).await;
    assert_eq!(text(&result), "[beta] elicitation answered: accept");

    let result = call(&client, "ask_name", json!({})).await;
    assert_eq!(text(&result), "[beta] hello Ada");

    let result = call(&client, "open_url", json!({"url": "https://example.com/x"})).await;
    assert_eq!(text(&result), "[beta] accept");
    let result = call(&client, "open_url", json!({"url": "https://example.com/y"})).await;
    assert_eq!(text(&result), "[beta] accept");

    let result = call(
        &client,
        "elicit_raw",
        json!({"params": {
            "mode": "form",
            "message": "raw question",
            "requestedSchema": {"type": "object", "properties": {"ok": {"type": "boolean"}}},
            "_meta": {"raw_key": "raw_value"},
        }}),
    )
    .await;
    let raw = text(&result)
        .strip_prefix("[beta] ")
        .expect("[beta] prefix");
    let raw: Value = serde_json::from_str(raw).expect("raw result is JSON");
    assert_eq!(raw, json!({"action": "accept", "content": {}}));

    let seen = handler.seen();
    assert_eq!(seen.len(), 5, "{seen:#?}");

    let delete = &seen[0];
    assert_eq!(delete.mode, "form");
    assert_eq!(delete.message, "Allow delete_branch on main?");
    assert_eq!(
        delete.params["requestedSchema"],
        json!({"type": "object", "properties": {}})
    );
    // rmcp moves `params._meta` into the request context; accept either place.
    let meta = delete
        .params_meta
        .clone()
        .unwrap_or_else(|| delete.context_meta.clone());
    assert_eq!(meta["codex_request_type"], "approval_request");
    assert_eq!(meta["codex_approval_kind"], "mcp_tool_call");
    assert_eq!(meta["tool_name"], "delete_branch");
    assert_eq!(meta["tool_params"], json!({"branch": "main"}));
    // Exactly those keys: no progressToken or anything else.
    assert_eq!(meta.len(), 4, "{meta:?}");

    let ask = &seen[1];
    assert_eq!(ask.mode, "form");
    assert_eq!(ask.params["requestedSchema"]["required"], json!(["name"]));
    assert!(ask.context_meta.is_empty(), "{:?}", ask.context_meta);
    assert!(ask.params.get("_meta").is_none());

    let (first, second) = (&seen[2], &seen[3]);
    assert_eq!(first.mode, "url");
    assert_eq!(first.params["url"], "https://example.com/x");
    assert_ne!(
        first.params["elicitationId"],
        second.params["elicitationId"]
    );
    assert!(!first.params["elicitationId"].as_str().unwrap().is_empty());

    let raw = &seen[4];
    assert_eq!(raw.message, "raw question");
    assert_eq!(
        Value::Object(raw.context_meta.clone()),
        json!({"raw_key": "raw_value"})
    );

    shut_down(client).await;
}

#[tokio::test]
async fn declined_approval_reports_the_message() {
    let handler = TestClient {
        decline_approvals: Some("not on main"),
        ..TestClient::default()
    };
    let client = connect_stdio(handler, &[]).await;
    let result = call(&client, "delete_branch", json!({"branch": "main"})).await;
    assert_eq!(
        text(&result),
        "[demo] elicitation answered: decline: not on main"
    );
    shut_down(client).await;
}

#[tokio::test]
async fn http_echo_and_elicitation() {
    let mut child = tokio::process::Command::new(BIN)
        .args(["--name", "gamma", "--http", "127.0.0.1:0"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn demo-server --http");
    let stdout = child.stdout.take().unwrap();
    let mut lines = tokio::io::BufReader::new(stdout).lines();
    let line = bounded("the listening line", lines.next_line())
        .await
        .unwrap()
        .expect("a listening line");
    let url = line
        .strip_prefix("listening on ")
        .unwrap_or_else(|| panic!("unexpected first line {line:?}"));
    assert!(
        url.starts_with("http://127.0.0.1:") && url.ends_with("/mcp"),
        "{url}"
    );

    let handler = TestClient::default();
    let transport = StreamableHttpClientTransport::from_uri(url.to_owned());
    let client = bounded("initialize over HTTP", handler.clone().serve(transport))
        .await
        .expect("initialize over HTTP");

    let result = call(&client, "echo", json!({"text": "over http"})).await;
    assert_eq!(text(&result), "[gamma] over http");

    let result = call(&client, "delete_branch", json!({"branch": "dev"})).await;
    assert_eq!(text(&result), "[gamma] elicitation answered: accept");
    let meta = Value::Object(handler.seen()[0].context_meta.clone());
    assert_eq!(
        meta,
        json!({
            "codex_request_type": "approval_request",
            "codex_approval_kind": "mcp_tool_call",
            "tool_name": "delete_branch",
            "tool_params": {"branch": "dev"},
        })
    );

    shut_down(client).await;
    child.kill().await.expect("kill demo-server");
}

#[tokio::test]
async fn fail_flag_exits_non_zero() {
    let output = bounded(
        "demo-server --fail",
        tokio::process::Command::new(BIN)
            .arg("--fail")
            .stdin(Stdio::null())
            .output(),
    )
    .await
    .expect("run demo-server --fail");
    assert_eq!(output.status.code(), Some(1));
    assert!(output.stdout.is_empty());
    assert!(!output.stderr.is_empty());
}

#[tokio::test]
async fn hang_flag_never_answers_initialize() {
    let command = tokio::process::Command::new(BIN).configure(|command| {
        command.arg("--hang");
    });
    let transport = TokioChildProcess::new(command).expect("spawn demo-server --hang");
    let attempt = tokio::time::timeout(
        Duration::from_millis(500),
        TestClient::default().serve(transport),
    )
    .await;
    assert!(attempt.is_err(), "initialize should not have been answered");
}
