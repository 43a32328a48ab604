//! Test guest `coin-flip`: accepts or declines at random (a fresh random hash
//! seed per instance), so the same input does not give the same outcome.
#![cfg(target_arch = "wasm32")]

use std::hash::{BuildHasher, RandomState};

use test_guest_helper::{Decision, Outcome, ReviewRequest, Reviewer};

struct Guest;

impl Reviewer for Guest {
    const NAME: &'static str = "coin-flip";

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

test_guest_helper::export_reviewer!(Guest);
