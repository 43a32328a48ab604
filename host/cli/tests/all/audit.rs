//! `gatehouse audit`: the audit log read back through the built binary, from
//! a fixture written with the real `AuditRecord`: the table, JSON filtering,
//! stats, escaping of server and guest text, malformed lines, where the path
//! comes from, and `--follow` across appends and rotation.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, SystemTime};

use gatehouse_mcp::audit::{AuditRecord, AuditStep, DecidedBy, read};
use serde_json::{Value, json};

use crate::paths::gatehouse;

const GUARDIAN: &str = "aaaaaaaaaaaabbbbbbbbbbbbccccccccccccddddddddddddeeeeeeeeeeeeffff";
const ALLOWLIST: &str = "1111111111112222222222223333333333334444444444445555555555556666";
/// A server name and a reason with terminal controls: an OSC retitle, BEL,
/// C1 CSI, a clear screen, a bidi override.
const HOSTILE_SERVER: &str = "evil\u{1b}]0;pwned\u{7}\u{9b}2J";
const HOSTILE_REASON: &str = "auto\u{1b}[2Jdeny\u{202e}txet";

/// `minutes` ago, as a log time (to the second).
fn ago(minutes: u64) -> String {
    read::format_time(SystemTime::now() - Duration::from_secs(minutes * 60))
}

fn step(module: &str, sha256: &str, outcome: &str) -> AuditStep {
    AuditStep {
        module: module.to_owned(),
        sha256: sha256.to_owned(),
        outcome: outcome.to_owned(),
        failure: (outcome == "failure").then(|| "deadline".to_owned()),
        rationale: None,
        risk: None,
        latency_us: 10,
        model_calls: Vec::new(),
    }
}

#[allow(clippy::too_many_arguments)]
fn record(
    time: String,
    server: &str,
    id: u64,
    by: DecidedBy,
    reason: &str,
    steps: Vec<AuditStep>,
    answer: Value,
    latency_us: u64,
) -> AuditRecord {
    AuditRecord {
        time,
        server: server.to_owned(),
        request_id: json!(id),
        session: Some(1),
        turn: None,
        mode: "form".to_owned(),
        decided_by: by,
        reason: reason.to_owned(),
        steps,
        answer,
        latency_us,
    }
}

fn line(record: &AuditRecord) -> String {
    format!("{}\n", serde_json::to_string(record).expect("serializes"))
}

/// The fixture: five records (request ids 1, 2, 4, 5, 7) and two lines that
/// are not records (3 and 6).
fn fixture() -> Vec<String> {
    vec![
        line(&record(
            ago(180),
            "git",
            1,
            DecidedBy::Guest,
            "decided by the chain",
            vec![
                step("allowlist", ALLOWLIST, "defer"),
                step("guardian", GUARDIAN, "decline"),
            ],
            json!({"action": "decline"}),
            100,
        )),
        line(&record(
            ago(120),
            "docs",
            2,
            DecidedBy::Person,
            "every module deferred",
            vec![step("guardian", GUARDIAN, "defer")],
            json!({"action": "accept", "content": {"name": "Ada"}}),
            2000,
        )),
        "this is not json\n".to_owned(),
        line(&record(
            ago(30),
            "git",
            4,
            DecidedBy::Failure,
            "guardian failed: deadline",
            vec![step("guardian", GUARDIAN, "failure")],
            json!({"action": "decline"}),
            300,
        )),
        line(&record(
            ago(10),
            HOSTILE_SERVER,
            5,
            DecidedBy::Policy,
            HOSTILE_REASON,
            Vec::new(),
            json!({"error": {"code": -32602, "message": "bad params"}}),
            50,
        )),
        "{\"time\": \"2026-01-01T00:00:00Z\", \"server\": 3}\n".to_owned(),
        line(&record(
            ago(1),
            "git",
            7,
            DecidedBy::Guest,
            "decided by the chain",
            vec![step("guardian", GUARDIAN, "accept")],
            json!({"action": "accept", "content": {}}),
            400,
        )),
    ]
}

fn write_log(dir: &Path, name: &str, lines: &[String]) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, lines.concat()).expect("write the log");
    path
}

fn audit(log: &Path, more: &[&str]) -> Output {
    let mut args = vec!["audit", "--log", log.to_str().expect("UTF-8 path")];
    args.extend_from_slice(more);
    gatehouse(&args)
}

fn stdout(output: &Output) -> String {
    String::from_utf8(output.stdout.clone()).expect("UTF-8 stdout")
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// The request ids of `--format json` output.
fn ids(output: &Output) -> Vec<u64> {
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    stdout(output)
        .lines()
        .map(|line| {
            let value: Value = serde_json::from_str(line).expect("each line is JSON");
            value["request_id"].as_u64().expect("a numeric id")
        })
        .collect()
}

#[test]
fn audit_prints_a_table_of_decisions_and_reports_unreadable_lines() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = write_log(dir.path(), "audit.jsonl", &fixture());
    let output = audit(&log, &[]);
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    let text = stdout(&output);
    let rows: Vec<&str> = text.lines().collect();
    assert_eq!(rows.len(), 6, "a header and five rows: {text}");
    for column in [
        "time",
        "server",
        "request",
        "mode",
        "decided by",
        "module",
        "action",
        "latency",
    ] {
        assert!(rows[0].contains(column), "{}", rows[0]);
    }
    // The deciding step: the guardian that declined, not the allowlist that
    // deferred; the short digest.
    let first = rows[1];
    for part in [
        "git",
        " 1 ",
        "form",
        "guest",
        "guardian aaaaaaaaaaaa ",
        "decline",
        "0.100 ms",
        "decided by the chain",
    ] {
        assert!(first.contains(part), "{part:?} in {first}");
    }
    assert!(!first.contains("allowlist"), "{first}");
    assert!(
        !first.contains("aaaaaaaaaaaab"),
        "the digest is short: {first}"
    );
    // The person decided: shown so, with the answer's action.
    assert!(
        rows[2].contains("person") && rows[2].contains("(person)"),
        "{}",
        rows[2]
    );
    assert!(
        rows[2].contains("accept") && rows[2].contains("2.000 ms"),
        "{}",
        rows[2]
    );
    // A module that failed is the one that decided.
    assert!(
        rows[3].contains("failure") && rows[3].contains("guardian aaaaaaaaaaaa"),
        "{}",
        rows[3]
    );
    // A JSON-RPC error answer, by policy.
    assert!(
        rows[4].contains("(policy)") && rows[4].contains("error"),
        "{}",
        rows[4]
    );
    // Times to the second, UTC.
    let time = rows[1].split_whitespace().next().expect("a time");
    assert_eq!(time.len(), 20, "{time}");
    assert!(time.ends_with('Z'), "{time}");

    let errors = stderr(&output);
    assert!(
        errors.contains("2 lines could not be read (first at line 3: not JSON"),
        "{errors}"
    );
    assert!(errors.contains(&log.display().to_string()), "{errors}");
}

#[test]
fn audit_escapes_server_and_guest_text() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = write_log(dir.path(), "audit.jsonl", &fixture());
    for format in ["text", "json"] {
        let output = audit(&log, &["--format", format]);
        assert_eq!(output.status.code(), Some(0), "{output:?}");
        let text = stdout(&output);
        for raw in ['\u{1b}', '\u{7}', '\u{9b}', '\u{202e}'] {
            assert!(!text.contains(raw), "{format}: raw {raw:?} in {text:?}");
        }
        if format == "text" {
            assert!(text.contains(r"evil\u{1b}]0;pwned\u{7}\u{9b}2J"), "{text}");
            assert!(text.contains(r"auto\u{1b}[2Jdeny\u{202e}txet"), "{text}");
        } else {
            // The same strings for a JSON reader.
            let hostile: Vec<Value> = text
                .lines()
                .map(|line| serde_json::from_str(line).expect("JSON"))
                .filter(|value: &Value| value["request_id"] == 5)
                .collect();
            assert_eq!(hostile.len(), 1, "{text}");
            assert_eq!(hostile[0]["server"], HOSTILE_SERVER);
            assert_eq!(hostile[0]["reason"], HOSTILE_REASON);
        }
    }
    // A hostile line that is not a record is reported escaped too.
    let bad = write_log(
        dir.path(),
        "bad.jsonl",
        &["{\"time\":\"x\u{1b}[2J\u{9b}\"}\n".to_owned()],
    );
    let output = audit(&bad, &[]);
    let errors = stderr(&output);
    assert!(
        !errors.contains('\u{1b}') && !errors.contains('\u{9b}'),
        "{errors:?}"
    );
    assert!(
        errors.contains("1 line could not be read (first at line 1"),
        "{errors}"
    );
}

#[test]
fn audit_json_filters_by_server_decided_by_and_since() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = write_log(dir.path(), "audit.jsonl", &fixture());
    assert_eq!(ids(&audit(&log, &["--format", "json"])), [1, 2, 4, 5, 7]);
    assert_eq!(
        ids(&audit(&log, &["--format", "json", "--server", "git"])),
        [1, 4, 7]
    );
    assert_eq!(
        ids(&audit(
            &log,
            &["--format", "json", "--decided-by", "failure"]
        )),
        [4]
    );
    assert_eq!(
        ids(&audit(
            &log,
            &["--format", "json", "--decided-by", "person"]
        )),
        [2]
    );
    assert_eq!(
        ids(&audit(
            &log,
            &[
                "--format",
                "json",
                "--server",
                "git",
                "--decided-by",
                "guest"
            ]
        )),
        [1, 7]
    );
    assert_eq!(
        ids(&audit(&log, &["--format", "json", "--since", "1h"])),
        [4, 5, 7]
    );
    assert_eq!(
        ids(&audit(
            &log,
            &["--format", "json", "--since", "5m", "--server", "git"]
        )),
        [7]
    );
    let absolute = ago(150);
    assert_eq!(
        ids(&audit(&log, &["--format", "json", "--since", &absolute])),
        [2, 4, 5, 7]
    );
    // As a person may type it: a space for the T, no Z (still UTC).
    let absolute = ago(150)[..19].replace('T', " ");
    assert_eq!(
        ids(&audit(&log, &["--format", "json", "--since", &absolute])),
        [2, 4, 5, 7]
    );
    // Each clean record is printed as it is in the log.
    let output = audit(&log, &["--format", "json", "--server", "docs"]);
    assert_eq!(stdout(&output), fixture()[1]);

    let wrong = audit(&log, &["--since", "last tuesday"]);
    assert_eq!(wrong.status.code(), Some(1), "{wrong:?}");
    let errors = stderr(&wrong);
    assert!(
        errors.contains("--since") && errors.contains("last tuesday"),
        "{errors}"
    );
    let wrong = audit(&log, &["--decided-by", "robot"]);
    assert_eq!(wrong.status.code(), Some(2), "{wrong:?}");
}

#[test]
fn audit_stats_count_and_give_latency_percentiles() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = write_log(dir.path(), "audit.jsonl", &fixture());
    let output = audit(&log, &["--stats", "--format", "json"]);
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    let text = stdout(&output);
    assert_eq!(text.lines().count(), 1, "{text}");
    let stats: Value = serde_json::from_str(&text).expect("JSON");
    assert_eq!(stats["records"], 5);
    assert_eq!(stats["unreadable"], 2);
    // 50, 100, 300, 400, 2000 µs by nearest rank.
    assert_eq!(
        stats["latency_us"],
        json!({"p50": 300, "p90": 2000, "p99": 2000, "max": 2000})
    );
    assert_eq!(stats["servers"]["git"], 3);
    assert_eq!(stats["servers"]["docs"], 1);
    assert_eq!(stats["servers"][HOSTILE_SERVER], 1);
    assert_eq!(
        stats["actions"],
        json!({"accept": 2, "decline": 2, "error": 1})
    );
    assert_eq!(
        stats["decided_by"],
        json!({"guest": 2, "person": 1, "policy": 1, "failure": 1})
    );
    let deciders = stats["deciders"].as_array().expect("an array");
    assert!(
        deciders.contains(&json!({"module": "guardian", "sha256": GUARDIAN, "count": 3})),
        "{deciders:?}"
    );
    assert!(deciders.contains(&json!({"decided_by": "person", "count": 1})));
    assert!(deciders.contains(&json!({"decided_by": "policy", "count": 1})));
    assert_eq!(deciders.len(), 3, "{deciders:?}");
    assert!(!text.contains('\u{1b}'), "{text:?}");

    // Filters apply to the counts.
    let output = audit(&log, &["--stats", "--format", "json", "--server", "git"]);
    let stats: Value = serde_json::from_str(&stdout(&output)).expect("JSON");
    assert_eq!(stats["records"], 3);
    assert_eq!(stats["latency_us"]["p50"], 300);

    let output = audit(&log, &["--stats"]);
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    let text = stdout(&output);
    for part in [
        "records: 5",
        "p50 0.300 ms",
        "p90 2.000 ms",
        "p99 2.000 ms",
        "max 2.000 ms",
        "guardian aaaaaaaaaaaa",
        "(person)",
    ] {
        assert!(text.contains(part), "{part:?} in {text}");
    }
    assert!(text.contains(r"evil\u{1b}]0;pwned"), "{text}");
    assert!(!text.contains('\u{1b}'), "{text:?}");

    // No records: no percentiles, no failure.
    let empty = write_log(dir.path(), "empty.jsonl", &[]);
    let output = audit(&empty, &["--stats", "--format", "json"]);
    let stats: Value = serde_json::from_str(&stdout(&output)).expect("JSON");
    assert_eq!(
        (stats["records"].clone(), stats["latency_us"].clone()),
        (json!(0), Value::Null)
    );
}

#[test]
fn audit_skips_an_over_long_line_and_reads_on() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut lines = fixture();
    lines.insert(0, format!("{}\n", "x".repeat((16 << 20) + 1)));
    let log = write_log(dir.path(), "audit.jsonl", &lines);
    let output = audit(&log, &["--format", "json"]);
    assert_eq!(ids(&output), [1, 2, 4, 5, 7]);
    let errors = stderr(&output);
    assert!(
        errors.contains("3 lines could not be read (first at line 1: longer than 16777216 bytes)"),
        "{errors}"
    );
}

#[test]
fn audit_finds_the_log_as_serve_does_and_names_where_the_path_came_from() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = dir.path().join("gatehouse.toml");
    std::fs::write(
        &config,
        "[elicitations]\naudit_log = \"logs/decisions.jsonl\"\n",
    )
    .expect("write config");
    let run = |config: &Path| gatehouse(&["audit", "--config", config.to_str().expect("UTF-8")]);
    let output = run(&config);
    assert_eq!(output.status.code(), Some(1), "{output:?}");
    let errors = stderr(&output);
    let expected = dir.path().join("logs/decisions.jsonl");
    assert!(errors.contains(&expected.display().to_string()), "{errors}");
    assert!(
        errors.contains(&format!(
            "from [elicitations] audit_log in {}",
            config.display()
        )),
        "{errors}"
    );
    std::fs::create_dir(dir.path().join("logs")).expect("mkdir");
    write_log(&dir.path().join("logs"), "decisions.jsonl", &fixture());
    let output = run(&config);
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    assert_eq!(stdout(&output).lines().count(), 6);

    // Unset: gatehouse-audit.jsonl beside the config.
    let bare = dir.path().join("bare.toml");
    std::fs::write(&bare, "").expect("write config");
    let output = run(&bare);
    assert_eq!(output.status.code(), Some(1), "{output:?}");
    let errors = stderr(&output);
    assert!(
        errors.contains(
            &dir.path()
                .join("gatehouse-audit.jsonl")
                .display()
                .to_string()
        ),
        "{errors}"
    );
    assert!(errors.contains("audit_log is not set"), "{errors}");

    // --log names its own origin.
    let output = audit(&dir.path().join("missing.jsonl"), &[]);
    assert_eq!(output.status.code(), Some(1), "{output:?}");
    assert!(stderr(&output).contains("given with --log"), "{output:?}");

    // Neither: a usage error.
    assert_eq!(gatehouse(&["audit"]).status.code(), Some(2));
    // Both: a usage error too.
    let both = gatehouse(&[
        "audit",
        "--config",
        config.to_str().expect("UTF-8"),
        "--log",
        "x",
    ]);
    assert_eq!(both.status.code(), Some(2));
}

/// The running `gatehouse audit --follow`, its stdout lines on a channel;
/// killed when dropped.
struct Following {
    child: Child,
    lines: mpsc::Receiver<String>,
}

impl Following {
    fn start(log: &Path) -> Following {
        let mut child = Command::new(env!("CARGO_BIN_EXE_gatehouse"))
            .args(["audit", "--follow", "--format", "json", "--log"])
            .arg(log)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("gatehouse runs");
        let stdout = child.stdout.take().expect("stdout");
        let (send, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if send.send(line).is_err() {
                    break;
                }
            }
        });
        Following { child, lines }
    }

    /// The request ids of the next `n` lines, within 10 s.
    fn next_ids(&self, n: usize) -> Vec<u64> {
        (0..n)
            .map(|_| {
                let line = self
                    .lines
                    .recv_timeout(Duration::from_secs(10))
                    .expect("a line within 10 s");
                let value: Value = serde_json::from_str(&line).expect("JSON");
                value["request_id"].as_u64().expect("an id")
            })
            .collect()
    }

    fn nothing_more(&self) {
        assert!(
            self.lines.recv_timeout(Duration::from_millis(600)).is_err(),
            "nothing else was printed"
        );
    }
}

impl Drop for Following {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn append(path: &Path, text: &str) {
    let mut file = std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .open(path)
        .expect("open the log");
    file.write_all(text.as_bytes()).expect("append");
}

fn simple(id: u64, server: &str) -> String {
    line(&record(
        ago(0),
        server,
        id,
        DecidedBy::Guest,
        "decided by the chain",
        vec![step("guardian", GUARDIAN, "accept")],
        json!({"action": "accept"}),
        10,
    ))
}

#[test]
fn audit_follow_prints_appended_records_and_follows_a_rotated_log() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = write_log(dir.path(), "audit.jsonl", &fixture());
    let following = Following::start(&log);
    assert_eq!(following.next_ids(5), [1, 2, 4, 5, 7]);
    following.nothing_more();

    // Appended, and a record written in two pieces: printed once whole.
    append(&log, &simple(10, "git"));
    assert_eq!(following.next_ids(1), [10]);
    let eleven = simple(11, "git");
    append(&log, &eleven[..25]);
    following.nothing_more();
    append(&log, &eleven[25..]);
    assert_eq!(following.next_ids(1), [11]);

    // Rotated: moved away (gatehouse still writes there until SIGHUP), then a
    // new file at the path.
    let rotated = dir.path().join("audit.jsonl.1");
    std::fs::rename(&log, &rotated).expect("mv");
    append(&rotated, &simple(12, "git"));
    assert_eq!(following.next_ids(1), [12]);
    append(&log, &simple(13, "git"));
    assert_eq!(following.next_ids(1), [13]);
    append(&log, &simple(14, "git"));
    assert_eq!(following.next_ids(1), [14]);

    // Replaced by a rename over it.
    let fresh = dir.path().join("fresh.jsonl");
    append(&fresh, &simple(15, "git"));
    std::fs::rename(&fresh, &log).expect("mv over");
    assert_eq!(following.next_ids(1), [15]);
    following.nothing_more();
}

#[cfg(unix)]
#[test]
fn audit_follow_applies_filters_and_ends_cleanly_on_sigterm() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = write_log(dir.path(), "audit.jsonl", &fixture());
    let mut child = Command::new(env!("CARGO_BIN_EXE_gatehouse"))
        .args(["audit", "--follow", "--server", "docs", "--log"])
        .arg(&log)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("gatehouse runs");
    let stdout = child.stdout.take().expect("stdout");
    let (send, lines) = mpsc::channel();
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = send.send(line);
        }
    });
    let next = || {
        lines
            .recv_timeout(Duration::from_secs(10))
            .expect("a line within 10 s")
    };
    assert!(next().starts_with("time "), "the header");
    let row = next();
    assert!(row.contains("docs") && row.contains(" 2 "), "{row}");
    append(&log, &simple(20, "git"));
    append(&log, &simple(21, "docs"));
    let row = next();
    assert!(row.contains("docs") && row.contains(" 21 "), "{row}");
    let status = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .expect("kill runs");
    assert!(status.success());
    let output = child.wait_with_output().expect("ends");
    reader.join().expect("the reader ends");
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    assert!(lines.try_recv().is_err(), "nothing else printed");
    assert!(
        stderr(&output).contains("2 lines could not be read"),
        "{output:?}"
    );
}
