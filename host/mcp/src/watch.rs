//! Watching files: calls back when any of a set of files is created,
//! changed, replaced or removed. Watches their directories (not the files),
//! so editors that save by rename are seen too.

use std::collections::HashSet;
use std::ffi::OsString;
use std::path::{Path, PathBuf};

use notify::{Event, RecommendedWatcher, RecursiveMode, Watcher};

/// Why files could not be watched.
#[derive(Debug, thiserror::Error)]
#[error("cannot watch {}: {source}", path.display())]
pub struct WatchError {
    /// The directory.
    pub path: PathBuf,
    /// notify's error.
    pub source: notify::Error,
}

/// Stops watching when dropped.
pub struct FileWatcher {
    _watcher: RecommendedWatcher,
}

impl std::fmt::Debug for FileWatcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FileWatcher").finish_non_exhaustive()
    }
}

impl FileWatcher {
    /// Calls `on_change` with the changed path whenever one of `files`
    /// changes.
    ///
    /// ```no_run
    /// use gatehouse_mcp::watch::FileWatcher;
    /// let watcher = FileWatcher::new(&["gatehouse.toml".as_ref()], |path| {
    ///     println!("{} changed", path.display());
    /// })?;
    /// # Ok::<(), gatehouse_mcp::watch::WatchError>(())
    /// ```
    pub fn new(
        files: &[&Path],
        on_change: impl Fn(&Path) + Send + 'static,
    ) -> Result<FileWatcher, WatchError> {
        let mut dirs: HashSet<PathBuf> = HashSet::new();
        let mut names: HashSet<(PathBuf, OsString)> = HashSet::new();
        for file in files {
            let absolute = std::path::absolute(file).unwrap_or_else(|_| file.to_path_buf());
            let dir = absolute.parent().map(Path::to_path_buf).unwrap_or_default();
            if let Some(name) = absolute.file_name() {
                names.insert((dir.clone(), name.to_owned()));
            }
            dirs.insert(dir);
        }
        let mut watcher = notify::recommended_watcher(move |event: notify::Result<Event>| {
            let Ok(event) = event else { return };
            if event.kind.is_access() {
                return;
            }
            for path in &event.paths {
                let matches = match (path.parent(), path.file_name()) {
                    (Some(dir), Some(name)) => {
                        names.contains(&(dir.to_path_buf(), name.to_owned()))
                    }
                    _ => false,
                };
                if matches {
                    on_change(path);
                }
            }
        })
        .map_err(|source| WatchError {
            path: PathBuf::new(),
            source,
        })?;
        for dir in dirs {
            watcher
                .watch(&dir, RecursiveMode::NonRecursive)
                .map_err(|source| WatchError {
                    path: dir.clone(),
                    source,
                })?;
        }
        Ok(FileWatcher { _watcher: watcher })
    }
}
