//! Every guardian case under `host/conformance/suites/guardian/` through the real
//! sandboxed guardian components: the rule-based guardian, and the model
//! guardian with its model deciding exactly the cases marked `with_model`.

use std::path::PathBuf;

use gatehouse_conformance::cases::{self, Case, Unmarked};
use gatehouse_conformance::model::ModelScript;
use gatehouse_core::chain::{Chain, ChainLink};
use gatehouse_core::context::CallKind;
use gatehouse_core::contract::World;
use gatehouse_tests::{approval_request, cases_dir, load, sandbox};

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

/// The guardian copies the reviewed call out of the request only for its
/// debug entry ("guardian reviewed a tool call", with the call as Codex's
/// planned action): when the host records debug entries, the entry is there,
/// whole.
#[test]
fn the_guardian_logs_the_call_it_reviewed_when_debug_entries_are_recorded() {
    let sandbox = sandbox();
    let guardian = load(&sandbox, "gatehouse_guardian");
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::DEBUG)
        .with_writer(std::io::sink)
        .finish();
    let report = tracing::subscriber::with_default(subscriber, || {
        guardian.review("{}", &approval_request())
    });
    let outcome = report.result.as_ref().expect("the guardian reviews");
    assert_eq!(outcome.decision.name(), "decline", "{outcome:?}");
    let entry = report
        .logs
        .entries
        .iter()
        .find(|entry| entry.message == "guardian reviewed a tool call")
        .unwrap_or_else(|| panic!("no entry for the reviewed call: {:?}", report.logs));
    assert_eq!(entry.level, "debug");
    let [(key, action)] = entry.fields.as_slice() else {
        panic!("one field expected: {:?}", entry.fields);
    };
    assert_eq!(key, "request");
    let action: serde_json::Value = serde_json::from_str(action).expect("the action is JSON");
    assert_eq!(action["tool"], "mcp_tool_call", "{action}");
    assert_eq!(action["server"], "docs", "{action}");
    assert_eq!(action["tool_name"], "read_file", "{action}");
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

/// The model guardian as the kit runs it: granted the kit's default model (a
/// provider that is down) unless a run scripts its own.
fn model_guardian_chain() -> Chain {
    let sandbox = sandbox();
    let module = load(&sandbox, "gatehouse_model_guardian");
    assert_eq!(module.world(), World::ModelReviewer);
    Chain::new(vec![
        ChainLink::new(module).with_model(ModelScript::default().grant()),
    ])
}

/// Runs every variant of `cases` for a model-reviewer under the guardian
/// suite's rule; returns the failures.
fn model_reviewer_failures(chain: &Chain, cases: &[(PathBuf, Case)]) -> Vec<String> {
    let mut failures = Vec::new();
    for (file, case) in cases {
        let variants = case
            .variants(World::ModelReviewer, Unmarked::RulesDecide)
            .expect("valid with_model");
        for variant in &variants {
            let run = case
                .run_variant(chain, &case.config_json(), variant)
                .expect("case is well formed");
            if !run.passed() {
                failures.push(format!(
                    "{}: {}: {}",
                    file.file_name().unwrap_or_default().to_string_lossy(),
                    variant.row_name(&case.name),
                    run.mismatches.join("; ")
                ));
            }
        }
    }
    failures
}

#[test]
fn every_guardian_case_holds_for_the_model_guardian() {
    let chain = model_guardian_chain();
    let cases = cases::load_dir(&cases_dir("guardian")).expect("guardian cases load");
    let failures = model_reviewer_failures(&chain, &cases);
    assert!(
        failures.is_empty(),
        "{} run(s) failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
    // Where the model guardian's model decides (in place of the catalog's
    // hints or the config's `default`), and where it answers as the rules do
    // without asking it.
    let marked: Vec<&Case> = cases
        .iter()
        .map(|(_, case)| case)
        .filter(|case| !case.with_model.is_empty())
        .collect();
    let model_decided = marked
        .iter()
        .filter(|case| {
            case.with_model
                .iter()
                .any(|run| run.expect.model_calls != Some(0))
        })
        .count();
    assert!(model_decided >= 19, "{model_decided} model-decided cases");
    assert!(
        cases.len() - marked.len() >= 55,
        "{} cases the rules decide",
        cases.len() - marked.len()
    );
}

#[test]
fn a_model_guardian_run_that_the_model_does_not_decide_is_reported() {
    // The runner must tell the model's answer from the rules': run a
    // model-decided case's denying expectation under a model that allows.
    let chain = model_guardian_chain();
    let (file, case) = cases::load_dir(&cases_dir("guardian"))
        .expect("guardian cases load")
        .into_iter()
        .find(|(_, case)| case.name == "the read-only hint allows")
        .expect("the read-only case");
    let mut wrong = case.clone();
    let deny = wrong
        .with_model
        .iter()
        .position(|run| run.model == "deny")
        .expect("a deny run");
    wrong.with_model[deny].model = serde_json::json!("allow");
    let failures = model_reviewer_failures(&chain, &[(file.clone(), wrong)]);
    assert_eq!(failures.len(), 1, "{failures:?}");
    assert!(
        failures[0].contains("expected decline, got accept"),
        "{failures:?}"
    );
    // And the rules' expectation, which a model guardian does not meet
    // there, fails it when the case is not marked: the model was asked.
    let mut unmarked = case;
    unmarked.with_model.clear();
    let failures = model_reviewer_failures(&chain, &[(file, unmarked)]);
    assert_eq!(failures.len(), 1, "{failures:?}");
    assert!(
        failures[0].contains("model calls: expected 0, got 1"),
        "{failures:?}"
    );
}

#[test]
fn the_related_call_cases_reach_the_module_with_their_call() {
    // `context.related_call` is read from the case file; each case of
    // related_call.json ties its elicitation to the agent's call.
    let cases = cases::load_dir(&cases_dir("guardian")).expect("guardian cases load");
    let related: Vec<&Case> = cases
        .iter()
        .filter(|(file, _)| file.ends_with("related_call.json"))
        .map(|(_, case)| case)
        .collect();
    assert!(related.len() >= 12, "{} related-call cases", related.len());
    let mut kinds = Vec::new();
    for case in &related {
        let request = case.review_request().expect("valid");
        let call = request
            .context()
            .related_call
            .as_ref()
            .unwrap_or_else(|| panic!("{}: no related call", case.name));
        kinds.push(call.kind);
    }
    assert!(kinds.contains(&CallKind::ToolCall));
    assert!(kinds.contains(&CallKind::ResourceRead));
    // Both guardians decline a mismatch with the same message.
    let mismatches = related
        .iter()
        .filter(|case| {
            case.expect.message.as_ref().is_some_and(|message| {
                message.as_deref().is_some_and(|message| {
                    message.starts_with(
                        "This approval request was declined because it does not match the call the agent made.",
                    )
                })
            })
        })
        .count();
    assert!(mismatches >= 6, "{mismatches} mismatch cases");
}
