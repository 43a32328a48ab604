//! Test guest `random-flood`: asks `wasi:random` for 64 MiB at a time, again
//! and again. The host must refuse such a request (a trap), not fill and
//! allocate it outside the guest's memory cap in one uninterruptible call.
#![cfg(target_arch = "wasm32")]

use test_guest_helper::{Decision, Outcome, ReviewRequest, Reviewer};
use wasip2::random::{insecure, random};

struct Guest;

impl Reviewer for Guest {
    const NAME: &'static str = "random-flood";

    fn review(_config: String, _request: ReviewRequest) -> Outcome {
        let mut total = 0usize;
        for _ in 0..64 {
            total += random::get_random_bytes(64 << 20).len();
            total += insecure::get_insecure_random_bytes(64 << 20).len();
        }
        Outcome {
            decision: Decision::Accept(Some("{}".to_owned())),
            rationale: Some(format!("got {total} random bytes")),
            risk: None,
        }
    }
}

test_guest_helper::export_reviewer!(Guest);
