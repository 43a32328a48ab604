//! Test guest `trap`: Panics, which traps: must fail closed.
#![cfg(target_arch = "wasm32")]

wit_bindgen::generate!({
    world: "reviewer",
    path: "../../../wit",
});

#[allow(unused_imports)]
use gatehouse::reviewer::logging::{self, Level};
use gatehouse::reviewer::types::{ModuleInfo, Outcome, ReviewRequest};

struct Guest;

impl exports::gatehouse::reviewer::review::Guest for Guest {
    fn describe() -> ModuleInfo {
        ModuleInfo {
            name: "trap".to_owned(),
            version: "0.0.0".to_owned(),
            claims: Vec::new(),
        }
    }

    #[allow(unreachable_code)]
    fn review(_config: String, _request: ReviewRequest) -> Outcome {
        panic!("the trap test guest always panics")
    }
}

export!(Guest);
