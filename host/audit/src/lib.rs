//! The audit log: one JSON line per elicitation, written before the answer
//! is sent.
//!
//! A record and its newline go to the file in **one** `write(2)` on an
//! `O_APPEND` descriptor. When that write comes up short (a full disk, a file
//! size limit), the bytes it did write are cut off again (`ftruncate`) before
//! the error is reported, so the file never ends in a partial record that a
//! reader could take for a whole one; if even the cut fails, nothing more is
//! written until it succeeds. `write` returning `Ok` means the whole record is
//! in the file; `Err` means it is not.
//!
//! How soon a record reaches the disk is `[elicitations] audit_sync`
//! ([`AuditSync`]): `always` (fdatasync before `write` returns), `batch` (the
//! default: written at once, fdatasynced by a background thread at most every
//! [`BATCH_SYNC_INTERVAL`]), or `never` (left to the OS).
//!
//! The file holds what people typed, so it is a private file
//! ([`gatehouse_base::private_fs`]): created 0600, never opened through a symbolic
//! link, never blocked on by a FIFO in its place, and an existing file is
//! used only if it is a regular file of this user's that group and others
//! have no access to (otherwise opening fails, naming the fix). A character
//! device (`/dev/null`, `/dev/full`) is the one other thing it may be.
//! [`AuditLog::reopen`] opens the path again, for rotation
//! (`mv audit.jsonl audit.jsonl.1`, then SIGHUP or `gatehouse reload`);
//! reopens run one at a time, so the last to start is the one that stays.
//!
//! Each record is one line of JSON written with [`gatehouse_base::escape::to_json_string`]:
//! characters that could drive a terminal or a log reader (DEL, C1, bidi
//! controls, U+2028/9, invisible format characters) are written as `\uXXXX`,
//! so `tail -f` and `grep` show them as text while parsers read the same
//! strings.
//!
//! Every field a server (or a guest, a model, the client) can make long is
//! bounded before the record is written ([`bound`]): a request id of more
//! than 256 characters is recorded as its start and the sha256 of the whole,
//! names and texts are cut likewise with a mark, and a record still over
//! 1 MiB is shrunk to its decision; so every record stays a line
//! [`read`] can read. The line starts with what a reader needs to count a
//! record even if the rest of it were lost: `time`, `server`, `decided_by`
//! and `action` (the answer's, as [`read::Action`] names it), then `mode`,
//! `request_id`, `session`, `turn`, `instance` (which `gatehouse serve`
//! wrote it), `client` (the upstream client's name and version), `reason`,
//! `latency_us`, `answer` and `steps`.

use std::fs::File;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant, SystemTime};

use serde::ser::SerializeStruct;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use gatehouse_base::private_fs::{self, Devices};
use gatehouse_core::sandbox::ModuleReport;

pub mod bound;
pub mod read;
pub mod shadow;

/// Who decided an elicitation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DecidedBy {
    /// A module in the chain.
    Guest,
    /// The person, through the upstream client.
    Person,
    /// A host setting (auto-deny, approval policy) or protocol rule.
    Policy,
    /// A module failed and the chain failed closed.
    Failure,
    /// Nobody could decide; `on_unhandled` answered.
    Unhandled,
}

/// One module's part in a decision.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct AuditStep {
    /// The module's name.
    pub module: String,
    /// Its sha256.
    pub sha256: String,
    /// Who signed it, as verified when it was locked (`key NAME (sha256:…)`);
    /// absent for a module from a file or one allowed unsigned.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signed_by: Option<String>,
    /// `accept`, `decline`, `cancel`, `defer`, or `failure`.
    pub outcome: String,
    /// The failure code, if it failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failure: Option<String>,
    /// Its rationale or failure detail.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rationale: Option<String>,
    /// Its risk level.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub risk: Option<gatehouse_core::outcome::RiskLevel>,
    /// Wall time, in microseconds.
    pub latency_us: u64,
    /// The module's calls to its model (model, prompt sha256, tokens,
    /// attempts, latency, the raw assessment; the prompt text only where
    /// `[models.NAME] audit_prompts = true`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub model_calls: Vec<gatehouse_core::model::ModelCallRecord>,
}

impl DecidedBy {
    /// Every value, in the order of the docs.
    pub const ALL: [DecidedBy; 5] = [
        DecidedBy::Guest,
        DecidedBy::Person,
        DecidedBy::Policy,
        DecidedBy::Failure,
        DecidedBy::Unhandled,
    ];

    /// Its name in the audit line.
    pub fn name(self) -> &'static str {
        match self {
            DecidedBy::Guest => "guest",
            DecidedBy::Person => "person",
            DecidedBy::Policy => "policy",
            DecidedBy::Failure => "failure",
            DecidedBy::Unhandled => "unhandled",
        }
    }

    /// The value `name` names (as [`DecidedBy::name`] writes it).
    pub fn from_name(name: &str) -> Option<DecidedBy> {
        DecidedBy::ALL.into_iter().find(|by| by.name() == name)
    }
}

impl std::fmt::Display for DecidedBy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.pad(self.name())
    }
}

impl From<&ModuleReport> for AuditStep {
    fn from(report: &ModuleReport) -> Self {
        let (outcome, failure, rationale, risk) = match &report.result {
            Ok(outcome) => (
                outcome.decision.name().to_owned(),
                None,
                outcome.rationale.clone(),
                outcome.risk,
            ),
            Err(failure) => (
                "failure".to_owned(),
                Some(failure.code().to_owned()),
                Some(failure.to_string()),
                None,
            ),
        };
        AuditStep {
            module: report.module.to_string(),
            sha256: report.digest.clone(),
            signed_by: report.signed_by.as_deref().map(str::to_owned),
            outcome,
            failure,
            rationale,
            risk,
            latency_us: u64::try_from(report.elapsed.as_micros()).unwrap_or(u64::MAX),
            model_calls: report.model_calls.clone(),
        }
    }
}

/// Who an upstream client is, as it named itself in `initialize`
/// (`clientInfo`). Its words, so bounded and escaped like any other text in
/// the log.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClientName {
    /// `clientInfo.name`.
    pub name: String,
    /// `clientInfo.version`.
    pub version: String,
}

/// The channel through which the person answered (`person` in an audit
/// line whose `decided_by` is `person`), so that a human's answer in the
/// console and a client's answer (which may be automatic: `codex exec`
/// declines, `claude -p` cancels) can be told apart.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "channel", rename_all = "lowercase")]
pub enum PersonChannel {
    /// The upstream client of the session answered (it is the record's
    /// `client`, with its name and version).
    Client,
    /// A person answered in the approvals console.
    Console {
        /// The console session that answered.
        session: String,
    },
}

/// One audit line ([`read`] reads them back). Written with its fields in
/// the order the [module docs](self) give, `action` (derived from `answer`)
/// after `decided_by`; read back by name, `action` ignored.
#[derive(Debug, Clone, Deserialize)]
pub struct AuditRecord {
    /// When the answer was decided (RFC 3339, UTC).
    pub time: String,
    /// The server.
    pub server: String,
    /// The server's request id.
    pub request_id: Value,
    /// The upstream session the elicitation was tied to, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub session: Option<u64>,
    /// The agent turn of the upstream request it was tied to, when that
    /// request's `_meta.turnId` named one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub turn: Option<String>,
    /// The `gatehouse serve` process that wrote the line
    /// ([`AuditLog::with_instance`]), so that the lines of instances
    /// sharing one log can be told apart; session ids are per instance.
    #[serde(default)]
    pub instance: Option<String>,
    /// The upstream client of the session, as it named itself in
    /// `initialize`: whoever answered when `decided_by` is `person`, or
    /// whose session the question was tied to.
    #[serde(default)]
    pub client: Option<ClientName>,
    /// How the person answered, when `decided_by` is `person`.
    #[serde(default)]
    pub person: Option<PersonChannel>,
    /// `form`, `url`, or `invalid`.
    pub mode: String,
    /// Who decided.
    pub decided_by: DecidedBy,
    /// Why, in a few words (the routing branch).
    pub reason: String,
    /// Each module that ran.
    pub steps: Vec<AuditStep>,
    /// The answer as sent (an `ElicitResult`, or a JSON-RPC error).
    pub answer: Value,
    /// Total time from receipt to answer, in microseconds.
    pub latency_us: u64,
}

impl Serialize for AuditRecord {
    /// `time`, `server`, `decided_by` and `action` first, so that the start
    /// of a line says when, whose and what even if the rest is lost
    /// ([`read`] recovers them from an unreadable line); `session` and
    /// `turn` only when set.
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let fields = 10
            + usize::from(self.session.is_some())
            + usize::from(self.turn.is_some())
            + usize::from(self.instance.is_some())
            + usize::from(self.client.is_some())
            + usize::from(self.person.is_some());
        let mut record = serializer.serialize_struct("AuditRecord", fields)?;
        record.serialize_field("time", &self.time)?;
        record.serialize_field("server", &self.server)?;
        record.serialize_field("decided_by", &self.decided_by)?;
        record.serialize_field("action", self.action().name())?;
        record.serialize_field("mode", &self.mode)?;
        record.serialize_field("request_id", &self.request_id)?;
        match &self.session {
            Some(session) => record.serialize_field("session", session)?,
            None => record.skip_field("session")?,
        }
        match &self.turn {
            Some(turn) => record.serialize_field("turn", turn)?,
            None => record.skip_field("turn")?,
        }
        match &self.instance {
            Some(instance) => record.serialize_field("instance", instance)?,
            None => record.skip_field("instance")?,
        }
        match &self.client {
            Some(client) => record.serialize_field("client", client)?,
            None => record.skip_field("client")?,
        }
        match &self.person {
            Some(person) => record.serialize_field("person", person)?,
            None => record.skip_field("person")?,
        }
        record.serialize_field("reason", &self.reason)?;
        record.serialize_field("latency_us", &self.latency_us)?;
        record.serialize_field("answer", &self.answer)?;
        record.serialize_field("steps", &self.steps)?;
        record.end()
    }
}

/// The current time as RFC 3339.
pub fn now_rfc3339() -> String {
    humantime::format_rfc3339_micros(SystemTime::now()).to_string()
}

/// How hard the audit log pushes each record to the disk
/// (`[elicitations] audit_sync`).
///
/// Every mode writes the record into the file (the page cache) before the
/// answer is sent, so a crash of gatehouse itself loses nothing; the modes
/// differ in what a power loss or kernel crash can take.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum AuditSync {
    /// `fdatasync` after every record, before the answer is sent: nothing
    /// answered is ever lost, at the cost of a disk flush (milliseconds) per
    /// elicitation, one at a time.
    Always,
    /// The default. Records are written at once and a background thread
    /// `fdatasync`s at most every [`BATCH_SYNC_INTERVAL`]: a power loss loses
    /// at most that window; the elicitation never waits for the disk.
    #[default]
    Batch,
    /// Never `fdatasync`: the OS writes the page cache back when it likes
    /// (on Linux, usually within 30 s).
    Never,
}

/// How often, at most, `audit_sync = "batch"` flushes the log to the disk;
/// also the most a power loss can take from it.
pub const BATCH_SYNC_INTERVAL: Duration = Duration::from_millis(200);

impl AuditSync {
    /// Every mode, in the order of the docs.
    pub const ALL: [AuditSync; 3] = [AuditSync::Always, AuditSync::Batch, AuditSync::Never];

    /// Its name in the config.
    pub fn name(self) -> &'static str {
        match self {
            AuditSync::Always => "always",
            AuditSync::Batch => "batch",
            AuditSync::Never => "never",
        }
    }
}

impl std::fmt::Display for AuditSync {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for AuditSync {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        AuditSync::ALL
            .into_iter()
            .find(|mode| mode.name() == text)
            .ok_or_else(|| {
                format!(
                    "elicitations.audit_sync must be \"always\", \"batch\" or \"never\", not {text:?}"
                )
            })
    }
}

impl<'de> Deserialize<'de> for AuditSync {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer).map_err(|error| {
            serde::de::Error::custom(format!(
                "elicitations.audit_sync must be \"always\", \"batch\" or \"never\": {error}"
            ))
        })?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

/// Why an audit line could not be written.
#[derive(Debug, thiserror::Error)]
#[error("cannot write the audit log {}: {source}", path.display())]
pub struct AuditError {
    /// The log file.
    pub path: PathBuf,
    /// The I/O error.
    pub source: io::Error,
}

/// Where audit lines go.
pub struct AuditLog {
    shared: Arc<Shared>,
    path: PathBuf,
    sync: AuditSync,
    flusher: Option<std::thread::JoinHandle<()>>,
    /// Held by [`AuditLog::reopen`] from opening the path to putting the new
    /// file in place, so that concurrent reopens cannot swap an older file
    /// in after a newer one.
    reopening: Mutex<()>,
    /// Written into every record ([`AuditLog::with_instance`]).
    instance: Option<String>,
    /// Tests: runs once between a reopen's open and its swap.
    #[cfg(test)]
    before_swap: Mutex<Option<Box<dyn FnOnce() + Send>>>,
}

/// What the writers and the background flusher share.
struct Shared {
    state: Mutex<State>,
    /// Wakes the flusher: records to sync, or stop.
    wake: Condvar,
    /// `fdatasync`s done (tests and benchmarks read it).
    syncs: AtomicU64,
}

struct State {
    sink: Sink,
    /// Records written since the last sync was started (`batch`).
    unsynced: bool,
    /// A background sync failed: records written before it may be lost, so
    /// nothing more is written (every accept becomes a decline) until the
    /// log is reopened.
    failed: Option<String>,
    /// Why the last write failed, until one succeeds ([`AuditLog::health`]).
    last_error: Option<String>,
    /// The log is being dropped: the flusher syncs what is left and ends.
    stop: bool,
}

enum Sink {
    File(FileSink),
    Memory(Vec<String>),
}

/// An open log file.
struct FileSink {
    file: Arc<File>,
    /// A regular file: records can be cut back and synced. A device or a pipe
    /// (`/dev/null`, `/dev/stdout`) can be neither.
    regular: bool,
    /// Bytes at the end of the file from a record that failed part-way and
    /// could not be cut off yet; cut before the next record is written.
    partial: u64,
}

impl std::fmt::Debug for AuditLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AuditLog")
            .field("path", &self.path)
            .field("sync", &self.sync)
            .finish_non_exhaustive()
    }
}

impl AuditLog {
    /// Appends to `path`, creating it 0600; `audit_sync = "batch"`.
    pub fn open(path: impl AsRef<Path>) -> Result<AuditLog, AuditError> {
        AuditLog::open_with(path, AuditSync::default())
    }

    /// Appends to `path`, creating it 0600, syncing as `sync` says.
    pub fn open_with(path: impl AsRef<Path>, sync: AuditSync) -> Result<AuditLog, AuditError> {
        let path = path.as_ref().to_path_buf();
        let sink = open_file(&path, sync).map_err(|source| AuditError {
            path: path.clone(),
            source,
        })?;
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                sink: Sink::File(sink),
                unsynced: false,
                failed: None,
                last_error: None,
                stop: false,
            }),
            wake: Condvar::new(),
            syncs: AtomicU64::new(0),
        });
        let flusher = if sync == AuditSync::Batch {
            let shared = shared.clone();
            let name = path.clone();
            Some(
                std::thread::Builder::new()
                    .name("gatehouse-audit-sync".to_owned())
                    .spawn(move || flush_in_background(&shared, &name, BATCH_SYNC_INTERVAL))
                    .map_err(|source| AuditError {
                        path: path.clone(),
                        source,
                    })?,
            )
        } else {
            None
        };
        Ok(AuditLog {
            shared,
            path,
            sync,
            flusher,
            reopening: Mutex::new(()),
            instance: None,
            #[cfg(test)]
            before_swap: Mutex::new(None),
        })
    }

    /// The same log with every record it writes naming `instance` (its
    /// `instance` field): the `gatehouse serve` process that decided, so
    /// that instances sharing one log can be told apart.
    ///
    /// ```
    /// # use gatehouse_audit::AuditLog;
    /// let log = AuditLog::in_memory().with_instance("4f2a9c01");
    /// # let _ = log;
    /// ```
    pub fn with_instance(mut self, instance: impl Into<String>) -> AuditLog {
        self.instance = Some(instance.into());
        self
    }

    /// A log that keeps its lines in memory, read back with
    /// [`AuditLog::lines`]: for a host whose records need not outlive it
    /// (`gatehouse demo` prints them after its run; a library host that
    /// ships them elsewhere itself) and for tests. Nothing is synced
    /// (`audit_sync` is `never`), [`AuditLog::reopen`] does nothing and
    /// [`AuditLog::path`] is `<memory>`. The lines grow without bound: a
    /// long-running host wants [`AuditLog::open`].
    pub fn in_memory() -> AuditLog {
        AuditLog {
            shared: Arc::new(Shared {
                state: Mutex::new(State {
                    sink: Sink::Memory(Vec::new()),
                    unsynced: false,
                    failed: None,
                    last_error: None,
                    stop: false,
                }),
                wake: Condvar::new(),
                syncs: AtomicU64::new(0),
            }),
            path: PathBuf::from("<memory>"),
            sync: AuditSync::Never,
            flusher: None,
            reopening: Mutex::new(()),
            instance: None,
            #[cfg(test)]
            before_swap: Mutex::new(None),
        }
    }

    /// The file (or `<memory>`).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// How records are synced.
    pub fn sync_mode(&self) -> AuditSync {
        self.sync
    }

    /// The lines kept in memory (empty for a file log).
    pub fn lines(&self) -> Vec<String> {
        match &self.lock().sink {
            Sink::Memory(lines) => lines.clone(),
            Sink::File(_) => Vec::new(),
        }
    }

    /// Writes one record as one line, in one `write(2)`; with
    /// `audit_sync = "always"` also `fdatasync`s it. `Ok`: the whole record
    /// is in the file. `Err`: none of it is (what a short write left is cut
    /// off again), and the caller must not act as if it were audited.
    ///
    /// What goes in the line is the record [`bound::bounded`]: over-long
    /// ids, names and texts cut with a mark and the digest of the whole, and
    /// a line still over [`bound::MAX_RECORD_BYTES`] written
    /// [`bound::shrunk`] to its decision.
    pub fn write(&self, record: &AuditRecord) -> Result<(), AuditError> {
        let mut record = bound::bounded(record);
        if self.instance.is_some() && record.instance != self.instance {
            record.to_mut().instance.clone_from(&self.instance);
        }
        let serialize = |record: &AuditRecord| {
            gatehouse_base::escape::to_json_string(record)
                .map_err(|e| self.error(io::Error::other(e)))
        };
        let mut line = serialize(&record)?;
        if line.len() > bound::MAX_RECORD_BYTES {
            line = serialize(&bound::shrunk(&record, line.len()))?;
        }
        self.write_line(line)
    }

    /// Writes one shadow line ([`shadow`]), bounded as a decision's record
    /// is, in the same way ([`AuditLog::write`]).
    pub fn write_shadow(&self, record: &shadow::ShadowRecord) -> Result<(), AuditError> {
        let as_record = record.as_record();
        let mut bounded = bound::bounded(&as_record).into_owned();
        let line_of = |bounded: &AuditRecord| {
            let mut shadow = shadow::ShadowRecord::from_record(bounded.clone());
            shadow.instance.clone_from(&self.instance);
            gatehouse_base::escape::to_json_string(&shadow)
                .map_err(|e| self.error(io::Error::other(e)))
        };
        let mut line = line_of(&bounded)?;
        if line.len() > bound::MAX_RECORD_BYTES {
            bounded = bound::shrunk(&bounded, line.len());
            line = line_of(&bounded)?;
        }
        self.write_line(line)
    }

    /// Appends `line` as [`AuditLog::append_line`] does, remembering whether
    /// it failed.
    fn write_line(&self, line: String) -> Result<(), AuditError> {
        let written = self.append_line(line);
        self.lock().last_error = written.as_ref().err().map(|error| error.source.to_string());
        written
    }

    /// Whether the log takes lines now: `Err` says why not. It does not when
    /// its last write failed (until one succeeds or the log is reopened), a
    /// background sync failed, or its path no longer names the file it
    /// writes (removed or moved away, as by a rotation whose reopen has not
    /// come yet: its lines would go where nobody reads them).
    ///
    /// ```
    /// use gatehouse_audit::AuditLog;
    ///
    /// let dir = tempfile::tempdir()?;
    /// let path = dir.path().join("audit.jsonl");
    /// let log = AuditLog::open(&path)?;
    /// assert!(log.health().is_ok());
    /// std::fs::remove_file(&path)?;
    /// assert!(log.health().unwrap_err().contains("no longer names"));
    /// log.reopen()?;
    /// assert!(log.health().is_ok());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn health(&self) -> Result<(), String> {
        let file = {
            let state = self.lock();
            if let Some(failure) = &state.failed {
                return Err(format!("a background fdatasync failed: {failure}"));
            }
            if let Some(error) = &state.last_error {
                return Err(format!("the last write failed: {error}"));
            }
            match &state.sink {
                Sink::Memory(_) => return Ok(()),
                Sink::File(sink) if !sink.regular => return Ok(()),
                Sink::File(sink) => sink.file.clone(),
            }
        };
        #[cfg(unix)]
        {
            use std::os::unix::fs::MetadataExt;
            let open = file.metadata().map_err(|error| error.to_string())?;
            let named = std::fs::symlink_metadata(&self.path).ok();
            if named.is_none_or(|named| named.dev() != open.dev() || named.ino() != open.ino()) {
                return Err(format!(
                    "{} no longer names the open log (removed or moved): reopen it (`gatehouse reload` or SIGHUP)",
                    gatehouse_base::escape::escape(&self.path.display().to_string())
                ));
            }
        }
        #[cfg(not(unix))]
        drop(file);
        Ok(())
    }

    /// Appends `line` and its newline in one write, synced as configured.
    fn append_line(&self, mut line: String) -> Result<(), AuditError> {
        line.push('\n');
        let mut state = self.lock();
        let State {
            sink,
            unsynced,
            failed,
            ..
        } = &mut *state;
        let sink = match sink {
            Sink::Memory(lines) => {
                line.pop();
                lines.push(line);
                return Ok(());
            }
            Sink::File(sink) => sink,
        };
        if let Some(failure) = failed {
            return Err(self.error(io::Error::other(format!(
                "an earlier fdatasync failed ({failure}), so records written before it may be lost; \
                 nothing more is written until the log is reopened (SIGHUP or `gatehouse reload`)"
            ))));
        }
        let file = sink.file.clone();
        append(&mut &*file, &mut sink.partial, line.as_bytes()).map_err(|e| self.error(e))?;
        if !sink.regular {
            return Ok(());
        }
        match self.sync {
            AuditSync::Always => {
                let synced = file.sync_data();
                self.shared.syncs.fetch_add(1, Ordering::Relaxed);
                if let Err(error) = synced {
                    // Whether the record reached the disk is unknown: take
                    // it back, so that `Err` means "not in the log".
                    sink.partial = line.len() as u64;
                    let cut = cut_partial(&mut &*file, &mut sink.partial);
                    return Err(self.error(match cut {
                        Ok(()) => io::Error::new(error.kind(), format!("fdatasync: {error}")),
                        Err(cut) => io::Error::new(
                            error.kind(),
                            format!("fdatasync: {error}; cannot cut the record off again: {cut}"),
                        ),
                    }));
                }
            }
            AuditSync::Batch => {
                if !*unsynced {
                    *unsynced = true;
                    self.shared.wake.notify_one();
                }
            }
            AuditSync::Never => {}
        }
        Ok(())
    }

    /// `fdatasync`s the log now (at shutdown, say). A no-op for memory, a
    /// device or a pipe.
    pub fn sync(&self) -> Result<(), AuditError> {
        let file = {
            let mut state = self.lock();
            state.unsynced = false;
            match &state.sink {
                Sink::File(sink) if sink.regular => sink.file.clone(),
                _ => return Ok(()),
            }
        };
        let synced = file.sync_data();
        self.shared.syncs.fetch_add(1, Ordering::Relaxed);
        synced.map_err(|error| {
            let mut state = self.lock();
            if state.sink.is(&file) {
                state.failed = Some(error.to_string());
            }
            self.error(error)
        })
    }

    /// Opens the path again and writes there from now on: after
    /// `mv audit.jsonl audit.jsonl.1`, new records go to a new `audit.jsonl`
    /// (0600). The old file is synced (unless `never`) and closed. On failure
    /// the old file stays in use. Clears a failed background sync. A no-op for
    /// a memory log. Reopens run one at a time (a SIGHUP and a
    /// `gatehouse reload` at once): the file of the last one to start is the
    /// one that stays in use.
    pub fn reopen(&self) -> Result<(), AuditError> {
        if matches!(self.lock().sink, Sink::Memory(_)) {
            return Ok(());
        }
        // Held across open and swap: a reopen that opened the path earlier
        // must not put its file in place after one that opened it later.
        let _reopening = self
            .reopening
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let fresh = open_file(&self.path, self.sync).map_err(|source| self.error(source))?;
        #[cfg(test)]
        {
            let hook = self
                .before_swap
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .take();
            if let Some(hook) = hook {
                hook();
            }
        }
        let mut old = {
            let mut state = self.lock();
            let Sink::File(sink) = &mut state.sink else {
                return Ok(());
            };
            let old = std::mem::replace(sink, fresh);
            state.unsynced = false;
            state.failed = None;
            state.last_error = None;
            old
        };
        if old.partial > 0 {
            let file = old.file.clone();
            if let Err(error) = cut_partial(&mut &*file, &mut old.partial) {
                tracing::error!(path = %self.path.display(), "the rotated audit log ends in a partial record that cannot be cut off: {error}");
            }
        }
        if old.regular && self.sync != AuditSync::Never {
            self.shared.syncs.fetch_add(1, Ordering::Relaxed);
            if let Err(error) = old.file.sync_data() {
                tracing::error!(path = %self.path.display(), "cannot fdatasync the rotated audit log; its last records may be lost: {error}");
            }
        }
        tracing::info!(path = %self.path.display(), "audit log reopened");
        Ok(())
    }

    /// How many `fdatasync`s the log has done.
    pub fn syncs(&self) -> u64 {
        self.shared.syncs.load(Ordering::Relaxed)
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // Nothing panics while holding the lock; if something did, the state
        // (a file handle and flags) is still consistent.
        self.shared
            .state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    fn error(&self, source: io::Error) -> AuditError {
        AuditError {
            path: self.path.clone(),
            source,
        }
    }
}

impl Drop for AuditLog {
    fn drop(&mut self) {
        if let Some(flusher) = self.flusher.take() {
            self.lock().stop = true;
            self.shared.wake.notify_all();
            let _ = flusher.join();
        }
    }
}

impl Sink {
    /// Whether this is the log file `file`.
    fn is(&self, file: &Arc<File>) -> bool {
        matches!(self, Sink::File(sink) if Arc::ptr_eq(&sink.file, file))
    }
}

/// `audit_sync = "batch"`: waits for records, then `fdatasync`s, at most once
/// per `interval`. Writers never wait for it. A failed sync stops the log
/// (see [`State::failed`]). On stop, syncs what is left and returns.
fn flush_in_background(shared: &Shared, path: &Path, interval: Duration) {
    let lock = || shared.state.lock().unwrap_or_else(PoisonError::into_inner);
    let mut last: Option<Instant> = None;
    let mut state = lock();
    loop {
        while !state.unsynced && !state.stop {
            state = shared
                .wake
                .wait(state)
                .unwrap_or_else(PoisonError::into_inner);
        }
        if !state.unsynced {
            return;
        }
        if let Some(due) = last.map(|last| last + interval) {
            loop {
                let now = Instant::now();
                if now >= due || state.stop {
                    break;
                }
                state = shared
                    .wake
                    .wait_timeout(state, due - now)
                    .unwrap_or_else(PoisonError::into_inner)
                    .0;
            }
        }
        state.unsynced = false;
        let file = match &state.sink {
            Sink::File(sink) if sink.regular => sink.file.clone(),
            _ => continue,
        };
        drop(state);
        last = Some(Instant::now());
        let synced = file.sync_data();
        shared.syncs.fetch_add(1, Ordering::Relaxed);
        state = lock();
        if let Err(error) = synced {
            tracing::error!(path = %path.display(), "cannot fdatasync the audit log; refusing further records until it is reopened: {error}");
            if state.sink.is(&file) {
                state.failed = Some(error.to_string());
            }
        }
    }
}

/// What [`append`] needs of a file; a trait so that tests can fail it
/// part-way.
trait RecordFile {
    /// One `write(2)`.
    fn write_once(&mut self, bytes: &[u8]) -> io::Result<usize>;
    /// Its length now (`fstat`).
    fn len(&mut self) -> io::Result<u64>;
    /// `ftruncate`.
    fn set_len(&mut self, len: u64) -> io::Result<()>;
}

impl RecordFile for &File {
    fn write_once(&mut self, bytes: &[u8]) -> io::Result<usize> {
        self.write(bytes)
    }

    fn len(&mut self) -> io::Result<u64> {
        self.metadata().map(|metadata| metadata.len())
    }

    fn set_len(&mut self, len: u64) -> io::Result<()> {
        File::set_len(self, len)
    }
}

/// Appends `record` (a whole line) with one write. A short write is cut off
/// again before the error is returned, so the file is as it was; if the cut
/// fails, `partial` remembers how many bytes to cut, and no record is written
/// until that succeeds.
fn append(file: &mut impl RecordFile, partial: &mut u64, record: &[u8]) -> io::Result<()> {
    cut_partial(file, partial).map_err(|error| {
        io::Error::new(
            error.kind(),
            format!(
                "a partial record from an earlier failed write cannot be cut off, so nothing is written after it: {error}"
            ),
        )
    })?;
    let written = loop {
        match file.write_once(record) {
            Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
            // A failed write(2) wrote nothing.
            other => break other?,
        }
    };
    if written == record.len() {
        return Ok(());
    }
    let short = format!(
        "short write: {written} of {} bytes (is the disk full?)",
        record.len()
    );
    *partial = written as u64;
    match cut_partial(file, partial) {
        Ok(()) => Err(io::Error::new(io::ErrorKind::WriteZero, short)),
        Err(error) => Err(io::Error::new(
            error.kind(),
            format!(
                "{short}; cannot cut the partial record off ({error}): no record is written until it is"
            ),
        )),
    }
}

/// Cuts the last `partial` bytes off the file (the end of a record that
/// failed part-way); with O_APPEND they are the file's last bytes.
fn cut_partial(file: &mut impl RecordFile, partial: &mut u64) -> io::Result<()> {
    if *partial == 0 {
        return Ok(());
    }
    let len = file.len()?;
    // Shorter than the partial record: someone truncated the file since, and
    // the bytes are gone already.
    if len >= *partial {
        file.set_len(len - *partial)?;
    }
    *partial = 0;
    Ok(())
}

/// Opens the log for appending as a private file ([`private_fs::open_append`]:
/// created 0600, not through a symbolic link, without blocking on a FIFO,
/// refused unless it is this user's alone; a character device is allowed);
/// with a sync mode, syncs the directory so that a new file's name survives a
/// power loss too.
fn open_file(path: &Path, sync: AuditSync) -> io::Result<FileSink> {
    let file = private_fs::open_append(path, Devices::AllowCharacter).map_err(|e| e.into_io())?;
    let metadata = file.metadata()?;
    let regular = metadata.is_file();
    if regular {
        end_a_torn_tail(path, &file, metadata.len(), sync)?;
        if sync != AuditSync::Never
            && let Some(dir) = path.parent()
        {
            let dir = if dir.as_os_str().is_empty() {
                Path::new(".")
            } else {
                dir
            };
            if let Err(error) = File::open(dir).and_then(|dir| dir.sync_all()) {
                tracing::warn!(path = %path.display(), "cannot fsync the audit log's directory: {error}");
            }
        }
    } else {
        tracing::warn!(
            path = %path.display(),
            "the audit log is not a regular file: records are neither synced nor cut back after a failed write"
        );
    }
    Ok(FileSink {
        file: Arc::new(file),
        regular,
        partial: 0,
    })
}

/// A log that does not end in a newline was cut in the middle of a record
/// (killed while writing it, or a power loss under `batch` or `never`):
/// the fragment is ended with a newline before anything is appended, so it
/// stays one unreadable line of its own (`gatehouse audit` counts it, says
/// where it starts and shows what its start says) and the next record starts
/// a line, whole. What was done is recorded on the next line, an event
/// ([`TORN_LINE_ENDED`], [`read::AuditEvent`]), in the same write.
fn end_a_torn_tail(path: &Path, file: &File, len: u64, sync: AuditSync) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::FileExt;
    if len == 0 {
        return Ok(());
    }
    // The log is open for appending only: read its last byte through the
    // same open file (/proc), or through its path if that is still the same
    // file (no /proc).
    let reading = match File::open(format!("/proc/self/fd/{}", file.as_raw_fd())) {
        Ok(reading) => reading,
        Err(_) => {
            use std::os::unix::fs::MetadataExt;
            let reading = File::open(path)?;
            let (ours, theirs) = (file.metadata()?, reading.metadata()?);
            if (ours.dev(), ours.ino()) != (theirs.dev(), theirs.ino()) {
                return Err(io::Error::other(
                    "the audit log was replaced while it was being opened",
                ));
            }
            reading
        }
    };
    let mut last = [0u8; 1];
    reading.read_exact_at(&mut last, len - 1)?;
    if last[0] == b'\n' {
        return Ok(());
    }
    let start = torn_line_start(&reading, len)?;
    let event = serde_json::json!({
        "time": now_rfc3339(),
        "event": TORN_LINE_ENDED,
        "torn_line_at": start,
        "torn_bytes": len - start,
        "reason": "the log did not end in a newline: its last record was cut short (a kill while it was written, or a power loss); the torn line was ended so the next record starts a line of its own",
    });
    let mut repair = b"\n".to_vec();
    repair.extend_from_slice(event.to_string().as_bytes());
    repair.push(b'\n');
    (&*file).write_all(&repair)?;
    if sync != AuditSync::Never {
        file.sync_data()?;
    }
    tracing::warn!(
        path = %path.display(),
        torn_line_at = start,
        torn_bytes = len - start,
        "the audit log did not end in a newline (a write was cut short): its torn last line is ended now, \
         so the next record starts a line of its own"
    );
    Ok(())
}

/// The `event` of the line that records a torn last line was ended
/// (`end_a_torn_tail`).
pub const TORN_LINE_ENDED: &str = "torn_line_ended";

/// Where the last line of a file of `len` bytes starts: after the last
/// newline before its end (read backwards, 64 KiB at a time), or 0.
fn torn_line_start(file: &File, len: u64) -> io::Result<u64> {
    use std::os::unix::fs::FileExt;
    const CHUNK: u64 = 64 * 1024;
    let mut end = len;
    let mut buffer = vec![0u8; CHUNK as usize];
    while end > 0 {
        let from = end.saturating_sub(CHUNK);
        let chunk = &mut buffer[..(end - from) as usize];
        file.read_exact_at(chunk, from)?;
        if let Some(at) = memchr::memrchr(b'\n', chunk) {
            return Ok(from + at as u64 + 1);
        }
        end = from;
    }
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn record(id: u64) -> AuditRecord {
        AuditRecord {
            person: None,
            time: now_rfc3339(),
            server: "git".to_owned(),
            request_id: json!(id),
            session: None,
            turn: None,
            instance: None,
            client: None,
            mode: "form".to_owned(),
            decided_by: DecidedBy::Person,
            reason: "routed to the user".to_owned(),
            steps: Vec::new(),
            answer: json!({"action": "accept", "content": {"name": "Ada Lovelace"}}),
            latency_us: 42,
        }
    }

    fn line(id: u64) -> Vec<u8> {
        let mut line = serde_json::to_vec(&record(id)).expect("serializes");
        line.push(b'\n');
        line
    }

    /// Every line is a whole JSON record and the text ends with a newline.
    fn whole_records(bytes: &[u8]) -> usize {
        if bytes.is_empty() {
            return 0;
        }
        assert_eq!(bytes.last(), Some(&b'\n'), "ends in a partial record");
        let text = std::str::from_utf8(bytes).expect("UTF-8");
        for line in text.lines() {
            let value: Value = serde_json::from_str(line).expect("a whole JSON record");
            assert!(value.get("answer").is_some(), "{line}");
        }
        text.lines().count()
    }

    /// A file that takes `room` more bytes and then reports a full disk;
    /// its first `cut_fails` truncations fail.
    #[derive(Default)]
    struct Filling {
        bytes: Vec<u8>,
        room: usize,
        cut_fails: usize,
        writes: usize,
    }

    impl RecordFile for Filling {
        fn write_once(&mut self, bytes: &[u8]) -> io::Result<usize> {
            self.writes += 1;
            if self.room == 0 {
                return Err(io::Error::from(io::ErrorKind::StorageFull));
            }
            let n = bytes.len().min(self.room);
            self.bytes.extend_from_slice(&bytes[..n]);
            self.room -= n;
            Ok(n)
        }

        fn len(&mut self) -> io::Result<u64> {
            Ok(self.bytes.len() as u64)
        }

        fn set_len(&mut self, len: u64) -> io::Result<()> {
            if self.cut_fails > 0 {
                self.cut_fails -= 1;
                return Err(io::Error::other("EIO (test)"));
            }
            let len = usize::try_from(len).expect("small");
            self.room += self.bytes.len() - len;
            self.bytes.truncate(len);
            Ok(())
        }
    }

    #[test]
    fn a_short_write_is_cut_back_so_no_partial_record_remains() {
        let record = line(1);
        // Room for the record but its newline: written as is, it would
        // leave `{...}` without `\n`, a line that looks whole.
        let mut file = Filling {
            room: record.len() - 1,
            ..Filling::default()
        };
        let mut partial = 0;
        let error = append(&mut file, &mut partial, &record).unwrap_err();
        assert!(error.to_string().contains("short write"), "{error}");
        assert!(file.bytes.is_empty(), "the short record was cut off");
        assert_eq!(partial, 0);
        assert_eq!(file.writes, 1, "one write per record");

        // Two and a half records of room: two whole ones, then a cut.
        let mut file = Filling {
            room: record.len() * 5 / 2,
            ..Filling::default()
        };
        for id in 0..2 {
            append(&mut file, &mut partial, &line(id)).expect("fits");
        }
        assert!(append(&mut file, &mut partial, &line(2)).is_err());
        assert_eq!(whole_records(&file.bytes), 2);
        assert_eq!(file.writes, 3);
        // A full disk (nothing written at all) changes nothing either.
        file.room = 0;
        assert!(append(&mut file, &mut partial, &line(3)).is_err());
        assert_eq!(whole_records(&file.bytes), 2);
        // Room again: the next record follows the last whole one.
        file.room = usize::MAX / 2;
        append(&mut file, &mut partial, &line(4)).expect("room again");
        assert_eq!(whole_records(&file.bytes), 3);
    }

    #[test]
    fn a_torn_tail_is_ended_before_the_next_record_in_every_mode() {
        for mode in AuditSync::ALL {
            let dir = tempfile::tempdir().expect("tempdir");
            let path = dir.path().join("audit.jsonl");
            // One whole record, then a record cut in its middle (a kill while
            // it was written).
            let mut torn = line(1);
            torn.extend_from_slice(&line(2)[..40]);
            std::fs::write(&path, &torn).expect("plant a torn tail");
            {
                use std::os::unix::fs::PermissionsExt;
                std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))
                    .expect("0600, as gatehouse writes it");
            }
            let log = AuditLog::open_with(&path, mode).expect("opens");
            log.write(&record(3)).expect("written");
            drop(log);
            let text = std::fs::read_to_string(&path).expect("read back");
            let lines: Vec<&str> = text.lines().collect();
            assert_eq!(lines.len(), 4, "{mode:?}: {text}");
            assert!(
                serde_json::from_str::<Value>(lines[1]).is_err(),
                "{mode:?}: the fragment"
            );
            // What was done, as an event line: where the torn line starts.
            let event: Value = serde_json::from_str(lines[2]).expect("the repair event");
            assert_eq!(event["event"], TORN_LINE_ENDED, "{mode:?}");
            assert_eq!(event["torn_line_at"], line(1).len(), "{mode:?}");
            assert_eq!(event["torn_bytes"], 40, "{mode:?}");
            let next: Value = serde_json::from_str(lines[3]).expect("the next record is whole");
            assert_eq!(next["request_id"], 3, "{mode:?}");
            // Opening a log that ends well adds nothing.
            let len = text.len();
            drop(AuditLog::open_with(&path, mode).expect("opens again"));
            assert_eq!(
                std::fs::metadata(&path).expect("metadata").len() as usize,
                len
            );
        }
    }

    #[test]
    fn a_partial_record_that_cannot_be_cut_blocks_the_next_until_it_is() {
        let record = line(1);
        let mut file = Filling {
            room: record.len() / 2,
            cut_fails: 2,
            ..Filling::default()
        };
        let mut partial = 0;
        let error = append(&mut file, &mut partial, &record).unwrap_err();
        assert!(error.to_string().contains("cannot cut"), "{error}");
        assert_eq!(partial, (record.len() / 2) as u64);
        // The cut fails again: nothing is written after the partial record.
        file.room = usize::MAX / 2;
        let error = append(&mut file, &mut partial, &line(2)).unwrap_err();
        assert!(error.to_string().contains("cannot be cut off"), "{error}");
        assert_eq!(file.writes, 1, "no write after an uncut partial record");
        // Now the cut works: the partial record goes, the new one is whole.
        append(&mut file, &mut partial, &line(3)).expect("written");
        assert_eq!(whole_records(&file.bytes), 1);
        assert!(String::from_utf8_lossy(&file.bytes).contains("\"request_id\":3"));
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn a_full_disk_fails_the_write_and_leaves_nothing_in_any_mode() {
        use std::os::unix::fs::MetadataExt;
        let before = std::fs::metadata("/dev/full").expect("/dev/full").mode();
        for mode in AuditSync::ALL {
            let log = AuditLog::open_with("/dev/full", mode).expect("opens");
            for id in 0..3 {
                let error = log.write(&record(id)).unwrap_err();
                let message = error.to_string();
                assert!(message.contains("/dev/full"), "{message}");
                assert!(message.contains("No space left"), "{mode}: {message}");
            }
            log.reopen().expect("reopens");
            assert!(log.write(&record(9)).is_err());
            assert_eq!(log.syncs(), 0, "{mode}: a device is never synced");
        }
        assert_eq!(
            std::fs::metadata("/dev/full").expect("/dev/full").mode(),
            before,
            "a device's mode is left alone"
        );
    }

    /// A real regular file under a file size limit (`ulimit -f`), so that a
    /// record is written short, in a child process: only whole records
    /// remain.
    #[cfg(target_os = "linux")]
    #[test]
    fn a_file_size_limit_leaves_only_whole_records_in_a_real_file() {
        const CHILD: &str = "GATEHOUSE_AUDIT_FSIZE_CHILD";
        if let Some(path) = std::env::var_os(CHILD) {
            let log = AuditLog::open_with(&path, AuditSync::Never).expect("opens");
            for id in 0.. {
                if let Err(error) = log.write(&record(id)) {
                    println!("wrote {id} records, then: {error}");
                    return;
                }
            }
        }
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("audit.jsonl");
        let this = "tests::a_file_size_limit_leaves_only_whole_records_in_a_real_file";
        // SIGXFSZ ignored, so that writing past the limit fails with EFBIG
        // instead of killing the child; `ulimit -f 2` is 2048 bytes.
        let output = std::process::Command::new("bash")
            .arg("-c")
            .arg("trap '' XFSZ; ulimit -f 2 && exec \"$0\" --exact \"$1\" --nocapture --test-threads 1")
            .arg(std::env::current_exe().expect("test binary"))
            .arg(this)
            .env(CHILD, &path)
            .output()
            .expect("bash runs");
        let said = String::from_utf8_lossy(&output.stdout);
        assert!(output.status.success(), "{said}");
        assert!(said.contains("short write"), "{said}");
        let bytes = std::fs::read(&path).expect("read");
        let count = whole_records(&bytes);
        assert!(count >= 2, "{count} records");
        assert_eq!(bytes.len(), count * line(0).len(), "whole records only");
    }

    #[cfg(unix)]
    #[test]
    fn the_file_is_created_0600_and_a_loose_or_foreign_one_is_refused() {
        use std::os::unix::fs::{MetadataExt, PermissionsExt};
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("audit.jsonl");
        let log = AuditLog::open(&path).expect("opens");
        log.write(&record(1)).expect("written");
        let mode =
            |path: &Path| std::fs::metadata(path).expect("meta").permissions().mode() & 0o7777;
        assert_eq!(mode(&path), 0o600);

        // A file others may read is refused, naming the fix, and left as it is.
        let loose = dir.path().join("loose.jsonl");
        std::fs::write(&loose, line(0)).expect("write");
        std::fs::set_permissions(&loose, std::fs::Permissions::from_mode(0o644)).expect("chmod");
        let error = AuditLog::open(&loose).unwrap_err().to_string();
        assert!(error.contains(&loose.display().to_string()), "{error}");
        assert!(error.contains("chmod 600"), "{error}");
        assert_eq!(mode(&loose), 0o644);
        assert_eq!(whole_records(&std::fs::read(&loose).expect("read")), 1);

        // A file planted by another user is refused, not taken over.
        if private_fs::effective_uid() == 0 {
            let planted = dir.path().join("planted.jsonl");
            std::fs::write(&planted, line(0)).expect("write");
            std::fs::set_permissions(&planted, std::fs::Permissions::from_mode(0o600))
                .expect("chmod");
            std::os::unix::fs::chown(&planted, Some(65534), Some(65534)).expect("chown");
            let error = AuditLog::open(&planted).unwrap_err().to_string();
            assert!(error.contains("belongs to uid 65534"), "{error}");
            let meta = std::fs::metadata(&planted).expect("meta");
            assert_eq!((meta.uid(), meta.mode() & 0o7777), (65534, 0o600));
            // Nor does a reopen switch to it.
            let log = AuditLog::open(&path).expect("opens");
            std::fs::rename(&planted, &path).expect("mv");
            assert!(log.reopen().is_err());
        } else {
            eprintln!("skipped the planted file: giving a file away needs root");
        }
    }

    /// Makes a FIFO at `path`.
    #[cfg(unix)]
    fn mkfifo(path: &Path) {
        rustix::fs::mknodat(
            rustix::fs::CWD,
            path,
            rustix::fs::FileType::Fifo,
            rustix::fs::Mode::from_raw_mode(0o600),
            0,
        )
        .expect("mkfifo");
    }

    /// Runs `call` on another thread; panics if it has not returned within
    /// 5 s (an `open` blocked on a FIFO never would).
    #[cfg(unix)]
    fn promptly<T: Send + 'static>(call: impl FnOnce() -> T + Send + 'static) -> T {
        let (done, finished) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = done.send(call());
        });
        finished
            .recv_timeout(Duration::from_secs(5))
            .expect("returned promptly instead of blocking")
    }

    #[cfg(unix)]
    #[test]
    fn a_fifo_at_the_path_fails_open_and_reopen_promptly() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("audit.jsonl");
        mkfifo(&path);
        for mode in AuditSync::ALL {
            let fifo = path.clone();
            let error = promptly(move || AuditLog::open_with(&fifo, mode).map(drop))
                .expect_err("a FIFO is refused")
                .to_string();
            assert!(error.contains("FIFO"), "{error}");
        }
        // Rotated, and a FIFO planted in the log's place: the reopen fails
        // at once and the old file stays in use.
        std::fs::remove_file(&path).expect("rm");
        let log = Arc::new(AuditLog::open(&path).expect("opens"));
        log.write(&record(1)).expect("written");
        let rotated = dir.path().join("audit.jsonl.1");
        std::fs::rename(&path, &rotated).expect("mv");
        mkfifo(&path);
        let reopening = log.clone();
        let error = promptly(move || reopening.reopen())
            .expect_err("a FIFO is refused")
            .to_string();
        assert!(error.contains("FIFO"), "{error}");
        log.write(&record(2)).expect("still to the old file");
        assert_eq!(whole_records(&std::fs::read(&rotated).expect("read")), 2);
    }

    #[test]
    fn a_reopen_racing_a_reopen_ends_with_the_newest_file() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("audit.jsonl");
        let log = Arc::new(AuditLog::open_with(&path, AuditSync::Never).expect("opens"));
        let (opened, first_opened) = std::sync::mpsc::channel();
        let (finished, second_finished) = std::sync::mpsc::channel::<()>();
        // The first reopen, having opened the path, waits (up to a second)
        // for the second to finish before it puts its file in place.
        *log.before_swap.lock().expect("lock") = Some(Box::new(move || {
            let _ = opened.send(());
            let _ = second_finished.recv_timeout(Duration::from_secs(1));
        }));
        let first = {
            let log = log.clone();
            std::thread::spawn(move || log.reopen())
        };
        first_opened
            .recv_timeout(Duration::from_secs(5))
            .expect("the first reopen opened the file");
        // Rotated between the first reopen's open and its swap; the second
        // reopen opens the new file, so it is the one that must stay.
        let rotated = dir.path().join("audit.jsonl.1");
        std::fs::rename(&path, &rotated).expect("mv");
        let second = {
            let log = log.clone();
            std::thread::spawn(move || {
                let reopened = log.reopen();
                let _ = finished.send(());
                reopened
            })
        };
        second.join().expect("second").expect("reopened");
        first.join().expect("first").expect("reopened");
        log.write(&record(7)).expect("written");
        let newest = std::fs::read(&path).expect("the newest file");
        assert_eq!(
            whole_records(&newest),
            1,
            "the record went to the newest file"
        );
        assert_eq!(whole_records(&std::fs::read(&rotated).expect("read")), 0);
    }

    /// A 6 MiB id of C1 controls would be written as 18 MiB of `\u0085`,
    /// over the reader's 16 MiB line limit: it is written cut, with the
    /// digest of the whole, so the record (an accept) reads back whole,
    /// and its line starts with when, whose and what.
    #[test]
    fn a_record_with_a_six_megabyte_id_is_written_readable() {
        use sha2::Digest;
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("audit.jsonl");
        let log = AuditLog::open_with(&path, AuditSync::Never).expect("opens");
        let id = "\u{85}".repeat(3 << 20);
        let mut written = record(1);
        written.request_id = Value::String(id.clone());
        written.reason = "\u{9b}".repeat(1 << 20);
        log.write(&written).expect("written");
        let bytes = std::fs::read(&path).expect("read");
        assert!(bytes.len() < 1 << 20, "{} bytes", bytes.len());
        let text = String::from_utf8(bytes).expect("UTF-8");
        assert!(
            text.starts_with(&format!(
                r#"{{"time":"{}","server":"git","decided_by":"person","action":"accept","#,
                written.time
            )),
            "{text:.200}"
        );
        let mut reader = read::open(&path).expect("opens");
        let Some(read::ReadLine::Entry(entry)) = reader.next_line().expect("reads") else {
            panic!("a whole record");
        };
        assert_eq!(entry.record.action(), read::Action::Accept);
        let Value::String(cut) = &entry.record.request_id else {
            panic!("a string id");
        };
        let digest = hex::encode(sha2::Sha256::digest(id.as_bytes()));
        assert!(
            cut.ends_with(&format!("…[cut: {} bytes, sha256:{digest}]", id.len())),
            "{cut}"
        );
        assert!(entry.record.reason.contains(bound::CUT_MARK));
    }

    #[test]
    fn records_carry_terminal_and_invisible_controls_as_json_escapes() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("audit.jsonl");
        let log = AuditLog::open_with(&path, AuditSync::Never).expect("opens");
        let hostile = "a\u{7f}b\u{9b}2J\u{202e}detpecca\u{2028}x\u{200b}\u{1b}]0;t\u{7}";
        let mut written = record(1);
        written.reason = hostile.to_owned();
        written.answer = json!({"action": "decline", hostile: [hostile]});
        log.write(&written).expect("written");
        let text = std::fs::read_to_string(&path).expect("read");
        for raw in [
            '\u{7f}', '\u{9b}', '\u{202e}', '\u{2028}', '\u{200b}', '\u{1b}', '\u{7}',
        ] {
            assert!(!text.contains(raw), "raw {raw:?} in {text:?}");
        }
        assert!(
            text.contains(r"a\u007fb\u009b2J\u202edetpecca\u2028x\u200b\u001b]0;t\u0007"),
            "{text}"
        );
        assert_eq!(text.lines().count(), 1);
        // The same record for a JSON reader.
        let read: Value = serde_json::from_str(text.trim_end()).expect("JSON");
        assert_eq!(read["reason"], hostile);
        assert_eq!(read["answer"], written.answer);
    }

    #[cfg(unix)]
    #[test]
    fn a_symbolic_link_in_its_place_is_not_followed() {
        let dir = tempfile::tempdir().expect("tempdir");
        let target = dir.path().join("elsewhere");
        std::fs::write(&target, b"precious\n").expect("write");
        let path = dir.path().join("audit.jsonl");
        std::os::unix::fs::symlink(&target, &path).expect("symlink");
        let error = AuditLog::open(&path).unwrap_err().to_string();
        assert!(error.contains("symbolic link"), "{error}");
        assert_eq!(std::fs::read(&target).expect("read"), b"precious\n");
        // A dangling link does not create its target either.
        let dangling = dir.path().join("dangling.jsonl");
        std::os::unix::fs::symlink(dir.path().join("created"), &dangling).expect("symlink");
        assert!(AuditLog::open(&dangling).is_err());
        assert!(!dir.path().join("created").exists());
    }

    #[test]
    fn reopen_after_a_rename_writes_to_a_new_file() {
        for mode in AuditSync::ALL {
            let dir = tempfile::tempdir().expect("tempdir");
            let path = dir.path().join("audit.jsonl");
            let rotated = dir.path().join("audit.jsonl.1");
            let log = AuditLog::open_with(&path, mode).expect("opens");
            log.write(&record(1)).expect("written");
            std::fs::rename(&path, &rotated).expect("mv");
            log.write(&record(2)).expect("still to the renamed file");
            log.reopen().expect("reopens");
            log.write(&record(3)).expect("to the new file");
            let old = std::fs::read(&rotated).expect("read");
            let new = std::fs::read(&path).expect("read");
            assert_eq!(whole_records(&old), 2, "{mode}");
            assert_eq!(whole_records(&new), 1, "{mode}");
            assert!(String::from_utf8_lossy(&new).contains("\"request_id\":3"));
            #[cfg(unix)]
            {
                use std::os::unix::fs::PermissionsExt;
                let meta = std::fs::metadata(&path).expect("meta");
                assert_eq!(meta.permissions().mode() & 0o777, 0o600);
            }
            // A reopen that cannot open keeps the old file in use.
            drop(dir);
            assert!(log.reopen().is_err());
        }
    }

    #[test]
    fn each_sync_mode_syncs_as_it_says() {
        let dir = tempfile::tempdir().expect("tempdir");
        let always = AuditLog::open_with(dir.path().join("always"), AuditSync::Always).unwrap();
        let never = AuditLog::open_with(dir.path().join("never"), AuditSync::Never).unwrap();
        let batch = AuditLog::open_with(dir.path().join("batch"), AuditSync::Batch).unwrap();
        for id in 0..50 {
            always.write(&record(id)).unwrap();
            never.write(&record(id)).unwrap();
            batch.write(&record(id)).unwrap();
        }
        assert_eq!(always.syncs(), 50, "one fdatasync per record");
        assert_eq!(never.syncs(), 0);
        // 50 records in far less than the interval: one or two syncs.
        let deadline = Instant::now() + Duration::from_secs(5);
        while batch.syncs() == 0 {
            assert!(Instant::now() < deadline, "the flusher never synced");
            std::thread::sleep(Duration::from_millis(5));
        }
        std::thread::sleep(BATCH_SYNC_INTERVAL * 2);
        assert!((1..=2).contains(&batch.syncs()), "{}", batch.syncs());
        // Nothing new, nothing synced.
        let settled = batch.syncs();
        std::thread::sleep(BATCH_SYNC_INTERVAL * 2);
        assert_eq!(batch.syncs(), settled);
        // Dropping the log syncs what is left.
        batch.write(&record(99)).unwrap();
        let shared = batch.shared.clone();
        let before = shared.syncs.load(Ordering::Relaxed);
        drop(batch);
        assert!(shared.syncs.load(Ordering::Relaxed) > before);
    }

    #[test]
    fn after_a_failed_background_sync_nothing_is_written_until_reopen() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("audit.jsonl");
        let log = AuditLog::open(&path).expect("opens");
        log.write(&record(1)).expect("written");
        // What the flusher records when fdatasync fails.
        log.lock().failed = Some("Input/output error (os error 5)".to_owned());
        let error = log.write(&record(2)).unwrap_err().to_string();
        assert!(error.contains("reopened"), "{error}");
        assert_eq!(whole_records(&std::fs::read(&path).unwrap()), 1);
        log.reopen().expect("reopens");
        log.write(&record(3)).expect("written again");
        assert_eq!(whole_records(&std::fs::read(&path).unwrap()), 2);
    }

    #[test]
    fn audit_sync_names_the_field_when_wrong() {
        for mode in AuditSync::ALL {
            assert_eq!(mode.name().parse::<AuditSync>(), Ok(mode));
        }
        let error = "sometimes".parse::<AuditSync>().unwrap_err();
        assert!(error.contains("audit_sync"), "{error}");
        assert_eq!(AuditSync::default(), AuditSync::Batch);
    }
}
