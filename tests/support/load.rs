//! The load harness: mixed elicitations through `gatehouse serve` for a
//! while, at the rate the machine holds, then an audit: every call answered
//! as expected, every elicitation audited exactly once, and the gateway's
//! memory sampled throughout against the number of calls made.
//!
//! Over stdio every worker shares the one session the process serves. Over
//! streamable HTTP (`--http`) each worker has its own session and, with
//! `--calls-per-session`, closes it after that many calls and opens another:
//! the soak that shows whether memory levels off as sessions come and go.
//!
//! `cargo run --release -p gatehouse-tests --bin gatehouse-load -- --duration 60`
//! runs it from the command line; `tests/all/load.rs` runs a short pass in every
//! test run.

use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use rmcp::model::{
    CallToolRequestParams, ClientCapabilities, ClientConfig, ElicitRequestParams, ElicitResult,
    ElicitationAction, ElicitationCapability, ErrorData, FormElicitationCapability, Implementation,
    UrlElicitationCapability,
};
use rmcp::service::RequestContext;
use rmcp::service::RunningService;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use rmcp::{ClientHandler, RoleClient, ServiceExt};
use serde_json::{Value, json};
use tokio::io::AsyncBufReadExt;

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
    /// Stop once this many calls were made, if that comes before `duration`.
    pub max_calls: Option<u64>,
    /// How the calls reach the gateway.
    pub transport: Transport,
}

/// How the harness talks to `gatehouse serve`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    /// One stdio session, shared by every worker.
    Stdio,
    /// `serve --listen` on loopback; each worker opens its own session and,
    /// given a number, closes it after that many calls and opens the next.
    Http {
        /// Calls a session makes before it is closed (`None`: one session
        /// per worker for the whole run).
        calls_per_session: Option<u64>,
    },
}

/// The gateway's resident memory at one moment of the run.
#[derive(Debug, Clone, Copy, Default, serde::Serialize)]
pub struct RssSample {
    /// Calls answered when the sample was taken.
    pub calls: u64,
    /// `VmRSS`, in KiB.
    pub kib: u64,
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
    /// Sessions opened (1 over stdio).
    pub sessions: u64,
    /// The gateway's resident memory, sampled every 250 ms.
    pub rss: Vec<RssSample>,
}

/// Calls of one scenario.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct ScenarioCount {
    /// Answered as expected.
    pub expected: u64,
    /// Answered otherwise (the text of the first is kept).
    pub unexpected: u64,
    /// Declined without being shown, as the gateway must when the server
    /// had calls from several sessions in flight (HTTP runs only).
    pub unshown: u64,
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
        let unshown: u64 = self.scenarios.values().map(|count| count.unshown).sum();
        let unhandled = self.decided_by.get("unhandled").copied().unwrap_or(0);
        if unshown != unhandled {
            problems.push(format!(
                "{unshown} questions declined unshown but {unhandled} audited as unhandled"
            ));
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

    /// First, peak and last sampled memory, in MiB.
    pub fn rss_mib(&self) -> (f64, f64, f64) {
        let mib = |sample: Option<&RssSample>| sample.map_or(0.0, |s| s.kib as f64 / 1024.0);
        let peak = self.rss.iter().max_by_key(|sample| sample.kib);
        (mib(self.rss.first()), mib(peak), mib(self.rss.last()))
    }

    /// Memory as the run progressed: for each fraction of the calls made
    /// (0.1 = the first tenth), the median of the samples taken while the
    /// calls answered were within 5 % of it, in MiB. Where no sample fell in
    /// that window (a short run), the nearest sample stands in. Empty when
    /// nothing was sampled.
    pub fn rss_by_progress(&self, fractions: &[f64]) -> Vec<(f64, f64)> {
        let Some(total) = self.rss.iter().map(|sample| sample.calls).max() else {
            return Vec::new();
        };
        let total = total.max(1) as f64;
        fractions
            .iter()
            .map(|&fraction| {
                let near =
                    |sample: &&RssSample| (sample.calls as f64 / total - fraction).abs() <= 0.05;
                let mut window: Vec<u64> = self.rss.iter().filter(near).map(|s| s.kib).collect();
                if window.is_empty() {
                    let closest = self.rss.iter().min_by(|a, b| {
                        let distance = |s: &RssSample| (s.calls as f64 / total - fraction).abs();
                        distance(a).total_cmp(&distance(b))
                    });
                    window.extend(closest.map(|s| s.kib));
                }
                window.sort_unstable();
                let median = window.get(window.len() / 2).copied().unwrap_or(0);
                (fraction, median as f64 / 1024.0)
            })
            .collect()
    }
}

/// One kind of call in the mix, and how to recognise the expected answer.
struct Scenario {
    name: &'static str,
    tool: &'static str,
    arguments: Value,
    elicits: bool,
    expect: &'static str,
    /// The answer when the question is one no person may be shown: over
    /// HTTP, with calls from several sessions in flight on its server, the
    /// gateway cannot tell whose person to ask and declines it.
    unshown: Option<&'static str>,
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
            unshown: None,
        },
        Scenario {
            name: "guest declines (guardian)",
            tool: "git__delete_branch",
            arguments: json!({"branch": "main"}),
            elicits: true,
            expect: "unacceptable risk",
            unshown: None,
        },
        Scenario {
            name: "person answers (upstream)",
            tool: "git__ask_name",
            arguments: json!({}),
            elicits: true,
            expect: "hello Ada",
            unshown: Some("[git] decline"),
        },
        Scenario {
            name: "URL allowed (allowlist)",
            tool: "git__open_url",
            arguments: json!({"url": "https://tracker.example.com/login"}),
            elicits: true,
            expect: "accept (elicitation",
            unshown: None,
        },
        Scenario {
            name: "nested schema (-32602)",
            tool: "git__elicit_raw",
            arguments: json!({"params": {"message": "?", "requestedSchema": {"type": "object", "properties": {"a": {"type": "object"}}}}}),
            elicits: true,
            expect: "-32602",
            unshown: None,
        },
        Scenario {
            name: "no elicitation (echo)",
            tool: "docs__echo",
            arguments: json!({"text": "hi"}),
            elicits: false,
            expect: "[docs] hi",
            unshown: None,
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
         [gateway]\nmax_pending_per_session = {pending}\nmax_http_sessions = {sessions}\n",
        allowlist = allowlist.display().to_string(),
        guardian = guardian.display().to_string(),
        // Every worker may have a question waiting for the person at once:
        // the default (16) would decline the excess as `unhandled`, which is
        // the gateway's bound working, not a lost answer.
        pending = options
            .workers
            .max(gatehouse_gateway::DEFAULT_MAX_PENDING_PER_SESSION),
        // One session per worker; a closed session must free its slot, so a
        // soak that opened thousands never needs more.
        sessions = options.workers.max(1),
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

/// A started `gatehouse serve` and how workers reach it.
enum Gateway {
    /// The one stdio session every worker shares.
    Stdio(RunningService<RoleClient, Person>),
    /// `serve --listen`: the process, its URL and its bearer token.
    Http {
        child: tokio::process::Child,
        url: String,
        token: String,
        calls_per_session: Option<u64>,
    },
}

impl Gateway {
    async fn start(options: &LoadOptions, config: &Path) -> anyhow::Result<(Gateway, Option<u32>)> {
        let mut command = tokio::process::Command::new(&options.gatehouse);
        command.arg("serve").arg("--config").arg(config);
        command.env("RUST_LOG", "error");
        match options.transport {
            Transport::Stdio => {
                let transport =
                    TokioChildProcess::new(command).context("starting gatehouse serve")?;
                let pid = transport.id();
                let client = tokio::time::timeout(Duration::from_secs(60), Person.serve(transport))
                    .await
                    .context("gatehouse did not initialize in 60 s")?
                    .context("initialize")?;
                Ok((Gateway::Stdio(client), pid))
            }
            Transport::Http { calls_per_session } => {
                command
                    .args(["--listen", "127.0.0.1:0"])
                    .stdin(std::process::Stdio::null())
                    .stdout(std::process::Stdio::piped())
                    .kill_on_drop(true);
                let mut child = command
                    .spawn()
                    .context("starting gatehouse serve --listen")?;
                let pid = child.id();
                let stdout = child.stdout.take().context("serve's stdout")?;
                let mut lines = tokio::io::BufReader::new(stdout).lines();
                // A wrapper (heaptrack, perf) may print its own lines first.
                let listening = async {
                    while let Some(line) = lines.next_line().await? {
                        if let Some(url) = line.strip_prefix("listening on ") {
                            return Ok(Some(url.to_owned()));
                        }
                    }
                    Ok::<_, std::io::Error>(None)
                };
                let url = tokio::time::timeout(Duration::from_secs(60), listening)
                    .await
                    .context("gatehouse did not listen in 60 s")?
                    .context("reading serve's stdout")?
                    .context("serve ended without printing `listening on`")?;
                // Keep reading, so that serve never blocks on a full pipe.
                tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
                let token_file = config.with_file_name(".gatehouse/token");
                let token = std::fs::read_to_string(&token_file)
                    .with_context(|| format!("reading {}", token_file.display()))?;
                let gateway = Gateway::Http {
                    child,
                    url,
                    token,
                    calls_per_session,
                };
                Ok((gateway, pid))
            }
        }
    }
}

/// Opens one streamable HTTP session as the person.
async fn open_session(
    url: &str,
    token: &str,
) -> anyhow::Result<RunningService<RoleClient, Person>> {
    let transport = StreamableHttpClientTransport::from_config(
        StreamableHttpClientTransportConfig::with_uri(url.to_owned()).auth_header(token.to_owned()),
    );
    tokio::time::timeout(Duration::from_secs(60), Person.serve(transport))
        .await
        .context("the session did not initialize in 60 s")?
        .context("initialize over HTTP")
}

/// Hands out calls until the time or the call budget is spent, and counts
/// the answered ones for the memory sampler.
struct Budget {
    deadline: Instant,
    max_calls: u64,
    started: AtomicU64,
    answered: AtomicU64,
    sessions: AtomicU64,
}

impl Budget {
    /// Whether one more call may start.
    fn take(&self) -> bool {
        Instant::now() < self.deadline
            && self.started.fetch_add(1, Ordering::SeqCst) < self.max_calls
    }
}

/// One call of `scenario`; the answer's text, or why it failed.
async fn call(peer: &rmcp::Peer<RoleClient>, scenario: &Scenario) -> String {
    let params = CallToolRequestParams::new(scenario.tool)
        .with_arguments(scenario.arguments.as_object().cloned().unwrap_or_default());
    match peer.call_tool(params).await {
        Ok(result) => serde_json::to_value(&result)
            .ok()
            .and_then(|value| value["content"][0]["text"].as_str().map(str::to_owned))
            .unwrap_or_default(),
        Err(error) => format!("call failed: {error}"),
    }
}

/// How one call was answered.
enum Outcome {
    Expected,
    /// Declined unshown where the mix allows it (see [`Scenario::unshown`]).
    Unshown,
    /// Anything else, with the answer's text.
    Unexpected(String),
}

/// Calls made by one worker: scenario index and outcome.
type Seen = Vec<(usize, Outcome)>;

/// One worker: calls through `peer` (stdio) or through sessions of its own
/// (HTTP) until the budget is spent.
async fn work(
    worker: usize,
    workers: usize,
    gateway: WorkerGateway,
    scenarios: Arc<Vec<Scenario>>,
    budget: Arc<Budget>,
) -> anyhow::Result<Seen> {
    let mut seen = Seen::new();
    let mut next = worker;
    // Over HTTP with more than one worker, sessions share the servers.
    let shared = matches!(gateway, WorkerGateway::Own { .. }) && workers > 1;
    let one = |seen: &mut Seen, text: String, index: usize| {
        let scenario = &scenarios[index];
        let outcome = if text.contains(scenario.expect) {
            Outcome::Expected
        } else if shared
            && scenario
                .unshown
                .is_some_and(|unshown| text.contains(unshown))
        {
            Outcome::Unshown
        } else {
            Outcome::Unexpected(text)
        };
        seen.push((index, outcome));
        budget.answered.fetch_add(1, Ordering::SeqCst);
    };
    match gateway {
        WorkerGateway::Shared(peer) => {
            while budget.take() {
                let index = next % scenarios.len();
                next += 1;
                let text = call(&peer, &scenarios[index]).await;
                one(&mut seen, text, index);
            }
        }
        WorkerGateway::Own {
            url,
            token,
            calls_per_session,
        } => {
            let mut more = budget.take();
            while more {
                let session = open_session(&url, &token).await?;
                budget.sessions.fetch_add(1, Ordering::SeqCst);
                let mut made = 0;
                while more && calls_per_session.is_none_or(|limit| made < limit) {
                    let index = next % scenarios.len();
                    next += 1;
                    made += 1;
                    let text = call(session.peer(), &scenarios[index]).await;
                    one(&mut seen, text, index);
                    more = budget.take();
                }
                session.cancel().await.context("closing an HTTP session")?;
            }
        }
    }
    Ok(seen)
}

/// What a worker is given to reach the gateway.
enum WorkerGateway {
    /// The shared stdio session.
    Shared(rmcp::Peer<RoleClient>),
    /// Sessions of its own over HTTP.
    Own {
        url: String,
        token: String,
        calls_per_session: Option<u64>,
    },
}

/// Runs the load and audits it. An `Err` means the harness could not run;
/// a run that lost or doubled answers returns a report whose
/// [`LoadReport::problems`] say so.
pub async fn run(options: &LoadOptions) -> anyhow::Result<LoadReport> {
    if let Transport::Http {
        calls_per_session: Some(0),
    } = options.transport
    {
        bail!("a session must make at least one call (calls_per_session = 0)");
    }
    let dir = tempfile::tempdir().context("a scratch directory")?;
    let config = write_config(dir.path(), options)?;
    let (gateway, pid) = Gateway::start(options, &config).await?;

    let started = Instant::now();
    let budget = Arc::new(Budget {
        deadline: started + options.duration,
        max_calls: options.max_calls.unwrap_or(u64::MAX),
        started: AtomicU64::new(0),
        answered: AtomicU64::new(0),
        sessions: AtomicU64::new(0),
    });
    let stop = Arc::new(AtomicBool::new(false));
    let sampler = pid.map(|pid| {
        let (stop, budget) = (stop.clone(), budget.clone());
        std::thread::spawn(move || {
            let mut samples = Vec::new();
            while !stop.load(Ordering::SeqCst) {
                if let Some(kib) = rss_kib(pid) {
                    let calls = budget.answered.load(Ordering::SeqCst);
                    samples.push(RssSample { calls, kib });
                }
                std::thread::sleep(Duration::from_millis(250));
            }
            samples
        })
    });

    let scenarios = Arc::new(scenarios());
    let mut workers = Vec::new();
    for worker in 0..options.workers.max(1) {
        let reach = match &gateway {
            Gateway::Stdio(client) => WorkerGateway::Shared(client.peer().clone()),
            Gateway::Http {
                url,
                token,
                calls_per_session,
                ..
            } => WorkerGateway::Own {
                url: url.clone(),
                token: token.clone(),
                calls_per_session: *calls_per_session,
            },
        };
        workers.push(tokio::spawn(work(
            worker,
            options.workers.max(1),
            reach,
            scenarios.clone(),
            budget.clone(),
        )));
    }
    // Every worker is waited for before any failure is returned, and the
    // sampler is stopped either way.
    let mut finished = Vec::new();
    for worker in workers {
        finished.push(worker.await);
    }
    let seconds = started.elapsed().as_secs_f64();
    stop.store(true, Ordering::SeqCst);
    let rss = sampler.map(|sampler| sampler.join());
    let mut report = LoadReport::default();
    for worker in finished {
        for (index, outcome) in worker.context("a worker panicked")?? {
            let scenario = &scenarios[index];
            report.calls += 1;
            if scenario.elicits {
                report.elicitations += 1;
            }
            let count = report
                .scenarios
                .entry(scenario.name.to_owned())
                .or_default();
            match outcome {
                Outcome::Expected => count.expected += 1,
                Outcome::Unshown => count.unshown += 1,
                Outcome::Unexpected(text) => {
                    count.unexpected += 1;
                    count.example.get_or_insert(text);
                }
            }
        }
    }
    report.seconds = seconds;
    report.elicitations_per_second = report.elicitations as f64 / report.seconds.max(1e-9);
    report.sessions = budget.sessions.load(Ordering::SeqCst);

    // Every answer is audited before it is sent, so the log is complete now.
    if let Some(rss) = rss {
        report.rss = rss.map_err(|_| anyhow::anyhow!("the sampler panicked"))?;
    }
    match gateway {
        Gateway::Stdio(client) => {
            report.sessions = 1;
            client.cancel().await.context("closing the session")?;
        }
        Gateway::Http { mut child, .. } => {
            child.start_kill().context("stopping gatehouse serve")?;
            child.wait().await.context("waiting for gatehouse serve")?;
        }
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
                max_calls: None,
                transport: Transport::Stdio,
            };
            let path = write_config(dir.path(), &options).expect("config");
            let config = gatehouse_gateway::config::Config::load(&path).expect("a valid config");
            assert_eq!(config.gateway.max_pending_per_session, pending);
        }
    }
}
