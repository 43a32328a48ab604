//! Hostile MCP servers cannot hurt gatehouse. Each test runs `hostile-server`
//! (raw JSON-RPC on stdio, `examples/servers/src/bin/hostile-server.rs`) in
//! one mode next to a well-behaved `demo-server`, in one runtime, behind the
//! router and the sandboxed guardian. The hostile server misbehaves and
//! reports every answer it got; then each request has had a clear answer (and
//! never two), each elicitation one audit line, memory stayed bounded, nothing
//! is left in flight, and the demo server still answers. One test puts a raw
//! streamable HTTP server (`gatehouse_tests::raw_http`) in its place.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use gatehouse_audit::AuditLog;
use gatehouse_core::chain::{Chain, ChainLink};
use gatehouse_gateway::calls::SessionId;
use gatehouse_gateway::router::{
    ElicitationSettings, NoAnswer, NoPerson, NotAsked, Person, Router,
};
use gatehouse_mcp::handler::IncomingElicitation;
use gatehouse_mcp::runtime::{McpRuntime, RuntimeError};
use gatehouse_mcp::server_config::RawServer;
use gatehouse_tests::raw_http::RawHttpServer;
use gatehouse_tests::result_text as text;
use gatehouse_tests::{demo_server, hostile_server, load, sandbox};
use rmcp::model::ElicitResult;
use serde_json::{Value, json};
use tokio::sync::RwLock;

/// The hostile server's configured name.
const HOSTILE: &str = "hostile";

/// The tests that measure memory hold it exclusively; the others share it,
/// so no other test allocates while one measures.
static MEMORY: RwLock<()> = RwLock::const_new(());

/// How much the resident set may grow in a memory test.
const MEMORY_BOUND: u64 = 256 * MIB;

const MIB: u64 = 1024 * 1024;

struct Setup {
    runtime: McpRuntime,
    router: Arc<Router>,
    audit: Arc<AuditLog>,
}

/// How the hostile server is reached.
enum Hostile {
    /// `hostile-server` with these arguments from the mode on.
    Stdio(Vec<String>),
    /// A [`RawHttpServer`] at this URL.
    Http(String),
}

/// How the hostile server is started and who the person is.
struct Scenario {
    /// Where the hostile server is.
    hostile: Hostile,
    person: Arc<dyn Person>,
    startup_timeout_sec: f64,
}

impl Scenario {
    fn new(mode: &[&str]) -> Scenario {
        Scenario {
            hostile: Hostile::Stdio(mode.iter().map(|arg| (*arg).to_owned()).collect()),
            person: Arc::new(NoPerson),
            startup_timeout_sec: 20.0,
        }
    }

    fn http(url: &str) -> Scenario {
        Scenario {
            hostile: Hostile::Http(url.to_owned()),
            ..Scenario::new(&[])
        }
    }

    fn person(mut self, person: Arc<dyn Person>) -> Scenario {
        self.person = person;
        self
    }

    fn startup_timeout_sec(mut self, seconds: f64) -> Scenario {
        self.startup_timeout_sec = seconds;
        self
    }

    /// Both servers in one runtime whose elicitations go to a router over
    /// the guardian (config `{}`: approval requests for the destructive tool
    /// `go` are declined; plain forms are left to the person).
    fn start(self) -> Setup {
        let sandbox = sandbox();
        let guardian = load(&sandbox, "gatehouse_guardian");
        let chain = Chain::new(vec![ChainLink::new(guardian).with_config("{}")]);
        let audit = Arc::new(AuditLog::in_memory());
        let router = Arc::new(Router::new(
            chain,
            ElicitationSettings::default(),
            audit.clone(),
            self.person,
            64,
        ));
        let hostile = match self.hostile {
            Hostile::Stdio(mode) => {
                let mut args = vec!["--mode".to_owned()];
                args.extend(mode);
                RawServer {
                    command: Some(hostile_server().display().to_string()),
                    args,
                    ..RawServer::default()
                }
            }
            Hostile::Http(url) => RawServer {
                url: Some(url),
                ..RawServer::default()
            },
        };
        let hostile = RawServer {
            startup_timeout_sec: Some(self.startup_timeout_sec),
            tool_timeout_sec: Some(120.0),
            ..hostile
        }
        .check(HOSTILE)
        .expect("valid");
        let demo = RawServer {
            command: Some(demo_server().display().to_string()),
            args: vec!["--name".into(), "demo".into()],
            startup_timeout_sec: Some(20.0),
            ..RawServer::default()
        }
        .check("demo")
        .expect("valid");
        let runtime = McpRuntime::new(vec![hostile, demo], Arc::new(router.clone()));
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
}

impl Setup {
    /// Calls `hostile__go` and parses the server's report.
    async fn go(&self) -> Value {
        let result = self
            .runtime
            .call_tool("hostile__go", None)
            .await
            .expect("hostile__go answers");
        let report = text(&result);
        serde_json::from_str(&report).unwrap_or_else(|error| panic!("{error}: {report}"))
    }

    /// The audit lines of the hostile server.
    fn audit_lines(&self) -> Vec<Value> {
        self.audit
            .lines()
            .iter()
            .map(|line| serde_json::from_str::<Value>(line).expect("JSON line"))
            .filter(|line| line["server"] == HOSTILE)
            .collect()
    }

    /// The audit lines for one request id.
    fn audited(&self, id: &Value) -> Vec<Value> {
        self.audit_lines()
            .into_iter()
            .filter(|line| line["request_id"] == *id)
            .collect()
    }

    /// The well-behaved server still answers, and nothing is left in flight.
    async fn demo_still_works(&self) {
        let result = self
            .runtime
            .call_tool(
                "demo__echo",
                json!({"text": "still here"}).as_object().cloned(),
            )
            .await
            .expect("demo__echo answers");
        assert_eq!(text(&result), "[demo] still here");
        self.goes_idle(Duration::from_secs(20)).await;
    }

    /// Within `limit`, nothing is routed and nothing waits for the person.
    async fn goes_idle(&self, limit: Duration) {
        let deadline = Instant::now() + limit;
        while self.router.in_flight() > 0 || !self.router.pending().is_empty() {
            assert!(
                Instant::now() < deadline,
                "the router is not idle after {limit:?}: {} routed, {} waiting for the person; audited so far: {:#?}",
                self.router.in_flight(),
                self.router.pending().len(),
                self.audit_lines()
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

async fn eventually(what: &str, limit: Duration, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !check() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// The responses the server got to `id`, in arrival order.
fn answers_to(report: &Value, id: &Value) -> Vec<Value> {
    report["answers"]
        .as_array()
        .expect("answers echoed")
        .iter()
        .filter(|answer| answer["id"] == *id)
        .map(|answer| answer["response"].clone())
        .collect()
}

/// The one response to `id`.
fn answer(report: &Value, id: &Value) -> Value {
    let answers = answers_to(report, id);
    assert_eq!(answers.len(), 1, "one answer to {id}: {report:#}");
    answers.into_iter().next().unwrap_or_default()
}

/// Asserts that `id` got exactly one answer, an invalid-params error whose
/// message contains each of `naming`, and that its one audit line records
/// the same error; returns the message.
fn assert_invalid_params(setup: &Setup, report: &Value, id: &Value, naming: &[&str]) -> String {
    let response = answer(report, id);
    assert_eq!(response["error"]["code"], -32602, "{id}: {response}");
    let message = response["error"]["message"].as_str().unwrap_or_default();
    for part in naming {
        assert!(message.contains(part), "{id}: {message:?} names {part:?}");
    }
    let lines = setup.audited(id);
    assert_eq!(lines.len(), 1, "one audit line for {id}: {lines:#?}");
    assert_eq!(lines[0]["mode"], "invalid");
    assert_eq!(lines[0]["answer"]["error"]["code"], -32602);
    assert_eq!(lines[0]["answer"]["error"]["message"], message);
    message.to_owned()
}

/// No id was answered more often than the server sent it, nothing was
/// accepted, and the server saw exactly as many answers as were audited.
fn assert_never_twice_never_accepted(setup: &Setup, report: &Value) {
    assert_eq!(report["over_answered"], json!([]), "{report:#}");
    assert!(
        report["kinds"].get("accept").is_none(),
        "a hostile request was accepted: {report:#}"
    );
    assert_eq!(
        report["responses"].as_u64(),
        Some(setup.audit_lines().len() as u64),
        "one audit line per answer: {report:#}"
    );
}

/// The process's resident set size, from `/proc/self/status`.
fn rss_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|rest| rest.trim().strip_suffix("kB"))
        .and_then(|kb| kb.trim().parse::<u64>().ok())
        .map(|kb| kb * 1024)
        .expect("VmRSS in kB")
}

/// Asserts the resident set grew less than [`MEMORY_BOUND`].
fn assert_memory_bounded(what: &str, before: u64, after: u64) {
    eprintln!(
        "{what}: VmRSS {:.1} MiB before, {:.1} MiB after",
        before as f64 / MIB as f64,
        after as f64 / MIB as f64
    );
    assert!(
        after.saturating_sub(before) < MEMORY_BOUND,
        "{what}: VmRSS grew from {before} to {after} bytes"
    );
}

/// Runs `go` and measures the resident set around it (see
/// [`assert_memory_bounded`]).
async fn go_measured(setup: &Setup, what: &str) -> Value {
    setup.runtime.refresh_if_dirty().await.expect("refresh");
    let before = rss_bytes();
    let started = Instant::now();
    let report = setup.go().await;
    let elapsed = started.elapsed();
    let after = rss_bytes();
    assert_memory_bounded(&format!("{what} in {elapsed:?}"), before, after);
    report
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_params_are_refused_with_invalid_params_naming_the_field() {
    let _shared = MEMORY.read().await;
    let setup = Scenario::new(&["malformed-params", "--wait-ms", "2000"]).start();
    let report = setup.go().await;
    eprintln!("malformed-params: {}", report["kinds"]);
    let not_an_object = "elicitation params must be a JSON object, not null";
    assert_invalid_params(&setup, &report, &json!("m-3"), &[not_an_object]);
    assert_invalid_params(&setup, &report, &json!("m-9"), &[not_an_object]);
    for id in ["m-4", "m-5"] {
        assert_invalid_params(&setup, &report, &json!(id), &["`message` must be a string"]);
    }
    for id in ["m-6", "m-7"] {
        assert_invalid_params(
            &setup,
            &report,
            &json!(id),
            &["`requestedSchema` must be a JSON object"],
        );
    }
    // m-1, m-2 and m-8 (params a string, an array; `_meta` a string) are
    // the next test's.
    assert_never_twice_never_accepted(&setup, &report);
    setup.demo_still_works().await;
}

/// rmcp cannot type an `elicitation/create` whose params are not an object
/// (or whose `_meta` is not one); left alone it answers an id-less -32600
/// itself, unaudited. gatehouse rescues such a request before rmcp decodes
/// it (`gatehouse_mcp::rescue`): it is refused with -32602 under its own id, naming
/// what is wrong, and audited like the other six.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn params_rmcp_cannot_parse_are_refused_with_their_id_and_audited() {
    let _shared = MEMORY.read().await;
    let setup = Scenario::new(&["malformed-params", "--wait-ms", "2000"]).start();
    let report = setup.go().await;
    assert_invalid_params(&setup, &report, &json!("m-1"), &["not a string"]);
    assert_invalid_params(&setup, &report, &json!("m-2"), &["not an array"]);
    assert_invalid_params(&setup, &report, &json!("m-8"), &["`_meta`"]);
    assert_eq!(report["stray"], json!([]), "no id-less errors");
    assert_eq!(setup.audit_lines().len(), 9);
}

/// The same rescue over streamable HTTP, where the requests arrive as SSE
/// events on the response to the tool call (`RescuingHttpClient`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn params_rmcp_cannot_parse_over_http_are_refused_with_their_id_and_audited() {
    let _shared = MEMORY.read().await;
    let server = RawHttpServer::start(vec![
        (json!("h-1"), json!("hello")),
        (json!(2), json!([1, 2])),
        (
            json!("h-3"),
            json!({"message": "Name?", "requestedSchema": {"type": "object"}, "_meta": "x"}),
        ),
        (
            json!("h-4"),
            json!({"message": "Name?", "requestedSchema": {"type": "object", "properties": {}}}),
        ),
    ])
    .await;
    let setup = Scenario::http(&server.url).start();
    let report = setup.go().await;
    assert_invalid_params(&setup, &report, &json!("h-1"), &["not a string"]);
    assert_invalid_params(&setup, &report, &json!(2), &["not an array"]);
    assert_invalid_params(&setup, &report, &json!("h-3"), &["`_meta`"]);
    // A well-formed form in the same stream is reviewed as usual: the
    // guardian leaves it to the person, and there is none.
    assert_eq!(
        answer(&report, &json!("h-4"))["result"]["action"],
        "decline"
    );
    assert_eq!(setup.audited(&json!("h-4")).len(), 1);
    assert_eq!(report["stray"], json!([]), "no id-less errors");
    assert_never_twice_never_accepted(&setup, &report);
    setup.demo_still_works().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nested_schemas_are_refused_with_invalid_params_naming_the_property() {
    let _shared = MEMORY.read().await;
    let setup = Scenario::new(&["nested-schema"]).start();
    let report = setup.go().await;
    assert_invalid_params(
        &setup,
        &report,
        &json!("n-1"),
        &["property `address`", "\"object\""],
    );
    assert_invalid_params(
        &setup,
        &report,
        &json!("n-2"),
        &["property `people`", "array of"],
    );
    assert_eq!(report["responses"], 2);
    assert_never_twice_never_accepted(&setup, &report);
    setup.demo_still_works().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_undeclared_mode_is_refused_and_bad_url_elicitations_are_not_accepted() {
    let _shared = MEMORY.read().await;
    let setup = Scenario::new(&["undeclared-url"]).start();
    let report = setup.go().await;
    eprintln!("undeclared-url: {}", report["kinds"]);
    assert_invalid_params(&setup, &report, &json!("u-3"), &["`mode` is \"telepathy\""]);
    // A `url` that is no URL (u-1) and a missing `elicitationId` (u-2) are
    // reviewed as URL elicitations today; with nobody to ask they are
    // declined (see the ignored test below for what they should get).
    for id in ["u-1", "u-2"] {
        let response = answer(&report, &json!(id));
        assert_ne!(response["result"]["action"], "accept", "{id}: {response}");
        assert_eq!(setup.audited(&json!(id)).len(), 1, "{id} audited once");
    }
    assert_eq!(report["responses"], 3);
    assert_never_twice_never_accepted(&setup, &report);
    setup.demo_still_works().await;
}

/// gatehouse only checks that `url` and `elicitationId` are strings, and
/// rmcp turns a missing `elicitationId` into "" before gatehouse sees it: a
/// URL elicitation whose `url` is no URL, or that has no `elicitationId`
/// (required before 2026-07-28), is refused with -32602 naming the field.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn url_elicitations_without_a_url_or_an_elicitation_id_are_refused() {
    let _shared = MEMORY.read().await;
    let setup = Scenario::new(&["undeclared-url"]).start();
    let report = setup.go().await;
    assert_invalid_params(&setup, &report, &json!("u-1"), &["`url`"]);
    assert_invalid_params(&setup, &report, &json!("u-2"), &["`elicitationId`"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ten_megabyte_message_is_answered_in_bounded_memory() {
    let _exclusive = MEMORY.write().await;
    let setup = Scenario::new(&["huge", "10485760"]).start();
    let report = go_measured(&setup, "huge (10 MiB message)").await;
    assert_eq!(report["message_bytes"], 10_485_760);
    let response = answer(&report, &json!(1));
    assert_eq!(response["result"]["action"], "decline", "{response}");
    let lines = setup.audited(&json!(1));
    assert_eq!(lines.len(), 1);
    // The guardian decided it, or failed on it (its deadline, under load)
    // and the chain failed closed: either way it was reviewed.
    assert!(
        lines[0]["decided_by"] == "guest" || lines[0]["decided_by"] == "failure",
        "{:#}",
        lines[0]
    );
    assert_eq!(lines[0]["steps"][0]["module"], "gatehouse_guardian");
    assert!(
        lines[0].to_string().len() < 64 * 1024,
        "the audit line does not carry the message"
    );
    assert_never_twice_never_accepted(&setup, &report);
    setup.demo_still_works().await;
}

/// A line over rmcp's 16 MiB cap is discarded by the transport while it is
/// read: the connection survives and memory stays bounded, but the request
/// gets no answer and no audit line (like the unparsable params above).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_over_the_line_cap_is_dropped_in_bounded_memory() {
    let _exclusive = MEMORY.write().await;
    let setup = Scenario::new(&["huge", "17825792", "--wait-ms", "3000"]).start();
    let report = go_measured(&setup, "huge (17 MiB message)").await;
    eprintln!("over the line cap: {} answers", report["responses"]);
    assert_never_twice_never_accepted(&setup, &report);
    let snapshot = setup.runtime.snapshot();
    let connection = snapshot.connection(HOSTILE).expect("still connected");
    assert!(!connection.is_closed(), "the connection survives");
    setup.demo_still_works().await;
}

/// How many elicitations the burst sends: `GATEHOUSE_BURST_N`, else
/// [`BURST_N`].
fn burst_n() -> usize {
    std::env::var("GATEHOUSE_BURST_N")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(BURST_N)
}

const BURST_N: usize = 10_000;

/// While the burst is queued (`busy` elicitations in flight, or after 10 s
/// whatever the count), the demo server's own elicitation (`delete_branch`,
/// which the guardian declines) is reviewed too; returns how long its call
/// took.
async fn demo_review_during_burst(setup: &Setup, busy: usize) -> Duration {
    let deadline = Instant::now() + Duration::from_secs(10);
    while setup.router.in_flight() < busy && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let started = Instant::now();
    let result = setup
        .runtime
        .call_tool(
            "demo__delete_branch",
            json!({"branch": "main"}).as_object().cloned(),
        )
        .await
        .expect("demo__delete_branch answers");
    let answer = text(&result);
    assert!(answer.contains("answered: decline"), "{answer}");
    started.elapsed()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_is_reviewed_and_answered_once_per_request_in_bounded_memory() {
    burst(burst_n()).await;
}

/// `max_in_flight_per_server` (default 256) bounds what one server may have
/// in flight: beyond it, elicitations are declined at once, unreviewed, and
/// audited, so a flood cannot take unbounded memory (unbounded, each queued
/// one held about 11 KiB: 30,000 took ~320 MiB) or starve other servers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_of_thirty_thousand_stays_in_bounded_memory() {
    burst(30_000).await;
}

/// `n` elicitations back to back: each reviewed by the guardian (or
/// declined at once past `max_in_flight_per_server`), answered once and
/// audited once, in bounded memory, while the demo server's own review still
/// goes through.
async fn burst(n: usize) {
    let _exclusive = MEMORY.write().await;
    // The server waits for every answer however long it takes: correctness
    // does not depend on speed (the tool timeout, 120 s, bounds the test).
    let count = n.to_string();
    let setup = Scenario::new(&["burst", &count, "--wait-ms", "600000"]).start();
    setup.runtime.refresh_if_dirty().await.expect("refresh");
    let before = rss_bytes();
    let started = Instant::now();
    let (report, demo_latency) = tokio::join!(
        setup.go(),
        demo_review_during_burst(
            &setup,
            (n / 10).clamp(
                1,
                gatehouse_gateway::router::DEFAULT_MAX_IN_FLIGHT_PER_SERVER / 2
            )
        )
    );
    let elapsed = started.elapsed();
    let after = rss_bytes();
    assert_memory_bounded(&format!("burst of {n}"), before, after);
    eprintln!(
        "burst of {n}: sent in {} ms, all answered after {} ms (call {elapsed:?}): {}; \
         meanwhile the demo server's review took {demo_latency:?}",
        report["send_ms"], report["collect_ms"], report["kinds"]
    );
    assert_eq!(report["requests"], n);
    assert_eq!(report["responses"], n, "{}", report["never_answered"]);
    assert_eq!(report["kinds"], json!({"decline": n}));
    assert_eq!(report["under_answered"], json!([]));
    let lines = setup.audit_lines();
    assert_eq!(lines.len(), n, "one audit line per elicitation");
    let ids: std::collections::BTreeSet<String> = lines
        .iter()
        .map(|line| line["request_id"].to_string())
        .collect();
    assert_eq!(ids.len(), n, "no request audited twice");
    // Reviewed by the guardian, or, past max_in_flight_per_server, declined
    // at once by policy.
    let over_cap = lines
        .iter()
        .filter(|line| line["decided_by"] == "policy")
        .count();
    assert!(
        lines
            .iter()
            .all(|line| line["decided_by"] == "guest" || line["decided_by"] == "policy"),
        "every request was reviewed or refused over the cap"
    );
    eprintln!("burst of {n}: {over_cap} declined over max_in_flight_per_server");
    assert_never_twice_never_accepted(&setup, &report);
    assert!(demo_latency < Duration::from_secs(60), "{demo_latency:?}");
    setup.demo_still_works().await;
}

/// Counts of the answers per id, from the report.
fn answer_counts(report: &Value) -> BTreeMap<String, usize> {
    let mut counts = BTreeMap::new();
    for answer in report["answers"].as_array().expect("answers echoed") {
        *counts
            .entry(answer["id"].as_str().unwrap_or_default().to_owned())
            .or_default() += 1;
    }
    counts
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn duplicate_ids_are_never_answered_twice_and_each_request_is_audited() {
    let _shared = MEMORY.read().await;
    // Nobody to ask: forms are declined without waiting.
    let setup = Scenario::new(&["duplicate-ids", "--wait-ms", "2000"]).start();
    let report = setup.go().await;
    let counts = answer_counts(&report);
    eprintln!("duplicate-ids (no person): answers per id {counts:?}");
    for id in ["dup-review", "dup-person", "dup-mixed"] {
        let answered = counts.get(id).copied().unwrap_or(0);
        // rmcp keeps one slot per request id in flight, so the server hears
        // one answer per id; never more than it sent.
        assert!((1..=2).contains(&answered), "{id}: {answered} answers");
        assert_eq!(setup.audited(&json!(id)).len(), 2, "{id}: both audited");
    }
    assert_eq!(report["over_answered"], json!([]), "{report:#}");
    assert!(report["kinds"].get("accept").is_none(), "{report:#}");
    setup.demo_still_works().await;
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

/// With a person to wait for: rmcp keeps one response slot per id, so the
/// later request takes it. The router registers every pushed request on
/// arrival; a reuse while the earlier is in flight cancels the earlier (if
/// it waits for the person) and answers the later `cancel` at once, so the
/// server hears `cancel` and nothing is left waiting.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reused_id_never_leaves_an_elicitation_waiting_for_the_person() {
    let _shared = MEMORY.read().await;
    let setup = Scenario::new(&["duplicate-ids", "--wait-ms", "2000"])
        .person(Arc::new(Silent))
        .start();
    let report = setup.go().await;
    assert_eq!(
        answer(&report, &json!("dup-person"))["result"]["action"],
        "cancel"
    );
    // Anything left waiting would wait for the person's 300 s: 20 s tells
    // that from a busy machine (5 s once failed under CI's load).
    setup.goes_idle(Duration::from_secs(20)).await;
    assert_eq!(setup.audit_lines().len(), 6, "every request audited");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_exits_mid_review_is_audited_once_and_reconnected() {
    let _shared = MEMORY.read().await;
    let setup = Scenario::new(&["disconnect-mid-review"]).start();
    setup.runtime.refresh_if_dirty().await.expect("refresh");
    assert_eq!(setup.runtime.connects(), 2);
    let error = setup
        .runtime
        .call_tool("hostile__go", None)
        .await
        .expect_err("the server exited instead of answering");
    eprintln!("disconnect-mid-review: {error}");
    assert!(
        matches!(&error, RuntimeError::Call(inner) if inner.server() == HOSTILE),
        "{error}"
    );
    // The runtime sees the server gone...
    let snapshot = setup.runtime.snapshot();
    let gone = snapshot.connection(HOSTILE).expect("the old connection");
    eventually("the connection to close", Duration::from_secs(20), || {
        gone.is_closed()
    })
    .await;
    // ...and the elicitation it left behind was decided and audited once.
    setup.goes_idle(Duration::from_secs(20)).await;
    let lines = setup.audit_lines();
    assert_eq!(lines.len(), 1, "{lines:#?}");
    assert_eq!(lines[0]["request_id"], "last-words");
    assert_eq!(lines[0]["decided_by"], "guest");
    // The next refresh reconnects it (and only it).
    assert!(
        setup.runtime.refresh_if_dirty().await.expect("refresh"),
        "a closed connection makes the runtime dirty"
    );
    assert_eq!(setup.runtime.connects(), 3);
    let snapshot = setup.runtime.snapshot();
    let fresh = snapshot.connection(HOSTILE).expect("reconnected");
    assert!(!fresh.is_closed());
    assert!(snapshot.tool("hostile__go").is_some());
    assert_eq!(setup.audit_lines().len(), 1, "still one audit line");
    setup.demo_still_works().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_never_lists_its_tools_times_out_and_is_reported() {
    let _shared = MEMORY.read().await;
    let setup = Scenario::new(&["never-list"])
        .startup_timeout_sec(1.0)
        .start();
    let started = Instant::now();
    setup
        .runtime
        .refresh_if_dirty()
        .await
        .expect("an optional server does not fail the refresh");
    let elapsed = started.elapsed();
    let snapshot = setup.runtime.snapshot();
    eprintln!(
        "never-list: refresh took {elapsed:?}; {:?}",
        snapshot.failures()
    );
    assert!(elapsed >= Duration::from_secs(1), "{elapsed:?}");
    let failure = snapshot.failures().get(HOSTILE).expect("reported");
    assert!(failure.contains("`hostile`"), "{failure}");
    assert!(failure.contains("tools/list"), "{failure}");
    assert!(failure.contains("timed out"), "{failure}");
    assert!(!snapshot.failures().contains_key("demo"));
    assert!(snapshot.tool("demo__echo").is_some());
    assert!(snapshot.tools().iter().all(|entry| entry.server == "demo"));
    let missing = setup.runtime.call_tool("hostile__go", None).await;
    assert!(
        matches!(missing, Err(RuntimeError::UnknownTool(_))),
        "{missing:?}"
    );
    setup.demo_still_works().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_on_the_wire_is_survived_and_the_server_still_served() {
    let _shared = MEMORY.read().await;
    let setup = Scenario::new(&["garbage"]).start();
    setup.runtime.refresh_if_dirty().await.expect("refresh");
    let snapshot = setup.runtime.snapshot();
    assert!(snapshot.failures().is_empty(), "{:?}", snapshot.failures());
    assert!(snapshot.tool("hostile__go").is_some(), "tools listed");
    let report = setup.go().await;
    eprintln!("garbage: host replies {}", report["stray"]);
    let response = answer(&report, &json!("after-garbage"));
    assert_eq!(response["result"]["action"], "decline", "{response}");
    // What gatehouse said to the garbage: -32600 (id-less) to JSON that is
    // not a message, -32601 to the unknown method; nothing to non-JSON or to
    // responses to ids it never used.
    let stray = report["stray"].as_array().expect("stray");
    assert!(
        stray.iter().all(|reply| reply.get("error").is_some()),
        "{stray:?}"
    );
    assert!(
        stray
            .iter()
            .any(|reply| reply["id"] == "g-1" && reply["error"]["code"] == -32601),
        "{stray:?}"
    );
    assert_never_twice_never_accepted(&setup, &report);
    assert!(!snapshot.connection(HOSTILE).expect("open").is_closed());
    setup.demo_still_works().await;
}

/// A server that writes 200 MiB of invalid UTF-8 to stderr without a
/// newline: gatehouse drains it line-capped (8 KiB kept, the rest discarded
/// unbuffered) and lossy, so memory stays bounded, the server is never
/// blocked on a full pipe, and it goes on serving. (Read as whole UTF-8
/// lines, the flood took 604 MiB and the first invalid byte stopped the
/// draining.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stderr_flood_without_newlines_is_drained_in_bounded_memory() {
    const STDERR_BOUND: u64 = 64 * MIB;
    let _exclusive = MEMORY.write().await;
    let setup = Scenario::new(&["stderr-flood"]).start();
    setup.runtime.refresh_if_dirty().await.expect("refresh");
    let before = rss_bytes();
    let started = Instant::now();
    let report = setup.go().await;
    let elapsed = started.elapsed();
    let after = rss_bytes();
    eprintln!(
        "stderr-flood in {elapsed:?}: VmRSS {:.1} MiB before, {:.1} MiB after",
        before as f64 / MIB as f64,
        after as f64 / MIB as f64
    );
    assert!(
        after.saturating_sub(before) < STDERR_BOUND,
        "VmRSS grew from {before} to {after} bytes"
    );
    assert_eq!(report["stderr_bytes"], 200 * MIB);
    // After the flood the server still asks, and is answered and audited.
    let response = answer(&report, &json!(1));
    assert_eq!(response["result"]["action"], "decline", "{response}");
    assert_eq!(setup.audited(&json!(1)).len(), 1);
    assert_never_twice_never_accepted(&setup, &report);
    let snapshot = setup.runtime.snapshot();
    assert!(!snapshot.connection(HOSTILE).expect("connected").is_closed());
    setup.demo_still_works().await;
}

/// Under protocol 2026-07-28 (SEP-2260) a server may ask only while a
/// request of gatehouse's to it is in flight. Twenty `elicitation/create`s
/// under 1 MiB ids after the call is over: each is refused with -32602
/// under its own id before rmcp or the router sees it, and each still gets
/// its one audit line (in the router's log), its id cut; the servers go on
/// serving.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unsolicited_elicitations_under_2026_07_28_are_refused_and_each_audited_once() {
    const COUNT: usize = 20;
    let _shared = MEMORY.read().await;
    let count = COUNT.to_string();
    let setup = Scenario::new(&[
        "unsolicited",
        &count,
        "--id-bytes",
        "1048576",
        "--protocol",
        "2026-07-28",
    ])
    .start();
    let first = setup.go().await;
    assert_eq!(first["mode"], "unsolicited");
    eventually("every refusal audited", Duration::from_secs(30), || {
        setup.audit_lines().len() >= COUNT
    })
    .await;
    let second = setup.go().await;
    assert_eq!(
        second["unsolicited"],
        json!({"sent": COUNT, "answered": COUNT, "kinds": {"error -32602": COUNT}}),
        "{second:.2000}"
    );
    let lines = setup.audit_lines();
    assert_eq!(lines.len(), COUNT, "one line each, nothing else");
    for line in &lines {
        assert_eq!(line["decided_by"], "policy");
        assert_eq!(line["answer"]["error"]["code"], -32602);
        assert!(
            line["reason"]
                .as_str()
                .is_some_and(|reason| reason.contains("SEP-2260")),
            "{line:.400}"
        );
        let id = line["request_id"].as_str().unwrap_or_default();
        assert!(id.starts_with("u-") && id.contains("…[cut: "), "{id:.300}");
    }
    assert_eq!(setup.router.in_flight(), 0, "none reached the router");
    setup.demo_still_works().await;
}
