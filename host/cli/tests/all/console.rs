//! The approvals console over HTTP, as a script or an attacker's page
//! would talk to it: questions that no module decided wait for it, the
//! answer reaches the right server, one console serves every instance on a
//! config, and what is not the console's own session gets nothing.
//! (`console_browser.rs` drives the page itself in Chromium.)

use std::time::Duration;

use rmcp::ServiceExt as _;
use rmcp::model::CallToolRequestParams;
use serde_json::json;

use crate::console_support::{self, ConsoleProcess, Session, TOKEN, elicit, name_form};
use crate::http_gateway::HttpGateway;
use crate::waiting::wait_for;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deferred_question_waits_for_the_console_and_its_answer_reaches_the_server() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = console_support::config(dir.path(), "person = \"console\"");
    let console = ConsoleProcess::start(&config);
    let gateway = HttpGateway::start(&config);
    let client = std::sync::Arc::new(().serve(gateway.transport()).await.expect("initialize"));
    let call = elicit(&client, name_form("Who approves the deploy?"));
    let session = Session::login(&console.base, TOKEN).await.expect("login");
    let open = session.open(1).await;
    let question = &open[0];
    assert_eq!(question["question"]["server"], "demo", "{question}");
    assert_eq!(
        question["question"]["ask"]["message"],
        "Who approves the deploy?"
    );
    // The agent's call, with its real arguments, and the chain's verdict.
    assert_eq!(question["question"]["call"]["name"], "demo__elicit_raw");
    assert_eq!(
        question["question"]["call"]["arguments"]["params"]["message"],
        "Who approves the deploy?"
    );
    assert_eq!(
        question["question"]["verdicts"][0]["outcome"], "defer",
        "{question}"
    );
    assert!(question["deadline_ms"].as_u64() > question["asked_at_ms"].as_u64());
    // The agent's call is still waiting.
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!call.is_finished(), "the call waits for the person");
    // Content that breaks the schema is refused by the console, and the
    // question stays open.
    let id = question["id"].clone();
    let (status, said) = session
        .answer(&json!({"id": id, "action": "accept", "content": {"name": "A"}}))
        .await;
    assert_eq!(status.as_u16(), 422, "{said}");
    let (status, said) = session
        .answer(&json!({"id": id, "action": "accept", "content": {"name": "Ada"}}))
        .await;
    assert_eq!(status.as_u16(), 200, "{said}");
    let result = call.await.expect("the call ends");
    let answer = console_support::raw_answer(&result);
    assert_eq!(answer["action"], "accept", "{result}");
    assert_eq!(answer["content"], json!({"name": "Ada"}), "{result}");
    // A second answer hears who answered.
    let (status, said) = session
        .answer(&json!({"id": id, "action": "decline"}))
        .await;
    assert_eq!(status.as_u16(), 409, "{said}");
    assert_eq!(said["closed"]["how"], "answered", "{said}");
    let console_session = said["closed"]["session"]
        .as_str()
        .expect("session")
        .to_owned();
    // The audit line: the person, through the console, by that session.
    wait_for("the audit line", || {
        !console_support::decisions(dir.path()).is_empty()
    })
    .await;
    let line = &console_support::decisions(dir.path())[0];
    assert_eq!(line["decided_by"], "person", "{line}");
    assert_eq!(line["action"], "accept", "{line}");
    assert_eq!(
        line["person"],
        json!({"channel": "console", "session": console_session}),
        "{line}"
    );
    // The audit page's API: filtered and counted as `gatehouse audit` does.
    let audit = |query: &'static str| {
        let session = &session;
        async move {
            let response = session
                .client
                .get(format!("{}/api/audit?{query}", session.base))
                .header("cookie", &session.cookie)
                .send()
                .await
                .expect("audit");
            let status = response.status().as_u16();
            let body = response.bytes().await.expect("body");
            (
                status,
                serde_json::from_slice::<serde_json::Value>(&body).expect("JSON"),
            )
        }
    };
    let (status, found) = audit("decided_by=person&since=1h").await;
    assert_eq!(status, 200, "{found}");
    assert_eq!(found["stats"]["records"], 1, "{found}");
    assert_eq!(found["stats"]["decided_by"]["person"], 1, "{found}");
    assert_eq!(
        found["records"][0]["person"]["channel"], "console",
        "{found}"
    );
    assert!(
        found["stats"]["latency_us"]["p50"].as_u64().is_some(),
        "{found}"
    );
    let (_, found) = audit("decided_by=guest").await;
    assert_eq!(found["stats"]["records"], 0, "{found}");
    let (status, found) = audit("since=yesterday-ish").await;
    assert_eq!(status, 400, "{found}");
    drop(console);
}

/// The upstream client's own answer is audited as the client's, and tells
/// apart from the console's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_console_route_the_client_answers_and_the_audit_says_client() {
    use rmcp::handler::client::ClientHandler;
    use rmcp::model::{
        ClientCapabilities, ClientConfig, ElicitRequestParams, ElicitResult, ElicitationAction,
        ElicitationCapability, FormElicitationCapability, Implementation,
    };

    #[derive(Clone)]
    struct Answers;
    impl ClientHandler for Answers {
        fn get_info(&self) -> ClientConfig {
            let mut capabilities = ClientCapabilities::default();
            capabilities.elicitation =
                Some(ElicitationCapability::new().with_form(FormElicitationCapability::default()));
            ClientConfig::new(
                capabilities,
                Implementation::new("answering-client", "1.2.3"),
            )
        }
        async fn create_elicitation(
            &self,
            _: ElicitRequestParams,
            _: rmcp::service::RequestContext<rmcp::RoleClient>,
        ) -> Result<ElicitResult, rmcp::ErrorData> {
            Ok(ElicitResult::new(ElicitationAction::Decline))
        }
    }

    let dir = tempfile::tempdir().expect("tempdir");
    let config = console_support::config(dir.path(), "person = \"client-then-console\"");
    let gateway = HttpGateway::start(&config);
    let client = Answers
        .serve(gateway.transport())
        .await
        .expect("initialize");
    let arguments = json!({ "params": name_form("Name?") });
    client
        .call_tool(
            CallToolRequestParams::new("demo__elicit_raw")
                .with_arguments(arguments.as_object().cloned().unwrap_or_default()),
        )
        .await
        .expect("call");
    wait_for("the audit line", || {
        !console_support::decisions(dir.path()).is_empty()
    })
    .await;
    let line = &console_support::decisions(dir.path())[0];
    assert_eq!(line["decided_by"], "person", "{line}");
    assert_eq!(line["person"], json!({"channel": "client"}), "{line}");
    assert_eq!(line["client"]["name"], "answering-client", "{line}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_instances_reach_one_console_and_each_answer_reaches_its_own_server() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = console_support::config(dir.path(), "person = \"console\"");
    let console = ConsoleProcess::start(&config);
    let first = HttpGateway::start(&config);
    let second = HttpGateway::start(&config);
    let first_client = std::sync::Arc::new(().serve(first.transport()).await.expect("initialize"));
    let second_client =
        std::sync::Arc::new(().serve(second.transport()).await.expect("initialize"));
    let first_call = elicit(&first_client, name_form("first instance asks"));
    let second_call = elicit(&second_client, name_form("second instance asks"));
    let session = Session::login(&console.base, TOKEN).await.expect("login");
    let open = session.open(2).await;
    let state = session.state().await;
    assert_eq!(
        state["instances"].as_array().map(Vec::len),
        Some(2),
        "{state}"
    );
    let instances: std::collections::BTreeSet<&str> =
        open.iter().filter_map(|q| q["instance"].as_str()).collect();
    assert_eq!(
        instances.len(),
        2,
        "one question from each instance: {open:?}"
    );
    for question in &open {
        let name = if question["question"]["ask"]["message"] == "first instance asks" {
            "First"
        } else {
            "Second"
        };
        let (status, said) = session
            .answer(&json!({"id": question["id"], "action": "accept", "content": {"name": name}}))
            .await;
        assert_eq!(status.as_u16(), 200, "{said}");
    }
    let first_result = first_call.await.expect("first");
    let second_result = second_call.await.expect("second");
    assert!(first_result.contains("\"First\""), "{first_result}");
    assert!(second_result.contains("\"Second\""), "{second_result}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_instance_that_ends_takes_its_questions_off_and_a_console_that_ends_loses_none() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = console_support::config(dir.path(), "person = \"console\"");
    let mut console = ConsoleProcess::start(&config);
    let session = Session::login(&console.base, TOKEN).await.expect("login");
    // An instance killed while its question is open: the question leaves
    // the page.
    {
        let gateway = HttpGateway::start(&config);
        let client = std::sync::Arc::new(().serve(gateway.transport()).await.expect("initialize"));
        let _call = elicit(&client, name_form("soon gone"));
        session.open(1).await;
        drop(gateway);
        let state = session.none_open().await;
        assert_eq!(
            state["closed"][0]["closed"]["how"], "instance_gone",
            "{state}"
        );
    }
    // The console killed while a question waits: the question is answered
    // `on_unhandled` (decline) and audited with why.
    let gateway = HttpGateway::start(&config);
    let client = std::sync::Arc::new(().serve(gateway.transport()).await.expect("initialize"));
    let call = elicit(&client, name_form("console soon gone"));
    session.open(1).await;
    console.kill();
    let result = call.await.expect("the call ends");
    assert!(result.contains("decline"), "{result}");
    wait_for("the audit line", || {
        !console_support::decisions(dir.path()).is_empty()
    })
    .await;
    let line = console_support::decisions(dir.path())
        .pop()
        .expect("a line");
    assert_eq!(line["decided_by"], "unhandled", "{line}");
    assert!(
        line["reason"]
            .as_str()
            .is_some_and(|r| r.contains("console went away")),
        "{line}"
    );
    // With no console running at all, the same, at once.
    let call = elicit(&client, name_form("no console"));
    let result = call.await.expect("the call ends");
    assert!(result.contains("decline"), "{result}");
    let line = console_support::decisions(dir.path())
        .pop()
        .expect("a line");
    assert!(
        line["reason"]
            .as_str()
            .is_some_and(|r| r.contains("no console is running")),
        "{line}"
    );
    // A console started again (its stale socket replaced) gets the same
    // instance back, and its questions.
    let console = ConsoleProcess::start(&config);
    let session = Session::login(&console.base, TOKEN).await.expect("login");
    let call = elicit(&client, name_form("console back"));
    let open = session.open(1).await;
    let (status, said) = session
        .answer(&json!({"id": open[0]["id"], "action": "accept", "content": {"name": "Back"}}))
        .await;
    assert_eq!(status.as_u16(), 200, "{said}");
    let result = call.await.expect("the call ends");
    assert!(result.contains("Back"), "{result}");
    // A second console on the config is refused: the live one keeps its socket.
    let second = std::process::Command::new(env!("CARGO_BIN_EXE_gatehouse"))
        .args(["console", "--listen", "127.0.0.1:0", "--config"])
        .arg(&config)
        .env("GATEHOUSE_CONSOLE_TOKEN", TOKEN)
        .output()
        .expect("a second console runs");
    assert!(!second.status.success());
    let said = String::from_utf8_lossy(&second.stderr);
    assert!(
        said.contains("a console is already running for this config"),
        "{said}"
    );
    assert_eq!(
        session.state().await["instances"].as_array().map(Vec::len),
        Some(1)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_is_not_the_consoles_own_session_gets_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = console_support::config(dir.path(), "person = \"console\"");
    let console = ConsoleProcess::start(&config);
    let base = console.base.clone();
    let http = console_support::http();
    // The wrong token, or none.
    assert_eq!(
        Session::login(&base, "not-the-token-at-all")
            .await
            .err()
            .map(|s| s.as_u16()),
        Some(401)
    );
    // Without a session: the pages send to the login, the API refuses.
    let page = http.get(format!("{base}/")).send().await.expect("get");
    assert_eq!(page.status().as_u16(), 303);
    let csp = page
        .headers()
        .get("content-security-policy")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    assert!(
        csp.contains("script-src 'self'") && csp.contains("default-src 'none'"),
        "{csp}"
    );
    for path in ["/api/state", "/api/events", "/api/audit"] {
        let response = http.get(format!("{base}{path}")).send().await.expect("get");
        assert_eq!(response.status().as_u16(), 401, "{path}");
    }
    let session = Session::login(&base, TOKEN).await.expect("login");
    // A cookie planted by a page on another port of this host (cookies do
    // not keep ports apart) does not hide the real one.
    let planted = http
        .get(format!("{base}/api/state"))
        .header(
            "cookie",
            format!("gatehouse_console=planted; {}", session.cookie),
        )
        .send()
        .await
        .expect("state");
    assert_eq!(planted.status().as_u16(), 200);
    let gateway = HttpGateway::start(&config);
    let client = std::sync::Arc::new(().serve(gateway.transport()).await.expect("initialize"));
    let call = elicit(&client, name_form("attacked"));
    let open = session.open(1).await;
    let answer = json!({"id": open[0]["id"], "action": "accept", "content": {"name": "Mallory"}});
    let post =
        |origin: Option<&str>, csrf: Option<&str>, cookie: Option<&str>, host: Option<&str>| {
            let mut request = http
                .post(format!("{base}/api/answer"))
                .header("content-type", "application/json")
                .body(answer.to_string());
            if let Some(origin) = origin {
                request = request.header("origin", origin);
            }
            if let Some(csrf) = csrf {
                request = request.header("x-gatehouse-csrf", csrf);
            }
            if let Some(cookie) = cookie {
                request = request.header("cookie", cookie);
            }
            if let Some(host) = host {
                request = request.header("host", host);
            }
            request.send()
        };
    let own = Some(base.as_str());
    let csrf = Some(session.csrf.as_str());
    let cookie = Some(session.cookie.as_str());
    let refused = [
        ("no cookie", post(own, csrf, None, None).await, 401),
        (
            "a forged cookie",
            post(own, csrf, Some("gatehouse_console=00ff"), None).await,
            401,
        ),
        (
            "a foreign Origin",
            post(Some("http://evil.test"), csrf, cookie, None).await,
            403,
        ),
        ("no Origin", post(None, csrf, cookie, None).await, 403),
        ("no CSRF token", post(own, None, cookie, None).await, 403),
        (
            "a wrong CSRF token",
            post(own, Some("0000"), cookie, None).await,
            403,
        ),
        (
            "a rebinding Host",
            post(
                Some("http://evil.test:1"),
                csrf,
                cookie,
                Some("evil.test:1"),
            )
            .await,
            421,
        ),
    ];
    for (what, response, status) in refused {
        let response = response.expect("sent");
        assert_eq!(response.status().as_u16(), status, "{what}");
    }
    assert_eq!(
        session.state().await["open"].as_array().map(Vec::len),
        Some(1),
        "still open"
    );
    assert!(!call.is_finished());
    // Logging out ends the session.
    let out = http
        .post(format!("{base}/logout"))
        .header("origin", &base)
        .header("cookie", &session.cookie)
        .header("content-type", "application/x-www-form-urlencoded")
        .body(format!("csrf={}", session.csrf))
        .send()
        .await
        .expect("logout");
    assert_eq!(out.status().as_u16(), 303);
    let (status, _) = session.answer(&answer).await;
    assert_eq!(status.as_u16(), 401);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_lists_each_instance_with_its_modules_and_backends_and_reloads_them() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = console_support::config(dir.path(), "");
    let console = ConsoleProcess::start(&config);
    let session = Session::login(&console.base, TOKEN).await.expect("login");
    // Attached before it has any question, with its chain and backend.
    let gateway = HttpGateway::start(&config);
    let client = ().serve(gateway.transport()).await.expect("initialize");
    client.list_all_tools().await.expect("tools");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    let status = loop {
        let state = session.state().await;
        let status = &state["instances"][0]["status"];
        // The chain loads in the background: until it is in force the kit
        // says it is pending.
        if status["backends"][0]["state"] == "connected" && status["swapped_at_ms"].is_u64() {
            break status.clone();
        }
        assert!(
            status.is_null() || status["kit"] == "pending" || status["swapped_at_ms"].is_u64(),
            "{status}"
        );
        assert!(tokio::time::Instant::now() < deadline, "{state}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(
        status["modules"][0]["name"], "gatehouse_guardian",
        "{status}"
    );
    assert_eq!(status["modules"][0]["mode"], "live", "{status}");
    assert_eq!(
        status["modules"][0]["digest"].as_str().map(str::len),
        Some(64),
        "{status}"
    );
    assert_eq!(status["backends"][0]["name"], "demo", "{status}");
    assert_eq!(status["kit"], "passed", "{status}");
    let swapped = status["swapped_at_ms"].as_u64().expect("swapped");
    // A reload from the console swaps the chain again.
    let reload = |csrf: &str| {
        console_support::http()
            .post(format!("{}/api/reload", console.base))
            .header("cookie", &session.cookie)
            .header("origin", &console.base)
            .header("x-gatehouse-csrf", csrf.to_owned())
            .send()
    };
    let refused = reload("wrong").await.expect("sent");
    assert_eq!(refused.status().as_u16(), 403, "no CSRF token, no reload");
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(
        session.state().await["instances"][0]["status"]["swapped_at_ms"].as_u64(),
        Some(swapped)
    );
    let asked = reload(&session.csrf).await.expect("sent");
    assert_eq!(asked.status().as_u16(), 200);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let state = session.state().await;
        if state["instances"][0]["status"]["swapped_at_ms"].as_u64() > Some(swapped) {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "{state}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Under the default `person = "client"`, a client that declared no
/// elicitation support is passed over for the console; the person's time
/// running out there takes the question off the page and is audited.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_without_elicitation_goes_to_the_console_whose_time_runs_out() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = console_support::config(dir.path(), "person_timeout_sec = 2");
    let console = ConsoleProcess::start(&config);
    let session = Session::login(&console.base, TOKEN).await.expect("login");
    let gateway = HttpGateway::start(&config);
    // `()` declares no capability at all.
    let client = std::sync::Arc::new(().serve(gateway.transport()).await.expect("initialize"));
    let call = elicit(&client, name_form("nobody at the client"));
    let open = session.open(1).await;
    assert!(
        open[0]["question"]["why"]
            .as_str()
            .is_some_and(|why| why.contains("does not accept form elicitations")),
        "{}",
        open[0]
    );
    let result = call.await.expect("the call ends");
    assert!(result.contains("cancel"), "{result}");
    // The withdrawal reaches the console on its own line, not before the
    // answer: it may land after the call has ended.
    let state = session.none_open().await;
    assert_eq!(state["closed"][0]["closed"]["how"], "withdrawn", "{state}");
    let line = console_support::decisions(dir.path())
        .pop()
        .expect("a line");
    assert_eq!(
        line["reason"], "the person did not answer in time",
        "{line}"
    );
    assert!(line.get("person").is_none(), "nobody answered: {line}");
}

/// `gatehouse serve --console ADDR` hosts the console; a second instance on
/// the config attaches to it, and its question is answered there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_can_host_the_console_for_the_other_instances() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = console_support::config(dir.path(), "person = \"console\"");
    let log = dir.path().join("host.log");
    let (mut host, _) = crate::paths::spawn_listening(
        std::process::Command::new(env!("CARGO_BIN_EXE_gatehouse"))
            .args([
                "serve",
                "--listen",
                "127.0.0.1:0",
                "--console",
                "127.0.0.1:0",
                "--config",
            ])
            .arg(&config)
            .env("GATEHOUSE_CONSOLE_TOKEN", TOKEN)
            .stderr(std::fs::File::create(&log).expect("log")),
        "listening on ",
        "gatehouse serve --console starts",
    );
    let said = std::fs::read_to_string(&log).expect("log");
    let base = said
        .split("gatehouse console: ")
        .nth(1)
        .and_then(|rest| rest.split('/').take(3).collect::<Vec<_>>().join("/").into())
        .map(|base: String| base.trim_end_matches('/').to_owned())
        .unwrap_or_else(|| panic!("the console's address: {said}"));
    let other = HttpGateway::start(&config);
    let client = std::sync::Arc::new(().serve(other.transport()).await.expect("initialize"));
    let call = elicit(&client, name_form("asked through the hosted console"));
    let session = Session::login(&base, TOKEN).await.expect("login");
    let open = session.open(1).await;
    let (status, said) = session
        .answer(&json!({"id": open[0]["id"], "action": "accept", "content": {"name": "Hosted"}}))
        .await;
    assert_eq!(status.as_u16(), 200, "{said}");
    let result = call.await.expect("the call ends");
    assert!(result.contains("Hosted"), "{result}");
    let _ = host.kill();
    let _ = host.wait();
}
