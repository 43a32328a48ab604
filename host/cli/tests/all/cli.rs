//! The `gatehouse` binary: `review` and `inspect` on real guest components,
//! standard wire formats in and out, exit codes that tell what happened.

use std::path::PathBuf;
use std::process::{Command, Output};

use serde_json::{Value, json};

use crate::paths::{demo_server, existing, gatehouse, guest, root, target};

fn json_lines(output: &Output) -> Vec<Value> {
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .map(|line| serde_json::from_str(line).expect("each line is JSON"))
        .collect()
}

fn write(dir: &tempfile::TempDir, name: &str, value: &Value) -> String {
    let path = dir.path().join(name);
    std::fs::write(&path, value.to_string()).expect("write");
    path.display().to_string()
}

#[test]
fn review_prints_the_wire_answer_and_exits_0_when_decided() {
    let guardian = guest("gatehouse_guardian");
    let output = gatehouse(&[
        "review",
        "--module",
        guardian.to_str().unwrap(),
        "--module-config",
        r#"{"allow":[{"server":"docs","tool":"read_*"}]}"#,
        "--server",
        "docs",
        "--request",
        "examples/requests/approve-read-only.json",
        "--format",
        "json",
    ]);
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    let lines = json_lines(&output);
    assert_eq!(lines.len(), 1);
    assert_eq!(
        lines[0]["answer"],
        json!({"action": "accept", "content": {}, "_meta": {"approvals_reviewer": "auto_review"}})
    );
    assert_eq!(lines[0]["steps"][0]["result"]["outcome"]["risk"], "low");
}

#[test]
fn review_exits_3_when_every_module_defers() {
    let guardian = guest("gatehouse_guardian");
    let output = gatehouse(&[
        "review",
        "--module",
        guardian.to_str().unwrap(),
        "--request",
        "examples/requests/person-form.json",
        "--format",
        "json",
    ]);
    assert_eq!(output.status.code(), Some(3), "{output:?}");
    assert_eq!(json_lines(&output)[0]["answer"], Value::Null);
}

#[test]
fn review_exits_4_and_declines_when_a_module_fails() {
    let spin = guest("test_guest_spin");
    let output = gatehouse(&[
        "review",
        "--module",
        spin.to_str().unwrap(),
        "--request",
        "examples/requests/approve-read-only.json",
        "--format",
        "json",
    ]);
    assert_eq!(output.status.code(), Some(4), "{output:?}");
    let line = &json_lines(&output)[0];
    assert_eq!(line["verdict"]["code"], "deadline");
    assert_eq!(line["answer"]["action"], "decline");
}

/// `gatehouse review` on guests that wait in WASI (sleep, an endless poll,
/// stdin) ends at the deadline with the `deadline` failure and a decline,
/// instead of waiting an hour. The process is killed (and the test fails) if
/// it is still running after two minutes.
#[test]
fn review_of_guests_waiting_in_wasi_ends_at_the_deadline() {
    for name in [
        "test_guest_sleep",
        "test_guest_poll_forever",
        "test_guest_stdin_block",
    ] {
        let module = guest(name);
        let mut child = Command::new(env!("CARGO_BIN_EXE_gatehouse"))
            .env("XDG_CACHE_HOME", crate::paths::cache_home())
            .args([
                "review",
                "--module",
                module.to_str().unwrap(),
                "--request",
                "examples/requests/approve-read-only.json",
                "--format",
                "json",
            ])
            .current_dir(root())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("gatehouse runs");
        let started = std::time::Instant::now();
        while child.try_wait().expect("wait").is_none() {
            if started.elapsed() > std::time::Duration::from_secs(120) {
                let _ = child.kill();
                panic!("{name}: `gatehouse review` still waits after two minutes");
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        let output = child.wait_with_output().expect("output");
        assert_eq!(output.status.code(), Some(4), "{name}: {output:?}");
        let line = &json_lines(&output)[0];
        assert_eq!(line["verdict"]["code"], "deadline", "{name}: {line}");
        assert_eq!(line["answer"]["action"], "decline", "{name}: {line}");
    }
}

#[test]
fn a_json_rpc_message_gives_its_id_and_tools_bind_identity() {
    let dir = tempfile::tempdir().expect("tempdir");
    let tools = write(
        &dir,
        "tools.json",
        &json!({"tools": [{"name": "delete_branch", "title": "Delete a branch",
                           "inputSchema": {"type": "object"},
                           "annotations": {"destructiveHint": true}}]}),
    );
    let context = write(&dir, "context.json", &json!({"server_name": "github"}));
    let guardian = guest("gatehouse_guardian");
    let output = gatehouse(&[
        "review",
        "--module",
        guardian.to_str().unwrap(),
        "--module-config",
        r#"{"default":"allow"}"#,
        "--context",
        &context,
        "--tools",
        &tools,
        "--request",
        "examples/requests/deny-destructive.json",
    ]);
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(text.contains("server github, id 12"), "{text}");
    assert!(text.contains("marked destructive"), "{text}");
    assert!(
        text.contains("This action was rejected due to unacceptable risk."),
        "{text}"
    );
}

#[test]
fn the_config_file_builds_the_chain() {
    let output = gatehouse(&[
        "review",
        "--config",
        "examples/demo.toml",
        "--server",
        "docs",
        "--request",
        "examples/requests/url-sign-in.json",
        "--request",
        "examples/requests/deny-drop-table.json",
        "--format",
        "json",
    ]);
    let lines = json_lines(&output);
    assert_eq!(lines.len(), 2, "{output:?}");
    assert_eq!(lines[0]["answer"]["action"], "accept");
    assert_eq!(lines[0]["steps"][0]["module"], "allowlist");
    assert_eq!(lines[1]["answer"]["action"], "decline");
    assert_eq!(lines[1]["steps"][1]["module"], "guardian");
    assert!(
        lines[1]["answer"]["_meta"]["message"]
            .as_str()
            .is_some_and(|message| message.contains("dropping data needs a person"))
    );
}

#[test]
fn bad_input_names_the_file_and_exits_1() {
    let dir = tempfile::tempdir().expect("tempdir");
    let request = write(
        &dir,
        "nested.json",
        &json!({
            "message": "?",
            "requestedSchema": {"type": "object", "properties": {"a": {"type": "object"}}}
        }),
    );
    let guardian = guest("gatehouse_guardian");
    let output = gatehouse(&[
        "review",
        "--module",
        guardian.to_str().unwrap(),
        "--request",
        &request,
    ]);
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("nested.json"), "{stderr}");
    assert!(stderr.contains("property `a`"), "{stderr}");

    let output = gatehouse(&[
        "review",
        "--module",
        guest("test_guest_wrong_world").to_str().unwrap(),
        "--request",
        "examples/requests/approve-read-only.json",
    ]);
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("test_guest_wrong_world.wasm: does not export"),
        "{stderr}"
    );
}

#[test]
fn inspect_reports_contract_digest_and_claims() {
    let guardian = guest("gatehouse_guardian");
    let output = gatehouse(&["inspect", guardian.to_str().unwrap(), "--format", "json"]);
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    let report: Value = serde_json::from_slice(&output.stdout).expect("JSON");
    assert_eq!(report["contract_version"], "0.2.0");
    assert_eq!(report["world"], "reviewer");
    assert_eq!(report["reviewer"]["ok"]["name"], "guardian");
    let bytes = std::fs::read(&guardian).expect("read");
    assert_eq!(report["size"], bytes.len());
    assert_eq!(report["sha256"].as_str().map(str::len), Some(64));
    assert!(
        report["imports"]
            .as_array()
            .expect("imports")
            .iter()
            .any(|import| import == "gatehouse:reviewer/logging@0.2.0")
    );
    // A model-reviewer says so, and what it needs; a 0.1.0 module says its version.
    let model_guardian = guest("gatehouse_model_guardian");
    let output = gatehouse(&["inspect", model_guardian.to_str().unwrap()]);
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(text.contains("world     model-reviewer"), "{text}");
    assert!(text.contains("model = \"NAME\""), "{text}");
    let old = guest("test_guest_contract_0_1");
    let output = gatehouse(&["inspect", old.to_str().unwrap(), "--format", "json"]);
    let report: Value = serde_json::from_slice(&output.stdout).expect("JSON");
    assert_eq!(report["contract_version"], "0.1.0");
    assert_eq!(report["reviewer"]["ok"]["name"], "contract-0-1");

    let wrong = guest("test_guest_wrong_world");
    let output = gatehouse(&["inspect", wrong.to_str().unwrap()]);
    assert_eq!(output.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&output.stdout).contains("NOT LOADABLE"));
}

#[test]
fn inspect_loads_the_module_under_the_limits_it_is_given() {
    let guardian = guest("gatehouse_guardian");
    let path = guardian.to_str().unwrap();
    // The guardian creates 3 core instances: a limit of 2 refuses it, saying
    // which limit to raise; its own limit of 3 loads it.
    let output = gatehouse(&["inspect", path, "--core-instances", "2"]);
    assert_eq!(output.status.code(), Some(1), "{output:?}");
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(
        text.contains("NOT LOADABLE") && text.contains("core_instances"),
        "{text}"
    );
    let output = gatehouse(&["inspect", path, "--core-instances", "3"]);
    assert_eq!(output.status.code(), Some(0), "{output:?}");
}

#[test]
fn conformance_passes_the_guardian_and_prints_junit() {
    let guardian = guest("gatehouse_guardian");
    let output = gatehouse(&[
        "conformance",
        guardian.to_str().unwrap(),
        "--format",
        "junit",
    ]);
    assert_eq!(
        output.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&output.stdout)
    );
    let xml = String::from_utf8_lossy(&output.stdout);
    assert!(xml.contains("<testsuite name=\"contract\""), "{xml}");
    assert!(xml.contains("<testsuite name=\"guardian\""), "{xml}");
    assert!(!xml.contains("<failure"), "{xml}");
}

#[test]
fn conformance_exits_2_and_names_the_failed_check() {
    let counter = guest("test_guest_counter");
    let output = gatehouse(&[
        "conformance",
        counter.to_str().unwrap(),
        "--suite",
        "contract",
    ]);
    assert_eq!(output.status.code(), Some(2));
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(text.contains("FAIL contract / stateless"), "{text}");
}

#[test]
fn conformance_runs_an_own_case_directory() {
    let dir = tempfile::tempdir().expect("tempdir");
    write(
        &dir,
        "mine.json",
        &json!([{
            "name": "my server's deletes are declined",
            "request": {"message": "?", "requestedSchema": {"type": "object", "properties": {}},
                        "_meta": {"codex_request_type": "approval_request",
                                  "codex_approval_kind": "mcp_tool_call", "tool_name": "delete_all"}},
            "context": {"server_name": "mine", "request_id": 1},
            "config": {"deny": [{"tool": "delete_*"}]},
            "expect": {"decision": "accept"}
        }]),
    );
    let guardian = guest("gatehouse_guardian");
    let output = gatehouse(&[
        "conformance",
        guardian.to_str().unwrap(),
        "--suite",
        "contract",
        "--cases",
        dir.path().to_str().unwrap(),
        "--format",
        "json",
    ]);
    // The case expects the wrong decision on purpose: the kit must say so.
    assert_eq!(output.status.code(), Some(2));
    let report: Value = serde_json::from_slice(&output.stdout).expect("JSON");
    let row = report["results"]
        .as_array()
        .expect("results")
        .iter()
        .find(|row| row["suite"] == "cases")
        .expect("a cases row")
        .clone();
    assert_eq!(row["passed"], false);
    assert_eq!(row["got"], "decline");
}

#[test]
fn the_demo_drives_every_kind_of_elicitation() {
    let server = demo_server();
    // The model-reviewed rows need the model guardian too.
    guest("gatehouse_model_guardian");
    let guests = guest("gatehouse_guardian")
        .parent()
        .expect("dir")
        .to_path_buf();
    let output = gatehouse(&[
        "demo",
        "--server",
        server.to_str().unwrap(),
        "--guests",
        guests.to_str().unwrap(),
    ]);
    let table = String::from_utf8_lossy(&output.stdout);
    assert_eq!(
        output.status.code(),
        Some(0),
        "{table}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    for (scenario, decided, answer) in [
        ("approved by review", "guest", "accept"),
        ("denied by review", "guest", "decline"),
        ("declined for bad metadata", "guest", "decline"),
        ("declined by policy", "policy", "decline"),
        ("deferred to the person, answered", "person", "accept"),
        ("URL mode, allowed by policy", "guest", "accept"),
        ("URL mode, deferred to the person", "person", "accept"),
        ("input request in a tool result", "guest", "decline"),
        ("nested schema refused", "policy", "error -32602"),
        (
            "model-reviewed: delete scratch/demo",
            "model-guardian: accept",
            "accept",
        ),
        (
            "model-reviewed: delete main",
            "model-guardian: decline",
            "decline",
        ),
    ] {
        let row = table
            .lines()
            .find(|line| line.contains(scenario))
            .unwrap_or_else(|| panic!("no row for {scenario}:\n{table}"));
        assert!(
            row.contains(decided) && row.trim_end().ends_with(answer),
            "{row}"
        );
    }
    assert!(table.contains("[git] hello Ada"), "{table}");
    assert!(
        table.contains("[next] elicitation answered: decline"),
        "{table}"
    );
    // The model-reviewed scenario says plainly that its model is a stand-in,
    // and shows each verdict the model guardian acted on and the audit's
    // record of the call.
    assert!(
        table.contains(
            "model: scripted stand-in (no real model is called; point [models.NAME] at OpenAI, Ollama or vLLM for a real one)"
        ),
        "{table}"
    );
    assert!(
        table.contains("reviewed by the model guardian (world model-reviewer, contract 0.2"),
        "{table}"
    );
    let section = table
        .split("Model-reviewed (rows 10-11)")
        .nth(1)
        .and_then(|rest| rest.split("What each server received").next())
        .unwrap_or_else(|| panic!("no model-reviewed section:\n{table}"));
    let rows: Vec<&str> = section
        .split("\n10 ")
        .nth(1)
        .map_or(Vec::new(), |rest| rest.split("\n11 ").collect());
    assert_eq!(rows.len(), 2, "{section}");
    for (row, branch, decision, verdict) in [
        (rows[0], "scratch/demo", "accept", "allow (risk low)"),
        (rows[1], "main", "decline", "deny (risk high)"),
    ] {
        for expected in [
            format!(r#"agent's call: repo__delete_branch {{"branch":"{branch}"}} (session "#),
            format!("decided by module model-guardian: {decision}; answer sent: {decision}"),
            format!("model verdict: {verdict}: The scripted model "),
            "audit: model call recorded: grant demo, model gatehouse-scripted, attempts 1, prompt sha256 "
                .to_owned(),
        ] {
            assert!(row.contains(&expected), "{expected}\n{row}");
        }
        let sha = row
            .split("prompt sha256 ")
            .nth(1)
            .and_then(|rest| rest.split("...").next())
            .unwrap_or_default();
        assert!(
            sha.len() == 12 && sha.chars().all(|c| c.is_ascii_hexdigit()),
            "{row}"
        );
    }
    assert!(
        table.contains("10 [repo] elicitation answered: accept"),
        "{table}"
    );
    assert!(
        table.contains("11 [repo] elicitation answered: decline"),
        "{table}"
    );
}

/// The process-hook baseline (`examples/process-hook`, built by
/// `cargo test --workspace` or `cargo build -p gatehouse-process-hook`).
fn process_hook() -> PathBuf {
    existing(
        target().join("debug/gatehouse-process-hook"),
        "run `cargo build -p gatehouse-process-hook`",
    )
}

/// The `runs` row of a `gatehouse bench --format json` document.
fn bench_run<'a>(report: &'a Value, runner: &str) -> &'a Value {
    report["runs"]
        .as_array()
        .expect("runs")
        .iter()
        .find(|run| run["runner"] == runner)
        .unwrap_or_else(|| panic!("no {runner} run in {report:#}"))
}

/// Count > 0, ordered percentiles, and every review accounted for by kind.
fn assert_sane_run(run: &Value) -> u64 {
    let reviews = run["reviews"].as_u64().expect("reviews");
    assert!(reviews > 0, "{run:#}");
    let latency = &run["latency"];
    let (p50, p99, max) = (
        latency["p50_us"].as_f64().expect("p50"),
        latency["p99_us"].as_f64().expect("p99"),
        latency["max_us"].as_f64().expect("max"),
    );
    assert!(p50 <= p99 && p99 <= max, "{run:#}");
    assert_eq!(latency["count"].as_u64(), Some(reviews), "{run:#}");
    let counted: u64 = ["accept", "decline", "cancel", "defer", "failed"]
        .iter()
        .map(|kind| run["outcomes"][kind].as_u64().expect("a count"))
        .sum();
    assert_eq!(counted, reviews, "{run:#}");
    assert_eq!(run["outcomes"]["failed"], 0, "{run:#}");
    reviews
}

#[test]
fn bench_measures_fresh_instance_reviews() {
    let guardian = guest("gatehouse_guardian");
    let output = gatehouse(&[
        "bench",
        guardian.to_str().unwrap(),
        "--duration",
        "0.3",
        "--format",
        "json",
    ]);
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    let report: Value = serde_json::from_slice(&output.stdout).expect("one JSON document");
    let run = bench_run(&report, "gatehouse");
    let reviews = assert_sane_run(run);
    // The embedded sample, with config `{}`: no rule allows read_file.
    assert_eq!(run["outcomes"]["decline"], reviews, "{run:#}");
    assert_eq!(report["runs"].as_array().map(Vec::len), Some(1));
    assert_eq!(report["comparison"], Value::Null);
}

/// Runs gatehouse with `args` and returns its output and the path of the
/// perf map it would write (`/tmp/perf-<its pid>.map`).
fn gatehouse_with_pid(args: &[&str]) -> (Output, PathBuf) {
    let child = Command::new(env!("CARGO_BIN_EXE_gatehouse"))
        .args(args)
        .env("XDG_CACHE_HOME", crate::paths::cache_home())
        .current_dir(root())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("gatehouse runs");
    let map = PathBuf::from(format!("/tmp/perf-{}.map", child.id()));
    (child.wait_with_output().expect("gatehouse ends"), map)
}

/// The perf map (a file at a path any local user can predict) is written
/// only when `bench --perf-map` asks for it: not by `bench` without it, nor
/// by `review`; with it, it names the guardian's functions and the report
/// says where.
#[test]
fn only_bench_perf_map_writes_the_perf_map() {
    let guardian = guest("gatehouse_guardian");
    let module = guardian.to_str().expect("a UTF-8 path");
    let bench = ["bench", module, "--duration", "0.1", "--format", "json"];

    let (output, map) = gatehouse_with_pid(&bench);
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    let report: Value = serde_json::from_slice(&output.stdout).expect("one JSON document");
    assert_eq!(report["perf_map"], Value::Null, "{report:#}");
    assert!(
        !map.exists(),
        "bench without --perf-map wrote {}",
        map.display()
    );

    let dir = tempfile::tempdir().expect("tempdir");
    let request = write(
        &dir,
        "request.json",
        &json!({
            "message": "Allow?",
            "requestedSchema": {"type": "object", "properties": {}},
            "_meta": {"codex_request_type": "approval_request",
                      "codex_approval_kind": "mcp_tool_call", "tool_name": "read_file"}
        }),
    );
    let (output, map) = gatehouse_with_pid(&["review", "--module", module, "--request", &request]);
    assert!(output.status.code().is_some(), "{output:?}");
    assert!(!map.exists(), "review wrote {}", map.display());

    let (output, map) = gatehouse_with_pid(&[&bench[..], &["--perf-map"]].concat());
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    let report: Value = serde_json::from_slice(&output.stdout).expect("one JSON document");
    assert_eq!(report["perf_map"].as_str(), map.to_str(), "{report:#}");
    let text = std::fs::read_to_string(&map).expect("the perf map is written");
    let _ = std::fs::remove_file(&map);
    let functions = text
        .lines()
        .filter(|line| line.contains("::function["))
        .count();
    assert!(
        functions >= 100,
        "{functions} guest functions named:\n{text}"
    );
}

#[test]
fn bench_loads_through_a_compile_cache_and_reports_the_load() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cache = dir.path().join("compiled");
    let guardian = guest("gatehouse_guardian");
    let bench = || {
        let output = gatehouse(&[
            "bench",
            guardian.to_str().unwrap(),
            "--duration",
            "0.1",
            "--compile-cache",
            cache.to_str().unwrap(),
            "--format",
            "json",
        ]);
        assert_eq!(output.status.code(), Some(0), "{output:?}");
        let report: Value = serde_json::from_slice(&output.stdout).expect("one JSON document");
        assert!(
            report["load_s"].as_f64().is_some_and(|s| s > 0.0),
            "{report:#}"
        );
        assert_eq!(report["compile_cache"], cache.display().to_string());
        assert_sane_run(bench_run(&report, "gatehouse"));
    };
    bench();
    // The compiled module, and the pack of its compiled functions.
    let files = || {
        let mut names: Vec<String> = std::fs::read_dir(&cache)
            .expect("the cache")
            .map(|entry| {
                entry
                    .expect("an entry")
                    .file_name()
                    .to_string_lossy()
                    .into_owned()
            })
            .collect();
        names.sort();
        names
    };
    let stored = files();
    let named = |suffix: &str| stored.iter().filter(|name| name.ends_with(suffix)).count();
    assert_eq!(
        (named(".cwasm"), named(".functions"), stored.len()),
        (1, 1, 2),
        "the first run stores the compiled module: {stored:?}"
    );
    bench();
    assert_eq!(files(), stored, "the second run finds it");
}

#[test]
fn bench_with_a_hook_decides_like_the_sandbox() {
    let dir = tempfile::tempdir().expect("tempdir");
    let requests = dir.path().join("requests.jsonl");
    let approve = std::fs::read_to_string(root().join("examples/requests/approve-read-only.json"))
        .expect("read");
    let deny = std::fs::read_to_string(root().join("examples/requests/deny-drop-table.json"))
        .expect("read");
    let line = |text: &str| {
        serde_json::from_str::<Value>(text)
            .expect("JSON")
            .to_string()
    };
    std::fs::write(&requests, format!("{}\n{}\n", line(&approve), line(&deny))).expect("write");
    let guardian = guest("gatehouse_guardian");
    let hook = process_hook();
    let output = gatehouse(&[
        "bench",
        guardian.to_str().unwrap(),
        "--requests",
        requests.to_str().unwrap(),
        "--module-config",
        r#"{"allow":[{"server":"docs","tool":"read_*"}],"deny":[{"tool":"drop_*"}]}"#,
        "--duration",
        "0.3",
        "--hook",
        hook.to_str().unwrap(),
        "--format",
        "json",
    ]);
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    let report: Value = serde_json::from_slice(&output.stdout).expect("one JSON document");
    let concurrency = report["concurrency"].as_u64().expect("concurrency");
    for runner in ["gatehouse", "process-hook"] {
        let run = bench_run(&report, runner);
        assert_sane_run(run);
        // Each worker alternates between the two requests, so if both
        // runners decide like the guardian, accepts and declines are equal
        // to within one per worker, and nothing else comes out.
        let accept = run["outcomes"]["accept"].as_u64().expect("accept");
        let decline = run["outcomes"]["decline"].as_u64().expect("decline");
        assert!(accept > 0 && decline > 0, "{run:#}");
        assert!(accept.abs_diff(decline) <= concurrency, "{run:#}");
        assert_eq!(run["outcomes"]["defer"], 0, "{run:#}");
        assert_eq!(run["outcomes"]["cancel"], 0, "{run:#}");
    }
    let hook_run = bench_run(&report, "process-hook");
    assert_eq!(hook_run["command"], hook.display().to_string());
    assert!(
        report["comparison"]["hook_p50_over_gatehouse_p50"]
            .as_f64()
            .is_some_and(|ratio| ratio > 0.0),
        "{report:#}"
    );
}

#[test]
fn bench_errors_name_the_file_and_line() {
    let dir = tempfile::tempdir().expect("tempdir");
    let requests = dir.path().join("bad.jsonl");
    std::fs::write(
        &requests,
        "{\"message\": \"?\", \"requestedSchema\": {\"type\": \"object\"}}\n{\"message\": 1}\n",
    )
    .expect("write");
    let guardian = guest("gatehouse_guardian");
    let output = gatehouse(&[
        "bench",
        guardian.to_str().unwrap(),
        "--requests",
        requests.to_str().unwrap(),
    ]);
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("bad.jsonl: line 2: "), "{stderr}");
    assert!(stderr.contains("`message` must be a string"), "{stderr}");

    let output = gatehouse(&[
        "bench",
        guest("test_guest_wrong_world").to_str().unwrap(),
        "--duration",
        "0.1",
    ]);
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("test_guest_wrong_world.wasm: does not export"),
        "{stderr}"
    );
}

/// `gatehouse plugins`: `list` shows a dropped plugin as `new` with what it
/// would run (its text escaped); `trust` records its manifest's sha256 in a
/// 0600 trust file and `list` then shows it `trusted` and running; an edit
/// makes it `changed`; a stale `--sha256` and an unknown name are refused
/// with errors that say what to do; `untrust` forgets it.
#[test]
fn plugins_list_trust_and_untrust_round_trip() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = dir.path().join("gatehouse.toml");
    std::fs::write(
        &config,
        "[capabilities]\nroots = [{ id = \"drop\", path = \"drop\" }]\n",
    )
    .expect("config");
    let manifest = dir.path().join("drop/tool/.codex-plugin/plugin.json");
    std::fs::create_dir_all(manifest.parent().expect("folder")).expect("mkdir");
    let write_manifest = |arg: &str| {
        std::fs::write(
            &manifest,
            json!({"name": "tool", "mcpServers": {"srv": {"command": "run-me", "args": [arg]}}})
                .to_string(),
        )
        .expect("manifest");
    };
    write_manifest("--paint\u{1b}[31m");
    let config_arg = config.to_str().expect("UTF-8");
    let list = || {
        let output = gatehouse(&[
            "plugins", "list", "--config", config_arg, "--format", "json",
        ]);
        assert_eq!(output.status.code(), Some(0), "{output:?}");
        let report: Value = serde_json::from_slice(&output.stdout).expect("JSON");
        report["plugins"][0].clone()
    };

    let listed = list();
    assert_eq!(listed["name"], "tool__srv");
    assert_eq!(listed["root"], "drop");
    assert_eq!(listed["state"], "new");
    assert_eq!(listed["runs"], false);
    assert_eq!(listed["transport"]["command"], "run-me");
    assert_eq!(
        listed["manifest"],
        std::fs::canonicalize(&manifest)
            .expect("canonical")
            .display()
            .to_string()
    );
    let first_sha = listed["sha256"].as_str().expect("sha256").to_owned();
    assert_eq!(first_sha.len(), 64);

    let text = gatehouse(&["plugins", "list", "--config", config_arg]);
    let stdout = String::from_utf8_lossy(&text.stdout);
    assert!(stdout.contains("tool__srv  new"), "{stdout}");
    assert!(stdout.contains(&first_sha), "{stdout}");
    assert!(stdout.contains("run-me --paint\\u{1b}[31m"), "{stdout}");
    assert!(!stdout.contains('\u{1b}'), "escaped: {stdout}");
    assert!(
        stdout.contains("gatehouse plugins trust NAME --config"),
        "{stdout}"
    );

    let unknown = gatehouse(&["plugins", "trust", "nope", "--config", config_arg]);
    assert_eq!(unknown.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&unknown.stderr);
    assert!(stderr.contains("`nope`"), "{stderr}");
    assert!(stderr.contains("gatehouse plugins list"), "{stderr}");
    assert!(stderr.contains("`tool__srv`"), "{stderr}");
    let trust_file = dir.path().join("gatehouse-trust.toml");
    assert!(!trust_file.exists(), "nothing was recorded");

    let trusted = gatehouse(&[
        "plugins",
        "trust",
        "tool__srv",
        "--sha256",
        &first_sha,
        "--config",
        config_arg,
    ]);
    assert_eq!(trusted.status.code(), Some(0), "{trusted:?}");
    assert!(String::from_utf8_lossy(&trusted.stdout).contains(&first_sha));
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&trust_file)
            .expect("the trust file")
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
    }
    let listed = list();
    assert_eq!(listed["state"], "trusted");
    assert_eq!(listed["runs"], true);

    write_manifest("--other");
    let listed = list();
    assert_eq!(listed["state"], "changed");
    assert_eq!(listed["runs"], false);
    let stale = gatehouse(&[
        "plugins",
        "trust",
        "tool__srv",
        "--sha256",
        &first_sha,
        "--config",
        config_arg,
    ]);
    assert_eq!(stale.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&stale.stderr);
    assert!(stderr.contains("changed since you reviewed it"), "{stderr}");
    assert_eq!(
        list()["state"],
        "changed",
        "a refused trust records nothing"
    );

    // `--all` trusts what is new, never silently what changed.
    let all = gatehouse(&["plugins", "trust", "--all", "--config", config_arg]);
    assert_eq!(all.status.code(), Some(0), "{all:?}");
    assert_eq!(list()["state"], "changed");
    let all = gatehouse(&[
        "plugins",
        "trust",
        "--all",
        "--include-changed",
        "--config",
        config_arg,
    ]);
    assert_eq!(all.status.code(), Some(0), "{all:?}");
    assert_eq!(list()["state"], "trusted");

    let untrusted = gatehouse(&["plugins", "untrust", "tool__srv", "--config", config_arg]);
    assert_eq!(untrusted.status.code(), Some(0), "{untrusted:?}");
    assert_eq!(list()["state"], "new");
    let again = gatehouse(&["plugins", "untrust", "tool__srv", "--config", config_arg]);
    assert_eq!(again.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&again.stderr).contains("is not in the trust file"),
        "{again:?}"
    );
}

/// A running `gatehouse serve` does not start a plugin found in its root
/// until `gatehouse plugins trust` records it, and says so in a warning
/// naming the server, its root, its manifest (escaped: the folder name is
/// anyone's) and the command that trusts it; the trust file is watched, so
/// the plugin's tools appear without a restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_starts_a_plugin_once_gatehouse_plugins_trust_records_it() {
    use rmcp::ServiceExt;
    use tokio::io::AsyncReadExt;

    let server = demo_server();
    let dir = tempfile::tempdir().expect("tempdir");
    let config = dir.path().join("gatehouse.toml");
    std::fs::write(
        &config,
        "[capabilities]\nroots = [{ id = \"drop\", path = \"drop\" }]\n",
    )
    .expect("config");
    let manifest = dir
        .path()
        .join("drop/tool\u{1b}[2K/.codex-plugin/plugin.json");
    std::fs::create_dir_all(manifest.parent().expect("folder")).expect("mkdir");
    std::fs::write(
        &manifest,
        json!({"name": "tool", "mcpServers": {"srv": {"command": server, "args": ["--name", "dropped"]}}})
            .to_string(),
    )
    .expect("manifest");

    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_gatehouse"));
    command.arg("serve").arg("--config").arg(&config);
    let (transport, stderr) = rmcp::transport::TokioChildProcess::builder(command)
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("gatehouse starts");
    let mut stderr = stderr.expect("stderr piped");
    let reader = tokio::spawn(async move {
        let mut log = Vec::new();
        let _ = stderr.read_to_end(&mut log).await;
        String::from_utf8_lossy(&log).into_owned()
    });
    let client = tokio::time::timeout(std::time::Duration::from_secs(60), ().serve(transport))
        .await
        .expect("initialize in time")
        .expect("initialize");
    let names = |tools: Vec<rmcp::model::Tool>| -> Vec<String> {
        tools.iter().map(|tool| tool.name.to_string()).collect()
    };
    let before = names(client.list_all_tools().await.expect("tools/list"));
    assert!(before.is_empty(), "nothing runs untrusted: {before:?}");

    let trusted = gatehouse(&[
        "plugins",
        "trust",
        "tool__srv",
        "--config",
        config.to_str().expect("UTF-8"),
    ]);
    assert_eq!(trusted.status.code(), Some(0), "{trusted:?}");
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let now = names(client.list_all_tools().await.expect("tools/list"));
        if now.contains(&"tool__srv__echo".to_owned()) {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the trusted plugin never appeared: {now:?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let result = client
        .call_tool(
            rmcp::model::CallToolRequestParams::new("tool__srv__echo").with_arguments(
                json!({"text": "hi"})
                    .as_object()
                    .cloned()
                    .unwrap_or_default(),
            ),
        )
        .await
        .expect("the trusted plugin answers");
    assert!(
        crate::tool_result::result_text(&result).contains("[dropped] hi"),
        "{result:?}"
    );
    client.cancel().await.expect("stop");
    let log = tokio::time::timeout(std::time::Duration::from_secs(30), reader)
        .await
        .expect("gatehouse exits")
        .expect("the log");
    let warning = log
        .lines()
        .find(|line| line.contains("it is not trusted, so it does not run"))
        .unwrap_or_else(|| panic!("no warning: {log}"));
    assert!(warning.contains("plugin=tool__srv"), "{warning}");
    assert!(warning.contains("root=drop"), "{warning}");
    assert!(
        warning.contains(&format!(
            "gatehouse plugins trust tool__srv --config {}",
            config.display()
        )),
        "{warning}"
    );
    assert!(warning.contains("tool\\u{1b}[2K"), "{warning}");
    assert!(!log.contains('\u{1b}'), "escaped: {log}");
}
