//! What one review's store holds: a closed WASI context, the resource
//! limiter, and the capped log sink behind the `logging` import.

use std::sync::Arc;

use serde::Serialize;
use tracing::level_filters::LevelFilter;
use wasmtime::ResourceLimiter;
use wasmtime::component::ResourceTable;
use wasmtime_wasi::p2::pipe::MemoryOutputPipe;
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};

use super::ticker::Deadline;
use crate::contract::logging::{self, Level};
use crate::escape::Escaped;
use crate::sandbox::Limits;

/// A log entry a guest wrote.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct GuestLog {
    /// The level, lower case.
    pub level: &'static str,
    /// The message.
    pub message: String,
    /// The key/value fields.
    pub fields: Vec<(String, String)>,
}

/// The logs of one review.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ReviewLogs {
    /// The entries kept, in order.
    pub entries: Vec<GuestLog>,
    /// Entries dropped because a cap was reached.
    pub dropped: usize,
    /// What the guest wrote to stderr (a panic message, say), capped.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub stderr: String,
    /// The environment reads the guest made, each named once
    /// (`wasi:cli/environment@0.2.x#get-environment`, say), in the order
    /// first made. Recorded only under
    /// [`WasiPolicy::Deny`](super::WasiPolicy::Deny), which answers them
    /// empty as the closed context does: the conformance kit reports them.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub environment_reads: Vec<String>,
}

/// Which cap a guest hit while growing memory or a table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LimitHit {
    Memory,
    Table,
}

pub(crate) struct Limiter {
    memory_bytes: usize,
    table_elements: usize,
    pub(crate) hit: Option<LimitHit>,
}

impl ResourceLimiter for Limiter {
    fn memory_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        let allowed = desired <= self.memory_bytes;
        if !allowed {
            self.hit = Some(LimitHit::Memory);
        }
        Ok(allowed)
    }

    fn table_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        let allowed = desired <= self.table_elements;
        if !allowed {
            self.hit = Some(LimitHit::Table);
        }
        Ok(allowed)
    }
}

/// The data of one review's `Store`.
pub(crate) struct ReviewState {
    /// Built on the guest's first WASI call: most reviews make none, and a
    /// context (random state, stdio pipes) costs more than the rest of the
    /// store. Built or not, it is the same closed context.
    wasi: Option<Box<ClosedWasi>>,
    table: ResourceTable,
    stderr_bytes: usize,
    pub(crate) limiter: Limiter,
    /// The review's deadline, registered in flight while the store lives.
    pub(crate) deadline: Deadline,
    module: Arc<str>,
    logs: ReviewLogs,
    log_bytes: usize,
    max_log_entries: usize,
    max_log_bytes: usize,
    /// What the `call` and `model` imports answer from (contract 0.2).
    pub(crate) granted: super::granted::Granted,
}

/// The most random bytes one `wasi:random` call may ask for. wasmtime's
/// default (64 MiB) would let a guest make the host fill and allocate that
/// much, outside the guest's memory cap and in one uninterruptible call; a
/// larger request traps.
const MAX_RANDOM_BYTES: u64 = 64 << 10;

/// A closed WASI context and its captured stderr.
struct ClosedWasi {
    ctx: WasiCtx,
    stderr: MemoryOutputPipe,
}

impl ClosedWasi {
    /// No files, no environment, no arguments, no network; stdin empty,
    /// stdout discarded, stderr captured up to `stderr_bytes`.
    fn new(stderr_bytes: usize) -> Self {
        let stderr = MemoryOutputPipe::new(stderr_bytes);
        let ctx = WasiCtx::builder()
            .stderr(stderr.clone())
            .allow_tcp(false)
            .allow_udp(false)
            .allow_ip_name_lookup(false)
            .max_random_size(MAX_RANDOM_BYTES)
            .build();
        ClosedWasi { ctx, stderr }
    }
}

impl ReviewState {
    /// A closed context: no files, no environment, no arguments, no network;
    /// stdin empty, stdout discarded, stderr captured up to its cap.
    pub(crate) fn new(module: Arc<str>, limits: &Limits, deadline: Deadline) -> Self {
        let mut table = ResourceTable::new();
        table.set_max_capacity(limits.handles());
        ReviewState {
            wasi: None,
            table,
            stderr_bytes: limits.stderr_bytes(),
            limiter: Limiter {
                memory_bytes: limits.memory_bytes(),
                table_elements: limits.table_elements(),
                hit: None,
            },
            deadline,
            module,
            logs: ReviewLogs::default(),
            log_bytes: 0,
            max_log_entries: limits.log_entries(),
            max_log_bytes: limits.log_bytes(),
            granted: super::granted::Granted::default(),
        }
    }

    /// The most entries the review's resource table may hold.
    #[cfg(test)]
    pub(crate) fn table_capacity(&self) -> usize {
        self.table.max_capacity()
    }

    /// The review's resource table (what WASI's pollables and streams live in).
    pub(crate) fn table(&mut self) -> &mut ResourceTable {
        &mut self.table
    }

    /// Notes a read of the environment (under [`super::WasiPolicy::Deny`]).
    pub(crate) fn record_environment_read(&mut self, function: &str) {
        let reads = &mut self.logs.environment_reads;
        if !reads.iter().any(|read| read == function) {
            reads.push(function.to_owned());
        }
    }

    /// The logs, with stderr attached.
    pub(crate) fn into_logs(self) -> ReviewLogs {
        let mut logs = self.logs;
        if let Some(wasi) = self.wasi {
            logs.stderr = String::from_utf8_lossy(&wasi.stderr.contents()).into_owned();
        }
        logs
    }
}

impl WasiView for ReviewState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        let stderr_bytes = self.stderr_bytes;
        let wasi = self
            .wasi
            .get_or_insert_with(|| Box::new(ClosedWasi::new(stderr_bytes)));
        WasiCtxView {
            ctx: &mut wasi.ctx,
            table: &mut self.table,
        }
    }
}

/// A guest's log fields as they are logged: `{"key": "value", ...}`, each
/// key and value quoted with `"` and `\` escaped (Rust's `Debug` for
/// strings), and the whole escaped ([`Escaped`]'s rules), so that nothing in
/// a key or value can close its quotes, start a field of the host's own, or
/// reach the log raw.
struct GuestFields<'a>(&'a [(String, String)]);

impl std::fmt::Display for GuestFields<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        use std::fmt::Write;
        let map = DebugMap(self.0);
        write!(crate::escape::EscapeWriter(f), "{map:?}")
    }
}

/// The pairs as a `Debug` map of quoted strings.
struct DebugMap<'a>(&'a [(String, String)]);

impl std::fmt::Debug for DebugMap<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_map()
            .entries(self.0.iter().map(|(key, value)| (key, value)))
            .finish()
    }
}

fn level_name(level: Level) -> &'static str {
    match level {
        Level::Trace => "trace",
        Level::Debug => "debug",
        Level::Info => "info",
        Level::Warn => "warn",
        Level::Error => "error",
    }
}

impl crate::contract::types::Host for ReviewState {}

impl logging::Host for ReviewState {
    fn log(&mut self, level: Level, message: String, fields: Vec<(String, String)>) {
        let size = message.len()
            + fields
                .iter()
                .map(|(key, value)| key.len() + value.len())
                .sum::<usize>();
        if self.logs.entries.len() >= self.max_log_entries
            || self.log_bytes.saturating_add(size) > self.max_log_bytes
        {
            self.logs.dropped += 1;
            return;
        }
        self.log_bytes += size;
        let module = &*self.module;
        // Guest text: escaped, so it cannot forge lines or drive a terminal;
        // each field's key and value quoted, so a value cannot forge a field
        // of the host's own (`x module=guardian`).
        let rendered = GuestFields(&fields);
        let shown = Escaped(&message);
        match level {
            Level::Trace => {
                tracing::trace!(target: "gatehouse::guest", module, fields = %rendered, "{shown}")
            }
            Level::Debug => {
                tracing::debug!(target: "gatehouse::guest", module, fields = %rendered, "{shown}")
            }
            Level::Info => {
                tracing::info!(target: "gatehouse::guest", module, fields = %rendered, "{shown}")
            }
            Level::Warn => {
                tracing::warn!(target: "gatehouse::guest", module, fields = %rendered, "{shown}")
            }
            Level::Error => {
                tracing::error!(target: "gatehouse::guest", module, fields = %rendered, "{shown}")
            }
        }
        self.logs.entries.push(GuestLog {
            level: level_name(level),
            message,
            fields,
        });
    }

    fn max_level(&mut self) -> Level {
        match LevelFilter::current() {
            LevelFilter::TRACE => Level::Trace,
            LevelFilter::DEBUG => Level::Debug,
            LevelFilter::INFO => Level::Info,
            LevelFilter::WARN => Level::Warn,
            _ => Level::Error,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::contract::logging::Host as _;
    use crate::sandbox::ticker::InFlight;

    /// What the sandbox logs when the guest of module `guardian` logs
    /// `message` with `fields` at info.
    fn guest_logged(message: &str, fields: &[(&str, &str)]) -> String {
        let in_flight = Arc::new(InFlight::default());
        let mut state = ReviewState::new(
            Arc::from("guardian"),
            &Limits::default(),
            in_flight.enter(Duration::from_secs(1)),
        );
        let fields = fields
            .iter()
            .map(|(key, value)| ((*key).to_owned(), (*value).to_owned()))
            .collect();
        let ((), log) = crate::capture::logged(tracing::Level::TRACE, || {
            state.log(Level::Info, message.to_owned(), fields)
        });
        log
    }

    #[test]
    fn a_field_value_cannot_forge_a_field_of_the_hosts() {
        let log = guest_logged(
            "checked",
            &[
                ("verdict", "x module=allowlist"),
                ("note", "a\" module=\"b"),
            ],
        );
        assert_eq!(log.lines().count(), 1, "{log}");
        assert!(
            log.contains(
                r#"checked module="guardian" fields={"verdict": "x module=allowlist", "note": "a\" module=\"b"}"#
            ),
            "{log}"
        );
        // Outside the quoted fields there is one `module=`: the host's.
        let outside: String = {
            let start = log.find("fields={").expect("fields");
            let end = log.rfind('}').expect("end of fields");
            format!("{}{}", &log[..start], &log[end..])
        };
        assert_eq!(outside.matches("module=").count(), 1, "{log}");
    }

    #[test]
    fn keys_are_quoted_and_everything_is_escaped() {
        let log = guest_logged(
            "ok\u{1b}[2K\rFORGED\u{202e}",
            &[
                ("x module", "v"),
                ("k\u{200b}", "line\nFORGED \u{9b}2J\u{2028}\u{e0041}"),
            ],
        );
        assert_eq!(log.lines().count(), 1, "{log}");
        for raw in [
            '\u{1b}',
            '\r',
            '\u{9b}',
            '\u{202e}',
            '\u{2028}',
            '\u{200b}',
            '\u{e0041}',
        ] {
            assert!(!log.contains(raw), "raw {raw:?} in {log:?}");
        }
        assert!(
            log.contains(
                r#"gatehouse::guest: ok\u{1b}[2K\rFORGED\u{202e} module="guardian" fields={"x module": "v", "k\u{200b}": "line\nFORGED \u{9b}2J\u{2028}\u{e0041}"}"#
            ),
            "{log}"
        );
    }
}
