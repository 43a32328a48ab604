//! Plugin manifests and `.mcp.json` read by discovery.
#![no_main]

use std::sync::OnceLock;

/// One scratch root for the whole run: the files are rewritten per input.
static SCRATCH: OnceLock<tempfile::TempDir> = OnceLock::new();

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let scratch = SCRATCH.get_or_init(|| tempfile::tempdir().expect("a scratch directory"));
    if let Err(violation) = gatehouse_fuzzing::discovery(data, scratch.path()) {
        panic!("{violation}");
    }
});
