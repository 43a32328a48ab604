//! Test guest `deep-recursion`: Recurses without end: must be stopped by the wasm stack cap.
#![cfg(target_arch = "wasm32")]

use test_guest_helper::{Outcome, ReviewRequest, Reviewer};

struct Guest;

impl Reviewer for Guest {
    const NAME: &'static str = "deep-recursion";

    fn review(_config: String, _request: ReviewRequest) -> Outcome {
        #[allow(unconditional_recursion)]
        fn descend(depth: u64) -> u64 {
            let frame = [depth; 16];
            std::hint::black_box(&frame);
            descend(depth + 1) + frame[3]
        }
        let _ = descend(0);
        unreachable!()
    }
}

test_guest_helper::export_reviewer!(Guest);
