//! A gatehouse reviewer module, ready to change.
//!
//! Build: `cargo build --release --target wasm32-wasip2`
//! Check: `gatehouse conformance target/wasm32-wasip2/release/*.wasm --suite contract` (README.md)
//!
//! This one declines URL elicitations to hosts outside `allowed_hosts` (from
//! its config) and defers everything else to the next module. Replace
//! `decide` with your own rules; keep it deterministic and stateless.
#![cfg(target_arch = "wasm32")]

wit_bindgen::generate!({
    world: "reviewer",
    // The contract, as `gatehouse new` writes it: the WIT of the gatehouse
    // that made this project.
    path: "wit",
});

use exports::gatehouse::reviewer::review::Guest;
use gatehouse::reviewer::logging::{self, Level};
use gatehouse::reviewer::types::{
    Decision, Elicitation, ModuleInfo, Outcome, ReviewRequest, RiskLevel,
};

struct Reviewer;

impl Guest for Reviewer {
    fn describe() -> ModuleInfo {
        ModuleInfo {
            name: env!("CARGO_PKG_NAME").to_owned(),
            version: env!("CARGO_PKG_VERSION").to_owned(),
            // "stateless": this module keeps nothing between reviews.
            claims: vec!["stateless".to_owned()],
        }
    }

    fn review(config: String, request: ReviewRequest) -> Outcome {
        let config: serde_json::Value = serde_json::from_str(&config).unwrap_or_default();
        let allowed: Vec<&str> = config
            .get("allowed_hosts")
            .and_then(serde_json::Value::as_array)
            .map(|hosts| hosts.iter().filter_map(serde_json::Value::as_str).collect())
            .unwrap_or_default();
        decide(&request, &allowed)
    }
}

fn decide(request: &ReviewRequest, allowed_hosts: &[&str]) -> Outcome {
    let Elicitation::Url(url) = &request.elicitation else {
        return Outcome {
            decision: Decision::Defer,
            rationale: None,
            risk: None,
        };
    };
    let host = url
        .url
        .split_once("://")
        .map(|(_, rest)| rest.split(['/', '?', '#', ':']).next().unwrap_or_default())
        .unwrap_or_default();
    if allowed_hosts.contains(&host) {
        return Outcome {
            decision: Decision::Defer,
            rationale: Some(format!("{host} is an allowed host; the person decides")),
            risk: Some(RiskLevel::Low),
        };
    }
    if logging::max_level() <= Level::Info {
        logging::log(
            Level::Info,
            "declining a URL to a host that is not allowed",
            &[("host".to_owned(), host.to_owned())],
        );
    }
    Outcome {
        decision: Decision::Decline(Some(format!(
            "Opening {host} is not allowed by this organization."
        ))),
        rationale: Some(format!("{host} is not in allowed_hosts")),
        risk: Some(RiskLevel::High),
    }
}

export!(Reviewer);
