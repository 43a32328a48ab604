//! The component a `[[review.modules]]` entry names: a file beside the
//! config, or an `oci` reference, which runs at exactly the digest
//! `gatehouse.lock` names for it, read from the module store (verified on
//! the read) without any network. A reference the lock does not name, or
//! whose blobs the store lacks, is refused with what to run.

use std::path::PathBuf;

use gatehouse_core::config::{ModuleConfig, ModuleSource};
use gatehouse_registry::lock::{Lock, LockError, LockedModule};
use gatehouse_registry::{Store, StoreError};

use crate::config::Config;

/// A module's component, ready to load.
#[derive(Debug, Clone)]
pub struct Component {
    /// The bytes.
    pub bytes: Vec<u8>,
    /// Where they came from, for logs and errors: the file, or
    /// `REF@sha256:…` (the manifest digest).
    pub source: String,
    /// The module's name unless the entry gives one: the file stem, or the
    /// repository's last component.
    pub default_name: String,
    /// The sha256 the bytes must have: the entry's pin for a file, the
    /// locked component digest for a reference.
    pub sha256: Option<String>,
    /// The lock entry, for a reference.
    pub locked: Option<LockedModule>,
}

/// Why a module's component could not be had.
#[derive(Debug, thiserror::Error)]
pub enum ComponentError {
    /// The entry names no component, or two.
    #[error("review.modules[{index}]: {source}")]
    Source {
        /// Its position.
        index: usize,
        /// What is wrong.
        source: gatehouse_core::config::SourceError,
    },
    /// A file could not be read.
    #[error("{}: cannot read the module: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The lock file could not be read.
    #[error(transparent)]
    Lock(#[from] LockError),
    /// The reference is not locked.
    #[error(
        "review.modules[{index}]: {reference} is not in {}; run `gatehouse modules update --config {}`",
        lock.display(),
        config.display()
    )]
    NotLocked {
        /// Its position.
        index: usize,
        /// The reference, escaped.
        reference: String,
        /// The lock file.
        lock: PathBuf,
        /// The config file.
        config: PathBuf,
    },
    /// The store lacks a locked blob, or it no longer has its digest.
    #[error(
        "review.modules[{index}]: {reference}: {source}; fetch the locked version again with `gatehouse modules pull {pinned} --config {}`",
        config.display()
    )]
    Store {
        /// Its position.
        index: usize,
        /// The reference, escaped.
        reference: String,
        /// The reference pinned at the locked manifest, escaped.
        pinned: String,
        /// The config file.
        config: PathBuf,
        /// The store's error.
        source: Box<StoreError>,
    },
    /// The locked manifest does not name the locked component.
    #[error("review.modules[{index}]: {reference}: {problem}")]
    Manifest {
        /// Its position.
        index: usize,
        /// The reference, escaped.
        reference: String,
        /// What is wrong.
        problem: String,
    },
}

/// Reads the components of a config's modules; the lock file and the store
/// are opened once, at the first `oci` entry.
#[derive(Debug)]
pub struct Components<'a> {
    config: &'a Config,
    opened: Option<(Option<Lock>, Store)>,
}

impl<'a> Components<'a> {
    /// The components of `config`'s modules.
    pub fn new(config: &'a Config) -> Components<'a> {
        Components {
            config,
            opened: None,
        }
    }

    /// The component of entry `index`.
    pub fn get(&mut self, index: usize, spec: &ModuleConfig) -> Result<Component, ComponentError> {
        match spec
            .source()
            .map_err(|source| ComponentError::Source { index, source })?
        {
            ModuleSource::File(path) => {
                let path = self.config.base_dir().join(path);
                let bytes = std::fs::read(&path).map_err(|source| ComponentError::Read {
                    path: path.clone(),
                    source,
                })?;
                Ok(Component {
                    bytes,
                    source: path.display().to_string(),
                    default_name: path
                        .file_stem()
                        .map(|stem| stem.to_string_lossy().into_owned())
                        .unwrap_or_else(|| "module".to_owned()),
                    sha256: spec.sha256.clone(),
                    locked: None,
                })
            }
            ModuleSource::Oci(reference) => self.locked(index, reference),
        }
    }

    fn locked(&mut self, index: usize, reference: &str) -> Result<Component, ComponentError> {
        let shown = gatehouse_base::escape::escape(reference).into_owned();
        let config_path = self.config.origin.clone();
        let (lock, store) = match &mut self.opened {
            Some(opened) => &*opened,
            None => {
                let lock = Lock::read(&self.config.lock_path())?;
                let store = Store::open(self.config.store_dir()).map_err(|source| {
                    ComponentError::Store {
                        index,
                        reference: shown.clone(),
                        pinned: shown.clone(),
                        config: config_path.clone(),
                        source: Box::new(source),
                    }
                })?;
                &*self.opened.insert((lock, store))
            }
        };
        // The config checked the reference when it was read.
        let parsed = reference.parse::<gatehouse_registry::ModuleRef>().ok();
        let Some(entry) = lock.as_ref().and_then(|lock| lock.find(reference)) else {
            return Err(ComponentError::NotLocked {
                index,
                reference: shown,
                lock: self.config.lock_path(),
                config: config_path,
            });
        };
        let pinned = parsed.as_ref().map_or_else(
            || shown.clone(),
            |parsed| {
                gatehouse_base::escape::escape(&parsed.pinned(&entry.manifest).to_string())
                    .into_owned()
            },
        );
        let store_error = |source| ComponentError::Store {
            index,
            reference: shown.clone(),
            pinned: pinned.clone(),
            config: config_path.clone(),
            source: Box::new(source),
        };
        let manifest = store.get(&entry.manifest).map_err(store_error)?;
        let checked = gatehouse_registry::layout::check_manifest(reference, &manifest, u64::MAX)
            .map_err(|err| ComponentError::Manifest {
                index,
                reference: shown.clone(),
                problem: err.to_string(),
            })?;
        if checked.layer.digest != entry.component {
            return Err(ComponentError::Manifest {
                index,
                reference: shown,
                problem: format!(
                    "the locked manifest {} names the component {}, the lock {}",
                    entry.manifest, checked.layer.digest, entry.component
                ),
            });
        }
        let bytes = store.get(&entry.component).map_err(store_error)?;
        let default_name = parsed
            .as_ref()
            .map_or("module", |parsed| parsed.short_name())
            .to_owned();
        Ok(Component {
            bytes,
            source: format!("{shown}@{}", entry.manifest),
            default_name,
            sha256: Some(entry.component.hex().to_owned()),
            locked: Some(entry.clone()),
        })
    }
}
