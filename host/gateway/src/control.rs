//! The control sockets of `gatehouse serve`, one per instance
//! (`.gatehouse/control/<instance>.sock` beside the config; several
//! instances may serve one config, and none takes another's socket):
//! `gatehouse reload` sends the line `reload` to each ([`request_each`]) and
//! gets one line back, `ok ...` or `error: ...`; `gatehouse status` sends
//! `status` and gets the instance's state as one JSON line.
//!
//! Only the server's own user gets in, three times over:
//!
//! - The socket is bound inside a private directory
//!   ([`gatehouse_base::private_fs::private_dir`]: the user's own and mode 0700,
//!   created so, or an existing one made so; a symbolic link or another
//!   user's directory is refused, by the same rules as when the compile cache
//!   reaches `.gatehouse` first). Nobody else can even reach the socket, so
//!   the moment between `bind` (which creates the socket with the umask's
//!   mode) and the `chmod` to 0600 exposes nothing.
//! - The socket itself is 0600.
//! - Every connection's peer uid (`SO_PEERCRED`) must be the server's
//!   effective uid ([`peer_allowed`]); anyone else gets a one-line refusal,
//!   and the refusal is logged.
//!
//! A request is one line of at most [`MAX_REQUEST_LINE`] bytes, sent within
//! [`REQUEST_TIMEOUT`]; a longer line or none in time is answered with an
//! error and the connection closed, without reading further. At most
//! [`MAX_CONNECTIONS`] are served at once, and none is held longer than
//! [`ANSWER_TIMEOUT`] waiting for its answer: a reload that hangs is answered
//! with an error and its connection freed.
//!
//! Reloads are coalesced ([`Coalescer`]): at most one runs and one is queued,
//! however many requests arrive, and every request is answered by a reload
//! that started after it. A reload that panics is answered with an error and
//! the next request runs a new one.
//!
//! The client side ([`request`], what `gatehouse reload` runs) checks the
//! other way round: the process serving the socket must be this user's
//! (`SO_PEERCRED`), or nothing is sent to it.

use std::io;
use std::panic::AssertUnwindSafe;
#[cfg(unix)]
use std::path::Path;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use futures::FutureExt;
use futures::future::BoxFuture;
#[cfg(unix)]
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWriteExt};
#[cfg(unix)]
use tokio::net::{UnixListener, UnixStream};

#[cfg(unix)]
use gatehouse_base::private_fs::{self, PrivateError};

/// The longest request line, in bytes, without its newline.
pub const MAX_REQUEST_LINE: usize = 64;

/// How long a client has to send its request line.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// Connections served at once; more are refused at once.
pub const MAX_CONNECTIONS: usize = 64;

/// How long a connection waits for its answer (a reload) before it is
/// answered with an error and closed, so that a hung reload cannot hold the
/// connection slots.
pub const ANSWER_TIMEOUT: Duration = Duration::from_secs(5 * 60);

/// The longest answer line a client reads (a status with many modules and
/// backends).
pub const MAX_ANSWER_LINE: u64 = 1024 * 1024;

/// What a client can ask.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Request {
    /// Reopen the audit log, rebuild and swap the chain and settings.
    Reload,
    /// The instance's state as one JSON line (`gatehouse status`): the
    /// chain with its digests, the backends, what is in flight.
    Status,
}

impl Request {
    /// The request a line names.
    pub fn parse(line: &str) -> Result<Request, String> {
        match line.trim() {
            "reload" => Ok(Request::Reload),
            "status" => Ok(Request::Status),
            other => Err(format!(
                "unknown command {other:?}; try `reload` or `status`"
            )),
        }
    }

    /// The line that asks for it (without the newline).
    pub fn line(self) -> &'static str {
        match self {
            Request::Reload => "reload",
            Request::Status => "status",
        }
    }
}

/// Answers a request with one line (without the newline).
pub type Handler = Arc<dyn Fn(Request) -> BoxFuture<'static, String> + Send + Sync>;

/// Why the control socket could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum ControlError {
    /// The socket's directory or the socket could not be created, inspected
    /// or made private.
    #[error("control socket {}: {action}: {error}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// What was being done.
        action: &'static str,
        /// The I/O error (in the message, so not a `source` too: a report
        /// of the chain would say it twice).
        error: io::Error,
    },
    /// Something is in the way that the server will not use or remove.
    #[error("control socket {}: {problem}", path.display())]
    NotPrivate {
        /// The file.
        path: PathBuf,
        /// What is wrong and what to do.
        problem: String,
    },
    /// The socket's directory is not a private directory of this user's.
    #[cfg(unix)]
    #[error("control socket directory {0}")]
    Directory(#[source] PrivateError),
    /// The process serving the socket is not this user's (client side):
    /// nothing was sent to it.
    #[error(
        "control socket {}: {}; that is not this user's gatehouse serve, so nothing was sent to it",
        path.display(),
        match peer_allowed(*uid, *own) { Err(refusal) => refusal, Ok(()) => "refused".to_owned() }
    )]
    ForeignServer {
        /// The socket.
        path: PathBuf,
        /// The server's uid, if it could be read.
        uid: Option<u32>,
        /// This process's effective uid.
        own: u32,
    },
    /// No answer came in time (client side).
    #[error(
        "control socket {}: no answer within {}; see the server's log",
        path.display(),
        humantime::format_duration(*after)
    )]
    Timeout {
        /// The socket.
        path: PathBuf,
        /// How long the client waited.
        after: Duration,
    },
}

pub use gatehouse_base::private_fs::peer_allowed;

/// Binds the control socket at `path`: its directory a private directory
/// ([`private_fs::private_dir`]: this user's, 0700, created so if missing,
/// never a symbolic link), a stale socket replaced, the socket 0600. Call
/// inside a Tokio runtime.
#[cfg(unix)]
pub fn bind(path: &Path) -> Result<UnixListener, ControlError> {
    use std::os::unix::fs::{FileTypeExt, PermissionsExt};
    let dir = match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    };
    private_fs::private_dir(dir).map_err(ControlError::Directory)?;
    let io = |action, error| ControlError::Io {
        path: path.to_path_buf(),
        action,
        error,
    };
    match std::fs::symlink_metadata(path) {
        Ok(meta) if meta.file_type().is_socket() => {
            // Another instance's live socket is never taken over.
            if std::os::unix::net::UnixStream::connect(path).is_ok() {
                return Err(ControlError::NotPrivate {
                    path: path.to_path_buf(),
                    problem: "another gatehouse serve is listening on it".to_owned(),
                });
            }
            std::fs::remove_file(path).map_err(|e| io("removing the stale socket", e))?;
        }
        Ok(_) => {
            return Err(ControlError::NotPrivate {
                path: path.to_path_buf(),
                problem: "something other than a socket is in its place; remove it".to_owned(),
            });
        }
        Err(error) if error.kind() == io::ErrorKind::NotFound => {}
        Err(error) => return Err(io("inspecting it", error)),
    }
    let listener = UnixListener::bind(path).map_err(|e| io("binding", e))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
        .map_err(|e| io("making it 0600", e))?;
    Ok(listener)
}

/// Sends `request` to the `gatehouse serve` listening at `socket` and returns
/// its one-line answer (without the newline): only after checking that the
/// process serving the socket is this user's (`SO_PEERCRED`), so that a
/// socket someone else planted, or a server another user runs, is never
/// spoken to. Waits at most [`ANSWER_TIMEOUT`] and a little more; reads at
/// most [`MAX_ANSWER_LINE`] bytes.
#[cfg(unix)]
pub async fn request(socket: &Path, request: Request) -> Result<String, ControlError> {
    request_within(socket, request, ANSWER_TIMEOUT + Duration::from_secs(30)).await
}

/// [`request`], waiting at most `timeout` for the answer.
#[cfg(unix)]
async fn request_within(
    socket: &Path,
    request: Request,
    timeout: Duration,
) -> Result<String, ControlError> {
    let io = |action, error| ControlError::Io {
        path: socket.to_path_buf(),
        action,
        error,
    };
    let mut stream = UnixStream::connect(socket).await.map_err(|e| {
        io(
            "connecting (is gatehouse serve running with this config?)",
            e,
        )
    })?;
    let own = private_fs::effective_uid();
    let uid = stream.peer_cred().ok().map(|credentials| credentials.uid());
    if peer_allowed(uid, own).is_err() {
        return Err(ControlError::ForeignServer {
            path: socket.to_path_buf(),
            uid,
            own,
        });
    }
    let exchange = async {
        stream
            .write_all(format!("{}\n", request.line()).as_bytes())
            .await
            .map_err(|e| io("sending the request", e))?;
        let mut answer = Vec::new();
        tokio::io::BufReader::new((&mut stream).take(MAX_ANSWER_LINE))
            .read_until(b'\n', &mut answer)
            .await
            .map_err(|e| io("reading the answer", e))?;
        Ok(String::from_utf8_lossy(&answer).trim_end().to_owned())
    };
    tokio::time::timeout(timeout, exchange)
        .await
        .map_err(|_| ControlError::Timeout {
            path: socket.to_path_buf(),
            after: timeout,
        })?
}

/// What the instances serving one config answered ([`request_each`]).
#[derive(Debug, Default)]
pub struct Answers {
    /// Each live instance asked, by instance id (sorted), with its answer
    /// line or why there is none.
    pub answers: Vec<(String, Result<String, ControlError>)>,
    /// Instances whose socket nobody listened on any more (a server that
    /// was killed): their sockets were removed.
    pub stale: Vec<String>,
}

/// Sends `request` to every `gatehouse serve` whose control socket is in
/// `dir` (`<instance>.sock`, [`crate::instance`]), or only to instance
/// `only`, each through [`request`] (so only to this user's servers).
/// A socket nobody listens on is a killed server's: it is removed and
/// reported in [`Answers::stale`]. Anything in `dir` not named like an
/// instance's socket is left alone.
#[cfg(unix)]
pub async fn request_each(
    dir: &Path,
    request: Request,
    only: Option<&str>,
) -> Result<Answers, ControlError> {
    let mut instances = Vec::new();
    match std::fs::read_dir(dir) {
        Ok(entries) => {
            for entry in entries.flatten() {
                let name = entry.file_name();
                let Some(instance) = name.to_str().and_then(|name| name.strip_suffix(".sock"))
                else {
                    continue;
                };
                if crate::instance::is_id(instance) && only.is_none_or(|only| only == instance) {
                    instances.push(instance.to_owned());
                }
            }
        }
        Err(error) if error.kind() == io::ErrorKind::NotFound => {}
        Err(error) => {
            return Err(ControlError::Io {
                path: dir.to_path_buf(),
                action: "listing the control sockets",
                error,
            });
        }
    }
    instances.sort();
    let mut answers = Answers::default();
    for instance in instances {
        let socket = dir.join(format!("{instance}.sock"));
        match self::request(&socket, request).await {
            Err(ControlError::Io { error, .. })
                if error.kind() == io::ErrorKind::ConnectionRefused =>
            {
                let _ = std::fs::remove_file(&socket);
                answers.stale.push(instance);
            }
            outcome => answers.answers.push((instance, outcome)),
        }
    }
    Ok(answers)
}

/// Serves the control socket until the task is dropped: each connection on
/// its own task, checked ([`peer_allowed`], one capped line) and answered by
/// `handler`.
#[cfg(unix)]
pub async fn serve(listener: UnixListener, handler: Handler) {
    serve_within(listener, handler, ANSWER_TIMEOUT).await;
}

/// [`serve`], each connection waiting at most `answer_timeout` for its
/// answer.
#[cfg(unix)]
async fn serve_within(listener: UnixListener, handler: Handler, answer_timeout: Duration) {
    let own = private_fs::effective_uid();
    let slots = Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
    loop {
        match listener.accept().await {
            Ok((stream, _)) => {
                let handler = handler.clone();
                let slots = slots.clone();
                tokio::spawn(async move {
                    let mut stream = stream;
                    let reply = answer(&mut stream, own, &handler, &slots, answer_timeout).await;
                    let _ = stream.write_all(format!("{reply}\n").as_bytes()).await;
                    let _ = stream.shutdown().await;
                });
            }
            Err(error) => {
                // Out of file descriptors, say: keep serving once it passes.
                tracing::warn!("control socket: cannot accept a connection: {error}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

/// The reply to one connection.
#[cfg(unix)]
async fn answer(
    stream: &mut UnixStream,
    own: u32,
    handler: &Handler,
    slots: &Arc<tokio::sync::Semaphore>,
    answer_timeout: Duration,
) -> String {
    let credentials = stream.peer_cred().ok();
    let peer = credentials.map(|c| c.uid());
    if let Err(refusal) = peer_allowed(peer, own) {
        tracing::warn!(
            peer_uid = ?peer,
            peer_pid = ?credentials.and_then(|c| c.pid()),
            "control socket: {refusal}"
        );
        return format!("error: {refusal}");
    }
    let Ok(_slot) = slots.clone().try_acquire_owned() else {
        return format!(
            "error: busy: {MAX_CONNECTIONS} control connections are open already; try again"
        );
    };
    let line = match tokio::time::timeout(REQUEST_TIMEOUT, read_line(stream)).await {
        Err(_) => {
            return format!(
                "error: no request line within {}s",
                REQUEST_TIMEOUT.as_secs()
            );
        }
        Ok(Err(error)) => {
            tracing::warn!("control socket: {error}");
            return format!("error: {error}");
        }
        Ok(Ok(line)) => line,
    };
    let request = match Request::parse(&line) {
        Ok(request) => request,
        Err(error) => return format!("error: {error}"),
    };
    match tokio::time::timeout(answer_timeout, handler(request)).await {
        Ok(reply) => reply,
        Err(_) => {
            let waited = humantime::format_duration(answer_timeout);
            tracing::warn!(
                "control socket: no answer to {:?} within {waited}; the connection is closed",
                request.line()
            );
            format!(
                "error: no answer within {waited}; the {} may still be running, see the server's log",
                request.line()
            )
        }
    }
}

/// Reads one line of at most [`MAX_REQUEST_LINE`] bytes (the newline not
/// counted; end of stream also ends it). Never reads more than one byte past
/// the cap.
#[cfg(unix)]
async fn read_line(stream: &mut (impl AsyncRead + Unpin)) -> Result<String, String> {
    let mut line = Vec::with_capacity(MAX_REQUEST_LINE + 1);
    let mut chunk = [0u8; MAX_REQUEST_LINE + 1];
    loop {
        let room = MAX_REQUEST_LINE + 1 - line.len();
        let read = stream
            .read(&mut chunk[..room])
            .await
            .map_err(|error| format!("cannot read the request: {error}"))?;
        if read == 0 {
            break;
        }
        line.extend_from_slice(&chunk[..read]);
        if let Some(end) = line.iter().position(|&byte| byte == b'\n') {
            line.truncate(end);
            break;
        }
        if line.len() > MAX_REQUEST_LINE {
            return Err(format!(
                "request line too long (the limit is {MAX_REQUEST_LINE} bytes)"
            ));
        }
    }
    if line.len() > MAX_REQUEST_LINE {
        return Err(format!(
            "request line too long (the limit is {MAX_REQUEST_LINE} bytes)"
        ));
    }
    String::from_utf8(line).map_err(|_| "the request line is not UTF-8".to_owned())
}

/// A job that returns its answer as one line.
pub type Job = Arc<dyn Fn() -> BoxFuture<'static, String> + Send + Sync>;

/// Runs a job (a reload) on request, coalescing: at most one run at a time
/// and one queued; every request that arrives while a run is going joins the
/// queued one, and is answered by it, a run that started after the request.
#[derive(Clone)]
pub struct Coalescer {
    inner: Arc<CoalescerInner>,
}

struct CoalescerInner {
    job: Job,
    debounce: Duration,
    runtime: tokio::runtime::Handle,
    state: Mutex<Queue>,
    runs: AtomicUsize,
}

#[derive(Default)]
struct Queue {
    /// A driver task is running (a run going or about to start).
    running: bool,
    /// A run is wanted (by a request or a trigger) that has not started.
    wanted: bool,
    /// Who waits for the run that has not started.
    waiting: Vec<tokio::sync::oneshot::Sender<String>>,
}

impl std::fmt::Debug for Coalescer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Coalescer")
            .field("runs", &self.runs())
            .finish_non_exhaustive()
    }
}

impl Coalescer {
    /// Runs `job` on request; each run starts `debounce` after it is first
    /// wanted (editors save in bursts). Call inside a Tokio runtime: runs
    /// are spawned on it, also when asked for from another thread.
    pub fn new(debounce: Duration, job: Job) -> Coalescer {
        Coalescer {
            inner: Arc::new(CoalescerInner {
                job,
                debounce,
                runtime: tokio::runtime::Handle::current(),
                state: Mutex::new(Queue::default()),
                runs: AtomicUsize::new(0),
            }),
        }
    }

    /// Asks for a run and waits for its answer.
    pub async fn request(&self) -> String {
        let (answer, answered) = tokio::sync::oneshot::channel();
        self.want(Some(answer));
        answered
            .await
            .unwrap_or_else(|_| "error: the reloader stopped".to_owned())
    }

    /// Asks for a run without waiting (a file changed, SIGHUP). Callable
    /// from any thread.
    pub fn trigger(&self) {
        self.want(None);
    }

    /// How many runs have started.
    pub fn runs(&self) -> usize {
        self.inner.runs.load(Ordering::SeqCst)
    }

    fn want(&self, answer: Option<tokio::sync::oneshot::Sender<String>>) {
        let mut queue = self
            .inner
            .state
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        queue.wanted = true;
        queue.waiting.extend(answer);
        if !queue.running {
            queue.running = true;
            let inner = self.inner.clone();
            self.inner.runtime.spawn(drive(inner));
        }
    }
}

/// Marks the driver as gone when it is dropped without having said so (its
/// task cancelled, or a panic past the catch below): frees the queue so that
/// the next request starts a driver, or starts one now if a run is wanted.
struct Running {
    inner: Arc<CoalescerInner>,
    /// The driver returned normally and cleared `running` itself.
    finished: bool,
}

impl Drop for Running {
    fn drop(&mut self) {
        if self.finished {
            return;
        }
        let mut queue = self
            .inner
            .state
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if queue.wanted {
            // Requests wait for a run: a new driver serves them (`running`
            // stays true for it).
            self.inner.runtime.spawn(drive(self.inner.clone()));
        } else {
            queue.running = false;
        }
    }
}

/// The one driver: while runs are wanted, waits out the debounce, takes
/// everyone waiting so far, runs the job once and answers them all. A job
/// that panics is answered with an error; however the driver ends, the
/// queue is freed ([`Running`]).
async fn drive(inner: Arc<CoalescerInner>) {
    let mut running = Running {
        inner: inner.clone(),
        finished: false,
    };
    loop {
        tokio::time::sleep(inner.debounce).await;
        let waiting = {
            let mut queue = inner.state.lock().unwrap_or_else(PoisonError::into_inner);
            if !queue.wanted {
                queue.running = false;
                running.finished = true;
                return;
            }
            queue.wanted = false;
            std::mem::take(&mut queue.waiting)
        };
        inner.runs.fetch_add(1, Ordering::SeqCst);
        let job = inner.job.clone();
        let answer = match AssertUnwindSafe(async move { job().await })
            .catch_unwind()
            .await
        {
            Ok(answer) => answer,
            Err(panic) => {
                let why = panic
                    .downcast_ref::<&str>()
                    .map(|text| (*text).to_owned())
                    .or_else(|| panic.downcast_ref::<String>().cloned())
                    .unwrap_or_else(|| "no message".to_owned());
                let why = gatehouse_base::escape::escape(&why).into_owned();
                tracing::error!("the reload panicked: {why}");
                format!(
                    "error: the reload failed: it panicked ({why}); the old chain keeps serving"
                )
            }
        };
        for waiter in waiting {
            let _ = waiter.send(answer.clone());
        }
    }
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;
    use std::time::Instant;

    fn mode(path: &Path) -> u32 {
        std::fs::symlink_metadata(path)
            .expect("exists")
            .permissions()
            .mode()
            & 0o7777
    }

    /// A handler that counts the requests it answers with `ok`.
    fn counting() -> (Handler, Arc<AtomicUsize>) {
        let count = Arc::new(AtomicUsize::new(0));
        let counted = count.clone();
        let handler: Handler = Arc::new(move |_| {
            counted.fetch_add(1, Ordering::SeqCst);
            Box::pin(async { "ok reloaded".to_owned() })
        });
        (handler, count)
    }

    /// What the server said before it closed (a close with unread data
    /// ends in ECONNRESET after the reply).
    async fn reply(reader: &mut (impl AsyncRead + Unpin)) -> String {
        let mut reply = Vec::new();
        let mut chunk = [0u8; 256];
        while let Ok(read) = reader.read(&mut chunk).await
            && read > 0
        {
            reply.extend_from_slice(&chunk[..read]);
        }
        String::from_utf8_lossy(&reply).into_owned()
    }

    async fn ask(socket: &Path, bytes: &[u8]) -> String {
        let mut stream = UnixStream::connect(socket).await.expect("connect");
        let _ = stream.write_all(bytes).await;
        let _ = stream.shutdown().await;
        reply(&mut stream).await
    }

    #[test]
    fn only_the_servers_own_uid_gets_in() {
        assert_eq!(peer_allowed(Some(1000), 1000), Ok(()));
        assert_eq!(peer_allowed(Some(0), 0), Ok(()));
        let refusal = peer_allowed(Some(65534), 1000).unwrap_err();
        assert_eq!(refusal, "refused: uid 65534 is not this server's uid 1000");
        // Root is not the server's user either, unless the server is root.
        assert!(peer_allowed(Some(0), 1000).is_err());
        assert!(peer_allowed(None, 1000).is_err());
    }

    #[tokio::test]
    async fn the_socket_is_0600_in_a_0700_directory_of_its_own() {
        let dir = tempfile::tempdir().expect("tempdir");
        let socket = dir.path().join(".gatehouse/control.sock");
        let listener = bind(&socket).expect("binds");
        assert_eq!(mode(&socket), 0o600);
        assert_eq!(mode(socket.parent().expect("dir")), 0o700);
        drop(listener);

        // An existing loose directory is tightened; a stale socket replaced.
        std::fs::set_permissions(
            socket.parent().expect("dir"),
            std::fs::Permissions::from_mode(0o755),
        )
        .expect("chmod");
        let _listener = bind(&socket).expect("binds again");
        assert_eq!(mode(socket.parent().expect("dir")), 0o700);
        assert_eq!(mode(&socket), 0o600);

        // A symbolic link as the directory, or a file as the socket: refused.
        let elsewhere = dir.path().join("elsewhere");
        std::fs::create_dir(&elsewhere).expect("mkdir");
        let linked = dir.path().join("linked");
        std::os::unix::fs::symlink(&elsewhere, &linked).expect("symlink");
        let error = bind(&linked.join("control.sock")).unwrap_err().to_string();
        assert!(error.contains("symbolic link"), "{error}");
        assert!(error.contains(&linked.display().to_string()), "{error}");
        let file = dir.path().join("plain");
        std::fs::write(&file, b"keep").expect("write");
        let error = bind(&file).unwrap_err().to_string();
        assert!(error.contains("other than a socket"), "{error}");
        assert_eq!(std::fs::read(&file).expect("kept"), b"keep");
    }

    #[tokio::test]
    async fn a_live_socket_is_never_taken_over() {
        let dir = tempfile::tempdir().expect("tempdir");
        let socket = dir.path().join(".gatehouse/control/0000000a.sock");
        let _first = bind(&socket).expect("binds");
        let error = bind(&socket).unwrap_err().to_string();
        assert!(error.contains("another gatehouse serve"), "{error}");
        assert!(socket.exists(), "the first instance keeps its socket");
    }

    #[tokio::test]
    async fn each_live_instance_is_asked_and_a_dead_ones_socket_removed() {
        let dir = tempfile::tempdir().expect("tempdir");
        let control = dir.path().join(".gatehouse/control");
        let answering = |instance: &'static str| -> Handler {
            Arc::new(move |_| Box::pin(async move { format!("ok from {instance}") }))
        };
        let a = tokio::spawn(serve(
            bind(&control.join("0000000a.sock")).expect("binds"),
            answering("a"),
        ));
        let b = tokio::spawn(serve(
            bind(&control.join("0000000b.sock")).expect("binds"),
            answering("b"),
        ));
        // A killed instance's socket, and files that are no instance's.
        drop(bind(&control.join("0000000c.sock")).expect("binds"));
        std::fs::write(control.join("notes.sock"), b"").expect("write");
        std::fs::write(control.join("0000000d.txt"), b"").expect("write");

        let answers = request_each(&control, Request::Reload, None)
            .await
            .expect("asked");
        let replies: Vec<(String, String)> = answers
            .answers
            .into_iter()
            .map(|(instance, reply)| (instance, reply.expect("answered")))
            .collect();
        assert_eq!(
            replies,
            [
                ("0000000a".to_owned(), "ok from a".to_owned()),
                ("0000000b".to_owned(), "ok from b".to_owned())
            ]
        );
        assert_eq!(answers.stale, ["0000000c"]);
        assert!(!control.join("0000000c.sock").exists());
        assert!(control.join("notes.sock").exists());

        let only = request_each(&control, Request::Reload, Some("0000000b"))
            .await
            .expect("asked");
        assert_eq!(only.answers.len(), 1);
        assert_eq!(only.answers[0].0, "0000000b");
        // Nobody serving: nothing asked, and no error.
        let none = request_each(&dir.path().join("missing"), Request::Reload, None)
            .await
            .expect("nothing to ask");
        assert!(none.answers.is_empty() && none.stale.is_empty());
        a.abort();
        b.abort();
    }

    #[tokio::test]
    async fn an_oversized_line_is_refused_and_the_server_keeps_serving() {
        let dir = tempfile::tempdir().expect("tempdir");
        let socket = dir.path().join("control.sock");
        let (handler, count) = counting();
        let server = tokio::spawn(serve(bind(&socket).expect("binds"), handler));

        // 1 MiB without a newline.
        let mut stream = UnixStream::connect(&socket).await.expect("connect");
        let (mut reader, mut writer) = stream.split();
        let flood = vec![b'x'; 1 << 20];
        let (_, reply) = tokio::join!(writer.write_all(&flood), reply(&mut reader));
        assert!(
            reply.starts_with("error: request line too long"),
            "{reply:?}"
        );
        assert_eq!(reply.lines().count(), 1);
        // 65 bytes and a newline: too long as well; 64 are read as a line.
        let long = ask(&socket, format!("{}\n", "r".repeat(65)).as_bytes()).await;
        assert!(long.starts_with("error: request line too long"), "{long}");
        let unknown = ask(&socket, format!("{}\n", "r".repeat(64)).as_bytes()).await;
        assert!(unknown.starts_with("error: unknown command"), "{unknown}");
        assert_eq!(count.load(Ordering::SeqCst), 0);

        // Still serving.
        assert_eq!(ask(&socket, b"reload\n").await, "ok reloaded\n");
        assert_eq!(ask(&socket, b"reload").await, "ok reloaded\n");
        assert_eq!(count.load(Ordering::SeqCst), 2);
        server.abort();
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn concurrent_requests_start_at_most_two_runs_each_after_its_request() {
        // Each run records when it started.
        let starts = Arc::new(Mutex::new(Vec::<Instant>::new()));
        let recorded = starts.clone();
        let job: Job = Arc::new(move || {
            let recorded = recorded.clone();
            Box::pin(async move {
                let run = {
                    let mut starts = recorded.lock().expect("lock");
                    starts.push(Instant::now());
                    starts.len() - 1
                };
                tokio::time::sleep(Duration::from_millis(300)).await;
                run.to_string()
            })
        });
        let coalescer = Coalescer::new(Duration::from_millis(20), job);
        let mut waiters = Vec::new();
        for index in 0..100 {
            let coalescer = coalescer.clone();
            waiters.push(tokio::spawn(async move {
                // Half arrive while the first run is going.
                if index % 2 == 1 {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                let asked = Instant::now();
                let run: usize = coalescer.request().await.parse().expect("a run");
                (asked, run)
            }));
        }
        // Triggers from another thread join the queue too.
        let triggered = coalescer.clone();
        std::thread::spawn(move || {
            for _ in 0..10 {
                triggered.trigger();
            }
        })
        .join()
        .expect("thread");
        for waiter in waiters {
            let (asked, run) = waiter.await.expect("answered");
            let started = starts.lock().expect("lock")[run];
            assert!(started >= asked, "run {run} started before its request");
        }
        assert!(
            (1..=2).contains(&coalescer.runs()),
            "{} runs",
            coalescer.runs()
        );
        // Idle again: the next request starts a fresh run.
        let _ = coalescer.request().await;
        assert!(coalescer.runs() <= 3);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn concurrent_reloads_through_the_socket_run_at_most_twice() {
        let dir = tempfile::tempdir().expect("tempdir");
        let socket = dir.path().join("control.sock");
        let job: Job = Arc::new(|| {
            Box::pin(async {
                tokio::time::sleep(Duration::from_millis(200)).await;
                "ok reloaded".to_owned()
            })
        });
        let coalescer = Coalescer::new(Duration::from_millis(20), job);
        let queue = coalescer.clone();
        let handler: Handler = Arc::new(move |_| {
            let queue = queue.clone();
            Box::pin(async move { queue.request().await })
        });
        let server = tokio::spawn(serve(bind(&socket).expect("binds"), handler));
        let mut clients = Vec::new();
        for _ in 0..40 {
            let socket = socket.clone();
            clients.push(tokio::spawn(async move { ask(&socket, b"reload\n").await }));
        }
        for client in clients {
            assert_eq!(client.await.expect("client"), "ok reloaded\n");
        }
        assert!(
            (1..=2).contains(&coalescer.runs()),
            "{} reloads",
            coalescer.runs()
        );
        server.abort();
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_reload_that_panics_is_answered_and_the_next_request_runs() {
        let panicked = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let once = panicked.clone();
        let job: Job = Arc::new(move || {
            let once = once.clone();
            Box::pin(async move {
                if !once.swap(true, Ordering::SeqCst) {
                    panic!("a bug in the reload");
                }
                "ok reloaded".to_owned()
            })
        });
        let coalescer = Coalescer::new(Duration::from_millis(5), job);
        let first = tokio::time::timeout(Duration::from_secs(5), coalescer.request())
            .await
            .expect("the panicking run is answered");
        assert!(first.starts_with("error: the reload failed"), "{first}");
        assert!(first.contains("a bug in the reload"), "{first}");
        let second = tokio::time::timeout(Duration::from_secs(5), coalescer.request())
            .await
            .expect("the next request runs");
        assert_eq!(second, "ok reloaded");
        assert_eq!(coalescer.runs(), 2);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_driver_that_is_cancelled_frees_the_queue() {
        let job: Job = Arc::new(|| {
            Box::pin(async {
                tokio::time::sleep(Duration::from_millis(100)).await;
                "ok reloaded".to_owned()
            })
        });
        let coalescer = Coalescer::new(Duration::from_millis(5), job);
        // A driver whose task is then cancelled mid-run, as `want` starts one.
        {
            let mut queue = coalescer.inner.state.lock().expect("lock");
            queue.running = true;
            queue.wanted = true;
        }
        let driver = tokio::spawn(drive(coalescer.inner.clone()));
        while coalescer.runs() == 0 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        driver.abort();
        let _ = driver.await;
        let answer = tokio::time::timeout(Duration::from_secs(5), coalescer.request())
            .await
            .expect("a new driver serves the next request");
        assert_eq!(answer, "ok reloaded");
        // And requests that were queued when a driver was cancelled are
        // served by a new one.
        {
            let mut queue = coalescer.inner.state.lock().expect("lock");
            queue.running = true;
            queue.wanted = true;
        }
        let driver = tokio::spawn(drive(coalescer.inner.clone()));
        let runs = coalescer.runs();
        while coalescer.runs() == runs {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let (queued, answered) = tokio::sync::oneshot::channel();
        coalescer.want(Some(queued));
        driver.abort();
        let _ = driver.await;
        let answer = tokio::time::timeout(Duration::from_secs(5), answered)
            .await
            .expect("the queued request is served")
            .expect("answered");
        assert_eq!(answer, "ok reloaded");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_hung_reload_is_answered_with_an_error_and_frees_its_slot() {
        let dir = tempfile::tempdir().expect("tempdir");
        let socket = dir.path().join("control.sock");
        let calls = Arc::new(AtomicUsize::new(0));
        let counted = calls.clone();
        // The first answer never comes; the next ones at once.
        let handler: Handler = Arc::new(move |_| {
            let call = counted.fetch_add(1, Ordering::SeqCst);
            Box::pin(async move {
                if call == 0 {
                    futures::future::pending::<()>().await;
                }
                "ok reloaded".to_owned()
            })
        });
        let listener = bind(&socket).expect("binds");
        let server = tokio::spawn(serve_within(listener, handler, Duration::from_millis(200)));
        let started = std::time::Instant::now();
        let hung = tokio::time::timeout(Duration::from_secs(5), ask(&socket, b"reload\n"))
            .await
            .expect("answered");
        assert!(hung.starts_with("error: no answer within 200ms"), "{hung}");
        assert!(started.elapsed() < Duration::from_secs(5));
        assert_eq!(ask(&socket, b"reload\n").await, "ok reloaded\n");
        server.abort();
    }

    #[tokio::test]
    async fn the_client_gets_the_answer_of_a_server_of_its_own_uid() {
        let dir = tempfile::tempdir().expect("tempdir");
        let socket = dir.path().join(".gatehouse/control.sock");
        let (handler, count) = counting();
        let server = tokio::spawn(serve(bind(&socket).expect("binds"), handler));
        let answer = request(&socket, Request::Reload).await.expect("answered");
        assert_eq!(answer, "ok reloaded");
        assert_eq!(count.load(Ordering::SeqCst), 1);
        server.abort();
        // Nobody listening: the error names the socket.
        let _ = std::fs::remove_file(&socket);
        let error = request(&socket, Request::Reload)
            .await
            .unwrap_err()
            .to_string();
        assert!(error.contains(&socket.display().to_string()), "{error}");
    }

    #[test]
    fn a_foreign_server_is_named_in_the_refusal() {
        let error = ControlError::ForeignServer {
            path: PathBuf::from("/p/.gatehouse/control.sock"),
            uid: Some(65534),
            own: 1000,
        }
        .to_string();
        assert!(
            error.starts_with("control socket /p/.gatehouse/control.sock: refused: uid 65534 is not this server's uid 1000"),
            "{error}"
        );
        assert!(error.contains("nothing was sent"), "{error}");
    }

    /// Listens as uid 65534 (a child process: the test binary again, run by
    /// the test below), answers one connection `ok reloaded` and records
    /// what it was sent.
    #[test]
    #[ignore = "helper: run by the_client_refuses_a_server_of_another_uid as uid 65534"]
    fn listen_as_another_uid() {
        use std::io::{Read, Write};
        let socket = std::env::var_os("GATEHOUSE_CONTROL_SOCKET").expect("socket");
        let listener = std::os::unix::net::UnixListener::bind(socket).expect("bind");
        let (mut stream, _) = listener.accept().expect("accept");
        let _ = stream.write_all(b"ok reloaded\n");
        let _ = stream.shutdown(std::net::Shutdown::Write);
        let mut sent = String::new();
        let _ = stream.read_to_string(&mut sent);
        println!("SENT {sent:?}");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_client_refuses_a_server_of_another_uid() {
        if private_fs::effective_uid() != 0 {
            eprintln!("skipped: switching uid needs root; the refusal is tested above");
            return;
        }
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777))
            .expect("chmod");
        let socket = dir.path().join("control.sock");
        let exe = std::env::current_exe().expect("test binary");
        let child = {
            use std::os::unix::process::CommandExt;
            std::process::Command::new(exe)
                .args([
                    "--exact",
                    "control::tests::listen_as_another_uid",
                    "--ignored",
                    "--nocapture",
                ])
                .env("GATEHOUSE_CONTROL_SOCKET", &socket)
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .uid(65534)
                .gid(65534)
                .spawn()
        };
        let child = match child {
            Ok(child) => child,
            Err(error) if error.kind() == io::ErrorKind::PermissionDenied => {
                eprintln!("skipped: uid 65534 cannot run the test binary: {error}");
                return;
            }
            Err(error) => panic!("cannot run the child: {error}"),
        };
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        while !socket.exists() {
            assert!(
                std::time::Instant::now() < deadline,
                "the child never listened"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let error = request(&socket, Request::Reload).await.unwrap_err();
        assert!(
            matches!(
                error,
                ControlError::ForeignServer {
                    uid: Some(65534),
                    ..
                }
            ),
            "{error}"
        );
        let message = error.to_string();
        assert!(message.contains("uid 65534"), "{message}");
        let output = tokio::task::spawn_blocking(move || child.wait_with_output())
            .await
            .expect("join")
            .expect("the child ends");
        let said = String::from_utf8_lossy(&output.stdout);
        assert!(said.contains("SENT \"\""), "nothing was sent: {said}");
    }

    /// Connects as uid 65534 (a child process: the test binary again, run
    /// by the test below) and prints what the server said.
    #[test]
    #[ignore = "helper: run by another_uid_is_refused_by_peer_credentials as uid 65534"]
    fn connect_as_another_uid() {
        use std::io::{Read, Write};
        let socket = std::env::var_os("GATEHOUSE_CONTROL_SOCKET").expect("socket");
        let mut stream = std::os::unix::net::UnixStream::connect(socket).expect("connect");
        // A refused peer may find the connection closed before it writes.
        let _ = stream.write_all(b"reload\n");
        let mut reply = String::new();
        let _ = stream.read_to_string(&mut reply);
        println!("REPLY {reply}");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn another_uid_is_refused_by_peer_credentials() {
        if private_fs::effective_uid() != 0 {
            eprintln!("skipped: switching uid needs root; the pure check is tested above");
            return;
        }
        // A socket another user may reach (not what `bind` makes), so that
        // only the peer check stands in the way.
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755))
            .expect("chmod");
        let socket = dir.path().join("open.sock");
        let listener = UnixListener::bind(&socket).expect("binds");
        std::fs::set_permissions(&socket, std::fs::Permissions::from_mode(0o666)).expect("chmod");
        let (handler, count) = counting();
        let server = tokio::spawn(serve(listener, handler));
        let exe = std::env::current_exe().expect("test binary");
        let output = tokio::task::spawn_blocking(move || {
            use std::os::unix::process::CommandExt;
            std::process::Command::new(exe)
                .args([
                    "--exact",
                    "control::tests::connect_as_another_uid",
                    "--ignored",
                    "--nocapture",
                ])
                .env("GATEHOUSE_CONTROL_SOCKET", &socket)
                .uid(65534)
                .gid(65534)
                .output()
        })
        .await
        .expect("join");
        let output = match output {
            Ok(output) => output,
            // The test binary is out of reach of uid 65534 here.
            Err(error) if error.kind() == io::ErrorKind::PermissionDenied => {
                eprintln!("skipped: uid 65534 cannot run the test binary: {error}");
                return;
            }
            Err(error) => panic!("cannot run the child: {error}"),
        };
        let said = String::from_utf8_lossy(&output.stdout);
        let complained = String::from_utf8_lossy(&output.stderr);
        assert!(output.status.success(), "{said}{complained}");
        assert!(
            said.contains("REPLY error: refused: uid 65534 is not this server's uid 0"),
            "{said}"
        );
        assert_eq!(count.load(Ordering::SeqCst), 0, "nothing was run");
        server.abort();
    }
}
