//! The WIT glue for the allowlist policy.

wit_bindgen::generate!({
    world: "reviewer",
    path: "../../wit",
});

use exports::gatehouse::reviewer::review::Guest;
use gatehouse::reviewer::logging::{self, Level};
use gatehouse::reviewer::types::{Decision, Elicitation, ModuleInfo, Outcome, ReviewRequest};
use serde_json::{Map, Value};

use crate::{Answer, Config, Subject};

struct Allowlist;

impl Guest for Allowlist {
    fn describe() -> ModuleInfo {
        ModuleInfo {
            name: "allowlist".to_owned(),
            version: env!("CARGO_PKG_VERSION").to_owned(),
            claims: vec!["stateless".to_owned()],
        }
    }

    fn review(config: String, request: ReviewRequest) -> Outcome {
        let config: Config = match serde_json::from_str(&config) {
            Ok(config) => config,
            Err(error) => {
                let why = format!("invalid allowlist config: {error}");
                logging::log(Level::Error, &why, &[]);
                return Outcome {
                    decision: Decision::Decline(None),
                    rationale: Some(why),
                    risk: None,
                };
            }
        };
        let meta: Map<String, Value> = request
            .meta
            .as_deref()
            .and_then(|text| serde_json::from_str(text).ok())
            .unwrap_or_default();
        let subject = Subject {
            server: &request.context.server_name,
            tool: crate::tool_name(&meta),
            url: match &request.elicitation {
                Elicitation::Form(_) => None,
                Elicitation::Url(url) => Some(url.url.as_str()),
            },
        };
        let (answer, rationale) = crate::decide(&config, &subject);
        Outcome {
            decision: match answer {
                Answer::Defer => Decision::Defer,
                Answer::Accept(content) => Decision::Accept(content),
                Answer::Decline(message) => Decision::Decline(message),
                Answer::Cancel => Decision::Cancel,
            },
            rationale: Some(rationale),
            risk: None,
        }
    }
}

export!(Allowlist);
