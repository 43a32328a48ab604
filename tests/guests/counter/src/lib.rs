//! Test guest `counter`: declines with the number of reviews this instance
//! has seen. A host that gives every review a fresh instance always gets "1".
#![cfg(target_arch = "wasm32")]

use std::sync::atomic::{AtomicU32, Ordering};

use test_guest_helper::{Decision, Outcome, ReviewRequest, Reviewer};

static REVIEWS: AtomicU32 = AtomicU32::new(0);

struct Guest;

impl Reviewer for Guest {
    const NAME: &'static str = "counter";

    fn review(_config: String, _request: ReviewRequest) -> Outcome {
        let seen = REVIEWS.fetch_add(1, Ordering::SeqCst) + 1;
        Outcome {
            decision: Decision::Decline(Some(seen.to_string())),
            rationale: None,
            risk: None,
        }
    }
}

test_guest_helper::export_reviewer!(Guest);
