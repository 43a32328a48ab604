//! Test guest `url-content`: Accepts every request with content, URL mode included: a URL accept with content must be refused.
#![cfg(target_arch = "wasm32")]

use test_guest_helper::{Decision, Outcome, ReviewRequest, Reviewer};

struct Guest;

impl Reviewer for Guest {
    const NAME: &'static str = "url-content";

    fn review(_config: String, _request: ReviewRequest) -> Outcome {
        Outcome {
            decision: Decision::Accept(Some("{}".to_owned())),
            rationale: None,
            risk: None,
        }
    }
}

test_guest_helper::export_reviewer!(Guest);
