//! The desired server set from `gatehouse.toml`: its `[mcp_servers]` tables,
//! re-read on every refresh so edits take effect, plus the servers discovered
//! in its `[capabilities] roots` and in roots selected at run time.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use futures::future::BoxFuture;

use super::config::ServerConfig;
use super::runtime::{DesiredServers, RuntimeError};
use crate::config::Config;
use crate::discovery::{CapabilityRoot, DiscoveryCache, DiscoveryLimits, combine_roots};
use crate::escape::Escaped;

/// Desired servers from a config file and discovery. Share it behind an
/// `Arc`: the runtime reads it, the host tells it about selected roots.
pub struct ConfigSource {
    path: PathBuf,
    selected: Mutex<Vec<CapabilityRoot>>,
    cache: Mutex<DiscoveryCache>,
    limits: DiscoveryLimits,
}

impl std::fmt::Debug for ConfigSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConfigSource")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

impl ConfigSource {
    /// A source reading `path`.
    pub fn new(path: impl Into<PathBuf>) -> Self {
        ConfigSource {
            path: path.into(),
            selected: Mutex::new(Vec::new()),
            cache: Mutex::new(DiscoveryCache::new()),
            limits: DiscoveryLimits::default(),
        }
    }

    /// The config file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Sets the roots selected at run time (they come before the configured
    /// ones). Returns whether they changed: if so, invalidate the runtime.
    pub fn select_roots(&self, roots: Vec<CapabilityRoot>) -> bool {
        match self.selected.lock() {
            Ok(mut selected) if *selected != roots => {
                *selected = roots;
                true
            }
            _ => false,
        }
    }

    /// Runs discovery outside a refresh and reports whether a root that
    /// failed before succeeds now (then invalidate the runtime). Call it
    /// from time to time so transient failures recover.
    pub fn probe(&self) -> Result<bool, RuntimeError> {
        let config = self.load()?;
        let roots = self.roots(&config);
        let mut cache = self.lock_cache()?;
        Ok(cache.discover(&roots, &self.limits).recovered)
    }

    fn load(&self) -> Result<Config, RuntimeError> {
        Config::load(&self.path).map_err(|error| RuntimeError::Desired(error.to_string()))
    }

    fn lock_cache(&self) -> Result<std::sync::MutexGuard<'_, DiscoveryCache>, RuntimeError> {
        self.cache
            .lock()
            .map_err(|_| RuntimeError::Desired("the discovery cache is poisoned".to_owned()))
    }

    fn roots(&self, config: &Config) -> Vec<CapabilityRoot> {
        let configured: Vec<CapabilityRoot> = config
            .capabilities
            .roots
            .iter()
            .map(|root| CapabilityRoot::new(root.id.clone(), config.base_dir().join(&root.path)))
            .collect();
        let selected = self
            .selected
            .lock()
            .map(|roots| roots.clone())
            .unwrap_or_default();
        combine_roots(&selected, &configured)
    }

    fn build(&self) -> Result<Vec<ServerConfig>, RuntimeError> {
        let config = self.load()?;
        let mut servers = config
            .servers()
            .map_err(|error| RuntimeError::Desired(error.to_string()))?;
        let roots = self.roots(&config);
        let mut cache = self.lock_cache()?;
        cache.set_allowed(
            config
                .capabilities
                .allowed_dirs
                .as_ref()
                .map(|dirs| dirs.iter().map(|dir| config.base_dir().join(dir)).collect()),
        );
        let pass = cache.discover(&roots, &self.limits);
        for warning in pass.warnings() {
            tracing::warn!("{}", Escaped(warning));
        }
        for discovered in pass.servers() {
            if servers.iter().any(|server| server.name == discovered.name) {
                tracing::warn!(
                    server = %Escaped(&discovered.name),
                    source = %Escaped(&discovered.source.display().to_string()),
                    "a configured server has this name; the discovered one is ignored"
                );
            } else {
                servers.push(discovered.config.clone());
            }
        }
        Ok(servers)
    }
}

impl DesiredServers for Arc<ConfigSource> {
    fn desired(&self) -> BoxFuture<'_, Result<Vec<ServerConfig>, RuntimeError>> {
        let source = self.clone();
        Box::pin(async move {
            tokio::task::spawn_blocking(move || source.build())
                .await
                .map_err(|error| RuntimeError::Desired(format!("discovery task failed: {error}")))?
        })
    }
}
