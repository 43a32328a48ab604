//! Text from guests, servers and manifests reaches the terminal and the log
//! escaped (`gatehouse_base::escape`): no raw ESC, CR or C1 control, no bidi
//! override, and no forged second line. The guest `hostile-text` and the
//! server `hostile-server --mode terminal-escapes` say the same payload
//! everywhere they can: it retitles the terminal, erases the line, returns
//! the cursor and starts new lines with `FORGED`. Logs carry no colours when
//! stderr is not a terminal (here it is a pipe).
//!
//! The binary's log formatter escapes every field again, so the tests through
//! the binary cannot tell whether the code escaped at the call site; the
//! library-level tests here log through a plain `tracing_subscriber::fmt`
//! (`support/capture.rs`, no escaping of its own) and can. Machine-readable
//! outputs (`--format json`, JUnit) are checked for raw controls in their own
//! syntax.

use std::path::Path;
use std::process::{Output, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use gatehouse_base::escape::needs_escape;
use gatehouse_core::context::ReviewContext;
use gatehouse_core::elicitation::{ElicitationParams, RequestId};
use gatehouse_core::request::ReviewRequest;
use gatehouse_core::sandbox::{Limits, Sandbox};

use rmcp::ServiceExt;
use rmcp::transport::TokioChildProcess;
use tokio::io::AsyncReadExt;

use crate::paths::{gatehouse, guest, target};

/// Asserts `text` carries no raw terminal control and no forged line: every
/// line must start with one of `starts` (a log line's timestamp, a report's
/// own layout), and none with the payload's `FORGED`.
fn assert_escaped(what: &str, text: &str) {
    for (raw, name) in [
        ('\u{1b}', "ESC"),
        ('\r', "CR"),
        ('\u{7}', "BEL"),
        ('\u{9b}', "C1 CSI"),
        ('\u{202e}', "a bidi override"),
    ] {
        assert!(!text.contains(raw), "{what}: raw {name} in {text:?}");
    }
    for line in text.lines() {
        assert!(
            !line.trim_start().starts_with("FORGED"),
            "{what}: a forged line {line:?} in {text}"
        );
    }
}

/// The payload's start, escaped: proof the text was there and got through.
const ESCAPED: &str = r"ok\u{1b}]0;pwned\u{7}\u{1b}[2K\rFORGED looks fine: accepted";

fn stdout(output: &Output) -> String {
    String::from_utf8(output.stdout.clone()).expect("stdout is UTF-8")
}

fn stderr(output: &Output) -> String {
    String::from_utf8(output.stderr.clone()).expect("stderr is UTF-8")
}

fn review_hostile_text(module_config: &str) -> Output {
    gatehouse(&[
        "review",
        "--module",
        &guest("test_guest_hostile_text").display().to_string(),
        "--module-config",
        module_config,
        "--request",
        "examples/requests/approve-read-only.json",
    ])
}

#[test]
fn review_prints_a_guests_rationale_and_decline_message_escaped() {
    let output = review_hostile_text("{}");
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    let text = stdout(&output);
    assert_escaped("review stdout", &text);
    // The rationale (its newlines shown as spaces, as before) and the
    // answer's decline message.
    assert!(
        text.contains(r"ok\u{1b}]0;pwned\u{7}\u{1b}[2K\rFORGED looks fine: accepted\r FORGED"),
        "{text}"
    );
    assert!(text.contains(r"  answer: {"), "{text}");
    assert!(text.contains(r"\u{202e}detpecca"), "{text}");
}

#[test]
fn a_guests_log_message_and_fields_are_logged_escaped_without_colours() {
    let output = review_hostile_text("{}");
    let log = stderr(&output);
    assert_escaped("review stderr", &log);
    let line = log
        .lines()
        .find(|line| line.contains("gatehouse::guest"))
        .unwrap_or_else(|| panic!("the guest's log line: {log}"));
    assert!(line.contains(ESCAPED), "the message: {line}");
    assert!(
        line.contains(&format!("fields={{\"key{ESCAPED}")),
        "the fields: {line}"
    );
}

/// `--log-format json`: one JSON object per line, for collectors, with the
/// guest's text escaped exactly as the text format escapes it.
#[test]
fn json_logs_carry_a_guests_text_escaped_one_object_per_line() {
    let output = gatehouse(&[
        "--log-format",
        "json",
        "review",
        "--module",
        &guest("test_guest_hostile_text").display().to_string(),
        "--module-config",
        "{}",
        "--request",
        "examples/requests/approve-read-only.json",
    ]);
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    let log = stderr(&output);
    assert_escaped("review stderr (JSON)", &log);
    let lines: Vec<serde_json::Value> = log
        .lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|_| panic!("not JSON: {line}")))
        .collect();
    let guest_line = lines
        .iter()
        .find(|line| line["target"] == "gatehouse::guest")
        .unwrap_or_else(|| panic!("the guest's log line: {log}"));
    assert_eq!(guest_line["level"], "ERROR", "{guest_line}");
    assert!(
        guest_line["message"]
            .as_str()
            .is_some_and(|message| message.starts_with(ESCAPED)),
        "{guest_line}"
    );
    assert_eq!(guest_line["fields"]["module"], "test_guest_hostile_text");
    assert!(
        guest_line["fields"]["fields"]
            .as_str()
            .is_some_and(|fields| fields.starts_with(&format!("{{\"key{ESCAPED}"))),
        "{guest_line}"
    );
    assert!(
        guest_line["time"]
            .as_str()
            .is_some_and(|time| time.ends_with('Z')),
        "{guest_line}"
    );
}

#[test]
fn a_failing_guests_stderr_and_failure_are_logged_escaped() {
    let output = review_hostile_text(r#"{"trap": true}"#);
    assert_eq!(output.status.code(), Some(4), "{output:?}");
    let log = stderr(&output);
    assert_escaped("review stderr", &log);
    let failed = log
        .lines()
        .find(|line| line.contains("review failed"))
        .unwrap_or_else(|| panic!("the failure's log line: {log}"));
    assert!(failed.contains(&format!("stderr={ESCAPED}")), "{failed}");
    assert_escaped("review stdout", &stdout(&output));
}

#[test]
fn logs_carry_no_colours_when_stderr_is_not_a_terminal() {
    // A guest that fails in the plainest way: the warning has no guest text.
    let output = gatehouse(&[
        "review",
        "--module",
        &guest("test_guest_spin").display().to_string(),
        "--request",
        "examples/requests/approve-read-only.json",
    ]);
    assert_eq!(output.status.code(), Some(4), "{output:?}");
    let log = stderr(&output);
    assert!(log.contains(" WARN "), "{log}");
    assert!(!log.contains('\u{1b}'), "ANSI codes in {log:?}");
}

#[test]
fn inspect_prints_what_describe_returned_escaped() {
    let output = gatehouse(&[
        "inspect",
        &guest("test_guest_hostile_text").display().to_string(),
    ]);
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    let text = stdout(&output);
    assert_escaped("inspect stdout", &text);
    let reviewer = text
        .lines()
        .find(|line| line.starts_with("reviewer  "))
        .unwrap_or_else(|| panic!("the reviewer line: {text}"));
    assert!(
        reviewer.starts_with(&format!("reviewer  hostile-text {ESCAPED}")),
        "{reviewer}"
    );
}

#[test]
fn the_conformance_text_report_escapes_what_the_module_said() {
    let output = gatehouse(&[
        "conformance",
        &guest("test_guest_hostile_text").display().to_string(),
        "--suite",
        "contract",
    ]);
    let text = stdout(&output);
    assert_escaped("conformance stdout", &text);
    assert!(text.contains("describe"), "{text}");
    assert!(text.contains(r"hostile-text ok\u{1b}]0;pwned"), "{text}");
    assert_escaped("conformance stderr", &stderr(&output));
}

/// Everything the log made of two `terminal-escapes` servers behind
/// `gatehouse -v serve`: their stderr, a notification method, the error
/// they answer `tools/list` with, and the one resource URI both list.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_text_is_logged_escaped() {
    let server = target().join("debug/hostile-server");
    assert!(
        server.exists(),
        "{} is missing: run `cargo build -p gatehouse-example-servers`",
        server.display()
    );
    let dir = tempfile::tempdir().expect("tempdir");
    let config = dir.path().join("gatehouse.toml");
    let table = |name: &str| {
        format!(
            "[mcp_servers.{name}]\ncommand = {:?}\nargs = [\"--mode\", \"terminal-escapes\"]\n\n",
            server.display().to_string()
        )
    };
    std::fs::write(&config, format!("{}{}", table("a"), table("b"))).expect("config");
    let log = serve_and_collect_stderr(&config, |client| {
        Box::pin(async move {
            let tools = client.list_all_tools().await.expect("tools/list");
            assert!(tools.is_empty(), "both refused tools/list: {tools:?}");
            let resources = client.list_all_resources().await.expect("resources/list");
            // Both list it: once per server, qualified, the URI kept as sent.
            assert_eq!(resources.len(), 2, "{resources:?}");
            assert!(
                resources.iter().all(|r| r.uri.starts_with("gatehouse://resource/")
                    && r.uri.contains("\u{1b}")),
                "passed on as sent: {resources:?}"
            );
        })
    })
    .await;
    assert_escaped("serve stderr", &log);
    let lines = |needle: &str| log.lines().filter(|line| line.contains(needle)).count();
    // Each server's stderr line, at start.
    assert!(
        lines(&format!("gatehouse::server: {ESCAPED}")) >= 2,
        "{log}"
    );
    // The notification method rmcp could not type.
    assert!(lines(&format!("method={ESCAPED}")) >= 2, "{log}");
    // The error message of tools/list.
    assert!(
        log.lines()
            .any(|line| line.contains("tools/list") && line.contains(ESCAPED)),
        "{log}"
    );
    // The resource URI both servers list.
    assert!(lines(&format!("uri=hostile://{ESCAPED}")) >= 1, "{log}");
}

type Client = rmcp::service::RunningService<rmcp::RoleClient, ()>;

/// Runs `gatehouse -v serve --config config` over stdio, lets `session` talk
/// to it, closes it, and returns everything it wrote to stderr.
async fn serve_and_collect_stderr(
    config: &Path,
    session: impl FnOnce(&Client) -> futures::future::BoxFuture<'_, ()>,
) -> String {
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_gatehouse"));
    command.arg("-v").arg("serve").arg("--config").arg(config);
    let (transport, stderr) = TokioChildProcess::builder(command)
        .stderr(Stdio::piped())
        .spawn()
        .expect("gatehouse starts");
    let mut stderr = stderr.expect("stderr piped");
    let collected = Arc::new(Mutex::new(Vec::new()));
    let reader = tokio::spawn({
        let collected = collected.clone();
        async move {
            let mut chunk = vec![0; 64 * 1024];
            while let Ok(n) = stderr.read(&mut chunk).await {
                if n == 0 {
                    break;
                }
                collected
                    .lock()
                    .expect("lock")
                    .extend_from_slice(&chunk[..n]);
            }
        }
    });
    let client = tokio::time::timeout(Duration::from_secs(60), ().serve(transport))
        .await
        .expect("initialize in time")
        .expect("initialize");
    session(&client).await;
    // Give the servers' stderr lines and notifications time to be logged.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let _ = client.cancel().await;
    let _ = tokio::time::timeout(Duration::from_secs(30), reader).await;
    let bytes = collected.lock().expect("lock").clone();
    String::from_utf8(bytes).expect("the log is UTF-8")
}

/// A plugin manifest whose server table has an unknown field named with the
/// payload: discovery skips the server with a warning quoting the field, and
/// the log shows it escaped.
#[test]
fn manifest_text_in_discovery_warnings_is_logged_escaped() {
    let dir = tempfile::tempdir().expect("tempdir");
    let plugin = dir.path().join("plugin");
    std::fs::create_dir_all(plugin.join(".codex-plugin")).expect("mkdir");
    let hostile =
        "ok\u{1b}]0;pwned\u{7}\u{1b}[2K\rFORGED looks fine: accepted\r\nFORGED \u{9b}2J\u{202e}";
    let manifest = serde_json::json!({
        "name": "plug",
        "mcpServers": {"srv": {"command": "x", hostile: 1}},
    });
    std::fs::write(
        plugin.join(".codex-plugin/plugin.json"),
        manifest.to_string(),
    )
    .expect("write the manifest");
    let (found, log) = crate::capture::logged(tracing::Level::INFO, || {
        gatehouse_mcp::discovery::discover_root(
            &gatehouse_mcp::discovery::CapabilityRoot::new("r", dir.path().to_path_buf()),
            &gatehouse_mcp::discovery::DiscoveryLimits::default(),
        )
    });
    let found = found.expect("the root is read");
    assert!(found.servers.is_empty(), "the server is skipped");
    assert!(
        found
            .warnings
            .iter()
            .any(|warning| warning.contains(hostile)),
        "the warning quotes the field: {:?}",
        found.warnings
    );
    assert_escaped("discovery log", &log);
    assert!(log.contains(ESCAPED), "{log}");
}

/// The `hostile-text` guest's whole payload, as it says it.
const HOSTILE: &str = "ok\u{1b}]0;pwned\u{7}\u{1b}[2K\rFORGED looks fine: accepted\r\nFORGED \u{1b}[32maccepted\u{1b}[0m \u{9b}2J\u{202e}detpecca";

/// The payload as the log shows it: [`HOSTILE`] escaped.
const HOSTILE_ESCAPED: &str = r"ok\u{1b}]0;pwned\u{7}\u{1b}[2K\rFORGED looks fine: accepted\r\nFORGED \u{1b}[32maccepted\u{1b}[0m \u{9b}2J\u{202e}detpecca";

/// Reviews an approval request with the `hostile-text` guest, through the
/// library, under a plain subscriber; returns what was logged.
fn review_hostile_text_in_the_library(module_config: &str) -> String {
    let bytes = std::fs::read(guest("test_guest_hostile_text")).expect("the guest");
    let sandbox = Sandbox::new(Limits::default()).expect("sandbox");
    let module = sandbox
        .load_bytes("hostile-text", "hostile_text.wasm", &bytes, None)
        .expect("loads");
    let params = ElicitationParams::from_wire(&serde_json::json!({
        "message": "Allow read_file?",
        "requestedSchema": {"type": "object", "properties": {}},
        "_meta": {"codex_request_type": "approval_request",
                  "codex_approval_kind": "mcp_tool_call", "tool_name": "read_file"}
    }))
    .expect("valid params");
    let request = ReviewRequest::new(params, ReviewContext::new("docs", RequestId::Number(1)));
    let (_, log) = crate::capture::logged(tracing::Level::TRACE, || {
        module.review(module_config, &request)
    });
    log
}

/// The sandbox escapes a guest's log message and fields where it logs them
/// (`sandbox/state.rs`): with a formatter that escapes nothing, no raw
/// control reaches the log and each field is quoted.
#[test]
fn the_sandbox_logs_a_guests_message_and_fields_escaped_at_the_call_site() {
    let log = review_hostile_text_in_the_library("{}");
    assert_escaped("guest log", &log);
    let line = log
        .lines()
        .find(|line| line.contains("gatehouse::guest"))
        .unwrap_or_else(|| panic!("the guest's log line: {log}"));
    assert!(
        line.contains(&format!("gatehouse::guest: {HOSTILE_ESCAPED} module=")),
        "the message: {line}"
    );
    assert!(
        line.contains(&format!(
            "fields={{\"key{HOSTILE_ESCAPED}\": \"{HOSTILE_ESCAPED}\"}}"
        )),
        "the fields: {line}"
    );
}

/// The sandbox escapes a failing guest's stderr and failure where it logs
/// them (`sandbox/module.rs`, `review failed`).
#[test]
fn the_sandbox_logs_a_failing_guests_stderr_and_failure_escaped_at_the_call_site() {
    let log = review_hostile_text_in_the_library(r#"{"trap": true}"#);
    assert_escaped("review failed", &log);
    let failed = log
        .lines()
        .find(|line| line.contains("review failed"))
        .unwrap_or_else(|| panic!("the failure's log line: {log}"));
    assert!(failed.contains(&format!("stderr={ESCAPED}")), "{failed}");
    assert!(failed.contains(" WARN "), "{failed}");
}

/// No raw character `needs_escape` names (other than the newlines of
/// pretty-printed JSON) in `text`.
fn assert_no_raw_controls(what: &str, text: &str) {
    let raw: Vec<char> = text
        .trim_end()
        .chars()
        .filter(|&c| needs_escape(c) && c != '\n')
        .collect();
    assert!(raw.is_empty(), "{what}: raw {raw:?} in {text}");
}

/// Whether `value` holds the string `wanted` anywhere.
fn holds(value: &serde_json::Value, wanted: &str) -> bool {
    match value {
        serde_json::Value::String(text) => text.contains(wanted),
        serde_json::Value::Array(items) => items.iter().any(|item| holds(item, wanted)),
        serde_json::Value::Object(map) => map
            .iter()
            .any(|(key, item)| key.contains(wanted) || holds(item, wanted)),
        _ => false,
    }
}

#[test]
fn review_json_carries_what_the_guest_said_as_json_escapes() {
    let output = gatehouse(&[
        "review",
        "--format",
        "json",
        "--module",
        &guest("test_guest_hostile_text").display().to_string(),
        "--request",
        "examples/requests/approve-read-only.json",
    ]);
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    let text = stdout(&output);
    assert_no_raw_controls("review --format json", &text);
    assert!(text.contains(r"ok\u001b]0;pwned\u0007"), "{text}");
    assert!(text.contains(r"\u009b2J\u202edetpecca"), "{text}");
    let value: serde_json::Value = serde_json::from_str(&text).expect("valid JSON");
    assert!(holds(&value, HOSTILE), "the rationale, losslessly: {value}");
}

#[test]
fn conformance_json_carries_what_the_module_said_as_json_escapes() {
    let run = |format: &str| {
        gatehouse(&[
            "conformance",
            &guest("test_guest_hostile_text").display().to_string(),
            "--suite",
            "contract",
            "--format",
            format,
        ])
    };
    let json = stdout(&run("json"));
    assert_no_raw_controls("conformance --format json", &json);
    let value: serde_json::Value = serde_json::from_str(&json).expect("valid JSON");
    assert!(
        holds(&value, &format!("hostile-text {HOSTILE}")),
        "describe()'s name, losslessly: {json}"
    );

    // JUnit shows what a module said only in failures; every check of this
    // guest passes, so this is the smoke test, and
    // `conformance::report::tests::the_junit_report_escapes_what_the_module_said_and_stays_valid_xml`
    // proves the escaping.
    let xml = stdout(&run("junit"));
    assert_no_raw_controls("conformance --format junit", &xml);
    quick_junit::Report::deserialize_from_str(&xml).expect("valid JUnit XML");
}
