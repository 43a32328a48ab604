//! Contract versions side by side: a module built against the frozen 0.1.0
//! loads, reviews and passes the `contract` suite on a host whose current
//! contract is 0.2.0; each module reports the version and world it targets.

use gatehouse_conformance::{Kit, Suite};
use gatehouse_core::context::ReviewContext;
use gatehouse_core::contract::{self, World};
use gatehouse_core::elicitation::{ElicitationParams, RequestId};
use gatehouse_core::outcome::Decision;
use gatehouse_core::request::ReviewRequest;
use gatehouse_core::sandbox::Limits;
use gatehouse_tests::{guest, load, sandbox, workspace_root};
use serde_json::json;
use sha2::{Digest, Sha256};

/// sha256 of `wit/0.1.0/reviewer.wit`: the contract as released at 0.1.0.
/// A change to that file breaks every 0.1.0 module in the field; it must
/// never happen.
const FROZEN_0_1_0_SHA256: &str =
    "d8c128cee6a5c42bd37f123b2e9b0d5d9d1f413b12e9b6bfea97d8731fb219f7";

fn request(params: serde_json::Value) -> ReviewRequest {
    ReviewRequest::new(
        ElicitationParams::from_wire(&params).expect("valid params"),
        ReviewContext::new("docs", RequestId::Number(1)),
    )
}

#[test]
fn the_frozen_0_1_0_contract_is_unchanged() {
    let text = std::fs::read(workspace_root().join("wit/0.1.0/reviewer.wit")).expect("frozen wit");
    assert_eq!(hex::encode(Sha256::digest(&text)), FROZEN_0_1_0_SHA256);
    assert!(String::from_utf8_lossy(&text).contains("package gatehouse:reviewer@0.1.0;"));
    let current = std::fs::read_to_string(workspace_root().join("wit/reviewer.wit")).expect("wit");
    assert!(current.contains(&format!(
        "package gatehouse:reviewer@{};",
        contract::VERSION
    )));
    assert_eq!(contract::SUPPORTED_VERSIONS, ["0.1.0", "0.2.0"]);
}

#[test]
fn a_0_1_0_module_loads_and_reviews_with_its_own_imports() {
    let sandbox = sandbox();
    let module = load(&sandbox, "test_guest_contract_0_1");
    assert_eq!(module.contract_version(), "0.1.0");
    assert_eq!(module.world(), World::Reviewer);

    let url = request(json!({
        "mode": "url", "message": "Sign in", "url": "https://auth.example.com/", "elicitationId": "e1"
    }));
    let report = module.review("{}", &url);
    let outcome = report.result.expect("a 0.1.0 module reviews");
    assert_eq!(
        outcome.decision,
        Decision::Decline {
            message: Some(
                "contract 0.1.0 module declines opening https://auth.example.com/".into()
            )
        }
    );
    // Its `logging@0.1.0` import reached the host.
    assert_eq!(report.logs.entries.len(), 1, "{:?}", report.logs);
    assert_eq!(
        report.logs.entries[0].message,
        "reviewed by a contract 0.1.0 module"
    );

    let form = request(
        json!({"message": "Name?", "requestedSchema": {"type": "object", "properties": {}}}),
    );
    let outcome = module.review("{}", &form).result.expect("reviews");
    assert_eq!(outcome.decision, Decision::Defer);
}

#[test]
fn a_0_1_0_module_passes_the_contract_suite_unchanged() {
    let kit = Kit::new(Limits::default()).expect("kit");
    let path = guest("test_guest_contract_0_1");
    let bytes = std::fs::read(&path).expect("read guest");
    let report = kit.run(&path.display().to_string(), &bytes, Suite::Contract, &[]);
    assert!(report.passed(), "{}", report.to_text());
}

#[test]
fn current_modules_report_0_2_0_and_their_world() {
    let sandbox = sandbox();
    let guardian = load(&sandbox, "gatehouse_guardian");
    assert_eq!(guardian.contract_version(), "0.2.0");
    assert_eq!(guardian.world(), World::Reviewer);
    let probe = load(&sandbox, "test_guest_model_probe");
    assert_eq!(probe.contract_version(), "0.2.0");
    assert_eq!(probe.world(), World::ModelReviewer);
}

#[test]
fn inspect_names_version_and_world() {
    let sandbox = sandbox();
    for (name, version, world) in [
        ("test_guest_contract_0_1", "0.1.0", World::Reviewer),
        ("gatehouse_guardian", "0.2.0", World::Reviewer),
        ("test_guest_model_probe", "0.2.0", World::ModelReviewer),
    ] {
        let path = guest(name);
        let bytes = std::fs::read(&path).expect("read guest");
        let inspection =
            gatehouse_core::inspect::inspect(&sandbox, name, &bytes).expect("inspects");
        assert_eq!(
            inspection.contract_version.as_deref(),
            Some(version),
            "{name}"
        );
        assert_eq!(inspection.world, Some(world), "{name}");
    }
    assert_eq!(
        gatehouse_core::inspect::host_contract(),
        "gatehouse:reviewer@0.2.0 (also runs 0.1.0)"
    );
}

#[test]
fn a_module_mixing_contract_versions_is_refused_by_name() {
    // Exports review@0.1.0, imports call@0.2.0 (and the 0.2.0 types it uses).
    let sandbox = sandbox();
    let path = guest("test_guest_mixed_versions");
    let error = sandbox
        .load_file(&path, None)
        .expect_err("mixed versions must not load");
    match &error {
        gatehouse_core::sandbox::LoadError::MixedVersions {
            version, import, ..
        } => {
            assert_eq!(version, "0.1.0");
            assert!(import.starts_with("gatehouse:reviewer/"), "{import}");
            assert!(import.ends_with("@0.2.0"), "{import}");
        }
        other => panic!("expected mixed versions, got {other:?}"),
    }
    let message = error.to_string();
    assert!(
        message.contains("test_guest_mixed_versions.wasm"),
        "{message}"
    );
    assert!(
        message.contains("must be of one contract version"),
        "{message}"
    );
}
