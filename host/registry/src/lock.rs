//! The lock file, `gatehouse.lock` beside the config: for every module the
//! config names by reference, the digests it resolved to when it was last
//! updated, the signer that was verified and the kit's result. A gateway
//! runs exactly what is locked, from the store, without a network.
//!
//! It is written whole and renamed into place (a reader sees the old lock or
//! the new one). It holds no secret, so it may be checked into git beside
//! the config: it is read if it is this user's and no one else may write it
//! (0644 from a checkout is fine; 0664 is refused), never through a link.
//!
//! ```
//! use gatehouse_registry::lock::{Lock, LockedModule};
//! use gatehouse_registry::Digest;
//!
//! let dir = tempfile::tempdir()?;
//! let path = dir.path().join("gatehouse.lock");
//! assert!(Lock::read(&path)?.is_none());
//! let mut lock = Lock::default();
//! lock.set(LockedModule {
//!     reference: "localhost:5000/team/guardian:1".to_owned(),
//!     manifest: Digest::of(b"manifest"),
//!     component: Digest::of(b"component"),
//!     config: Digest::of(b"config"),
//!     signer: None,
//!     kit: Some("contract: passed".to_owned()),
//! });
//! lock.write(&path)?;
//! let read = Lock::read(&path)?.expect("written");
//! assert_eq!(read, lock);
//! assert_eq!(read.digests().len(), 3);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::digest::Digest;

/// The lock file's name, beside the config.
pub const FILE_NAME: &str = "gatehouse.lock";
/// The format version written.
pub const VERSION: u32 = 1;
/// The largest lock file read.
pub const MAX_LOCK_BYTES: u64 = 4 << 20;

const HEADER: &str = "# gatehouse.lock: the module digests `gatehouse modules update` verified.\n# Written by gatehouse; do not edit. Check it in beside gatehouse.toml.\n";

/// The lock.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Lock {
    /// The format version.
    #[serde(default = "version")]
    pub version: u32,
    /// One entry per reference, sorted by reference.
    #[serde(default, rename = "module")]
    pub modules: Vec<LockedModule>,
}

fn version() -> u32 {
    VERSION
}

impl Default for Lock {
    fn default() -> Lock {
        Lock {
            version: VERSION,
            modules: Vec::new(),
        }
    }
}

/// One locked module.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LockedModule {
    /// The reference as the config writes it.
    pub reference: String,
    /// The manifest digest it resolved to.
    pub manifest: Digest,
    /// The component's digest.
    pub component: Digest,
    /// The config blob's digest.
    pub config: Digest,
    /// Who signed it, as verified (absent when unsigned was allowed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signer: Option<String>,
    /// The conformance kit's result on it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kit: Option<String>,
}

/// Why a lock could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum LockError {
    /// The file could not be read or written under the private-file rules.
    #[error("lock file {path}: {source}")]
    File {
        /// The file.
        path: PathBuf,
        /// Why.
        source: gatehouse_base::private_fs::PrivateError,
    },
    /// Not a lock file.
    #[error("lock file {path}: {reason}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
}

impl Lock {
    /// The lock beside `config_file`.
    pub fn path_beside(config_file: &Path) -> PathBuf {
        config_file
            .parent()
            .map_or_else(|| PathBuf::from(FILE_NAME), |dir| dir.join(FILE_NAME))
    }

    /// Reads the lock at `path`; `None` when there is none.
    pub fn read(path: &Path) -> Result<Option<Lock>, LockError> {
        match std::fs::symlink_metadata(path) {
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            _ => {}
        }
        let bytes =
            gatehouse_base::private_fs::read_protected(path, MAX_LOCK_BYTES).map_err(|source| {
                LockError::File {
                    path: path.to_path_buf(),
                    source,
                }
            })?;
        let text = String::from_utf8(bytes).map_err(|_| LockError::Parse {
            path: path.to_path_buf(),
            reason: "not UTF-8".to_owned(),
        })?;
        let lock: Lock = toml::from_str(&text).map_err(|err| LockError::Parse {
            path: path.to_path_buf(),
            reason: gatehouse_base::escape::escape(&err.to_string()).into_owned(),
        })?;
        if lock.version != VERSION {
            return Err(LockError::Parse {
                path: path.to_path_buf(),
                reason: format!(
                    "version {} is not the version this gatehouse reads ({VERSION})",
                    lock.version
                ),
            });
        }
        let mut seen = BTreeSet::new();
        for module in &lock.modules {
            if !seen.insert(&module.reference) {
                return Err(LockError::Parse {
                    path: path.to_path_buf(),
                    reason: format!(
                        "{} is locked twice",
                        gatehouse_base::escape::escape(&module.reference)
                    ),
                });
            }
        }
        Ok(Some(lock))
    }

    /// Writes the lock to `path` (whole, then renamed into place; synced).
    pub fn write(&self, path: &Path) -> Result<(), LockError> {
        let mut lock = self.clone();
        lock.version = VERSION;
        lock.modules.sort_by(|a, b| a.reference.cmp(&b.reference));
        let body = toml::to_string(&lock).map_err(|err| LockError::Parse {
            path: path.to_path_buf(),
            reason: err.to_string(),
        })?;
        gatehouse_base::private_fs::replace(path, &[HEADER.as_bytes(), body.as_bytes()], true)
            .map_err(|source| LockError::File {
                path: path.to_path_buf(),
                source,
            })
    }

    /// The entry for `reference`, as the config writes it.
    pub fn find(&self, reference: &str) -> Option<&LockedModule> {
        self.modules
            .iter()
            .find(|module| module.reference == reference)
    }

    /// Adds or replaces the entry for `module.reference`.
    pub fn set(&mut self, module: LockedModule) {
        self.modules
            .retain(|existing| existing.reference != module.reference);
        self.modules.push(module);
        self.modules.sort_by(|a, b| a.reference.cmp(&b.reference));
    }

    /// Every digest the lock names (what `gc` keeps).
    pub fn digests(&self) -> BTreeSet<Digest> {
        self.modules
            .iter()
            .flat_map(|module| {
                [
                    module.manifest.clone(),
                    module.component.clone(),
                    module.config.clone(),
                ]
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(text: &str) -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join(FILE_NAME);
        gatehouse_base::private_fs::replace(&path, &[text.as_bytes()], false).expect("write");
        (dir, path)
    }

    #[test]
    fn bad_lock_files_are_refused_naming_the_file_and_what_is_wrong() {
        let digest = Digest::of(b"x");
        let entry = format!(
            "[[module]]\nreference = \"localhost:5000/g:1\"\nmanifest = \"{digest}\"\ncomponent = \"{digest}\"\nconfig = \"{digest}\"\n"
        );
        for (text, says) in [
            ("version = 2\n".to_owned(), "version 2"),
            (format!("version = 1\n{entry}{entry}"), "locked twice"),
            (
                "version = 1\n[[module]]\nreference = \"r\"\nmanifest = \"sha256:00\"\ncomponent = \"x\"\nconfig = \"x\"\n"
                    .to_owned(),
                "64 lowercase hex",
            ),
            ("version = 1\nextra = true\n".to_owned(), "unknown field"),
        ] {
            let (_dir, path) = write(&text);
            let err = Lock::read(&path).expect_err(says).to_string();
            assert!(err.contains(FILE_NAME) && err.contains(says), "{says}: {err}");
        }
    }

    #[cfg(unix)]
    #[test]
    fn a_lock_from_a_checkout_reads_and_one_others_may_write_is_refused() {
        use std::os::unix::fs::PermissionsExt as _;
        let (_dir, path) = write("version = 1\n");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).expect("chmod");
        assert!(Lock::read(&path).expect("reads").is_some());
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o666)).expect("chmod");
        let err = Lock::read(&path).expect_err("writable by others");
        assert!(err.to_string().contains("chmod go-w"), "{err}");
    }
}
