//! Test guest `extra-import`: a reviewer that also imports `test:extra/secrets`.
#![cfg(target_arch = "wasm32")]

wit_bindgen::generate!({
    world: "test:extra/reviewer-plus",
    path: ["../../../wit", "wit"],
    generate_all,
});

use gatehouse::reviewer::types::{Decision, ModuleInfo, Outcome, ReviewRequest};

struct Guest;

impl exports::gatehouse::reviewer::review::Guest for Guest {
    fn describe() -> ModuleInfo {
        ModuleInfo {
            name: "extra-import".to_owned(),
            version: "0.0.0".to_owned(),
            claims: Vec::new(),
        }
    }

    fn review(_config: String, _request: ReviewRequest) -> Outcome {
        Outcome {
            decision: Decision::Decline(Some(test::extra::secrets::get())),
            rationale: None,
            risk: None,
        }
    }
}

export!(Guest);
