//! Test guest `trap`: Panics, which traps: must fail closed.
#![cfg(target_arch = "wasm32")]

use test_guest_helper::{Outcome, ReviewRequest, Reviewer};

struct Guest;

impl Reviewer for Guest {
    const NAME: &'static str = "trap";

    fn review(_config: String, _request: ReviewRequest) -> Outcome {
        panic!("the trap test guest always panics")
    }
}

test_guest_helper::export_reviewer!(Guest);
