//! The MCP answer to an elicitation (`ElicitResult` on the wire), and how
//! decisions and failures become one, the way Codex answers for its Guardian.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::failure::ReviewFailure;
use crate::outcome::Decision;

/// `_meta` key naming who decided.
pub const APPROVALS_REVIEWER_KEY: &str = "approvals_reviewer";
/// The `approvals_reviewer` value of every automated answer.
pub const AUTO_REVIEW: &str = "auto_review";
/// `_meta` key of a decline's message for the agent.
pub const MESSAGE_KEY: &str = "message";

/// The decline message when a review ran past its deadline (Codex's wording).
pub const TIMEOUT_MESSAGE: &str = "The automatic permission approval review did not finish before its deadline. Do not assume the action is unsafe based on the timeout alone. You may retry once, or ask the user for guidance or explicit approval.";

/// The decline message when a review failed in any other way (Codex's strict
/// review wording).
pub const REVIEW_FAILED_MESSAGE: &str = "Automated review of this operation failed. Do not proceed without asking the user for explicit approval.";

/// The answer's action.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Action {
    /// Accept.
    Accept,
    /// Decline.
    Decline,
    /// Cancel.
    Cancel,
}

/// An `ElicitResult` as sent to the server.
///
/// ```
/// use gatehouse_core::answer::ElicitAnswer;
/// use gatehouse_core::outcome::Decision;
/// let answer = ElicitAnswer::automated(&Decision::Decline { message: Some("no".into()) }).unwrap();
/// assert_eq!(
///     answer.to_wire(),
///     serde_json::json!({"action": "decline",
///                        "_meta": {"approvals_reviewer": "auto_review", "message": "no"}})
/// );
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ElicitAnswer {
    /// What the answer does.
    pub action: Action,
    /// The form content of an accept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<Value>,
    /// The answer's `_meta`.
    #[serde(default, rename = "_meta", skip_serializing_if = "Option::is_none")]
    pub meta: Option<Map<String, Value>>,
}

impl ElicitAnswer {
    /// The answer for a module's decision, marked as automated; `None` for
    /// `defer`, which is not an answer.
    pub fn automated(decision: &Decision) -> Option<ElicitAnswer> {
        Some(match decision {
            Decision::Defer => return None,
            Decision::Accept { content } => marked(Action::Accept, content.clone(), None),
            Decision::Decline { message } => marked(Action::Decline, None, message.clone()),
            Decision::Cancel => marked(Action::Cancel, None, None),
        })
    }

    /// The fail-closed answer for a failed review: a decline with Codex's
    /// timeout message for a deadline, and its review-failed message otherwise.
    pub fn failed(failure: &ReviewFailure) -> ElicitAnswer {
        let message = match failure {
            ReviewFailure::Deadline(_) => TIMEOUT_MESSAGE,
            _ => REVIEW_FAILED_MESSAGE,
        };
        marked(Action::Decline, None, Some(message.to_owned()))
    }

    /// A decline with no message and no reviewer mark (what the host sends
    /// when nobody may answer).
    pub fn plain_decline() -> ElicitAnswer {
        ElicitAnswer {
            action: Action::Decline,
            content: None,
            meta: None,
        }
    }

    /// A plain `cancel` (the request is dismissed without a choice).
    pub fn cancel() -> ElicitAnswer {
        ElicitAnswer {
            action: Action::Cancel,
            content: None,
            meta: None,
        }
    }

    /// The answer as JSON, exactly as on the wire.
    pub fn to_wire(&self) -> Value {
        let mut wire = Map::new();
        let action = match self.action {
            Action::Accept => "accept",
            Action::Decline => "decline",
            Action::Cancel => "cancel",
        };
        wire.insert("action".to_owned(), action.into());
        if let Some(content) = &self.content {
            wire.insert("content".to_owned(), content.clone());
        }
        if let Some(meta) = &self.meta {
            wire.insert("_meta".to_owned(), Value::Object(meta.clone()));
        }
        Value::Object(wire)
    }
}

/// An answer marked as decided by automated review.
fn marked(action: Action, content: Option<Value>, message: Option<String>) -> ElicitAnswer {
    let mut meta = Map::new();
    meta.insert(APPROVALS_REVIEWER_KEY.to_owned(), AUTO_REVIEW.into());
    if let Some(message) = message {
        meta.insert(MESSAGE_KEY.to_owned(), message.into());
    }
    ElicitAnswer {
        action,
        content,
        meta: Some(meta),
    }
}
