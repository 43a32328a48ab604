//! `gatehouse.toml` parsing and checking.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    if let Err(violation) = gatehouse_fuzzing::config(data) {
        panic!("{violation}");
    }
});
