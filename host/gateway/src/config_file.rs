//! The config file as a running gateway follows it: the last version that
//! was read whole and parsed ([`ConfigFile::current`]), replaced only by a
//! version that has settled.
//!
//! Editors, config-management runs and `sed -i` loops rewrite a file in
//! bursts, and a read in the middle of one sees an empty file, half of it,
//! or a version that is gone a millisecond later. So a change the file
//! watcher reports ([`ConfigFile::noticed`]) is read only once the file has
//! been left alone for [`SETTLE_QUIET`] ([`ConfigFile::settle`]); the
//! whole file is read once; an empty file, one that does not parse, or one
//! that changed again while it was read is refused and the last version
//! keeps serving; and a version that would stop every server must hold for
//! [`REMOVE_ALL_QUIET`] first. A storm of rewrites thus becomes one reload
//! per version that stayed, ending on the last whole one.
//!
//! ```no_run
//! # async fn run() -> Result<(), gatehouse_gateway::config::ConfigError> {
//! use gatehouse_gateway::config_file::{ConfigFile, Reread};
//! let file = ConfigFile::open("gatehouse.toml")?;
//! // ... the watcher calls `file.noticed()` on each change; then:
//! if file.settle().await? == Reread::Changed {
//!     println!("now serving {} servers", file.current().mcp_servers.len());
//! }
//! # Ok(()) }
//! ```

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use crate::config::{Config, ConfigError};

/// How long the file must be left alone before a change is read.
pub const SETTLE_QUIET: Duration = Duration::from_millis(150);

/// How long a version that would stop every server must stay before it is
/// taken: a transient read never empties the gateway.
pub const REMOVE_ALL_QUIET: Duration = Duration::from_secs(1);

/// How long [`ConfigFile::settle`] waits for a file that keeps changing
/// before it gives up (the last version keeps serving; the next change
/// tries again).
pub const SETTLE_AT_MOST: Duration = Duration::from_secs(10);

/// What a re-read found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reread {
    /// The file says what the current version says.
    Unchanged,
    /// A new version was taken: [`ConfigFile::current`] returns it.
    Changed,
}

/// The version being served.
struct Accepted {
    text: String,
    config: Arc<Config>,
}

/// A config file and the version of it being served. Share it behind an
/// `Arc`: the watcher notes changes, the runtime and the reloader read the
/// current version.
pub struct ConfigFile {
    path: PathBuf,
    accepted: Mutex<Accepted>,
    /// Bumped by every change the watcher reports.
    changes: AtomicU64,
}

impl std::fmt::Debug for ConfigFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConfigFile")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

impl ConfigFile {
    /// Reads `path` now and serves what it says (at start there is no older
    /// version to keep, so any config that parses is taken).
    pub fn open(path: impl Into<PathBuf>) -> Result<ConfigFile, ConfigError> {
        let path = path.into();
        let text = read(&path)?;
        let config = Arc::new(Config::parse(&text, &path)?);
        Ok(ConfigFile {
            path,
            accepted: Mutex::new(Accepted { text, config }),
            changes: AtomicU64::new(0),
        })
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The version being served.
    pub fn current(&self) -> Arc<Config> {
        self.lock().config.clone()
    }

    /// The file watcher saw the file change: [`settle`](Self::settle) waits
    /// until such notes stop coming.
    pub fn noticed(&self) {
        self.changes.fetch_add(1, Ordering::SeqCst);
    }

    /// Reads the file once, now, and takes it if it is whole and new (what
    /// `gatehouse reload` and SIGHUP ask for: the operator says the edit is
    /// done). An empty or invalid file is refused; the current version stays.
    pub fn reread_now(&self) -> Result<Reread, ConfigError> {
        let text = read(&self.path)?;
        let Some(config) = self.candidate(&text)? else {
            return Ok(Reread::Unchanged);
        };
        self.take(text, config);
        Ok(Reread::Changed)
    }

    /// Waits until the file has been left alone for [`SETTLE_QUIET`] (or
    /// [`REMOVE_ALL_QUIET`] when the new version would stop every server),
    /// then takes it as [`reread_now`](Self::reread_now) does. A file that
    /// has not settled after [`SETTLE_AT_MOST`] is refused.
    pub async fn settle(&self) -> Result<Reread, ConfigError> {
        self.settle_with(SETTLE_QUIET, REMOVE_ALL_QUIET, SETTLE_AT_MOST)
            .await
    }

    async fn settle_with(
        &self,
        quiet: Duration,
        remove_all_quiet: Duration,
        at_most: Duration,
    ) -> Result<Reread, ConfigError> {
        let deadline = tokio::time::Instant::now() + at_most;
        loop {
            let seen = self.quiet_for(quiet, deadline, at_most).await?;
            // A config file is small: read in place, once.
            let text = read(&self.path)?;
            if self.changes.load(Ordering::SeqCst) != seen {
                // Written again while it was read: what was read may be torn.
                continue;
            }
            let Some(config) = self.candidate(&text)? else {
                return Ok(Reread::Unchanged);
            };
            if stops_every_server(&self.current(), &config) {
                // Only if it holds: a version that empties the gateway must
                // not be a moment's read.
                self.quiet_for(remove_all_quiet, deadline, at_most).await?;
                if self.changes.load(Ordering::SeqCst) != seen {
                    continue;
                }
            }
            self.take(text, config);
            return Ok(Reread::Changed);
        }
    }

    /// Waits until no change has been noticed for `quiet`; returns the
    /// change count it settled on.
    async fn quiet_for(
        &self,
        quiet: Duration,
        deadline: tokio::time::Instant,
        at_most: Duration,
    ) -> Result<u64, ConfigError> {
        loop {
            let seen = self.changes.load(Ordering::SeqCst);
            if tokio::time::Instant::now() + quiet > deadline {
                return Err(ConfigError::Unsettled {
                    path: self.path.clone(),
                    waited: at_most,
                });
            }
            tokio::time::sleep(quiet).await;
            if self.changes.load(Ordering::SeqCst) == seen {
                return Ok(seen);
            }
        }
    }

    /// `text` parsed, if it differs from the current version; an error if it
    /// cannot be served.
    fn candidate(&self, text: &str) -> Result<Option<Config>, ConfigError> {
        if self.lock().text == text {
            return Ok(None);
        }
        if text.trim().is_empty() {
            return Err(ConfigError::Empty {
                path: self.path.clone(),
            });
        }
        Config::parse(text, &self.path).map(Some)
    }

    fn take(&self, text: String, config: Config) {
        *self.lock() = Accepted {
            text,
            config: Arc::new(config),
        };
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Accepted> {
        // Nothing panics while holding it; a poisoned lock still holds a
        // whole version.
        self.accepted.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

fn read(path: &Path) -> Result<String, ConfigError> {
    std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
        path: path.to_path_buf(),
        source,
    })
}

/// Whether going from `old` to `new` stops every configured server and
/// every discovered one.
fn stops_every_server(old: &Config, new: &Config) -> bool {
    let serves =
        |config: &Config| !config.mcp_servers.is_empty() || !config.capabilities.roots.is_empty();
    serves(old) && !serves(new)
}

#[cfg(test)]
mod tests {
    use super::*;

    const ONE: &str = "[mcp_servers.a]\ncommand = \"a\"\n";
    const TWO: &str = "[mcp_servers.a]\ncommand = \"a\"\n\n[mcp_servers.b]\ncommand = \"b\"\n";

    fn file(text: &str) -> (tempfile::TempDir, Arc<ConfigFile>) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("gatehouse.toml");
        std::fs::write(&path, text).unwrap();
        let file = Arc::new(ConfigFile::open(&path).unwrap());
        (dir, file)
    }

    fn servers(file: &ConfigFile) -> Vec<String> {
        file.current().mcp_servers.keys().cloned().collect()
    }

    #[test]
    fn an_empty_or_invalid_file_is_refused_and_the_last_version_kept() {
        let (_dir, file) = file(ONE);
        for torn in [
            "",
            "  \n",
            "[mcp_servers.a]\ncomm",
            "[mcp_servers.a]\nbogus = 1\n",
        ] {
            std::fs::write(file.path(), torn).unwrap();
            let error = file.reread_now().expect_err(torn);
            assert!(
                error.to_string().contains("gatehouse.toml"),
                "the error names the file: {error}"
            );
            assert_eq!(servers(&file), ["a"], "after {torn:?}");
        }
        std::fs::write(file.path(), TWO).unwrap();
        assert_eq!(file.reread_now().unwrap(), Reread::Changed);
        assert_eq!(servers(&file), ["a", "b"]);
        assert_eq!(file.reread_now().unwrap(), Reread::Unchanged);
    }

    /// Settles with the gateway's proportions, shorter.
    async fn settle(file: &ConfigFile) -> Result<Reread, ConfigError> {
        file.settle_with(
            Duration::from_millis(100),
            Duration::from_millis(800),
            Duration::from_secs(3),
        )
        .await
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_storm_ends_on_its_last_version_and_never_serves_a_torn_one() {
        let (_dir, file) = file(ONE);
        let writer = {
            let file = file.clone();
            std::thread::spawn(move || {
                // Valid, empty, half-written and invalid versions, each
                // noticed, a millisecond apart; the last one is whole.
                let versions = [TWO, "", "[mcp_servers.a]\ncomm", "x = ", ONE, TWO];
                for version in versions.iter().cycle().take(600) {
                    std::fs::write(file.path(), version).unwrap();
                    file.noticed();
                    std::thread::sleep(Duration::from_millis(1));
                }
            })
        };
        // As the gateway does: each notice leads to a settle.
        let mut settles = 0;
        while !writer.is_finished() {
            let _ = settle(&file).await;
            settles += 1;
            assert!(
                servers(&file).contains(&"a".to_owned()),
                "a torn version served"
            );
        }
        writer.join().unwrap();
        let _ = settle(&file).await;
        assert_eq!(servers(&file), ["a", "b"], "the last version written");
        assert!(settles < 20, "{settles} settles for one storm");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_whole_version_written_within_the_quiet_replaces_an_empty_one() {
        let (_dir, file) = file(ONE);
        std::fs::write(file.path(), "").unwrap();
        file.noticed();
        let finisher = {
            let file = file.clone();
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(10));
                std::fs::write(file.path(), TWO).unwrap();
                file.noticed();
            })
        };
        let settled = file
            .settle_with(
                Duration::from_millis(500),
                Duration::from_secs(1),
                Duration::from_secs(5),
            )
            .await;
        finisher.join().unwrap();
        assert_eq!(settled.unwrap(), Reread::Changed);
        assert_eq!(servers(&file), ["a", "b"]);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn removing_every_server_must_hold() {
        let (_dir, file) = file(TWO);
        // A version with no servers, replaced while it must hold.
        std::fs::write(file.path(), "mcp_servers = {}\n").unwrap();
        file.noticed();
        let restorer = {
            let file = file.clone();
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(400));
                std::fs::write(file.path(), ONE).unwrap();
                file.noticed();
            })
        };
        assert_eq!(settle(&file).await.unwrap(), Reread::Changed);
        restorer.join().unwrap();
        assert_eq!(
            servers(&file),
            ["a"],
            "the transient empty set never served"
        );

        // Said stably, it is taken.
        std::fs::write(file.path(), "mcp_servers = {}\n").unwrap();
        file.noticed();
        assert_eq!(settle(&file).await.unwrap(), Reread::Changed);
        assert!(servers(&file).is_empty());
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_file_that_never_settles_is_refused_in_the_end() {
        let (_dir, file) = file(ONE);
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let writer = {
            let (file, stop) = (file.clone(), stop.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::SeqCst) {
                    std::fs::write(file.path(), TWO).unwrap();
                    file.noticed();
                    std::thread::sleep(Duration::from_millis(20));
                }
            })
        };
        let error = settle(&file).await.expect_err("never settles");
        stop.store(true, Ordering::SeqCst);
        writer.join().unwrap();
        assert!(matches!(error, ConfigError::Unsettled { .. }), "{error}");
        assert_eq!(servers(&file), ["a"]);
    }
}
