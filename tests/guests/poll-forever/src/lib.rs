//! Test guest `poll-forever`: calls `wasi:io/poll#poll` on clock pollables
//! that never fire, again and again: the deadline must end the wait.
#![cfg(target_arch = "wasm32")]

use test_guest_helper::{Decision, Outcome, ReviewRequest, Reviewer};
use wasip2::clocks::monotonic_clock;
use wasip2::io::poll;

struct Guest;

impl Reviewer for Guest {
    const NAME: &'static str = "poll-forever";

    fn review(_config: String, _request: ReviewRequest) -> Outcome {
        let never = monotonic_clock::subscribe_instant(u64::MAX);
        let later = monotonic_clock::subscribe_duration(u64::MAX);
        let mut rounds = 0u64;
        loop {
            let ready = poll::poll(&[&never, &later]);
            rounds = std::hint::black_box(rounds + ready.len() as u64);
            if rounds == u64::MAX {
                break;
            }
        }
        Outcome {
            decision: Decision::Accept(Some("{}".to_owned())),
            rationale: Some("polled".to_owned()),
            risk: None,
        }
    }
}

test_guest_helper::export_reviewer!(Guest);
