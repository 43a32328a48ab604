//! The audit page: the records of the audit log every instance on the
//! config writes, newest first, filtered like `gatehouse audit` (server,
//! who decided, action, since), with counts, and one record in full.
//!
//! The log is read on each request, on a blocking thread, and at most
//! [`MAX_RECORDS`] matching records are returned (the newest).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use axum::Json;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::Web;
use gatehouse_audit::read::{self, ReadLine};

/// The most records one request returns.
pub const MAX_RECORDS: usize = 200;

/// The audit view's `main`.
pub(super) const MAIN: &str = r#"<h1>Audit log</h1>
<form id="audit-filters" class="filters">
<label>Server <input name="server" id="filter-server"></label>
<label>Decided by <select name="decided_by" id="filter-decided-by"><option value="">any</option><option>guest</option><option>person</option><option>policy</option><option>failure</option><option>unhandled</option></select></label>
<label>Action <select name="action" id="filter-action"><option value="">any</option><option>accept</option><option>decline</option><option>cancel</option><option>error</option></select></label>
<label>Since (minutes) <input name="since_minutes" id="filter-since" type="number" min="1"></label>
<button type="submit">Filter</button>
</form>
<p id="audit-stats" class="muted"></p>
<table id="audit-records"><thead><tr><th scope="col">Time</th><th scope="col">Server</th><th scope="col">Mode</th><th scope="col">Decided by</th><th scope="col">Action</th><th scope="col">Reason</th><th scope="col">Record</th></tr></thead><tbody></tbody></table>
<h2>Record</h2>
<pre id="audit-record" class="record" tabindex="0">Choose a record.</pre>"#;

/// The filters.
#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Filters {
    server: Option<String>,
    decided_by: Option<String>,
    action: Option<String>,
    since_minutes: Option<u64>,
}

#[derive(Serialize)]
struct Found {
    /// The matching records, newest first (each as written in the log).
    records: Vec<Value>,
    /// Matching records in all.
    matched: usize,
    /// Counts of the matching records.
    by_decided_by: BTreeMap<String, usize>,
    by_action: BTreeMap<String, usize>,
    by_server: BTreeMap<String, usize>,
    /// Lines that were not records.
    unreadable: usize,
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
    let found = tokio::task::spawn_blocking(move || scan(&path, &filters)).await;
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

fn scan(path: &std::path::Path, filters: &Filters) -> Result<Found, String> {
    let since = filters.since_minutes.and_then(|minutes| {
        SystemTime::now().checked_sub(Duration::from_secs(minutes.saturating_mul(60)))
    });
    let mut found = Found {
        records: Vec::new(),
        matched: 0,
        by_decided_by: BTreeMap::new(),
        by_action: BTreeMap::new(),
        by_server: BTreeMap::new(),
        unreadable: 0,
    };
    let mut reader = match read::open(path) {
        Ok(reader) => reader,
        Err(read::ReadError::Open { source, .. })
            if source.kind() == std::io::ErrorKind::NotFound =>
        {
            return Ok(found);
        }
        Err(error) => return Err(error.to_string()),
    };
    let mut newest = std::collections::VecDeque::new();
    while let Some(line) = reader.next_line().map_err(|error| error.to_string())? {
        let entry = match line {
            ReadLine::Entry(entry) => entry,
            ReadLine::Event(_) => continue,
            ReadLine::Unreadable(_) => {
                found.unreadable += 1;
                continue;
            }
        };
        let record = &entry.record;
        let decided_by = serde_json::to_value(record.decided_by)
            .ok()
            .and_then(|v| v.as_str().map(str::to_owned))
            .unwrap_or_default();
        let action = record.action().name().to_owned();
        let keep = since.is_none_or(|since| entry.time >= since)
            && filters
                .server
                .as_deref()
                .is_none_or(|s| s.is_empty() || s == record.server)
            && filters
                .decided_by
                .as_deref()
                .is_none_or(|d| d.is_empty() || d == decided_by)
            && filters
                .action
                .as_deref()
                .is_none_or(|a| a.is_empty() || a == action);
        if !keep {
            continue;
        }
        found.matched += 1;
        *found.by_decided_by.entry(decided_by).or_default() += 1;
        *found.by_action.entry(action).or_default() += 1;
        *found.by_server.entry(record.server.clone()).or_default() += 1;
        if newest.len() == MAX_RECORDS {
            newest.pop_front();
        }
        newest.push_back(entry.text);
    }
    found.records = newest
        .into_iter()
        .rev()
        .filter_map(|text| serde_json::from_str(&text).ok())
        .collect();
    Ok(found)
}
