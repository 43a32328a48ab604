//! The walk over one root: depth first, in sorted order, within the limits.

use std::ffi::OsString;
use std::fs;
use std::path::{Path, PathBuf};

use super::error::DiscoveryError;
use super::files::Reader;
use super::limits::DiscoveryLimits;
use super::roots::CapabilityRoot;
use super::servers::DiscoveredServer;
use super::sources::visit;
use super::warnings::Warnings;

/// Directory names never walked into (besides hidden ones).
const SKIPPED: [&str; 2] = ["node_modules", "target"];

/// A directory waiting to be visited.
struct Pending {
    dir: PathBuf,
    depth: usize,
    inherited: Option<String>,
}

/// The servers under `canonical` (the root's canonical path), in walk order.
/// Only failing to list the root itself is an error.
pub(crate) fn walk(
    root: &CapabilityRoot,
    canonical: &Path,
    limits: &DiscoveryLimits,
    warnings: &mut Warnings,
) -> Result<Vec<DiscoveredServer>, DiscoveryError> {
    let mut reader = Reader::new(canonical, limits);
    let mut found = Vec::new();
    let mut dirs = 0usize;
    let mut entries = 0usize;
    let mut stack = vec![Pending {
        dir: canonical.to_path_buf(),
        depth: 0,
        inherited: None,
    }];
    while let Some(pending) = stack.pop() {
        if dirs >= limits.max_dirs {
            warnings.push(format!(
                "stopped at {}: the limit of {} directories is reached",
                pending.dir.display(),
                limits.max_dirs
            ));
            break;
        }
        dirs += 1;
        let visited = visit(
            &pending.dir,
            pending.inherited.as_deref(),
            &root.id,
            &mut reader,
            warnings,
        );
        found.extend(visited.servers);
        if reader.exhausted() {
            break;
        }
        if pending.depth >= limits.max_depth {
            continue;
        }
        let children = match subdirectories(&pending.dir, &mut entries, limits, warnings) {
            Ok(Some(children)) => children,
            Ok(None) => break,
            Err(error) if pending.depth == 0 => {
                return Err(DiscoveryError::from_io(&root.id, &root.path, &error));
            }
            Err(error) => {
                warnings.push(format!("{}: cannot list: {error}", pending.dir.display()));
                continue;
            }
        };
        stack.extend(children.into_iter().rev().map(|name| Pending {
            dir: pending.dir.join(name),
            depth: pending.depth + 1,
            inherited: visited.inherited.clone(),
        }));
    }
    Ok(found)
}

/// The names of `dir`'s subdirectories to walk, sorted; `None` after a
/// warning when the entry limit is reached. Symlinks are not followed.
fn subdirectories(
    dir: &Path,
    entries: &mut usize,
    limits: &DiscoveryLimits,
    warnings: &mut Warnings,
) -> std::io::Result<Option<Vec<OsString>>> {
    let mut children = Vec::new();
    for entry in fs::read_dir(dir)? {
        if *entries >= limits.max_entries {
            warnings.push(format!(
                "stopped in {}: the limit of {} directory entries is reached",
                dir.display(),
                limits.max_entries
            ));
            return Ok(None);
        }
        *entries += 1;
        let entry = match entry {
            Ok(entry) => entry,
            Err(error) => {
                warnings.push(format!("{}: cannot list: {error}", dir.display()));
                continue;
            }
        };
        let is_dir = entry.file_type().is_ok_and(|kind| kind.is_dir());
        let name = entry.file_name();
        if is_dir && walked(&name) {
            children.push(name);
        }
    }
    children.sort();
    Ok(Some(children))
}

/// Whether a directory named `name` is walked into.
fn walked(name: &OsString) -> bool {
    let bytes = name.as_encoded_bytes();
    bytes.first() != Some(&b'.') && !SKIPPED.iter().any(|skipped| name == skipped)
}
