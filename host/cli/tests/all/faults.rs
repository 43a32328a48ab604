//! Faults an operator's machine produces, injected into the real binary:
//! a config rewritten in a storm while calls flow, an audit log cut short.
//! Each keeps "every elicitation gets exactly one answer and one whole
//! audit line; nothing accepted is unaudited" (docs/RELIABILITY.md).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use serde_json::{Value, json};

use crate::gateway::{Client, audit, call, stdio_client};
use crate::paths::demo_server;
use crate::tool_result::result_text as text;

/// A config whose servers are demo-servers named in `servers`, each started
/// through `sh`, which first appends gatehouse's pid to `starts/NAME` (so a
/// test counts starts and finds gatehouse), with the guardian.
fn config_text(dir: &Path, servers: &[&str]) -> String {
    let server = demo_server();
    let guardian = crate::paths::guest("gatehouse_guardian");
    let starts = dir.join("starts");
    let mut text = String::new();
    for name in servers {
        let script = format!(
            "echo $PPID $$ >> '{}/{name}'; exec '{}' --name {name}",
            starts.display(),
            server.display()
        );
        text.push_str(&format!(
            "[mcp_servers.{name}]\ncommand = \"/bin/sh\"\nargs = [\"-c\", {script:?}]\n\n"
        ));
    }
    text.push_str(&format!(
        "[[review.modules]]\npath = {guardian:?}\nconfig = {{}}\n\n\
         [review.limits]\ndeadline_ms = 2000\n\n\
         [elicitations]\naudit_log = \"audit.jsonl\"\nperson_timeout_sec = 30\n\
         max_in_flight_per_server = 1000\n",
        guardian = guardian.display().to_string(),
    ));
    text
}

/// Each start of the server `name`: gatehouse's pid and the server's.
fn starts(dir: &Path, name: &str) -> Vec<(u32, u32)> {
    std::fs::read_to_string(dir.join("starts").join(name))
        .unwrap_or_default()
        .lines()
        .filter_map(|line| {
            let mut pids = line.split_whitespace().map(|pid| pid.parse().ok());
            Some((pids.next()??, pids.next()??))
        })
        .collect()
}

/// Resident memory of `pid`, in KiB.
fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|value| value.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

/// 500 rewrites of the config in about 1.2 s (whole, empty, half-written
/// and invalid versions, in place and by rename, as an editor, a
/// config-management run or a `sed -i` loop writes) while calls that elicit
/// flow at about 100 a second: no call fails or goes unanswered, every
/// elicitation is audited once, the server whose configuration never
/// changed is never restarted, and what serves in the end is the last
/// version written (which adds a server).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rewrite_storm_drops_no_call_and_ends_on_the_last_whole_version() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::create_dir(dir.path().join("starts")).expect("starts dir");
    let config = dir.path().join("gatehouse.toml");
    let before = config_text(dir.path(), &["git"]);
    let after = config_text(dir.path(), &["git", "other"]);
    std::fs::write(&config, &before).expect("write config");
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
    // Up and answering before the storm.
    let first = client
        .call_tool(call("git__delete_branch", json!({"branch": "first"})))
        .await
        .expect("the first call");
    assert!(
        text(&first).contains("answered: decline"),
        "{}",
        text(&first)
    );
    let (pid, _) = starts(dir.path(), "git")[0];
    let rss_before = rss_kib(pid);

    // Calls flow through the storm and a while after it.
    let storming = Arc::new(AtomicBool::new(true));
    let caller = {
        let (client, storming) = (client.clone(), storming.clone());
        tokio::spawn(async move {
            let mut calls = Vec::new();
            let mut after_storm = 0;
            for index in 0.. {
                if !storming.load(Ordering::SeqCst) {
                    after_storm += 1;
                    if after_storm > 50 {
                        break;
                    }
                }
                let client = client.clone();
                calls.push(tokio::spawn(async move {
                    let branch = format!("b{index}");
                    let called = tokio::time::timeout(
                        Duration::from_secs(60),
                        client.call_tool(call("git__delete_branch", json!({"branch": branch}))),
                    )
                    .await;
                    (branch, called)
                }));
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            let mut outcomes = Vec::new();
            for call in calls {
                outcomes.push(call.await.expect("call task"));
            }
            outcomes
        })
    };
    let storm = {
        let (config, before, after) = (config.clone(), before.clone(), after.clone());
        tokio::task::spawn_blocking(move || rewrite_storm(&config, &before, &after))
    };
    storm.await.expect("storm");
    storming.store(false, Ordering::SeqCst);
    let outcomes = caller.await.expect("caller");

    let mut failures = Vec::new();
    for (branch, called) in &outcomes {
        match called {
            Ok(Ok(result)) if text(result).contains("answered: decline") => {}
            Ok(Ok(result)) => failures.push(format!("{branch}: {}", text(result))),
            Ok(Err(error)) => failures.push(format!("{branch}: {error}")),
            Err(_) => failures.push(format!("{branch}: no answer in 60 s")),
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} calls failed, e.g. {:?}",
        failures.len(),
        outcomes.len(),
        &failures[..failures.len().min(5)]
    );
    assert!(outcomes.len() > 100, "only {} calls", outcomes.len());

    // The last version serves: its new server comes up.
    let mut listed = Vec::new();
    for _ in 0..200 {
        listed = client
            .list_all_tools()
            .await
            .expect("tools/list")
            .into_iter()
            .map(|tool| tool.name.to_string())
            .collect();
        if listed.iter().any(|name| name.starts_with("other__")) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        listed.iter().any(|name| name.starts_with("other__")),
        "the last version's server never came up: {listed:?}"
    );
    assert!(listed.iter().any(|name| name == "git__delete_branch"));
    assert_eq!(
        starts(dir.path(), "git").len(),
        1,
        "the server whose configuration never changed was restarted"
    );
    assert_eq!(
        starts(dir.path(), "other").len(),
        1,
        "the new server started once"
    );

    let lines = audit(dir.path());
    assert_eq!(
        lines.len(),
        outcomes.len() + 1,
        "one audit line per elicitation"
    );
    let rss_after = rss_kib(pid);
    assert!(
        rss_after < rss_before + 32 * 1024,
        "memory grew from {rss_before} KiB to {rss_after} KiB"
    );
    drop(client);
}

/// Rewrites `config` 500 times, about 2.4 ms apart: whole (`before`),
/// empty, half of it, invalid, by rename; ends with `after`, whole.
fn rewrite_storm(config: &PathBuf, before: &str, after: &str) {
    let staged = config.with_extension("toml.tmp");
    for round in 0..500 {
        match round % 5 {
            0 => std::fs::write(config, before).expect("whole"),
            1 => std::fs::write(config, "").expect("empty"),
            2 => std::fs::write(config, &before[..before.len() / 2]).expect("half"),
            3 => std::fs::write(config, "[mcp_servers.git\ncommand = ").expect("invalid"),
            _ => {
                std::fs::write(&staged, before).expect("staged");
                std::fs::rename(&staged, config).expect("rename");
            }
        }
        std::thread::sleep(Duration::from_micros(2400));
    }
    std::fs::write(config, after).expect("the last version");
}

/// A log whose last record was cut short (planted by hand, as a kill in the
/// middle of a write or a power loss leaves it): `gatehouse serve` ends the
/// torn line and records that it did, the next decision is a whole record
/// that every query finds, and `gatehouse audit` reports the torn line with
/// the byte it starts at.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_torn_audit_tail_is_ended_recorded_and_reported_at_its_byte() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::create_dir(dir.path().join("starts")).expect("starts dir");
    let config = dir.path().join("gatehouse.toml");
    std::fs::write(&config, config_text(dir.path(), &["git"])).expect("write config");
    // One whole record, then 40 bytes of the next.
    let whole = concat!(
        r#"{"time":"2026-05-01T10:00:00.000001Z","server":"git","decided_by":"guest","action":"decline","#,
        r#""mode":"form","request_id":7,"reason":"decided by the chain","latency_us":120,"#,
        r#""answer":{"action":"decline"},"steps":[]}"#,
        "\n"
    );
    let log = dir.path().join("audit.jsonl");
    std::fs::write(&log, format!("{whole}{}", &whole[..40])).expect("plant a torn tail");
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&log, std::fs::Permissions::from_mode(0o600)).expect("0600");
    }
    let client = stdio_client(
        &config,
        Client {
            elicitation: true,
            content: Some(json!({})),
            asked: Arc::new(AtomicUsize::new(0)),
        },
    )
    .await;
    let result = client
        .call_tool(call(
            "git__delete_branch",
            json!({"branch": "after-the-tear"}),
        ))
        .await
        .expect("the call");
    assert!(
        text(&result).contains("answered: decline"),
        "{}",
        text(&result)
    );
    client.cancel().await.expect("the session ends");

    let output = crate::paths::gatehouse(&[
        "audit",
        "--log",
        &log.display().to_string(),
        "--format",
        "json",
    ]);
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    let records: Vec<serde_json::Value> = stdout
        .lines()
        .map(|line| serde_json::from_str(line).expect("a JSON line"))
        .collect();
    assert_eq!(records.len(), 2, "the old record and the new one: {stdout}");
    assert_eq!(records[0]["request_id"], 7);
    assert!(
        records[1].to_string().contains("after-the-tear")
            || records[1]["server"] == "git" && records[1]["decided_by"] == "guest",
        "{}",
        records[1]
    );
    assert!(
        stderr.contains(&format!(
            "1 line could not be read (first at line 2, byte {}: ",
            whole.len()
        )),
        "{stderr}"
    );
    assert!(
        stderr.contains("line 3: ") && stderr.contains("torn_line_ended"),
        "the repair is recorded and shown: {stderr}"
    );
}

/// A client that goes away while gatehouse is still starting (its module's
/// contract checks take minutes: a module that spins to a 20 s deadline)
/// ends gatehouse at once, on pipes and on a socketpair, rather than when
/// the checks are done.
#[test]
fn a_client_gone_during_start_up_ends_gatehouse_at_once() {
    use std::os::unix::net::UnixStream;
    use std::process::{Command, Stdio};
    let dir = tempfile::tempdir().expect("tempdir");
    let config = dir.path().join("gatehouse.toml");
    std::fs::write(
        &config,
        format!(
            "[[review.modules]]\npath = {:?}\nlimits = {{ deadline_ms = 20000 }}\n",
            crate::paths::guest("test_guest_spin").display().to_string()
        ),
    )
    .expect("write config");
    for socketpair in [false, true] {
        let mut command = Command::new(env!("CARGO_BIN_EXE_gatehouse"));
        command
            .args(["serve", "--config"])
            .arg(&config)
            .stderr(Stdio::null());
        let (mut child, ours) = if socketpair {
            let (ours, theirs) = UnixStream::pair().expect("socketpair");
            let out = theirs.try_clone().expect("dup");
            command
                .stdin(Stdio::from(std::os::fd::OwnedFd::from(theirs)))
                .stdout(Stdio::from(std::os::fd::OwnedFd::from(out)));
            (command.spawn().expect("gatehouse starts"), Some(ours))
        } else {
            let child = command
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .spawn()
                .expect("gatehouse starts");
            (child, None)
        };
        // Well into the contract checks.
        std::thread::sleep(Duration::from_secs(2));
        assert!(
            child.try_wait().expect("wait").is_none(),
            "still starting after 2 s (socketpair: {socketpair})"
        );
        // The client dies: its ends of stdin and stdout close.
        drop(ours);
        drop(child.stdin.take());
        drop(child.stdout.take());
        let closed = std::time::Instant::now();
        let mut exited = None;
        while closed.elapsed() < Duration::from_secs(15) {
            if let Some(status) = child.try_wait().expect("wait") {
                exited = Some(status);
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = child.kill();
        let _ = child.wait();
        let status = exited.unwrap_or_else(|| {
            panic!("gatehouse still starting 15 s after its client went away (socketpair: {socketpair})")
        });
        assert!(status.success(), "{status:?}");
        eprintln!(
            "socketpair: {socketpair}: exited {:?} after the client went away",
            closed.elapsed()
        );
    }
}

/// An upstream client whose person never answers, counting the forms it is
/// asked and the `notifications/cancelled` it gets.
#[derive(Clone, Default)]
struct SilentPerson {
    asked: Arc<AtomicUsize>,
    cancelled: Arc<AtomicUsize>,
}

impl rmcp::ClientHandler for SilentPerson {
    fn get_info(&self) -> rmcp::model::ClientConfig {
        let mut capabilities = rmcp::model::ClientCapabilities::default();
        capabilities.elicitation = Some(
            rmcp::model::ElicitationCapability::new()
                .with_form(rmcp::model::FormElicitationCapability::default()),
        );
        rmcp::model::ClientConfig::new(
            capabilities,
            rmcp::model::Implementation::new("silent-person", "0"),
        )
    }

    async fn create_elicitation(
        &self,
        _request: rmcp::model::ElicitRequestParams,
        _context: rmcp::service::RequestContext<rmcp::RoleClient>,
    ) -> Result<rmcp::model::ElicitResult, rmcp::model::ErrorData> {
        self.asked.fetch_add(1, Ordering::SeqCst);
        std::future::pending().await
    }

    async fn on_cancelled(
        &self,
        _params: rmcp::model::CancelledNotificationParam,
        _context: rmcp::service::NotificationContext<rmcp::RoleClient>,
    ) {
        self.cancelled.fetch_add(1, Ordering::SeqCst);
    }
}

/// Waits up to 30 s (the question's `person_timeout_sec`) for `done`.
async fn within_the_person_timeout(mut done: impl FnMut() -> bool) -> Option<Duration> {
    let started = std::time::Instant::now();
    while started.elapsed() < Duration::from_secs(30) {
        if done() {
            return Some(started.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    None
}

/// A stdio backend killed while its question waits for the person: the
/// question is withdrawn from the person's client (`notifications/cancelled`)
/// and audited, with the server's going named as the reason, and the call
/// fails, each long before the person's timeout would have ended them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backend_killed_while_its_question_waits_withdraws_and_audits_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::create_dir(dir.path().join("starts")).expect("starts dir");
    let config = dir.path().join("gatehouse.toml");
    std::fs::write(&config, config_text(dir.path(), &["git"])).expect("write config");
    let person = SilentPerson::default();
    let client = stdio_client(&config, person.clone()).await;
    let peer = client.peer().clone();
    let call = tokio::spawn(async move { peer.call_tool(call("git__ask_name", json!({}))).await });
    within_the_person_timeout(|| person.asked.load(Ordering::SeqCst) == 1)
        .await
        .expect("the person is asked");
    let (_, server) = starts(dir.path(), "git")[0];
    crate::clients::signal(server, "KILL");
    let killed = std::time::Instant::now();

    let audited = within_the_person_timeout(|| !audit(dir.path()).is_empty())
        .await
        .expect("the question is audited");
    let withdrawn = within_the_person_timeout(|| person.cancelled.load(Ordering::SeqCst) == 1)
        .await
        .expect("the question is withdrawn from the person's client");
    let called = tokio::time::timeout(Duration::from_secs(30), call)
        .await
        .expect("the call ends")
        .expect("call task");
    eprintln!(
        "backend killed: withdrawn after {withdrawn:?}, audited after {audited:?}, call ended after {:?}",
        killed.elapsed()
    );
    match called {
        Err(error) => assert!(!error.to_string().is_empty()),
        Ok(result) => assert_eq!(result.is_error, Some(true), "{}", text(&result)),
    }
    let lines = audit(dir.path());
    assert_eq!(lines.len(), 1, "{lines:?}");
    let reason = lines[0]["reason"].as_str().unwrap_or_default();
    assert_eq!(
        reason,
        gatehouse_gateway::router::SERVER_GONE_REASON,
        "the reason names the server's going, not the client's"
    );
    assert_eq!(lines[0]["answer"]["action"], "cancel", "{}", lines[0]);
    client.cancel().await.expect("the session ends");
}

/// A client that vanishes with 50 calls in flight on a server: gatehouse
/// exits without waiting for the calls, and before the server is stopped it
/// has been sent `notifications/cancelled` for each of them (what reached
/// the server's stdin is copied to a file by `tee`, which outlives the
/// server's shell, and with `-p` keeps copying when the server is gone).
#[test]
fn a_client_gone_with_fifty_calls_in_flight_cancels_each_and_exits() {
    use std::io::{BufRead, BufReader, Write};
    use std::process::{Command, Stdio};
    const CALLS: usize = 50;
    let dir = tempfile::tempdir().expect("tempdir");
    let held = dir.path().join("held");
    std::fs::create_dir(&held).expect("held dir");
    let received = dir.path().join("received.jsonl");
    let config = dir.path().join("gatehouse.toml");
    let script = format!(
        "tee -p -a '{}' | '{}' --name git",
        received.display(),
        demo_server().display()
    );
    let guardian = crate::paths::guest("gatehouse_guardian");
    std::fs::write(
        &config,
        format!(
            "[mcp_servers.git]\ncommand = \"/bin/sh\"\nargs = [\"-c\", {script:?}]\n\n\
             [[review.modules]]\npath = {guardian:?}\nconfig = {{}}\n\n\
             [elicitations]\naudit_log = \"audit.jsonl\"\n",
            guardian = guardian.display().to_string(),
        ),
    )
    .expect("write config");
    let mut child = Command::new(env!("CARGO_BIN_EXE_gatehouse"))
        .args(["serve", "--config"])
        .arg(&config)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("gatehouse starts");
    let mut stdin = child.stdin.take().expect("stdin");
    let mut stdout = BufReader::new(child.stdout.take().expect("stdout"));
    let mut send = |message: serde_json::Value| {
        writeln!(stdin, "{message}").expect("write");
    };
    send(
        json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "vanishing", "version": "0"}}}),
    );
    let mut line = String::new();
    stdout.read_line(&mut line).expect("initialize answered");
    assert!(line.contains("\"result\""), "{line}");
    send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
    for index in 0..CALLS {
        send(
            json!({"jsonrpc": "2.0", "id": index + 1, "method": "tools/call", "params": {
            "name": "git__hold",
            "arguments": {"dir": held.display().to_string(), "id": format!("c{index}")}}}),
        );
    }
    let held_count = || std::fs::read_dir(&held).expect("read held").count();
    let started = std::time::Instant::now();
    while held_count() < CALLS {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "only {} of {CALLS} calls reached the server",
            held_count()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // The client vanishes: both its pipes close.
    drop(stdin);
    drop(stdout);
    let vanished = std::time::Instant::now();
    let mut exited = None;
    while vanished.elapsed() < Duration::from_secs(30) {
        if let Some(status) = child.try_wait().expect("wait") {
            exited = Some((status, vanished.elapsed()));
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let _ = child.kill();
    let _ = child.wait();
    let (status, after) = exited.expect("gatehouse exits within 30 s of its client vanishing");
    assert!(status.success(), "{status:?}");
    // What the server was sent: a tools/call per call, and a cancellation
    // naming each.
    let mut calls = std::collections::BTreeSet::new();
    let mut cancelled = std::collections::BTreeSet::new();
    // tee may still be writing its last lines.
    let settle = std::time::Instant::now();
    loop {
        calls.clear();
        cancelled.clear();
        for line in std::fs::read_to_string(&received)
            .unwrap_or_default()
            .lines()
        {
            let Ok(message) = serde_json::from_str::<serde_json::Value>(line) else {
                continue;
            };
            match message["method"].as_str() {
                Some("tools/call") => {
                    calls.insert(message["id"].to_string());
                }
                Some("notifications/cancelled") => {
                    cancelled.insert(message["params"]["requestId"].to_string());
                }
                _ => {}
            }
        }
        if cancelled.len() >= CALLS || settle.elapsed() > Duration::from_secs(5) {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    eprintln!(
        "client vanished with {CALLS} calls in flight: gatehouse exited after {after:?}; {} of {} calls cancelled at the server",
        cancelled.len(),
        calls.len()
    );
    assert_eq!(calls.len(), CALLS);
    assert_eq!(
        cancelled, calls,
        "every call is cancelled at its server, by its id"
    );
}

/// A loopback TCP proxy in front of `backend` (`HOST:PORT`) whose
/// connections can all be reset at once (RST, as a dropped network or a
/// restarted load balancer does).
struct ResettingProxy {
    address: std::net::SocketAddr,
    resets: tokio::sync::watch::Sender<u64>,
}

impl ResettingProxy {
    async fn start(backend: String) -> ResettingProxy {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let address = listener.local_addr().expect("address");
        let (resets, _) = tokio::sync::watch::channel(0u64);
        let watching = resets.clone();
        tokio::spawn(async move {
            while let Ok((mut client, _)) = listener.accept().await {
                let Ok(mut server) = tokio::net::TcpStream::connect(&backend).await else {
                    continue;
                };
                let mut reset = watching.subscribe();
                tokio::spawn(async move {
                    tokio::select! {
                        _ = tokio::io::copy_bidirectional(&mut client, &mut server) => {}
                        _ = reset.changed() => {
                            // Closed with a zero linger: an RST each way.
                            let _ = client.set_zero_linger();
                            let _ = server.set_zero_linger();
                        }
                    }
                });
            }
        });
        ResettingProxy { address, resets }
    }

    /// Resets every connection open now, on both sides.
    fn reset_all(&self) {
        self.resets.send_modify(|count| *count += 1);
    }
}

/// An upstream client whose person answers (`name`: Ada) once released.
#[derive(Clone, Default)]
struct LatePerson {
    asked: Arc<AtomicUsize>,
    cancelled: Arc<AtomicUsize>,
    release: Arc<tokio::sync::Notify>,
}

impl rmcp::ClientHandler for LatePerson {
    fn get_info(&self) -> rmcp::model::ClientConfig {
        SilentPerson::default().get_info()
    }

    async fn create_elicitation(
        &self,
        _request: rmcp::model::ElicitRequestParams,
        _context: rmcp::service::RequestContext<rmcp::RoleClient>,
    ) -> Result<rmcp::model::ElicitResult, rmcp::model::ErrorData> {
        self.asked.fetch_add(1, Ordering::SeqCst);
        self.release.notified().await;
        Ok(
            rmcp::model::ElicitResult::new(rmcp::model::ElicitationAction::Accept)
                .with_content(json!({"name": "Ada"})),
        )
    }

    async fn on_cancelled(
        &self,
        _params: rmcp::model::CancelledNotificationParam,
        _context: rmcp::service::NotificationContext<rmcp::RoleClient>,
    ) {
        self.cancelled.fetch_add(1, Ordering::SeqCst);
    }
}

/// An HTTP backend whose connections are reset while a question of its
/// waits for the person: rmcp resumes the call's stream and the server
/// delivers the question again, which is the same question (not a reused
/// id): the person's answer, given after the reset, still reaches the
/// server, once, with one audit line. (A stream that could not be resumed
/// would end the call, and the question with it: `CALL_ENDED_REASON`.) Then,
/// right after each of three resets, a call whose elicitation the chain
/// decides is answered and audited: none is dropped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http_backend_reset_strands_no_question_and_drops_no_elicitation() {
    let (backend, url) = crate::paths::spawn_listening(
        std::process::Command::new(demo_server()).args(["--name", "git", "--http", "127.0.0.1:0"]),
        "listening on ",
        "demo-server starts",
    );
    let _backend = KillOnDrop(backend);
    let backend_address = url
        .trim_start_matches("http://")
        .trim_end_matches("/mcp")
        .to_owned();
    let proxy = ResettingProxy::start(backend_address).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let config = dir.path().join("gatehouse.toml");
    let guardian = crate::paths::guest("gatehouse_guardian");
    std::fs::write(
        &config,
        format!(
            "[mcp_servers.git]\nurl = \"http://{}/mcp\"\ntool_timeout_sec = 20\n\n\
             [[review.modules]]\npath = {guardian:?}\nconfig = {{}}\n\n\
             [elicitations]\naudit_log = \"audit.jsonl\"\nperson_timeout_sec = 60\n",
            proxy.address,
            guardian = guardian.display().to_string(),
        ),
    )
    .expect("write config");
    let person = LatePerson::default();
    let client = stdio_client(&config, person.clone()).await;

    // A question waits for the person; the connection is reset under it;
    // then the person answers.
    let peer = client.peer().clone();
    let asking =
        tokio::spawn(async move { peer.call_tool(call("git__ask_name", json!({}))).await });
    within_the_person_timeout(|| person.asked.load(Ordering::SeqCst) == 1)
        .await
        .expect("the person is asked");
    proxy.reset_all();
    tokio::time::sleep(Duration::from_millis(500)).await;
    person.release.notify_waiters();
    let asked = tokio::time::timeout(Duration::from_secs(30), asking)
        .await
        .expect("the call ends")
        .expect("call task");
    let lines = audit(dir.path());
    eprintln!(
        "HTTP reset under a waiting question: the call got {:?}; audited {lines:?}",
        asked.as_ref().map(text)
    );
    assert_eq!(lines.len(), 1, "one question, one audit line: {lines:?}");
    assert_eq!(person.asked.load(Ordering::SeqCst), 1, "asked once");
    match &asked {
        Ok(result) => {
            assert!(text(result).contains("Ada"), "{}", text(result));
            assert_eq!(lines[0]["decided_by"], "person", "{}", lines[0]);
            assert_eq!(lines[0]["answer"]["action"], "accept", "{}", lines[0]);
        }
        Err(_) => {
            assert_eq!(
                lines[0]["reason"],
                gatehouse_gateway::router::CALL_ENDED_REASON,
                "{}",
                lines[0]
            );
        }
    }

    // Right after each reset, an elicitation on a call's own stream is
    // answered and audited.
    for round in 0..3 {
        proxy.reset_all();
        let called = tokio::time::timeout(
            Duration::from_secs(60),
            client.call_tool(call(
                "git__delete_branch",
                json!({"branch": format!("r{round}")}),
            )),
        )
        .await
        .expect("the call ends");
        let answered = match &called {
            Ok(result) => text(result),
            Err(error) => error.to_string(),
        };
        eprintln!("after reset {round}: {answered}");
        assert!(answered.contains("answered: decline"), "{answered}");
    }
    let lines = audit(dir.path());
    assert_eq!(lines.len(), 4, "one audit line per elicitation: {lines:?}");
    assert!(
        lines
            .iter()
            .skip(1)
            .all(|line| line["decided_by"] == "guest"),
        "{lines:?}"
    );
    client.cancel().await.expect("the session ends");
}

/// A child process killed (and reaped) when the test ends, however it ends.
struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A server whose configuration changes while its question waits for the
/// person: the new configuration starts a new process for new calls, and the
/// old one keeps its pipe until the question is answered, so the person's
/// answer still reaches the server that asked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_reconfigured_while_its_question_waits_still_gets_the_answer() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::create_dir(dir.path().join("starts")).expect("starts dir");
    let config = dir.path().join("gatehouse.toml");
    let before = config_text(dir.path(), &["git"]);
    std::fs::write(&config, &before).expect("write config");
    let person = LatePerson::default();
    let client = stdio_client(&config, person.clone()).await;
    let peer = client.peer().clone();
    let asking =
        tokio::spawn(async move { peer.call_tool(call("git__ask_name", json!({}))).await });
    within_the_person_timeout(|| person.asked.load(Ordering::SeqCst) == 1)
        .await
        .expect("the person is asked");
    // The server's configuration changes (an environment variable more).
    let after = before.replacen(
        "[mcp_servers.git]\n",
        "[mcp_servers.git]\nenv = { GATEHOUSE_TEST_GENERATION = \"2\" }\n",
        1,
    );
    std::fs::write(&config, &after).expect("rewrite config");
    // Once the change has settled, a request refreshes the runtime: a new
    // process serves the new configuration.
    let started = std::time::Instant::now();
    while starts(dir.path(), "git").len() < 2 {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "the reconfigured server never started"
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
        let _ = client.list_all_tools().await;
    }
    person.release.notify_waiters();
    let asked = tokio::time::timeout(Duration::from_secs(30), asking)
        .await
        .expect("the call ends")
        .expect("call task")
        .expect("the call succeeds");
    assert!(
        text(&asked).contains("Ada"),
        "the old process got the answer: {}",
        text(&asked)
    );
    let lines = audit(dir.path());
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert_eq!(lines[0]["answer"]["action"], "accept", "{}", lines[0]);
    client.cancel().await.expect("the session ends");
}

/// A person who accepts every form at once, filling each field with 60,000
/// characters: records of about 900 KB.
#[derive(Clone, Default)]
struct FillingPerson;

impl rmcp::ClientHandler for FillingPerson {
    fn get_info(&self) -> rmcp::model::ClientConfig {
        SilentPerson::default().get_info()
    }

    async fn create_elicitation(
        &self,
        request: rmcp::model::ElicitRequestParams,
        _context: rmcp::service::RequestContext<rmcp::RoleClient>,
    ) -> Result<rmcp::model::ElicitResult, rmcp::model::ErrorData> {
        let wire = serde_json::to_value(&request).unwrap_or_default();
        let mut content = serde_json::Map::new();
        if let Some(fields) = wire["requestedSchema"]["properties"].as_object() {
            for name in fields.keys() {
                content.insert(name.clone(), json!("x".repeat(60_000)));
            }
        }
        Ok(
            rmcp::model::ElicitResult::new(rmcp::model::ElicitationAction::Accept)
                .with_content(serde_json::Value::Object(content)),
        )
    }
}

/// gatehouse SIGKILLed five times while it writes large records (15 fields
/// of 60,000 characters, about 900 KB each, `audit_sync = "never"`), four
/// calls at a time, restarted each time on the same log: every accept the
/// server received (its tool result carries the answer) is a whole record
/// `gatehouse audit` reads afterwards; a line a kill cut is reported as
/// unreadable, never glued to the record after it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkills_while_large_records_are_written_lose_no_accept_the_server_received() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::create_dir(dir.path().join("starts")).expect("starts dir");
    let config = dir.path().join("gatehouse.toml");
    std::fs::write(
        &config,
        format!(
            "{}audit_sync = \"never\"\n",
            config_text(dir.path(), &["git"])
        ),
    )
    .expect("write config");
    let properties: serde_json::Map<String, Value> = (0..15)
        .map(|field| (format!("f{field}"), json!({"type": "string"})))
        .collect();
    let params = json!({"params": {"message": "Fill in", "requestedSchema": {
        "type": "object", "properties": properties}}});
    let mut received = 0usize;
    for round in 0..5u64 {
        let client = Arc::new(stdio_client(&config, FillingPerson).await);
        let accepted = Arc::new(AtomicUsize::new(0));
        let mut callers = Vec::new();
        for _ in 0..4 {
            let (client, accepted, params) = (client.clone(), accepted.clone(), params.clone());
            callers.push(tokio::spawn(async move {
                while let Ok(result) = client
                    .call_tool(call("git__elicit_raw", params.clone()))
                    .await
                {
                    if text(&result).contains("\"accept\"") {
                        accepted.fetch_add(1, Ordering::SeqCst);
                    }
                }
            }));
        }
        // The first call brings the server up and records gatehouse's pid.
        let started = std::time::Instant::now();
        while starts(dir.path(), "git").len() <= round as usize {
            assert!(
                started.elapsed() < Duration::from_secs(60),
                "the server never started"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let (gatehouse, _) = starts(dir.path(), "git")[round as usize];
        // Killed once an accept has come back (however loaded the machine),
        // then a little later each round, so that the kill lands at a
        // different point of the records being written.
        while accepted.load(Ordering::SeqCst) == 0 {
            assert!(
                started.elapsed() < Duration::from_secs(60),
                "no accept came back in round {round}"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        tokio::time::sleep(Duration::from_millis(70 * round)).await;
        crate::clients::signal(gatehouse, "KILL");
        for caller in callers {
            let _ = tokio::time::timeout(Duration::from_secs(30), caller).await;
        }
        received += accepted.load(Ordering::SeqCst);
    }
    let log = dir.path().join("audit.jsonl");
    let output = crate::paths::gatehouse(&[
        "audit",
        "--log",
        &log.display().to_string(),
        "--format",
        "json",
    ]);
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    let accepts = stdout
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter(|record| record["answer"]["action"] == "accept" && record["decided_by"] == "person")
        .count();
    eprintln!(
        "5 SIGKILLs during ~900 KB records: the server received {received} accepts; {accepts} whole accept records; {}",
        stderr.trim()
    );
    assert!(received > 0, "no accept reached the server");
    assert!(
        accepts >= received,
        "{received} accepts reached the server, only {accepts} are whole records: {stderr}"
    );
}
