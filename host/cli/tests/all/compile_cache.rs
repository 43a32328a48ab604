//! The compile cache executes only what this host wrote: a swapped, altered
//! or symlinked artifact is refused and compiled again, a loose directory of
//! this user's is made private, another user's or a symbolic link is refused
//! (modules compile in memory), and every file is private.

#![cfg(unix)]

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use gatehouse_core::context::ReviewContext;
use gatehouse_core::elicitation::{ElicitationParams, RequestId};
use gatehouse_core::request::ReviewRequest;
use gatehouse_core::sandbox::{ReviewerModule, Sandbox};
use serde_json::json;

/// The bytes of a built guest ([`paths::guest`]).
fn guest_bytes(name: &str) -> Vec<u8> {
    let path = crate::paths::guest(name);
    std::fs::read(&path).unwrap_or_else(|error| panic!("{}: {error}", path.display()))
}

/// What tracing logged at warn and above while `run` ran on this thread.
fn logged<T>(run: impl FnOnce() -> T) -> (T, String) {
    crate::capture::logged(tracing::Level::WARN, run)
}

fn cached(cache: &Path) -> Sandbox {
    Sandbox::builder()
        .compile_cache(cache)
        .build()
        .expect("sandbox")
}

fn load(sandbox: &Sandbox, name: &str, bytes: &[u8], pin: Option<&str>) -> ReviewerModule {
    sandbox
        .load_bytes(name, &format!("{name}.wasm"), bytes, pin)
        .unwrap_or_else(|error| panic!("cannot load {name}: {error}"))
}

/// The one artifact in `cache` named by `digest`.
fn artifact(cache: &Path, digest: &str) -> PathBuf {
    let found: Vec<PathBuf> = std::fs::read_dir(cache)
        .expect("cache dir")
        .map(|entry| entry.expect("entry").path())
        .filter(|path| path.to_string_lossy().contains(digest))
        .collect();
    assert_eq!(found.len(), 1, "one artifact for {digest}: {found:?}");
    found[0].clone()
}

/// What a module is and decides: its `describe` name and its decision on an
/// approval request under config `{}` (the guardian denies by default; the
/// allowlist defers).
fn behaviour(module: &ReviewerModule) -> (String, String) {
    let params = ElicitationParams::from_wire(&json!({
        "message": "Allow delete_file?",
        "requestedSchema": {"type": "object", "properties": {}},
        "_meta": {"codex_request_type": "approval_request",
                  "codex_approval_kind": "mcp_tool_call", "tool_name": "delete_file"}
    }))
    .expect("valid params");
    let request = ReviewRequest::new(params, ReviewContext::new("docs", RequestId::Number(1)));
    let name = module.describe().expect("describe").name;
    let decision = match module.review("{}", &request).result {
        Ok(outcome) => outcome.decision.name().to_owned(),
        Err(failure) => format!("failure: {failure}"),
    };
    (name, decision)
}

fn mode(path: &Path) -> u32 {
    std::fs::symlink_metadata(path)
        .expect("metadata")
        .permissions()
        .mode()
        & 0o7777
}

#[test]
fn a_swapped_artifact_is_refused_and_the_pinned_module_decides_as_itself() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cache = dir.path().join("compiled");
    let (guardian, allowlist) = (
        guest_bytes("gatehouse_guardian"),
        guest_bytes("gatehouse_allowlist"),
    );
    let sandbox = cached(&cache);
    let pinned = load(&sandbox, "guardian", &guardian, None);
    let other = load(&sandbox, "allowlist", &allowlist, None);
    let expected = behaviour(&pinned);
    assert_eq!(expected.1, "decline");
    assert_ne!(behaviour(&other), expected, "the two modules must differ");
    let pin = pinned.digest().to_owned();

    // Another module's artifact copied over the pinned guardian's.
    let slot = artifact(&cache, &pin);
    std::fs::copy(artifact(&cache, other.digest()), &slot).expect("swap");
    let swapped = std::fs::read(&slot).expect("read");

    let (reloaded, logs) = logged(|| load(&cached(&cache), "guardian", &guardian, Some(&pin)));
    assert_eq!(reloaded.digest(), pin);
    assert_eq!(
        behaviour(&reloaded),
        expected,
        "the pinned module runs as itself"
    );
    assert!(logs.contains(&slot.display().to_string()), "{logs}");
    assert!(logs.contains("tag does not verify"), "{logs}");
    // The bad artifact was replaced by one that verifies.
    assert_ne!(std::fs::read(&slot).expect("read"), swapped);
    let (again, logs) = logged(|| load(&cached(&cache), "guardian", &guardian, Some(&pin)));
    assert_eq!(logs, "", "the rewritten artifact verifies");
    assert_eq!(behaviour(&again), expected);
}

#[test]
fn a_tampered_artifact_is_refused_and_recompiled() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cache = dir.path().join("compiled");
    let guardian = guest_bytes("gatehouse_guardian");
    let module = load(&cached(&cache), "guardian", &guardian, None);
    let expected = behaviour(&module);
    let slot = artifact(&cache, module.digest());

    // One byte in the middle of the compiled code, same file name.
    let mut bytes = std::fs::read(&slot).expect("read");
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0x01;
    std::fs::write(&slot, &bytes).expect("tamper");

    let (reloaded, logs) = logged(|| load(&cached(&cache), "guardian", &guardian, None));
    assert!(logs.contains(&slot.display().to_string()), "{logs}");
    assert!(logs.contains("tag does not verify"), "{logs}");
    assert_eq!(behaviour(&reloaded), expected);
    let rewritten = std::fs::read(&slot).expect("rewritten");
    assert_ne!(rewritten, bytes, "the tampered artifact was replaced");
    assert_eq!(rewritten.len(), bytes.len());
}

#[test]
fn a_loose_directory_of_ours_is_made_0700_and_used() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cache = dir.path().join("compiled");
    std::fs::create_dir(&cache).expect("mkdir");
    std::fs::set_permissions(&cache, std::fs::Permissions::from_mode(0o777)).expect("chmod");

    let (sandbox, logs) = logged(|| cached(&cache));
    assert!(logs.contains(&cache.display().to_string()), "{logs}");
    assert!(logs.contains("(mode 0777); making it 0700"), "{logs}");
    assert_eq!(mode(&cache), 0o700);
    assert_eq!(sandbox.compile_cache_dir(), Some(cache.as_path()));
    let module = load(
        &sandbox,
        "guardian",
        &guest_bytes("gatehouse_guardian"),
        None,
    );
    assert_eq!(behaviour(&module).1, "decline");
    artifact(&cache, module.digest());
}

/// Nothing written into a directory that is refused, and no key beside it.
fn assert_untouched(refused: &Path, key: &Path, logs: &str) {
    assert!(
        logs.contains(&format!(
            "{}: refusing the compile cache directory",
            refused.display()
        )),
        "{logs}"
    );
    assert!(logs.contains("compiling modules in memory"), "{logs}");
    assert!(!key.exists(), "no key written");
}

#[test]
fn another_users_directory_is_refused_and_modules_compile_in_memory() {
    if gatehouse_core::private_fs::effective_uid() != 0 {
        eprintln!("skipped: giving a directory away needs root");
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let cache = dir.path().join("compiled");
    std::fs::create_dir(&cache).expect("mkdir");
    std::fs::set_permissions(&cache, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    std::os::unix::fs::chown(&cache, Some(65534), Some(65534)).expect("chown");

    let (sandbox, logs) = logged(|| cached(&cache));
    assert_untouched(&cache, &dir.path().join("compiled.key"), &logs);
    assert!(logs.contains("belongs to uid 65534"), "{logs}");
    assert!(logs.contains("chown"), "{logs}");
    assert_eq!(sandbox.compile_cache_dir(), None);
    assert_eq!(mode(&cache), 0o755, "not changed");
    let module = load(
        &sandbox,
        "guardian",
        &guest_bytes("gatehouse_guardian"),
        None,
    );
    assert_eq!(behaviour(&module).1, "decline");
    let entries: Vec<_> = std::fs::read_dir(&cache).expect("cache dir").collect();
    assert!(entries.is_empty(), "nothing written: {entries:?}");
}

/// `.gatehouse` planted as a symbolic link: the cache refuses it, as the
/// control socket does, instead of creating its directory and key through
/// it; a loose `.gatehouse` of ours is made 0700 by the cache as by the
/// socket.
#[test]
fn the_cache_treats_a_planted_or_loose_gatehouse_directory_as_the_control_socket_does() {
    let dir = tempfile::tempdir().expect("tempdir");
    let elsewhere = dir.path().join("elsewhere");
    std::fs::create_dir(&elsewhere).expect("mkdir");
    let state = dir.path().join(".gatehouse");
    std::os::unix::fs::symlink(&elsewhere, &state).expect("symlink");
    let cache = state.join("compiled");

    let (sandbox, logs) = logged(|| cached(&cache));
    assert_untouched(&state, &elsewhere.join("compiled.key"), &logs);
    assert!(logs.contains("symbolic link"), "{logs}");
    assert_eq!(sandbox.compile_cache_dir(), None);
    assert!(
        std::fs::read_dir(&elsewhere).expect("ls").next().is_none(),
        "nothing created through the link"
    );

    std::fs::remove_file(&state).expect("rm");
    std::fs::create_dir(&state).expect("mkdir");
    std::fs::set_permissions(&state, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let sandbox = cached(&cache);
    assert_eq!(sandbox.compile_cache_dir(), Some(cache.as_path()));
    assert_eq!(mode(&state), 0o700);
    assert_eq!(mode(&cache), 0o700);
}

#[test]
fn cache_files_are_private_and_symlinks_are_not_followed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cache = dir.path().join("state").join("compiled");
    let guardian = guest_bytes("gatehouse_guardian");
    let sandbox = cached(&cache);
    assert_eq!(sandbox.compile_cache_dir(), Some(cache.as_path()));
    let module = load(&sandbox, "guardian", &guardian, None);
    let expected = behaviour(&module);
    let slot = artifact(&cache, module.digest());
    let key = dir.path().join("state").join("compiled.key");
    assert_eq!(mode(&slot), 0o600, "artifact");
    assert_eq!(mode(&key), 0o600, "key");
    assert_eq!(mode(&cache), 0o700, "cache directory");
    assert_eq!(mode(&dir.path().join("state")), 0o700, "created parent");
    assert_eq!(std::fs::metadata(&key).expect("key").len(), 32);

    // A symlink to a genuine artifact (its tag verifies) is not read: the
    // link is replaced by a fresh private file, and its target is untouched.
    let genuine = dir.path().join("genuine.cwasm");
    std::fs::rename(&slot, &genuine).expect("move");
    let genuine_bytes = std::fs::read(&genuine).expect("read");
    std::os::unix::fs::symlink(&genuine, &slot).expect("symlink");
    let (reloaded, logs) = logged(|| load(&cached(&cache), "guardian", &guardian, None));
    assert!(logs.contains("it is a symbolic link"), "{logs}");
    assert_eq!(behaviour(&reloaded), expected);
    assert!(std::fs::symlink_metadata(&slot).expect("slot").is_file());
    assert_eq!(mode(&slot), 0o600);
    assert_eq!(std::fs::read(&genuine).expect("read"), genuine_bytes);

    // A symlink planted where a new artifact will be written is not written
    // through.
    let victim = dir.path().join("victim");
    std::fs::write(&victim, b"keep me").expect("write");
    std::fs::remove_file(&slot).expect("remove");
    std::os::unix::fs::symlink(&victim, &slot).expect("symlink");
    load(&cached(&cache), "guardian", &guardian, None);
    assert_eq!(std::fs::read(&victim).expect("victim"), b"keep me");
    assert!(std::fs::symlink_metadata(&slot).expect("slot").is_file());
    assert_eq!(mode(&slot), 0o600);
}

/// `inspect` reads a module's types and loads it from one compilation
/// through the cache: compiled and stored once, and the load takes that
/// compilation rather than reading the artifact back or compiling again.
#[test]
fn inspect_compiles_a_module_once_through_the_cache() {
    let dir = tempfile::tempdir().expect("tempdir");
    let sandbox = cached(&dir.path().join("compiled"));
    assert_eq!(inspect_guardian_counts(&sandbox), (1, 0, 0));
}

/// Inspects the guardian with `sandbox` and returns its compile counts:
/// (compiled, cache hits, compiled in memory).
fn inspect_guardian_counts(sandbox: &gatehouse_core::sandbox::Sandbox) -> (u64, u64, u64) {
    let bytes = guest_bytes("gatehouse_guardian");
    let report =
        gatehouse_core::inspect::inspect(sandbox, "guardian.wasm", &bytes).expect("inspected");
    assert!(report.reviewer.is_ok(), "{:?}", report.reviewer);
    let counts = sandbox.compile_counts();
    (counts.compiled, counts.hits, counts.in_memory)
}

#[test]
fn inspect_without_a_cache_compiles_a_module_once_in_memory() {
    let sandbox = gatehouse_core::sandbox::Sandbox::new(gatehouse_core::sandbox::Limits::default())
        .expect("sandbox");
    assert_eq!(inspect_guardian_counts(&sandbox), (0, 0, 1));
}
