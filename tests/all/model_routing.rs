//! Model reviews in the router: a module granted a model runs its stretch of
//! the chain under the model pool, so waits on a slow model never hold the
//! slots rule-based reviews need; the server's cancellation ends a wait; each
//! review is still answered and audited once.

use std::sync::Arc;
use std::time::Duration;

use gatehouse_audit::AuditLog;
use gatehouse_core::chain::{Chain, ChainLink, OnFailure};
use gatehouse_core::model::ModelGrant;
use gatehouse_core::sandbox::{Limits, Sandbox};
use gatehouse_gateway::router::{ElicitationSettings, NoPerson, Router};
use gatehouse_mcp::handler::{Delivery, IncomingElicitation};
use gatehouse_tests::audit_lines;
use gatehouse_tests::load;
use gatehouse_tests::scripted_model::{Script, Scripted};
use rmcp::model::{ElicitResult, ElicitationAction, ErrorData};
use serde_json::{Value, json};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// An approval request for `tool` from `server`.
fn elicitation(
    server: &str,
    id: i64,
    tool: &str,
    cancelled: CancellationToken,
) -> IncomingElicitation {
    IncomingElicitation {
        server: server.to_owned(),
        request_id: rmcp::model::RequestId::Number(id),
        protocol_version: "2025-11-25".to_owned(),
        params: json!({
            "message": format!("Allow {tool}?"),
            "requestedSchema": {"type": "object", "properties": {}},
            "_meta": {"codex_request_type": "approval_request",
                      "codex_approval_kind": "mcp_tool_call", "tool_name": tool}
        }),
        cancelled,
        server_gone: CancellationToken::new(),
        arrival: Default::default(),
        delivery: Delivery::Request,
        call: None,
    }
}

/// A router with ONE review permit and four model permits, over
/// [allowlist (accepts everything from `fast`, defers the rest),
///  model-probe (asks `model`, with a 60 s budget)].
fn router(model: Arc<Scripted>) -> (Arc<Router>, Arc<AuditLog>) {
    router_with_budget(model, Duration::from_secs(60))
}

fn router_with_budget(model: Arc<Scripted>, budget: Duration) -> (Arc<Router>, Arc<AuditLog>) {
    let limits = Limits::builder()
        .concurrent_reviews(1)
        .model_reviews(4)
        .build();
    let sandbox = Sandbox::new(limits.clone()).expect("sandbox");
    let grant = ModelGrant::new("slow", model).with_timeout(budget);
    let chain = Chain::new(vec![
        ChainLink::new(load(&sandbox, "gatehouse_allowlist"))
            .with_config(r#"{"rules": [{"server": "fast", "decision": "accept"}]}"#)
            .with_on_failure(OnFailure::Defer),
        ChainLink::new(load(&sandbox, "test_guest_model_probe"))
            .with_config(r#"{"ask": true}"#)
            .with_model(grant),
    ]);
    let audit = Arc::new(AuditLog::in_memory());
    let router = Router::new(
        chain,
        ElicitationSettings::default(),
        audit.clone(),
        Arc::new(NoPerson),
        limits.concurrent_reviews() as usize,
    )
    .with_model_reviews(limits.model_reviews() as usize);
    (Arc::new(router), audit)
}

fn spawn_route(
    router: &Arc<Router>,
    elicitation: IncomingElicitation,
) -> JoinHandle<Result<ElicitResult, ErrorData>> {
    let router = router.clone();
    tokio::spawn(async move { router.route(elicitation).await })
}

async fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    for _ in 0..2000 {
        if done() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    panic!("timed out waiting until {what}");
}

/// Waits until `model` has been asked `calls` times.
async fn wait_for_calls(what: &str, model: &Scripted, calls: usize) {
    wait_until(what, || {
        model.seen.lock().map(|seen| seen.len()).unwrap_or(0) == calls
    })
    .await;
}

fn message(result: &ElicitResult) -> Value {
    serde_json::to_value(result).unwrap_or(Value::Null)["_meta"]["message"].clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waits_on_a_model_do_not_hold_the_review_pool_and_cancel_ends_them() {
    let model = Scripted::new(Script::Hang);
    let (router, audit) = router(model.clone());
    // Three reviews from `slow` reach the model and wait there, all at once:
    // with one review permit, only because their stretch holds a model one.
    let tokens: Vec<CancellationToken> = (0..3).map(|_| CancellationToken::new()).collect();
    let slow: Vec<_> = tokens
        .iter()
        .enumerate()
        .map(|(index, token)| {
            spawn_route(
                &router,
                elicitation("slow", index as i64, "delete_branch", token.clone()),
            )
        })
        .collect();
    wait_for_calls("three reviews wait on the model", &model, 3).await;
    // A rule-based review is decided while they wait.
    let fast = router
        .route(elicitation(
            "fast",
            9,
            "read_file",
            CancellationToken::new(),
        ))
        .await
        .expect("answered");
    assert_eq!(fast.action, ElicitationAction::Accept);
    assert!(
        slow.iter().all(|task| !task.is_finished()),
        "a slow review ended early"
    );
    // The server cancels them: each wait ends, each is answered and audited.
    for token in &tokens {
        token.cancel();
    }
    for task in slow {
        let answer = tokio::time::timeout(Duration::from_secs(10), task)
            .await
            .expect("a cancelled wait ends")
            .expect("task")
            .expect("answered");
        assert_eq!(answer.action, ElicitationAction::Decline);
        assert_eq!(message(&answer), "model error: cancelled");
    }
    let lines: Vec<Value> = audit
        .lines()
        .iter()
        .map(|line| serde_json::from_str(line).expect("JSON line"))
        .collect();
    assert_eq!(lines.len(), 4);
    let cancelled = lines
        .iter()
        .filter(|line| line["steps"][1]["model_calls"][0]["error"] == "cancelled")
        .count();
    assert_eq!(cancelled, 3, "{lines:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_ends_model_waits_and_each_is_answered_and_audited() {
    let model = Scripted::new(Script::Hang);
    let (router, audit) = router(model.clone());
    let waiting = spawn_route(
        &router,
        elicitation("slow", 1, "delete_branch", CancellationToken::new()),
    );
    wait_for_calls("the review waits on the model", &model, 1).await;
    router.drain(Duration::from_secs(10)).await;
    assert!(
        waiting.is_finished(),
        "drain returned before the review was answered"
    );
    let answer = waiting.await.expect("task").expect("answered");
    assert_eq!(answer.action, ElicitationAction::Decline);
    assert_eq!(message(&answer), "model error: cancelled");
    let lines = audit_lines(&audit);
    assert_eq!(lines.len(), 1);
    assert_eq!(lines[0]["steps"][1]["model_calls"][0]["error"], "cancelled");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stretch_the_watchdog_gives_up_on_is_cancelled_and_earlier_steps_are_audited() {
    // A provider that ignores its deadline: only the watchdog ends the wait
    // (50 ms deadline + 100 ms model budget + the margin).
    let model = Scripted::new(Script::UntilCancelled);
    let (router, audit) = router_with_budget(model.clone(), Duration::from_millis(100));
    let answer = router
        .route(elicitation(
            "slow",
            1,
            "delete_branch",
            CancellationToken::new(),
        ))
        .await
        .expect("answered");
    assert_eq!(answer.action, ElicitationAction::Decline);
    let lines = audit_lines(&audit);
    assert_eq!(lines.len(), 1);
    let steps = lines[0]["steps"].as_array().expect("steps");
    // The allowlist's deferral, then the router's failure for the model stretch.
    assert_eq!(steps.len(), 2, "{steps:?}");
    assert_eq!(steps[0]["outcome"], "defer", "{steps:?}");
    assert_eq!(steps[1]["module"], "gatehouse:router", "{steps:?}");
    assert_eq!(steps[1]["failure"], "deadline", "{steps:?}");
    assert!(
        lines[0]["reason"]
            .as_str()
            .is_some_and(|reason| reason.starts_with("module 2 did not finish (deadline)")),
        "{}",
        lines[0]
    );
    // The abandoned thread was told to stop asking.
    wait_until("the model saw the cancel", || {
        model.saw_cancel.load(std::sync::atomic::Ordering::SeqCst)
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_request_with_the_same_id_ends_the_first_ones_model_wait() {
    let model = Scripted::new(Script::Hang);
    let (router, audit) = router(model.clone());
    let first = spawn_route(
        &router,
        elicitation("slow", 5, "delete_branch", CancellationToken::new()),
    );
    wait_for_calls("the first review waits on the model", &model, 1).await;
    let second = router
        .route(elicitation(
            "slow",
            5,
            "delete_branch",
            CancellationToken::new(),
        ))
        .await
        .expect("answered");
    assert_eq!(second.action, ElicitationAction::Cancel);
    let first = tokio::time::timeout(Duration::from_secs(10), first)
        .await
        .expect("the first one's wait ends")
        .expect("task")
        .expect("answered");
    assert_eq!(first.action, ElicitationAction::Decline);
    assert_eq!(message(&first), "model error: cancelled");
    assert_eq!(audit_lines(&audit).len(), 2);
}
