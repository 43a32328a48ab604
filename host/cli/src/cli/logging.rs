//! Where gatehouse's own log goes and how it looks: stderr through a
//! bounded, lossy queue, as text for people or JSON lines for collectors,
//! every field escaped either way.

use std::fmt::{self, Write as _};
use std::io::IsTerminal;

use clap::ValueEnum;
use gatehouse_core::escape::{EscapeWriter, Escaped};
use serde_json::{Map, Value};
use tracing::field::{Field, Visit};
use tracing::{Event, Subscriber};
use tracing_subscriber::Layer;
use tracing_subscriber::field::RecordFields;
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::util::SubscriberInitExt;

/// How log lines are written (`--log-format`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// For people: tracing's line format, coloured only on a terminal.
    #[default]
    Text,
    /// One JSON object per line, for log collectors (`time`, `level`,
    /// `target`, `message`, `fields`, `spans`).
    Json,
}

/// What -v and -vv leave at `info`: the JIT compiler's own crates, which
/// log every step of compiling a module (five million lines at trace for the
/// guardian, minutes of text and CPU). `RUST_LOG` can still ask for them.
const QUIET_COMPILER: &str = "cranelift_codegen=info,cranelift_frontend=info,wasmtime_internal_cranelift=info,regalloc2=info";

/// Logs to stderr at `quiet` (or more with -v) in `format`; `RUST_LOG`
/// overrides the level. Text is coloured only when stderr is a terminal;
/// in either format every field is escaped ([`EscapedFields`],
/// [`JsonLines`]).
///
/// Keep the returned guard until the program ends: dropping it flushes
/// what is still queued.
pub fn init_tracing(
    verbose: u8,
    quiet: &str,
    format: LogFormat,
) -> tracing_appender::non_blocking::WorkerGuard {
    let default = match verbose {
        0 => quiet.to_owned(),
        1 => format!("debug,{QUIET_COMPILER}"),
        _ => format!("trace,{QUIET_COMPILER}"),
    };
    // The trace spans are the exporter's (`super::traces`), never the
    // log's: with -v they would prefix lines with their fields, which may
    // hold content (`[traces] content`).
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(&default));
    let filter = match format!("{}=off", gatehouse_base::trace::TARGET).parse() {
        Ok(off) => filter.add_directive(off),
        Err(_) => filter,
    };
    // Logging never blocks the code that logs: lines go through a bounded
    // queue to a thread that writes stderr, and are dropped (and counted)
    // when it is full. Under `gatehouse serve` on stdio, stderr is a pipe
    // the client may stop reading; a blocking write there would hold a
    // guest's review (a guest log is written inside its host call) past its
    // deadline and stall every thread that logs.
    let (writer, guard) = tracing_appender::non_blocking::NonBlockingBuilder::default()
        .lossy(true)
        .thread_name("gatehouse-log")
        .finish(std::io::stderr());
    let logs = tracing_subscriber::fmt::layer()
        .with_writer(writer)
        .with_ansi(format == LogFormat::Text && std::io::stderr().is_terminal())
        .fmt_fields(EscapedFields);
    let logs = match format {
        LogFormat::Text => logs.boxed(),
        LogFormat::Json => logs.event_format(JsonLines).boxed(),
    };
    // Each layer has its own filter: the log's (RUST_LOG, -v) and the
    // traces' (`super::traces::Gate`), so neither changes what the other sees.
    tracing_subscriber::registry()
        .with(super::traces::layer())
        .with(logs.with_filter(filter))
        .init();
    guard
}

/// Writes an event's fields like tracing's default (the message, then
/// `name=value`), each escaped with [`EscapeWriter`]. The call sites escape
/// what they know comes from a guest, a server or a manifest; this is the
/// backstop for what they do not know, such as our dependencies' own logs
/// (rmcp quoting a server's bytes). Escaping is idempotent, so text escaped
/// at its call site passes through unchanged.
struct EscapedFields;

impl<'writer> FormatFields<'writer> for EscapedFields {
    fn format_fields<R: RecordFields>(&self, writer: Writer<'writer>, fields: R) -> fmt::Result {
        let mut visitor = EscapingVisitor {
            writer,
            result: Ok(()),
            first: true,
        };
        fields.record(&mut visitor);
        visitor.result
    }
}

struct EscapingVisitor<'writer> {
    writer: Writer<'writer>,
    result: fmt::Result,
    first: bool,
}

impl Visit for EscapingVisitor<'_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            self.record_debug(field, &format_args!("{value}"));
        } else {
            self.record_debug(field, &value);
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        let name = field.name();
        // `log` records' metadata, which the formatter has shown already.
        if self.result.is_err() || name.starts_with("log.") {
            return;
        }
        if !std::mem::take(&mut self.first) {
            self.result = self.writer.write_char(' ');
        }
        let mut out = EscapeWriter(&mut self.writer);
        self.result = self.result.and_then(|()| match name {
            "message" => write!(out, "{value:?}"),
            name => write!(out, "{}={value:?}", name.strip_prefix("r#").unwrap_or(name)),
        });
    }
}

/// One JSON object per event: `time` (RFC 3339, UTC, microseconds),
/// `level`, `target`, `message`, `fields` (the event's other fields) and
/// `spans` (the names of the spans it is in, outermost first), each on one
/// line. Text is escaped as the text format escapes it (controls, bidi and
/// invisible characters as `\u{…}`), so a collector's viewer shows what a
/// terminal would; numbers and booleans stay JSON numbers and booleans.
pub struct JsonLines;

impl<S, N> FormatEvent<S, N> for JsonLines
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        context: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let metadata = event.metadata();
        let mut fields = JsonFields::default();
        event.record(&mut fields);
        let mut line = Map::new();
        line.insert("time".into(), Value::String(gatehouse_audit::now_rfc3339()));
        line.insert(
            "level".into(),
            Value::String(metadata.level().as_str().into()),
        );
        line.insert("target".into(), Value::String(metadata.target().into()));
        if let Some(message) = fields.message {
            line.insert("message".into(), Value::String(message));
        }
        if !fields.fields.is_empty() {
            line.insert("fields".into(), Value::Object(fields.fields));
        }
        if let Some(scope) = context.event_scope() {
            let spans: Vec<Value> = scope
                .from_root()
                .map(|span| Value::String(span.name().into()))
                .collect();
            line.insert("spans".into(), Value::Array(spans));
        }
        let text = serde_json::to_string(&line).map_err(|_| fmt::Error)?;
        writeln!(writer, "{text}")
    }
}

/// An event's fields as JSON values, text escaped.
#[derive(Default)]
struct JsonFields {
    message: Option<String>,
    fields: Map<String, Value>,
}

impl JsonFields {
    fn insert(&mut self, field: &Field, value: Value) {
        let name = field.name();
        // `log` records' metadata, which `target` says already.
        if name.starts_with("log.") {
            return;
        }
        let name = name.strip_prefix("r#").unwrap_or(name);
        match (name, value) {
            ("message", Value::String(message)) => self.message = Some(message),
            (name, value) => {
                self.fields.insert(name.to_owned(), value);
            }
        }
    }
}

impl Visit for JsonFields {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.insert(field, Value::String(Escaped(value).to_string()));
    }

    fn record_bool(&mut self, field: &Field, value: bool) {
        self.insert(field, Value::Bool(value));
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        self.insert(field, Value::from(value));
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        self.insert(field, Value::from(value));
    }

    fn record_f64(&mut self, field: &Field, value: f64) {
        self.insert(field, Value::from(value));
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        let text = format!("{value:?}");
        self.insert(field, Value::String(Escaped(&text).to_string()));
    }
}
