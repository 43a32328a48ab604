//! The sandbox: one wasmtime engine with a pooling allocator and a deadline
//! thread that advances its epoch, a linker that offers guests only the
//! `logging` import and a closed WASI, and [`ReviewerModule`]s that review in
//! a fresh instance each time.
//!
//! [`Sandbox`] (built with [`Sandbox::builder`], or [`Sandbox::new`] for
//! limits alone) is the engine; [`Sandbox::load_file`] turns a component
//! into a [`ReviewerModule`], which reviews a
//! [`ReviewRequest`](crate::request::ReviewRequest) into a [`ModuleReport`].
//! [`Limits`] bound every review; [`WasiPolicy`] says how much of WASI a
//! guest sees.

mod blocking;
mod cache;
mod capabilities;
mod compiling;
mod functions;
mod granted;
mod instances;
mod limits;
mod load;
mod module;
mod state;
mod swap;
mod ticker;
pub(crate) mod wasi;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use wasmtime::component::{HasSelf, Linker};
use wasmtime::{
    Config, Enabled, Engine, InstanceAllocationStrategy, PoolingAllocationConfig, ProfilingStrategy,
};

pub use cache::CompileCounts;
pub use capabilities::{MAX_AUDITED_ANSWER_BYTES, MAX_MODEL_CALLS_PER_REVIEW};
pub use limits::{Limits, LimitsBuilder, ModuleLimits, ModuleLimitsBuilder};
pub use load::LoadError;
pub use load::sha256_hex;

/// The built guest `name` (`.ci/build-guests`), for unit tests.
#[cfg(test)]
pub(crate) fn built_guest(name: &str) -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map_or_else(
            || Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target"),
            PathBuf::from,
        )
        .join("wasm32-wasip2/guest")
        .join(format!("{name}.wasm"))
}

/// The core instances the component in `bytes` creates per instantiation, if
/// it parses.
pub(crate) fn core_instances(bytes: &[u8]) -> Option<u64> {
    instances::core_instances(bytes).ok()
}
pub use module::{ModuleInfo, ModuleReport, ReviewerModule};
pub use state::{GuestLog, ReviewLogs};
pub use wasi::WasiPolicy;

use crate::contract::{self, logging};
use state::ReviewState;
use ticker::{EpochTicker, InFlight};

/// Per-component pool maxima: what a Rust `wasm32-wasip2` component needs,
/// with room to spare (core instances are a limit, [`Limits::core_instances`]).
/// A module that needs more is refused at load time.
const MEMORIES_PER_COMPONENT: u32 = 2;
const TABLES_PER_COMPONENT: u32 = 8;

/// Where the kernel reports which pages an instance wrote (`PAGEMAP_SCAN`,
/// Linux 6.7+), up to this many bytes of a linear memory's written pages are
/// put back in place when its instance is freed (copied from the module's
/// image, or zeroed) and stay mapped; written pages beyond it are decommitted
/// as usual. Either way the next instance starts from the module's initial
/// memory. Without the scan, memories are decommitted whole, as by default.
/// This is also the most a freed pool slot keeps resident.
const MEMORY_KEEP_RESIDENT: usize = 1 << 20;

/// Up to this many bytes of a table are zeroed in place when its instance is
/// freed, rather than decommitted and faulted back in by the next instance.
const TABLE_KEEP_RESIDENT: usize = 64 << 10;

/// Why the sandbox could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    /// wasmtime refused the engine configuration, or could not reserve the
    /// instance pool.
    #[error(
        "cannot create the wasmtime engine: {0}; if the instance pool could not be reserved, lower `concurrent_reviews` in the limits or raise the process's virtual memory limit (`ulimit -v`)"
    )]
    Engine(String),
    /// The host imports could not be linked (a bug in gatehouse).
    #[error("cannot link the host imports: {0}; this is a bug in gatehouse, please report it")]
    Link(String),
    /// The deadline thread could not be started.
    #[error(
        "cannot start the deadline ticker thread: {0}; the process may be at its thread limit (`ulimit -u`)"
    )]
    Ticker(std::io::Error),
}

pub(crate) struct Shared {
    pub(crate) engine: Engine,
    pub(crate) linker: Linker<ReviewState>,
    pub(crate) limits: Limits,
    pub(crate) wasi: WasiPolicy,
    pub(crate) compile_cache: Option<cache::CompileCache>,
    pub(crate) in_flight: Arc<InFlight>,
    pub(crate) compiles: cache::Counters,
    pub(crate) compiling: compiling::Compiling,
    resets_in_place: bool,
    perf_map: bool,
    _ticker: EpochTicker,
}

/// The engine every module runs in: one wasmtime engine with an instance
/// pool sized by its [`Limits`], a deadline thread, and a linker that offers
/// guests only the `logging` import and a closed WASI. Load modules into it
/// with [`Sandbox::load_file`] or [`Sandbox::load_bytes`].
///
/// Cheap to clone; clones share the engine, the pool and the deadline
/// thread, which stops when the last clone (and the last module loaded into
/// it) is dropped. Make one per process and share it: the pool reserves
/// address space for [`Limits::concurrent_reviews`] instances.
///
/// [`Sandbox::builder`] sets everything there is to set;
/// [`Sandbox::new`] is the shortcut for limits alone.
///
/// ```
/// use std::time::Duration;
/// use gatehouse_core::sandbox::{Limits, Sandbox, WasiPolicy};
///
/// let limits = Limits::builder()
///     .deadline(Duration::from_millis(20))
///     .concurrent_reviews(4)
///     .build();
/// let sandbox = Sandbox::builder()
///     .limits(limits)
///     .wasi(WasiPolicy::Deny)
///     .build()?;
/// assert_eq!(sandbox.limits().deadline(), Duration::from_millis(20));
/// assert_eq!(sandbox.wasi_policy(), WasiPolicy::Deny);
/// // No cache asked for: modules are compiled in memory.
/// assert_eq!(sandbox.compile_cache_dir(), None);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone)]
pub struct Sandbox {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for Sandbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sandbox")
            .field("limits", &self.shared.limits)
            .field("wasi", &self.shared.wasi)
            .field("compile_cache_dir", &self.compile_cache_dir())
            .finish_non_exhaustive()
    }
}

/// Builds a [`Sandbox`]: its [`Limits`], its [`WasiPolicy`] and where
/// compiled modules are cached. Every setting is optional; the defaults are
/// [`Limits::default`], [`WasiPolicy::Closed`] and no compile cache.
#[derive(Debug, Clone, Default)]
pub struct SandboxBuilder {
    limits: Limits,
    wasi: WasiPolicy,
    compile_cache: Option<PathBuf>,
    compile_cache_max_bytes: Option<u64>,
    perf_map: bool,
}

impl SandboxBuilder {
    /// The limits every review runs under (and that size the instance pool).
    pub fn limits(mut self, limits: Limits) -> Self {
        self.limits = limits;
        self
    }

    /// How much of WASI guests are linked against (default
    /// [`WasiPolicy::Closed`]).
    pub fn wasi(mut self, policy: WasiPolicy) -> Self {
        self.wasi = policy;
        self
    }

    /// Keeps compiled modules in `dir`, so that restarts and swaps back skip
    /// compilation. `dir` is created 0700 if missing; artifacts are written
    /// 0600, never through a symbolic link, each with an HMAC under a random
    /// key kept beside the directory (`<dir>.key`, 0600), over the artifact,
    /// the module's sha256 and the engine's compatibility hash. Only an
    /// artifact whose HMAC verifies is ever loaded; any other is discarded
    /// and compiled again.
    ///
    /// The directory is a private directory ([`crate::private_fs`]): one of
    /// this user's that group or others may use is made 0700; a symbolic
    /// link or another user's directory (or a key file that is not this
    /// user's alone) is refused with a warning that says how to fix it, and
    /// modules are then compiled in memory: [`Sandbox::compile_cache_dir`]
    /// is `None`. A cache never makes [`build`](Self::build) fail.
    pub fn compile_cache(mut self, dir: impl Into<PathBuf>) -> Self {
        self.compile_cache = Some(dir.into());
        self
    }

    /// Bounds the [compile cache](Self::compile_cache) to `bytes` of
    /// artifacts in all (default: unbounded; `gatehouse serve` bounds its
    /// cache with `[review] compile_cache_max_bytes`, since every swap to a
    /// new build stores one more). Each time a module
    /// is compiled and stored, the least recently used others are removed
    /// until the rest fit; a hit counts as a use. For a cache shared by
    /// commands run on module after module, such as a module author's
    /// builds.
    ///
    /// ```
    /// use gatehouse_core::sandbox::Sandbox;
    ///
    /// let dir = tempfile::tempdir()?;
    /// let sandbox = Sandbox::builder()
    ///     .compile_cache(dir.path().join("compiled"))
    ///     .compile_cache_max_bytes(1 << 30)
    ///     .build()?;
    /// assert!(sandbox.compile_cache_dir().is_some());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn compile_cache_max_bytes(mut self, bytes: u64) -> Self {
        self.compile_cache_max_bytes = Some(bytes);
        self
    }

    /// Names every guest function the engine loads in `/tmp/perf-<pid>.map`,
    /// Linux `perf`'s map of JIT code (default: off), so that `perf record`
    /// and `perf report` attribute the samples taken in a module's code to
    /// its functions rather than to unknown addresses. A module keeps its
    /// function names only if it was built with its `name` section (not
    /// stripped).
    ///
    /// For profiling a module on one's own machine (`gatehouse bench
    /// --perf-map`), never in a gateway: the map is written at a path any
    /// local user can predict, and it lists the functions of every module
    /// loaded. Whether the map is written changes nothing a guest can see,
    /// and a compile cache is shared with sandboxes without it.
    ///
    /// ```
    /// use gatehouse_core::sandbox::Sandbox;
    ///
    /// let sandbox = Sandbox::builder().perf_map(true).build()?;
    /// let map = sandbox.perf_map_path().expect("the map is written");
    /// assert!(map.starts_with("/tmp"));
    /// assert_eq!(Sandbox::builder().build()?.perf_map_path(), None);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn perf_map(mut self, on: bool) -> Self {
        self.perf_map = on;
        self
    }

    /// Creates the engine, the instance pool, the linker and the deadline
    /// thread.
    pub fn build(self) -> Result<Sandbox, SandboxError> {
        Sandbox::build(
            self.limits,
            self.wasi,
            self.compile_cache
                .map(|dir| (dir, self.compile_cache_max_bytes)),
            self.perf_map,
        )
    }
}

impl Sandbox {
    /// A builder with the defaults: [`Limits::default`], WASI
    /// [closed](WasiPolicy::Closed), no compile cache.
    pub fn builder() -> SandboxBuilder {
        SandboxBuilder::default()
    }

    /// A sandbox with `limits`, WASI [closed](WasiPolicy::Closed) and no
    /// compile cache: the shortcut for
    /// `Sandbox::builder().limits(limits).build()`.
    pub fn new(limits: Limits) -> Result<Sandbox, SandboxError> {
        Sandbox::builder().limits(limits).build()
    }

    fn build(
        limits: Limits,
        wasi: WasiPolicy,
        compile_cache: Option<(PathBuf, Option<u64>)>,
        perf_map: bool,
    ) -> Result<Sandbox, SandboxError> {
        let mut pool = PoolingAllocationConfig::new();
        let reviews = limits.pool_slots();
        let core_instances = limits.pool_core_instances();
        pool.total_component_instances(reviews)
            .total_core_instances(reviews.saturating_mul(core_instances))
            .total_memories(reviews.saturating_mul(MEMORIES_PER_COMPONENT))
            .total_tables(reviews.saturating_mul(TABLES_PER_COMPONENT))
            .max_core_instances_per_component(core_instances)
            .max_memories_per_component(MEMORIES_PER_COMPONENT)
            .max_tables_per_component(TABLES_PER_COMPONENT)
            .max_memory_size(limits.pool_memory_bytes())
            .table_elements(limits.table_elements());
        // Freeing an instance resets its memory and tables for the next one.
        // Resetting the pages a review wrote in place, rather than with
        // madvise, saves the syscall, the TLB shootdown it costs a threaded
        // process, and the page faults of the next instance.
        // Not where the host swaps: the scan would miss a written page that
        // was swapped out, and the next instance could read it (`swap`).
        let resets_in_place =
            PoolingAllocationConfig::is_pagemap_scan_available() && !swap::in_use_warned();
        if resets_in_place {
            pool.pagemap_scan(Enabled::Yes)
                .linear_memory_keep_resident(MEMORY_KEEP_RESIDENT.min(limits.pool_memory_bytes()));
        }
        pool.table_keep_resident(TABLE_KEEP_RESIDENT);
        let mut config = Config::new();
        config
            .wasm_component_model(true)
            .epoch_interruption(true)
            .max_wasm_stack(limits.wasm_stack_bytes())
            .memory_init_cow(true)
            // Every module whose initial memory fits the pool gets a
            // copy-on-write image, however sparse its data: above wasmtime's
            // default (16 MiB) a snapshot with data on under half its pages
            // (componentize-js: 33 %) would be copied into every fresh
            // instance instead, which made a TypeScript review 3x slower
            // (docs/BENCHMARKS.md). It matters once a module's own
            // `memory_bytes` is above 16 MiB.
            .memory_guaranteed_dense_image_size(limits.pool_memory_bytes() as u64)
            .allocation_strategy(InstanceAllocationStrategy::Pooling(pool));
        if perf_map {
            config.profiler(ProfilingStrategy::PerfMap);
        }
        let compile_cache = compile_cache.and_then(|(dir, max_bytes)| {
            cache::CompileCache::open(dir, max_bytes)
                .inspect_err(|error| {
                    tracing::warn!("{error}; compiling modules in memory instead");
                })
                .ok()
        });
        if let Some(cache) = &compile_cache {
            // A changed module compiles only the functions the cache has not
            // seen (`functions`).
            config
                .enable_incremental_compilation(cache.functions().clone())
                .map_err(|error| SandboxError::Engine(format!("{error:#}")))?;
        }
        let engine =
            Engine::new(&config).map_err(|error| SandboxError::Engine(format!("{error:#}")))?;
        if let Some(cache) = &compile_cache {
            cache.functions().bind(load::compatibility(&engine));
        }
        let mut linker = Linker::new(&engine);
        wasi::add_to_linker(&mut linker, wasi)
            .map_err(|error| SandboxError::Link(format!("{error:#}")))?;
        link_contract(&mut linker).map_err(|error| SandboxError::Link(format!("{error:#}")))?;
        let in_flight = Arc::new(InFlight::default());
        let ticker = EpochTicker::start(
            engine.clone(),
            in_flight.clone(),
            limits.deadline(),
            limits.epoch_tick(),
        )
        .map_err(SandboxError::Ticker)?;
        Ok(Sandbox {
            shared: Arc::new(Shared {
                engine,
                linker,
                limits,
                wasi,
                compile_cache,
                in_flight,
                compiles: cache::Counters::default(),
                compiling: compiling::Compiling::default(),
                resets_in_place,
                perf_map,
                _ticker: ticker,
            }),
        })
    }

    /// The limits every review runs under.
    pub fn limits(&self) -> &Limits {
        &self.shared.limits
    }

    /// Whether a freed instance's memory is reset in place (the pages it
    /// wrote restored, up to 1 MiB) rather than decommitted: where the kernel
    /// can report written pages (Linux 6.7+) and no swap is in use, since a
    /// written page swapped out would escape the reset.
    pub fn resets_in_place(&self) -> bool {
        self.shared.resets_in_place
    }

    /// The file guest functions are named in, `/tmp/perf-<pid>.map` (the
    /// path Linux `perf` reads), when the sandbox writes it
    /// ([`SandboxBuilder::perf_map`]).
    pub fn perf_map_path(&self) -> Option<PathBuf> {
        self.shared
            .perf_map
            .then(|| PathBuf::from(format!("/tmp/perf-{}.map", std::process::id())))
    }

    /// The WASI policy guests are linked against.
    pub fn wasi_policy(&self) -> WasiPolicy {
        self.shared.wasi
    }

    /// The directory compiled modules are cached in, or `None` when they are
    /// compiled in memory (no cache asked for, or the directory refused).
    pub fn compile_cache_dir(&self) -> Option<&Path> {
        self.shared.compile_cache.as_ref().map(|cache| cache.dir())
    }

    /// The most bytes the compile cache may hold
    /// ([`SandboxBuilder::compile_cache_max_bytes`]), or `None` when it is
    /// unbounded or there is no cache.
    ///
    /// ```
    /// use gatehouse_core::sandbox::Sandbox;
    ///
    /// let dir = tempfile::tempdir()?;
    /// let sandbox = Sandbox::builder()
    ///     .compile_cache(dir.path().join("compiled"))
    ///     .compile_cache_max_bytes(1 << 20)
    ///     .build()?;
    /// assert_eq!(sandbox.compile_cache_max_bytes(), Some(1 << 20));
    /// assert_eq!(Sandbox::builder().build()?.compile_cache_max_bytes(), None);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn compile_cache_max_bytes(&self) -> Option<u64> {
        self.shared
            .compile_cache
            .as_ref()
            .and_then(|cache| cache.max_bytes())
    }

    /// How the modules loaded so far were compiled: taken from the compile
    /// cache, compiled and stored in it, or compiled in memory (no cache);
    /// and of the functions compiled through the cache, how many were taken
    /// from it.
    ///
    /// ```
    /// use gatehouse_core::sandbox::{Limits, Sandbox};
    ///
    /// let sandbox = Sandbox::new(Limits::default())?;
    /// assert_eq!(sandbox.compile_counts().hits, 0);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn compile_counts(&self) -> CompileCounts {
        let mut counts = self.shared.compiles.read();
        if let Some(cache) = &self.shared.compile_cache {
            (counts.functions_reused, counts.functions_compiled) = cache.functions().counts();
        }
        counts
    }

    /// The engine (for `inspect`).
    pub(crate) fn engine(&self) -> &Engine {
        &self.shared.engine
    }

    /// Compiles the component `bytes`, whose sha256 is `digest`, through
    /// the compile cache when the sandbox has one (for `inspect`, which then
    /// loads the same compile with [`load_compiled`](Self::load_compiled)).
    pub(crate) fn compile(
        &self,
        bytes: &[u8],
        digest: &str,
    ) -> wasmtime::Result<wasmtime::component::Component> {
        load::compile(&self.shared, bytes, digest)
    }

    /// Loads a reviewer from a component file: reads it, checks the pin,
    /// compiles it (or takes it from the compile cache), checks that it
    /// exports the `review` interface at a supported contract version and
    /// imports nothing but `logging` and WASI 0.2, and pre-instantiates it.
    /// Its [name](ReviewerModule::name) is the file stem
    /// ([`ReviewerModule::renamed`] gives it another).
    ///
    /// `pinned_sha256` is the digest the module must have (hex, optionally
    /// prefixed `sha256:`, any case); a module whose digest differs is
    /// refused. `None` loads whatever the file holds.
    ///
    /// Every error names the file and says what is wrong with it.
    pub fn load_file(
        &self,
        path: impl AsRef<Path>,
        pinned_sha256: Option<&str>,
    ) -> Result<ReviewerModule, LoadError> {
        self.load_file_with(path, pinned_sha256, &ModuleLimits::default())
    }

    /// [`load_file`](Self::load_file), the module's reviews running under
    /// `limits` over the sandbox's own: for a module whose language runtime
    /// needs more memory, core instances or time than the defaults. Limits
    /// beyond the pool's room ([`LimitsBuilder::room_for`]) are refused
    /// ([`LoadError::BeyondPool`]), and so is a module that needs more than
    /// its limits give it ([`LoadError::OverLimit`], naming the limit).
    ///
    /// ```
    /// use gatehouse_core::sandbox::{Limits, ModuleLimits, Sandbox};
    /// # let guests = std::env::var_os("CARGO_TARGET_DIR").map_or_else(
    /// #     || std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target"),
    /// #     std::path::PathBuf::from,
    /// # ).join("wasm32-wasip2/guest");
    /// # let guardian_wasm = guests.join("gatehouse_guardian.wasm");
    /// let roomy = ModuleLimits::builder().memory_bytes(32 << 20).build();
    /// let sandbox = Sandbox::new(Limits::builder().room_for(&roomy).build())?;
    /// let guardian = sandbox.load_file_with(&guardian_wasm, None, &roomy)?;
    /// assert_eq!(guardian.limits().memory_bytes(), 32 << 20);
    /// // More than the pool was sized for is refused.
    /// let greedy = ModuleLimits::builder().memory_bytes(64 << 20).build();
    /// assert!(sandbox.load_file_with(&guardian_wasm, None, &greedy).is_err());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn load_file_with(
        &self,
        path: impl AsRef<Path>,
        pinned_sha256: Option<&str>,
        limits: &ModuleLimits,
    ) -> Result<ReviewerModule, LoadError> {
        let path = path.as_ref();
        let bytes = std::fs::read(path).map_err(|source| LoadError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        let name = path
            .file_stem()
            .map(|stem| stem.to_string_lossy().into_owned())
            .unwrap_or_else(|| "module".to_owned());
        self.load_bytes_with(
            &name,
            &path.display().to_string(),
            &bytes,
            pinned_sha256,
            limits,
        )
    }

    /// Loads a reviewer from the bytes of a component, like
    /// [`Sandbox::load_file`]: `name` names it in logs and reports, `source`
    /// says where it came from (a path, a URL) in errors.
    pub fn load_bytes(
        &self,
        name: &str,
        source: &str,
        bytes: &[u8],
        pinned_sha256: Option<&str>,
    ) -> Result<ReviewerModule, LoadError> {
        self.load_bytes_with(name, source, bytes, pinned_sha256, &ModuleLimits::default())
    }

    /// [`load_bytes`](Self::load_bytes) with the module's own limits, as
    /// [`load_file_with`](Self::load_file_with).
    pub fn load_bytes_with(
        &self,
        name: &str,
        source: &str,
        bytes: &[u8],
        pinned_sha256: Option<&str>,
        limits: &ModuleLimits,
    ) -> Result<ReviewerModule, LoadError> {
        load::load(
            self.shared.clone(),
            name,
            source,
            bytes,
            pinned_sha256,
            limits,
            None,
        )
    }

    /// [`load_bytes_with`](Self::load_bytes_with) for bytes already
    /// compiled by [`compile`](Self::compile) (for `inspect`): every check
    /// runs, the compile does not run again.
    pub(crate) fn load_compiled(
        &self,
        name: &str,
        source: &str,
        bytes: &[u8],
        component: wasmtime::component::Component,
        limits: &ModuleLimits,
    ) -> Result<ReviewerModule, LoadError> {
        load::load(
            self.shared.clone(),
            name,
            source,
            bytes,
            None,
            limits,
            Some(component),
        )
    }
}

/// Links the contract's host functions: every import of the current
/// version's worlds, and the same functions under the names of each older
/// supported version (0.1.0 has `logging` and `types`; its types are the
/// current ones, so the functions are shared as they are).
fn link_contract(linker: &mut Linker<ReviewState>) -> wasmtime::Result<()> {
    contract::ModelReviewer::add_to_linker::<_, HasSelf<ReviewState>>(linker, |state| state)?;
    let mut logging_0_1 = linker.instance(&format!("{}@0.1.0", contract::LOGGING_INTERFACE))?;
    logging_0_1.func_wrap(
        "log",
        |mut store: wasmtime::StoreContextMut<'_, ReviewState>,
         (level, message, fields): (logging::Level, String, Vec<(String, String)>)| {
            logging::Host::log(store.data_mut(), level, message, fields);
            Ok(())
        },
    )?;
    logging_0_1.func_wrap(
        "max-level",
        |mut store: wasmtime::StoreContextMut<'_, ReviewState>, (): ()| {
            Ok((logging::Host::max_level(store.data_mut()),))
        },
    )?;
    Ok(())
}
