//! Test guest `handle-flood`: subscribes to the monotonic clock again and
//! again and keeps every pollable. Each lives in the host's resource table,
//! outside the guest's memory cap; the host must stop the guest at its handle
//! cap (`handles`), not let it pin wasmtime's default 100,000 entries.
#![cfg(target_arch = "wasm32")]

use test_guest_helper::{Decision, Outcome, ReviewRequest, Reviewer};
use wasip2::clocks::monotonic_clock;

struct Guest;

impl Reviewer for Guest {
    const NAME: &'static str = "handle-flood";

    fn review(_config: String, _request: ReviewRequest) -> Outcome {
        let mut held = Vec::new();
        for _ in 0..1_000_000 {
            held.push(monotonic_clock::subscribe_duration(1 << 40));
        }
        Outcome {
            decision: Decision::Accept(Some("{}".to_owned())),
            rationale: Some(format!("held {} pollables", held.len())),
            risk: None,
        }
    }
}

test_guest_helper::export_reviewer!(Guest);
