//! Test guest `grow-memory`: Allocates until memory runs out: must be stopped by the memory cap.
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
            name: "grow-memory".to_owned(),
            version: "0.0.0".to_owned(),
            claims: Vec::new(),
        }
    }

    #[allow(unreachable_code)]
    fn review(_config: String, _request: ReviewRequest) -> Outcome {
        let mut hoard: Vec<Vec<u8>> = Vec::new();
        loop {
            hoard.push(vec![1u8; 1 << 20]);
            std::hint::black_box(&hoard);
        }
    }
}

export!(Guest);
