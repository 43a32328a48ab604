//! A module's outcome, read from the guest and checked before the host acts
//! on it: output within the cap, accept content a JSON object that fits the
//! form's schema, no content on a URL accept.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

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
    /// Checks a guest's outcome against the request and the output cap: the
    /// check every outcome passes before the host acts on it, also for a
    /// reviewer that runs outside the sandbox (a process hook).
    pub fn from_guest(
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
            if !empty_answer_to_empty_form(requested_schema, &value) {
                schema::validate_content(requested_schema, &value)
                    .map_err(ReviewFailure::SchemaMismatch)?;
            }
            Ok(Some(value))
        }
    }
}

/// Whether `content` is `{}` and `schema` a form that asks for nothing, in
/// which case the content validates: an object schema with no properties
/// and nothing required, using no keyword beyond `type`, `properties`,
/// `required`, `title` and `description`. (The answer every approval to an
/// empty form carries; compiling a validator for it would cost more than the
/// rest of the review.) Anything else goes through the full validator.
fn empty_answer_to_empty_form(schema: &Map<String, Value>, content: &Value) -> bool {
    if !content.as_object().is_some_and(Map::is_empty) {
        return false;
    }
    schema
        .iter()
        .all(|(keyword, value)| match keyword.as_str() {
            "type" => value.as_str() == Some("object"),
            "properties" => value.as_object().is_some_and(Map::is_empty),
            "required" => value.as_array().is_some_and(Vec::is_empty),
            "title" | "description" => value.is_string(),
            _ => false,
        })
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

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// The shortcut agrees with the full validator wherever it applies, and
    /// leaves everything else to it.
    #[test]
    fn the_empty_form_shortcut_agrees_with_the_validator() {
        let schemas = [
            json!({}),
            json!({"type": "object"}),
            json!({"type": "object", "properties": {}}),
            json!({"type": "object", "properties": {}, "required": []}),
            json!({"type": "object", "properties": {}, "title": "Confirm", "description": "Go?"}),
            json!({"type": "object", "properties": {}, "required": ["x"]}),
            json!({"type": "object", "properties": {"x": {"type": "string"}}}),
            json!({"type": "object", "properties": {}, "minProperties": 1}),
            json!({"type": "object", "properties": {}, "title": 5}),
            json!({"type": "object", "properties": {}, "$schema": "https://example.com/nope"}),
            json!({"type": "string"}),
            json!({"type": ["object"]}),
        ];
        let contents = [json!({}), json!({"x": "y"})];
        for schema in &schemas {
            let schema = schema.as_object().expect("object");
            for content in &contents {
                if empty_answer_to_empty_form(schema, content) {
                    assert_eq!(
                        schema::validate_content(schema, content),
                        Ok(()),
                        "{schema:?} {content}"
                    );
                }
            }
        }
        let empty = json!({"type": "object", "properties": {}});
        assert!(empty_answer_to_empty_form(
            empty.as_object().expect("object"),
            &json!({})
        ));
        let required = json!({"type": "object", "properties": {}, "required": ["x"]});
        assert!(!empty_answer_to_empty_form(
            required.as_object().expect("object"),
            &json!({})
        ));
    }
}
