//! What an instance tells the console about itself, for the operator's
//! view: the modules in its chain, when the chain was last swapped, and its
//! backends (MCP servers).

use serde::{Deserialize, Serialize};

use crate::question::bounded;

/// The most modules or backends one status lists.
pub const MAX_ENTRIES: usize = 256;

/// One instance's state.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InstanceStatus {
    /// The config file it serves.
    pub config: String,
    /// The modules, live ones in chain order, then shadow ones.
    pub modules: Vec<ModuleStatus>,
    /// Whether every module passed the conformance kit's `contract` suite
    /// before it was swapped in (`[review] verify_contract`), or the kit
    /// did not run.
    pub kit: KitStatus,
    /// When the chain was last swapped in (Unix milliseconds).
    pub swapped_at_ms: Option<u64>,
    /// The backends.
    pub backends: Vec<BackendStatus>,
    /// Elicitations being routed right now.
    pub in_flight: u64,
}

/// Whether the kit checked the chain.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum KitStatus {
    /// Every module passed it before the swap.
    Passed,
    /// The first chain is still loading (or did not load): its checks have
    /// not all passed yet.
    Pending,
    /// `verify_contract` is off.
    #[default]
    Off,
}

/// A module in the chain.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModuleStatus {
    /// Its name in the chain.
    pub name: String,
    /// The sha256 of its component.
    pub digest: String,
    /// Who signed it, when it came from a registry with a trusted signature.
    pub signer: Option<String>,
    /// `live` or `shadow`.
    pub mode: String,
}

/// A backend MCP server.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BackendStatus {
    /// Its configured name.
    pub name: String,
    /// `connected`, `failed` or `starting`.
    pub state: String,
    /// The tools it offers, or why it failed.
    pub detail: Option<String>,
}

impl InstanceStatus {
    /// The status with its lists and text cut to the console's bounds.
    pub fn bounded(mut self) -> InstanceStatus {
        self.config = bounded(&self.config);
        self.modules.truncate(MAX_ENTRIES);
        for module in &mut self.modules {
            module.name = bounded(&module.name);
            module.digest = bounded(&module.digest);
            module.signer = module.signer.as_deref().map(bounded);
            module.mode = bounded(&module.mode);
        }
        self.backends.truncate(MAX_ENTRIES);
        for backend in &mut self.backends {
            backend.name = bounded(&backend.name);
            backend.state = bounded(&backend.state);
            backend.detail = backend.detail.as_deref().map(bounded);
        }
        self
    }
}
