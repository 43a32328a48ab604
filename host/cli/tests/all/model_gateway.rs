//! `gatehouse serve` with the model guardian end to end: a real MCP client →
//! the gateway → demo-server, whose `delete_branch` asks for approval; the
//! guardian asks the model configured as `[models.reviewer]`, over HTTP: the
//! scripted stub (`tests/support/model_stub.rs`) for each branch, and a real
//! small model (`tests/model/`) once.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use serde_json::{Value, json};

use crate::gateway::{Client, audit, call, stdio_client};
use crate::model_stub::{ModelStub, Step};
use crate::paths::{demo_server, guest, root};
use crate::tool_result::result_text as text;

/// A config: demo-server `git`, the model guardian granted `[models.reviewer]`
/// at `endpoint`.
pub(crate) fn config(dir: &Path, endpoint: &str, timeout_sec: u32) -> PathBuf {
    let path = dir.join("gatehouse.toml");
    std::fs::write(
        &path,
        format!(
            "[mcp_servers.git]\ncommand = {server:?}\nargs = [\"--name\", \"git\"]\n\n\
             [models.reviewer]\nendpoint = {endpoint:?}\nmodel = \"small\"\ntimeout_sec = {timeout_sec}\n\n\
             [[review.modules]]\npath = {guardian:?}\nmodel = \"reviewer\"\n\
             config = {{ policy = \"Deleting the main branch is never allowed.\" }}\n\n\
             [elicitations]\naudit_log = \"audit.jsonl\"\n",
            server = demo_server().display().to_string(),
            guardian = guest("gatehouse_model_guardian").display().to_string(),
        ),
    )
    .expect("write config");
    path
}

/// Calls `git__delete_branch` on `branch` through `gatehouse serve --config
/// config`; returns the tool's text and the audit line.
async fn delete_branch(dir: &Path, config: &Path, branch: &str) -> (String, Value) {
    reviewed_call(
        dir,
        config,
        call("git__delete_branch", json!({"branch": branch})),
    )
    .await
}

/// Makes one tool call through `gatehouse serve --config config` whose
/// elicitation the chain decides (the person is never asked); returns the
/// tool's text and the one audit line.
async fn reviewed_call(
    dir: &Path,
    config: &Path,
    request: rmcp::model::CallToolRequestParams,
) -> (String, Value) {
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
    let result = client.call_tool(request).await.expect("tool call");
    client.cancel().await.expect("close");
    assert_eq!(asked.load(Ordering::SeqCst), 0, "the person was asked");
    let lines = audit(dir);
    assert_eq!(lines.len(), 1, "{lines:?}");
    (text(&result), lines[0].clone())
}

/// The audit line's one model call, checked for what every call records.
fn model_call(line: &Value) -> &Value {
    let step = &line["steps"][0];
    assert_eq!(step["module"], "gatehouse_model_guardian", "{line}");
    let calls = step["model_calls"].as_array().expect("model_calls");
    assert_eq!(calls.len(), 1, "{line}");
    let call = &calls[0];
    assert_eq!(call["grant"], "reviewer", "{line}");
    assert_eq!(
        call["prompt_sha256"].as_str().map(str::len),
        Some(64),
        "{line}"
    );
    assert!(call["attempts"].as_u64().is_some_and(|n| n >= 1), "{line}");
    assert!(call["latency_us"].as_u64().is_some(), "{line}");
    assert!(
        call.get("prompt").is_none(),
        "the prompt was audited: {line}"
    );
    call
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_model_deny_declines_with_its_rationale_and_is_audited() {
    let stub = ModelStub::start(vec![Step::Verdict(
        json!({"outcome": "deny", "risk_level": "high", "rationale": "main is protected"})
            .to_string(),
    )]);
    let dir = tempfile::tempdir().expect("tempdir");
    let config = config(dir.path(), &stub.base_url(), 30);
    let (shown, line) = delete_branch(dir.path(), &config, "main").await;
    assert!(shown.contains("answered: decline"), "{shown}");
    assert!(shown.contains("main is protected"), "{shown}");
    assert_eq!(line["decided_by"], "guest", "{line}");
    assert_eq!(line["steps"][0]["risk"], "high", "{line}");
    let call = model_call(&line);
    assert!(
        call["answer"]
            .as_str()
            .is_some_and(|answer| answer.contains("main is protected"))
    );
    // The model read Codex's planned action, with the arguments the agent sent.
    let requests = stub.requests();
    assert_eq!(requests.len(), 1);
    let body = requests[0].json();
    assert_eq!(body["model"], "small");
    let prompt = body["messages"].to_string();
    for needle in [
        "mcp_tool_call",
        "delete_branch",
        r#"\"branch\": \"main\""#,
        "Deleting the main branch is never allowed.",
    ] {
        assert!(prompt.contains(needle), "{needle:?} not in {prompt}");
    }
    assert_eq!(body["response_format"]["type"], "json_schema", "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_model_allow_accepts() {
    let stub = ModelStub::start(vec![Step::verdict("allow")]);
    let dir = tempfile::tempdir().expect("tempdir");
    let config = config(dir.path(), &stub.base_url(), 30);
    let (shown, line) = delete_branch(dir.path(), &config, "scratch").await;
    assert!(shown.contains("answered: accept"), "{shown}");
    assert_eq!(model_call(&line)["attempts"], 1, "{line}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_provider_that_keeps_failing_fails_closed_after_its_attempts() {
    let stub = ModelStub::with_default(Vec::new(), Step::Status(500, "busy".to_owned()));
    let dir = tempfile::tempdir().expect("tempdir");
    let config = config(dir.path(), &stub.base_url(), 30);
    let (shown, line) = delete_branch(dir.path(), &config, "main").await;
    assert!(shown.contains("answered: decline"), "{shown}");
    assert!(
        shown.contains("Automatic approval review failed"),
        "{shown}"
    );
    let call = model_call(&line);
    assert_eq!(call["attempts"], 3, "{line}");
    assert_eq!(call["error"], "transient", "{line}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_model_slower_than_its_budget_gets_codexs_timeout_answer() {
    let stub = ModelStub::with_default(
        Vec::new(),
        Step::slow(Duration::from_secs(30), Step::verdict("allow")),
    );
    let dir = tempfile::tempdir().expect("tempdir");
    let config = config(dir.path(), &stub.base_url(), 1);
    let (shown, line) = delete_branch(dir.path(), &config, "main").await;
    assert!(shown.contains("answered: decline"), "{shown}");
    assert!(
        shown.contains("did not finish before its deadline"),
        "{shown}"
    );
    assert_eq!(model_call(&line)["error"], "timeout", "{line}");
}

/// The first line of the answer to an approval request that does not
/// describe the agent's call (`guests/guardian/src/model_review.rs`).
const MISMATCH_HEADLINE: &str =
    "This approval request was declined because it does not match the call the agent made.";
/// Its reason when `_meta.tool_params` differ from the call's arguments.
const PARAMS_DIFFER: &str =
    "Reason: the approval request's tool_params differ from the arguments the agent sent";

/// `git__rename_branch` of `branch` to `release`: demo-server's approval
/// request always names the branch `scratch`, so it lies unless `branch` is
/// `scratch`.
async fn rename_branch(dir: &Path, config: &Path, branch: &str) -> (String, Value) {
    reviewed_call(
        dir,
        config,
        call(
            "git__rename_branch",
            json!({"branch": branch, "new_name": "release"}),
        ),
    )
    .await
}

/// Checks an audit line of a mismatch declined by `module`, which asked no
/// model.
fn assert_mismatch_audited(line: &Value, module: &str) {
    assert_eq!(line["decided_by"], "guest", "{line}");
    assert_eq!(line["answer"]["action"], "decline", "{line}");
    assert!(
        line["answer"]["_meta"]["message"]
            .as_str()
            .is_some_and(|message| message.starts_with(MISMATCH_HEADLINE)),
        "{line}"
    );
    let step = &line["steps"][0];
    assert_eq!(step["module"], module, "{line}");
    assert_eq!(step["outcome"], "decline", "{line}");
    assert_eq!(step["risk"], "high", "{line}");
    assert!(
        step["rationale"]
            .as_str()
            .is_some_and(|rationale| rationale.contains("tool_params differ")),
        "{line}"
    );
    assert!(
        step.get("model_calls").is_none(),
        "a model was asked: {line}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_approval_request_that_lies_about_the_call_is_declined_without_asking_the_model() {
    // The model would allow; the gateway ties the elicitation to the agent's
    // call, whose branch the approval request misstates.
    let stub = ModelStub::with_default(Vec::new(), Step::verdict("allow"));
    let dir = tempfile::tempdir().expect("tempdir");
    let config = config(dir.path(), &stub.base_url(), 30);
    let (shown, line) = rename_branch(dir.path(), &config, "main").await;
    assert!(
        shown.contains("rename main to release: elicitation answered: decline"),
        "{shown}"
    );
    assert!(shown.contains(MISMATCH_HEADLINE), "{shown}");
    assert!(shown.contains(PARAMS_DIFFER), "{shown}");
    assert_eq!(stub.request_count(), 0, "the model was asked");
    assert_mismatch_audited(&line, "gatehouse_model_guardian");
    // Called on the branch the request names, the same tool is honest: the
    // model is asked, and its allow decides.
    let dir = tempfile::tempdir().expect("tempdir");
    let config = self::config(dir.path(), &stub.base_url(), 30);
    let (shown, line) = rename_branch(dir.path(), &config, "scratch").await;
    assert!(
        shown.contains("rename scratch to release: elicitation answered: accept"),
        "{shown}"
    );
    assert_eq!(stub.request_count(), 1);
    assert_eq!(model_call(&line)["attempts"], 1, "{line}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_plain_guardian_declines_a_lying_request_that_its_allow_rule_covers() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("gatehouse.toml");
    std::fs::write(
        &path,
        format!(
            "[mcp_servers.git]\ncommand = {server:?}\nargs = [\"--name\", \"git\"]\n\n\
             [[review.modules]]\npath = {guardian:?}\n\
             config = {{ allow = [{{ tool = \"rename_branch\" }}] }}\n\n\
             [elicitations]\naudit_log = \"audit.jsonl\"\n",
            server = demo_server().display().to_string(),
            guardian = guest("gatehouse_guardian").display().to_string(),
        ),
    )
    .expect("write config");
    let (shown, line) = rename_branch(dir.path(), &path, "main").await;
    assert!(
        shown.contains("rename main to release: elicitation answered: decline"),
        "{shown}"
    );
    assert!(shown.contains(MISMATCH_HEADLINE), "{shown}");
    assert!(shown.contains(PARAMS_DIFFER), "{shown}");
    assert_mismatch_audited(&line, "gatehouse_guardian");
    // The honest call is what the allow rule accepts.
    let dir2 = tempfile::tempdir().expect("tempdir");
    let path2 = dir2.path().join("gatehouse.toml");
    std::fs::copy(&path, &path2).expect("copy config");
    let (shown, line) = rename_branch(dir2.path(), &path2, "scratch").await;
    assert!(
        shown.contains("rename scratch to release: elicitation answered: accept"),
        "{shown}"
    );
    assert!(
        line["steps"][0]["rationale"]
            .as_str()
            .is_some_and(|rationale| rationale.contains("matches an allow rule")),
        "{line}"
    );
}

/// The real model: `tests/model/setup` (run by `.ci/run`) installs
/// node-llama-cpp and SmolLM2-135M; this starts `tests/model/server.mjs` on
/// it and sends one elicitation through `gatehouse serve`. Any decision will
/// do: a 135M model's judgement is not the point, the real path is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_real_small_model_reviews_through_the_gateway() {
    let model = std::env::var_os("GATEHOUSE_TEST_MODEL")
        .map(PathBuf::from)
        .unwrap_or_else(|| root().join("tests/model/models/SmolLM2-135M-Instruct.Q4_1.gguf"));
    assert!(
        model.exists(),
        "{} is missing: run tests/model/setup (.ci/run does)",
        model.display()
    );
    let server = ModelServer::start(&model);
    let dir = tempfile::tempdir().expect("tempdir");
    let config = config(dir.path(), &server.base_url, 120);
    let started = std::time::Instant::now();
    let (shown, line) = delete_branch(dir.path(), &config, "main").await;
    let elapsed = started.elapsed();
    assert!(
        shown.contains("answered: accept") || shown.contains("answered: decline"),
        "{shown}"
    );
    let call = model_call(&line);
    // A real answer, not a failure: the model was reached and answered.
    assert!(call.get("error").is_none(), "{line}");
    assert!(
        call["answer"]
            .as_str()
            .is_some_and(|answer| !answer.is_empty()),
        "{line}"
    );
    assert!(
        call["input_tokens"].as_u64().is_some_and(|n| n > 0),
        "{line}"
    );
    assert!(
        call["output_tokens"].as_u64().is_some_and(|n| n > 0),
        "{line}"
    );
    eprintln!(
        "real model: {} in {:.1} s (model call {} ms, {} prompt + {} answer tokens)",
        line["answer"]["action"],
        elapsed.as_secs_f64(),
        call["latency_us"].as_u64().unwrap_or(0) / 1000,
        call["input_tokens"],
        call["output_tokens"],
    );
}

/// `node tests/model/server.mjs`, stopped on drop.
struct ModelServer {
    child: std::process::Child,
    base_url: String,
}

impl ModelServer {
    fn start(model: &Path) -> ModelServer {
        let (child, address) = crate::paths::spawn_listening(
            std::process::Command::new("node")
                .arg(root().join("tests/model/server.mjs"))
                .arg("--model")
                .arg(model)
                .args(["--port", "0"]),
            "listening ",
            "node starts (install Node.js 20+)",
        );
        ModelServer {
            child,
            base_url: format!("{address}/v1"),
        }
    }
}

impl Drop for ModelServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
