//! The gateway of gatehouse, on top of the reviewer core
//! ([`gatehouse_core`]), the MCP runtime ([`gatehouse_mcp`]), the audit log
//! ([`gatehouse_audit`]) and the models ([`gatehouse_models`]): what
//! `gatehouse serve` is, as a library.
//!
//! It serves the runtime's servers to upstream clients ([`Gateway`], over
//! stdio or [`http`]), ties each elicitation to the upstream call it belongs
//! to ([`calls`]), routes it through the review chain ([`router`]), writes
//! its audit line, and puts what no module decides in front of the person
//! behind the upstream session ([`Upstream`]). `gatehouse.toml` ([`config`],
//! followed as it settles: [`config_file`]) says what runs; [`reload`]
//! swaps a checked chain in; [`control`] is the socket `gatehouse reload`
//! talks to.
//!
//! The data flows one way: the runtime's connections hand elicitations to
//! the [`router::Router`] (their
//! [`ElicitationHandler`](gatehouse_mcp::handler::ElicitationHandler)) →
//! the core's review chain → an audit line → the answer back to the server;
//! what no module decides goes to the person ([`Upstream`]).

pub mod calls;
pub mod catalog;
pub mod component;
pub mod config;
pub mod config_file;
pub mod console_status;
pub mod control;
mod forward;
pub mod http;
pub mod instance;
pub mod reload;
mod rounds;
pub mod router;
mod server;
pub mod source;
pub mod stdio;
pub mod telemetry;
pub mod trace;
mod upstream;

pub use forward::Forwarder;
pub use rounds::{MAX_PARKED, PARKED_FOR_AT_MOST};
pub use server::{CATALOG_SETTLED, CATALOG_WAIT, DEFAULT_MAX_CALLS_PER_SESSION, Gateway};
pub use upstream::{
    DEFAULT_MAX_PENDING_PER_SESSION, REMEMBERED_URL_ELICITATIONS, SERVER_META_KEY, Upstream,
    forwarded_params,
};

/// What `tracing` writes, captured for the unit tests (`tests/support/capture.rs`).
#[cfg(test)]
#[path = "../../../tests/support/capture.rs"]
mod capture;
