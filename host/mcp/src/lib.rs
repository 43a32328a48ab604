//! The MCP side of gatehouse, on top of the reviewer core
//! ([`gatehouse_core`]) and the conformance kit ([`gatehouse_conformance`]):
//! `gatehouse.toml`, connections to MCP servers and the runtime that keeps
//! them current, discovery of servers in capability roots, the elicitation
//! router, the audit log, and the gateway that serves the servers upstream.
//!
//! The data flows one way: [`runtime::McpRuntime`] (connections, tool
//! catalog) → [`router::Router`] (each connection's
//! [`handler::ElicitationHandler`]) → the core's review chain → an audit
//! line ([`audit`]) → the answer back to the server; what no module decides
//! goes to the person behind the upstream session ([`gateway`]).

pub mod audit;
pub mod calls;
pub mod config;
pub mod config_file;
pub mod connection;
pub mod control;
pub mod discovery;
pub mod gateway;
pub mod handler;
pub mod import;
pub mod instance;
pub mod model;
pub mod naming;
pub mod refresh;
pub mod reload;
pub mod rescue;
pub mod router;
pub mod runtime;
pub mod server_config;
pub mod source;
mod stdio;
pub mod watch;

/// What `tracing` writes, captured for the unit tests (`tests/support/capture.rs`).
#[cfg(test)]
#[path = "../../../tests/support/capture.rs"]
mod capture;

/// The method of an elicitation request.
pub const ELICITATION_METHOD: &str = "elicitation/create";
