//! The local store of pulled artifacts: every blob (a module, a manifest, a
//! config, a signature) by its digest, under `<root>/blobs/sha256/<hex>`.
//!
//! - **Private.** The directories are made with `private_fs::private_dir`
//!   (0700, this user's, never through a link) and each blob is a private
//!   file (0600, written to a temporary name and renamed into place, so a
//!   reader sees the whole blob or none); a blob that is a link, not a
//!   regular file, another user's or readable by others is refused, never
//!   read.
//! - **Verified on every read.** [`Store::get`] hashes what it read; a blob
//!   whose bytes are not its digest is reported ([`StoreError::Corrupted`])
//!   and removed, so that the next pull writes it again. [`Store::put_verified`]
//!   refuses bytes that are not the digest the registry named.
//! - **Bounded.** No blob over [`Store::max_blob_bytes`] is written or read.
//! - **Collected.** [`Store::gc`] removes every blob the caller no longer
//!   names (what the lock file and its signatures do not reference), and any
//!   temporary file a crash left.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use gatehouse_base::escape::Escaped;
use gatehouse_base::private_fs::{self, PrivateError};

use crate::digest::{ALGORITHM, Digest};

/// The largest blob the store takes by default: 64 MiB, well above the
/// largest reviewer module built here (a componentize-py module, 18 MB).
pub const DEFAULT_MAX_BLOB_BYTES: u64 = 64 << 20;

/// The store in a directory of its own.
///
/// ```
/// use gatehouse_registry::Store;
/// let dir = tempfile::tempdir()?;
/// let store = Store::open(dir.path().join("store"))?;
/// let digest = store.put(b"\0asm...")?;
/// assert_eq!(store.get(&digest)?, b"\0asm...");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone)]
pub struct Store {
    root: PathBuf,
    blobs: PathBuf,
    max_blob_bytes: u64,
}

/// What [`Store::gc`] removed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GcReport {
    /// Blobs kept (named by the caller and present).
    pub kept: usize,
    /// Files removed: blobs nobody names and leftover temporary files.
    pub removed: usize,
    /// Their bytes.
    pub removed_bytes: u64,
}

/// Why the store could not do what was asked. Each names the digest or the
/// file, and what to do.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The store's directory cannot be made or used.
    #[error("module store {}: {source}", .dir.display())]
    Open {
        /// The directory.
        dir: PathBuf,
        /// What is wrong with it.
        source: PrivateError,
    },
    /// The blob is not in the store.
    #[error("{digest} is not in the module store {}: pull the module again", .root.display())]
    Missing {
        /// The blob asked for.
        digest: Digest,
        /// The store.
        root: PathBuf,
    },
    /// The blob's bytes are not its digest (the disk, or someone with this
    /// user's rights, changed them); the entry was removed.
    #[error(
        "module store entry {} does not hold {digest}: its bytes hash to {actual}; \
         the entry was removed, pull the module again",
        .path.display()
    )]
    Corrupted {
        /// The blob asked for.
        digest: Digest,
        /// Its file.
        path: PathBuf,
        /// What its bytes hash to.
        actual: Digest,
    },
    /// Bytes offered under a digest they are not.
    #[error("refused a blob offered as {expected}: its bytes hash to {actual}")]
    Mismatch {
        /// The digest they were offered under (the registry's).
        expected: Digest,
        /// What they hash to.
        actual: Digest,
    },
    /// A blob over the limit.
    #[error("blob {digest} is {len} bytes, more than the module store takes ({limit})")]
    TooLarge {
        /// The blob.
        digest: Digest,
        /// Its size.
        len: u64,
        /// The limit.
        limit: u64,
    },
    /// An entry that is not a private file of this user's, or cannot be
    /// read or written.
    #[error("module store entry for {digest}: {source}")]
    Entry {
        /// The blob.
        digest: Digest,
        /// What is wrong.
        source: PrivateError,
    },
    /// Listing or removing in the store failed.
    #[error("module store {}: cannot {action}: {source}", .path.display())]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// What was being done.
        action: &'static str,
        /// The OS error.
        source: std::io::Error,
    },
}

impl Store {
    /// The store in `dir`, made (0700) if missing; refused if `dir` or its
    /// blob directory is a link, not a directory, or another user's.
    pub fn open(dir: impl Into<PathBuf>) -> Result<Store, StoreError> {
        let root = dir.into();
        let blobs = root.join("blobs").join(ALGORITHM);
        for dir in [&root, &root.join("blobs"), &blobs] {
            private_fs::private_dir(dir).map_err(|source| StoreError::Open {
                dir: dir.clone(),
                source,
            })?;
        }
        Ok(Store {
            root,
            blobs,
            max_blob_bytes: DEFAULT_MAX_BLOB_BYTES,
        })
    }

    /// The same store taking blobs of at most `limit` bytes.
    pub fn with_max_blob_bytes(mut self, limit: u64) -> Store {
        self.max_blob_bytes = limit;
        self
    }

    /// The largest blob written or read.
    pub fn max_blob_bytes(&self) -> u64 {
        self.max_blob_bytes
    }

    /// The store's directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The file a blob lives in (whether or not it is there).
    pub fn path(&self, digest: &Digest) -> PathBuf {
        self.blobs.join(digest.hex())
    }

    /// Stores `bytes` under their digest, which it returns. A blob already
    /// there whole is left as it is; a corrupted one is replaced.
    pub fn put(&self, bytes: &[u8]) -> Result<Digest, StoreError> {
        let digest = Digest::of(bytes);
        self.write(&digest, bytes)?;
        Ok(digest)
    }

    /// Stores `bytes` under `expected`, the digest a registry or a manifest
    /// named for them; refused, and nothing written, unless they hash to it.
    pub fn put_verified(&self, expected: &Digest, bytes: &[u8]) -> Result<(), StoreError> {
        self.check_size(expected, bytes.len() as u64)?;
        let actual = Digest::of(bytes);
        if actual != *expected {
            return Err(StoreError::Mismatch {
                expected: expected.clone(),
                actual,
            });
        }
        self.write(expected, bytes)
    }

    /// The blob `digest`, read whole and verified.
    pub fn get(&self, digest: &Digest) -> Result<Vec<u8>, StoreError> {
        let path = self.path(digest);
        let bytes = private_fs::read(&path, self.max_blob_bytes).map_err(|source| {
            if source.is_not_found() {
                StoreError::Missing {
                    digest: digest.clone(),
                    root: self.root.clone(),
                }
            } else {
                StoreError::Entry {
                    digest: digest.clone(),
                    source,
                }
            }
        })?;
        let actual = Digest::of(&bytes);
        if actual != *digest {
            let removed = std::fs::remove_file(&path);
            tracing::warn!(
                path = %Escaped(&path.display().to_string()),
                %digest,
                %actual,
                removed = removed.is_ok(),
                "a module store entry does not hold its digest"
            );
            return Err(StoreError::Corrupted {
                digest: digest.clone(),
                path,
                actual,
            });
        }
        Ok(bytes)
    }

    /// Whether a file is there for `digest` (not read, not verified: that
    /// is [`Store::get`]'s).
    pub fn contains(&self, digest: &Digest) -> bool {
        std::fs::symlink_metadata(self.path(digest)).is_ok()
    }

    /// The digests of the blobs in the store, in order.
    pub fn digests(&self) -> Result<Vec<Digest>, StoreError> {
        let mut digests: Vec<Digest> = self
            .entries()?
            .into_iter()
            .filter_map(|(name, _)| format!("{ALGORITHM}:{name}").parse().ok())
            .collect();
        digests.sort();
        Ok(digests)
    }

    /// Removes every file in the store but the blobs `keep` names: blobs
    /// nothing references any more and temporary files a crash left.
    pub fn gc(&self, keep: &BTreeSet<Digest>) -> Result<GcReport, StoreError> {
        let mut report = GcReport::default();
        for (name, path) in self.entries()? {
            let kept = format!("{ALGORITHM}:{name}")
                .parse::<Digest>()
                .is_ok_and(|digest| keep.contains(&digest));
            if kept {
                report.kept += 1;
                continue;
            }
            let meta = std::fs::symlink_metadata(&path).map_err(|source| StoreError::Io {
                path: path.clone(),
                action: "look at an entry",
                source,
            })?;
            if meta.is_dir() {
                continue;
            }
            std::fs::remove_file(&path).map_err(|source| StoreError::Io {
                path: path.clone(),
                action: "remove an entry",
                source,
            })?;
            report.removed += 1;
            report.removed_bytes += meta.len();
        }
        Ok(report)
    }

    /// The file names in the blob directory, with their paths.
    fn entries(&self) -> Result<Vec<(String, PathBuf)>, StoreError> {
        let io = |action| {
            let path = self.blobs.clone();
            move |source| StoreError::Io {
                path,
                action,
                source,
            }
        };
        let mut entries = Vec::new();
        for entry in std::fs::read_dir(&self.blobs).map_err(io("list the blobs"))? {
            let entry = entry.map_err(io("list the blobs"))?;
            entries.push((
                entry.file_name().to_string_lossy().into_owned(),
                entry.path(),
            ));
        }
        Ok(entries)
    }

    fn check_size(&self, digest: &Digest, len: u64) -> Result<(), StoreError> {
        if len > self.max_blob_bytes {
            return Err(StoreError::TooLarge {
                digest: digest.clone(),
                len,
                limit: self.max_blob_bytes,
            });
        }
        Ok(())
    }

    /// Writes `bytes` (which hash to `digest`) unless the blob is there
    /// whole already.
    fn write(&self, digest: &Digest, bytes: &[u8]) -> Result<(), StoreError> {
        self.check_size(digest, bytes.len() as u64)?;
        match self.get(digest) {
            Ok(_) => return Ok(()),
            Err(StoreError::Missing { .. } | StoreError::Corrupted { .. }) => {}
            Err(other) => return Err(other),
        }
        private_fs::replace(&self.path(digest), &[bytes], true).map_err(|source| {
            StoreError::Entry {
                digest: digest.clone(),
                source,
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    fn store() -> (tempfile::TempDir, Store) {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = Store::open(dir.path().join("store")).expect("opens");
        (dir, store)
    }

    fn mode(path: &Path) -> u32 {
        std::fs::metadata(path)
            .expect("metadata")
            .permissions()
            .mode()
            & 0o777
    }

    #[test]
    fn a_blob_comes_back_whole_under_its_digest_in_private_files() {
        let (_dir, store) = store();
        let digest = store.put(b"module bytes").expect("put");
        assert_eq!(digest, Digest::of(b"module bytes"));
        assert_eq!(store.get(&digest).expect("get"), b"module bytes");
        assert_eq!(store.put(b"module bytes").expect("again"), digest);
        assert_eq!(store.digests().expect("list"), vec![digest.clone()]);
        assert_eq!(mode(&store.path(&digest)), 0o600);
        for dir in [
            store.root().to_path_buf(),
            store.root().join("blobs"),
            store.blobs.clone(),
        ] {
            assert_eq!(mode(&dir), 0o700, "{}", dir.display());
        }
        let absent = Digest::of(b"never stored");
        let error = store.get(&absent).expect_err("missing");
        assert!(matches!(error, StoreError::Missing { .. }), "{error}");
        assert!(error.to_string().contains(&absent.to_string()), "{error}");
    }

    #[test]
    fn bytes_offered_under_another_digest_are_refused_and_not_stored() {
        let (_dir, store) = store();
        let claimed = Digest::of(b"what the manifest named");
        let error = store
            .put_verified(&claimed, b"what the registry sent")
            .expect_err("mismatch");
        assert!(matches!(error, StoreError::Mismatch { .. }), "{error}");
        let message = error.to_string();
        assert!(message.contains(&claimed.to_string()), "{message}");
        assert!(
            message.contains(&Digest::of(b"what the registry sent").to_string()),
            "{message}"
        );
        assert!(!store.contains(&claimed));
        assert!(store.digests().expect("list").is_empty());
        store
            .put_verified(&claimed, b"what the manifest named")
            .expect("the right bytes");
        assert_eq!(
            store.get(&claimed).expect("get"),
            b"what the manifest named"
        );
    }

    #[test]
    fn a_corrupted_entry_is_reported_removed_and_written_again_by_the_next_put() {
        let (_dir, store) = store();
        let digest = store.put(b"the module as pulled").expect("put");
        let path = store.path(&digest);
        let mut bytes = std::fs::read(&path).expect("read");
        bytes[0] ^= 0x20;
        std::fs::write(&path, &bytes).expect("corrupt it");
        let error = store.get(&digest).expect_err("corrupted");
        assert!(matches!(error, StoreError::Corrupted { .. }), "{error}");
        let message = error.to_string();
        assert!(
            message.contains(&digest.to_string()) && message.contains("pull the module again"),
            "{message}"
        );
        assert!(!store.contains(&digest), "the corrupted entry is gone");
        store.put(b"the module as pulled").expect("put again");
        assert_eq!(
            store.get(&digest).expect("whole again"),
            b"the module as pulled"
        );
        // A corrupted entry is replaced by a put, not kept because it exists.
        std::fs::write(&path, b"garbage").expect("corrupt it again");
        store.put(b"the module as pulled").expect("replaced");
        assert_eq!(store.get(&digest).expect("whole"), b"the module as pulled");
    }

    #[test]
    fn an_entry_that_is_a_link_or_open_to_others_is_refused_unread() {
        let (dir, store) = store();
        let secret = dir.path().join("elsewhere");
        std::fs::write(&secret, b"not a module").expect("write");
        let linked = Digest::of(b"not a module");
        std::os::unix::fs::symlink(&secret, store.path(&linked)).expect("plant a link");
        let error = store.get(&linked).expect_err("a link");
        assert!(matches!(error, StoreError::Entry { .. }), "{error}");
        assert!(secret.exists(), "nothing outside the store is touched");

        let loose = store.put(b"readable by others").expect("put");
        std::fs::set_permissions(store.path(&loose), std::fs::Permissions::from_mode(0o644))
            .expect("chmod");
        let error = store.get(&loose).expect_err("loose");
        assert!(matches!(error, StoreError::Entry { .. }), "{error}");
        assert!(error.to_string().contains("chmod 600"), "{error}");
    }

    #[test]
    fn oversized_blobs_are_neither_written_nor_read() {
        let (_dir, store) = store();
        let big = vec![7u8; 2048];
        let digest = store.put(&big).expect("fits the default");
        let small = store.clone().with_max_blob_bytes(1024);
        let error = small.put(&[8u8; 2048]).expect_err("too large to write");
        assert!(
            matches!(
                error,
                StoreError::TooLarge {
                    len: 2048,
                    limit: 1024,
                    ..
                }
            ),
            "{error}"
        );
        let error = small.get(&digest).expect_err("too large to read");
        assert!(matches!(error, StoreError::Entry { .. }), "{error}");
    }

    #[test]
    fn gc_keeps_what_is_named_and_removes_the_rest_and_leftovers() {
        let (_dir, store) = store();
        let kept = store.put(b"locked module").expect("put");
        let dropped = store.put(b"an older version").expect("put");
        let leftover = store.blobs.join(".deadbeef.123.0011223344556677.tmp");
        std::fs::write(&leftover, b"half a blob").expect("a crash's leftover");
        let report = store.gc(&BTreeSet::from([kept.clone()])).expect("gc");
        assert_eq!(
            report,
            GcReport {
                kept: 1,
                removed: 2,
                removed_bytes: (b"an older version".len() + b"half a blob".len()) as u64,
            }
        );
        assert_eq!(store.digests().expect("list"), vec![kept.clone()]);
        assert!(!store.contains(&dropped) && !leftover.exists());
        assert_eq!(store.get(&kept).expect("kept whole"), b"locked module");
    }

    #[test]
    fn a_store_directory_that_is_a_link_is_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        let real = dir.path().join("real");
        std::fs::create_dir(&real).expect("mkdir");
        let link = dir.path().join("store");
        std::os::unix::fs::symlink(&real, &link).expect("link");
        let error = Store::open(&link).expect_err("a link");
        assert!(matches!(error, StoreError::Open { .. }), "{error}");
        assert!(error.to_string().contains("module store"), "{error}");
    }
}
