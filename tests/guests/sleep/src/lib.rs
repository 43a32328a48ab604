//! Test guest `sleep`: Sleeps for an hour (`std::thread::sleep`, a
//! monotonic-clock pollable the host waits on): the deadline must end the wait.
#![cfg(target_arch = "wasm32")]

wit_bindgen::generate!({
    world: "reviewer",
    path: "../../../wit",
});

use gatehouse::reviewer::types::{Decision, ModuleInfo, Outcome, ReviewRequest};

struct Guest;

impl exports::gatehouse::reviewer::review::Guest for Guest {
    fn describe() -> ModuleInfo {
        ModuleInfo {
            name: "sleep".to_owned(),
            version: "0.0.0".to_owned(),
            claims: Vec::new(),
        }
    }

    fn review(_config: String, _request: ReviewRequest) -> Outcome {
        std::thread::sleep(std::time::Duration::from_secs(3600));
        Outcome {
            decision: Decision::Accept(Some("{}".to_owned())),
            rationale: Some("slept".to_owned()),
            risk: None,
        }
    }
}

export!(Guest);
