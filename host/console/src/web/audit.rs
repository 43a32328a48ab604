//! The audit page: the records of the audit log every instance on the
//! config writes, newest first, filtered as `gatehouse audit` filters them
//! (since, server, who decided; and the action), with its statistics
//! (counts by server, action, deciding module and who decided; latency
//! percentiles), and one record in full.
//!
//! The log is read on each request, on a blocking thread, and at most
//! [`MAX_RECORDS`] matching records are returned (the newest).

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::SystemTime;

use axum::Json;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::Web;
use gatehouse_audit::DecidedBy;
use gatehouse_audit::read::{self, Action, AuditFilter, AuditStats, ReadLine};

/// The most records one request returns.
pub const MAX_RECORDS: usize = 200;

/// The audit view's `main`.
pub(super) const MAIN: &str = r#"<h1>Audit log</h1>
<form id="audit-filters" class="filters">
<label>Server <input name="server" id="filter-server"></label>
<label>Decided by <select name="decided_by" id="filter-decided-by"><option value="">any</option><option>guest</option><option>person</option><option>policy</option><option>failure</option><option>unhandled</option></select></label>
<label>Action <select name="action" id="filter-action"><option value="">any</option><option>accept</option><option>decline</option><option>cancel</option><option>error</option></select></label>
<label>Since (10m, 2h, or a UTC time) <input name="since" id="filter-since"></label>
<button type="submit">Filter</button>
</form>
<p id="audit-stats" class="muted"></p>
<table id="audit-records"><thead><tr><th scope="col">Time</th><th scope="col">Server</th><th scope="col">Mode</th><th scope="col">Decided by</th><th scope="col">Action</th><th scope="col">Reason</th><th scope="col">Record</th></tr></thead><tbody></tbody></table>
<h2>Record</h2>
<pre id="audit-record" class="record" tabindex="0">Choose a record.</pre>"#;

/// The filters, as `gatehouse audit` takes them (plus the action).
#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Filters {
    /// A duration back from now (`10m`, `2h`) or an RFC 3339 UTC time.
    since: Option<String>,
    /// A server.
    server: Option<String>,
    /// Who decided (`guest`, `person`, `policy`, `failure`, `unhandled`).
    decided_by: Option<String>,
    /// The action (`accept`, `decline`, `cancel`, `error`).
    action: Option<String>,
}

impl Filters {
    /// The audit crate's filter and the action, or what is wrong.
    fn parse(&self) -> Result<(AuditFilter, Option<Action>), String> {
        let given = |value: &Option<String>| value.clone().filter(|v| !v.trim().is_empty());
        let since = match given(&self.since) {
            Some(text) => {
                Some(read::parse_since(&text, SystemTime::now()).map_err(|e| e.to_string())?)
            }
            None => None,
        };
        let decided_by = match given(&self.decided_by) {
            Some(text) => Some(DecidedBy::from_name(&text).ok_or_else(|| {
                format!(
                    "decided_by {text:?} is not one of guest, person, policy, failure, unhandled"
                )
            })?),
            None => None,
        };
        let action = match given(&self.action) {
            Some(text) => Some(Action::from_name(&text).ok_or_else(|| {
                format!("action {text:?} is not one of accept, decline, cancel, error")
            })?),
            None => None,
        };
        let filter = AuditFilter {
            since,
            server: given(&self.server),
            decided_by,
        };
        Ok((filter, action))
    }
}

#[derive(Serialize)]
struct Found {
    /// The newest matching records, newest first (each as written).
    records: Vec<Value>,
    /// The counts over every matching record.
    stats: Value,
    /// Lines that were not records.
    unreadable: u64,
}

/// `GET /api/audit`.
pub(super) async fn records(
    State(web): State<Arc<Web>>,
    headers: HeaderMap,
    Query(filters): Query<Filters>,
) -> Response {
    if web.session(&headers).is_none() {
        return super::unauthorized();
    }
    let Some(path) = super::audit_log(&web).map(|p| p.to_path_buf()) else {
        return (
            StatusCode::NOT_FOUND,
            Json(serde_json::json!({"error": "this console reads no audit log"})),
        )
            .into_response();
    };
    let (filter, action) = match filters.parse() {
        Ok(parsed) => parsed,
        Err(error) => {
            return (
                StatusCode::BAD_REQUEST,
                Json(serde_json::json!({"error": error})),
            )
                .into_response();
        }
    };
    let found = tokio::task::spawn_blocking(move || scan(&path, &filter, action)).await;
    match found {
        Ok(Ok(found)) => Json(found).into_response(),
        Ok(Err(error)) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            Json(serde_json::json!({"error": error})),
        )
            .into_response(),
        Err(_) => StatusCode::INTERNAL_SERVER_ERROR.into_response(),
    }
}

fn scan(
    path: &std::path::Path,
    filter: &AuditFilter,
    action: Option<Action>,
) -> Result<Found, String> {
    let mut stats = AuditStats::default();
    let mut unreadable = 0;
    let mut newest = VecDeque::new();
    let mut reader = match read::open(path) {
        Ok(reader) => reader,
        Err(read::ReadError::Open { source, .. })
            if source.kind() == std::io::ErrorKind::NotFound =>
        {
            return Ok(Found {
                records: Vec::new(),
                stats: stats.to_json(),
                unreadable,
            });
        }
        Err(error) => return Err(error.to_string()),
    };
    while let Some(line) = reader.next_line().map_err(|error| error.to_string())? {
        let entry = match line {
            ReadLine::Entry(entry) => entry,
            ReadLine::Event(_) => continue,
            ReadLine::Unreadable(_) => {
                unreadable += 1;
                continue;
            }
        };
        if !filter.matches(&entry) || action.is_some_and(|action| entry.record.action() != action) {
            continue;
        }
        stats.add(&entry.record);
        if newest.len() == MAX_RECORDS {
            newest.pop_front();
        }
        newest.push_back(entry.text);
    }
    let records = newest
        .into_iter()
        .rev()
        .filter_map(|text| serde_json::from_str(&text).ok())
        .collect();
    Ok(Found {
        records,
        stats: stats.to_json(),
        unreadable,
    })
}
