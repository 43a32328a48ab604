//! The binary as a host runs it: one request on stdin, one verdict on stdout.
//! (Being an integration test also makes `cargo test --workspace` build the
//! binary that `host/cli/tests/all/cli.rs` benchmarks against.)

use std::io::Write;
use std::process::{Command, Output, Stdio};

use serde_json::{Value, json};

fn hook(stdin: &str) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_gatehouse-process-hook"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the hook starts");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(stdin.as_bytes())
        .expect("write stdin");
    child.wait_with_output().expect("the hook exits")
}

fn request(config: Value) -> String {
    json!({
        "config": config,
        "request": {
            "elicitation": {"mode": "form", "message": "Allow read_file?",
                            "requested_schema": {"type": "object", "properties": {}}},
            "meta": {"codex_request_type": "approval_request",
                     "codex_approval_kind": "mcp_tool_call", "tool_name": "read_file"},
            "context": {
                "server_name": "docs", "request_id": 1, "protocol_version": "2025-11-25",
                "approval_policy": "on-request", "approvals_reviewer": "auto_review",
                "auto_approve_prompts": false, "session_id": null, "turn_id": null,
                "catalog": "unavailable"
            }
        }
    })
    .to_string()
}

fn verdict(output: &Output) -> Value {
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    let text = String::from_utf8_lossy(&output.stdout);
    assert_eq!(text.lines().count(), 1, "{text}");
    serde_json::from_str(&text).expect("a JSON verdict")
}

#[test]
fn prints_one_verdict_line_per_request() {
    let accepted = verdict(&hook(&request(
        json!({"allow": [{"server": "docs", "tool": "read_*"}]}),
    )));
    assert_eq!(
        accepted["decision"],
        json!({"action": "accept", "content": {}})
    );
    assert_eq!(accepted["risk"], "low");

    let declined = verdict(&hook(&request(json!({}))));
    assert_eq!(declined["decision"]["action"], "decline");
    assert!(
        declined["decision"]["message"]
            .as_str()
            .is_some_and(|message| message.starts_with("This action was rejected")),
        "{declined}"
    );
}

#[test]
fn refuses_what_is_not_a_request_with_exit_2() {
    let output = hook("{\"request\": 1}");
    assert_eq!(output.status.code(), Some(2));
    assert!(output.stdout.is_empty());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("not a review request"), "{stderr}");
}
