//! Parity with Codex's MCP elicitation routing, end to end through
//! `gatehouse serve`: an rmcp client calls demo-server's `elicit_raw`, which
//! sends the approval request given to it and returns the answer it got as
//! raw JSON; each case checks that answer byte for byte against what Codex
//! sends, and the audit line's `decided_by`.
//!
//! Line numbers are those of Codex's `codex-rs/core/src/session/mcp.rs`, the
//! behavioural reference (`shared/seed/session_mcp.rs`).
//!
//! The approvals name `elicit_raw` as their `tool_name` (and send no
//! `tool_params`): the gateway ties the elicitation to the agent's one call in
//! flight, `git__elicit_raw`, and the guardian declines an approval that names
//! another tool than that call.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use serde_json::{Value, json};

use crate::gateway::{Client, audit, call, config_with, stdio_client};
use crate::paths::{gatehouse, guest};
use crate::tool_result::result_text as text;

/// Codex's strict decline (the `message` of every strict review that did not
/// give a canonical answer).
const STRICT_DECLINE: &str = "Automated review of this operation failed. Do not proceed without asking the user for explicit approval.";

/// The guardian allows `elicit_raw` (demo-server marks it read-only, which the
/// guardian allows anyway; the rule says so explicitly).
const ALLOW: &str = r#"{ allow = [{ server = "git", tool = "elicit_raw" }] }"#;

/// The guardian denies `elicit_raw`.
const DENY: &str = r#"{ deny = [{ server = "git", tool = "elicit_raw", reason = "not today" }] }"#;

/// `elicit_raw`'s arguments: an approval request for `elicit_raw` (an empty
/// form with Codex's approval metadata), with `extra` added to its `_meta`.
fn approval(extra: Value) -> Value {
    let mut meta = json!({
        "codex_request_type": "approval_request",
        "codex_approval_kind": "mcp_tool_call",
        "tool_name": "elicit_raw",
    });
    if let (Some(meta), Some(extra)) = (meta.as_object_mut(), extra.as_object()) {
        meta.extend(extra.clone());
    }
    json!({"params": {
        "message": "Allow elicit_raw?",
        "requestedSchema": {"type": "object", "properties": {}},
        "_meta": meta,
    }})
}

/// What one gatehouse serve answered to each elicitation, and its audit.
struct Run {
    /// The answers the server received, as JSON, in order.
    answers: Vec<Value>,
    /// The audit lines, in order.
    audit: Vec<Value>,
    /// How often the person (the upstream client) was asked.
    asked: usize,
}

/// Starts `gatehouse serve` with `config`, calls `git__elicit_raw` once per
/// entry of `calls` (one at a time), and returns what came back.
/// The one answer is Codex's strict decline, decided by the router's policy.
fn assert_strict_decline_by_policy(served: &Run) {
    assert_eq!(
        served.answers,
        [json!({"action": "decline", "_meta": {
            "approvals_reviewer": "auto_review",
            "message": STRICT_DECLINE,
        }})]
    );
    assert_eq!(
        served.audit[0]["decided_by"], "policy",
        "{:?}",
        served.audit
    );
}

async fn serve(dir: &Path, config: &Path, calls: &[Value]) -> Run {
    let asked = Arc::new(AtomicUsize::new(0));
    let client = stdio_client(
        config,
        Client {
            elicitation: true,
            // Were the person asked, they would accept: a case that must
            // not ask them checks `asked` as well as the answer.
            content: Some(json!({})),
            asked: asked.clone(),
        },
    )
    .await;
    let mut answers = Vec::new();
    for arguments in calls {
        let result = client
            .call_tool(call("git__elicit_raw", arguments.clone()))
            .await
            .expect("elicit_raw");
        let text = text(&result);
        let raw = text
            .strip_prefix("[git] ")
            .unwrap_or_else(|| panic!("demo-server's reply: {text}"));
        answers.push(serde_json::from_str(raw).unwrap_or_else(|error| panic!("{error}: {text}")));
    }
    client.cancel().await.expect("close");
    Run {
        answers,
        audit: audit(dir),
        asked: asked.load(Ordering::SeqCst),
    }
}

/// Codex's strict branch (lines 696-794): a strict request (`true`) is
/// reviewed at once and the reviewer's canonical answer passes (lines
/// 784-793): the accept is `{}` marked `auto_review` (lines 1010-1014), the
/// denial a decline with the reviewer's message (lines 1015, 1026-1035).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn strict_review_passes_the_guardians_answer() {
    let dir = tempfile::tempdir().expect("tempdir");
    let allowed = serve(
        dir.path(),
        &config_with(dir.path(), ALLOW, ""),
        &[approval(json!({"codex_strict_auto_review": true}))],
    )
    .await;
    assert_eq!(
        allowed.answers,
        [
            json!({"action": "accept", "content": {}, "_meta": {"approvals_reviewer": "auto_review"}})
        ]
    );
    assert_eq!(
        allowed.audit[0]["decided_by"], "guest",
        "{:?}",
        allowed.audit
    );
    assert_eq!(allowed.audit[0]["reason"], "strict review");
    assert_eq!(allowed.asked, 0);

    let dir = tempfile::tempdir().expect("tempdir");
    let denied = serve(
        dir.path(),
        &config_with(dir.path(), DENY, ""),
        &[approval(json!({"codex_strict_auto_review": true}))],
    )
    .await;
    let answer = &denied.answers[0];
    assert_eq!(answer["action"], "decline", "{answer}");
    assert_eq!(answer["_meta"]["approvals_reviewer"], "auto_review");
    let message = answer["_meta"]["message"].as_str().unwrap_or_default();
    assert!(
        message
            .starts_with("This action was rejected due to unacceptable risk.\nReason: not today"),
        "{answer}"
    );
    assert_eq!(denied.audit[0]["decided_by"], "guest");
    assert_eq!(denied.asked, 0);
}

/// Codex answers a strict request under `granular` without
/// `mcp_elicitations` with the strict decline and never runs its reviewer:
/// its elicitation manager checks the explicitly denied category before it
/// calls the reviewer whose strict branch is lines 696-794 (Codex's test
/// `strict_auto_review_respects_explicit_elicitation_denials`). The guardian
/// here would allow it: the answer shows it was not asked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn strict_review_under_granular_without_mcp_elicitations_is_declined_unreviewed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = config_with(
        dir.path(),
        ALLOW,
        "approval_policy = { granular = { mcp_elicitations = false } }",
    );
    let served = serve(
        dir.path(),
        &config,
        &[approval(json!({"codex_strict_auto_review": true}))],
    )
    .await;
    assert_strict_decline_by_policy(&served);
    assert_eq!(
        served.audit[0]["steps"].as_array().map(Vec::len),
        Some(0),
        "no module ran"
    );
    assert_eq!(served.asked, 0);
}

/// Codex's strict path asks for the reviewer with `AutoReview` as the
/// default (lines 751-757), not the session's `approvals_reviewer` (which
/// only the ordinary path passes, lines 825-831): with the global reviewer
/// `user`, a strict request is still reviewed, and answered by the guardian,
/// while an ordinary approval goes to the person (lines 832-834). Only the
/// narrower setting, an app's in Codex and the server's own override in
/// gatehouse, makes it `user`: then the strict decline without a review
/// (line 763).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn strict_review_with_the_user_as_reviewer_is_still_reviewed_by_the_chain() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = config_with(dir.path(), DENY, "approvals_reviewer = \"user\"");
    let served = serve(
        dir.path(),
        &config,
        &[
            approval(json!({"codex_strict_auto_review": true})),
            approval(json!({})),
        ],
    )
    .await;
    let strict = &served.answers[0];
    assert_eq!(strict["action"], "decline", "{strict}");
    assert!(
        strict["_meta"]["message"]
            .as_str()
            .is_some_and(|message| message.contains("Reason: not today")),
        "the guardian's denial, not the strict decline: {strict}"
    );
    assert_eq!(served.audit[0]["decided_by"], "guest", "{:?}", served.audit);
    assert_eq!(served.audit[0]["reason"], "strict review");
    // The ordinary approval went to the person, who accepted.
    assert_eq!(
        served.answers[1],
        json!({"action": "accept", "content": {}})
    );
    assert_eq!(served.audit[1]["decided_by"], "person");
    assert_eq!(served.asked, 1);

    // The server's own override to `user`: the strict decline, unreviewed.
    let dir = tempfile::tempdir().expect("tempdir");
    let config = config_with(
        dir.path(),
        ALLOW,
        "\n[elicitations.servers.git]\napprovals_reviewer = \"user\"",
    );
    let served = serve(
        dir.path(),
        &config,
        &[approval(json!({"codex_strict_auto_review": true}))],
    )
    .await;
    assert_strict_decline_by_policy(&served);
    assert_eq!(
        served.audit[0]["reason"],
        "strict review refused: this server's approvals_reviewer is user"
    );
    assert_eq!(served.asked, 0);
}

/// Codex's `never` short-cut (lines 797-818): without an auto-approving
/// permission profile, a decline marked `auto_review` and nothing else
/// (`decline_without_message`, lines 817, 1036-1041); with one, an empty
/// form is accepted with `{}` and no `_meta` at all (lines 811-815), a form
/// that asks for something is still declined. A strict request is not a
/// `never` short-cut: it is reviewed (lines 696-794 come first), and its
/// accept is marked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn never_declines_or_accepts_auto_approved_prompts_without_meta() {
    let declined = json!({"action": "decline", "_meta": {"approvals_reviewer": "auto_review"}});

    let dir = tempfile::tempdir().expect("tempdir");
    let never = serve(
        dir.path(),
        &config_with(dir.path(), ALLOW, "approval_policy = \"never\""),
        &[approval(json!({}))],
    )
    .await;
    assert_eq!(never.answers, std::slice::from_ref(&declined));
    assert_eq!(never.audit[0]["decided_by"], "policy");
    assert_eq!(never.audit[0]["reason"], "approval policy never");
    assert_eq!(never.asked, 0);

    let dir = tempfile::tempdir().expect("tempdir");
    let asks_a_name = json!({"params": {
        "message": "Your name?",
        "requestedSchema": {"type": "object", "properties": {"name": {"type": "string"}}},
    }});
    let approving = serve(
        dir.path(),
        &config_with(
            dir.path(),
            ALLOW,
            "approval_policy = \"never\"\nauto_approve_prompts = true",
        ),
        &[
            approval(json!({})),
            asks_a_name,
            approval(json!({"codex_strict_auto_review": true})),
        ],
    )
    .await;
    assert_eq!(
        approving.answers,
        [
            json!({"action": "accept", "content": {}}),
            declined,
            json!({"action": "accept", "content": {}, "_meta": {"approvals_reviewer": "auto_review"}}),
        ]
    );
    let decided: Vec<&str> = approving
        .audit
        .iter()
        .filter_map(|line| line["decided_by"].as_str())
        .collect();
    assert_eq!(
        decided,
        ["policy", "policy", "guest"],
        "{:?}",
        approving.audit
    );
    assert_eq!(
        approving.audit[0]["reason"],
        "approval policy never, prompts auto-approved"
    );
    assert_eq!(approving.asked, 0);
}

/// Codex's `granular` short-cut (lines 819-821): without `mcp_elicitations`,
/// `decline_without_message` (lines 1036-1041), whatever the reviewer would
/// say.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn granular_without_mcp_elicitations_declines() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = config_with(
        dir.path(),
        ALLOW,
        "approval_policy = { granular = { mcp_elicitations = false } }",
    );
    let served = serve(dir.path(), &config, &[approval(json!({}))]).await;
    assert_eq!(
        served.answers,
        [json!({"action": "decline", "_meta": {"approvals_reviewer": "auto_review"}})]
    );
    assert_eq!(
        served.audit[0]["decided_by"], "policy",
        "{:?}",
        served.audit
    );
    assert_eq!(
        served.audit[0]["reason"],
        "granular policy without mcp_elicitations"
    );
    assert_eq!(served.asked, 0);
}

/// The `never` short-cut when a guest, not the router, answers it: `gatehouse
/// review --chain-only` puts the request to the guardian under the context
/// given (without it, review routes as serve and answers `never` itself), and the
/// guardian accepts an auto-approved empty form itself. Its accept is sent as
/// Codex sends the auto-approval (lines 811-815): `{}` and no `_meta`, not
/// the reviewed accept's `approvals_reviewer` (lines 1010-1014); its decline
/// keeps the mark (lines 817, 1036-1041), and a strict request under `never`
/// is reviewed and its accept marked (lines 696-794 come first).
#[test]
fn a_guests_never_short_cut_is_answered_as_codex_answers_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let review = |request: Value, flags: &[&str]| -> Value {
        let path = dir.path().join("request.json");
        std::fs::write(&path, request["params"].to_string()).expect("write request");
        let guardian = guest("gatehouse_guardian");
        let mut args = vec![
            "review",
            "--module",
            guardian.to_str().expect("UTF-8 path"),
            "--module-config",
            r#"{"allow": [{"server": "git", "tool": "elicit_raw"}]}"#,
            "--server",
            "git",
            "--request",
            path.to_str().expect("UTF-8 path"),
            "--approval-policy",
            "never",
            "--chain-only",
            "--format",
            "json",
        ];
        args.extend_from_slice(flags);
        let output = gatehouse(&args);
        assert_eq!(output.status.code(), Some(0), "{output:?}");
        let stdout = String::from_utf8_lossy(&output.stdout);
        let report: Value = serde_json::from_str(stdout.trim()).expect("one JSON report");
        report["answer"].clone()
    };
    assert_eq!(
        review(approval(json!({})), &["--auto-approve-prompts"]),
        json!({"action": "accept", "content": {}})
    );
    assert_eq!(
        review(approval(json!({})), &[]),
        json!({"action": "decline", "_meta": {"approvals_reviewer": "auto_review"}})
    );
    assert_eq!(
        review(
            approval(json!({"codex_strict_auto_review": true})),
            &["--auto-approve-prompts"]
        ),
        json!({"action": "accept", "content": {}, "_meta": {"approvals_reviewer": "auto_review"}})
    );
}

/// A mode other than `form` and `url`. Codex's reviewer declines "any other
/// mode" (lines 887-891, then 835-845, or the strict decline through lines
/// 765-769), but only a typed rmcp variant reaches that arm, and rmcp types
/// just the two: an unknown `mode` with a form's body is read as a form by
/// rmcp's untagged legacy-form fallback (the rmcp gatehouse links; Codex
/// reads the wire through rmcp too), and one rmcp cannot type never reaches
/// the reviewer. gatehouse routes the first as the
/// form it is read as (audited `mode: form`), and refuses the second with
/// -32602 naming the mode (params MCP forbids).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_mode_is_routed_as_rmcp_types_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = config_with(dir.path(), ALLOW, "");
    let mut with_a_form_body = approval(json!({}));
    with_a_form_body["params"]["mode"] = json!("telepathy");
    let asked = Arc::new(AtomicUsize::new(0));
    let client = stdio_client(
        &config,
        Client {
            elicitation: true,
            content: Some(json!({})),
            asked: asked.clone(),
        },
    )
    .await;
    let typed = client
        .call_tool(call("git__elicit_raw", with_a_form_body))
        .await
        .expect("elicit_raw");
    let without_a_form_body = json!({"params": {"mode": "telepathy", "message": "Allow?",
        "_meta": {"codex_request_type": "approval_request"}}});
    let untyped = client
        .call_tool(call("git__elicit_raw", without_a_form_body))
        .await
        .expect("elicit_raw");
    client.cancel().await.expect("close");
    assert_eq!(
        text(&typed),
        r#"[git] {"action":"accept","content":{},"_meta":{"approvals_reviewer":"auto_review"}}"#
    );
    assert!(
        text(&untyped).contains(r#"-32602: `mode` is "telepathy""#),
        "{}",
        text(&untyped)
    );
    let lines = audit(dir.path());
    assert_eq!(lines[0]["mode"], "form", "{lines:?}");
    assert_eq!(lines[0]["decided_by"], "guest");
    assert_eq!(lines[1]["mode"], "invalid");
    assert_eq!(lines[1]["answer"]["error"]["code"], -32602);
    assert_eq!(asked.load(Ordering::SeqCst), 0);
}

/// What `gatehouse review` says of `request` (an `elicit_raw` argument, as
/// for [`serve`]) under `config` and `flags`: its JSON report and exit code.
/// The request is tied to the call serve ties it to, `git__elicit_raw`.
fn review(dir: &Path, config: &Path, request: &Value, flags: &[&str]) -> (Value, Option<i32>) {
    let path = dir.join("request.json");
    std::fs::write(&path, request["params"].to_string()).expect("write request");
    let related =
        json!({"session_id": "1", "kind": "tool-call", "qualified_name": "git__elicit_raw",
                         "name": "elicit_raw", "arguments": request})
        .to_string();
    let mut args = vec![
        "review",
        "--config",
        config.to_str().expect("UTF-8 path"),
        "--server",
        "git",
        "--related-call",
        &related,
        "--request",
        path.to_str().expect("UTF-8 path"),
        "--format",
        "json",
    ];
    args.extend_from_slice(flags);
    let output = gatehouse(&args);
    let stdout = String::from_utf8_lossy(&output.stdout);
    let report: Value = serde_json::from_str(stdout.trim())
        .unwrap_or_else(|error| panic!("{error}: one JSON report: {output:?}"));
    (report, output.status.code())
}

/// `review`'s report says what serve's audit line and answer say: the same
/// answer (none when the person decides), `decided_by` and `reason`, and
/// whether the chain ran.
fn assert_reviewed_as_served(reviewed: &Value, served: &Run, index: usize) {
    let person = served.audit[index]["decided_by"] == "person";
    assert_eq!(
        reviewed["answer"],
        if person {
            Value::Null
        } else {
            served.answers[index].clone()
        },
        "{reviewed:#}\nserved: {:?}",
        served.audit[index]
    );
    for key in ["decided_by", "reason"] {
        assert_eq!(
            reviewed[key], served.audit[index][key],
            "{key}: {reviewed:#}"
        );
    }
    assert_eq!(
        reviewed["steps"].as_array().map(Vec::len),
        served.audit[index]["steps"].as_array().map(Vec::len),
        "the same modules ran: {reviewed:#}"
    );
    assert_eq!(reviewed["routing"]["applied"], true);
}

/// `gatehouse review` routes a strict request under `granular` without
/// `mcp_elicitations` as serve does (Codex's explicit denial before its
/// reviewer): the strict decline by policy, and the guardian, which would
/// allow it, is not run; whether the policy comes from --config's
/// `[elicitations]` or from `--approval-policy`. Running the chain alone,
/// review used to accept it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn review_declines_strict_under_granular_without_mcp_elicitations_as_serve_does() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = config_with(
        dir.path(),
        ALLOW,
        "approval_policy = { granular = { mcp_elicitations = false } }",
    );
    let strict = approval(json!({"codex_strict_auto_review": true}));
    let served = serve(dir.path(), &config, std::slice::from_ref(&strict)).await;
    assert_strict_decline_by_policy(&served);

    let (reviewed, code) = review(dir.path(), &config, &strict, &[]);
    assert_reviewed_as_served(&reviewed, &served, 0);
    assert_eq!(reviewed["routing"]["chain_ran"], false);
    assert_eq!(code, Some(0));

    let plain = tempfile::tempdir().expect("tempdir");
    let (flagged, code) = review(
        plain.path(),
        &config_with(plain.path(), ALLOW, ""),
        &strict,
        &["--approval-policy", "granular-no-elicitations"],
    );
    assert_reviewed_as_served(&flagged, &served, 0);
    assert_eq!(code, Some(0));
}

/// `gatehouse review` routes by the reviewer as serve does. With the global
/// `approvals_reviewer = "user"` a strict request is still reviewed by the
/// chain under `auto_review` (Codex reads only the narrower setting for
/// strict review) and gets the guardian's denial, while an ordinary approval
/// goes to the person without the chain running; with the server's own
/// override `user`, a strict request is the strict decline, unreviewed. The
/// same whether the setting comes from --config or from `--reviewer` /
/// `--server-reviewer`. Running the chain alone, review used to show the
/// guardian `user` (so the strict decline for the first) and review the
/// last.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn review_routes_strict_requests_past_a_user_reviewer_as_serve_does() {
    let strict = approval(json!({"codex_strict_auto_review": true}));
    let ordinary = approval(json!({}));

    let dir = tempfile::tempdir().expect("tempdir");
    let config = config_with(dir.path(), DENY, "approvals_reviewer = \"user\"");
    let served = serve(dir.path(), &config, &[strict.clone(), ordinary.clone()]).await;
    assert_eq!(served.audit[0]["decided_by"], "guest", "{:?}", served.audit);
    assert_eq!(
        served.audit[1]["decided_by"], "person",
        "{:?}",
        served.audit
    );
    let plain = tempfile::tempdir().expect("tempdir");
    let plain_config = config_with(plain.path(), DENY, "");
    for (config, flags) in [
        (&plain_config, &["--reviewer", "user"][..]),
        (&config, &[][..]),
    ] {
        let (reviewed, code) = review(plain.path(), config, &strict, flags);
        assert_reviewed_as_served(&reviewed, &served, 0);
        assert_eq!(reviewed["settings"]["approvals_reviewer"], "auto_review");
        assert_eq!(code, Some(0));
        let (reviewed, code) = review(plain.path(), config, &ordinary, flags);
        assert_reviewed_as_served(&reviewed, &served, 1);
        assert_eq!(reviewed["routing"]["chain_ran"], false);
        assert_eq!(code, Some(3), "left to the person");
    }

    let dir = tempfile::tempdir().expect("tempdir");
    let config = config_with(
        dir.path(),
        ALLOW,
        "\n[elicitations.servers.git]\napprovals_reviewer = \"user\"",
    );
    let served = serve(dir.path(), &config, std::slice::from_ref(&strict)).await;
    assert_strict_decline_by_policy(&served);
    let plain_config = config_with(plain.path(), ALLOW, "");
    for (config, flags) in [
        (&config, &[][..]),
        (&plain_config, &["--server-reviewer", "user"][..]),
    ] {
        let (reviewed, code) = review(plain.path(), config, &strict, flags);
        assert_reviewed_as_served(&reviewed, &served, 0);
        assert_eq!(reviewed["routing"]["chain_ran"], false);
        assert_eq!(code, Some(0));
    }
}
