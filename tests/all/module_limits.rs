//! Per-module limits: a module given more memory, core instances or time
//! gets them, and only it; limits beyond the pool are refused at load (and on
//! reload, saying to restart), and a module that needs more
//! than its limits is refused with the limit to raise.

use std::sync::Arc;
use std::time::Duration;

use gatehouse_audit::AuditLog;
use gatehouse_core::chain::Chain;
use gatehouse_core::failure::ReviewFailure;
use gatehouse_core::sandbox::{Limits, LoadError, ModuleLimits, Sandbox};
use gatehouse_gateway::config_file::ConfigFile;
use gatehouse_gateway::reload::{ReloadError, Reloader};
use gatehouse_gateway::router::{ElicitationSettings, NoPerson, Router};
use gatehouse_tests::{approval_request as request, guest, sandbox_with};

fn load_with(
    sandbox: &Sandbox,
    name: &str,
    limits: ModuleLimits,
) -> Result<gatehouse_core::sandbox::ReviewerModule, LoadError> {
    sandbox.load_file_with(guest(name), None, &limits)
}

#[test]
fn core_instances_are_a_module_limit_that_names_itself() {
    // A Rust guest creates 3 core instances: a default of 2 refuses it, its
    // own limit of 3 admits it, and the pool has room for 3, not 4.
    let three = ModuleLimits::builder().core_instances(3).build();
    let sandbox = sandbox_with(Limits::builder().core_instances(2).room_for(&three).build());
    let error = load_with(&sandbox, "gatehouse_guardian", ModuleLimits::default())
        .expect_err("over its limit");
    assert!(
        matches!(
            error,
            LoadError::OverLimit {
                limit: "core_instances",
                needs: 3,
                allowed: 2,
                ..
            }
        ),
        "{error:?}"
    );
    let text = error.to_string();
    for hint in [
        "gatehouse_guardian.wasm",
        "limits = { core_instances = 3 }",
        "--core-instances 3",
    ] {
        assert!(text.contains(hint), "{hint:?} not in {text}");
    }
    let guardian = load_with(&sandbox, "gatehouse_guardian", three).expect("within its own limit");
    assert!(guardian.review("{}", &request()).result.is_ok());
    // Another module in the same sandbox keeps the default.
    assert!(load_with(&sandbox, "gatehouse_allowlist", ModuleLimits::default()).is_err());
    let four = ModuleLimits::builder().core_instances(4).build();
    let error = load_with(&sandbox, "gatehouse_guardian", four).expect_err("beyond the pool");
    assert!(
        matches!(
            error,
            LoadError::BeyondPool {
                limit: "core_instances",
                asked: 4,
                room: 3,
                ..
            }
        ),
        "{error:?}"
    );
}

#[test]
fn memory_is_a_module_limit_enforced_per_review() {
    let roomy = ModuleLimits::builder().memory_bytes(32 << 20).build();
    let sandbox = sandbox_with(Limits::builder().room_for(&roomy).build());
    // 24 MiB of static data: refused under the 16 MiB default, naming the
    // limit; admitted and reviewing under its own 32 MiB.
    let error = load_with(&sandbox, "test_guest_big_memory", ModuleLimits::default())
        .expect_err("over the default");
    assert!(
        matches!(
            error,
            LoadError::OverLimit {
                limit: "memory_bytes",
                ..
            }
        ),
        "{error:?}"
    );
    assert!(error.to_string().contains("--memory-bytes"), "{error}");
    let big = load_with(&sandbox, "test_guest_big_memory", roomy).expect("its own limit");
    assert!(big.review("{}", &request()).result.is_ok());
    // A hoarder is stopped at its own cap: the default for one module, its
    // own for another, in the same sandbox.
    let twenty = ModuleLimits::builder().memory_bytes(20 << 20).build();
    for (limits, cap) in [(ModuleLimits::default(), 16 << 20), (twenty, 20 << 20)] {
        let hoarder = load_with(&sandbox, "test_guest_grow_memory", limits).expect("loads");
        assert_eq!(hoarder.limits().memory_bytes(), cap);
        let result = hoarder.review("{}", &request()).result;
        assert!(
            matches!(result, Err(ReviewFailure::Memory { limit }) if limit == cap),
            "{result:?}"
        );
    }
    // More than the pool was sized for is refused before anything runs.
    let greedy = ModuleLimits::builder().memory_bytes(64 << 20).build();
    let error = load_with(&sandbox, "test_guest_big_memory", greedy).expect_err("beyond the pool");
    assert!(
        matches!(
            error,
            LoadError::BeyondPool {
                limit: "memory_bytes",
                ..
            }
        ),
        "{error:?}"
    );
}

#[test]
fn a_module_s_own_deadline_ends_its_reviews_and_no_other_s() {
    // The sandbox's deadline is long; the spinner's own is short. Its review
    // ends on its own deadline, not the sandbox's (the deadline thread,
    // asleep for the sandbox's deadline, is woken for it).
    let sandbox_deadline = Duration::from_secs(30);
    let sandbox = sandbox_with(Limits::builder().deadline(sandbox_deadline).build());
    let own = Duration::from_millis(40);
    let spin = load_with(
        &sandbox,
        "test_guest_spin",
        ModuleLimits::builder().deadline(own).build(),
    )
    .expect("loads");
    for _ in 0..3 {
        let report = spin.review("{}", &request());
        assert!(
            matches!(report.result, Err(ReviewFailure::Deadline(limit)) if limit == own),
            "{:?}",
            report.result
        );
        // Ended by its own deadline: long before the sandbox's (the first
        // review starts while the deadline thread sleeps for the sandbox's).
        assert!(
            report.elapsed < sandbox_deadline / 2,
            "{:?}",
            report.elapsed
        );
    }
    let guardian =
        load_with(&sandbox, "gatehouse_guardian", ModuleLimits::default()).expect("loads");
    assert_eq!(guardian.limits().deadline(), sandbox_deadline);
    // And a longer deadline of its own is the one reported.
    let short = sandbox_with(
        Limits::builder()
            .deadline(Duration::from_millis(20))
            .build(),
    );
    let longer = Duration::from_millis(150);
    let spin = load_with(
        &short,
        "test_guest_spin",
        ModuleLimits::builder().deadline(longer).build(),
    )
    .expect("loads");
    let result = spin.review("{}", &request()).result;
    assert!(
        matches!(result, Err(ReviewFailure::Deadline(limit)) if limit == longer),
        "{result:?}"
    );
}

#[test]
fn a_reload_beyond_the_running_pool_is_refused_with_what_to_do() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = dir.path().join("gatehouse.toml");
    let write = |limits: &str| {
        std::fs::write(
            &config,
            format!(
                "[[review.modules]]\npath = {:?}\nlimits = {limits}\n",
                guest("test_guest_big_memory").display().to_string()
            ),
        )
        .expect("write config");
    };
    write("{ memory_bytes = 33554432 }");
    // The sandbox as `gatehouse serve` makes it: room for the modules of the
    // config it starts with.
    let limits = gatehouse_gateway::config::Config::load(&config)
        .expect("config")
        .review
        .to_limits();
    assert_eq!(limits.pool_memory_bytes(), 32 << 20);
    let sandbox = sandbox_with(limits.clone());
    let router = Arc::new(Router::new(
        Chain::default(),
        ElicitationSettings::default(),
        Arc::new(AuditLog::in_memory()),
        Arc::new(NoPerson),
        4,
    ));
    // The kit's deadline is generous: the question here is room, and a
    // loaded test machine must not fail a check on time.
    let kit = gatehouse_conformance::Kit::new(
        limits.to_builder().deadline(Duration::from_secs(5)).build(),
    )
    .expect("kit");
    let reloader = Reloader::new(
        std::sync::Arc::new(ConfigFile::open(&config).expect("config")),
        sandbox,
        Some(kit),
        router.clone(),
    );
    let loaded = reloader
        .reload()
        .expect("its own limit, with room, passes the kit");
    assert_eq!(loaded.modules.len(), 1);

    write("{ memory_bytes = 67108864 }");
    let error = reloader.reload().expect_err("beyond the pool");
    assert!(
        matches!(
            &error,
            ReloadError::Load {
                index: 0,
                source: LoadError::BeyondPool { .. }
            }
        ),
        "{error:?}"
    );
    let text = error.to_string();
    assert!(
        text.contains("memory_bytes") && text.contains("restart"),
        "{text}"
    );

    write("{ memory_bytes = 8388608 }");
    let error = reloader.reload().expect_err("under what it needs");
    assert!(error.to_string().contains("memory_bytes"), "{error}");
}
