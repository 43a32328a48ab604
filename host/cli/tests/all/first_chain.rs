//! The reviewer chain loads off the critical path of `gatehouse serve`: a
//! client's `initialize` is answered before the chain is in force, an
//! elicitation that comes first waits for the chain and is reviewed by it
//! (never by the empty stand-in), and a chain that does not load fails
//! closed: what waited is declined and audited, and gatehouse stops with the
//! load's error.
//!
//! The guardian is read through a FIFO the test writes when it chooses, so
//! "before the chain loads" is a fact, not a race.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::AtomicUsize;
use std::time::Duration;

use rmcp::ServiceExt;
use serde_json::json;
use tokio::io::{AsyncBufReadExt, AsyncReadExt};

use crate::gateway::{Client, audit, call, config_with};
use crate::paths::{existing, target};
use crate::tool_result::result_text as text;

fn guardian() -> PathBuf {
    existing(
        target().join("wasm32-wasip2/guest/gatehouse_guardian.wasm"),
        "run .ci/build-guests",
    )
}

/// `config_with`'s config, its guardian named by a FIFO (returned): the
/// chain's load blocks until the test writes the module into it.
fn config_through_fifo(dir: &Path) -> (PathBuf, PathBuf) {
    let config = config_with(dir, "{}", "");
    let fifo = dir.join("guardian-fifo.wasm");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .expect("mkfifo runs");
    assert!(made.success(), "mkfifo {}", fifo.display());
    let text = std::fs::read_to_string(&config).expect("config");
    let named = format!("{:?}", guardian().display().to_string());
    assert!(text.contains(&named), "{text}");
    let text = text.replace(&named, &format!("{:?}", fifo.display().to_string()));
    std::fs::write(&config, text).expect("config");
    (config, fifo)
}

/// Writes `bytes` into the FIFO (on a thread: opening it waits for the
/// loader to open it for reading).
async fn feed(fifo: &Path, bytes: Vec<u8>) {
    let fifo = fifo.to_path_buf();
    tokio::task::spawn_blocking(move || std::fs::write(&fifo, bytes).expect("write the FIFO"))
        .await
        .expect("the writer");
}

fn the_client() -> Client {
    Client {
        elicitation: true,
        content: None,
        asked: Arc::new(AtomicUsize::new(0)),
    }
}

type Session = rmcp::service::RunningService<rmcp::RoleClient, Client>;

/// `gatehouse serve` on `config` (its process, to wait for its exit, and
/// its stderr), initialized by a client whose person never answers (so a
/// form the chain left to the person would never end).
async fn initialized(
    config: &Path,
) -> (
    Arc<Session>,
    tokio::process::Child,
    tokio::process::ChildStderr,
) {
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_gatehouse"))
        .arg("serve")
        .arg("--config")
        .arg(config)
        // The reloads' info lines, which one test reads.
        .env("RUST_LOG", "warn,gatehouse_gateway=info")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("gatehouse starts");
    let stdout = child.stdout.take().expect("stdout piped");
    let stdin = child.stdin.take().expect("stdin piped");
    let stderr = child.stderr.take().expect("stderr piped");
    let client = tokio::time::timeout(Duration::from_secs(60), the_client().serve((stdout, stdin)))
        .await
        .expect("initialize is answered while the chain is still loading")
        .expect("initialize");
    (Arc::new(client), child, stderr)
}

/// Calls `git__delete_branch` on `main` in a task of its own: demo-server
/// asks to approve it, which the guardian declines.
fn delete_main(
    client: &Arc<Session>,
) -> tokio::task::JoinHandle<Result<rmcp::model::CallToolResult, rmcp::ServiceError>> {
    let client = client.clone();
    tokio::spawn(async move {
        client
            .call_tool(call("git__delete_branch", json!({"branch": "main"})))
            .await
    })
}

/// Waits until the instance on `config` routes one elicitation (the
/// server's form, waiting for the chain).
async fn until_one_in_flight(config: &Path) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let config = config.to_path_buf();
        let routing = tokio::task::spawn_blocking(move || in_flight(&config))
            .await
            .expect("gatehouse status");
        if routing == Some(1) {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the server's form never waited for the chain: {routing:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// [`until_one_in_flight`], then checks the call is unanswered.
async fn form_waits(
    config: &Path,
    calling: &tokio::task::JoinHandle<Result<rmcp::model::CallToolResult, rmcp::ServiceError>>,
) {
    until_one_in_flight(config).await;
    assert!(!calling.is_finished(), "answered before the chain loaded");
}

/// The elicitations the one instance on `config` routes now, as
/// `gatehouse status` tells (`None` before it answers).
fn in_flight(config: &Path) -> Option<u64> {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_gatehouse"))
        .args(["status", "--format", "json", "--config"])
        .arg(config)
        .output()
        .expect("gatehouse status runs");
    let said: serde_json::Value = serde_json::from_slice(&out.stdout).ok()?;
    said["instances"][0]["in_flight"].as_u64()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn initialize_never_waits_for_the_chain_and_an_elicitation_waits_for_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (config, fifo) = config_through_fifo(dir.path());
    // Nothing is written to the FIFO yet: the chain cannot have loaded.
    let (client, _child, _stderr) = initialized(&config).await;
    let tools = client.list_all_tools().await.expect("tools/list");
    assert!(
        tools.iter().any(|tool| tool.name == "git__delete_branch"),
        "{tools:?}"
    );
    // The guardian declines deleting main; without it (the empty stand-in)
    // the form would go to the person, who never answers here.
    let calling = delete_main(&client);
    form_waits(&config, &calling).await;
    assert!(audit(dir.path()).is_empty(), "{:?}", audit(dir.path()));
    let bytes = std::fs::read(guardian()).expect("the guardian");
    let sha256 = {
        use sha2::Digest;
        hex::encode(sha2::Sha256::digest(&bytes))
    };
    feed(&fifo, bytes).await;
    let denied = tokio::time::timeout(Duration::from_secs(60), calling)
        .await
        .expect("answered once the chain loaded")
        .expect("the call task")
        .expect("delete_branch");
    assert!(
        text(&denied).contains("unacceptable risk"),
        "the guardian decided: {}",
        text(&denied)
    );
    let lines = audit(dir.path());
    assert_eq!(lines.len(), 1, "{lines:#?}");
    assert_eq!(lines[0]["decided_by"], "guest", "{}", lines[0]);
    // The module that decided is the guardian the test wrote in.
    assert_eq!(lines[0]["steps"][0]["sha256"], sha256, "{}", lines[0]);
    if let Ok(client) = Arc::try_unwrap(client) {
        let _ = client.cancel().await;
    }
}

/// Waits for gatehouse to stop with exit code 1, saying `why` on stderr, and
/// checks that the one form that waited was declined as a failure, audited
/// with `why` in its reason.
async fn stops_having_declined_the_form(
    dir: &Path,
    mut child: tokio::process::Child,
    mut stderr: tokio::process::ChildStderr,
    why: &str,
) {
    let mut said = String::new();
    tokio::time::timeout(Duration::from_secs(60), stderr.read_to_string(&mut said))
        .await
        .expect("gatehouse stops")
        .expect("its stderr");
    assert!(said.contains(why), "gatehouse says why it stopped: {said}");
    let exited = tokio::time::timeout(Duration::from_secs(30), child.wait())
        .await
        .expect("gatehouse exits")
        .expect("its status");
    assert_eq!(exited.code(), Some(1), "{said}");
    let lines = audit(dir);
    assert_eq!(lines.len(), 1, "{lines:#?}\n{said}");
    assert_eq!(lines[0]["decided_by"], "failure", "{}", lines[0]);
    assert_eq!(lines[0]["answer"]["action"], "decline", "{}", lines[0]);
    let reason = lines[0]["reason"].as_str().unwrap_or_default();
    assert!(
        reason.contains("the reviewer chain is not in force") && reason.contains(why),
        "{}",
        lines[0]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chain_that_does_not_load_fails_closed_and_stops_gatehouse() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (config, fifo) = config_through_fifo(dir.path());
    let (client, child, stderr) = initialized(&config).await;
    let calling = delete_main(&client);
    form_waits(&config, &calling).await;
    feed(&fifo, b"not a component".to_vec()).await;
    let why = "cannot load the reviewer chain";
    stops_having_declined_the_form(dir.path(), child, stderr, why).await;
    let _ = calling.await;
}

/// A first load that never ends (the FIFO is never written) is bounded by
/// `[review] load_timeout_sec`: the form that waited for the chain is
/// declined as a failure and audited, and gatehouse stops naming the bound.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_first_load_that_never_ends_fails_closed_at_the_load_timeout() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (config, _fifo) = config_through_fifo(dir.path());
    let text = std::fs::read_to_string(&config).expect("config");
    // Long enough for the form to arrive first on a loaded machine.
    std::fs::write(
        &config,
        format!("[review]\nload_timeout_sec = 12\n\n{text}"),
    )
    .expect("bound the load");
    let (client, child, stderr) = initialized(&config).await;
    let calling = delete_main(&client);
    form_waits(&config, &calling).await;
    let why = "did not load within 12 s ([review] load_timeout_sec)";
    stops_having_declined_the_form(dir.path(), child, stderr, why).await;
    let _ = calling.await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_cancelled_while_the_chain_loads_ends_its_form_at_once() {
    use rmcp::model::{CallToolRequest, ClientRequest};
    use rmcp::service::PeerRequestOptions;
    let dir = tempfile::tempdir().expect("tempdir");
    let (config, _fifo) = config_through_fifo(dir.path());
    // The FIFO is never written: the chain never loads.
    let (client, _child, _stderr) = initialized(&config).await;
    let request = ClientRequest::CallToolRequest(CallToolRequest::new(call(
        "git__delete_branch",
        json!({"branch": "main"}),
    )));
    let handle = client
        .peer()
        .send_cancellable_request(request, PeerRequestOptions::no_options())
        .await
        .expect("tools/call sent");
    until_one_in_flight(&config).await;
    // The agent gives the call up: its form ends with it, not when the
    // chain comes (never, here).
    handle
        .cancel(Some("the agent gave up".to_owned()))
        .await
        .expect("notifications/cancelled sent");
    crate::waiting::wait_for("the form's audit line", || audit(dir.path()).len() == 1).await;
    let line = &audit(dir.path())[0];
    assert_eq!(line["decided_by"], "policy", "{line}");
    assert_eq!(line["answer"]["action"], "cancel", "{line}");
    assert!(
        line["reason"]
            .as_str()
            .unwrap_or_default()
            .contains("while the reviewer chain was loading"),
        "{line}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_first_load_never_lands_over_a_later_reload() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (config, fifo) = config_through_fifo(dir.path());
    let (_client, _child, stderr) = initialized(&config).await;
    // The config changes while the first load waits on the FIFO: the
    // reload it causes puts the guardian (read from its file) in force.
    let text = std::fs::read_to_string(&config).expect("config");
    let text = text.replace(
        &format!("{:?}", fifo.display().to_string()),
        &format!("{:?}", guardian().display().to_string()),
    );
    std::fs::write(&config, text).expect("config");
    let guardian_sha256 = {
        use sha2::Digest;
        hex::encode(sha2::Sha256::digest(
            std::fs::read(guardian()).expect("the guardian"),
        ))
    };
    let in_force = |config: PathBuf| async move {
        tokio::task::spawn_blocking(move || {
            let out = std::process::Command::new(env!("CARGO_BIN_EXE_gatehouse"))
                .args(["status", "--format", "json", "--config"])
                .arg(&config)
                .output()
                .expect("gatehouse status runs");
            let said: serde_json::Value = serde_json::from_slice(&out.stdout).ok()?;
            said["instances"][0]["modules"][0]["digest"]
                .as_str()
                .map(str::to_owned)
        })
        .await
        .expect("gatehouse status")
    };
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while in_force(config.clone()).await.as_deref() != Some(guardian_sha256.as_str()) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the reload never put the guardian in force"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Now the first load ends, with another valid module: it started
    // before the reload, so it is dropped.
    let allowlist = existing(
        target().join("wasm32-wasip2/guest/gatehouse_allowlist.wasm"),
        "run .ci/build-guests",
    );
    feed(&fifo, std::fs::read(allowlist).expect("the allowlist")).await;
    let mut lines = tokio::io::BufReader::new(stderr).lines();
    let dropped = tokio::time::timeout(Duration::from_secs(30), async {
        while let Ok(Some(line)) = lines.next_line().await {
            if line.contains("this one is dropped") {
                return line;
            }
        }
        String::new()
    })
    .await
    .expect("the first load ends");
    assert!(dropped.contains("dropped"), "gatehouse ended first");
    assert_eq!(
        in_force(config.clone()).await.as_deref(),
        Some(guardian_sha256.as_str()),
        "the later reload's chain stays in force"
    );
}
