//! Test guest `mixed-versions`: exports `review@0.1.0` and imports
//! `call@0.2.0`, which no contract version defines together.
#![cfg(target_arch = "wasm32")]

wit_bindgen::generate!({
    world: "test:mixed/mixed",
    path: ["../../../wit/0.1.0", "../../../wit", "wit"],
    generate_all,
});

use gatehouse::reviewer0_1_0::types::{Decision, ModuleInfo, Outcome, ReviewRequest};

struct Guest;

impl exports::gatehouse::reviewer0_1_0::review::Guest for Guest {
    fn describe() -> ModuleInfo {
        ModuleInfo {
            name: "mixed-versions".to_owned(),
            version: "0.0.0".to_owned(),
            claims: Vec::new(),
        }
    }

    fn review(_config: String, _request: ReviewRequest) -> Outcome {
        let related = gatehouse::reviewer0_2_0::call::related();
        Outcome {
            decision: Decision::Decline(related.map(|call| call.name)),
            rationale: None,
            risk: None,
        }
    }
}

export!(Guest);
