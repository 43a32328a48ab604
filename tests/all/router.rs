//! The elicitation router end to end: a real MCP server (demo-server) sends
//! elicitations, the runtime hands them to the router, the sandboxed chain
//! decides (or the person, or the policy), the server gets the answer, and
//! every elicitation gets one audit line.

use std::sync::Arc;

use futures::future::BoxFuture;
use gatehouse_audit::AuditLog;
use gatehouse_core::chain::{Chain, ChainLink};
use gatehouse_gateway::calls::SessionId;
use gatehouse_gateway::router::{
    ElicitationSettings, NoAnswer, NoPerson, NotAsked, Person, Router,
};
use gatehouse_mcp::handler::IncomingElicitation;
use gatehouse_mcp::runtime::McpRuntime;
use gatehouse_mcp::server_config::RawServer;
use gatehouse_tests::audit_lines;
use gatehouse_tests::result_text as text;
use gatehouse_tests::{demo_server, load, sandbox};
use rmcp::model::ElicitResult;
use serde_json::{Value, json};

struct Setup {
    runtime: McpRuntime,
    router: Arc<Router>,
    audit: Arc<AuditLog>,
}

fn setup(config: &str, settings: ElicitationSettings, person: Arc<dyn Person>) -> Setup {
    setup_with_protocol(config, settings, person, None)
}

/// `protocol`: the version gatehouse asks for (`2026-07-28`, which
/// demo-server then also offers, delivers elicitations as input requests in
/// tool results).
fn setup_with_protocol(
    config: &str,
    settings: ElicitationSettings,
    person: Arc<dyn Person>,
    protocol: Option<&str>,
) -> Setup {
    let sandbox = sandbox();
    let guardian = load(&sandbox, "gatehouse_guardian");
    let chain = Chain::new(vec![ChainLink::new(guardian).with_config(config)]);
    let audit = Arc::new(AuditLog::in_memory());
    let router = Arc::new(Router::new(chain, settings, audit.clone(), person, 64));
    let mut args = vec!["--name".to_owned(), "git".to_owned()];
    if protocol == Some("2026-07-28") {
        args.extend(["--protocol".to_owned(), "2026-07-28".to_owned()]);
    }
    let server = RawServer {
        command: Some(demo_server().display().to_string()),
        args,
        startup_timeout_sec: Some(20.0),
        protocol_version: protocol.map(str::to_owned),
        ..RawServer::default()
    }
    .check("git")
    .expect("valid");
    let runtime = McpRuntime::new(vec![server], Arc::new(router.clone()));
    let catalog = runtime.clone();
    router.set_catalog_source(move |server| {
        gatehouse_gateway::catalog::tool_catalog(&catalog.snapshot(), server)
    });
    Setup {
        runtime,
        router,
        audit,
    }
}

async fn call(setup: &Setup, tool: &str, arguments: Value) -> String {
    let result = setup
        .runtime
        .call_tool(tool, arguments.as_object().cloned())
        .await
        .expect("tool call");
    text(&result)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_guardian_denies_a_destructive_tool_from_the_catalog() {
    let setup = setup("{}", ElicitationSettings::default(), Arc::new(NoPerson));
    let answer = call(&setup, "git__delete_branch", json!({"branch": "main"})).await;
    assert!(answer.contains("answered: decline"), "{answer}");
    assert!(
        answer.contains("This action was rejected due to unacceptable risk."),
        "{answer}"
    );
    assert!(answer.contains("marked destructive"), "{answer}");
    let lines = audit_lines(&setup.audit);
    assert_eq!(lines.len(), 1);
    assert_eq!(lines[0]["decided_by"], "guest");
    assert_eq!(lines[0]["server"], "git");
    assert_eq!(lines[0]["mode"], "form");
    assert_eq!(lines[0]["steps"][0]["outcome"], "decline");
    assert_eq!(lines[0]["steps"][0]["risk"], "high");
    assert_eq!(
        lines[0]["steps"][0]["sha256"].as_str().map(str::len),
        Some(64)
    );
    assert_eq!(lines[0]["answer"]["action"], "decline");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_guardian_approves_what_its_rules_allow() {
    let setup = setup(
        r#"{"allow": [{"server": "git", "tool": "delete_branch"}]}"#,
        ElicitationSettings::default(),
        Arc::new(NoPerson),
    );
    let answer = call(&setup, "git__delete_branch", json!({"branch": "topic"})).await;
    assert!(answer.contains("answered: accept"), "{answer}");
    assert_eq!(
        audit_lines(&setup.audit)[0]["answer"]["_meta"]["approvals_reviewer"],
        "auto_review"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_nobody_decides_gets_on_unhandled() {
    let setup = setup("{}", ElicitationSettings::default(), Arc::new(NoPerson));
    let answer = call(&setup, "git__ask_name", json!({})).await;
    assert!(answer.contains("decline"), "{answer}");
    let lines = audit_lines(&setup.audit);
    assert_eq!(lines[0]["decided_by"], "unhandled");
    assert_eq!(lines[0]["steps"][0]["outcome"], "defer");
}

/// A person who answers every form with a fixed content.
struct Answers(Value);

impl Person for Answers {
    fn ask(
        &self,
        _: &IncomingElicitation,
        _: Option<SessionId>,
    ) -> Result<BoxFuture<'static, Result<ElicitResult, NoAnswer>>, NotAsked> {
        let wire = json!({"action": "accept", "content": self.0});
        Ok(Box::pin(async move {
            serde_json::from_value(wire).map_err(|error| NoAnswer::ClientFailed(error.to_string()))
        }))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deferral_answered_by_the_person_reaches_the_server() {
    let setup = setup(
        "{}",
        ElicitationSettings::default(),
        Arc::new(Answers(json!({"name": "Ada"}))),
    );
    let answer = call(&setup, "git__ask_name", json!({})).await;
    assert!(answer.contains("hello Ada"), "{answer}");
    assert_eq!(audit_lines(&setup.audit)[0]["decided_by"], "person");
    assert!(setup.router.pending().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_person_answer_that_breaks_the_schema_is_declined() {
    let setup = setup(
        "{}",
        ElicitationSettings::default(),
        Arc::new(Answers(json!({"name": 5}))),
    );
    let answer = call(&setup, "git__ask_name", json!({})).await;
    assert!(answer.contains("decline"), "{answer}");
    let lines = audit_lines(&setup.audit);
    assert!(
        lines[0]["reason"]
            .as_str()
            .is_some_and(|reason| reason.contains("schema"))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auto_deny_answers_at_once_without_review() {
    let settings = ElicitationSettings {
        auto_deny: true,
        ..ElicitationSettings::default()
    };
    let setup = setup(r#"{"default": "allow"}"#, settings, Arc::new(NoPerson));
    let answer = call(&setup, "git__delete_branch", json!({"branch": "x"})).await;
    assert!(answer.contains("answered: decline"), "{answer}");
    let lines = audit_lines(&setup.audit);
    assert_eq!(lines[0]["decided_by"], "policy");
    assert_eq!(lines[0]["steps"].as_array().map(Vec::len), Some(0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn per_server_overrides_route_to_the_person() {
    let mut settings = ElicitationSettings::default();
    settings.servers.insert(
        "git".to_owned(),
        gatehouse_gateway::router::ServerOverrides {
            approvals_reviewer: Some(gatehouse_core::context::ApprovalsReviewer::User),
            ..Default::default()
        },
    );
    let setup = setup(
        r#"{"default": "allow"}"#,
        settings,
        Arc::new(Answers(json!({}))),
    );
    let answer = call(&setup, "git__delete_branch", json!({"branch": "x"})).await;
    assert!(answer.contains("answered: accept"), "{answer}");
    let lines = audit_lines(&setup.audit);
    assert_eq!(lines[0]["decided_by"], "person");
    assert_eq!(
        lines[0]["steps"].as_array().map(Vec::len),
        Some(0),
        "no module ran"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_nested_schema_is_refused_with_invalid_params() {
    let setup = setup("{}", ElicitationSettings::default(), Arc::new(NoPerson));
    let params = json!({"message": "?", "requestedSchema": {"type": "object", "properties": {"a": {"type": "object"}}}});
    let answer = call(&setup, "git__elicit_raw", json!({"params": params})).await;
    assert!(
        answer.contains("-32602") || answer.to_lowercase().contains("invalid"),
        "{answer}"
    );
    let lines = audit_lines(&setup.audit);
    assert_eq!(lines.len(), 1);
    assert_eq!(lines[0]["mode"], "invalid");
    assert_eq!(lines[0]["answer"]["error"]["code"], -32602);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_elicitations_are_each_answered_once_with_one_audit_line() {
    const CALLS: usize = 200;
    let setup = Arc::new(setup(
        "{}",
        ElicitationSettings::default(),
        Arc::new(NoPerson),
    ));
    setup.runtime.refresh_if_dirty().await.expect("refresh");
    let mut tasks = Vec::new();
    for index in 0..CALLS {
        let setup = setup.clone();
        tasks.push(tokio::spawn(async move {
            call(
                &setup,
                "git__delete_branch",
                json!({"branch": format!("b{index}")}),
            )
            .await
        }));
    }
    for task in tasks {
        let answer = task.await.expect("task");
        assert!(answer.contains("answered: decline"), "{answer}");
    }
    let lines = audit_lines(&setup.audit);
    assert_eq!(lines.len(), CALLS);
    let mut ids: Vec<String> = lines
        .iter()
        .map(|line| line["request_id"].to_string())
        .collect();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), CALLS, "one audit line per elicitation");
}

fn approval(tool: &str, extra: Value) -> Value {
    let mut meta = json!({"codex_request_type": "approval_request", "codex_approval_kind": "mcp_tool_call",
                          "tool_name": tool});
    if let (Some(meta), Some(extra)) = (meta.as_object_mut(), extra.as_object()) {
        meta.extend(extra.clone());
    }
    json!({"params": {"message": "Allow?", "requestedSchema": {"type": "object", "properties": {}}, "_meta": meta}})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn strict_review_passes_only_canonical_answers() {
    let setup = setup(
        r#"{"default": "allow"}"#,
        ElicitationSettings::default(),
        Arc::new(NoPerson),
    );
    let allowed = call(
        &setup,
        "git__elicit_raw",
        approval("read_file", json!({"codex_strict_auto_review": true})),
    )
    .await;
    assert!(allowed.contains(r#""action":"accept""#), "{allowed}");
    // A strict request the reviewer cannot review (it asks to persist) fails closed.
    let refused = call(
        &setup,
        "git__elicit_raw",
        approval(
            "read_file",
            json!({"codex_strict_auto_review": true, "persist": "always"}),
        ),
    )
    .await;
    assert!(
        refused.contains("Automated review of this operation failed"),
        "{refused}"
    );
    let lines = audit_lines(&setup.audit);
    assert_eq!(lines[0]["decided_by"], "guest");
    assert_eq!(lines[1]["answer"]["action"], "decline");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn never_and_granular_short_cut_before_the_chain() {
    let settings = ElicitationSettings {
        approval_policy: gatehouse_core::context::ApprovalPolicy::Never,
        auto_approve_prompts: true,
        ..ElicitationSettings::default()
    };
    let setup = setup("{}", settings, Arc::new(NoPerson));
    // never + auto-approved prompts + empty form: accepted without review,
    // with no `_meta` (Codex `session_mcp.rs` lines 811-815).
    let accepted = call(&setup, "git__elicit_raw", approval("anything", json!({}))).await;
    assert_eq!(accepted, r#"[git] {"action":"accept","content":{}}"#);
    // never + a form with properties: declined.
    let declined = call(&setup, "git__ask_name", json!({})).await;
    assert!(declined.contains("decline"), "{declined}");
    let lines = audit_lines(&setup.audit);
    assert!(
        lines.iter().all(|line| line["decided_by"] == "policy"),
        "{lines:?}"
    );
    assert!(
        lines
            .iter()
            .all(|line| line["steps"].as_array().is_some_and(Vec::is_empty))
    );

    let granular = ElicitationSettings {
        approval_policy: gatehouse_core::context::ApprovalPolicy::Granular(
            gatehouse_core::context::GranularPolicy {
                mcp_elicitations: false,
                ..Default::default()
            },
        ),
        ..ElicitationSettings::default()
    };
    let setup = setup_again(granular);
    let declined = call(&setup, "git__delete_branch", json!({"branch": "x"})).await;
    assert!(declined.contains("answered: decline"), "{declined}");
    assert_eq!(
        audit_lines(&setup.audit)[0]["reason"],
        "granular policy without mcp_elicitations"
    );
}

/// Strict review is refused unreviewed only by an explicit `granular`
/// denial (Codex's elicitation manager answers it before its reviewer: its
/// test `strict_auto_review_respects_explicit_elicitation_denials`) or by
/// the server's own `user` reviewer; the global `user` reviewer does not
/// count (Codex `session_mcp.rs` lines 751-757 default to `AutoReview`,
/// where the ordinary path, lines 825-831, passes the global setting).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn strict_review_heeds_granular_denials_and_only_the_servers_own_reviewer() {
    use gatehouse_core::context::{ApprovalPolicy, ApprovalsReviewer, GranularPolicy};
    let strict = || approval("elicit_raw", json!({"codex_strict_auto_review": true}));
    let strict_decline = r#"[git] {"action":"decline","_meta":{"approvals_reviewer":"auto_review","message":"Automated review of this operation failed. Do not proceed without asking the user for explicit approval."}}"#;

    let granular = setup_again(ElicitationSettings {
        approval_policy: ApprovalPolicy::Granular(GranularPolicy {
            mcp_elicitations: false,
            ..GranularPolicy::default()
        }),
        ..ElicitationSettings::default()
    });
    assert_eq!(
        call(&granular, "git__elicit_raw", strict()).await,
        strict_decline
    );
    let lines = audit_lines(&granular.audit);
    assert_eq!(lines[0]["decided_by"], "policy");
    assert_eq!(lines[0]["steps"].as_array().map(Vec::len), Some(0));

    let global_user = setup_again(ElicitationSettings {
        approvals_reviewer: ApprovalsReviewer::User,
        ..ElicitationSettings::default()
    });
    let reviewed = call(&global_user, "git__elicit_raw", strict()).await;
    assert_eq!(
        reviewed,
        r#"[git] {"action":"accept","content":{},"_meta":{"approvals_reviewer":"auto_review"}}"#
    );
    assert_eq!(audit_lines(&global_user.audit)[0]["decided_by"], "guest");

    let mut settings = ElicitationSettings::default();
    settings.servers.insert(
        "git".to_owned(),
        gatehouse_gateway::router::ServerOverrides {
            approvals_reviewer: Some(ApprovalsReviewer::User),
            ..Default::default()
        },
    );
    let server_user = setup_again(settings);
    assert_eq!(
        call(&server_user, "git__elicit_raw", strict()).await,
        strict_decline
    );
    assert_eq!(audit_lines(&server_user.audit)[0]["decided_by"], "policy");
}

fn setup_again(settings: ElicitationSettings) -> Setup {
    setup(r#"{"default": "allow"}"#, settings, Arc::new(NoPerson))
}

/// A person who never answers.
struct Silent;

impl Person for Silent {
    fn ask(
        &self,
        _: &IncomingElicitation,
        _: Option<SessionId>,
    ) -> Result<BoxFuture<'static, Result<ElicitResult, NoAnswer>>, NotAsked> {
        Ok(Box::pin(std::future::pending()))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_disconnect_cancels_its_pending_elicitations() {
    let unique = format!("disconnect-{}-{}", std::process::id(), line!());
    let sandbox = sandbox();
    let chain = Chain::new(vec![ChainLink::new(load(&sandbox, "gatehouse_guardian"))]);
    let audit = Arc::new(AuditLog::in_memory());
    let router = Arc::new(Router::new(
        chain,
        ElicitationSettings::default(),
        audit.clone(),
        Arc::new(Silent),
        8,
    ));
    let server = RawServer {
        command: Some(demo_server().display().to_string()),
        args: vec!["--name".into(), unique.clone()],
        ..RawServer::default()
    }
    .check("git")
    .expect("valid");
    let runtime = McpRuntime::new(vec![server], Arc::new(router.clone()));
    runtime.refresh_if_dirty().await.expect("refresh");
    let caller = runtime.clone();
    let call = tokio::spawn(async move { caller.call_tool("git__ask_name", None).await });
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(20);
    while router.pending().is_empty() {
        assert!(tokio::time::Instant::now() < deadline, "never pending");
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    let killed = std::process::Command::new("pkill")
        .args(["-f", &unique])
        .status()
        .expect("pkill");
    assert!(killed.success(), "the server was killed");
    while !router.pending().is_empty() || audit.lines().is_empty() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the pending elicitation was not cancelled"
        );
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    let lines = audit_lines(&audit);
    assert_eq!(lines.len(), 1);
    assert_eq!(lines[0]["answer"]["action"], "cancel");
    assert_eq!(
        lines[0]["reason"],
        gatehouse_gateway::router::SERVER_GONE_REASON,
        "the server's going, not the client's"
    );
    let _ = call.await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_person_who_never_answers_times_out_to_cancel() {
    let settings = ElicitationSettings {
        person_timeout_sec: 0.3,
        ..ElicitationSettings::default()
    };
    let setup = setup("{}", settings, Arc::new(Silent));
    let started = std::time::Instant::now();
    let answer = call(&setup, "git__ask_name", json!({})).await;
    assert!(answer.contains("cancel"), "{answer}");
    assert!(
        started.elapsed() >= std::time::Duration::from_millis(300),
        "cancelled before the person's time was up"
    );
    assert!(setup.router.pending().is_empty());
    let lines = audit_lines(&setup.audit);
    assert_eq!(lines.len(), 1);
    assert_eq!(lines[0]["decided_by"], "person");
    assert_eq!(lines[0]["answer"]["action"], "cancel");
    assert_eq!(lines[0]["reason"], "the person did not answer in time");
    assert_eq!(lines[0]["steps"][0]["outcome"], "defer");
}

/// A person who answers forms with `{"name": "Ada"}` after a pause, so that
/// several elicitations wait at once.
struct SlowAnswers;

impl Person for SlowAnswers {
    fn ask(
        &self,
        _: &IncomingElicitation,
        _: Option<SessionId>,
    ) -> Result<BoxFuture<'static, Result<ElicitResult, NoAnswer>>, NotAsked> {
        Ok(Box::pin(async move {
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
            serde_json::from_value(json!({"action": "accept", "content": {"name": "Ada"}}))
                .map_err(|error| NoAnswer::ClientFailed(error.to_string()))
        }))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn input_requests_in_tool_results_are_routed_like_pushed_elicitations() {
    // Protocol 2026-07-28: no server-to-client requests; the elicitation
    // comes back inside the tool result and rmcp fulfils it through the
    // router before retrying the call.
    let setup = setup_with_protocol(
        "{}",
        ElicitationSettings::default(),
        Arc::new(SlowAnswers),
        Some("2026-07-28"),
    );
    setup.runtime.refresh_if_dirty().await.expect("refresh");
    let snapshot = setup.runtime.snapshot();
    let connection = snapshot.connection("git").expect("connected");
    assert_eq!(connection.protocol_version(), "2026-07-28");

    // Reviewed by the guardian from the catalog, as on the pushed path.
    let denied = call(&setup, "git__delete_branch", json!({"branch": "main"})).await;
    assert!(denied.contains("answered: decline"), "{denied}");
    assert!(denied.contains("unacceptable risk"), "{denied}");

    // Deferred to the person, five at once: every input request has the
    // same key ("elicitation"), and none may cancel another.
    let calls: Vec<_> = (0..5)
        .map(|_| {
            let runtime = setup.runtime.clone();
            tokio::spawn(async move { runtime.call_tool("git__ask_name", None).await })
        })
        .collect();
    for call in calls {
        let result = call.await.expect("task").expect("tool call");
        assert!(text(&result).contains("hello Ada"), "{}", text(&result));
    }

    let lines = audit_lines(&setup.audit);
    assert_eq!(lines.len(), 6, "{lines:?}");
    assert_eq!(lines[0]["decided_by"], "guest");
    assert_eq!(lines[0]["request_id"], "elicitation");
    assert_eq!(lines[0]["steps"][0]["outcome"], "decline");
    for line in &lines[1..] {
        assert_eq!(line["decided_by"], "person", "{line}");
        assert_eq!(line["answer"]["action"], "accept", "{line}");
    }
    assert!(setup.router.pending().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_cancellation_cancels_the_waiting_elicitation() {
    // demo-server gives up after 300 ms and sends notifications/cancelled.
    let setup = setup("{}", ElicitationSettings::default(), Arc::new(Silent));
    let answer = call(&setup, "git__elicit_then_cancel", json!({"after_ms": 300})).await;
    assert!(answer.contains("cancelled after 300 ms"), "{answer}");
    // The server's tool finishes as soon as it sent the cancellation; the
    // router's answer and audit line follow.
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
    while setup.audit.lines().is_empty() {
        assert!(tokio::time::Instant::now() < deadline, "never audited");
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    let lines = audit_lines(&setup.audit);
    assert_eq!(lines.len(), 1);
    assert_eq!(lines[0]["decided_by"], "person");
    assert_eq!(lines[0]["answer"]["action"], "cancel");
    assert_eq!(
        lines[0]["reason"],
        "the server cancelled the request or disconnected"
    );
    assert!(setup.router.pending().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_pinned_to_2025_06_18_is_reviewed_the_same_way() {
    let setup = setup_with_protocol(
        "{}",
        ElicitationSettings::default(),
        Arc::new(Answers(json!({"name": "Ada"}))),
        Some("2025-06-18"),
    );
    setup.runtime.refresh_if_dirty().await.expect("refresh");
    let snapshot = setup.runtime.snapshot();
    let connection = snapshot.connection("git").expect("connected");
    assert_eq!(connection.protocol_version(), "2025-06-18");
    let denied = call(&setup, "git__delete_branch", json!({"branch": "main"})).await;
    assert!(denied.contains("unacceptable risk"), "{denied}");
    let named = call(&setup, "git__ask_name", json!({})).await;
    assert!(named.contains("hello Ada"), "{named}");
    let decided: Vec<Value> = audit_lines(&setup.audit)
        .iter()
        .map(|line| line["decided_by"].clone())
        .collect();
    assert_eq!(decided, [json!("guest"), json!("person")]);
}

/// A full disk under the audit log: `/dev/full` fails every write. Neither
/// an accept of the chain nor one of the person reaches the server, in any
/// `audit_sync` mode; the server still gets an answer (a decline).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_accept_that_cannot_be_audited_is_never_sent() {
    use gatehouse_audit::AuditSync;
    for mode in AuditSync::ALL {
        let sandbox = sandbox();
        let guardian = load(&sandbox, "gatehouse_guardian");
        let chain =
            Chain::new(vec![ChainLink::new(guardian).with_config(
                r#"{"allow": [{"server": "git", "tool": "delete_branch"}]}"#,
            )]);
        let audit = Arc::new(AuditLog::open_with("/dev/full", mode).expect("opens /dev/full"));
        let router = Arc::new(Router::new(
            chain,
            ElicitationSettings::default(),
            audit,
            Arc::new(Answers(json!({"name": "Ada"}))),
            8,
        ));
        let server = RawServer {
            command: Some(demo_server().display().to_string()),
            args: vec!["--name".to_owned(), "git".to_owned()],
            startup_timeout_sec: Some(20.0),
            ..RawServer::default()
        }
        .check("git")
        .expect("valid");
        let runtime = McpRuntime::new(vec![server], Arc::new(router.clone()));
        let catalog = runtime.clone();
        router.set_catalog_source(move |server| {
            gatehouse_gateway::catalog::tool_catalog(&catalog.snapshot(), server)
        });
        let ask = |tool: &'static str, arguments: Value| {
            let runtime = runtime.clone();
            async move {
                let result = runtime
                    .call_tool(tool, arguments.as_object().cloned())
                    .await
                    .expect("tool call");
                text(&result)
            }
        };
        // The chain accepts (the same chain with a working log does:
        // `the_guardian_approves_what_its_rules_allow`).
        let by_chain = ask("git__delete_branch", json!({"branch": "topic"})).await;
        assert!(!by_chain.contains("answered: accept"), "{mode}: {by_chain}");
        assert!(by_chain.contains("answered: decline"), "{mode}: {by_chain}");
        // The person accepts.
        let by_person = ask("git__ask_name", json!({})).await;
        assert!(!by_person.contains("hello Ada"), "{mode}: {by_person}");
        assert!(by_person.contains("decline"), "{mode}: {by_person}");
    }
}

/// A router over the guardian whose person never answers, with no runtime
/// (the full [`setup`] ties runtime and router in a cycle that keeps the
/// sandbox, and its thousands of mappings, alive for the test process).
struct RouterOnly {
    router: Arc<Router>,
    audit: Arc<AuditLog>,
}

fn router_only() -> RouterOnly {
    let sandbox = sandbox();
    let guardian = load(&sandbox, "gatehouse_guardian");
    let chain = Chain::new(vec![ChainLink::new(guardian).with_config("{}")]);
    let audit = Arc::new(AuditLog::in_memory());
    let router = Arc::new(Router::new(
        chain,
        ElicitationSettings::default(),
        audit.clone(),
        Arc::new(Silent),
        64,
    ));
    RouterOnly { router, audit }
}

/// A plain form from `server` under `id`, pushed, placed on the wire as
/// `arrival` says.
fn pushed_form(id: &str, arrival: gatehouse_mcp::handler::WireArrival) -> IncomingElicitation {
    IncomingElicitation {
        server: "git".to_owned(),
        request_id: rmcp::model::RequestId::String(id.into()),
        protocol_version: "2025-11-25".to_owned(),
        params: json!({"message": "Your name?",
                       "requestedSchema": {"type": "object", "properties": {"name": {"type": "string"}}}}),
        cancelled: tokio_util::sync::CancellationToken::new(),
        server_gone: tokio_util::sync::CancellationToken::new(),
        arrival,
        delivery: gatehouse_mcp::handler::Delivery::Request,
        call: None,
    }
}

/// Two forms under one id, the second sent before the first was answered,
/// reaching the router in the other order (rmcp's tasks may start in any):
/// the second is a duplicate as the wire says and answered `cancel` at
/// once, and the first, superseded, never waits for the person.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reused_id_is_settled_as_the_wire_ordered_it_whatever_order_routing_sees() {
    let setup = router_only();
    let first = gatehouse_mcp::handler::WireArrival::default();
    let second = gatehouse_mcp::handler::WireArrival {
        reused: true,
        ..Default::default()
    };
    // What the transport does when the second comes.
    first.superseded.cancel();
    let later = setup
        .router
        .route(pushed_form("dup", second))
        .await
        .expect("answered");
    assert_eq!(later.action, rmcp::model::ElicitationAction::Cancel);
    let earlier = tokio::time::timeout(
        std::time::Duration::from_secs(20),
        setup.router.route(pushed_form("dup", first)),
    )
    .await
    .expect("the superseded one does not wait for the person")
    .expect("answered");
    assert_eq!(earlier.action, rmcp::model::ElicitationAction::Cancel);
    let lines = audit_lines(&setup.audit);
    assert_eq!(lines.len(), 2, "{lines:?}");
    assert!(
        lines[0]["reason"]
            .as_str()
            .is_some_and(|reason| reason.starts_with("duplicate request id")),
        "{}",
        lines[0]
    );
    assert_eq!(
        lines[1]["reason"], "cancelled: the server reused this request id while it waited",
        "{}",
        lines[1]
    );
    assert!(setup.router.pending().is_empty());
}

/// A question tied to an upstream request ends when that request does (its
/// server answered or failed it, or its stream broke): answered `cancel`,
/// audited with why, rather than waiting for a person nobody needs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_question_ends_when_the_request_it_belongs_to_ends() {
    use gatehouse_gateway::calls::{CallKind, Calls, UpstreamCall};
    let setup = router_only();
    let calls = Arc::new(Calls::default());
    setup.router.set_calls(calls.clone());
    let call = calls.begin(UpstreamCall::new(
        SessionId::next(),
        CallKind::ToolCall,
        "git",
        "git__ask_name",
        "ask_name",
    ));
    let router = setup.router.clone();
    let routed = tokio::spawn(async move {
        router
            .route(pushed_form(
                "asked",
                gatehouse_mcp::handler::WireArrival::default(),
            ))
            .await
    });
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(20);
    while setup.router.pending().is_empty() {
        assert!(tokio::time::Instant::now() < deadline, "never asked");
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    drop(call);
    let answer = tokio::time::timeout(std::time::Duration::from_secs(20), routed)
        .await
        .expect("the question ends with its request")
        .expect("route task")
        .expect("answered");
    assert_eq!(answer.action, rmcp::model::ElicitationAction::Cancel);
    let lines = audit_lines(&setup.audit);
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert_eq!(
        lines[0]["reason"],
        gatehouse_gateway::router::CALL_ENDED_REASON,
        "{}",
        lines[0]
    );
    assert!(setup.router.pending().is_empty());
}

/// What a connection refuses before routing (an unsolicited elicitation
/// under 2026-07-28, `connection::inbound`) reaches the router as a
/// `Refused` and gets its one audit line there: decided by policy, the
/// error it was answered with as the answer, the cut id as every log shows.
#[tokio::test]
async fn an_elicitation_a_connection_refused_gets_its_one_audit_line() {
    use gatehouse_mcp::handler::{ElicitationHandler, Refused};
    let RouterOnly { router, audit } = router_only();
    let own = format!("u-{}", "\u{85}".repeat(4096));
    let cut = gatehouse_base::cut::cut(&own, gatehouse_base::cut::MAX_ID_CHARS).into_owned();
    router.refused(Refused {
        server: "sly".to_owned(),
        request_id: rmcp::model::RequestId::String(cut.clone().into()),
        mode: "url".to_owned(),
        reason: gatehouse_mcp::connection::inbound::UNSOLICITED_REASON,
        error: rmcp::model::ErrorData::invalid_params(
            gatehouse_mcp::connection::inbound::UNSOLICITED_ERROR,
            None,
        ),
        latency: std::time::Duration::from_micros(42),
    });
    let lines = audit.lines();
    assert_eq!(lines.len(), 1, "{lines:?}");
    let line: Value = serde_json::from_str(&lines[0]).expect("JSON");
    assert_eq!(line["server"], "sly");
    assert_eq!(line["decided_by"], "policy");
    assert_eq!(line["action"], "error");
    assert_eq!(line["mode"], "url");
    assert_eq!(
        line["reason"],
        gatehouse_mcp::connection::inbound::UNSOLICITED_REASON
    );
    assert_eq!(line["request_id"], json!(cut));
    assert_eq!(line["answer"]["error"]["code"], -32602);
    assert_eq!(line["latency_us"], 42);
}

/// A person whose client goes away when `gone` is cancelled.
struct GoesWhen(tokio_util::sync::CancellationToken);

impl Person for GoesWhen {
    fn ask(
        &self,
        _: &IncomingElicitation,
        _: Option<SessionId>,
    ) -> Result<BoxFuture<'static, Result<ElicitResult, NoAnswer>>, NotAsked> {
        let gone = self.0.clone();
        Ok(Box::pin(async move {
            gone.cancelled().await;
            Err(NoAnswer::ClientGone)
        }))
    }
}

/// A signal drains the router's questions before the sessions close
/// (`Router::drain_questions`), and the close then takes the person's client
/// away too. The drain returns only once each question has seen the
/// cancel, so none is blamed on its client. With `begin_drain` alone the
/// question's task wakes to both at once and takes the client's going (a
/// busy machine: the Codex SIGTERM test saw it in CI).
#[tokio::test]
async fn a_question_drained_by_a_shutdown_is_the_shutdowns_even_when_its_client_then_goes() {
    let sandbox = sandbox();
    let guardian = load(&sandbox, "gatehouse_guardian");
    let chain = Chain::new(vec![ChainLink::new(guardian).with_config("{}")]);
    let audit = Arc::new(AuditLog::in_memory());
    let gone = tokio_util::sync::CancellationToken::new();
    let router = Arc::new(Router::new(
        chain,
        ElicitationSettings::default(),
        audit.clone(),
        Arc::new(GoesWhen(gone.clone())),
        64,
    ));
    let routing = tokio::spawn({
        let router = router.clone();
        async move {
            router
                .route(pushed_form(
                    "1",
                    gatehouse_mcp::handler::WireArrival::default(),
                ))
                .await
        }
    });
    for _ in 0..5000 {
        if router.pending().len() == 1 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(1)).await;
    }
    assert_eq!(
        router.pending().len(),
        1,
        "the question waits for the person"
    );
    // The shutdown, then the session's close.
    router
        .drain_questions(std::time::Duration::from_secs(5))
        .await;
    assert!(router.pending().is_empty(), "every question saw the drain");
    gone.cancel();
    let answer = routing.await.expect("joins").expect("answered");
    let lines = audit.lines();
    assert_eq!(lines.len(), 1, "{lines:?}");
    let line: Value = serde_json::from_str(&lines[0]).expect("JSON");
    assert_ne!(line["decided_by"], "person", "{line}");
    let reason = line["reason"].as_str().unwrap_or_default();
    assert!(reason.contains("gatehouse is shutting down"), "{line}");
    assert!(!reason.contains("went away"), "{line}");
    assert_ne!(
        serde_json::to_value(&answer).expect("JSON")["action"],
        "accept"
    );
}
