//! Reading JSON files of a root: inside the root, within the size limit and
//! the root's byte budget.

use std::collections::HashSet;
use std::fs;
use std::io::Read;
use std::path::{Path, PathBuf};

use serde_json::Value;
use sha2::{Digest, Sha256};

use super::limits::DiscoveryLimits;
use super::warnings::Warnings;

/// Reads the files of one root and counts the bytes read.
#[derive(Debug)]
pub(crate) struct Reader<'a> {
    root: &'a Path,
    limits: &'a DiscoveryLimits,
    used: u64,
    exhausted: bool,
    consumed: HashSet<PathBuf>,
}

impl<'a> Reader<'a> {
    /// A reader for the root at `root` (canonical).
    pub(crate) fn new(root: &'a Path, limits: &'a DiscoveryLimits) -> Self {
        Self {
            root,
            limits,
            used: 0,
            exhausted: false,
            consumed: HashSet::new(),
        }
    }

    /// Whether the byte budget is spent: nothing more is read.
    pub(crate) fn exhausted(&self) -> bool {
        self.exhausted
    }

    /// `path` resolved (symlinks included), or why it is refused: it cannot
    /// be resolved, or it resolves outside the root.
    pub(crate) fn resolve_inside(&self, path: &Path) -> Result<PathBuf, String> {
        let canonical =
            fs::canonicalize(path).map_err(|error| format!("cannot resolve it: {error}"))?;
        if canonical.starts_with(self.root) {
            Ok(canonical)
        } else {
            Err(format!(
                "it resolves to {}, outside the root {}",
                canonical.display(),
                self.root.display()
            ))
        }
    }

    /// Whether the server file at `canonical` was already read.
    pub(crate) fn was_read(&self, canonical: &Path) -> bool {
        self.consumed.contains(canonical)
    }

    /// The JSON in `path` and the sha256 (hex) of the very bytes it was
    /// parsed from, or `None` after a warning naming the file: it is outside
    /// the root, not a file, too large, past the budget, unreadable or not
    /// JSON. Trust is decided on that digest, so what is trusted is exactly
    /// what was read, whatever the file holds by the time anyone looks again.
    pub(crate) fn read_json(
        &mut self,
        path: &Path,
        warnings: &mut Warnings,
    ) -> Option<(Value, String)> {
        let bytes = self.read(path, warnings)?;
        match serde_json::from_slice(&bytes) {
            Ok(value) => Some((value, hex::encode(Sha256::digest(&bytes)))),
            Err(error) => {
                warnings.push(format!("{}: invalid JSON: {error}", path.display()));
                None
            }
        }
    }

    fn read(&mut self, path: &Path, warnings: &mut Warnings) -> Option<Vec<u8>> {
        if self.exhausted {
            return None;
        }
        let canonical = match self.resolve_inside(path) {
            Ok(canonical) => canonical,
            Err(reason) => {
                warnings.push(format!("{}: refused: {reason}", path.display()));
                return None;
            }
        };
        let max_file = self.limits.max_file_bytes;
        let remaining = self.limits.max_root_bytes.saturating_sub(self.used);
        let len = match fs::metadata(&canonical) {
            Ok(metadata) if metadata.is_file() => metadata.len(),
            Ok(_) => {
                warnings.push(format!("{}: not a regular file", path.display()));
                return None;
            }
            Err(error) => {
                warnings.push(format!("{}: cannot read: {error}", path.display()));
                return None;
            }
        };
        if len > max_file {
            warnings.push(too_big(path, len, max_file));
            return None;
        }
        if len > remaining {
            return self.spend_budget(path, warnings);
        }
        let mut bytes = Vec::new();
        let read = fs::File::open(&canonical).and_then(|file| {
            file.take(max_file.min(remaining).saturating_add(1))
                .read_to_end(&mut bytes)
        });
        if let Err(error) = read {
            warnings.push(format!("{}: cannot read: {error}", path.display()));
            return None;
        }
        let read = u64::try_from(bytes.len()).unwrap_or(u64::MAX);
        self.used = self.used.saturating_add(read);
        if read > max_file {
            warnings.push(too_big(path, read, max_file));
            return None;
        }
        if read > remaining {
            return self.spend_budget(path, warnings);
        }
        self.consumed.insert(canonical);
        Some(bytes)
    }

    fn spend_budget(&mut self, path: &Path, warnings: &mut Warnings) -> Option<Vec<u8>> {
        self.exhausted = true;
        warnings.push(format!(
            "stopped before {}: the root's budget of {} bytes read is spent",
            path.display(),
            self.limits.max_root_bytes
        ));
        None
    }
}

fn too_big(path: &Path, len: u64, max: u64) -> String {
    format!(
        "{}: skipped: {len} bytes is over the {max}-byte limit",
        path.display()
    )
}
