//! What an instance reports to its operator, in `gatehouse-telemetry`'s
//! families: each decision read off its audit record (so the metrics and
//! the audit log never disagree), each audit write, each chain swap, and
//! the levels read when a scrape or the console asks (elicitations in
//! flight, questions waiting, backends, the chain, the compile cache).
//!
//! No label takes a request id, a session, an argument or a rationale:
//! only configured names (server, module, model grant) and fixed words.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use gatehouse_audit::{AuditRecord, DecidedBy, PersonChannel};
use gatehouse_console::status::InstanceStatus;
use gatehouse_core::sandbox::CompileCounts;
use gatehouse_mcp::runtime::ServerStarts;
use gatehouse_telemetry::families::{
    AUDIT_WRITE_DURATION, AUDIT_WRITES, BACKEND_STARTS, BACKENDS, CHAIN_MODULES, COMPILE_CACHE,
    COMPILED_FUNCTIONS, ELICITATION_DURATION, ELICITATIONS, ELICITATIONS_IN_FLIGHT, FAIL_CLOSED,
    INSTANCES, MODEL_ATTEMPTS, MODEL_BUDGET_LIMIT, MODEL_BUDGET_REMAINING, MODEL_CALL_DURATION,
    MODEL_CALLS, MODEL_TOKENS, MODULE_SWAPS, PERSON_ANSWERS, PERSON_PENDING, REVIEW_DURATION,
    REVIEWS,
};
use gatehouse_telemetry::health::{Check, Readiness};
use gatehouse_telemetry::series::{Levels, Metrics, Snapshot};

/// The failure code of an accept declined because its audit line could not
/// be written.
pub const AUDIT_UNAVAILABLE: &str = "audit-unavailable";

/// How a decision reads in metrics and traces: the same words for both,
/// taken from its audit record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DecisionLabels<'a> {
    /// The answer's action (`accept`, `decline`, `cancel`), or `error`.
    pub action: &'a str,
    /// Who decided (`guest`, `policy`, `person`, `failure`, …).
    pub decided_by: &'static str,
    /// The failure code when it failed closed ([`AUDIT_UNAVAILABLE`], a
    /// module's failure code, or `chain`).
    pub fail_closed: Option<&'a str>,
    /// The channel the person answered on (`client`, `console`), if asked.
    pub person: Option<&'static str>,
}

/// The word metrics and traces use for the channel the person answered on.
pub fn channel_name(channel: &PersonChannel) -> &'static str {
    match channel {
        PersonChannel::Client => "client",
        PersonChannel::Console { .. } => "console",
    }
}

/// [`DecisionLabels`] of `record`; `downgraded` when an accept became a
/// decline because its audit line could not be written.
pub fn decision_labels(record: &AuditRecord, downgraded: bool) -> DecisionLabels<'_> {
    let action = if record.answer.get("error").is_some() {
        "error"
    } else if downgraded {
        "decline"
    } else {
        record.action().name()
    };
    let decided_by = if downgraded {
        DecidedBy::Failure.name()
    } else {
        record.decided_by.name()
    };
    let fail_closed = if downgraded {
        Some(AUDIT_UNAVAILABLE)
    } else if record.decided_by == DecidedBy::Failure {
        Some(
            record
                .deciding_step()
                .and_then(|step| step.failure.as_deref())
                .unwrap_or("chain"),
        )
    } else {
        None
    };
    let person = record.person.as_ref().map(channel_name);
    DecisionLabels {
        action,
        decided_by,
        fail_closed,
        person,
    }
}

/// Records one decision as its audit line has it; `downgraded` when an
/// accept became a decline because that line could not be written.
pub fn record_decision(metrics: &Metrics, record: &AuditRecord, downgraded: bool) {
    let labels = decision_labels(record, downgraded);
    let (action, decided_by) = (labels.action, labels.decided_by);
    let server = record.server.as_str();
    metrics.count(
        &ELICITATIONS,
        &[server, &record.mode, decided_by, action],
        1,
    );
    metrics.observe(
        &ELICITATION_DURATION,
        &[server, decided_by],
        micros(record.latency_us),
    );
    if let Some(code) = labels.fail_closed {
        metrics.count(&FAIL_CLOSED, &[server, code], 1);
    }
    for step in &record.steps {
        let failure = step.failure.as_deref().unwrap_or("");
        metrics.count(
            &REVIEWS,
            &[&step.module, &step.sha256, &step.outcome, failure],
            1,
        );
        metrics.observe(&REVIEW_DURATION, &[&step.module], micros(step.latency_us));
        for call in &step.model_calls {
            let grant = call.grant.as_str();
            metrics.count(
                &MODEL_CALLS,
                &[grant, call.error.as_deref().unwrap_or("ok")],
                1,
            );
            metrics.count(&MODEL_ATTEMPTS, &[grant], u64::from(call.attempts));
            if let Some(tokens) = call.input_tokens {
                metrics.count(&MODEL_TOKENS, &[grant, "input"], u64::from(tokens));
            }
            if let Some(tokens) = call.output_tokens {
                metrics.count(&MODEL_TOKENS, &[grant, "output"], u64::from(tokens));
            }
            metrics.observe(&MODEL_CALL_DURATION, &[grant], micros(call.latency_us));
        }
    }
    if let Some(channel) = labels.person {
        metrics.count(&PERSON_ANSWERS, &[channel, action], 1);
    }
}

/// Records one audit write.
pub fn record_audit_write(metrics: &Metrics, written: bool, took: Duration) {
    metrics.count(&AUDIT_WRITES, &[if written { "ok" } else { "error" }], 1);
    metrics.observe(&AUDIT_WRITE_DURATION, &[], took.as_secs_f64());
}

/// Records one chain load or reload: swapped in, or refused (the old chain
/// kept).
pub fn record_swap(metrics: &Metrics, swapped: bool) {
    metrics.count(&MODULE_SWAPS, &[if swapped { "ok" } else { "refused" }], 1);
}

/// The levels of an instance now: what its status says (backends, chain,
/// in flight), its model budgets, the questions waiting for a person, and
/// the totals kept elsewhere (the compile cache's counts, each backend's
/// connection attempts).
pub fn levels(
    status: &InstanceStatus,
    chain: &gatehouse_core::chain::Chain,
    waiting: &[(&str, usize)],
    compiles: CompileCounts,
    starts: &BTreeMap<String, ServerStarts>,
) -> Levels {
    let mut levels = Levels::default();
    for (server, counts) in starts {
        levels.total(&BACKEND_STARTS, &[server, "connected"], counts.connected);
        levels.total(&BACKEND_STARTS, &[server, "failed"], counts.failed);
    }
    for grant in chain.links().iter().filter_map(|link| link.model.as_ref()) {
        let (Some(budget), Some((calls, tokens))) = (grant.budget(), grant.budget_remaining())
        else {
            continue;
        };
        let name = grant.name();
        levels.set(
            &MODEL_BUDGET_LIMIT,
            &[name, "calls"],
            i64::from(budget.calls()),
        );
        levels.set(
            &MODEL_BUDGET_LIMIT,
            &[name, "tokens"],
            clamp(budget.tokens()),
        );
        levels.set(&MODEL_BUDGET_REMAINING, &[name, "calls"], i64::from(calls));
        levels.set(&MODEL_BUDGET_REMAINING, &[name, "tokens"], clamp(tokens));
    }
    levels.set(&INSTANCES, &[], 1);
    levels.set(&ELICITATIONS_IN_FLIGHT, &[], clamp(status.in_flight));
    for (channel, count) in waiting {
        levels.set(&PERSON_PENDING, &[channel], clamp(*count as u64));
    }
    for backend in &status.backends {
        for state in ["connected", "failed", "starting"] {
            let level = i64::from(backend.state == state);
            levels.set(&BACKENDS, &[&backend.name, state], level);
        }
    }
    for mode in ["live", "shadow"] {
        let modules = status
            .modules
            .iter()
            .filter(|module| module.mode == mode)
            .count();
        levels.set(&CHAIN_MODULES, &[mode], clamp(modules as u64));
    }
    levels.total(&COMPILE_CACHE, &["hit"], compiles.hits);
    levels.total(&COMPILE_CACHE, &["miss"], compiles.compiled);
    levels.total(&COMPILE_CACHE, &["off"], compiles.in_memory);
    levels.total(&COMPILE_CACHE, &["joined"], compiles.joined);
    levels.total(&COMPILED_FUNCTIONS, &["reused"], compiles.functions_reused);
    levels.total(
        &COMPILED_FUNCTIONS,
        &["compiled"],
        compiles.functions_compiled,
    );
    levels
}

/// Whether an instance is ready: its chain loaded, its audit log taking
/// lines, its required backends up.
pub fn readiness(
    status: &InstanceStatus,
    chain_loaded: bool,
    audit: Result<(), String>,
    required: &[String],
) -> Readiness {
    let mut checks = Vec::new();
    let live = status
        .modules
        .iter()
        .filter(|module| module.mode == "live")
        .count();
    checks.push(Check::new(
        "modules",
        chain_loaded,
        if chain_loaded {
            format!("{live} live")
        } else {
            "the reviewer chain is not loaded yet".to_owned()
        },
    ));
    checks.push(match audit {
        Ok(()) => Check::new("audit", true, "writable"),
        Err(why) => Check::new("audit", false, why),
    });
    for name in required {
        let backend = status.backends.iter().find(|backend| &backend.name == name);
        let (ok, detail) = match backend {
            Some(backend) if backend.state == "connected" => (true, "connected".to_owned()),
            Some(backend) => (
                false,
                match &backend.detail {
                    Some(detail) => format!("{}: {detail}", backend.state),
                    None => backend.state.clone(),
                },
            ),
            None => (false, "not configured".to_owned()),
        };
        checks.push(Check::new(format!("backend {name}"), ok, detail));
    }
    Readiness::new(checks)
}

/// An instance's own numbers for its endpoint or its console: its counters
/// and histograms with its levels now.
pub fn snapshot(metrics: &Arc<Metrics>, levels: Levels) -> Snapshot {
    levels.into_snapshot(metrics.snapshot())
}

fn micros(us: u64) -> f64 {
    Duration::from_micros(us).as_secs_f64()
}

fn clamp(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}
