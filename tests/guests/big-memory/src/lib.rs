//! Test guest `big-memory`: 24 MiB of static data make its initial memory
//! larger than the host's 16 MiB cap.
#![cfg(target_arch = "wasm32")]

use test_guest_helper::{Decision, Outcome, ReviewRequest, Reviewer};

static BALLAST: [u8; 24 << 20] = [7; 24 << 20];

struct Guest;

impl Reviewer for Guest {
    const NAME: &'static str = "big-memory";

    fn review(_config: String, _request: ReviewRequest) -> Outcome {
        let index = std::hint::black_box(12_345usize);
        Outcome {
            decision: Decision::Decline(Some(BALLAST[index].to_string())),
            rationale: None,
            risk: None,
        }
    }
}

test_guest_helper::export_reviewer!(Guest);
