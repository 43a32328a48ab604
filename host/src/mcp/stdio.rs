//! A stdio MCP server as an rmcp transport: the child process, started with
//! a closed environment, its stderr logged, its stdout read line by line
//! through [`rescue_message`](super::rescue::rescue_message) before rmcp
//! decodes it, and shut down politely (stdin closed, then SIGTERM, then
//! SIGKILL) when the connection ends.

use std::process::Stdio;
use std::time::Duration;

use rmcp::RoleClient;
use rmcp::service::{RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::Transport;
use rmcp::transport::async_rw::{AsyncRwTransport, DEFAULT_MAX_LINE_LENGTH};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, DuplexStream};
use tokio::process::{Child, ChildStdin, ChildStdout};
use tokio::task::JoinHandle;

use super::config::{ServerConfig, Transport as ServerTransport};
use super::connection::{BASE_ENV_VARS, ConnectError};
use super::rescue::{RESCUE_GROWTH, rescue_message};

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
            let server = config.name.clone();
            tokio::spawn(async move {
                let mut lines = BufReader::new(stderr).lines();
                while let Ok(Some(line)) = lines.next_line().await {
                    tracing::debug!(target: "gatehouse::server", server = %server, "{line}");
                }
            });
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

    #[tokio::test]
    async fn an_oversized_line_is_dropped_and_the_next_one_kept() {
        let mut input = vec![b'x'; DEFAULT_MAX_LINE_LENGTH + 10];
        input.extend_from_slice(b"\n{\"after\":true}\n");
        let out = pumped(input).await;
        assert_eq!(out, b"{\"after\":true}\n");
    }
}
