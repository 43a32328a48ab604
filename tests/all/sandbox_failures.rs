//! Every failure class fails closed with its own code, and the same sandbox
//! serves the next review normally afterwards.

use std::time::Duration;

use gatehouse_core::answer::{Action, TIMEOUT_MESSAGE, review_failed_message};
use gatehouse_core::chain::{Chain, ChainLink, OnFailure, Verdict};
use gatehouse_core::context::ReviewContext;
use gatehouse_core::elicitation::{ElicitationParams, RequestId};
use gatehouse_core::outcome::Decision;
use gatehouse_core::request::ReviewRequest;
use gatehouse_core::sandbox::{Limits, LoadError, Sandbox, WasiPolicy};
use gatehouse_tests::{approval_request, guest, load, sandbox, sandbox_with};
use serde_json::{Value, json};

fn form_request(schema: Value) -> ReviewRequest {
    let params = ElicitationParams::from_wire(&json!({
        "message": "Allow read_file?",
        "requestedSchema": schema,
        "_meta": {"codex_request_type": "approval_request",
                  "codex_approval_kind": "mcp_tool_call", "tool_name": "read_file"}
    }))
    .expect("valid params");
    ReviewRequest::new(params, ReviewContext::new("docs", RequestId::Number(1)))
}

fn url_request() -> ReviewRequest {
    let params = ElicitationParams::from_wire(&json!({
        "mode": "url", "message": "Sign in", "url": "https://auth.example.com/", "elicitationId": "e1"
    }))
    .expect("valid params");
    ReviewRequest::new(
        params,
        ReviewContext::new("docs", RequestId::Text("u".into())),
    )
}

/// The guardian, allowing everything: the "next review is normal" probe.
fn guardian_accepts(sandbox: &gatehouse_core::sandbox::Sandbox) {
    let guardian = load(sandbox, "gatehouse_guardian");
    let report = Chain::new(vec![
        ChainLink::new(guardian).with_config(r#"{"default":"allow"}"#),
    ])
    .review(&approval_request());
    assert!(
        matches!(&report.verdict, Verdict::Decided { outcome, .. }
            if matches!(outcome.decision, Decision::Accept { .. })),
        "the review after a failure is not normal: {:?}",
        report.verdict
    );
}

fn assert_fails_closed(guest_name: &str, request: &ReviewRequest, code: &str, message: &str) {
    // A guest that must hit another limit gets a deadline that a loaded test
    // machine cannot reach first; the deadline's own test keeps the default.
    let sandbox = if code == "deadline" {
        sandbox()
    } else {
        sandbox_with(Limits::builder().deadline(Duration::from_secs(5)).build())
    };
    let module = load(&sandbox, guest_name);
    let report = Chain::new(vec![ChainLink::new(module)]).review(request);
    match &report.verdict {
        Verdict::Failed { failure, .. } => assert_eq!(failure.code(), code, "{failure}"),
        other => panic!("{guest_name}: expected failure {code}, got {other:?}"),
    }
    let answer = report.answer().expect("a failure is answered");
    assert_eq!(answer.action, Action::Decline);
    let meta = answer.meta.expect("failure answers carry _meta");
    assert_eq!(meta["approvals_reviewer"], "auto_review");
    assert_eq!(meta["message"], message);
    guardian_accepts(&sandbox);
}

#[test]
fn endless_loop_hits_the_deadline() {
    assert_fails_closed(
        "test_guest_spin",
        &approval_request(),
        "deadline",
        TIMEOUT_MESSAGE,
    );
}

#[test]
fn memory_bomb_hits_the_memory_cap() {
    assert_fails_closed(
        "test_guest_grow_memory",
        &approval_request(),
        "memory",
        &review_failed_message("memory"),
    );
}

#[test]
fn panic_is_a_trap_and_its_message_is_captured() {
    assert_fails_closed(
        "test_guest_trap",
        &approval_request(),
        "trap",
        &review_failed_message("trap"),
    );
    let sandbox = sandbox();
    let report = load(&sandbox, "test_guest_trap").review("{}", &approval_request());
    assert!(
        report
            .logs
            .stderr
            .contains("the trap test guest always panics"),
        "stderr: {:?}",
        report.logs.stderr
    );
}

#[test]
fn endless_recursion_overflows_the_stack() {
    assert_fails_closed(
        "test_guest_deep_recursion",
        &approval_request(),
        "stack-overflow",
        &review_failed_message("stack-overflow"),
    );
}

#[test]
fn huge_output_is_refused() {
    assert_fails_closed(
        "test_guest_huge_output",
        &approval_request(),
        "output-too-large",
        &review_failed_message("output-too-large"),
    );
}

#[test]
fn output_just_over_the_cap_is_refused_below_it_accepted() {
    // huge-output returns a 4 MiB rationale: over a 1 MiB cap, under an 8 MiB one.
    let strict = sandbox_with(Limits::builder().output_bytes(1 << 20).build());
    let report = load(&strict, "test_guest_huge_output").review("{}", &approval_request());
    assert_eq!(
        report.result.map_err(|failure| failure.code()),
        Err("output-too-large")
    );
    let roomy = sandbox_with(
        Limits::builder()
            .output_bytes(8 << 20)
            .memory_bytes(32 << 20)
            .build(),
    );
    let report = load(&roomy, "test_guest_huge_output").review("{}", &approval_request());
    assert!(report.result.is_ok(), "{:?}", report.result);
}

#[test]
fn content_that_is_not_json_is_refused() {
    assert_fails_closed(
        "test_guest_bad_json",
        &approval_request(),
        "invalid-content",
        &review_failed_message("invalid-content"),
    );
}

#[test]
fn url_accept_with_content_is_refused() {
    assert_fails_closed(
        "test_guest_url_content",
        &url_request(),
        "url-content",
        &review_failed_message("url-content"),
    );
}

#[test]
fn content_that_breaks_the_schema_is_refused() {
    // url-content accepts with `{}`: a form that requires `name` must refuse it.
    let schema =
        json!({"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]});
    assert_fails_closed(
        "test_guest_url_content",
        &form_request(schema),
        "schema-mismatch",
        &review_failed_message("schema-mismatch"),
    );
}

#[test]
fn allowlist_content_is_validated_against_the_schema() {
    let sandbox = sandbox();
    let allowlist = load(&sandbox, "gatehouse_allowlist");
    let schema =
        json!({"type": "object", "properties": {"age": {"type": "integer", "minimum": 18}}});
    let accept = |content: Value| {
        let config = json!({"rules": [{"decision": "accept", "content": content}]}).to_string();
        allowlist
            .review(&config, &form_request(schema.clone()))
            .result
    };
    assert!(accept(json!({"age": 30})).is_ok());
    assert_eq!(
        accept(json!({"age": 3})).map_err(|failure| failure.code()),
        Err("schema-mismatch")
    );
    assert_eq!(
        accept(json!({"nickname": "x"})).map_err(|failure| failure.code()),
        Err("schema-mismatch")
    );
}

#[test]
fn log_flood_is_capped_and_counted() {
    let sandbox = sandbox_with(Limits::builder().deadline(Duration::from_secs(5)).build());
    let report = load(&sandbox, "test_guest_log_flood").review("{}", &approval_request());
    assert!(report.result.is_ok(), "{:?}", report.result);
    let cap = Limits::default().log_entries();
    assert_eq!(report.logs.entries.len(), cap);
    assert_eq!(report.logs.dropped, 10_000 - cap);
}

#[test]
fn every_review_gets_a_fresh_instance() {
    let sandbox = sandbox();
    let counter = load(&sandbox, "test_guest_counter");
    for _ in 0..5 {
        let report = counter.review("{}", &approval_request());
        assert_eq!(
            report.result.map(|outcome| outcome.decision),
            Ok(Decision::Decline {
                message: Some("1".to_owned())
            })
        );
    }
}

#[test]
fn scattered_writes_never_reach_the_next_review_in_a_slot() {
    // One review at a time in a small pool: every review reuses a slot the
    // last one wrote 128 separate pages of, more regions than one page scan
    // reports; the reset must restore (or decommit) every one of them.
    let sandbox = sandbox_with(
        Limits::builder()
            .concurrent_reviews(1)
            .model_reviews(1)
            .build(),
    );
    let scatter = load(&sandbox, "test_guest_scatter");
    // The guest sees its own writes when they are left: in one instance, the
    // second review finds all of them.
    let request = approval_request();
    let shared = scatter.review_in_one_instance("{}", &[&request, &request]);
    assert_eq!(
        shared[1].as_ref().map(|outcome| outcome.decision.clone()),
        Ok(Decision::Decline {
            message: Some("128 of 128 writes left".to_owned())
        })
    );
    for review in 0..50 {
        let report = scatter.review("{}", &approval_request());
        assert_eq!(
            report.result.map(|outcome| outcome.decision),
            Ok(Decision::Defer),
            "review {review}"
        );
    }
}

#[test]
fn the_environment_reads_empty_and_only_the_denying_sandbox_records_it() {
    let closed = sandbox();
    let denied = Sandbox::builder()
        .wasi(WasiPolicy::Deny)
        .build()
        .expect("sandbox");
    for (sandbox, recorded) in [(&closed, false), (&denied, true)] {
        let reader = load(sandbox, "test_guest_env_read");
        let report = reader.review("{}", &approval_request());
        // The guest declines with what it found if anything was there.
        assert_eq!(
            report.result.map(|outcome| outcome.decision),
            Ok(Decision::Defer),
            "{:?}",
            sandbox.wasi_policy()
        );
        let reads = &report.logs.environment_reads;
        if recorded {
            for function in ["#get-environment", "#get-arguments"] {
                assert!(
                    reads
                        .iter()
                        .any(|read| read.starts_with("wasi:cli/environment@0.2.")
                            && read.ends_with(function)),
                    "{function} not recorded: {reads:?}"
                );
            }
            // Each read is named once, however often it was made.
            let mut unique = reads.clone();
            unique.dedup();
            assert_eq!(&unique, reads);
        } else {
            assert!(reads.is_empty(), "{reads:?}");
        }
    }
}

#[test]
fn nothing_outside_the_sandbox_is_reachable() {
    let sandbox = sandbox();
    let escape = load(&sandbox, "test_guest_escape");
    let report = escape.review("{}", &approval_request());
    assert_eq!(
        report.result.map(|outcome| outcome.decision),
        Ok(Decision::Decline {
            message: Some("file=false dir=false env=0 args=0 net=false clock=true".to_owned())
        })
    );
}

#[test]
fn a_failure_can_be_passed_on_to_the_next_module() {
    let sandbox = sandbox();
    let trap = load(&sandbox, "test_guest_trap");
    let guardian = load(&sandbox, "gatehouse_guardian");
    let chain = Chain::new(vec![
        ChainLink::new(trap).with_on_failure(OnFailure::Defer),
        ChainLink::new(guardian).with_config(r#"{"default":"allow"}"#),
    ]);
    let report = chain.review(&approval_request());
    assert_eq!(report.steps.len(), 2);
    assert!(report.steps[0].result.is_err());
    assert!(matches!(report.verdict, Verdict::Decided { step: 1, .. }));
}

#[test]
fn first_decision_wins_and_later_modules_do_not_run() {
    let sandbox = sandbox();
    let allowlist = load(&sandbox, "gatehouse_allowlist");
    let spin = load(&sandbox, "test_guest_spin");
    let chain = Chain::new(vec![
        ChainLink::new(allowlist)
            .with_config(r#"{"rules":[{"server":"docs","decision":"decline","message":"no"}]}"#),
        ChainLink::new(spin),
    ]);
    let report = chain.review(&approval_request());
    assert_eq!(report.steps.len(), 1);
    let answer = report.answer().expect("decided");
    assert_eq!(answer.action, Action::Decline);
    assert_eq!(answer.meta.expect("meta")["message"], "no");
}

#[test]
fn all_defer_means_no_answer() {
    let sandbox = sandbox();
    let allowlist = load(&sandbox, "gatehouse_allowlist");
    let report = Chain::new(vec![ChainLink::new(allowlist)]).review(&approval_request());
    assert_eq!(report.verdict, Verdict::Deferred);
    assert!(report.answer().is_none());
}

#[test]
fn a_component_of_another_world_is_refused_by_name() {
    let sandbox = sandbox();
    let path = guest("test_guest_wrong_world");
    let error = sandbox
        .load_file(&path, None)
        .expect_err("wrong world must not load");
    assert!(matches!(error, LoadError::NotAReviewer { .. }), "{error:?}");
    let message = error.to_string();
    assert!(message.contains("test_guest_wrong_world.wasm"), "{message}");
    assert!(
        message.contains("gatehouse:reviewer/review@0.2.0"),
        "{message}"
    );
}

#[test]
fn core_modules_and_garbage_are_refused_with_advice() {
    let sandbox = sandbox();
    let core = b"\0asm\x01\0\0\0";
    let error = sandbox
        .load_bytes("core", "core.wasm", core, None)
        .expect_err("core module");
    assert!(matches!(error, LoadError::CoreModule(_)), "{error:?}");
    assert!(error.to_string().contains("wasm32-wasip2"));
    let error = sandbox
        .load_bytes("junk", "junk.wasm", b"not wasm at all", None)
        .expect_err("garbage");
    assert!(matches!(error, LoadError::Compile { .. }), "{error:?}");
}

#[test]
fn a_pinned_digest_must_match() {
    let sandbox = sandbox();
    let path = guest("gatehouse_allowlist");
    let module = sandbox.load_file(&path, None).expect("loads");
    let digest = module.digest().to_owned();
    assert_eq!(digest.len(), 64);
    sandbox
        .load_file(&path, Some(&digest.to_uppercase()))
        .expect("the right pin loads, in any case");
    let wrong = "0".repeat(64);
    let error = sandbox
        .load_file(&path, Some(&wrong))
        .expect_err("wrong pin");
    match error {
        LoadError::DigestMismatch {
            expected, actual, ..
        } => {
            assert_eq!(expected, wrong);
            assert_eq!(actual, digest);
        }
        other => panic!("expected a digest mismatch, got {other:?}"),
    }
}

#[test]
fn describe_reports_claims() {
    let sandbox = sandbox();
    let info = load(&sandbox, "gatehouse_guardian")
        .describe()
        .expect("describe");
    assert_eq!(info.name, "guardian");
    assert!(
        info.claims
            .iter()
            .any(|claim| claim == "guardian-compatible")
    );
}

#[test]
fn a_module_of_another_contract_version_is_refused_by_version() {
    let sandbox = sandbox();
    let path = guest("test_guest_future_contract");
    let error = sandbox
        .load_file(&path, None)
        .expect_err("0.3.0 must not load");
    match &error {
        LoadError::UnsupportedVersion {
            interface, found, ..
        } => {
            assert_eq!(interface, "gatehouse:reviewer/review");
            assert_eq!(found, "0.3.0");
        }
        other => panic!("expected an unsupported version, got {other:?}"),
    }
    assert!(
        error
            .to_string()
            .contains("test_guest_future_contract.wasm")
    );
}

#[test]
fn a_module_importing_more_than_the_host_offers_is_refused_by_name() {
    let sandbox = sandbox();
    let path = guest("test_guest_extra_import");
    let error = sandbox
        .load_file(&path, None)
        .expect_err("extra import must not load");
    match &error {
        LoadError::UnsupportedImport { import, .. } => {
            assert_eq!(import, "test:extra/secrets@1.0.0")
        }
        other => panic!("expected an unsupported import, got {other:?}"),
    }
}
