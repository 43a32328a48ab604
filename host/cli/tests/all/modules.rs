//! `gatehouse modules push | pull | gc` against a real registry (Debian's
//! `docker-registry`, started on loopback by `oci_registry`): a module built
//! here is published, pulled into another directory's store verified, and
//! what no lock names is collected.

use std::path::Path;
use std::process::{Command, Output};

use crate::oci_registry::{self, Options};
use crate::paths;

fn gatehouse_in(dir: &Path, args: &[&str], envs: &[(&str, &str)]) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_gatehouse"));
    command
        .args(args)
        .current_dir(dir)
        .env_remove("GATEHOUSE_REGISTRY_USERNAME")
        .env_remove("GATEHOUSE_REGISTRY_PASSWORD")
        .env("DOCKER_CONFIG", dir.join("no-docker-config"));
    for (key, value) in envs {
        command.env(key, value);
    }
    command.output().expect("gatehouse runs")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn a_module_is_pushed_pulled_into_another_directory_verified_and_collected() {
    let Some(server) = oci_registry::Registry::start(Options::default()) else {
        return;
    };
    let guardian = paths::guest("gatehouse_guardian");
    let publisher = tempfile::tempdir().expect("publisher");
    let reference = format!("{}/team/guardian:1.0", server.address);
    let pushed = gatehouse_in(
        publisher.path(),
        &[
            "modules",
            "push",
            guardian.to_str().expect("utf-8"),
            &reference,
        ],
        &[],
    );
    assert!(pushed.status.success(), "push: {}", text(&pushed.stderr));
    let pinned = text(&pushed.stdout).trim().to_owned();
    assert!(
        pinned.starts_with(&format!("{reference}@sha256:")),
        "{pinned}"
    );

    let host = tempfile::tempdir().expect("host");
    std::fs::write(
        host.path().join("gatehouse.toml"),
        "[registry]\nattempts = 2\n",
    )
    .expect("config");
    let pulled = gatehouse_in(
        host.path(),
        &["modules", "pull", &reference, "--config", "gatehouse.toml"],
        &[],
    );
    assert!(pulled.status.success(), "pull: {}", text(&pulled.stderr));
    assert_eq!(
        text(&pulled.stdout).trim(),
        pinned,
        "the tag resolved to what was pushed"
    );
    // The component is in the store, under its digest, private.
    let component = std::fs::read(&guardian).expect("guardian");
    let digest = {
        use sha2::Digest as _;
        hex::encode(sha2::Sha256::digest(&component))
    };
    let blob = host
        .path()
        .join(".gatehouse/store/blobs/sha256")
        .join(&digest);
    assert_eq!(std::fs::read(&blob).expect("stored"), component);
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        let mode = std::fs::metadata(&blob).expect("meta").permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
    }
    // Pinned by digest, it pulls too.
    let again = gatehouse_in(
        host.path(),
        &["modules", "pull", &pinned, "--config", "gatehouse.toml"],
        &[],
    );
    assert!(again.status.success(), "{}", text(&again.stderr));

    // No lock names them: gc removes the three blobs (a dry run first).
    let dry = gatehouse_in(
        host.path(),
        &["modules", "gc", "--config", "gatehouse.toml", "--dry-run"],
        &[],
    );
    assert!(dry.status.success(), "{}", text(&dry.stderr));
    assert_eq!(
        text(&dry.stdout).lines().count(),
        3,
        "{}",
        text(&dry.stdout)
    );
    assert!(blob.exists());
    let gc = gatehouse_in(
        host.path(),
        &["modules", "gc", "--config", "gatehouse.toml"],
        &[],
    );
    assert!(gc.status.success(), "{}", text(&gc.stderr));
    assert!(
        text(&gc.stdout).contains("removed 3 files"),
        "{}",
        text(&gc.stdout)
    );
    assert!(!blob.exists());
}

#[test]
fn credentials_come_from_the_environment_for_a_registry_with_basic_auth() {
    let Some(server) = oci_registry::Registry::start(Options {
        tls: true,
        auth: true,
    }) else {
        return;
    };
    let guardian = paths::guest("gatehouse_guardian");
    let dir = tempfile::tempdir().expect("dir");
    let ca = server.ca_file();
    let port = server.address.rsplit(':').next().expect("port");
    let reference = format!("localhost:{port}/team/guardian:env");
    let args = [
        "modules",
        "push",
        guardian.to_str().expect("utf-8"),
        &reference,
        "--ca-file",
        ca.to_str().expect("utf-8"),
    ];
    let refused = gatehouse_in(dir.path(), &args, &[]);
    assert!(!refused.status.success());
    let stderr = text(&refused.stderr);
    assert!(
        stderr.contains(&reference) && stderr.contains("GATEHOUSE_REGISTRY_USERNAME"),
        "{stderr}"
    );
    let pushed = gatehouse_in(
        dir.path(),
        &args,
        &[
            ("GATEHOUSE_REGISTRY_USERNAME", oci_registry::USER),
            ("GATEHOUSE_REGISTRY_PASSWORD", oci_registry::PASSWORD),
        ],
    );
    assert!(pushed.status.success(), "{}", text(&pushed.stderr));
}

#[test]
fn bad_references_and_files_are_refused_before_any_network() {
    let dir = tempfile::tempdir().expect("dir");
    std::fs::write(dir.path().join("core.wasm"), b"\0asm\x01\0\0\0").expect("core module");
    for (args, says) in [
        (
            vec!["modules", "pull", "team/guardian:1"],
            "name the registry host",
        ),
        (
            vec!["modules", "push", "missing.wasm", "localhost:1/g:1"],
            "missing.wasm",
        ),
        (
            vec!["modules", "push", "core.wasm", "localhost:1/g:1"],
            "not a Wasm component",
        ),
        (
            vec!["modules", "pull", "localhost:1/g@sha256:12"],
            "64 lowercase hex",
        ),
    ] {
        let output = gatehouse_in(dir.path(), &args, &[]);
        assert!(!output.status.success(), "{args:?}");
        let stderr = text(&output.stderr);
        assert!(stderr.contains(says), "{args:?}: {stderr}");
    }
}
