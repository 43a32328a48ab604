//! Test guest `huge-list`: `describe` returns 100,000 claims (a huge list
//! lifted into the host) and `review` declines with a rationale made of
//! 100,000 short lines. Both must be refused by the output cap.
#![cfg(target_arch = "wasm32")]

use test_guest_helper::{Decision, ModuleInfo, Outcome, ReviewRequest, Reviewer, RiskLevel};

struct Guest;

impl Reviewer for Guest {
    const NAME: &'static str = "huge-list";

    fn describe() -> ModuleInfo {
        ModuleInfo {
            name: Self::NAME.to_owned(),
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

test_guest_helper::export_reviewer!(Guest);
