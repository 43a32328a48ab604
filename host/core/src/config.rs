//! The `[review]` section of `gatehouse.toml`: the reviewer chain, its
//! limits and each module's configuration, as plain serde types.
//!
//! The core reads no files and knows no TOML: a host deserializes this section
//! from whatever format it uses (the `gatehouse` binary reads it from
//! `gatehouse.toml`; an embedder may use JSON).
//!
//! ```toml
//! [review]
//! on_failure = "decline"          # or "defer"
//!
//! [review.limits]
//! deadline_ms = 50
//! memory_bytes = 16777216
//!
//! [[review.modules]]
//! path = "allowlist.wasm"         # relative to the config file
//! config = { rules = [{ server = "docs", decision = "accept" }] }
//!
//! [[review.modules]]
//! path = "guardian.wasm"
//! sha256 = "…"                    # optional pin
//! config = { deny = [{ tool = "delete_*" }] }
//!
//! [[review.modules]]
//! path = "policy-py.wasm"         # a language runtime that needs more
//! limits = { memory_bytes = 33554432, core_instances = 38, deadline_ms = 200 }
//! ```
//!
//! ```
//! use gatehouse_core::config::ReviewConfig;
//!
//! let review: ReviewConfig = serde_json::from_value(serde_json::json!({
//!     "limits": {"deadline_ms": 20},
//!     "modules": [{"path": "guardian.wasm", "config": {"deny": [{"tool": "delete_*"}]}}]
//! }))?;
//! assert_eq!(review.limits.to_limits().deadline(), std::time::Duration::from_millis(20));
//! assert_eq!(review.modules[0].config_json(), r#"{"deny":[{"tool":"delete_*"}]}"#);
//! # Ok::<(), serde_json::Error>(())
//! ```

use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

use crate::chain::OnFailure;
use crate::sandbox::{Limits, ModuleLimits};

/// The `[review]` section.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReviewConfig {
    /// What a module failure means, unless a module says otherwise.
    #[serde(default)]
    pub on_failure: OnFailure,
    /// The limits every review runs under.
    #[serde(default)]
    pub limits: LimitsConfig,
    /// The chain, in order.
    #[serde(default)]
    pub modules: Vec<ModuleConfig>,
    /// Run the conformance `contract` suite on every module before it is
    /// used (at start-up and on every reload). Default true.
    #[serde(default = "yes")]
    pub verify_contract: bool,
    /// Where compiled modules are cached, relative to this file (default
    /// `.gatehouse/compiled`).
    #[serde(default)]
    pub compile_cache: Option<PathBuf>,
    /// The most bytes the compile cache may hold; storing a newly compiled
    /// module removes the least recently used others until all fit (default
    /// [`ReviewConfig::DEFAULT_COMPILE_CACHE_MAX_BYTES`], 1 GiB). Every swap
    /// to a new build adds one, so without a bound the cache grows for as
    /// long as modules are swapped.
    #[serde(default)]
    pub compile_cache_max_bytes: Option<u64>,
    /// How long `gatehouse serve` gives a chain to load (read, compile and
    /// check every module), in seconds. Past it, a reload is given up on (the
    /// old chain keeps serving, the next reload is not held up, and the build
    /// is dropped if it ends); for the first chain, what waited is declined
    /// as a failure and gatehouse stops, saying so. Default
    /// [`ReviewConfig::DEFAULT_LOAD_TIMEOUT`]; anything but a number of
    /// seconds above 0 is refused.
    #[serde(default, deserialize_with = "positive_seconds")]
    pub load_timeout_sec: Option<f64>,
}

fn yes() -> bool {
    true
}

/// `load_timeout_sec`: a finite number of seconds above 0.
fn positive_seconds<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<f64>, D::Error> {
    let sec = f64::deserialize(deserializer)?;
    if sec.is_finite() && sec > 0.0 {
        Ok(Some(sec))
    } else {
        Err(serde::de::Error::custom(format!(
            "load_timeout_sec: {sec} is not a number of seconds above 0 (the default is 300)"
        )))
    }
}

impl ReviewConfig {
    /// The compile cache's bound unless `compile_cache_max_bytes` says
    /// otherwise: 1 GiB, the authoring commands' own cache's.
    pub const DEFAULT_COMPILE_CACHE_MAX_BYTES: u64 = 1 << 30;

    /// A chain's load bound unless `load_timeout_sec` says otherwise:
    /// 5 minutes. A cold compile of the TypeScript template (12 MB)
    /// takes 7 to 10 s on 2 cores; the registry lets in modules up to 64 MiB.
    pub const DEFAULT_LOAD_TIMEOUT: Duration = Duration::from_secs(300);

    /// `load_timeout_sec`, the default filled in.
    ///
    /// ```
    /// use std::time::Duration;
    /// use gatehouse_core::config::ReviewConfig;
    /// assert_eq!(ReviewConfig::default().load_timeout(), Duration::from_secs(300));
    /// let review: ReviewConfig =
    ///     serde_json::from_value(serde_json::json!({"load_timeout_sec": 2.5}))?;
    /// assert_eq!(review.load_timeout(), Duration::from_millis(2500));
    /// let refused = serde_json::from_value::<ReviewConfig>(serde_json::json!({"load_timeout_sec": 0}));
    /// assert!(refused.unwrap_err().to_string().contains("load_timeout_sec: 0 is not"));
    /// # Ok::<(), serde_json::Error>(())
    /// ```
    pub fn load_timeout(&self) -> Duration {
        match self.load_timeout_sec {
            // Longer than a Duration holds: as good as forever.
            Some(sec) if sec.is_finite() && sec > 0.0 => {
                Duration::try_from_secs_f64(sec).unwrap_or(Duration::MAX)
            }
            // Refused when read; set in code, the default.
            _ => Self::DEFAULT_LOAD_TIMEOUT,
        }
    }

    /// `compile_cache_max_bytes`, the default filled in.
    ///
    /// ```
    /// use gatehouse_core::config::ReviewConfig;
    /// assert_eq!(ReviewConfig::default().compile_cache_max_bytes(), 1 << 30);
    /// let review: ReviewConfig =
    ///     serde_json::from_value(serde_json::json!({"compile_cache_max_bytes": 4096}))?;
    /// assert_eq!(review.compile_cache_max_bytes(), 4096);
    /// # Ok::<(), serde_json::Error>(())
    /// ```
    pub fn compile_cache_max_bytes(&self) -> u64 {
        self.compile_cache_max_bytes
            .unwrap_or(Self::DEFAULT_COMPILE_CACHE_MAX_BYTES)
    }

    /// The section's limits, defaults filled in, with room in the pool for
    /// every module's own limits: what a sandbox for this chain is built
    /// with.
    ///
    /// ```
    /// use gatehouse_core::config::ReviewConfig;
    /// let review: ReviewConfig = serde_json::from_value(serde_json::json!({
    ///     "modules": [{"path": "py.wasm", "limits": {"memory_bytes": 33554432}}]
    /// }))?;
    /// let limits = review.to_limits();
    /// assert_eq!(limits.memory_bytes(), 16 << 20);
    /// assert_eq!(limits.pool_memory_bytes(), 32 << 20);
    /// # Ok::<(), serde_json::Error>(())
    /// ```
    pub fn to_limits(&self) -> Limits {
        let mut builder = self.limits.to_builder();
        for module in &self.modules {
            builder = builder.room_for(&module.module_limits());
        }
        builder.build()
    }
}

impl Default for ReviewConfig {
    fn default() -> Self {
        ReviewConfig {
            on_failure: OnFailure::default(),
            limits: LimitsConfig::default(),
            modules: Vec::new(),
            verify_contract: true,
            compile_cache: None,
            compile_cache_max_bytes: None,
            load_timeout_sec: None,
        }
    }
}

/// `[review.limits]`; every field is optional and defaults as in [`Limits`].
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LimitsConfig {
    /// Deadline per review, in milliseconds.
    pub deadline_ms: Option<u64>,
    /// Linear memory cap per review, in bytes.
    pub memory_bytes: Option<usize>,
    /// Table element cap.
    pub table_elements: Option<usize>,
    /// Host resources (handles) one review may hold at once (default 4,096).
    pub handles: Option<usize>,
    /// Cap on the text an outcome carries, in bytes.
    pub output_bytes: Option<usize>,
    /// Wasm stack cap, in bytes.
    pub wasm_stack_bytes: Option<usize>,
    /// Log entries kept per review.
    pub log_entries: Option<usize>,
    /// Log text kept per review, in bytes.
    pub log_bytes: Option<usize>,
    /// Reviews in flight at once (sizes the instance pool).
    pub concurrent_reviews: Option<u32>,
    /// Reviews of modules granted a model that may be in flight beyond
    /// `concurrent_reviews` (default 16).
    pub model_reviews: Option<u32>,
    /// Core instances a module may create (default 32).
    pub core_instances: Option<u32>,
}

impl LimitsConfig {
    /// The limits, defaults filled in (with no room for modules' own limits:
    /// see [`ReviewConfig::to_limits`]).
    pub fn to_limits(&self) -> Limits {
        self.to_builder().build()
    }

    fn to_builder(&self) -> crate::sandbox::LimitsBuilder {
        let mut builder = Limits::builder();
        if let Some(ms) = self.deadline_ms {
            builder = builder.deadline(Duration::from_millis(ms));
        }
        if let Some(bytes) = self.memory_bytes {
            builder = builder.memory_bytes(bytes);
        }
        if let Some(elements) = self.table_elements {
            builder = builder.table_elements(elements);
        }
        if let Some(handles) = self.handles {
            builder = builder.handles(handles);
        }
        if let Some(bytes) = self.output_bytes {
            builder = builder.output_bytes(bytes);
        }
        if let Some(bytes) = self.wasm_stack_bytes {
            builder = builder.wasm_stack_bytes(bytes);
        }
        if let Some(entries) = self.log_entries {
            builder = builder.log_entries(entries);
        }
        if let Some(bytes) = self.log_bytes {
            builder = builder.log_bytes(bytes);
        }
        if let Some(reviews) = self.concurrent_reviews {
            builder = builder.concurrent_reviews(reviews);
        }
        if let Some(reviews) = self.model_reviews {
            builder = builder.model_reviews(reviews);
        }
        if let Some(instances) = self.core_instances {
            builder = builder.core_instances(instances);
        }
        builder
    }
}

/// A module's own `limits = { ... }`, over `[review.limits]`; every field is
/// optional. For a module whose language runtime needs more than the
/// section's defaults (CPython's memory, say), and only that module.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModuleLimitsConfig {
    /// Its deadline per review, in milliseconds.
    pub deadline_ms: Option<u64>,
    /// Its linear memory cap per review, in bytes.
    pub memory_bytes: Option<usize>,
    /// The most core instances it may create.
    pub core_instances: Option<u32>,
}

impl ModuleLimitsConfig {
    /// The limits, as the sandbox takes them.
    pub fn to_module_limits(&self) -> ModuleLimits {
        let mut builder = ModuleLimits::builder();
        if let Some(ms) = self.deadline_ms {
            builder = builder.deadline(Duration::from_millis(ms));
        }
        if let Some(bytes) = self.memory_bytes {
            builder = builder.memory_bytes(bytes);
        }
        if let Some(instances) = self.core_instances {
            builder = builder.core_instances(instances);
        }
        builder.build()
    }
}

/// One `[[review.modules]]` entry.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModuleConfig {
    /// The component file, relative to the config file (or [`oci`](Self::oci)).
    #[serde(default)]
    pub path: Option<PathBuf>,
    /// The module's reference in an OCI registry, `HOST[:PORT]/REPO:TAG`
    /// (or [`path`](Self::path)): a host runs the digest its lock file names
    /// for it, from its store (the `gatehouse` binary: `gatehouse.lock` and
    /// `gatehouse modules update`). The core only carries the text.
    #[serde(default)]
    pub oci: Option<String>,
    /// The name in logs and audit lines (default: the file stem).
    #[serde(default)]
    pub name: Option<String>,
    /// A pinned sha256 (hex); a module whose digest differs is refused.
    #[serde(default)]
    pub sha256: Option<String>,
    /// What this module's failure means (default: the section's).
    #[serde(default)]
    pub on_failure: Option<OnFailure>,
    /// The module's configuration, handed to it as JSON.
    #[serde(default)]
    pub config: Option<serde_json::Value>,
    /// The model the operator grants this module (`[models.NAME]`), if
    /// any. Only a granted module may import the model capability.
    #[serde(default)]
    pub model: Option<String>,
    /// Its own limits over `[review.limits]`.
    #[serde(default)]
    pub limits: ModuleLimitsConfig,
    /// `live` (the default): it is part of the chain. `shadow`: it reviews
    /// every elicitation the chain reviews, beside it, and never decides;
    /// a host records its verdicts for comparison.
    #[serde(default)]
    pub mode: ModuleMode,
}

/// Whether a module decides ([`ModuleConfig::mode`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ModuleMode {
    /// Part of the chain.
    #[default]
    Live,
    /// Reviews beside the chain, never deciding.
    Shadow,
}

/// Where a module's component comes from: [`ModuleConfig::source`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ModuleSource<'a> {
    /// A file, relative to the config file.
    File(&'a std::path::Path),
    /// A reference in an OCI registry, as written.
    Oci(&'a str),
}

/// A module entry that names neither or both of `path` and `oci`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SourceError {
    /// Neither.
    #[error("name the component: `path = \"FILE.wasm\"` or `oci = \"HOST/REPO:TAG\"`")]
    Missing,
    /// Both.
    #[error("`path` and `oci` both name the component; keep one")]
    Both,
}

impl ModuleConfig {
    /// An entry for the component file `path`, with nothing else set.
    pub fn file(path: impl Into<PathBuf>) -> ModuleConfig {
        ModuleConfig {
            path: Some(path.into()),
            oci: None,
            name: None,
            sha256: None,
            on_failure: None,
            config: None,
            model: None,
            limits: ModuleLimitsConfig::default(),
            mode: ModuleMode::Live,
        }
    }

    /// Where the component comes from: exactly one of `path` and `oci`.
    pub fn source(&self) -> Result<ModuleSource<'_>, SourceError> {
        match (&self.path, &self.oci) {
            (Some(path), None) => Ok(ModuleSource::File(path)),
            (None, Some(reference)) => Ok(ModuleSource::Oci(reference)),
            (None, None) => Err(SourceError::Missing),
            (Some(_), Some(_)) => Err(SourceError::Both),
        }
    }

    /// Its own limits, as the sandbox takes them.
    pub fn module_limits(&self) -> ModuleLimits {
        self.limits.to_module_limits()
    }

    /// The module configuration as JSON text (`{}` when none is set).
    pub fn config_json(&self) -> String {
        self.config
            .as_ref()
            .map_or_else(|| "{}".to_owned(), serde_json::Value::to_string)
    }

    /// The chain link for `module` as this entry configures it: its JSON
    /// config, what its failure means (`default_on_failure` unless the entry
    /// says), and the model it is granted, looked up by name in `models`.
    /// Refuses a grant of an undefined model, and a module that imports the
    /// model capability without a grant ([`ChainLink::check_grant`](crate::chain::ChainLink::check_grant)).
    pub fn link(
        &self,
        module: std::sync::Arc<crate::sandbox::ReviewerModule>,
        default_on_failure: OnFailure,
        models: &std::collections::BTreeMap<String, crate::model::ModelGrant>,
    ) -> Result<crate::chain::ChainLink, crate::chain::GrantError> {
        let mut link = crate::chain::ChainLink::new(module)
            .with_config(self.config_json())
            .with_on_failure(self.on_failure.unwrap_or(default_on_failure));
        if let Some(name) = &self.model {
            let grant = models
                .get(name)
                .ok_or_else(|| crate::chain::GrantError::UnknownModel {
                    module: link.module.name().to_owned(),
                    model: name.clone(),
                    defined: if models.is_empty() {
                        String::new()
                    } else {
                        format!(
                            "; defined: {}",
                            models
                                .keys()
                                .map(String::as_str)
                                .collect::<Vec<_>>()
                                .join(", ")
                        )
                    },
                })?;
            link = link.with_model(grant.clone());
        }
        link.check_grant()?;
        Ok(link)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_fill_in_defaults() {
        let limits: LimitsConfig = serde_json::from_str(r#"{"deadline_ms": 20}"#).expect("parses");
        let limits = limits.to_limits();
        assert_eq!(limits.deadline(), Duration::from_millis(20));
        assert_eq!(limits.memory_bytes(), Limits::default().memory_bytes());
    }

    #[test]
    fn module_limits_override_only_their_module_and_size_the_pool() {
        let review: ReviewConfig = serde_json::from_str(
            r#"{"limits": {"memory_bytes": 8388608},
                "modules": [{"path": "a.wasm"},
                            {"path": "b.wasm", "limits": {"memory_bytes": 67108864, "core_instances": 40, "deadline_ms": 300}}]}"#,
        )
        .expect("parses");
        let limits = review.to_limits();
        assert_eq!(limits.memory_bytes(), 8 << 20);
        assert_eq!(limits.pool_memory_bytes(), 64 << 20);
        assert_eq!(limits.pool_core_instances(), 40);
        assert!(review.modules[0].module_limits().is_empty());
        let b = limits.for_module(&review.modules[1].module_limits());
        assert_eq!(b.memory_bytes(), 64 << 20);
        assert_eq!(b.core_instances(), 40);
        assert_eq!(b.deadline(), Duration::from_millis(300));
        let error = serde_json::from_str::<ReviewConfig>(
            r#"{"modules": [{"path": "a.wasm", "limits": {"memory": 1}}]}"#,
        )
        .expect_err("refused")
        .to_string();
        assert!(error.contains("memory"), "{error}");
    }

    #[test]
    fn unknown_review_keys_are_refused_by_name() {
        let error = serde_json::from_str::<ReviewConfig>(r#"{"modlues": []}"#)
            .expect_err("refused")
            .to_string();
        assert!(error.contains("modlues"), "{error}");
    }
}
