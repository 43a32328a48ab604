//! Test guest `log-flood`: Logs 10,000 entries, then defers: the host must cap what it keeps.
#![cfg(target_arch = "wasm32")]

wit_bindgen::generate!({
    world: "reviewer",
    path: "../../../wit",
});

#[allow(unused_imports)]
use gatehouse::reviewer::logging::{self, Level};
use gatehouse::reviewer::types::{Decision, ModuleInfo, Outcome, ReviewRequest};

struct Guest;

impl exports::gatehouse::reviewer::review::Guest for Guest {
    fn describe() -> ModuleInfo {
        ModuleInfo {
            name: "log-flood".to_owned(),
            version: "0.0.0".to_owned(),
            claims: Vec::new(),
        }
    }

    #[allow(unreachable_code)]
    fn review(_config: String, _request: ReviewRequest) -> Outcome {
        for index in 0..10_000u32 {
            logging::log(
                Level::Info,
                "flood",
                &[("index".to_owned(), index.to_string())],
            );
        }
        Outcome {
            decision: Decision::Defer,
            rationale: None,
            risk: None,
        }
    }
}

export!(Guest);
