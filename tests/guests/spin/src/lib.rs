//! Test guest `spin`: Loops forever: must be stopped by the deadline.
#![cfg(target_arch = "wasm32")]

use test_guest_helper::{Outcome, ReviewRequest, Reviewer};

struct Guest;

impl Reviewer for Guest {
    const NAME: &'static str = "spin";

    fn review(_config: String, _request: ReviewRequest) -> Outcome {
        let mut counter: u64 = 0;
        loop {
            counter = std::hint::black_box(counter.wrapping_add(1));
        }
    }
}

test_guest_helper::export_reviewer!(Guest);
