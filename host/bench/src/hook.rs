//! A process hook: a program spawned once per decision that reads one review
//! request as JSON on stdin ([`hook_input`]) and prints one verdict line on
//! stdout (an [`Outcome`] as JSON), then exits. The verdict goes through the
//! same checks as a guest's outcome.

use std::ffi::OsString;
use std::io::Write;
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::memory;

use gatehouse_core::context::CatalogEntry;
use gatehouse_core::elicitation::Elicitation;
use gatehouse_core::failure::ReviewFailure;
use gatehouse_core::outcome::Outcome;
use gatehouse_core::request::ReviewRequest;
use gatehouse_core::sandbox::Limits;

/// The default per-decision timeout.
pub const DEFAULT_HOOK_TIMEOUT: Duration = Duration::from_secs(5);

/// How much of a hook's stderr a failure quotes.
const STDERR_QUOTE_BYTES: usize = 512;

/// Why a hook gave no usable verdict. Codes are stable, like
/// [`ReviewFailure::code`].
#[derive(Debug, thiserror::Error)]
pub enum HookFailure {
    /// The program could not be started.
    #[error("cannot start: {0}")]
    Spawn(std::io::Error),
    /// Talking to the process failed.
    #[error("cannot talk to the process: {0}")]
    Io(std::io::Error),
    /// It did not exit within the timeout (it was killed).
    #[error("did not answer within {0:?}; killed")]
    Timeout(Duration),
    /// It exited unsuccessfully.
    #[error("exited with {status}; stderr: {stderr:?}")]
    Exit {
        /// How it exited.
        status: ExitStatus,
        /// The start of its stderr.
        stderr: String,
    },
    /// Its stdout is not a verdict line.
    #[error("printed no verdict: {0}")]
    Output(String),
    /// The verdict failed the checks every outcome passes.
    #[error("gave a verdict the host refuses: {0}")]
    Refused(ReviewFailure),
}

impl HookFailure {
    /// `hook-spawn`, `hook-io`, `hook-timeout`, `hook-exit`, `hook-output`, or
    /// the refused verdict's [`ReviewFailure::code`].
    pub fn code(&self) -> &'static str {
        match self {
            HookFailure::Spawn(_) => "hook-spawn",
            HookFailure::Io(_) => "hook-io",
            HookFailure::Timeout(_) => "hook-timeout",
            HookFailure::Exit { .. } => "hook-exit",
            HookFailure::Output(_) => "hook-output",
            HookFailure::Refused(failure) => failure.code(),
        }
    }
}

/// The stdin document for one decision: the module config and the contract's
/// `review-request` (`wit/reviewer.wit`) as JSON, JSON values where the
/// contract passes JSON text, context fields spelled as in context files.
/// `examples/process-hook` documents the format and reads it.
///
/// ```
/// use gatehouse_bench::hook_input;
/// use gatehouse_core::context::ReviewContext;
/// use gatehouse_core::elicitation::{ElicitationParams, RequestId};
/// use gatehouse_core::request::ReviewRequest;
/// let params = ElicitationParams::from_wire(&serde_json::json!({
///     "message": "Allow?", "requestedSchema": {"type": "object", "properties": {}}
/// })).unwrap();
/// let request = ReviewRequest::new(params, ReviewContext::new("docs", RequestId::Number(7)));
/// let input = hook_input(&serde_json::json!({"default": "allow"}), &request);
/// assert_eq!(input["config"]["default"], "allow");
/// assert_eq!(input["request"]["elicitation"]["mode"], "form");
/// assert_eq!(input["request"]["context"]["request_id"], 7);
/// assert_eq!(input["request"]["context"]["catalog"], "unavailable");
/// ```
pub fn hook_input(config: &Value, request: &ReviewRequest) -> Value {
    let params = request.params();
    let elicitation = match &params.elicitation {
        Elicitation::Form {
            message,
            requested_schema,
        } => json!({"mode": "form", "message": message, "requested_schema": requested_schema}),
        Elicitation::Url {
            message,
            url,
            elicitation_id,
        } => json!({"mode": "url", "message": message, "url": url,
                    "elicitation_id": elicitation_id}),
    };
    let context = request.context();
    let catalog = match &context.catalog {
        CatalogEntry::Unavailable => json!("unavailable"),
        CatalogEntry::NotListed => json!("not_listed"),
        CatalogEntry::Listed(tool) => json!({"listed": tool}),
    };
    json!({
        "config": config,
        "request": {
            "elicitation": elicitation,
            "meta": params.meta,
            "context": {
                "server_name": context.server_name,
                "request_id": context.request_id,
                "protocol_version": context.protocol_version,
                "approval_policy": context.approval_policy,
                "approvals_reviewer": context.approvals_reviewer,
                "auto_approve_prompts": context.auto_approve_prompts,
                "session_id": context.session_id,
                "turn_id": context.turn_id,
                "catalog": catalog,
            }
        }
    })
}

/// A process hook: the command, its arguments, the module config sent with
/// every request, and the per-decision timeout.
///
/// ```
/// use std::time::Duration;
/// use gatehouse_bench::ProcessHook;
/// let hook = ProcessHook::new("gatehouse-process-hook")
///     .arg("--quiet")
///     .config(serde_json::json!({"default": "deny"}))
///     .timeout(Duration::from_secs(2));
/// assert_eq!(hook.command_line(), "gatehouse-process-hook --quiet");
/// ```
#[derive(Debug, Clone)]
pub struct ProcessHook {
    program: OsString,
    args: Vec<OsString>,
    config: Value,
    timeout: Duration,
    output_limit: usize,
}

impl ProcessHook {
    /// A hook running `program` with config `{}` and the default timeout.
    pub fn new(program: impl Into<OsString>) -> ProcessHook {
        ProcessHook {
            program: program.into(),
            args: Vec::new(),
            config: json!({}),
            timeout: DEFAULT_HOOK_TIMEOUT,
            output_limit: Limits::default().output_bytes(),
        }
    }

    /// Adds an argument.
    pub fn arg(mut self, arg: impl Into<OsString>) -> ProcessHook {
        self.args.push(arg.into());
        self
    }

    /// Adds arguments.
    pub fn args<I: IntoIterator<Item = A>, A: Into<OsString>>(mut self, args: I) -> ProcessHook {
        self.args.extend(args.into_iter().map(Into::into));
        self
    }

    /// Sets the module config sent with every request.
    pub fn config(mut self, config: Value) -> ProcessHook {
        self.config = config;
        self
    }

    /// Sets how long one decision may take before the process is killed.
    pub fn timeout(mut self, timeout: Duration) -> ProcessHook {
        self.timeout = timeout;
        self
    }

    /// The command line, for reports.
    pub fn command_line(&self) -> String {
        std::iter::once(&self.program)
            .chain(&self.args)
            .map(|part| part.to_string_lossy())
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// One decision: spawn, write the request, read the verdict, wait; the
    /// verdict checked like a guest's outcome. The process is killed at the
    /// timeout.
    pub async fn decide(&self, request: &ReviewRequest) -> Result<Outcome, HookFailure> {
        let input = hook_input(&self.config, request).to_string();
        let mut child = tokio::process::Command::new(&self.program)
            .args(&self.args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .map_err(HookFailure::Spawn)?;
        let (Some(mut stdin), Some(mut stdout), Some(mut stderr)) =
            (child.stdin.take(), child.stdout.take(), child.stderr.take())
        else {
            return Err(HookFailure::Io(std::io::Error::other("no pipes")));
        };
        let talk = async {
            let write = async {
                let written = stdin.write_all(input.as_bytes()).await;
                drop(stdin);
                match written {
                    // A hook may answer without reading all of its input.
                    Err(error) if error.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
                    other => other,
                }
            };
            let mut out = Vec::new();
            let mut err = Vec::new();
            let (written, read_out, read_err, status) = tokio::join!(
                write,
                stdout.read_to_end(&mut out),
                stderr.read_to_end(&mut err),
                child.wait()
            );
            written
                .and(read_out)
                .and(read_err)
                .map_err(HookFailure::Io)?;
            Ok::<_, HookFailure>((status.map_err(HookFailure::Io)?, out, err))
        };
        let (status, out, err) = match tokio::time::timeout(self.timeout, talk).await {
            Ok(result) => result?,
            Err(_) => {
                // Kill and reap it; the error says why.
                let _ = child.start_kill();
                let _ = child.wait().await;
                return Err(HookFailure::Timeout(self.timeout));
            }
        };
        if !status.success() {
            let quoted = &err[..err.len().min(STDERR_QUOTE_BYTES)];
            return Err(HookFailure::Exit {
                status,
                stderr: String::from_utf8_lossy(quoted).trim_end().to_owned(),
            });
        }
        parse_verdict(&out)?
            .check(&request.params().elicitation, self.output_limit)
            .map_err(HookFailure::Refused)
    }
}

impl ProcessHook {
    /// The peak RSS in bytes of one hook process deciding `request`, sampled
    /// from `/proc` while it runs: the request is written once the process
    /// is asleep (waiting for its stdin, so start-up is done), then the
    /// process is sampled until it exits (what it allocates in its last
    /// moments may be missed). `None` off Linux or without a sample.
    ///
    /// `getrusage` cannot be used: a child's `ru_maxrss` includes the
    /// parent's peak, inherited at `exec` from the address space the child
    /// was spawned with.
    pub fn sampled_peak_rss(&self, request: &ReviewRequest) -> Option<u64> {
        let input = hook_input(&self.config, request).to_string();
        let mut child = std::process::Command::new(&self.program)
            .args(&self.args)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .ok()?;
        let pid = child.id();
        let mut stdin = child.stdin.take();
        let deadline = std::time::Instant::now() + self.timeout;
        let mut peak = None;
        loop {
            peak = peak.max(memory::process_peak_rss(pid));
            if stdin.is_some() && memory::process_is_sleeping(pid) {
                // A hook that exits without reading its input is fine here.
                if let Some(mut pipe) = stdin.take() {
                    let _ = pipe.write_all(input.as_bytes());
                }
            }
            if !matches!(child.try_wait(), Ok(None)) {
                break;
            }
            if std::time::Instant::now() >= deadline {
                let _ = child.kill();
                let _ = child.wait();
                break;
            }
            std::thread::sleep(Duration::from_micros(50));
        }
        peak
    }
}

/// The first non-blank line of stdout as an [`Outcome`].
fn parse_verdict(stdout: &[u8]) -> Result<Outcome, HookFailure> {
    let text = std::str::from_utf8(stdout)
        .map_err(|error| HookFailure::Output(format!("stdout is not UTF-8: {error}")))?;
    let line = text
        .lines()
        .find(|line| !line.trim().is_empty())
        .ok_or_else(|| HookFailure::Output("stdout is empty".to_owned()))?;
    serde_json::from_str(line)
        .map_err(|error| HookFailure::Output(format!("{error} in {:?}", truncate(line, 200))))
}

fn truncate(text: &str, bytes: usize) -> &str {
    let mut end = text.len().min(bytes);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;
    use gatehouse_core::context::ReviewContext;
    use gatehouse_core::elicitation::{ElicitationParams, RequestId};
    use gatehouse_core::outcome::{Decision, RiskLevel};

    fn request() -> ReviewRequest {
        let params = ElicitationParams::from_wire(&crate::sample_elicitation()).unwrap();
        ReviewRequest::new(params, ReviewContext::new("docs", RequestId::Number(1)))
    }

    fn decide(script: &str) -> Result<Outcome, HookFailure> {
        let hook = ProcessHook::new("sh")
            .arg("-c")
            .arg(script)
            .timeout(Duration::from_millis(500));
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(hook.decide(&request()))
    }

    #[test]
    fn the_input_carries_the_request_and_context() {
        let input = hook_input(&json!({"allow": []}), &request());
        let request = &input["request"];
        assert_eq!(request["meta"]["tool_name"], "read_file");
        assert_eq!(
            request["elicitation"]["requested_schema"],
            json!({"type": "object", "properties": {}})
        );
        assert_eq!(request["context"]["approval_policy"], "on-request");
        assert_eq!(request["context"]["approvals_reviewer"], "auto_review");
        assert_eq!(input["config"], json!({"allow": []}));
    }

    #[test]
    fn a_verdict_line_is_read_and_checked() {
        let outcome = decide(
            r#"cat >/dev/null; echo '{"decision": {"action": "accept", "content": {}}, "risk": "low"}'"#,
        )
        .unwrap();
        assert_eq!(
            outcome.decision,
            Decision::Accept {
                content: Some(json!({}))
            }
        );
        assert_eq!(outcome.risk, Some(RiskLevel::Low));
        // Content the schema does not allow is refused, as from a guest.
        let refused = decide(
            r#"cat >/dev/null; echo '{"decision": {"action": "accept", "content": {"x": 1}}}'"#,
        )
        .unwrap_err();
        assert_eq!(refused.code(), "schema-mismatch");
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn a_hook_process_peak_is_sampled() {
        let hook = ProcessHook::new("sh")
            .arg("-c")
            .arg("cat >/dev/null; echo done");
        let peak = hook.sampled_peak_rss(&request());
        assert!(peak.is_some_and(|peak| peak > 0), "{peak:?}");
    }

    #[test]
    fn failures_are_classified() {
        assert_eq!(decide("echo nope").unwrap_err().code(), "hook-output");
        assert_eq!(decide("exit 0").unwrap_err().code(), "hook-output");
        let exit = decide("echo broken >&2; exit 3").unwrap_err();
        assert_eq!(exit.code(), "hook-exit");
        assert!(exit.to_string().contains("broken"), "{exit}");
        assert_eq!(decide("sleep 5").unwrap_err().code(), "hook-timeout");
        let missing = ProcessHook::new("/nonexistent/gatehouse-hook");
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let spawn = runtime.block_on(missing.decide(&request())).unwrap_err();
        assert_eq!(spawn.code(), "hook-spawn");
    }
}
