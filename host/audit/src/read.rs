//! Reading the audit log back: records line by line, filters, statistics,
//! and following a log that grows and is rotated (`gatehouse audit`).
//!
//! [`AuditReader`] streams records from any [`BufRead`], one line at a time
//! (never the whole file): a line that is not a whole record (not UTF-8, not
//! JSON, not an [`AuditRecord`], a `time` that is not RFC 3339, longer than
//! [`DEFAULT_MAX_LINE`]) comes back as an [`UnreadableLine`] naming its
//! number and why, and reading goes on. A last line without its newline is
//! not parsed: it is being written (or was cut short), so the reader keeps
//! it and goes on from there when more arrives; [`AuditReader::finish`]
//! reports it when nothing more will.
//!
//! No line is dropped unseen: an unreadable line is still read for what its
//! start says ([`recover`]). A record is written with `time`, `server`,
//! `decided_by` and `action` first, so a line that is too long, cut short or
//! garbled further on still gives when, whose and what ([`Recovered`], in
//! [`UnreadableLine::recovered`]), and `gatehouse audit` counts and shows it
//! as such. Of a line over the limit only its first [`RECOVERY_PREFIX`]
//! bytes are held.
//!
//! [`AuditTail`] follows the file at a path like `tail -F`: when the path
//! names another file (rotation, then SIGHUP or `gatehouse reload` makes
//! gatehouse write a new one) it finishes the old one and reads the new one
//! from its start; a file cut shorter than what was read is read again from
//! its start.
//!
//! Every string in a record came from a server, a guest or a person:
//! escape it ([`gatehouse_base::escape`]) before printing.
//!
//! ```
//! use gatehouse_audit::read::{AuditFilter, AuditReader, AuditStats, ReadLine};
//!
//! let log = concat!(
//!     r#"{"time":"2026-05-01T10:00:00.000001Z","server":"git","request_id":7,"mode":"form","#,
//!     r#""decided_by":"guest","reason":"decided by the chain","steps":[{"module":"guardian","#,
//!     r#""sha256":"ab12","outcome":"decline","latency_us":80}],"answer":{"action":"decline"},"#,
//!     r#""latency_us":120}"#,
//!     "\nnot json\n",
//! );
//! let mut reader = AuditReader::new(log.as_bytes());
//! let filter = AuditFilter { server: Some("git".to_owned()), ..AuditFilter::default() };
//! let mut stats = AuditStats::default();
//! let mut unreadable = 0;
//! while let Some(line) = reader.next_line()? {
//!     match line {
//!         ReadLine::Entry(entry) if filter.matches(&entry) => stats.add(&entry.record),
//!         ReadLine::Entry(_) | ReadLine::Event(_) => {}
//!         ReadLine::Unreadable(_) => unreadable += 1,
//!     }
//! }
//! assert_eq!((stats.records(), unreadable), (1, 1));
//! assert_eq!(stats.latency().map(|latency| latency.p50), Some(120));
//! # Ok::<(), std::io::Error>(())
//! ```

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{self, BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

use serde_json::Value;

use super::bound::{MAX_NAME_CHARS, bound_id, cut};
use super::{AuditRecord, AuditStep, DecidedBy};
use gatehouse_base::percentile::percentile;

/// The longest line read as a record, 16 MiB (the longest message gatehouse
/// takes from a stdio server); a longer one is skipped, without being held
/// in memory, and reported.
pub const DEFAULT_MAX_LINE: usize = 16 << 20;

/// How much of the start of a line over the limit is kept, to recover what
/// it says ([`recover`]): 64 KiB.
pub const RECOVERY_PREFIX: usize = 64 * 1024;

/// The longest JSON value [`recover`] decodes (a string, or the `answer`
/// whose action it reads); longer ones are skipped.
const RECOVERED_VALUE: usize = 64 * 1024;

/// How long [`AuditTail`] still reads a file after the path named another:
/// records gatehouse wrote to the old file just before it reopened.
pub const ROTATION_GRACE: Duration = Duration::from_secs(1);

/// Why a line is not a record.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LineError {
    /// Longer than the reader's limit.
    #[error("longer than {limit} bytes")]
    TooLong {
        /// The limit, in bytes.
        limit: usize,
    },
    /// Not UTF-8.
    #[error("not UTF-8 (at byte {valid_up_to})")]
    NotUtf8 {
        /// The bytes before the first that is not UTF-8.
        valid_up_to: usize,
    },
    /// Not JSON.
    #[error("not JSON: {0}")]
    NotJson(String),
    /// JSON, but not an audit record (a field missing or of the wrong type).
    #[error("not an audit record: {0}")]
    NotARecord(String),
    /// Its `time` is not an RFC 3339 timestamp.
    #[error("its time {0:?} is not an RFC 3339 timestamp")]
    BadTime(String),
    /// The file ends in a line without its newline: a record being written,
    /// or one cut short.
    #[error("the last line is incomplete (no newline after {length} bytes)")]
    Incomplete {
        /// The bytes of the incomplete line.
        length: usize,
    },
}

/// A line that is not a record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnreadableLine {
    /// Its number in the file, from 1.
    pub line: u64,
    /// The byte of the file it starts at, from 0.
    pub offset: u64,
    /// Why it is not a record.
    pub error: LineError,
    /// What its start still says, when that is at least when and whose or
    /// what ([`recover`]).
    pub recovered: Option<Recovered>,
}

/// What the start of a line that is not a whole record still says: the
/// fields a record is written with first, as far as they could be read
/// before the line broke off or went wrong. There is a time and at least
/// one of the others. Strings are cut to
/// [`MAX_NAME_CHARS`] and escaped by no one:
/// escape them before printing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Recovered {
    /// `time`, parsed.
    pub time: SystemTime,
    /// `server`.
    pub server: Option<String>,
    /// `decided_by`.
    pub decided_by: Option<DecidedBy>,
    /// `action`, or the action of `answer` when the whole answer could be
    /// read.
    pub action: Option<Action>,
    /// `mode`.
    pub mode: Option<String>,
    /// `request_id` (a long one cut as the writer cuts it).
    pub request_id: Option<Value>,
}

/// What the start of `bytes` (a line, or the first bytes of one; need not
/// be UTF-8 or whole JSON) says of a record: its top-level members read in
/// order until one cannot be (the line ends, or goes wrong), and of those,
/// `time`, `server`, `decided_by`, `action`, `mode`, `request_id` and the
/// action of `answer`. `None` unless `time` is an RFC 3339 timestamp and
/// at least one of `server`, `decided_by` or `action` was read: a line that
/// says no more than that is no record anyone could count.
///
/// ```
/// use gatehouse_audit::DecidedBy;
/// use gatehouse_audit::read::{Action, recover};
/// let cut = br#"{"time":"2026-05-01T10:00:00Z","server":"git","decided_by":"person","action":"accept","request_id":"\u0085\u0085"#;
/// let recovered = recover(cut).expect("when, whose and what");
/// assert_eq!(recovered.server.as_deref(), Some("git"));
/// assert_eq!(recovered.decided_by, Some(DecidedBy::Person));
/// assert_eq!(recovered.action, Some(Action::Accept));
/// assert_eq!(recovered.request_id, None, "cut off inside the id");
/// assert!(recover(b"not json").is_none());
/// ```
pub fn recover(bytes: &[u8]) -> Option<Recovered> {
    let mut scan = Scanner { bytes, at: 0 };
    let mut found = Found::default();
    scan.blank();
    if scan.eat(b'{') {
        loop {
            scan.blank();
            let Some(key) = scan.string() else { break };
            scan.blank();
            if !scan.eat(b':') {
                break;
            }
            scan.blank();
            let Some(value) = scan.value() else { break };
            found.take(key, value);
            scan.blank();
            if !scan.eat(b',') {
                break;
            }
        }
    }
    let time = found.time?;
    if found.server.is_none() && found.decided_by.is_none() && found.action.is_none() {
        return None;
    }
    Some(Recovered {
        time,
        server: found.server,
        decided_by: found.decided_by,
        action: found.action,
        mode: found.mode,
        request_id: found.request_id,
    })
}

/// The members [`recover`] keeps, the first of each.
#[derive(Default)]
struct Found {
    time: Option<SystemTime>,
    server: Option<String>,
    decided_by: Option<DecidedBy>,
    action: Option<Action>,
    mode: Option<String>,
    request_id: Option<Value>,
}

impl Found {
    /// Keeps `value` (a whole JSON value's bytes) if `key` (a whole JSON
    /// string's bytes) names a member wanted and not yet seen.
    fn take(&mut self, key: &[u8], value: &[u8]) {
        if key.len() > 64 || value.len() > RECOVERED_VALUE {
            return;
        }
        let Ok(key) = serde_json::from_slice::<String>(key) else {
            return;
        };
        let text = || serde_json::from_slice::<String>(value).ok();
        let name = || text().map(|text| cut(&text, MAX_NAME_CHARS).into_owned());
        match key.as_str() {
            "time" if self.time.is_none() => {
                self.time = text().and_then(|time| humantime::parse_rfc3339(&time).ok());
            }
            "server" if self.server.is_none() => self.server = name(),
            "mode" if self.mode.is_none() => self.mode = name(),
            "decided_by" if self.decided_by.is_none() => {
                self.decided_by = text().and_then(|by| DecidedBy::from_name(&by));
            }
            "action" if self.action.is_none() => {
                self.action = text().and_then(|action| Action::from_name(&action));
            }
            "answer" if self.action.is_none() => {
                self.action = serde_json::from_slice::<Value>(value)
                    .ok()
                    .filter(Value::is_object)
                    .map(|answer| Action::of(&answer));
            }
            "request_id" if self.request_id.is_none() => {
                self.request_id = serde_json::from_slice::<Value>(value)
                    .ok()
                    .map(|id| bound_id(&id).into_owned());
            }
            _ => {}
        }
    }
}

/// Reads JSON tokens off the start of a byte string, without decoding
/// them; every method answers `None` (or `false`) where the bytes end or are
/// not what it reads.
struct Scanner<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Scanner<'a> {
    fn peek(&self) -> Option<u8> {
        self.bytes.get(self.at).copied()
    }

    fn blank(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            self.at += 1;
        }
    }

    fn eat(&mut self, byte: u8) -> bool {
        let matched = self.peek() == Some(byte);
        if matched {
            self.at += 1;
        }
        matched
    }

    /// A whole string token, quotes included.
    fn string(&mut self) -> Option<&'a [u8]> {
        let start = self.at;
        if !self.eat(b'"') {
            return None;
        }
        loop {
            let rest = self.bytes.get(self.at..)?;
            let stop = memchr::memchr2(b'"', b'\\', rest)?;
            self.at += stop + 1;
            if rest[stop] == b'"' {
                return self.bytes.get(start..self.at);
            }
            // A backslash escapes the byte after it.
            self.at += 1;
        }
    }

    /// A whole value: a string, an object or array to its matching end, or
    /// a literal or number up to the delimiter after it.
    fn value(&mut self) -> Option<&'a [u8]> {
        let start = self.at;
        match self.peek()? {
            b'"' => self.string(),
            b'{' | b'[' => {
                let mut depth = 0usize;
                loop {
                    match self.peek()? {
                        b'"' => {
                            self.string()?;
                        }
                        b'{' | b'[' => {
                            depth += 1;
                            self.at += 1;
                        }
                        b'}' | b']' => {
                            depth -= 1;
                            self.at += 1;
                            if depth == 0 {
                                return self.bytes.get(start..self.at);
                            }
                        }
                        _ => self.at += 1,
                    }
                }
            }
            _ => {
                loop {
                    match self.peek()? {
                        b',' | b'}' | b']' | b' ' | b'\t' | b'\n' | b'\r' => break,
                        _ => self.at += 1,
                    }
                }
                self.bytes.get(start..self.at)
            }
        }
    }
}

/// A record read from a line.
#[derive(Debug, Clone)]
pub struct AuditEntry {
    /// Its line number in the file, from 1.
    pub line: u64,
    /// `record.time`, parsed.
    pub time: SystemTime,
    /// The record.
    pub record: AuditRecord,
    /// The line as it is in the file, without its newline (escape it before
    /// printing it).
    pub text: String,
}

/// A line that records something gatehouse did to the log itself rather
/// than a decision: `{"time": ..., "event": ..., ...}`, such as
/// [`super::TORN_LINE_ENDED`] (a torn last line was ended when the log was
/// opened).
#[derive(Debug, Clone)]
pub struct AuditEvent {
    /// Its line number in the file, from 1.
    pub line: u64,
    /// When (the line's `time`, parsed).
    pub time: SystemTime,
    /// What happened (the line's `event`).
    pub event: String,
    /// The line as it is in the file, without its newline (escape it before
    /// printing it).
    pub text: String,
}

impl AuditEvent {
    /// The shadow verdicts this line holds, when it is a shadow line
    /// ([`crate::shadow`]).
    pub fn shadow(&self) -> Option<crate::shadow::ShadowRecord> {
        if self.event != crate::shadow::SHADOW_EVENT {
            return None;
        }
        serde_json::from_str(&self.text).ok()
    }
}

/// What one line of the log holds.
#[derive(Debug, Clone)]
pub enum ReadLine {
    /// A record.
    Entry(Box<AuditEntry>),
    /// An event about the log itself.
    Event(AuditEvent),
    /// Not a record.
    Unreadable(UnreadableLine),
}

/// Reads records, one line at a time, from a [`BufRead`]. Only complete
/// lines are parsed: at the end of what there is, an incomplete last line is
/// kept, and the next [`AuditReader::next_line`] goes on from it (a file
/// being appended to reads on).
#[derive(Debug)]
pub struct AuditReader<R> {
    reader: R,
    max_line: usize,
    /// The incomplete line so far.
    partial: Vec<u8>,
    /// Its length, bytes skipped included, once it is over the limit.
    overlong: Option<usize>,
    /// Lines read (complete ones).
    lines: u64,
    /// Bytes consumed, the incomplete line's included.
    offset: u64,
    /// Where the line being read starts.
    line_start: u64,
}

impl<R: BufRead> AuditReader<R> {
    /// Reads `reader` with lines of at most [`DEFAULT_MAX_LINE`].
    pub fn new(reader: R) -> AuditReader<R> {
        AuditReader {
            reader,
            max_line: DEFAULT_MAX_LINE,
            partial: Vec::new(),
            overlong: None,
            lines: 0,
            offset: 0,
            line_start: 0,
        }
    }

    /// Lines longer than `bytes` (without the newline) are reported as
    /// [`LineError::TooLong`] instead of parsed.
    pub fn with_max_line(mut self, bytes: usize) -> AuditReader<R> {
        self.max_line = bytes;
        self
    }

    /// The next complete line, or `None` at the end of what is there now
    /// (an incomplete last line is kept for the next call). `Err` only when
    /// reading fails.
    pub fn next_line(&mut self) -> io::Result<Option<ReadLine>> {
        loop {
            let available = match self.reader.fill_buf() {
                Ok(available) => available,
                Err(error) if error.kind() == io::ErrorKind::Interrupted => continue,
                Err(error) => return Err(error),
            };
            if available.is_empty() {
                return Ok(None);
            }
            let (chunk, complete) = match memchr::memchr(b'\n', available) {
                Some(end) => (&available[..end], true),
                None => (available, false),
            };
            let used = chunk.len() + usize::from(complete);
            if let Some(length) = &mut self.overlong {
                *length += chunk.len();
                let room = RECOVERY_PREFIX.saturating_sub(self.partial.len());
                self.partial
                    .extend_from_slice(&chunk[..room.min(chunk.len())]);
            } else if self.partial.len() + chunk.len() > self.max_line {
                // Over the limit: counted from here on, and only its start
                // held, to recover what it says.
                self.overlong = Some(self.partial.len() + chunk.len());
                let mut start = Vec::with_capacity(RECOVERY_PREFIX);
                start.extend(self.partial.iter().chain(chunk).take(RECOVERY_PREFIX));
                self.partial = start;
            } else {
                self.partial.extend_from_slice(chunk);
            }
            self.reader.consume(used);
            self.offset += used as u64;
            if complete {
                self.lines += 1;
                let at = std::mem::replace(&mut self.line_start, self.offset);
                let bytes = std::mem::take(&mut self.partial);
                let line = match self.overlong.take() {
                    Some(_) => ReadLine::Unreadable(UnreadableLine {
                        line: self.lines,
                        offset: at,
                        error: LineError::TooLong {
                            limit: self.max_line,
                        },
                        recovered: recover(&bytes),
                    }),
                    None => parse_line(self.lines, at, bytes),
                };
                return Ok(Some(line));
            }
        }
    }

    /// Complete lines read so far.
    pub fn lines_read(&self) -> u64 {
        self.lines
    }

    /// Bytes read so far, an incomplete last line's included.
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// The bytes of an incomplete last line held (0 when the last line read
    /// was complete).
    pub fn pending(&self) -> usize {
        self.overlong.unwrap_or(self.partial.len())
    }

    /// Ends reading: an incomplete last line, if one is held, as
    /// [`LineError::Incomplete`].
    pub fn finish(self) -> Option<UnreadableLine> {
        let length = self.pending();
        (length > 0).then(|| UnreadableLine {
            line: self.lines + 1,
            offset: self.line_start,
            error: LineError::Incomplete { length },
            recovered: recover(&self.partial),
        })
    }
}

/// `text` as an event line (a `time` and an `event`, both strings), if it
/// is one.
fn event_line(line: u64, text: &str) -> Option<AuditEvent> {
    #[derive(serde::Deserialize)]
    struct Head {
        time: String,
        event: String,
    }
    let head: Head = serde_json::from_str(text).ok()?;
    let time = humantime::parse_rfc3339(&head.time).ok()?;
    Some(AuditEvent {
        line,
        time,
        event: head.event,
        text: text.to_owned(),
    })
}

/// Parses one complete line (without its newline) that starts at byte
/// `offset`; what is not a record is still read for what its start says.
fn parse_line(line: u64, offset: u64, bytes: Vec<u8>) -> ReadLine {
    let unreadable = |error, bytes: &[u8]| {
        ReadLine::Unreadable(UnreadableLine {
            line,
            offset,
            error,
            recovered: recover(bytes),
        })
    };
    let text = match String::from_utf8(bytes) {
        Ok(text) => text,
        Err(error) => {
            let valid_up_to = error.utf8_error().valid_up_to();
            return unreadable(LineError::NotUtf8 { valid_up_to }, error.as_bytes());
        }
    };
    let record: AuditRecord = match serde_json::from_str(&text) {
        Ok(record) => record,
        Err(error) if error.classify() == serde_json::error::Category::Data => {
            if let Some(event) = event_line(line, &text) {
                return ReadLine::Event(event);
            }
            return unreadable(LineError::NotARecord(error.to_string()), text.as_bytes());
        }
        Err(error) => return unreadable(LineError::NotJson(error.to_string()), text.as_bytes()),
    };
    match humantime::parse_rfc3339(&record.time) {
        Ok(time) => ReadLine::Entry(Box::new(AuditEntry {
            line,
            time,
            record,
            text,
        })),
        Err(_) => unreadable(LineError::BadTime(record.time), text.as_bytes()),
    }
}

/// Why the log could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// Opening it failed.
    #[error("cannot open the audit log {}: {source}", path.display())]
    Open {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: io::Error,
    },
    /// Reading it failed.
    #[error("cannot read the audit log {}: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: io::Error,
    },
    /// It is not a regular file: a directory, or a FIFO or device, which
    /// could block the reader forever.
    #[error("the audit log {} is not a regular file but {kind}: give the file gatehouse serve writes", path.display())]
    NotAFile {
        /// The path.
        path: PathBuf,
        /// What it is instead.
        kind: &'static str,
    },
}

/// Opens the log at `path` for reading.
pub fn open(path: &Path) -> Result<AuditReader<BufReader<File>>, ReadError> {
    open_file(path).map(|(reader, _)| reader)
}

/// Opens `path`, with the opened file's identity.
fn open_file(path: &Path) -> Result<(AuditReader<BufReader<File>>, FileId), ReadError> {
    let open_error = |source| ReadError::Open {
        path: path.to_path_buf(),
        source,
    };
    // Looked at before opening: opening a FIFO blocks until a writer comes.
    let before = std::fs::metadata(path).map_err(open_error)?;
    if !before.is_file() {
        return Err(ReadError::NotAFile {
            path: path.to_path_buf(),
            kind: if before.is_dir() {
                "a directory"
            } else {
                "a FIFO, socket or device"
            },
        });
    }
    let file = File::open(path).map_err(open_error)?;
    let metadata = file.metadata().map_err(open_error)?;
    if !metadata.is_file() {
        return Err(ReadError::NotAFile {
            path: path.to_path_buf(),
            kind: "no longer a regular file",
        });
    }
    Ok((
        AuditReader::new(BufReader::with_capacity(64 * 1024, file)),
        FileId::of(&metadata),
    ))
}

/// Which file a path names: device and inode where there are such things.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct FileId(Option<(u64, u64)>);

impl FileId {
    fn of(metadata: &std::fs::Metadata) -> FileId {
        #[cfg(unix)]
        {
            use std::os::unix::fs::MetadataExt;
            FileId(Some((metadata.dev(), metadata.ino())))
        }
        #[cfg(not(unix))]
        {
            let _ = metadata;
            FileId(None)
        }
    }
}

/// Follows the log at a path as it grows, across rotation (the path naming a
/// new file) and truncation (the file cut shorter than what was read), like
/// `tail -F`. Call [`AuditTail::next_line`] until it answers `None`, wait a
/// little, and call it again.
#[derive(Debug)]
pub struct AuditTail {
    path: PathBuf,
    current: AuditReader<BufReader<File>>,
    id: FileId,
    /// The file the path named before, still read for [`ROTATION_GRACE`].
    previous: Option<(AuditReader<BufReader<File>>, Instant)>,
    /// Lines of a file left with an incomplete last line, reported once.
    dropped: Vec<UnreadableLine>,
}

impl AuditTail {
    /// Opens the log at `path`, to be read from its start.
    pub fn open(path: impl Into<PathBuf>) -> Result<AuditTail, ReadError> {
        let path = path.into();
        let (current, id) = open_file(&path)?;
        Ok(AuditTail {
            path,
            current,
            id,
            previous: None,
            dropped: Vec::new(),
        })
    }

    /// The path followed.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The next complete line (from the old file first, after a rotation),
    /// or `None` when there is nothing new now. A path that names no file
    /// for a while (between `mv` and gatehouse's reopen) is no error: the
    /// file already open is read on. A rotated file whose last line stays
    /// incomplete is reported as an [`UnreadableLine`] of that file when it
    /// is let go.
    pub fn next_line(&mut self) -> Result<Option<ReadLine>, ReadError> {
        if let Some(line) = self.dropped.pop() {
            return Ok(Some(ReadLine::Unreadable(line)));
        }
        if let Some((previous, since)) = &mut self.previous {
            if let Some(line) = previous
                .next_line()
                .map_err(|e| read_error(&self.path, e))?
            {
                return Ok(Some(line));
            }
            if since.elapsed() >= ROTATION_GRACE
                && let Some((previous, _)) = self.previous.take()
                && let Some(incomplete) = previous.finish()
            {
                return Ok(Some(ReadLine::Unreadable(incomplete)));
            }
        }
        loop {
            if let Some(line) = self
                .current
                .next_line()
                .map_err(|e| read_error(&self.path, e))?
            {
                return Ok(Some(line));
            }
            // At the end of the open file: is the path still this file?
            let Ok(metadata) = std::fs::metadata(&self.path) else {
                return Ok(None);
            };
            // Without inodes (not Unix) only truncation is seen.
            let id = FileId::of(&metadata);
            let replaced = id != self.id;
            let truncated = !replaced && metadata.len() < self.current.offset();
            if !(replaced || truncated) {
                return Ok(None);
            }
            let (fresh, id) = match open_file(&self.path) {
                Ok(opened) => opened,
                // Gone again between the look and the open: next time.
                Err(ReadError::Open { source, .. }) if source.kind() == io::ErrorKind::NotFound => {
                    return Ok(None);
                }
                Err(error) => return Err(error),
            };
            let old = std::mem::replace(&mut self.current, fresh);
            self.id = id;
            if truncated {
                // Cut short: what was read is gone; start again.
                continue;
            }
            if let Some((older, _)) = self.previous.replace((old, Instant::now()))
                && let Some(incomplete) = older.finish()
            {
                self.dropped.push(incomplete);
            }
            // Drain what the old file still has, then the new one.
            return self.next_line();
        }
    }
}

fn read_error(path: &Path, source: io::Error) -> ReadError {
    ReadError::Read {
        path: path.to_path_buf(),
        source,
    }
}

/// Unreadable lines, counted, with the first kept for the report.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Unreadable {
    /// How many.
    pub count: u64,
    /// How many of them still said when, whose and what
    /// ([`UnreadableLine::recovered`]).
    pub recovered: u64,
    /// The first.
    pub first: Option<UnreadableLine>,
}

impl Unreadable {
    /// Counts `line`.
    pub fn add(&mut self, line: UnreadableLine) {
        self.count += 1;
        self.recovered += u64::from(line.recovered.is_some());
        if self.first.is_none() {
            self.first = Some(line);
        }
    }
}

impl std::fmt::Display for Unreadable {
    /// `N lines could not be read (first at line L: why)`, and `; K
    /// recovered from the start of the line (time, server, decision) and
    /// counted` when some were;
    /// the reason may quote the line: escape it before printing.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let lines = if self.count == 1 { "line" } else { "lines" };
        write!(f, "{} {lines} could not be read", self.count)?;
        if let Some(first) = &self.first {
            write!(
                f,
                " (first at line {}, byte {}: {})",
                first.line, first.offset, first.error
            )?;
        }
        if self.recovered > 0 {
            write!(
                f,
                "; {} recovered from the start of the line (time, server, decision) and counted",
                self.recovered
            )?;
        }
        Ok(())
    }
}

/// What an answer did: the `action` of an `ElicitResult`, or a JSON-RPC
/// error.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Action {
    /// `accept`.
    Accept,
    /// `decline`.
    Decline,
    /// `cancel`.
    Cancel,
    /// A JSON-RPC error instead of a result.
    Error,
    /// Anything else (not written by gatehouse).
    Other,
}

impl Action {
    /// Its name: `accept`, `decline`, `cancel`, `error` or `other`.
    pub fn name(self) -> &'static str {
        match self {
            Action::Accept => "accept",
            Action::Decline => "decline",
            Action::Cancel => "cancel",
            Action::Error => "error",
            Action::Other => "other",
        }
    }

    /// The action `name` names (as [`Action::name`] writes it).
    pub fn from_name(name: &str) -> Option<Action> {
        [
            Action::Accept,
            Action::Decline,
            Action::Cancel,
            Action::Error,
            Action::Other,
        ]
        .into_iter()
        .find(|action| action.name() == name)
    }

    /// What `answer` (an audit record's) did.
    pub fn of(answer: &Value) -> Action {
        if answer.get("error").is_some() {
            return Action::Error;
        }
        match answer.get("action").and_then(Value::as_str) {
            Some("accept") => Action::Accept,
            Some("decline") => Action::Decline,
            Some("cancel") => Action::Cancel,
            _ => Action::Other,
        }
    }
}

impl std::fmt::Display for Action {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.pad(self.name())
    }
}

impl AuditRecord {
    /// What the answer did.
    pub fn action(&self) -> Action {
        Action::of(&self.answer)
    }

    /// The module whose outcome decided, when a module did (`guest`, or a
    /// `failure` of the chain): the last step that did not defer (the chain
    /// stops at the first decision or failure that is not passed on).
    /// `None` when the person, a policy or nobody decided.
    pub fn deciding_step(&self) -> Option<&AuditStep> {
        match self.decided_by {
            DecidedBy::Guest | DecidedBy::Failure => {
                self.steps.iter().rev().find(|step| step.outcome != "defer")
            }
            DecidedBy::Person | DecidedBy::Policy | DecidedBy::Unhandled => None,
        }
    }

    /// Who decided, as [`Decider`].
    pub fn decider(&self) -> Decider {
        match self.deciding_step() {
            Some(step) => Decider::Module {
                module: step.module.clone(),
                sha256: step.sha256.clone(),
            },
            None => Decider::Host(self.decided_by),
        }
    }
}

/// Who decided a record: a module (name and sha256), or, when none did, who
/// did instead.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Decider {
    /// A module.
    Module {
        /// Its name.
        module: String,
        /// Its sha256.
        sha256: String,
    },
    /// The person, a policy, nobody (`unhandled`), or a failure no step shows.
    Host(DecidedBy),
    /// Not known: the record's line could not be read past its start
    /// ([`Recovered`]), and a module (or nobody knows who) decided.
    Unknown,
}

impl Recovered {
    /// Who decided, as far as the start of the line says: the person, a
    /// policy or nobody; [`Decider::Unknown`] when a module decided (its
    /// steps are further on) or `decided_by` was not read.
    pub fn decider(&self) -> Decider {
        match self.decided_by {
            Some(by @ (DecidedBy::Person | DecidedBy::Policy | DecidedBy::Unhandled)) => {
                Decider::Host(by)
            }
            Some(DecidedBy::Guest | DecidedBy::Failure) | None => Decider::Unknown,
        }
    }
}

/// The first `n` characters of a digest.
pub fn short_digest(sha256: &str, n: usize) -> &str {
    sha256
        .char_indices()
        .nth(n)
        .map_or(sha256, |(end, _)| &sha256[..end])
}

/// `time` as RFC 3339 to the second, in UTC (`2026-05-01T10:00:00Z`).
pub fn format_time(time: SystemTime) -> String {
    humantime::format_rfc3339_seconds(time).to_string()
}

/// `time` as RFC 3339 to the microsecond, in UTC, as records write it
/// (`2026-05-01T10:00:00.000001Z`).
pub fn format_time_micros(time: SystemTime) -> String {
    humantime::format_rfc3339_micros(time).to_string()
}

/// Which records to keep; every filter set must match (AND).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AuditFilter {
    /// Records at or after this time.
    pub since: Option<SystemTime>,
    /// Records of this server.
    pub server: Option<String>,
    /// Records decided by this.
    pub decided_by: Option<DecidedBy>,
}

impl AuditFilter {
    /// Whether `entry` passes every filter set.
    pub fn matches(&self, entry: &AuditEntry) -> bool {
        self.since.is_none_or(|since| entry.time >= since)
            && self
                .server
                .as_ref()
                .is_none_or(|server| *server == entry.record.server)
            && self
                .decided_by
                .is_none_or(|by| by == entry.record.decided_by)
    }

    /// Whether what an unreadable line still says passes every filter set;
    /// a filter on what it does not say (a server it was cut off before)
    /// does not pass.
    pub fn matches_recovered(&self, recovered: &Recovered) -> bool {
        self.since.is_none_or(|since| recovered.time >= since)
            && self
                .server
                .as_ref()
                .is_none_or(|server| recovered.server.as_ref() == Some(server))
            && self
                .decided_by
                .is_none_or(|by| recovered.decided_by == Some(by))
    }
}

/// A `--since` that is neither a duration nor a timestamp.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "{text:?} is neither a duration (10m, 2h, 1d, 1h 30m) nor an RFC 3339 UTC timestamp \
     (2026-05-01T10:00:00Z): {why}"
)]
pub struct SinceError {
    /// What was given.
    pub text: String,
    /// What the timestamp parser said.
    pub why: String,
}

/// A point in time from `text`: a duration before `now` (`10m`, `2h`, `1d`,
/// `1h 30m`: [`humantime::parse_duration`]) or an RFC 3339 timestamp in UTC
/// (`2026-05-01T10:00:00Z`, fractions of a second allowed; without the `Z`,
/// or with a space for the `T`, it is still read as UTC).
pub fn parse_since(text: &str, now: SystemTime) -> Result<SystemTime, SinceError> {
    let trimmed = text.trim();
    if let Ok(ago) = humantime::parse_duration(trimmed) {
        // Further back than 1970 is 1970: every record.
        return Ok(now
            .checked_sub(ago)
            .filter(|since| *since >= SystemTime::UNIX_EPOCH)
            .unwrap_or(SystemTime::UNIX_EPOCH));
    }
    humantime::parse_rfc3339_weak(trimmed).map_err(|error| SinceError {
        text: text.to_owned(),
        why: error.to_string(),
    })
}

/// Counts over records: by server, action, deciding module (or who decided
/// when no module did) and `decided_by`, and every record's total latency for
/// the percentiles. Holds counters and one `u64` per record, never the
/// records. What an unreadable line still says ([`AuditStats::add_recovered`])
/// is counted too, under what it says.
#[derive(Debug, Clone, Default)]
pub struct AuditStats {
    /// Records counted from what the start of an unreadable line said.
    pub recovered: u64,
    /// Records per server.
    pub servers: BTreeMap<String, u64>,
    /// Records per action.
    pub actions: BTreeMap<Action, u64>,
    /// Records per decider.
    pub deciders: BTreeMap<Decider, u64>,
    /// Records per `decided_by`.
    pub decided_by: BTreeMap<DecidedBy, u64>,
    latencies_us: Vec<u64>,
    sorted: bool,
}

impl AuditStats {
    /// Counts `record`.
    pub fn add(&mut self, record: &AuditRecord) {
        *self.servers.entry(record.server.clone()).or_default() += 1;
        *self.actions.entry(record.action()).or_default() += 1;
        *self.deciders.entry(record.decider()).or_default() += 1;
        *self.decided_by.entry(record.decided_by).or_default() += 1;
        self.latencies_us.push(record.latency_us);
        self.sorted = false;
    }

    /// Counts what an unreadable line still says: under its server, action
    /// and `decided_by` where it says them, its decider as
    /// [`Recovered::decider`]; it has no latency.
    pub fn add_recovered(&mut self, recovered: &Recovered) {
        self.recovered += 1;
        if let Some(server) = &recovered.server {
            *self.servers.entry(server.clone()).or_default() += 1;
        }
        if let Some(action) = recovered.action {
            *self.actions.entry(action).or_default() += 1;
        }
        *self.deciders.entry(recovered.decider()).or_default() += 1;
        if let Some(by) = recovered.decided_by {
            *self.decided_by.entry(by).or_default() += 1;
        }
    }

    /// Records counted, those recovered from unreadable lines included.
    pub fn records(&self) -> u64 {
        self.latencies_us.len() as u64 + self.recovered
    }

    /// The total latency's percentiles, in microseconds; `None` without
    /// records.
    pub fn latency(&mut self) -> Option<Percentiles> {
        if !self.sorted {
            self.latencies_us.sort_unstable();
            self.sorted = true;
        }
        let sorted = &self.latencies_us;
        Some(Percentiles {
            p50: percentile(sorted, 50)?,
            p90: percentile(sorted, 90)?,
            p99: percentile(sorted, 99)?,
            max: *sorted.last()?,
        })
    }

    /// The counts as JSON, as `gatehouse audit --stats --format json` prints
    /// them and the console's audit page shows them: `records`,
    /// `recovered`, `latency_us` (the percentiles, or null), `servers`,
    /// `actions`, `deciders` (each a module with its sha256, who decided
    /// when no module did, or unknown) and `decided_by`.
    pub fn to_json(&mut self) -> serde_json::Value {
        let deciders: Vec<serde_json::Value> = self
            .deciders
            .iter()
            .map(|(decider, count)| match decider {
                Decider::Module { module, sha256 } => {
                    serde_json::json!({"module": module, "sha256": sha256, "count": count})
                }
                Decider::Host(by) => serde_json::json!({"decided_by": by, "count": count}),
                Decider::Unknown => serde_json::json!({"unknown": true, "count": count}),
            })
            .collect();
        let actions: BTreeMap<&str, u64> = self
            .actions
            .iter()
            .map(|(action, count)| (action.name(), *count))
            .collect();
        let decided_by: BTreeMap<&str, u64> = self
            .decided_by
            .iter()
            .map(|(by, count)| (by.name(), *count))
            .collect();
        serde_json::json!({
            "records": self.records(),
            "recovered": self.recovered,
            "latency_us": self.latency(),
            "servers": self.servers,
            "actions": actions,
            "deciders": deciders,
            "decided_by": decided_by,
        })
    }
}

/// Latency percentiles, in microseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct Percentiles {
    /// The median.
    pub p50: u64,
    /// The 90th percentile.
    pub p90: u64,
    /// The 99th percentile.
    pub p99: u64,
    /// The largest.
    pub max: u64,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{AuditLog, AuditSync, now_rfc3339};
    use serde_json::json;

    fn record(server: &str, by: DecidedBy, latency_us: u64) -> AuditRecord {
        AuditRecord {
            person: None,
            time: now_rfc3339(),
            server: server.to_owned(),
            request_id: json!(1),
            session: None,
            turn: None,
            instance: None,
            client: None,
            mode: "form".to_owned(),
            decided_by: by,
            reason: "test".to_owned(),
            steps: vec![step("first", "defer"), step("guardian", "decline")],
            answer: json!({"action": "decline"}),
            latency_us,
        }
    }

    fn step(module: &str, outcome: &str) -> AuditStep {
        AuditStep {
            module: module.to_owned(),
            sha256: format!("{module}-digest"),
            signed_by: None,
            outcome: outcome.to_owned(),
            failure: None,
            rationale: None,
            risk: None,
            latency_us: 5,
            model_calls: Vec::new(),
        }
    }

    fn line(record: &AuditRecord) -> String {
        format!("{}\n", serde_json::to_string(record).expect("serializes"))
    }

    fn read_all(text: &[u8]) -> (Vec<AuditEntry>, Vec<UnreadableLine>) {
        let mut reader = AuditReader::new(text).with_max_line(4096);
        let (mut entries, mut bad) = (Vec::new(), Vec::new());
        while let Some(line) = reader.next_line().expect("reads") {
            match line {
                ReadLine::Entry(entry) => entries.push(*entry),
                ReadLine::Event(event) => panic!("line {} is no event", event.line),
                ReadLine::Unreadable(line) => bad.push(line),
            }
        }
        bad.extend(reader.finish());
        (entries, bad)
    }

    #[test]
    fn stats_count_and_sort_latencies() {
        let mut stats = AuditStats::default();
        assert_eq!(stats.latency(), None);
        for latency in [30, 10, 20] {
            stats.add(&record("git", DecidedBy::Guest, latency));
        }
        stats.add(&record("docs", DecidedBy::Person, 1000));
        assert_eq!(stats.records(), 4);
        assert_eq!(stats.servers["git"], 3);
        assert_eq!(stats.decided_by[&DecidedBy::Person], 1);
        assert_eq!(stats.actions[&Action::Decline], 4);
        let guardian = Decider::Module {
            module: "guardian".to_owned(),
            sha256: "guardian-digest".to_owned(),
        };
        assert_eq!(stats.deciders[&guardian], 3);
        assert_eq!(stats.deciders[&Decider::Host(DecidedBy::Person)], 1);
        assert_eq!(
            stats.latency(),
            Some(Percentiles {
                p50: 20,
                p90: 1000,
                p99: 1000,
                max: 1000
            })
        );
    }

    #[test]
    fn since_takes_a_duration_or_a_timestamp() {
        let now = humantime::parse_rfc3339("2026-05-01T12:00:00Z").expect("time");
        let at = |text| humantime::parse_rfc3339(text).expect("time");
        assert_eq!(parse_since("10m", now), Ok(at("2026-05-01T11:50:00Z")));
        assert_eq!(parse_since("2h", now), Ok(at("2026-05-01T10:00:00Z")));
        assert_eq!(parse_since("1d", now), Ok(at("2026-04-30T12:00:00Z")));
        assert_eq!(parse_since("1h 30m", now), Ok(at("2026-05-01T10:30:00Z")));
        assert_eq!(
            parse_since("2026-05-01T09:00:00Z", now),
            Ok(at("2026-05-01T09:00:00Z"))
        );
        assert_eq!(
            parse_since("2026-05-01T09:00:00.5Z", now),
            Ok(at("2026-05-01T09:00:00.5Z"))
        );
        assert_eq!(
            parse_since("2026-05-01 09:00:00", now),
            Ok(at("2026-05-01T09:00:00Z"))
        );
        let error = parse_since("yesterday", now).unwrap_err().to_string();
        assert!(error.contains("\"yesterday\""), "{error}");
        assert!(error.contains("RFC 3339"), "{error}");
        assert!(parse_since("", now).is_err());
        // Longer ago than the epoch: the epoch, not a panic.
        assert_eq!(parse_since("100000000d", now), Ok(SystemTime::UNIX_EPOCH));
    }

    #[test]
    #[cfg(unix)]
    fn a_fifo_or_a_directory_is_refused_without_blocking() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("audit.jsonl");
        let made = std::process::Command::new("mkfifo").arg(&fifo).status();
        if !made.is_ok_and(|status| status.success()) {
            eprintln!("mkfifo is not available: skipped");
            return;
        }
        // Opening a FIFO for reading would wait for a writer forever.
        let Err(error) = open(&fifo) else {
            panic!("a FIFO was opened")
        };
        assert!(matches!(error, ReadError::NotAFile { kind, .. } if kind.contains("FIFO")));
        let Err(error) = open(dir.path()) else {
            panic!("a directory was opened")
        };
        assert!(matches!(
            error,
            ReadError::NotAFile {
                kind: "a directory",
                ..
            }
        ));
    }

    #[test]
    fn bad_lines_are_reported_and_reading_goes_on() {
        let good = line(&record("git", DecidedBy::Guest, 1));
        let mut text = Vec::new();
        text.extend_from_slice(good.as_bytes());
        text.extend_from_slice(b"not json\n");
        text.extend_from_slice(b"{\"time\":\"x\"}\n");
        text.extend_from_slice(good.replace(&now_rfc3339()[..4], "yesterday-").as_bytes());
        text.extend_from_slice(b"\xff\xfe\n");
        text.extend_from_slice(&vec![b'x'; 5000]);
        text.push(b'\n');
        text.extend_from_slice(b"\n");
        text.extend_from_slice(good.as_bytes());
        text.extend_from_slice(&good.as_bytes()[..20]);
        let (entries, bad) = read_all(&text);
        assert_eq!(entries.iter().map(|e| e.line).collect::<Vec<_>>(), [1, 8]);
        let errors: Vec<(u64, &LineError)> = bad.iter().map(|b| (b.line, &b.error)).collect();
        assert!(
            matches!(errors[0], (2, LineError::NotJson(_))),
            "{errors:?}"
        );
        assert!(
            matches!(errors[1], (3, LineError::NotARecord(_))),
            "{errors:?}"
        );
        assert!(
            matches!(errors[2], (4, LineError::BadTime(_))),
            "{errors:?}"
        );
        assert_eq!(errors[3], (5, &LineError::NotUtf8 { valid_up_to: 0 }));
        assert_eq!(errors[4], (6, &LineError::TooLong { limit: 4096 }));
        assert!(
            matches!(errors[5], (7, LineError::NotJson(_))),
            "{errors:?}"
        );
        assert_eq!(errors[6], (9, &LineError::Incomplete { length: 20 }));
        assert_eq!(bad.len(), 7);
        // Each says the byte it starts at.
        assert_eq!(bad[0].offset, good.len() as u64);
        assert_eq!(bad[1].offset, good.len() as u64 + 9);
        assert_eq!(bad[6].offset, text.len() as u64 - 20);
        let mut tally = Unreadable::default();
        bad.into_iter().for_each(|line| tally.add(line));
        let report = tally.to_string();
        assert!(
            report.starts_with(&format!(
                "7 lines could not be read (first at line 2, byte {}: not JSON",
                good.len()
            )),
            "{report}"
        );
    }

    /// A line too long to read (17 MiB, hand-written), one cut short, one
    /// garbled part-way (not UTF-8 after its start), a record of the old
    /// field order cut after its answer, and a last line without its
    /// newline: each is reported as unreadable with the time, server and
    /// decision its start says, and counted as such; a line that says
    /// nothing is only reported.
    #[test]
    fn an_unreadable_line_is_reported_and_counted_with_what_its_start_says() {
        let time = "2026-05-01T10:00:00.000001Z";
        let head = |server: &str, by: &str, action: &str| {
            format!(
                r#"{{"time":"{time}","server":"{server}","decided_by":"{by}","action":"{action}","mode":"form","request_id":"#
            )
        };
        let mut text = Vec::new();
        // 1: 17 MiB and more: an id of C1 controls, each written `\u0085`.
        text.extend_from_slice(head("big", "person", "accept").as_bytes());
        text.push(b'"');
        text.extend_from_slice(r"\u0085".repeat((17 << 20) / 6 + 1).as_bytes());
        text.extend_from_slice(
            br#"","reason":"r","latency_us":1,"answer":{"action":"accept"},"steps":[]}"#,
        );
        text.push(b'\n');
        // 2: cut short inside its steps.
        text.extend_from_slice(head("cut", "guest", "decline").as_bytes());
        text.extend_from_slice(br#"7,"reason":"r","latency_us":1,"answer":{"action":"decline"},"steps":[{"module":"gu"#);
        text.push(b'\n');
        // 3: garbled: bytes that are not UTF-8 after its start.
        text.extend_from_slice(head("garbled", "policy", "cancel").as_bytes());
        text.extend_from_slice(b"8,\xff\xfe\x00 junk");
        text.push(b'\n');
        // 4: the old field order (answer last but for steps), cut in them.
        text.extend_from_slice(
            format!(
                r#"{{"time":"{time}","server":"old","request_id":9,"mode":"form","decided_by":"unhandled","reason":"r","answer":{{"action":"decline"}},"steps":[{{"#
            )
            .as_bytes(),
        );
        text.push(b'\n');
        // 5: says nothing.
        text.extend_from_slice(b"not json\n");
        // 6: the last line, without its newline.
        text.extend_from_slice(head("last", "failure", "decline").as_bytes());

        let mut reader = AuditReader::new(&text[..]);
        let mut bad = Vec::new();
        while let Some(line) = reader.next_line().expect("reads") {
            match line {
                ReadLine::Entry(entry) => panic!("line {} is no record", entry.line),
                ReadLine::Event(event) => panic!("line {} is no event", event.line),
                ReadLine::Unreadable(line) => bad.push(line),
            }
        }
        bad.extend(reader.finish());
        assert_eq!(bad.len(), 6);
        assert_eq!(
            bad[0].error,
            LineError::TooLong {
                limit: DEFAULT_MAX_LINE
            }
        );
        assert!(
            matches!(bad[1].error, LineError::NotJson(_)),
            "{:?}",
            bad[1]
        );
        assert!(
            matches!(bad[2].error, LineError::NotUtf8 { .. }),
            "{:?}",
            bad[2]
        );
        assert!(
            matches!(bad[5].error, LineError::Incomplete { .. }),
            "{:?}",
            bad[5]
        );
        let at = humantime::parse_rfc3339(time).expect("time");
        let says = |line: &UnreadableLine| {
            line.recovered.as_ref().map(|recovered| {
                assert_eq!(recovered.time, at);
                (
                    recovered.server.clone().unwrap_or_default(),
                    recovered.decided_by,
                    recovered.action,
                )
            })
        };
        assert_eq!(
            says(&bad[0]),
            Some((
                "big".to_owned(),
                Some(DecidedBy::Person),
                Some(Action::Accept)
            ))
        );
        assert_eq!(
            bad[0].recovered.as_ref().and_then(|r| r.request_id.clone()),
            None
        );
        assert_eq!(
            says(&bad[1]),
            Some((
                "cut".to_owned(),
                Some(DecidedBy::Guest),
                Some(Action::Decline)
            ))
        );
        assert_eq!(
            bad[1].recovered.as_ref().and_then(|r| r.request_id.clone()),
            Some(json!(7))
        );
        assert_eq!(
            says(&bad[2]),
            Some((
                "garbled".to_owned(),
                Some(DecidedBy::Policy),
                Some(Action::Cancel)
            ))
        );
        assert_eq!(
            says(&bad[3]),
            Some((
                "old".to_owned(),
                Some(DecidedBy::Unhandled),
                Some(Action::Decline)
            ))
        );
        assert_eq!(says(&bad[4]), None);
        assert_eq!(
            says(&bad[5]),
            Some((
                "last".to_owned(),
                Some(DecidedBy::Failure),
                Some(Action::Decline)
            ))
        );

        // Counted: under what they say, and as unreadable.
        let mut stats = AuditStats::default();
        let mut tally = Unreadable::default();
        let only_big = AuditFilter {
            server: Some("big".to_owned()),
            ..AuditFilter::default()
        };
        let mut big = 0;
        for line in bad {
            if let Some(recovered) = &line.recovered {
                stats.add_recovered(recovered);
                big += usize::from(only_big.matches_recovered(recovered));
            }
            tally.add(line);
        }
        assert_eq!(big, 1);
        assert_eq!((stats.records(), stats.recovered), (5, 5));
        assert_eq!(stats.actions[&Action::Accept], 1);
        assert_eq!(stats.actions[&Action::Decline], 3);
        assert_eq!(stats.servers["big"], 1);
        assert_eq!(stats.decided_by[&DecidedBy::Person], 1);
        assert_eq!(stats.deciders[&Decider::Host(DecidedBy::Person)], 1);
        assert_eq!(
            stats.deciders[&Decider::Unknown],
            2,
            "guest and failure: the module is further on"
        );
        assert_eq!(stats.latency(), None, "no latency is made up");
        assert_eq!((tally.count, tally.recovered), (6, 5));
        let report = tally.to_string();
        assert!(
            report.starts_with("6 lines could not be read (first at line 1, byte 0: longer than"),
            "{report}"
        );
        assert!(
            report.contains("; 5 recovered from the start of the line"),
            "{report}"
        );
    }

    /// What the writer writes first is what a reader needs: cut anywhere
    /// after its first few hundred bytes, a record still says when, whose
    /// and what.
    #[test]
    fn a_written_record_cut_anywhere_after_its_head_still_says_when_whose_and_what() {
        let mut written = record("git", DecidedBy::Person, 3);
        written.answer = json!({"action": "accept", "content": {"name": "Ada"}});
        let line = serde_json::to_string(&written).expect("JSON");
        assert!(
            line.starts_with(&format!(
                r#"{{"time":"{}","server":"git","decided_by":"person","action":"accept","#,
                written.time
            )),
            "{line}"
        );
        let head = line.find(r#","mode""#).expect("mode follows action");
        for end in head..line.len() {
            let recovered = recover(&line.as_bytes()[..end]).expect("recovered");
            assert_eq!(recovered.server.as_deref(), Some("git"));
            assert_eq!(recovered.decided_by, Some(DecidedBy::Person));
            assert_eq!(recovered.action, Some(Action::Accept));
        }
    }

    #[test]
    fn an_incomplete_line_is_kept_until_its_newline_arrives() {
        let whole = line(&record("git", DecidedBy::Guest, 1));
        let (head, tail) = whole.as_bytes().split_at(30);
        let mut file = tempfile::NamedTempFile::new().expect("temp");
        use std::io::Write;
        file.write_all(head).expect("write");
        let mut reader = open(file.path()).expect("opens");
        assert!(reader.next_line().expect("reads").is_none());
        assert_eq!(reader.pending(), 30);
        file.write_all(tail).expect("write");
        let Some(ReadLine::Entry(entry)) = reader.next_line().expect("reads") else {
            panic!("the completed line is a record");
        };
        assert_eq!(entry.record.server, "git");
        assert_eq!(entry.text, whole.trim_end());
        assert_eq!(reader.pending(), 0);
        assert!(reader.finish().is_none());
    }

    #[test]
    fn the_deciding_step_and_the_action() {
        let mut guest = record("git", DecidedBy::Guest, 1);
        assert_eq!(
            guest.deciding_step().map(|s| s.module.as_str()),
            Some("guardian")
        );
        guest.decided_by = DecidedBy::Person;
        assert!(guest.deciding_step().is_none());
        assert_eq!(guest.decider(), Decider::Host(DecidedBy::Person));
        guest.answer = json!({"error": {"code": -32602, "message": "bad"}});
        assert_eq!(guest.action(), Action::Error);
        guest.answer = json!({"action": "\u{1b}[2J"});
        assert_eq!(guest.action(), Action::Other);
        assert_eq!(short_digest("0123456789abcdef", 12), "0123456789ab");
        assert_eq!(short_digest("ab", 12), "ab");
        assert_eq!(short_digest("ééééé", 2), "éé");
    }

    #[test]
    fn a_record_written_by_the_log_reads_back() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("audit.jsonl");
        let log = AuditLog::open_with(&path, AuditSync::Never).expect("opens");
        let mut written = record("git\u{1b}[2J", DecidedBy::Failure, 9);
        written.steps[1]
            .model_calls
            .push(gatehouse_core::model::ModelCallRecord {
                grant: "small".to_owned(),
                model: "m".to_owned(),
                prompt_sha256: "p".to_owned(),
                prompt: None,
                input_tokens: Some(3),
                output_tokens: None,
                attempts: 1,
                latency_us: 4,
                answer: None,
                answer_sha256: None,
                error: Some("timeout".to_owned()),
                limit: None,
            });
        log.write(&written).expect("written");
        let mut reader = open(&path).expect("opens");
        let Some(ReadLine::Entry(entry)) = reader.next_line().expect("reads") else {
            panic!("a record");
        };
        assert_eq!(entry.record.server, written.server);
        assert_eq!(
            entry.record.steps[1].model_calls,
            written.steps[1].model_calls
        );
        assert_eq!(entry.record.decided_by, DecidedBy::Failure);
    }

    #[test]
    fn filters_combine() {
        let entry = |server: &str, by, time: &str| AuditEntry {
            line: 1,
            time: humantime::parse_rfc3339(time).expect("time"),
            record: record(server, by, 1),
            text: String::new(),
        };
        let filter = AuditFilter {
            since: Some(humantime::parse_rfc3339("2026-05-01T10:00:00Z").expect("time")),
            server: Some("git".to_owned()),
            decided_by: Some(DecidedBy::Guest),
        };
        assert!(filter.matches(&entry("git", DecidedBy::Guest, "2026-05-01T10:00:00Z")));
        assert!(!filter.matches(&entry("git", DecidedBy::Guest, "2026-05-01T09:59:59Z")));
        assert!(!filter.matches(&entry("docs", DecidedBy::Guest, "2026-05-02T00:00:00Z")));
        assert!(!filter.matches(&entry("git", DecidedBy::Person, "2026-05-02T00:00:00Z")));
        assert!(AuditFilter::default().matches(&entry(
            "x",
            DecidedBy::Policy,
            "1970-01-01T00:00:00Z"
        )));
    }

    #[test]
    fn the_tail_follows_appends_rotation_and_truncation() {
        use std::io::Write;
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("audit.jsonl");
        let append = |path: &Path, text: &str| {
            std::fs::OpenOptions::new()
                .append(true)
                .create(true)
                .open(path)
                .expect("open")
                .write_all(text.as_bytes())
                .expect("write");
        };
        let servers = |tail: &mut AuditTail| {
            let mut seen = Vec::new();
            while let Some(line) = tail.next_line().expect("reads") {
                match line {
                    ReadLine::Entry(entry) => seen.push(entry.record.server),
                    ReadLine::Event(event) => seen.push(event.event),
                    ReadLine::Unreadable(line) => seen.push(format!("bad {}", line.line)),
                }
            }
            seen
        };
        append(&path, &line(&record("one", DecidedBy::Guest, 1)));
        let mut tail = AuditTail::open(&path).expect("opens");
        assert_eq!(servers(&mut tail), ["one"]);
        assert!(servers(&mut tail).is_empty());
        // Half a line, then the rest.
        let two = line(&record("two", DecidedBy::Guest, 1));
        append(&path, &two[..10]);
        assert!(servers(&mut tail).is_empty());
        append(&path, &two[10..]);
        assert_eq!(servers(&mut tail), ["two"]);
        // Rotated: moved away (still written to), then a new file.
        let rotated = dir.path().join("audit.jsonl.1");
        std::fs::rename(&path, &rotated).expect("mv");
        append(&rotated, &line(&record("three", DecidedBy::Guest, 1)));
        assert_eq!(servers(&mut tail), ["three"]);
        append(&path, &line(&record("four", DecidedBy::Guest, 1)));
        append(&rotated, &line(&record("late", DecidedBy::Guest, 1)));
        assert_eq!(servers(&mut tail), ["late", "four"]);
        // Within the grace, the old file is still read.
        append(&rotated, &line(&record("later", DecidedBy::Guest, 1)));
        assert_eq!(servers(&mut tail), ["later"]);
        // Truncated (copytruncate): read again from the start.
        std::fs::OpenOptions::new()
            .write(true)
            .truncate(true)
            .open(&path)
            .expect("truncate");
        append(&path, &line(&record("v", DecidedBy::Guest, 1)));
        assert_eq!(servers(&mut tail), ["v"]);
        // Replaced by rename over it.
        let fresh = dir.path().join("fresh");
        append(&fresh, &line(&record("six", DecidedBy::Guest, 1)));
        std::fs::rename(&fresh, &path).expect("mv");
        assert_eq!(servers(&mut tail), ["six"]);
    }

    #[test]
    fn a_torn_line_is_reported_at_its_byte_and_the_repair_read_as_an_event() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("audit.jsonl");
        let whole = line(&record("git", DecidedBy::Guest, 1));
        let mut torn = whole.clone();
        torn.push_str(&whole[..30]);
        std::fs::write(&path, &torn).expect("plant a torn tail");
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).expect("0600");
        }
        let log = crate::AuditLog::open_with(&path, crate::AuditSync::Always)
            .expect("opens, ending the torn line");
        log.write(&record("git", DecidedBy::Guest, 2))
            .expect("written");
        drop(log);
        let mut reader = open(&path).expect("opens");
        let mut seen = Vec::new();
        let mut unreadable = Unreadable::default();
        while let Some(line) = reader.next_line().expect("reads") {
            match line {
                ReadLine::Entry(entry) => seen.push(format!("record {}", entry.line)),
                ReadLine::Event(event) => seen.push(format!("{} {}", event.event, event.line)),
                ReadLine::Unreadable(line) => {
                    seen.push(format!("torn {} at {}", line.line, line.offset));
                    unreadable.add(line);
                }
            }
        }
        assert!(reader.finish().is_none());
        let at = whole.len();
        assert_eq!(
            seen,
            [
                "record 1".to_owned(),
                format!("torn 2 at {at}"),
                "torn_line_ended 3".to_owned(),
                "record 4".to_owned()
            ]
        );
        assert!(
            unreadable.to_string().starts_with(&format!(
                "1 line could not be read (first at line 2, byte {at}: "
            )),
            "{unreadable}"
        );
    }
}
