//! The compile cache: compiled components on disk, handed out for
//! deserialization only if this host wrote them.
//!
//! Each artifact file starts with a header, [`MAGIC`] then an HMAC-SHA256
//! tag over the artifact, the module's sha256 and the engine's compatibility
//! hash (so an artifact cannot be moved to another module's name), under a
//! random per-host key kept beside the directory, never in it. The directory
//! is a private directory and the key and artifacts private files, by the
//! rules of [`crate::private_fs`]: the directory the user's own (created
//! 0700, tightened to 0700 if loose, refused if a symbolic link or another
//! user's), files created 0600 and never opened through a symbolic link, and
//! a key or artifact that is not this user's alone refused.

use std::path::{Path, PathBuf};

use hmac::Mac;

use std::sync::Arc;

use super::functions::{CompiledFunctions, HmacSha256, PACK_SUFFIX};
use crate::private_fs::{self, PrivateError, Refusal};

/// The first bytes of every artifact file: the format and its version.
const MAGIC: &[u8; 8] = b"GHCWASM1";

/// The length of an HMAC-SHA256 tag.
const TAG_LEN: usize = 32;

/// The length of an artifact file's header: [`MAGIC`], then the tag.
const HEADER_LEN: usize = MAGIC.len() + TAG_LEN;

/// How every artifact file's name ends.
const ARTIFACT_SUFFIX: &str = ".cwasm";

/// The length of the key, in bytes.
const KEY_LEN: usize = 32;

/// Binds the key to this one use.
const DOMAIN: &[u8] = b"gatehouse compiled component v1\0";

/// Why the cache, its key or one of its artifacts is refused.
#[derive(Debug, thiserror::Error)]
pub(crate) enum CacheError {
    /// The directory belongs to someone else or others may write to it.
    #[error(
        "{}: refusing the compile cache directory: {problem}; make it private to this user (`chown \"$(id -u)\" {0} && chmod 700 {0}`) or remove it so that gatehouse creates it",
        dir.display()
    )]
    UnsafeDirectory {
        /// The directory.
        dir: PathBuf,
        /// What is wrong with it.
        problem: Problem,
    },
    /// The key file is not one this user alone can read.
    #[error(
        "{}: refusing the compile cache key: {problem}; remove it and gatehouse creates a new one",
        path.display()
    )]
    UnsafeKey {
        /// The key file.
        path: PathBuf,
        /// What is wrong with it.
        problem: Problem,
    },
    /// A cached artifact that must not be executed.
    #[error("{}: refusing the cached compiled module: {problem}", path.display())]
    UnsafeArtifact {
        /// The artifact file.
        path: PathBuf,
        /// What is wrong with it.
        problem: Problem,
    },
    /// A file system operation failed.
    #[error("{}: cannot {action}: {source}", path.display())]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// What was being done.
        action: &'static str,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The OS gave no random bytes.
    #[error("cannot get random bytes from the OS for the compile cache: {0}")]
    Random(String),
    /// The directory has no name to put the key beside.
    #[error(
        "{}: the compile cache directory has no name to keep its key beside; name the directory itself (e.g. `.gatehouse/compiled`)",
        .0.display()
    )]
    NoKeyPlace(PathBuf),
    /// This platform has no owners and modes to check.
    #[error("{}: the compile cache needs a Unix file system", .0.display())]
    Unsupported(PathBuf),
}

/// What is wrong with a cache file or directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub(crate) enum Problem {
    /// Not a private file or directory ([`crate::private_fs`]): a symbolic
    /// link, the wrong kind, another user's, or (a file) open to others.
    #[error("{0}")]
    Private(Refusal),
    /// A key of the wrong size.
    #[error("it holds {0} bytes, not {KEY_LEN}")]
    KeyLength(u64),
    /// An artifact without this format's header.
    #[error("it has no gatehouse header")]
    NoHeader,
    /// An artifact whose tag does not verify.
    #[error(
        "its tag does not verify under this host's key (altered, written by someone else, or another module's artifact)"
    )]
    BadTag,
}

/// The cache directory and the key its artifacts are tagged with.
pub(crate) struct CompileCache {
    /// The directory holding the artifacts.
    dir: PathBuf,
    /// HMAC-SHA256, keyed with the host's key.
    mac: HmacSha256,
    /// The most bytes the artifacts may take in all, if bounded
    /// ([`CompileCache::prune`]).
    max_bytes: Option<u64>,
    /// Compiled functions, for compiling a changed module
    /// ([`super::functions`]).
    functions: Arc<CompiledFunctions>,
}

/// A cached artifact whose tag verified.
pub(crate) struct Artifact {
    /// The whole file, header included.
    file: Vec<u8>,
}

impl Artifact {
    /// The compiled component, without the header.
    pub(crate) fn bytes(&self) -> &[u8] {
        self.file.get(HEADER_LEN..).unwrap_or_default()
    }
}

impl CompileCache {
    /// Makes `dir` a private directory ([`private_fs::private_dir`]: created
    /// 0700 with any missing parents, tightened to 0700 if loose, refused if
    /// it or a `.gatehouse` above it is a symbolic link or another user's),
    /// and reads the key beside it (`<dir>.key`), creating it on first use.
    /// With `max_bytes`, storing an artifact removes the least recently used
    /// others until all fit ([`CompileCache::prune`]).
    pub(crate) fn open(dir: PathBuf, max_bytes: Option<u64>) -> Result<CompileCache, CacheError> {
        if !cfg!(unix) {
            return Err(CacheError::Unsupported(dir));
        }
        private_fs::private_dir(&dir).map_err(|error| match error {
            PrivateError::Refused { path, refusal } => CacheError::UnsafeDirectory {
                dir: path,
                problem: Problem::Private(refusal),
            },
            PrivateError::Io {
                path,
                action,
                source,
            } => CacheError::Io {
                path,
                action,
                source,
            },
        })?;
        let key_path = key_path(&dir)?;
        let key = match read_key(&key_path) {
            Err(CacheError::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
                create_key(&key_path)?
            }
            other => other?,
        };
        let mac = HmacSha256::new_from_slice(&key).map_err(|_| CacheError::UnsafeKey {
            path: key_path,
            problem: Problem::KeyLength(key.len() as u64),
        })?;
        let functions = Arc::new(CompiledFunctions::new(dir.clone(), mac.clone()));
        Ok(CompileCache {
            dir,
            mac,
            max_bytes,
            functions,
        })
    }

    /// The directory holding the artifacts.
    pub(crate) fn dir(&self) -> &Path {
        &self.dir
    }

    /// The most bytes the artifacts may take in all, if bounded.
    pub(crate) fn max_bytes(&self) -> Option<u64> {
        self.max_bytes
    }

    /// The store of compiled functions in this cache, for
    /// [`wasmtime::Config::enable_incremental_compilation`].
    pub(crate) fn functions(&self) -> &Arc<CompiledFunctions> {
        &self.functions
    }

    /// The artifact for the module with sha256 `digest` compiled by an engine
    /// with compatibility hash `engine`, if one is cached and its tag
    /// verifies. One that is unsafe or invalid is logged and removed; one
    /// that cannot be read just now (out of file descriptors, say) is logged
    /// and left in place, and the module is compiled in memory this time.
    pub(crate) fn get(&self, digest: &str, engine: u64) -> Option<Artifact> {
        let path = self.artifact_path(digest, engine);
        match self.read_verified(&path, digest, engine) {
            Ok(artifact) => artifact,
            Err(error) if must_discard(&error) => {
                self.discard(digest, engine, &error);
                None
            }
            Err(error) => {
                tracing::warn!(
                    path = %path.display(),
                    "cannot read a cached compiled module, so compiling it again (the cached one is kept): {error}"
                );
                None
            }
        }
    }

    /// Logs why the artifact for `digest` and `engine` is unusable and removes
    /// it.
    pub(crate) fn discard(&self, digest: &str, engine: u64, why: &dyn std::fmt::Display) {
        let path = self.artifact_path(digest, engine);
        tracing::warn!(
            path = %path.display(),
            "discarding a cached compiled module and compiling it again: {why}"
        );
        // Removing a symbolic link removes the link, not its target.
        let _ = std::fs::remove_file(&path);
    }

    /// Stores `artifact`, compiled from the module with sha256 `digest` by an
    /// engine with compatibility hash `engine`, with its tag: written to a
    /// new private file, then renamed over whatever was at its name.
    /// In a bounded cache, the least recently used others then go until all
    /// fit ([`CompileCache::prune`]).
    pub(crate) fn put(&self, digest: &str, engine: u64, artifact: &[u8]) -> Result<(), CacheError> {
        let path = self.artifact_path(digest, engine);
        let tag = self.tag(digest, engine, artifact).finalize().into_bytes();
        private_fs::replace(&path, &[MAGIC, tag.as_slice(), artifact], false)
            .map_err(|error| io_error(error, "store the compiled module"))?;
        if let Some(max_bytes) = self.max_bytes {
            self.prune(max_bytes, &path);
        }
        Ok(())
    }

    /// Removes artifacts and packs of compiled functions, least recently used
    /// first (by modification time, which [`CompileCache::get`] renews on
    /// every hit in a bounded cache, and indexing renews for a pack), until
    /// those left take at most `max_bytes`, never `keep` (the one just
    /// stored, which may alone be larger). Only regular files named as
    /// artifacts or packs are counted or removed; a symbolic link or anything else in
    /// the directory is left alone (and never loaded). Best effort: an entry
    /// that cannot be read or removed is skipped.
    fn prune(&self, max_bytes: u64, keep: &Path) {
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return;
        };
        let mut artifacts: Vec<(std::time::SystemTime, u64, PathBuf)> = entries
            .filter_map(Result::ok)
            .filter(|entry| {
                entry.file_name().to_str().is_some_and(|name| {
                    name.ends_with(ARTIFACT_SUFFIX) || name.ends_with(PACK_SUFFIX)
                })
            })
            .filter_map(|entry| {
                // `DirEntry::metadata` does not follow a symbolic link.
                let metadata = entry.metadata().ok()?;
                let modified = metadata.modified().ok()?;
                metadata
                    .file_type()
                    .is_file()
                    .then(|| (modified, metadata.len(), entry.path()))
            })
            .collect();
        let mut total: u64 = artifacts.iter().map(|(_, len, _)| *len).sum();
        artifacts.sort();
        for (_, len, path) in artifacts {
            if total <= max_bytes {
                break;
            }
            if path == keep {
                continue;
            }
            match std::fs::remove_file(&path) {
                // Another process sharing the cache removed it first.
                Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
                    total = total.saturating_sub(len);
                }
                Ok(()) => {
                    tracing::debug!(path = %path.display(), "removed a least recently used compiled module from the bounded compile cache");
                    total = total.saturating_sub(len);
                }
                Err(error) => {
                    tracing::debug!(path = %path.display(), "cannot remove a compiled module from the bounded compile cache: {error}")
                }
            }
        }
    }

    /// Where the artifact of `digest` for `engine` lives.
    fn artifact_path(&self, digest: &str, engine: u64) -> PathBuf {
        self.dir
            .join(format!("{digest}-{engine:016x}{ARTIFACT_SUFFIX}"))
    }

    /// The MAC over an artifact and the name it is stored under.
    fn tag(&self, digest: &str, engine: u64, artifact: &[u8]) -> HmacSha256 {
        let mut mac = self.mac.clone();
        mac.update(DOMAIN);
        mac.update(&(digest.len() as u64).to_le_bytes());
        mac.update(digest.as_bytes());
        mac.update(&engine.to_le_bytes());
        mac.update(artifact);
        mac
    }

    /// Reads the file at `path` without following a symbolic link and checks
    /// its header and tag (in constant time). `Ok(None)` when there is none.
    fn read_verified(
        &self,
        path: &Path,
        digest: &str,
        engine: u64,
    ) -> Result<Option<Artifact>, CacheError> {
        let refuse = |problem| CacheError::UnsafeArtifact {
            path: path.to_path_buf(),
            problem,
        };
        let read = private_fs::open_read(path)
            .and_then(|opened| Ok((private_fs::read_bounded(path, &opened, u64::MAX)?, opened)));
        let (file, opened) = match read {
            Ok(read) => read,
            Err(error) if error.is_not_found() => return Ok(None),
            Err(PrivateError::Refused { refusal, .. }) => {
                return Err(refuse(Problem::Private(refusal)));
            }
            Err(error) => return Err(io_error(error, "read the cached compiled module")),
        };
        let (Some(header), Some(artifact)) = (file.get(..HEADER_LEN), file.get(HEADER_LEN..))
        else {
            return Err(refuse(Problem::NoHeader));
        };
        let (magic, tag) = header.split_at(MAGIC.len());
        if magic != MAGIC {
            return Err(refuse(Problem::NoHeader));
        }
        self.tag(digest, engine, artifact)
            .verify_slice(tag)
            .map_err(|_| refuse(Problem::BadTag))?;
        if self.max_bytes.is_some() {
            // Used now: the last to go when the cache is pruned. Best effort
            // (the owner may set a file's times without writing to it).
            let _ = opened.set_modified(std::time::SystemTime::now());
        }
        Ok(Some(Artifact { file }))
    }
}

/// Whether a failure to read an artifact means the artifact itself must go:
/// only when it is unsafe (a link, not a regular file, another user's, open
/// to others) or invalid (no header, a tag that does not verify). An I/O
/// error (out of file descriptors, permission denied, EIO) says nothing
/// about the artifact, which stays for the next time.
fn must_discard(error: &CacheError) -> bool {
    match error {
        CacheError::UnsafeArtifact { .. } => true,
        CacheError::UnsafeDirectory { .. }
        | CacheError::UnsafeKey { .. }
        | CacheError::Io { .. }
        | CacheError::Random(_)
        | CacheError::NoKeyPlace(_)
        | CacheError::Unsupported(_) => false,
    }
}

/// A [`PrivateError`] as a [`CacheError::Io`] (a refusal too: for files the
/// cache writes, the refusal is of an operation, not of a file it reads).
fn io_error(error: PrivateError, action: &'static str) -> CacheError {
    match error {
        PrivateError::Io {
            path,
            action,
            source,
        } => CacheError::Io {
            path,
            action,
            source,
        },
        PrivateError::Refused { path, refusal } => CacheError::Io {
            path,
            action,
            source: std::io::Error::new(std::io::ErrorKind::PermissionDenied, refusal),
        },
    }
}

/// `<dir>.key`: beside the directory, so that whoever can put files in the
/// directory does not thereby reach the key.
fn key_path(dir: &Path) -> Result<PathBuf, CacheError> {
    let named = if dir.file_name().is_some() {
        dir.to_path_buf()
    } else {
        std::fs::canonicalize(dir).map_err(|source| CacheError::Io {
            path: dir.to_path_buf(),
            action: "resolve the compile cache directory",
            source,
        })?
    };
    let Some(name) = named.file_name() else {
        return Err(CacheError::NoKeyPlace(dir.to_path_buf()));
    };
    let mut key = name.to_os_string();
    key.push(".key");
    Ok(named.with_file_name(key))
}

/// Reads the key without following a symbolic link, refusing one that is not
/// this user's alone.
fn read_key(path: &Path) -> Result<Vec<u8>, CacheError> {
    let refuse = |problem| CacheError::UnsafeKey {
        path: path.to_path_buf(),
        problem,
    };
    let key = private_fs::read(path, 4096).map_err(|error| match error {
        PrivateError::Refused {
            refusal: Refusal::TooLarge { len, .. },
            ..
        } => refuse(Problem::KeyLength(len)),
        PrivateError::Refused { refusal, .. } => refuse(Problem::Private(refusal)),
        error => io_error(error, "read the compile cache key"),
    })?;
    if key.len() != KEY_LEN {
        return Err(refuse(Problem::KeyLength(key.len() as u64)));
    }
    Ok(key)
}

/// Creates a random key at `path`: written to a new private file, then
/// linked into place, so no one ever reads a partial key. If another process
/// got there first, its key is used.
fn create_key(path: &Path) -> Result<Vec<u8>, CacheError> {
    let mut key = vec![0; KEY_LEN];
    getrandom::fill(&mut key).map_err(|error| CacheError::Random(error.to_string()))?;
    let temporary = private_fs::temporary_path(path)
        .map_err(|error| io_error(error, "create the compile cache key"))?;
    private_fs::write_new(&temporary, &[&key], true)
        .map_err(|error| io_error(error, "create the compile cache key"))?;
    let linked = std::fs::hard_link(&temporary, path);
    let _ = std::fs::remove_file(&temporary);
    match linked {
        Ok(()) => Ok(key),
        Err(error) if error.kind() == std::io::ErrorKind::AlreadyExists => read_key(path),
        Err(source) => Err(CacheError::Io {
            path: path.to_path_buf(),
            action: "create the compile cache key",
            source,
        }),
    }
}

/// How a sandbox's modules were compiled ([`super::Sandbox::compile_counts`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CompileCounts {
    /// Taken from the compile cache.
    pub hits: u64,
    /// Compiled and stored in the cache (a miss, or an artifact discarded).
    pub compiled: u64,
    /// Compiled in memory: the sandbox has no cache.
    pub in_memory: u64,
    /// Taken from a compile of the same module that another load had
    /// already started (loads that overlap compile a module once).
    pub joined: u64,
    /// Functions of the modules [`compiled`](Self::compiled) that were
    /// taken from the cache's compiled functions (the same code seen in an
    /// earlier build) rather than compiled.
    pub functions_reused: u64,
    /// Functions of those modules that were compiled, and kept in the cache.
    pub functions_compiled: u64,
}

/// The counts behind [`CompileCounts`].
#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub(crate) hits: std::sync::atomic::AtomicU64,
    pub(crate) compiled: std::sync::atomic::AtomicU64,
    pub(crate) in_memory: std::sync::atomic::AtomicU64,
    pub(crate) joined: std::sync::atomic::AtomicU64,
}

impl Counters {
    pub(crate) fn read(&self) -> CompileCounts {
        use std::sync::atomic::Ordering::Relaxed;
        CompileCounts {
            hits: self.hits.load(Relaxed),
            compiled: self.compiled.load(Relaxed),
            in_memory: self.in_memory.load(Relaxed),
            joined: self.joined.load(Relaxed),
            functions_reused: 0,
            functions_compiled: 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_refusal_names_the_directory_and_the_fix() {
        let error = CacheError::UnsafeDirectory {
            dir: PathBuf::from("/srv/cache"),
            problem: Problem::Private(Refusal::NotOwned {
                owner: 0,
                user: 1000,
            }),
        };
        let message = error.to_string();
        assert!(message.starts_with("/srv/cache: refusing"), "{message}");
        assert!(
            message.contains("it belongs to uid 0, not to this user (uid 1000)"),
            "{message}"
        );
        assert!(message.contains("chmod 700 /srv/cache"), "{message}");
        assert!(message.contains("chown"), "{message}");
    }

    #[test]
    fn only_an_unsafe_or_invalid_artifact_is_discarded() {
        let path = PathBuf::from("/c/a.cwasm");
        let unsafe_artifact = |problem| CacheError::UnsafeArtifact {
            path: path.clone(),
            problem,
        };
        for problem in [
            Problem::BadTag,
            Problem::NoHeader,
            Problem::Private(Refusal::Symlink),
            Problem::Private(Refusal::NotRegular(private_fs::FileKind::Fifo)),
            Problem::Private(Refusal::NotOwned { owner: 1, user: 2 }),
            Problem::Private(Refusal::Loose { mode: 0o644 }),
        ] {
            assert!(must_discard(&unsafe_artifact(problem)), "{problem}");
        }
        // Out of file descriptors, permission denied, an I/O error: the
        // artifact may be fine, and stays.
        for errno in [
            rustix::io::Errno::MFILE,
            rustix::io::Errno::NFILE,
            rustix::io::Errno::ACCESS,
            rustix::io::Errno::IO,
            rustix::io::Errno::NOMEM,
        ] {
            let error = CacheError::Io {
                path: path.clone(),
                action: "read the cached compiled module",
                source: std::io::Error::from_raw_os_error(errno.raw_os_error()),
            };
            assert!(!must_discard(&error), "{error}");
        }
    }

    /// Out of file descriptors (`ulimit -n`, in a child process so that no
    /// other test runs short): `get` finds nothing, removes nothing, and
    /// finds the artifact again once descriptors are free.
    #[cfg(target_os = "linux")]
    #[test]
    fn an_artifact_that_cannot_be_opened_just_now_is_kept() {
        const CHILD: &str = "GATEHOUSE_CACHE_EMFILE_CHILD";
        let digest = "d".repeat(64);
        if let Some(dir) = std::env::var_os(CHILD) {
            let cache = CompileCache::open(PathBuf::from(dir), None).expect("open");
            cache.put(&digest, 7, b"compiled").expect("put");
            let mut held = Vec::new();
            while let Ok(file) = std::fs::File::open("/dev/null") {
                held.push(file);
            }
            let found = cache.get(&digest, 7).is_some();
            drop(held);
            println!("while out of descriptors: found {found}");
            let kept = cache.artifact_path(&digest, 7).exists();
            let again = cache
                .get(&digest, 7)
                .map(|artifact| artifact.bytes().to_vec());
            println!("kept {kept}, then {again:?}");
            return;
        }
        let dir = tempfile::tempdir().expect("tempdir");
        let this = "sandbox::cache::tests::an_artifact_that_cannot_be_opened_just_now_is_kept";
        let output = std::process::Command::new("bash")
            .arg("-c")
            .arg("ulimit -n 64 && exec \"$0\" --exact \"$1\" --nocapture --test-threads 1")
            .arg(std::env::current_exe().expect("test binary"))
            .arg(this)
            .env(CHILD, dir.path().join("cache"))
            .output()
            .expect("bash runs");
        let said = String::from_utf8_lossy(&output.stdout);
        assert!(output.status.success(), "{said}");
        assert!(
            said.contains("while out of descriptors: found false"),
            "{said}"
        );
        assert!(
            said.contains(&format!("kept true, then Some({:?})", b"compiled".to_vec())),
            "{said}"
        );
    }

    #[cfg(unix)]
    #[test]
    fn the_key_is_private_and_a_planted_key_is_refused() {
        use std::os::unix::fs::PermissionsExt;

        let dir = tempfile::tempdir().expect("tempdir");
        let cache = dir.path().join("cache");
        CompileCache::open(cache.clone(), None).expect("open");
        let key = dir.path().join("cache.key");
        let mode = std::fs::metadata(&key).expect("key").permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        let first = std::fs::read(&key).expect("read key");
        assert_eq!(first.len(), KEY_LEN);
        // Opening again reuses the key.
        CompileCache::open(cache.clone(), None).expect("reopen");
        assert_eq!(std::fs::read(&key).expect("read key"), first);

        // A key others can read is refused.
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o644)).expect("chmod");
        let error = CompileCache::open(cache.clone(), None)
            .err()
            .expect("refused");
        assert!(
            matches!(
                error,
                CacheError::UnsafeKey {
                    problem: Problem::Private(Refusal::Loose { mode: 0o644 }),
                    ..
                }
            ),
            "{error}"
        );

        // A symbolic link at the key's place is not followed.
        std::fs::remove_file(&key).expect("remove key");
        let elsewhere = dir.path().join("elsewhere");
        std::fs::write(&elsewhere, [7u8; KEY_LEN]).expect("write");
        std::fs::set_permissions(&elsewhere, std::fs::Permissions::from_mode(0o600))
            .expect("chmod");
        std::os::unix::fs::symlink(&elsewhere, &key).expect("symlink");
        let error = CompileCache::open(cache, None).err().expect("refused");
        assert!(
            matches!(
                error,
                CacheError::UnsafeKey {
                    problem: Problem::Private(Refusal::Symlink),
                    ..
                }
            ),
            "{error}"
        );
    }

    #[test]
    fn the_key_sits_beside_the_directory() {
        assert_eq!(
            key_path(Path::new("/a/.gatehouse/compiled")).ok(),
            Some(PathBuf::from("/a/.gatehouse/compiled.key"))
        );
        assert_eq!(
            key_path(Path::new("/a/compiled/")).ok(),
            Some(PathBuf::from("/a/compiled.key"))
        );
    }

    /// Sets the modification time of `path` to `seconds_ago` seconds ago.
    #[cfg(unix)]
    fn age(path: &Path, seconds_ago: u64) {
        let when = std::time::SystemTime::now() - std::time::Duration::from_secs(seconds_ago);
        std::fs::File::open(path)
            .and_then(|file| file.set_modified(when))
            .expect("set the time");
    }

    /// A bounded cache removes the least recently used artifact first, and
    /// a hit is a use: the artifact read most recently survives the one
    /// stored after it.
    #[cfg(unix)]
    #[test]
    fn a_bounded_cache_removes_the_least_recently_used_first() {
        let dir = tempfile::tempdir().expect("tempdir");
        let compiled = dir.path().join("compiled");
        let payload = [7u8; 100];
        let each = (HEADER_LEN + payload.len()) as u64;
        let cache = CompileCache::open(compiled.clone(), Some(2 * each + 10)).expect("open");
        let [a, b, c] = ["a", "b", "c"].map(|name| name.repeat(64));
        cache.put(&a, 1, &payload).expect("put a");
        cache.put(&b, 1, &payload).expect("put b");
        age(&cache.artifact_path(&a, 1), 20);
        age(&cache.artifact_path(&b, 1), 10);
        // `a` is the older store, but read now.
        assert!(cache.get(&a, 1).is_some(), "a is cached");
        cache.put(&c, 1, &payload).expect("put c");
        assert!(cache.artifact_path(&a, 1).is_file(), "a was just used");
        assert!(
            !cache.artifact_path(&b, 1).exists(),
            "b was used least recently"
        );
        assert!(cache.artifact_path(&c, 1).is_file(), "c was just stored");
        // Unbounded, nothing goes.
        let unbounded = CompileCache::open(compiled, None).expect("open");
        unbounded.put(&b, 1, &payload).expect("put b");
        age(&cache.artifact_path(&b, 1), 30);
        unbounded.put(&"d".repeat(64), 1, &payload).expect("put d");
        assert_eq!(
            std::fs::read_dir(dir.path().join("compiled"))
                .expect("list")
                .count(),
            4
        );
    }

    /// Packs of compiled functions count against the bound and go, oldest
    /// first, like artifacts.
    #[test]
    fn a_bounded_cache_prunes_packs_of_compiled_functions_too() {
        let dir = tempfile::tempdir().expect("tempdir");
        let compiled = dir.path().join("compiled");
        let payload = [7u8; 100];
        let each = (HEADER_LEN + payload.len()) as u64;
        let cache = CompileCache::open(compiled.clone(), Some(2 * each + 10)).expect("open");
        let pack = compiled.join(format!("{:016x}-0{PACK_SUFFIX}", 1));
        private_fs::write_new(&pack, &[&[1u8; 100]], false).expect("a pack");
        age(&pack, 20);
        cache.put(&"a".repeat(64), 1, &payload).expect("put a");
        assert!(pack.is_file(), "within the bound");
        cache.put(&"b".repeat(64), 1, &payload).expect("put b");
        assert!(!pack.exists(), "the oldest file, a pack, went first");
        assert!(cache.artifact_path(&"a".repeat(64), 1).is_file());
    }

    /// The artifact just stored stays even when it alone is over the bound;
    /// a symbolic link named like an artifact is neither counted nor
    /// followed, and what it points to is never removed.
    #[cfg(unix)]
    #[test]
    fn pruning_keeps_the_new_artifact_and_never_follows_a_link() {
        let dir = tempfile::tempdir().expect("tempdir");
        let outside = dir.path().join("outside.cwasm");
        std::fs::write(&outside, [1u8; 4096]).expect("write outside");
        let compiled = dir.path().join("compiled");
        let cache = CompileCache::open(compiled.clone(), Some(64)).expect("open");
        let planted = compiled.join(format!("{}-{:016x}{ARTIFACT_SUFFIX}", "e".repeat(64), 1));
        std::os::unix::fs::symlink(&outside, &planted).expect("plant a link");
        let old = "f".repeat(64);
        cache.put(&old, 1, &[0u8; 10]).expect("put old");
        age(&cache.artifact_path(&old, 1), 10);
        let big = "9".repeat(64);
        cache.put(&big, 1, &[0u8; 1000]).expect("put big");
        assert!(
            cache.artifact_path(&big, 1).is_file(),
            "the new artifact stays"
        );
        assert!(!cache.artifact_path(&old, 1).exists(), "the old one went");
        assert!(planted.symlink_metadata().is_ok(), "the link is left alone");
        assert!(outside.is_file(), "what it points to is left alone");
    }
}
