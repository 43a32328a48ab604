//! The `[registry]` section of `gatehouse.toml`, as plain serde types: where
//! the store is and how registries are reached.
//!
//! ```toml
//! [registry]
//! store = ".gatehouse/store"          # relative to the config file (default)
//! insecure = ["registry.lab:5000"]    # plain HTTP besides loopback
//! ca_files = ["certs/lab-ca.pem"]     # CAs beside the platform's
//! timeout_sec = 120                   # one push or pull, retries included
//! attempts = 3                        # tries of a request a retry can cure
//! max_module_bytes = 67108864
//! ```
//!
//! ```
//! use gatehouse_registry::config::RegistryConfig;
//!
//! let config: RegistryConfig = serde_json::from_value(serde_json::json!({
//!     "insecure": ["registry.lab:5000"],
//!     "attempts": 2
//! }))?;
//! let access = config.access(std::path::Path::new("/etc/gatehouse"));
//! assert!(access.allows_plain_http("registry.lab:5000"));
//! assert_eq!(config.store_dir(std::path::Path::new("/etc/gatehouse")),
//!            std::path::Path::new("/etc/gatehouse/.gatehouse/store"));
//! # Ok::<(), serde_json::Error>(())
//! ```

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use crate::access::Access;

/// The store's default place, relative to the config file.
pub const DEFAULT_STORE: &str = ".gatehouse/store";

/// The `[registry]` section.
#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct RegistryConfig {
    /// The store directory (default [`DEFAULT_STORE`]).
    #[serde(default)]
    pub store: Option<PathBuf>,
    /// Hosts (`HOST` or `HOST:PORT`) reached over plain HTTP besides loopback.
    #[serde(default)]
    pub insecure: Vec<String>,
    /// PEM files of CAs to trust beside the platform's.
    #[serde(default)]
    pub ca_files: Vec<PathBuf>,
    /// The bound on one push or pull, in seconds.
    #[serde(default)]
    pub timeout_sec: Option<u64>,
    /// How many times a request is tried.
    #[serde(default)]
    pub attempts: Option<u32>,
    /// The bound on a module's size.
    #[serde(default)]
    pub max_module_bytes: Option<u64>,
}

impl RegistryConfig {
    /// The store directory, relative paths taken from `base_dir`.
    pub fn store_dir(&self, base_dir: &Path) -> PathBuf {
        base_dir.join(
            self.store
                .clone()
                .unwrap_or_else(|| PathBuf::from(DEFAULT_STORE)),
        )
    }

    /// The access this section describes, relative paths taken from
    /// `base_dir`.
    pub fn access(&self, base_dir: &Path) -> Access {
        let mut builder = Access::builder().insecure(self.insecure.iter().cloned());
        for file in &self.ca_files {
            builder = builder.ca_file(base_dir.join(file));
        }
        if let Some(seconds) = self.timeout_sec {
            builder = builder.operation_timeout(Duration::from_secs(seconds));
        }
        if let Some(attempts) = self.attempts {
            builder = builder.attempts(attempts);
        }
        if let Some(bytes) = self.max_module_bytes {
            builder = builder.max_module_bytes(bytes);
        }
        builder.build()
    }
}
