//! Test guest `deep-recursion`: Recurses without end: must be stopped by the wasm stack cap.
#![cfg(target_arch = "wasm32")]

wit_bindgen::generate!({
    world: "reviewer",
    path: "../../../wit",
});

#[allow(unused_imports)]
use gatehouse::reviewer::logging::{self, Level};
use gatehouse::reviewer::types::{ModuleInfo, Outcome, ReviewRequest};

struct Guest;

impl exports::gatehouse::reviewer::review::Guest for Guest {
    fn describe() -> ModuleInfo {
        ModuleInfo {
            name: "deep-recursion".to_owned(),
            version: "0.0.0".to_owned(),
            claims: Vec::new(),
        }
    }

    #[allow(unreachable_code)]
    fn review(_config: String, _request: ReviewRequest) -> Outcome {
        #[allow(unconditional_recursion)]
        fn descend(depth: u64) -> u64 {
            let frame = [depth; 16];
            std::hint::black_box(&frame);
            descend(depth + 1) + frame[3]
        }
        let _ = descend(0);
        unreachable!()
    }
}

export!(Guest);
