//! Test guest `random-flood`: asks `wasi:random` for 64 MiB at a time, again
//! and again. The host must refuse such a request (a trap), not fill and
//! allocate it outside the guest's memory cap in one uninterruptible call.
#![cfg(target_arch = "wasm32")]

wit_bindgen::generate!({
    world: "reviewer",
    path: "../../../wit",
});

use gatehouse::reviewer::types::{Decision, ModuleInfo, Outcome, ReviewRequest};
use wasip2::random::{insecure, random};

struct Guest;

impl exports::gatehouse::reviewer::review::Guest for Guest {
    fn describe() -> ModuleInfo {
        ModuleInfo {
            name: "random-flood".to_owned(),
            version: "0.0.0".to_owned(),
            claims: Vec::new(),
        }
    }

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

export!(Guest);
