//! The inputs of the contract suite: the data file
//! `host/conformance/suites/contract/inputs.json`, plus inputs too large or too
//! regular to keep as data (every approval policy, huge and deeply nested
//! `_meta`).

use serde_json::{Map, Value, json};

use crate::cases::{ANY_DECISION, Case, Expect};

/// The contract inputs shipped with the host.
const INPUTS: &str = include_str!("../suites/contract/inputs.json");

/// Every valid input the contract suite feeds a module.
pub(crate) fn contract_inputs() -> Result<Vec<Case>, serde_json::Error> {
    let mut cases: Vec<Case> = serde_json::from_str(INPUTS)?;
    cases.extend(policy_matrix());
    cases.push(input("form: 256 KiB _meta", large_meta(), None));
    cases.push(input("form: _meta nested 100 deep", nested_meta(100), None));
    Ok(cases)
}

fn approval_meta() -> Map<String, Value> {
    let meta = json!({
        "codex_request_type": "approval_request",
        "codex_approval_kind": "mcp_tool_call",
        "tool_name": "write_file",
        "tool_params": {"path": "notes.txt", "text": "hello"}
    });
    meta.as_object().cloned().unwrap_or_default()
}

fn input(name: &str, meta: Map<String, Value>, context: Option<Value>) -> Case {
    Case {
        name: name.to_owned(),
        description: None,
        request: json!({
            "message": "Allow the tool call?",
            "requestedSchema": {"type": "object", "properties": {}},
            "_meta": meta,
        }),
        context: Some(
            context.unwrap_or_else(|| json!({"server_name": "conformance", "request_id": 1})),
        ),
        tools: None,
        config: None,
        model: None,
        expect: Expect {
            decision: ANY_DECISION.to_owned(),
            message: None,
            message_contains: None,
            rationale_contains: None,
            risk: None,
            content: None,
            failure: None,
            model_calls: None,
        },
        with_model: Vec::new(),
    }
}

/// Every approval policy under both reviewer settings, with and without
/// auto-approved prompts.
fn policy_matrix() -> Vec<Case> {
    let policies = [
        ("untrusted", json!("untrusted")),
        ("on-request", json!("on-request")),
        ("granular", json!({"granular": {"mcp_elicitations": true}})),
        (
            "granular without elicitations",
            json!({"granular": {"mcp_elicitations": false, "rules": false}}),
        ),
        ("never", json!("never")),
    ];
    let mut cases = Vec::new();
    for (label, policy) in &policies {
        for reviewer in ["user", "auto_review"] {
            for auto_approve in [false, true] {
                let context = json!({
                    "server_name": "conformance",
                    "request_id": 2,
                    "approval_policy": policy,
                    "approvals_reviewer": reviewer,
                    "auto_approve_prompts": auto_approve,
                });
                let auto = if auto_approve {
                    ", prompts auto-approved"
                } else {
                    ""
                };
                let name = format!("policy {label}, reviewer {reviewer}{auto}");
                cases.push(input(&name, approval_meta(), Some(context)));
            }
        }
    }
    cases
}

fn large_meta() -> Map<String, Value> {
    let mut meta = approval_meta();
    for index in 0..1024 {
        meta.insert(format!("key_{index}"), Value::String("x".repeat(255)));
    }
    meta
}

fn nested_meta(depth: usize) -> Map<String, Value> {
    let mut value = json!("bottom");
    for level in 0..depth {
        value = if level % 2 == 0 {
            json!([value])
        } else {
            json!({"down": value})
        };
    }
    let mut meta = approval_meta();
    meta.insert("tool_params".to_owned(), json!({"deep": value}));
    meta
}
