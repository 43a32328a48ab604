//! The reference reviewer: Codex's Guardian review of MCP elicitations as a
//! gatehouse guest.
//!
//! [`logic::review`] is the decision, in plain Rust over [`input::Input`]; the
//! `component` module (built only for `wasm32`) adapts the WIT contract to it.
//! The same logic links natively, which the host's benchmarks use as the
//! native baseline.

pub mod config;
pub mod input;
pub mod logic;
mod meta;

#[cfg(target_arch = "wasm32")]
mod component;

/// The module's name in `describe`.
pub const NAME: &str = "guardian";
/// What the module claims: the conformance kit runs the `guardian` suite on
/// modules that claim `guardian-compatible`.
pub const CLAIMS: &[&str] = &["guardian-compatible", "stateless"];
