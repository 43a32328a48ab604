//! Helpers for the end-to-end tests: where the built guests and the case
//! files are, and a sandbox with a module loaded.
//!
//! Guests are built by `.ci/build-guests` into
//! `$CARGO_TARGET_DIR/wasm32-wasip2/guest/` (default `target/`);
//! `GATEHOUSE_GUESTS_DIR` points elsewhere.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use gatehouse::sandbox::{Limits, ReviewerModule, Sandbox};

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

/// The conformance case directory of a suite (`guardian`, ...).
pub fn cases_dir(suite: &str) -> PathBuf {
    workspace_root()
        .join("tests")
        .join("conformance")
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

/// Loads a built guest into `sandbox`.
pub fn load(sandbox: &Sandbox, name: &str) -> Arc<ReviewerModule> {
    let path = guest(name);
    Arc::new(
        sandbox
            .load_file(&path, None)
            .unwrap_or_else(|error| panic!("cannot load {name}: {error}")),
    )
}
