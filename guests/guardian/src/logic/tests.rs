//! The review with a related call and with a model: where the model is asked,
//! what it is shown, and what every other path does without it.

use std::cell::RefCell;

use serde_json::{Value, json};

use super::*;
use crate::input::{CatalogTool, Mode, RequestId};
use crate::model_review::{
    CallKind, FinishReason, MISMATCH_HEADLINE, REVIEW_FAILED_PREFIX, Role, TIMEOUT_MESSAGE,
};

const INSTRUCTIONS: &str = crate::config::DEFAULT_DENIAL_INSTRUCTIONS;
const EMPTY_SCHEMA: &str = r#"{"type":"object","properties":{}}"#;
const APPROVAL: &str =
    r#""codex_request_type":"approval_request","codex_approval_kind":"mcp_tool_call""#;

/// An approval request's `_meta` with `rest` after the opt-in.
fn approval(rest: &str) -> String {
    if rest.is_empty() {
        format!("{{{APPROVAL}}}")
    } else {
        format!("{{{APPROVAL},{rest}}}")
    }
}

fn input(meta: Option<&str>) -> Input<'_> {
    Input {
        mode: Mode::Form {
            requested_schema: EMPTY_SCHEMA,
        },
        meta,
        server_name: "docs",
        request_id: RequestId::Number(7),
        policy: Policy::OnRequest,
        reviewer: Reviewer::AutoReview,
        auto_approve_prompts: false,
        catalog: Catalog::Unavailable,
    }
}

fn tool_call<'a>(name: &'a str, arguments: Option<&'a str>) -> RelatedCall<'a> {
    RelatedCall {
        session_id: "session-1",
        kind: CallKind::ToolCall,
        qualified_name: "docs__write_file",
        name,
        arguments,
        id: Some("7"),
    }
}

fn answer(text: &str) -> Result<Completion, ModelError> {
    Ok(Completion {
        text: text.to_owned(),
        model: "test-model".to_owned(),
        finish_reason: FinishReason::Stop,
        input_tokens: Some(100),
        output_tokens: Some(10),
    })
}

/// A model that must not be asked.
fn unasked(request: &CompletionRequest) -> Result<Completion, ModelError> {
    panic!("the model was asked: {request:?}")
}

/// Reviews with a model that answers `result`, and returns the verdict with
/// the requests the model got.
fn with_model(
    config: &str,
    input: &Input<'_>,
    related: Option<&RelatedCall<'_>>,
    result: Result<Completion, ModelError>,
) -> (Verdict, Vec<CompletionRequest>) {
    let asked = RefCell::new(Vec::new());
    let verdict = review_with_model(config, input, related, |request| {
        asked.borrow_mut().push(request.clone());
        result
    });
    (verdict, asked.into_inner())
}

/// The planned action in the user message of a model review request.
fn planned_action(request: &CompletionRequest) -> Value {
    let user = &request.messages[1];
    assert_eq!(user.role, Role::User);
    let start = user
        .content
        .find("Planned action (JSON):\n")
        .expect("the action is in the user message")
        + "Planned action (JSON):\n".len();
    let end = user.content.rfind("\n>>> APPROVAL REQUEST END").unwrap();
    serde_json::from_str(&user.content[start..end]).expect("the action is JSON")
}

fn denial(reason: &str) -> Decision {
    Decision::Decline(Some(format!(
        "This action was rejected due to unacceptable risk.\nReason: {reason}\n{INSTRUCTIONS}"
    )))
}

fn is_mismatch(verdict: &Verdict) -> bool {
    matches!(&verdict.decision, Decision::Decline(Some(message)) if message.starts_with(MISMATCH_HEADLINE))
        && verdict.risk == Some(Risk::High)
}

// --- where the model is asked ----------------------------------------------

#[test]
fn the_model_is_asked_once_where_the_default_rule_would_decide() {
    let meta = approval(r#""tool_name":"write_file","tool_params":{"path":"notes.md"}"#);
    let (verdict, asked) = with_model(
        "{}",
        &input(Some(&meta)),
        None,
        answer(r#"{"outcome":"allow","risk_level":"medium","rationale":"An ordinary edit."}"#),
    );
    assert_eq!(asked.len(), 1);
    assert_eq!(verdict.decision, Decision::Accept("{}".to_owned()));
    assert_eq!(verdict.risk, Some(Risk::Medium));
    assert_eq!(verdict.rationale.as_deref(), Some("An ordinary edit."));
    // The reviewed call is attached for the log, as in the rule review.
    assert_eq!(
        verdict.request.as_ref().map(ReviewedCall::tool_name),
        Some("write_file")
    );
    // With `default: allow` too: the model stands in for the default rule.
    let (_, asked) = with_model(
        r#"{"default":"allow"}"#,
        &input(Some(&meta)),
        None,
        answer(r#"{"outcome":"deny"}"#),
    );
    assert_eq!(asked.len(), 1);
}

#[test]
fn a_strict_review_asks_the_model_at_the_same_point() {
    let meta = approval(r#""tool_name":"write_file","codex_strict_auto_review":true"#);
    let (verdict, asked) = with_model(
        "{}",
        &input(Some(&meta)),
        None,
        answer(r#"{"outcome":"allow"}"#),
    );
    assert_eq!(asked.len(), 1);
    assert_eq!(verdict.decision, Decision::Accept("{}".to_owned()));
    assert_eq!(verdict.risk, Some(Risk::Low));
}

#[test]
fn rules_and_catalog_hints_decide_without_the_model() {
    let meta = approval(r#""tool_name":"write_file""#);
    let view = input(Some(&meta));
    // A deny rule: Codex's denial, unasked.
    let config = r#"{"deny":[{"tool":"write_*","reason":"writes need a person"}]}"#;
    let verdict = review_with_model(config, &view, None, unasked);
    assert_eq!(verdict.decision, denial("writes need a person"));
    assert_eq!(verdict, review(config, &view));
    // An allow rule: accepted, unasked.
    let config = r#"{"allow":[{"server":"docs"}]}"#;
    let verdict = review_with_model(config, &view, None, unasked);
    assert_eq!(verdict.decision, Decision::Accept("{}".to_owned()));
    assert_eq!(verdict, review(config, &view));
    // The catalog's read-only and destructive hints do not decide: the model
    // assesses them in the planned action (Codex's model sees them too).
    for (read_only, destructive, hint) in [
        (true, false, "read_only_hint"),
        (false, true, "destructive_hint"),
    ] {
        let mut view = view;
        view.catalog = Catalog::Listed(CatalogTool {
            name: "write_file",
            title: None,
            description: None,
            annotations: Annotations {
                read_only: Some(read_only),
                destructive: Some(destructive),
                open_world: None,
            },
            meta: None,
        });
        let (verdict, asked) = with_model(
            "{}",
            &view,
            None,
            answer(r#"{"outcome":"deny","rationale":"no"}"#),
        );
        assert_eq!(asked.len(), 1, "the model decides a {hint} tool");
        assert!(
            !matches!(verdict.decision, Decision::Accept(_)),
            "{verdict:?}"
        );
        assert!(
            asked[0]
                .messages
                .iter()
                .any(|message| message.content.contains(hint)),
            "{asked:?}"
        );
    }
}

#[test]
fn routing_metadata_and_config_failures_never_ask_the_model() {
    let strict_false = approval(r#""tool_name":"write_file","codex_strict_auto_review":false"#);
    let persist = approval(r#""tool_name":"write_file","persist":"always""#);
    let not_approval = r#"{"tool_name":"write_file"}"#.to_owned();
    let wrong_kind = r#"{"codex_request_type":"approval_request","codex_approval_kind":"tool_suggestion","tool_name":"write_file"}"#.to_owned();
    let blank_name = approval(r#""tool_name":"  ""#);
    let bad_params = approval(r#""tool_name":"write_file","tool_params":[1]"#);
    let plain = approval(r#""tool_name":"write_file""#);
    let metas = [
        Some(strict_false.as_str()),
        Some(persist.as_str()),
        Some(not_approval.as_str()),
        Some(wrong_kind.as_str()),
        Some(blank_name.as_str()),
        Some(bad_params.as_str()),
        Some("[1]"),
        None,
    ];
    for meta in metas {
        let view = input(meta);
        assert_eq!(
            review_with_model("{}", &view, None, unasked),
            review("{}", &view),
            "{meta:?}"
        );
    }
    // The routing of the policy and the reviewer setting.
    for (policy, reviewer) in [
        (Policy::Never, Reviewer::AutoReview),
        (
            Policy::Granular {
                mcp_elicitations: false,
            },
            Reviewer::AutoReview,
        ),
        (Policy::Untrusted, Reviewer::AutoReview),
        (Policy::OnRequest, Reviewer::User),
    ] {
        let mut view = input(Some(&plain));
        view.policy = policy;
        view.reviewer = reviewer;
        assert_eq!(
            review_with_model("{}", &view, None, unasked),
            review("{}", &view)
        );
    }
    // URL mode, an identity the catalog refutes, a config that does not parse.
    let mut url = input(Some(&plain));
    url.mode = Mode::Url;
    let mut unlisted = input(Some(&plain));
    unlisted.catalog = Catalog::NotListed;
    for view in [url, unlisted] {
        assert_eq!(
            review_with_model("{}", &view, None, unasked),
            review("{}", &view)
        );
    }
    let view = input(Some(&plain));
    let verdict = review_with_model(r#"{"default":"maybe"}"#, &view, None, unasked);
    assert!(matches!(verdict.decision, Decision::Decline(None)));
}

// --- the verdict on the model's answer -------------------------------------

#[test]
fn a_model_deny_declines_with_codexs_denial_and_the_rationale() {
    let meta = approval(r#""tool_name":"write_file""#);
    let (verdict, _) = with_model(
        r#"{"denial_instructions":"Ask the user."}"#,
        &input(Some(&meta)),
        None,
        answer(r#"{"outcome":"deny","risk_level":"high","rationale":"Overwrites shared data."}"#),
    );
    assert_eq!(
        verdict.decision,
        Decision::Decline(Some(
            "This action was rejected due to unacceptable risk.\nReason: Overwrites shared data.\nAsk the user."
                .to_owned()
        ))
    );
    assert_eq!(verdict.risk, Some(Risk::High));
    assert_eq!(
        verdict.rationale.as_deref(),
        Some("Overwrites shared data.")
    );
    assert!(verdict.request.is_some());
}

#[test]
fn a_timeout_declines_with_codexs_timeout_message() {
    let meta = approval(r#""tool_name":"write_file""#);
    let (verdict, asked) = with_model("{}", &input(Some(&meta)), None, Err(ModelError::Timeout));
    assert_eq!(asked.len(), 1);
    assert_eq!(
        verdict.decision,
        Decision::Decline(Some(TIMEOUT_MESSAGE.to_owned()))
    );
    assert_eq!(verdict.risk, None);
}

#[test]
fn a_cancellation_cancels() {
    let meta = approval(r#""tool_name":"write_file""#);
    let (verdict, _) = with_model("{}", &input(Some(&meta)), None, Err(ModelError::Cancelled));
    assert_eq!(verdict.decision, Decision::Cancel);
}

#[test]
fn model_errors_and_unreadable_answers_decline_at_high_risk() {
    let meta = approval(r#""tool_name":"write_file""#);
    for result in [
        Err(ModelError::NotConfigured),
        Err(ModelError::RateLimited("slow down".to_owned())),
        Err(ModelError::Transient("connection reset".to_owned())),
        Err(ModelError::Rejected("bad request".to_owned())),
        answer("I think it is fine."),
    ] {
        let (verdict, asked) = with_model("{}", &input(Some(&meta)), None, result);
        assert_eq!(
            asked.len(),
            1,
            "asked once: the host retries, not the guest"
        );
        assert_eq!(verdict.risk, Some(Risk::High));
        let rationale = verdict.rationale.clone().unwrap();
        assert!(rationale.starts_with(REVIEW_FAILED_PREFIX), "{rationale}");
        assert_eq!(verdict.decision, denial(&rationale));
    }
}

// --- the related call ------------------------------------------------------

#[test]
fn a_mismatch_declines_without_asking_the_model() {
    let meta = approval(r#""tool_name":"read_file","tool_params":{"path":"notes.md"}"#);
    let view = input(Some(&meta));
    // Another tool, or other arguments, than the agent called.
    for related in [
        tool_call("write_file", Some(r#"{"path":"notes.md"}"#)),
        tool_call("read_file", Some(r#"{"path":"secrets.env"}"#)),
        tool_call("read_file", Some("{not json")),
    ] {
        let verdict = review_with_model("{}", &view, Some(&related), unasked);
        assert!(is_mismatch(&verdict), "{verdict:?}");
        assert!(verdict.request.is_some());
        // The rule guardian finds the same, whatever its default.
        for config in ["{}", r#"{"default":"allow"}"#] {
            assert_eq!(review_with_call(config, &view, Some(&related)), verdict);
        }
    }
}

#[test]
fn an_allow_listed_or_read_only_tool_that_mismatches_is_declined() {
    let meta = approval(r#""tool_name":"read_file","tool_params":{"path":"notes.md"}"#);
    let related = tool_call("delete_file", None);
    let view = input(Some(&meta));
    let config = r#"{"allow":[{"tool":"read_file"}]}"#;
    assert!(is_mismatch(&review_with_model(
        config,
        &view,
        Some(&related),
        unasked
    )));
    assert!(is_mismatch(&review_with_call(
        config,
        &view,
        Some(&related)
    )));
    // Without the related call the allow rule accepts.
    assert_eq!(
        review_with_call(config, &view, None).decision,
        Decision::Accept("{}".to_owned())
    );
    let mut read_only = view;
    read_only.catalog = Catalog::Listed(CatalogTool {
        name: "read_file",
        title: None,
        description: None,
        annotations: Annotations {
            read_only: Some(true),
            ..Annotations::default()
        },
        meta: None,
    });
    assert!(is_mismatch(&review_with_model(
        "{}",
        &read_only,
        Some(&related),
        unasked
    )));
    assert!(is_mismatch(&review_with_call(
        "{}",
        &read_only,
        Some(&related)
    )));
}

#[test]
fn deny_rules_and_destructive_hints_stand_over_a_mismatch() {
    let meta = approval(r#""tool_name":"drop_table""#);
    let related = tool_call("read_file", None);
    let view = input(Some(&meta));
    let config = r#"{"deny":[{"tool":"drop_*","reason":"no drops"}]}"#;
    let verdict = review_with_model(config, &view, Some(&related), unasked);
    assert_eq!(verdict.decision, denial("no drops"));
    assert_eq!(verdict, review(config, &view));
    // A destructive hint no longer decides with a model; the mismatch does,
    // before the model is asked.
    let mut destructive = view;
    destructive.catalog = Catalog::Listed(CatalogTool {
        name: "drop_table",
        title: None,
        description: None,
        annotations: Annotations {
            destructive: Some(true),
            ..Annotations::default()
        },
        meta: None,
    });
    let verdict = review_with_model("{}", &destructive, Some(&related), unasked);
    assert!(
        matches!(&verdict.decision, Decision::Decline(Some(message))
            if message.contains(crate::model_review::MISMATCH_HEADLINE)),
        "{verdict:?}"
    );
    // Without a model the destructive hint still declines first.
    assert_eq!(
        review_with_call("{}", &destructive, Some(&related)),
        review("{}", &destructive)
    );
}

#[test]
fn a_matching_related_call_changes_nothing_for_the_rules() {
    let meta = approval(r#""tool_name":"write_file","tool_params":{"b":1,"a":[true]}"#);
    let related = tool_call("write_file", Some(r#"{"a":[true],"b":1.0}"#));
    let view = input(Some(&meta));
    for config in [
        "{}",
        r#"{"default":"allow"}"#,
        r#"{"allow":[{"tool":"write_file"}]}"#,
        r#"{"deny":[{"tool":"write_file"}]}"#,
    ] {
        assert_eq!(
            review_with_call(config, &view, Some(&related)),
            review(config, &view),
            "{config}"
        );
    }
    // A tool-call approval asked during a resource read describes no call
    // the agent made: declined, whatever the rules say.
    let read = RelatedCall {
        kind: CallKind::ResourceRead,
        ..tool_call("file:///x", None)
    };
    let verdict = review_with_call(r#"{"default":"allow"}"#, &view, Some(&read));
    assert!(
        matches!(&verdict.decision, Decision::Decline(Some(message))
            if message.contains("the agent's request is a resource read of")),
        "{verdict:?}"
    );
}

#[test]
fn the_planned_action_has_the_related_calls_arguments() {
    // `_meta` and the call agree (numbers compare by value), so the model is
    // asked; the action shows the call's own spelling, `1.0`.
    let meta = approval(r#""tool_name":"write_file","tool_params":{"path":"notes.md","size":1}"#);
    let related = tool_call("write_file", Some(r#"{"size":1.0,"path":"notes.md"}"#));
    let (verdict, asked) = with_model(
        "{}",
        &input(Some(&meta)),
        Some(&related),
        answer(r#"{"outcome":"allow"}"#),
    );
    assert_eq!(verdict.decision, Decision::Accept("{}".to_owned()));
    assert_eq!(
        planned_action(&asked[0])["arguments"],
        json!({"path": "notes.md", "size": 1.0})
    );
    // A `_meta` that claims no arguments: the call's are shown.
    let meta = approval(r#""tool_name":"write_file""#);
    let related = tool_call(
        "write_file",
        Some(r#"{"path":"notes.md","content":"hello"}"#),
    );
    let (_, asked) = with_model(
        "{}",
        &input(Some(&meta)),
        Some(&related),
        answer(r#"{"outcome":"allow"}"#),
    );
    assert_eq!(
        planned_action(&asked[0])["arguments"],
        json!({"content": "hello", "path": "notes.md"})
    );
    // `_meta.tool_params` that leave out some of the call's arguments is a
    // mismatch, not a prompt.
    let meta = approval(r#""tool_name":"write_file","tool_params":{"path":"notes.md"}"#);
    let verdict = review_with_model("{}", &input(Some(&meta)), Some(&related), unasked);
    assert!(is_mismatch(&verdict));
}

#[test]
fn without_a_related_call_the_planned_action_has_tool_params() {
    let meta = approval(
        r#""tool_name":"write_file","tool_title":"Write file","tool_params":{"path":"notes.md","content":"hi"}"#,
    );
    let (_, asked) = with_model(
        "{}",
        &input(Some(&meta)),
        None,
        answer(r#"{"outcome":"allow"}"#),
    );
    assert_eq!(
        planned_action(&asked[0]),
        json!({
            "arguments": {"content": "hi", "path": "notes.md"},
            "server": "docs",
            "tool": "mcp_tool_call",
            "tool_name": "write_file",
            "tool_title": "Write file"
        })
    );
    // No tool_params either: `{}`.
    let meta = approval(r#""tool_name":"write_file""#);
    let (_, asked) = with_model(
        "{}",
        &input(Some(&meta)),
        None,
        answer(r#"{"outcome":"allow"}"#),
    );
    assert_eq!(planned_action(&asked[0])["arguments"], json!({}));
    // A related resource read is a mismatch: the model is not asked.
    let meta = approval(r#""tool_name":"write_file","tool_params":{"path":"a"}"#);
    let read = RelatedCall {
        kind: CallKind::ResourceRead,
        ..tool_call("file:///x", Some(r#"{"uri":"file:///x"}"#))
    };
    let verdict = review_with_model("{}", &input(Some(&meta)), Some(&read), unasked);
    assert!(
        matches!(verdict.decision, Decision::Decline(_)),
        "{verdict:?}"
    );
}

#[test]
fn related_arguments_that_are_not_json_fail_closed_unasked() {
    // `_meta` claims no arguments, so there is nothing to compare; the
    // arguments cannot be shown either.
    let meta = approval(r#""tool_name":"write_file""#);
    let related = tool_call("write_file", Some("{not json"));
    let verdict = review_with_model("{}", &input(Some(&meta)), Some(&related), unasked);
    assert_eq!(verdict.risk, Some(Risk::High));
    let rationale = verdict.rationale.clone().unwrap();
    assert!(
        rationale.starts_with(REVIEW_FAILED_PREFIX) && rationale.contains("not JSON"),
        "{rationale}"
    );
    assert_eq!(verdict.decision, denial(&rationale));
}

#[test]
fn the_request_carries_the_configs_policy_and_token_cap() {
    let meta = approval(r#""tool_name":"write_file""#);
    let (_, asked) = with_model(
        r#"{"policy":"Writes to notes are fine.","model_max_output_tokens":300}"#,
        &input(Some(&meta)),
        None,
        answer(r#"{"outcome":"allow"}"#),
    );
    let request = &asked[0];
    assert_eq!(request.max_output_tokens, Some(300));
    assert_eq!(request.messages[0].role, Role::System);
    assert!(
        request.messages[0]
            .content
            .contains("Writes to notes are fine.")
    );
    assert!(request.output_schema.is_some());
    // The planned action carries no request id.
    assert!(!request.messages[1].content.contains("mcp_elicitation:"));
}

#[test]
fn without_a_related_call_or_a_model_the_review_is_the_rule_review() {
    let metas = [
        approval(r#""tool_name":"write_file""#),
        approval(r#""tool_name":"read_file","tool_params":{"a":1}"#),
        approval(r#""tool_name":"read_file","codex_strict_auto_review":true"#),
    ];
    for meta in &metas {
        for config in [
            "{}",
            r#"{"default":"allow"}"#,
            r#"{"allow":[{"tool":"read_*"}]}"#,
        ] {
            let view = input(Some(meta));
            assert_eq!(review_with_call(config, &view, None), review(config, &view));
        }
    }
}
