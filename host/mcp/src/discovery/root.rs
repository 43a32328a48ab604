//! One root's discovery: the root checked, walked, and its servers named
//! uniquely.

use std::collections::HashMap;
use std::fs;
use std::path::{Path, PathBuf};

use super::error::DiscoveryError;
use super::limits::DiscoveryLimits;
use super::roots::CapabilityRoot;
use super::servers::DiscoveredServer;
use super::walk::walk;
use super::warnings::Warnings;
use super::workspace::is_allowed;
use gatehouse_base::escape::Escaped;

/// What one root yielded.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct RootDiscovery {
    /// Its servers, in walk order, names unique.
    pub servers: Vec<DiscoveredServer>,
    /// What was skipped or refused, and why.
    pub warnings: Vec<String>,
}

/// Discovers the servers under `root`.
///
/// ```
/// use gatehouse_mcp::discovery::{CapabilityRoot, DiscoveryLimits, discover_root};
/// let dir = tempfile::tempdir()?;
/// std::fs::write(dir.path().join(".mcp.json"), r#"{"mcpServers": {"files": {"command": "srv"}}}"#)?;
/// let found = discover_root(&CapabilityRoot::new("local", dir.path()), &DiscoveryLimits::default())?;
/// assert_eq!(found.servers[0].name, "local__files");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn discover_root(
    root: &CapabilityRoot,
    limits: &DiscoveryLimits,
) -> Result<RootDiscovery, DiscoveryError> {
    let canonical = canonicalize(root)?;
    require_directory(root, &canonical)?;
    discover_open(root, &canonical, limits)
}

/// Like [`discover_root`], in restricted mode: a root whose canonical path is
/// not inside one of `allowed` is refused with
/// [`DiscoveryError::OutsideWorkspace`] and a warning.
pub fn discover_root_within(
    root: &CapabilityRoot,
    limits: &DiscoveryLimits,
    allowed: &[PathBuf],
) -> Result<RootDiscovery, DiscoveryError> {
    let canonical = canonicalize(root)?;
    if !is_allowed(&canonical, allowed) {
        let error = DiscoveryError::OutsideWorkspace {
            id: root.id.clone(),
            path: root.path.clone(),
        };
        tracing::warn!("skipping: {}", Escaped(&error.to_string()));
        return Err(error);
    }
    require_directory(root, &canonical)?;
    discover_open(root, &canonical, limits)
}

/// The root's canonical path.
fn canonicalize(root: &CapabilityRoot) -> Result<PathBuf, DiscoveryError> {
    fs::canonicalize(&root.path)
        .map_err(|error| DiscoveryError::from_io(&root.id, &root.path, &error))
}

/// `Ok` when the root (at `canonical`) is a directory.
fn require_directory(root: &CapabilityRoot, canonical: &Path) -> Result<(), DiscoveryError> {
    let metadata = fs::metadata(canonical)
        .map_err(|error| DiscoveryError::from_io(&root.id, &root.path, &error))?;
    if metadata.is_dir() {
        Ok(())
    } else {
        Err(DiscoveryError::NotADirectory {
            id: root.id.clone(),
            path: root.path.clone(),
        })
    }
}

fn discover_open(
    root: &CapabilityRoot,
    canonical: &Path,
    limits: &DiscoveryLimits,
) -> Result<RootDiscovery, DiscoveryError> {
    let mut warnings = Warnings::new(&root.id);
    let found = walk(root, canonical, limits, &mut warnings)?;
    let mut first: HashMap<String, PathBuf> = HashMap::new();
    let mut servers = Vec::with_capacity(found.len());
    for server in found {
        if let Some(source) = first.get(&server.name) {
            warnings.push(format!(
                "{}: dropping server `{}`: {} already defines it",
                server.source.display(),
                server.name,
                source.display()
            ));
        } else {
            first.insert(server.name.clone(), server.source.clone());
            servers.push(server);
        }
    }
    Ok(RootDiscovery {
        servers,
        warnings: warnings.into_vec(),
    })
}
