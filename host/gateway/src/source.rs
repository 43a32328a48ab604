//! The desired server set from `gatehouse.toml`: its `[mcp_servers]` tables,
//! re-read on every refresh so edits take effect, plus the servers discovered
//! in its `[capabilities] roots` and in roots selected at run time that may
//! run: trusted by the operator (or `trust = "all"`) and asking for nothing
//! beyond their plugin (see [`gatehouse_mcp::discovery::assess`]). The trust file is
//! re-read on every refresh too, so a manifest changed at run time stops
//! running at the next refresh and a newly trusted one starts.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use futures::future::BoxFuture;

use crate::config::{Config, ConfigError};
use crate::config_file::ConfigFile;
use gatehouse_base::escape::Escaped;
use gatehouse_mcp::discovery::{
    CapabilityRoot, DiscoveryCache, DiscoveryLimits, PluginStatus, TrustError, TrustMode,
    TrustPolicy, TrustState, TrustStore, assess, combine_roots,
};
use gatehouse_mcp::runtime::{DesiredServers, RuntimeError};
use gatehouse_mcp::server_config::ServerConfig;

/// Desired servers from a config file and discovery. Share it behind an
/// `Arc`: the runtime reads it, the host tells it about selected roots.
pub struct ConfigSource {
    path: PathBuf,
    /// The settled version to serve, when the source follows one
    /// ([`ConfigSource::following`]); else the file is read at each refresh.
    file: Option<Arc<ConfigFile>>,
    selected: Mutex<Vec<CapabilityRoot>>,
    cache: Mutex<DiscoveryCache>,
    limits: DiscoveryLimits,
    /// What the last refresh reported about servers that do not run, so
    /// each is logged once, not at every refresh.
    reported: Mutex<HashSet<String>>,
}

/// The discovered servers and what trust decides for each
/// ([`ConfigSource::plugins`]).
#[derive(Debug)]
pub struct PluginReport {
    /// `[capabilities] trust`.
    pub mode: TrustMode,
    /// The trust file as read.
    pub store: TrustStore,
    /// Every discovered server, in discovery order.
    pub plugins: Vec<PluginStatus>,
}

/// Why [`ConfigSource::plugins`] could not report.
#[derive(Debug, thiserror::Error)]
pub enum PluginsError {
    /// The config file.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The trust file.
    #[error(transparent)]
    Trust(#[from] TrustError),
    /// An earlier discovery panicked.
    #[error("the discovery cache is poisoned by an earlier failure; restart gatehouse")]
    Poisoned,
}

impl std::fmt::Debug for ConfigSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConfigSource")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

impl ConfigSource {
    /// A source reading `path` at each refresh.
    pub fn new(path: impl Into<PathBuf>) -> Self {
        ConfigSource {
            path: path.into(),
            file: None,
            selected: Mutex::new(Vec::new()),
            cache: Mutex::new(DiscoveryCache::new()),
            limits: DiscoveryLimits::default(),
            reported: Mutex::new(HashSet::new()),
        }
    }

    /// A source serving the version of `file` that settled last
    /// ([`crate::config_file`]): a refresh never reads a file that is being
    /// written. The gateway's source.
    pub fn following(file: Arc<ConfigFile>) -> Self {
        ConfigSource {
            file: Some(file.clone()),
            ..ConfigSource::new(file.path())
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

    fn load(&self) -> Result<Arc<Config>, RuntimeError> {
        match &self.file {
            Some(file) => Ok(file.current()),
            None => Config::load(&self.path)
                .map(Arc::new)
                .map_err(|error| RuntimeError::Desired(error.to_string())),
        }
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

    /// Every server discovered under `config`'s roots (and the selected
    /// ones), assessed against `store`; those sharing a name with one of
    /// `configured` are shadowed.
    fn assessed(
        &self,
        config: &Config,
        store: &TrustStore,
        configured: &[ServerConfig],
    ) -> Result<Vec<PluginStatus>, PluginsError> {
        let roots = self.roots(config);
        let pass = {
            let mut cache = self.cache.lock().map_err(|_| PluginsError::Poisoned)?;
            cache.set_allowed(
                config
                    .capabilities
                    .allowed_dirs
                    .as_ref()
                    .map(|dirs| dirs.iter().map(|dir| config.base_dir().join(dir)).collect()),
            );
            cache.discover(&roots, &self.limits)
        };
        for warning in pass.warnings() {
            tracing::warn!("{}", Escaped(warning));
        }
        let policy = TrustPolicy {
            mode: config.capabilities.trust,
            trusted_roots: config
                .capabilities
                .roots
                .iter()
                .filter(|root| root.trusted)
                .map(|root| {
                    CapabilityRoot::new(root.id.clone(), config.base_dir().join(&root.path))
                })
                .collect(),
        };
        let mut plugins = assess(&pass, &policy, store);
        for status in &mut plugins {
            if configured
                .iter()
                .any(|server| server.name == status.server.name)
            {
                status.shadow();
            }
        }
        Ok(plugins)
    }

    /// What discovery finds under the config's roots now and what trust
    /// decides for each server, with the trust file as read: what
    /// `gatehouse plugins list` shows and `gatehouse plugins trust` records.
    /// Unlike a refresh, a trust file that cannot be used is an error here.
    pub fn plugins(&self) -> Result<PluginReport, PluginsError> {
        let config = Config::load(&self.path)?;
        let store = TrustStore::load(config.trust_file())?;
        let configured = config.servers()?;
        let plugins = self.assessed(&config, &store, &configured)?;
        Ok(PluginReport {
            mode: config.capabilities.trust,
            store,
            plugins,
        })
    }

    fn build(&self) -> Result<Vec<ServerConfig>, RuntimeError> {
        let config = self.load()?;
        let mut servers = config
            .servers()
            .map_err(|error| RuntimeError::Desired(error.to_string()))?;
        let store = TrustStore::load(config.trust_file()).unwrap_or_else(|error| {
            if config.capabilities.trust == TrustMode::Ask {
                tracing::warn!(
                    "{}; no discovered server is trusted until it is fixed",
                    Escaped(&error.to_string())
                );
            }
            TrustStore::empty(config.trust_file())
        });
        let plugins = self
            .assessed(&config, &store, &servers)
            .map_err(|error| RuntimeError::Desired(error.to_string()))?;
        self.report(&plugins, config.capabilities.trust);
        servers.extend(
            plugins
                .into_iter()
                .filter(|status| status.runs)
                .map(|status| status.server.config),
        );
        Ok(servers)
    }

    /// Logs, once for each manifest version, every discovered server that
    /// does not run and why: shadowed, refused fields, or not trusted (with
    /// the commands that review and trust it).
    fn report(&self, plugins: &[PluginStatus], mode: TrustMode) {
        let Ok(mut reported) = self.reported.lock() else {
            return;
        };
        let config = self.path.display().to_string();
        let mut now = HashSet::new();
        for status in plugins.iter().filter(|status| !status.runs) {
            let server = &status.server;
            let key = format!(
                "{}\0{}\0{}\0{}\0{}",
                server.name,
                server.sha256,
                status.state.name(),
                status.shadowed,
                status.refused.len()
            );
            let seen = reported.contains(&key);
            if !now.insert(key) || seen {
                continue;
            }
            let manifest = server.source.display().to_string();
            if status.shadowed {
                tracing::warn!(
                    server = %Escaped(&server.name),
                    source = %Escaped(&manifest),
                    "a configured server has this name; the discovered one is ignored"
                );
                continue;
            }
            for refusal in &status.refused {
                tracing::warn!(
                    plugin = %Escaped(&server.name),
                    root = %Escaped(&server.root),
                    manifest = %Escaped(&manifest),
                    "discovered MCP server refused: {}",
                    Escaped(&refusal.to_string())
                );
            }
            if mode == TrustMode::Ask && status.state != TrustState::Trusted {
                let why = match status.state {
                    TrustState::Changed => {
                        "its manifest changed since it was trusted, so it does not run"
                    }
                    _ => "it is not trusted, so it does not run",
                };
                tracing::warn!(
                    plugin = %Escaped(&server.name),
                    root = %Escaped(&server.root),
                    manifest = %Escaped(&manifest),
                    "discovered MCP server `{}`: {why}; review it with `gatehouse plugins list --config {}`, then trust it with `gatehouse plugins trust {} --config {}`",
                    Escaped(&server.name),
                    Escaped(&config),
                    Escaped(&server.name),
                    Escaped(&config)
                );
            }
        }
        *reported = now;
    }
}

impl DesiredServers for ConfigSource {
    fn desired(self: Arc<Self>) -> BoxFuture<'static, Result<Vec<ServerConfig>, RuntimeError>> {
        let source = self;
        Box::pin(async move {
            tokio::task::spawn_blocking(move || source.build())
                .await
                .map_err(|error| RuntimeError::Desired(format!("discovery task failed: {error}")))?
        })
    }
}
