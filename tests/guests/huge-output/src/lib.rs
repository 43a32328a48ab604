//! Test guest `huge-output`: Returns a 4 MiB rationale: must be refused by the output cap.
#![cfg(target_arch = "wasm32")]

use test_guest_helper::{Decision, Outcome, ReviewRequest, Reviewer};

struct Guest;

impl Reviewer for Guest {
    const NAME: &'static str = "huge-output";

    fn review(_config: String, _request: ReviewRequest) -> Outcome {
        Outcome {
            decision: Decision::Decline(None),
            rationale: Some("x".repeat(4 << 20)),
            risk: None,
        }
    }
}

test_guest_helper::export_reviewer!(Guest);
