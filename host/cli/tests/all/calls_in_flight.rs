//! An approval request is bound to the agent's real call whatever else is in
//! flight, and one call cannot make its server spend the model without
//! bound: `gatehouse serve` with demo-server `git`, whose `hold` keeps calls
//! in flight, whose `rename_branch` misdescribes its call unless called on
//! `scratch`, and whose `ask_approvals` asks for approval of its own call
//! again and again.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use rmcp::ServiceExt;
use serde_json::{Value, json};

use crate::gateway::{Client, audit, call, config_with, stdio_client};
use crate::model_gateway::config as model_config;
use crate::model_stub::{ModelStub, Step};
use crate::paths::{demo_server, guest};
use crate::tool_result::result_text as text;

/// The first line of the gateway's answer to an approval request that
/// describes none of the calls in flight (`gatehouse_gateway::router`).
const UNMATCHED_HEADLINE: &str =
    "This approval request was declined because it does not match any call the agent made.";

/// The rules guardian, allowing `rename_branch` and `ask_approvals`: only
/// the comparison with the agent's call stands between a lie and an accept.
fn rules_config(dir: &Path) -> PathBuf {
    config_with(
        dir,
        "{ allow = [{ tool = \"rename_branch\" }, { tool = \"ask_approvals\" }] }",
        "",
    )
}

/// `gatehouse serve --config config` with a client that takes the person's
/// questions, and the count of questions it was asked (none, in these tests).
async fn gateway(
    config: &Path,
) -> (
    rmcp::service::RunningService<rmcp::RoleClient, Client>,
    Arc<AtomicUsize>,
) {
    let asked = Arc::new(AtomicUsize::new(0));
    let client = stdio_client(
        config,
        Client {
            elicitation: true,
            content: None,
            asked: asked.clone(),
        },
    )
    .await;
    (client, asked)
}

/// Calls `git__rename_branch` on `branch` while `holds` other calls of the
/// same session are in flight on the same server; returns the rename's text
/// and its audit line.
async fn rename_while_holding(
    dir: &Path,
    config: &Path,
    holds: usize,
    branch: &str,
) -> (String, Value) {
    let (client, asked) = gateway(config).await;
    let held = tempfile::tempdir().expect("tempdir");
    let mut holding = Vec::new();
    for id in 0..holds {
        let peer = client.peer().clone();
        let request = call(
            "git__hold",
            json!({"dir": held.path().display().to_string(), "id": format!("h{id}")}),
        );
        holding.push(tokio::spawn(async move { peer.call_tool(request).await }));
    }
    // Every hold has reached the server, so the gateway has it in flight.
    let started = Instant::now();
    while (0..holds).any(|id| !held.path().join(format!("held-h{id}")).exists()) {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "the holds did not start"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let renamed = client
        .call_tool(call(
            "git__rename_branch",
            json!({"branch": branch, "new_name": "release"}),
        ))
        .await
        .expect("rename_branch");
    std::fs::write(held.path().join("release"), b"").expect("release the holds");
    for hold in holding {
        let result = hold.await.expect("hold task").expect("hold");
        assert!(text(&result).contains("held h"), "{}", text(&result));
    }
    client.cancel().await.expect("close");
    assert_eq!(asked.load(Ordering::SeqCst), 0, "the person was asked");
    let lines = audit(dir);
    assert_eq!(lines.len(), 1, "{lines:?}");
    (text(&renamed), lines[0].clone())
}

/// Checks the answer and audit line of a lie declined by the gateway
/// because it describes none of the `in_flight` calls.
fn assert_unmatched(shown: &str, line: &Value, in_flight: usize) {
    assert!(shown.contains("answered: decline"), "{shown}");
    assert!(shown.contains(UNMATCHED_HEADLINE), "{shown}");
    assert_eq!(line["decided_by"], "policy", "{line}");
    assert_eq!(line["answer"]["action"], "decline", "{line}");
    assert!(
        line["reason"]
            .as_str()
            .is_some_and(|reason| reason
                .contains(&format!("describe none of the {in_flight} calls in flight"))),
        "{line}"
    );
    assert!(line["steps"].as_array().is_none_or(Vec::is_empty), "{line}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lie_is_declined_by_the_rules_guardian_with_two_and_fifty_calls_in_flight() {
    for in_flight in [2, 50] {
        let dir = tempfile::tempdir().expect("tempdir");
        let config = rules_config(dir.path());
        let (shown, line) = rename_while_holding(dir.path(), &config, in_flight - 1, "main").await;
        assert_unmatched(&shown, &line, in_flight);
    }
    // The honest request, with another call in flight, is the one the allow
    // rule accepts: bound to its own call, not declined wholesale.
    let dir = tempfile::tempdir().expect("tempdir");
    let config = rules_config(dir.path());
    let (shown, line) = rename_while_holding(dir.path(), &config, 1, "scratch").await;
    assert!(
        shown.contains("rename scratch to release: elicitation answered: accept"),
        "{shown}"
    );
    assert_eq!(line["decided_by"], "guest", "{line}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lie_never_reaches_the_model_with_calls_in_flight() {
    let stub = ModelStub::with_default(Vec::new(), Step::verdict("allow"));
    for in_flight in [2, 50] {
        let dir = tempfile::tempdir().expect("tempdir");
        let config = model_config(dir.path(), &stub.base_url(), 30);
        let (shown, line) = rename_while_holding(dir.path(), &config, in_flight - 1, "main").await;
        assert_unmatched(&shown, &line, in_flight);
    }
    assert_eq!(stub.request_count(), 0, "the model saw the server's claim");
    // Honest, with a call in flight: the model is asked about the agent's
    // real call.
    let dir = tempfile::tempdir().expect("tempdir");
    let config = model_config(dir.path(), &stub.base_url(), 30);
    let (shown, _) = rename_while_holding(dir.path(), &config, 1, "scratch").await;
    assert!(shown.contains("answered: accept"), "{shown}");
    let requests = stub.requests();
    assert_eq!(requests.len(), 1);
    let prompt = requests[0].json()["messages"].to_string();
    assert!(prompt.contains("rename_branch"), "{prompt}");
    assert!(prompt.contains(r#"\"branch\": \"scratch\""#), "{prompt}");
}

/// The first line of the guardian's answer to an approval request that
/// misdescribes its call (`guests/guardian/src/model_review.rs`).
const MISMATCH_HEADLINE: &str =
    "This approval request was declined because it does not match the call the agent made.";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_input_request_is_bound_to_the_call_whose_result_carried_it() {
    // Protocol 2026-07-28: the approval comes back inside the rename's own
    // result, so gatehouse knows exactly which call it belongs to, however
    // many others are in flight; the guardian compares it with that call.
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("gatehouse.toml");
    std::fs::write(
        &path,
        format!(
            "[mcp_servers.git]\ncommand = {server:?}\n\
             args = [\"--name\", \"git\", \"--protocol\", \"2026-07-28\"]\n\
             protocol_version = \"2026-07-28\"\n\n\
             [[review.modules]]\npath = {guardian:?}\n\
             config = {{ allow = [{{ tool = \"rename_branch\" }}] }}\n\n\
             [elicitations]\naudit_log = \"audit.jsonl\"\nperson_timeout_sec = 30\n",
            server = demo_server().display().to_string(),
            guardian = guest("gatehouse_guardian").display().to_string(),
        ),
    )
    .expect("write config");
    let (shown, line) = rename_while_holding(dir.path(), &path, 2, "main").await;
    assert!(shown.contains("answered: decline"), "{shown}");
    assert!(shown.contains(MISMATCH_HEADLINE), "{shown}");
    assert_eq!(line["decided_by"], "guest", "{line}");
    assert!(
        line["steps"][0]["rationale"]
            .as_str()
            .is_some_and(|rationale| rationale.contains("tool_params differ")),
        "{line}"
    );
    // And the honest one is accepted.
    let dir2 = tempfile::tempdir().expect("tempdir");
    let path2 = dir2.path().join("gatehouse.toml");
    std::fs::copy(&path, &path2).expect("copy config");
    let (shown, _) = rename_while_holding(dir2.path(), &path2, 2, "scratch").await;
    assert!(shown.contains("answered: accept"), "{shown}");
}

/// A demo-server `git` over streamable HTTP on a loopback port, killed when
/// dropped.
struct HttpDemoServer {
    child: std::process::Child,
    url: String,
}

impl HttpDemoServer {
    fn start() -> HttpDemoServer {
        let (child, url) = crate::paths::spawn_listening(
            std::process::Command::new(demo_server()).args([
                "--name",
                "git",
                "--http",
                "127.0.0.1:0",
            ]),
            "listening on ",
            "demo-server starts",
        );
        HttpDemoServer { child, url }
    }
}

impl Drop for HttpDemoServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_http_an_elicitation_is_bound_to_the_call_whose_stream_carried_it() {
    // Over streamable HTTP the server asks on the response stream of the
    // rename's own POST (SEP-2260): gatehouse knows the call exactly, however
    // many others are in flight, and the guardian compares the claim with it
    // (not the gateway's "matches none" decline).
    let server = HttpDemoServer::start();
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("gatehouse.toml");
    std::fs::write(
        &path,
        format!(
            "[mcp_servers.git]\nurl = {url:?}\n\n\
             [[review.modules]]\npath = {guardian:?}\n\
             config = {{ allow = [{{ tool = \"rename_branch\" }}] }}\n\n\
             [elicitations]\naudit_log = \"audit.jsonl\"\nperson_timeout_sec = 30\n",
            url = server.url,
            guardian = guest("gatehouse_guardian").display().to_string(),
        ),
    )
    .expect("write config");
    let (shown, line) = rename_while_holding(dir.path(), &path, 2, "main").await;
    assert!(shown.contains("answered: decline"), "{shown}");
    assert!(shown.contains(MISMATCH_HEADLINE), "{shown}");
    assert_eq!(line["decided_by"], "guest", "{line}");
    assert!(
        line["session"].is_u64(),
        "tied to the session of the call: {line}"
    );
    let dir2 = tempfile::tempdir().expect("tempdir");
    let path2 = dir2.path().join("gatehouse.toml");
    std::fs::copy(&path, &path2).expect("copy config");
    let (shown, _) = rename_while_holding(dir2.path(), &path2, 2, "scratch").await;
    assert!(shown.contains("answered: accept"), "{shown}");
}

/// Calls `git__ask_approvals` once; returns its text and the audit lines.
async fn ask_approvals(
    dir: &Path,
    config: &Path,
    count: u32,
    distinct: bool,
) -> (String, Vec<Value>) {
    let (client, asked) = gateway(config).await;
    let result = client
        .call_tool(call(
            "git__ask_approvals",
            json!({"count": count, "distinct": distinct}),
        ))
        .await
        .expect("ask_approvals");
    client.cancel().await.expect("close");
    assert_eq!(asked.load(Ordering::SeqCst), 0, "the person was asked");
    (text(&result), audit(dir))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_of_approvals_in_one_call_is_capped_and_audited() {
    let stub = ModelStub::with_default(Vec::new(), Step::verdict("allow"));
    let dir = tempfile::tempdir().expect("tempdir");
    let config = model_config(dir.path(), &stub.base_url(), 30);
    // This instance serves its own metrics: the cap and the model calls are
    // counted there as the audit lines say.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .expect("a free port")
        .port();
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_gatehouse"));
    command
        .args([
            "serve",
            "--metrics",
            &format!("127.0.0.1:{port}"),
            "--config",
        ])
        .arg(&config);
    let asked = Arc::new(AtomicUsize::new(0));
    let client = Client {
        elicitation: true,
        content: None,
        asked: asked.clone(),
    }
    .serve(rmcp::transport::TokioChildProcess::new(command).expect("gatehouse starts"))
    .await
    .expect("initialize");
    let result = client
        .call_tool(call(
            "git__ask_approvals",
            json!({"count": 100, "distinct": true}),
        ))
        .await
        .expect("ask_approvals");
    let metrics = reqwest::get(format!("http://127.0.0.1:{port}/metrics"))
        .await
        .expect("GET /metrics")
        .text()
        .await
        .expect("the exposition");
    client.cancel().await.expect("close");
    assert_eq!(asked.load(Ordering::SeqCst), 0, "the person was asked");
    let (shown, lines) = (text(&result), audit(dir.path()));
    for sample in [
        "gatehouse_model_reviews_refused_total{server=\"git\",limit=\"max_model_reviews_per_call\"} 96",
        "gatehouse_model_calls_total{grant=\"reviewer\",result=\"ok\"} 4",
        "gatehouse_elicitations_total{server=\"git\",mode=\"form\",decided_by=\"policy\",action=\"decline\"} 96",
    ] {
        assert!(metrics.contains(sample), "{sample} in {metrics}");
    }
    // The default cap: four model reviews per agent call.
    assert!(
        shown.contains("accept 4, decline 96, cancel 0, error 0"),
        "{shown}"
    );
    assert_eq!(stub.request_count(), 4);
    assert_eq!(lines.len(), 100, "one audit line each");
    let capped: Vec<&Value> = lines
        .iter()
        .filter(|line| {
            line["reason"].as_str().is_some_and(|reason| {
                reason.starts_with("model review refused")
                    && reason.contains("max_model_reviews_per_call = 4")
            })
        })
        .collect();
    assert_eq!(capped.len(), 96, "{lines:?}");
    for line in capped {
        assert_eq!(line["decided_by"], "policy", "{line}");
        assert_eq!(line["answer"]["action"], "decline", "{line}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn identical_approvals_in_one_call_reuse_the_first_verdict() {
    let stub = ModelStub::with_default(Vec::new(), Step::verdict("allow"));
    let dir = tempfile::tempdir().expect("tempdir");
    let config = model_config(dir.path(), &stub.base_url(), 30);
    let (shown, lines) = ask_approvals(dir.path(), &config, 100, false).await;
    assert!(
        shown.contains("accept 100, decline 0, cancel 0, error 0"),
        "{shown}"
    );
    assert_eq!(stub.request_count(), 1, "the model was asked again");
    assert_eq!(lines.len(), 100);
    let reused = lines
        .iter()
        .filter(|line| {
            line["reason"]
                .as_str()
                .is_some_and(|reason| reason.contains("reused without asking again"))
        })
        .count();
    assert_eq!(reused, 99, "{lines:?}");
    // A second call starts afresh: its first request asks the model.
    let dir = tempfile::tempdir().expect("tempdir");
    let config = model_config(dir.path(), &stub.base_url(), 30);
    let (shown, _) = ask_approvals(dir.path(), &config, 1, false).await;
    assert!(shown.contains("accept 1"), "{shown}");
    assert_eq!(stub.request_count(), 2);
}

/// `model_config` with `budget` as its `[models.reviewer]` budget.
fn budgeted_config(dir: &Path, endpoint: &str, budget: &str) -> PathBuf {
    let path = model_config(dir, endpoint, 30);
    let text = std::fs::read_to_string(&path).expect("read config");
    let text = text.replacen(
        "timeout_sec = 30\n",
        &format!("timeout_sec = 30\nbudget = {budget}\n"),
        1,
    );
    std::fs::write(&path, text).expect("write config");
    path
}

/// Makes `calls` separate agent calls of `ask_approvals` (one approval
/// each) in one gateway; returns each call's text and the audit lines.
async fn separate_calls(dir: &Path, config: &Path, calls: u32) -> (Vec<String>, Vec<Value>) {
    let (client, asked) = gateway(config).await;
    let mut shown = Vec::new();
    for _ in 0..calls {
        let result = client
            .call_tool(call(
                "git__ask_approvals",
                json!({"count": 1, "distinct": true}),
            ))
            .await
            .expect("ask_approvals");
        shown.push(text(&result));
    }
    client.cancel().await.expect("close");
    assert_eq!(asked.load(Ordering::SeqCst), 0, "the person was asked");
    (shown, audit(dir))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_spent_model_budget_fails_closed_and_the_audit_names_the_limit() {
    for (budget, spent_after, limit) in [
        ("{ calls = 2 }", 2, "[models.reviewer] budget.calls"),
        ("{ tokens = 1 }", 1, "[models.reviewer] budget.tokens"),
    ] {
        let stub = ModelStub::with_default(Vec::new(), Step::verdict("allow"));
        let dir = tempfile::tempdir().expect("tempdir");
        let config = budgeted_config(dir.path(), &stub.base_url(), budget);
        let (shown, lines) = separate_calls(dir.path(), &config, 4).await;
        assert_eq!(stub.request_count(), spent_after, "{budget}");
        assert_eq!(lines.len(), 4, "one audit line each: {lines:?}");
        for (index, (shown, line)) in shown.iter().zip(&lines).enumerate() {
            if index < spent_after {
                assert!(shown.contains("accept 1"), "{budget} #{index}: {shown}");
                continue;
            }
            assert!(shown.contains("decline 1"), "{budget} #{index}: {shown}");
            assert_eq!(line["answer"]["action"], "decline", "{line}");
            let model_call = &line["steps"][0]["model_calls"][0];
            assert_eq!(model_call["error"], "over-budget", "{line}");
            assert!(
                model_call["limit"]
                    .as_str()
                    .is_some_and(|text| text.starts_with(limit)),
                "{budget}: {line}"
            );
            assert_eq!(model_call["attempts"], 0, "{line}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_approval_asked_after_its_call_ended_never_reaches_the_model() {
    // hostile-server answers `go`, then, with nothing of the agent's in
    // flight, asks approval of `go`: it describes no call the agent is
    // making, so the router declines it before the model guardian (whose
    // model would otherwise be shown the server's claimed arguments).
    let stub = ModelStub::with_default(Vec::new(), Step::verdict("allow"));
    let dir = tempfile::tempdir().expect("tempdir");
    let config = model_config(dir.path(), &stub.base_url(), 30);
    let text = std::fs::read_to_string(&config).expect("read config");
    std::fs::write(
        &config,
        format!(
            "[mcp_servers.sly]\ncommand = {command:?}\n\
             args = [\"--mode\", \"unsolicited\", \"--approval\", \"--name\", \"sly\"]\n\n{text}",
            command = crate::paths::hostile_server().display().to_string(),
        ),
    )
    .expect("write config");
    let (client, asked) = gateway(&config).await;
    client
        .call_tool(call("sly__go", json!({})))
        .await
        .expect("go");
    let sly = || -> Vec<Value> {
        audit(dir.path())
            .into_iter()
            .filter(|line| line["server"] == "sly")
            .collect()
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    while sly().is_empty() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    client.cancel().await.expect("close");
    let lines = sly();
    assert_eq!(lines.len(), 1, "{lines:?}");
    let line = &lines[0];
    assert_eq!(line["decided_by"], "policy", "{line}");
    assert_eq!(line["answer"]["action"], "decline", "{line}");
    assert!(
        line["reason"]
            .as_str()
            .is_some_and(|reason| reason.contains("no call in flight")),
        "{line}"
    );
    assert_eq!(stub.request_count(), 0, "the model saw the server's claim");
    assert_eq!(asked.load(Ordering::SeqCst), 0, "the person was asked");
}
