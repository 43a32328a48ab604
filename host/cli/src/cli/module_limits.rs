//! `--deadline-ms`, `--memory-bytes`, `--core-instances`: one module's own
//! limits on the command line, as `limits = { ... }` gives them on a
//! `[[review.modules]]` entry.

use gatehouse_core::config::ModuleLimitsConfig;
use gatehouse_core::sandbox::{Limits, LimitsBuilder, ModuleLimits};

/// A module's own limits, over the defaults.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct ModuleLimitsArgs {
    /// The module's deadline per review, in milliseconds [default: 50].
    #[arg(long, value_name = "MS")]
    deadline_ms: Option<u64>,
    /// The module's linear memory cap per review, in bytes [default: 16 MiB].
    #[arg(long, value_name = "BYTES")]
    memory_bytes: Option<usize>,
    /// The most core instances the module may create [default: 32].
    #[arg(long, value_name = "N")]
    core_instances: Option<u32>,
}

impl ModuleLimitsArgs {
    /// The limits, as the sandbox takes them.
    pub fn to_module_limits(&self) -> ModuleLimits {
        ModuleLimitsConfig {
            deadline_ms: self.deadline_ms,
            memory_bytes: self.memory_bytes,
            core_instances: self.core_instances,
        }
        .to_module_limits()
    }

    /// `builder`, with room in the pool for these limits.
    pub fn make_room(&self, builder: LimitsBuilder) -> LimitsBuilder {
        builder.room_for(&self.to_module_limits())
    }

    /// The default limits, with room for these.
    pub fn sandbox_limits(&self) -> Limits {
        self.make_room(Limits::builder()).build()
    }
}
