//! What every gatehouse crate shares, and nothing more: text someone else
//! chose made safe to print ([`escape`]) or cut to a bound ([`cut`]), files
//! private to the user gatehouse runs as ([`private_fs`]), the one
//! definition of a percentile ([`percentile`]), the one rule for a
//! loopback address ([`loopback`]), and the target and attribute rule of
//! trace spans ([`trace`]).
//!
//! It sits below everything else (the reviewer core re-exports [`escape`]
//! and [`private_fs`] as its own), so it links no wasmtime, no MCP and no
//! async runtime: `tests/all/crate_graph.rs` keeps it that way.
#![deny(missing_docs)]

pub mod cut;
pub mod escape;
pub mod loopback;
pub mod percentile;
pub mod private_fs;
pub mod trace;
