//! The console's private socket, where `gatehouse serve` instances attach
//! ([`crate::link`] is the other end).
//!
//! Only the console's own user gets in: the socket sits in a private
//! directory ([`private_fs::private_dir`]), is 0600, and every peer's uid
//! (`SO_PEERCRED`) must be the console's. A connection's first line must be
//! a `hello` within [`HELLO_TIMEOUT`]; after that it may stay open as long
//! as its instance runs. Lines are bounded ([`crate::wire::MAX_LINE`]); a
//! line that is too long, not JSON or not a message ends the connection,
//! and its questions leave the page.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncWriteExt, BufReader};
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::hub::Hub;
use crate::wire::{self, ToConsole, ToInstance};
use gatehouse_base::escape::Escaped;
use gatehouse_base::private_fs;

/// How long a new connection has to say `hello`.
pub const HELLO_TIMEOUT: Duration = Duration::from_secs(10);

/// Connections served at once.
pub const MAX_CONNECTIONS: usize = 256;

/// How long an ended connection's writer may take to write what is queued.
const WRITER_GRACE: Duration = Duration::from_secs(1);

/// Answers waiting to be written to one instance.
const ANSWER_BACKLOG: usize = 1024;

/// Why the socket could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum SocketError {
    /// The directory or the socket could not be made.
    #[error("console socket {}: {action}: {error}", path.display())]
    Io {
        /// The socket.
        path: PathBuf,
        /// What was being done.
        action: &'static str,
        /// What went wrong.
        error: std::io::Error,
    },
    /// A console already serves this socket.
    #[error(
        "console socket {}: a console is already running for this config; open it, or stop it first",
        path.display()
    )]
    AlreadyRunning {
        /// The socket.
        path: PathBuf,
    },
    /// Something that is not a socket is in the way.
    #[error("console socket {}: {problem}", path.display())]
    InTheWay {
        /// The socket.
        path: PathBuf,
        /// What is there and what to do.
        problem: String,
    },
}

/// Binds the console socket at `path` (its directory made private first),
/// replacing a stale socket, refusing a live one. Call inside a Tokio
/// runtime.
pub async fn bind(path: &Path) -> Result<UnixListener, SocketError> {
    let io = |action, error| SocketError::Io {
        path: path.to_path_buf(),
        action,
        error,
    };
    if let Some(dir) = path.parent() {
        private_fs::private_dir(dir)
            .map_err(|error| io("making its directory private", error.into_io()))?;
    }
    match std::fs::symlink_metadata(path) {
        Ok(metadata) => {
            use std::os::unix::fs::FileTypeExt;
            if !metadata.file_type().is_socket() {
                return Err(SocketError::InTheWay {
                    path: path.to_path_buf(),
                    problem: "something that is not a socket is there; move it away".to_owned(),
                });
            }
            if UnixStream::connect(path).await.is_ok() {
                return Err(SocketError::AlreadyRunning {
                    path: path.to_path_buf(),
                });
            }
            std::fs::remove_file(path).map_err(|e| io("removing a stale socket", e))?;
        }
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
        Err(error) => return Err(io("inspecting", error)),
    }
    let listener = UnixListener::bind(path).map_err(|e| io("binding", e))?;
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
            .map_err(|e| io("making it 0600", e))?;
    }
    Ok(listener)
}

/// Serves instances on `listener` until `stop` is cancelled.
pub async fn serve(listener: UnixListener, hub: Arc<Hub>, stop: CancellationToken) {
    let slots = Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
    loop {
        let accepted = tokio::select! {
            () = stop.cancelled() => return,
            accepted = listener.accept() => accepted,
        };
        let stream = match accepted {
            Ok((stream, _)) => stream,
            Err(error) => {
                tracing::warn!("console socket: accepting a connection failed: {error}");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            tracing::warn!(
                "console socket: {MAX_CONNECTIONS} instances attached; refusing another"
            );
            continue;
        };
        let (hub, stop) = (hub.clone(), stop.clone());
        tokio::spawn(async move {
            let _slot = slot;
            tokio::select! {
                () = stop.cancelled() => {}
                () = connection(stream, hub) => {}
            }
        });
    }
}

/// One instance, from `hello` to the end of its connection.
async fn connection(stream: UnixStream, hub: Arc<Hub>) {
    let credentials = stream.peer_cred().ok();
    let peer = credentials.map(|c| c.uid());
    if let Err(refusal) = private_fs::peer_allowed(peer, private_fs::effective_uid()) {
        tracing::warn!(
            peer_uid = ?peer,
            peer_pid = ?credentials.and_then(|c| c.pid()),
            "console socket: {refusal}"
        );
        return;
    }
    let (read, mut write) = stream.into_split();
    let mut reader = BufReader::new(read);
    let mut buffer = Vec::new();
    let hello =
        tokio::time::timeout(HELLO_TIMEOUT, wire::read_line(&mut reader, &mut buffer)).await;
    let (instance, pid) = match hello {
        Ok(Ok(Some(line))) => match serde_json::from_str::<ToConsole>(&line) {
            Ok(ToConsole::Hello { instance, pid }) => (instance, pid),
            _ => {
                tracing::warn!("console socket: the first line was not a hello; closing");
                return;
            }
        },
        _ => return,
    };
    let (to_instance, mut answers) = mpsc::channel::<ToInstance>(ANSWER_BACKLOG);
    let attachment = match hub.attach(&instance, pid, to_instance.clone()) {
        Ok(attachment) => attachment,
        Err(refusal) => {
            tracing::warn!("console socket: {refusal}");
            return;
        }
    };
    tracing::info!(instance = %Escaped(&instance), pid, "an instance attached to the console");
    let writer = tokio::spawn(async move {
        while let Some(message) = answers.recv().await {
            let Ok(line) = wire::line(&message) else {
                continue;
            };
            if write.write_all(line.as_bytes()).await.is_err() {
                return;
            }
        }
    });
    loop {
        let line = match wire::read_line(&mut reader, &mut buffer).await {
            Ok(Some(line)) => line,
            Ok(None) => break,
            Err(error) => {
                tracing::warn!(instance = %Escaped(&instance), "console socket: {error}; closing");
                break;
            }
        };
        match serde_json::from_str::<ToConsole>(&line) {
            Ok(ToConsole::Ask { id, question }) => {
                if let Err(refusal) = hub.ask(attachment, id, *question) {
                    let refused = ToInstance::Refused {
                        id,
                        reason: refusal.to_string(),
                    };
                    if to_instance.try_send(refused).is_err() {
                        break;
                    }
                }
            }
            Ok(ToConsole::Withdraw { id }) => hub.withdraw(attachment, id),
            Ok(ToConsole::Status { status }) => hub.status(attachment, *status),
            Ok(ToConsole::Metrics { snapshot }) => hub.metrics(attachment, snapshot),
            Ok(ToConsole::Reloaded { line }) => hub.reloaded(attachment, &line),
            Ok(ToConsole::Hello { .. }) | Err(_) => {
                tracing::warn!(
                    instance = %Escaped(&instance),
                    "console socket: an unreadable line; closing"
                );
                break;
            }
        }
    }
    // The hub's sender goes with the instance, ours here: the writer
    // finishes what is queued (an answer given just now) and ends.
    hub.detach(attachment);
    drop(to_instance);
    let abort = writer.abort_handle();
    if tokio::time::timeout(WRITER_GRACE, writer).await.is_err() {
        abort.abort();
    }
    tracing::info!(instance = %Escaped(&instance), "an instance left the console");
}
