//! `gatehouse audit`: the audit log read back through the built binary, from
//! a fixture written with the real `AuditRecord`: the table, JSON filtering,
//! stats, escaping of server and guest text, malformed lines, where the path
//! comes from, and `--follow` across appends and rotation.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, SystemTime};

use gatehouse_audit::{AuditRecord, AuditStep, DecidedBy, read};
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
        signed_by: None,
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
        person: None,
        time,
        server: server.to_owned(),
        request_id: json!(id),
        session: Some(1),
        turn: None,
        instance: None,
        client: None,
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

/// The byte at which line `number` (from 1) of the file at `path` starts.
fn byte_of(path: &Path, number: usize) -> usize {
    let bytes = std::fs::read(path).expect("read the log");
    bytes
        .split_inclusive(|byte| *byte == b'\n')
        .take(number - 1)
        .map(<[u8]>::len)
        .sum()
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
        errors.contains(&format!(
            "2 lines could not be read (first at line 3, byte {}: not JSON",
            byte_of(&log, 3)
        )),
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
        errors.contains("1 line could not be read (first at line 1, byte 0: "),
        "{errors}"
    );
}

#[test]
fn audit_json_filters_by_server_decided_by_and_since() {
    let dir = tempfile::tempdir().expect("tempdir");
    // One fixture for the whole test: a second call may fall in the next second.
    let lines = fixture();
    let log = write_log(dir.path(), "audit.jsonl", &lines);
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
    assert_eq!(stdout(&output), lines[1]);

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
        errors.contains(
            "3 lines could not be read (first at line 1, byte 0: longer than 16777216 bytes)"
        ),
        "{errors}"
    );
}

/// A record too long to read (17 MiB, hand-written as gatehouse writes a
/// record: time, server, decided_by and action first) and one cut short
/// are still counted and shown by what their start says: `--stats` counts
/// them (and says how many were recovered and how many lines are
/// unreadable), `--server` and `--format json` show them, marked
/// unreadable; nothing is dropped unseen. (Before, both were only "lines
/// that could not be read".)
#[test]
fn audit_counts_and_shows_what_an_unreadable_line_still_says() {
    let dir = tempfile::tempdir().expect("tempdir");
    let time = read::format_time(SystemTime::now() - Duration::from_secs(60));
    let mut lines = fixture();
    // 17 MiB: an id of C1 controls, each written `\u0085`.
    lines.push(format!(
        r#"{{"time":"{time}","server":"big","decided_by":"person","action":"accept","mode":"form","request_id":"{}","reason":"r","latency_us":1,"answer":{{"action":"accept"}},"steps":[]}}{}"#,
        r"\u0085".repeat((17 << 20) / 6 + 1),
        "\n"
    ));
    // Cut short in its steps.
    lines.push(format!(
        r#"{{"time":"{time}","server":"cut","decided_by":"guest","action":"decline","mode":"form","request_id":12,"reason":"r","latency_us":1,"answer":{{"action":"decline"}},"steps":[{{"modu{}"#,
        "\n"
    ));
    let log = write_log(dir.path(), "audit.jsonl", &lines);

    let output = audit(&log, &["--stats", "--format", "json"]);
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    let stats: Value = serde_json::from_str(&stdout(&output)).expect("JSON");
    assert_eq!(stats["records"], 7, "{stats}");
    assert_eq!(stats["recovered"], 2, "{stats}");
    assert_eq!(stats["unreadable"], 4, "{stats}");
    assert_eq!(stats["servers"]["big"], 1, "{stats}");
    assert_eq!(stats["servers"]["cut"], 1, "{stats}");
    assert_eq!(
        stats["actions"],
        json!({"accept": 3, "decline": 3, "error": 1}),
        "{stats}"
    );
    assert_eq!(stats["decided_by"]["person"], 2, "{stats}");
    let errors = stderr(&output);
    assert!(
        errors.contains(&format!(
            "4 lines could not be read (first at line 3, byte {}: not JSON",
            byte_of(&log, 3)
        )) && errors.contains("; 2 recovered from the start of the line"),
        "{errors}"
    );

    let output = audit(&log, &["--stats"]);
    let text = stdout(&output);
    assert!(
        text.contains("records: 7 (2 recovered from the start of an unreadable line)"),
        "{text}"
    );
    assert!(text.contains("(unreadable)"), "{text}");

    let output = audit(&log, &["--format", "json", "--server", "big"]);
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    let shown: Vec<Value> = stdout(&output)
        .lines()
        .map(|line| serde_json::from_str(line).expect("JSON"))
        .collect();
    assert_eq!(shown.len(), 1, "{shown:?}");
    assert_eq!(shown[0]["action"], "accept");
    assert_eq!(shown[0]["decided_by"], "person");
    assert_eq!(shown[0]["unreadable"]["line"], 8);
    assert_eq!(
        shown[0]["unreadable"]["error"],
        "longer than 16777216 bytes"
    );

    let output = audit(&log, &["--decided-by", "guest"]);
    let text = stdout(&output);
    let row = text
        .lines()
        .find(|row| row.contains("cut"))
        .unwrap_or_else(|| panic!("the cut record is shown: {text}"));
    for part in [
        "12",
        "guest",
        "(unreadable)",
        "decline",
        "line 9 could not be read",
    ] {
        assert!(row.contains(part), "{part:?} in {row}");
    }
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

/// A config with demo-server `git`, the guardian (config `{}`: plain forms
/// are left to the person) and a hostile server `name` run with `args`.
fn config_with_hostile(dir: &Path, name: &str, args: &[&str]) -> PathBuf {
    let config = crate::gateway::config_with(dir, "{}", "");
    let rest = std::fs::read_to_string(&config).expect("read config");
    std::fs::write(
        &config,
        format!(
            "[mcp_servers.{name}]\ncommand = {command:?}\nargs = {args:?}\ntool_timeout_sec = 120\n\n{rest}",
            command = crate::paths::hostile_server().display().to_string(),
        ),
    )
    .expect("write config");
    config
}

/// `gatehouse serve --config config` over stdio with an upstream client
/// that answers every form with `{"name": "Ada"}`; its stderr is counted
/// (and its first 64 KiB kept) by the returned task.
async fn serve_counting_stderr(
    config: &Path,
) -> (
    rmcp::service::RunningService<rmcp::RoleClient, crate::gateway::Client>,
    tokio::task::JoinHandle<(usize, Vec<u8>)>,
) {
    use rmcp::ServiceExt;
    use tokio::io::AsyncReadExt;
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_gatehouse"));
    command.arg("serve").arg("--config").arg(config);
    let (transport, stderr) = rmcp::transport::TokioChildProcess::builder(command)
        .stderr(Stdio::piped())
        .spawn()
        .expect("gatehouse starts");
    let mut stderr = stderr.expect("stderr piped");
    let counted = tokio::spawn(async move {
        let (mut total, mut kept) = (0, Vec::new());
        let mut chunk = vec![0; 64 * 1024];
        while let Ok(n) = stderr.read(&mut chunk).await {
            if n == 0 {
                break;
            }
            total += n;
            let room = (64 * 1024usize).saturating_sub(kept.len());
            kept.extend_from_slice(&chunk[..n.min(room)]);
        }
        (total, kept)
    });
    let client = crate::gateway::Client {
        elicitation: true,
        content: Some(json!({"name": "Ada"})),
        asked: Default::default(),
    };
    let client = tokio::time::timeout(Duration::from_secs(60), client.serve(transport))
        .await
        .expect("initialize in time")
        .expect("initialize");
    (client, counted)
}

/// The report a call of the hostile server's `go` returns.
async fn go(
    client: &rmcp::service::RunningService<rmcp::RoleClient, crate::gateway::Client>,
    tool: &str,
) -> Value {
    let result = client
        .call_tool(crate::gateway::call(tool, json!({})))
        .await
        .expect("go answers");
    let report = crate::tool_result::result_text(&result);
    serde_json::from_str(&report).unwrap_or_else(|error| panic!("{error}: {report:.2000}"))
}

/// A server's request id of 6 MiB of C1 controls (18 MiB once each is
/// written `\u0085`) on an elicitation the person accepts: the record is
/// written with the id cut (its start and the sha256 of the whole), so
/// `gatehouse audit` still counts the accept, and `--server`, `--decided-by`
/// and `--format json` still show it. (Written whole, the line was over the
/// reader's 16 MiB limit: `records: 0`.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_accept_under_a_six_megabyte_id_is_still_counted_and_shown() {
    use sha2::Digest;
    const BYTES: usize = 6 << 20;
    let dir = tempfile::tempdir().expect("tempdir");
    let config = config_with_hostile(
        dir.path(),
        "big",
        &["--mode", "big-id", &BYTES.to_string(), "--name", "big"],
    );
    let (client, stderr) = serve_counting_stderr(&config).await;
    let report = go(&client, "big__go").await;
    assert_eq!(report["kinds"], json!({"accept": 1}), "{report}");
    let _ = client.cancel().await;
    let _ = tokio::time::timeout(Duration::from_secs(30), stderr).await;

    let log = dir.path().join("audit.jsonl");
    // The id the server sent, as the record names it.
    let id = format!("big-{}", "\u{85}".repeat((BYTES - 4) / 2));
    let digest = hex::encode(sha2::Sha256::digest(id.as_bytes()));
    let mark = format!("…[cut: {} bytes, sha256:{digest}]", id.len());

    for filter in [&["--server", "big"][..], &["--decided-by", "person"][..]] {
        let mut args = vec!["--stats", "--format", "json"];
        args.extend_from_slice(filter);
        let output = audit(&log, &args);
        assert_eq!(output.status.code(), Some(0), "{output:?}");
        let stats: Value = serde_json::from_str(&stdout(&output)).expect("JSON");
        assert_eq!(stats["records"], 1, "{filter:?}: {stats}");
        assert_eq!(stats["actions"], json!({"accept": 1}), "{stats}");
        assert_eq!(stats["servers"], json!({"big": 1}), "{stats}");
        assert_eq!(stats["unreadable"], 0, "{stats}");
    }
    let output = audit(&log, &["--stats"]);
    let text = stdout(&output);
    assert!(text.contains("records: 1\n"), "{text}");

    let output = audit(&log, &["--format", "json", "--server", "big"]);
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    let lines: Vec<Value> = stdout(&output)
        .lines()
        .map(|line| serde_json::from_str(line).expect("JSON"))
        .collect();
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert_eq!(lines[0]["answer"]["action"], "accept");
    assert_eq!(lines[0]["decided_by"], "person");
    let recorded = lines[0]["request_id"].as_str().expect("a string id");
    assert!(recorded.starts_with("big-\u{85}"), "{recorded:.80}");
    assert!(recorded.ends_with(&mark), "{recorded}");
    assert!(recorded.chars().count() <= 256, "{}", recorded.len());
    // The table shows it too, escaped.
    let output = audit(&log, &["--server", "big"]);
    let text = stdout(&output);
    assert_eq!(text.lines().count(), 2, "{text}");
    assert!(text.contains(r"big-\u{85}"), "{text:.400}");
    assert!(!text.contains('\u{85}'), "{text:.400}");
    let raw = std::fs::metadata(&log).expect("the audit log").len();
    assert!(
        raw < 64 * 1024,
        "the records carry no megabytes: {raw} bytes"
    );
}

/// Under protocol 2026-07-28 a server may ask only while a request of
/// gatehouse's to it is in flight (SEP-2260). `hostile-server` asks twenty
/// times after its call is over, each time under a 1 MiB id of C1 controls:
/// each request is refused with -32602 under its own id and audited once
/// (decided by policy, the reason naming SEP-2260, the id cut); gatehouse's
/// stderr stays small (the id cut, the warnings within a per-server
/// budget); and the gateway goes on serving. (Refused inside rmcp, they were
/// never audited, and each logged its whole id: 20 MiB, 60 MiB escaped.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unsolicited_requests_are_refused_audited_once_each_and_logged_within_bounds() {
    const COUNT: usize = 20;
    let dir = tempfile::tempdir().expect("tempdir");
    let count = COUNT.to_string();
    let config = config_with_hostile(
        dir.path(),
        "sly",
        &[
            "--mode",
            "unsolicited",
            &count,
            "--id-bytes",
            "1048576",
            "--protocol",
            "2026-07-28",
            "--name",
            "sly",
        ],
    );
    let (client, stderr) = serve_counting_stderr(&config).await;
    let first = go(&client, "sly__go").await;
    assert_eq!(first["mode"], "unsolicited", "{first}");

    // Audited: wait for the lines (up to 20 s; none may come).
    let sly = || -> Vec<Value> {
        crate::gateway::audit(dir.path())
            .into_iter()
            .filter(|line| line["server"] == "sly")
            .collect()
    };
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while sly().len() < COUNT && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // The server got each refusal under its own id, and the gateway still
    // serves it and the others.
    let second = go(&client, "sly__go").await;
    assert_eq!(
        second["unsolicited"],
        json!({"sent": COUNT, "answered": COUNT, "kinds": {"error -32602": COUNT}}),
        "{second:.2000}"
    );
    let echo = client
        .call_tool(crate::gateway::call(
            "git__echo",
            json!({"text": "still here"}),
        ))
        .await
        .expect("echo");
    assert!(crate::tool_result::result_text(&echo).contains("[git] still here"));
    let _ = client.cancel().await;
    let (bytes, kept) = tokio::time::timeout(Duration::from_secs(60), stderr)
        .await
        .expect("gatehouse exits")
        .expect("the stderr reader");
    let kept = String::from_utf8_lossy(&kept);
    eprintln!("gatehouse wrote {bytes} bytes to stderr:\n{kept:.8000}");

    let lines = sly();
    assert!(
        lines.len() == COUNT && bytes < 64 * 1024,
        "{} of {COUNT} unsolicited requests audited; gatehouse wrote {bytes} bytes to stderr",
        lines.len()
    );
    let ids: std::collections::BTreeSet<String> = lines
        .iter()
        .map(|line| line["request_id"].as_str().unwrap_or_default().to_owned())
        .collect();
    assert_eq!(ids.len(), COUNT, "one line per request");
    for line in &lines {
        assert_eq!(line["decided_by"], "policy", "{line:.400}");
        assert_eq!(line["action"], "error", "{line:.400}");
        assert_eq!(line["answer"]["error"]["code"], -32602, "{line:.400}");
        assert!(
            line["reason"]
                .as_str()
                .is_some_and(|reason| reason.contains("SEP-2260")),
            "{line:.400}"
        );
        let id = line["request_id"].as_str().expect("a string id");
        assert!(id.starts_with("u-"), "{id:.40}");
        assert!(id.contains("…[cut: "), "{id:.400}");
        assert!(id.chars().count() <= 256);
    }
    assert!(
        kept.contains("sly"),
        "the refusals are logged: {kept:.4000}"
    );
}
