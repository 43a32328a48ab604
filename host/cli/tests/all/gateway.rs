//! `gatehouse serve` end to end: a real MCP client (rmcp) → the gateway →
//! demo-server, over stdio and streamable HTTP.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use rmcp::model::{
    CallToolRequestParams, ClientCapabilities, ClientConfig, ElicitRequestParams, ElicitResult,
    ElicitationAction, ElicitationCapability, ErrorData, FormElicitationCapability, Implementation,
    UrlElicitationCapability,
};
use rmcp::service::RequestContext;
use rmcp::transport::TokioChildProcess;
use rmcp::{ClientHandler, RoleClient, ServiceExt};
use serde_json::{Value, json};

use crate::http_gateway::{HttpGateway, reload};
use crate::paths::{demo_server, existing, target};
use crate::tool_result::result_text as text;

/// A config with demo-server `git` and the guardian.
fn config(dir: &Path, guardian_config: &str) -> PathBuf {
    config_with(dir, guardian_config, "")
}

/// A config with demo-server `git`, the guardian under `guardian_config` (a
/// TOML value) and `elicitations`, more lines of `[elicitations]` (its
/// tables, like `[elicitations.servers.git]`, go last).
pub(crate) fn config_with(dir: &Path, guardian_config: &str, elicitations: &str) -> PathBuf {
    let server = demo_server();
    let guardian = existing(
        target().join("wasm32-wasip2/guest/gatehouse_guardian.wasm"),
        "run .ci/build-guests",
    );
    let path = dir.join("gatehouse.toml");
    std::fs::write(
        &path,
        format!(
            "[mcp_servers.git]\ncommand = {server:?}\nargs = [\"--name\", \"git\"]\n\n\
             [[review.modules]]\npath = {guardian:?}\nconfig = {guardian_config}\n\n\
             [elicitations]\naudit_log = \"audit.jsonl\"\nperson_timeout_sec = 30\n{elicitations}\n",
            server = server.display().to_string(),
            guardian = guardian.display().to_string(),
        ),
    )
    .expect("write config");
    path
}

pub(crate) fn audit(dir: &Path) -> Vec<Value> {
    std::fs::read_to_string(dir.join("audit.jsonl"))
        .unwrap_or_default()
        .lines()
        .map(|line| serde_json::from_str(line).expect("JSON line"))
        .collect()
}

/// The upstream client: answers forms with `content`, or never (if `None`),
/// and counts what it was asked.
pub(crate) struct Client {
    pub(crate) elicitation: bool,
    pub(crate) content: Option<Value>,
    pub(crate) asked: Arc<AtomicUsize>,
}

impl ClientHandler for Client {
    fn get_info(&self) -> ClientConfig {
        let mut capabilities = ClientCapabilities::default();
        if self.elicitation {
            capabilities.elicitation = Some(
                ElicitationCapability::new()
                    .with_form(FormElicitationCapability::default())
                    .with_url(UrlElicitationCapability::new()),
            );
        }
        ClientConfig::new(capabilities, Implementation::new("test-client", "0"))
    }

    async fn create_elicitation(
        &self,
        _request: ElicitRequestParams,
        _context: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, ErrorData> {
        self.asked.fetch_add(1, Ordering::SeqCst);
        match &self.content {
            Some(content) => {
                Ok(ElicitResult::new(ElicitationAction::Accept).with_content(content.clone()))
            }
            None => std::future::pending().await,
        }
    }
}

pub(crate) fn call(name: &str, arguments: Value) -> CallToolRequestParams {
    CallToolRequestParams::new(name.to_owned())
        .with_arguments(arguments.as_object().cloned().unwrap_or_default())
}

/// `gatehouse serve --config CONFIG` on stdio, initialized by `client`.
pub(crate) async fn stdio_client<H: ClientHandler>(
    config: &Path,
    client: H,
) -> rmcp::service::RunningService<RoleClient, H> {
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_gatehouse"));
    command.arg("serve").arg("--config").arg(config);
    let transport = TokioChildProcess::new(command).expect("gatehouse starts");
    tokio::time::timeout(Duration::from_secs(60), client.serve(transport))
        .await
        .expect("initialize in time")
        .expect("initialize")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stdio_gateway_lists_calls_reviews_and_asks_the_person() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = config(dir.path(), "{}");
    let asked = Arc::new(AtomicUsize::new(0));
    let client = stdio_client(
        &config,
        Client {
            elicitation: true,
            content: Some(json!({"name": "Ada"})),
            asked: asked.clone(),
        },
    )
    .await;
    let tools = client.list_all_tools().await.expect("tools/list");
    let names: Vec<String> = tools.iter().map(|tool| tool.name.to_string()).collect();
    assert!(
        names.contains(&"git__delete_branch".to_owned()),
        "{names:?}"
    );

    let echo = client
        .call_tool(call("git__echo", json!({"text": "hi"})))
        .await
        .expect("echo");
    assert!(text(&echo).contains("[git] hi"));

    // Reviewed by the guardian: the catalog marks delete_branch destructive.
    let denied = client
        .call_tool(call("git__delete_branch", json!({"branch": "main"})))
        .await
        .expect("delete_branch");
    assert!(
        text(&denied).contains("answered: decline"),
        "{}",
        text(&denied)
    );
    assert!(
        text(&denied).contains("unacceptable risk"),
        "{}",
        text(&denied)
    );
    assert_eq!(asked.load(Ordering::SeqCst), 0, "the person was not asked");

    // Deferred by the guardian (no approval metadata): the person answers upstream.
    let named = client
        .call_tool(call("git__ask_name", json!({})))
        .await
        .expect("ask_name");
    assert!(text(&named).contains("hello Ada"), "{}", text(&named));
    assert_eq!(asked.load(Ordering::SeqCst), 1);

    client.cancel().await.expect("close");
    let lines = audit(dir.path());
    let decided: Vec<&str> = lines
        .iter()
        .filter_map(|line| line["decided_by"].as_str())
        .collect();
    assert_eq!(decided, ["guest", "person"], "{lines:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_upstream_elicitation_support_deferrals_are_declined() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = config(dir.path(), "{}");
    let client = stdio_client(
        &config,
        Client {
            elicitation: false,
            content: None,
            asked: Arc::new(AtomicUsize::new(0)),
        },
    )
    .await;
    let result = client
        .call_tool(call("git__ask_name", json!({})))
        .await
        .expect("ask_name");
    assert!(text(&result).contains("decline"), "{}", text(&result));
    client.cancel().await.expect("close");
    assert_eq!(audit(dir.path())[0]["decided_by"], "unhandled");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_gateway_serves_and_sigterm_cancels_pending_elicitations() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = config(dir.path(), "{}");
    let mut gateway = HttpGateway::start(&config);
    let asked = Arc::new(AtomicUsize::new(0));
    let client = Client {
        elicitation: true,
        content: None, // never answers: the elicitation stays pending
        asked: asked.clone(),
    }
    .serve(gateway.transport())
    .await
    .expect("initialize over HTTP");
    let echo = client
        .call_tool(call("git__echo", json!({"text": "web"})))
        .await
        .expect("echo");
    assert!(text(&echo).contains("[git] web"));

    let pending =
        tokio::spawn(async move { client.call_tool(call("git__ask_name", json!({}))).await });
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while asked.load(Ordering::SeqCst) == 0 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the person was never asked"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let status = std::process::Command::new("kill")
        .args(["-TERM", &gateway.child.id().to_string()])
        .status()
        .expect("kill");
    assert!(status.success());
    let exited = tokio::task::spawn_blocking(move || {
        let status = gateway.child.wait();
        (gateway, status)
    });
    let (_gateway, status) = tokio::time::timeout(Duration::from_secs(20), exited)
        .await
        .expect("gatehouse exits after SIGTERM")
        .expect("join");
    assert!(status.expect("status").success(), "clean exit");
    pending.abort();
    let lines = audit(dir.path());
    let last = lines.last().expect("the pending elicitation was audited");
    // Nobody answered: `on_unhandled`, and the reason is the shutdown.
    assert_eq!(last["decided_by"], "unhandled", "{last}");
    assert_eq!(last["answer"]["action"], "decline", "{last}");
    assert!(
        last["reason"]
            .as_str()
            .is_some_and(|reason| reason.ends_with("cancelled: gatehouse is shutting down")),
        "{last}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_concurrent_elicitations_are_each_answered_once_and_audited() {
    const CALLS: usize = 1000;
    let dir = tempfile::tempdir().expect("tempdir");
    // All thousand may be in flight at once: the per-server cap (256 by
    // default, which declines the excess by policy) is not what this tests.
    let config = config_with(
        dir.path(),
        "{}",
        &format!("max_in_flight_per_server = {CALLS}"),
    );
    // One session makes all thousand calls at once.
    let written = std::fs::read_to_string(&config).expect("read config");
    // The point is one answer and one audit line each, not the deadline: on
    // two shared cores a review descheduled for 50 ms would fail closed.
    let written = written.replacen(
        "[[review.modules]]",
        "[review.limits]\ndeadline_ms = 2000\n\n[[review.modules]]",
        1,
    );
    std::fs::write(
        &config,
        format!("{written}\n[gateway]\nmax_calls_per_session = {CALLS}\n"),
    )
    .expect("write config");
    let client = Arc::new(
        stdio_client(
            &config,
            Client {
                elicitation: true,
                content: Some(json!({})),
                asked: Arc::new(AtomicUsize::new(0)),
            },
        )
        .await,
    );
    let mut calls = Vec::with_capacity(CALLS);
    for index in 0..CALLS {
        let client = client.clone();
        calls.push(tokio::spawn(async move {
            client
                .call_tool(call(
                    "git__delete_branch",
                    json!({"branch": format!("b{index}")}),
                ))
                .await
        }));
    }
    for call in calls {
        let result = call.await.expect("task").expect("tool call");
        assert!(
            text(&result).contains("answered: decline"),
            "{}",
            text(&result)
        );
    }
    let lines = audit(dir.path());
    assert_eq!(lines.len(), CALLS, "one audit line per elicitation");
    let mut ids: Vec<String> = lines
        .iter()
        .map(|line| line["request_id"].to_string())
        .collect();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), CALLS, "every elicitation answered once");
    let others: Vec<&Value> = lines
        .iter()
        .filter(|line| line["decided_by"] != "guest")
        .collect();
    assert!(
        others.is_empty(),
        "{} not decided by the guest, e.g. {}",
        others.len(),
        others[0]
    );
}

fn set_module(config: &Path, module: &Path, module_config: &str) {
    let text = std::fs::read_to_string(config).expect("read config");
    let start = text.find("[[review.modules]]").expect("a module table");
    let end = text.find("[elicitations]").expect("elicitations table");
    let replaced = format!(
        "{}[[review.modules]]\npath = {:?}\nconfig = {module_config}\n\n{}",
        &text[..start],
        module.display().to_string(),
        &text[end..]
    );
    std::fs::write(config, replaced).expect("write config");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gatehouse_reload_swaps_the_chain_and_refuses_a_bad_module() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = config(dir.path(), "{}");
    let gateway = HttpGateway::start(&config);
    let client = Client {
        elicitation: false,
        content: None,
        asked: Arc::new(AtomicUsize::new(0)),
    }
    .serve(gateway.transport())
    .await
    .expect("initialize");
    let delete = || call("git__delete_branch", json!({"branch": "main"}));
    let before = client.call_tool(delete()).await.expect("call");
    assert!(
        text(&before).contains("unacceptable risk"),
        "{}",
        text(&before)
    );

    let allowlist = target().join("wasm32-wasip2/guest/gatehouse_allowlist.wasm");
    set_module(
        &config,
        &allowlist,
        r#"{ rules = [{ decision = "decline", message = "swapped in" }] }"#,
    );
    let (ok, said) = reload(&config);
    assert!(ok, "{said}");
    assert!(said.starts_with("ok "), "{said}");
    let after = client.call_tool(delete()).await.expect("call");
    assert!(text(&after).contains("swapped in"), "{}", text(&after));

    let wrong = target().join("wasm32-wasip2/guest/test_guest_wrong_world.wasm");
    set_module(&config, &wrong, "{}");
    let (ok, said) = reload(&config);
    assert!(!ok);
    assert!(said.contains("does not export"), "{said}");
    let still = client.call_tool(delete()).await.expect("call");
    assert!(
        text(&still).contains("swapped in"),
        "the old chain keeps serving: {}",
        text(&still)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_changed_module_file_or_sighup_swaps_without_a_command() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = config(dir.path(), "{}");
    // The chain's module is a file of our own that we can replace.
    let module = dir.path().join("reviewer.wasm");
    std::fs::copy(
        target().join("wasm32-wasip2/guest/gatehouse_guardian.wasm"),
        &module,
    )
    .expect("copy");
    set_module(&config, &module, "{}");
    let log = dir.path().join("gatehouse.log");
    let gateway =
        HttpGateway::start_logging(&config, std::fs::File::create(&log).expect("log file"));
    let client = Client {
        elicitation: false,
        content: None,
        asked: Arc::new(AtomicUsize::new(0)),
    }
    .serve(gateway.transport())
    .await
    .expect("initialize");
    let delete = || call("git__delete_branch", json!({"branch": "main"}));
    let answer = client.call_tool(delete()).await.expect("call");
    assert!(
        text(&answer).contains("unacceptable risk"),
        "{}",
        text(&answer)
    );

    // Replace the module file: the allowlist with an empty config defers,
    // and nobody upstream can answer, so the answer becomes a plain decline.
    let replacement = dir.path().join("next.wasm");
    std::fs::copy(
        target().join("wasm32-wasip2/guest/gatehouse_allowlist.wasm"),
        &replacement,
    )
    .expect("copy");
    std::fs::rename(&replacement, &module).expect("replace the module");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let answer = client.call_tool(delete()).await.expect("call");
        if !text(&answer).contains("unacceptable risk") {
            assert!(
                text(&answer).contains("answered: decline"),
                "{}",
                text(&answer)
            );
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the module change was not picked up"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let lines = audit(dir.path());
    assert_eq!(lines.last().expect("audited")["decided_by"], "unhandled");

    // SIGHUP reloads, with nothing changed on disk.
    let swaps = |log: &Path| {
        std::fs::read_to_string(log)
            .unwrap_or_default()
            .matches("reviewer chain and settings swapped")
            .count()
    };
    let before = swaps(&log);
    let status = std::process::Command::new("kill")
        .args(["-HUP", &gateway.child.id().to_string()])
        .status()
        .expect("kill");
    assert!(status.success());
    while swaps(&log) <= before {
        assert!(
            tokio::time::Instant::now() < deadline,
            "SIGHUP did not reload"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        std::fs::read_to_string(&log)
            .unwrap_or_default()
            .contains("SIGHUP")
    );
}

/// An upstream client that accepts every URL elicitation, answers forms
/// with a name, and records the URL elicitation ids it was shown and the
/// completion notices it received.
#[derive(Default, Clone)]
struct Recorder {
    shown: Arc<std::sync::Mutex<Vec<String>>>,
    completed: Arc<std::sync::Mutex<Vec<String>>>,
}

impl ClientHandler for Recorder {
    fn get_info(&self) -> ClientConfig {
        let mut capabilities = ClientCapabilities::default();
        capabilities.elicitation = Some(
            ElicitationCapability::new()
                .with_form(FormElicitationCapability::default())
                .with_url(UrlElicitationCapability::new()),
        );
        ClientConfig::new(capabilities, Implementation::new("recorder", "0"))
    }

    async fn create_elicitation(
        &self,
        request: ElicitRequestParams,
        _context: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, ErrorData> {
        match request {
            ElicitRequestParams::UrlElicitationParams { elicitation_id, .. } => {
                self.shown.lock().expect("lock").push(elicitation_id);
                Ok(ElicitResult::new(ElicitationAction::Accept))
            }
            _ => {
                Ok(ElicitResult::new(ElicitationAction::Accept)
                    .with_content(json!({"name": "Ada"})))
            }
        }
    }

    async fn on_custom_notification(
        &self,
        notification: rmcp::model::CustomNotification,
        _context: rmcp::service::NotificationContext<RoleClient>,
    ) {
        if notification.method == "notifications/elicitation/complete"
            && let Some(id) = notification
                .params
                .as_ref()
                .and_then(|params| params["elicitationId"].as_str())
        {
            self.completed.lock().expect("lock").push(id.to_owned());
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resources_prompts_and_url_completions_pass_through() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = config(dir.path(), "{}");
    let recorder = Recorder::default();
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_gatehouse"));
    command.arg("serve").arg("--config").arg(&config);
    let transport = TokioChildProcess::new(command).expect("gatehouse starts");
    let client = tokio::time::timeout(Duration::from_secs(60), recorder.clone().serve(transport))
        .await
        .expect("initialize in time")
        .expect("initialize");

    // Resources keep the server's URIs; reads go to the server that listed them.
    let resources = client.list_all_resources().await.expect("resources/list");
    let uris: Vec<&str> = resources.iter().map(|r| r.uri.as_str()).collect();
    assert_eq!(uris, ["demo://git/readme"]);
    let read = client
        .read_resource(rmcp::model::ReadResourceRequestParams::new(
            "demo://git/readme",
        ))
        .await
        .expect("resources/read");
    let body = serde_json::to_value(&read.contents).expect("json");
    assert!(
        body[0]["text"]
            .as_str()
            .is_some_and(|t| t.starts_with("[git] readme")),
        "{body}"
    );
    let missing = client
        .read_resource(rmcp::model::ReadResourceRequestParams::new(
            "demo://git/nope",
        ))
        .await
        .expect_err("unknown URI");
    assert!(missing.to_string().contains("demo://git/nope"), "{missing}");

    // Prompts are qualified like tools; the server's own errors come back as sent.
    let prompts = client.list_all_prompts().await.expect("prompts/list");
    let names: Vec<&str> = prompts.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(names, ["git__summarize"]);
    let arguments = json!({"topic": "rust"})
        .as_object()
        .cloned()
        .expect("object");
    let prompt = client
        .get_prompt(
            rmcp::model::GetPromptRequestParams::new("git__summarize").with_arguments(arguments),
        )
        .await
        .expect("prompts/get");
    let messages = serde_json::to_value(&prompt.messages).expect("json");
    assert!(
        messages.to_string().contains("[git] Summarize rust"),
        "{messages}"
    );
    let refused = client
        .get_prompt(rmcp::model::GetPromptRequestParams::new("git__summarize"))
        .await
        .expect_err("missing topic");
    assert!(refused.to_string().contains("topic"), "{refused}");

    // A URL elicitation the chain defers is shown upstream; the server's
    // completion notice reaches the same client with the same id.
    let opened = client
        .call_tool(call(
            "git__open_url",
            json!({"url": "https://example.com/login"}),
        ))
        .await
        .expect("open_url");
    assert!(text(&opened).contains("accept"), "{}", text(&opened));
    let shown = recorder.shown.lock().expect("lock").clone();
    assert_eq!(shown.len(), 1, "{shown:?}");
    assert!(text(&opened).contains(&shown[0]), "{}", text(&opened));
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while recorder.completed.lock().expect("lock").is_empty() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "no completion notice upstream"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(*recorder.completed.lock().expect("lock"), shown);
    client.cancel().await.expect("close");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_disconnect_cancels_what_waits_for_that_person() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = config(dir.path(), "{}");
    let gateway = HttpGateway::start(&config);
    let asked = Arc::new(AtomicUsize::new(0));
    let client = Client {
        elicitation: true,
        content: None, // never answers
        asked: asked.clone(),
    }
    .serve(gateway.transport())
    .await
    .expect("initialize over HTTP");
    let peer = client.peer().clone();
    let pending =
        tokio::spawn(async move { peer.call_tool(call("git__ask_name", json!({}))).await });
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while asked.load(Ordering::SeqCst) == 0 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the person was never asked"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // The person's client goes away with the question unanswered.
    client.cancel().await.expect("close");
    pending.abort();
    while audit(dir.path()).is_empty() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the waiting elicitation was never answered"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let lines = audit(dir.path());
    assert_eq!(lines.len(), 1, "{lines:?}");
    // Nobody answered: `on_unhandled`, and the reason says the client went.
    assert_eq!(lines[0]["decided_by"], "unhandled", "{}", lines[0]);
    assert_eq!(lines[0]["answer"]["action"], "decline", "{}", lines[0]);
    assert!(
        lines[0]["reason"]
            .as_str()
            .is_some_and(|reason| reason.contains("the upstream client went away")),
        "{}",
        lines[0]
    );
    assert_eq!(lines[0]["client"]["name"], "test-client", "{}", lines[0]);

    // The gateway goes on serving the next client.
    let next = Client {
        elicitation: false,
        content: None,
        asked: Arc::new(AtomicUsize::new(0)),
    }
    .serve(gateway.transport())
    .await
    .expect("a second client connects");
    let echo = next
        .call_tool(call("git__echo", json!({"text": "still here"})))
        .await
        .expect("echo");
    assert!(text(&echo).contains("[git] still here"));
}

/// A config with demo-servers `slow` and `fast`, one review permit and a
/// 50 ms deadline, and the chain allowlist (declining `fast`, deferring the
/// rest) then the guest `waiting` (by crate name, e.g. `test_guest_sleep`),
/// which reviews `slow`'s elicitations.
fn slow_and_fast(dir: &Path, waiting: &str) -> PathBuf {
    let server = demo_server();
    let guests = target().join("wasm32-wasip2/guest");
    let allowlist = existing(
        guests.join("gatehouse_allowlist.wasm"),
        "run .ci/build-guests",
    );
    let guest = existing(
        guests.join(format!("{waiting}.wasm")),
        "run .ci/build-guests",
    );
    let config = dir.join("gatehouse.toml");
    std::fs::write(
        &config,
        format!(
            "[mcp_servers.slow]\ncommand = {server:?}\nargs = [\"--name\", \"slow\"]\n\n\
             [mcp_servers.fast]\ncommand = {server:?}\nargs = [\"--name\", \"fast\"]\n\n\
             [review]\nverify_contract = false\n\n\
             [review.limits]\nconcurrent_reviews = 1\ndeadline_ms = 50\n\n\
             [[review.modules]]\npath = {allowlist:?}\n\
             config = {{ rules = [{{ server = \"fast\", decision = \"decline\", message = \"fast says no\" }}] }}\n\n\
             [[review.modules]]\npath = {guest:?}\n\n\
             [elicitations]\naudit_log = \"audit.jsonl\"\nperson_timeout_sec = 30\n",
            server = server.display().to_string(),
            allowlist = allowlist.display().to_string(),
            guest = guest.display().to_string(),
        ),
    )
    .expect("write config");
    config
}

/// Hostile guests that wait in WASI (a sleep, an endless poll, a read of
/// stdin) hold no review permit past their deadline: with one permit and a
/// flood of elicitations from `slow` (reviewed by the waiting guest), the
/// elicitations of `fast` (decided by the allowlist before it) keep being
/// answered, and every one of them is audited.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn guests_waiting_in_wasi_never_starve_another_servers_elicitations() {
    for waiting in [
        "test_guest_sleep",
        "test_guest_poll_forever",
        "test_guest_stdin_block",
    ] {
        const SLOW: usize = 6;
        const FAST: usize = 3;
        let dir = tempfile::tempdir().expect("tempdir");
        let config = slow_and_fast(dir.path(), waiting);
        let client = Arc::new(
            stdio_client(
                &config,
                Client {
                    elicitation: true,
                    content: Some(json!({})),
                    asked: Arc::new(AtomicUsize::new(0)),
                },
            )
            .await,
        );
        let mut calls = Vec::new();
        for (server, count) in [("slow", SLOW), ("fast", FAST)] {
            for index in 0..count {
                let client = client.clone();
                calls.push(tokio::spawn(async move {
                    client
                        .call_tool(call(
                            &format!("{server}__delete_branch"),
                            json!({"branch": format!("b{index}")}),
                        ))
                        .await
                }));
            }
        }
        // Without a bound on waiting guests the first slow review holds the
        // only permit for an hour and nothing below ever finishes.
        let results =
            tokio::time::timeout(Duration::from_secs(60), futures::future::join_all(calls))
                .await
                .unwrap_or_else(|_| panic!("{waiting}: elicitations were starved"));
        for result in results {
            let result = result.expect("task").expect("tool call");
            assert!(
                text(&result).contains("answered: decline"),
                "{}",
                text(&result)
            );
        }
        let lines = audit(dir.path());
        assert_eq!(lines.len(), SLOW + FAST, "{waiting}: one audit line each");
        let slow: Vec<&Value> = lines
            .iter()
            .filter(|line| line["server"] == "slow")
            .collect();
        assert_eq!(slow.len(), SLOW);
        for line in slow {
            assert_eq!(line["decided_by"], "failure", "{line}");
            let step = &line["steps"][1];
            assert_eq!(step["failure"], "deadline", "{waiting}: {line}");
        }
        let fast: Vec<&Value> = lines
            .iter()
            .filter(|line| line["server"] == "fast")
            .collect();
        assert_eq!(fast.len(), FAST);
        assert!(
            fast.iter().all(|line| line["decided_by"] == "guest"),
            "{fast:?}"
        );
    }
}

/// Admission to the review pool is fair across servers: with one permit and
/// `slow` flooding it with elicitations that each take their whole deadline
/// (the sleeping guest), an elicitation of `fast` sent afterwards is reviewed
/// after a couple of `slow`'s, not behind all of them. Measured by the order
/// of the audit lines, not by the clock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn guests_waiting_in_wasi_do_not_queue_one_server_behind_anothers_flood() {
    const SLOW: usize = 40;
    let dir = tempfile::tempdir().expect("tempdir");
    let config = slow_and_fast(dir.path(), "test_guest_sleep");
    let client = Arc::new(
        stdio_client(
            &config,
            Client {
                elicitation: true,
                content: Some(json!({})),
                asked: Arc::new(AtomicUsize::new(0)),
            },
        )
        .await,
    );
    let slow_lines = |lines: &[Value]| lines.iter().filter(|line| line["server"] == "slow").count();
    let mut flood = Vec::new();
    for index in 0..SLOW {
        let client = client.clone();
        flood.push(tokio::spawn(async move {
            client
                .call_tool(call(
                    "slow__delete_branch",
                    json!({"branch": format!("b{index}")}),
                ))
                .await
        }));
    }
    // The flood is queued once its first reviews are done (each one takes
    // the whole 50 ms deadline; queueing the rest takes a few ms).
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while slow_lines(&audit(dir.path())) < 2 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the flood was never reviewed"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let done_before = slow_lines(&audit(dir.path()));
    let fast = tokio::time::timeout(
        Duration::from_secs(60),
        client.call_tool(call("fast__delete_branch", json!({"branch": "main"}))),
    )
    .await
    .expect("fast answered")
    .expect("tool call");
    assert!(text(&fast).contains("answered: decline"), "{}", text(&fast));
    let results = tokio::time::timeout(Duration::from_secs(120), futures::future::join_all(flood))
        .await
        .expect("the flood answered");
    for result in results {
        let result = result.expect("task").expect("tool call");
        assert!(
            text(&result).contains("answered: decline"),
            "{}",
            text(&result)
        );
    }

    let lines = audit(dir.path());
    assert_eq!(lines.len(), SLOW + 1, "one audit line each: {lines:?}");
    let Some(at) = lines.iter().position(|line| line["server"] == "fast") else {
        panic!("no audit line for fast: {lines:?}");
    };
    assert_eq!(lines[at]["decided_by"], "guest", "{}", lines[at]);
    // Reviewed ahead of fast after it was sent: the one holding the permit
    // and the one whose turn came first (plus any done while the call
    // travelled to the router); first come, first served would be all of
    // the rest.
    let waiting = SLOW - done_before;
    let ahead = slow_lines(&lines[..at]).saturating_sub(done_before);
    assert!(
        ahead <= waiting / 2,
        "fast waited for {ahead} of the {waiting} slow reviews still queued"
    );
    for line in lines.iter().filter(|line| line["server"] == "slow") {
        assert_eq!(line["decided_by"], "failure", "{line}");
        assert_eq!(line["steps"][1]["failure"], "deadline", "{line}");
    }
}

/// Over real HTTP: two sessions, A calls a tool whose server asks for a
/// form; only A is asked and A's answer reaches the tool, although B
/// connected later (before, "the person" was whoever connected last). B
/// never sees the form, so it cannot answer it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_http_a_sessions_form_goes_to_that_session_only() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = config(dir.path(), "{}");
    let gateway = HttpGateway::start(&config);
    let (asked_a, asked_b) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let a = Client {
        elicitation: true,
        content: Some(json!({"name": "Alice"})),
        asked: asked_a.clone(),
    }
    .serve(gateway.transport())
    .await
    .expect("session A");
    let b = Client {
        elicitation: true,
        content: Some(json!({"name": "Mallory"})),
        asked: asked_b.clone(),
    }
    .serve(gateway.transport())
    .await
    .expect("session B");
    let result = a
        .call_tool(call("git__ask_name", json!({})))
        .await
        .expect("A's call");
    assert!(text(&result).contains("hello Alice"), "{}", text(&result));
    assert_eq!(asked_a.load(Ordering::SeqCst), 1);
    assert_eq!(asked_b.load(Ordering::SeqCst), 0, "B was shown A's form");
    let result = b
        .call_tool(call("git__ask_name", json!({})))
        .await
        .expect("B's call");
    assert!(text(&result).contains("hello Mallory"), "{}", text(&result));
    assert_eq!(asked_a.load(Ordering::SeqCst), 1, "A was shown B's form");
    let lines = audit(dir.path());
    assert_eq!(lines.len(), 2);
    assert!(lines.iter().all(|line| line["decided_by"] == "person"));
    assert_ne!(lines[0]["session"], lines[1]["session"]);
}

/// An upstream client that answers every form with `content` and keeps the
/// params (with `_meta`) it was asked with.
struct FormRecorder {
    content: Value,
    seen: Arc<std::sync::Mutex<Vec<Value>>>,
}

impl ClientHandler for FormRecorder {
    fn get_info(&self) -> ClientConfig {
        let mut capabilities = ClientCapabilities::default();
        capabilities.elicitation =
            Some(ElicitationCapability::new().with_form(FormElicitationCapability::default()));
        ClientConfig::new(capabilities, Implementation::new("recorder", "0"))
    }

    async fn create_elicitation(
        &self,
        request: ElicitRequestParams,
        context: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, ErrorData> {
        let mut seen = serde_json::to_value(&request).unwrap_or(Value::Null);
        seen["_meta"] = serde_json::to_value(&context.meta).unwrap_or(Value::Null);
        if let Ok(mut all) = self.seen.lock() {
            all.push(seen);
        }
        Ok(ElicitResult::new(ElicitationAction::Accept).with_content(self.content.clone()))
    }
}

/// Over real HTTP: the form a session is shown names the configured server
/// that asks; and an elicitation a server sends outside any call (after its
/// call has finished) is shown to nobody, though a client is connected, and
/// gets `on_unhandled` with the reason in the audit line.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_http_forms_name_their_server_and_one_outside_any_call_is_shown_to_nobody() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = config(dir.path(), "{}");
    let hostile = existing(
        target().join("debug/hostile-server"),
        "run `cargo build -p gatehouse-example-servers`",
    );
    let text_config = std::fs::read_to_string(&config).expect("read config");
    std::fs::write(
        &config,
        format!(
            "[mcp_servers.sly]\ncommand = {hostile:?}\nargs = [\"--mode\", \"unsolicited\", \"--name\", \"sly\"]\n\n{text_config}",
            hostile = hostile.display().to_string()
        ),
    )
    .expect("write config");
    let gateway = HttpGateway::start(&config);
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let client = FormRecorder {
        content: json!({"name": "Alice"}),
        seen: seen.clone(),
    }
    .serve(gateway.transport())
    .await
    .expect("session");
    let result = client
        .call_tool(call("git__ask_name", json!({})))
        .await
        .expect("ask_name");
    assert!(text(&result).contains("hello Alice"), "{}", text(&result));
    {
        let seen = seen.lock().expect("seen");
        assert_eq!(seen.len(), 1);
        assert_eq!(
            seen[0]["_meta"]["io.gatehouse/server"], "git",
            "{}",
            seen[0]
        );
        assert!(
            seen[0]["message"]
                .as_str()
                .is_some_and(|message| message.starts_with("[git] ")),
            "{}",
            seen[0]
        );
    }
    client
        .call_tool(call("sly__go", json!({})))
        .await
        .expect("go");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    let line = loop {
        if let Some(line) = audit(dir.path())
            .into_iter()
            .find(|line| line["server"] == "sly")
        {
            break line;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the unsolicited elicitation was never audited"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(line["decided_by"], "unhandled", "{line}");
    assert!(
        line["reason"]
            .as_str()
            .is_some_and(|reason| reason.contains("outside any upstream request")),
        "{line}"
    );
    assert_eq!(line["answer"]["action"], "decline", "{line}");
    assert_eq!(
        seen.lock().expect("seen").len(),
        1,
        "the unsolicited form was shown"
    );
}
