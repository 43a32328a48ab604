//! The compile cache a module author's commands share (`conformance`,
//! `inspect`, `review`; `XDG_CACHE_HOME/gatehouse/compiled` by default): one build is
//! compiled once between them, a new build at the same path is compiled as
//! itself, a module the contract refuses is refused from the cache too, and
//! `--no-compile-cache` keeps nothing.

#![cfg(unix)]

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Output;

/// Runs `gatehouse args...` with `XDG_CACHE_HOME` set to `cache_home`.
fn gatehouse(cache_home: &Path, args: &[&str]) -> Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_gatehouse"))
        .args(args)
        .env("XDG_CACHE_HOME", cache_home)
        .output()
        .expect("gatehouse runs")
}

/// Runs the contract suite on `module`, with `extra` arguments.
fn contract_suite(cache_home: &Path, module: &str, extra: &[&str]) -> Output {
    let mut args = vec!["conformance", module, "--suite", "contract"];
    args.extend_from_slice(extra);
    gatehouse(cache_home, &args)
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// The artifacts in the user's cache under `cache_home`.
fn artifacts(cache_home: &Path) -> Vec<PathBuf> {
    let mut found: Vec<PathBuf> = std::fs::read_dir(cache_home.join("gatehouse/compiled"))
        .map(|entries| {
            entries
                .map(|entry| entry.expect("entry").path())
                .filter(|path| path.extension().is_some_and(|ext| ext == "cwasm"))
                .collect()
        })
        .unwrap_or_default();
    found.sort();
    found
}

/// Copies the built guest `name` to `dir/m.wasm`, over what is there.
fn build_as_m(dir: &Path, name: &str) -> String {
    let module = dir.join("m.wasm");
    std::fs::copy(crate::paths::guest(name), &module).expect("copy the guest");
    module.display().to_string()
}

#[test]
fn conformance_and_inspect_compile_one_build_once_in_the_users_cache() {
    let home = tempfile::tempdir().expect("tempdir");
    let work = tempfile::tempdir().expect("tempdir");
    let module = build_as_m(work.path(), "gatehouse_guardian");
    let cache = home.path().join("gatehouse/compiled");

    let first = gatehouse(home.path(), &["inspect", &module]);
    assert!(first.status.success(), "{first:?}");
    assert!(
        stdout(&first).contains(&format!("compiled  now, and kept in {}", cache.display())),
        "{}",
        stdout(&first)
    );
    let stored = artifacts(home.path());
    assert_eq!(stored.len(), 1, "one artifact: {stored:?}");
    let inode = std::fs::metadata(&stored[0]).expect("artifact").ino();

    // The kit's two sandboxes load it from there; a store would have
    // replaced the file (a new inode).
    let proved = contract_suite(home.path(), &module, &[]);
    assert!(proved.status.success(), "{}", stdout(&proved));
    assert!(stdout(&proved).contains(" 0 failed"), "{}", stdout(&proved));
    assert_eq!(artifacts(home.path()), stored);
    assert_eq!(
        std::fs::metadata(&stored[0]).expect("artifact").ino(),
        inode
    );

    let again = gatehouse(home.path(), &["inspect", &module]);
    assert!(
        stdout(&again).contains("compiled  taken from the compile cache"),
        "{}",
        stdout(&again)
    );
    assert_eq!(
        std::fs::metadata(&stored[0]).expect("artifact").ino(),
        inode
    );
    // The cache is the user's alone.
    let mode = std::fs::metadata(&cache).expect("cache dir").mode();
    assert_eq!(mode & 0o777, 0o700, "{mode:o}");
}

#[test]
fn review_keeps_the_build_it_compiled_for_inspect_and_the_kit() {
    let home = tempfile::tempdir().expect("tempdir");
    let work = tempfile::tempdir().expect("tempdir");
    let module = build_as_m(work.path(), "gatehouse_guardian");
    let request = crate::paths::root()
        .join("examples/requests/approve-read-only.json")
        .display()
        .to_string();
    let review: [&str; 7] = [
        "review",
        "--module",
        &module,
        "--request",
        &request,
        "--server",
        "docs",
    ];
    let reviewed = gatehouse(home.path(), &review);
    assert!(reviewed.status.success(), "{reviewed:?}");
    assert!(
        stdout(&reviewed).contains("accept"),
        "{}",
        stdout(&reviewed)
    );
    let stored = artifacts(home.path());
    assert_eq!(stored.len(), 1, "review stored its compile: {stored:?}");
    let inode = std::fs::metadata(&stored[0]).expect("artifact").ino();

    let inspected = gatehouse(home.path(), &["inspect", &module]);
    assert!(
        stdout(&inspected).contains("compiled  taken from the compile cache"),
        "{}",
        stdout(&inspected)
    );
    // And a second review loads it rather than storing it again.
    let again = gatehouse(home.path(), &review);
    assert!(again.status.success(), "{again:?}");
    assert_eq!(artifacts(home.path()), stored);
    assert_eq!(
        std::fs::metadata(&stored[0]).expect("artifact").ino(),
        inode
    );
}

#[test]
fn a_new_build_at_the_same_path_is_compiled_and_inspected_as_itself() {
    let home = tempfile::tempdir().expect("tempdir");
    let work = tempfile::tempdir().expect("tempdir");
    let module = build_as_m(work.path(), "gatehouse_guardian");
    let first = gatehouse(home.path(), &["inspect", &module]);
    assert!(
        stdout(&first).contains("reviewer  guardian "),
        "{}",
        stdout(&first)
    );

    build_as_m(work.path(), "gatehouse_allowlist");
    let second = gatehouse(home.path(), &["inspect", &module]);
    let text = stdout(&second);
    assert!(text.contains("compiled  now, and kept in"), "{text}");
    // The functions it shares with the first build (Rust's standard
    // library) are not compiled again.
    assert!(
        text.lines().any(|line| line.starts_with("functions ")
            && line.ends_with(" taken from earlier compiles in the cache")),
        "{text}"
    );
    assert!(text.contains("reviewer  allowlist"), "{text}");
    assert_eq!(artifacts(home.path()).len(), 2);
    // And the kit proves the new build, not the artifact of the old one.
    let proved = contract_suite(home.path(), &module, &["--format", "json"]);
    let report: serde_json::Value = serde_json::from_slice(&proved.stdout).expect("a JSON report");
    let described = report["results"]
        .as_array()
        .and_then(|results| results.iter().find(|result| result["case"] == "describe"))
        .map(|result| result["got"].clone());
    assert_eq!(
        described,
        Some(serde_json::json!("allowlist 0.1.0")),
        "{report}"
    );
}

#[test]
fn a_module_the_contract_refuses_is_refused_from_the_cache_too() {
    let home = tempfile::tempdir().expect("tempdir");
    let work = tempfile::tempdir().expect("tempdir");
    let module = build_as_m(work.path(), "test_guest_wrong_world");
    for (round, compiled) in [(1, "now, and kept in"), (2, "taken from the compile cache")] {
        let inspected = gatehouse(home.path(), &["inspect", &module]);
        let text = stdout(&inspected);
        assert_eq!(inspected.status.code(), Some(1), "round {round}: {text}");
        assert!(
            text.contains("reviewer  NOT LOADABLE"),
            "round {round}: {text}"
        );
        assert!(
            text.contains(&format!("compiled  {compiled}")),
            "round {round}: {text}"
        );
        let proved = contract_suite(home.path(), &module, &[]);
        let text = stdout(&proved);
        assert_eq!(proved.status.code(), Some(2), "round {round}: {text}");
        assert!(
            text.contains("FAIL contract / loads as a reviewer")
                && text.contains("it is not a reviewer"),
            "round {round}: {text}"
        );
    }
    assert_eq!(artifacts(home.path()).len(), 1);
}

#[test]
fn no_compile_cache_keeps_nothing() {
    let home = tempfile::tempdir().expect("tempdir");
    let module = crate::paths::guest("gatehouse_guardian")
        .display()
        .to_string();
    let inspected = gatehouse(home.path(), &["inspect", &module, "--no-compile-cache"]);
    assert!(
        stdout(&inspected).contains("compiled  now, in memory (no compile cache)"),
        "{}",
        stdout(&inspected)
    );
    let proved = contract_suite(home.path(), &module, &["--no-compile-cache"]);
    assert!(proved.status.success(), "{}", stdout(&proved));
    assert!(!home.path().join("gatehouse").exists(), "nothing kept");
    // An explicit directory is used instead of the user's.
    let dir = home.path().join("mine");
    let dir_text = dir.display().to_string();
    let inspected = gatehouse(
        home.path(),
        &["inspect", &module, "--compile-cache", &dir_text],
    );
    assert!(
        stdout(&inspected).contains(&format!("kept in {dir_text}")),
        "{}",
        stdout(&inspected)
    );
    assert!(
        !home.path().join("gatehouse").exists(),
        "the user's cache untouched"
    );
}
