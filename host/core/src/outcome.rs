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

/// What one module decided about one request, checked: an accept's content
/// is a JSON object that fits the requested schema (and a URL accept has
/// none), and the text is within the output cap.
///
/// A review returns one in its [`ModuleReport`](crate::sandbox::ModuleReport);
/// a reviewer that runs outside the sandbox gets the same checks through
/// [`Outcome::check`]. [`ElicitAnswer::automated`](crate::answer::ElicitAnswer::automated)
/// turns its decision into the MCP answer.
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
    /// Checks an outcome that comes from a reviewer outside the sandbox (a
    /// process hook, a remote service) exactly as a guest's outcome is
    /// checked before the host acts on it: its text within `output_limit`
    /// bytes (decline message and rationale, accept content as JSON text), an
    /// accept's content a JSON object of the schema's properties that
    /// validates against it, and no content on a URL accept.
    ///
    /// ```
    /// use gatehouse_core::elicitation::ElicitationParams;
    /// use gatehouse_core::failure::ReviewFailure;
    /// use gatehouse_core::outcome::{Decision, Outcome};
    ///
    /// let params = ElicitationParams::from_wire(&serde_json::json!({
    ///     "message": "How many copies?",
    ///     "requestedSchema": {"type": "object", "properties": {"copies": {"type": "integer"}}}
    /// }))?;
    /// let accept = |content| Outcome {
    ///     decision: Decision::Accept { content: Some(content) },
    ///     rationale: None,
    ///     risk: None,
    /// };
    /// let fits = accept(serde_json::json!({"copies": 2}));
    /// assert_eq!(fits.clone().check(&params.elicitation, 1024), Ok(fits));
    /// let misfit = accept(serde_json::json!({"copies": "two"}));
    /// assert!(matches!(
    ///     misfit.check(&params.elicitation, 1024),
    ///     Err(ReviewFailure::SchemaMismatch(_))
    /// ));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn check(
        self,
        elicitation: &Elicitation,
        output_limit: usize,
    ) -> Result<Outcome, ReviewFailure> {
        Outcome::from_guest(self.into_contract(), elicitation, output_limit)
    }

    /// Checks a guest's outcome against the request and the output cap: the
    /// check every outcome passes before the host acts on it.
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

    /// The outcome as a guest would return it, so that [`Outcome::check`]
    /// runs the very checks a guest's outcome gets.
    fn into_contract(self) -> wit::Outcome {
        wit::Outcome {
            decision: match self.decision {
                Decision::Defer => wit::Decision::Defer,
                Decision::Accept { content } => {
                    wit::Decision::Accept(content.map(|content| content.to_string()))
                }
                Decision::Decline { message } => wit::Decision::Decline(message),
                Decision::Cancel => wit::Decision::Cancel,
            },
            rationale: self.rationale,
            risk: self.risk.map(|risk| match risk {
                RiskLevel::Low => wit::RiskLevel::Low,
                RiskLevel::Medium => wit::RiskLevel::Medium,
                RiskLevel::High => wit::RiskLevel::High,
                RiskLevel::Critical => wit::RiskLevel::Critical,
            }),
        }
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
                    crate::schema::json_kind(&value)
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
