//! Capability roots and how run-time and configured roots combine.

use std::path::PathBuf;

use gatehouse_base::escape::Escaped;

/// The most roots used at once; extras are dropped with a warning.
pub const MAX_ROOTS: usize = 256;

/// A directory that may hold plugins, named by an id.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct CapabilityRoot {
    /// The root's id: the namespace of bare `.mcp.json` files in it and the
    /// key of its results.
    pub id: String,
    /// Where it is.
    pub path: PathBuf,
}

impl CapabilityRoot {
    /// A root `id` at `path`.
    pub fn new(id: impl Into<String>, path: impl Into<PathBuf>) -> Self {
        Self {
            id: id.into(),
            path: path.into(),
        }
    }
}

/// The roots to use: `selected` (chosen at run time) first, then
/// `configured`. Of roots sharing an id the first wins; a later one with a
/// different path is dropped with a warning naming both paths. At most
/// [`MAX_ROOTS`] are kept; the rest are dropped with one warning.
pub fn combine_roots(
    selected: &[CapabilityRoot],
    configured: &[CapabilityRoot],
) -> Vec<CapabilityRoot> {
    let mut combined: Vec<CapabilityRoot> = Vec::new();
    for root in selected.iter().chain(configured) {
        match combined.iter().find(|kept| kept.id == root.id) {
            Some(kept) if kept.path != root.path => tracing::warn!(
                "capability root `{}`: ignoring {} because the id is already used for {}",
                Escaped(&root.id),
                Escaped(&root.path.display().to_string()),
                Escaped(&kept.path.display().to_string())
            ),
            Some(_) => {}
            None => combined.push(root.clone()),
        }
    }
    if combined.len() > MAX_ROOTS {
        tracing::warn!(
            "{} capability roots dropped: at most {MAX_ROOTS} are used",
            combined.len() - MAX_ROOTS
        );
        combined.truncate(MAX_ROOTS);
    }
    combined
}
