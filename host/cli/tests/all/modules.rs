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
        .env("DOCKER_CONFIG", dir.join("no-docker-config"))
        .env("XDG_CACHE_HOME", paths::cache_home());
    for (key, value) in envs {
        command.env(key, value);
    }
    command.output().expect("gatehouse runs")
}

/// [`gatehouse_in`] on a blocking thread, for tests on a runtime.
async fn gatehouse_blocking(dir: &Path, args: &[&str]) -> Output {
    let dir = dir.to_path_buf();
    let args: Vec<String> = args.iter().map(|arg| (*arg).to_owned()).collect();
    tokio::task::spawn_blocking(move || {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        gatehouse_in(&dir, &args, &[])
    })
    .await
    .expect("gatehouse ran")
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

/// demo-server `git`, reviewed by the module `reference` names, audited,
/// with `trust` as the `[trust]` section.
fn oci_config_with(dir: &Path, reference: &str, trust: &str) -> std::path::PathBuf {
    let server = paths::demo_server();
    let path = dir.join("gatehouse.toml");
    std::fs::write(
        &path,
        format!(
            "[mcp_servers.git]\ncommand = {server:?}\nargs = [\"--name\", \"git\"]\n\n\
             [[review.modules]]\noci = {reference:?}\n\n\
             [elicitations]\naudit_log = \"audit.jsonl\"\naudit_sync = \"batch\"\n\n{trust}",
            server = server.display().to_string(),
        ),
    )
    .expect("write config");
    path
}

/// [`oci_config_with`] a policy that lets the loopback registry's modules
/// run unsigned.
fn oci_config(dir: &Path, reference: &str) -> std::path::PathBuf {
    oci_config_with(
        dir,
        reference,
        "[[trust.rules]]\nmatch = \"127.0.0.1:*\"\nallow_unsigned = true\n",
    )
}

/// The module digests in the audit log's records, in order.
fn audited_digests(dir: &Path) -> Vec<String> {
    std::fs::read_to_string(dir.join("audit.jsonl"))
        .unwrap_or_default()
        .lines()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .filter_map(|record| record["steps"][0]["sha256"].as_str().map(str::to_owned))
        .collect()
}

fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::Digest as _;
    hex::encode(sha2::Sha256::digest(bytes))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_update_the_kit_passes_is_swapped_in_under_load_and_one_it_fails_changes_nothing() {
    use rmcp::ServiceExt as _;
    let Some(server) = oci_registry::Registry::start(Options::default()) else {
        return;
    };
    let guardian = std::fs::read(paths::guest("gatehouse_guardian")).expect("guardian");
    let template = std::fs::read(paths::guest("reviewer_template")).expect("template");
    let dir = tempfile::tempdir().expect("dir");
    let reference = format!("{}/team/reviewer:stable", server.address);
    let registry = gatehouse_registry::Registry::new(
        gatehouse_registry::Access::builder()
            .environment(false)
            .build(),
    )
    .expect("client");
    let tagged: gatehouse_registry::ModuleRef = reference.parse().expect("reference");
    let publish = |bytes: Vec<u8>| {
        let registry = registry.clone();
        let tagged = tagged.clone();
        async move { registry.push(&tagged, &bytes).await.expect("push") }
    };
    publish(guardian.clone()).await;
    let config = oci_config(dir.path(), &reference);
    let config_arg = config.to_str().expect("utf-8").to_owned();

    // Before any update, the chain cannot be built: nothing is locked.
    std::fs::write(
        dir.path().join("request.json"),
        r#"{"message": "Allow?", "requestedSchema": {"type": "object", "properties": {}}}"#,
    )
    .expect("request");
    let unlocked = gatehouse_in(
        dir.path(),
        &[
            "review",
            "--config",
            &config_arg,
            "--request",
            "request.json",
        ],
        &[],
    );
    assert!(!unlocked.status.success());
    assert!(
        text(&unlocked.stderr).contains("modules update"),
        "{}",
        text(&unlocked.stderr)
    );

    let first = gatehouse_in(
        dir.path(),
        &["modules", "update", "--config", &config_arg],
        &[],
    );
    assert!(first.status.success(), "{}", text(&first.stderr));
    let lock_path = dir.path().join("gatehouse.lock");
    let lock_v1 = std::fs::read_to_string(&lock_path).expect("lock written");
    assert!(lock_v1.contains(&sha256_hex(&guardian)), "{lock_v1}");

    let gateway = crate::http_gateway::HttpGateway::start(&config);
    let client = ().serve(gateway.transport()).await.expect("initialize");
    let client = std::sync::Arc::new(client);
    // Calls keep going while the updates run; every one must be answered.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let caller = {
        let client = client.clone();
        let stop = stop.clone();
        tokio::spawn(async move {
            let mut answered = 0usize;
            while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                let arguments = serde_json::json!({ "branch": format!("b{answered}") });
                let result = client
                    .call_tool(
                        rmcp::model::CallToolRequestParams::new("git__delete_branch")
                            .with_arguments(arguments.as_object().cloned().unwrap_or_default()),
                    )
                    .await
                    .expect("every call is answered");
                let said = crate::tool_result::result_text(&result);
                assert!(said.contains("answered:"), "{said}");
                answered += 1;
            }
            answered
        })
    };
    let wait_for_records = |count: usize| {
        let dir = dir.path().to_path_buf();
        async move {
            let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(30);
            while audited_digests(&dir).len() < count {
                assert!(tokio::time::Instant::now() < deadline, "no audit records");
                tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            }
        }
    };
    wait_for_records(3).await;

    // v2 passes the kit: locked and swapped in.
    publish(template.clone()).await;
    let update =
        gatehouse_blocking(dir.path(), &["modules", "update", "--config", &config_arg]).await;
    assert!(update.status.success(), "{}", text(&update.stderr));
    assert!(
        text(&update.stdout).contains(": ok"),
        "{}",
        text(&update.stdout)
    );
    let lock_v2 = std::fs::read_to_string(&lock_path).expect("lock");
    assert!(lock_v2.contains(&sha256_hex(&template)), "{lock_v2}");
    let seen = audited_digests(dir.path()).len();
    wait_for_records(seen + 3).await;
    assert_eq!(
        audited_digests(dir.path()).last(),
        Some(&sha256_hex(&template)),
        "the running gateway reviews with v2"
    );

    // v3 fails the kit (its verdicts are not JSON): refused, nothing changes.
    let bad = std::fs::read(paths::guest("test_guest_bad_json")).expect("bad guest");
    publish(bad).await;
    let refused =
        gatehouse_blocking(dir.path(), &["modules", "update", "--config", &config_arg]).await;
    assert!(!refused.status.success());
    let stderr = text(&refused.stderr);
    assert!(
        stderr.contains("fails the conformance kit") && stderr.contains("nothing changed"),
        "{stderr}"
    );
    assert_eq!(std::fs::read_to_string(&lock_path).expect("lock"), lock_v2);
    let seen = audited_digests(dir.path()).len();
    wait_for_records(seen + 3).await;
    assert_eq!(
        audited_digests(dir.path()).last(),
        Some(&sha256_hex(&template))
    );

    // The store entry of the running module corrupted on disk: a reload
    // refuses it, naming the reference and the fix, and the running chain
    // keeps answering; `modules update` fetches it again.
    let blob = dir
        .path()
        .join(".gatehouse/store/blobs/sha256")
        .join(sha256_hex(&template));
    let mut bytes = std::fs::read(&blob).expect("the stored component");
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0xff;
    std::fs::write(&blob, bytes).expect("corrupt it");
    let reload = gatehouse_blocking(dir.path(), &["reload", "--config", &config_arg]).await;
    assert!(!reload.status.success());
    let said = text(&reload.stdout);
    assert!(
        said.contains("team/reviewer:stable") && said.contains("gatehouse modules pull "),
        "{said}"
    );
    let seen = audited_digests(dir.path()).len();
    wait_for_records(seen + 3).await;
    assert_eq!(
        audited_digests(dir.path()).last(),
        Some(&sha256_hex(&template))
    );
    assert!(
        !blob.exists(),
        "a corrupted entry is removed when it is read"
    );
    // The fix it names: the locked version, by digest, fetched again.
    let pinned = said
        .split('`')
        .find(|part| part.starts_with("gatehouse modules pull "))
        .expect("the command to run")
        .to_owned();
    let args: Vec<&str> = pinned.split_whitespace().skip(1).collect();
    let pulled = gatehouse_blocking(dir.path(), &args).await;
    assert!(
        pulled.status.success(),
        "{pinned}: {}",
        text(&pulled.stderr)
    );
    assert_eq!(std::fs::read(&blob).expect("fetched again"), template);

    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let answered = caller.await.expect("caller");
    assert!(answered >= 9, "{answered}");
    drop(client);
    drop(gateway);

    // The registry gone, a new gateway starts from the lock and the store.
    drop(server);
    let offline = crate::http_gateway::HttpGateway::start(&config);
    let client = ().serve(offline.transport()).await.expect("initialize offline");
    let arguments = serde_json::json!({ "branch": "offline" });
    let result = client
        .call_tool(
            rmcp::model::CallToolRequestParams::new("git__delete_branch")
                .with_arguments(arguments.as_object().cloned().unwrap_or_default()),
        )
        .await
        .expect("call");
    assert!(crate::tool_result::result_text(&result).contains("answered:"));
}

#[test]
fn only_modules_a_trusted_key_signed_are_locked_and_a_tag_moved_to_unsigned_bytes_is_refused() {
    let Some(server) = oci_registry::Registry::start(Options::default()) else {
        return;
    };
    let dir = tempfile::tempdir().expect("dir");
    let password = [("COSIGN_PASSWORD", "team secret")];
    let keygen = gatehouse_in(
        dir.path(),
        &["modules", "keygen", "--output-key-prefix", "release"],
        &password,
    );
    assert!(keygen.status.success(), "{}", text(&keygen.stderr));
    let stranger = gatehouse_in(
        dir.path(),
        &["modules", "keygen", "--output-key-prefix", "stranger"],
        &password,
    );
    assert!(stranger.status.success(), "{}", text(&stranger.stderr));
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        let mode = std::fs::metadata(dir.path().join("release.key"))
            .expect("key")
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
    }
    let reference = format!("{}/security/guardian:1", server.address);
    let config = oci_config_with(
        dir.path(),
        &reference,
        &format!(
            "[trust.keys]\nrelease = \"release.pub\"\n\n[[trust.rules]]\nmatch = \"{}/security/*\"\nkeys = [\"release\"]\n",
            server.address
        ),
    );
    let config_arg = config.to_str().expect("utf-8").to_owned();
    let guardian = paths::guest("gatehouse_guardian");
    let push = |file: &Path| {
        let pushed = gatehouse_in(
            dir.path(),
            &["modules", "push", file.to_str().expect("utf-8"), &reference],
            &[],
        );
        assert!(pushed.status.success(), "{}", text(&pushed.stderr));
        text(&pushed.stdout).trim().to_owned()
    };
    let update = || {
        gatehouse_in(
            dir.path(),
            &["modules", "update", "--config", &config_arg],
            &[],
        )
    };
    let lock_path = dir.path().join("gatehouse.lock");

    // Unsigned: refused, no lock.
    push(&guardian);
    let refused = update();
    assert!(!refused.status.success());
    assert!(
        text(&refused.stderr).contains("is not signed"),
        "{}",
        text(&refused.stderr)
    );
    assert!(!lock_path.exists());

    // Signed by a key the policy does not name: refused.
    let signed = gatehouse_in(
        dir.path(),
        &["modules", "sign", &reference, "--key", "stranger.key"],
        &password,
    );
    assert!(signed.status.success(), "{}", text(&signed.stderr));
    let refused = update();
    assert!(!refused.status.success());
    assert!(
        text(&refused.stderr).contains("trusted key (release)"),
        "{}",
        text(&refused.stderr)
    );

    // A wrong password cannot sign.
    let wrong = gatehouse_in(
        dir.path(),
        &["modules", "sign", &reference, "--key", "release.key"],
        &[("COSIGN_PASSWORD", "guess")],
    );
    assert!(!wrong.status.success());
    assert!(
        text(&wrong.stderr).contains("wrong password"),
        "{}",
        text(&wrong.stderr)
    );

    // Signed by the release key: locked, with the signer.
    let signed = gatehouse_in(
        dir.path(),
        &["modules", "sign", &reference, "--key", "release.key"],
        &password,
    );
    assert!(signed.status.success(), "{}", text(&signed.stderr));
    let verified = gatehouse_in(
        dir.path(),
        &["modules", "verify", &reference, "--config", &config_arg],
        &[],
    );
    assert!(
        text(&verified.stdout).contains("signed by key release"),
        "{}",
        text(&verified.stdout)
    );
    let locked = update();
    assert!(locked.status.success(), "{}", text(&locked.stderr));
    let lock = std::fs::read_to_string(&lock_path).expect("lock");
    assert!(lock.contains("signer = \"key release (sha256:"), "{lock}");
    // The audit line of a review by it names the signer.
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime")
        .block_on(async {
            use rmcp::ServiceExt as _;
            let gateway = crate::http_gateway::HttpGateway::start(&config);
            let client = ().serve(gateway.transport()).await.expect("initialize");
            let arguments = serde_json::json!({ "branch": "main" });
            client
                .call_tool(
                    rmcp::model::CallToolRequestParams::new("git__delete_branch")
                        .with_arguments(arguments.as_object().cloned().unwrap_or_default()),
                )
                .await
                .expect("call");
            let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(30);
            loop {
                let audit =
                    std::fs::read_to_string(dir.path().join("audit.jsonl")).unwrap_or_default();
                if let Some(line) = audit.lines().next() {
                    let record: serde_json::Value = serde_json::from_str(line).expect("json");
                    let signer = record["steps"][0]["signed_by"].as_str().unwrap_or_default();
                    assert!(signer.starts_with("key release (sha256:"), "{record}");
                    break;
                }
                assert!(tokio::time::Instant::now() < deadline, "no audit line");
                tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            }
        });

    // The tag moved to other, unsigned bytes: refused, the lock as it was.
    push(&paths::guest("reviewer_template"));
    let refused = update();
    assert!(!refused.status.success());
    let stderr = text(&refused.stderr);
    assert!(
        stderr.contains("is not signed") && stderr.contains("nothing changed"),
        "{stderr}"
    );
    assert_eq!(std::fs::read_to_string(&lock_path).expect("lock"), lock);

    // A module no rule matches is refused too.
    let elsewhere = format!("{}/other/guardian:1", server.address);
    let config = oci_config_with(dir.path(), &elsewhere, "");
    let pushed = gatehouse_in(
        dir.path(),
        &[
            "modules",
            "push",
            guardian.to_str().expect("utf-8"),
            &elsewhere,
        ],
        &[],
    );
    assert!(pushed.status.success());
    let refused = gatehouse_in(
        dir.path(),
        &[
            "modules",
            "update",
            "--config",
            config.to_str().expect("utf-8"),
        ],
        &[],
    );
    assert!(!refused.status.success());
    assert!(
        text(&refused.stderr).contains("no [[trust.rules]] matches"),
        "{}",
        text(&refused.stderr)
    );
}

#[test]
fn three_commands_take_a_module_from_a_build_to_a_signed_locked_gateway_elsewhere() {
    let Some(server) = oci_registry::Registry::start(Options::default()) else {
        return;
    };
    let publisher = tempfile::tempdir().expect("publisher");
    let password = [("COSIGN_PASSWORD", "team secret")];
    let keygen = gatehouse_in(publisher.path(), &["modules", "keygen"], &password);
    assert!(keygen.status.success(), "{}", text(&keygen.stderr));
    let reference = format!("{}/security/guardian:1.0", server.address);
    let guardian = paths::guest("gatehouse_guardian");

    // 1. Publish.
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
    assert!(pushed.status.success(), "{}", text(&pushed.stderr));
    // 2. Sign.
    let signed = gatehouse_in(
        publisher.path(),
        &["modules", "sign", &reference, "--key", "cosign.key"],
        &password,
    );
    assert!(signed.status.success(), "{}", text(&signed.stderr));
    // 3. On another directory: a config, its trust policy and its lock.
    let host = tempfile::tempdir().expect("host");
    let public = publisher.path().join("cosign.pub");
    let init = gatehouse_in(
        host.path(),
        &[
            "init",
            "--modules",
            &reference,
            "--trust-key",
            public.to_str().expect("utf-8"),
        ],
        &[],
    );
    assert!(init.status.success(), "{}", text(&init.stderr));
    let config = host.path().join("gatehouse.toml");
    let written = std::fs::read_to_string(&config).expect("config");
    assert!(
        written.contains(&format!("oci = {reference:?}")),
        "{written}"
    );
    let lock = std::fs::read_to_string(host.path().join("gatehouse.lock")).expect("lock");
    assert!(lock.contains("signer = \"key trusted (sha256:"), "{lock}");

    // It runs: the guardian reviews, offline from the registry.
    drop(server);
    let request = host.path().join("request.json");
    std::fs::write(
        &request,
        r#"{"message": "Allow delete_branch?", "requestedSchema": {"type": "object", "properties": {}}, "_meta": {"codex_approval_kind": "mcp_tool_call", "tool_name": "delete_branch"}}"#,
    )
    .expect("request");
    let reviewed = gatehouse_in(
        host.path(),
        &[
            "review",
            "--config",
            "gatehouse.toml",
            "--request",
            "request.json",
        ],
        &[],
    );
    let out = text(&reviewed.stdout);
    assert!(
        out.lines()
            .any(|line| line.trim_start().starts_with("guardian ")),
        "a row for the guardian's review: {out}\n{}",
        text(&reviewed.stderr)
    );

    // Without a key or --allow-unsigned, init refuses to lock modules.
    let elsewhere = tempfile::tempdir().expect("elsewhere");
    let refused = gatehouse_in(elsewhere.path(), &["init", "--modules", &reference], &[]);
    assert!(!refused.status.success());
    assert!(
        text(&refused.stderr).contains("--trust-key"),
        "{}",
        text(&refused.stderr)
    );
    assert!(!elsewhere.path().join("gatehouse.toml").exists());
}

#[test]
fn the_reference_modules_are_published_signed_and_a_new_config_runs_them() {
    let Some(server) = oci_registry::Registry::start(Options::default()) else {
        return;
    };
    let dir = tempfile::tempdir().expect("dir");
    let password = [("COSIGN_PASSWORD", "release secret")];
    let keygen = gatehouse_in(dir.path(), &["modules", "keygen"], &password);
    assert!(keygen.status.success(), "{}", text(&keygen.stderr));
    let prefix = format!("{}/gatehouse", server.address);
    let published = Command::new(paths::root().join(".ci/publish-modules"))
        .args([
            prefix.as_str(),
            "0.1.0",
            dir.path().join("cosign.key").to_str().expect("utf-8"),
        ])
        .env("GATEHOUSE", env!("CARGO_BIN_EXE_gatehouse"))
        .env("COSIGN_PASSWORD", "release secret")
        .env("DOCKER_CONFIG", dir.path().join("no-docker-config"))
        .output()
        .expect("publish-modules runs");
    assert!(
        published.status.success(),
        "{}\n{}",
        text(&published.stdout),
        text(&published.stderr)
    );
    for name in ["guardian", "model-guardian", "allowlist"] {
        assert!(
            text(&published.stdout).contains(&format!("{prefix}/{name}:0.1.0@sha256:")),
            "{}",
            text(&published.stdout)
        );
    }
    let host = tempfile::tempdir().expect("host");
    let init = gatehouse_in(
        host.path(),
        &[
            "init",
            "--modules",
            &format!("{prefix}/allowlist:0.1.0"),
            &format!("{prefix}/guardian:0.1.0"),
            "--trust-key",
            dir.path().join("cosign.pub").to_str().expect("utf-8"),
        ],
        &[],
    );
    assert!(init.status.success(), "{}", text(&init.stderr));
    let lock = std::fs::read_to_string(host.path().join("gatehouse.lock")).expect("lock");
    assert_eq!(lock.matches("signer = \"key trusted").count(), 2, "{lock}");
}
