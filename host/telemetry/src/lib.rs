//! gatehouse's operational telemetry: what an operator scrapes and alerts
//! on.
//!
//! - [`families`]: every metric, as data (name, help, unit, kind, label
//!   names; labels only ever take bounded values).
//! - [`series`]: one process's numbers ([`series::Metrics`]) and their
//!   [`series::Snapshot`], bounded whatever a caller passes.
//! - [`totals`]: a long-running process's sum over the instances that
//!   report to it, which never goes down when an instance ends.
//! - [`exposition`]: a snapshot as the OpenMetrics text Prometheus scrapes.
//! - [`health`]: liveness and readiness, as `/healthz` and `/readyz` report them.
//! - [`traces`]: the `[traces]` section and the hook that carries trace
//!   context in and out of MCP `_meta` (the exporter is the binary's).
//!
//! The reviewer core does not depend on it (an embedder links no
//! exporter): the gateway turns the core's reports and its audit records
//! into these series.
#![deny(missing_docs)]

pub mod endpoint;
pub mod exposition;
pub mod families;
pub mod health;
pub mod series;
pub mod totals;
pub mod traces;
