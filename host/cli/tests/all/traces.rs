//! Traces over OTLP: `gatehouse serve` with `[traces]` exports one forwarded
//! call's spans to a receiver started here, which decodes them with the
//! official protobuf definitions (`opentelemetry-proto`): the upstream
//! request (continuing the client's `traceparent`), the call to the
//! server, the elicitation, the guardian's review and its model call, in
//! one tree; the server is sent the trace context of its call.
//!
//! No OTLP collector is packaged in the registries this project installs
//! from (the OpenTelemetry Collector is a Go binary released on GitHub),
//! so the receiver is this test's: an HTTP endpoint at `/v1/traces` that
//! accepts what a collector accepts (protobuf `ExportTraceServiceRequest`).

use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicUsize;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::any_value;
use opentelemetry_proto::tonic::trace::v1::Span;
use opentelemetry_proto::tonic::trace::v1::span::SpanKind;
use prost::Message;
use serde_json::{Value, json};

use crate::gateway::{Client, audit, call, stdio_client};
use crate::model_stub::{ModelStub, Step};
use crate::paths::{demo_server, gatehouse, guest};
use crate::tool_result::result_text as text;

/// The client's trace: its id and the span the request was sent under.
const TRACE_ID: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const CLIENT_SPAN: &str = "00f067aa0ba902b7";

/// An OTLP/HTTP receiver on loopback: the spans of every export, and
/// the content types they came with.
struct Receiver {
    address: std::net::SocketAddr,
    spans: Arc<Mutex<Vec<(Span, String)>>>,
    content_types: Arc<Mutex<Vec<String>>>,
}

impl Receiver {
    async fn start() -> Receiver {
        let spans: Arc<Mutex<Vec<(Span, String)>>> = Arc::default();
        let content_types: Arc<Mutex<Vec<String>>> = Arc::default();
        let (kept, types) = (spans.clone(), content_types.clone());
        let app = axum::Router::new().route(
            "/v1/traces",
            axum::routing::post(
                move |headers: axum::http::HeaderMap, body: axum::body::Bytes| {
                    let (kept, types) = (kept.clone(), types.clone());
                    async move {
                        let content_type = headers
                            .get("content-type")
                            .and_then(|value| value.to_str().ok())
                            .unwrap_or_default()
                            .to_owned();
                        types.lock().expect("types").push(content_type);
                        let Ok(request) = ExportTraceServiceRequest::decode(body) else {
                            return (axum::http::StatusCode::BAD_REQUEST, Vec::new());
                        };
                        let mut kept = kept.lock().expect("spans");
                        for resource in request.resource_spans {
                            let service = resource
                                .resource
                                .iter()
                                .flat_map(|resource| &resource.attributes)
                                .find(|attribute| attribute.key == "service.name")
                                .and_then(|attribute| attribute.value.as_ref())
                                .map(string_of)
                                .unwrap_or_default();
                            for scope in resource.scope_spans {
                                for span in scope.spans {
                                    kept.push((span, service.clone()));
                                }
                            }
                        }
                        (
                            axum::http::StatusCode::OK,
                            ExportTraceServiceResponse::default().encode_to_vec(),
                        )
                    }
                },
            ),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the receiver");
        let address = listener.local_addr().expect("address");
        tokio::spawn(async move { axum::serve(listener, app).await });
        Receiver {
            address,
            spans,
            content_types,
        }
    }

    fn endpoint(&self) -> String {
        format!("http://{}", self.address)
    }

    /// The spans received once `count` have come (the exporter batches;
    /// `gatehouse serve` sends the rest when it ends), at most 30 s.
    async fn spans(&self, count: usize) -> Vec<Span> {
        for _ in 0..300 {
            if self.spans.lock().expect("spans").len() >= count {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let spans = self.spans.lock().expect("spans");
        assert!(
            spans.iter().all(|(_, service)| service == "gatehouse"),
            "service.name is not gatehouse"
        );
        spans.iter().map(|(span, _)| span.clone()).collect()
    }
}

fn string_of(value: &opentelemetry_proto::tonic::common::v1::AnyValue) -> String {
    match &value.value {
        Some(any_value::Value::StringValue(text)) => text.clone(),
        Some(any_value::Value::IntValue(number)) => number.to_string(),
        Some(any_value::Value::BoolValue(flag)) => flag.to_string(),
        Some(any_value::Value::DoubleValue(number)) => number.to_string(),
        other => format!("{other:?}"),
    }
}

/// A span's attribute as text, if it has it.
fn attribute(span: &Span, key: &str) -> Option<String> {
    span.attributes
        .iter()
        .find(|attribute| attribute.key == key)
        .and_then(|attribute| attribute.value.as_ref())
        .map(string_of)
}

/// Each span on a line: name, trace id, span id, parent id.
fn summary(spans: &[Span]) -> String {
    spans
        .iter()
        .map(|span| {
            format!(
                "{} trace={} span={} parent={}",
                span.name,
                hex::encode(&span.trace_id),
                hex::encode(&span.span_id),
                hex::encode(&span.parent_span_id)
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The spans of the call's trace (the one `tools/call` span's), after
/// checking that the contract check of the module at start-up is a trace
/// of its own: a root with every one of the kit's reviews under it.
fn call_trace(spans: &[Span]) -> Vec<Span> {
    let check = named_span(spans, "contract check gatehouse_model_guardian");
    // The only spans without a parent here: the check and the upstream
    // request (whose parent may be the client's).
    let ids: std::collections::BTreeSet<&[u8]> =
        spans.iter().map(|span| span.span_id.as_slice()).collect();
    let mut roots: Vec<&str> = spans
        .iter()
        .filter(|span| !ids.contains(span.parent_span_id.as_slice()))
        .map(|span| span.name.as_str())
        .collect();
    roots.sort_unstable();
    assert_eq!(
        roots,
        [
            "contract check gatehouse_model_guardian",
            "tools/call git__delete_branch"
        ]
    );
    assert!(check.parent_span_id.is_empty(), "{}", summary(spans));
    assert_eq!(attribute(check, "gatehouse.outcome").as_deref(), Some("ok"));
    let kit: Vec<&Span> = spans
        .iter()
        .filter(|span| span.trace_id == check.trace_id)
        .collect();
    assert!(kit.len() > 10, "{}", summary(spans));
    assert!(
        kit.iter()
            .all(|span| span.span_id == check.span_id || !span.parent_span_id.is_empty()),
        "{}",
        summary(spans)
    );
    let call = named_span(spans, "tools/call git__delete_branch");
    spans
        .iter()
        .filter(|span| span.trace_id == call.trace_id)
        .cloned()
        .collect()
}

/// Asserts no span's name or attribute value holds any of `needles`.
fn assert_nowhere(spans: &[Span], needles: &[&str]) {
    for span in spans {
        let values = span
            .attributes
            .iter()
            .map(|attribute| attribute.value.as_ref().map(string_of).unwrap_or_default());
        for text in std::iter::once(span.name.clone()).chain(values) {
            for needle in needles {
                assert!(
                    !text.contains(needle),
                    "{needle:?} on {}: {text}",
                    span.name
                );
            }
        }
    }
}

/// Asserts each span's attribute `key` is `value`.
fn assert_attributes(expected: &[(&Span, &str, &str)]) {
    for (span, key, value) in expected {
        assert_eq!(
            attribute(span, key).as_deref(),
            Some(*value),
            "{}: {key}",
            span.name
        );
    }
}

/// The one span named `name`.
fn named_span<'a>(spans: &'a [Span], name: &str) -> &'a Span {
    let found: Vec<&Span> = spans.iter().filter(|span| span.name == name).collect();
    assert_eq!(
        found.len(),
        1,
        "{name}: {:?}",
        spans.iter().map(|span| &span.name).collect::<Vec<_>>()
    );
    found[0]
}

/// demo-server `git` (logging each call's `_meta` to `meta_log`), the
/// model guardian granted the stub at `model`, and `traces` as the
/// `[traces]` section.
fn config(dir: &Path, model: &str, meta_log: &Path, traces: &str) -> PathBuf {
    let path = dir.join("gatehouse.toml");
    std::fs::write(
        &path,
        format!(
            "[mcp_servers.git]\ncommand = {server:?}\nargs = [\"--name\", \"git\", \"--meta-log\", {log:?}]\n\n\
             [models.reviewer]\nendpoint = {model:?}\nmodel = \"small\"\ntimeout_sec = 30\n\n\
             [[review.modules]]\npath = {guardian:?}\nmodel = \"reviewer\"\n\
             config = {{ policy = \"Deleting the main branch is never allowed.\" }}\n\n\
             [elicitations]\naudit_log = \"audit.jsonl\"\n\n{traces}\n",
            server = demo_server().display().to_string(),
            log = meta_log.display().to_string(),
            guardian = guest("gatehouse_model_guardian").display().to_string(),
        ),
    )
    .expect("write config");
    path
}

/// Calls `git__delete_branch` on `scratch` with `meta` as the request's
/// `_meta`, through `gatehouse serve --config config`, until the gateway
/// has ended; returns the tool's text.
async fn delete_scratch(config: &Path, meta: Value) -> String {
    let client = stdio_client(
        config,
        Client {
            elicitation: true,
            content: None,
            asked: Arc::new(AtomicUsize::new(0)),
        },
    )
    .await;
    let mut request = call("git__delete_branch", json!({"branch": "scratch"}));
    request.meta = Some(serde_json::from_value(meta).expect("a _meta object"));
    let result = client.call_tool(request).await.expect("tool call");
    client.cancel().await.expect("close");
    text(&result)
}

/// The `_meta` lines demo-server logged.
fn metas(log: &Path) -> Vec<Value> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .map(|line| serde_json::from_str(line).expect("JSON line"))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_reviewed_call_is_one_trace_continued_from_the_client_and_carried_to_the_server() {
    let receiver = Receiver::start().await;
    let stub = ModelStub::start(vec![Step::verdict("allow")]);
    let dir = tempfile::tempdir().expect("tempdir");
    let meta_log = dir.path().join("meta.jsonl");
    let traces = format!("[traces]\nendpoint = {:?}\n", receiver.endpoint());
    let config = config(dir.path(), &stub.base_url(), &meta_log, &traces);
    let traceparent = format!("00-{TRACE_ID}-{CLIENT_SPAN}-01");
    let shown = delete_scratch(
        &config,
        json!({"traceparent": traceparent, "tracestate": "vendor=opaque"}),
    )
    .await;
    assert!(shown.contains("answered: accept"), "{shown}");
    let spans = call_trace(&receiver.spans(6).await);
    assert_eq!(spans.len(), 5, "{}", summary(&spans));
    assert!(
        receiver
            .content_types
            .lock()
            .expect("types")
            .iter()
            .all(|content_type| content_type == "application/x-protobuf")
    );

    // One trace: the client's.
    for span in &spans {
        assert_eq!(hex::encode(&span.trace_id), TRACE_ID, "{}", span.name);
    }
    let upstream = named_span(&spans, "tools/call git__delete_branch");
    let downstream = named_span(&spans, "tools/call delete_branch");
    let elicitation = named_span(&spans, "elicitation");
    let review = named_span(&spans, "review gatehouse_model_guardian");
    let model = named_span(&spans, "model call reviewer");

    // The tree: client → upstream request → (downstream call, elicitation
    // → review → model call).
    assert_eq!(hex::encode(&upstream.parent_span_id), CLIENT_SPAN);
    assert_eq!(upstream.kind, SpanKind::Server as i32);
    assert_eq!(downstream.parent_span_id, upstream.span_id);
    assert_eq!(downstream.kind, SpanKind::Client as i32);
    assert_eq!(elicitation.parent_span_id, upstream.span_id);
    assert_eq!(review.parent_span_id, elicitation.span_id);
    assert_eq!(model.parent_span_id, review.span_id);
    assert_eq!(model.kind, SpanKind::Client as i32);
    // Each child lies within its parent's time.
    for (child, parent) in [
        (downstream, upstream),
        (elicitation, upstream),
        (review, elicitation),
        (model, review),
    ] {
        assert!(
            child.start_time_unix_nano >= parent.start_time_unix_nano
                && child.end_time_unix_nano <= parent.end_time_unix_nano,
            "{} [{}, {}] is not within {} [{}, {}]",
            child.name,
            child.start_time_unix_nano,
            child.end_time_unix_nano,
            parent.name,
            parent.start_time_unix_nano,
            parent.end_time_unix_nano,
        );
    }

    // Attributes: server, tool, module digest, outcome.
    let line = &audit(dir.path())[0];
    let digest = line["steps"][0]["sha256"].as_str().expect("digest");
    assert_attributes(&[
        (upstream, "mcp.method.name", "tools/call"),
        (upstream, "gatehouse.server", "git"),
        (upstream, "gatehouse.call.name", "git__delete_branch"),
        (upstream, "gatehouse.outcome", "ok"),
        (downstream, "gatehouse.server", "git"),
        (downstream, "gatehouse.outcome", "ok"),
        (elicitation, "gatehouse.server", "git"),
        (elicitation, "gatehouse.elicitation.mode", "form"),
        (elicitation, "gatehouse.decided_by", "guest"),
        (elicitation, "gatehouse.action", "accept"),
        (review, "gatehouse.module", "gatehouse_model_guardian"),
        (review, "gatehouse.module.digest", digest),
        (review, "gatehouse.outcome", "accept"),
        (model, "gatehouse.model", "reviewer"),
        (model, "gatehouse.model.attempts", "1"),
        (model, "gatehouse.outcome", "answered"),
    ]);
    // No content unless the operator opts in: neither the form's message
    // nor the call's arguments.
    assert_nowhere(&spans, &["scratch", "Allow delete_branch"]);

    // The server was sent its call's trace context.
    let metas = metas(&meta_log);
    assert_eq!(metas.len(), 1, "{metas:?}");
    assert_eq!(
        metas[0]["meta"]["traceparent"],
        format!("00-{TRACE_ID}-{}-01", hex::encode(&downstream.span_id)),
        "{metas:?}"
    );
    assert_eq!(metas[0]["meta"]["tracestate"], "vendor=opaque");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forged_traceparent_starts_a_trace_of_its_own_and_content_is_opt_in() {
    let receiver = Receiver::start().await;
    let stub = ModelStub::start(vec![Step::verdict("allow")]);
    let dir = tempfile::tempdir().expect("tempdir");
    let meta_log = dir.path().join("meta.jsonl");
    let traces = format!(
        "[traces]\nendpoint = {:?}\ncontent = true\nservice_name = \"gatehouse\"\n",
        receiver.endpoint()
    );
    let config = config(dir.path(), &stub.base_url(), &meta_log, &traces);
    // Not W3C: a version byte of ff, a trace id of zeros, a line feed.
    let forged = "ff-00000000000000000000000000000000-00f067aa0ba902b7-01\n";
    let shown = delete_scratch(&config, json!({"traceparent": forged})).await;
    assert!(shown.contains("answered: accept"), "{shown}");
    let spans = call_trace(&receiver.spans(6).await);
    let upstream = named_span(&spans, "tools/call git__delete_branch");
    assert!(
        upstream.parent_span_id.is_empty(),
        "a forged parent was taken"
    );
    let trace = &upstream.trace_id;
    assert_ne!(hex::encode(trace), "0".repeat(32));
    assert!(
        spans.iter().all(|span| &span.trace_id == trace),
        "{}",
        summary(&spans)
    );
    // Opted in: the arguments and the form's message are on the spans.
    assert_eq!(
        attribute(upstream, "gatehouse.call.arguments").as_deref(),
        Some(r#"{"branch":"scratch"}"#)
    );
    let elicitation = named_span(&spans, "elicitation");
    assert!(
        attribute(elicitation, "gatehouse.elicitation.message")
            .is_some_and(|message| message.contains("delete_branch on scratch")),
        "{elicitation:?}"
    );
    // The server still gets a valid context: its call's, in the new trace.
    let metas = metas(&meta_log);
    let downstream = named_span(&spans, "tools/call delete_branch");
    assert_eq!(
        metas[0]["meta"]["traceparent"],
        format!(
            "00-{}-{}-01",
            hex::encode(trace),
            hex::encode(&downstream.span_id)
        )
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_wait_for_the_person_is_a_span_of_the_elicitation() {
    let receiver = Receiver::start().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let config = crate::gateway::config_with(
        dir.path(),
        "{}",
        &format!("\n[traces]\nendpoint = {:?}\n", receiver.endpoint()),
    );
    let asked = Arc::new(AtomicUsize::new(0));
    let client = stdio_client(
        &config,
        Client {
            elicitation: true,
            content: Some(json!({"name": "Ada"})),
            asked: asked.clone(),
        },
    )
    .await;
    // The guardian defers a form that is no approval: the person answers.
    let named = client
        .call_tool(call("git__ask_name", json!({})))
        .await
        .expect("ask_name");
    client.cancel().await.expect("close");
    assert!(text(&named).contains("hello Ada"), "{}", text(&named));
    assert_eq!(asked.load(std::sync::atomic::Ordering::SeqCst), 1);
    let all = receiver.spans(7).await;
    let upstream = named_span(&all, "tools/call git__ask_name");
    let spans: Vec<Span> = all
        .iter()
        .filter(|span| span.trace_id == upstream.trace_id)
        .cloned()
        .collect();
    assert_eq!(spans.len(), 5, "{}", summary(&spans));
    let elicitation = named_span(&spans, "elicitation");
    let review = named_span(&spans, "review gatehouse_guardian");
    let person = named_span(&spans, "person");
    assert_eq!(review.parent_span_id, elicitation.span_id);
    assert_eq!(person.parent_span_id, elicitation.span_id);
    assert!(person.start_time_unix_nano >= review.end_time_unix_nano);
    assert!(person.end_time_unix_nano <= elicitation.end_time_unix_nano);
    assert_attributes(&[
        (review, "gatehouse.outcome", "defer"),
        (person, "gatehouse.person.channel", "client"),
        (person, "gatehouse.action", "accept"),
        (elicitation, "gatehouse.decided_by", "person"),
        (elicitation, "gatehouse.person.channel", "client"),
        (elicitation, "gatehouse.action", "accept"),
    ]);
    // What the person typed is content: not on any span.
    assert_nowhere(&all, &["Ada"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resource_uri_is_content_and_an_unknown_name_is_never_recorded() {
    let receiver = Receiver::start().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("gatehouse.toml");
    std::fs::write(
        &path,
        format!(
            "[mcp_servers.git]\ncommand = {server:?}\nargs = [\"--name\", \"git\", \"--resource\", \"demo://token-s3cr3t\"]\n\n\
             [review]\nverify_contract = false\n\n[traces]\nendpoint = {endpoint:?}\n",
            server = demo_server().display().to_string(),
            endpoint = receiver.endpoint(),
        ),
    )
    .expect("write config");
    let client = stdio_client(
        &path,
        Client {
            elicitation: true,
            content: None,
            asked: Arc::new(AtomicUsize::new(0)),
        },
    )
    .await;
    let read = client
        .read_resource(rmcp::model::ReadResourceRequestParams::new(
            "demo://token-s3cr3t",
        ))
        .await;
    assert!(read.is_ok(), "{read:?}");
    let unknown = client
        .call_tool(call("git__no_such_tool_s3cr3t", json!({})))
        .await;
    assert!(unknown.is_err(), "{unknown:?}");
    client.cancel().await.expect("close");
    let spans = receiver.spans(3).await;
    // The read and the request as sent, each named by the server alone.
    let mut reads: Vec<&Span> = spans
        .iter()
        .filter(|span| span.name == "resources/read git")
        .collect();
    reads.sort_by_key(|span| span.kind);
    assert_eq!(reads.len(), 2, "{}", summary(&spans));
    assert_eq!(reads[0].kind, SpanKind::Server as i32);
    assert_eq!(reads[1].kind, SpanKind::Client as i32);
    assert_eq!(reads[1].parent_span_id, reads[0].span_id);
    assert_eq!(
        attribute(reads[0], "gatehouse.outcome").as_deref(),
        Some("ok")
    );
    let refused = named_span(&spans, "tools/call");
    assert_eq!(
        attribute(refused, "gatehouse.outcome").as_deref(),
        Some("unknown")
    );
    assert_nowhere(&spans, &["s3cr3t"]);
}

#[test]
fn a_bad_traces_section_is_refused_naming_the_file_and_field() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("gatehouse.toml");
    std::fs::write(&path, "[traces]\nendpoint = \"collector:4318\"\n").expect("write");
    let output = gatehouse(&["serve", "--config", path.to_str().expect("utf-8")]);
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("gatehouse.toml") && stderr.contains("traces.endpoint"),
        "{stderr}"
    );
    assert!(stderr.contains("http://"), "{stderr}");
}

/// With traces on and content opted in, `gatehouse -vv serve` logs at trace
/// level (wasmtime's own log lines come from inside the review): no line
/// carries a trace span or its fields (which may hold content), and the
/// spans still reach the collector.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_log_never_shows_the_trace_spans_even_at_trace_level() {
    use rmcp::ServiceExt;
    use tokio::io::AsyncReadExt;
    let receiver = Receiver::start().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let config = crate::gateway::config_with(
        dir.path(),
        "{}",
        &format!(
            "\n[traces]\nendpoint = {:?}\ncontent = true\n",
            receiver.endpoint()
        ),
    );
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_gatehouse"));
    command.arg("-vv").arg("serve").arg("--config").arg(&config);
    // Trace level as -vv sets it (the JIT compiler's crates at info).
    command.env_remove("RUST_LOG");
    let (transport, stderr) = rmcp::transport::TokioChildProcess::builder(command)
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("gatehouse starts");
    let mut stderr = stderr.expect("stderr piped");
    let logged = tokio::spawn(async move {
        let mut text = Vec::new();
        let _ = stderr.read_to_end(&mut text).await;
        String::from_utf8_lossy(&text).into_owned()
    });
    let client = Client {
        elicitation: true,
        content: Some(json!({"name": "Ada"})),
        asked: Arc::new(AtomicUsize::new(0)),
    }
    .serve(transport)
    .await
    .expect("initialize");
    let named = client
        .call_tool(call("git__ask_name", json!({})))
        .await
        .expect("ask_name");
    assert!(text(&named).contains("hello Ada"), "{}", text(&named));
    client.cancel().await.expect("close");
    let logged = tokio::time::timeout(Duration::from_secs(30), logged)
        .await
        .expect("gatehouse ends")
        .expect("stderr read");
    assert!(logged.contains("TRACE"), "not at trace level");
    for span_field in [
        "upstream request",
        "downstream call",
        "gatehouse.server",
        "gatehouse.call.arguments",
        "gatehouse.elicitation.message",
        "gatehouse.outcome",
    ] {
        assert!(!logged.contains(span_field), "{span_field} in the log");
    }
    let spans = receiver.spans(3).await;
    named_span(&spans, "tools/call git__ask_name");
}

/// -vv is gatehouse's trace, not the JIT compiler's: compiling the guardian
/// at `RUST_LOG=trace` logs about five million Cranelift lines (minutes of
/// text); -vv leaves those crates at info, and `RUST_LOG` still reaches them.
#[test]
fn very_verbose_logs_trace_without_the_compilers_every_step() {
    let guardian = crate::paths::guest("gatehouse_guardian")
        .display()
        .to_string();
    let inspect = |rust_log: Option<&str>| {
        let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_gatehouse"));
        command.args(["-vv", "inspect", "--no-compile-cache", &guardian]);
        match rust_log {
            Some(filter) => command.env("RUST_LOG", filter),
            None => command.env_remove("RUST_LOG"),
        };
        let output = command.output().expect("gatehouse runs");
        assert!(output.status.success(), "{output:?}");
        String::from_utf8_lossy(&output.stderr).into_owned()
    };
    let logged = inspect(None);
    assert!(logged.contains("TRACE"), "not at trace level:\n{logged}");
    assert!(
        !logged.contains("cranelift_codegen") && !logged.contains("wasmtime_internal_cranelift"),
        "the compiler's trace in -vv: {} lines",
        logged.lines().count()
    );
    let asked = inspect(Some("warn,cranelift_codegen::context=debug"));
    assert!(
        asked.contains("cranelift_codegen"),
        "RUST_LOG reaches the compiler"
    );
}
