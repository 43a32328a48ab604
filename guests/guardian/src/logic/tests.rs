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
    let strict_null = approval(r#""tool_name":"write_file","codex_strict_auto_review":null"#);
    let strict_persist =
        approval(r#""tool_name":"write_file","codex_strict_auto_review":true,"persist":"always""#);
    let not_approval = r#"{"tool_name":"write_file"}"#.to_owned();
    let wrong_kind = r#"{"codex_request_type":"approval_request","codex_approval_kind":"tool_suggestion","tool_name":"write_file"}"#.to_owned();
    let blank_name = approval(r#""tool_name":"  ""#);
    let bad_params = approval(r#""tool_name":"write_file","tool_params":[1]"#);
    let plain = approval(r#""tool_name":"write_file""#);
    let metas = [
        Some(strict_null.as_str()),
        Some(strict_persist.as_str()),
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
    // A config that does not parse: the review failed, Codex's denial says
    // so (with the default instructions), at high risk.
    let view = input(Some(&plain));
    let verdict = review_with_model(r#"{"default":"maybe"}"#, &view, None, unasked);
    let rationale = verdict.rationale.clone().unwrap();
    assert!(
        rationale.starts_with(REVIEW_FAILED_PREFIX)
            && rationale.contains("invalid guardian config"),
        "{rationale}"
    );
    assert_eq!(verdict.decision, denial(&rationale));
    assert_eq!(verdict.risk, Some(Risk::High));
    assert_eq!(verdict, review(r#"{"default":"maybe"}"#, &view));
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
    let related = tool_call("write_file", Some(r#"{"a":[true],"b":1}"#));
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
    // `_meta` and the call agree (up to key order), so the model is asked;
    // the action shows the call's own text, `1.0`.
    let meta = approval(r#""tool_name":"write_file","tool_params":{"path":"notes.md","size":1.0}"#);
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

// --- the strict marker, persist and failed reviews (seed 696-764) ----------

fn is_strict_decline(verdict: &Verdict) -> bool {
    verdict.decision == Decision::Decline(Some(STRICT_DECLINE_MESSAGE.to_owned()))
}

#[test]
fn a_false_marker_is_no_strict_review_and_only_true_is_one() {
    let with_false = approval(r#""tool_name":"write_file","codex_strict_auto_review":false"#);
    let without = approval(r#""tool_name":"write_file""#);
    // `false` reviews exactly as no marker does, whatever the routing says.
    for (policy, reviewer) in [
        (Policy::OnRequest, Reviewer::AutoReview),
        (Policy::OnRequest, Reviewer::User),
        (Policy::Never, Reviewer::AutoReview),
        (Policy::Untrusted, Reviewer::AutoReview),
    ] {
        for config in ["{}", r#"{"default":"allow"}"#, r#"{"default":"maybe"}"#] {
            let mut marked = input(Some(&with_false));
            let mut unmarked = input(Some(&without));
            for view in [&mut marked, &mut unmarked] {
                view.policy = policy;
                view.reviewer = reviewer;
            }
            assert_eq!(review(config, &marked), review(config, &unmarked));
        }
    }
    // With the user as reviewer, `false` goes to the person and `true` is the
    // strict decline.
    let mut to_person = input(Some(&with_false));
    to_person.reviewer = Reviewer::User;
    assert_eq!(review("{}", &to_person).decision, Decision::Defer);
    let strict = approval(r#""tool_name":"write_file","codex_strict_auto_review":true"#);
    let mut strict_user = input(Some(&strict));
    strict_user.reviewer = Reviewer::User;
    assert!(is_strict_decline(&review("{}", &strict_user)));
    // Every other value fails closed, unreviewed.
    for marker in ["null", r#""true""#, r#""false""#, "1", "0", "{}", "[true]"] {
        let meta = approval(&format!(
            r#""tool_name":"write_file","codex_strict_auto_review":{marker}"#
        ));
        let verdict =
            review_with_model(r#"{"default":"allow"}"#, &input(Some(&meta)), None, unasked);
        assert!(is_strict_decline(&verdict), "{marker}: {verdict:?}");
        assert!(verdict.request.is_none());
    }
}

#[test]
fn a_failed_review_is_codexs_review_failed_denial_never_the_strict_text() {
    for marker in [
        r#","codex_strict_auto_review":false"#,
        "",
        r#","codex_strict_auto_review":true"#,
    ] {
        let meta = approval(&format!(r#""tool_name":"write_file"{marker}"#));
        let view = input(Some(&meta));
        // The model fails.
        let (verdict, asked) = with_model(
            "{}",
            &view,
            None,
            Err(ModelError::Transient("connection reset".to_owned())),
        );
        assert_eq!(asked.len(), 1, "{marker}");
        let rationale = verdict.rationale.clone().unwrap();
        assert_eq!(
            rationale,
            format!("{REVIEW_FAILED_PREFIX}the model could not be reached")
        );
        assert_eq!(verdict.decision, denial(&rationale), "{marker}");
        // The config does not parse: the same denial, model or not.
        for verdict in [
            review(r#"{"default":"maybe"}"#, &view),
            review_with_model(r#"{"default":"maybe"}"#, &view, None, unasked),
        ] {
            let rationale = verdict.rationale.clone().unwrap();
            assert!(
                rationale.starts_with(&format!("{REVIEW_FAILED_PREFIX}invalid guardian config")),
                "{rationale}"
            );
            assert_eq!(verdict.decision, denial(&rationale), "{marker}");
            assert_eq!(verdict.risk, Some(Risk::High));
            assert!(verdict.request.is_some());
        }
    }
}

#[test]
fn persist_matters_only_to_strict_review() {
    let plain = approval(r#""tool_name":"write_file""#);
    for value in [r#""always""#, r#""session""#, "null", "false"] {
        let persist = approval(&format!(r#""tool_name":"write_file","persist":{value}"#));
        for config in [
            "{}",
            r#"{"default":"allow"}"#,
            r#"{"deny":[{"tool":"write_*"}]}"#,
        ] {
            assert_eq!(
                review(config, &input(Some(&persist))),
                review(config, &input(Some(&plain))),
                "{value} {config}"
            );
        }
        // The model reviews it.
        let (verdict, asked) = with_model(
            "{}",
            &input(Some(&persist)),
            None,
            answer(r#"{"outcome":"allow"}"#),
        );
        assert_eq!(asked.len(), 1);
        assert_eq!(verdict.decision, Decision::Accept("{}".to_owned()));
        // Strict review does not take it, whatever its value.
        let strict = approval(&format!(
            r#""tool_name":"write_file","codex_strict_auto_review":true,"persist":{value}"#
        ));
        let verdict = review_with_model(
            r#"{"default":"allow"}"#,
            &input(Some(&strict)),
            None,
            unasked,
        );
        assert!(is_strict_decline(&verdict), "{value}: {verdict:?}");
    }
}

// --- identity (seed 703-740, 951-969) --------------------------------------

fn listed(name: &'static str, meta: Option<&'static str>) -> Catalog<'static> {
    Catalog::Listed(CatalogTool {
        name,
        title: None,
        description: None,
        annotations: Annotations::default(),
        meta,
    })
}

#[test]
fn catalog_identity_is_compared_on_the_raw_claims() {
    const ALLOW: &str = r#"{"allow":[{"tool":"read_file"}]}"#;
    let identity = |verdict: &Verdict| {
        verdict.decision == Decision::Decline(None)
            && verdict.rationale.as_deref() == Some("identity does not match the tool catalog")
    };
    let accepted = |verdict: &Verdict| verdict.decision == Decision::Accept("{}".to_owned());
    // (the tool_name and connector_id members, the catalog's `_meta`, bound?)
    for (claims, catalog_meta, binds) in [
        (r#""tool_name":"read_file""#, None, true),
        (r#""tool_name":" read_file ""#, None, false),
        (r#""tool_name":"read_file ""#, None, false),
        (
            r#""tool_name":"read_file","connector_id":"drive""#,
            Some(r#"{"connector_id":"drive"}"#),
            true,
        ),
        (
            r#""tool_name":"read_file","connector_id":"drive""#,
            Some(r#"{"connector_id":" drive "}"#),
            false,
        ),
        (
            r#""tool_name":"read_file","connector_id":" drive ""#,
            Some(r#"{"connector_id":"drive"}"#),
            false,
        ),
        (
            r#""tool_name":"read_file","connector_id":"  ""#,
            None,
            false,
        ),
        (
            r#""tool_name":"read_file","connector_id":"""#,
            Some("{}"),
            false,
        ),
        // A non-string claims nothing, as Codex reads it.
        (r#""tool_name":"read_file","connector_id":5"#, None, true),
        (
            r#""tool_name":"read_file""#,
            Some(r#"{"connector_id":5}"#),
            true,
        ),
    ] {
        let meta = approval(claims);
        for strict in [false, true] {
            let meta = if strict {
                meta.replacen('{', r#"{"codex_strict_auto_review":true,"#, 1)
            } else {
                meta.clone()
            };
            let mut view = input(Some(&meta));
            view.catalog = listed("read_file", catalog_meta);
            let verdict = review(ALLOW, &view);
            let expected = match (binds, strict) {
                (true, _) => accepted(&verdict),
                (false, false) => identity(&verdict),
                (false, true) => {
                    is_strict_decline(&verdict)
                        && verdict.rationale.as_deref()
                            == Some("identity does not match the tool catalog")
                }
            };
            assert!(
                expected,
                "{claims} / {catalog_meta:?} (strict {strict}): {verdict:?}"
            );
        }
    }
    // Without a catalog there is nothing to bind: the trimmed name is
    // reviewed (Codex trims what it reviews).
    let meta = approval(r#""tool_name":"  read_file  ""#);
    let verdict = review(ALLOW, &input(Some(&meta)));
    assert!(accepted(&verdict), "{verdict:?}");
    assert_eq!(
        verdict.request.as_ref().map(ReviewedCall::tool_name),
        Some("read_file")
    );
}

/// The `codex_apps` server's catalog entry for `send_email`, by the `gmail`
/// connector.
const APPS_CATALOG_META: &str = r#"{"connector_id":"gmail","connector_name":"Gmail"}"#;

/// A strict approval request of the `codex_apps` server with these members
/// after the opt-in and the marker.
fn apps_meta(rest: &str) -> String {
    approval(&format!(r#""codex_strict_auto_review":true,{rest}"#))
}

/// The usual claims: `send_email` by `gmail`, naming the call `7`.
const APPS_CLAIMS: &str =
    r#""tool_name":"send_email","connector_id":"gmail","_codex_apps":{"call_id":"7"}"#;

fn apps_input(meta: &str) -> Input<'_> {
    Input {
        server_name: CODEX_APPS_SERVER,
        catalog: listed("send_email", Some(APPS_CATALOG_META)),
        ..input(Some(meta))
    }
}

fn apps_call(id: Option<&'static str>) -> RelatedCall<'static> {
    RelatedCall {
        qualified_name: "codex_apps__send_email",
        id,
        ..tool_call("send_email", None)
    }
}

const SEND_ALLOWED: &str = r#"{"allow":[{"tool":"send_email"}]}"#;

#[test]
fn a_strict_codex_apps_review_that_names_the_agents_call_is_reviewed() {
    let meta = apps_meta(APPS_CLAIMS);
    let view = apps_input(&meta);
    // An integer id is named by its digits, a string id by its string.
    for id in ["7", r#""7""#] {
        let call = apps_call(Some(id));
        let verdict = review_with_call(SEND_ALLOWED, &view, Some(&call));
        assert_eq!(verdict.decision, Decision::Accept("{}".to_owned()), "{id}");
        assert_eq!(
            verdict
                .request
                .as_ref()
                .and_then(ReviewedCall::connector_name),
            Some("Gmail")
        );
        // Where the rules leave it open, the model decides.
        let (verdict, asked) =
            with_model("{}", &view, Some(&call), answer(r#"{"outcome":"allow"}"#));
        assert_eq!(asked.len(), 1);
        assert_eq!(verdict.decision, Decision::Accept("{}".to_owned()));
    }
    // A call id that is any other string names a string id exactly.
    let meta = apps_meta(
        r#""tool_name":"send_email","connector_id":"gmail","_codex_apps":{"call_id":"call_9 x"}"#,
    );
    let call = apps_call(Some(r#""call_9 x""#));
    assert_eq!(
        review_with_call(SEND_ALLOWED, &apps_input(&meta), Some(&call)).decision,
        Decision::Accept("{}".to_owned())
    );
    // No connector on either side binds too.
    let meta = apps_meta(r#""tool_name":"send_email","_codex_apps":{"call_id":"7"}"#);
    let mut view = apps_input(&meta);
    view.catalog = listed("send_email", None);
    assert_eq!(
        review_with_call(SEND_ALLOWED, &view, Some(&apps_call(Some("7")))).decision,
        Decision::Accept("{}".to_owned())
    );
}

#[test]
fn a_strict_codex_apps_review_that_does_not_name_the_agents_call_is_the_strict_decline() {
    let resource_read = RelatedCall {
        kind: CallKind::ResourceRead,
        ..apps_call(Some("7"))
    };
    let calls = [
        Some(apps_call(Some("7"))),
        Some(apps_call(Some("8"))),
        Some(apps_call(None)),
        Some(apps_call(Some("7.0"))),
        Some(apps_call(Some(r#""07""#))),
        Some(apps_call(Some("not json"))),
        Some(resource_read),
        None,
    ];
    // (claims, catalog, which related calls it names)
    let bound = [true, false, false, false, false, false, false, false];
    let none = [false; 8];
    let good = listed("send_email", Some(APPS_CATALOG_META));
    let cases: Vec<(&str, Catalog<'_>, [bool; 8])> = vec![
        (APPS_CLAIMS, good, bound),
        // No call id, or one that is not a string in an object.
        (
            r#""tool_name":"send_email","connector_id":"gmail""#,
            good,
            none,
        ),
        (
            r#""tool_name":"send_email","connector_id":"gmail","_codex_apps":{"call_id":7}"#,
            good,
            none,
        ),
        (
            r#""tool_name":"send_email","connector_id":"gmail","_codex_apps":"7""#,
            good,
            none,
        ),
        (
            r#""tool_name":"send_email","connector_id":"gmail","_codex_apps":{"call_id":" 7"}"#,
            good,
            none,
        ),
        // The tool is not exactly the agent's.
        (
            r#""tool_name":" send_email","connector_id":"gmail","_codex_apps":{"call_id":"7"}"#,
            good,
            none,
        ),
        (
            r#""tool_name":"read_inbox","connector_id":"gmail","_codex_apps":{"call_id":"7"}"#,
            good,
            none,
        ),
        // The connector is not exactly the registered tool's.
        (
            r#""tool_name":"send_email","connector_id":" gmail","_codex_apps":{"call_id":"7"}"#,
            good,
            none,
        ),
        (
            r#""tool_name":"send_email","connector_id":"drive","_codex_apps":{"call_id":"7"}"#,
            good,
            none,
        ),
        (
            r#""tool_name":"send_email","_codex_apps":{"call_id":"7"}"#,
            good,
            none,
        ),
        // The registered tool's connector is unknown.
        (APPS_CLAIMS, Catalog::Unavailable, none),
        (APPS_CLAIMS, Catalog::NotListed, none),
        (APPS_CLAIMS, listed("send_email", Some("[]")), none),
    ];
    for (claims, catalog, names) in cases {
        let meta = apps_meta(claims);
        let mut view = apps_input(&meta);
        view.catalog = catalog;
        for (call, named) in calls.iter().zip(names) {
            let verdict = review_with_model(SEND_ALLOWED, &view, call.as_ref(), unasked);
            assert_eq!(
                verdict,
                review_with_call(SEND_ALLOWED, &view, call.as_ref())
            );
            if named {
                assert_eq!(verdict.decision, Decision::Accept("{}".to_owned()));
            } else {
                assert!(
                    is_strict_decline(&verdict) && verdict.request.is_none(),
                    "{claims} / {catalog:?} / {call:?}: {verdict:?}"
                );
            }
        }
    }
}

#[test]
fn codex_apps_call_ids_are_read_only_for_codex_apps_under_strict_review() {
    // `codex_apps` outside strict review (no marker, or `false`): no call id,
    // no related call, reviewed.
    for marker in ["", r#""codex_strict_auto_review":false,"#] {
        let meta = approval(&format!(
            r#"{marker}"tool_name":"send_email","connector_id":"gmail""#
        ));
        let verdict = review_with_call(SEND_ALLOWED, &apps_input(&meta), None);
        assert_eq!(
            verdict.decision,
            Decision::Accept("{}".to_owned()),
            "{marker}"
        );
    }
    // Another server under strict review: the call id is not read, whether
    // absent or naming another call.
    for claims in [
        r#""tool_name":"send_email""#,
        r#""tool_name":"send_email","_codex_apps":{"call_id":"999"}"#,
    ] {
        let meta = apps_meta(claims);
        let view = input(Some(&meta));
        for call in [None, Some(apps_call(Some("7")))] {
            let verdict = review_with_call(SEND_ALLOWED, &view, call.as_ref());
            assert_eq!(
                verdict.decision,
                Decision::Accept("{}".to_owned()),
                "{claims}"
            );
        }
    }
}

#[test]
fn a_codex_apps_call_that_names_the_agents_call_still_gets_the_related_call_check() {
    let meta = apps_meta(&format!(
        r#"{APPS_CLAIMS},"tool_params":{{"to":"bob@example.com"}}"#
    ));
    let call = RelatedCall {
        arguments: Some(r#"{"to":"eve@example.com"}"#),
        ..apps_call(Some("7"))
    };
    let verdict = review_with_model(SEND_ALLOWED, &apps_input(&meta), Some(&call), unasked);
    assert!(is_mismatch(&verdict), "{verdict:?}");
}

// --- the reviewed call as Codex's planned action ---------------------------

#[test]
fn the_reviewed_call_is_described_as_codexs_planned_action() {
    let meta = approval(
        r#""tool_name":"read_file","tool_title":" Shown? ","connector_id":"drive","connector_name":"Claimed","tool_params":{"path":"a.md"}"#,
    );
    let mut view = input(Some(&meta));
    view.catalog = Catalog::Listed(CatalogTool {
        name: "read_file",
        title: Some("Read file"),
        description: Some("  "),
        annotations: Annotations {
            read_only: Some(true),
            destructive: None,
            open_world: Some(false),
        },
        meta: Some(r#"{"connector_id":"drive","connector_name":"Drive"}"#),
    });
    let verdict = review("{}", &view);
    let call = verdict.request.as_ref().expect("a reviewed call");
    let text = model_review::planned_action_for(call, None).unwrap();
    let action: Value = serde_json::from_str(&text).unwrap();
    // `tool`, no id, no nulls for what is absent, snake_case hints, the
    // catalog's values over the server's claims.
    assert_eq!(
        action,
        json!({
            "tool": "mcp_tool_call",
            "server": "docs",
            "tool_name": "read_file",
            "arguments": {"path": "a.md"},
            "connector_id": "drive",
            "connector_name": "Drive",
            "tool_title": "Read file",
            "annotations": {"open_world_hint": false, "read_only_hint": true}
        })
    );
    for absent in ["\"id\"", "null", "mcp_elicitation:", "Hint\""] {
        assert!(!text.contains(absent), "{absent} in {text}");
    }
    // With a related call, its arguments, as the model is shown.
    let call_meta = approval(r#""tool_name":"read_file","connector_id":"drive""#);
    let mut view = input(Some(&call_meta));
    view.catalog = listed("read_file", Some(r#"{"connector_id":"drive"}"#));
    let related = tool_call("read_file", Some(r#"{"path":"b.md"}"#));
    let verdict = review_with_call(r#"{"allow":[{"tool":"read_file"}]}"#, &view, Some(&related));
    let text = model_review::planned_action_for(verdict.request.as_ref().unwrap(), Some(&related))
        .unwrap();
    let action: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(action["arguments"], json!({"path": "b.md"}));
}
