//! Why a root could not be discovered.

use std::io;
use std::path::PathBuf;

/// Why a whole root yielded nothing. Problems inside a root are warnings in
/// [`RootDiscovery`](super::RootDiscovery), not errors.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DiscoveryError {
    /// The root does not exist (yet). Transient.
    #[error("capability root `{id}` ({}) does not exist", path.display())]
    Missing {
        /// The root's id.
        id: String,
        /// Its path.
        path: PathBuf,
    },
    /// The root is not a directory. Permanent.
    #[error("capability root `{id}` ({}) is not a directory", path.display())]
    NotADirectory {
        /// The root's id.
        id: String,
        /// Its path.
        path: PathBuf,
    },
    /// The root is outside every allowed workspace directory. Permanent.
    #[error(
        "capability root `{id}` ({}) is outside the allowed workspace directories",
        path.display()
    )]
    OutsideWorkspace {
        /// The root's id.
        id: String,
        /// Its path.
        path: PathBuf,
    },
    /// Reading the root failed. Transient.
    #[error("capability root `{id}` ({}): {message}", path.display())]
    Io {
        /// The root's id.
        id: String,
        /// Its path.
        path: PathBuf,
        /// The kind of I/O error.
        kind: io::ErrorKind,
        /// The error's text.
        message: String,
    },
}

impl DiscoveryError {
    /// Whether the error may go away by itself, so the root is retried on
    /// the next pass instead of being cached.
    pub fn is_transient(&self) -> bool {
        matches!(self, Self::Missing { .. } | Self::Io { .. })
    }

    /// The id of the root that failed.
    pub fn root_id(&self) -> &str {
        match self {
            Self::Missing { id, .. }
            | Self::NotADirectory { id, .. }
            | Self::OutsideWorkspace { id, .. }
            | Self::Io { id, .. } => id,
        }
    }

    /// The error for an I/O failure on root `id` at `path`, by its kind.
    pub(crate) fn from_io(id: &str, path: &std::path::Path, error: &io::Error) -> Self {
        let (id, path) = (id.to_owned(), path.to_path_buf());
        match error.kind() {
            io::ErrorKind::NotFound => Self::Missing { id, path },
            io::ErrorKind::NotADirectory => Self::NotADirectory { id, path },
            kind => Self::Io {
                id,
                path,
                kind,
                message: error.to_string(),
            },
        }
    }
}
