//! The conformance kit against real components: every reference guest passes,
//! and each deliberately broken guest is reported with the right failure,
//! never a crash.

use std::time::Duration;

use gatehouse_conformance::cases;
use gatehouse_conformance::{Kit, Report, Suite};
use gatehouse_core::sandbox::Limits;
use gatehouse_tests::{cases_dir, guest};

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
