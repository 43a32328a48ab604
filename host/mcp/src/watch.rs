//! Watching files: calls back when any of a set of files is created,
//! changed, replaced or removed. Watches their directories (not the files),
//! so editors that save by rename are seen too.
//!
//! On Linux the directories are watched through inotify for the events that
//! end a change (a file closed after writing, created, removed, renamed in
//! or out, its attributes changed), not for each `write(2)`: the audit log,
//! which gatehouse keeps open and appends to in the same directory as its
//! config by default, then wakes nothing. A file written in place is seen
//! when its writer closes it. Elsewhere `notify` watches every change.

use std::collections::HashSet;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::AtomicU64;

/// Why files could not be watched.
#[derive(Debug, thiserror::Error)]
#[error("cannot watch {}: {source}", path.display())]
pub struct WatchError {
    /// The directory.
    pub path: PathBuf,
    /// What the operating system said.
    pub source: std::io::Error,
}

/// Stops watching when dropped.
pub struct FileWatcher {
    _backend: backend::Backend,
    /// Events about other files in the watched directories: each one woke
    /// the watcher for nothing.
    #[cfg_attr(not(test), allow(dead_code))]
    unrelated: Arc<AtomicU64>,
}

impl std::fmt::Debug for FileWatcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FileWatcher").finish_non_exhaustive()
    }
}

/// The files to watch, by directory.
struct Watched {
    dirs: Vec<PathBuf>,
    names: HashSet<(PathBuf, OsString)>,
}

impl Watched {
    fn new(files: &[&Path]) -> Watched {
        let mut dirs: Vec<PathBuf> = Vec::new();
        let mut names = HashSet::new();
        for file in files {
            let absolute = std::path::absolute(file).unwrap_or_else(|_| file.to_path_buf());
            let dir = absolute.parent().map(Path::to_path_buf).unwrap_or_default();
            if let Some(name) = absolute.file_name() {
                names.insert((dir.clone(), name.to_owned()));
            }
            if !dirs.contains(&dir) {
                dirs.push(dir);
            }
        }
        Watched { dirs, names }
    }

    /// Whether `name` in `dir` is one of the files.
    fn contains(&self, dir: &Path, name: &std::ffi::OsStr) -> bool {
        self.names.contains(&(dir.to_path_buf(), name.to_owned()))
    }

    /// The files in `dir`.
    fn in_dir<'a>(&'a self, dir: &'a Path) -> impl Iterator<Item = PathBuf> + 'a {
        self.names
            .iter()
            .filter(move |(parent, _)| parent == dir)
            .map(|(parent, name)| parent.join(name))
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
        let unrelated = Arc::new(AtomicU64::new(0));
        let backend = backend::Backend::start(Watched::new(files), on_change, unrelated.clone())?;
        Ok(FileWatcher {
            _backend: backend,
            unrelated,
        })
    }

    /// How many events about files other than the watched ones reached the
    /// watcher (each a wake-up for nothing).
    #[cfg(test)]
    fn unrelated_events(&self) -> u64 {
        self.unrelated.load(std::sync::atomic::Ordering::Relaxed)
    }
}

#[cfg(target_os = "linux")]
mod backend {
    use std::collections::HashMap;
    use std::path::{Path, PathBuf};
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU64, Ordering};

    use inotify::{EventMask, Inotify, WatchDescriptor, WatchMask, Watches};

    use super::{WatchError, Watched};

    /// The events that end a change. Not `MODIFY` (every write) or `OPEN`.
    fn mask() -> WatchMask {
        WatchMask::CLOSE_WRITE
            | WatchMask::CREATE
            | WatchMask::DELETE
            | WatchMask::MOVED_FROM
            | WatchMask::MOVED_TO
            | WatchMask::ATTRIB
            | WatchMask::DELETE_SELF
            | WatchMask::MOVE_SELF
            | WatchMask::ONLYDIR
    }

    /// An inotify instance read by a thread of its own. Dropping it removes
    /// the watches; the kernel then tells the thread (`IGNORED`) and the
    /// thread ends once no watch is left.
    pub(super) struct Backend {
        watches: Watches,
        descriptors: Vec<WatchDescriptor>,
    }

    impl Backend {
        pub(super) fn start(
            watched: Watched,
            on_change: impl Fn(&Path) + Send + 'static,
            unrelated: Arc<AtomicU64>,
        ) -> Result<Backend, WatchError> {
            let inotify = Inotify::init().map_err(|source| WatchError {
                path: PathBuf::new(),
                source,
            })?;
            let mut watches = inotify.watches();
            let mut dirs = HashMap::new();
            for dir in &watched.dirs {
                let descriptor = watches.add(dir, mask()).map_err(|source| WatchError {
                    path: dir.clone(),
                    source,
                })?;
                dirs.insert(descriptor, dir.clone());
            }
            let descriptors = dirs.keys().cloned().collect();
            std::thread::Builder::new()
                .name("gatehouse-watch".to_owned())
                .spawn(move || read(inotify, dirs, &watched, &on_change, &unrelated))
                .map_err(|source| WatchError {
                    path: PathBuf::new(),
                    source,
                })?;
            Ok(Backend {
                watches,
                descriptors,
            })
        }
    }

    impl Drop for Backend {
        fn drop(&mut self) {
            for descriptor in self.descriptors.drain(..) {
                // A watch already gone (its directory removed) has told the
                // thread so itself.
                let _ = self.watches.remove(descriptor);
            }
        }
    }

    /// Reads events until every watch is gone (or reading fails).
    fn read(
        mut inotify: Inotify,
        mut dirs: HashMap<WatchDescriptor, PathBuf>,
        watched: &Watched,
        on_change: &dyn Fn(&Path),
        unrelated: &AtomicU64,
    ) {
        let mut buffer = [0u8; 4096];
        while !dirs.is_empty() {
            let events = match inotify.read_events_blocking(&mut buffer) {
                Ok(events) => events,
                Err(error) if error.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(error) => {
                    tracing::warn!("file watcher stopped: {error}");
                    return;
                }
            };
            for event in events {
                if event.mask.contains(EventMask::Q_OVERFLOW) {
                    // Events were lost: any file may have changed.
                    for dir in &watched.dirs {
                        watched.in_dir(dir).for_each(|path| on_change(&path));
                    }
                    continue;
                }
                if event.mask.contains(EventMask::IGNORED) {
                    dirs.remove(&event.wd);
                    continue;
                }
                let Some(dir) = dirs.get(&event.wd) else {
                    continue;
                };
                match event.name {
                    Some(name) if watched.contains(dir, name) => on_change(&dir.join(name)),
                    Some(_) => {
                        unrelated.fetch_add(1, Ordering::Relaxed);
                    }
                    // The directory itself was removed or moved.
                    None => watched.in_dir(dir).for_each(|path| on_change(&path)),
                }
            }
        }
    }
}

#[cfg(not(target_os = "linux"))]
mod backend {
    use std::path::{Path, PathBuf};
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU64, Ordering};

    use notify::{Event, RecommendedWatcher, RecursiveMode, Watcher};

    use super::{WatchError, Watched};

    /// notify's watcher for the platform.
    pub(super) struct Backend {
        _watcher: RecommendedWatcher,
    }

    impl Backend {
        pub(super) fn start(
            watched: Watched,
            on_change: impl Fn(&Path) + Send + 'static,
            unrelated: Arc<AtomicU64>,
        ) -> Result<Backend, WatchError> {
            let dirs = watched.dirs.clone();
            let mut watcher = notify::recommended_watcher(move |event: notify::Result<Event>| {
                let Ok(event) = event else { return };
                if event.kind.is_access() {
                    return;
                }
                for path in &event.paths {
                    match (path.parent(), path.file_name()) {
                        (Some(dir), Some(name)) if watched.contains(dir, name) => on_change(path),
                        _ => {
                            unrelated.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                }
            })
            .map_err(|source| WatchError {
                path: PathBuf::new(),
                source: std::io::Error::other(source),
            })?;
            for dir in dirs {
                watcher
                    .watch(&dir, RecursiveMode::NonRecursive)
                    .map_err(|source| WatchError {
                        path: dir.clone(),
                        source: std::io::Error::other(source),
                    })?;
            }
            Ok(Backend { _watcher: watcher })
        }
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write;
    use std::sync::mpsc;
    use std::time::Duration;

    use super::*;

    /// A watcher over `files` whose changes arrive on the receiver.
    fn watching(files: &[&Path]) -> (FileWatcher, mpsc::Receiver<PathBuf>) {
        let (sender, changes) = mpsc::channel();
        let watcher = FileWatcher::new(files, move |path| {
            let _ = sender.send(path.to_path_buf());
        })
        .unwrap();
        (watcher, changes)
    }

    /// Waits for a change of `path`, skipping others.
    fn changed(changes: &mpsc::Receiver<PathBuf>, path: &Path) -> bool {
        while let Ok(seen) = changes.recv_timeout(Duration::from_secs(10)) {
            if seen == path {
                return true;
            }
        }
        false
    }

    #[test]
    fn saves_in_place_and_by_rename_and_removal_are_seen() {
        let dir = tempfile::tempdir().unwrap();
        let dir_path = std::path::absolute(dir.path()).unwrap();
        let config = dir_path.join("gatehouse.toml");
        std::fs::write(&config, "a = 1").unwrap();
        let (_watcher, changes) = watching(&[&config]);

        std::fs::write(&config, "a = 2").unwrap();
        assert!(changed(&changes, &config), "an in-place save");

        let staged = dir_path.join(".gatehouse.toml.swp");
        std::fs::write(&staged, "a = 3").unwrap();
        std::fs::rename(&staged, &config).unwrap();
        assert!(changed(&changes, &config), "a save by rename");

        std::fs::remove_file(&config).unwrap();
        assert!(changed(&changes, &config), "a removal");
    }

    #[test]
    fn a_file_appended_to_beside_the_watched_one_wakes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let dir_path = std::path::absolute(dir.path()).unwrap();
        let config = dir_path.join("gatehouse.toml");
        std::fs::write(&config, "a = 1").unwrap();
        // The audit log: opened before watching starts, then appended to.
        let mut audit = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(dir_path.join("audit.jsonl"))
            .unwrap();
        let (watcher, changes) = watching(&[&config]);
        for line in 0..200 {
            writeln!(audit, "{{\"line\":{line}}}").unwrap();
        }
        // A change of the config after the appends: once it is seen, every
        // event before it has been read.
        std::fs::write(&config, "a = 2").unwrap();
        assert!(changed(&changes, &config));
        assert!(
            changes.try_iter().all(|path| path == config),
            "only the config is reported"
        );
        assert_eq!(
            watcher.unrelated_events(),
            0,
            "appends to another open file must not wake the watcher"
        );
    }

    #[test]
    fn dropping_the_watcher_ends_its_thread_and_stops_calls() {
        let dir = tempfile::tempdir().unwrap();
        let config = std::path::absolute(dir.path().join("gatehouse.toml")).unwrap();
        std::fs::write(&config, "a = 1").unwrap();
        let (watcher, changes) = watching(&[&config]);
        drop(watcher);
        // The callback (and its sender) went with the thread.
        assert!(matches!(
            changes.recv_timeout(Duration::from_secs(10)),
            Err(mpsc::RecvTimeoutError::Disconnected)
        ));
        std::fs::write(&config, "a = 2").unwrap();
    }
}
