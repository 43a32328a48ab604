//! Compiled functions kept in the compile cache, so that a module rebuilt
//! from mostly the same code compiles only what changed.
//!
//! Cranelift's incremental cache hands the store each function it compiled,
//! under a SHA-256 of the function's code and the compiler's settings, and
//! asks for that key before compiling a function again. A componentize-js or
//! componentize-py module is mostly its language engine, the same in every
//! build, so a new build of it (a new sha256, so no compiled-module artifact)
//! finds most of its functions here: a rebuilt TypeScript module compiled in
//! 3.4 s instead of 9.1 s on 2 cores (docs/BENCHMARKS.md). A module compiled
//! with functions from here is byte-for-byte the one compiled without them
//! (`tests::functions_from_another_build_compile_to_the_same_bytes`).
//!
//! The functions one compile adds are written, a few MiB at a time as they
//! are compiled, to one pack file, `<engine>-<random>.functions`, beside the
//! compiled modules (and pruned with them). A pack is [`MAGIC`], then
//! entries: the key's length and the value's (u32, little-endian), an
//! HMAC-SHA256 tag over the engine's compatibility hash, the key and the
//! value, under the compile cache's key (kept beside the directory, never in
//! it), then the key and the value.
//! Packs are indexed by key when the first function is asked for, and each
//! entry's tag is checked when it is read: an entry that does not verify is
//! logged and never used, and the function is compiled. Compiled machine code
//! is taken only from entries this host tagged, for this engine.

use std::borrow::Cow;
use std::collections::HashMap;
use std::fs::File;
use std::io::{BufReader, BufWriter, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Mutex, OnceLock};

use hmac::Mac;

use crate::private_fs;

/// The keyed MAC of the compile cache: of its artifacts (`cache`) and of
/// the functions here, each under its own domain.
pub(crate) type HmacSha256 = hmac::Hmac<sha2::Sha256>;

/// The first bytes of every pack: the format and its version.
const MAGIC: &[u8; 8] = b"GHCFUNS1";

/// Binds a pack entry's tag to this one use of the compile cache's key.
const DOMAIN: &[u8] = b"gatehouse compiled function v1\0";

/// How every pack's name ends.
pub(crate) const PACK_SUFFIX: &str = ".functions";

/// The length of Cranelift's keys (a SHA-256).
const KEY_LEN: usize = 32;

/// The length of an entry's tag.
const TAG_LEN: usize = 32;

/// An entry's header: the two lengths, then the tag.
const ENTRY_HEADER_LEN: usize = 4 + 4 + TAG_LEN;

/// The largest compiled function kept (Cranelift's largest are a few MiB).
const MAX_VALUE_LEN: u32 = 64 << 20;

/// New functions are written to the compile's pack whenever this many bytes
/// of them wait, so a large module's are not all held in memory.
const SPILL_BYTES: usize = 4 << 20;

/// More packs than this in the directory are merged into one when indexed,
/// so that a compile opens few files.
const MAX_PACKS: usize = 8;

/// A pack is merged only once it is this old: one younger may still be
/// written by a compile in another process.
const MERGE_AFTER: std::time::Duration = std::time::Duration::from_secs(60);

/// Where an indexed function is: its pack and its entry's offset there.
#[derive(Clone, Copy)]
struct Location {
    pack: usize,
    offset: u64,
    value_len: u32,
}

/// What the store has indexed and what it has yet to write.
#[derive(Default)]
struct State {
    /// Whether the directory's packs are indexed.
    indexed: bool,
    /// The open packs, by [`Location::pack`].
    packs: Vec<File>,
    /// Every indexed function.
    index: HashMap<[u8; KEY_LEN], Location>,
    /// Functions compiled and not yet written.
    pending: HashMap<[u8; KEY_LEN], Vec<u8>>,
    /// Their bytes.
    pending_bytes: usize,
    /// The pack this compile's functions go to, once it has one.
    writing: Option<Writing>,
}

impl State {
    /// Indexes `entries` (key, offset, value length) of the pack `pack`.
    fn add(&mut self, pack: usize, entries: Vec<([u8; KEY_LEN], u64, u32)>) {
        for (key, offset, value_len) in entries {
            let location = Location {
                pack,
                offset,
                value_len,
            };
            self.index.insert(key, location);
        }
    }
}

/// A pack being written: appended to as functions are compiled (every
/// [`SPILL_BYTES`]), closed by [`CompiledFunctions::flush`].
struct Writing {
    file: File,
    /// Its length so far.
    len: u64,
    /// Its place in [`State::packs`], where it is read back from.
    pack: usize,
}

/// The compile cache's store of compiled functions: Cranelift's incremental
/// cache, backed by tagged pack files in the cache directory.
pub(crate) struct CompiledFunctions {
    dir: PathBuf,
    mac: HmacSha256,
    /// The engine's compatibility hash, set once the engine exists; until
    /// then nothing is read or kept.
    engine: OnceLock<u64>,
    state: Mutex<State>,
    reused: AtomicU64,
    compiled: AtomicU64,
}

impl std::fmt::Debug for CompiledFunctions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CompiledFunctions")
            .field("dir", &self.dir)
            .finish_non_exhaustive()
    }
}

impl CompiledFunctions {
    /// A store in `dir` whose entries are tagged with `mac`.
    pub(crate) fn new(dir: PathBuf, mac: HmacSha256) -> CompiledFunctions {
        CompiledFunctions {
            dir,
            mac,
            engine: OnceLock::new(),
            state: Mutex::new(State::default()),
            reused: AtomicU64::new(0),
            compiled: AtomicU64::new(0),
        }
    }

    /// Binds the store to the engine with compatibility hash `engine`: only
    /// its packs are read, and only for it are functions kept.
    pub(crate) fn bind(&self, engine: u64) {
        let _ = self.engine.set(engine);
    }

    /// Functions taken from earlier compiles' packs, and functions compiled
    /// and kept.
    pub(crate) fn counts(&self) -> (u64, u64) {
        (self.reused.load(Relaxed), self.compiled.load(Relaxed))
    }

    /// Writes what is left of the functions compiled since the last call to
    /// this compile's pack and closes it and every pack read; the next
    /// compile starts a new one.
    pub(crate) fn flush(&self) {
        let Some(&engine) = self.engine.get() else {
            return;
        };
        let mut state = lock(&self.state);
        self.write_pending(engine, &mut state);
        // The next compile indexes the directory afresh: it sees the packs
        // other processes wrote since, and no pack stays open between
        // compiles of a long-running host.
        *state = State::default();
    }

    /// Appends the pending functions to the pack being written (starting one
    /// if none is), and indexes them there. Best effort: if the pack cannot
    /// be written, they are dropped (and compiled again next time).
    fn write_pending(&self, engine: u64, state: &mut State) {
        if state.pending.is_empty() {
            return;
        }
        if !state.indexed {
            // Before this process's own pack exists, so it is indexed once.
            self.index(engine, state);
        }
        let pending = std::mem::take(&mut state.pending);
        state.pending_bytes = 0;
        if state.writing.is_none() {
            match self.start_pack(engine) {
                Ok((file, reader)) => {
                    state.writing = Some(Writing {
                        file,
                        len: MAGIC.len() as u64,
                        pack: state.packs.len(),
                    });
                    state.packs.push(reader);
                }
                Err(error) => {
                    tracing::warn!("cannot keep the compiled functions: {error}");
                    return;
                }
            }
        }
        let Some(writing) = state.writing.as_mut() else {
            return;
        };
        let mut batch = Vec::new();
        let mut written = Vec::with_capacity(pending.len());
        for (key, value) in &pending {
            let Ok(value_len) = u32::try_from(value.len()) else {
                continue;
            };
            written.push((*key, writing.len + batch.len() as u64, value_len));
            batch.extend_from_slice(&self.entry(engine, key, value, value_len));
        }
        if let Err(error) = writing.file.write_all(&batch) {
            tracing::warn!(dir = %self.dir.display(), "cannot keep the compiled functions: {error}");
            state.writing = None;
            return;
        }
        writing.len += batch.len() as u64;
        let pack = writing.pack;
        state.add(pack, written);
    }

    /// Creates a new pack for `engine` and writes its [`MAGIC`]: the handle
    /// to append to, and one to read it back.
    fn start_pack(&self, engine: u64) -> Result<(File, File), String> {
        let path = new_pack_path(&self.dir, engine)?;
        let mut file = private_fs::create_new(&path).map_err(|error| error.to_string())?;
        file.write_all(MAGIC)
            .map_err(|error| format!("{}: cannot write it: {error}", path.display()))?;
        let reader = private_fs::open_read(&path).map_err(|error| error.to_string())?;
        Ok((file, reader))
    }

    /// The MAC over `key` and `value` for `engine`.
    fn mac_of(&self, engine: u64, key: &[u8], value: &[u8]) -> HmacSha256 {
        let mut mac = self.mac.clone();
        mac.update(DOMAIN);
        mac.update(&engine.to_le_bytes());
        mac.update(key);
        mac.update(&(value.len() as u64).to_le_bytes());
        mac.update(value);
        mac
    }

    /// One entry: its header (with its tag), its key, its value.
    fn entry(&self, engine: u64, key: &[u8; KEY_LEN], value: &[u8], value_len: u32) -> Vec<u8> {
        let mut entry = Vec::with_capacity(ENTRY_HEADER_LEN + KEY_LEN + value.len());
        entry.extend_from_slice(&(KEY_LEN as u32).to_le_bytes());
        entry.extend_from_slice(&value_len.to_le_bytes());
        entry.extend_from_slice(&self.mac_of(engine, key, value).finalize().into_bytes());
        entry.extend_from_slice(key);
        entry.extend_from_slice(value);
        entry
    }

    /// Reads the entry at `location` and returns it whole (header, key,
    /// value) if its tag verifies for `key`.
    fn read(
        &self,
        engine: u64,
        file: &File,
        key: &[u8],
        location: Location,
    ) -> Result<Vec<u8>, String> {
        let value_len = location.value_len as usize;
        let mut entry = vec![0; ENTRY_HEADER_LEN + KEY_LEN + value_len];
        let mut reader: &File = file;
        reader
            .seek(SeekFrom::Start(location.offset))
            .and_then(|_| reader.read_exact(&mut entry))
            .map_err(|error| format!("cannot read it: {error}"))?;
        let (header, rest) = entry.split_at(ENTRY_HEADER_LEN);
        let (stored_key, value) = rest.split_at(KEY_LEN);
        if stored_key != key || header[4..8] != (location.value_len).to_le_bytes() {
            return Err("it changed since it was indexed".to_owned());
        }
        self.mac_of(engine, key, value)
            .verify_slice(&header[8..])
            .map_err(|_| "its tag does not verify under this host's key".to_owned())?;
        Ok(entry)
    }

    /// Indexes every pack of `engine` in the directory, merging them into one
    /// when there are more than [`MAX_PACKS`].
    fn index(&self, engine: u64, state: &mut State) {
        state.indexed = true;
        let mut paths = pack_paths(&self.dir, engine);
        // Only packs no compile is still writing (by their age) are merged.
        let settled: Vec<PathBuf> = paths
            .iter()
            .filter(|path| {
                std::fs::symlink_metadata(path)
                    .and_then(|metadata| metadata.modified())
                    .is_ok_and(|modified| modified.elapsed().is_ok_and(|age| age >= MERGE_AFTER))
            })
            .cloned()
            .collect();
        if settled.len() > MAX_PACKS
            && let Some((merged, removed)) = self.merge(engine, &settled)
        {
            paths.retain(|path| !removed.contains(path));
            paths.push(merged);
        }
        for path in paths {
            let file = match private_fs::open_read(&path) {
                Ok(file) => file,
                Err(error) => {
                    tracing::warn!("skipping a pack of compiled functions: {error}");
                    continue;
                }
            };
            // Used now: the last to go when the cache is pruned.
            let _ = file.set_modified(std::time::SystemTime::now());
            let pack = state.packs.len();
            let entries = match entries(&path, &file) {
                Ok(entries) => entries,
                Err(error) => {
                    tracing::warn!(path = %path.display(), "skipping a pack of compiled functions: {error}");
                    continue;
                }
            };
            state.add(pack, entries);
            state.packs.push(file);
        }
    }

    /// Writes the verified entries of `paths` as one new pack and removes
    /// the packs it read (one that cannot be read just now stays); the new
    /// pack's path and those removed, or `None` (and nothing removed) if it
    /// could not be written.
    fn merge(&self, engine: u64, paths: &[PathBuf]) -> Option<(PathBuf, Vec<PathBuf>)> {
        let path = new_pack_path(&self.dir, engine).ok()?;
        let mut read = Vec::new();
        let written = private_fs::create_new(&path)
            .map_err(|error| error.to_string())
            .and_then(|file| {
                let mut out = BufWriter::new(file);
                out.write_all(MAGIC).map_err(|error| error.to_string())?;
                let mut seen = std::collections::HashSet::new();
                for old in paths {
                    let Ok(file) = private_fs::open_read(old) else {
                        continue;
                    };
                    let Ok(found) = entries(old, &file) else {
                        continue;
                    };
                    read.push(old.clone());
                    for (key, offset, value_len) in found {
                        let location = Location {
                            pack: 0,
                            offset,
                            value_len,
                        };
                        if seen.contains(&key) {
                            continue;
                        }
                        // Verified, so copied as it is, tag and all.
                        if let Ok(entry) = self.read(engine, &file, &key, location) {
                            out.write_all(&entry).map_err(|error| error.to_string())?;
                            seen.insert(key);
                        }
                    }
                }
                out.flush().map_err(|error| error.to_string())
            });
        if let Err(error) = written {
            let _ = std::fs::remove_file(&path);
            tracing::warn!(
                path = %path.display(),
                "cannot merge the packs of compiled functions: {error}"
            );
            return None;
        }
        for old in &read {
            let _ = std::fs::remove_file(old);
        }
        Some((path, read))
    }
}

impl wasmtime::CacheStore for CompiledFunctions {
    fn get(&self, key: &[u8]) -> Option<Cow<'_, [u8]>> {
        let engine = *self.engine.get()?;
        let key: [u8; KEY_LEN] = key.try_into().ok()?;
        let mut state = lock(&self.state);
        if let Some(value) = state.pending.get(&key) {
            // Compiled in this compile (a module's duplicate functions), not
            // taken from an earlier one.
            return Some(Cow::Owned(value.clone()));
        }
        if !state.indexed {
            self.index(engine, &mut state);
        }
        let location = *state.index.get(&key)?;
        let file = state.packs.get(location.pack)?;
        match self.read(engine, file, &key, location) {
            Ok(mut entry) => {
                self.reused.fetch_add(1, Relaxed);
                Some(Cow::Owned(entry.split_off(ENTRY_HEADER_LEN + KEY_LEN)))
            }
            Err(error) => {
                tracing::warn!(
                    dir = %self.dir.display(),
                    "not using a compiled function from the compile cache, compiling it instead: {error}"
                );
                state.index.remove(&key);
                None
            }
        }
    }

    fn insert(&self, key: &[u8], value: Vec<u8>) -> bool {
        let Ok(key) = <[u8; KEY_LEN]>::try_from(key) else {
            return false;
        };
        if self.engine.get().is_none() || value.len() > MAX_VALUE_LEN as usize {
            return false;
        }
        let mut state = lock(&self.state);
        state.pending_bytes += value.len();
        if let Some(replaced) = state.pending.insert(key, value) {
            state.pending_bytes -= replaced.len();
        }
        self.compiled.fetch_add(1, Relaxed);
        if state.pending_bytes >= SPILL_BYTES
            && let Some(&engine) = self.engine.get()
        {
            self.write_pending(engine, &mut state);
        }
        true
    }
}

/// Locks `state`, whose data stays consistent even if a holder panicked
/// (every change is one insert or a swap).
fn lock(state: &Mutex<State>) -> std::sync::MutexGuard<'_, State> {
    state
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// A new pack's name for `engine`: `<engine>-<random>.functions`.
fn new_pack_path(dir: &Path, engine: u64) -> Result<PathBuf, String> {
    let mut random = [0u8; 8];
    getrandom::fill(&mut random)
        .map_err(|error| format!("no random bytes from the OS: {error}"))?;
    Ok(dir.join(format!(
        "{engine:016x}-{}{PACK_SUFFIX}",
        hex::encode(random)
    )))
}

/// The packs of `engine` in `dir`: regular files named for it (a symbolic
/// link or anything else is never read).
fn pack_paths(dir: &Path, engine: u64) -> Vec<PathBuf> {
    let prefix = format!("{engine:016x}-");
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut paths: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        .filter(|entry| {
            entry
                .file_name()
                .to_str()
                .is_some_and(|name| name.starts_with(&prefix) && name.ends_with(PACK_SUFFIX))
                && entry.file_type().is_ok_and(|kind| kind.is_file())
        })
        .map(|entry| entry.path())
        .collect();
    paths.sort();
    paths
}

/// The entries of the pack `file` (at `path`): each key, its entry's offset
/// and its value's length. Reads only the headers and keys. A pack cut short
/// or with an impossible length yields the entries before that point.
fn entries(path: &Path, file: &File) -> Result<Vec<([u8; KEY_LEN], u64, u32)>, String> {
    let len = file
        .metadata()
        .map_err(|error| format!("{}: cannot read its size: {error}", path.display()))?
        .len();
    let mut reader = BufReader::new(file);
    reader
        .rewind()
        .map_err(|error| format!("{}: cannot read it: {error}", path.display()))?;
    let mut magic = [0u8; MAGIC.len()];
    if reader.read_exact(&mut magic).is_err() || &magic != MAGIC {
        return Err(format!(
            "{}: not a pack of compiled functions",
            path.display()
        ));
    }
    let mut found = Vec::new();
    let mut offset = MAGIC.len() as u64;
    loop {
        let mut header = [0u8; ENTRY_HEADER_LEN];
        if reader.read_exact(&mut header).is_err() {
            break;
        }
        let key_len = u32::from_le_bytes([header[0], header[1], header[2], header[3]]);
        let value_len = u32::from_le_bytes([header[4], header[5], header[6], header[7]]);
        let end = offset + (ENTRY_HEADER_LEN + KEY_LEN) as u64 + u64::from(value_len);
        if key_len as usize != KEY_LEN || value_len > MAX_VALUE_LEN || end > len {
            tracing::warn!(path = %path.display(), offset, "a pack of compiled functions ends in a damaged entry; using the entries before it");
            break;
        }
        let mut key = [0u8; KEY_LEN];
        if reader.read_exact(&mut key).is_err()
            || reader.seek_relative(i64::from(value_len)).is_err()
        {
            break;
        }
        found.push((key, offset, value_len));
        offset = end;
    }
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sandbox::{Limits, Sandbox, built_guest};
    use wasmtime::CacheStore;

    /// The bytes of the built guest `name`.
    fn guest(name: &str) -> Vec<u8> {
        let path = built_guest(name);
        std::fs::read(&path)
            .unwrap_or_else(|error| panic!("{}: {error}; run .ci/build-guests", path.display()))
    }

    fn cached(dir: &Path) -> Sandbox {
        Sandbox::builder()
            .compile_cache(dir)
            .build()
            .expect("a sandbox")
    }

    fn store(sandbox: &Sandbox) -> &CompiledFunctions {
        sandbox
            .shared
            .compile_cache
            .as_ref()
            .expect("a compile cache")
            .functions()
    }

    /// Compiles `bytes` on `sandbox`'s engine (past the artifact cache, as a
    /// new build would be) and keeps its functions.
    fn compile(sandbox: &Sandbox, bytes: &[u8]) -> Vec<u8> {
        let compiled = sandbox
            .shared
            .engine
            .precompile_component(bytes)
            .expect("it compiles");
        store(sandbox).flush();
        compiled
    }

    /// What an engine without a store compiles `bytes` to.
    fn compiled_afresh(bytes: &[u8]) -> Vec<u8> {
        let sandbox = Sandbox::new(Limits::default()).expect("a sandbox");
        sandbox
            .shared
            .engine
            .precompile_component(bytes)
            .expect("it compiles")
    }

    fn packs(dir: &Path) -> Vec<PathBuf> {
        let mut packs: Vec<PathBuf> = std::fs::read_dir(dir)
            .expect("the cache")
            .map(|entry| entry.expect("an entry").path())
            .filter(|path| path.to_string_lossy().ends_with(PACK_SUFFIX))
            .collect();
        packs.sort();
        packs
    }

    /// A store on `dir` under a fixed key, bound to `engine`.
    fn synthetic(dir: &Path, key: u8, engine: u64) -> CompiledFunctions {
        let store = CompiledFunctions::new(
            dir.to_path_buf(),
            HmacSha256::new_from_slice(&[key; 32]).expect("a key"),
        );
        store.bind(engine);
        store
    }

    #[test]
    fn functions_from_another_build_compile_to_the_same_bytes() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let cache = dir.path().join("compiled");
        let template = guest("reviewer_template");
        let expected = compiled_afresh(&template);

        // One build of the guardian, in one process...
        let first = cached(&cache);
        compile(&first, &guest("gatehouse_guardian"));
        let (reused, compiled) = store(&first).counts();
        assert!(
            compiled > 100,
            "the guardian's functions are kept: {compiled}"
        );
        assert_eq!(packs(&cache).len(), 1, "one pack per compile");

        // ...then another module in the next: the functions the two share
        // (Rust's standard library) are taken, and the result is what an
        // engine without a store makes.
        let second = cached(&cache);
        let out = compile(&second, &template);
        let (reused_now, _) = store(&second).counts();
        assert!(
            reused_now > 50,
            "shared functions are taken: {reused_now} ({reused} before)"
        );
        assert!(
            out == expected,
            "the same bytes as a compile without the cache"
        );

        // The same module again: most functions come from the cache. (Not
        // all: Cranelift gives some functions a key that differs from one
        // compile to the next, 5 to 15% of them in 12 runs, and compiles
        // them again.)
        let third = cached(&cache);
        let again = compile(&third, &template);
        assert!(again == expected);
        let (taken, compiled) = store(&third).counts();
        assert!(compiled * 3 < taken, "{taken} taken, {compiled} compiled");
    }

    #[test]
    fn an_altered_or_moved_function_is_compiled_again() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let cache = dir.path().join("compiled");
        let guardian = guest("gatehouse_guardian");
        let expected = compiled_afresh(&guardian);
        compile(&cached(&cache), &guardian);
        let [pack] = packs(&cache).try_into().expect("one pack");
        let file = private_fs::open_read(&pack).expect("the pack");
        let found = entries(&pack, &file).expect("its entries");
        drop(file);
        assert!(found.len() > 3);
        let mut bytes = std::fs::read(&pack).expect("the pack");
        // The last entry moved under the first one's key: its tag was made
        // for its own key. And a byte of the second entry's code altered.
        let (first_key, _, _) = found[0];
        let (_, last, _) = found[found.len() - 1];
        let key_at = last as usize + ENTRY_HEADER_LEN;
        bytes[key_at..key_at + KEY_LEN].copy_from_slice(&first_key);
        let (_, second, len) = found[1];
        let code_at = second as usize + ENTRY_HEADER_LEN + KEY_LEN + len as usize / 2;
        bytes[code_at] ^= 0x5a;
        std::fs::write(&pack, &bytes).expect("altered");

        let sandbox = cached(&cache);
        let functions = store(&sandbox);
        assert_eq!(
            functions.get(&first_key),
            None,
            "the moved entry is refused"
        );
        assert_eq!(
            functions.get(&found[1].0),
            None,
            "the altered entry is refused"
        );
        assert!(functions.get(&found[2].0).is_some(), "the others are taken");
        let out = compile(&sandbox, &guardian);
        assert!(out == expected, "altered entries never reach the code");
    }

    #[test]
    fn packs_tagged_under_another_key_or_engine_give_nothing() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let ours = synthetic(dir.path(), 1, 7);
        ours.insert(&[9; KEY_LEN], vec![1, 2, 3]);
        ours.flush();
        assert_eq!(ours.get(&[9; KEY_LEN]).as_deref(), Some(&[1, 2, 3][..]));
        // Another key (another host's cache, a planted pack) verifies nothing.
        let theirs = synthetic(dir.path(), 2, 7);
        assert_eq!(theirs.get(&[9; KEY_LEN]), None);
        // Another engine never reads the pack.
        let other_engine = synthetic(dir.path(), 1, 8);
        assert_eq!(other_engine.get(&[9; KEY_LEN]), None);
        // A key of the wrong length is neither kept nor found.
        assert!(!ours.insert(&[9; 31], vec![1]));
        assert_eq!(ours.get(&[9; 31]), None);
        assert_eq!(
            synthetic(dir.path(), 1, 7).get(&[9; KEY_LEN]).as_deref(),
            Some(&[1, 2, 3][..])
        );
    }

    #[test]
    fn a_pack_cut_short_or_not_a_pack_gives_the_entries_that_verify() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let store = synthetic(dir.path(), 1, 7);
        for byte in 0..4u8 {
            store.insert(&[byte; KEY_LEN], vec![byte; 1000]);
        }
        store.flush();
        let [pack] = packs(dir.path()).try_into().expect("one pack");
        let len = std::fs::metadata(&pack).expect("the pack").len();
        let file = std::fs::OpenOptions::new()
            .write(true)
            .open(&pack)
            .expect("the pack");
        file.set_len(len - 10).expect("cut short");
        // A file named as a pack that is not one, and a link named as one.
        std::fs::write(
            dir.path().join(format!("{:016x}-00{PACK_SUFFIX}", 7)),
            b"junk",
        )
        .expect("junk");
        std::os::unix::fs::symlink(
            &pack,
            dir.path().join(format!("{:016x}-01{PACK_SUFFIX}", 7)),
        )
        .expect("a link");
        let reader = synthetic(dir.path(), 1, 7);
        let found: Vec<u8> = (0..4u8)
            .filter(|byte| {
                reader
                    .get(&[*byte; KEY_LEN])
                    .is_some_and(|value| value[..] == [*byte; 1000])
            })
            .collect();
        assert_eq!(found.len(), 3, "all but the entry cut short: {found:?}");
    }

    #[test]
    fn a_large_compile_is_written_as_it_goes_to_one_pack() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let writer = synthetic(dir.path(), 1, 7);
        let value = |byte: u8| vec![byte; 2 << 20];
        for byte in 0..3u8 {
            writer.insert(&[byte; KEY_LEN], value(byte));
        }
        // The first two were written when they reached `SPILL_BYTES`, the
        // third waits in memory; all are found.
        assert_eq!(lock(&writer.state).pending.len(), 1);
        assert_eq!(packs(dir.path()).len(), 1);
        for byte in 0..3u8 {
            assert!(writer.get(&[byte; KEY_LEN]) == Some(Cow::Owned(value(byte))));
        }
        writer.flush();
        assert_eq!(packs(dir.path()).len(), 1, "one pack for the compile");
        let reader = synthetic(dir.path(), 1, 7);
        for byte in 0..3u8 {
            assert!(reader.get(&[byte; KEY_LEN]) == Some(Cow::Owned(value(byte))));
        }
    }

    #[test]
    fn more_packs_than_the_limit_are_merged_into_one_and_nothing_is_lost() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let writer = synthetic(dir.path(), 1, 7);
        for byte in 0..(MAX_PACKS as u8 + 2) {
            writer.insert(&[byte; KEY_LEN], vec![byte; 10]);
            // Not yet written: served from memory.
            assert_eq!(
                writer.get(&[byte; KEY_LEN]).as_deref(),
                Some(&[byte; 10][..])
            );
            writer.flush();
        }
        assert_eq!(packs(dir.path()).len(), MAX_PACKS + 2);
        // Young packs may still be being written: none is merged.
        assert!(synthetic(dir.path(), 1, 7).get(&[0; KEY_LEN]).is_some());
        assert_eq!(packs(dir.path()).len(), MAX_PACKS + 2, "not merged yet");
        let settled = std::time::SystemTime::now() - 2 * MERGE_AFTER;
        for pack in packs(dir.path()) {
            let file = private_fs::open_read(&pack).expect("a pack");
            file.set_modified(settled).expect("aged");
        }
        // And one pack just written, which stays as it is.
        writer.insert(&[200; KEY_LEN], vec![200; 10]);
        writer.flush();
        let reader = synthetic(dir.path(), 1, 7);
        for byte in (0..(MAX_PACKS as u8 + 2)).chain([200]) {
            assert_eq!(
                reader.get(&[byte; KEY_LEN]).as_deref(),
                Some(&[byte; 10][..])
            );
        }
        assert_eq!(packs(dir.path()).len(), 2, "the old ones merged");
        assert_eq!(reader.counts(), (MAX_PACKS as u64 + 3, 0));
        assert_eq!(
            writer.counts(),
            (0, MAX_PACKS as u64 + 3),
            "its own are not counted as taken"
        );
    }
}
