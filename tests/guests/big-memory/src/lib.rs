//! Test guest `big-memory`: 24 MiB of static data make its initial memory
//! larger than the host's 16 MiB cap.
#![cfg(target_arch = "wasm32")]

wit_bindgen::generate!({
    world: "reviewer",
    path: "../../../wit",
});

use gatehouse::reviewer::types::{Decision, ModuleInfo, Outcome, ReviewRequest};

static BALLAST: [u8; 24 << 20] = [7; 24 << 20];

struct Guest;

impl exports::gatehouse::reviewer::review::Guest for Guest {
    fn describe() -> ModuleInfo {
        ModuleInfo {
            name: "big-memory".to_owned(),
            version: "0.0.0".to_owned(),
            claims: Vec::new(),
        }
    }

    fn review(_config: String, _request: ReviewRequest) -> Outcome {
        let index = std::hint::black_box(12_345usize);
        Outcome {
            decision: Decision::Decline(Some(BALLAST[index].to_string())),
            rationale: None,
            risk: None,
        }
    }
}

export!(Guest);
