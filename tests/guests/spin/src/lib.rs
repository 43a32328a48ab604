//! Test guest `spin`: Loops forever: must be stopped by the deadline.
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
            name: "spin".to_owned(),
            version: "0.0.0".to_owned(),
            claims: Vec::new(),
        }
    }

    #[allow(unreachable_code)]
    fn review(_config: String, _request: ReviewRequest) -> Outcome {
        let mut counter: u64 = 0;
        loop {
            counter = std::hint::black_box(counter.wrapping_add(1));
        }
    }
}

export!(Guest);
