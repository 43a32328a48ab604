//! The MCP runtime of gatehouse: the servers it connects to. Their
//! configuration (Codex-compatible `[mcp_servers.*]` tables:
//! [`server_config`]), the connections (stdio and streamable HTTP:
//! [`connection`]), the runtime that keeps them current with a coalesced,
//! cancel-safe refresh ([`runtime`], [`refresh`]), servers discovered in
//! capability roots and the trust they need to run ([`discovery`]), the
//! import of an MCP client's own config ([`import`]), and file watching
//! ([`watch`]).
//!
//! It knows no reviewer, sandbox or wasmtime (`tests/all/crate_graph.rs`
//! keeps its dependency tree free of them): what a server asks of the person
//! goes to the [`handler::ElicitationHandler`] its owner plugs in (the
//! gateway's router), and what a request is sent on behalf of is the
//! owner's [`on_behalf::CallKey`].

pub mod connection;
pub mod discovery;
pub mod handler;
pub mod import;
pub mod naming;
pub mod on_behalf;
pub mod refresh;
pub mod rescue;
pub mod runtime;
pub mod server_config;
pub mod watch;

/// What `tracing` writes, captured for the unit tests (`tests/support/capture.rs`).
#[cfg(test)]
#[path = "../../../tests/support/capture.rs"]
mod capture;

/// The method of an elicitation request.
pub const ELICITATION_METHOD: &str = "elicitation/create";
