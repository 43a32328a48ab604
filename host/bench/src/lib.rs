//! Load tests (`gatehouse bench`): N worker OS threads doing normal
//! production reviews ([`Chain::review`], a fresh instance per review) for a
//! while, after a short warm-up, every latency recorded; and the same
//! requests decided by a [`ProcessHook`], a program spawned once per
//! decision, the way reviewers are deployed without gatehouse (Claude Code
//! hooks, Docker MCP gateway interceptors).
//!
//! Each run returns a [`RunReport`]: the count, wall time, reviews per
//! second, latency percentiles, outcomes by kind (failures counted, never
//! dropped) and memory.
//!
//! ```no_run
//! use std::sync::Arc;
//! use std::time::Duration;
//! use gatehouse_bench::{Bench, ProcessHook};
//! use gatehouse_core::chain::{Chain, ChainLink};
//! use gatehouse_core::context::ReviewContext;
//! use gatehouse_core::elicitation::RequestId;
//! use gatehouse_core::sandbox::{Limits, Sandbox};
//!
//! let sandbox = Sandbox::new(Limits::default())?;
//! let guardian = Arc::new(sandbox.load_file("gatehouse_guardian.wasm", None)?);
//! let chain = Chain::new(vec![ChainLink::new(guardian)]);
//! let requests = gatehouse_bench::sample_requests(&ReviewContext::new("docs", RequestId::Number(1)))?;
//! let bench = Bench::new(requests)
//!     .concurrency(2)
//!     .duration(Duration::from_secs(5));
//! let sandboxed = bench.run_chain(&chain)?;
//! let hooked = bench.run_hook(&ProcessHook::new("gatehouse-process-hook"))?;
//! println!(
//!     "{:.0} vs {:.0} reviews/s",
//!     sandboxed.reviews_per_sec,
//!     hooked.reviews_per_sec
//! );
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod hook;
mod memory;
mod report;
mod requests;
mod run;
mod stats;

use std::time::Duration;

use serde_json::{Value, json};

use gatehouse_core::chain::Chain;
use gatehouse_core::request::ReviewRequest;

pub use hook::{HookFailure, ProcessHook, hook_input};
pub use memory::{current_rss, peak_rss, reset_peak_rss};
pub use report::{Comparison, MemoryReport, RunReport, Runner};
pub use requests::{RequestsError, load_requests, parse_requests, sample_requests};
pub use stats::{LatencySummary, OutcomeKind, Outcomes, percentile};

/// The default run length.
pub const DEFAULT_DURATION: Duration = Duration::from_secs(5);
/// The default number of worker threads.
pub const DEFAULT_CONCURRENCY: usize = 2;
/// How many hook processes are sampled for their peak RSS.
const HOOK_MEMORY_SAMPLES: usize = 3;

/// The embedded sample: a ~1 KB approval elicitation (Codex `_meta` for an
/// `mcp_tool_call` review of `read_file` on the docs server), the `params`
/// of `elicitation/create` as on the wire. The default request of
/// `gatehouse bench`, and the elicitation `host/bench/benches/review.rs` measures.
///
/// ```
/// let sample = gatehouse_bench::sample_elicitation();
/// assert_eq!(sample["_meta"]["tool_name"], "read_file");
/// assert!(sample.to_string().len() > 900);
/// ```
pub fn sample_elicitation() -> Value {
    json!({
        "message": "Allow the agent to run read_file on the docs server? It reads a file from the documentation checkout and returns its text.",
        "requestedSchema": {"type": "object", "properties": {}},
        "_meta": {
            "codex_request_type": "approval_request",
            "codex_approval_kind": "mcp_tool_call",
            "tool_name": "read_file",
            "tool_title": "Read file",
            "tool_description": "Reads a UTF-8 file below the documentation root and returns its contents.",
            "connector_name": "Docs",
            "tool_params": {
                "path": "guides/getting-started/installation.md",
                "encoding": "utf-8",
                "max_bytes": 65536,
                "context": "The user asked how to install the project on a fresh machine; the agent wants to quote the installation guide verbatim, including the prerequisites section and the troubleshooting notes at the end of the page. ".repeat(2)
            }
        }
    })
}

/// Why a run could not be made. Failed reviews are not errors: they are
/// counted in the report.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// There is nothing to review.
    #[error("no requests to review")]
    NoRequests,
    /// Concurrency 0.
    #[error("concurrency must be at least 1")]
    NoWorkers,
    /// A zero duration.
    #[error("the duration must be longer than zero")]
    NoDuration,
    /// A chain without modules defers everything without reviewing.
    #[error("the chain has no module")]
    EmptyChain,
    /// A worker thread or its runtime could not be started.
    #[error("cannot start a worker: {0}")]
    Worker(std::io::Error),
    /// A worker thread panicked.
    #[error("a worker thread panicked")]
    WorkerPanicked,
    /// The hook could not be run at all (probed once before the run).
    #[error("process hook `{command}`: {failure}")]
    Hook {
        /// The hook's command line.
        command: String,
        /// Why it failed.
        failure: HookFailure,
    },
}

/// A load test's settings: the requests (cycled through; worker `w` starts at
/// request `w`), the number of worker threads (each with one review in
/// flight), the measured duration and the warm-up before it.
///
/// ```
/// use std::time::Duration;
/// use gatehouse_bench::Bench;
/// let bench = Bench::new(Vec::new()).concurrency(4).duration(Duration::from_millis(300));
/// assert_eq!(bench.warmup_duration(), Duration::from_millis(30));
/// ```
#[derive(Debug, Clone)]
pub struct Bench {
    requests: Vec<ReviewRequest>,
    concurrency: usize,
    duration: Duration,
    warmup: Option<Duration>,
}

impl Bench {
    /// A bench over `requests`: [`DEFAULT_CONCURRENCY`] workers for
    /// [`DEFAULT_DURATION`], with the default warm-up.
    pub fn new(requests: Vec<ReviewRequest>) -> Bench {
        Bench {
            requests,
            concurrency: DEFAULT_CONCURRENCY,
            duration: DEFAULT_DURATION,
            warmup: None,
        }
    }

    /// Sets the number of worker threads.
    pub fn concurrency(mut self, workers: usize) -> Bench {
        self.concurrency = workers;
        self
    }

    /// Sets how long the measured part runs.
    pub fn duration(mut self, duration: Duration) -> Bench {
        self.duration = duration;
        self
    }

    /// Sets the warm-up (default: a tenth of the duration, 20 ms to 1 s).
    pub fn warmup(mut self, warmup: Duration) -> Bench {
        self.warmup = Some(warmup);
        self
    }

    /// The requests.
    pub fn requests(&self) -> &[ReviewRequest] {
        &self.requests
    }

    /// The number of worker threads.
    pub fn workers(&self) -> usize {
        self.concurrency
    }

    /// How long the measured part runs.
    pub fn measured_duration(&self) -> Duration {
        self.duration
    }

    /// The warm-up before the measured part.
    pub fn warmup_duration(&self) -> Duration {
        self.warmup.unwrap_or_else(|| {
            (self.duration / 10).clamp(Duration::from_millis(20), Duration::from_secs(1))
        })
    }

    /// Runs the requests through `chain` (fresh instances, the production
    /// review path).
    pub fn run_chain(&self, chain: &Chain) -> Result<RunReport, BenchError> {
        if chain.is_empty() {
            return Err(BenchError::EmptyChain);
        }
        self.check()?;
        let workers = vec![run::ChainWorker(chain); self.concurrency];
        run::run(self, Runner::Gatehouse, None, workers)
    }

    /// Runs the requests through `hook`, one process per decision. The hook
    /// is probed once first: if it cannot be started at all, that is an
    /// error naming the command; any other failure is counted in the run.
    pub fn run_hook(&self, hook: &ProcessHook) -> Result<RunReport, BenchError> {
        self.check()?;
        let mut workers = Vec::with_capacity(self.concurrency);
        for _ in 0..self.concurrency {
            workers.push(run::HookWorker::new(hook).map_err(BenchError::Worker)?);
        }
        if let (Some(worker), Some(request)) = (workers.first_mut(), self.requests.first())
            && let Err(failure @ HookFailure::Spawn(_)) = worker.decide(request)
        {
            return Err(BenchError::Hook {
                command: hook.command_line(),
                failure,
            });
        }
        let mut report = run::run(
            self,
            Runner::ProcessHook,
            Some(hook.command_line()),
            workers,
        )?;
        // Outside the window: sampling /proc would disturb it.
        let hook_peak_rss = self
            .requests
            .iter()
            .cycle()
            .take(HOOK_MEMORY_SAMPLES)
            .filter_map(|request| hook.sampled_peak_rss(request))
            .max();
        report.memory.hook_peak_rss = hook_peak_rss;
        report.memory.per_review_in_flight = hook_peak_rss;
        Ok(report)
    }

    fn check(&self) -> Result<(), BenchError> {
        if self.requests.is_empty() {
            return Err(BenchError::NoRequests);
        }
        if self.concurrency == 0 {
            return Err(BenchError::NoWorkers);
        }
        if self.duration.is_zero() {
            return Err(BenchError::NoDuration);
        }
        Ok(())
    }
}
