//! What `AuditLog::write` costs under each `audit_sync` mode, side by side
//! in one run: each mode writes the same records, one at a time, to its own
//! file in one directory, and every call is timed.
//!
//! ```text
//! cargo run --release -p gatehouse-audit --example audit_write -- [DIR] [RECORDS]
//! ```
//!
//! `DIR` (default: the system temp directory) should be on the disk the
//! audit log will live on: on tmpfs an fdatasync costs nothing.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use gatehouse_audit::{AuditLog, AuditRecord, AuditStep, AuditSync, DecidedBy, now_rfc3339};
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
        decided_by: DecidedBy::Guest,
        reason: "decided by the chain".to_owned(),
        steps: vec![AuditStep {
            module: "guardian".to_owned(),
            sha256: "9f2c".repeat(16),
            signed_by: None,
            outcome: "accept".to_owned(),
            failure: None,
            rationale: Some("read-only tool on an allowed server".to_owned()),
            risk: None,
            latency_us: 13,
            model_calls: Vec::new(),
        }],
        answer: json!({
            "action": "accept",
            "content": {"branch": "topic", "confirm": true},
            "_meta": {"approvals_reviewer": "auto_review"}
        }),
        latency_us: 88,
    }
}

/// The nearest-rank percentile of sorted timings (none are empty here).
fn percentile(sorted: &[Duration], percent: u32) -> Duration {
    let nanos: Vec<u64> = sorted
        .iter()
        .map(|timing| u64::try_from(timing.as_nanos()).unwrap_or(u64::MAX))
        .collect();
    Duration::from_nanos(
        gatehouse_base::percentile::percentile(&nanos, percent).unwrap_or_default(),
    )
}

fn micros(duration: Duration) -> String {
    format!("{:.1} µs", duration.as_secs_f64() * 1e6)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let base = args.next().map_or_else(std::env::temp_dir, PathBuf::from);
    let records: u64 = args.next().map_or(Ok(2000), |n| n.parse())?;
    let dir = tempfile::tempdir_in(&base)?;
    let line = serde_json::to_string(&record(0))?.len() + 1;
    println!(
        "{records} records of {line} bytes per mode, one at a time, in {}",
        base.display()
    );
    let logs: Vec<(AuditSync, AuditLog)> = AuditSync::ALL
        .into_iter()
        .map(|mode| {
            AuditLog::open_with(dir.path().join(format!("{mode}.jsonl")), mode)
                .map(|log| (mode, log))
        })
        .collect::<Result<_, _>>()?;
    let memory = AuditLog::in_memory();
    let mut timings: Vec<Vec<Duration>> = vec![Vec::new(); logs.len() + 1];
    let started = Instant::now();
    // Interleaved, so that the modes see the same disk and the same noise,
    // and the order rotated, so that none always writes right after
    // another's fdatasync.
    for id in 0..records {
        let record = record(id);
        let first = usize::try_from(id).unwrap_or(0) % logs.len();
        for index in (first..logs.len()).chain(0..first) {
            let log = &logs[index].1;
            let start = Instant::now();
            log.write(&record)?;
            timings[index].push(start.elapsed());
        }
        let start = Instant::now();
        memory.write(&record)?;
        timings[logs.len()].push(start.elapsed());
    }
    let wall = started.elapsed();
    println!("| audit_sync | median | p90 | p99 | max | fdatasyncs |");
    println!("|---|---|---|---|---|---|");
    let names: Vec<String> = logs
        .iter()
        .map(|(mode, _)| format!("`{mode}`"))
        .chain(std::iter::once("in memory (no file)".to_owned()))
        .collect();
    let syncs: Vec<u64> = logs
        .iter()
        .map(|(_, log)| log.syncs())
        .chain(std::iter::once(0))
        .collect();
    for ((name, timing), syncs) in names.iter().zip(timings.iter_mut()).zip(syncs) {
        timing.sort();
        println!(
            "| {name} | {} | {} | {} | {} | {syncs} |",
            micros(percentile(timing, 50)),
            micros(percentile(timing, 90)),
            micros(percentile(timing, 99)),
            micros(percentile(timing, 100)),
        );
    }
    println!("wall time for all modes: {wall:.2?}");
    Ok(())
}
