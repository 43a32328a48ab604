//! Test guest `sleep`: Sleeps for an hour (`std::thread::sleep`, a
//! monotonic-clock pollable the host waits on): the deadline must end the wait.
#![cfg(target_arch = "wasm32")]

use test_guest_helper::{Decision, Outcome, ReviewRequest, Reviewer};

struct Guest;

impl Reviewer for Guest {
    const NAME: &'static str = "sleep";

    fn review(_config: String, _request: ReviewRequest) -> Outcome {
        std::thread::sleep(std::time::Duration::from_secs(3600));
        Outcome {
            decision: Decision::Accept(Some("{}".to_owned())),
            rationale: Some("slept".to_owned()),
            risk: None,
        }
    }
}

test_guest_helper::export_reviewer!(Guest);
