//! A module's outcome, read from the guest and checked before the host acts
//! on it: output within the cap, accept content a JSON object that fits the
//! form's schema, no content on a URL accept.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::contract::types as wit;
use crate::elicitation::Elicitation;
use crate::failure::ReviewFailure;
use crate::schema;

/// What a module decided.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "action", rename_all = "lowercase")]
pub enum Decision {
    /// No decision: the next module, then the person.
    Defer,
    /// Accept, with the content to send (none for URL mode).
    Accept {
        /// The answer's `content`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        content: Option<Value>,
    },
    /// Decline, with an optional message for the agent.
    Decline {
        /// Sent as `_meta.message`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        message: Option<String>,
    },
    /// Cancel.
    Cancel,
}

impl Decision {
    /// A short name: `defer`, `accept`, `decline` or `cancel`.
    pub fn name(&self) -> &'static str {
        match self {
            Decision::Defer => "defer",
            Decision::Accept { .. } => "accept",
            Decision::Decline { .. } => "decline",
            Decision::Cancel => "cancel",
        }
    }
}

/// How risky a module judged the action.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RiskLevel {
    /// Low.
    Low,
    /// Medium.
    Medium,
    /// High.
    High,
    /// Critical.
    Critical,
}

/// A checked outcome.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Outcome {
    /// The decision.
    pub decision: Decision,
    /// Why, for the audit log.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rationale: Option<String>,
    /// The assessed risk, for the audit log.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub risk: Option<RiskLevel>,
}

impl Outcome {
    /// Checks a guest's outcome against the request and the output cap.
    pub(crate) fn from_guest(
        outcome: wit::Outcome,
        elicitation: &Elicitation,
        output_limit: usize,
    ) -> Result<Outcome, ReviewFailure> {
        let bytes = output_size(&outcome);
        if bytes > output_limit {
            return Err(ReviewFailure::OutputTooLarge {
                limit: output_limit,
            });
        }
        let decision = match outcome.decision {
            wit::Decision::Defer => Decision::Defer,
            wit::Decision::Cancel => Decision::Cancel,
            wit::Decision::Decline(message) => Decision::Decline { message },
            wit::Decision::Accept(content) => Decision::Accept {
                content: checked_content(content, elicitation)?,
            },
        };
        Ok(Outcome {
            decision,
            rationale: outcome.rationale,
            risk: outcome.risk.map(|risk| match risk {
                wit::RiskLevel::Low => RiskLevel::Low,
                wit::RiskLevel::Medium => RiskLevel::Medium,
                wit::RiskLevel::High => RiskLevel::High,
                wit::RiskLevel::Critical => RiskLevel::Critical,
            }),
        })
    }
}

fn checked_content(
    content: Option<String>,
    elicitation: &Elicitation,
) -> Result<Option<Value>, ReviewFailure> {
    match (elicitation, content) {
        (Elicitation::Url { .. }, None) => Ok(None),
        (Elicitation::Url { .. }, Some(_)) => Err(ReviewFailure::UrlContent),
        (Elicitation::Form { .. }, None) => Err(ReviewFailure::InvalidContent(
            "a form accept must carry content".to_owned(),
        )),
        (
            Elicitation::Form {
                requested_schema, ..
            },
            Some(text),
        ) => {
            let value: Value = serde_json::from_str(&text)
                .map_err(|error| ReviewFailure::InvalidContent(error.to_string()))?;
            if !value.is_object() {
                return Err(ReviewFailure::InvalidContent(format!(
                    "found {}",
                    crate::elicitation::json_kind(&value)
                )));
            }
            schema::validate_content(requested_schema, &value)
                .map_err(ReviewFailure::SchemaMismatch)?;
            Ok(Some(value))
        }
    }
}

/// The bytes of text in an outcome, which the output cap bounds.
fn output_size(outcome: &wit::Outcome) -> usize {
    let decision = match &outcome.decision {
        wit::Decision::Accept(content) => content.as_ref().map_or(0, String::len),
        wit::Decision::Decline(message) => message.as_ref().map_or(0, String::len),
        wit::Decision::Defer | wit::Decision::Cancel => 0,
    };
    decision + outcome.rationale.as_ref().map_or(0, String::len)
}
