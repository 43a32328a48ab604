//! The routing policy: where an elicitation goes, and what a chain's report
//! or a missing person means for its answer. Plain functions over the
//! settings in force, the parsed params and the chain's report; no I/O, no
//! clock, no async runtime. The [`Router`](super::Router) does what these
//! say (runs the chain, asks the person, writes the audit line).
//!
//! Codex's routing order, first match wins ([`route`]); the line numbers
//! are those of Codex's `session_mcp.rs` (the behavioural reference):
//!
//! 1. `auto_deny` → decline at once.
//! 2. `_meta` carries [`STRICT_KEY`] with any value but `false` → strict
//!    review (lines 696-794), the person never asked. JSON `true` asks for
//!    it; `false` takes the ordinary path (seed lines 696-702 read only
//!    `true`); any other value fails closed in strict review, as Codex's
//!    elicitation manager does (its test
//!    `strict_auto_review_fails_closed_without_a_canonical_decision`):
//!    - under `granular` without `mcp_elicitations` → the strict decline,
//!      unreviewed: Codex's elicitation manager answers the explicit denial
//!      before its reviewer runs, strict or not (see `strict_route`);
//!    - the server's own `approvals_reviewer` is `user` → the strict
//!      decline, unreviewed (lines 751-757, 763); the global
//!      `approvals_reviewer` does not count
//!      ([`Effective::strict_reviewer`]);
//!    - otherwise the chain runs with `auto_review` as the reviewer and only
//!      a canonical automated answer passes ([`strict`]); anything else is
//!      the strict decline.
//! 3. `approval_policy = "never"` → an empty form is accepted with `{}` and
//!    no `_meta` when prompts are auto-approved (lines 797-816); everything
//!    else is declined with `_meta.approvals_reviewer` (lines 817,
//!    1036-1041).
//! 4. `granular` without `mcp_elicitations` → the same decline (lines
//!    819-821).
//! 5. `on-request` or `granular` with `approvals_reviewer = "auto_review"`
//!    → the chain; what it leaves undecided goes to the person
//!    ([`after_chain`]).
//! 6. Anything else (`untrusted`, or `approvals_reviewer = "user"`) → the
//!    person.
//!
//! Before that order, the router settles what protocol rules and limits
//! decide: params MCP forbids ([`Decided::invalid_params`], see [`parse`]),
//! a server over `max_in_flight_per_server` ([`Decided::over_cap`]) and a
//! reused request id ([`Decided::duplicate`]).
//!
//! [`Effective::route_offline`] applies the same order, and the same reading
//! of the chain's report, for a caller with a chain and no gateway
//! (`gatehouse review`).

use rmcp::model::ErrorData;
use serde_json::Value;

use super::settings::{Effective, Unhandled};
use gatehouse_audit::{AuditStep, DecidedBy};
use gatehouse_core::answer::{ElicitAnswer, STRICT_DECLINE_MESSAGE};
use gatehouse_core::chain::{ChainReport, Verdict};
use gatehouse_core::context::ApprovalPolicy;
use gatehouse_core::context::ApprovalsReviewer;
use gatehouse_core::elicitation::{Elicitation, ElicitationParams, ParamsError};
use gatehouse_core::outcome::Decision;
use gatehouse_mcp::handler::Delivery;

/// `_meta` key asking for strict automated review.
pub const STRICT_KEY: &str = gatehouse_core::answer::STRICT_AUTO_REVIEW_KEY;

/// The module name of an audit step the router wrote itself.
pub const ROUTER_STEP: &str = "gatehouse:router";

/// The first line of the message of `Decided::unmatched`.
pub const UNMATCHED_HEADLINE: &str =
    "This approval request was declined because it does not match any call the agent made.";
/// The instructions after [`Decided::unmatched`]'s reason.
const UNMATCHED_INSTRUCTIONS: &str = "Do not retry the action through another route. Tell the user that the server asked to approve something other than what was called, and wait for their instructions.";

/// How one elicitation was decided: the answer (or the JSON-RPC error) and
/// what its audit line says about it.
#[derive(Debug)]
pub(super) struct Decided {
    /// The answer, or the error the server gets instead.
    pub(super) answer: Result<ElicitAnswer, ErrorData>,
    /// Who decided.
    pub(super) by: DecidedBy,
    /// Why, for the audit line.
    pub(super) reason: String,
    /// The modules' part in it.
    pub(super) steps: Vec<AuditStep>,
    /// How the person answered, when they decided.
    pub(super) person: Option<gatehouse_audit::PersonChannel>,
}

impl Decided {
    /// An answer with no module steps.
    pub(super) fn new(answer: ElicitAnswer, by: DecidedBy, reason: impl Into<String>) -> Self {
        Decided {
            person: None,
            answer: Ok(answer),
            by,
            reason: reason.into(),
            steps: Vec::new(),
        }
    }

    /// The reviewer chain did not load (`why`): declined unreviewed, as a
    /// failure (fail closed).
    pub(super) fn without_chain(why: &str) -> Self {
        Decided::new(
            ElicitAnswer::plain_decline(),
            DecidedBy::Failure,
            format!("the reviewer chain is not in force: {why}"),
        )
    }

    /// The server already has `limit` elicitations in flight: declined at
    /// once, unreviewed.
    pub(super) fn over_cap(limit: usize) -> Self {
        Decided::new(
            ElicitAnswer::plain_decline(),
            DecidedBy::Policy,
            format!(
                "too many elicitations in flight from this server (max_in_flight_per_server = {limit})"
            ),
        )
    }

    /// A tool-call approval that describes none of the `in_flight` calls in
    /// flight on its server (`Related::Unmatched`): declined unreviewed, with
    /// a message for the agent, so that a second call in flight never
    /// switches off the comparison of claim and call.
    pub(super) fn unmatched(in_flight: usize) -> Self {
        let finding = if in_flight == 0 {
            "the approval request names a tool call, but the agent has no call in flight on this \
             server"
                .to_owned()
        } else {
            format!(
                "the approval request's tool_name and tool_params describe none of the {in_flight} \
                 calls in flight on this server"
            )
        };
        let message = format!("{UNMATCHED_HEADLINE}\nReason: {finding}\n{UNMATCHED_INSTRUCTIONS}");
        let answer = ElicitAnswer::automated(&Decision::Decline {
            message: Some(message),
        })
        .unwrap_or_else(ElicitAnswer::plain_decline);
        Decided::new(answer, DecidedBy::Policy, finding)
    }

    /// A model-reviewed elicitation past a bound on model spend (`why` names
    /// it): declined before the model is asked, with the steps that ran.
    pub(super) fn spend_refused(why: String, steps: Vec<AuditStep>) -> Self {
        let message = format!(
            "Automatic approval review was not run: {why}. Do not retry the action through \
             another route; ask the user for explicit approval."
        );
        let answer = ElicitAnswer::automated(&Decision::Decline {
            message: Some(message),
        })
        .unwrap_or_else(ElicitAnswer::plain_decline);
        Decided {
            person: None,
            answer: Ok(answer),
            by: DecidedBy::Policy,
            reason: format!("model review refused: {why}"),
            steps,
        }
    }

    /// A pushed request reused the id of one still in flight: the later is
    /// answered `cancel` at once (the earlier is cancelled where it waits).
    pub(super) fn duplicate() -> Self {
        Decided::new(
            ElicitAnswer::cancel(),
            DecidedBy::Policy,
            "duplicate request id: an earlier request with this id was still in flight; both are cancelled",
        )
    }

    /// Params MCP forbids: a -32602 error naming the field.
    pub(super) fn invalid_params(error: &ParamsError) -> Self {
        Decided {
            person: None,
            answer: Err(ErrorData::invalid_params(error.to_string(), None)),
            by: DecidedBy::Policy,
            reason: "invalid params".to_owned(),
            steps: Vec::new(),
        }
    }
}

/// Parses the wire params of an elicitation that arrived by `delivery`.
/// A pushed URL-mode request (protocols up to 2025-11-25) must carry an
/// `elicitationId`; an input request (2026-07-28) has none.
pub(super) fn parse(params: &Value, delivery: Delivery) -> Result<ElicitationParams, ParamsError> {
    let params = ElicitationParams::from_wire(params)?;
    match &params.elicitation {
        Elicitation::Url { elicitation_id, .. }
            if elicitation_id.is_empty() && delivery == Delivery::Request =>
        {
            Err(ParamsError::MissingElicitationId)
        }
        _ => Ok(params),
    }
}

/// Where an elicitation goes.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Route {
    /// Answered by a setting, without a module or the person.
    Settled {
        /// The answer.
        answer: ElicitAnswer,
        /// Why, for the audit line.
        reason: &'static str,
    },
    /// Strict review: the chain, and only a canonical answer passes.
    Strict,
    /// The chain; what it leaves undecided goes to the person.
    Chain,
    /// Straight to the person.
    Person {
        /// Why, for the audit line.
        why: &'static str,
    },
}

/// Where `params` goes under `settings` (Codex's routing order, see the
/// module documentation).
pub(super) fn route(settings: &Effective, params: &ElicitationParams) -> Route {
    if settings.auto_deny {
        return Route::Settled {
            answer: ElicitAnswer::plain_decline(),
            reason: "auto-deny",
        };
    }
    let strict = params
        .meta
        .as_ref()
        .and_then(|meta| meta.get(STRICT_KEY))
        .is_some_and(|marker| *marker != Value::Bool(false));
    if strict {
        return strict_route(settings);
    }
    match settings.approval_policy {
        ApprovalPolicy::Never => {
            return if settings.auto_approve_prompts && is_empty_form(&params.elicitation) {
                Route::Settled {
                    answer: ElicitAnswer::auto_approved(),
                    reason: "approval policy never, prompts auto-approved",
                }
            } else {
                Route::Settled {
                    answer: automated_decline(),
                    reason: "approval policy never",
                }
            };
        }
        ApprovalPolicy::Granular(flags) if !flags.mcp_elicitations => {
            return Route::Settled {
                answer: automated_decline(),
                reason: "granular policy without mcp_elicitations",
            };
        }
        _ => {}
    }
    let automated = matches!(
        settings.approval_policy,
        ApprovalPolicy::OnRequest | ApprovalPolicy::Granular(_)
    ) && settings.approvals_reviewer == ApprovalsReviewer::AutoReview;
    if automated {
        Route::Chain
    } else {
        Route::Person {
            why: "routed to the user",
        }
    }
}

/// Where a strict request goes: the strict decline, unreviewed, when the
/// settings forbid its review; else the chain ([`Route::Strict`], run under
/// [`Effective::for_strict_review`]).
///
/// - `granular` without `mcp_elicitations` forbids it. Codex's strict
///   branch (seed lines 696-794) comes before its policy match (lines
///   795-824) inside the reviewer, but Codex's elicitation manager, which
///   calls that reviewer, answers an explicitly denied category first: its
///   test `strict_auto_review_respects_explicit_elicitation_denials`
///   expects the strict decline with the reviewer never called, while under
///   `never` (not an explicit denial of the category) the strict request is
///   still reviewed and approved.
/// - The reviewer for the request being `user` forbids it: seed lines
///   751-757 ask for the reviewer with `AutoReview` as the default (not the
///   session's setting, which the ordinary path passes at lines 825-831) and
///   answer nothing, the strict decline, unless it comes out `AutoReview`.
///   Only the server's own override can make it `user` here
///   ([`Effective::strict_reviewer`]).
fn strict_route(settings: &Effective) -> Route {
    if let ApprovalPolicy::Granular(flags) = settings.approval_policy
        && !flags.mcp_elicitations
    {
        return Route::Settled {
            answer: strict_decline(),
            reason: "strict review refused: the granular policy does not allow mcp_elicitations",
        };
    }
    if settings.strict_reviewer() == ApprovalsReviewer::User {
        return Route::Settled {
            answer: strict_decline(),
            reason: "strict review refused: this server's approvals_reviewer is user",
        };
    }
    Route::Strict
}

/// What `gatehouse serve` does with one elicitation under the settings in
/// force, as [`Effective::route_offline`] works it out for a caller that runs
/// the chain itself and has no person to ask.
#[derive(Debug)]
pub struct Routed {
    /// The chain's report; `None` when a setting answers, or the person is
    /// asked, without running it.
    pub report: Option<ChainReport>,
    /// Whether the chain ran as strict review: only a canonical automated
    /// answer passes, anything else is the strict decline.
    pub strict: bool,
    /// The answer; `None` when the person decides.
    pub answer: Option<ElicitAnswer>,
    /// Who decides, as the audit line says it ([`DecidedBy::Person`] when
    /// the person is asked).
    pub by: DecidedBy,
    /// Why, as the audit line's `reason` says it.
    pub reason: String,
}

impl Effective {
    /// Where `gatehouse serve` sends `params` under these settings and what
    /// it answers, with `review` running the chain under the settings the
    /// router runs it under (for a strict request
    /// [`Effective::for_strict_review`]): the router's own `route`, then
    /// `strict` or `after_chain` on the report.
    ///
    /// What only a running gateway knows is not applied: the match of a
    /// tool-call approval against the agent's calls in flight (serve declines
    /// one that describes none), the bounds on model spend and on
    /// elicitations in flight, a reused request id, and whether the person
    /// can be asked (else `on_unhandled` answers).
    pub fn route_offline(
        &self,
        params: &ElicitationParams,
        review: impl FnOnce(&Effective) -> ChainReport,
    ) -> Routed {
        let answered = |decided: Decided, report: ChainReport, is_strict: bool| Routed {
            report: Some(report),
            strict: is_strict,
            // `strict` and `after_chain` always answer; an error (which only
            // params MCP forbids give) would be no answer to send.
            answer: Some(
                decided
                    .answer
                    .unwrap_or_else(|_| ElicitAnswer::plain_decline()),
            ),
            by: decided.by,
            reason: decided.reason,
        };
        match route(self, params) {
            Route::Settled { answer, reason } => Routed {
                report: None,
                strict: false,
                answer: Some(answer),
                by: DecidedBy::Policy,
                reason: reason.to_owned(),
            },
            Route::Person { why } => Routed {
                report: None,
                strict: false,
                answer: None,
                by: DecidedBy::Person,
                reason: why.to_owned(),
            },
            Route::Strict => {
                let report = review(&self.for_strict_review());
                answered(strict(&report), report, true)
            }
            Route::Chain => {
                let report = review(self);
                match after_chain(&report) {
                    AfterChain::Answered(decided) => answered(decided, report, false),
                    AfterChain::Deferred { why, .. } => Routed {
                        report: Some(report),
                        strict: false,
                        answer: None,
                        by: DecidedBy::Person,
                        reason: why.to_owned(),
                    },
                }
            }
        }
    }
}

/// A form that asks for nothing (no or empty `properties`): what
/// auto-approved prompts accept under `approval_policy = "never"`.
fn is_empty_form(elicitation: &Elicitation) -> bool {
    matches!(elicitation,
        Elicitation::Form { requested_schema, .. }
            if requested_schema
                .get("properties")
                .and_then(Value::as_object)
                .is_none_or(|properties| properties.is_empty()))
}

/// Codex's decline for a policy that forbids asking: no message, but
/// `_meta.approvals_reviewer = "auto_review"` (seed lines 817, 820,
/// 1036-1041).
fn automated_decline() -> ElicitAnswer {
    ElicitAnswer::automated(&Decision::Decline { message: None })
        .unwrap_or_else(ElicitAnswer::plain_decline)
}

/// The strict decline: Codex's review-failed message, marked as automated.
fn strict_decline() -> ElicitAnswer {
    ElicitAnswer::automated(&Decision::Decline {
        message: Some(STRICT_DECLINE_MESSAGE.to_owned()),
    })
    .unwrap_or_else(ElicitAnswer::plain_decline)
}

/// What a chain's report means for an elicitation routed to the chain.
#[derive(Debug)]
pub(super) enum AfterChain {
    /// A module decided, or one failed and the chain failed closed.
    Answered(Decided),
    /// Every module deferred: the person decides.
    Deferred {
        /// The modules' steps, for the audit line.
        steps: Vec<AuditStep>,
        /// Why the person is asked, for the audit line.
        why: &'static str,
    },
}

/// The answer a chain's report gives, or that the person must decide.
pub(super) fn after_chain(report: &ChainReport) -> AfterChain {
    let steps = audit_steps(report);
    match (&report.verdict, report.answer()) {
        (Verdict::Decided { .. }, Some(answer)) => AfterChain::Answered(Decided {
            person: None,
            answer: Ok(answer),
            by: DecidedBy::Guest,
            reason: "decided by the chain".to_owned(),
            steps,
        }),
        (Verdict::Failed { .. }, Some(answer)) => AfterChain::Answered(Decided {
            person: None,
            answer: Ok(answer),
            by: DecidedBy::Failure,
            reason: failure_reason(report),
            steps,
        }),
        _ => AfterChain::Deferred {
            steps,
            why: "every module deferred",
        },
    }
}

/// Strict review: only a canonical automated answer passes (accept with no
/// or empty content, decline, cancel); anything else (a deferral, a
/// failure, accept with content) is the strict decline.
pub(super) fn strict(report: &ChainReport) -> Decided {
    let steps = audit_steps(report);
    let canonical = match &report.verdict {
        Verdict::Decided { outcome, .. } => match &outcome.decision {
            Decision::Accept { content } => content
                .as_ref()
                .is_none_or(|content| content.as_object().is_some_and(|object| object.is_empty())),
            Decision::Decline { .. } | Decision::Cancel => true,
            Decision::Defer => false,
        },
        _ => false,
    };
    match report.answer() {
        Some(answer) if canonical => Decided {
            person: None,
            answer: Ok(answer),
            by: DecidedBy::Guest,
            reason: "strict review".to_owned(),
            steps,
        },
        _ => Decided {
            person: None,
            answer: Ok(strict_decline()),
            by: DecidedBy::Failure,
            reason: "strict review without a canonical answer".to_owned(),
            steps,
        },
    }
}

/// What nobody decided (no person to ask, or one that could not be asked):
/// `on_unhandled`'s answer.
pub(super) fn unhandled(on_unhandled: Unhandled, reason: String, steps: Vec<AuditStep>) -> Decided {
    let answer = match on_unhandled {
        Unhandled::Decline => ElicitAnswer::plain_decline(),
        Unhandled::Cancel => ElicitAnswer::cancel(),
    };
    Decided {
        person: None,
        answer: Ok(answer),
        by: DecidedBy::Unhandled,
        reason,
        steps,
    }
}

/// The audit steps of a chain run: one per module that ran, or, when the
/// router failed it before any module finished (the watchdog, a crashed
/// task), one step for the router with the failure's code.
pub(super) fn audit_steps(report: &ChainReport) -> Vec<AuditStep> {
    let mut steps: Vec<AuditStep> = report.steps.iter().map(AuditStep::from).collect();
    if let Some(failure) = router_failure(report) {
        steps.push(AuditStep {
            module: ROUTER_STEP.to_owned(),
            sha256: String::new(),
            signed_by: None,
            outcome: "failure".to_owned(),
            failure: Some(failure.code().to_owned()),
            rationale: Some(failure.to_string()),
            risk: None,
            latency_us: 0,
            model_calls: Vec::new(),
        });
    }
    steps
}

/// The router's own failure (the watchdog, a crashed task): a failed verdict
/// past the last step that finished.
fn router_failure(report: &ChainReport) -> Option<&gatehouse_core::failure::ReviewFailure> {
    match &report.verdict {
        Verdict::Failed { step, failure } if *step >= report.steps.len() => Some(failure),
        _ => None,
    }
}

/// The audit reason for a chain that failed: a module's failure, or the
/// router's own when a module did not finish (the watchdog, a crashed task).
pub(super) fn failure_reason(report: &ChainReport) -> String {
    match router_failure(report) {
        Some(failure) if report.steps.is_empty() => format!(
            "no module finished ({}): {failure}; failed closed",
            failure.code()
        ),
        Some(failure) => format!(
            "module {} did not finish ({}): {failure}; failed closed",
            report.steps.len() + 1,
            failure.code()
        ),
        None => "a module failed; failed closed".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use serde_json::json;

    use super::*;
    use gatehouse_core::answer::Action;
    use gatehouse_core::context::GranularPolicy;
    use gatehouse_core::failure::ReviewFailure;
    use gatehouse_core::outcome::Outcome;

    fn settings(
        approval_policy: ApprovalPolicy,
        approvals_reviewer: ApprovalsReviewer,
    ) -> Effective {
        Effective {
            auto_deny: false,
            approval_policy,
            approvals_reviewer,
            server_reviewer: None,
            auto_approve_prompts: false,
            person: super::super::settings::PersonRoute::Client,
        }
    }

    /// A strict approval request: `codex_strict_auto_review` exactly `true`.
    fn strict_true() -> ElicitationParams {
        form(
            json!({}),
            json!({"codex_strict_auto_review": true, "codex_request_type": "approval_request",
                   "codex_approval_kind": "mcp_tool_call", "tool_name": "deploy"}),
        )
    }

    fn granular(mcp_elicitations: bool) -> ApprovalPolicy {
        ApprovalPolicy::Granular(GranularPolicy {
            mcp_elicitations,
            ..GranularPolicy::default()
        })
    }

    /// The strict decline as Codex sends it: its review-failed message,
    /// marked as automated.
    fn assert_strict_decline(answer: &ElicitAnswer) {
        assert_eq!(
            answer.to_wire(),
            json!({"action": "decline", "_meta": {
                "approvals_reviewer": "auto_review",
                "message": STRICT_DECLINE_MESSAGE,
            }})
        );
    }

    fn on_request() -> Effective {
        settings(ApprovalPolicy::OnRequest, ApprovalsReviewer::AutoReview)
    }

    fn form(properties: Value, meta: Value) -> ElicitationParams {
        ElicitationParams::from_wire(&json!({
            "message": "Go on?",
            "requestedSchema": {"type": "object", "properties": properties},
            "_meta": meta,
        }))
        .expect("valid params")
    }

    fn asks_nothing() -> ElicitationParams {
        form(json!({}), Value::Null)
    }

    fn asks_a_name() -> ElicitationParams {
        form(json!({"name": {"type": "string"}}), Value::Null)
    }

    /// A strict marker that is neither `true` nor `false`: strict review,
    /// where it fails closed.
    fn strict_params() -> ElicitationParams {
        form(json!({}), json!({"codex_strict_auto_review": "yes"}))
    }

    #[test]
    fn a_strict_marker_of_false_takes_the_ordinary_path() {
        let params = form(json!({}), json!({"codex_strict_auto_review": false}));
        assert_eq!(
            route(
                &settings(ApprovalPolicy::OnRequest, ApprovalsReviewer::AutoReview),
                &params
            ),
            Route::Chain
        );
        assert!(matches!(
            route(
                &settings(ApprovalPolicy::Never, ApprovalsReviewer::AutoReview),
                &params
            ),
            Route::Settled { .. }
        ));
        assert_eq!(
            route(
                &settings(ApprovalPolicy::OnRequest, ApprovalsReviewer::AutoReview),
                &strict_true()
            ),
            Route::Strict
        );
    }

    fn decided(decision: Decision) -> ChainReport {
        ChainReport {
            steps: Vec::new(),
            verdict: Verdict::Decided {
                step: 0,
                outcome: Outcome {
                    decision,
                    rationale: None,
                    risk: None,
                },
            },
        }
    }

    fn deferred() -> ChainReport {
        ChainReport {
            steps: Vec::new(),
            verdict: Verdict::Deferred,
        }
    }

    fn failed() -> ChainReport {
        ChainReport {
            steps: Vec::new(),
            verdict: Verdict::Failed {
                step: 0,
                failure: ReviewFailure::Deadline(Duration::from_millis(5)),
            },
        }
    }

    #[test]
    fn auto_deny_comes_first_even_before_strict_review() {
        let settings = Effective {
            auto_deny: true,
            ..on_request()
        };
        assert_eq!(
            route(&settings, &strict_params()),
            Route::Settled {
                answer: ElicitAnswer::plain_decline(),
                reason: "auto-deny",
            }
        );
    }

    #[test]
    fn the_strict_key_wins_over_every_policy_whatever_its_value_but_false() {
        for policy in [
            ApprovalPolicy::Never,
            ApprovalPolicy::Untrusted,
            ApprovalPolicy::OnRequest,
        ] {
            for reviewer in [ApprovalsReviewer::User, ApprovalsReviewer::AutoReview] {
                assert_eq!(
                    route(&settings(policy, reviewer), &strict_params()),
                    Route::Strict
                );
            }
        }
    }

    /// Codex: the elicitation manager answers an explicitly denied category
    /// before its reviewer runs, strict or not (its test
    /// `strict_auto_review_respects_explicit_elicitation_denials`: the strict
    /// decline, the reviewer never called), although the seed's strict
    /// branch (`session_mcp.rs` lines 696-794) comes before its own policy
    /// match (lines 795-824).
    #[test]
    fn strict_review_under_granular_without_mcp_elicitations_is_declined_unreviewed() {
        for reviewer in [ApprovalsReviewer::AutoReview, ApprovalsReviewer::User] {
            let Route::Settled { answer, reason } =
                route(&settings(granular(false), reviewer), &strict_true())
            else {
                panic!("settled without review");
            };
            assert_strict_decline(&answer);
            assert_eq!(
                reason,
                "strict review refused: the granular policy does not allow mcp_elicitations"
            );
        }
        // With mcp_elicitations, and under `never` (which denies no category
        // explicitly), the strict request is reviewed.
        for policy in [granular(true), ApprovalPolicy::Never] {
            assert_eq!(
                route(
                    &settings(policy, ApprovalsReviewer::AutoReview),
                    &strict_true()
                ),
                Route::Strict
            );
        }
    }

    /// Codex `session_mcp.rs` lines 751-757: the strict path asks for the
    /// reviewer with `AutoReview` as the default, not the session's setting
    /// (which the ordinary path passes, lines 825-831); only a narrower
    /// (per-connector; here per-server) setting can make it `user`, and then
    /// the answer is the strict decline without a review (line 763).
    #[test]
    fn strict_review_heeds_only_the_servers_own_reviewer() {
        // The global reviewer is `user`: still reviewed, as auto_review.
        let global_user = settings(ApprovalPolicy::OnRequest, ApprovalsReviewer::User);
        assert_eq!(route(&global_user, &strict_true()), Route::Strict);
        assert_eq!(
            global_user.for_strict_review().approvals_reviewer,
            ApprovalsReviewer::AutoReview
        );
        // Only for the strict request: the ordinary one goes to the person.
        assert!(matches!(
            route(&global_user, &asks_nothing()),
            Route::Person { .. }
        ));
        // The server's own override to `user`: the strict decline, unreviewed.
        let server_user = Effective {
            server_reviewer: Some(ApprovalsReviewer::User),
            approvals_reviewer: ApprovalsReviewer::User,
            ..on_request()
        };
        let Route::Settled { answer, reason } = route(&server_user, &strict_true()) else {
            panic!("settled without review");
        };
        assert_strict_decline(&answer);
        assert_eq!(
            reason,
            "strict review refused: this server's approvals_reviewer is user"
        );
        // The server's own override to `auto_review` wins over a global `user`.
        let server_auto = Effective {
            server_reviewer: Some(ApprovalsReviewer::AutoReview),
            approvals_reviewer: ApprovalsReviewer::AutoReview,
            ..global_user
        };
        assert_eq!(route(&server_auto, &strict_true()), Route::Strict);
    }

    /// Codex `session_mcp.rs` lines 797-817: under `never` the auto-approved
    /// accept carries no `_meta` (lines 811-815) and the decline is
    /// `decline_without_message`, marked `auto_review` (lines 1036-1041);
    /// `granular` without `mcp_elicitations` declines the same way (line 820).
    #[test]
    fn the_never_and_granular_short_cuts_carry_codexs_meta() {
        let approving = Effective {
            auto_approve_prompts: true,
            ..settings(ApprovalPolicy::Never, ApprovalsReviewer::AutoReview)
        };
        let Route::Settled { answer, .. } = route(&approving, &asks_nothing()) else {
            panic!("settled by policy");
        };
        assert_eq!(answer.to_wire(), json!({"action": "accept", "content": {}}));
        for (settings, params) in [
            (approving, asks_a_name()),
            (
                settings(ApprovalPolicy::Never, ApprovalsReviewer::AutoReview),
                asks_nothing(),
            ),
            (
                settings(granular(false), ApprovalsReviewer::AutoReview),
                asks_nothing(),
            ),
        ] {
            let Route::Settled { answer, .. } = route(&settings, &params) else {
                panic!("settled by policy");
            };
            assert_eq!(
                answer.to_wire(),
                json!({"action": "decline", "_meta": {"approvals_reviewer": "auto_review"}})
            );
        }
    }

    #[test]
    fn never_accepts_only_empty_forms_and_only_with_auto_approved_prompts() {
        let never = settings(ApprovalPolicy::Never, ApprovalsReviewer::AutoReview);
        let approving = Effective {
            auto_approve_prompts: true,
            ..never
        };
        let Route::Settled { answer, reason } = route(&approving, &asks_nothing()) else {
            panic!("never is settled by policy");
        };
        assert_eq!(answer.action, Action::Accept);
        assert_eq!(answer.content, Some(json!({})));
        assert_eq!(reason, "approval policy never, prompts auto-approved");
        for (settings, params) in [
            (approving, asks_a_name()),
            (never, asks_nothing()),
            (never, asks_a_name()),
        ] {
            let Route::Settled { answer, reason } = route(&settings, &params) else {
                panic!("never is settled by policy");
            };
            assert_eq!(answer.action, Action::Decline);
            assert_eq!(reason, "approval policy never");
        }
    }

    #[test]
    fn granular_without_mcp_elicitations_declines_and_with_them_reviews() {
        let without = GranularPolicy {
            mcp_elicitations: false,
            ..GranularPolicy::default()
        };
        let Route::Settled { answer, reason } = route(
            &settings(
                ApprovalPolicy::Granular(without),
                ApprovalsReviewer::AutoReview,
            ),
            &asks_nothing(),
        ) else {
            panic!("settled by policy");
        };
        assert_eq!(answer.action, Action::Decline);
        assert_eq!(reason, "granular policy without mcp_elicitations");
        assert_eq!(
            route(
                &settings(
                    ApprovalPolicy::Granular(GranularPolicy::default()),
                    ApprovalsReviewer::AutoReview
                ),
                &asks_nothing()
            ),
            Route::Chain
        );
    }

    #[test]
    fn the_chain_runs_only_for_automated_review_the_rest_goes_to_the_person() {
        assert_eq!(route(&on_request(), &asks_a_name()), Route::Chain);
        for settings in [
            settings(ApprovalPolicy::OnRequest, ApprovalsReviewer::User),
            settings(ApprovalPolicy::Untrusted, ApprovalsReviewer::AutoReview),
            settings(ApprovalPolicy::Untrusted, ApprovalsReviewer::User),
        ] {
            assert_eq!(
                route(&settings, &asks_a_name()),
                Route::Person {
                    why: "routed to the user"
                }
            );
        }
    }

    /// `gatehouse review` routes as serve does: a setting that answers, or
    /// the person, without running the chain; a strict request under the
    /// strict reviewer, its report read by the strict filter.
    #[test]
    fn offline_routing_is_the_routers_own() {
        let never_run = |_: &Effective| -> ChainReport { panic!("the chain must not run") };
        let refused = settings(granular(false), ApprovalsReviewer::AutoReview)
            .route_offline(&strict_true(), never_run);
        assert!(refused.report.is_none());
        assert_strict_decline(&refused.answer.expect("an answer"));
        assert_eq!(refused.by, DecidedBy::Policy);
        assert_eq!(
            refused.reason,
            "strict review refused: the granular policy does not allow mcp_elicitations"
        );

        let global_user = settings(ApprovalPolicy::OnRequest, ApprovalsReviewer::User);
        let to_the_person = global_user.route_offline(&asks_nothing(), never_run);
        assert!(to_the_person.report.is_none() && to_the_person.answer.is_none());
        assert_eq!(to_the_person.by, DecidedBy::Person);
        let reviewed = global_user.route_offline(&strict_true(), |under| {
            assert_eq!(under.approvals_reviewer, ApprovalsReviewer::AutoReview);
            decided(Decision::Accept { content: None })
        });
        assert!(reviewed.strict && reviewed.report.is_some());
        assert_eq!(reviewed.by, DecidedBy::Guest);
        assert_eq!(reviewed.reason, "strict review");
        let no_canonical = global_user.route_offline(&strict_true(), |_| deferred());
        assert_strict_decline(&no_canonical.answer.expect("the strict decline"));
        assert_eq!(no_canonical.by, DecidedBy::Failure);

        let chain = on_request().route_offline(&asks_a_name(), |_| deferred());
        assert!(chain.report.is_some() && chain.answer.is_none());
        assert_eq!(
            (chain.by, chain.reason.as_str()),
            (DecidedBy::Person, "every module deferred")
        );
    }

    #[test]
    fn a_pushed_url_request_needs_an_elicitation_id_an_input_request_does_not() {
        let url = json!({"mode": "url", "message": "Sign in", "url": "https://example.com/"});
        assert!(matches!(
            parse(&url, Delivery::Request),
            Err(ParamsError::MissingElicitationId)
        ));
        assert!(parse(&url, Delivery::InputRequest).is_ok());
        let mut with_id = url.clone();
        with_id["elicitationId"] = json!("e1");
        assert!(parse(&with_id, Delivery::Request).is_ok());
    }

    #[test]
    fn after_the_chain_a_decision_or_failure_answers_and_a_deferral_asks_the_person() {
        let AfterChain::Answered(decision) = after_chain(&decided(Decision::Cancel)) else {
            panic!("a decision answers");
        };
        assert_eq!(decision.by, DecidedBy::Guest);
        assert_eq!(decision.reason, "decided by the chain");
        let AfterChain::Answered(failure) = after_chain(&failed()) else {
            panic!("a failure answers");
        };
        assert_eq!(failure.by, DecidedBy::Failure);
        assert!(matches!(&failure.answer, Ok(answer) if answer.action == Action::Decline));
        assert!(failure.reason.starts_with("no module finished (deadline)"));
        assert!(matches!(
            after_chain(&deferred()),
            AfterChain::Deferred {
                why: "every module deferred",
                ..
            }
        ));
    }

    #[test]
    fn strict_review_passes_only_canonical_answers() {
        for decision in [
            Decision::Accept { content: None },
            Decision::Accept {
                content: Some(json!({})),
            },
            Decision::Decline { message: None },
            Decision::Cancel,
        ] {
            let passed = strict(&decided(decision.clone()));
            assert_eq!(passed.by, DecidedBy::Guest, "{decision:?}");
            assert_eq!(passed.reason, "strict review");
        }
        for report in [
            decided(Decision::Accept {
                content: Some(json!({"name": "Ada"})),
            }),
            deferred(),
            failed(),
        ] {
            let refused = strict(&report);
            assert_eq!(refused.by, DecidedBy::Failure, "{report:?}");
            assert_eq!(refused.reason, "strict review without a canonical answer");
            let answer = refused.answer.expect("an answer");
            assert_eq!(answer.action, Action::Decline);
        }
    }

    #[test]
    fn unhandled_answers_as_configured() {
        let decline = unhandled(Unhandled::Decline, "nobody".to_owned(), Vec::new());
        assert_eq!(decline.by, DecidedBy::Unhandled);
        assert!(matches!(decline.answer, Ok(answer) if answer.action == Action::Decline));
        let cancel = unhandled(Unhandled::Cancel, "nobody".to_owned(), Vec::new());
        assert!(matches!(cancel.answer, Ok(answer) if answer.action == Action::Cancel));
    }

    #[test]
    fn limits_and_protocol_rules_are_the_routers_own_answers() {
        let over = Decided::over_cap(3);
        assert_eq!(over.by, DecidedBy::Policy);
        assert!(over.reason.contains("max_in_flight_per_server = 3"));
        let duplicate = Decided::duplicate();
        assert!(matches!(duplicate.answer, Ok(answer) if answer.action == Action::Cancel));
        let invalid = Decided::invalid_params(&ParamsError::MissingElicitationId);
        assert!(matches!(invalid.answer, Err(error) if error.code.0 == -32602));
    }
}
