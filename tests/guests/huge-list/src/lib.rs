//! Test guest `huge-list`: `describe` returns 100,000 claims (a huge list
//! lifted into the host) and `review` declines with a rationale made of
//! 100,000 short lines. Both must be refused by the output cap.
#![cfg(target_arch = "wasm32")]

wit_bindgen::generate!({
    world: "reviewer",
    path: "../../../wit",
});

use gatehouse::reviewer::types::{Decision, ModuleInfo, Outcome, ReviewRequest, RiskLevel};

struct Guest;

impl exports::gatehouse::reviewer::review::Guest for Guest {
    fn describe() -> ModuleInfo {
        ModuleInfo {
            name: "huge-list".to_owned(),
            version: "0.0.0".to_owned(),
            claims: (0..100_000).map(|index| format!("claim-{index}")).collect(),
        }
    }

    fn review(_config: String, _request: ReviewRequest) -> Outcome {
        Outcome {
            decision: Decision::Decline(Some("no".to_owned())),
            rationale: Some((0..100_000).map(|_| "line\n").collect()),
            risk: Some(RiskLevel::High),
        }
    }
}

export!(Guest);
