//! Test guest `counter`: declines with the number of reviews this instance
//! has seen. A host that gives every review a fresh instance always gets "1".
#![cfg(target_arch = "wasm32")]

use std::sync::atomic::{AtomicU32, Ordering};

wit_bindgen::generate!({
    world: "reviewer",
    path: "../../../wit",
});

use gatehouse::reviewer::types::{Decision, ModuleInfo, Outcome, ReviewRequest};

static REVIEWS: AtomicU32 = AtomicU32::new(0);

struct Guest;

impl exports::gatehouse::reviewer::review::Guest for Guest {
    fn describe() -> ModuleInfo {
        ModuleInfo {
            name: "counter".to_owned(),
            version: "0.0.0".to_owned(),
            claims: Vec::new(),
        }
    }

    fn review(_config: String, _request: ReviewRequest) -> Outcome {
        let seen = REVIEWS.fetch_add(1, Ordering::SeqCst) + 1;
        Outcome {
            decision: Decision::Decline(Some(seen.to_string())),
            rationale: None,
            risk: None,
        }
    }
}

export!(Guest);
