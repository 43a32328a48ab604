//! Test guest `contract-0-1`: a reviewer of the frozen contract 0.1.0. It
//! declines every URL-mode elicitation, naming the URL's host in its message,
//! defers every form, and logs one line through `logging@0.1.0`: enough to
//! prove that a 0.1.0 module's imports are linked and its answers read.
#![cfg(target_arch = "wasm32")]

wit_bindgen::generate!({
    world: "reviewer",
    path: "../../../wit/0.1.0",
});

use gatehouse::reviewer::logging::{self, Level};
use gatehouse::reviewer::types::{
    Decision, Elicitation, ModuleInfo, Outcome, ReviewRequest, RiskLevel,
};

struct Guest;

impl exports::gatehouse::reviewer::review::Guest for Guest {
    fn describe() -> ModuleInfo {
        ModuleInfo {
            name: "contract-0-1".to_owned(),
            version: "0.1.0".to_owned(),
            claims: vec!["stateless".to_owned()],
        }
    }

    fn review(_config: String, request: ReviewRequest) -> Outcome {
        logging::log(
            Level::Info,
            "reviewed by a contract 0.1.0 module",
            &[("server".to_owned(), request.context.server_name.clone())],
        );
        match &request.elicitation {
            Elicitation::Url(url) => Outcome {
                decision: Decision::Decline(Some(format!(
                    "contract 0.1.0 module declines opening {}",
                    url.url
                ))),
                rationale: Some("URL elicitations are declined".to_owned()),
                risk: Some(RiskLevel::Medium),
            },
            Elicitation::Form(_) => Outcome {
                decision: Decision::Defer,
                rationale: None,
                risk: None,
            },
        }
    }
}

export!(Guest);
