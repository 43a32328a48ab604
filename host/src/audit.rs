//! The audit log: one JSON line per elicitation, written and flushed before
//! the answer is sent.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::SystemTime;

use serde::Serialize;
use serde_json::Value;

use crate::sandbox::ModuleReport;

/// Who decided an elicitation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
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
#[derive(Debug, Clone, Serialize)]
pub struct AuditStep {
    /// The module's name.
    pub module: String,
    /// Its sha256.
    pub sha256: String,
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
    pub risk: Option<crate::outcome::RiskLevel>,
    /// Wall time, in microseconds.
    pub latency_us: u64,
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
            outcome,
            failure,
            rationale,
            risk,
            latency_us: u64::try_from(report.elapsed.as_micros()).unwrap_or(u64::MAX),
        }
    }
}

/// One audit line.
#[derive(Debug, Clone, Serialize)]
pub struct AuditRecord {
    /// When the answer was decided (RFC 3339, UTC).
    pub time: String,
    /// The server.
    pub server: String,
    /// The server's request id.
    pub request_id: Value,
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

/// The current time as RFC 3339.
pub fn now_rfc3339() -> String {
    humantime::format_rfc3339_micros(SystemTime::now()).to_string()
}

/// Why an audit line could not be written.
#[derive(Debug, thiserror::Error)]
#[error("cannot write the audit log {}: {source}", path.display())]
pub struct AuditError {
    /// The log file.
    pub path: PathBuf,
    /// The I/O error.
    pub source: std::io::Error,
}

/// Where audit lines go.
pub struct AuditLog {
    sink: Mutex<Sink>,
    path: PathBuf,
}

enum Sink {
    File(std::fs::File),
    Memory(Vec<String>),
}

impl std::fmt::Debug for AuditLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AuditLog")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

impl AuditLog {
    /// Appends to `path`, creating it.
    pub fn open(path: impl AsRef<Path>) -> Result<AuditLog, AuditError> {
        let path = path.as_ref().to_path_buf();
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .map_err(|source| AuditError {
                path: path.clone(),
                source,
            })?;
        Ok(AuditLog {
            sink: Mutex::new(Sink::File(file)),
            path,
        })
    }

    /// Keeps lines in memory (tests, embedding).
    pub fn in_memory() -> AuditLog {
        AuditLog {
            sink: Mutex::new(Sink::Memory(Vec::new())),
            path: PathBuf::from("<memory>"),
        }
    }

    /// The lines kept in memory (empty for a file log).
    pub fn lines(&self) -> Vec<String> {
        match self.sink.lock().as_deref() {
            Ok(Sink::Memory(lines)) => lines.clone(),
            _ => Vec::new(),
        }
    }

    /// Writes and flushes one line.
    pub fn write(&self, record: &AuditRecord) -> Result<(), AuditError> {
        let error = |source| AuditError {
            path: self.path.clone(),
            source,
        };
        let line = serde_json::to_string(record).map_err(|e| error(std::io::Error::other(e)))?;
        let mut sink = self
            .sink
            .lock()
            .map_err(|_| error(std::io::Error::other("the audit log lock is poisoned")))?;
        match &mut *sink {
            Sink::File(file) => {
                file.write_all(line.as_bytes()).map_err(error)?;
                file.write_all(b"\n").map_err(error)?;
                file.flush().map_err(error)
            }
            Sink::Memory(lines) => {
                lines.push(line);
                Ok(())
            }
        }
    }
}
