//! A stdio MCP server as an rmcp transport: the child process, started with
//! a closed environment, its stderr logged (line-capped, lossy, escaped,
//! rate-limited: [`drain_stderr`]), its stdout read line by line through
//! [`rescue_message`] before rmcp decodes it, and shut down politely (stdin
//! closed, then SIGTERM, then SIGKILL) when the connection ends.

use std::process::Stdio;
use std::time::{Duration, Instant};

use rmcp::RoleClient;
use rmcp::service::{RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::Transport;
use rmcp::transport::async_rw::{AsyncRwTransport, DEFAULT_MAX_LINE_LENGTH};
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWriteExt, BufReader, DuplexStream};
use tokio::process::{Child, ChildStdin, ChildStdout};
use tokio::task::JoinHandle;

use crate::connection::{BASE_ENV_VARS, ConnectError};
use crate::rescue::{RESCUE_GROWTH, rescue_message};
use crate::server_config::{ServerConfig, Transport as ServerTransport};
use gatehouse_base::escape::Escaped;

/// How long a server gets to exit after its stdin closes, and again after
/// SIGTERM, before it is killed.
const EXIT_GRACE: Duration = Duration::from_secs(3);

/// The buffer between the stdout pump and rmcp.
const PIPE_BUFFER: usize = 64 * 1024;

/// A running stdio server, ready to hand to rmcp.
pub(crate) struct StdioServer {
    rmcp: AsyncRwTransport<RoleClient, DuplexStream, ChildStdin>,
    /// Killed on drop (`kill_on_drop`) unless [`Transport::close`] ended it.
    child: Option<Child>,
    pump: JoinHandle<()>,
    server: String,
}

impl StdioServer {
    /// Starts the server `config` describes.
    pub(crate) fn spawn(config: &ServerConfig) -> Result<StdioServer, ConnectError> {
        let ServerTransport::Stdio {
            command,
            args,
            env,
            env_vars,
            cwd,
        } = &config.transport
        else {
            return Err(ConnectError::Config {
                server: config.name.clone(),
                message: "not a stdio server".to_owned(),
            });
        };
        let mut process = tokio::process::Command::new(command);
        process
            .args(args)
            .env_clear()
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        for name in BASE_ENV_VARS
            .iter()
            .copied()
            .chain(env_vars.iter().map(String::as_str))
        {
            if let Some(value) = std::env::var_os(name) {
                process.env(name, value);
            }
        }
        process.envs(env);
        if let Some(cwd) = cwd {
            process.current_dir(cwd);
        }
        let spawn_error = |source| ConnectError::Spawn {
            server: config.name.clone(),
            command: command.clone(),
            source,
        };
        let mut child = process.spawn().map_err(spawn_error)?;
        let missing = |stream: &str| {
            spawn_error(std::io::Error::other(format!(
                "the child's {stream} was not piped"
            )))
        };
        let stdin = child.stdin.take().ok_or_else(|| missing("stdin"))?;
        let stdout = child.stdout.take().ok_or_else(|| missing("stdout"))?;
        if let Some(stderr) = child.stderr.take() {
            tokio::spawn(drain_stderr(config.name.clone(), stderr));
        }
        let (to_rmcp, from_pump) = tokio::io::duplex(PIPE_BUFFER);
        let pump = tokio::spawn(pump_stdout(config.name.clone(), stdout, to_rmcp));
        Ok(StdioServer {
            // The pump bounds each line; a rescued one may be a little longer.
            rmcp: AsyncRwTransport::new_client(from_pump, stdin)
                .with_max_line_length(DEFAULT_MAX_LINE_LENGTH + RESCUE_GROWTH),
            child: Some(child),
            pump,
            server: config.name.clone(),
        })
    }
}

impl Drop for StdioServer {
    fn drop(&mut self) {
        self.pump.abort();
    }
}

impl Transport<RoleClient> for StdioServer {
    type Error = std::io::Error;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleClient>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        self.rmcp.send(item)
    }

    fn receive(&mut self) -> impl Future<Output = Option<RxJsonRpcMessage<RoleClient>>> + Send {
        self.rmcp.receive()
    }

    async fn close(&mut self) -> Result<(), Self::Error> {
        // Closing rmcp's side drops the child's stdin: the polite way to
        // ask a stdio server to exit.
        self.rmcp.close().await?;
        if let Some(child) = self.child.take() {
            shut_down(&self.server, child).await;
        }
        Ok(())
    }
}

/// Waits for a server whose stdin is closed to exit; then SIGTERM, then
/// SIGKILL, each after [`EXIT_GRACE`].
async fn shut_down(server: &str, mut child: Child) {
    if let Ok(Ok(status)) = tokio::time::timeout(EXIT_GRACE, child.wait()).await {
        tracing::debug!(server = %server, %status, "server exited");
        return;
    }
    #[cfg(unix)]
    if let Some(pid) = child.id().and_then(|id| i32::try_from(id).ok()) {
        if let Some(pid) = rustix::process::Pid::from_raw(pid) {
            let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
        }
        if let Ok(Ok(status)) = tokio::time::timeout(EXIT_GRACE, child.wait()).await {
            tracing::debug!(server = %server, %status, "server exited on SIGTERM");
            return;
        }
    }
    tracing::warn!(server = %server, "server ignored its closed stdin and SIGTERM; killing it");
    if let Err(error) = child.kill().await {
        tracing::warn!(server = %server, %error, "could not kill the server");
    }
}

/// Copies the server's stdout to rmcp line by line, rescuing elicitations
/// rmcp could not type. A line longer than rmcp's own limit is dropped here
/// (rmcp would drop it too) and logged with the server's name; a last line
/// without a newline gets one. Ends when either side closes; dropping
/// `to_rmcp` then gives rmcp its end of file.
async fn pump_stdout(server: String, stdout: ChildStdout, mut to_rmcp: DuplexStream) {
    let mut reader = BufReader::with_capacity(PIPE_BUFFER, stdout);
    let mut line: Vec<u8> = Vec::new();
    let mut oversized = false;
    loop {
        let available = match reader.fill_buf().await {
            Ok(available) => available,
            Err(error) => {
                tracing::warn!(server = %server, %error, "reading the server's stdout failed");
                break;
            }
        };
        if available.is_empty() {
            if !line.is_empty() && !oversized {
                // A last message without its newline: rmcp drops an
                // unterminated line, so end it here and deliver it.
                line.push(b'\n');
                let _ = forward(&mut to_rmcp, &line).await;
            }
            break;
        }
        let newline = memchr::memchr(b'\n', available);
        let take = newline.map_or(available.len(), |at| at + 1);
        if !oversized {
            if line.len().saturating_add(take) > DEFAULT_MAX_LINE_LENGTH {
                oversized = true;
                line.clear();
                tracing::warn!(
                    server = %server,
                    limit = DEFAULT_MAX_LINE_LENGTH,
                    "dropped a message longer than the limit"
                );
            } else {
                line.extend_from_slice(&available[..take]);
            }
        }
        reader.consume(take);
        if newline.is_some() {
            if !oversized && forward(&mut to_rmcp, &line).await.is_err() {
                break;
            }
            oversized = false;
            line.clear();
        }
    }
}

/// The longest stderr line logged; the rest of a longer line is discarded.
const STDERR_LINE_CAP: usize = 8 * 1024;

/// How many stderr lines may be logged in a burst, and how many more per
/// second after it; the others are counted and reported as suppressed.
const STDERR_BURST: u32 = 200;
const STDERR_LINES_PER_SEC: u32 = 20;

/// Logs a server's stderr, line by line, until it closes, in bounded
/// memory: a line is kept up to [`STDERR_LINE_CAP`] bytes (logged with a
/// marker when longer, the rest discarded up to the next newline, never
/// buffered), read as lossy UTF-8 (invalid bytes do not stop the draining),
/// escaped (a server cannot drive the terminal or forge log lines), and
/// rate-limited ([`StderrBudget`]). A server whose stderr is not drained
/// would block on its next write.
async fn drain_stderr(server: String, stderr: impl AsyncRead + Unpin) {
    let mut reader = BufReader::with_capacity(PIPE_BUFFER, stderr);
    let mut line: Vec<u8> = Vec::with_capacity(256);
    let mut budget = StderrBudget::new(Instant::now());
    // The current line was logged truncated: skip to its newline.
    let mut skipping = false;
    loop {
        let available = match reader.fill_buf().await {
            Ok(available) => available,
            Err(error) => {
                tracing::debug!(target: "gatehouse::server", server = %server, %error, "reading the server's stderr failed");
                break;
            }
        };
        if available.is_empty() {
            if !line.is_empty() {
                log_stderr_line(&server, &line, false, &mut budget);
            }
            break;
        }
        let newline = memchr::memchr(b'\n', available);
        let body = &available[..newline.unwrap_or(available.len())];
        let take = newline.map_or(available.len(), |at| at + 1);
        if !skipping {
            let room = STDERR_LINE_CAP - line.len();
            if body.len() > room {
                line.extend_from_slice(&body[..room]);
                log_stderr_line(&server, &line, true, &mut budget);
                line.clear();
                skipping = true;
            } else {
                line.extend_from_slice(body);
            }
        }
        reader.consume(take);
        if newline.is_some() {
            if !skipping {
                log_stderr_line(&server, &line, false, &mut budget);
            }
            line.clear();
            skipping = false;
        }
    }
    budget.finish(&server);
}

/// Logs one stderr line (lossy UTF-8, escaped) if the budget allows.
fn log_stderr_line(server: &str, line: &[u8], truncated: bool, budget: &mut StderrBudget) {
    if !tracing::enabled!(target: "gatehouse::server", tracing::Level::DEBUG)
        || !budget.take(server, Instant::now())
    {
        return;
    }
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    let text = String::from_utf8_lossy(line);
    let text = Escaped(&text);
    if truncated {
        tracing::debug!(target: "gatehouse::server", server = %server, "{text} [line truncated at {STDERR_LINE_CAP} bytes]");
    } else {
        tracing::debug!(target: "gatehouse::server", server = %server, "{text}");
    }
}

/// A token bucket for the log lines one server causes: `burst` at once,
/// then `per_sec` a second; a line over it is counted in
/// [`LogBudget::suppressed`], for the caller to report before the next line
/// that fits. One concept for every per-server flood of log lines: the
/// server's stderr ([`StderrBudget`]) and the connection's warnings about
/// requests it refuses (`connection::inbound`) each have one per server.
pub(crate) struct LogBudget {
    tokens: f64,
    refilled: Instant,
    burst: u32,
    per_sec: u32,
    /// Lines not logged since the count was last taken.
    pub(crate) suppressed: u64,
}

impl LogBudget {
    /// A full bucket of `burst` lines, refilled at `per_sec` a second.
    pub(crate) fn new(burst: u32, per_sec: u32, now: Instant) -> Self {
        LogBudget {
            tokens: f64::from(burst),
            refilled: now,
            burst,
            per_sec,
            suppressed: 0,
        }
    }

    /// Whether a line may be logged now; counts it as suppressed when not.
    pub(crate) fn allow(&mut self, now: Instant) -> bool {
        let elapsed = now.saturating_duration_since(self.refilled).as_secs_f64();
        self.tokens = (self.tokens + elapsed * f64::from(self.per_sec)).min(f64::from(self.burst));
        self.refilled = now;
        if self.tokens < 1.0 {
            self.suppressed += 1;
            return false;
        }
        self.tokens -= 1.0;
        true
    }

    /// The lines suppressed since this was last called; the count starts
    /// again from 0.
    pub(crate) fn take_suppressed(&mut self) -> u64 {
        std::mem::take(&mut self.suppressed)
    }
}

/// The budget of a server's stderr lines: [`STDERR_BURST`] at once, then
/// [`STDERR_LINES_PER_SEC`]; lines over it are counted, and the count is
/// logged before the next line that fits (and when stderr closes).
struct StderrBudget(LogBudget);

impl StderrBudget {
    fn new(now: Instant) -> Self {
        StderrBudget(LogBudget::new(STDERR_BURST, STDERR_LINES_PER_SEC, now))
    }

    /// Whether a line may be logged now; counts it when not.
    fn take(&mut self, server: &str, now: Instant) -> bool {
        if !self.0.allow(now) {
            return false;
        }
        self.finish(server);
        true
    }

    /// Logs how many lines were suppressed since the last report, if any.
    fn finish(&mut self, server: &str) {
        let suppressed = self.0.take_suppressed();
        if suppressed > 0 {
            tracing::debug!(target: "gatehouse::server", server = %server, suppressed, "stderr lines not logged: more than {STDERR_BURST} at once or {STDERR_LINES_PER_SEC} a second");
        }
    }
}

/// Writes one line (with its newline, if it had one) towards rmcp.
async fn forward(to_rmcp: &mut DuplexStream, line: &[u8]) -> std::io::Result<()> {
    let body = line.strip_suffix(b"\n").unwrap_or(line);
    let body = body.strip_suffix(b"\r").unwrap_or(body);
    match rescue_message(body) {
        Some(rescued) => {
            to_rmcp.write_all(&rescued).await?;
            to_rmcp.write_all(b"\n").await
        }
        None => to_rmcp.write_all(line).await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};
    use tokio::io::AsyncReadExt;

    async fn pumped(input: Vec<u8>) -> Vec<u8> {
        // A child that prints `input` on stdout stands in for a server.
        let mut child = tokio::process::Command::new("cat")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("cat runs");
        let mut stdin = child.stdin.take().unwrap();
        let stdout = child.stdout.take().unwrap();
        let (to_rmcp, mut from_pump) = tokio::io::duplex(PIPE_BUFFER);
        let pump = tokio::spawn(pump_stdout("t".into(), stdout, to_rmcp));
        let writer = tokio::spawn(async move {
            stdin.write_all(&input).await.unwrap();
            drop(stdin);
        });
        let mut out = Vec::new();
        from_pump.read_to_end(&mut out).await.unwrap();
        writer.await.unwrap();
        pump.await.unwrap();
        let _ = child.wait().await;
        out
    }

    #[tokio::test]
    async fn lines_pass_through_and_untypable_elicitations_are_rescued() {
        let plain = json!({"jsonrpc": "2.0", "id": 1, "result": {}}).to_string();
        let bad =
            json!({"jsonrpc": "2.0", "id": "b", "method": "elicitation/create", "params": [1]})
                .to_string();
        let input = format!("{plain}\n{bad}\r\nnot json\nlast-without-newline");
        let out = String::from_utf8(pumped(input.into_bytes()).await).unwrap();
        let lines: Vec<&str> = out.split('\n').collect();
        assert_eq!(lines[0], plain);
        let rescued: Value = serde_json::from_str(lines[1]).unwrap();
        assert_eq!(rescued["id"], "b");
        assert_eq!(rescued["params"]["gatehouse/raw"], json!([1]));
        assert_eq!(lines[2], "not json");
        assert_eq!(lines[3], "last-without-newline");
        assert_eq!(lines[4], "", "the last line was ended");
        assert_eq!(lines.len(), 5);
    }

    /// Drains `stderr` as a server's stderr and returns the log it made.
    async fn drained(stderr: impl AsyncRead + Unpin) -> String {
        let captured = crate::capture::Captured::default();
        let _guard = tracing::subscriber::set_default(crate::capture::subscriber(
            &captured,
            tracing::Level::TRACE,
        ));
        drain_stderr("srv".to_owned(), stderr).await;
        captured.text()
    }

    /// No raw ESC, CR, C1 CSI or bidi override, and no line that does not
    /// start as a log line does (the timestamp's year).
    fn assert_no_injection(log: &str) {
        assert!(!log.contains('\u{1b}'), "raw ESC: {log:?}");
        assert!(!log.contains('\r'), "raw CR: {log:?}");
        assert!(!log.contains('\u{9b}'), "raw CSI: {log:?}");
        assert!(!log.contains('\u{202e}'), "raw bidi override: {log:?}");
        for line in log.lines() {
            assert!(line.starts_with("20"), "a forged line: {line:?} in {log:?}");
        }
    }

    #[tokio::test]
    async fn stderr_lines_are_logged_lossy_and_escaped() {
        let input: &[u8] = b"plain\n\x1b]0;pwned\x07\x1b[2K\rFORGED looks fine: accepted\r\n\
            \xc2\x9b31m\xe2\x80\xae red \xff\xfe and on\nFORGED too\r\nlast without newline";
        let log = drained(input).await;
        assert_no_injection(&log);
        let lines: Vec<&str> = log.lines().collect();
        assert_eq!(lines.len(), 5, "{log}");
        let logged = |index: usize, text: &str| {
            assert!(
                lines[index].contains(&format!("gatehouse::server: {text} server=srv")),
                "line {index} is {text:?}: {log}"
            );
        };
        logged(0, "plain");
        logged(
            1,
            r"\u{1b}]0;pwned\u{7}\u{1b}[2K\rFORGED looks fine: accepted",
        );
        logged(2, "\\u{9b}31m\\u{202e} red \u{fffd}\u{fffd} and on");
        logged(3, "FORGED too");
        logged(4, "last without newline");
    }

    #[tokio::test]
    async fn a_long_stderr_line_is_truncated_and_the_rest_discarded() {
        // 64 MiB of invalid UTF-8 without a newline, then a short line.
        let flood = tokio::io::repeat(0xff).take(64 << 20);
        let log = drained(flood.chain(&b"\nafter\n"[..])).await;
        assert_no_injection(&log);
        let lines: Vec<&str> = log.lines().collect();
        assert_eq!(lines.len(), 2, "{log:.400}");
        assert!(
            lines[0].contains(&format!(
                "[line truncated at {STDERR_LINE_CAP} bytes] server=srv"
            )),
            "{} bytes logged",
            lines[0].len()
        );
        // 8 KiB of bytes, each one replacement character.
        assert_eq!(lines[0].matches('\u{fffd}').count(), STDERR_LINE_CAP);
        assert!(lines[1].contains(": after server=srv"), "{log:.400}");
    }

    #[tokio::test]
    async fn a_flood_of_stderr_lines_is_rate_limited_and_counted() {
        let input = "spam\n".repeat(10_000);
        let log = drained(input.as_bytes()).await;
        let logged = log.lines().filter(|line| line.contains(": spam ")).count();
        let suppressed: u64 = log
            .lines()
            .filter_map(|line| line.split("suppressed=").nth(1))
            .map(|rest| {
                rest.split_whitespace()
                    .next()
                    .unwrap()
                    .parse::<u64>()
                    .unwrap()
            })
            .sum();
        assert!(
            (STDERR_BURST as usize..STDERR_BURST as usize + 100).contains(&logged),
            "{logged} lines logged"
        );
        assert_eq!(
            logged as u64 + suppressed,
            10_000,
            "every line logged or counted"
        );
    }

    #[test]
    fn the_stderr_budget_refills_over_time() {
        let start = Instant::now();
        let mut budget = StderrBudget::new(start);
        let allowed = (0..1000).filter(|_| budget.take("s", start)).count();
        assert_eq!(allowed, STDERR_BURST as usize);
        assert_eq!(budget.0.suppressed, 1000 - STDERR_BURST as u64);
        // A second later: a second's worth; the first of them reported
        // (and reset) the count suppressed before it.
        let later = start + Duration::from_secs(1);
        let allowed = (0..1000).filter(|_| budget.take("s", later)).count();
        assert_eq!(allowed, STDERR_LINES_PER_SEC as usize);
        assert_eq!(budget.0.suppressed, 1000 - allowed as u64);
    }

    #[tokio::test]
    async fn an_oversized_line_is_dropped_and_the_next_one_kept() {
        let mut input = vec![b'x'; DEFAULT_MAX_LINE_LENGTH + 10];
        input.extend_from_slice(b"\n{\"after\":true}\n");
        let out = pumped(input).await;
        assert_eq!(out, b"{\"after\":true}\n");
    }
}
