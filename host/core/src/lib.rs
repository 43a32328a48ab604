//! gatehouse: review MCP elicitations with sandboxed WebAssembly components.
//!
//! The data flows one way:
//! [`elicitation`] (what the server sent) + [`context`] (what the host knows)
//! → [`request::ReviewRequest`] → [`chain::Chain`] → [`sandbox`] (one fresh
//! instance per module per review) → [`outcome`] (checked) → [`answer`] (the
//! MCP `ElicitResult`). See `ARCHITECTURE.md` for the map and the invariants.
//!
//! ```no_run
//! use std::sync::Arc;
//! use gatehouse_core::chain::{Chain, ChainLink};
//! use gatehouse_core::context::ReviewContext;
//! use gatehouse_core::elicitation::{ElicitationParams, RequestId};
//! use gatehouse_core::request::ReviewRequest;
//! use gatehouse_core::sandbox::{Limits, Sandbox};
//!
//! let sandbox = Sandbox::new(Limits::default())?;
//! let guardian = Arc::new(sandbox.load_file("gatehouse_guardian.wasm", None)?);
//! let chain = Chain::new(vec![ChainLink::new(guardian)]);
//! let params = ElicitationParams::from_wire(&serde_json::json!({
//!     "message": "Allow read_file?",
//!     "requestedSchema": {"type": "object", "properties": {}},
//!     "_meta": {"codex_request_type": "approval_request",
//!               "codex_approval_kind": "mcp_tool_call", "tool_name": "read_file"}
//! }))?;
//! let request = ReviewRequest::new(params, ReviewContext::new("files", RequestId::Number(1)));
//! let report = chain.review(&request);
//! println!("{:?}", report.answer().map(|answer| answer.to_wire()));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

pub mod answer;
pub mod chain;
pub mod config;
pub mod context;
pub mod contract;
pub mod elicitation;
pub mod escape;
pub mod failure;
pub mod inspect;
pub mod outcome;
pub mod private_fs;
pub mod request;
pub mod sandbox;
pub mod schema;

/// What `tracing` writes, captured for the unit tests: one helper shared with
/// the other crates' tests (`tests/support/capture.rs`).
#[cfg(test)]
#[path = "../../../tests/support/capture.rs"]
mod capture;
