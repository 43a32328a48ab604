//! Shadow verdicts: what modules in `mode = "shadow"` said about an
//! elicitation the chain reviewed, beside what the chain came to.
//!
//! The decision's own line is written before the answer leaves; a shadow
//! review runs beside the chain and must never hold the answer up. So each
//! elicitation the shadow modules reviewed gets a second line, an event
//! `{"time": …, "event": "shadow", …}` written once both are known, which
//! carries the decision it is compared with (`live`, `decided_by`,
//! `action`): `gatehouse audit --compare MODULE` reads these lines alone.
//! Event lines are never counted as decisions.
//!
//! ```
//! use gatehouse_audit::shadow::{ShadowRecord, live_outcome};
//! use gatehouse_audit::{AuditStep, DecidedBy};
//!
//! let step = |module: &str, outcome: &str| AuditStep {
//!     module: module.into(), sha256: String::new(), signed_by: None, outcome: outcome.into(),
//!     failure: None, rationale: None, risk: None, latency_us: 0, model_calls: Vec::new(),
//! };
//! // The chain: the allowlist deferred, the guardian declined.
//! let live = live_outcome(DecidedBy::Guest, &[step("allowlist", "defer"), step("guardian", "decline")]);
//! assert_eq!(live, "decline");
//! let record = ShadowRecord::new("docs", serde_json::json!(7), "form", DecidedBy::Guest, live, "decline",
//!                                vec![step("guardian-v2", "accept")]);
//! assert!(!record.agrees(&record.shadow[0]));
//! ```

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::{AuditStep, DecidedBy};

/// The `event` of a shadow line.
pub const SHADOW_EVENT: &str = "shadow";

/// The outcome a shadow step has when it could not run because the shadow
/// reviews were all busy (they never queue ahead of anything).
pub const SKIPPED: &str = "skipped";

/// One shadow line.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ShadowRecord {
    /// When it was written, RFC 3339 UTC.
    pub time: String,
    /// Always [`SHADOW_EVENT`].
    pub event: String,
    /// The server that asked.
    pub server: String,
    /// Its request id (bounded like a decision's).
    pub request_id: Value,
    /// The `gatehouse serve` instance (written by the log).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance: Option<String>,
    /// `form`, `url`, …, as in the decision's line.
    pub mode: String,
    /// Who decided the elicitation.
    pub decided_by: DecidedBy,
    /// What the live chain came to ([`live_outcome`]).
    pub live: String,
    /// The answer's action as sent (`accept`, `decline`, `cancel`), or
    /// `error`.
    pub action: String,
    /// Each shadow module's review, as a decision's steps are written.
    pub shadow: Vec<AuditStep>,
}

impl ShadowRecord {
    /// A shadow line written now.
    pub fn new(
        server: &str,
        request_id: Value,
        mode: &str,
        decided_by: DecidedBy,
        live: String,
        action: &str,
        shadow: Vec<AuditStep>,
    ) -> ShadowRecord {
        ShadowRecord {
            time: crate::now_rfc3339(),
            event: SHADOW_EVENT.to_owned(),
            server: server.to_owned(),
            request_id,
            instance: None,
            mode: mode.to_owned(),
            decided_by,
            live,
            action: action.to_owned(),
            shadow,
        }
    }

    /// Whether a shadow step came to what the live chain came to.
    pub fn agrees(&self, step: &AuditStep) -> bool {
        step.outcome == self.live
    }

    /// The record as a decision record, for the one set of bounds.
    pub(crate) fn as_record(&self) -> crate::AuditRecord {
        crate::AuditRecord {
            time: self.time.clone(),
            server: self.server.clone(),
            request_id: self.request_id.clone(),
            session: None,
            turn: None,
            instance: self.instance.clone(),
            client: None,
            person: None,
            mode: self.mode.clone(),
            decided_by: self.decided_by,
            reason: self.live.clone(),
            steps: self.shadow.clone(),
            answer: Value::String(self.action.clone()),
            latency_us: 0,
        }
    }

    /// Back from [`as_record`](Self::as_record), bounded.
    pub(crate) fn from_record(record: crate::AuditRecord) -> ShadowRecord {
        ShadowRecord {
            time: record.time,
            event: SHADOW_EVENT.to_owned(),
            server: record.server,
            request_id: record.request_id,
            instance: record.instance,
            mode: record.mode,
            decided_by: record.decided_by,
            live: record.reason,
            action: match record.answer {
                Value::String(action) => action,
                _ => String::new(),
            },
            shadow: record.steps,
        }
    }
}

/// What the live chain came to, from who decided and its steps: the
/// deciding module's outcome (`accept`, `decline`, `cancel`, or `failure`)
/// when a module decided; `defer` when every module deferred (the person or
/// `on_unhandled` then answered); otherwise who decided (`policy`: a bound
/// on model spend, say).
pub fn live_outcome(decided_by: DecidedBy, steps: &[AuditStep]) -> String {
    if decided_by == DecidedBy::Guest
        && let Some(step) = steps.iter().rev().find(|step| step.outcome != "defer")
    {
        return step.outcome.clone();
    }
    if !steps.is_empty() && steps.iter().all(|step| step.outcome == "defer") {
        return "defer".to_owned();
    }
    decided_by.name().to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::AuditLog;

    fn step(module: &str, outcome: &str, rationale: Option<String>) -> AuditStep {
        AuditStep {
            module: module.into(),
            sha256: "ab".repeat(32),
            signed_by: None,
            outcome: outcome.into(),
            failure: None,
            rationale,
            risk: None,
            latency_us: 1,
            model_calls: Vec::new(),
        }
    }

    #[test]
    fn a_shadow_line_is_bounded_escaped_and_read_back_as_an_event() {
        let log = AuditLog::in_memory().with_instance("0badcafe");
        // A guest's rationale: huge, with a terminal escape.
        let rationale = format!("\u{1b}[2J{}", "x".repeat(200_000));
        let record = ShadowRecord::new(
            "docs",
            serde_json::json!("r".repeat(10_000)),
            "form",
            DecidedBy::Guest,
            "decline".to_owned(),
            "decline",
            vec![step("candidate", "accept", Some(rationale))],
        );
        log.write_shadow(&record).expect("written");
        let lines = log.lines();
        assert_eq!(lines.len(), 1);
        let line = &lines[0];
        assert!(
            line.len() < crate::bound::MAX_RECORD_BYTES,
            "{}",
            line.len()
        );
        assert!(!line.contains('\u{1b}'), "escaped");
        let event = crate::read::AuditReader::new(std::io::Cursor::new(format!("{line}\n")))
            .next_line()
            .expect("reads");
        let Some(crate::read::ReadLine::Event(event)) = event else {
            panic!("a shadow line is an event: {line}");
        };
        let back = event.shadow().expect("a shadow record");
        assert_eq!(back.instance.as_deref(), Some("0badcafe"));
        assert_eq!(back.live, "decline");
        assert_eq!(back.action, "decline");
        assert_eq!(back.shadow[0].outcome, "accept");
        assert!(!back.agrees(&back.shadow[0]));
        assert!(
            back.shadow[0]
                .rationale
                .as_deref()
                .is_some_and(|why| why.len() < 100_000),
            "the rationale was cut"
        );
    }

    #[test]
    fn what_the_live_chain_came_to() {
        let defer = || step("a", "defer", None);
        assert_eq!(
            live_outcome(DecidedBy::Guest, &[defer(), step("b", "accept", None)]),
            "accept"
        );
        assert_eq!(
            live_outcome(DecidedBy::Failure, &[step("b", "failure", None)]),
            "failure"
        );
        assert_eq!(
            live_outcome(DecidedBy::Person, &[defer(), defer()]),
            "defer"
        );
        assert_eq!(live_outcome(DecidedBy::Unhandled, &[defer()]), "defer");
        assert_eq!(live_outcome(DecidedBy::Policy, &[]), "policy");
    }
}
