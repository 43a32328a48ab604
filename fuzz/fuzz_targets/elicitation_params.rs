//! Elicitation params from a server → the contract types.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    if let Err(violation) = gatehouse_fuzzing::elicitation_params(data) {
        panic!("{violation}");
    }
});
