//! Faults an operator's machine produces, injected into the real binary:
//! a config rewritten in a storm while calls flow, an audit log cut short.
//! Each keeps "every elicitation gets exactly one answer and one whole
//! audit line; nothing accepted is unaudited" (docs/RELIABILITY.md).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use serde_json::json;

use crate::gateway::{Client, audit, call, stdio_client};
use crate::paths::{demo_server, existing, target};
use crate::tool_result::result_text as text;

/// A config whose servers are demo-servers named in `servers`, each started
/// through `sh`, which first appends gatehouse's pid to `starts/NAME` (so a
/// test counts starts and finds gatehouse), with the guardian.
fn config_text(dir: &Path, servers: &[&str]) -> String {
    let server = demo_server();
    let guardian = existing(
        target().join("wasm32-wasip2/guest/gatehouse_guardian.wasm"),
        "run .ci/build-guests",
    );
    let starts = dir.join("starts");
    let mut text = String::new();
    for name in servers {
        let script = format!(
            "echo $PPID >> '{}/{name}'; exec '{}' --name {name}",
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

/// How many times the server `name` was started, and gatehouse's pid.
fn starts(dir: &Path, name: &str) -> (usize, Option<u32>) {
    let text = std::fs::read_to_string(dir.join("starts").join(name)).unwrap_or_default();
    let pid = text
        .lines()
        .next()
        .and_then(|line| line.trim().parse().ok());
    (text.lines().count(), pid)
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
    let (_, pid) = starts(dir.path(), "git");
    let pid = pid.expect("gatehouse's pid");
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
        starts(dir.path(), "git").0,
        1,
        "the server whose configuration never changed was restarted"
    );
    assert_eq!(
        starts(dir.path(), "other").0,
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
