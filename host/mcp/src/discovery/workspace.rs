//! Restricted mode: roots must lie inside an allowed workspace directory.

use std::fs;
use std::path::{Path, PathBuf};

/// Whether `canonical` (a root's canonical path) is inside one of `allowed`.
/// An allowed directory that cannot be resolved allows nothing (fail
/// closed).
pub(crate) fn is_allowed(canonical: &Path, allowed: &[PathBuf]) -> bool {
    allowed
        .iter()
        .any(|dir| fs::canonicalize(dir).is_ok_and(|dir| canonical.starts_with(dir)))
}
