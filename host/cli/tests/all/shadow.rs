//! Shadow modules (`mode = "shadow"`) in a running `gatehouse serve`: they
//! review every elicitation the chain reviews, never decide, never hold an
//! answer up, and `gatehouse audit --compare` reports where they disagreed.

use std::path::{Path, PathBuf};

use rmcp::ServiceExt as _;
use rmcp::model::CallToolRequestParams;
use serde_json::{Value, json};

use crate::http_gateway::HttpGateway;
use crate::paths;
use crate::tool_result::result_text;
use crate::waiting::wait_for;

/// demo-server `git`, the guardian live, and `shadow` (TOML of one
/// `[[review.modules]]` entry) beside it; audited to `audit.jsonl`.
fn config(dir: &Path, shadow: &str) -> PathBuf {
    config_with(dir, shadow, "")
}

/// [`config`] with `review` (keys of `[review]`) first.
fn config_with(dir: &Path, shadow: &str, review: &str) -> PathBuf {
    let path = dir.join("gatehouse.toml");
    std::fs::write(
        &path,
        format!(
            "[review]\n{review}\n\n[mcp_servers.git]\ncommand = {server:?}\nargs = [\"--name\", \"git\"]\n\n\
             [[review.modules]]\npath = {guardian:?}\n\n\
             [[review.modules]]\n{shadow}\n\n\
             [elicitations]\naudit_log = \"audit.jsonl\"\naudit_sync = \"batch\"\n",
            server = paths::demo_server().display().to_string(),
            guardian = paths::guest("gatehouse_guardian").display().to_string(),
        ),
    )
    .expect("write config");
    path
}

fn lines(dir: &Path) -> Vec<Value> {
    std::fs::read_to_string(dir.join("audit.jsonl"))
        .unwrap_or_default()
        .lines()
        .map(|line| serde_json::from_str(line).expect("JSON line"))
        .collect()
}

fn shadow_lines(dir: &Path) -> Vec<Value> {
    lines(dir)
        .into_iter()
        .filter(|line| line["event"] == "shadow")
        .collect()
}

async fn delete(
    client: &rmcp::service::RunningService<rmcp::RoleClient, ()>,
    branch: &str,
) -> String {
    let arguments = json!({ "branch": branch });
    let result = client
        .call_tool(
            CallToolRequestParams::new("git__delete_branch")
                .with_arguments(arguments.as_object().cloned().unwrap_or_default()),
        )
        .await
        .expect("call");
    result_text(&result)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shadow_module_reviews_beside_the_chain_never_decides_and_compare_reports_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    // A candidate that would accept every deletion the guardian declines.
    let candidate = format!(
        "name = \"candidate\"\npath = {:?}\nmode = \"shadow\"\nconfig = {{ rules = [{{ tool = \"delete_*\", decision = \"accept\" }}] }}",
        paths::guest("gatehouse_allowlist").display().to_string()
    );
    let config = config(dir.path(), &candidate);
    let gateway = HttpGateway::start(&config);
    let client = ().serve(gateway.transport()).await.expect("initialize");
    for branch in ["a", "b", "c"] {
        let said = delete(&client, branch).await;
        assert!(
            said.contains("answered: decline"),
            "the chain decides: {said}"
        );
    }
    wait_for("three shadow lines", || shadow_lines(dir.path()).len() == 3).await;
    for line in shadow_lines(dir.path()) {
        assert_eq!(line["live"], "decline", "{line}");
        assert_eq!(line["action"], "decline", "{line}");
        assert_eq!(line["shadow"][0]["module"], "candidate", "{line}");
        assert_eq!(line["shadow"][0]["outcome"], "accept", "{line}");
    }
    // The decisions' own lines never name the shadow module.
    let decisions: Vec<Value> = lines(dir.path())
        .into_iter()
        .filter(|line| line.get("event").is_none())
        .collect();
    assert_eq!(decisions.len(), 3);
    for decision in &decisions {
        let steps = decision["steps"].as_array().expect("steps");
        assert!(
            steps.iter().all(|step| step["module"] != "candidate"),
            "{decision}"
        );
    }
    drop(client);
    drop(gateway);

    let config_arg = config.to_str().expect("utf-8");
    let compared = paths::gatehouse(&[
        "audit",
        "--config",
        config_arg,
        "--compare",
        "candidate",
        "--format",
        "json",
    ]);
    assert!(
        compared.status.success(),
        "{}",
        String::from_utf8_lossy(&compared.stderr)
    );
    let summary: Value = serde_json::from_slice(&compared.stdout).expect("json");
    assert_eq!(summary["reviewed"], 3, "{summary}");
    assert_eq!(summary["agreed"], 0, "{summary}");
    assert_eq!(summary["disagreed"], 3, "{summary}");
    assert_eq!(
        summary["disagreements_by_outcome"],
        json!([{"shadow": "accept", "live": "decline", "count": 3}])
    );
    assert_eq!(summary["disagreements"].as_array().map(Vec::len), Some(3));
    // The plain listing shows the three decisions only, and says nothing
    // about the shadow lines on stderr.
    let listed = paths::gatehouse(&["audit", "--config", config_arg, "--format", "json"]);
    assert!(listed.status.success());
    assert_eq!(String::from_utf8_lossy(&listed.stdout).lines().count(), 3);
    assert!(
        !String::from_utf8_lossy(&listed.stderr).contains("shadow"),
        "{}",
        String::from_utf8_lossy(&listed.stderr)
    );
    // The guardian, live, agrees with itself in no shadow line: nothing.
    let none = paths::gatehouse(&["audit", "--config", config_arg, "--compare", "guardian"]);
    assert!(
        String::from_utf8_lossy(&none.stdout).starts_with("guardian: 0 reviewed in shadow"),
        "{}",
        String::from_utf8_lossy(&none.stdout)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shadow_module_that_runs_to_its_deadline_holds_no_answer_up() {
    let dir = tempfile::tempdir().expect("tempdir");
    let spinner = format!(
        "name = \"spinner\"\npath = {:?}\nmode = \"shadow\"\nlimits = {{ deadline_ms = 3000 }}",
        paths::guest("test_guest_spin").display().to_string()
    );
    // The kit's contract suite would fail a module that never answers (and
    // take its deadline on every case): the operator turned it off here.
    let config = config_with(dir.path(), &spinner, "verify_contract = false");
    let gateway = HttpGateway::start(&config);
    let client = ().serve(gateway.transport()).await.expect("initialize");
    let said = delete(&client, "main").await;
    assert!(said.contains("answered: decline"), "{said}");
    // Answered and audited while the shadow review still spins: its line
    // comes only once its deadline ended it.
    let decisions = lines(dir.path());
    assert_eq!(
        decisions.len(),
        1,
        "the decision's line only: {decisions:?}"
    );
    assert!(decisions[0].get("event").is_none());
    wait_for("the shadow line", || shadow_lines(dir.path()).len() == 1).await;
    let line = &shadow_lines(dir.path())[0];
    assert_eq!(line["shadow"][0]["outcome"], "failure", "{line}");
    assert_eq!(line["shadow"][0]["failure"], "deadline", "{line}");
}
