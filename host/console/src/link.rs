//! An instance's link to the console: `gatehouse serve` hands the questions
//! routed to the console over the console's private socket
//! ([`crate::socket`]) and waits for the person's answer.
//!
//! The link connects when the first question comes and again after the
//! console went away, so an instance started before the console, or one
//! that outlives a console restart, reaches the console that runs now. It
//! checks that the console is its own user's (`SO_PEERCRED`) before it
//! sends anything. A question that stops being waited for (its future is
//! dropped: the time ran out, the call ended) is withdrawn from the page; a
//! console that goes away answers every question still waiting with
//! [`LinkError::Gone`], never with a guess.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use futures::future::BoxFuture;

use tokio::io::{AsyncWriteExt, BufReader};
use tokio::net::UnixStream;
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use crate::question::{Question, Reply};
use crate::status::InstanceStatus;
use crate::wire::{self, ToConsole, ToInstance};
use gatehouse_base::private_fs;
use gatehouse_telemetry::series::Snapshot;

/// Lines waiting to be written to the console.
const OUTGOING_BACKLOG: usize = 1024;

/// The person's answer, from the console.
#[derive(Debug, Clone, PartialEq)]
pub struct Answered {
    /// The answer, checked by the console against the question.
    pub reply: Reply,
    /// The console session that answered.
    pub session: String,
}

/// Why the console gave no answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LinkError {
    /// No console listens on the socket.
    #[error("no console is running ({}: {error}); start `gatehouse console --config …`", socket.display())]
    NotRunning {
        /// The socket.
        socket: PathBuf,
        /// What connecting said.
        error: String,
    },
    /// The process on the socket is another user's.
    #[error("the console socket {} is served by another user; refused", socket.display())]
    Foreign {
        /// The socket.
        socket: PathBuf,
    },
    /// The console would not show the question.
    #[error("the console refused the question: {0}")]
    Refused(String),
    /// The console went away before anyone answered.
    #[error("the console went away before the person answered")]
    Gone,
}

type Waiting = Arc<Mutex<HashMap<u64, oneshot::Sender<Result<Answered, LinkError>>>>>;

struct Connection {
    outgoing: mpsc::Sender<String>,
    waiting: Waiting,
    closed: CancellationToken,
}

/// What the instance reports about itself ([`Link::set_status`]).
pub type StatusSource = Arc<dyn Fn() -> InstanceStatus + Send + Sync>;

/// The instance's cumulative metrics ([`Link::set_metrics`]).
pub type MetricsSource = Arc<dyn Fn() -> Snapshot + Send + Sync>;

/// How long [`Link::flush_metrics`] waits for its last line to be written.
const FLUSH_WITHIN: Duration = Duration::from_millis(500);

/// Runs a reload an operator asked for and returns the line `gatehouse
/// reload` would print ([`Link::set_reload`]).
pub type ReloadHandler = Arc<dyn Fn() -> BoxFuture<'static, String> + Send + Sync>;

/// How often [`Link::keep_attached`] looks at the connection and the
/// instance's status.
pub const STATUS_EVERY: Duration = Duration::from_secs(1);

/// The link. Share it behind an `Arc`.
///
/// ```no_run
/// use gatehouse_console::link::Link;
/// use gatehouse_console::question::{Ask, Question};
///
/// # async fn run() {
/// let link = Link::new(".gatehouse/console.sock", "3f2a9c1d");
/// let question = Question {
///     server: "github".into(),
///     ask: Ask::Url { message: "Sign in".into(), url: "https://github.com/login".into() },
///     session: Some(1), client: None, call: None, verdicts: vec![],
///     why: "every module deferred".into(), timeout_ms: 300_000,
/// };
/// match link.ask(question).await {
///     Ok(answered) => println!("{:?} by console session {}", answered.reply.action, answered.session),
///     Err(nobody) => println!("answer on_unhandled: {nobody}"),
/// }
/// # }
/// ```
pub struct Link {
    socket: PathBuf,
    instance: String,
    connection: tokio::sync::Mutex<Option<Arc<Connection>>>,
    next_id: AtomicU64,
    status: Mutex<Option<StatusSource>>,
    metrics: Mutex<Option<MetricsSource>>,
    reload: Mutex<Option<ReloadHandler>>,
}

impl std::fmt::Debug for Link {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Link")
            .field("socket", &self.socket)
            .field("instance", &self.instance)
            .finish_non_exhaustive()
    }
}

impl Link {
    /// A link to the console on `socket`, for the instance `instance` (its
    /// id, as in its audit lines). Nothing connects until the first
    /// question.
    pub fn new(socket: impl Into<PathBuf>, instance: impl Into<String>) -> Link {
        Link {
            socket: socket.into(),
            instance: instance.into(),
            connection: tokio::sync::Mutex::new(None),
            next_id: AtomicU64::new(1),
            status: Mutex::new(None),
            metrics: Mutex::new(None),
            reload: Mutex::new(None),
        }
    }

    /// Reports `source`'s status to the console on every connection and,
    /// with [`Link::keep_attached`], whenever it changes.
    pub fn set_status(&self, source: StatusSource) {
        *self.status.lock().unwrap_or_else(PoisonError::into_inner) = Some(source);
    }

    /// Reports `source`'s metrics to the console with
    /// [`Link::keep_attached`] whenever they change, and at
    /// [`Link::flush_metrics`]; the console sums every instance's.
    pub fn set_metrics(&self, source: MetricsSource) {
        *self.metrics.lock().unwrap_or_else(PoisonError::into_inner) = Some(source);
    }

    fn metrics_line(&self) -> Option<String> {
        let source = self
            .metrics
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()?;
        let line = wire::line(&ToConsole::Metrics { snapshot: source() }).ok()?;
        if line.len() > wire::MAX_LINE {
            tracing::warn!(
                bytes = line.len(),
                "the instance's metrics are over a console line; not sent"
            );
            return None;
        }
        Some(line)
    }

    /// Sends the metrics once more and waits (at most half a second) for
    /// the line to be written: call it as the instance shuts down, so the
    /// console counts everything it did.
    pub async fn flush_metrics(&self) {
        let Some(connection) = self.connection.lock().await.clone() else {
            return;
        };
        if let Some(line) = self.metrics_line() {
            let _ = connection.outgoing.try_send(line);
        }
        let written = async {
            while connection.outgoing.capacity() < connection.outgoing.max_capacity()
                && !connection.closed.is_cancelled()
            {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        };
        let _ = tokio::time::timeout(FLUSH_WITHIN, written).await;
    }

    /// Runs `handler` when an operator asks the console for a reload.
    pub fn set_reload(&self, handler: ReloadHandler) {
        *self.reload.lock().unwrap_or_else(PoisonError::into_inner) = Some(handler);
    }

    /// Forgets the status source and the reload handler: call it when the
    /// instance shuts down, since they hold what holds this link.
    pub fn detach_instance(&self) {
        *self.status.lock().unwrap_or_else(PoisonError::into_inner) = None;
        *self.metrics.lock().unwrap_or_else(PoisonError::into_inner) = None;
        *self.reload.lock().unwrap_or_else(PoisonError::into_inner) = None;
    }

    fn status_source(&self) -> Option<StatusSource> {
        self.status
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Keeps the instance attached while `stop` is not cancelled, so that
    /// the console lists it (and its status) before it has a question:
    /// every [`STATUS_EVERY`] it connects if it is not connected (a console
    /// that is not running is tried again quietly) and sends its status if
    /// it changed.
    pub async fn keep_attached(self: Arc<Self>, stop: CancellationToken) {
        let mut sent: Option<(usize, InstanceStatus)> = None;
        let mut metrics_sent: Option<(usize, String)> = None;
        loop {
            if let Ok(connection) = self.connected().await {
                let key = Arc::as_ptr(&connection) as usize;
                if let Some(source) = self.status_source() {
                    let status = source();
                    // Counted as sent only once queued: a status a full
                    // backlog refused goes at the next look.
                    if sent.as_ref() != Some(&(key, status.clone()))
                        && let Ok(line) = wire::line(&ToConsole::Status {
                            status: Box::new(status.clone()),
                        })
                        && connection.outgoing.try_send(line).is_ok()
                    {
                        sent = Some((key, status));
                    }
                }
                if let Some(line) = self.metrics_line()
                    && metrics_sent.as_ref() != Some(&(key, line.clone()))
                    && connection.outgoing.try_send(line.clone()).is_ok()
                {
                    metrics_sent = Some((key, line));
                }
            }
            tokio::select! {
                () = stop.cancelled() => return,
                () = tokio::time::sleep(STATUS_EVERY) => {}
            }
        }
    }

    /// The console's socket.
    pub fn socket(&self) -> &Path {
        &self.socket
    }

    /// Puts `question` on the console and waits for the person's answer.
    /// Dropping the future withdraws the question.
    pub async fn ask(&self, question: Question) -> Result<Answered, LinkError> {
        let connection = self.connected().await?;
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let line = wire::line(&ToConsole::Ask {
            id,
            question: Box::new(question.bounded()),
        })
        .map_err(|error| LinkError::Refused(format!("the question cannot be encoded: {error}")))?;
        // Never a line the console would close the connection for (and so
        // drop every other question of this instance): refused here.
        if line.len() > wire::MAX_LINE {
            return Err(LinkError::Refused(format!(
                "the question is {} bytes, more than the console takes ({} bytes): its schema is too large to show",
                line.len(),
                wire::MAX_LINE
            )));
        }
        let (answer, answered) = oneshot::channel();
        connection
            .waiting
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(id, answer);
        let mut withdraw = Withdraw {
            connection: &connection,
            id,
            armed: true,
        };
        if connection.outgoing.send(line).await.is_err() {
            return Err(LinkError::Gone);
        }
        // Biased: an answer that came with the connection's end still counts.
        let result = tokio::select! {
            biased;
            answered = answered => answered.unwrap_or(Err(LinkError::Gone)),
            () = connection.closed.cancelled() => Err(LinkError::Gone),
        };
        // Answered, refused or gone: nothing to withdraw.
        withdraw.armed = false;
        result
    }

    /// The connection, made (again) if there is none or it ended.
    async fn connected(&self) -> Result<Arc<Connection>, LinkError> {
        let mut current = self.connection.lock().await;
        if let Some(connection) = current.as_ref()
            && !connection.closed.is_cancelled()
        {
            return Ok(connection.clone());
        }
        let connection = Arc::new(self.connect().await?);
        *current = Some(connection.clone());
        Ok(connection)
    }

    async fn connect(&self) -> Result<Connection, LinkError> {
        let stream =
            UnixStream::connect(&self.socket)
                .await
                .map_err(|error| LinkError::NotRunning {
                    socket: self.socket.clone(),
                    error: error.to_string(),
                })?;
        let peer = stream.peer_cred().ok().map(|c| c.uid());
        if private_fs::peer_allowed(peer, private_fs::effective_uid()).is_err() {
            return Err(LinkError::Foreign {
                socket: self.socket.clone(),
            });
        }
        let (read, mut write) = stream.into_split();
        let (outgoing, mut lines) = mpsc::channel::<String>(OUTGOING_BACKLOG);
        let waiting: Waiting = Arc::default();
        let closed = CancellationToken::new();
        let hello = wire::line(&ToConsole::Hello {
            instance: self.instance.clone(),
            pid: std::process::id(),
        })
        .map_err(|error| LinkError::Refused(error.to_string()))?;
        let _ = outgoing.try_send(hello);
        if let Some(source) = self.status_source()
            && let Ok(line) = wire::line(&ToConsole::Status {
                status: Box::new(source()),
            })
        {
            let _ = outgoing.try_send(line);
        }
        {
            let closed = closed.clone();
            tokio::spawn(async move {
                while let Some(line) = lines.recv().await {
                    if write.write_all(line.as_bytes()).await.is_err() {
                        break;
                    }
                }
                closed.cancel();
            });
        }
        {
            let (closed, waiting) = (closed.clone(), waiting.clone());
            let reload = self
                .reload
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .clone();
            let replies = outgoing.clone();
            tokio::spawn(async move {
                let mut reader = BufReader::new(read);
                let mut buffer = Vec::new();
                while let Ok(Some(line)) = wire::read_line(&mut reader, &mut buffer).await {
                    let Ok(message) = serde_json::from_str::<ToInstance>(&line) else {
                        tracing::warn!("the console sent an unreadable line; closing the link");
                        break;
                    };
                    let (id, result) = match message {
                        ToInstance::Answer { id, reply, session } => {
                            (id, Ok(Answered { reply, session }))
                        }
                        ToInstance::Refused { id, reason } => (id, Err(LinkError::Refused(reason))),
                        ToInstance::Reload => {
                            // Beside the reading: answers keep arriving while
                            // the chain is rebuilt.
                            let (reload, replies) = (reload.clone(), replies.clone());
                            tokio::spawn(async move {
                                let line = match reload {
                                    Some(reload) => reload().await,
                                    None => {
                                        "error: this instance takes no reloads from the console"
                                            .to_owned()
                                    }
                                };
                                if let Ok(line) = wire::line(&ToConsole::Reloaded { line }) {
                                    let _ = replies.send(line).await;
                                }
                            });
                            continue;
                        }
                    };
                    let answer = waiting
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .remove(&id);
                    if let Some(answer) = answer {
                        let _ = answer.send(result);
                    }
                }
                closed.cancel();
                // Everything still waiting hears that the console is gone.
                waiting
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .clear();
            });
        }
        Ok(Connection {
            outgoing,
            waiting,
            closed,
        })
    }
}

/// Withdraws a question from the console if its wait is dropped unanswered.
struct Withdraw<'a> {
    connection: &'a Connection,
    id: u64,
    armed: bool,
}

impl Drop for Withdraw<'_> {
    fn drop(&mut self) {
        self.connection
            .waiting
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&self.id);
        if self.armed
            && let Ok(line) = wire::line(&ToConsole::Withdraw { id: self.id })
        {
            // A full or closed channel: the console is gone or jammed, and
            // takes the question off when the connection ends.
            let _ = self.connection.outgoing.try_send(line);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::question::Ask;
    use std::sync::atomic::AtomicU64;
    use tokio::io::AsyncBufReadExt;

    fn question() -> Question {
        Question {
            server: "github".into(),
            ask: Ask::Url {
                message: "Sign in".into(),
                url: "https://github.com/login".into(),
            },
            session: None,
            client: None,
            call: None,
            verdicts: vec![],
            why: "every module deferred".into(),
            timeout_ms: 300_000,
        }
    }

    /// A console that stops reading for a while fills the link's backlog;
    /// a status change made then is still reported once it reads again,
    /// not lost until the status next changes.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_status_not_sent_while_the_console_is_jammed_is_sent_once_it_reads() {
        let dir = tempfile::tempdir().expect("tempdir");
        let socket = dir.path().join("console.sock");
        let listener = tokio::net::UnixListener::bind(&socket).expect("bind");
        let link = Arc::new(Link::new(&socket, "jammed"));
        let in_flight = Arc::new(AtomicU64::new(0));
        {
            let in_flight = in_flight.clone();
            link.set_status(Arc::new(move || InstanceStatus {
                in_flight: in_flight.load(Ordering::SeqCst),
                ..InstanceStatus::default()
            }));
        }
        let stop = CancellationToken::new();
        tokio::spawn(link.clone().keep_attached(stop.clone()));
        let (console, _) = listener.accept().await.expect("the link connects");
        // The console reads nothing while far more questions than the
        // backlog (and the socket's buffer) hold are asked.
        for _ in 0..(OUTGOING_BACKLOG * 4) {
            let link = link.clone();
            tokio::spawn(async move { link.ask(question()).await });
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
        in_flight.store(7, Ordering::SeqCst);
        // At least one look at the status while the backlog is full.
        tokio::time::sleep(STATUS_EVERY * 2).await;
        let mut lines = BufReader::new(console).lines();
        let deadline = tokio::time::Instant::now() + STATUS_EVERY * 10;
        loop {
            let line = tokio::time::timeout_at(deadline, lines.next_line())
                .await
                .expect("the status after the change reaches the console")
                .expect("read")
                .expect("a line");
            if let Ok(ToConsole::Status { status }) = serde_json::from_str::<ToConsole>(&line)
                && status.in_flight == 7
            {
                break;
            }
        }
        stop.cancel();
    }
}
