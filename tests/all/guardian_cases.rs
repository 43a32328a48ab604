//! Every guardian case under `host/conformance/suites/guardian/` through the real
//! sandboxed guardian component.

use gatehouse_conformance::cases;
use gatehouse_core::chain::{Chain, ChainLink};
use gatehouse_tests::{cases_dir, load, sandbox};

#[test]
fn every_guardian_case_holds() {
    let sandbox = sandbox();
    let guardian = load(&sandbox, "gatehouse_guardian");
    let chain = Chain::new(vec![ChainLink::new(guardian)]);
    let cases = cases::load_dir(&cases_dir("guardian")).expect("guardian cases load");
    assert!(
        cases.len() >= 60,
        "only {} guardian cases found",
        cases.len()
    );
    let mut failures = Vec::new();
    for (file, case) in &cases {
        let run = case.run(&chain).expect("case is well formed");
        if !run.passed() {
            failures.push(format!(
                "{}: {}: {}",
                file.file_name().unwrap_or_default().to_string_lossy(),
                case.name,
                run.mismatches.join("; ")
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{} case(s) failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn case_names_are_unique() {
    let cases = cases::load_dir(&cases_dir("guardian")).expect("guardian cases load");
    let mut names: Vec<&str> = cases.iter().map(|(_, case)| case.name.as_str()).collect();
    names.sort_unstable();
    let before = names.len();
    names.dedup();
    assert_eq!(before, names.len(), "duplicate case names");
}

#[test]
fn a_wrong_expectation_is_reported() {
    // The runner itself must be able to fail: flip one expectation.
    let sandbox = sandbox();
    let guardian = load(&sandbox, "gatehouse_guardian");
    let chain = Chain::new(vec![ChainLink::new(guardian)]);
    let (_, case) = cases::load_dir(&cases_dir("guardian"))
        .expect("guardian cases load")
        .into_iter()
        .find(|(_, case)| case.expect.decision == "defer")
        .expect("a defer case exists");
    let mut wrong = case.clone();
    wrong.expect.decision = "accept".to_owned();
    let run = wrong.run(&chain).expect("case is well formed");
    assert!(!run.passed());
    assert!(
        run.mismatches[0].contains("expected accept, got defer"),
        "{:?}",
        run.mismatches
    );
}
