//! How much of a root one discovery may look at.

/// Bounds on one root's walk. Reaching the directory or entry limit, or the
/// byte budget, stops the walk with a warning; what was found is kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DiscoveryLimits {
    /// Directory levels below the root that are visited (the root is 0).
    pub max_depth: usize,
    /// Directories visited, the root included.
    pub max_dirs: usize,
    /// Directory entries looked at.
    pub max_entries: usize,
    /// The largest manifest or server file read; larger ones are skipped.
    pub max_file_bytes: u64,
    /// Total bytes read from one root.
    pub max_root_bytes: u64,
}

impl Default for DiscoveryLimits {
    fn default() -> Self {
        Self {
            max_depth: 6,
            max_dirs: 2_000,
            max_entries: 20_000,
            max_file_bytes: 1024 * 1024,
            max_root_bytes: 16 * 1024 * 1024,
        }
    }
}
