//! Test guest `log-flood`: Logs 10,000 entries, then defers: the host must cap what it keeps.
#![cfg(target_arch = "wasm32")]

use test_guest_helper::{Decision, Level, Outcome, ReviewRequest, Reviewer, logging};

struct Guest;

impl Reviewer for Guest {
    const NAME: &'static str = "log-flood";

    fn review(_config: String, _request: ReviewRequest) -> Outcome {
        for index in 0..10_000u32 {
            logging::log(
                Level::Info,
                "flood",
                &[("index".to_owned(), index.to_string())],
            );
        }
        Outcome {
            decision: Decision::Defer,
            rationale: None,
            risk: None,
        }
    }
}

test_guest_helper::export_reviewer!(Guest);
