//! Bounds on model-reviewed elicitations: how many one agent call may cause
//! (`max_model_reviews_per_call`) and how many one server may cause in a
//! minute (`max_model_reviews_per_server_per_minute`), and the verdicts
//! that an identical request later in the same call reuses instead of asking
//! the model again.
//!
//! An elicitation counts once, when its chain first reaches a module granted
//! a model; past either bound the router declines it there, unreviewed by
//! the model, and the audit line names the bound. What a call counted, and
//! the verdicts it may reuse, are forgotten when the call is no longer in
//! flight.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};

use crate::calls::{Calls, UpstreamCall};

/// The window of `max_model_reviews_per_server_per_minute`.
pub const SERVER_WINDOW: Duration = Duration::from_secs(60);

/// The bounds in force (from `[elicitations]`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct SpendLimits {
    /// Model-reviewed elicitations per related call.
    pub(super) per_call: usize,
    /// Model-reviewed elicitations per server per [`SERVER_WINDOW`].
    pub(super) per_server_per_minute: usize,
}

/// Why [`Spend::admit`] refused a model review.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Refused {
    /// The bound's setting name.
    pub(super) limit: &'static str,
    /// What the audit line says.
    pub(super) why: String,
}

/// A verdict an identical request later in the same call reuses.
#[derive(Debug, Clone)]
pub(super) struct Reusable {
    /// The answer.
    pub(super) answer: gatehouse_core::answer::ElicitAnswer,
    /// Who decided.
    pub(super) by: gatehouse_audit::DecidedBy,
    /// The reason the first one was audited with.
    pub(super) reason: String,
}

/// What one call in flight has spent.
#[derive(Debug)]
struct CallSpend {
    call: Arc<UpstreamCall>,
    reviews: usize,
    verdicts: Vec<([u8; 32], Reusable)>,
}

/// The most verdicts remembered per call: enough for every request the
/// per-call bound lets reach a model.
const MAX_VERDICTS_PER_CALL: usize = 64;

/// The spend of every call and server. Share it inside the router.
#[derive(Debug, Default)]
pub(super) struct Spend {
    calls: Mutex<Vec<CallSpend>>,
    servers: Mutex<HashMap<String, VecDeque<Instant>>>,
}

/// The digest an identical request has: its params as JSON text, after the
/// transport keys of `_meta` are removed.
pub(super) fn request_digest(params: &serde_json::Value) -> [u8; 32] {
    let mut params = params.clone();
    if let Some(meta) = params
        .as_object_mut()
        .and_then(|object| object.get_mut("_meta"))
        .and_then(serde_json::Value::as_object_mut)
    {
        for key in gatehouse_core::elicitation::TRANSPORT_META_KEYS {
            meta.remove(*key);
        }
    }
    Sha256::digest(params.to_string().as_bytes()).into()
}

impl Spend {
    /// Counts one model-reviewed elicitation of `server` (for `call`, when
    /// the router knows it) at `now`, or says which bound refuses it (and
    /// counts nothing).
    pub(super) fn admit(
        &self,
        server: &str,
        call: Option<&Arc<UpstreamCall>>,
        limits: SpendLimits,
        now: Instant,
        calls: Option<&Calls>,
    ) -> Result<(), Refused> {
        let mut spent = lock(&self.calls);
        forget_finished(&mut spent, calls);
        let entry = call.map(|call| entry_for(&mut spent, call));
        if let Some(entry) = &entry
            && entry.reviews >= limits.per_call
        {
            return Err(Refused {
                limit: "max_model_reviews_per_call",
                why: format!(
                    "this agent call already had {} elicitations reviewed by a model \
                     (max_model_reviews_per_call = {})",
                    entry.reviews, limits.per_call
                ),
            });
        }
        let mut servers = lock(&self.servers);
        let window = servers.entry(server.to_owned()).or_default();
        while window
            .front()
            .is_some_and(|at| now.saturating_duration_since(*at) >= SERVER_WINDOW)
        {
            window.pop_front();
        }
        if window.len() >= limits.per_server_per_minute {
            return Err(Refused {
                limit: "max_model_reviews_per_server_per_minute",
                why: format!(
                    "this server already had {} elicitations reviewed by a model in the last minute \
                     (max_model_reviews_per_server_per_minute = {})",
                    window.len(),
                    limits.per_server_per_minute
                ),
            });
        }
        window.push_back(now);
        if let Some(entry) = entry {
            entry.reviews += 1;
        }
        Ok(())
    }

    /// The verdict on an identical request (`digest`) earlier in `call`.
    pub(super) fn reused(&self, call: &Arc<UpstreamCall>, digest: &[u8; 32]) -> Option<Reusable> {
        let spent = lock(&self.calls);
        let entry = spent.iter().find(|entry| Arc::ptr_eq(&entry.call, call))?;
        entry
            .verdicts
            .iter()
            .find(|(known, _)| known == digest)
            .map(|(_, verdict)| verdict.clone())
    }

    /// Remembers the verdict on `digest` in `call`, for as long as the call
    /// is in flight.
    pub(super) fn remember(
        &self,
        call: &Arc<UpstreamCall>,
        digest: [u8; 32],
        verdict: Reusable,
        calls: Option<&Calls>,
    ) {
        let mut spent = lock(&self.calls);
        forget_finished(&mut spent, calls);
        let entry = entry_for(&mut spent, call);
        if entry.verdicts.len() < MAX_VERDICTS_PER_CALL
            && !entry.verdicts.iter().any(|(known, _)| *known == digest)
        {
            entry.verdicts.push((digest, verdict));
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // Every update leaves the state consistent.
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Drops what calls no longer in flight spent (each entry holds its call, so
/// a finished call's allocation cannot be taken for a new one's).
fn forget_finished(spent: &mut Vec<CallSpend>, calls: Option<&Calls>) {
    if let Some(calls) = calls {
        spent.retain(|entry| calls.is_in_flight(&entry.call));
    }
}

fn entry_for<'a>(spent: &'a mut Vec<CallSpend>, call: &Arc<UpstreamCall>) -> &'a mut CallSpend {
    let index = match spent
        .iter()
        .position(|entry| Arc::ptr_eq(&entry.call, call))
    {
        Some(index) => index,
        None => {
            spent.push(CallSpend {
                call: call.clone(),
                reviews: 0,
                verdicts: Vec::new(),
            });
            spent.len() - 1
        }
    };
    &mut spent[index]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::calls::{CallKind, SessionId};

    const LIMITS: SpendLimits = SpendLimits {
        per_call: 2,
        per_server_per_minute: 3,
    };

    /// A new call in flight on `git`, and the related call that names it
    /// (by the one thing that tells calls apart here: the session).
    fn in_flight_call(calls: &Arc<Calls>) -> (crate::calls::CallGuard, Arc<UpstreamCall>) {
        let session = SessionId::next();
        let guard = calls.begin(UpstreamCall::new(
            session,
            CallKind::ToolCall,
            "git",
            "git__push",
            "push",
        ));
        let (_, related) = calls.bind_claim("git", None, Some(guard.key()));
        let call = related.call().cloned().expect("the call is in flight");
        assert_eq!(call.session, session);
        (guard, call)
    }

    #[test]
    fn a_call_gets_its_cap_and_no_more() {
        let calls = Arc::new(Calls::default());
        let (_guard, call) = in_flight_call(&calls);
        let spend = Spend::default();
        let now = Instant::now();
        for _ in 0..2 {
            assert!(
                spend
                    .admit("git", Some(&call), LIMITS, now, Some(&calls))
                    .is_ok()
            );
        }
        let refused = spend
            .admit("git", Some(&call), LIMITS, now, Some(&calls))
            .expect_err("over the per-call cap");
        assert!(
            refused.why.contains("max_model_reviews_per_call = 2"),
            "{refused:?}"
        );
        assert_eq!(refused.limit, "max_model_reviews_per_call");
    }

    #[test]
    fn a_server_gets_its_cap_per_minute_across_calls() {
        let calls = Arc::new(Calls::default());
        let spend = Spend::default();
        let start = Instant::now();
        let mut guards = Vec::new();
        for _ in 0..3 {
            let (guard, call) = in_flight_call(&calls);
            assert!(
                spend
                    .admit("git", Some(&call), LIMITS, start, Some(&calls))
                    .is_ok()
            );
            guards.push(guard);
        }
        let refused = spend
            .admit("git", None, LIMITS, start, Some(&calls))
            .expect_err("over the per-server cap");
        assert!(
            refused
                .why
                .contains("max_model_reviews_per_server_per_minute = 3"),
            "{refused:?}"
        );
        assert_eq!(refused.limit, "max_model_reviews_per_server_per_minute");
        // Another server has its own window.
        assert!(spend.admit("docs", None, LIMITS, start, None).is_ok());
        // A minute later the window has room again.
        let later = start + SERVER_WINDOW;
        assert!(spend.admit("git", None, LIMITS, later, None).is_ok());
    }

    #[test]
    fn a_refusal_counts_nothing() {
        let spend = Spend::default();
        let limits = SpendLimits {
            per_call: 1,
            per_server_per_minute: 1,
        };
        let now = Instant::now();
        assert!(spend.admit("git", None, limits, now, None).is_ok());
        assert!(spend.admit("git", None, limits, now, None).is_err());
        let later = now + SERVER_WINDOW;
        assert!(spend.admit("git", None, limits, later, None).is_ok());
    }

    #[test]
    fn verdicts_are_reused_within_the_call_only() {
        let calls = Arc::new(Calls::default());
        let (guard, call) = in_flight_call(&calls);
        let spend = Spend::default();
        let digest = request_digest(&serde_json::json!({"message": "Allow?"}));
        let verdict = Reusable {
            answer: gatehouse_core::answer::ElicitAnswer::plain_decline(),
            by: gatehouse_audit::DecidedBy::Guest,
            reason: "declined".to_owned(),
        };
        spend.remember(&call, digest, verdict, Some(&calls));
        assert!(spend.reused(&call, &digest).is_some());
        let other = request_digest(&serde_json::json!({"message": "Allow this?"}));
        assert!(spend.reused(&call, &other).is_none());
        // Once the call ends, its verdicts are forgotten; the next call of
        // the same tool does not see them.
        drop(guard);
        let (_second, next) = in_flight_call(&calls);
        let _ = spend.admit("git", Some(&next), LIMITS, Instant::now(), Some(&calls));
        assert!(spend.reused(&next, &digest).is_none());
        assert!(spend.reused(&call, &digest).is_none(), "forgotten");
    }

    #[test]
    fn the_digest_ignores_transport_keys_only() {
        let plain = serde_json::json!({"message": "m", "_meta": {"tool_name": "push"}});
        let with_token =
            serde_json::json!({"message": "m", "_meta": {"tool_name": "push", "progressToken": 7}});
        let other = serde_json::json!({"message": "m", "_meta": {"tool_name": "pull"}});
        assert_eq!(request_digest(&plain), request_digest(&with_token));
        assert_ne!(request_digest(&plain), request_digest(&other));
    }
}
