//! Swapping the reviewer chain and the `[elicitations]` settings while the
//! host runs: build the new chain off the request path, check every module
//! (compiles, right world and version, pinned digest, fits the pool, passes
//! the conformance `contract` suite), then swap chain and settings in
//! together. Any failure keeps the old chain and settings serving and says
//! why.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::config::{Config, ConfigError};
use crate::config_file::{ConfigFile, Reread};
use crate::router::Router;
use gatehouse_conformance::{Kit, Suite};
use gatehouse_core::chain::Chain;
use gatehouse_core::sandbox::{LoadError, Sandbox};

/// Why a reload was refused. The old chain keeps serving.
#[derive(Debug, thiserror::Error)]
pub enum ReloadError {
    /// The config could not be read.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// A module's component could not be had (a file that cannot be read,
    /// a reference not locked or not in the store).
    #[error(transparent)]
    Component(#[from] crate::component::ComponentError),
    /// A module failed to load (compile, world, version, digest, pool).
    #[error("review.modules[{index}]: {source}")]
    Load {
        /// Its position.
        index: usize,
        /// Why.
        source: LoadError,
    },
    /// A `[models.NAME]` table could not become a model (an unset key
    /// variable, say), or no async runtime is there to run one.
    #[error(transparent)]
    Model(#[from] gatehouse_models::ModelConfigError),
    /// A module's model grant is wrong: it asks a model without one, or names
    /// a model that is not defined.
    #[error("review.modules[{index}]: {source}")]
    Grant {
        /// Its position.
        index: usize,
        /// Why.
        source: gatehouse_core::chain::GrantError,
    },
    /// `[models]` are configured but there is no tokio runtime to call them
    /// from (a bug in the caller).
    #[error(
        "[models] are configured, but the chain is built outside a tokio runtime; build it inside one"
    )]
    NoRuntime,
    /// The build did not end within `[review] load_timeout_sec` (a module
    /// read from something that never ends, a compile that never finishes).
    /// Whoever asked is told so; if the build ends later it is dropped,
    /// never swapped in.
    #[error(
        "the reviewer chain did not load within {} s ([review] load_timeout_sec): a module is still being read or compiled; check that each module path is a file, or raise the bound for very large modules (if the build ends later, it is dropped)",
        bound.as_secs_f64()
    )]
    TooSlow {
        /// The bound it ran past.
        bound: Duration,
    },
    /// The build's thread panicked or was cancelled (a bug).
    #[error("the reviewer chain's build did not finish: {0}")]
    Task(String),
    /// The instance's first chain did not load ([`Router::first_chain_failed`]),
    /// so it is stopping: nothing is swapped in, and what reaches it is
    /// declined as before.
    #[error(
        "nothing was swapped in: this instance is stopping because its first reviewer chain did not load ({why})"
    )]
    Stopping {
        /// Why the first chain did not load.
        why: String,
    },
    /// A module failed the conformance `contract` suite.
    #[error("review.modules[{index}] ({module}) fails the contract suite: {failures}")]
    Contract {
        /// Its position.
        index: usize,
        /// Its source.
        module: String,
        /// The failed checks.
        failures: String,
    },
}

/// What a successful reload installed.
#[derive(Debug, Clone)]
pub struct Reloaded {
    /// Each module's name and sha256, in chain order.
    pub modules: Vec<(String, String)>,
    /// How long building and checking took.
    pub elapsed: Duration,
    /// Whether the `[elicitations]` settings changed.
    pub settings_changed: bool,
    /// Whether a new version of the config file was taken (then the MCP
    /// runtime owes a refresh: its servers may have changed).
    pub config_changed: bool,
}

/// Each module of `chain`: its name and sha256, in chain order.
fn modules_of(chain: &Chain) -> Vec<(String, String)> {
    chain
        .links()
        .iter()
        .map(|link| {
            (
                link.module.name().to_owned(),
                link.module.digest().to_owned(),
            )
        })
        .collect()
}

/// How much longer than `[review] load_timeout_sec` the bounded reloads
/// ([`Reloader::reload_bounded`]) wait for a build: the build checks its bound
/// itself before it swaps, so one that swapped in time is never reported as
/// given up on.
pub const WAIT_GRACE: Duration = Duration::from_secs(1);

/// Builds chains from the config and swaps them into a router.
pub struct Reloader {
    config: Arc<ConfigFile>,
    sandbox: Sandbox,
    kit: Option<Kit>,
    router: Arc<Router>,
    /// Builds started so far, numbering each, and the number of the last one
    /// swapped in: a build that ends after a later-started one was swapped
    /// in is dropped, so a slow build (the first load, say) never lands over
    /// a newer chain. Builds run side by side; only the swap takes the lock.
    builds_started: std::sync::atomic::AtomicU64,
    last_swapped: std::sync::Mutex<u64>,
    /// The compile cache's directory and bound in the config last built
    /// (at first, the one the sandbox was built from): a build that finds
    /// them changed says, once, that they wait for a restart.
    compile_cache: std::sync::Mutex<(PathBuf, u64)>,
}

/// The compile cache's directory and bound `config` asks for.
fn compile_cache_of(config: &Config) -> (PathBuf, u64) {
    (
        config.compile_cache_dir(),
        config.review.compile_cache_max_bytes(),
    )
}

impl std::fmt::Debug for Reloader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reloader")
            .field("config", &self.config.path())
            .finish_non_exhaustive()
    }
}

impl Reloader {
    /// A reloader for the chain of `config`, loading into `sandbox`;
    /// `kit` (if any) runs the `contract` suite on every module first.
    pub fn new(
        config: Arc<ConfigFile>,
        sandbox: Sandbox,
        kit: Option<Kit>,
        router: Arc<Router>,
    ) -> Self {
        Reloader {
            compile_cache: std::sync::Mutex::new(compile_cache_of(&config.current())),
            config,
            sandbox,
            kit,
            router,
            builds_started: std::sync::atomic::AtomicU64::new(0),
            last_swapped: std::sync::Mutex::new(0),
        }
    }

    /// Reads the config file now ([`ConfigFile::reread_now`]: an empty or
    /// invalid file is refused), then builds, checks and swaps in the chain
    /// it describes, as [`rebuild`](Self::rebuild). Blocking: call it off
    /// the async runtime.
    pub fn reload(&self) -> Result<Reloaded, ReloadError> {
        let reread = self.reread_now()?;
        let mut reloaded = self.rebuild()?;
        reloaded.config_changed = reread == Reread::Changed;
        Ok(reloaded)
    }

    /// Builds and checks the chain the config version being served
    /// describes; swaps it and the `[elicitations]` settings in on success.
    /// Blocking: call it off the async runtime.
    pub fn rebuild(&self) -> Result<Reloaded, ReloadError> {
        self.rebuild_by(None)
    }

    /// [`Reloader::reload`] on a blocking thread, waited for at most
    /// `[review] load_timeout_sec` (plus [`WAIT_GRACE`]): a build still
    /// running then is given up on ([`ReloadError::TooSlow`]), and dropped if
    /// it ends later, so a module that never finishes loading cannot hold up
    /// the reloads after it.
    pub async fn reload_bounded(self: &Arc<Self>) -> Result<Reloaded, ReloadError> {
        // The file first (its reading is bounded by `ConfigFile`), so that
        // the bound is the new version's.
        let reloader = self.clone();
        let reread = tokio::task::spawn_blocking(move || reloader.reread_now())
            .await
            .map_err(|error| ReloadError::Task(error.to_string()))??;
        let mut reloaded = self.rebuild_bounded().await?;
        reloaded.config_changed = reread == Reread::Changed;
        Ok(reloaded)
    }

    /// [`Reloader::rebuild`], bounded as [`Reloader::reload_bounded`].
    pub async fn rebuild_bounded(self: &Arc<Self>) -> Result<Reloaded, ReloadError> {
        // One bound for the waiter and the build: the version being served's.
        let bound = self.config.current().review.load_timeout();
        let reloader = self.clone();
        let build = tokio::task::spawn_blocking(move || reloader.rebuild_by(Some(bound)));
        match tokio::time::timeout(bound.saturating_add(WAIT_GRACE), build).await {
            Ok(Ok(outcome)) => outcome,
            Ok(Err(error)) => Err(ReloadError::Task(error.to_string())),
            Err(_) => Err(ReloadError::TooSlow { bound }),
        }
    }

    /// The config file read now ([`ConfigFile::reread_now`]); a refusal
    /// counts as a refused swap.
    fn reread_now(&self) -> Result<Reread, ReloadError> {
        self.config.reread_now().map_err(|error| {
            crate::telemetry::record_swap(self.router.metrics(), false);
            error.into()
        })
    }

    /// A build bounded by `bound` (by default the config's
    /// `[review] load_timeout_sec`), counted as a swap or a failed one.
    fn rebuild_by(&self, bound: Option<Duration>) -> Result<Reloaded, ReloadError> {
        let rebuilt = self.build_and_swap(bound);
        crate::telemetry::record_swap(self.router.metrics(), rebuilt.is_ok());
        rebuilt
    }

    /// How the modules loaded so far were compiled (see
    /// [`gatehouse_core::sandbox::Sandbox::compile_counts`]).
    pub fn compile_counts(&self) -> gatehouse_core::sandbox::CompileCounts {
        self.sandbox.compile_counts()
    }

    fn build_and_swap(&self, bound: Option<Duration>) -> Result<Reloaded, ReloadError> {
        let started = Instant::now();
        let build = self
            .builds_started
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst)
            + 1;
        let config = self.config.current();
        let bound = bound.unwrap_or_else(|| config.review.load_timeout());
        let chain = build_checked_chain(&config, &self.sandbox, self.kit.as_ref())?;
        let modules = modules_of(&chain);
        let settings = config.elicitations.clone();
        let current = self.router.settings();
        if settings.audit_log != current.audit_log {
            tracing::warn!(
                "elicitations.audit_log changed; the audit log stays where it was opened until a restart"
            );
        }
        if settings.audit_sync != current.audit_sync {
            tracing::warn!(
                "elicitations.audit_sync changed; the audit log keeps syncing as it did until a restart"
            );
        }
        {
            // Nothing in here panics; a poisoned lock still holds the value.
            let mut seen = self
                .compile_cache
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            let asked = compile_cache_of(&config);
            if *seen != asked {
                tracing::warn!(
                    "review.compile_cache or review.compile_cache_max_bytes changed; the compile cache stays as it was opened until a restart"
                );
                *seen = asked;
            }
        }
        let settings_changed = *current != settings;
        {
            // Nothing in here panics; a poisoned lock still holds a number.
            let mut last_swapped = self
                .last_swapped
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            if *last_swapped > build {
                tracing::info!(
                    modules = ?modules,
                    "a build that started later was swapped in first; this one is dropped"
                );
                return Ok(Reloaded {
                    modules: modules_of(&self.router.chain()),
                    elapsed: started.elapsed(),
                    settings_changed: false,
                    config_changed: false,
                });
            }
            // Past its bound, whoever waited for this build was told it failed:
            // it must not land now.
            if started.elapsed() > bound {
                tracing::warn!(
                    modules = ?modules,
                    elapsed = ?started.elapsed(),
                    "a build that ran past [review] load_timeout_sec ended; it is dropped"
                );
                return Err(ReloadError::TooSlow { bound });
            }
            // A first load that failed stops the instance: a chain swapped in
            // now would not be in force, but would show as if it were.
            if let Some(why) = self.router.first_chain_error() {
                return Err(ReloadError::Stopping {
                    why: why.to_string(),
                });
            }
            *last_swapped = build;
            // The settings first: the first chain swapped in lets waiting
            // elicitations through (`Router::loading_first_chain`).
            self.router.swap_settings(settings);
            self.router.swap_chain(chain);
        }
        let reloaded = Reloaded {
            modules,
            elapsed: started.elapsed(),
            settings_changed,
            config_changed: false,
        };
        tracing::info!(modules = ?reloaded.modules, elapsed = ?reloaded.elapsed, settings_changed, "reviewer chain and settings swapped");
        Ok(reloaded)
    }

    /// The module files the config names, and the lock file when it names
    /// `oci` modules (to watch them: `gatehouse modules update` rewrites it).
    pub fn module_paths(&self) -> Vec<PathBuf> {
        let config = self.config.current();
        let mut paths: Vec<PathBuf> = Vec::new();
        for module in &config.review.modules {
            match module.source() {
                Ok(gatehouse_core::config::ModuleSource::File(path)) => {
                    paths.push(config.base_dir().join(path))
                }
                Ok(gatehouse_core::config::ModuleSource::Oci(_)) => {
                    let lock = config.lock_path();
                    if !paths.contains(&lock) {
                        paths.push(lock);
                    }
                }
                Err(_) => {}
            }
        }
        paths
    }
}

/// The chain of `config`, every module loaded into `sandbox` and, with a
/// `kit`, proven against the `contract` suite.
pub fn build_checked_chain(
    config: &Config,
    sandbox: &Sandbox,
    kit: Option<&Kit>,
) -> Result<Chain, ReloadError> {
    let models = if config.models.is_empty() {
        std::collections::BTreeMap::new()
    } else {
        let handle = tokio::runtime::Handle::try_current().map_err(|_| ReloadError::NoRuntime)?;
        gatehouse_models::build_models(&config.models, handle)?
    };
    let mut links = Vec::with_capacity(config.review.modules.len());
    let mut shadow = Vec::new();
    let mut components = crate::component::Components::new(config);
    for (index, spec) in config.review.modules.iter().enumerate() {
        let component = components.get(index, spec)?;
        let bytes = component.bytes;
        let source = component.source;
        let name = spec.name.clone().unwrap_or(component.default_name);
        let limits = spec.module_limits();
        let mut module = sandbox
            .load_bytes_with(&name, &source, &bytes, component.sha256.as_deref(), &limits)
            .map_err(|source| ReloadError::Load { index, source })?;
        if let Some(signer) = component.locked.and_then(|locked| locked.signer) {
            module = module.signed_by(signer);
        }
        // The grant first: a module that asks a model without one is refused
        // with what to add, before the kit reviews anything.
        let link = spec
            .link(Arc::new(module), config.review.on_failure, &models)
            .map_err(|source| ReloadError::Grant { index, source })?;
        if let Some(kit) = kit {
            // One trace per module checked: the kit's reviews are its
            // children, not traces of their own.
            let span = crate::trace::contract_check(&name);
            let report = span.in_scope(|| {
                kit.clone()
                    .with_module_limits(limits)
                    .run(&source, &bytes, Suite::Contract, &[])
            });
            crate::trace::ended(&span, if report.passed() { "ok" } else { "failed" });
            if !report.passed() {
                let failures = report.failures_line();
                return Err(ReloadError::Contract {
                    index,
                    module: source,
                    failures,
                });
            }
        }
        match spec.mode {
            gatehouse_core::config::ModuleMode::Live => links.push(link),
            gatehouse_core::config::ModuleMode::Shadow => shadow.push(link),
        }
    }
    Ok(Chain::new(links).with_shadow(shadow))
}
