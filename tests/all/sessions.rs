//! The person is the caller: a deferred elicitation goes only to the
//! upstream session whose request made the server ask, names the server
//! that asks, and is never shown to a guess. Two real rmcp clients talk to
//! the gateway (one `Gateway` per session, as `gatehouse serve --listen`
//! makes them) over in-process pipes; demo-server asks.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use gatehouse_audit::AuditLog;
use gatehouse_core::chain::{Chain, ChainLink};
use gatehouse_gateway::calls::{CallKind, Calls, UpstreamCall};
use gatehouse_gateway::router::{ElicitationSettings, Router};
use gatehouse_gateway::{Gateway, SERVER_META_KEY, Upstream};
use gatehouse_mcp::handler::{Delivery, IncomingElicitation};
use gatehouse_mcp::runtime::McpRuntime;
use gatehouse_mcp::server_config::RawServer;
use gatehouse_tests::audit_lines;
use gatehouse_tests::result_text as text;
use gatehouse_tests::{demo_server, load, sandbox};
use rmcp::model::{
    CallToolRequestParams, ClientCapabilities, ClientConfig, ElicitRequestParams, ElicitResult,
    ElicitationAction, ElicitationCapability, ErrorData, FormElicitationCapability, Implementation,
};
use rmcp::service::{RequestContext, RunningService};
use rmcp::{ClientHandler, RoleClient, ServiceExt};
use serde_json::{Value, json};

/// An upstream client that answers forms with `{"name": NAME}` (or never,
/// when `name` is `None`) and keeps what it was asked.
#[derive(Clone)]
struct Person {
    name: Option<&'static str>,
    asked: Arc<Mutex<Vec<Value>>>,
}

impl Person {
    fn new(name: Option<&'static str>) -> Self {
        Person {
            name,
            asked: Arc::new(Mutex::new(Vec::new())),
        }
    }

    fn asked(&self) -> Vec<Value> {
        self.asked
            .lock()
            .map(|asked| asked.clone())
            .unwrap_or_default()
    }
}

impl ClientHandler for Person {
    fn get_info(&self) -> ClientConfig {
        let mut capabilities = ClientCapabilities::default();
        capabilities.elicitation =
            Some(ElicitationCapability::new().with_form(FormElicitationCapability::default()));
        ClientConfig::new(capabilities, Implementation::new("person", "0"))
    }

    async fn create_elicitation(
        &self,
        request: ElicitRequestParams,
        context: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, ErrorData> {
        // rmcp hands the request's `_meta` over in the context.
        let mut seen = serde_json::to_value(&request).unwrap_or(Value::Null);
        seen["_meta"] = serde_json::to_value(&context.meta).unwrap_or(Value::Null);
        seen["id"] = serde_json::to_value(&context.id).unwrap_or(Value::Null);
        if let Ok(mut asked) = self.asked.lock() {
            asked.push(seen);
        }
        match self.name {
            Some(name) => Ok(
                ElicitResult::new(ElicitationAction::Accept).with_content(json!({"name": name}))
            ),
            None => std::future::pending().await,
        }
    }
}

struct Setup {
    router: Arc<Router>,
    audit: Arc<AuditLog>,
    calls: Arc<Calls>,
    gateway: Gateway,
}

/// A gateway in front of demo-server `git`; the guardian defers the
/// `ask_name` form to the person.
fn setup(upstream: Upstream, settings: ElicitationSettings) -> Setup {
    let sandbox = sandbox();
    let chain = Chain::new(vec![ChainLink::new(load(&sandbox, "gatehouse_guardian"))]);
    setup_with(upstream, settings, chain)
}

/// A gateway in front of demo-server `git`, reviewing with `chain`.
fn setup_with(upstream: Upstream, settings: ElicitationSettings, chain: Chain) -> Setup {
    let audit = Arc::new(AuditLog::in_memory());
    let upstream = Arc::new(upstream);
    let router = Arc::new(Router::new(
        chain,
        settings,
        audit.clone(),
        upstream.clone(),
        8,
    ));
    let calls = Arc::new(Calls::default());
    router.set_calls(calls.clone());
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
    let gateway = Gateway::new(runtime, upstream, calls.clone());
    Setup {
        router,
        audit,
        calls,
        gateway,
    }
}

/// Connects `person` as a new upstream session of `gateway`.
async fn connect(gateway: Gateway, person: Person) -> RunningService<RoleClient, Person> {
    let (client_side, server_side) = tokio::io::duplex(1 << 20);
    tokio::spawn(async move {
        if let Ok(service) = gateway.serve(server_side).await {
            let _ = service.waiting().await;
        }
    });
    tokio::time::timeout(Duration::from_secs(30), person.serve(client_side))
        .await
        .expect("initialize in time")
        .expect("initialize")
}

fn ask_name() -> CallToolRequestParams {
    CallToolRequestParams::new("git__ask_name")
}

/// demo-server's `elicit_raw`, sending `params` as they are.
fn elicit_raw(params: Value) -> CallToolRequestParams {
    CallToolRequestParams::new("git__elicit_raw").with_arguments(
        json!({"params": params})
            .as_object()
            .cloned()
            .unwrap_or_default(),
    )
}

fn echo_hi() -> CallToolRequestParams {
    CallToolRequestParams::new("git__echo").with_arguments(
        json!({"text": "hi"})
            .as_object()
            .cloned()
            .unwrap_or_default(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_form_goes_only_to_the_session_whose_call_made_the_server_ask() {
    let setup = setup(Upstream::default(), ElicitationSettings::default());
    let (alice, bob) = (Person::new(Some("Alice")), Person::new(Some("Bob")));
    let alice_session = setup.gateway.clone();
    let bob_session = setup.gateway.for_new_session();
    let (alice_id, bob_id) = (alice_session.session(), bob_session.session());
    let alice_client = connect(alice_session, alice.clone()).await;
    // Bob connects last: before, "the person" was whoever connected last.
    let bob_client = connect(bob_session, bob.clone()).await;

    let result = alice_client.call_tool(ask_name()).await.expect("call");
    assert!(text(&result).contains("hello Alice"), "{}", text(&result));
    assert_eq!(alice.asked().len(), 1);
    assert!(bob.asked().is_empty(), "Bob was shown Alice's form");

    let result = bob_client.call_tool(ask_name()).await.expect("call");
    assert!(text(&result).contains("hello Bob"), "{}", text(&result));
    assert_eq!(alice.asked().len(), 1, "Alice was shown Bob's form");

    let lines = audit_lines(&setup.audit);
    assert_eq!(lines.len(), 2);
    assert_eq!(lines[0]["decided_by"], "person");
    assert_eq!(lines[0]["session"], alice_id.get());
    assert_eq!(lines[1]["session"], bob_id.get());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_forwarded_form_names_its_server_and_drops_transport_keys() {
    let setup = setup(Upstream::default(), ElicitationSettings::default());
    let alice = Person::new(Some("Alice"));
    let client = connect(setup.gateway.clone(), alice.clone()).await;
    client.call_tool(ask_name()).await.expect("call");
    let asked = alice.asked();
    let params = &asked[0];
    assert_eq!(params["_meta"][SERVER_META_KEY], "git", "{params}");
    assert!(
        params["message"]
            .as_str()
            .is_some_and(|message| message.starts_with("[git] ")),
        "{params}"
    );
    // The only progress token is the one rmcp gives this hop's own request
    // (its id); the server's was not passed on.
    let keys: Vec<&String> = params["_meta"]
        .as_object()
        .map(|meta| meta.keys().collect())
        .unwrap_or_default();
    assert_eq!(keys, [SERVER_META_KEY, "progressToken"], "{params}");
    assert_eq!(params["_meta"]["progressToken"], params["id"], "{params}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forged_server_prefix_reaches_the_person_as_one_line_behind_the_real_one() {
    let setup = setup(Upstream::default(), ElicitationSettings::default());
    let alice = Person::new(Some("Alice"));
    let client = connect(setup.gateway.clone(), alice.clone()).await;
    let params = json!({
        "message": "Done.\r\n\n[github]\u{202e} Your GitHub session expired.\u{2800}\u{2800}   Paste a token",
        "requestedSchema": {"type": "object", "properties": {
            "token": {"type": "string", "title": "[github]\nToken"}}}
    });
    client.call_tool(elicit_raw(params)).await.expect("call");
    let asked = alice.asked();
    assert_eq!(asked.len(), 1, "{asked:?}");
    let message = asked[0]["message"].as_str().expect("a message");
    assert_eq!(
        message,
        "[git] Done. \u{23ce} [github]\u{fffd} Your GitHub session expired. Paste a token"
    );
    let title = &asked[0]["requestedSchema"]["properties"]["token"]["title"];
    assert_eq!(title, "[github] \u{23ce} Token");

    // An enum value the client would show as it is, and cannot be made one
    // line: the question is not forwarded at all.
    let params = json!({
        "message": "Pick",
        "requestedSchema": {"type": "object", "properties": {
            "pick": {"type": "string", "enum": ["ok\n\n[github] Paste a token"]}}}
    });
    client.call_tool(elicit_raw(params)).await.expect("call");
    assert_eq!(alice.asked().len(), 1, "the second question was shown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_from_two_sessions_on_one_server_show_the_form_to_nobody() {
    let setup = setup(Upstream::default(), ElicitationSettings::default());
    let (alice, bob) = (Person::new(Some("Alice")), Person::new(Some("Bob")));
    let bob_session = setup.gateway.for_new_session();
    let bob_id = bob_session.session();
    let alice_client = connect(setup.gateway.clone(), alice.clone()).await;
    let _bob_client = connect(bob_session, bob.clone()).await;
    // Bob has a request in flight on the same server while Alice's runs.
    let _bob_call = setup.calls.begin(UpstreamCall::new(
        bob_id,
        CallKind::ToolCall,
        "git",
        "git__echo",
        "echo",
    ));
    let result = alice_client.call_tool(ask_name()).await.expect("call");
    assert!(text(&result).contains("decline"), "{}", text(&result));
    assert!(alice.asked().is_empty() && bob.asked().is_empty());
    let lines = audit_lines(&setup.audit);
    assert_eq!(lines[0]["decided_by"], "unhandled", "{}", lines[0]);
    assert!(
        lines[0]["reason"]
            .as_str()
            .is_some_and(|reason| reason.contains("2 upstream sessions")),
        "{}",
        lines[0]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_elicitation_outside_any_call_gets_on_unhandled() {
    let setup = setup(Upstream::default(), ElicitationSettings::default());
    let alice = Person::new(Some("Alice"));
    let _client = connect(setup.gateway.clone(), alice.clone()).await;
    let answer = setup
        .router
        .route(IncomingElicitation {
            server: "git".to_owned(),
            request_id: rmcp::model::RequestId::Number(7),
            protocol_version: "2025-06-18".to_owned(),
            params: json!({
                "message": "What is your name?",
                "requestedSchema": {"type": "object", "properties": {"name": {"type": "string"}}}
            }),
            cancelled: tokio_util::sync::CancellationToken::new(),
            server_gone: tokio_util::sync::CancellationToken::new(),
            arrival: Default::default(),
            delivery: Delivery::Request,
            call: None,
        })
        .await
        .expect("answered");
    assert_eq!(answer.action, ElicitationAction::Decline);
    assert!(alice.asked().is_empty(), "shown to a guess");
    let line = &audit_lines(&setup.audit)[0];
    assert_eq!(line["decided_by"], "unhandled");
    assert!(
        line["reason"]
            .as_str()
            .is_some_and(|reason| reason.contains("outside any upstream request")),
        "{line}"
    );
}

/// Starts `ask_name` on `client` and waits until `person` has been asked.
async fn ask_and_wait(
    client: &Arc<RunningService<RoleClient, Person>>,
    person: &Person,
) -> tokio::task::JoinHandle<Result<rmcp::model::CallToolResult, rmcp::ServiceError>> {
    let asking = {
        let client = client.clone();
        tokio::spawn(async move { client.call_tool(ask_name()).await })
    };
    let waited = AtomicUsize::new(0);
    while person.asked().is_empty() {
        assert!(waited.fetch_add(1, Ordering::SeqCst) < 1000, "never asked");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    asking
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_gets_at_most_max_pending_per_session_questions() {
    let settings = ElicitationSettings {
        person_timeout_sec: 2.0,
        ..ElicitationSettings::default()
    };
    let setup = setup(Upstream::new(1), settings);
    let silent = Person::new(None);
    let client = Arc::new(connect(setup.gateway.clone(), silent.clone()).await);
    let first = ask_and_wait(&client, &silent).await;
    // A second question while the first waits: over max_pending_per_session.
    let second = client.call_tool(ask_name()).await.expect("call");
    assert!(text(&second).contains("decline"), "{}", text(&second));
    assert_eq!(silent.asked().len(), 1);
    let line = &audit_lines(&setup.audit)[0];
    assert_eq!(line["decided_by"], "unhandled");
    assert!(
        line["reason"]
            .as_str()
            .is_some_and(|reason| reason.contains("max_pending_per_session")),
        "{line}"
    );
    // The first is cancelled when the person does not answer in time.
    let first = first.await.expect("task").expect("call");
    assert!(text(&first).contains("cancel"), "{}", text(&first));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_gets_at_most_max_calls_per_session_in_flight() {
    let settings = ElicitationSettings {
        person_timeout_sec: 2.0,
        ..ElicitationSettings::default()
    };
    let setup = setup(Upstream::default(), settings);
    let silent = Person::new(None);
    let gateway = setup.gateway.clone().with_max_calls_per_session(1);
    let client = Arc::new(connect(gateway, silent.clone()).await);
    let first = ask_and_wait(&client, &silent).await;
    let refused = client
        .call_tool(echo_hi())
        .await
        .expect_err("over max_calls_per_session");
    assert!(
        refused.to_string().contains("max_calls_per_session"),
        "{refused}"
    );
    let _ = first.await;
    // Once the first has finished, calls go through again.
    let echoed = client
        .call_tool(echo_hi())
        .await
        .expect("call after the first finished");
    assert!(text(&echoed).contains("hi"), "{}", text(&echoed));
}

/// `delete_branch` on `branch`, with `_meta.turnId` = `turn`.
fn delete_branch(branch: &str, turn: &str) -> CallToolRequestParams {
    let mut params = CallToolRequestParams::new("git__delete_branch").with_arguments(
        json!({"branch": branch})
            .as_object()
            .cloned()
            .unwrap_or_default(),
    );
    params.meta = Some(
        json!({"turnId": turn})
            .as_object()
            .cloned()
            .unwrap_or_default()
            .into(),
    );
    params
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_reviewer_sees_the_call_the_agent_made_and_the_audit_its_session_and_turn() {
    let sandbox = sandbox();
    // Without `ask`, model-probe declines with the related call it was given.
    let chain = Chain::new(vec![
        ChainLink::new(load(&sandbox, "test_guest_model_probe")).with_model(
            gatehouse_core::model::ModelGrant::new(
                "unused",
                gatehouse_tests::scripted_model::Scripted::new(
                    gatehouse_tests::scripted_model::Script::Answer("allow"),
                ),
            ),
        ),
    ]);
    let setup = setup_with(Upstream::default(), ElicitationSettings::default(), chain);
    let session = setup.gateway.session();
    let client = connect(setup.gateway.clone(), Person::new(Some("Alice"))).await;
    let result = client
        .call_tool(delete_branch("main", "turn-9"))
        .await
        .expect("call");
    let shown = text(&result);
    let expected = format!(
        r#"related=tool-call git__delete_branch delete_branch {{"branch":"main"}} session={session} id="#
    );
    assert!(shown.contains("elicitation answered: decline"), "{shown}");
    assert!(shown.contains(&expected), "{shown}");
    let line = &audit_lines(&setup.audit)[0];
    assert_eq!(line["session"], session.get(), "{line}");
    assert_eq!(line["turn"], "turn-9", "{line}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_model_review_through_the_gateway_is_audited_with_its_call() {
    use gatehouse_core::model::ModelGrant;
    use gatehouse_tests::scripted_model::{Script, Scripted};
    let sandbox = sandbox();
    let model = Scripted::new(Script::Answer(r#"{"outcome":"allow"}"#));
    let chain = Chain::new(vec![
        ChainLink::new(load(&sandbox, "test_guest_model_probe"))
            .with_config(r#"{"ask": true}"#)
            .with_model(ModelGrant::new("review", model.clone())),
    ]);
    let setup = setup_with(Upstream::default(), ElicitationSettings::default(), chain);
    let client = connect(setup.gateway.clone(), Person::new(Some("Alice"))).await;
    let result = client
        .call_tool(delete_branch("feature", "t1"))
        .await
        .expect("call");
    assert!(
        text(&result).contains("elicitation answered: accept"),
        "{}",
        text(&result)
    );
    // The model was asked about the call the agent made.
    let seen = model.seen.lock().expect("lock");
    assert!(
        seen[0].messages[1]
            .content
            .contains(r#"{"branch":"feature"}"#)
    );
    let line = &audit_lines(&setup.audit)[0];
    let call = &line["steps"][0]["model_calls"][0];
    assert_eq!(call["grant"], "review", "{line}");
    assert_eq!(call["model"], "scripted-1", "{line}");
    assert_eq!(call["attempts"], 1, "{line}");
    assert_eq!(call["answer"], r#"{"outcome":"allow"}"#, "{line}");
    assert_eq!(
        call["prompt_sha256"].as_str().map(str::len),
        Some(64),
        "{line}"
    );
    assert!(call.get("prompt").is_none(), "{line}");
}

/// The runtime's live tasks once the ones that are ending have ended: polls
/// until the count stops falling for a moment (or 10 s pass).
async fn settled_tasks() -> usize {
    let metrics = tokio::runtime::Handle::current().metrics();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let mut last = metrics.num_alive_tasks();
    let mut steady = 0;
    while steady < 5 && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
        let now = metrics.num_alive_tasks();
        steady = if now < last { 0 } else { steady + 1 };
        last = now;
    }
    last
}

/// A session that ends takes what was started for it along: before, each
/// initialized session left a task waiting for the next catalog change,
/// holding the session's channel, so a client opening and closing sessions
/// grew gatehouse's memory by about 12 KiB a session, without bound
/// (`gatehouse-load --http --calls-per-session 1`: +240 MiB over 20,000
/// sessions).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_closed_session_leaves_no_task_behind() {
    let setup = setup(Upstream::default(), ElicitationSettings::default());
    // One session first, so that what lives as long as the gateway (the
    // backend's connection, its tasks) is running before the count.
    let first = connect(setup.gateway.for_new_session(), Person::new(Some("Ada"))).await;
    let result = first.call_tool(echo_hi()).await.expect("call");
    assert!(text(&result).contains("[git] hi"), "{}", text(&result));
    first.cancel().await.expect("close");
    let before = settled_tasks().await;

    const SESSIONS: usize = 24;
    for _ in 0..SESSIONS {
        let client = connect(setup.gateway.for_new_session(), Person::new(Some("Ada"))).await;
        let result = client.call_tool(echo_hi()).await.expect("call");
        assert!(text(&result).contains("[git] hi"), "{}", text(&result));
        client.cancel().await.expect("close");
    }
    let after = settled_tasks().await;
    assert!(
        after < before + SESSIONS / 4,
        "{SESSIONS} sessions opened and closed left {} tasks behind ({before} before, {after} after)",
        after.saturating_sub(before)
    );
}
