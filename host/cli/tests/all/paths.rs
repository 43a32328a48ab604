//! Where the integration tests find the workspace and what the build made:
//! the target directory, the demo-server and the built guests.
//!
//! A module of the gathered test binary `host/cli/tests/all`, shared by its
//! tests.

use std::path::PathBuf;

/// The workspace root.
pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The target directory: `CARGO_TARGET_DIR`, else `target` in the workspace.
pub fn target() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| root().join("target"), PathBuf::from)
}

/// `path`, failing the test if it is missing with `build`, what makes it.
pub fn existing(path: PathBuf, build: &str) -> PathBuf {
    assert!(path.exists(), "{} is missing: {build}", path.display());
    path
}

/// The demo MCP server (`examples/servers`).
pub fn demo_server() -> PathBuf {
    existing(
        target().join("debug/demo-server"),
        "run `cargo build -p gatehouse-example-servers`",
    )
}

/// A built guest (see `.ci/build-guests`): `<name>.wasm` in
/// `GATEHOUSE_GUESTS_DIR`, else in `wasm32-wasip2/guest` of the target
/// directory.
/// `hostile-server`, built with the workspace.
pub fn hostile_server() -> PathBuf {
    existing(
        target().join("debug/hostile-server"),
        "run `cargo build -p gatehouse-example-servers`",
    )
}

pub fn guest(name: &str) -> PathBuf {
    let dir = std::env::var_os("GATEHOUSE_GUESTS_DIR")
        .map_or_else(|| target().join("wasm32-wasip2/guest"), PathBuf::from);
    existing(dir.join(format!("{name}.wasm")), "run .ci/build-guests")
}

/// The `XDG_CACHE_HOME` of the tests' `gatehouse` runs: under the target
/// directory, so that `inspect`, `conformance` and `review` share compiled modules
/// across tests without writing into the user's own cache.
pub fn cache_home() -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("xdg-cache")
}

/// Runs the built `gatehouse` with `args` from the workspace root.
pub fn gatehouse(args: &[&str]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_gatehouse"))
        .args(args)
        .env("XDG_CACHE_HOME", cache_home())
        .current_dir(root())
        .output()
        .expect("gatehouse runs")
}

/// Spawns `command` with its stdout piped and returns the child and what its
/// first stdout line says after `prefix` (a server's `listening on URL`);
/// `starts` says what failed to start, and how to fix it, if it cannot.
pub fn spawn_listening(
    command: &mut std::process::Command,
    prefix: &str,
    starts: &str,
) -> (std::process::Child, String) {
    use std::io::BufRead;
    let mut child = command
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap_or_else(|error| panic!("{starts}: {error}"));
    let stdout = child.stdout.take().expect("stdout");
    let mut line = String::new();
    std::io::BufReader::new(stdout)
        .read_line(&mut line)
        .expect("the first line");
    let said = line
        .trim()
        .strip_prefix(prefix)
        .unwrap_or_else(|| panic!("unexpected first line {line:?}"))
        .to_owned();
    (child, said)
}
