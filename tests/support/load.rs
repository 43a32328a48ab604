//! The load harness: mixed elicitations through `gatehouse serve` (stdio)
//! for a while, at the rate the machine holds, then an audit: every call
//! answered as expected, every elicitation audited exactly once, and the
//! gateway's memory sampled throughout.
//!
//! `cargo run --release -p gatehouse-tests --bin gatehouse-load -- --duration 60`
//! runs it from the command line; `tests/all/load.rs` runs a short pass in every
//! test run.

use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use rmcp::model::{
    CallToolRequestParams, ClientCapabilities, ClientConfig, ElicitRequestParams, ElicitResult,
    ElicitationAction, ElicitationCapability, ErrorData, FormElicitationCapability, Implementation,
    UrlElicitationCapability,
};
use rmcp::service::RequestContext;
use rmcp::transport::TokioChildProcess;
use rmcp::{ClientHandler, RoleClient, ServiceExt};
use serde_json::{Value, json};

/// What to run.
#[derive(Debug, Clone)]
pub struct LoadOptions {
    /// The `gatehouse` binary.
    pub gatehouse: PathBuf,
    /// The `demo-server` binary.
    pub demo_server: PathBuf,
    /// Where the guest components are.
    pub guests: PathBuf,
    /// How long to send calls.
    pub duration: Duration,
    /// Calls in flight at once.
    pub workers: usize,
}

/// What happened.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct LoadReport {
    /// Wall time of the sending phase.
    pub seconds: f64,
    /// Tool calls made (with and without an elicitation).
    pub calls: u64,
    /// Calls whose tool sent an elicitation.
    pub elicitations: u64,
    /// Elicitations per second.
    pub elicitations_per_second: f64,
    /// Calls by scenario and whether the answer was the expected one.
    pub scenarios: BTreeMap<String, ScenarioCount>,
    /// Audit lines written.
    pub audit_lines: u64,
    /// `(server, request id)` pairs audited more than once.
    pub audited_twice: u64,
    /// Audit lines by who decided.
    pub decided_by: BTreeMap<String, u64>,
    /// The gateway's resident memory, sampled every 250 ms, in KiB.
    pub rss_kib: Vec<u64>,
}

/// Calls of one scenario.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct ScenarioCount {
    /// Answered as expected.
    pub expected: u64,
    /// Answered otherwise (the text of the first is kept).
    pub unexpected: u64,
    /// The first unexpected answer.
    pub example: Option<String>,
}

impl LoadReport {
    /// Why the run failed, if it did: a call answered unexpectedly, an
    /// elicitation not audited exactly once.
    pub fn problems(&self) -> Vec<String> {
        let mut problems = Vec::new();
        for (name, count) in &self.scenarios {
            if count.unexpected > 0 {
                problems.push(format!(
                    "{name}: {} unexpected answers, e.g. {:?}",
                    count.unexpected, count.example
                ));
            }
        }
        if self.audit_lines != self.elicitations {
            problems.push(format!(
                "{} elicitations but {} audit lines",
                self.elicitations, self.audit_lines
            ));
        }
        if self.audited_twice > 0 {
            problems.push(format!("{} request ids audited twice", self.audited_twice));
        }
        if self.calls == 0 {
            problems.push("no call completed".to_owned());
        }
        problems
    }

    /// Peak and last sampled memory, in MiB.
    pub fn rss_mib(&self) -> (f64, f64, f64) {
        let first = self.rss_kib.first().copied().unwrap_or(0) as f64 / 1024.0;
        let peak = self.rss_kib.iter().copied().max().unwrap_or(0) as f64 / 1024.0;
        let last = self.rss_kib.last().copied().unwrap_or(0) as f64 / 1024.0;
        (first, peak, last)
    }
}

/// One kind of call in the mix, and how to recognise the expected answer.
struct Scenario {
    name: &'static str,
    tool: &'static str,
    arguments: Value,
    elicits: bool,
    expect: &'static str,
}

fn scenarios() -> Vec<Scenario> {
    // The approval names the call the agent really makes (`elicit_raw`): the
    // gateway ties the elicitation to it, and a request that named another
    // tool would be declined as a mismatch.
    let approval = json!({
        "message": "Allow elicit_raw?",
        "requestedSchema": {"type": "object", "properties": {}},
        "_meta": {"codex_request_type": "approval_request", "codex_approval_kind": "mcp_tool_call",
                  "tool_name": "elicit_raw"}
    });
    vec![
        Scenario {
            name: "guest accepts (guardian)",
            tool: "git__elicit_raw",
            arguments: json!({"params": approval}),
            elicits: true,
            expect: "\"action\":\"accept\"",
        },
        Scenario {
            name: "guest declines (guardian)",
            tool: "git__delete_branch",
            arguments: json!({"branch": "main"}),
            elicits: true,
            expect: "unacceptable risk",
        },
        Scenario {
            name: "person answers (upstream)",
            tool: "git__ask_name",
            arguments: json!({}),
            elicits: true,
            expect: "hello Ada",
        },
        Scenario {
            name: "URL allowed (allowlist)",
            tool: "git__open_url",
            arguments: json!({"url": "https://tracker.example.com/login"}),
            elicits: true,
            expect: "accept (elicitation",
        },
        Scenario {
            name: "nested schema (-32602)",
            tool: "git__elicit_raw",
            arguments: json!({"params": {"message": "?", "requestedSchema": {"type": "object", "properties": {"a": {"type": "object"}}}}}),
            elicits: true,
            expect: "-32602",
        },
        Scenario {
            name: "no elicitation (echo)",
            tool: "docs__echo",
            arguments: json!({"text": "hi"}),
            elicits: false,
            expect: "[docs] hi",
        },
    ]
}

/// The person upstream: answers forms with a name, consents to URLs.
struct Person;

impl ClientHandler for Person {
    fn get_info(&self) -> ClientConfig {
        let mut capabilities = ClientCapabilities::default();
        capabilities.elicitation = Some(
            ElicitationCapability::new()
                .with_form(FormElicitationCapability::default())
                .with_url(UrlElicitationCapability::new()),
        );
        ClientConfig::new(capabilities, Implementation::new("gatehouse-load", "0"))
    }

    async fn create_elicitation(
        &self,
        request: ElicitRequestParams,
        _context: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, ErrorData> {
        Ok(match request {
            ElicitRequestParams::UrlElicitationParams { .. } => {
                ElicitResult::new(ElicitationAction::Accept)
            }
            _ => ElicitResult::new(ElicitationAction::Accept).with_content(json!({"name": "Ada"})),
        })
    }
}

fn write_config(dir: &Path, options: &LoadOptions) -> anyhow::Result<PathBuf> {
    let server = options.demo_server.display().to_string();
    let guardian = options.guests.join("gatehouse_guardian.wasm");
    let allowlist = options.guests.join("gatehouse_allowlist.wasm");
    for path in [
        &options.demo_server,
        &guardian,
        &allowlist,
        &options.gatehouse,
    ] {
        if !path.exists() {
            bail!(
                "{} is missing: run .ci/build-guests and cargo build",
                path.display()
            );
        }
    }
    let config = format!(
        "[mcp_servers.git]\ncommand = {server:?}\nargs = [\"--name\", \"git\"]\n\n\
         [mcp_servers.docs]\ncommand = {server:?}\nargs = [\"--name\", \"docs\"]\n\n\
         [review]\nverify_contract = false\n\n\
         [[review.modules]]\npath = {allowlist:?}\n\
         config = {{ rules = [{{ mode = \"url\", url = \"https://tracker.example.com/*\", decision = \"accept\" }}] }}\n\n\
         [[review.modules]]\npath = {guardian:?}\n\
         config = {{ allow = [{{ server = \"git\", tool = \"elicit_raw\" }}] }}\n\n\
         [elicitations]\naudit_log = \"audit.jsonl\"\n\n\
         [gateway]\nmax_pending_per_session = {pending}\n",
        allowlist = allowlist.display().to_string(),
        guardian = guardian.display().to_string(),
        // Every worker may have a question waiting for the person at once:
        // the default (16) would decline the excess as `unhandled`, which is
        // the gateway's bound working, not a lost answer.
        pending = options
            .workers
            .max(gatehouse_gateway::DEFAULT_MAX_PENDING_PER_SESSION),
    );
    let path = dir.join("gatehouse.toml");
    std::fs::write(&path, config).with_context(|| format!("writing {}", path.display()))?;
    Ok(path)
}

fn rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|line| line.starts_with("VmRSS:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// Runs the load and audits it. An `Err` means the harness could not run;
/// a run that lost or doubled answers returns a report whose
/// [`LoadReport::problems`] say so.
pub async fn run(options: &LoadOptions) -> anyhow::Result<LoadReport> {
    let dir = tempfile::tempdir().context("a scratch directory")?;
    let config = write_config(dir.path(), options)?;
    let mut command = tokio::process::Command::new(&options.gatehouse);
    command.arg("serve").arg("--config").arg(&config);
    command.env("RUST_LOG", "error");
    let transport = TokioChildProcess::new(command).context("starting gatehouse serve")?;
    let pid = transport.id();
    let client = tokio::time::timeout(Duration::from_secs(60), Person.serve(transport))
        .await
        .context("gatehouse did not initialize in 60 s")?
        .context("initialize")?;
    let client = Arc::new(client);

    let stop = Arc::new(AtomicBool::new(false));
    let sampler = pid.map(|pid| {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut samples = Vec::new();
            while !stop.load(Ordering::SeqCst) {
                if let Some(kib) = rss_kib(pid) {
                    samples.push(kib);
                }
                std::thread::sleep(Duration::from_millis(250));
            }
            samples
        })
    });

    let scenarios = Arc::new(scenarios());
    let started = Instant::now();
    let deadline = started + options.duration;
    let mut workers = Vec::new();
    for worker in 0..options.workers.max(1) {
        let (client, scenarios) = (client.clone(), scenarios.clone());
        workers.push(tokio::spawn(async move {
            let mut seen: Vec<(usize, bool, String)> = Vec::new();
            let mut next = worker;
            while Instant::now() < deadline {
                let index = next % scenarios.len();
                next += 1;
                let scenario = &scenarios[index];
                let params = CallToolRequestParams::new(scenario.tool)
                    .with_arguments(scenario.arguments.as_object().cloned().unwrap_or_default());
                let text = match client.call_tool(params).await {
                    Ok(result) => serde_json::to_value(&result)
                        .ok()
                        .and_then(|value| value["content"][0]["text"].as_str().map(str::to_owned))
                        .unwrap_or_default(),
                    Err(error) => format!("call failed: {error}"),
                };
                let expected = text.contains(scenario.expect);
                seen.push((index, expected, text));
            }
            seen
        }));
    }
    let mut report = LoadReport::default();
    for worker in workers {
        for (index, expected, text) in worker.await.context("a worker panicked")? {
            let scenario = &scenarios[index];
            report.calls += 1;
            if scenario.elicits {
                report.elicitations += 1;
            }
            let count = report
                .scenarios
                .entry(scenario.name.to_owned())
                .or_default();
            if expected {
                count.expected += 1;
            } else {
                count.unexpected += 1;
                count.example.get_or_insert(text);
            }
        }
    }
    report.seconds = started.elapsed().as_secs_f64();
    report.elicitations_per_second = report.elicitations as f64 / report.seconds.max(1e-9);

    // Every answer is audited before it is sent, so the log is complete now.
    let client =
        Arc::try_unwrap(client).map_err(|_| anyhow::anyhow!("a worker still holds the client"))?;
    client.cancel().await.context("closing the session")?;
    stop.store(true, Ordering::SeqCst);
    if let Some(sampler) = sampler {
        report.rss_kib = sampler
            .join()
            .map_err(|_| anyhow::anyhow!("the sampler panicked"))?;
    }
    let audit = std::fs::read_to_string(dir.path().join("audit.jsonl")).unwrap_or_default();
    let mut ids = HashSet::new();
    for line in audit.lines() {
        let record: Value = serde_json::from_str(line).context("an audit line is not JSON")?;
        report.audit_lines += 1;
        let who = record["decided_by"].as_str().unwrap_or("?").to_owned();
        *report.decided_by.entry(who).or_default() += 1;
        if !ids.insert((
            record["server"].to_string(),
            record["request_id"].to_string(),
        )) {
            report.audited_twice += 1;
        }
    }
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_gateway_lets_every_worker_wait_for_the_person() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = |name: &str| {
            let path = dir.path().join(name);
            std::fs::write(&path, b"").expect("write");
            path
        };
        let guests = dir.path().join("guests");
        std::fs::create_dir(&guests).expect("mkdir");
        for guest in ["gatehouse_guardian.wasm", "gatehouse_allowlist.wasm"] {
            std::fs::write(guests.join(guest), b"").expect("write");
        }
        for (workers, pending) in [
            (64, 64),
            (4, gatehouse_gateway::DEFAULT_MAX_PENDING_PER_SESSION),
        ] {
            let options = LoadOptions {
                gatehouse: file("gatehouse"),
                demo_server: file("demo-server"),
                guests: guests.clone(),
                duration: Duration::from_secs(1),
                workers,
            };
            let path = write_config(dir.path(), &options).expect("config");
            let config = gatehouse_gateway::config::Config::load(&path).expect("a valid config");
            assert_eq!(config.gateway.max_pending_per_session, pending);
        }
    }
}
