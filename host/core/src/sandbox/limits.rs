//! Per-review limits, each module's own ([`ModuleLimits`]), and the pool
//! they size.

use std::time::Duration;

/// The bounds every review runs under. Build with [`Limits::builder`].
///
/// ```
/// use std::time::Duration;
/// use gatehouse_core::sandbox::Limits;
/// let limits = Limits::builder()
///     .deadline(Duration::from_millis(20))
///     .memory_bytes(8 << 20)
///     .build();
/// assert_eq!(limits.deadline(), Duration::from_millis(20));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    deadline: Duration,
    memory_bytes: usize,
    core_instances: u32,
    room_memory_bytes: usize,
    room_core_instances: u32,
    table_elements: usize,
    handles: usize,
    output_bytes: usize,
    wasm_stack_bytes: usize,
    log_entries: usize,
    log_bytes: usize,
    stderr_bytes: usize,
    concurrent_reviews: u32,
    model_reviews: u32,
    epoch_tick: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            deadline: Duration::from_millis(50),
            memory_bytes: 16 << 20,
            core_instances: 32,
            room_memory_bytes: 0,
            room_core_instances: 0,
            table_elements: 10_000,
            handles: 4_096,
            output_bytes: 64 << 10,
            wasm_stack_bytes: 512 << 10,
            log_entries: 64,
            log_bytes: 16 << 10,
            stderr_bytes: 4 << 10,
            concurrent_reviews: 64,
            model_reviews: 16,
            epoch_tick: Duration::from_millis(1),
        }
    }
}

impl Limits {
    /// A builder starting from the defaults: 50 ms deadline, 16 MiB memory,
    /// 32 core instances per module, 10,000 table elements, 4,096 handles,
    /// 64 KiB output, 512 KiB wasm stack, 64 log
    /// entries and 16 KiB of log text per review, 4 KiB of captured stderr, 64
    /// reviews in flight and 16 more waiting on a model, 1 ms between
    /// interruptions of an overdue review.
    pub fn builder() -> LimitsBuilder {
        LimitsBuilder(Limits::default())
    }

    /// A builder starting from these limits.
    pub fn to_builder(&self) -> LimitsBuilder {
        LimitsBuilder(self.clone())
    }

    /// How long one review may run.
    pub fn deadline(&self) -> Duration {
        self.deadline
    }
    /// The most linear memory one review may use.
    pub fn memory_bytes(&self) -> usize {
        self.memory_bytes
    }
    /// The most core WebAssembly instances a module may create per
    /// instantiation (a Rust `wasm32-wasip2` component creates 3, a
    /// componentize-py one 14).
    pub fn core_instances(&self) -> u32 {
        self.core_instances
    }
    /// The most linear memory any module loaded into a sandbox with these
    /// limits may be given ([`ModuleLimits::memory_bytes`]): at least
    /// [`memory_bytes`](Self::memory_bytes), raised by
    /// [`LimitsBuilder::room_for`]. Every pool slot reserves this much
    /// address space.
    pub fn pool_memory_bytes(&self) -> usize {
        self.memory_bytes.max(self.room_memory_bytes)
    }
    /// The most core instances any module may be given
    /// ([`ModuleLimits::core_instances`]): at least
    /// [`core_instances`](Self::core_instances), raised by
    /// [`LimitsBuilder::room_for`].
    pub fn pool_core_instances(&self) -> u32 {
        self.core_instances.max(self.room_core_instances)
    }
    /// These limits with `module`'s overrides: what one module's reviews run
    /// under. The pool's room is kept.
    ///
    /// ```
    /// use std::time::Duration;
    /// use gatehouse_core::sandbox::{Limits, ModuleLimits};
    /// let module = ModuleLimits::builder().memory_bytes(64 << 20).build();
    /// let limits = Limits::builder().room_for(&module).build();
    /// let python = limits.for_module(&module);
    /// assert_eq!(python.memory_bytes(), 64 << 20);
    /// assert_eq!(python.deadline(), limits.deadline());
    /// ```
    pub fn for_module(&self, module: &ModuleLimits) -> Limits {
        let mut limits = self.clone();
        if let Some(deadline) = module.deadline {
            limits.deadline = deadline;
        }
        if let Some(bytes) = module.memory_bytes {
            limits.memory_bytes = bytes;
        }
        if let Some(instances) = module.core_instances {
            limits.core_instances = instances;
        }
        limits.room_memory_bytes = self.pool_memory_bytes();
        limits.room_core_instances = self.pool_core_instances();
        limits
    }
    /// The most elements a table may hold.
    pub fn table_elements(&self) -> usize {
        self.table_elements
    }
    /// The most host resources (WASI pollables, streams, the model's and the
    /// call's handles) one review may hold at once. Each lives in host
    /// memory, outside the guest's memory cap (a pollable costs some 250
    /// bytes), so this bounds what a guest can make the host allocate: at
    /// the default 4,096, about 1 MiB per review. A reviewer needs a handful;
    /// wasmtime's own default of 100,000 let a guest pin some 25 MB. A guest
    /// past the cap fails with [`ReviewFailure::Handles`](crate::failure::ReviewFailure::Handles).
    pub fn handles(&self) -> usize {
        self.handles
    }
    /// The most bytes of text an outcome may carry.
    pub fn output_bytes(&self) -> usize {
        self.output_bytes
    }
    /// The wasm stack cap.
    pub fn wasm_stack_bytes(&self) -> usize {
        self.wasm_stack_bytes
    }
    /// The most log entries kept per review.
    pub fn log_entries(&self) -> usize {
        self.log_entries
    }
    /// The most bytes of log text kept per review.
    pub fn log_bytes(&self) -> usize {
        self.log_bytes
    }
    /// The most bytes of guest stderr kept per review.
    pub fn stderr_bytes(&self) -> usize {
        self.stderr_bytes
    }
    /// How many reviews may run at once (sizes the instance pool).
    pub fn concurrent_reviews(&self) -> u32 {
        self.concurrent_reviews
    }
    /// How many reviews of modules granted a model may be in flight at once,
    /// beyond [`concurrent_reviews`](Self::concurrent_reviews): their
    /// instances live while they wait on the model, so they get pool slots of
    /// their own, and a host admits them separately so that slow model calls
    /// never hold the slots rule-based reviews need.
    pub fn model_reviews(&self) -> u32 {
        self.model_reviews
    }
    /// Instance pool slots: [`concurrent_reviews`](Self::concurrent_reviews)
    /// plus [`model_reviews`](Self::model_reviews).
    pub fn pool_slots(&self) -> u32 {
        self.concurrent_reviews.saturating_add(self.model_reviews)
    }
    /// How long after interrupting a review past its deadline the deadline
    /// thread interrupts again if it is still running (inside a host call,
    /// say). A review is interrupted when its deadline passes, not on a tick.
    pub fn epoch_tick(&self) -> Duration {
        self.epoch_tick
    }
}

/// Builds [`Limits`].
#[derive(Debug, Clone)]
pub struct LimitsBuilder(Limits);

impl LimitsBuilder {
    /// How long one review may run.
    pub fn deadline(mut self, deadline: Duration) -> Self {
        self.0.deadline = deadline;
        self
    }
    /// The most linear memory one review may use.
    pub fn memory_bytes(mut self, bytes: usize) -> Self {
        self.0.memory_bytes = bytes;
        self
    }
    /// The most core instances a module may create per instantiation (at
    /// least 1).
    pub fn core_instances(mut self, instances: u32) -> Self {
        self.0.core_instances = instances.max(1);
        self
    }
    /// Makes room in the pool for a module loaded with `module`'s limits:
    /// raises [`Limits::pool_memory_bytes`] and
    /// [`Limits::pool_core_instances`] to cover them. Call it for every
    /// module the sandbox will load with limits of its own; a module whose
    /// limits do not fit the pool is refused when it is loaded.
    pub fn room_for(mut self, module: &ModuleLimits) -> Self {
        if let Some(bytes) = module.memory_bytes {
            self.0.room_memory_bytes = self.0.room_memory_bytes.max(bytes);
        }
        if let Some(instances) = module.core_instances {
            self.0.room_core_instances = self.0.room_core_instances.max(instances);
        }
        self
    }
    /// The most elements a table may hold.
    pub fn table_elements(mut self, elements: usize) -> Self {
        self.0.table_elements = elements;
        self
    }
    /// The most host resources one review may hold at once (at least 16:
    /// WASI's stdio and clocks need a few).
    pub fn handles(mut self, handles: usize) -> Self {
        self.0.handles = handles.max(16);
        self
    }
    /// The most bytes of text an outcome may carry.
    pub fn output_bytes(mut self, bytes: usize) -> Self {
        self.0.output_bytes = bytes;
        self
    }
    /// The wasm stack cap.
    pub fn wasm_stack_bytes(mut self, bytes: usize) -> Self {
        self.0.wasm_stack_bytes = bytes;
        self
    }
    /// The most log entries kept per review.
    pub fn log_entries(mut self, entries: usize) -> Self {
        self.0.log_entries = entries;
        self
    }
    /// The most bytes of log text kept per review.
    pub fn log_bytes(mut self, bytes: usize) -> Self {
        self.0.log_bytes = bytes;
        self
    }
    /// The most bytes of guest stderr kept per review.
    pub fn stderr_bytes(mut self, bytes: usize) -> Self {
        self.0.stderr_bytes = bytes;
        self
    }
    /// How many reviews may run at once (at least 1).
    pub fn concurrent_reviews(mut self, reviews: u32) -> Self {
        self.0.concurrent_reviews = reviews.max(1);
        self
    }
    /// How many reviews of modules granted a model may be in flight beyond
    /// `concurrent_reviews` (at least 1).
    pub fn model_reviews(mut self, reviews: u32) -> Self {
        self.0.model_reviews = reviews.max(1);
        self
    }
    /// The interval between interruptions of an overdue review (at least
    /// 100 µs).
    pub fn epoch_tick(mut self, tick: Duration) -> Self {
        self.0.epoch_tick = tick.max(Duration::from_micros(100));
        self
    }
    /// The limits.
    pub fn build(self) -> Limits {
        self.0
    }
}

/// One module's own limits, over its sandbox's [`Limits`]: what a module
/// whose language runtime needs more memory, more core instances or more time
/// than the defaults is given, and nothing else is. Unset fields are the
/// sandbox's. Build with [`ModuleLimits::builder`]; load with
/// [`Sandbox::load_file_with`](super::Sandbox::load_file_with), into a
/// sandbox whose limits made [room](LimitsBuilder::room_for) for them.
///
/// ```
/// use std::time::Duration;
/// use gatehouse_core::sandbox::ModuleLimits;
/// let python = ModuleLimits::builder()
///     .memory_bytes(32 << 20)
///     .deadline(Duration::from_millis(200))
///     .build();
/// assert_eq!(python.memory_bytes(), Some(32 << 20));
/// assert_eq!(python.core_instances(), None);
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ModuleLimits {
    deadline: Option<Duration>,
    memory_bytes: Option<usize>,
    core_instances: Option<u32>,
}

impl ModuleLimits {
    /// A builder with nothing overridden.
    pub fn builder() -> ModuleLimitsBuilder {
        ModuleLimitsBuilder(ModuleLimits::default())
    }
    /// The module's deadline per review, if its own.
    pub fn deadline(&self) -> Option<Duration> {
        self.deadline
    }
    /// The module's memory cap per review, if its own.
    pub fn memory_bytes(&self) -> Option<usize> {
        self.memory_bytes
    }
    /// The most core instances the module may create, if its own.
    pub fn core_instances(&self) -> Option<u32> {
        self.core_instances
    }
    /// Whether nothing is overridden.
    pub fn is_empty(&self) -> bool {
        *self == ModuleLimits::default()
    }
}

/// Builds [`ModuleLimits`].
#[derive(Debug, Clone)]
pub struct ModuleLimitsBuilder(ModuleLimits);

impl ModuleLimitsBuilder {
    /// The module's deadline per review.
    pub fn deadline(mut self, deadline: Duration) -> Self {
        self.0.deadline = Some(deadline);
        self
    }
    /// The module's memory cap per review.
    pub fn memory_bytes(mut self, bytes: usize) -> Self {
        self.0.memory_bytes = Some(bytes);
        self
    }
    /// The most core instances the module may create (at least 1).
    pub fn core_instances(mut self, instances: u32) -> Self {
        self.0.core_instances = Some(instances.max(1));
        self
    }
    /// The limits.
    pub fn build(self) -> ModuleLimits {
        self.0
    }
}
