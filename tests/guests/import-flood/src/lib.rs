//! Test guest `import-flood`: passes oversized data to the host's `logging`
//! import: one 10 MiB message, or (config `"fields"`) 20,000 small fields.
//! The host must stop it (hostcall fuel) without copying it all, and fail
//! the review closed.
#![cfg(target_arch = "wasm32")]

use test_guest_helper::{Decision, Level, Outcome, ReviewRequest, Reviewer, RiskLevel, logging};

struct Guest;

impl Reviewer for Guest {
    const NAME: &'static str = "import-flood";

    fn review(config: String, _request: ReviewRequest) -> Outcome {
        if config.contains("fields") {
            let fields: Vec<(String, String)> = (0..20_000)
                .map(|index| (format!("k{index}"), "v".to_owned()))
                .collect();
            logging::log(Level::Info, "many fields", &fields);
        } else {
            let message = "x".repeat(10 << 20);
            logging::log(Level::Info, &message, &[]);
        }
        Outcome {
            decision: Decision::Accept(None),
            rationale: Some("flooded the log and then accepted".to_owned()),
            risk: Some(RiskLevel::Low),
        }
    }
}

test_guest_helper::export_reviewer!(Guest);
