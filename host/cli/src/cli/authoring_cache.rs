//! `--compile-cache DIR` and `--no-compile-cache` for the commands a module
//! author runs on each build (`conformance`, `inspect`, `review`): one
//! compile cache they share, so that proving, inspecting and reviewing the
//! same build compiles it once. For a componentize-js or componentize-py module that is
//! seconds to tens of seconds per command.
//!
//! By default the cache is the user's, `$XDG_CACHE_HOME/gatehouse/compiled`
//! (`~/.cache/gatehouse/compiled`), bounded to [`MAX_BYTES`]: each build is
//! a new module, so the least recently used artifacts make room for the
//! newest. It is the same kind of cache a gateway keeps
//! ([`gatehouse_core::sandbox::SandboxBuilder::compile_cache`]): private to
//! the user, each artifact tagged under a key kept beside it, loaded only
//! for the module with the same sha256 and engine, and never a way around
//! the contract checks, which run on every load.

use std::path::{Path, PathBuf};

use gatehouse_core::sandbox::SandboxBuilder;

/// How many bytes of compiled modules the user's cache keeps.
pub const MAX_BYTES: u64 = 1 << 30;

/// Where a module author's commands keep compiled modules.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct AuthoringCacheArgs {
    /// Keep compiled modules in DIR, at most 1 GiB, the least recently used
    /// going first [default: $XDG_CACHE_HOME/gatehouse/compiled, or
    /// ~/.cache/gatehouse/compiled]. `conformance`, `inspect` and `review`
    /// on the same build then compile it once.
    #[arg(long, value_name = "DIR", conflicts_with = "no_compile_cache")]
    compile_cache: Option<PathBuf>,
    /// Keep no compiled module after this run.
    #[arg(long)]
    no_compile_cache: bool,
}

impl AuthoringCacheArgs {
    /// The cache directory these arguments name, if any: `--compile-cache`,
    /// else the user's cache unless `--no-compile-cache` (none when there
    /// is no absolute `XDG_CACHE_HOME` or `HOME`).
    pub fn dir(&self) -> Option<PathBuf> {
        if self.no_compile_cache {
            return None;
        }
        self.compile_cache.clone().or_else(|| {
            user_cache_dir(
                std::env::var_os("XDG_CACHE_HOME").as_deref().map(Path::new),
                std::env::var_os("HOME").as_deref().map(Path::new),
            )
        })
    }

    /// `builder` with this cache, bounded to [`MAX_BYTES`].
    pub fn apply(&self, builder: SandboxBuilder) -> SandboxBuilder {
        match self.dir() {
            Some(dir) => bounded(builder, dir),
            None => builder,
        }
    }
}

/// `builder` with the compile cache `dir`, bounded to [`MAX_BYTES`].
pub fn bounded(builder: SandboxBuilder, dir: PathBuf) -> SandboxBuilder {
    builder
        .compile_cache(dir)
        .compile_cache_max_bytes(MAX_BYTES)
}

/// `gatehouse/compiled` under the XDG cache directory: `xdg_cache_home` if
/// absolute (the XDG spec ignores a relative one), else `home/.cache`.
fn user_cache_dir(xdg_cache_home: Option<&Path>, home: Option<&Path>) -> Option<PathBuf> {
    let base = match xdg_cache_home.filter(|dir| dir.is_absolute()) {
        Some(dir) => dir.to_path_buf(),
        None => home.filter(|dir| dir.is_absolute())?.join(".cache"),
    };
    Some(base.join("gatehouse").join("compiled"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_user_cache_follows_xdg_and_ignores_a_relative_directory() {
        let absolute = |path: &str| Some(PathBuf::from(path));
        assert_eq!(
            user_cache_dir(Some(Path::new("/x/cache")), Some(Path::new("/home/a"))),
            absolute("/x/cache/gatehouse/compiled")
        );
        assert_eq!(
            user_cache_dir(Some(Path::new("rel")), Some(Path::new("/home/a"))),
            absolute("/home/a/.cache/gatehouse/compiled")
        );
        assert_eq!(
            user_cache_dir(None, Some(Path::new("/home/a"))),
            absolute("/home/a/.cache/gatehouse/compiled")
        );
        assert_eq!(user_cache_dir(None, Some(Path::new("home"))), None);
        assert_eq!(user_cache_dir(None, None), None);
    }

    #[test]
    fn no_compile_cache_wins_over_the_default() {
        let args = AuthoringCacheArgs {
            compile_cache: None,
            no_compile_cache: true,
        };
        assert_eq!(args.dir(), None);
        let args = AuthoringCacheArgs {
            compile_cache: Some(PathBuf::from("/tmp/c")),
            no_compile_cache: false,
        };
        assert_eq!(args.dir(), Some(PathBuf::from("/tmp/c")));
    }
}
