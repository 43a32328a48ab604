//! gatehouse's end-to-end tests in one test binary (the pattern of wasmtime's
//! `tests/all`): one build and one link of wasmtime and rmcp for all of them.
//! Their shared helpers are the `gatehouse-tests` library (`tests/support/`).
//!
//! `hostile_guests` and `hostile_servers` are binaries of their own: they
//! measure this process's resident memory, which other tests running in the
//! same process would disturb.

mod cited_tests;
mod conformance_kit;
mod contract_versions;
mod crate_graph;
mod fuzz_corpus;
mod guardian_cases;
mod load;
mod mcp_runtime;
mod model_capability;
mod model_provider;
mod model_routing;
mod module_graph;
mod module_limits;
mod oci;
mod perf_map;
mod reload;
mod router;
mod sandbox_failures;
mod sessions;
