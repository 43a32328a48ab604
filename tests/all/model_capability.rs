//! The model capability and the related call (contract 0.2) through a real
//! guest (`model-probe`) and a scripted [`Model`]: only a granted module may
//! ask, the guest's deadline does not run while it waits, the model's
//! budget and the cancel token end a wait, every call is recorded for the
//! audit, and the related call reaches the guest as the host tied it.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use gatehouse_core::chain::{Chain, ChainLink, GrantError};
use gatehouse_core::config::ModuleConfig;
use gatehouse_core::context::{CallKind, RelatedCall, ReviewContext};
use gatehouse_core::elicitation::{ElicitationParams, RequestId};
use gatehouse_core::failure::ReviewFailure;
use gatehouse_core::model::{Cancel, ModelGrant};
use gatehouse_core::outcome::Decision;
use gatehouse_core::request::ReviewRequest;
use gatehouse_core::sandbox::{Limits, MAX_MODEL_CALLS_PER_REVIEW, ModuleReport, Sandbox};
use gatehouse_tests::scripted_model::{Script, Scripted};
use gatehouse_tests::{load, sandbox, sandbox_with};
use serde_json::json;

fn grant(model: Arc<Scripted>) -> ModelGrant {
    ModelGrant::new("review", model)
}

fn form_request(context: ReviewContext) -> ReviewRequest {
    let params = ElicitationParams::from_wire(&json!({
        "message": "Allow delete_branch?",
        "requestedSchema": {"type": "object", "properties": {}},
        "_meta": {"codex_request_type": "approval_request",
                  "codex_approval_kind": "mcp_tool_call", "tool_name": "delete_branch"}
    }))
    .expect("valid params");
    ReviewRequest::new(params, context)
}

/// model-probe's review of [`plain_request`] with `config` and `grant`.
fn probe(sandbox: &Sandbox, config: &str, grant: &ModelGrant) -> ModuleReport {
    load(sandbox, "test_guest_model_probe").review_with(
        config,
        &plain_request(),
        Some(grant),
        &Cancel::new(),
    )
}

fn plain_request() -> ReviewRequest {
    form_request(ReviewContext::new("github", RequestId::Number(1)))
}

/// The review was ended by the module's own deadline.
fn assert_ended_by_its_deadline(report: &ModuleReport) {
    assert!(
        matches!(report.result, Err(ReviewFailure::Deadline(_))),
        "{:?}",
        report.result
    );
}

/// How many requests reached the model.
fn sent(model: &Scripted) -> usize {
    model.seen.lock().expect("lock").len()
}

fn decline_message(decision: &Decision) -> &str {
    match decision {
        Decision::Decline {
            message: Some(message),
        } => message,
        other => panic!("expected a decline with a message, got {other:?}"),
    }
}

#[test]
fn a_model_module_without_a_grant_is_refused_when_the_chain_is_built() {
    let sandbox = sandbox();
    let probe = load(&sandbox, "test_guest_model_probe");
    let error = ChainLink::new(probe.clone())
        .check_grant()
        .expect_err("not granted");
    assert!(matches!(error, GrantError::NotGranted { .. }));
    let message = error.to_string();
    for needle in [
        "test_guest_model_probe",
        "gatehouse:reviewer/model",
        "model = \"NAME\"",
        "[models.NAME]",
    ] {
        assert!(
            message.contains(needle),
            "{needle:?} missing from {message}"
        );
    }
    // Through the config: no `model` key, then a model that is not defined.
    let entry: ModuleConfig = serde_json::from_value(json!({"path": "probe.wasm"})).expect("entry");
    let models = BTreeMap::new();
    assert!(matches!(
        entry.link(probe.clone(), Default::default(), &models),
        Err(GrantError::NotGranted { .. })
    ));
    let entry: ModuleConfig =
        serde_json::from_value(json!({"path": "probe.wasm", "model": "gpt"})).expect("entry");
    let error = entry
        .link(probe.clone(), Default::default(), &models)
        .expect_err("unknown model");
    assert!(
        error.to_string().contains("add a [models.gpt] table"),
        "{error}"
    );
    // A granted, defined model links.
    let models = BTreeMap::from([(
        "gpt".to_owned(),
        grant(Scripted::new(Script::Answer("allow"))),
    )]);
    let link = entry
        .link(probe, Default::default(), &models)
        .expect("granted");
    assert_eq!(link.model.as_ref().map(ModelGrant::name), Some("review"));
    // A module that does not ask a model needs no grant.
    let guardian = load(&sandbox, "gatehouse_guardian");
    ChainLink::new(guardian)
        .check_grant()
        .expect("no model, no grant needed");
}

#[test]
fn a_granted_module_asks_and_its_answer_decides() {
    let sandbox = sandbox();
    let model = Scripted::new(Script::Answer(r#"{"outcome":"allow"}"#));
    let chain = Chain::new(vec![
        ChainLink::new(load(&sandbox, "test_guest_model_probe"))
            .with_config(r#"{"ask": true, "schema": true}"#)
            .with_model(grant(model.clone())),
    ]);
    let report = chain.review(&plain_request());
    let step = &report.steps[0];
    let outcome = step.result.as_ref().expect("reviews");
    assert_eq!(
        outcome.decision,
        Decision::Accept {
            content: Some(json!({}))
        }
    );
    // What the guest asked reached the model as it was sent.
    let seen = model.seen.lock().expect("lock");
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].messages.len(), 2);
    assert_eq!(seen[0].messages[1].content, "related=none");
    assert!(
        seen[0]
            .output_schema
            .as_deref()
            .is_some_and(|schema| schema.contains("outcome"))
    );
    assert_eq!(seen[0].max_output_tokens, Some(64));
    // The call is recorded for the audit line, without the prompt text.
    assert_eq!(step.model_calls.len(), 1);
    let call = &step.model_calls[0];
    assert_eq!(call.grant, "review");
    assert_eq!(call.model, "scripted-1");
    assert_eq!(call.attempts, 1);
    assert_eq!(call.answer.as_deref(), Some(r#"{"outcome":"allow"}"#));
    assert_eq!(call.error, None);
    assert_eq!(call.prompt, None);
    assert_eq!(call.prompt_sha256.len(), 64);
    let audited = serde_json::to_value(step).expect("serializes");
    assert!(
        audited["model_calls"][0].get("prompt").is_none(),
        "{audited}"
    );
    assert!(
        !audited.to_string().contains("You are a probe"),
        "prompt text leaked: {audited}"
    );
}

#[test]
fn the_prompt_is_audited_only_when_the_grant_says_so() {
    let sandbox = sandbox();
    let model = Scripted::new(Script::Answer("deny"));
    let grant = grant(model).with_audit_prompts(true);
    let report = probe(&sandbox, r#"{"ask": true}"#, &grant);
    let outcome = report.result.expect("reviews");
    assert_eq!(decline_message(&outcome.decision), "model said: deny");
    let prompt = report.model_calls[0]
        .prompt
        .as_deref()
        .expect("prompt kept");
    assert!(prompt.contains("You are a probe."), "{prompt}");
}

#[test]
fn an_ungranted_review_gets_not_configured() {
    // An embedder that reviews a model-reviewer without a grant: the guest is
    // told, nothing is asked.
    let sandbox = sandbox();
    let report =
        load(&sandbox, "test_guest_model_probe").review(r#"{"ask": true}"#, &plain_request());
    let outcome = report.result.expect("reviews");
    assert_eq!(
        decline_message(&outcome.decision),
        "model error: not-configured"
    );
    assert!(report.model_calls.is_empty());
}

#[test]
fn waiting_on_the_model_does_not_spend_the_guests_deadline() {
    let limits = Limits::builder()
        .deadline(Duration::from_millis(100))
        .build();
    let sandbox = sandbox_with(limits);
    // The model takes three times the guest's deadline.
    let model = Scripted::new(Script::AfterSleep(Duration::from_millis(300), "allow"));
    let report = probe(&sandbox, r#"{"ask": true}"#, &grant(model));
    let outcome = report.result.expect("the wait is not the guest's time");
    assert_eq!(
        outcome.decision,
        Decision::Accept {
            content: Some(json!({}))
        }
    );
    assert!(report.model_calls[0].latency_us >= 300_000);
}

#[test]
fn the_guests_deadline_still_bounds_its_running_after_the_wait() {
    let limits = Limits::builder()
        .deadline(Duration::from_millis(100))
        .build();
    let sandbox = sandbox_with(limits);
    let model = Scripted::new(Script::AfterSleep(Duration::from_millis(150), "allow"));
    let report = probe(
        &sandbox,
        r#"{"ask": true, "spin_after": true}"#,
        &grant(model),
    );
    assert_ended_by_its_deadline(&report);
    assert_eq!(report.model_calls.len(), 1);
}

#[test]
fn the_model_budget_ends_a_wait_and_later_calls_are_not_sent() {
    let sandbox = sandbox();
    let model = Scripted::new(Script::Hang);
    let budgeted = grant(model.clone()).with_timeout(Duration::from_millis(50));
    let report = probe(&sandbox, r#"{"ask": true}"#, &budgeted);
    let outcome = report.result.expect("reviews");
    assert_eq!(decline_message(&outcome.decision), "model error: timeout");
    assert_eq!(report.model_calls[0].error.as_deref(), Some("timeout"));

    // A guest that asks again and again once the budget is spent: each later
    // call is answered `timeout` and recorded, but never reaches the model;
    // past the cap one refusal is recorded; its own deadline ends it.
    let model = Scripted::new(Script::Hang);
    let budgeted = grant(model.clone()).with_timeout(Duration::from_millis(50));
    let report = probe(&sandbox, r#"{"ask": true, "retry": true}"#, &budgeted);
    assert_ended_by_its_deadline(&report);
    assert_eq!(sent(&model), 1, "only the first was sent");
    assert_eq!(report.model_calls.len(), MAX_MODEL_CALLS_PER_REVIEW + 1);
    let (first, later) = report.model_calls.split_at(1);
    assert_eq!(first[0].error.as_deref(), Some("timeout"));
    let (unsent, refused) = later.split_at(MAX_MODEL_CALLS_PER_REVIEW - 1);
    for call in unsent {
        assert_eq!(call.error.as_deref(), Some("timeout"), "{call:?}");
        assert_eq!(call.attempts, 0, "{call:?}");
    }
    assert_eq!(refused[0].error.as_deref(), Some("rejected"));
}

#[test]
fn cancelling_the_elicitation_ends_the_wait() {
    let sandbox = sandbox();
    let model = Scripted::new(Script::Hang);
    let chain = Chain::new(vec![
        ChainLink::new(load(&sandbox, "test_guest_model_probe"))
            .with_config(r#"{"ask": true}"#)
            .with_model(grant(model)),
    ]);
    let cancel = Cancel::new();
    let canceller = {
        let cancel = cancel.clone();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            cancel.cancel();
        })
    };
    let report = chain.review_with(&plain_request(), &cancel);
    canceller.join().expect("canceller");
    let outcome = report.steps[0].result.as_ref().expect("reviews");
    assert_eq!(decline_message(&outcome.decision), "model error: cancelled");
}

#[test]
fn a_looping_guest_is_refused_past_the_call_cap() {
    let sandbox = sandbox();
    let model = Scripted::new(Script::Answer("allow"));
    let report = probe(
        &sandbox,
        r#"{"ask": true, "loop": true}"#,
        &grant(model.clone()),
    );
    let outcome = report.result.expect("reviews");
    assert!(decline_message(&outcome.decision).starts_with("model error: rejected"));
    assert_eq!(sent(&model), MAX_MODEL_CALLS_PER_REVIEW);
    assert_eq!(report.model_calls.len(), MAX_MODEL_CALLS_PER_REVIEW + 1);
    assert_eq!(
        report
            .model_calls
            .last()
            .and_then(|call| call.error.as_deref()),
        Some("rejected")
    );
}

#[test]
fn the_related_call_reaches_the_guest_as_tied() {
    let sandbox = sandbox();
    let probe = load(&sandbox, "test_guest_model_probe");
    let call = RelatedCall::new(
        "7",
        CallKind::ToolCall,
        "github__delete_branch",
        "delete_branch",
    )
    .with_arguments(json!({"branch": "main"}))
    .with_id("3");
    let context = ReviewContext::new("github", RequestId::Number(1)).with_related_call(call);
    let outcome = probe
        .review("{}", &form_request(context))
        .result
        .expect("reviews");
    assert_eq!(
        decline_message(&outcome.decision),
        r#"related=tool-call github__delete_branch delete_branch {"branch":"main"} session=7 id=3"#
    );
    let outcome = probe
        .review("{}", &plain_request())
        .result
        .expect("reviews");
    assert_eq!(decline_message(&outcome.decision), "related=none");
}

#[test]
fn the_watchdog_budget_counts_the_model_budget() {
    let sandbox = sandbox();
    let probe = load(&sandbox, "test_guest_model_probe");
    let guardian = load(&sandbox, "gatehouse_guardian");
    let deadline = probe.limits().deadline();
    let grant = grant(Scripted::new(Script::Answer("allow"))).with_timeout(Duration::from_secs(7));
    let chain = Chain::new(vec![
        ChainLink::new(guardian.clone()),
        ChainLink::new(guardian),
        ChainLink::new(probe).with_model(grant),
    ]);
    assert_eq!(chain.deadline_sum(), deadline * 3 + Duration::from_secs(7));
    // Stretch by stretch, as the router waits: the two rule-based links
    // together, then the granted one with its model budget.
    let mut run = gatehouse_core::chain::ChainRun::new(&chain);
    assert_eq!(run.next_asks_model(), Some(false));
    assert_eq!(run.next_budget(), deadline * 2);
    // A form that is no approval request: both guardians defer.
    let params = ElicitationParams::from_wire(&json!({
        "message": "Your name?",
        "requestedSchema": {"type": "object", "properties": {"name": {"type": "string"}}}
    }))
    .expect("valid params");
    let form = ReviewRequest::new(params, ReviewContext::new("github", RequestId::Number(2)));
    assert!(run.run_stretch(&form, &Cancel::new()));
    assert_eq!(run.steps().len(), 2);
    assert_eq!(run.next_asks_model(), Some(true));
    assert_eq!(run.next_budget(), deadline + Duration::from_secs(7));
}

#[test]
fn a_guest_that_retries_forever_is_recorded_once_past_the_cap_and_ended_by_its_deadline() {
    let sandbox = sandbox();
    let model = Scripted::new(Script::Answer("allow"));
    let report = probe(
        &sandbox,
        r#"{"ask": true, "retry": true}"#,
        &grant(model.clone()),
    );
    assert_ended_by_its_deadline(&report);
    // Eight asked, the ninth refused and recorded, the rest neither.
    assert_eq!(sent(&model), MAX_MODEL_CALLS_PER_REVIEW);
    assert_eq!(report.model_calls.len(), MAX_MODEL_CALLS_PER_REVIEW + 1);
}

#[test]
fn a_guest_cannot_stretch_its_deadline_by_waiting_on_its_model() {
    // 50 ms of its own time: it spends 40, waits 60 on the model, then has
    // 10 left, which its next 40 ms of spinning overruns before it can ask
    // again.
    let limits = Limits::builder()
        .deadline(Duration::from_millis(50))
        .build();
    let sandbox = sandbox_with(limits);
    let model = Scripted::new(Script::AfterSleep(Duration::from_millis(60), "allow"));
    let report = probe(
        &sandbox,
        r#"{"ask": true, "retry": true, "spin_before": true}"#,
        &grant(model.clone()),
    );
    assert_ended_by_its_deadline(&report);
    assert_eq!(report.model_calls.len(), 1, "{:?}", report.model_calls);
}

#[test]
fn a_long_answer_is_cut_in_the_audit_with_its_sha256() {
    let sandbox = sandbox();
    let long: &'static str = Box::leak("x".repeat(100_000).into_boxed_str());
    let model = Scripted::new(Script::Answer(long));
    let report = probe(&sandbox, r#"{"ask": true}"#, &grant(model));
    let call = &report.model_calls[0];
    let answer = call.answer.as_deref().expect("answer");
    assert!(answer.len() < 17_000, "{}", answer.len());
    assert!(
        answer.ends_with("[cut: 16384 of 100000 bytes kept]"),
        "{}",
        &answer[16_000..]
    );
    assert_eq!(call.answer_sha256.as_deref().map(str::len), Some(64));
}
