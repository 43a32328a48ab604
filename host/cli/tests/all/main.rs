//! The `gatehouse` binary's end-to-end tests, in one test binary (the
//! pattern of wasmtime's `tests/all`): each module drives the built
//! `gatehouse` (`CARGO_BIN_EXE_gatehouse`) or the crates behind it, and they
//! share one build and one link of wasmtime and rmcp.

mod browser;
#[path = "../../../../tests/support/capture.rs"]
mod capture;
#[path = "../../../../tests/support/compiled.rs"]
mod compiled;
mod http_gateway;
// Shared with tests/all, whose provider tests use all of it.
#[allow(dead_code)]
#[path = "../../../../tests/support/model_stub.rs"]
mod model_stub;
// Shared with tests/all, whose registry tests use all of it.
#[allow(dead_code)]
#[path = "../../../../tests/support/oci_registry.rs"]
mod oci_registry;
mod paths;
#[path = "../../../../tests/support/tool_result.rs"]
mod tool_result;

mod audit;
mod authoring_cache;
mod calls_in_flight;
mod cli;
mod client_lifecycle;
mod clients;
mod codex_parity;
mod compile_cache;
mod console;
mod console_browser;
mod console_support;
mod discovery;
mod faults;
mod first_chain;
mod gateway;
mod gateway_http;
mod http_streams;
mod init;
mod model_cli;
mod model_gateway;
mod modules;
mod new;
mod protocol_2026;
mod resources;
mod serve_control;
mod shadow;
mod telemetry;
mod templates;
mod traces;
mod untrusted_text;
mod waiting;
