//! Discovery passes over many roots, with results kept between passes.

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;

use super::error::DiscoveryError;
use super::limits::DiscoveryLimits;
use super::root::{RootDiscovery, discover_root, discover_root_within};
use super::roots::CapabilityRoot;
use super::servers::DiscoveredServer;
use gatehouse_base::escape::Escaped;

/// One root's result in a pass.
#[derive(Debug, Clone, PartialEq)]
pub struct RootResult {
    /// The root.
    pub root: CapabilityRoot,
    /// What it yielded, or why it yielded nothing.
    pub result: Result<RootDiscovery, DiscoveryError>,
    /// Whether the result came from the cache rather than a fresh read.
    pub cached: bool,
}

/// The results of one [`DiscoveryCache::discover`] pass.
#[derive(Debug, Clone, PartialEq)]
pub struct DiscoveryPass {
    /// Per root, in the order given.
    pub roots: Vec<RootResult>,
    /// Whether a root that failed in an earlier pass succeeds now: the
    /// servers changed, so the MCP runtime should be rebuilt.
    pub recovered: bool,
    servers: Vec<DiscoveredServer>,
    warnings: Vec<String>,
}

impl DiscoveryPass {
    /// The result for the first root with id `root_id`.
    pub fn result(&self, root_id: &str) -> Option<&Result<RootDiscovery, DiscoveryError>> {
        self.roots
            .iter()
            .find(|entry| entry.root.id == root_id)
            .map(|entry| &entry.result)
    }

    /// Every server found, in root order; of servers sharing a name across
    /// roots, the first wins.
    pub fn servers(&self) -> &[DiscoveredServer] {
        &self.servers
    }

    /// The servers dropped because an earlier root had their name.
    pub fn warnings(&self) -> &[String] {
        &self.warnings
    }
}

/// Keeps each root's success or permanent error until it is invalidated;
/// transient errors are retried on every pass. Optionally restricted to
/// roots inside allowed workspace directories.
#[derive(Debug, Default)]
pub struct DiscoveryCache {
    allowed: Option<Vec<PathBuf>>,
    limits: Option<DiscoveryLimits>,
    results: HashMap<CapabilityRoot, Result<RootDiscovery, DiscoveryError>>,
    failing: HashSet<String>,
}

impl DiscoveryCache {
    /// An empty cache, unrestricted.
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty cache in restricted mode: only roots inside one of
    /// `allowed` are read; others fail with
    /// [`DiscoveryError::OutsideWorkspace`].
    pub fn restricted(allowed: Vec<PathBuf>) -> Self {
        Self {
            allowed: Some(allowed),
            ..Self::default()
        }
    }

    /// The allowed workspace directories, if restricted.
    pub fn allowed(&self) -> Option<&[PathBuf]> {
        self.allowed.as_deref()
    }

    /// Sets (or with `None`, lifts) the restriction; cached results are
    /// dropped.
    pub fn set_allowed(&mut self, allowed: Option<Vec<PathBuf>>) {
        self.allowed = allowed;
        self.results.clear();
    }

    /// Drops the cached results of root `root_id`: the next pass reads it
    /// again.
    pub fn invalidate(&mut self, root_id: &str) {
        self.results.retain(|root, _| root.id != root_id);
    }

    /// Drops every cached result.
    pub fn clear(&mut self) {
        self.results.clear();
    }

    /// Discovers `roots`, reading only those without a cached result.
    /// Cached results are dropped when `limits` differ from the last pass's.
    pub fn discover(
        &mut self,
        roots: &[CapabilityRoot],
        limits: &DiscoveryLimits,
    ) -> DiscoveryPass {
        if self.limits.as_ref() != Some(limits) {
            self.results.clear();
            self.limits = Some(*limits);
        }
        self.results.retain(|root, _| roots.contains(root));
        let mut recovered = false;
        let mut results = Vec::with_capacity(roots.len());
        for root in roots {
            let (result, cached) = match self.results.get(root) {
                Some(result) => (result.clone(), true),
                None => (self.read(root, limits), false),
            };
            match &result {
                Ok(_) => recovered |= self.failing.remove(&root.id),
                Err(_) => {
                    self.failing.insert(root.id.clone());
                }
            }
            results.push(RootResult {
                root: root.clone(),
                result,
                cached,
            });
        }
        self.failing
            .retain(|id| roots.iter().any(|root| &root.id == id));
        let (servers, warnings) = merge(&results);
        DiscoveryPass {
            roots: results,
            recovered,
            servers,
            warnings,
        }
    }

    /// Reads `root` and caches the result unless it is a transient error.
    fn read(
        &mut self,
        root: &CapabilityRoot,
        limits: &DiscoveryLimits,
    ) -> Result<RootDiscovery, DiscoveryError> {
        let result = match &self.allowed {
            Some(allowed) => discover_root_within(root, limits, allowed),
            None => discover_root(root, limits),
        };
        match &result {
            // `discover_root_within` has warned already.
            Err(DiscoveryError::OutsideWorkspace { .. }) => {}
            Err(error) => tracing::warn!("{}", Escaped(&error.to_string())),
            Ok(_) => {}
        }
        if !result.as_ref().is_err_and(DiscoveryError::is_transient) {
            self.results.insert(root.clone(), result.clone());
        }
        result
    }
}

/// The servers of all roots in order, first name wins, and a warning per
/// server dropped.
fn merge(results: &[RootResult]) -> (Vec<DiscoveredServer>, Vec<String>) {
    let mut owners: HashMap<&str, &str> = HashMap::new();
    let mut servers = Vec::new();
    let mut warnings = Vec::new();
    for entry in results {
        let Ok(found) = &entry.result else { continue };
        for server in &found.servers {
            if let Some(owner) = owners.get(server.name.as_str()) {
                let warning = format!(
                    "capability root `{}`: dropping server `{}` ({}): root `{owner}` already has it",
                    entry.root.id,
                    server.name,
                    server.source.display()
                );
                tracing::warn!("{}", Escaped(&warning));
                warnings.push(warning);
            } else {
                owners.insert(&server.name, &entry.root.id);
                servers.push(server.clone());
            }
        }
    }
    (servers, warnings)
}
