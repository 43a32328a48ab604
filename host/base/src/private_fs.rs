//! Files and directories private to the user gatehouse runs as: the audit
//! log, the compile cache and its key, the directory of the control socket,
//! and anything else gatehouse keeps for itself. One set of rules, here, for
//! every caller: the core's compile cache, the audit log and the gateway's
//! control socket and token (which is why it is public; an embedder that keeps private
//! files of its own may use it too).
//!
//! **Never through a symbolic link.** The last component is opened with
//! `O_NOFOLLOW` (a link there is refused, [`Refusal::Symlink`]); new files
//! are created with `O_EXCL` (nothing already there, a link included, is
//! written through) and moved into place with `rename`, which replaces a link
//! rather than following it.
//!
//! **Only regular files.** A FIFO, a socket or a device is refused
//! ([`Refusal::NotRegular`]). Files are opened with `O_NONBLOCK`, so a FIFO
//! planted where a file should be cannot block the `open` (for writing it
//! fails at once with `ENXIO`, for reading it opens and is then refused);
//! the flag is cleared again once the file is known to be regular. The one
//! exception is a caller that asks for [`Devices::AllowCharacter`] (the audit
//! log, so that it can be `/dev/null` or `/dev/full`): a character device is
//! then used as it is, its owner and mode left alone, because it is the
//! system's and not a file gatehouse keeps.
//!
//! **Owned by this user.** A file or directory must belong to the effective
//! uid ([`effective_uid`]); anyone else's is refused ([`Refusal::NotOwned`]),
//! root's too, unless gatehouse runs as root.
//!
//! **Files: nobody else may have any access, or they are refused.** A file
//! whose mode gives group or others any permission is refused
//! ([`Refusal::Loose`]) with the fix named (`chmod 600`, or remove it), never
//! tightened in place: a chmod cannot undo what someone may already have read
//! (a key, what people typed into the audit log) or written (a record gatehouse
//! would trust). Files gatehouse creates are 0600 from the start.
//!
//! **Directories: created 0700, tightened when loose.** [`private_dir`]
//! creates a missing directory (and missing parents) 0700, opens it with
//! `O_NOFOLLOW | O_DIRECTORY`, refuses a symbolic link, something that is not
//! a directory, or another user's directory, and takes group and other
//! permissions off one of this user's (with a warning). A directory can be
//! tightened where a file cannot, because everything gatehouse reads from it
//! is checked again, file by file, by the rules above: whatever someone else
//! put there while it was open is refused on its own.
//!
//! **`.gatehouse` is one directory with one policy.** gatehouse's own
//! directory beside the config ([`STATE_DIR`]: the control socket, the compile
//! cache and its key live there) gets the checks of [`private_dir`] whenever
//! it is among the ancestors of a directory made private, before anything is
//! created in it; so it is refused as a symbolic link, or tightened to 0700,
//! whether the compile cache or the control socket reaches it first.
//!
//! These rules hold for the last component and for `.gatehouse`; the
//! directories above them are the operator's to choose (a path through a
//! directory others can write to can be changed under gatehouse by them).

use std::fmt;
use std::fs::File;
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};

/// The name of gatehouse's own directory beside its config (the control
/// socket, the compile cache and its key): whenever it appears among the
/// ancestors of a directory passed to [`private_dir`], it is made private by
/// the same rules first.
pub const STATE_DIR: &str = ".gatehouse";

/// What kind of file something is, as the refusals name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileKind {
    /// A regular file.
    Regular,
    /// A directory.
    Directory,
    /// A symbolic link.
    Symlink,
    /// A named pipe.
    Fifo,
    /// A Unix domain socket.
    Socket,
    /// A character device (`/dev/null`, a terminal).
    CharacterDevice,
    /// A block device (a disk).
    BlockDevice,
    /// Something else.
    Other,
}

impl FileKind {
    /// The kind of `file_type`.
    pub fn of(file_type: std::fs::FileType) -> FileKind {
        #[cfg(unix)]
        {
            use std::os::unix::fs::FileTypeExt;
            if file_type.is_fifo() {
                return FileKind::Fifo;
            }
            if file_type.is_socket() {
                return FileKind::Socket;
            }
            if file_type.is_char_device() {
                return FileKind::CharacterDevice;
            }
            if file_type.is_block_device() {
                return FileKind::BlockDevice;
            }
        }
        if file_type.is_symlink() {
            FileKind::Symlink
        } else if file_type.is_dir() {
            FileKind::Directory
        } else if file_type.is_file() {
            FileKind::Regular
        } else {
            FileKind::Other
        }
    }
}

impl fmt::Display for FileKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            FileKind::Regular => "a regular file",
            FileKind::Directory => "a directory",
            FileKind::Symlink => "a symbolic link",
            FileKind::Fifo => "a FIFO (named pipe)",
            FileKind::Socket => "a socket",
            FileKind::CharacterDevice => "a character device",
            FileKind::BlockDevice => "a block device",
            FileKind::Other => "not a regular file",
        })
    }
}

/// Whether a private file may be a character device.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Devices {
    /// Only regular files (every caller but the audit log).
    #[default]
    Refuse,
    /// A character device (`/dev/null`, `/dev/full`) is used as it is, its
    /// owner and mode not checked; FIFOs, sockets and block devices are still
    /// refused.
    AllowCharacter,
}

/// Why a file or directory is not used.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// A symbolic link where the file or directory itself must be.
    #[error(
        "it is a symbolic link, which gatehouse does not follow here; remove it, or give gatehouse the real path"
    )]
    Symlink,
    /// Not a regular file (a FIFO, a socket, a device, a directory).
    #[error("it is {0}, not a regular file")]
    NotRegular(FileKind),
    /// Not a directory.
    #[error("it is {0}, not a directory")]
    NotDirectory(FileKind),
    /// Another user's.
    #[error("it belongs to uid {owner}, not to this user (uid {user})")]
    NotOwned {
        /// The owner.
        owner: u32,
        /// The effective uid of this process.
        user: u32,
    },
    /// A file that group or others may read or write.
    #[error(
        "group or others may access it (mode {mode:04o}); if what it holds is yours, `chmod 600` it, otherwise remove it"
    )]
    Loose {
        /// Its permission bits.
        mode: u32,
    },
    /// A shared file ([`read_protected`]) that group or others may write.
    #[error(
        "group or others may write it (mode {mode:04o}); `chmod go-w` it if what it holds is yours, otherwise remove it"
    )]
    Writable {
        /// Its permission bits.
        mode: u32,
    },
    /// A file larger than its reader takes.
    #[error("it holds {len} bytes, more than the {limit} read")]
    TooLarge {
        /// Its size.
        len: u64,
        /// The most that is read.
        limit: u64,
    },
}

/// Why a private file or directory could not be opened, created or read.
#[derive(Debug, thiserror::Error)]
pub enum PrivateError {
    /// A file system operation failed (the file may be fine).
    #[error("{}: cannot {action}: {source}", path.display())]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// What was being done.
        action: &'static str,
        /// The I/O error.
        source: io::Error,
    },
    /// The file or directory itself is not one gatehouse may use.
    #[error("{}: refused: {refusal}", path.display())]
    Refused {
        /// The file or directory.
        path: PathBuf,
        /// What is wrong with it.
        refusal: Refusal,
    },
}

impl PrivateError {
    /// The file or directory.
    pub fn path(&self) -> &Path {
        match self {
            PrivateError::Io { path, .. } | PrivateError::Refused { path, .. } => path,
        }
    }

    /// What is wrong with the file itself, if that is why.
    pub fn refusal(&self) -> Option<Refusal> {
        match self {
            PrivateError::Refused { refusal, .. } => Some(*refusal),
            PrivateError::Io { .. } => None,
        }
    }

    /// Whether nothing is at the path.
    pub fn is_not_found(&self) -> bool {
        matches!(self, PrivateError::Io { source, .. } if source.kind() == io::ErrorKind::NotFound)
    }

    /// The error as an [`io::Error`] without the path (for errors that name
    /// the path themselves): a refusal becomes the inner error, typed.
    pub fn into_io(self) -> io::Error {
        match self {
            PrivateError::Io { source, .. } => source,
            PrivateError::Refused { refusal, .. } => {
                io::Error::new(io::ErrorKind::PermissionDenied, refusal)
            }
        }
    }
}

/// Whether the peer of a local socket may talk to this process: only its
/// own user (the control sockets, the console's socket). `peer` is the
/// peer's uid (`SO_PEERCRED`), `None` when its credentials could not be read
/// (refused too); `own` is this process's effective uid.
pub fn peer_allowed(peer: Option<u32>, own: u32) -> Result<(), String> {
    match peer {
        Some(uid) if uid == own => Ok(()),
        Some(uid) => Err(format!("refused: uid {uid} is not this server's uid {own}")),
        None => Err("refused: the peer's credentials cannot be read".to_owned()),
    }
}

/// The effective uid of this process: the owner every private file and
/// directory must have (0 where there are no uids).
pub fn effective_uid() -> u32 {
    #[cfg(unix)]
    {
        rustix::process::geteuid().as_raw()
    }
    #[cfg(not(unix))]
    {
        0
    }
}

/// Whether a file of `kind`, owned by `owner` with mode `mode`, may be used
/// as a private file of user `user`: a regular file (or a character device,
/// when `devices` allows it), theirs, with no permission for group or
/// others.
pub fn check_file(
    kind: FileKind,
    owner: u32,
    mode: u32,
    user: u32,
    devices: Devices,
) -> Result<(), Refusal> {
    match kind {
        FileKind::Regular => {}
        FileKind::CharacterDevice if devices == Devices::AllowCharacter => return Ok(()),
        FileKind::Symlink => return Err(Refusal::Symlink),
        other => return Err(Refusal::NotRegular(other)),
    }
    if owner != user {
        return Err(Refusal::NotOwned { owner, user });
    }
    if mode & 0o077 != 0 {
        return Err(Refusal::Loose {
            mode: mode & 0o7777,
        });
    }
    Ok(())
}

/// Whether a directory of `kind` owned by `owner` may be a private directory
/// of user `user`; `Ok(true)` when its mode `mode` must be tightened to 0700
/// first.
pub fn check_dir(kind: FileKind, owner: u32, mode: u32, user: u32) -> Result<bool, Refusal> {
    match kind {
        FileKind::Directory => {}
        FileKind::Symlink => return Err(Refusal::Symlink),
        other => return Err(Refusal::NotDirectory(other)),
    }
    if owner != user {
        return Err(Refusal::NotOwned { owner, user });
    }
    Ok(mode & 0o077 != 0)
}

/// Opens the private file at `path` for reading (see the [module
/// docs](self)): never through a symbolic link, never blocking on a FIFO,
/// refused unless it is a regular file of this user's that nobody else may
/// access.
pub fn open_read(path: &Path) -> Result<File, PrivateError> {
    let file = os::open(path, os::Mode::Read).map_err(|error| opening(path, error))?;
    checked(path, file, Devices::Refuse)
}

/// Reads the whole private file at `path` ([`open_read`]), refusing one over
/// `limit` bytes.
pub fn read(path: &Path, limit: u64) -> Result<Vec<u8>, PrivateError> {
    read_bounded(path, &open_read(path)?, limit)
}

/// Reads the whole file at `path`, refusing one over `limit` bytes, under
/// the rules for a file this user keeps that others may read but only this
/// user may change (a lock file checked into git, 0644): never through a
/// symbolic link, never blocking on a FIFO, a regular file of this user's
/// that group and others cannot write ([`Refusal::Writable`]).
pub fn read_protected(path: &Path, limit: u64) -> Result<Vec<u8>, PrivateError> {
    let file = os::open(path, os::Mode::Read).map_err(|error| opening(path, error))?;
    let metadata = file.metadata().map_err(|source| PrivateError::Io {
        path: path.to_path_buf(),
        action: "inspect it",
        source,
    })?;
    let (owner, mode) = os::owner_and_mode(&metadata);
    // The private rules, but for the read and execute bits of group and
    // others.
    check_file(
        FileKind::of(metadata.file_type()),
        owner,
        mode & !0o055,
        effective_uid(),
        Devices::Refuse,
    )
    .map_err(|refusal| PrivateError::Refused {
        path: path.to_path_buf(),
        refusal: match refusal {
            Refusal::Loose { .. } => Refusal::Writable {
                mode: mode & 0o7777,
            },
            other => other,
        },
    })?;
    os::clear_nonblocking(&file).map_err(|source| PrivateError::Io {
        path: path.to_path_buf(),
        action: "clear O_NONBLOCK on it",
        source,
    })?;
    read_bounded(path, &file, limit)
}

/// Reads the whole of `file`, opened from `path` (by [`open_read`], say),
/// refusing one over `limit` bytes; the file stays open for the caller.
pub fn read_bounded(path: &Path, file: &File, limit: u64) -> Result<Vec<u8>, PrivateError> {
    let io = |source| PrivateError::Io {
        path: path.to_path_buf(),
        action: "read it",
        source,
    };
    let len = file.metadata().map_err(io)?.len();
    if len > limit {
        return Err(PrivateError::Refused {
            path: path.to_path_buf(),
            refusal: Refusal::TooLarge { len, limit },
        });
    }
    let mut bytes = Vec::with_capacity(usize::try_from(len).unwrap_or(0));
    file.take(limit.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(io)?;
    if bytes.len() as u64 > limit {
        return Err(PrivateError::Refused {
            path: path.to_path_buf(),
            refusal: Refusal::TooLarge {
                len: bytes.len() as u64,
                limit,
            },
        });
    }
    Ok(bytes)
}

/// Opens the private file at `path` for appending, creating it 0600 if
/// missing; an existing one must pass the same checks as [`open_read`]
/// (`devices` may let a character device through).
pub fn open_append(path: &Path, devices: Devices) -> Result<File, PrivateError> {
    let file = os::open(path, os::Mode::Append).map_err(|error| opening(path, error))?;
    checked(path, file, devices)
}

/// Creates `path` for writing, 0600, failing if anything is there (a
/// symbolic link included).
pub fn create_new(path: &Path) -> Result<File, PrivateError> {
    os::open(path, os::Mode::CreateNew).map_err(|source| PrivateError::Io {
        path: path.to_path_buf(),
        action: "create it",
        source,
    })
}

/// Creates `path` ([`create_new`]) and writes `parts` to it, synced to the
/// disk when `durable`; removes it again if writing fails.
pub fn write_new(path: &Path, parts: &[&[u8]], durable: bool) -> Result<(), PrivateError> {
    let mut file = create_new(path)?;
    let written = parts
        .iter()
        .try_for_each(|part| file.write_all(part))
        .and_then(|()| if durable { file.sync_all() } else { Ok(()) });
    drop(file);
    written.map_err(|source| {
        let _ = std::fs::remove_file(path);
        PrivateError::Io {
            path: path.to_path_buf(),
            action: "write it",
            source,
        }
    })
}

/// A fresh, unguessable name beside `path` for a file to be moved there:
/// `.<name>.<pid>.<random>.tmp`.
pub fn temporary_path(path: &Path) -> Result<PathBuf, PrivateError> {
    let mut random = [0u8; 8];
    getrandom::fill(&mut random).map_err(|error| PrivateError::Io {
        path: path.to_path_buf(),
        action: "get random bytes for a temporary name",
        source: io::Error::other(error.to_string()),
    })?;
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

/// Replaces whatever is at `path` (a symbolic link included, which is
/// replaced, not followed) with a new 0600 file holding `parts`: written to a
/// [`temporary_path`] beside it ([`write_new`], synced when `durable`), then
/// renamed into place, so a reader sees the old file or the new one, never
/// a part.
pub fn replace(path: &Path, parts: &[&[u8]], durable: bool) -> Result<(), PrivateError> {
    let temporary = temporary_path(path)?;
    write_new(&temporary, parts, durable)?;
    std::fs::rename(&temporary, path).map_err(|source| {
        let _ = std::fs::remove_file(&temporary);
        PrivateError::Io {
            path: path.to_path_buf(),
            action: "move the new file into place",
            source,
        }
    })
}

/// Makes `dir` a private directory (see the [module docs](self)): each
/// [`STATE_DIR`] among its ancestors first, then `dir` itself, each created
/// 0700 (with missing parents) if missing, opened without following a
/// symbolic link, refused unless it is a directory of this user's, and made
/// 0700 if group or others had any access to it.
pub fn private_dir(dir: &Path) -> Result<(), PrivateError> {
    let dir = if dir.as_os_str().is_empty() {
        Path::new(".")
    } else {
        dir
    };
    let mut state_dirs: Vec<&Path> = dir
        .ancestors()
        .skip(1)
        .filter(|ancestor| ancestor.file_name() == Some(std::ffi::OsStr::new(STATE_DIR)))
        .collect();
    state_dirs.reverse();
    for state_dir in state_dirs {
        one_private_dir(state_dir)?;
    }
    one_private_dir(dir)
}

/// [`private_dir`] for `dir` alone.
fn one_private_dir(dir: &Path) -> Result<(), PrivateError> {
    let io = |action, source| PrivateError::Io {
        path: dir.to_path_buf(),
        action,
        source,
    };
    let opened = match os::open_dir(dir) {
        Err(error) if error.kind() == io::ErrorKind::NotFound => {
            let mut builder = std::fs::DirBuilder::new();
            builder.recursive(true);
            #[cfg(unix)]
            std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
            match builder.create(dir) {
                Ok(()) => os::open_dir(dir),
                // Something other than a directory is in the way (a dangling
                // link, a file): refused by what it is, below.
                Err(error) if error.kind() == io::ErrorKind::AlreadyExists => Err(error),
                Err(error) => return Err(io("create the directory", error)),
            }
        }
        other => other,
    };
    let opened = match opened {
        Ok(opened) => opened,
        Err(error) => {
            // Not a directory, a symbolic link, or a dangling one: say which.
            return Err(match std::fs::symlink_metadata(dir) {
                Ok(metadata) if !metadata.is_dir() => PrivateError::Refused {
                    path: dir.to_path_buf(),
                    refusal: match FileKind::of(metadata.file_type()) {
                        FileKind::Symlink => Refusal::Symlink,
                        other => Refusal::NotDirectory(other),
                    },
                },
                _ => io("open the directory", error),
            });
        }
    };
    let metadata = opened
        .metadata()
        .map_err(|error| io("inspect the directory", error))?;
    let (owner, mode) = os::owner_and_mode(&metadata);
    let user = effective_uid();
    let loose =
        check_dir(FileKind::of(metadata.file_type()), owner, mode, user).map_err(|refusal| {
            PrivateError::Refused {
                path: dir.to_path_buf(),
                refusal,
            }
        })?;
    if loose {
        tracing::warn!(
            path = %dir.display(),
            "group or others had access to this private directory (mode {:04o}); making it 0700",
            mode & 0o7777
        );
        os::make_0700(&opened).map_err(|error| io("make the directory 0700", error))?;
    }
    Ok(())
}

/// What an `open` error means: a refusal when the file is in the way by what
/// it is (a link, a FIFO without a reader, a socket, a directory), otherwise
/// the I/O error.
fn opening(path: &Path, error: io::Error) -> PrivateError {
    let refusal = if os::is_symlink_refusal(&error) {
        Some(Refusal::Symlink)
    } else if os::is_not_a_file(&error) {
        // ENXIO (a FIFO nobody reads, a socket) or EISDIR: name what it is.
        std::fs::symlink_metadata(path)
            .ok()
            .map(|metadata| match FileKind::of(metadata.file_type()) {
                FileKind::Symlink => Refusal::Symlink,
                other => Refusal::NotRegular(other),
            })
            .filter(|refusal| *refusal != Refusal::NotRegular(FileKind::Regular))
    } else {
        None
    };
    match refusal {
        Some(refusal) => PrivateError::Refused {
            path: path.to_path_buf(),
            refusal,
        },
        None => PrivateError::Io {
            path: path.to_path_buf(),
            action: "open it",
            source: error,
        },
    }
}

/// Checks an opened file (its kind, owner and mode) and clears `O_NONBLOCK`
/// on it.
fn checked(path: &Path, file: File, devices: Devices) -> Result<File, PrivateError> {
    let io = |action, source| PrivateError::Io {
        path: path.to_path_buf(),
        action,
        source,
    };
    let metadata = file.metadata().map_err(|error| io("inspect it", error))?;
    let (owner, mode) = os::owner_and_mode(&metadata);
    check_file(
        FileKind::of(metadata.file_type()),
        owner,
        mode,
        effective_uid(),
        devices,
    )
    .map_err(|refusal| PrivateError::Refused {
        path: path.to_path_buf(),
        refusal,
    })?;
    os::clear_nonblocking(&file).map_err(|error| io("clear O_NONBLOCK on it", error))?;
    Ok(file)
}

/// What differs between platforms: flags, owners and modes.
#[cfg(unix)]
mod os {
    use std::fs::{File, Metadata, OpenOptions};
    use std::io;
    use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
    use std::path::Path;

    use rustix::fs::OFlags;
    use rustix::io::Errno;

    /// How a file is opened.
    #[derive(Clone, Copy)]
    pub(super) enum Mode {
        /// An existing file, for reading.
        Read,
        /// For appending, created 0600 if missing.
        Append,
        /// A new file, for writing, 0600.
        CreateNew,
    }

    /// Opens `path` as `mode` says: never through a symbolic link, never
    /// blocking on a FIFO (`O_NONBLOCK`, cleared later by `checked`), never
    /// taking a terminal as the controlling one.
    pub(super) fn open(path: &Path, mode: Mode) -> io::Result<File> {
        let mut options = OpenOptions::new();
        let flags = OFlags::NOFOLLOW | OFlags::NOCTTY;
        match mode {
            Mode::Read => options
                .read(true)
                .custom_flags(bits(flags | OFlags::NONBLOCK)),
            Mode::Append => options
                .append(true)
                .create(true)
                .mode(0o600)
                .custom_flags(bits(flags | OFlags::NONBLOCK)),
            // O_EXCL: nothing is there, so nothing can block.
            Mode::CreateNew => options
                .write(true)
                .create_new(true)
                .mode(0o600)
                .custom_flags(bits(flags)),
        };
        options.open(path)
    }

    /// Opens the directory `path` without following a symbolic link.
    pub(super) fn open_dir(path: &Path) -> io::Result<File> {
        OpenOptions::new()
            .read(true)
            .custom_flags(bits(OFlags::NOFOLLOW | OFlags::DIRECTORY))
            .open(path)
    }

    /// A file's owner and mode bits.
    pub(super) fn owner_and_mode(metadata: &Metadata) -> (u32, u32) {
        (metadata.uid(), metadata.mode())
    }

    /// Whether `error` is `open` refusing a symbolic link under `O_NOFOLLOW`.
    pub(super) fn is_symlink_refusal(error: &io::Error) -> bool {
        error.raw_os_error() == Some(Errno::LOOP.raw_os_error())
    }

    /// Whether `error` is `open` finding something that is not a file: a
    /// FIFO without a reader or a socket (`ENXIO`), a directory (`EISDIR`).
    pub(super) fn is_not_a_file(error: &io::Error) -> bool {
        [Errno::NXIO, Errno::ISDIR]
            .iter()
            .any(|errno| error.raw_os_error() == Some(errno.raw_os_error()))
    }

    /// Clears `O_NONBLOCK`.
    pub(super) fn clear_nonblocking(file: &File) -> io::Result<()> {
        let flags = rustix::fs::fcntl_getfl(file)?;
        if flags.contains(OFlags::NONBLOCK) {
            rustix::fs::fcntl_setfl(file, flags - OFlags::NONBLOCK)?;
        }
        Ok(())
    }

    /// `chmod 0700` through the open directory.
    pub(super) fn make_0700(dir: &File) -> io::Result<()> {
        rustix::fs::fchmod(dir, rustix::fs::Mode::RWXU)?;
        Ok(())
    }

    /// `flags` as `custom_flags` takes them.
    fn bits(flags: OFlags) -> i32 {
        flags.bits() as i32
    }
}

/// Without owners, modes or `O_NOFOLLOW`: plain files, reported as this
/// user's and private.
#[cfg(not(unix))]
mod os {
    use std::fs::{File, Metadata, OpenOptions};
    use std::io;
    use std::path::Path;

    /// How a file is opened.
    #[derive(Clone, Copy)]
    pub(super) enum Mode {
        /// An existing file, for reading.
        Read,
        /// For appending, created if missing.
        Append,
        /// A new file, for writing.
        CreateNew,
    }

    /// Opens `path` as `mode` says.
    pub(super) fn open(path: &Path, mode: Mode) -> io::Result<File> {
        match mode {
            Mode::Read => File::open(path),
            Mode::Append => OpenOptions::new().append(true).create(true).open(path),
            Mode::CreateNew => OpenOptions::new().write(true).create_new(true).open(path),
        }
    }

    /// Opens the directory `path`.
    pub(super) fn open_dir(path: &Path) -> io::Result<File> {
        if std::fs::metadata(path)?.is_dir() {
            File::open(path)
        } else {
            Err(io::ErrorKind::NotADirectory.into())
        }
    }

    /// No owners or modes here.
    pub(super) fn owner_and_mode(_metadata: &Metadata) -> (u32, u32) {
        (super::effective_uid(), 0o600)
    }

    /// Never.
    pub(super) fn is_symlink_refusal(_error: &io::Error) -> bool {
        false
    }

    /// Never.
    pub(super) fn is_not_a_file(_error: &io::Error) -> bool {
        false
    }

    /// Nothing to clear.
    pub(super) fn clear_nonblocking(_file: &File) -> io::Result<()> {
        Ok(())
    }

    /// Nothing to change.
    pub(super) fn make_0700(_dir: &File) -> io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_must_be_regular_the_users_and_private() {
        let regular =
            |owner, mode, user| check_file(FileKind::Regular, owner, mode, user, Devices::Refuse);
        assert_eq!(regular(1000, 0o100600, 1000), Ok(()));
        assert_eq!(regular(1000, 0o100400, 1000), Ok(()));
        assert_eq!(
            regular(1001, 0o100600, 1000),
            Err(Refusal::NotOwned {
                owner: 1001,
                user: 1000
            })
        );
        // Root's file is another user's, unless gatehouse runs as root.
        assert_eq!(
            regular(0, 0o100600, 1000),
            Err(Refusal::NotOwned {
                owner: 0,
                user: 1000
            })
        );
        assert_eq!(regular(0, 0o100600, 0), Ok(()));
        for mode in [0o100640, 0o100604, 0o100660, 0o100606, 0o100610, 0o100601] {
            assert_eq!(
                regular(1000, mode, 1000),
                Err(Refusal::Loose {
                    mode: mode & 0o7777
                }),
                "{mode:o}"
            );
        }
        for kind in [
            FileKind::Fifo,
            FileKind::Socket,
            FileKind::BlockDevice,
            FileKind::Directory,
            FileKind::CharacterDevice,
        ] {
            assert_eq!(
                check_file(kind, 1000, 0o600, 1000, Devices::Refuse),
                Err(Refusal::NotRegular(kind))
            );
        }
        assert_eq!(
            check_file(FileKind::Symlink, 1000, 0o777, 1000, Devices::Refuse),
            Err(Refusal::Symlink)
        );
    }

    #[test]
    fn only_a_caller_that_allows_them_gets_character_devices_as_they_are() {
        // `/dev/full`: root's, 0666.
        assert_eq!(
            check_file(
                FileKind::CharacterDevice,
                0,
                0o20666,
                1000,
                Devices::AllowCharacter
            ),
            Ok(())
        );
        for kind in [FileKind::Fifo, FileKind::Socket, FileKind::BlockDevice] {
            assert_eq!(
                check_file(kind, 1000, 0o600, 1000, Devices::AllowCharacter),
                Err(Refusal::NotRegular(kind)),
                "{kind}"
            );
        }
    }

    #[test]
    fn a_directory_must_be_the_users_and_is_tightened_when_loose() {
        assert_eq!(
            check_dir(FileKind::Directory, 1000, 0o40700, 1000),
            Ok(false)
        );
        assert_eq!(
            check_dir(FileKind::Directory, 1000, 0o40755, 1000),
            Ok(true)
        );
        assert_eq!(
            check_dir(FileKind::Directory, 1000, 0o41777, 1000),
            Ok(true)
        );
        assert_eq!(
            check_dir(FileKind::Directory, 0, 0o40700, 1000),
            Err(Refusal::NotOwned {
                owner: 0,
                user: 1000
            })
        );
        assert_eq!(
            check_dir(FileKind::Symlink, 1000, 0o40700, 1000),
            Err(Refusal::Symlink)
        );
        assert_eq!(
            check_dir(FileKind::Regular, 1000, 0o600, 1000),
            Err(Refusal::NotDirectory(FileKind::Regular))
        );
    }

    #[cfg(unix)]
    mod unix {
        use super::super::*;
        use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt, symlink};
        use std::time::{Duration, Instant};

        fn mode(path: &Path) -> u32 {
            std::fs::symlink_metadata(path)
                .expect("exists")
                .permissions()
                .mode()
                & 0o7777
        }

        fn chmod(path: &Path, mode: u32) {
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).expect("chmod");
        }

        #[test]
        fn a_protected_file_may_be_read_by_others_but_written_by_this_user_only() {
            let dir = tempfile::tempdir().expect("tempdir");
            let path = dir.path().join("gatehouse.lock");
            std::fs::write(&path, "version = 1\n").expect("write");
            for (mode, readable) in [
                (0o600, true),
                (0o644, true),
                (0o755, true),
                (0o664, false),
                (0o646, false),
                (0o666, false),
            ] {
                chmod(&path, mode);
                let read = read_protected(&path, 1024);
                assert_eq!(read.is_ok(), readable, "{mode:o}: {read:?}");
                if !readable {
                    let text = read.expect_err("refused").to_string();
                    assert!(text.contains("chmod go-w"), "{text}");
                }
            }
            chmod(&path, 0o644);
            let link = dir.path().join("link.lock");
            symlink(&path, &link).expect("symlink");
            assert!(read_protected(&link, 1024).is_err(), "never through a link");
            assert!(read_protected(&path, 4).is_err(), "bounded");
            // The private rule refuses what the protected one reads.
            assert!(read(&path, 1024).is_err());
        }

        fn mkfifo(path: &Path) {
            rustix::fs::mknodat(
                rustix::fs::CWD,
                path,
                rustix::fs::FileType::Fifo,
                rustix::fs::Mode::from_raw_mode(0o600),
                0,
            )
            .expect("mkfifo");
        }

        /// Runs `open` on another thread and fails the test if it has not
        /// returned within 5 s (a blocked open would hang it forever).
        fn promptly<T: Send + 'static>(open: impl FnOnce() -> T + Send + 'static) -> T {
            let (done, finished) = std::sync::mpsc::channel();
            std::thread::spawn(move || {
                let _ = done.send(open());
            });
            finished
                .recv_timeout(Duration::from_secs(5))
                .expect("the open returned (a FIFO must not block it)")
        }

        #[test]
        fn files_are_created_0600_and_never_through_a_link() {
            let dir = tempfile::tempdir().expect("tempdir");
            let path = dir.path().join("file");
            replace(&path, &[b"one"], true).expect("replace");
            assert_eq!(mode(&path), 0o600);
            assert_eq!(read(&path, 16).expect("read"), b"one");
            // A link in the place is replaced, its target untouched.
            let target = dir.path().join("target");
            std::fs::write(&target, b"keep").expect("write");
            std::fs::remove_file(&path).expect("rm");
            symlink(&target, &path).expect("symlink");
            assert_eq!(
                read(&path, 16).expect_err("a link").refusal(),
                Some(Refusal::Symlink)
            );
            assert_eq!(
                open_append(&path, Devices::Refuse)
                    .expect_err("a link")
                    .refusal(),
                Some(Refusal::Symlink)
            );
            assert!(create_new(&path).is_err(), "O_EXCL");
            replace(&path, &[b"two", b"!"], false).expect("replace");
            assert!(std::fs::symlink_metadata(&path).expect("meta").is_file());
            assert_eq!(read(&path, 16).expect("read"), b"two!");
            assert_eq!(std::fs::read(&target).expect("read"), b"keep");
            let left: Vec<_> = std::fs::read_dir(dir.path())
                .expect("ls")
                .filter_map(Result::ok)
                .filter(|entry| entry.file_name().to_string_lossy().ends_with(".tmp"))
                .collect();
            assert!(left.is_empty(), "{left:?}");
            // Too large for its reader.
            assert_eq!(
                read(&path, 3).expect_err("too large").refusal(),
                Some(Refusal::TooLarge { len: 4, limit: 3 })
            );
        }

        #[test]
        fn a_loose_file_is_refused_and_left_as_it_is() {
            let dir = tempfile::tempdir().expect("tempdir");
            let path = dir.path().join("loose");
            std::fs::write(&path, b"x").expect("write");
            chmod(&path, 0o644);
            for error in [
                read(&path, 16).expect_err("loose"),
                open_append(&path, Devices::AllowCharacter).expect_err("loose"),
            ] {
                assert_eq!(error.refusal(), Some(Refusal::Loose { mode: 0o644 }));
                let message = error.to_string();
                assert!(message.contains(&path.display().to_string()), "{message}");
                assert!(message.contains("chmod 600"), "{message}");
            }
            assert_eq!(mode(&path), 0o644, "not changed");
        }

        #[test]
        fn a_fifo_is_refused_at_once_for_reading_and_for_appending() {
            let dir = tempfile::tempdir().expect("tempdir");
            let fifo = dir.path().join("fifo");
            mkfifo(&fifo);
            let path = fifo.clone();
            let started = Instant::now();
            let appended = promptly(move || open_append(&path, Devices::AllowCharacter).map(drop));
            assert_eq!(
                appended.expect_err("a FIFO").refusal(),
                Some(Refusal::NotRegular(FileKind::Fifo))
            );
            let path = fifo.clone();
            let read = promptly(move || read(&path, 16).map(drop));
            assert_eq!(
                read.expect_err("a FIFO").refusal(),
                Some(Refusal::NotRegular(FileKind::Fifo))
            );
            // With a reader waiting on it, opening for writing succeeds; the
            // FIFO is refused all the same.
            let _reader = std::fs::OpenOptions::new()
                .read(true)
                .custom_flags(rustix::fs::OFlags::NONBLOCK.bits() as i32)
                .open(&fifo)
                .expect("reader");
            let path = fifo.clone();
            let appended = promptly(move || open_append(&path, Devices::AllowCharacter).map(drop));
            assert_eq!(
                appended.expect_err("a FIFO").refusal(),
                Some(Refusal::NotRegular(FileKind::Fifo))
            );
            assert!(started.elapsed() < Duration::from_secs(5));
        }

        #[test]
        fn a_socket_or_a_directory_is_not_a_file() {
            let dir = tempfile::tempdir().expect("tempdir");
            let socket = dir.path().join("socket");
            let _listener = std::os::unix::net::UnixListener::bind(&socket).expect("bind");
            for error in [
                read(&socket, 16).expect_err("socket"),
                open_append(&socket, Devices::AllowCharacter).expect_err("socket"),
            ] {
                assert_eq!(
                    error.refusal(),
                    Some(Refusal::NotRegular(FileKind::Socket)),
                    "{error}"
                );
            }
            let sub = dir.path().join("sub");
            std::fs::create_dir(&sub).expect("mkdir");
            for error in [
                read(&sub, 16).expect_err("dir"),
                open_append(&sub, Devices::Refuse).expect_err("dir"),
            ] {
                assert_eq!(
                    error.refusal(),
                    Some(Refusal::NotRegular(FileKind::Directory)),
                    "{error}"
                );
            }
        }

        #[cfg(target_os = "linux")]
        #[test]
        fn a_character_device_only_where_allowed() {
            let before = mode(Path::new("/dev/null"));
            assert_eq!(
                open_append(Path::new("/dev/null"), Devices::Refuse)
                    .expect_err("refused")
                    .refusal(),
                Some(Refusal::NotRegular(FileKind::CharacterDevice))
            );
            let mut null =
                open_append(Path::new("/dev/null"), Devices::AllowCharacter).expect("allowed");
            null.write_all(b"x").expect("written");
            assert_eq!(mode(Path::new("/dev/null")), before, "left alone");
        }

        #[test]
        fn another_users_file_is_refused() {
            if effective_uid() != 0 {
                eprintln!("skipped: giving a file away needs root; the pure check is tested above");
                return;
            }
            let dir = tempfile::tempdir().expect("tempdir");
            let path = dir.path().join("planted");
            std::fs::write(&path, b"x").expect("write");
            chmod(&path, 0o600);
            std::os::unix::fs::chown(&path, Some(65534), Some(65534)).expect("chown");
            for error in [
                read(&path, 16).expect_err("another's"),
                open_append(&path, Devices::AllowCharacter).expect_err("another's"),
            ] {
                assert_eq!(
                    error.refusal(),
                    Some(Refusal::NotOwned {
                        owner: 65534,
                        user: 0
                    })
                );
            }
            let metadata = std::fs::metadata(&path).expect("meta");
            assert_eq!((metadata.uid(), metadata.mode() & 0o777), (65534, 0o600));
        }

        #[test]
        fn a_private_dir_is_created_0700_and_a_loose_one_of_ours_tightened() {
            let dir = tempfile::tempdir().expect("tempdir");
            let deep = dir.path().join("a/b/c");
            private_dir(&deep).expect("created");
            for created in ["a", "a/b", "a/b/c"] {
                assert_eq!(mode(&dir.path().join(created)), 0o700, "{created}");
            }
            chmod(&deep, 0o777);
            private_dir(&deep).expect("tightened");
            assert_eq!(mode(&deep), 0o700);
            // Existing parents are the operator's: left as they are.
            chmod(&dir.path().join("a"), 0o755);
            private_dir(&deep).expect("again");
            assert_eq!(mode(&dir.path().join("a")), 0o755);
        }

        #[test]
        fn a_private_dir_is_never_a_link_or_a_file() {
            let dir = tempfile::tempdir().expect("tempdir");
            let elsewhere = dir.path().join("elsewhere");
            std::fs::create_dir(&elsewhere).expect("mkdir");
            chmod(&elsewhere, 0o755);
            let linked = dir.path().join("linked");
            symlink(&elsewhere, &linked).expect("symlink");
            assert_eq!(
                private_dir(&linked).expect_err("a link").refusal(),
                Some(Refusal::Symlink)
            );
            assert_eq!(mode(&elsewhere), 0o755, "the target is left alone");
            let dangling = dir.path().join("dangling");
            symlink(dir.path().join("nowhere"), &dangling).expect("symlink");
            assert_eq!(
                private_dir(&dangling).expect_err("a link").refusal(),
                Some(Refusal::Symlink)
            );
            assert!(!dir.path().join("nowhere").exists(), "nothing created");
            let file = dir.path().join("file");
            std::fs::write(&file, b"x").expect("write");
            assert_eq!(
                private_dir(&file).expect_err("a file").refusal(),
                Some(Refusal::NotDirectory(FileKind::Regular))
            );
        }

        #[test]
        fn the_state_dir_is_checked_before_anything_is_made_in_it() {
            let dir = tempfile::tempdir().expect("tempdir");
            // A `.gatehouse` planted as a link to someone's directory.
            let elsewhere = dir.path().join("elsewhere");
            std::fs::create_dir(&elsewhere).expect("mkdir");
            let state = dir.path().join(STATE_DIR);
            symlink(&elsewhere, &state).expect("symlink");
            let error = private_dir(&state.join("compiled")).expect_err("refused");
            assert_eq!(error.refusal(), Some(Refusal::Symlink));
            assert_eq!(error.path(), state);
            assert!(
                std::fs::read_dir(&elsewhere).expect("ls").next().is_none(),
                "nothing created through the link"
            );
            // A loose `.gatehouse` of ours is tightened by whoever comes first.
            std::fs::remove_file(&state).expect("rm");
            std::fs::create_dir(&state).expect("mkdir");
            chmod(&state, 0o755);
            private_dir(&state.join("compiled")).expect("made");
            assert_eq!(mode(&state), 0o700);
            assert_eq!(mode(&state.join("compiled")), 0o700);
        }

        #[test]
        fn another_users_dir_is_refused() {
            if effective_uid() != 0 {
                eprintln!("skipped: giving a directory away needs root");
                return;
            }
            let dir = tempfile::tempdir().expect("tempdir");
            let theirs = dir.path().join(STATE_DIR);
            std::fs::create_dir(&theirs).expect("mkdir");
            chmod(&theirs, 0o755);
            std::os::unix::fs::chown(&theirs, Some(65534), Some(65534)).expect("chown");
            for path in [theirs.clone(), theirs.join("compiled")] {
                assert_eq!(
                    private_dir(&path).expect_err("another's").refusal(),
                    Some(Refusal::NotOwned {
                        owner: 65534,
                        user: 0
                    })
                );
            }
            assert_eq!(mode(&theirs), 0o755, "not changed");
            assert!(!theirs.join("compiled").exists());
        }
    }
}
