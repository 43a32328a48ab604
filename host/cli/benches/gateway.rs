//! The gateway's cost, side by side over stdio:
//! - `tools/call` of demo-server's `echo`, direct versus through
//!   `gatehouse serve`;
//! - an elicitation end to end (the server sends it, gets its answer, and
//!   finishes the call): direct (the client answers it at once) versus
//!   through gatehouse (the guardian reviews it in a fresh sandbox, the
//!   answer is audited, then sent);
//! - each through-gatehouse row again with `[traces]` on, exporting every
//!   span over OTLP/HTTP to a receiver in this process that accepts and
//!   drops them ("traces on");
//! - the resident memory of an idle `gatehouse serve` with three modules;
//! - start-up ("start-up (stdio)"): from spawning `gatehouse serve` (the
//!   guardian, its contract checks on, as configs have them by default) to
//!   the client's `initialize` answered, and to the first elicitation
//!   reviewed and answered, with the compile cache warm (the modules
//!   compiled by an earlier start) and cold (an empty one: they compile).
//!
//! Run: `.ci/build-guests && cargo build --release -p gatehouse-example-servers && cargo bench -p gatehouse --bench gateway`
//! (`-- start-up` for the start-up rows alone).
//!
//! To compare two builds side by side in one run, set
//! `GATEHOUSE_BENCH_BASELINE` to another `gatehouse` binary: each
//! through-gatehouse row is then measured for it too ("baseline"), the two
//! connections to their own copies of the config and the demo-server.

use std::path::{Path, PathBuf};
use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use rmcp::model::{
    CallToolRequestParams, ClientCapabilities, ClientConfig, ElicitRequestParams, ElicitResult,
    ElicitationAction, ElicitationCapability, ErrorData, FormElicitationCapability, Implementation,
};
use rmcp::service::{RequestContext, RunningService};
use rmcp::transport::TokioChildProcess;
use rmcp::{ClientHandler, RoleClient, ServiceExt};
use serde_json::{Value, json};

fn target() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR").map_or_else(
        || PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target"),
        PathBuf::from,
    )
}

fn existing(path: PathBuf, build: &str) -> PathBuf {
    assert!(path.exists(), "{} is missing: {build}", path.display());
    path
}

fn demo_server() -> PathBuf {
    existing(
        target().join("release/demo-server"),
        "run `cargo build --release -p gatehouse-example-servers`",
    )
}

fn guest(name: &str) -> PathBuf {
    existing(
        target().join(format!("wasm32-wasip2/guest/{name}.wasm")),
        "run .ci/build-guests",
    )
}

/// A client that answers every form itself, at once (the direct baseline).
struct Answering;

impl ClientHandler for Answering {
    fn get_info(&self) -> ClientConfig {
        let mut capabilities = ClientCapabilities::default();
        capabilities.elicitation =
            Some(ElicitationCapability::new().with_form(FormElicitationCapability::default()));
        ClientConfig::new(capabilities, Implementation::new("bench", "0"))
    }

    async fn create_elicitation(
        &self,
        _request: ElicitRequestParams,
        _context: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, ErrorData> {
        Ok(ElicitResult::new(ElicitationAction::Accept).with_content(json!({})))
    }
}

type Client = RunningService<RoleClient, Answering>;

async fn connect(command: tokio::process::Command) -> Client {
    let transport = TokioChildProcess::new(command).expect("spawn");
    tokio::time::timeout(Duration::from_secs(60), Answering.serve(transport))
        .await
        .expect("initialize in time")
        .expect("initialize")
}

/// `gatehouse serve` over one demo-server `git`, with `modules` guardians
/// (the first allows read_file; the others are never reached).
fn gateway_config(dir: &Path, modules: usize) -> PathBuf {
    gateway_config_with(dir, modules, "")
}

/// [`gateway_config`] with `extra` appended (a `[traces]` section).
fn gateway_config_with(dir: &Path, modules: usize, extra: &str) -> PathBuf {
    let mut text = format!(
        "[mcp_servers.git]\ncommand = {:?}\nargs = [\"--name\", \"git\"]\n\n[review]\nverify_contract = false\n\n",
        demo_server().display().to_string()
    );
    for index in 0..modules {
        text.push_str(&format!(
            "[[review.modules]]\nname = \"guardian{index}\"\npath = {:?}\nconfig = {{ allow = [{{ server = \"git\", tool = \"read_*\" }}] }}\n\n",
            guest("gatehouse_guardian").display().to_string()
        ));
    }
    text.push_str("[elicitations]\naudit_log = \"audit.jsonl\"\n");
    text.push_str(extra);
    let path = dir.join("gatehouse.toml");
    std::fs::write(&path, text).expect("write config");
    path
}

fn call(name: &str, arguments: Value) -> CallToolRequestParams {
    CallToolRequestParams::new(name.to_owned())
        .with_arguments(arguments.as_object().cloned().unwrap_or_default())
}

fn approval() -> Value {
    json!({"params": {
        "message": "Allow read_file?",
        "requestedSchema": {"type": "object", "properties": {}},
        "_meta": {"codex_request_type": "approval_request", "codex_approval_kind": "mcp_tool_call",
                  "tool_name": "read_file", "tool_params": {"path": "README.md"}}
    }})
}

/// An OTLP/HTTP receiver on loopback that accepts every export and drops
/// it; its address.
async fn trace_sink() -> std::net::SocketAddr {
    let app = axum::Router::new().route(
        "/v1/traces",
        axum::routing::post(|_body: axum::body::Bytes| async {
            (
                [("content-type", "application/x-protobuf")],
                Vec::<u8>::new(),
            )
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind the trace sink");
    let address = listener.local_addr().expect("address");
    tokio::spawn(async move { axum::serve(listener, app).await });
    address
}

fn rss_mib(pid: u32) -> Option<f64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|line| line.starts_with("VmRSS:"))?;
    let kib: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib / 1024.0)
}

fn bench(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let dir = tempfile::tempdir().expect("tempdir");
    let config = gateway_config(dir.path(), 1);

    let baseline_dir = tempfile::tempdir().expect("tempdir");
    let baseline_config = gateway_config(baseline_dir.path(), 1);
    let baseline_binary = std::env::var_os("GATEHOUSE_BENCH_BASELINE").map(PathBuf::from);
    let gateway = |binary: &Path, config: &Path| {
        let mut gateway = tokio::process::Command::new(binary);
        gateway.arg("serve").arg("--config").arg(config);
        gateway.env("RUST_LOG", "error");
        gateway
    };
    let traced_dir = tempfile::tempdir().expect("tempdir");
    let (direct, through, baseline, traced) = runtime.block_on(async {
        let mut server = tokio::process::Command::new(demo_server());
        server.args(["--name", "git"]);
        let through = gateway(Path::new(env!("CARGO_BIN_EXE_gatehouse")), &config);
        let baseline = match &baseline_binary {
            Some(binary) => Some(connect(gateway(binary, &baseline_config)).await),
            None => None,
        };
        let sink = trace_sink().await;
        let traced_config = gateway_config_with(
            traced_dir.path(),
            1,
            &format!("\n[traces]\nendpoint = \"http://{sink}\"\n"),
        );
        let traced = gateway(Path::new(env!("CARGO_BIN_EXE_gatehouse")), &traced_config);
        (
            connect(server).await,
            connect(through).await,
            baseline,
            connect(traced).await,
        )
    });

    let mut group = c.benchmark_group("gateway (stdio)");
    group.bench_function("tools/call echo: direct", |b| {
        b.iter(|| {
            runtime
                .block_on(direct.call_tool(call("echo", json!({"text": "hi"}))))
                .expect("echo")
        })
    });
    group.bench_function("tools/call echo: through gatehouse", |b| {
        b.iter(|| {
            runtime
                .block_on(through.call_tool(call("git__echo", json!({"text": "hi"}))))
                .expect("echo")
        })
    });
    group.bench_function("tools/call echo: through gatehouse, traces on", |b| {
        b.iter(|| {
            runtime
                .block_on(traced.call_tool(call("git__echo", json!({"text": "hi"}))))
                .expect("echo")
        })
    });
    if let Some(baseline) = &baseline {
        group.bench_function("tools/call echo: through baseline gatehouse", |b| {
            b.iter(|| {
                runtime
                    .block_on(baseline.call_tool(call("git__echo", json!({"text": "hi"}))))
                    .expect("echo")
            })
        });
    }
    group.bench_function("elicitation end to end: direct (client answers)", |b| {
        b.iter(|| {
            runtime
                .block_on(direct.call_tool(call("elicit_raw", approval())))
                .expect("elicit_raw")
        })
    });
    group.bench_function(
        "elicitation end to end: through gatehouse (guardian)",
        |b| {
            b.iter(|| {
                runtime
                    .block_on(through.call_tool(call("git__elicit_raw", approval())))
                    .expect("elicit_raw")
            })
        },
    );
    group.bench_function(
        "elicitation end to end: through gatehouse (guardian), traces on",
        |b| {
            b.iter(|| {
                runtime
                    .block_on(traced.call_tool(call("git__elicit_raw", approval())))
                    .expect("elicit_raw")
            })
        },
    );
    if let Some(baseline) = &baseline {
        group.bench_function(
            "elicitation end to end: through baseline gatehouse (guardian)",
            |b| {
                b.iter(|| {
                    runtime
                        .block_on(baseline.call_tool(call("git__elicit_raw", approval())))
                        .expect("elicit_raw")
                })
            },
        );
    }
    group.finish();
    runtime.block_on(async {
        let _ = direct.cancel().await;
        let _ = through.cancel().await;
        let _ = traced.cancel().await;
        if let Some(baseline) = baseline {
            let _ = baseline.cancel().await;
        }
    });

    // Idle memory: `gatehouse serve` with three modules, after start-up.
    let three = tempfile::tempdir().expect("tempdir");
    let config = gateway_config(three.path(), 3);
    runtime.block_on(async {
        let mut gateway = tokio::process::Command::new(env!("CARGO_BIN_EXE_gatehouse"));
        gateway.arg("serve").arg("--config").arg(&config);
        gateway.env("RUST_LOG", "error");
        let transport = TokioChildProcess::new(gateway).expect("spawn");
        let pid = transport.id();
        let client = Answering.serve(transport).await.expect("initialize");
        client.list_all_tools().await.expect("tools/list");
        tokio::time::sleep(Duration::from_secs(1)).await;
        if let Some(mib) = pid.and_then(rss_mib) {
            println!("idle gatehouse serve, three modules, one server: RSS {mib:.1} MiB");
        }
        let _ = client.cancel().await;
    });
}

/// A fresh directory holding [`gateway_config`]'s config with one
/// guardian, its contract checks on (the default).
fn start_up_config() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = gateway_config(dir.path(), 1);
    let text = std::fs::read_to_string(&config)
        .expect("config")
        .replace("verify_contract = false", "verify_contract = true");
    std::fs::write(&config, text).expect("config");
    (dir, config)
}

/// What one start is timed to.
#[derive(Clone, Copy)]
enum Until {
    /// The client's `initialize` answered.
    Initialized,
    /// Then the first elicitation (the guardian's review) answered.
    FirstReview,
}

/// Starts `binary` on `config`, returns the time from the spawn to `until`,
/// then closes the session and waits for the process to end (not timed).
async fn start_once(binary: &Path, config: &Path, until: Until) -> Duration {
    let mut command = tokio::process::Command::new(binary);
    command.arg("serve").arg("--config").arg(config);
    command.env("RUST_LOG", "error");
    let started = std::time::Instant::now();
    let client = connect(command).await;
    if let Until::FirstReview = until {
        client
            .call_tool(call("git__elicit_raw", approval()))
            .await
            .expect("the first review");
    }
    let took = started.elapsed();
    let _ = client.cancel().await;
    took
}

fn start_up(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let mut binaries = vec![("", PathBuf::from(env!("CARGO_BIN_EXE_gatehouse")))];
    if let Some(baseline) = std::env::var_os("GATEHOUSE_BENCH_BASELINE") {
        binaries.push((", baseline", PathBuf::from(baseline)));
    }
    let mut group = c.benchmark_group("start-up (stdio)");
    group
        .sampling_mode(criterion::SamplingMode::Flat)
        .sample_size(20)
        .measurement_time(Duration::from_secs(10));
    for (label, binary) in &binaries {
        // Warm: one config whose cache the first start fills.
        let (_warm_dir, warm) = start_up_config();
        runtime.block_on(start_once(binary, &warm, Until::FirstReview));
        for (what, until) in [
            ("initialize answered", Until::Initialized),
            ("first review answered", Until::FirstReview),
        ] {
            group.bench_function(format!("{what}, warm compile cache{label}"), |b| {
                b.iter_custom(|iters| {
                    (0..iters)
                        .map(|_| runtime.block_on(start_once(binary, &warm, until)))
                        .sum()
                })
            });
            group.bench_function(format!("{what}, cold compile cache{label}"), |b| {
                b.iter_custom(|iters| {
                    (0..iters)
                        .map(|_| {
                            let (_cold_dir, cold) = start_up_config();
                            runtime.block_on(start_once(binary, &cold, until))
                        })
                        .sum()
                })
            });
        }
    }
    group.finish();
}

criterion_group!(benches, bench, start_up);
criterion_main!(benches);
