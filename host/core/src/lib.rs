//! gatehouse-core: review MCP elicitations with sandboxed WebAssembly
//! reviewer components. The runtime an agent, an IDE or a CI runner embeds to
//! load reviewer plugins itself. It knows no MCP transport and parses no
//! configuration file; the caller brings the elicitation and its context.
//!
//! The data flows one way:
//! [`elicitation`] (what the server sent) + [`context`] (what the host knows)
//! → [`request::ReviewRequest`] → [`chain::Chain`] → [`sandbox`] (one fresh
//! instance per module per review) → [`outcome`] (checked) → [`answer`] (the
//! MCP `ElicitResult`). See `ARCHITECTURE.md` for the map and the invariants.
//!
//! The types an embedder uses, in the order it meets them:
//!
//! - [`sandbox::Sandbox`]: the engine, once per process
//!   ([`Sandbox::builder`](sandbox::Sandbox::builder), with
//!   [`sandbox::Limits`]);
//! - [`sandbox::ReviewerModule`]: a loaded reviewer
//!   ([`Sandbox::load_file`](sandbox::Sandbox::load_file));
//! - [`chain::Chain`] of [`chain::ChainLink`]s: modules in order, each with
//!   its configuration;
//! - [`request::ReviewRequest`]: [`elicitation::ElicitationParams`] as the
//!   server sent them plus a [`context::ReviewContext`];
//! - [`chain::ChainReport`]: what [`Chain::review`](chain::Chain::review)
//!   returns: each module's [`sandbox::ModuleReport`], the
//!   [`chain::Verdict`], and the [`answer::ElicitAnswer`] to send back.
//!
//! [`config::ReviewConfig`] is the `[review]` section of `gatehouse.toml` as
//! serde types, for hosts that want the same configuration; [`escape`] makes
//! guest and server text safe to print; [`inspect`] tells what a component
//! is. Errors name the file, field or module and say what to do.
//!
//! ```
//! use gatehouse_core::chain::{Chain, ChainLink};
//! use gatehouse_core::context::ReviewContext;
//! use gatehouse_core::elicitation::{ElicitationParams, RequestId};
//! use gatehouse_core::request::ReviewRequest;
//! use gatehouse_core::sandbox::{Limits, Sandbox};
//! # let guests = std::env::var_os("CARGO_TARGET_DIR").map_or_else(
//! #     || std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target"),
//! #     std::path::PathBuf::from,
//! # ).join("wasm32-wasip2/guest");
//! # assert!(guests.exists(), "{} is missing: run .ci/build-guests", guests.display());
//! # let guardian_wasm = guests.join("gatehouse_guardian.wasm");
//!
//! // Once per process: the engine, and the reviewers loaded into it.
//! let sandbox = Sandbox::new(Limits::default())?;
//! let guardian = sandbox.load_file(&guardian_wasm, None)?;
//! let chain = Chain::new(vec![
//!     ChainLink::new(guardian).with_config(r#"{"allow": [{"server": "docs", "tool": "read_*"}]}"#),
//! ]);
//!
//! // Per elicitation: what the server sent, who sent it, the review.
//! let params = ElicitationParams::from_wire(&serde_json::json!({
//!     "message": "Allow the agent to run read_file?",
//!     "requestedSchema": {"type": "object", "properties": {}},
//!     "_meta": {"codex_request_type": "approval_request",
//!               "codex_approval_kind": "mcp_tool_call", "tool_name": "read_file"}
//! }))?;
//! let request = ReviewRequest::new(params, ReviewContext::new("docs", RequestId::Number(1)));
//! let report = chain.review(&request);
//!
//! // `None` would mean every module deferred: ask the person.
//! let answer = report.answer().expect("the guardian decides");
//! assert_eq!(answer.to_wire()["action"], "accept");
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

#![deny(missing_docs)]

pub mod answer;
pub mod chain;
pub mod config;
pub mod context;
pub mod contract;
pub mod elicitation;
pub mod failure;
pub mod inspect;
pub mod model;
pub mod model_budget;
pub mod outcome;
pub mod request;
pub mod sandbox;
pub mod schema;

/// Untrusted text made safe to print: [`gatehouse_base::escape`], the
/// same module under the core's name.
pub use gatehouse_base::escape;
/// Files private to gatehouse's user: [`gatehouse_base::private_fs`], the
/// same module under the core's name.
pub use gatehouse_base::private_fs;

/// What `tracing` writes, captured for the unit tests: one helper shared with
/// the other crates' tests (`tests/support/capture.rs`).
#[cfg(test)]
#[path = "../../../tests/support/capture.rs"]
mod capture;
