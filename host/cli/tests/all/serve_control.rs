//! `gatehouse serve`'s audit log and control socket end to end: rotation by
//! SIGHUP and by `gatehouse reload`, the modes of the files it makes, the
//! control socket's line cap, and reloads coalesced.

use std::io::{Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use rmcp::ServiceExt;
use rmcp::model::CallToolRequestParams;
use serde_json::{Value, json};

use crate::compiled::{cached_digests, module_digest};
use crate::http_gateway::{HttpGateway, reload};
use crate::paths::{demo_server, existing, target};
use crate::tool_result::result_text as text;
use crate::waiting::wait_for;

/// demo-server `git` reviewed by the guardian, audited to `audit.jsonl`.
fn config(dir: &Path) -> PathBuf {
    let server = demo_server();
    let guardian = existing(
        target().join("wasm32-wasip2/guest/gatehouse_guardian.wasm"),
        "run .ci/build-guests",
    );
    let path = dir.join("gatehouse.toml");
    std::fs::write(
        &path,
        format!(
            "[mcp_servers.git]\ncommand = {server:?}\nargs = [\"--name\", \"git\"]\n\n\
             [[review.modules]]\npath = {guardian:?}\n\n\
             [elicitations]\naudit_log = \"audit.jsonl\"\naudit_sync = \"batch\"\n",
            server = server.display().to_string(),
            guardian = guardian.display().to_string(),
        ),
    )
    .expect("write config");
    path
}

/// The control socket of the one `gatehouse serve` running on the config
/// in `dir` (`.gatehouse/control/<instance>.sock`).
fn instance_socket(dir: &Path) -> PathBuf {
    let sockets: Vec<PathBuf> = std::fs::read_dir(dir.join(".gatehouse/control"))
        .expect("the control directory")
        .flatten()
        .map(|entry| entry.path())
        .collect();
    assert_eq!(sockets.len(), 1, "one instance, one socket: {sockets:?}");
    sockets[0].clone()
}

fn records(path: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    assert!(text.is_empty() || text.ends_with('\n'), "a partial record");
    text.lines()
        .map(|line| serde_json::from_str(line).expect("JSON line"))
        .collect()
}

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path)
        .expect("exists")
        .permissions()
        .mode()
        & 0o7777
}

/// `gatehouse serve --listen`, logging to a file, killed when dropped.
struct Served {
    gateway: HttpGateway,
    log: PathBuf,
}

impl Served {
    fn start(config: &Path) -> Served {
        let log = config.with_file_name("gatehouse.log");
        let gateway =
            HttpGateway::start_logging(config, std::fs::File::create(&log).expect("log file"));
        Served { gateway, log }
    }

    fn logged(&self, what: &str) -> usize {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .matches(what)
            .count()
    }
}

/// `gatehouse reload` off the runtime; what it said, once it said `ok`.
async fn reloaded(config: &Path) -> String {
    let config = config.to_path_buf();
    let (ok, said) = tokio::task::spawn_blocking(move || reload(&config))
        .await
        .expect("join");
    assert!(ok, "{said}");
    said
}

/// Calls `delete_branch`, which the guardian declines, and so one record.
async fn delete(client: &rmcp::service::RunningService<rmcp::RoleClient, ()>, branch: &str) {
    let arguments = json!({ "branch": branch });
    let result = client
        .call_tool(
            CallToolRequestParams::new("git__delete_branch")
                .with_arguments(arguments.as_object().cloned().unwrap_or_default()),
        )
        .await
        .expect("call");
    assert!(
        text(&result).contains("answered: decline"),
        "{}",
        text(&result)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_and_gatehouse_reload_reopen_the_audit_log_after_a_rename() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = config(dir.path());
    let served = Served::start(&config);
    let client = ().serve(served.gateway.transport()).await.expect("initialize");
    let audit = dir.path().join("audit.jsonl");
    delete(&client, "one").await;
    assert_eq!(records(&audit).len(), 1);
    assert_eq!(mode(&audit), 0o600, "the audit log is private");
    let socket = instance_socket(dir.path());
    assert_eq!(mode(&socket), 0o600, "the control socket is private");
    assert_eq!(mode(&dir.path().join(".gatehouse")), 0o700);
    assert_eq!(mode(&dir.path().join(".gatehouse/control")), 0o700);

    // logrotate's way: rename, then SIGHUP.
    let first = dir.path().join("audit.jsonl.1");
    std::fs::rename(&audit, &first).expect("mv");
    delete(&client, "two").await;
    let status = std::process::Command::new("kill")
        .args(["-HUP", &served.gateway.child.id().to_string()])
        .status()
        .expect("kill");
    assert!(status.success());
    // The new file exists a moment before it takes the writes (opened, then
    // swapped in); the log line comes after the swap.
    wait_for("SIGHUP did not reopen the audit log", || {
        served.logged("audit log reopened") >= 1
    })
    .await;
    delete(&client, "three").await;
    let old: Vec<Value> = records(&first);
    let new: Vec<Value> = records(&audit);
    assert_eq!(
        old.len(),
        2,
        "records before the SIGHUP stay in the old file"
    );
    assert_eq!(new.len(), 1, "{new:?}");
    assert_eq!(mode(&audit), 0o600);
    // Logs are written by a background thread: wait for the line.
    wait_for("SIGHUP was never logged", || served.logged("SIGHUP") >= 1).await;

    // `gatehouse reload` does the same, and says so.
    let second = dir.path().join("audit.jsonl.2");
    std::fs::rename(&audit, &second).expect("mv");
    let said = reloaded(&config).await;
    assert!(said.contains("audit log reopened"), "{said}");
    delete(&client, "four").await;
    assert_eq!(records(&second).len(), 1);
    assert_eq!(records(&audit).len(), 1);
    assert_eq!(records(&audit)[0]["answer"]["action"], "decline");
    client.cancel().await.expect("close");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_control_socket_caps_the_line_and_coalesces_reloads() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = config(dir.path());
    let served = Served::start(&config);
    let socket = instance_socket(dir.path());
    let swapped = "reviewer chain and settings swapped";
    wait_for("the first chain never loaded", || {
        served.logged(swapped) == 1
    })
    .await;

    // 1 MiB without a newline: one error line, the connection closed.
    let reply = tokio::task::spawn_blocking({
        let socket = socket.clone();
        move || {
            let mut stream = std::os::unix::net::UnixStream::connect(socket).expect("connect");
            stream
                .set_read_timeout(Some(Duration::from_secs(20)))
                .expect("timeout");
            let _ = stream.write_all(&vec![b'x'; 1 << 20]);
            let mut reply = Vec::new();
            let _ = stream.read_to_end(&mut reply);
            String::from_utf8_lossy(&reply).into_owned()
        }
    })
    .await
    .expect("join");
    assert!(
        reply.starts_with("error: request line too long"),
        "{reply:?}"
    );
    assert_eq!(served.logged(swapped), 1, "nothing was reloaded");

    // Twelve `gatehouse reload`s at once: every one answered `ok`, by at
    // most two reloads.
    let clients: Vec<_> = (0..12)
        .map(|_| {
            let config = config.clone();
            tokio::task::spawn_blocking(move || reload(&config))
        })
        .collect();
    for client in clients {
        let (ok, said) = client.await.expect("join");
        assert!(ok, "{said}");
        assert!(said.starts_with("ok "), "{said}");
    }
    // Logs are written by a background thread: wait for the first reload's
    // line, then give any others time to land before counting.
    wait_for("no reload was logged", || served.logged(swapped) >= 2).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let reloads = served.logged(swapped) - 1;
    assert!(
        (1..=2).contains(&reloads),
        "{reloads} reloads for 12 requests"
    );
}

/// `gatehouse status` asks each instance on the config through its control
/// socket: the chain with its digest, the backend's state, in flight.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_names_each_instance_its_chain_and_its_backends() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = config(dir.path());
    let config_arg = config.to_str().expect("utf-8").to_owned();
    // Nothing running: said, and exit 1.
    let none = crate::paths::gatehouse(&["status", "--config", &config_arg]);
    assert_eq!(none.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&none.stderr).contains("no gatehouse serve is running"),
        "{none:?}"
    );
    let first = HttpGateway::start(&config);
    let second = HttpGateway::start(&config);
    for gateway in [&first, &second] {
        let client = ().serve(gateway.transport()).await.expect("initialize");
        client.list_all_tools().await.expect("tools");
    }
    let status = || {
        let output =
            crate::paths::gatehouse(&["status", "--config", &config_arg, "--format", "json"]);
        assert!(output.status.success(), "{output:?}");
        serde_json::from_slice::<Value>(&output.stdout).expect("JSON")
    };
    // Each loads its chain in the background (`initialize` does not wait).
    wait_for("both backends connected and both chains loaded", || {
        status()["instances"].as_array().is_some_and(|all| {
            all.len() == 2
                && all.iter().all(|one| {
                    one["backends"][0]["state"] == "connected" && one["swapped_at_ms"].is_u64()
                })
        })
    })
    .await;
    let reported = status();
    for instance in reported["instances"].as_array().expect("instances") {
        assert!(
            gatehouse_gateway::instance::is_id(instance["instance"].as_str().unwrap_or("")),
            "{instance}"
        );
        assert_eq!(
            instance["modules"][0]["name"], "gatehouse_guardian",
            "{instance}"
        );
        assert_eq!(instance["modules"][0]["mode"], "live", "{instance}");
        assert_eq!(
            instance["modules"][0]["digest"].as_str().map(str::len),
            Some(64)
        );
        assert_eq!(instance["backends"][0]["name"], "git", "{instance}");
        assert_eq!(instance["in_flight"], 0, "{instance}");
        assert!(instance["pid"].as_u64().is_some(), "{instance}");
    }
    // For people: one block per instance.
    let text = crate::paths::gatehouse(&["status", "--config", &config_arg]);
    assert!(text.status.success(), "{text:?}");
    let said = String::from_utf8_lossy(&text.stdout);
    assert_eq!(
        said.matches("module gatehouse_guardian (live) sha256 ")
            .count(),
        2,
        "{said}"
    );
    assert_eq!(said.matches("backend git: connected").count(), 2, "{said}");
}

/// `[review] compile_cache_max_bytes` bounds what `serve` keeps compiled:
/// every swap to a new build stores one more artifact, and storing it drops
/// the least recently used, here the module the chain swapped away from.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bounded_compile_cache_drops_the_module_a_swap_left() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = config(dir.path());
    let served_text = std::fs::read_to_string(&config).expect("config");
    // A bound below one artifact: only the one stored last stays.
    std::fs::write(
        &config,
        format!("[review]\ncompile_cache_max_bytes = 1\n\n{served_text}"),
    )
    .expect("bound the cache");
    let served = Served::start(&config);
    let swapped = "reviewer chain and settings swapped";
    wait_for("the first chain never loaded", || {
        served.logged(swapped) == 1
    })
    .await;
    // The guardian as `config` names it, and the allowlist beside it.
    let guardian = target().join("wasm32-wasip2/guest/gatehouse_guardian.wasm");
    let cache = dir.path().join(".gatehouse/compiled");
    let digest_of = |module: &Path| module_digest(&std::fs::read(module).expect("module"));
    assert_eq!(cached_digests(&cache), [digest_of(&guardian)]);

    let allowlist = existing(
        guardian.with_file_name("gatehouse_allowlist.wasm"),
        "run .ci/build-guests",
    );
    let swapped_text = std::fs::read_to_string(&config).expect("config").replace(
        &format!("{:?}", guardian.display().to_string()),
        &format!("{:?}", allowlist.display().to_string()),
    );
    assert!(swapped_text.contains("gatehouse_allowlist.wasm"));
    std::fs::write(&config, swapped_text).expect("swap modules");
    reloaded(&config).await;
    assert_eq!(
        cached_digests(&cache),
        [digest_of(&allowlist)],
        "the guardian's artifact went when the allowlist's was stored"
    );

    let waits = "the compile cache stays as it was opened until a restart";
    assert_eq!(served.logged(waits), 0, "the bound did not change");
    // The cache was opened at start: a new bound waits for a restart, and
    // the reload says so.
    let rebound = std::fs::read_to_string(&config).expect("config").replace(
        "compile_cache_max_bytes = 1\n",
        "compile_cache_max_bytes = 4096\n",
    );
    std::fs::write(&config, rebound).expect("rebound");
    reloaded(&config).await;
    wait_for(
        "the reload never said the cache waits for a restart",
        || served.logged(waits) >= 1,
    )
    .await;
    reloaded(&config).await;
    assert_eq!(served.logged(waits), 1, "said once per change");
}
