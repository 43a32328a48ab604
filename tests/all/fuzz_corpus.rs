//! The fuzz targets' short pass in every test run: each committed corpus
//! input under `fuzz/corpus/<target>/` goes through the same property
//! function the cargo-fuzz target calls (`gatehouse_fuzzing`), so a crash
//! the fuzzer once found (and that was added to the corpus) stays fixed.
//! Then a short random pass on stable Rust (proptest, fixed case counts):
//! byte mutations of the corpus for every target, and structured JSON
//! params, bare and inside an `elicitation/create` message, for the params
//! target. CI has no nightly toolchain for cargo-fuzz; this is its smoke
//! pass.

use std::path::PathBuf;

use gatehouse_fuzzing::{Accepted, Violation};
use proptest::prelude::*;
use proptest::sample::Index;
use proptest::test_runner::{Config, TestRunner};
use serde_json::{Value, json};

fn corpus(target: &str) -> Vec<(PathBuf, Vec<u8>)> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../fuzz/corpus")
        .join(target);
    let mut inputs: Vec<(PathBuf, Vec<u8>)> = std::fs::read_dir(&dir)
        .unwrap_or_else(|error| panic!("{}: {error}", dir.display()))
        .map(|entry| {
            let path = entry.expect("entry").path();
            let bytes = std::fs::read(&path).expect("read");
            (path, bytes)
        })
        .collect();
    inputs.sort();
    assert!(!inputs.is_empty(), "{} is empty", dir.display());
    inputs
}

/// Runs every input; returns how many were accepted.
fn replay(target: &str, check: impl Fn(&[u8]) -> Result<Accepted, Violation>) -> usize {
    let mut accepted = 0;
    for (path, bytes) in corpus(target) {
        match check(&bytes) {
            Ok(Accepted::Yes) => accepted += 1,
            Ok(Accepted::No) => {}
            Err(violation) => panic!("{}: {violation}", path.display()),
        }
    }
    accepted
}

#[test]
fn the_elicitation_params_corpus_keeps_its_properties() {
    let accepted = replay("elicitation_params", gatehouse_fuzzing::elicitation_params);
    assert!(
        accepted >= 10,
        "only {accepted} seeds parse: the corpus lost its valid inputs"
    );
}

#[test]
fn the_config_corpus_keeps_its_properties() {
    let accepted = replay("config", gatehouse_fuzzing::config);
    assert!(accepted >= 2, "only {accepted} seeds parse");
}

#[test]
fn the_discovery_corpus_keeps_its_properties() {
    let scratch = tempfile::tempdir().expect("tempdir");
    let accepted = replay("discovery", |bytes| {
        gatehouse_fuzzing::discovery(bytes, scratch.path())
    });
    assert!(accepted >= 2, "only {accepted} seeds yield servers");
}

#[test]
fn a_broken_property_is_reported_not_swallowed() {
    // The replay must be able to fail: invalid UTF-8 is refused (not a
    // violation), and a config that parses is accepted.
    assert_eq!(gatehouse_fuzzing::config(&[0xff, 0xfe]), Ok(Accepted::No));
    assert_eq!(
        gatehouse_fuzzing::config(b"[mcp_servers.a]\ncommand = \"x\"\n"),
        Ok(Accepted::Yes)
    );
    assert_eq!(
        gatehouse_fuzzing::elicitation_params(br#"{"message": 1}"#),
        Ok(Accepted::No)
    );
}

/// One corpus input with a few byte edits (insert, delete, overwrite,
/// truncate), like a fuzzer's first mutations.
fn mutated(inputs: Vec<Vec<u8>>) -> impl Strategy<Value = Vec<u8>> {
    let edits = proptest::collection::vec((any::<Index>(), 0u8..4, any::<u8>()), 1..8);
    (proptest::sample::select(inputs), edits).prop_map(|(mut bytes, edits)| {
        for (at, kind, byte) in edits {
            let at = at.index(bytes.len() + 1);
            match kind {
                0 => bytes.insert(at, byte),
                1 if at < bytes.len() => {
                    bytes.remove(at);
                }
                2 if at < bytes.len() => bytes[at] = byte,
                _ => bytes.truncate(at),
            }
        }
        bytes
    })
}

/// Runs `cases` mutations of `target`'s corpus through `check`; a
/// violation or a panic fails with the shrunk input.
fn mutation_pass(target: &str, cases: u32, check: impl Fn(&[u8]) -> Result<Accepted, Violation>) {
    let inputs: Vec<Vec<u8>> = corpus(target).into_iter().map(|(_, bytes)| bytes).collect();
    let mut runner = TestRunner::new(Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    });
    let result = runner.run(&mutated(inputs), |bytes| {
        check(&bytes).map_err(|violation| TestCaseError::fail(violation.to_string()))?;
        Ok(())
    });
    if let Err(error) = result {
        panic!("{target}: {error}");
    }
}

#[test]
fn mutated_corpus_inputs_keep_the_properties() {
    mutation_pass(
        "elicitation_params",
        3_000,
        gatehouse_fuzzing::elicitation_params,
    );
    mutation_pass("config", 2_000, gatehouse_fuzzing::config);
    let scratch = tempfile::tempdir().expect("tempdir");
    mutation_pass("discovery", 300, |bytes| {
        gatehouse_fuzzing::discovery(bytes, scratch.path())
    });
}

/// JSON values shaped like elicitation params: the keys MCP gives meaning
/// to, nested a few levels, with every kind of leaf.
fn params_like() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<f64>().prop_map(Value::from),
        prop_oneof![
            Just("object".to_owned()),
            Just("string".to_owned()),
            Just("form".to_owned()),
            Just("url".to_owned()),
            Just("https://example.com/x".to_owned()),
            "[ -~]{0,12}",
        ]
        .prop_map(Value::from),
    ];
    leaf.prop_recursive(4, 48, 6, |inner| {
        let key = prop_oneof![
            Just("message".to_owned()),
            Just("requestedSchema".to_owned()),
            Just("_meta".to_owned()),
            Just("mode".to_owned()),
            Just("url".to_owned()),
            Just("elicitationId".to_owned()),
            Just("type".to_owned()),
            Just("properties".to_owned()),
            Just("required".to_owned()),
            Just("enum".to_owned()),
            "[a-z/]{1,8}",
        ];
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            proptest::collection::btree_map(key, inner, 0..6)
                .prop_map(|map| Value::Object(map.into_iter().collect())),
        ]
    })
}

proptest! {
    #![proptest_config(Config { cases: 2_000, failure_persistence: None, ..Config::default() })]

    /// Structured params, bare and as a whole message (which also goes
    /// through the rescue of params rmcp cannot type).
    #[test]
    fn structured_params_keep_the_properties(
        params in params_like(),
        id in prop_oneof![any::<i64>().prop_map(Value::from), "[a-z0-9-]{0,6}".prop_map(Value::from)],
    ) {
        let bare = serde_json::to_vec(&params).expect("serialises");
        gatehouse_fuzzing::elicitation_params(&bare).map_err(|v| TestCaseError::fail(v.to_string()))?;
        let message = json!({"jsonrpc": "2.0", "id": id, "method": "elicitation/create", "params": params});
        let message = serde_json::to_vec(&message).expect("serialises");
        gatehouse_fuzzing::elicitation_params(&message).map_err(|v| TestCaseError::fail(v.to_string()))?;
    }
}
