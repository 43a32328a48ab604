//! The MCP answer to an elicitation (`ElicitResult` on the wire), and how
//! decisions and failures become one, the way Codex answers for its Guardian.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::context::ApprovalPolicy;
use crate::failure::ReviewFailure;
use crate::outcome::Decision;
use crate::request::ReviewRequest;

/// `_meta` key naming who decided.
pub const APPROVALS_REVIEWER_KEY: &str = "approvals_reviewer";
/// The `approvals_reviewer` value of every automated answer.
pub const AUTO_REVIEW: &str = "auto_review";
/// `_meta` key of a decline's message for the agent.
pub const MESSAGE_KEY: &str = "message";
/// `_meta` key of an elicitation that asks for strict automated review.
pub const STRICT_AUTO_REVIEW_KEY: &str = "codex_strict_auto_review";

/// The decline message when a review ran past its deadline (Codex's wording).
pub const TIMEOUT_MESSAGE: &str = "The automatic permission approval review did not finish before its deadline. Do not assume the action is unsafe based on the timeout alone. You may retry once, or ask the user for guidance or explicit approval.";

/// The strict decline: what a strict review request gets when strict review
/// cannot give a canonical automated answer (Codex's strict wording, seed
/// lines 765-769).
pub const STRICT_DECLINE_MESSAGE: &str = "Automated review of this operation failed. Do not proceed without asking the user for explicit approval.";

/// What Codex appends to a denial by default (its Guardian's instructions to
/// the agent).
pub const DENIAL_INSTRUCTIONS: &str = "The agent must not attempt to achieve the same outcome via workaround, indirect execution, or policy circumvention. Proceed only with a materially safer alternative, or if the user explicitly approves the action after being informed of the risk. Otherwise, stop and request user input.";

/// The decline message when a review failed other than by its deadline,
/// outside strict review: Codex's review-failed denial (seed lines 862-865,
/// 1015), naming the failure by its stable code only (a guest's own text
/// never reaches the server).
///
/// ```
/// use gatehouse_core::answer::review_failed_message;
/// assert!(review_failed_message("trap").contains(
///     "Reason: Automatic approval review failed: the reviewer module failed (trap)"
/// ));
/// ```
pub fn review_failed_message(code: &str) -> String {
    format!(
        "This action was rejected due to unacceptable risk.\nReason: Automatic approval review failed: the reviewer module failed ({code})\n{DENIAL_INSTRUCTIONS}"
    )
}

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

impl Action {
    /// Its name on the wire (`accept`, `decline`, `cancel`).
    pub fn name(self) -> &'static str {
        match self {
            Action::Accept => "accept",
            Action::Decline => "decline",
            Action::Cancel => "cancel",
        }
    }
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
            ReviewFailure::Deadline(_) => TIMEOUT_MESSAGE.to_owned(),
            _ => review_failed_message(failure.code()),
        };
        marked(Action::Decline, None, Some(message))
    }

    /// Codex's accept of a prompt that the permission profile auto-approves
    /// under approval policy `never`: content `{}` and no `_meta`, since no
    /// reviewer decided it (Codex's `session_mcp.rs`, lines 797-816).
    ///
    /// ```
    /// use gatehouse_core::answer::ElicitAnswer;
    /// assert_eq!(
    ///     ElicitAnswer::auto_approved().to_wire(),
    ///     serde_json::json!({"action": "accept", "content": {}})
    /// );
    /// ```
    pub fn auto_approved() -> ElicitAnswer {
        ElicitAnswer {
            action: Action::Accept,
            content: Some(Value::Object(Map::new())),
            meta: None,
        }
    }

    /// This answer as Codex sends it for `request` (line numbers of Codex's
    /// `session_mcp.rs`). Under approval policy `never` Codex reviews only a
    /// strict request (`_meta`'s [`STRICT_AUTO_REVIEW_KEY`] is JSON `true`,
    /// lines 696-702; any other marker but `false` is declined); any other
    /// request is accepted only by the permission profile's auto-approval,
    /// whose accept carries no `_meta` (lines 797-816, against the reviewed
    /// accept's `approvals_reviewer` at lines 1010-1014). So an accept of
    /// such a request, which a module gave in the profile's place (the
    /// guardian answers `never` itself), loses its `_meta`; every other
    /// answer is returned unchanged, declines keeping their
    /// `approvals_reviewer` as Codex's do (lines 817, 1036-1041).
    pub fn for_request(self, request: &ReviewRequest) -> ElicitAnswer {
        let strict = request
            .params()
            .meta
            .as_ref()
            .and_then(|meta| meta.get(STRICT_AUTO_REVIEW_KEY))
            == Some(&Value::Bool(true));
        if self.action == Action::Accept
            && request.context().approval_policy == ApprovalPolicy::Never
            && !strict
        {
            ElicitAnswer { meta: None, ..self }
        } else {
            self
        }
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

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::context::ReviewContext;
    use crate::elicitation::{ElicitationParams, RequestId};

    fn request(policy: ApprovalPolicy, meta: Value) -> ReviewRequest {
        let params = ElicitationParams::from_wire(&json!({
            "message": "Allow?",
            "requestedSchema": {"type": "object", "properties": {}},
            "_meta": meta,
        }))
        .expect("valid params");
        ReviewRequest::new(
            params,
            ReviewContext::new("docs", RequestId::Number(1)).with_approval_policy(policy),
        )
    }

    fn accept() -> ElicitAnswer {
        ElicitAnswer::automated(&Decision::Accept {
            content: Some(json!({})),
        })
        .expect("an answer")
    }

    /// Codex's `session_mcp.rs`: under `never` the only accept of a request
    /// that is not strict is the auto-approved prompt, with no `_meta`
    /// (lines 811-815); a strict request is reviewed and its accept marked
    /// (lines 784-793, 1010-1014); declines keep the mark (lines 817,
    /// 1036-1041).
    #[test]
    fn under_never_an_accept_of_a_request_that_is_not_strict_carries_no_meta() {
        let never = request(ApprovalPolicy::Never, json!({"tool_name": "deploy"}));
        assert_eq!(
            accept().for_request(&never).to_wire(),
            ElicitAnswer::auto_approved().to_wire()
        );
        let decline =
            ElicitAnswer::automated(&Decision::Decline { message: None }).expect("an answer");
        assert_eq!(decline.clone().for_request(&never), decline);

        let strict = request(ApprovalPolicy::Never, json!({STRICT_AUTO_REVIEW_KEY: true}));
        assert_eq!(accept().for_request(&strict), accept());
        // `false` asks for no strict review: the ordinary `never` path.
        let not_strict = request(
            ApprovalPolicy::Never,
            json!({STRICT_AUTO_REVIEW_KEY: false}),
        );
        assert_eq!(
            accept().for_request(&not_strict),
            ElicitAnswer::auto_approved()
        );
        let on_request = request(ApprovalPolicy::OnRequest, Value::Null);
        assert_eq!(accept().for_request(&on_request), accept());
    }
}
