//! The OpenAI-compatible model provider (`gatehouse_models`) against a
//! scripted endpoint (`gatehouse_tests::model_stub`): what it sends, what it
//! retries, how it classifies failures, and that it keeps its deadline and
//! its cancellation.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use gatehouse_core::model::{
    Cancel, CompletionRequest, FinishReason, Message, ModelError, ModelGrant, ModelReply,
};
use gatehouse_models::{ModelConfig, ModelConfigError, build_models};
use gatehouse_tests::model_stub::{
    COMPLETIONS_PATH, ModelStub, STUB_COMPLETION_TOKENS, STUB_MODEL, STUB_PROMPT_TOKENS, Step,
};
use serde_json::json;

/// The output schema the guardian sends: only `outcome` required.
const SCHEMA: &str = r#"{"type":"object","properties":{"outcome":{"enum":["allow","deny"]},"rationale":{"type":"string"}},"required":["outcome"]}"#;

/// A provider on a runtime of its own, asked from the test's thread (the
/// review's blocking thread, in gatehouse).
struct Provider {
    grant: ModelGrant,
    // Dropped after the grant: the requests run on it.
    _runtime: tokio::runtime::Runtime,
}

impl Provider {
    fn new(stub: &ModelStub, edit: impl FnOnce(&mut ModelConfig)) -> Provider {
        let mut config = ModelConfig::new(stub.base_url(), "configured-model");
        edit(&mut config);
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("a runtime");
        let mut grants = build_models(
            &BTreeMap::from([("review".to_owned(), config)]),
            runtime.handle().clone(),
        )
        .expect("the model builds");
        let grant = grants.remove("review").expect("the review grant");
        Provider {
            grant,
            _runtime: runtime,
        }
    }

    /// Asks with `budget` until the deadline; the reply and how long it took.
    fn ask(&self, request: &CompletionRequest, budget: Duration) -> (ModelReply, Duration) {
        self.ask_cancellable(request, budget, &Cancel::new())
    }

    fn ask_cancellable(
        &self,
        request: &CompletionRequest,
        budget: Duration,
        cancel: &Cancel,
    ) -> (ModelReply, Duration) {
        let started = Instant::now();
        let reply = self
            .grant
            .model()
            .complete(request, started + budget, cancel);
        (reply, started.elapsed())
    }
}

fn request() -> CompletionRequest {
    let mut request = CompletionRequest::new(vec![
        Message::system("You review tool calls. Answer with JSON."),
        Message::user("Planned action: {\"tool\":\"mcp_tool_call\",\"tool_name\":\"ls\"}"),
    ]);
    request.output_schema = Some(SCHEMA.to_owned());
    request
}

const BUDGET: Duration = Duration::from_secs(20);

#[test]
fn an_allow_verdict_is_parsed_with_tokens_model_and_finish_reason() {
    let stub = ModelStub::start(vec![Step::verdict("allow")]);
    let provider = Provider::new(&stub, |config| {
        config.max_output_tokens = Some(256);
        config.temperature = Some(0.0);
    });
    let mut asked = request();
    asked.max_output_tokens = Some(1000);
    let (reply, _) = provider.ask(&asked, BUDGET);
    assert_eq!(reply.attempts, 1);
    let completion = reply.result.expect("an answer");
    let verdict: serde_json::Value = serde_json::from_str(&completion.text).expect("JSON");
    assert_eq!(verdict["outcome"], "allow");
    assert_eq!(completion.model, STUB_MODEL);
    assert_eq!(completion.finish_reason, FinishReason::Stop);
    assert_eq!(completion.input_tokens, Some(STUB_PROMPT_TOKENS));
    assert_eq!(completion.output_tokens, Some(STUB_COMPLETION_TOKENS));

    let requests = stub.requests();
    assert_eq!(requests.len(), 1);
    let sent = &requests[0];
    assert_eq!(sent.method, "POST");
    assert_eq!(sent.path, COMPLETIONS_PATH);
    assert_eq!(sent.header("content-type"), Some("application/json"));
    assert_eq!(sent.header("authorization"), None, "no key, no header");
    let body = sent.json();
    assert_eq!(body["model"], "configured-model");
    assert_eq!(
        body["messages"],
        json!([
            {"role": "system", "content": "You review tool calls. Answer with JSON."},
            {"role": "user", "content": "Planned action: {\"tool\":\"mcp_tool_call\",\"tool_name\":\"ls\"}"},
        ])
    );
    assert_eq!(body["max_tokens"], 256, "the operator's cap wins");
    assert_eq!(body["temperature"], 0.0);
}

#[test]
fn a_server_error_then_an_answer_takes_two_attempts() {
    let stub = ModelStub::start(vec![Step::error(500, "the server had an error")]);
    let provider = Provider::new(&stub, |_| {});
    let (reply, _) = provider.ask(&request(), BUDGET);
    assert_eq!(reply.attempts, 2);
    assert!(reply.result.is_ok(), "{:?}", reply.result);
    assert_eq!(stub.request_count(), 2);
}

#[test]
fn three_server_errors_are_transient_after_three_attempts() {
    let stub = ModelStub::with_default(vec![], Step::error(503, "overloaded"));
    let provider = Provider::new(&stub, |_| {});
    let (reply, _) = provider.ask(&request(), BUDGET);
    assert_eq!(reply.attempts, 3);
    assert_eq!(
        reply.result,
        Err(ModelError::Transient("HTTP 503: overloaded".to_owned()))
    );
    assert_eq!(stub.request_count(), 3);
}

#[test]
fn rate_limiting_is_retried_then_reported_and_retry_after_is_honoured_when_it_fits() {
    // Every attempt limited: RateLimited after all of them.
    let stub = ModelStub::with_default(vec![], Step::error(429, "Rate limit reached"));
    let provider = Provider::new(&stub, |config| config.max_attempts = 2);
    let (reply, _) = provider.ask(&request(), BUDGET);
    assert_eq!(reply.attempts, 2);
    assert_eq!(
        reply.result,
        Err(ModelError::RateLimited(
            "HTTP 429: Rate limit reached".to_owned()
        ))
    );

    // A Retry-After that fits the budget is waited out.
    let limited = |seconds: &str| Step::Response {
        status: 429,
        headers: vec![("Retry-After".to_owned(), seconds.to_owned())],
        body: r#"{"error":{"message":"try later"}}"#.to_owned(),
    };
    let stub = ModelStub::start(vec![limited("1")]);
    let provider = Provider::new(&stub, |_| {});
    let (reply, took) = provider.ask(&request(), Duration::from_secs(10));
    assert_eq!(reply.attempts, 2);
    assert!(reply.result.is_ok(), "{:?}", reply.result);
    assert!(took >= Duration::from_secs(1), "waited {took:?}");

    // One that does not fit ends the call at once, rate limited.
    let stub = ModelStub::start(vec![limited("60")]);
    let provider = Provider::new(&stub, |_| {});
    let (reply, took) = provider.ask(&request(), Duration::from_secs(3));
    assert_eq!(reply.attempts, 1);
    assert!(
        matches!(&reply.result, Err(ModelError::RateLimited(message)) if message.contains("try later")),
        "{:?}",
        reply.result
    );
    assert!(took < Duration::from_secs(2), "took {took:?}");
}

#[test]
fn a_bad_request_is_rejected_at_once_with_the_providers_message() {
    let stub = ModelStub::start(vec![Step::error(
        400,
        "Unsupported parameter: 'max_tokens' is not supported with this model.",
    )]);
    let provider = Provider::new(&stub, |_| {});
    let (reply, _) = provider.ask(&request(), BUDGET);
    assert_eq!(reply.attempts, 1);
    assert_eq!(
        reply.result,
        Err(ModelError::Rejected(
            "HTTP 400: Unsupported parameter: 'max_tokens' is not supported with this model."
                .to_owned()
        ))
    );
    assert_eq!(stub.request_count(), 1, "not retried");

    // A long message is cut to 500 bytes.
    let stub = ModelStub::start(vec![Step::error(404, &"no such model ".repeat(100))]);
    let provider = Provider::new(&stub, |_| {});
    let (reply, _) = provider.ask(&request(), BUDGET);
    let Err(ModelError::Rejected(message)) = reply.result else {
        panic!("a rejection: {:?}", reply.result);
    };
    assert!(message.len() < 520 && message.ends_with('…'), "{message}");
}

#[test]
fn a_dropped_connection_is_retried() {
    let stub = ModelStub::start(vec![Step::Drop]);
    let provider = Provider::new(&stub, |_| {});
    let (reply, _) = provider.ask(&request(), BUDGET);
    assert_eq!(reply.attempts, 2);
    assert!(reply.result.is_ok(), "{:?}", reply.result);

    // Dropped every time: transient, after every attempt.
    let stub = ModelStub::with_default(vec![], Step::Drop);
    let provider = Provider::new(&stub, |config| config.max_attempts = 2);
    let (reply, _) = provider.ask(&request(), BUDGET);
    assert_eq!(reply.attempts, 2);
    assert!(
        matches!(&reply.result, Err(ModelError::Transient(_))),
        "{:?}",
        reply.result
    );
}

#[test]
fn an_unreachable_endpoint_is_transient_after_every_attempt() {
    // A port nothing listens on: bind one, note it, close it.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .expect("a port")
        .port();
    let stub = ModelStub::start(vec![]);
    let provider = Provider::new(&stub, |config| {
        config.endpoint = format!("http://127.0.0.1:{port}/v1");
    });
    let (reply, _) = provider.ask(&request(), BUDGET);
    assert_eq!(reply.attempts, 3);
    assert!(
        matches!(&reply.result, Err(ModelError::Transient(_))),
        "{:?}",
        reply.result
    );
}

#[test]
fn output_without_json_is_retried_then_fails_as_transient() {
    // Prose first, then a verdict: the second attempt answers.
    let stub = ModelStub::start(vec![Step::Raw("I think this is fine.".to_owned())]);
    let provider = Provider::new(&stub, |_| {});
    let (reply, _) = provider.ask(&request(), BUDGET);
    assert_eq!(reply.attempts, 2);
    assert!(reply.result.is_ok(), "{:?}", reply.result);

    // A body that is not a chat completion, then no choices: retried alike.
    let stub = ModelStub::start(vec![
        Step::Status(200, "<html>gateway</html>".to_owned()),
        Step::Status(200, r#"{"choices":[]}"#.to_owned()),
    ]);
    let provider = Provider::new(&stub, |_| {});
    let (reply, _) = provider.ask(&request(), BUDGET);
    assert_eq!(reply.attempts, 3);
    assert!(reply.result.is_ok(), "{:?}", reply.result);

    // Never JSON: transient after every attempt, quoting the answer.
    let stub = ModelStub::with_default(vec![], Step::Raw("allow, probably".to_owned()));
    let provider = Provider::new(&stub, |_| {});
    let (reply, _) = provider.ask(&request(), BUDGET);
    assert_eq!(reply.attempts, 3);
    assert!(
        matches!(&reply.result, Err(ModelError::Transient(message)) if message.contains("no JSON object") && message.contains("allow, probably")),
        "{:?}",
        reply.result
    );

    // Without an output schema any text is an answer.
    let stub = ModelStub::with_default(vec![], Step::Raw("allow, probably".to_owned()));
    let provider = Provider::new(&stub, |_| {});
    let mut plain = request();
    plain.output_schema = None;
    let (reply, _) = provider.ask(&plain, BUDGET);
    assert_eq!(reply.attempts, 1);
    assert_eq!(reply.result.expect("an answer").text, "allow, probably");
}

#[test]
fn a_slow_answer_past_the_deadline_times_out_near_the_deadline() {
    let stub = ModelStub::start(vec![Step::slow(
        Duration::from_secs(10),
        Step::verdict("allow"),
    )]);
    let provider = Provider::new(&stub, |_| {});
    let budget = Duration::from_millis(300);
    let (reply, took) = provider.ask(&request(), budget);
    assert_eq!(reply.result, Err(ModelError::Timeout));
    assert_eq!(reply.attempts, 1);
    assert!(took >= budget, "returned before the deadline: {took:?}");
    assert!(
        took < budget + Duration::from_secs(2),
        "returned long after the deadline: {took:?}"
    );

    // A deadline already past sends nothing.
    let (reply, _) = provider.ask(&request(), Duration::ZERO);
    assert_eq!(reply, ModelReply::failed(ModelError::Timeout, 0));
    assert_eq!(stub.request_count(), 1);
}

#[test]
fn a_backoff_that_would_pass_the_deadline_ends_the_call_with_the_last_error() {
    // Immediate 500s, ten attempts allowed, a 300 ms budget: the first
    // backoff (125 to 250 ms) fits, the second (250 to 500 ms) cannot, so the
    // call ends after two attempts with the 500, before the deadline, rather
    // than sleeping into a timeout. (On a machine so loaded that the second
    // attempt itself outlasts the budget, the deadline ends it instead.)
    let stub = ModelStub::with_default(vec![], Step::error(500, "busy"));
    let provider = Provider::new(&stub, |config| config.max_attempts = 10);
    let budget = Duration::from_millis(300);
    let (reply, took) = provider.ask(&request(), budget);
    assert!(reply.attempts <= 2, "{}", reply.attempts);
    match &reply.result {
        Err(ModelError::Transient(message)) => {
            assert_eq!(message, "HTTP 500: busy");
            assert!(took < budget, "slept past the deadline: {took:?}");
        }
        Err(ModelError::Timeout) => {
            assert!(took < budget + Duration::from_secs(2), "took {took:?}")
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn cancelling_while_waiting_returns_cancelled() {
    let stub = ModelStub::start(vec![Step::slow(
        Duration::from_secs(10),
        Step::verdict("allow"),
    )]);
    let provider = Provider::new(&stub, |_| {});
    let cancel = Cancel::new();
    let canceller = {
        let cancel = cancel.clone();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(150));
            cancel.cancel();
        })
    };
    let (reply, took) = provider.ask_cancellable(&request(), BUDGET, &cancel);
    canceller.join().expect("the canceller");
    assert_eq!(reply, ModelReply::failed(ModelError::Cancelled, 1));
    assert!(took < Duration::from_secs(3), "took {took:?}");

    // Cancelled during a backoff.
    let stub = ModelStub::with_default(vec![], Step::error(500, "busy"));
    let provider = Provider::new(&stub, |config| config.max_attempts = 10);
    let cancel = Cancel::new();
    let canceller = {
        let cancel = cancel.clone();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(400));
            cancel.cancel();
        })
    };
    let (reply, took) = provider.ask_cancellable(&request(), BUDGET, &cancel);
    canceller.join().expect("the canceller");
    assert_eq!(reply.result, Err(ModelError::Cancelled));
    assert!(reply.attempts >= 1, "{}", reply.attempts);
    assert!(took < Duration::from_secs(3), "took {took:?}");

    // Already cancelled: nothing is sent.
    let (reply, _) = provider.ask_cancellable(&request(), BUDGET, &cancel);
    assert_eq!(reply, ModelReply::failed(ModelError::Cancelled, 0));
}

#[test]
fn the_output_schema_is_sent_as_a_json_schema_response_format_unless_disabled() {
    let stub = ModelStub::start(vec![]);
    let provider = Provider::new(&stub, |_| {});
    provider
        .ask(&request(), BUDGET)
        .0
        .result
        .expect("an answer");
    let mut plain = request();
    plain.output_schema = None;
    provider.ask(&plain, BUDGET).0.result.expect("an answer");
    let requests = stub.requests();
    assert_eq!(
        requests[0].json()["response_format"],
        json!({
            "type": "json_schema",
            "json_schema": {
                "name": "answer",
                "schema": serde_json::from_str::<serde_json::Value>(SCHEMA).expect("the schema"),
                "strict": false,
            },
        })
    );
    assert!(requests[1].json().get("response_format").is_none());

    let stub = ModelStub::start(vec![]);
    let provider = Provider::new(&stub, |config| config.json_schema = false);
    provider
        .ask(&request(), BUDGET)
        .0
        .result
        .expect("an answer");
    assert!(stub.requests()[0].json().get("response_format").is_none());
}

#[test]
fn the_key_from_the_named_variable_is_sent_as_a_bearer_token_and_kept_out_of_errors() {
    const VARIABLE: &str = "GATEHOUSE_TEST_MODEL_PROVIDER_KEY_7F3A";
    const KEY: &str = "sk-test-model-provider-0123456789";
    // SAFETY: the name is this test's own; no other code reads it.
    unsafe { std::env::set_var(VARIABLE, KEY) };
    let stub = ModelStub::start(vec![Step::error(
        401,
        &format!("Incorrect API key provided: {KEY}."),
    )]);
    let provider = Provider::new(&stub, |config| {
        config.api_key_env_var = Some(VARIABLE.to_owned());
    });
    let (reply, _) = provider.ask(&request(), BUDGET);
    let (reply_ok, _) = provider.ask(&request(), BUDGET);
    assert!(reply_ok.result.is_ok(), "{:?}", reply_ok.result);
    let requests = stub.requests();
    for sent in &requests {
        assert_eq!(
            sent.header("authorization"),
            Some(format!("Bearer {KEY}").as_str())
        );
    }
    assert_eq!(
        reply.result,
        Err(ModelError::Rejected(
            "HTTP 401: Incorrect API key provided: [redacted].".to_owned()
        ))
    );
    assert_eq!(reply.attempts, 1);
    assert!(!format!("{:?}", provider.grant).contains(KEY));
}

#[test]
fn config_errors_name_the_table_and_the_field() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("a runtime");
    let build = |config: ModelConfig| {
        build_models(
            &BTreeMap::from([("review".to_owned(), config)]),
            runtime.handle().clone(),
        )
        .expect_err("an invalid table")
    };
    let good = || ModelConfig::new("https://api.example.com/v1", "gpt-test");
    let unset = "GATEHOUSE_TEST_MODEL_PROVIDER_NEVER_SET_91C2";
    for (config, expected) in [
        (
            ModelConfig::new("https://api.example.com/v1", ""),
            "[models.review] model: missing",
        ),
        (
            ModelConfig::new("api.example.com/v1", "m"),
            "[models.review] endpoint: \"api.example.com/v1\" is not a URL",
        ),
        (
            ModelConfig::new("file:///etc/passwd", "m"),
            "[models.review] endpoint: the scheme \"file\" is not supported",
        ),
        (
            ModelConfig {
                api_key_env_var: Some(unset.to_owned()),
                ..good()
            },
            &*format!(
                "[models.review] api_key_env_var: names {unset}, which is not set; set {unset} to the endpoint's API key"
            ),
        ),
        (
            ModelConfig {
                max_attempts: 0,
                ..good()
            },
            "[models.review] max_attempts: 0 is out of range",
        ),
        (
            ModelConfig {
                temperature: Some(7.0),
                ..good()
            },
            "[models.review] temperature: 7 is out of range",
        ),
    ] {
        let error = build(config);
        let message = error.to_string();
        assert!(message.starts_with(expected), "{expected}\n{message}");
        if message.contains("api_key_env_var: names") {
            assert!(matches!(error, ModelConfigError::KeyNotSet { .. }));
        }
    }
    // The same mistakes in gatehouse.toml name the file too.
    let message = gatehouse_gateway::config::Config::parse(
        "[models.review]\nendpoint = \"https://api.example.com/v1\"\n",
        std::path::Path::new("conf/gatehouse.toml"),
    )
    .expect_err("no model")
    .to_string();
    assert_eq!(
        message,
        "conf/gatehouse.toml: [models.review] model: missing; write the model's name as the endpoint knows it, e.g. model = \"gpt-4o-mini\" or \"llama3.2\""
    );
}

#[test]
fn every_table_becomes_a_grant_with_its_timeout_and_audit_setting() {
    let stub = ModelStub::start(vec![]);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("a runtime");
    let configs = BTreeMap::from([
        (
            "fast".to_owned(),
            ModelConfig {
                timeout_sec: 2.5,
                audit_prompts: true,
                ..ModelConfig::new(stub.base_url() + "/", "m1")
            },
        ),
        (
            "default".to_owned(),
            ModelConfig::new(stub.base_url(), "m2"),
        ),
    ]);
    let grants = build_models(&configs, runtime.handle().clone()).expect("the models build");
    assert_eq!(grants.keys().collect::<Vec<_>>(), ["default", "fast"]);
    assert_eq!(grants["fast"].name(), "fast");
    assert_eq!(grants["fast"].timeout(), Duration::from_millis(2500));
    assert!(grants["fast"].audit_prompts());
    assert_eq!(
        grants["default"].timeout(),
        gatehouse_core::model::DEFAULT_MODEL_TIMEOUT
    );
    assert!(!grants["default"].audit_prompts());
    // A trailing slash on the endpoint makes no double slash.
    let reply =
        grants["fast"]
            .model()
            .complete(&request(), Instant::now() + BUDGET, &Cancel::new());
    assert!(reply.result.is_ok(), "{:?}", reply.result);
    assert_eq!(stub.requests()[0].path, COMPLETIONS_PATH);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_provider_is_built_in_a_runtime_and_asked_from_a_blocking_thread() {
    let stub = ModelStub::start(vec![Step::error(500, "once"), Step::verdict("deny")]);
    let grants = build_models(
        &BTreeMap::from([("review".to_owned(), ModelConfig::new(stub.base_url(), "m"))]),
        tokio::runtime::Handle::current(),
    )
    .expect("the model builds");
    let grant = grants["review"].clone();
    let reply = tokio::task::spawn_blocking(move || {
        grant
            .model()
            .complete(&request(), Instant::now() + BUDGET, &Cancel::new())
    })
    .await
    .expect("the blocking task");
    assert_eq!(reply.attempts, 2);
    let verdict: serde_json::Value =
        serde_json::from_str(&reply.result.expect("an answer").text).expect("JSON");
    assert_eq!(verdict["outcome"], "deny");
}
