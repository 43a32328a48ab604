//! `gatehouse review` and `gatehouse conformance` with a model-reviewer
//! (contract 0.2): scripted models that never leave the process, a
//! configured `[models.NAME]` reached over HTTP (the loopback stub of
//! `tests/support/model_stub.rs`), the related
//! call, the model calls in the report, and the refusal of a model-reviewer
//! granted no model.

use std::process::Output;

use serde_json::{Value, json};

use crate::model_stub::{ModelStub, STUB_COMPLETION_TOKENS, STUB_MODEL, STUB_PROMPT_TOKENS, Step};
use crate::paths::{gatehouse, guest};

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

fn json_lines(output: &Output) -> Vec<Value> {
    stdout(output)
        .lines()
        .map(|line| serde_json::from_str(line).expect("each line is JSON"))
        .collect()
}

fn probe() -> String {
    guest("test_guest_model_probe").display().to_string()
}

/// The probe asks its model once; an answer containing "allow" accepts,
/// another declines with `model said: TEXT`, an error with
/// `model error: CODE`.
const ASK: &str = r#"{"ask": true}"#;

const REQUEST: &str = "examples/requests/deny-drop-table.json";

const RELATED: &str = r#"{"session_id": "s1", "kind": "tool-call", "qualified_name": "db__drop_table", "name": "drop_table", "arguments": {"table": "users"}, "id": "7"}"#;

fn review(extra: &[&str]) -> Output {
    let probe = probe();
    let mut args = vec![
        "review",
        "--module",
        &probe,
        "--module-config",
        ASK,
        "--request",
        REQUEST,
    ];
    args.extend_from_slice(extra);
    gatehouse(&args)
}

#[test]
fn a_stub_model_decides_and_every_call_is_shown_without_the_prompt() {
    let output = review(&[
        "--model",
        "stub:deny",
        "--related-call",
        RELATED,
        "--format",
        "json",
    ]);
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    let lines = json_lines(&output);
    assert_eq!(lines.len(), 1);
    let line = &lines[0];
    assert_eq!(line["answer"]["action"], "decline");
    let message = line["answer"]["_meta"]["message"]
        .as_str()
        .expect("message");
    assert!(message.starts_with("model said: "), "{message}");
    assert!(message.contains(r#""outcome":"deny""#), "{message}");
    let calls = line["steps"][0]["model_calls"].as_array().expect("calls");
    assert_eq!(calls.len(), 1, "{line:#}");
    let call = &calls[0];
    assert_eq!(call["grant"], "stub:deny");
    assert_eq!(call["model"], "gatehouse-scripted");
    assert_eq!(call["attempts"], 1);
    assert!(call["answer"].as_str().is_some_and(|a| a.contains("deny")));
    assert!(call.get("error").is_none() && call.get("prompt").is_none());
    assert!(call["latency_us"].is_u64());
    // The related call reached the guest, and the report says what it was.
    let rationale = line["steps"][0]["result"]["outcome"]["rationale"]
        .as_str()
        .expect("rationale");
    assert_eq!(
        rationale,
        r#"related=tool-call db__drop_table drop_table {"table":"users"} session=s1 id=7"#
    );
    assert_eq!(line["related_call"]["name"], "drop_table");

    let output = review(&["--model", "stub:deny", "--related-call", RELATED]);
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    let text = stdout(&output);
    assert!(
        text.contains("related call: tool-call db__drop_table (drop_table), session s1, id 7"),
        "{text}"
    );
    assert!(
        text.contains("model call 1: grant stub:deny (gatehouse-scripted), 1 attempt"),
        "{text}"
    );
    assert!(text.contains(r#"answer {"outcome":"deny""#), "{text}");
}

#[test]
fn every_failing_stub_is_declined_and_named() {
    for (stub, code) in [
        ("error", "transient"),
        ("timeout", "timeout"),
        ("rejected", "rejected"),
        ("rate-limited", "rate-limited"),
        ("cancelled", "cancelled"),
    ] {
        let output = review(&["--model", &format!("stub:{stub}"), "--format", "json"]);
        assert_eq!(output.status.code(), Some(0), "{stub}: {output:?}");
        let line = &json_lines(&output)[0];
        assert_eq!(line["answer"]["action"], "decline", "{stub}");
        assert!(
            line["answer"]["_meta"]["message"]
                .as_str()
                .is_some_and(|message| message.starts_with(&format!("model error: {code}"))),
            "{stub}: {line:#}"
        );
        assert_eq!(line["steps"][0]["model_calls"][0]["error"], code, "{stub}");
    }
    let output = review(&["--model", "stub:allow", "--format", "json"]);
    assert_eq!(json_lines(&output)[0]["answer"]["action"], "accept");
}

#[test]
fn a_script_starts_over_for_every_request() {
    let dir = tempfile::tempdir().expect("tempdir");
    let script = dir.path().join("script.json");
    std::fs::write(
        &script,
        json!([{"error": "rate-limited"}, {"answer": "allow"}]).to_string(),
    )
    .expect("write");
    let spec = format!("script:{}", script.display());
    let output = review(&["--model", &spec, "--request", REQUEST, "--format", "json"]);
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    let lines = json_lines(&output);
    assert_eq!(lines.len(), 2);
    for line in &lines {
        // The probe asks once: each review sees the script's first step.
        assert_eq!(line["steps"][0]["model_calls"][0]["error"], "rate-limited");
        assert_eq!(line["steps"][0]["model_calls"][0]["grant"], spec.as_str());
        assert_eq!(line["answer"]["action"], "decline");
    }

    std::fs::write(&script, "[]").expect("write");
    let output = review(&["--model", &spec]);
    assert_eq!(output.status.code(), Some(1));
    assert!(stderr(&output).contains("at least one step"), "{output:?}");
    let output = review(&["--model", "stub:maybe"]);
    assert_eq!(output.status.code(), Some(1));
    assert!(stderr(&output).contains("stub:allow|deny"), "{output:?}");
}

#[test]
fn the_related_call_comes_from_the_context_file_and_bad_ones_are_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let context = dir.path().join("context.json");
    std::fs::write(
        &context,
        json!({
            "server_name": "db",
            "related_call": {"session_id": "9", "kind": "resource-read",
                             "qualified_name": "db__file:///x", "name": "file:///x"}
        })
        .to_string(),
    )
    .expect("write");
    let probe = probe();
    let args = [
        "review",
        "--module",
        &probe,
        "--model",
        "stub:deny",
        "--context",
        context.to_str().unwrap(),
        "--request",
        REQUEST,
        "--format",
        "json",
    ];
    let output = gatehouse(&args);
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    let line = &json_lines(&output)[0];
    // Without "ask", the probe declines with the related call.
    assert_eq!(
        line["answer"]["_meta"]["message"],
        "related=resource-read db__file:///x file:///x - session=9 id=-"
    );

    let output = review(&[
        "--model",
        "stub:deny",
        "--related-call",
        r#"{"session_id": "1", "kind": "tool-call"}"#,
    ]);
    assert_eq!(output.status.code(), Some(1));
    let text = stderr(&output);
    assert!(
        text.contains("--related-call: not a related call") && text.contains("qualified_name"),
        "{text}"
    );
}

fn write_config(dir: &tempfile::TempDir, modules: &str, models: &str) -> String {
    let path = dir.path().join("gatehouse.toml");
    std::fs::write(&path, format!("{modules}\n{models}")).expect("write");
    path.display().to_string()
}

fn probe_entry(model: Option<&str>) -> String {
    let mut entry = format!(
        "[[review.modules]]\npath = {:?}\nconfig = {{ ask = true }}\n",
        probe()
    );
    if let Some(model) = model {
        entry.push_str(&format!("model = {model:?}\n"));
    }
    entry
}

#[test]
fn a_config_model_reviewer_granted_no_model_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = write_config(&dir, &probe_entry(None), "");
    for extra in [&[][..], &["--model", "stub:allow"][..]] {
        let mut args = vec!["review", "--config", &config, "--request", REQUEST];
        args.extend_from_slice(extra);
        let output = gatehouse(&args);
        assert_eq!(output.status.code(), Some(1), "{output:?}");
        let text = stderr(&output);
        assert!(
            text.contains("review.modules[0]")
                && text.contains("imports `gatehouse:reviewer/model`")
                && text.contains("is granted no model"),
            "{text}"
        );
    }
    // A grant of a model that is not defined names the ones that are.
    let config = write_config(
        &dir,
        &probe_entry(Some("missing")),
        "[models.local]\nendpoint = \"http://127.0.0.1:9/v1\"\nmodel = \"m\"\n",
    );
    let output = gatehouse(&["review", "--config", &config, "--request", REQUEST]);
    assert_eq!(output.status.code(), Some(1), "{output:?}");
    let text = stderr(&output);
    assert!(
        text.contains("`missing`, which is not defined") && text.contains("defined: local"),
        "{text}"
    );
}

#[test]
fn a_stub_replaces_the_configured_model_and_nothing_is_sent() {
    // Port 9 (discard) on loopback: nothing listens, and nothing is asked.
    let dir = tempfile::tempdir().expect("tempdir");
    let config = write_config(
        &dir,
        &probe_entry(Some("review")),
        "[models.review]\nendpoint = \"http://127.0.0.1:9/v1\"\nmodel = \"m\"\napi_key_env_var = \"GATEHOUSE_TEST_UNSET_KEY\"\n",
    );
    let output = gatehouse(&[
        "review",
        "--config",
        &config,
        "--model",
        "stub:allow",
        "--request",
        REQUEST,
        "--format",
        "json",
    ]);
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    let line = &json_lines(&output)[0];
    assert_eq!(line["answer"]["action"], "accept");
    assert_eq!(line["steps"][0]["model_calls"][0]["grant"], "stub:allow");

    // Without --model the configured one is built, and its key is missing.
    let output = gatehouse(&["review", "--config", &config, "--request", REQUEST]);
    assert_eq!(output.status.code(), Some(1), "{output:?}");
    assert!(
        stderr(&output).contains("GATEHOUSE_TEST_UNSET_KEY"),
        "{output:?}"
    );
}

#[test]
fn a_configured_model_is_asked_over_http_and_its_call_reported() {
    // The probe accepts an answer that contains "allow".
    let stub = ModelStub::with_default(Vec::new(), Step::verdict("allow"));
    let endpoint = stub.base_url();
    let dir = tempfile::tempdir().expect("tempdir");
    let config = write_config(
        &dir,
        &probe_entry(Some("review")),
        &format!(
            "[models.review]\nendpoint = {endpoint:?}\nmodel = \"stub-model\"\ntimeout_sec = 20\naudit_prompts = true\n"
        ),
    );
    for model in [None, Some("review")] {
        let mut args = vec![
            "review",
            "--config",
            &config,
            "--request",
            REQUEST,
            "--related-call",
            RELATED,
            "--format",
            "json",
        ];
        if let Some(model) = model {
            args.extend(["--model", model]);
        }
        let output = gatehouse(&args);
        assert_eq!(output.status.code(), Some(0), "{output:?}");
        let line = &json_lines(&output)[0];
        assert_eq!(line["answer"]["action"], "accept", "{line:#}");
        let call = &line["steps"][0]["model_calls"][0];
        assert_eq!(call["grant"], "review");
        assert_eq!(call["model"], STUB_MODEL);
        assert_eq!(call["input_tokens"], STUB_PROMPT_TOKENS);
        assert_eq!(call["output_tokens"], STUB_COMPLETION_TOKENS);
        assert_eq!(call["attempts"], 1);
        // The grant keeps prompts for the audit; the report never shows them.
        assert!(call.get("prompt").is_none(), "{call:#}");
        assert!(call["prompt_sha256"].is_string());
    }
    let seen: Vec<Value> = stub
        .requests()
        .iter()
        .map(|request| request.json())
        .collect();
    assert_eq!(seen.len(), 2);
    assert_eq!(seen[0]["model"], "stub-model");
    assert!(
        seen[0]["messages"][1]["content"]
            .as_str()
            .is_some_and(|content| content.contains("db__drop_table")),
        "{:#}",
        seen[0]
    );

    let output = gatehouse(&[
        "review",
        "--config",
        &config,
        "--model",
        "other",
        "--request",
        REQUEST,
    ]);
    assert_eq!(output.status.code(), Some(1));
    let text = stderr(&output);
    assert!(
        text.contains("--model other") && text.contains("defined: review"),
        "{text}"
    );
}

#[test]
fn conformance_runs_the_model_suite_for_a_model_reviewer() {
    let probe = probe();
    let output = gatehouse(&[
        "conformance",
        &probe,
        "--module-config",
        ASK,
        "--format",
        "json",
    ]);
    assert_eq!(output.status.code(), Some(0), "{}", stdout(&output));
    let report: Value = serde_json::from_slice(&output.stdout).expect("JSON");
    let model_rows: Vec<&Value> = report["results"]
        .as_array()
        .expect("results")
        .iter()
        .filter(|row| row["suite"] == "model")
        .collect();
    assert!(model_rows.len() >= 8, "{report:#}");
    assert!(
        model_rows.iter().any(
            |row| row["case"] == "the model times out: fails closed" && row["got"] == "decline"
        )
    );

    // A module that keeps asking fails the call limit.
    let output = gatehouse(&[
        "conformance",
        &probe,
        "--suite",
        "model",
        "--module-config",
        r#"{"ask": true, "loop": true}"#,
    ]);
    assert_eq!(output.status.code(), Some(2), "{}", stdout(&output));
    assert!(
        stdout(&output).contains("FAIL model / asks its model at most 8 times per review"),
        "{}",
        stdout(&output)
    );

    // The kit's model: accepted under allow, declined under the default.
    for (model, code) in [(Some("stub:allow"), 0), (None, 2)] {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(
            dir.path().join("mine.json"),
            json!([{
                "name": "my tool is approved when the model allows",
                "request": {"message": "?", "requestedSchema": {"type": "object", "properties": {}}},
                "context": {"server_name": "mine", "request_id": 1},
                "config": {"ask": true},
                "expect": {"decision": "accept"}
            }])
            .to_string(),
        )
        .expect("write");
        let mut args = vec![
            "conformance",
            &probe,
            "--suite",
            "contract",
            "--cases",
            dir.path().to_str().unwrap(),
        ];
        if let Some(model) = model {
            args.extend(["--model", model]);
        }
        let output = gatehouse(&args);
        assert_eq!(output.status.code(), Some(code), "{}", stdout(&output));
    }

    let guardian = guest("gatehouse_guardian");
    let output = gatehouse(&[
        "conformance",
        guardian.to_str().unwrap(),
        "--suite",
        "model",
    ]);
    assert_eq!(output.status.code(), Some(2));
    assert!(
        stdout(&output).contains("FAIL model / is a model-reviewer"),
        "{}",
        stdout(&output)
    );
    let output = gatehouse(&["conformance", &probe, "--model", "openai"]);
    assert_eq!(output.status.code(), Some(1));
    assert!(stderr(&output).contains("stub:allow|deny"), "{output:?}");
}
