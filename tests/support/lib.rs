//! Helpers for the end-to-end tests: where the built guests and the case
//! files are, and a sandbox with a module loaded.
//!
//! Guests are built by `.ci/build-guests` into
//! `$CARGO_TARGET_DIR/wasm32-wasip2/guest/` (default `target/`);
//! `GATEHOUSE_GUESTS_DIR` points elsewhere.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use gatehouse_core::sandbox::{Limits, ReviewerModule, Sandbox};

pub mod load;
pub mod model_stub;
pub mod oci_registry;
pub mod raw_http;
pub mod scripted_model;
mod table_bomb;
pub use table_bomb::table_bomb_component;
mod tool_result;
pub use tool_result::result_text;
mod compiled;
pub use compiled::{cached_digests, module_digest};

/// The workspace root.
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from(".."))
}

/// The directory holding the built guest components.
pub fn guests_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("GATEHOUSE_GUESTS_DIR") {
        return PathBuf::from(dir);
    }
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace_root().join("target"));
    target.join("wasm32-wasip2").join("guest")
}

/// The path of a built guest, by crate name with `-` as `_`
/// (`gatehouse_guardian`, `test_guest_spin`, ...). Panics with the command to
/// run when it has not been built.
pub fn guest(name: &str) -> PathBuf {
    let path = guests_dir().join(format!("{name}.wasm"));
    assert!(
        path.exists(),
        "{} is missing: build the guests first with `.ci/build-guests`",
        path.display()
    );
    path
}

/// The case directory of a conformance suite (`guardian`, ...): the data the
/// kit (`host/conformance`) owns and embeds.
pub fn cases_dir(suite: &str) -> PathBuf {
    workspace_root()
        .join("host")
        .join("conformance")
        .join("suites")
        .join(suite)
}

/// A sandbox with default limits.
pub fn sandbox() -> Sandbox {
    sandbox_with(Limits::default())
}

/// A sandbox with the given limits.
pub fn sandbox_with(limits: Limits) -> Sandbox {
    Sandbox::new(limits).unwrap_or_else(|error| panic!("cannot create the sandbox: {error}"))
}

/// An approval request for `read_file` on the `docs` server, as Codex asks
/// for one (request id 1): the request most sandbox tests review.
pub fn approval_request() -> gatehouse_core::request::ReviewRequest {
    let params = gatehouse_core::elicitation::ElicitationParams::from_wire(&serde_json::json!({
        "message": "Allow read_file?",
        "requestedSchema": {"type": "object", "properties": {}},
        "_meta": {"codex_request_type": "approval_request",
                  "codex_approval_kind": "mcp_tool_call", "tool_name": "read_file"}
    }))
    .unwrap_or_else(|error| panic!("the approval request is invalid: {error}"));
    gatehouse_core::request::ReviewRequest::new(
        params,
        gatehouse_core::context::ReviewContext::new(
            "docs",
            gatehouse_core::elicitation::RequestId::Number(1),
        ),
    )
}

/// Loads a built guest into `sandbox`.
pub fn load(sandbox: &Sandbox, name: &str) -> Arc<ReviewerModule> {
    let path = guest(name);
    Arc::new(
        sandbox
            .load_file(&path, None)
            .unwrap_or_else(|error| panic!("cannot load {name}: {error}")),
    )
}

/// The example MCP server binary (`examples/servers`, built by
/// `cargo test --workspace` or `cargo build -p gatehouse-example-servers`).
pub fn demo_server() -> PathBuf {
    example_server("demo-server")
}

/// The misbehaving MCP server binary (`examples/servers`' `hostile-server`,
/// raw JSON-RPC on stdio; built like [`demo_server`]).
pub fn hostile_server() -> PathBuf {
    example_server("hostile-server")
}

/// A binary of `examples/servers` in the debug target directory; panics with
/// the command to run when it has not been built.
fn example_server(name: &str) -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace_root().join("target"));
    let path = target.join("debug").join(name);
    assert!(
        path.exists(),
        "{} is missing: run `cargo build -p gatehouse-example-servers`",
        path.display()
    );
    path
}

/// A `demo-server` serving streamable HTTP on a free loopback port; killed
/// when dropped.
pub struct HttpServer {
    child: std::process::Child,
    /// The MCP endpoint, `http://127.0.0.1:PORT/mcp`.
    pub url: String,
}

impl HttpServer {
    /// Starts one named `name`.
    pub fn start(name: &str) -> HttpServer {
        use std::io::BufRead;
        let mut child = std::process::Command::new(demo_server())
            .args(["--name", name, "--http", "127.0.0.1:0"])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("demo-server starts");
        let stdout = child.stdout.take().expect("stdout");
        let mut line = String::new();
        std::io::BufReader::new(stdout)
            .read_line(&mut line)
            .expect("a listening line");
        let url = line
            .trim()
            .strip_prefix("listening on ")
            .unwrap_or_else(|| panic!("unexpected first line {line:?}"))
            .to_owned();
        HttpServer { child, url }
    }
}

impl Drop for HttpServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The records of an in-memory audit log, parsed.
pub fn audit_lines(audit: &gatehouse_audit::AuditLog) -> Vec<serde_json::Value> {
    audit
        .lines()
        .iter()
        .map(|line| serde_json::from_str(line).expect("an audit record is one JSON line"))
        .collect()
}
