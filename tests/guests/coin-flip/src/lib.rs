//! Test guest `coin-flip`: accepts or declines at random (a fresh random hash
//! seed per instance), so the same input does not give the same outcome.
#![cfg(target_arch = "wasm32")]

use std::hash::{BuildHasher, RandomState};

wit_bindgen::generate!({
    world: "reviewer",
    path: "../../../wit",
});

use gatehouse::reviewer::types::{Decision, ModuleInfo, Outcome, ReviewRequest};

struct Guest;

impl exports::gatehouse::reviewer::review::Guest for Guest {
    fn describe() -> ModuleInfo {
        ModuleInfo {
            name: "coin-flip".to_owned(),
            version: "0.0.0".to_owned(),
            claims: Vec::new(),
        }
    }

    fn review(_config: String, _request: ReviewRequest) -> Outcome {
        let heads = RandomState::new().hash_one(0u8) % 2 == 0;
        Outcome {
            decision: if heads {
                Decision::Cancel
            } else {
                Decision::Defer
            },
            rationale: None,
            risk: None,
        }
    }
}

export!(Guest);
