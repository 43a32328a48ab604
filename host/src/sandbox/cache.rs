//! The compile cache: compiled components on disk, handed out for
//! deserialization only if this host wrote them.
//!
//! Each artifact file starts with a header, [`MAGIC`] then an HMAC-SHA256
//! tag over the artifact, the module's sha256 and the engine's compatibility
//! hash (so an artifact cannot be moved to another module's name), under a
//! random per-host key kept beside the directory, never in it. The directory
//! must belong to this user and be writable by nobody else; files are
//! created 0600 and never opened through a symbolic link.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use hmac::{Hmac, Mac};
use sha2::Sha256;

/// The keyed MAC of artifacts.
type HmacSha256 = Hmac<Sha256>;

/// The first bytes of every artifact file: the format and its version.
const MAGIC: &[u8; 8] = b"GHCWASM1";

/// The length of an HMAC-SHA256 tag.
const TAG_LEN: usize = 32;

/// The length of an artifact file's header: [`MAGIC`], then the tag.
const HEADER_LEN: usize = MAGIC.len() + TAG_LEN;

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
    /// Another user owns it.
    #[error("it is owned by uid {owner}, not by this user (uid {user})")]
    NotOwned {
        /// The owner.
        owner: u32,
        /// The running user.
        user: u32,
    },
    /// A directory that group or others may write to.
    #[error("it is writable by group or others (mode {mode:04o})")]
    Writable {
        /// Its permission bits.
        mode: u32,
    },
    /// A key that group or others may read or write.
    #[error("it is readable or writable by group or others (mode {mode:04o})")]
    Shared {
        /// Its permission bits.
        mode: u32,
    },
    /// A symbolic link where a file must be.
    #[error("it is a symbolic link")]
    Symlink,
    /// Not the kind of file it should be.
    #[error("it is not a {0}")]
    WrongKind(&'static str),
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
    /// Creates `dir` if missing (0700, with any missing parents), refuses it
    /// unless this user owns it and nobody else may write to it, and reads the
    /// key beside it (`<dir>.key`), creating it on first use.
    pub(crate) fn open(dir: PathBuf) -> Result<CompileCache, CacheError> {
        if !cfg!(unix) {
            return Err(CacheError::Unsupported(dir));
        }
        let mut builder = std::fs::DirBuilder::new();
        builder.recursive(true);
        #[cfg(unix)]
        std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
        builder.create(&dir).map_err(|source| CacheError::Io {
            path: dir.clone(),
            action: "create the compile cache directory",
            source,
        })?;
        let metadata = std::fs::metadata(&dir).map_err(|source| CacheError::Io {
            path: dir.clone(),
            action: "inspect the compile cache directory",
            source,
        })?;
        let problem = if metadata.is_dir() {
            let (owner, mode) = os::owner_and_mode(&metadata);
            check_directory(owner, mode, os::user()).err()
        } else {
            Some(Problem::WrongKind("directory"))
        };
        if let Some(problem) = problem {
            return Err(CacheError::UnsafeDirectory { dir, problem });
        }
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
        Ok(CompileCache { dir, mac })
    }

    /// The directory holding the artifacts.
    pub(crate) fn dir(&self) -> &Path {
        &self.dir
    }

    /// The artifact for the module with sha256 `digest` compiled by an engine
    /// with compatibility hash `engine`, if one is cached and its tag
    /// verifies. One that does not is logged and removed.
    pub(crate) fn get(&self, digest: &str, engine: u64) -> Option<Artifact> {
        let path = self.artifact_path(digest, engine);
        match self.read_verified(&path, digest, engine) {
            Ok(artifact) => artifact,
            Err(error) => {
                self.discard(digest, engine, &error);
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
    pub(crate) fn put(&self, digest: &str, engine: u64, artifact: &[u8]) -> Result<(), CacheError> {
        let path = self.artifact_path(digest, engine);
        let tag = self.tag(digest, engine, artifact).finalize().into_bytes();
        let temporary = temporary_path(&path)?;
        write_new(&temporary, &[MAGIC, tag.as_slice(), artifact])?;
        std::fs::rename(&temporary, &path).map_err(|source| {
            let _ = std::fs::remove_file(&temporary);
            CacheError::Io {
                path: path.clone(),
                action: "move the compiled module into place",
                source,
            }
        })
    }

    /// Where the artifact of `digest` for `engine` lives.
    fn artifact_path(&self, digest: &str, engine: u64) -> PathBuf {
        self.dir.join(format!("{digest}-{engine:016x}.cwasm"))
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
        let file = match read_file(path, "read the cached compiled module") {
            Ok(file) => file,
            Err(CacheError::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
                return Ok(None);
            }
            Err(error) => return Err(error),
        };
        let file = file.map_err(refuse)?;
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
        Ok(Some(Artifact { file }))
    }
}

/// Whether a directory owned by `owner` with mode `mode` may hold the cache
/// of user `user`: it must be theirs and writable by nobody else.
fn check_directory(owner: u32, mode: u32, user: u32) -> Result<(), Problem> {
    if owner != user {
        return Err(Problem::NotOwned { owner, user });
    }
    if mode & 0o022 != 0 {
        return Err(Problem::Writable {
            mode: mode & 0o7777,
        });
    }
    Ok(())
}

/// Whether a cache file (the key or an artifact) owned by `owner` with mode
/// `mode` may be used by user `user`: it must be theirs and nobody else may
/// read or write it.
fn check_private(owner: u32, mode: u32, user: u32) -> Result<(), Problem> {
    if owner != user {
        return Err(Problem::NotOwned { owner, user });
    }
    if mode & 0o077 != 0 {
        return Err(Problem::Shared {
            mode: mode & 0o7777,
        });
    }
    Ok(())
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
    let file = read_file(path, "read the compile cache key")?;
    let refuse = |problem| CacheError::UnsafeKey {
        path: path.to_path_buf(),
        problem,
    };
    let key = file.map_err(refuse)?;
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
    let temporary = temporary_path(path)?;
    write_new(&temporary, &[&key])?;
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

/// A fresh name beside `path` for a file to be moved there.
fn temporary_path(path: &Path) -> Result<PathBuf, CacheError> {
    let mut random = [0u8; 8];
    getrandom::fill(&mut random).map_err(|error| CacheError::Random(error.to_string()))?;
    let name = path
        .file_name()
        .map(|name| name.to_string_lossy().into_owned())
        .unwrap_or_default();
    Ok(path.with_file_name(format!(
        ".{name}.{}.{}.tmp",
        std::process::id(),
        hex::encode(random)
    )))
}

/// Creates `path` (0600; failing if anything, a symbolic link included, is
/// there) and writes `parts` to it. Removes it again if writing fails.
fn write_new(path: &Path, parts: &[&[u8]]) -> Result<(), CacheError> {
    let io = |source| CacheError::Io {
        path: path.to_path_buf(),
        action: "write a new cache file",
        source,
    };
    let mut file = os::create_private(path).map_err(io)?;
    let written = parts.iter().try_for_each(|part| file.write_all(part));
    if let Err(source) = written {
        drop(file);
        let _ = std::fs::remove_file(path);
        return Err(io(source));
    }
    Ok(())
}

/// Reads the regular file at `path` without following a symbolic link (or
/// blocking on a FIFO), refusing one that is not this user's alone. The outer
/// error is the I/O failure (`action` says what was being read); the inner one
/// says why the file itself is refused.
fn read_file(path: &Path, action: &'static str) -> Result<Result<Vec<u8>, Problem>, CacheError> {
    let io = |source| CacheError::Io {
        path: path.to_path_buf(),
        action,
        source,
    };
    let mut file = match os::open_nofollow(path) {
        Ok(file) => file,
        Err(error) if os::is_symlink_refusal(&error) => return Ok(Err(Problem::Symlink)),
        Err(error) => return Err(io(error)),
    };
    let metadata = file.metadata().map_err(io)?;
    if !metadata.is_file() {
        return Ok(Err(Problem::WrongKind("regular file")));
    }
    let (owner, mode) = os::owner_and_mode(&metadata);
    if let Err(problem) = check_private(owner, mode, os::user()) {
        return Ok(Err(problem));
    }
    let mut bytes = Vec::with_capacity(usize::try_from(metadata.len()).unwrap_or(0));
    file.read_to_end(&mut bytes).map_err(io)?;
    Ok(Ok(bytes))
}

/// What differs between platforms: owners, modes and `O_NOFOLLOW`.
#[cfg(unix)]
mod os {
    use std::fs::{File, Metadata, OpenOptions};
    use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
    use std::path::Path;

    use rustix::fs::OFlags;

    /// The effective uid of this process.
    pub(super) fn user() -> u32 {
        rustix::process::geteuid().as_raw()
    }

    /// A file's owner and mode bits.
    pub(super) fn owner_and_mode(metadata: &Metadata) -> (u32, u32) {
        (metadata.uid(), metadata.mode())
    }

    /// Opens `path` for reading; fails on a symbolic link and does not block
    /// on a FIFO.
    pub(super) fn open_nofollow(path: &Path) -> std::io::Result<File> {
        OpenOptions::new()
            .read(true)
            .custom_flags(flags(OFlags::NOFOLLOW | OFlags::NONBLOCK))
            .open(path)
    }

    /// Creates `path` for writing, 0600, failing if anything is there (a
    /// symbolic link included).
    pub(super) fn create_private(path: &Path) -> std::io::Result<File> {
        OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(flags(OFlags::NOFOLLOW))
            .open(path)
    }

    /// Whether `error` is `open` refusing a symbolic link under `O_NOFOLLOW`.
    pub(super) fn is_symlink_refusal(error: &std::io::Error) -> bool {
        error.raw_os_error() == Some(rustix::io::Errno::LOOP.raw_os_error())
    }

    /// `flags` as `custom_flags` takes them.
    fn flags(flags: OFlags) -> i32 {
        flags.bits() as i32
    }
}

/// Elsewhere the cache is refused at [`CompileCache::open`]; these only let
/// the module build.
#[cfg(not(unix))]
mod os {
    use std::fs::{File, Metadata};
    use std::path::Path;

    /// No uids here.
    pub(super) fn user() -> u32 {
        0
    }

    /// No owners or modes here: reported as another user's, world-writable.
    pub(super) fn owner_and_mode(_metadata: &Metadata) -> (u32, u32) {
        (u32::MAX, 0o777)
    }

    /// Unsupported.
    pub(super) fn open_nofollow(_path: &Path) -> std::io::Result<File> {
        Err(std::io::ErrorKind::Unsupported.into())
    }

    /// Unsupported.
    pub(super) fn create_private(_path: &Path) -> std::io::Result<File> {
        Err(std::io::ErrorKind::Unsupported.into())
    }

    /// Never.
    pub(super) fn is_symlink_refusal(_error: &std::io::Error) -> bool {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_directory_must_be_the_users_and_writable_by_nobody_else() {
        assert_eq!(check_directory(1000, 0o40700, 1000), Ok(()));
        assert_eq!(check_directory(1000, 0o40755, 1000), Ok(()));
        assert_eq!(
            check_directory(0, 0o40700, 1000),
            Err(Problem::NotOwned {
                owner: 0,
                user: 1000
            })
        );
        assert_eq!(
            check_directory(1000, 0o40700, 0),
            Err(Problem::NotOwned {
                owner: 1000,
                user: 0
            })
        );
        assert_eq!(
            check_directory(1000, 0o40770, 1000),
            Err(Problem::Writable { mode: 0o770 })
        );
        assert_eq!(
            check_directory(1000, 0o40702, 1000),
            Err(Problem::Writable { mode: 0o702 })
        );
        assert_eq!(
            check_directory(1000, 0o41777, 1000),
            Err(Problem::Writable { mode: 0o1777 })
        );
    }

    #[test]
    fn a_file_must_be_the_users_and_readable_by_nobody_else() {
        assert_eq!(check_private(1000, 0o100600, 1000), Ok(()));
        assert_eq!(check_private(1000, 0o100400, 1000), Ok(()));
        assert_eq!(
            check_private(1001, 0o100600, 1000),
            Err(Problem::NotOwned {
                owner: 1001,
                user: 1000
            })
        );
        assert_eq!(
            check_private(1000, 0o100640, 1000),
            Err(Problem::Shared { mode: 0o640 })
        );
        assert_eq!(
            check_private(1000, 0o100604, 1000),
            Err(Problem::Shared { mode: 0o604 })
        );
    }

    #[test]
    fn the_refusal_names_the_directory_and_the_fix() {
        let error = CacheError::UnsafeDirectory {
            dir: PathBuf::from("/srv/cache"),
            problem: Problem::Writable { mode: 0o777 },
        };
        let message = error.to_string();
        assert!(message.starts_with("/srv/cache: refusing"), "{message}");
        assert!(message.contains("writable by group or others (mode 0777)"));
        assert!(message.contains("chmod 700 /srv/cache"), "{message}");
        assert!(message.contains("chown"), "{message}");
    }

    #[cfg(unix)]
    #[test]
    fn the_key_is_private_and_a_planted_key_is_refused() {
        use std::os::unix::fs::PermissionsExt;

        let dir = tempfile::tempdir().expect("tempdir");
        let cache = dir.path().join("cache");
        CompileCache::open(cache.clone()).expect("open");
        let key = dir.path().join("cache.key");
        let mode = std::fs::metadata(&key).expect("key").permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        let first = std::fs::read(&key).expect("read key");
        assert_eq!(first.len(), KEY_LEN);
        // Opening again reuses the key.
        CompileCache::open(cache.clone()).expect("reopen");
        assert_eq!(std::fs::read(&key).expect("read key"), first);

        // A key others can read is refused.
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o644)).expect("chmod");
        let error = CompileCache::open(cache.clone()).err().expect("refused");
        assert!(
            matches!(
                error,
                CacheError::UnsafeKey {
                    problem: Problem::Shared { mode: 0o644 },
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
        let error = CompileCache::open(cache).err().expect("refused");
        assert!(
            matches!(
                error,
                CacheError::UnsafeKey {
                    problem: Problem::Symlink,
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
}
