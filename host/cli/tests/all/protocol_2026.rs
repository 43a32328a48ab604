//! Protocol 2026-07-28 upstream: a client that opens with `server/discover`
//! (rmcp's own client in its discover lifecycle) gets 2026-07-28 from
//! `gatehouse serve`, and a question no module decides reaches it in the
//! result of the call it belongs to (`InputRequiredResult`), since that
//! protocol has no requests from server to client; the client sends the
//! call again with its answer and the `requestState`, and the answer reaches
//! the server. The state is a handle to that call alone: forged, reused or
//! sent with another tool, it is refused and changes nothing. Over
//! streamable HTTP, where each 2026-07-28 request is a session of its own,
//! the same.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use rmcp::RoleClient;
use rmcp::model::{CallToolResponse, ProtocolVersion, ServerNotification, SubscriptionFilter};
use rmcp::service::{ClientLifecycleMode, ClientServiceExt, RunningService};
use rmcp::transport::TokioChildProcess;
use serde_json::{Value, json};

use crate::gateway::{Client, audit, call, config_with};
use crate::http_gateway::HttpGateway;
use crate::tool_result::result_text as text;

/// `gatehouse serve` on `config`, with a client that opens with
/// `server/discover` asking for 2026-07-28.
async fn discover_client(
    config: &std::path::Path,
    client: Client,
) -> RunningService<RoleClient, Client> {
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_gatehouse"));
    command.arg("serve").arg("--config").arg(config);
    let transport = TokioChildProcess::new(command).expect("gatehouse starts");
    let lifecycle = ClientLifecycleMode::Discover {
        preferred_versions: vec![ProtocolVersion::V_2026_07_28],
    };
    tokio::time::timeout(
        Duration::from_secs(60),
        client.serve_with_lifecycle(transport, lifecycle),
    )
    .await
    .expect("discover in time")
    .expect("server/discover")
}

fn answering(content: Value) -> (Client, Arc<AtomicUsize>) {
    let asked = Arc::new(AtomicUsize::new(0));
    let client = Client {
        elicitation: true,
        content: Some(content),
        asked: asked.clone(),
    };
    (client, asked)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_opens_with_discover_gets_2026_07_28_and_its_questions_in_results() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = config_with(dir.path(), "{}", "");
    let (client, asked) = answering(json!({"name": "Ada"}));
    let client = discover_client(&config, client).await;
    let negotiated = client.peer_info().map(|info| info.protocol_version.clone());
    assert_eq!(negotiated, Some(ProtocolVersion::V_2026_07_28));

    let tools = client.list_all_tools().await.expect("tools/list");
    assert!(
        tools.iter().any(|tool| tool.name == "git__ask_name"),
        "{tools:?}"
    );
    let echo = client
        .call_tool(call("git__echo", json!({"text": "hi"})))
        .await
        .expect("echo");
    assert!(text(&echo).contains("[git] hi"), "{}", text(&echo));

    // The guardian decides: nothing reaches the client.
    let denied = client
        .call_tool(call("git__delete_branch", json!({"branch": "main"})))
        .await
        .expect("delete_branch");
    assert!(
        text(&denied).contains("answered: decline"),
        "{}",
        text(&denied)
    );
    assert_eq!(asked.load(Ordering::SeqCst), 0);

    // Deferred: the question rides in the result, rmcp answers it through
    // its handler and sends the call again; the answer reaches the server.
    let named = client
        .call_tool(call("git__ask_name", json!({})))
        .await
        .expect("ask_name");
    assert!(text(&named).contains("hello Ada"), "{}", text(&named));
    assert_eq!(asked.load(Ordering::SeqCst), 1);

    client.cancel().await.expect("close");
    let lines = audit(dir.path());
    let decided: Vec<&str> = lines
        .iter()
        .filter_map(|line| line["decided_by"].as_str())
        .collect();
    assert_eq!(decided, ["guest", "person"], "{lines:?}");
    let person = &lines[1];
    assert_eq!(person["action"], "accept", "{person}");
    assert_eq!(person["client"]["name"], "test-client", "{person}");
}

/// The one `InputRequiredResult` a call's first round gives: its state and
/// its questions.
fn input_required(response: CallToolResponse) -> (String, Value) {
    let CallToolResponse::InputRequired(asking) = response else {
        panic!("expected input_required, got {response:?}");
    };
    let state = asking.request_state.clone().expect("a requestState");
    let requests = serde_json::to_value(&asking.input_requests).expect("serializes");
    (state, requests)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_request_state_answers_only_its_own_call_once() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = config_with(dir.path(), "{}", "");
    let (client, asked) = answering(json!({"name": "unused"}));
    let client = discover_client(&config, client).await;

    let first = client
        .call_tool_once(call("git__ask_name", json!({})))
        .await
        .expect("first round");
    let (state, requests) = input_required(first);
    let requests = requests.as_object().expect("a map of questions").clone();
    assert_eq!(requests.len(), 1, "{requests:?}");
    let (key, question) = requests.iter().next().expect("one question");
    assert_eq!(question["method"], "elicitation/create", "{question}");
    let message = question["params"]["message"].as_str().expect("a message");
    assert!(message.starts_with("[git] "), "{message}");
    assert_eq!(state.len(), 64, "256 bits, hex: {state}");

    let answer = |name: &str, state: &str, tool: &str| {
        let mut params = call(tool, json!({}));
        params.request_state = Some(state.to_owned());
        params.input_responses = Some(
            [(
                key.clone(),
                json!({"action": "accept", "content": {"name": name}}),
            )]
            .into_iter()
            .collect(),
        );
        params
    };
    // A forged state, and the real one with another tool: refused, and the
    // call stays parked for its own client.
    for (state, tool) in [
        ("0".repeat(64).as_str(), "git__ask_name"),
        (state.as_str(), "git__echo"),
    ] {
        let refused = client
            .call_tool_once(answer("Mallory", state, tool))
            .await
            .expect_err("refused");
        assert!(refused.to_string().contains("requestState"), "{refused}");
    }
    let resumed = client
        .call_tool_once(answer("Bo", &state, "git__ask_name"))
        .await
        .expect("second round");
    let CallToolResponse::Complete(result) = resumed else {
        panic!("expected the result, got {resumed:?}");
    };
    assert!(text(&result).contains("hello Bo"), "{}", text(&result));
    // Used once.
    let again = client
        .call_tool_once(answer("Eve", &state, "git__ask_name"))
        .await
        .expect_err("a state is good for one round");
    assert!(again.to_string().contains("requestState"), "{again}");
    assert_eq!(asked.load(Ordering::SeqCst), 0, "rmcp's handler never ran");

    client.cancel().await.expect("close");
    let lines = audit(dir.path());
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert_eq!(lines[0]["decided_by"], "person");
    assert_eq!(lines[0]["answer"]["content"]["name"], "Bo", "{}", lines[0]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_goes_away_with_a_question_in_a_result_ends_it_at_once() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = config_with(dir.path(), "{}", "on_unhandled = \"cancel\"");
    let (client, _) = answering(json!({"name": "unused"}));
    let client = discover_client(&config, client).await;
    let first = client
        .call_tool_once(call("git__ask_name", json!({})))
        .await
        .expect("first round");
    let _ = input_required(first);
    // The client leaves without sending the call again (person_timeout_sec
    // is 30): the question ends now, answered on_unhandled, and the audit
    // says the client went away.
    client.cancel().await.expect("close");
    let deadline = std::time::Instant::now() + Duration::from_secs(15);
    let lines = loop {
        let lines = audit(dir.path());
        if !lines.is_empty() || std::time::Instant::now() > deadline {
            break lines;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(lines.len(), 1, "{lines:?}");
    let line = &lines[0];
    assert_eq!(line["answer"]["action"], "cancel", "on_unhandled: {line}");
    let reason = line["reason"].as_str().unwrap_or_default();
    assert!(reason.contains("went away"), "{line}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_http_a_2026_07_28_client_gets_its_questions_in_results_too() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = config_with(dir.path(), "{}", "");
    let served = HttpGateway::start(&config);
    let (client, asked) = answering(json!({"name": "Ada"}));
    let lifecycle = ClientLifecycleMode::Discover {
        preferred_versions: vec![ProtocolVersion::V_2026_07_28],
    };
    let client = tokio::time::timeout(
        Duration::from_secs(60),
        client.serve_with_lifecycle(served.transport(), lifecycle),
    )
    .await
    .expect("discover in time")
    .expect("server/discover over HTTP");
    assert_eq!(
        client.peer_info().map(|info| info.protocol_version.clone()),
        Some(ProtocolVersion::V_2026_07_28)
    );
    // Two questions' worth: each call is its own request, and each round
    // of a call another.
    for name in ["Ada", "Ada"] {
        let named = client
            .call_tool(call("git__ask_name", json!({})))
            .await
            .expect("ask_name");
        assert!(
            text(&named).contains(&format!("hello {name}")),
            "{}",
            text(&named)
        );
    }
    assert_eq!(asked.load(Ordering::SeqCst), 2);
    // A made-up state is refused here too.
    let mut forged = call("git__ask_name", json!({}));
    forged.request_state = Some("0".repeat(64));
    forged.input_responses = Some(Default::default());
    let refused = client.call_tool_once(forged).await.expect_err("refused");
    assert!(refused.to_string().contains("requestState"), "{refused}");
    client.cancel().await.expect("close");
    let lines = audit(dir.path());
    let decided: Vec<&str> = lines
        .iter()
        .filter_map(|line| line["decided_by"].as_str())
        .collect();
    assert_eq!(decided, ["person", "person"], "{lines:?}");
}

/// A 2026-07-28 client has no `initialized`: it hears that the catalog
/// changed (a slow server came up) on its `subscriptions/listen` stream.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_2026_07_28_client_hears_of_a_server_that_comes_up_late_on_its_subscription() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = config_with(dir.path(), "{}", "");
    let server = crate::paths::demo_server().display().to_string();
    let slow = format!("sleep 3; exec {server:?} --name slow");
    let text = std::fs::read_to_string(&config).expect("config");
    std::fs::write(
        &config,
        format!("[mcp_servers.slow]\ncommand = \"/bin/sh\"\nargs = [\"-c\", {slow:?}]\n\n{text}"),
    )
    .expect("write config");
    let (client, _) = answering(json!({"name": "unused"}));
    let client = discover_client(&config, client).await;
    let mut subscription = client
        .peer()
        .listen(SubscriptionFilter::builder().tools_list_changed().build())
        .await
        .expect("subscriptions/listen");
    assert_eq!(
        subscription.acknowledged().tools_list_changed,
        Some(true),
        "{:?}",
        subscription.acknowledged()
    );
    let names = |tools: Vec<rmcp::model::Tool>| -> Vec<String> {
        tools
            .into_iter()
            .map(|tool| tool.name.to_string())
            .collect()
    };
    let first = names(client.list_all_tools().await.expect("tools/list"));
    assert!(first.contains(&"git__echo".to_owned()), "{first:?}");
    assert!(
        !first.iter().any(|name| name.starts_with("slow__")),
        "{first:?}"
    );
    let heard = tokio::time::timeout(Duration::from_secs(60), async {
        loop {
            match subscription.next().await.expect("the subscription") {
                Some(ServerNotification::ToolListChangedNotification(_)) => {
                    let now = names(client.list_all_tools().await.expect("tools/list"));
                    if now.contains(&"slow__echo".to_owned()) {
                        return now;
                    }
                }
                Some(_) => {}
                None => panic!("the subscription ended"),
            }
        }
    })
    .await
    .expect("told of the slow server within a minute");
    assert!(heard.contains(&"git__echo".to_owned()), "{heard:?}");
    drop(subscription);
    client.cancel().await.expect("close");
}
