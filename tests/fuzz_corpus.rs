//! The fuzz targets' short pass in every test run: each committed corpus
//! input under `fuzz/corpus/<target>/` goes through the same property
//! function the cargo-fuzz target calls (`gatehouse::fuzzing`), so a crash
//! the fuzzer once found (and that was added to the corpus) stays fixed.

use std::path::PathBuf;

use gatehouse::fuzzing::{self, Accepted, Violation};

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
    let accepted = replay("elicitation_params", fuzzing::elicitation_params);
    assert!(
        accepted >= 10,
        "only {accepted} seeds parse: the corpus lost its valid inputs"
    );
}

#[test]
fn the_config_corpus_keeps_its_properties() {
    let accepted = replay("config", fuzzing::config);
    assert!(accepted >= 2, "only {accepted} seeds parse");
}

#[test]
fn the_discovery_corpus_keeps_its_properties() {
    let scratch = tempfile::tempdir().expect("tempdir");
    let accepted = replay("discovery", |bytes| {
        fuzzing::discovery(bytes, scratch.path())
    });
    assert!(accepted >= 2, "only {accepted} seeds yield servers");
}

#[test]
fn a_broken_property_is_reported_not_swallowed() {
    // The replay must be able to fail: invalid UTF-8 is refused (not a
    // violation), and a config that parses is accepted.
    assert_eq!(fuzzing::config(&[0xff, 0xfe]), Ok(Accepted::No));
    assert_eq!(
        fuzzing::config(b"[mcp_servers.a]\ncommand = \"x\"\n"),
        Ok(Accepted::Yes)
    );
    assert_eq!(
        fuzzing::elicitation_params(br#"{"message": 1}"#),
        Ok(Accepted::No)
    );
}
