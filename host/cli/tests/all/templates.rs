//! The reviewer templates in three languages, proven by the same kit through
//! the built `gatehouse`, as a module author proves theirs (README, "Writing a
//! reviewer module"): the Rust template (`examples/reviewer-template`, built by
//! `.ci/build-guests`) passes `gatehouse conformance --suite contract`, and the
//! allowlist policy in Rust (`guests/allowlist`), TypeScript
//! (`examples/reviewer-template-js`) and Python
//! (`examples/reviewer-template-py`), the last two built by
//! `.ci/build-templates`, each pass `gatehouse conformance --cases
//! guests/allowlist/cases` (the contract suite and the shared cases) with the
//! same outcome, case for case.
//!
//! `.ci/run` builds the templates and sets `GATEHOUSE_TEMPLATES=1`: then a
//! missing template fails the test. Without the variable a missing template
//! skips the test with a note (building them needs node, npm, Python and the
//! registries).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

use serde_json::Value;

use crate::paths::{gatehouse, guest, root};

/// Set (by `.ci/run`, after `.ci/build-templates`): the templates must be
/// built.
const REQUIRED: &str = "GATEHOUSE_TEMPLATES";

/// The allowlist's cases, shared by the three languages.
const CASES: &str = "guests/allowlist/cases";

/// One row of `gatehouse conformance --format json`.
struct Row {
    suite: String,
    case: String,
    got: String,
}

/// Runs `gatehouse conformance module args... --format json` and returns
/// its rows, failing the test unless it exits 0 with every row passed.
fn conformance(label: &str, module: &Path, args: &[&str]) -> Vec<Row> {
    let module = shown(module);
    let mut argv = vec!["conformance", module.as_str()];
    argv.extend_from_slice(args);
    argv.extend_from_slice(&["--format", "json"]);
    let started = Instant::now();
    let output = gatehouse(&argv);
    let elapsed = started.elapsed();
    let stderr = String::from_utf8_lossy(&output.stderr);
    let report: Value = serde_json::from_slice(&output.stdout).unwrap_or_else(|error| {
        panic!(
            "{label}: gatehouse {} printed no JSON report ({error}), exit {}:\n{}\n{stderr}",
            argv.join(" "),
            output.status,
            String::from_utf8_lossy(&output.stdout),
        )
    });
    let results = report["results"].as_array().expect("results");
    let failed: Vec<&Value> = results
        .iter()
        .filter(|row| row["passed"] != Value::Bool(true))
        .collect();
    assert!(
        failed.is_empty() && output.status.success(),
        "{label}: gatehouse {} exited {}, {} of {} rows failed:\n{}",
        argv.join(" "),
        output.status,
        failed.len(),
        results.len(),
        failed
            .iter()
            .map(|row| format!(
                "  {}: {}: expected {}, got {}: {}",
                row["suite"], row["case"], row["expected"], row["got"], row["detail"]
            ))
            .collect::<Vec<_>>()
            .join("\n"),
    );
    eprintln!(
        "{label}: gatehouse {}: {} rows passed in {:.1} s",
        argv.join(" "),
        results.len(),
        elapsed.as_secs_f64()
    );
    results
        .iter()
        .map(|row| Row {
            suite: row["suite"].as_str().expect("suite").to_owned(),
            case: row["case"].as_str().expect("case").to_owned(),
            got: row["got"].as_str().expect("got").to_owned(),
        })
        .collect()
}

/// `path` as the test prints it: relative to the workspace root.
fn shown(path: &Path) -> String {
    path.strip_prefix(root())
        .unwrap_or(path)
        .display()
        .to_string()
}

/// The rows of `suite`: case name to what the module gave.
fn outcomes(rows: &[Row], suite: &str) -> BTreeMap<String, String> {
    let mut outcomes = BTreeMap::new();
    for row in rows.iter().filter(|row| row.suite == suite) {
        let previous = outcomes.insert(row.case.clone(), row.got.clone());
        assert!(previous.is_none(), "two {suite} rows named {:?}", row.case);
    }
    outcomes
}

/// The built TypeScript and Python templates, or `None` (with a note) when
/// one is missing and `GATEHOUSE_TEMPLATES` is unset.
fn built_templates() -> Option<[(&'static str, PathBuf); 2]> {
    let templates = [
        (
            "TypeScript",
            root().join("examples/reviewer-template-js/reviewer.wasm"),
        ),
        (
            "Python",
            root().join("examples/reviewer-template-py/reviewer.wasm"),
        ),
    ];
    let missing: Vec<String> = templates
        .iter()
        .filter(|(_, path)| !path.exists())
        .map(|(_, path)| shown(path))
        .collect();
    if missing.is_empty() {
        return Some(templates);
    }
    let required = std::env::var_os(REQUIRED).is_some_and(|value| !value.is_empty());
    assert!(
        !required,
        "{REQUIRED} is set but {} is missing: run .ci/build-templates",
        missing.join(" and ")
    );
    eprintln!(
        "skipped: {} is missing (run .ci/build-templates; with {REQUIRED}=1, as .ci/run sets it, \
         a missing template fails this test)",
        missing.join(" and ")
    );
    None
}

/// The contract suite's rows on the Rust template (its policy is not the
/// allowlist's, so it runs no allowlist cases).
fn rust_template_contract() -> Vec<Row> {
    let rows = conformance(
        "Rust template",
        &guest("reviewer_template"),
        &["--suite", "contract"],
    );
    assert!(rows.iter().all(|row| row.suite == "contract"));
    assert!(rows.len() >= 40, "only {} contract checks", rows.len());
    rows
}

#[test]
fn the_rust_template_passes_the_contract_suite() {
    rust_template_contract();
}

#[test]
fn the_rust_template_passes_its_own_cases() {
    let cases = root().join("examples/reviewer-template/cases");
    let rows = conformance(
        "Rust template",
        &guest("reviewer_template"),
        &["--cases", &shown(&cases)],
    );
    let written: Vec<Value> =
        serde_json::from_str(&std::fs::read_to_string(cases.join("hosts.json")).unwrap()).unwrap();
    assert_eq!(outcomes(&rows, "cases").len(), written.len());
}

#[test]
fn the_rust_model_reviewer_template_passes_the_model_suite_and_its_cases() {
    let cases = root().join("examples/model-reviewer-template/cases");
    let rows = conformance(
        "Rust model-reviewer template",
        &guest("model_reviewer_template"),
        &["--cases", &shown(&cases)],
    );
    assert!(outcomes(&rows, "model").len() >= 8, "the model suite ran");
    assert!(
        outcomes(&rows, "contract").len() >= 40,
        "the contract suite ran"
    );
    assert!(!outcomes(&rows, "cases").is_empty(), "its cases ran");
}

#[test]
fn the_model_reviewer_passes_the_kit_alike_in_rust_typescript_and_python() {
    let built = [
        root().join("examples/model-reviewer-template-js/reviewer.wasm"),
        root().join("examples/model-reviewer-template-py/reviewer.wasm"),
    ];
    if built.iter().any(|path| !path.exists()) {
        let required = std::env::var_os(REQUIRED).is_some_and(|value| !value.is_empty());
        assert!(
            !required,
            "{REQUIRED} is set but a model-reviewer template is missing: run .ci/build-templates"
        );
        eprintln!(
            "skipped: the TypeScript and Python model-reviewer templates are not built (.ci/build-templates)"
        );
        return;
    }
    let cases = shown(&root().join("examples/model-reviewer-template/cases"));
    let args = ["--cases", cases.as_str(), "--deadline-ms", "1000"];
    let rust = conformance(
        "Rust model-reviewer",
        &guest("model_reviewer_template"),
        &args,
    );
    for (label, module) in [
        ("TypeScript model-reviewer", &built[0]),
        ("Python model-reviewer", &built[1]),
    ] {
        let rows = conformance(label, module, &args);
        for suite in ["contract", "model", "cases"] {
            // Each module describes itself by its own name.
            let answers = |rows: &[Row]| {
                let mut answers = outcomes(rows, suite);
                answers.remove("describe");
                answers
            };
            assert_eq!(
                answers(&rows),
                answers(&rust),
                "{label}: the {suite} rows differ from the Rust template's"
            );
        }
    }
}

#[test]
fn the_allowlist_passes_the_kit_alike_in_rust_typescript_and_python() {
    let Some(templates) = built_templates() else {
        return;
    };
    let contract: Vec<String> = rust_template_contract()
        .into_iter()
        .map(|row| row.case)
        .collect();
    let modules = [("Rust", guest("gatehouse_allowlist"))]
        .into_iter()
        .chain(templates);
    // One after another, and with a deadline of a second: the question here
    // is the same outcome in every language, and a test machine running other
    // tests beside this one can hold the Python module past the kit's 50 ms
    // on its largest inputs (release medians are in docs/BENCHMARKS.md).
    let mut reference: Option<BTreeMap<String, String>> = None;
    for (language, module) in modules {
        let rows = conformance(
            language,
            &module,
            &["--cases", CASES, "--deadline-ms", "1000"],
        );
        // `--cases` with the default suite runs the whole contract suite too.
        let contract_here: Vec<&str> = rows
            .iter()
            .filter(|row| row.suite == "contract")
            .map(|row| row.case.as_str())
            .collect();
        assert_eq!(
            contract_here, contract,
            "{language}: not the Rust template's contract checks"
        );
        assert!(
            rows.iter()
                .all(|row| row.suite == "contract" || row.suite == "cases"),
            "{language}: a suite other than contract and cases ran"
        );
        let cases = outcomes(&rows, "cases");
        assert!(cases.len() >= 100, "{language}: only {} cases", cases.len());
        match &reference {
            None => reference = Some(cases),
            Some(rust) => {
                let differ: Vec<String> = rust
                    .iter()
                    .filter(|(case, got)| cases.get(*case) != Some(got))
                    .map(|(case, got)| {
                        format!("  {case}: Rust {got}, {language} {:?}", cases.get(case))
                    })
                    .collect();
                assert!(
                    differ.is_empty() && cases.len() == rust.len(),
                    "{language} and Rust differ on {} of {} cases ({} against {}):\n{}",
                    differ.len(),
                    rust.len(),
                    cases.len(),
                    rust.len(),
                    differ.join("\n")
                );
            }
        }
    }
}
