//! Test guest `grow-memory`: Allocates until memory runs out: must be stopped by the memory cap.
#![cfg(target_arch = "wasm32")]

use test_guest_helper::{Outcome, ReviewRequest, Reviewer};

struct Guest;

impl Reviewer for Guest {
    const NAME: &'static str = "grow-memory";

    fn review(_config: String, _request: ReviewRequest) -> Outcome {
        let mut hoard: Vec<Vec<u8>> = Vec::new();
        loop {
            hoard.push(vec![1u8; 1 << 20]);
            std::hint::black_box(&hoard);
        }
    }
}

test_guest_helper::export_reviewer!(Guest);
