//! `gatehouse-embed` run as an embedder's users would run it: the built
//! guardian, the sample requests of `examples/requests/`, real decisions.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The workspace root.
fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The guardian built by `.ci/build-guests`.
fn guardian() -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map_or_else(|| workspace().join("target"), PathBuf::from);
    let path = target.join("wasm32-wasip2/guest/gatehouse_guardian.wasm");
    assert!(
        path.exists(),
        "{} is missing: build the guests first with `.ci/build-guests`",
        path.display()
    );
    path
}

fn embed(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_gatehouse-embed"))
        .current_dir(workspace())
        .arg(guardian())
        .args(args)
        .output()
        .expect("gatehouse-embed runs")
}

/// The value of the `label:` line of the output.
fn line<'a>(stdout: &'a str, label: &str) -> &'a str {
    stdout
        .lines()
        .find_map(|line| line.strip_prefix(label)?.strip_prefix(':'))
        .map(str::trim)
        .unwrap_or_else(|| panic!("no `{label}:` line in:\n{stdout}"))
}

const ALLOW_DOCS_READS: &str = r#"{"allow": [{"server": "docs", "tool": "read_*"}]}"#;

#[test]
fn the_guardian_declines_a_destructive_call() {
    let output = embed(&[
        "examples/requests/deny-destructive.json",
        "--server",
        "docs",
        "--config",
        ALLOW_DOCS_READS,
    ]);
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{output:?}");
    assert_eq!(line(&stdout, "decision"), "decline");
    assert_eq!(line(&stdout, "module"), "gatehouse_guardian");
    assert!(
        line(&stdout, "rationale").contains("delete_branch"),
        "{stdout}"
    );
    let answer: serde_json::Value =
        serde_json::from_str(line(&stdout, "answer")).expect("the answer is JSON");
    assert_eq!(answer["action"], "decline");
    assert_eq!(answer["_meta"]["approvals_reviewer"], "auto_review");
}

#[test]
fn the_guardian_accepts_an_allowed_read_given_on_stdin() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_gatehouse-embed"))
        .current_dir(workspace())
        .arg(guardian())
        .args(["--server", "docs", "--config", ALLOW_DOCS_READS])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("gatehouse-embed starts");
    let request = std::fs::read(workspace().join("examples/requests/approve-read-only.json"))
        .expect("the sample request");
    std::io::Write::write_all(&mut child.stdin.take().expect("stdin"), &request)
        .expect("the request is written");
    let output = child.wait_with_output().expect("gatehouse-embed ends");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{output:?}");
    assert_eq!(line(&stdout, "decision"), "accept");
    assert_eq!(line(&stdout, "risk"), "low");
    let answer: serde_json::Value =
        serde_json::from_str(line(&stdout, "answer")).expect("the answer is JSON");
    assert_eq!(
        answer,
        serde_json::json!({"action": "accept", "content": {},
                           "_meta": {"approvals_reviewer": "auto_review"}})
    );
}

#[test]
fn errors_name_the_file_and_exit_non_zero() {
    let output = embed(&["examples/requests/no-such-request.json"]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{output:?}");
    assert!(
        stderr.contains("no-such-request.json: cannot read the request"),
        "{stderr}"
    );
    assert!(output.stdout.is_empty(), "{output:?}");

    let output = embed(&["--config", "{not json"]);
    assert_eq!(output.status.code(), Some(2), "{output:?}");
    assert!(String::from_utf8_lossy(&output.stderr).contains("--config is not valid JSON"));
}
