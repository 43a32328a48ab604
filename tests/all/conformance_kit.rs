//! The conformance kit against real components: every reference guest passes,
//! and each deliberately broken guest is reported with the right failure,
//! never a crash.

use std::time::Duration;

use gatehouse_conformance::cases;
use gatehouse_conformance::{Kit, Report, Suite};
use gatehouse_core::sandbox::Limits;
use gatehouse_tests::{cached_digests, cases_dir, guest, module_digest};

fn kit() -> Kit {
    Kit::new(Limits::default()).expect("kit")
}

fn run(name: &str, suite: Suite) -> Report {
    run_with(kit(), name, suite)
}

fn run_with(kit: Kit, name: &str, suite: Suite) -> Report {
    let path = guest(name);
    let bytes = std::fs::read(&path).expect("read guest");
    kit.run(&path.display().to_string(), &bytes, suite, &[])
}

/// The rows that failed, as `case: got`.
fn failed_rows(report: &Report) -> Vec<String> {
    report
        .failures()
        .map(|row| format!("{}: {}", row.case, row.got))
        .collect()
}

/// Asserts that the only failing rows are those whose case starts with one of
/// `prefixes`, that each prefix failed at least once, and that `got`
/// mentions `code` on the first.
fn assert_fails_only(name: &str, suite: Suite, prefixes: &[&str], code: &str) {
    assert_fails_only_with(kit(), name, suite, prefixes, code);
}

fn assert_fails_only_with(kit: Kit, name: &str, suite: Suite, prefixes: &[&str], code: &str) {
    let report = run_with(kit, name, suite);
    assert!(!report.passed(), "{name} passed:\n{}", report.to_text());
    let failures: Vec<_> = report.failures().collect();
    for row in &failures {
        assert!(
            prefixes.iter().any(|prefix| row.case.starts_with(prefix)),
            "{name}: unexpected failing row {:?}\n{}",
            row.case,
            report.to_text()
        );
    }
    for prefix in prefixes {
        assert!(
            failures.iter().any(|row| row.case.starts_with(prefix)),
            "{name}: no failing row {prefix:?}: {:?}",
            failed_rows(&report)
        );
    }
    let first = failures[0];
    let text = format!(
        "{} {}",
        first.got,
        first.detail.as_deref().unwrap_or_default()
    );
    assert!(text.contains(code), "{name}: expected {code:?} in {text:?}");
}

#[test]
fn every_reference_guest_passes_the_contract() {
    for name in [
        "gatehouse_guardian",
        "gatehouse_allowlist",
        "reviewer_template",
    ] {
        let report = run(name, Suite::Contract);
        assert!(report.passed(), "{name}:\n{}", report.to_text());
        assert!(
            report.results.len() >= 40,
            "{name}: only {} checks",
            report.results.len()
        );
    }
}

#[test]
fn the_guardian_passes_the_guardian_suite_and_all_runs_it() {
    let report = run("gatehouse_guardian", Suite::All);
    assert!(report.passed(), "{}", report.to_text());
    let guardian_rows = report
        .results
        .iter()
        .filter(|row| row.suite == "guardian")
        .count();
    assert!(guardian_rows >= 60, "guardian rows: {guardian_rows}");
}

#[test]
fn all_skips_the_guardian_suite_for_modules_that_do_not_claim_it() {
    let report = run("gatehouse_allowlist", Suite::All);
    assert!(report.passed(), "{}", report.to_text());
    assert!(report.results.iter().all(|row| row.suite != "guardian"));
    // Asked for explicitly, the allowlist is not the guardian.
    let report = run("gatehouse_allowlist", Suite::Guardian);
    assert!(!report.passed());
}

#[test]
fn an_endless_loop_fails_totality_with_the_deadline() {
    assert_fails_only(
        "test_guest_spin",
        Suite::Contract,
        &["answers:"],
        "deadline",
    );
}

/// Guests that wait in WASI (sleep, poll, stdin) fail totality with the
/// deadline like an endless loop, and the kit finishes: each review ends at
/// its deadline, so the whole suite takes seconds, not an hour per case.
#[test]
fn guests_waiting_in_wasi_fail_totality_with_the_deadline() {
    for name in [
        "test_guest_sleep",
        "test_guest_poll_forever",
        "test_guest_stdin_block",
    ] {
        let (done, finished) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            assert_fails_only(name, Suite::Contract, &["answers:"], "deadline");
            let _ = done.send(());
        });
        match finished.recv_timeout(std::time::Duration::from_secs(300)) {
            Ok(()) => {}
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                panic!("{name}: the kit did not finish: a review outlived its deadline")
            }
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
                panic!("{name}: the kit's report was wrong (see the panic above)")
            }
        }
    }
}

#[test]
fn a_trap_fails_totality() {
    assert_fails_only("test_guest_trap", Suite::Contract, &["answers:"], "trap");
}

#[test]
fn a_memory_bomb_fails_totality() {
    // A deadline a loaded test machine cannot reach before the memory cap
    // (the determinism row reviews twice and compares the codes).
    let limits = Limits::builder().deadline(Duration::from_secs(5)).build();
    assert_fails_only_with(
        Kit::new(limits).expect("kit"),
        "test_guest_grow_memory",
        Suite::Contract,
        &["answers:"],
        "memory",
    );
}

#[test]
fn endless_recursion_fails_totality() {
    assert_fails_only(
        "test_guest_deep_recursion",
        Suite::Contract,
        &["answers:"],
        "stack-overflow",
    );
}

#[test]
fn huge_output_fails_totality() {
    assert_fails_only(
        "test_guest_huge_output",
        Suite::Contract,
        &["answers:"],
        "output-too-large",
    );
}

#[test]
fn invalid_content_fails_output_validity() {
    assert_fails_only(
        "test_guest_bad_json",
        Suite::Contract,
        &["answers:"],
        "invalid-content",
    );
}

#[test]
fn url_content_fails_output_validity_on_url_inputs() {
    assert_fails_only(
        "test_guest_url_content",
        Suite::Contract,
        &["answers:"],
        "content",
    );
    let report = run("test_guest_url_content", Suite::Contract);
    assert!(
        report
            .failures()
            .any(|row| row.case.starts_with("answers: url") && row.got.contains("url-content")),
        "{:?}",
        failed_rows(&report)
    );
}

#[test]
fn randomness_fails_determinism() {
    assert_fails_only(
        "test_guest_coin_flip",
        Suite::Contract,
        &["deterministic", "stateless"],
        "differs",
    );
}

#[test]
fn state_kept_between_reviews_fails_statelessness() {
    assert_fails_only(
        "test_guest_counter",
        Suite::Contract,
        &["stateless"],
        "changed",
    );
}

#[test]
fn reaching_for_files_fails_the_sandbox_check() {
    assert_fails_only(
        "test_guest_escape",
        Suite::Contract,
        &["sandboxed"],
        "wasi:filesystem/preopens",
    );
}

#[test]
fn reading_the_environment_passes_the_sandbox_check_and_is_reported() {
    // CPython and other language runtimes read their environment at start:
    // the kit answers it empty, as production does, and says so.
    let report = run("test_guest_env_read", Suite::Contract);
    assert!(report.passed(), "{}", report.to_text());
    let row = report
        .results
        .iter()
        .find(|row| row.case.starts_with("sandboxed"))
        .expect("a sandboxed row");
    let detail = row.detail.as_deref().unwrap_or_default();
    assert!(
        detail.contains("read its environment, answered empty")
            && detail.contains("#get-environment"),
        "{detail:?}"
    );
}

#[test]
fn a_log_flood_fails_the_log_caps() {
    // 10,000 log calls take a while in an unoptimised test build: give them
    // time, so that only the log caps are at issue.
    let limits = Limits::builder()
        .deadline(std::time::Duration::from_secs(10))
        .build();
    let kit = Kit::new(limits).expect("kit");
    assert_fails_only_with(
        kit,
        "test_guest_log_flood",
        Suite::Contract,
        &["stays within the log caps"],
        "dropped",
    );
}

#[test]
fn modules_that_do_not_load_fail_one_row_and_stop() {
    for (name, reason) in [
        ("test_guest_wrong_world", "does not export"),
        ("test_guest_future_contract", "contract version 0.3.0"),
        ("test_guest_extra_import", "test:extra/secrets"),
        ("test_guest_big_memory", "pool"),
    ] {
        let report = run(name, Suite::All);
        assert_eq!(report.results.len(), 1, "{name}: {}", report.to_text());
        let row = &report.results[0];
        assert_eq!(row.case, "loads as a reviewer");
        assert!(!row.passed);
        let detail = row.detail.as_deref().unwrap_or_default();
        assert!(detail.contains(reason), "{name}: {detail}");
    }
}

#[test]
fn own_case_directories_run_as_a_suite() {
    let path = guest("gatehouse_guardian");
    let bytes = std::fs::read(&path).expect("read");
    let extra = cases::load_dir(&cases_dir("guardian")).expect("cases");
    let report = kit().run("guardian", &bytes, Suite::Contract, &extra);
    let own = report
        .results
        .iter()
        .filter(|row| row.suite == "cases")
        .count();
    assert_eq!(own, extra.len());
    assert!(report.passed(), "{}", report.to_text());
}

#[test]
fn reports_render_as_text_json_and_junit() {
    let report = run("test_guest_counter", Suite::Contract);
    let text = report.to_text();
    assert!(text.contains("FAIL"), "{text}");
    assert!(text.trim_end().ends_with("1 failed"), "{text}");
    let json = serde_json::to_value(&report).expect("json");
    assert_eq!(
        json["results"].as_array().map(Vec::len),
        Some(report.results.len())
    );
    let junit = report.to_junit();
    assert!(junit.contains("<testsuites"), "{junit}");
    assert!(junit.contains("<failure"), "{junit}");
    assert!(junit.contains("stateless"), "{junit}");
}

#[test]
fn the_shipped_guardian_cases_match_the_case_files() {
    // The kit embeds host/conformance/suites/guardian; the files and the binary must agree.
    let shipped = gatehouse_conformance::guardian_cases().expect("shipped cases");
    let on_disk = cases::load_dir(&cases_dir("guardian")).expect("cases");
    assert_eq!(shipped.len(), on_disk.len());
}

/// The model-probe guest asks its model once with this config; it accepts
/// an answer containing "allow" and declines anything else, naming the error.
const PROBE_ASKS: &str = r#"{"ask": true}"#;

fn rows<'a>(report: &'a Report, suite: &str) -> Vec<&'a gatehouse_conformance::CaseResult> {
    report
        .results
        .iter()
        .filter(|row| row.suite == suite)
        .collect()
}

#[test]
fn all_runs_the_model_suite_for_a_model_reviewer_and_it_fails_closed() {
    let report = run_with(
        kit().with_module_config(PROBE_ASKS),
        "test_guest_model_probe",
        Suite::All,
    );
    assert!(report.passed(), "{}", report.to_text());
    let model = rows(&report, "model");
    let cases = gatehouse_conformance::model_cases().expect("model cases");
    assert_eq!(model.len(), cases.len() + 1, "{}", report.to_text());
    for row in &model[..cases.len()] {
        if row.case.contains("fails closed") || row.case.contains("denies") {
            assert_eq!(row.got, "decline", "{}", report.to_text());
        }
    }
    let allows = model
        .iter()
        .find(|row| row.case.contains("allows"))
        .expect("the allow row");
    assert_eq!(allows.got, "accept");
    let limit = model.last().expect("the limit row");
    assert!(
        limit.case.starts_with("asks its model at most"),
        "{limit:?}"
    );
    assert_eq!(limit.got, "at most 1 call");
    // Not the guardian: no guardian suite.
    assert!(rows(&report, "guardian").is_empty());
}

#[test]
fn a_model_reviewer_that_does_not_ask_passes_the_model_suite_without_calls() {
    // With `{}` the probe never asks: every row holds, and none was a call.
    let report = run("test_guest_model_probe", Suite::Model);
    assert!(report.passed(), "{}", report.to_text());
    let limit = rows(&report, "model").pop().expect("rows");
    assert_eq!(limit.got, "at most 0 calls");
    assert!(
        rows(&report, "contract")
            .iter()
            .all(|row| row.case == "loads as a reviewer" || row.case == "describe")
    );
}

#[test]
fn a_module_that_keeps_asking_fails_the_call_limit() {
    // `loop`: the probe asks again after every answer, until the host
    // refuses (`rejected` past the limit); it then declines, so only the
    // call limit is at issue.
    let kit = kit().with_module_config(r#"{"ask": true, "loop": true}"#);
    assert_fails_only_with(
        kit,
        "test_guest_model_probe",
        Suite::Model,
        &["asks its model at most"],
        &format!(
            "at most {} calls",
            gatehouse_core::sandbox::MAX_MODEL_CALLS_PER_REVIEW + 1
        ),
    );
}

#[test]
fn an_accept_on_an_unusable_answer_is_caught() {
    // The probe accepts any answer containing "allow": prose that says it
    // would not allow is an accept, which a fail-closed expectation reports.
    let dir = tempfile::tempdir().expect("tempdir");
    let shipped = gatehouse_conformance::model_cases().expect("model cases");
    let mut case = shipped
        .into_iter()
        .find(|case| case.name.contains("no verdict"))
        .expect("the malformed case");
    case.name = "prose that mentions allow".to_owned();
    case.model = Some(serde_json::json!([{"answer": "I would not allow this."}]));
    case.config = Some(serde_json::json!({"ask": true}));
    std::fs::write(
        dir.path().join("loose.json"),
        serde_json::to_string(&[case]).expect("json"),
    )
    .expect("write");
    let extra = cases::load_dir(dir.path()).expect("cases");
    let path = guest("test_guest_model_probe");
    let bytes = std::fs::read(&path).expect("read");
    let report = kit().run("model-probe", &bytes, Suite::Contract, &extra);
    let failures: Vec<_> = report.failures().collect();
    assert_eq!(failures.len(), 1, "{}", report.to_text());
    assert_eq!(failures[0].suite, "cases");
    assert_eq!(failures[0].got, "accept");
    assert!(
        failures[0]
            .detail
            .as_deref()
            .is_some_and(|detail| detail.contains("expected decline|cancel, got accept")),
        "{:?}",
        failures[0]
    );
}

#[test]
fn the_kits_model_is_granted_to_a_model_reviewer_and_a_case_may_script_its_own() {
    let dir = tempfile::tempdir().expect("tempdir");
    let case = |name: &str, model: Option<serde_json::Value>, expect: serde_json::Value| {
        serde_json::json!({
            "name": name,
            "request": {"message": "Allow?", "requestedSchema": {"type": "object", "properties": {}},
                        "_meta": {"codex_request_type": "approval_request",
                                  "codex_approval_kind": "mcp_tool_call", "tool_name": "write_file"}},
            "context": {"server_name": "files", "request_id": 1},
            "config": {"ask": true},
            "model": model,
            "expect": expect,
        })
    };
    std::fs::write(
        dir.path().join("own.json"),
        serde_json::json!([
            case("the kit's model", None, serde_json::json!({"decision": "accept"})),
            case(
                "the case's script",
                Some(serde_json::json!([{"error": "rate-limited"}])),
                serde_json::json!({"decision": "decline", "message_contains": "model error: rate-limited"}),
            ),
        ])
        .to_string(),
    )
    .expect("write");
    let extra = cases::load_dir(dir.path()).expect("cases");
    let path = guest("test_guest_model_probe");
    let bytes = std::fs::read(&path).expect("read");
    let allow = gatehouse_conformance::model::ModelScript::from_spec("stub:allow").expect("stub");
    // The contract inputs run with `{}`, so the probe asks only in the cases.
    let report = kit()
        .with_model(allow)
        .run("model-probe", &bytes, Suite::Contract, &extra);
    assert!(report.passed(), "{}", report.to_text());
    // Without a model of its own the kit's is a provider that is down.
    let report = kit().run("model-probe", &bytes, Suite::Contract, &extra);
    let failed: Vec<_> = report.failures().map(|row| row.case.as_str()).collect();
    assert_eq!(failed, ["the kit's model"], "{}", report.to_text());
    let row = report.failures().next().expect("row");
    assert_eq!(row.got, "decline", "{row:?}");
}

#[test]
fn the_contract_suite_reviews_a_model_reviewer_with_the_kits_model() {
    use gatehouse_conformance::model::{ModelScript, Stub};
    let kit_with = |stub| {
        kit()
            .with_model(ModelScript::stub(stub))
            .with_module_config(PROBE_ASKS)
    };
    for stub in Stub::ALL.into_iter().filter(|stub| *stub != Stub::Allow) {
        let report = run_with(kit_with(stub), "test_guest_model_probe", Suite::Contract);
        assert!(report.passed(), "{stub:?}:\n{}", report.to_text());
    }
    // Allowed, the probe accepts every form with `{}`, which the forms with
    // required fields do not take: the contract suite sees it because the
    // kit's model was granted (and then answered).
    let report = run_with(
        kit_with(Stub::Allow),
        "test_guest_model_probe",
        Suite::Contract,
    );
    assert!(!report.passed());
    for row in report.failures() {
        assert!(row.case.starts_with("answers: form"), "{row:?}");
        assert_eq!(row.got, "failure (schema-mismatch)", "{row:?}");
    }
}

#[test]
fn the_model_suite_is_for_model_reviewers_only() {
    let report = run("gatehouse_guardian", Suite::Model);
    let failures: Vec<_> = report.failures().collect();
    assert_eq!(failures.len(), 1, "{}", report.to_text());
    assert_eq!(failures[0].case, "is a model-reviewer");
    assert_eq!(failures[0].got, "reviewer");
    // `all` leaves it out for a module that cannot ask a model.
    let report = run("gatehouse_guardian", Suite::All);
    assert!(rows(&report, "model").is_empty());
}

#[test]
fn the_shipped_model_cases_match_the_case_files() {
    let shipped = gatehouse_conformance::model_cases().expect("shipped cases");
    let on_disk = cases::load_dir(&cases_dir("model")).expect("cases");
    assert_eq!(shipped.len(), on_disk.len());
}

#[test]
fn the_model_guardian_passes_the_guardian_suite_with_its_model_deciding_the_marked_cases() {
    let report = run("gatehouse_model_guardian", Suite::All);
    assert!(report.passed(), "{}", report.to_text());
    // It claims `guardian-compatible`, so `all` ran the guardian suite: one
    // row per case the rules decide, one per run of a case the model decides.
    let cases = gatehouse_conformance::guardian_cases().expect("guardian cases");
    let expected_rows: usize = cases.iter().map(|case| case.with_model.len().max(1)).sum();
    let guardian = rows(&report, "guardian");
    assert_eq!(guardian.len(), expected_rows, "{}", report.to_text());
    assert!(guardian.len() > cases.len());
    let under = |model: &str| -> Vec<&str> {
        guardian
            .iter()
            .filter(|row| row.case.ends_with(&format!("(with model stub:{model})")))
            .map(|row| row.got.as_str())
            .collect()
    };
    let (denied, allowed) = (under("deny"), under("allow"));
    assert!(denied.len() >= 19, "{denied:?}");
    assert!(denied.iter().all(|got| *got == "decline"), "{denied:?}");
    // One allowing run differs from the rest: the destructive hint and the
    // mismatch, where the model is not asked and the answer is a decline.
    assert!(allowed.len() >= 20, "{allowed:?}");
    assert_eq!(
        allowed.iter().filter(|got| **got == "accept").count(),
        denied.len(),
        "{allowed:?}"
    );
    // The model suite ran too.
    assert!(!rows(&report, "model").is_empty());
    // Where the rules decide, the kit's model is never asked, so which model
    // it is changes nothing.
    for stub in [
        gatehouse_conformance::model::Stub::Allow,
        gatehouse_conformance::model::Stub::Deny,
    ] {
        let kit = kit().with_model(gatehouse_conformance::model::ModelScript::stub(stub));
        let report = run_with(kit, "gatehouse_model_guardian", Suite::Guardian);
        assert!(report.passed(), "{stub:?}:\n{}", report.to_text());
    }
}

/// A case for the model probe: an approval request for `write_file` with
/// `config` (`{"ask": true}` makes the probe ask its model once).
fn probe_case(
    name: &str,
    config: serde_json::Value,
    expect: serde_json::Value,
    with_model: Option<serde_json::Value>,
) -> serde_json::Value {
    let mut case = serde_json::json!({
        "name": name,
        "request": {"message": "Allow?", "requestedSchema": {"type": "object", "properties": {}},
                    "_meta": {"codex_request_type": "approval_request",
                              "codex_approval_kind": "mcp_tool_call", "tool_name": "write_file"}},
        "context": {"server_name": "files", "request_id": 1},
        "config": config,
        "expect": expect,
    });
    if let Some(with_model) = with_model {
        case["with_model"] = with_model;
    }
    case
}

#[test]
fn own_cases_may_say_what_a_model_reviewer_answers_under_each_model() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ask = serde_json::json!({"ask": true});
    std::fs::write(
        dir.path().join("own.json"),
        serde_json::json!([
            // Each run under its own model, which the probe asks once.
            probe_case(
                "the model decides",
                ask.clone(),
                serde_json::json!({"decision": "defer"}),
                Some(serde_json::json!([
                    {"model": "allow", "expect": {"decision": "accept"}},
                    {"model": "deny", "expect": {"decision": "decline", "message_contains": "model said: "}},
                ])),
            ),
            // Right answer, but the model was never asked.
            probe_case(
                "the model is not asked",
                serde_json::json!({}),
                serde_json::json!({"decision": "defer"}),
                Some(serde_json::json!([{"model": "deny", "expect": {"decision": "decline"}}])),
            ),
            // A case may count the calls itself.
            probe_case(
                "asked where it must not be",
                ask,
                serde_json::json!({"decision": "any", "model_calls": 0}),
                None,
            ),
        ])
        .to_string(),
    )
    .expect("write");
    let extra = cases::load_dir(dir.path()).expect("cases");
    let path = guest("test_guest_model_probe");
    let bytes = std::fs::read(&path).expect("read");
    let report = kit().run("model-probe", &bytes, Suite::Contract, &extra);
    let own = rows(&report, "cases");
    let names: Vec<&str> = own.iter().map(|row| row.case.as_str()).collect();
    assert_eq!(
        names,
        [
            "the model decides (with model stub:allow)",
            "the model decides (with model stub:deny)",
            "the model is not asked (with model stub:deny)",
            "asked where it must not be",
        ],
        "{}",
        report.to_text()
    );
    let failed: Vec<(&str, &str)> = report
        .failures()
        .map(|row| (row.case.as_str(), row.detail.as_deref().unwrap_or_default()))
        .collect();
    assert_eq!(failed.len(), 2, "{}", report.to_text());
    assert_eq!(failed[0].0, "the model is not asked (with model stub:deny)");
    assert_eq!(failed[0].1, "model calls: expected 1, got 0");
    assert_eq!(failed[1].0, "asked where it must not be");
    assert_eq!(failed[1].1, "model calls: expected 0, got 1");
    // A reviewer runs `expect` and never `with_model`.
    let guardian = std::fs::read(guest("gatehouse_guardian")).expect("read");
    let report = kit().run("guardian", &guardian, Suite::Contract, &extra);
    assert_eq!(rows(&report, "cases").len(), 3, "{}", report.to_text());
}

#[test]
fn the_guardian_suite_holds_a_model_reviewer_to_the_rules_where_they_decide() {
    // A model-reviewer that gets a rules-decided case right by asking its
    // model is caught: in the guardian suite such a case allows no call.
    use gatehouse_conformance::cases::Unmarked;
    use gatehouse_conformance::model::ModelScript;
    use gatehouse_core::chain::{Chain, ChainLink};
    use gatehouse_core::contract::World;
    let case: cases::Case = serde_json::from_value(probe_case(
        "a rules-decided case",
        serde_json::json!({"ask": true}),
        serde_json::json!({"decision": "accept"}),
        None,
    ))
    .expect("case");
    let sandbox = gatehouse_tests::sandbox();
    let probe = gatehouse_tests::load(&sandbox, "test_guest_model_probe");
    let allow = ModelScript::from_spec("stub:allow").expect("stub");
    let chain = Chain::new(vec![ChainLink::new(probe).with_model(allow.grant())]);
    let run = |unmarked| {
        let variants = case
            .variants(World::ModelReviewer, unmarked)
            .expect("variants");
        assert_eq!(variants.len(), 1);
        case.run_variant(&chain, &case.config_json(), &variants[0])
            .expect("run")
    };
    let guardian_suite = run(Unmarked::RulesDecide);
    assert_eq!(guardian_suite.got, "accept");
    assert_eq!(
        guardian_suite.mismatches,
        ["model calls: expected 0, got 1"],
        "{guardian_suite:?}"
    );
    assert!(run(Unmarked::AsWritten).passed());
}

#[test]
fn the_kit_compiles_through_a_compile_cache_once_for_both_sandboxes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cache = dir.path().join("compiled");
    let path = guest("gatehouse_allowlist");
    let bytes = std::fs::read(&path).expect("read guest");
    let artifacts = || -> Vec<(std::path::PathBuf, std::time::SystemTime)> {
        std::fs::read_dir(&cache)
            .expect("the cache directory")
            .map(|entry| entry.expect("entry"))
            // Compiled modules, not the packs of their compiled functions.
            .filter(|entry| entry.path().extension().is_some_and(|ext| ext == "cwasm"))
            .map(|entry| {
                let modified = entry
                    .metadata()
                    .expect("metadata")
                    .modified()
                    .expect("mtime");
                (entry.path(), modified)
            })
            .collect()
    };
    let kit = Kit::with_compile_cache(Limits::default(), &cache).expect("kit");
    let report = kit.run("gatehouse_allowlist.wasm", &bytes, Suite::Contract, &[]);
    assert!(report.passed(), "{}", report.to_text());
    // Both sandboxes (the closed one and the denying one) used one artifact.
    let first = artifacts();
    assert_eq!(first.len(), 1, "{first:?}");
    // Another kit (or a host's sandbox with the same limits) finds it.
    let again = Kit::with_compile_cache(Limits::default(), &cache).expect("kit");
    assert!(
        again
            .run("gatehouse_allowlist.wasm", &bytes, Suite::Contract, &[])
            .passed()
    );
    assert_eq!(artifacts(), first);
}

/// The kit `gatehouse serve` runs before a swap, and `gatehouse modules`
/// before it locks a module, is built from the serving config's sandbox
/// (`Config::sandbox_builder`): it compiles into the serving compile cache,
/// and keeps to `[review] compile_cache_max_bytes` as the swap does. Proving
/// one module after another under a bound that fits one leaves only the last.
#[test]
fn a_kit_built_from_the_config_keeps_to_the_compile_cache_bound() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("gatehouse.toml");
    std::fs::write(&file, "[review]\ncompile_cache_max_bytes = 1\n").expect("config");
    let config = gatehouse_gateway::config::Config::load(&file).expect("the config");
    let cache = config.compile_cache_dir();
    let kit = Kit::from_builder(config.sandbox_builder()).expect("kit");
    for name in ["gatehouse_allowlist", "reviewer_template"] {
        let bytes = std::fs::read(guest(name)).expect("read guest");
        let report = kit.run(name, &bytes, Suite::Contract, &[]);
        assert!(report.passed(), "{name}:\n{}", report.to_text());
        // Storing this module's artifact removed the one proved before.
        assert_eq!(
            cached_digests(&cache),
            [module_digest(&bytes)],
            "after proving {name}"
        );
    }
}
