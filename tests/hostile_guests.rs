//! Hostile guests, as SECURITY.md promises: every one fails closed with the
//! right reason within its limit, the host's memory comes back to its
//! baseline, and the next review is normal.
//!
//! `cargo test -p gatehouse-tests --test hostile_guests -- --nocapture`
//! prints the measured times and memory (docs/RELIABILITY.md records them).

use std::time::Duration;

use gatehouse_core::chain::{Chain, ChainLink};
use gatehouse_core::outcome::Decision;
use gatehouse_core::sandbox::{Limits, ReviewerModule, Sandbox};
use gatehouse_tests::{approval_request, load, sandbox};

/// The tests here measure this process's memory: they run one at a time, so
/// that one's memory bomb never lands in another's measurement.
fn serial() -> std::sync::MutexGuard<'static, ()> {
    static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());
    SERIAL
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The guardian accepting: a normal review, to run after each failure.
fn assert_next_review_is_normal(sandbox: &Sandbox) {
    let guardian = load(sandbox, "gatehouse_guardian");
    let report = guardian.review(r#"{"default":"allow"}"#, &approval_request());
    assert!(
        matches!(&report.result, Ok(outcome) if matches!(outcome.decision, Decision::Accept { .. })),
        "the review after a failure is not normal: {:?}",
        report.result
    );
}

/// The hostile guests, the config each gets, and the failure code each must
/// end in.
const HOSTILE: &[(&str, &str, &str)] = &[
    ("test_guest_spin", "{}", "deadline"),
    ("test_guest_sleep", "{}", "deadline"),
    ("test_guest_poll_forever", "{}", "deadline"),
    ("test_guest_stdin_block", "{}", "deadline"),
    ("test_guest_random_flood", "{}", "trap"),
    ("test_guest_handle_flood", "{}", "handles"),
    ("test_guest_grow_memory", "{}", "memory"),
    ("test_guest_deep_recursion", "{}", "stack-overflow"),
    ("test_guest_trap", "{}", "trap"),
    ("test_guest_huge_output", "{}", "output-too-large"),
    ("test_guest_huge_list", "{}", "output-too-large"),
    ("test_guest_import_flood", "{}", "output-too-large"),
    ("test_guest_import_flood", r#""fields""#, "output-too-large"),
];

fn review_once(module: &ReviewerModule, config: &str) -> (String, Duration) {
    let report = module.review(config, &approval_request());
    let code = match &report.result {
        Ok(outcome) => format!("decided {:?}", outcome.decision),
        Err(failure) => failure.code().to_owned(),
    };
    (code, report.elapsed)
}

#[test]
fn each_hostile_guest_fails_closed_with_its_reason_within_its_limit() {
    let _serial = serial();
    let limits = Limits::default();
    let sandbox = sandbox();
    for (name, config, expected) in HOSTILE {
        let module = load(&sandbox, name);
        let (code, elapsed) = review_once(&module, config);
        println!("{name:<28} {config:<9} {code:<18} {elapsed:>10.3?}");
        assert_eq!(&code, expected, "{name} with config {config}");
        // Every guest is stopped by its limit, not by running out of work:
        // nothing may run much past the deadline. The margin is wide so that
        // a loaded CI machine does not fail the test; it still catches a
        // missing deadline (the spin guest never returns on its own).
        assert!(
            elapsed < limits.deadline() + Duration::from_secs(2),
            "{name} ran {elapsed:?}, past the {:?} deadline",
            limits.deadline()
        );
        assert_next_review_is_normal(&sandbox);
    }
}

#[test]
fn files_environment_arguments_and_sockets_are_out_of_reach() {
    let _serial = serial();
    // The guest tries /etc/passwd and its own directory, lists `/` and `.`,
    // reads the environment and arguments, opens a TCP connection and binds
    // a UDP socket; it reports what worked. Only the clock does.
    let sandbox = sandbox();
    let report = load(&sandbox, "test_guest_escape").review("{}", &approval_request());
    assert_eq!(
        report.result.map(|outcome| outcome.decision),
        Ok(Decision::Decline {
            message: Some("file=false dir=false env=0 args=0 net=false clock=true".to_owned())
        })
    );
}

#[test]
fn table_growth_hits_the_table_cap() {
    let _serial = serial();
    let sandbox = sandbox();
    let bytes = gatehouse_tests::table_bomb_component();
    let module = sandbox
        .load_bytes("table-bomb", "table-bomb.wasm", &bytes, None)
        .expect("the generated component loads");
    let (code, elapsed) = review_once(&module, "{}");
    println!(
        "table-bomb (generated)       {:<9} {code:<18} {elapsed:>10.3?}",
        "{}"
    );
    assert_eq!(code, "table");
    let chain = Chain::new(vec![ChainLink::new(std::sync::Arc::new(module))]);
    let answer = chain
        .review(&approval_request())
        .answer()
        .expect("answered");
    assert_eq!(answer.to_wire()["action"], "decline");
    assert_next_review_is_normal(&sandbox);
}

#[test]
fn a_huge_claims_list_from_describe_is_refused_not_copied() {
    let _serial = serial();
    let sandbox = sandbox();
    let module = load(&sandbox, "test_guest_huge_list");
    let failure = module.describe().expect_err("100,000 claims are refused");
    assert_eq!(failure.code(), "output-too-large", "{failure}");
    assert_next_review_is_normal(&sandbox);
}

#[test]
fn a_chain_with_a_hostile_guest_answers_decline() {
    let _serial = serial();
    let sandbox = sandbox();
    for (name, config, _) in HOSTILE {
        let chain = Chain::new(vec![
            ChainLink::new(load(&sandbox, name)).with_config(*config),
        ]);
        let answer = chain
            .review(&approval_request())
            .answer()
            .expect("a failure is answered");
        assert_eq!(
            answer.to_wire()["action"],
            "decline",
            "{name} did not fail closed"
        );
    }
}

#[test]
fn host_memory_returns_to_its_baseline_after_hostile_guests() {
    let _serial = serial();
    const ROUNDS: usize = 20;
    let sandbox = sandbox();
    let modules: Vec<(std::sync::Arc<ReviewerModule>, &str)> = HOSTILE
        .iter()
        // The spin guest only costs time (50 ms each); one round proves it.
        .filter(|(name, _, _)| *name != "test_guest_spin")
        .map(|(name, config, _)| (load(&sandbox, name), *config))
        .collect();
    // One round first: pools, code and allocator arenas reach their steady
    // state.
    for (module, config) in &modules {
        review_once(module, config);
    }
    let baseline = gatehouse_bench::current_rss();
    for _ in 0..ROUNDS {
        for (module, config) in &modules {
            review_once(module, config);
        }
    }
    assert_next_review_is_normal(&sandbox);
    let after = gatehouse_bench::current_rss();
    if let (Some(baseline), Some(after)) = (baseline, after) {
        let growth = after.saturating_sub(baseline);
        println!(
            "RSS baseline {:.1} MiB, after {} reviews {:.1} MiB, growth {:.1} MiB",
            baseline as f64 / 1048576.0,
            ROUNDS * modules.len(),
            after as f64 / 1048576.0,
            growth as f64 / 1048576.0
        );
        // Each memory bomb fills its 16 MiB instance and the floods ask for
        // 10 MiB at a time: 160 reviews would leave well over 1 GiB behind if
        // instances or copies leaked. 64 MiB allows allocator noise.
        assert!(
            growth < 64 << 20,
            "RSS grew by {growth} bytes over {ROUNDS} rounds of hostile guests"
        );
    }
}

/// The environment variable that makes [`handle_flood_peak_probe`] run: it
/// measures this process's peak memory, so it runs in a process of its own.
const PROBE: &str = "GATEHOUSE_HANDLE_FLOOD_PROBE";

/// What the probe prints before its measurement.
const PROBE_LINE: &str = "handle-flood peak growth bytes: ";

#[test]
fn a_handle_flood_stops_at_the_handle_cap_and_costs_the_host_little() {
    let _serial = serial();
    let limits = Limits::default();
    let sandbox = sandbox();
    let module = load(&sandbox, "test_guest_handle_flood");
    let report = module.review("{}", &approval_request());
    assert_eq!(
        report.result.map(|outcome| outcome.decision),
        Err(gatehouse_core::failure::ReviewFailure::Handles {
            limit: limits.handles()
        })
    );
    assert_next_review_is_normal(&sandbox);

    // The host memory one flooding review holds, measured in a fresh
    // process: in this one, earlier reviews left freed memory in the
    // allocator that the flood would reuse unseen.
    let output = std::process::Command::new(std::env::current_exe().expect("test binary"))
        .args([
            "--exact",
            "handle_flood_peak_probe",
            "--ignored",
            "--nocapture",
        ])
        .env(PROBE, "1")
        .output()
        .expect("the probe runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{stdout}");
    let Some(growth) = stdout
        .lines()
        .find_map(|line| line.strip_prefix(PROBE_LINE))
    else {
        // The peak cannot be reset here (not Linux): nothing measured.
        println!("handle-flood: peak RSS not measurable here");
        return;
    };
    let growth: u64 = growth.trim().parse().expect("a number of bytes");
    println!(
        "handle-flood: one review raised the peak RSS by {:.2} MiB ({} handles)",
        growth as f64 / 1048576.0,
        limits.handles()
    );
    // wasmtime's default cap (100,000 entries) let this guest pin about
    // 25 MB of host memory per review; at the 4,096-handle cap it is about
    // 1 MiB, plus the guest's own pages.
    assert!(
        growth < 8 << 20,
        "one handle-flooding review raised the peak RSS by {growth} bytes"
    );
}

/// Run by the test above in a process of its own: the growth of the peak
/// RSS over one handle-flooding review, after a normal review has warmed the
/// sandbox.
#[test]
#[ignore = "a probe run in its own process by a_handle_flood_stops_at_the_handle_cap_and_costs_the_host_little"]
fn handle_flood_peak_probe() {
    if std::env::var_os(PROBE).is_none() {
        return;
    }
    let sandbox = sandbox();
    let module = load(&sandbox, "test_guest_handle_flood");
    assert_next_review_is_normal(&sandbox);
    if !gatehouse_bench::reset_peak_rss() {
        return;
    }
    let Some(before) = gatehouse_bench::peak_rss() else {
        return;
    };
    let report = module.review("{}", &approval_request());
    assert!(report.result.is_err(), "the flood was stopped");
    if let Some(peak) = gatehouse_bench::peak_rss() {
        println!("{PROBE_LINE}{}", peak.saturating_sub(before));
    }
}
