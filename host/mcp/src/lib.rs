//! The MCP side of gatehouse, on top of the reviewer core
//! ([`gatehouse_core`]) and the conformance kit ([`gatehouse_conformance`]):
//! `gatehouse.toml`, connections to MCP servers and the runtime that keeps
//! them current, discovery of servers in capability roots, the elicitation
//! router, the audit log, and the gateway that serves the servers upstream.
//!
//! The data flows one way: [`runtime::McpRuntime`] (connections, tool
//! catalog) → [`router::Router`] (each connection's
//! [`connection::ElicitationHandler`]) → the core's review chain → an audit
//! line ([`audit`]) → the answer back to the server; what no module decides
//! goes to the person behind the upstream session ([`gateway`]).

pub mod audit;
pub mod calls;
pub mod config;
pub mod connection;
pub mod control;
pub mod discovery;
pub mod gateway;
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

/// The text parts of a tool result, joined by newlines (what a person reads).
///
/// ```
/// use rmcp::model::{CallToolResult, ContentBlock};
/// let result = CallToolResult::success(vec![ContentBlock::text("a"), ContentBlock::text("b")]);
/// assert_eq!(gatehouse_mcp::result_text(&result), "a\nb");
/// ```
pub fn result_text(result: &rmcp::model::CallToolResult) -> String {
    let wire = serde_json::to_value(result).unwrap_or_default();
    wire["content"]
        .as_array()
        .map(|parts| {
            parts
                .iter()
                .filter_map(|part| part["text"].as_str())
                .collect::<Vec<_>>()
                .join("\n")
        })
        .unwrap_or_default()
}
