//! `gatehouse audit`: the audit log read back, as a table of decisions, as
//! JSON lines, or as counts and latency percentiles; `--follow` prints new
//! records as they are written. The reading is `gatehouse_audit::read`;
//! this module picks the file, filters and prints.

use std::io::{self, BufWriter, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, SystemTime};

use anyhow::Context;
use clap::ValueEnum;
use gatehouse_audit::DecidedBy;
use gatehouse_audit::read::{
    self, AuditEntry, AuditFilter, AuditStats, AuditTail, Decider, ReadError, ReadLine, Recovered,
    Unreadable, UnreadableLine,
};
use gatehouse_base::escape::{Escaped, escape, to_json_string};
use gatehouse_gateway::config::Config;
use serde_json::{Value, json};

use super::Format;

/// How often `--follow` looks for new lines.
const POLL: Duration = Duration::from_millis(200);

/// Characters of a module's sha256 the table shows.
const SHORT_DIGEST: usize = 12;

/// Read the audit log: one line per elicitation gatehouse answered (who
/// decided, which module and digest, the answer, the latency). Prints a
/// table (or the records as JSON lines, or counts with `--stats`); filters
/// combine (all must match). Lines that are not records are counted and
/// reported on stderr, and the rest is still read; what such a line's start
/// still says (time, server, decision) is shown and counted as a record
/// marked unreadable. Exits 1 only when the log cannot be opened or read.
/// Every text field is escaped before it is printed.
#[derive(Debug, clap::Args)]
#[command(group(clap::ArgGroup::new("source").required(true).args(["config", "log"])))]
pub struct AuditArgs {
    /// The config file whose audit log to read (`[elicitations] audit_log`,
    /// relative to the file; gatehouse-audit.jsonl beside it if unset), as
    /// `gatehouse serve --config` finds it.
    #[arg(long, value_name = "gatehouse.toml")]
    config: Option<PathBuf>,
    /// The audit log file to read, instead of the config's.
    #[arg(long, value_name = "FILE")]
    log: Option<PathBuf>,
    /// Only records at or after T: an RFC 3339 UTC timestamp
    /// (2026-05-01T10:00:00Z) or a duration back from now (10m, 2h, 1d).
    #[arg(long, value_name = "T")]
    since: Option<String>,
    /// Only the records of this server.
    #[arg(long, value_name = "SERVER")]
    server: Option<String>,
    /// Only the records decided by this.
    #[arg(long, value_enum, value_name = "WHO")]
    decided_by: Option<Who>,
    /// After what is there, keep printing records as they are appended (like
    /// `tail -F`: a rotated log is followed to its new file), until Ctrl-C.
    #[arg(long, conflicts_with = "stats")]
    follow: bool,
    /// Text for people, or JSON (records: each line as in the log).
    #[arg(long, value_enum, default_value = "text")]
    format: Format,
    /// Counts instead of records: per server, action, deciding module (and
    /// digest) and decided-by, and the latency's p50, p90, p99 and max.
    #[arg(long)]
    stats: bool,
    /// Where the shadow module MODULE (`mode = "shadow"`, by its name in
    /// the chain) disagreed with what the live chain came to: counts
    /// (reviewed, agreed, disagreed, skipped; each disagreement as `shadow →
    /// live`), then every disagreement. The evidence to read before
    /// `gatehouse modules update` promotes it. --since and --server apply.
    #[arg(long, value_name = "MODULE", conflicts_with_all = ["stats", "follow", "decided_by"])]
    compare: Option<String>,
}

/// Who decided (`decided_by` in the audit line).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Who {
    /// A module of the chain.
    Guest,
    /// The person, through the upstream client.
    Person,
    /// A host setting or protocol rule.
    Policy,
    /// A module failed and the chain failed closed.
    Failure,
    /// Nobody could decide; `on_unhandled` answered.
    Unhandled,
}

impl From<Who> for DecidedBy {
    fn from(who: Who) -> DecidedBy {
        match who {
            Who::Guest => DecidedBy::Guest,
            Who::Person => DecidedBy::Person,
            Who::Policy => DecidedBy::Policy,
            Who::Failure => DecidedBy::Failure,
            Who::Unhandled => DecidedBy::Unhandled,
        }
    }
}

pub fn run(args: AuditArgs) -> anyhow::Result<ExitCode> {
    let (path, origin) = log_path(&args)?;
    let since = args
        .since
        .as_deref()
        .map(|text| read::parse_since(text, SystemTime::now()))
        .transpose()
        .context("--since")?;
    let filter = AuditFilter {
        since,
        server: args.server.clone(),
        decided_by: args.decided_by.map(DecidedBy::from),
    };
    let opened = |error: ReadError| match error {
        ReadError::Open { .. } | ReadError::NotAFile { .. } => {
            anyhow::anyhow!("{error}; the path is {origin}")
        }
        ReadError::Read { .. } => anyhow::Error::new(error),
    };
    let mut printer = Printer::new(args.format, args.stats);
    let written = if let Some(module) = &args.compare {
        let reader = read::open(&path).map_err(opened)?;
        compare(reader, &path, &filter, module, args.format)
    } else if args.follow {
        let tail = AuditTail::open(&path).map_err(opened)?;
        follow(tail, &filter, &mut printer)
    } else {
        let reader = read::open(&path).map_err(opened)?;
        list(reader, &path, &filter, &mut printer)
    };
    match written {
        Ok(()) => Ok(ExitCode::SUCCESS),
        // `gatehouse audit | head`: the reader has what it wanted.
        Err(Failed::Output(error)) if error.kind() == io::ErrorKind::BrokenPipe => {
            Ok(ExitCode::SUCCESS)
        }
        Err(Failed::Output(error)) => Err(anyhow::Error::new(error).context("cannot print")),
        Err(Failed::Read(error)) => Err(error.into()),
        Err(Failed::Setup(error)) => {
            Err(anyhow::Error::new(error).context("--follow cannot listen for Ctrl-C"))
        }
    }
}

/// The log's path and where it came from, for errors.
fn log_path(args: &AuditArgs) -> anyhow::Result<(PathBuf, String)> {
    if let Some(log) = &args.log {
        return Ok((log.clone(), "the one given with --log".to_owned()));
    }
    let Some(config_path) = &args.config else {
        anyhow::bail!(
            "give the audit log with --log FILE, or the config with --config gatehouse.toml"
        );
    };
    let config = Config::load(config_path)?;
    let origin = match &config.elicitations.audit_log {
        Some(_) => format!("from [elicitations] audit_log in {}", config_path.display()),
        None => format!(
            "the default, gatehouse-audit.jsonl beside {}: its [elicitations] audit_log is not set",
            config_path.display()
        ),
    };
    Ok((config.audit_log_path(), origin))
}

/// Why printing stopped.
enum Failed {
    /// Reading the log failed.
    Read(ReadError),
    /// Writing stdout failed.
    Output(io::Error),
    /// `--follow` could not start its runtime or listen for signals.
    Setup(io::Error),
}

impl From<io::Error> for Failed {
    fn from(error: io::Error) -> Failed {
        Failed::Output(error)
    }
}

/// Every record there is, then the unreadable lines on stderr.
fn list(
    mut reader: read::AuditReader<io::BufReader<std::fs::File>>,
    path: &std::path::Path,
    filter: &AuditFilter,
    printer: &mut Printer,
) -> Result<(), Failed> {
    let mut unreadable = Unreadable::default();
    printer.header()?;
    loop {
        let line = reader.next_line().map_err(|source| {
            Failed::Read(ReadError::Read {
                path: path.to_path_buf(),
                source,
            })
        })?;
        match line {
            Some(ReadLine::Entry(entry)) if filter.matches(&entry) => printer.entry(&entry)?,
            Some(ReadLine::Entry(_)) => {}
            Some(ReadLine::Event(event)) => note_event(path, &event),
            Some(ReadLine::Unreadable(line)) => {
                printer.unreadable(&line, filter)?;
                unreadable.add(line);
            }
            None => break,
        }
    }
    if let Some(incomplete) = reader.finish() {
        printer.unreadable(&incomplete, filter)?;
        unreadable.add(incomplete);
    }
    printer.finish(&unreadable)?;
    report(path, &unreadable);
    Ok(())
}

/// Every record there is, then those appended, until Ctrl-C or SIGTERM.
fn follow(tail: AuditTail, filter: &AuditFilter, printer: &mut Printer) -> Result<(), Failed> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(Failed::Setup)?;
    runtime.block_on(follow_until_stopped(tail, filter, printer))
}

async fn follow_until_stopped(
    mut tail: AuditTail,
    filter: &AuditFilter,
    printer: &mut Printer,
) -> Result<(), Failed> {
    // Listening before anything is printed: a signal at any point after the
    // first line ends the command cleanly.
    let mut stop = Stop::listen().map_err(Failed::Setup)?;
    printer.header()?;
    let mut unreadable = Unreadable::default();
    // What is there already, with one report of its unreadable lines.
    drain(&mut tail, filter, printer, |line| unreadable.add(line))?;
    report(tail.path(), &unreadable);
    let path = tail.path().to_path_buf();
    loop {
        tokio::select! {
            () = stop.wait() => return Ok(()),
            () = tokio::time::sleep(POLL) => {}
        }
        drain(&mut tail, filter, printer, |line| {
            let why = line.error.to_string();
            eprintln!(
                "gatehouse: {}: line {} could not be read: {}",
                Escaped(&path.display().to_string()),
                line.line,
                Escaped(&why)
            );
        })?;
    }
}

/// Ctrl-C (SIGINT) or SIGTERM, listened for from its creation on.
struct Stop {
    #[cfg(unix)]
    interrupt: tokio::signal::unix::Signal,
    #[cfg(unix)]
    terminate: tokio::signal::unix::Signal,
}

impl Stop {
    fn listen() -> io::Result<Stop> {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{SignalKind, signal};
            Ok(Stop {
                interrupt: signal(SignalKind::interrupt())?,
                terminate: signal(SignalKind::terminate())?,
            })
        }
        #[cfg(not(unix))]
        {
            Ok(Stop {})
        }
    }

    async fn wait(&mut self) {
        #[cfg(unix)]
        {
            tokio::select! {
                _ = self.interrupt.recv() => {}
                _ = self.terminate.recv() => {}
            }
        }
        #[cfg(not(unix))]
        {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}

/// Prints the complete lines there are now (what an unreadable one still
/// says too); hands the unreadable ones to `bad`.
fn drain(
    tail: &mut AuditTail,
    filter: &AuditFilter,
    printer: &mut Printer,
    mut bad: impl FnMut(UnreadableLine),
) -> Result<(), Failed> {
    while let Some(line) = tail.next_line().map_err(Failed::Read)? {
        match line {
            ReadLine::Entry(entry) if filter.matches(&entry) => printer.entry(&entry)?,
            ReadLine::Entry(_) => {}
            ReadLine::Event(event) => note_event(tail.path(), &event),
            ReadLine::Unreadable(line) => {
                printer.unreadable(&line, filter)?;
                bad(line);
            }
        }
    }
    printer.flush()?;
    Ok(())
}

/// An event about the log itself (a torn line ended when it was opened, say)
/// on stderr: it is no decision, so it is neither listed nor counted. Shadow
/// lines are expected, and only `--compare` reads them.
fn note_event(path: &std::path::Path, event: &read::AuditEvent) {
    if event.event == gatehouse_audit::shadow::SHADOW_EVENT {
        return;
    }
    eprintln!(
        "gatehouse: {}: line {}: {}",
        Escaped(&path.display().to_string()),
        event.line,
        Escaped(&event.text)
    );
}

/// `N lines could not be read (first at line L, byte B: why)` on stderr, if any.
fn report(path: &std::path::Path, unreadable: &Unreadable) {
    if unreadable.count > 0 {
        eprintln!(
            "gatehouse: {}: {}",
            Escaped(&path.display().to_string()),
            Escaped(&unreadable.to_string())
        );
    }
}

/// Where records go: rows, JSON lines, or counters.
struct Printer {
    out: BufWriter<io::StdoutLock<'static>>,
    format: Format,
    stats: Option<AuditStats>,
}

impl Printer {
    fn new(format: Format, stats: bool) -> Printer {
        Printer {
            out: BufWriter::new(io::stdout().lock()),
            format,
            stats: stats.then(AuditStats::default),
        }
    }

    fn header(&mut self) -> io::Result<()> {
        if self.stats.is_none() && self.format == Format::Text {
            writeln!(
                self.out,
                "{:<20} {:<16} {:<10} {:<6} {:<10} {:<30} {:<7} {:>12}  reason",
                "time", "server", "request", "mode", "decided by", "module", "action", "latency"
            )?;
        }
        Ok(())
    }

    fn entry(&mut self, entry: &AuditEntry) -> io::Result<()> {
        if let Some(stats) = &mut self.stats {
            stats.add(&entry.record);
            return Ok(());
        }
        match self.format {
            Format::Json => json_line(&mut self.out, &entry.text),
            Format::Text => row(&mut self.out, entry),
        }
    }

    /// What an unreadable line still says, if it says enough and passes
    /// the filters: counted, or printed as a row or JSON line marked
    /// unreadable.
    fn unreadable(&mut self, line: &UnreadableLine, filter: &AuditFilter) -> io::Result<()> {
        let Some(recovered) = &line.recovered else {
            return Ok(());
        };
        if !filter.matches_recovered(recovered) {
            return Ok(());
        }
        if let Some(stats) = &mut self.stats {
            stats.add_recovered(recovered);
            return Ok(());
        }
        match self.format {
            Format::Json => recovered_json(&mut self.out, line, recovered),
            Format::Text => recovered_row(&mut self.out, line, recovered),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }

    /// The stats, if counting; flushes.
    fn finish(&mut self, unreadable: &Unreadable) -> io::Result<()> {
        if let Some(stats) = &mut self.stats {
            match self.format {
                Format::Text => stats_text(&mut self.out, stats, unreadable)?,
                Format::Json => stats_json(&mut self.out, stats, unreadable)?,
            }
        }
        self.out.flush()
    }
}

/// One record as a row of the table; every field escaped.
fn row(out: &mut impl Write, entry: &AuditEntry) -> io::Result<()> {
    let record = &entry.record;
    let request = match &record.request_id {
        Value::String(id) => id.clone(),
        other => other.to_string(),
    };
    writeln!(
        out,
        "{:<20} {:<16} {:<10} {:<6} {:<10} {:<30} {:<7} {:>9.3} ms  {}",
        read::format_time(entry.time),
        Escaped(&record.server),
        Escaped(&request),
        Escaped(&record.mode),
        record.decided_by,
        Escaped(&decider(&record.decider())),
        record.action(),
        record.latency_us as f64 / 1000.0,
        Escaped(&record.reason),
    )
}

/// The row of what an unreadable line still says: `?` for what it does
/// not, `(unreadable)` for the module, and why the line could not be read
/// as the reason; every field escaped.
fn recovered_row(
    out: &mut impl Write,
    line: &UnreadableLine,
    recovered: &Recovered,
) -> io::Result<()> {
    let request = match &recovered.request_id {
        Some(Value::String(id)) => id.clone(),
        Some(other) => other.to_string(),
        None => "?".to_owned(),
    };
    let why = format!(
        "line {} could not be read ({}); recovered from its start",
        line.line, line.error
    );
    writeln!(
        out,
        "{:<20} {:<16} {:<10} {:<6} {:<10} {:<30} {:<7} {:>12}  {}",
        read::format_time(recovered.time),
        Escaped(recovered.server.as_deref().unwrap_or("?")),
        Escaped(&request),
        Escaped(recovered.mode.as_deref().unwrap_or("?")),
        recovered.decided_by.map_or("?", DecidedBy::name),
        decider(&recovered.decider()),
        recovered.action.map_or("?", read::Action::name),
        "?",
        Escaped(&why),
    )
}

/// The JSON line of what an unreadable line still says: the fields it
/// says, and `unreadable` with the line number and why it could not be
/// read.
fn recovered_json(
    out: &mut impl Write,
    line: &UnreadableLine,
    recovered: &Recovered,
) -> io::Result<()> {
    let mut object = serde_json::Map::new();
    object.insert(
        "time".to_owned(),
        json!(read::format_time_micros(recovered.time)),
    );
    if let Some(server) = &recovered.server {
        object.insert("server".to_owned(), json!(server));
    }
    if let Some(by) = recovered.decided_by {
        object.insert("decided_by".to_owned(), json!(by));
    }
    if let Some(action) = recovered.action {
        object.insert("action".to_owned(), json!(action.name()));
    }
    if let Some(mode) = &recovered.mode {
        object.insert("mode".to_owned(), json!(mode));
    }
    if let Some(id) = &recovered.request_id {
        object.insert("request_id".to_owned(), id.clone());
    }
    object.insert(
        "unreadable".to_owned(),
        json!({"line": line.line, "error": line.error.to_string()}),
    );
    writeln!(
        out,
        "{}",
        to_json_string(&Value::Object(object)).map_err(io::Error::other)?
    )
}

/// A module and its short digest, or who decided in its place.
fn decider(decider: &Decider) -> String {
    match decider {
        Decider::Module { module, sha256 } => {
            format!("{module} {}", read::short_digest(sha256, SHORT_DIGEST))
        }
        Decider::Host(by) => format!("({by})"),
        Decider::Unknown => "(unreadable)".to_owned(),
    }
}

/// The record's line as it is in the log; re-encoded only if it carries
/// characters a terminal would act on (gatehouse writes them as `\uXXXX`, so
/// only a log written by something else does).
fn json_line(out: &mut impl Write, text: &str) -> io::Result<()> {
    if matches!(escape(text), std::borrow::Cow::Borrowed(_)) {
        return writeln!(out, "{text}");
    }
    let value: Value = serde_json::from_str(text).map_err(io::Error::other)?;
    writeln!(out, "{}", to_json_string(&value).map_err(io::Error::other)?)
}

fn stats_text(
    out: &mut impl Write,
    stats: &mut AuditStats,
    unreadable: &Unreadable,
) -> io::Result<()> {
    match stats.recovered {
        0 => writeln!(out, "records: {}", stats.records())?,
        recovered => writeln!(
            out,
            "records: {} ({recovered} recovered from the start of an unreadable line)",
            stats.records()
        )?,
    }
    if unreadable.count > 0 {
        writeln!(out, "unreadable lines: {}", unreadable.count)?;
    }
    match stats.latency() {
        Some(latency) => writeln!(
            out,
            "latency: p50 {:.3} ms  p90 {:.3} ms  p99 {:.3} ms  max {:.3} ms",
            latency.p50 as f64 / 1000.0,
            latency.p90 as f64 / 1000.0,
            latency.p99 as f64 / 1000.0,
            latency.max as f64 / 1000.0,
        )?,
        None => writeln!(out, "latency: no records")?,
    }
    let mut section = |title: &str, rows: Vec<(String, u64)>| -> io::Result<()> {
        writeln!(out, "\n{title}:")?;
        for (name, count) in rows {
            writeln!(out, "  {:<40} {count:>8}", Escaped(&name))?;
        }
        Ok(())
    };
    section(
        "by server",
        stats.servers.iter().map(|(k, v)| (k.clone(), *v)).collect(),
    )?;
    section(
        "by action",
        stats
            .actions
            .iter()
            .map(|(k, v)| (k.name().to_owned(), *v))
            .collect(),
    )?;
    section(
        "by deciding module",
        stats
            .deciders
            .iter()
            .map(|(k, v)| (decider(k), *v))
            .collect(),
    )?;
    section(
        "by decided by",
        stats
            .decided_by
            .iter()
            .map(|(k, v)| (k.name().to_owned(), *v))
            .collect(),
    )
}

fn stats_json(
    out: &mut impl Write,
    stats: &mut AuditStats,
    unreadable: &Unreadable,
) -> io::Result<()> {
    let mut document = stats.to_json();
    document["unreadable"] = json!(unreadable.count);
    writeln!(
        out,
        "{}",
        to_json_string(&document).map_err(io::Error::other)?
    )
}

/// `--compare MODULE`: the shadow lines' verdicts of MODULE against what the
/// live chain came to.
fn compare(
    mut reader: read::AuditReader<io::BufReader<std::fs::File>>,
    path: &std::path::Path,
    filter: &AuditFilter,
    module: &str,
    format: Format,
) -> Result<(), Failed> {
    use gatehouse_audit::shadow::SKIPPED;
    use std::collections::BTreeMap;
    let mut reviewed = 0u64;
    let mut agreed = 0u64;
    let mut skipped = 0u64;
    let mut pairs: BTreeMap<(String, String), u64> = BTreeMap::new();
    let mut disagreements = Vec::new();
    let mut unreadable = Unreadable::default();
    loop {
        let line = reader.next_line().map_err(|source| {
            Failed::Read(ReadError::Read {
                path: path.to_path_buf(),
                source,
            })
        })?;
        let event = match line {
            Some(ReadLine::Event(event)) => event,
            Some(ReadLine::Entry(_)) => continue,
            Some(ReadLine::Unreadable(line)) => {
                unreadable.add(line);
                continue;
            }
            None => break,
        };
        let Some(record) = event.shadow() else {
            continue;
        };
        if filter.since.is_some_and(|since| event.time < since)
            || filter
                .server
                .as_ref()
                .is_some_and(|server| *server != record.server)
        {
            continue;
        }
        for step in record.shadow.iter().filter(|step| step.module == module) {
            if step.outcome == SKIPPED {
                skipped += 1;
                continue;
            }
            reviewed += 1;
            if record.agrees(step) {
                agreed += 1;
                continue;
            }
            *pairs
                .entry((step.outcome.clone(), record.live.clone()))
                .or_default() += 1;
            disagreements.push((event.line, record.clone(), step.clone()));
        }
    }
    let mut out = io::BufWriter::new(io::stdout().lock());
    let disagreed = reviewed - agreed;
    match format {
        Format::Json => {
            let summary = serde_json::json!({
                "module": module,
                "reviewed": reviewed,
                "agreed": agreed,
                "disagreed": disagreed,
                "skipped": skipped,
                "disagreements_by_outcome": pairs
                    .iter()
                    .map(|((shadow, live), count)| serde_json::json!({"shadow": shadow, "live": live, "count": count}))
                    .collect::<Vec<_>>(),
                "disagreements": disagreements
                    .iter()
                    .map(|(line, record, step)| serde_json::json!({
                        "line": line,
                        "time": record.time,
                        "server": record.server,
                        "request_id": record.request_id,
                        "instance": record.instance,
                        "decided_by": record.decided_by,
                        "live": record.live,
                        "action": record.action,
                        "shadow": step,
                    }))
                    .collect::<Vec<_>>(),
            });
            let text = gatehouse_core::escape::to_json_string(&summary)
                .map_err(|error| Failed::Output(io::Error::other(error)))?;
            writeln!(out, "{text}")?;
        }
        Format::Text => {
            writeln!(
                out,
                "{}: {reviewed} reviewed in shadow, {agreed} agreed, {disagreed} disagreed, {skipped} skipped (busy)",
                Escaped(module)
            )?;
            for ((shadow, live), count) in &pairs {
                writeln!(
                    out,
                    "  shadow {} where the chain came to {}: {count}",
                    Escaped(shadow),
                    Escaped(live)
                )?;
            }
            for (line, record, step) in &disagreements {
                writeln!(
                    out,
                    "line {line}  {}  {}  id {}  chain: {} ({}, sent {})  shadow: {}{}",
                    Escaped(&record.time),
                    Escaped(&record.server),
                    Escaped(&record.request_id.to_string()),
                    Escaped(&record.live),
                    record.decided_by,
                    Escaped(&record.action),
                    Escaped(&step.outcome),
                    step.rationale
                        .as_deref()
                        .map(|why| format!(": {}", Escaped(why)))
                        .unwrap_or_default()
                )?;
            }
        }
    }
    out.flush()?;
    if let Some(incomplete) = reader.finish() {
        unreadable.add(incomplete);
    }
    report(path, &unreadable);
    Ok(())
}
