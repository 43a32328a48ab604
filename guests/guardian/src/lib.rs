//! The reference reviewer: Codex's Guardian review of MCP elicitations as a
//! gatehouse guest.
//!
//! [`logic::review`] is the decision, in plain Rust over [`input::Input`]; the
//! `component` module (built only for `wasm32`) adapts the WIT contract to it.
//! The same logic links natively, which the host's benchmarks use as the
//! native baseline. [`model_review`] holds the model review of contract 0.2
//! (the prompt, the planned action, reading the model's answer), also in
//! plain Rust, and [`logic::review_with_model`] the review that asks a model.
//!
//! [`component_glue!`] converts between the contract's types and these, for
//! every component built on this logic: the guardian's own and the model
//! guardian's (`guests/model-guardian`). The model guardian compiles the
//! modules below from these sources (all but `component`); keep its module
//! list in step when adding one.

pub mod config;
mod glue;
pub mod input;
pub mod logic;
mod meta;
pub mod model_review;

#[cfg(target_arch = "wasm32")]
mod component;

/// The module's name in `describe`.
pub const NAME: &str = "guardian";
/// What the module claims: the conformance kit runs the `guardian` suite on
/// modules that claim `guardian-compatible`.
pub const CLAIMS: &[&str] = &["guardian-compatible", "stateless"];
