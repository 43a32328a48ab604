//! Swapping the reviewer chain at run time: under load, no review fails or
//! is lost and each is decided by the old or the new module; bad modules are
//! refused while the old chain keeps serving.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use gatehouse_audit::AuditLog;
use gatehouse_conformance::Kit;
use gatehouse_core::chain::Chain;
use gatehouse_core::sandbox::{Limits, Sandbox};
use gatehouse_gateway::config_file::ConfigFile;
use gatehouse_gateway::reload::{ReloadError, Reloader};
use gatehouse_gateway::router::{ElicitationSettings, NoPerson, Router};
use gatehouse_mcp::handler::{Delivery, IncomingElicitation};
use gatehouse_tests::guest;
use rmcp::model::{ElicitationAction, NumberOrString};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

fn write_config(path: &Path, module: &Path, config: &str, pin: Option<&str>) {
    let pin = pin
        .map(|pin| format!("sha256 = {pin:?}\n"))
        .unwrap_or_default();
    std::fs::write(
        path,
        format!(
            "[[review.modules]]\npath = {:?}\n{pin}config = {config}\n",
            module.display().to_string()
        ),
    )
    .expect("write config");
}

fn elicitation(id: i64) -> IncomingElicitation {
    IncomingElicitation {
        server: "docs".to_owned(),
        request_id: NumberOrString::Number(id),
        protocol_version: "2025-11-25".to_owned(),
        params: json!({
            "message": "Allow read_file?",
            "requestedSchema": {"type": "object", "properties": {}},
            "_meta": {"codex_request_type": "approval_request", "codex_approval_kind": "mcp_tool_call",
                      "tool_name": "read_file"}
        }),
        cancelled: CancellationToken::new(),
        server_gone: CancellationToken::new(),
        arrival: Default::default(),
        delivery: Delivery::Request,
        call: None,
    }
}

const GUARDIAN_ACCEPTS: &str = r#"{ default = "allow" }"#;
const ALLOWLIST_DECLINES: &str = r#"{ rules = [{ decision = "decline", message = "no" }] }"#;

struct Fixture {
    _dir: tempfile::TempDir,
    config: std::path::PathBuf,
    router: Arc<Router>,
    audit: Arc<AuditLog>,
    sandbox: Sandbox,
}

fn fixture() -> Fixture {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = dir.path().join("gatehouse.toml");
    write_config(
        &config,
        &guest("gatehouse_guardian"),
        GUARDIAN_ACCEPTS,
        None,
    );
    let sandbox = Sandbox::builder()
        .compile_cache(dir.path().join("cache"))
        .build()
        .expect("sandbox");
    let audit = Arc::new(AuditLog::in_memory());
    let router = Arc::new(Router::new(
        Chain::default(),
        ElicitationSettings::default(),
        audit.clone(),
        Arc::new(NoPerson),
        64,
    ));
    Fixture {
        _dir: dir,
        config,
        router,
        audit,
        sandbox,
    }
}

impl Fixture {
    /// A reloader of the fixture's config into its router, with no kit.
    fn reloader(&self) -> Arc<Reloader> {
        Arc::new(Reloader::new(
            Arc::new(ConfigFile::open(&self.config).expect("config")),
            self.sandbox.clone(),
            None,
            self.router.clone(),
        ))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hundred_swaps_under_load_lose_no_review() {
    let fixture = fixture();
    let reloader = fixture.reloader();
    let first = reloader.reload().expect("initial chain");
    let guardian_digest = first.modules[0].1.clone();

    let stop = Arc::new(AtomicBool::new(false));
    let mut reviewers = Vec::new();
    for task in 0..8i64 {
        let (router, stop) = (fixture.router.clone(), stop.clone());
        reviewers.push(tokio::spawn(async move {
            let mut actions = Vec::new();
            let mut id = task * 1_000_000;
            while !stop.load(Ordering::SeqCst) {
                id += 1;
                let answer = router
                    .route(elicitation(id))
                    .await
                    .expect("every review is answered");
                actions.push(answer.action);
            }
            actions
        }));
    }
    let (config, swapper) = (fixture.config.clone(), reloader.clone());
    let allowlist = guest("gatehouse_allowlist");
    let guardian = guest("gatehouse_guardian");
    let swaps = tokio::task::spawn_blocking(move || {
        let mut digests = Vec::new();
        for swap in 0..100 {
            if swap % 2 == 0 {
                write_config(&config, &allowlist, ALLOWLIST_DECLINES, None);
            } else {
                write_config(&config, &guardian, GUARDIAN_ACCEPTS, None);
            }
            let reloaded = swapper.reload().expect("a good module swaps in");
            digests.push(reloaded.modules[0].1.clone());
        }
        digests
    })
    .await
    .expect("swaps");
    stop.store(true, Ordering::SeqCst);
    let mut reviewed = 0;
    for reviewer in reviewers {
        let actions = reviewer.await.expect("reviewer");
        assert!(actions.iter().all(|action| matches!(
            action,
            ElicitationAction::Accept | ElicitationAction::Decline
        )));
        reviewed += actions.len();
    }
    let allowlist_digest = swaps[0].clone();
    assert_ne!(allowlist_digest, guardian_digest);
    let lines: Vec<Value> = fixture
        .audit
        .lines()
        .iter()
        .map(|line| serde_json::from_str(line).expect("JSON"))
        .collect();
    assert_eq!(lines.len(), reviewed, "one audit line per review");
    assert!(reviewed > 0);
    for line in &lines {
        let steps = line["steps"].as_array().expect("steps");
        assert_eq!(steps.len(), 1, "{line}");
        let digest = steps[0]["sha256"].as_str().expect("digest");
        let action = line["answer"]["action"].as_str().expect("action");
        // Decided by exactly the old or the new module, never a mix.
        match action {
            "accept" => assert_eq!(digest, guardian_digest),
            "decline" => assert_eq!(digest, allowlist_digest),
            other => panic!("unexpected answer {other}: {line}"),
        }
        assert_eq!(line["decided_by"], "guest", "{line}");
    }
}

async fn answer(router: &Router) -> String {
    let answer = router.route(elicitation(1)).await.expect("answered");
    serde_json::to_value(&answer).expect("json")["action"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_modules_are_refused_and_the_old_chain_keeps_serving() {
    let fixture = fixture();
    let kit = Kit::new(Limits::default()).expect("kit");
    let reloader = Reloader::new(
        Arc::new(ConfigFile::open(&fixture.config).expect("config")),
        fixture.sandbox.clone(),
        Some(kit),
        fixture.router.clone(),
    );
    reloader.reload().expect("the guardian passes");
    assert_eq!(answer(&fixture.router).await, "accept");

    let dir = fixture.config.parent().expect("dir").to_path_buf();
    let garbage = dir.join("garbage.wasm");
    std::fs::write(&garbage, b"\0asm\x0d\0\x01\0 this is not a component").expect("write");
    let cases: Vec<(std::path::PathBuf, Option<&str>, &str)> = vec![
        (garbage, None, "does not compile"),
        (guest("test_guest_wrong_world"), None, "does not export"),
        (guest("gatehouse_allowlist"), Some("00"), "sha256"),
        (
            guest("test_guest_counter"),
            None,
            "fails the contract suite",
        ),
    ];
    for (module, pin, reason) in cases {
        let pin = pin.map(|pin| pin.repeat(32));
        write_config(&fixture.config, &module, "{}", pin.as_deref());
        let error = reloader.reload().expect_err("refused");
        assert!(
            error.to_string().contains(reason),
            "{}: {error}",
            module.display()
        );
        assert!(matches!(
            error,
            ReloadError::Load { .. } | ReloadError::Contract { .. }
        ));
        // The old chain still answers.
        assert_eq!(
            answer(&fixture.router).await,
            "accept",
            "after {}",
            module.display()
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_compile_cache_is_used_on_the_second_load() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cache = dir.path().join("cache");
    let bytes = std::fs::read(guest("gatehouse_guardian")).expect("read");
    let first = Sandbox::builder()
        .compile_cache(&cache)
        .build()
        .expect("sandbox");
    let module = first.load_bytes("g", "g.wasm", &bytes, None).expect("load");
    // The compiled module (beside it, the pack of its compiled functions).
    let entries: Vec<_> = std::fs::read_dir(&cache)
        .expect("cache dir")
        .map(|entry| entry.expect("entry").path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "cwasm"))
        .collect();
    assert_eq!(entries.len(), 1, "one artifact written");
    let artifact = entries[0].clone();
    assert!(artifact.display().to_string().contains(module.digest()));
    // A fresh sandbox (a restart) loads from the cache and reviews normally.
    let second = Sandbox::builder()
        .compile_cache(&cache)
        .build()
        .expect("sandbox");
    let again = second
        .load_bytes("g", "g.wasm", &bytes, None)
        .expect("load from cache");
    assert!(again.describe().is_ok());
    // A corrupted artifact is discarded and rebuilt, never trusted.
    std::fs::write(&artifact, b"corrupt").expect("corrupt");
    let third = Sandbox::builder()
        .compile_cache(&cache)
        .build()
        .expect("sandbox");
    let rebuilt = third
        .load_bytes("g", "g.wasm", &bytes, None)
        .expect("rebuilt");
    assert!(rebuilt.describe().is_ok());
    assert!(std::fs::metadata(&artifact).expect("rewritten").len() > 1000);
}

/// Loads of one module that overlap (a reload while the first chain still
/// loads, two chains naming it) compile it once: the others take that
/// compile, and every load reviews.
#[test]
fn overlapping_loads_of_a_module_compile_it_once() {
    let dir = tempfile::tempdir().expect("tempdir");
    let bytes = std::fs::read(guest("gatehouse_guardian")).expect("read");
    for cache in [Some(dir.path().join("cache")), None] {
        let mut sandbox = Sandbox::builder();
        if let Some(cache) = &cache {
            sandbox = sandbox.compile_cache(cache);
        }
        let sandbox = sandbox.build().expect("sandbox");
        let loads = 4;
        let started = std::sync::Barrier::new(loads);
        std::thread::scope(|scope| {
            for _ in 0..loads {
                scope.spawn(|| {
                    started.wait();
                    let module = sandbox
                        .load_bytes("g", "g.wasm", &bytes, None)
                        .expect("every load succeeds");
                    assert!(module.describe().is_ok());
                });
            }
        });
        // The loads start together and a compile takes a few hundred
        // milliseconds, so all of them normally join the first; one the
        // scheduler held back past its end takes the artifact (or, with no
        // cache, compiles again). Before, each load compiled: none joined.
        let counts = sandbox.compile_counts();
        let what = format!("cache {cache:?}: {counts:?}");
        assert!(counts.joined >= 1, "{what}");
        if cache.is_some() {
            assert_eq!(counts.compiled, 1, "{what}");
            assert_eq!(counts.joined + counts.hits, 3, "{what}");
        } else {
            assert_eq!(counts.in_memory + counts.joined, 4, "{what}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn elicitation_settings_reload_with_the_chain() {
    let fixture = fixture();
    let reloader = Reloader::new(
        Arc::new(ConfigFile::open(&fixture.config).expect("config")),
        fixture.sandbox.clone(),
        None,
        fixture.router.clone(),
    );
    let first = reloader.reload().expect("initial chain");
    assert!(!first.settings_changed);
    assert_eq!(answer(&fixture.router).await, "accept");

    // The same module, now with auto-deny for the server: the next
    // elicitation is declined by policy without review.
    let mut text = std::fs::read_to_string(&fixture.config).expect("read");
    text.push_str("\n[elicitations.servers.docs]\nauto_deny = true\n");
    std::fs::write(&fixture.config, text).expect("write");
    let second = reloader.reload().expect("reload");
    assert!(second.settings_changed);
    assert_eq!(answer(&fixture.router).await, "decline");
    let last: Value =
        serde_json::from_str(fixture.audit.lines().last().expect("an audit line")).expect("json");
    assert_eq!(last["decided_by"], "policy");
    assert_eq!(last["reason"], "auto-deny");

    // A bad settings table is refused, and the old settings keep serving.
    let mut text = std::fs::read_to_string(&fixture.config).expect("read");
    text.push_str("approval_policy = \"sometimes\"\n");
    std::fs::write(&fixture.config, text).expect("write");
    let error = reloader.reload().expect_err("bad policy refused");
    assert!(error.to_string().contains("approval_policy"), "{error}");
    assert_eq!(answer(&fixture.router).await, "decline");
}

/// Once the first chain has failed (the instance is stopping), a build that
/// ends later (a first load that ran past `[review] load_timeout_sec`) or a
/// reload swaps nothing in: it is refused saying why, and what comes is still
/// declined as a failure.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nothing_is_swapped_in_once_the_first_chain_has_failed() {
    let fixture = fixture();
    let router = Arc::new(
        Router::new(
            Chain::default(),
            ElicitationSettings::default(),
            fixture.audit.clone(),
            Arc::new(NoPerson),
            64,
        )
        .loading_first_chain(),
    );
    let reloader = Reloader::new(
        Arc::new(ConfigFile::open(&fixture.config).expect("config")),
        fixture.sandbox.clone(),
        None,
        router.clone(),
    );
    assert!(router.first_chain_failed("it did not load within 1 s"));
    let error = reloader.rebuild().expect_err("refused");
    assert!(matches!(error, ReloadError::Stopping { .. }), "{error}");
    assert!(
        error.to_string().contains("it did not load within 1 s"),
        "{error}"
    );
    assert!(matches!(
        reloader.reload(),
        Err(ReloadError::Stopping { .. })
    ));
    assert!(router.chain().is_empty(), "no chain was swapped in");
    assert!(!router.first_chain_loaded());
    assert_eq!(answer(&router).await, "decline");
    let audited = gatehouse_tests::audit_lines(&fixture.audit);
    assert_eq!(audited.len(), 1, "{audited:#?}");
    assert_eq!(audited[0]["decided_by"], "failure", "{}", audited[0]);
}

/// A build that does not end within `[review] load_timeout_sec` (its module
/// is a FIFO nobody writes) is given up on and whoever waits is told so, the
/// next reload is not held up by it, and when it does end it is dropped: the
/// chain swapped in meanwhile stays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_build_past_the_load_timeout_is_given_up_on_and_dropped_when_it_ends() {
    let fixture = fixture();
    let reloader = fixture.reloader();
    reloader.reload().expect("the guardian");
    assert_eq!(answer(&fixture.router).await, "accept");

    let dir = fixture.config.parent().expect("dir").to_path_buf();
    let fifo = dir.join("allowlist-fifo.wasm");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .expect("mkfifo runs");
    assert!(made.success());
    let bounded = |module: &Path, config: &str| {
        write_config(&fixture.config, module, config, None);
        let text = std::fs::read_to_string(&fixture.config).expect("config");
        std::fs::write(
            &fixture.config,
            format!("[review]\nload_timeout_sec = 1\n\n{text}"),
        )
        .expect("bound the load");
    };
    bounded(&fifo, ALLOWLIST_DECLINES);
    let within = std::time::Duration::from_secs(30);
    let error = tokio::time::timeout(within, reloader.reload_bounded())
        .await
        .expect("the wait is bounded")
        .expect_err("given up on");
    assert!(matches!(error, ReloadError::TooSlow { .. }), "{error}");
    assert!(
        error.to_string().contains("did not load within 1 s"),
        "{error}"
    );
    assert_eq!(
        answer(&fixture.router).await,
        "accept",
        "the guardian serves"
    );

    // The next reload is not held up by it: refused at once (a file that is
    // no component), so the build given up on stays the newest.
    let garbage = dir.join("garbage.wasm");
    std::fs::write(&garbage, b"not a component").expect("write");
    bounded(&garbage, "{}");
    let refused = tokio::time::timeout(within, reloader.reload_bounded())
        .await
        .expect("the next reload is not held up")
        .expect_err("refused");
    assert!(matches!(refused, ReloadError::Load { .. }), "{refused}");
    assert_eq!(
        answer(&fixture.router).await,
        "accept",
        "the guardian serves"
    );

    // The FIFO is written at last: the build given up on reads and compiles
    // the allowlist, ends past its bound, and is dropped (swapped in, the
    // allowlist would decline).
    let compiled = reloader.compile_counts();
    let bytes = std::fs::read(guest("gatehouse_allowlist")).expect("allowlist");
    tokio::task::spawn_blocking(move || std::fs::write(&fifo, bytes).expect("write the FIFO"))
        .await
        .expect("the writer");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while reloader.compile_counts() == compiled {
        assert!(
            std::time::Instant::now() < deadline,
            "the late build never compiled the allowlist"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    // A swap follows its compile at once (no kit here); give it time to.
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    let modules: Vec<String> = fixture
        .router
        .chain()
        .links()
        .iter()
        .map(|link| link.module.name().to_owned())
        .collect();
    assert_eq!(
        modules,
        ["gatehouse_guardian"],
        "the late build was dropped"
    );
    assert_eq!(answer(&fixture.router).await, "accept");
}
