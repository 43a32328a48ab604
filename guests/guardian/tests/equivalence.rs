//! The decision logic agrees with the reference (the straightforward version
//! it was optimised from, in `reference/`) on every combination of a corpus of
//! inputs: ordinary and malformed `_meta` objects, repeated keys, escapes,
//! numbers out of range, odd schemas, catalogs, policies and configurations.
//! Decision, rationale, risk and the logged tool call (Codex's planned action)
//! must all be equal.

mod reference;

use std::cell::Cell;

use gatehouse_guardian::input::{
    Annotations, Catalog, CatalogTool, Input, Mode, Policy, RequestId, Reviewer,
};
use gatehouse_guardian::{logic, model_review};

const APPROVAL: &str =
    r#""codex_request_type":"approval_request","codex_approval_kind":"mcp_tool_call""#;

fn metas() -> Vec<String> {
    let approval = |rest: &str| {
        if rest.is_empty() {
            format!("{{{APPROVAL}}}")
        } else {
            format!("{{{APPROVAL},{rest}}}")
        }
    };
    let deep = format!("{}1{}", "[".repeat(200), "]".repeat(200));
    let mut metas = vec![
        // The benchmark's elicitation.
        approval(
            r#""tool_name":"read_file","tool_title":"Read file","tool_description":"Reads a UTF-8 file.","connector_name":"Docs","tool_params":{"path":"guides/install.md","encoding":"utf-8","max_bytes":65536,"context":"quote it"}"#,
        ),
        approval(r#""tool_name":"read_file""#),
        approval(r#""tool_name":"drop_table""#),
        approval(r#""tool_name":"  read_file  ""#),
        approval(r#""tool_name":"""#),
        approval(r#""tool_name":"   ""#),
        approval(r#""tool_name":5"#),
        approval(r#""tool_name":null"#),
        approval(""),
        approval(r#""tool_name":"read\u005ffile""#),
        approval(r#""tool_name":"r\u00e9ad_file","tool_title":"T\n\"x\"""#),
        approval(r#""tool_name":"a","tool_name":"read_file""#),
        approval(r#""tool_name":"read_file","tool_name":5"#),
        approval(r#""tool_name":"read_file","tool_params":[1,2]"#),
        approval(r#""tool_name":"read_file","tool_params":"x""#),
        approval(r#""tool_name":"read_file","tool_params":null"#),
        approval(r#""tool_name":"read_file","tool_params":{}"#),
        approval(r#""tool_name":"read_file","tool_params":{"a":{"b":[1,{"c":null}]}}"#),
        approval(r#""tool_name":"read_file","tool_params":{"a":1},"tool_params":5"#),
        approval(r#""tool_name":"read_file","tool_params":5,"tool_params":{"a":1}"#),
        approval(r#""tool_name":"read_file","tool_params":{"a":1,"a":2}"#),
        approval(r#""tool_name":"read_file","persist":"always""#),
        approval(r#""tool_name":"read_file","persist":null"#),
        approval(r#""tool_name":"read_file","codex_strict_auto_review":true"#),
        approval(r#""tool_name":"read_file","codex_strict_auto_review":false"#),
        approval(r#""tool_name":"read_file","codex_strict_auto_review":"true""#),
        approval(r#""tool_name":"read_file","codex_strict_auto_review":{"a":[1.5]}"#),
        approval(r#""tool_name":"read_file","codex_strict_auto_review":null"#),
        approval(r#""tool_name":"read_file","codex_strict_auto_review":true,"persist":1"#),
        approval(
            r#""tool_name":"read_file","codex_strict_auto_review":false,"codex_strict_auto_review":true"#,
        ),
        approval(
            r#""tool_name":"read_file","connector_id":"c1","connector_name":" Docs ","connector_description":"d""#,
        ),
        approval(r#""tool_name":"read_file","connector_id":"  ","connector_name":5"#),
        approval(r#""tool_name":"read_file","tool_title":" ","tool_description":"  x  ""#),
        approval(r#""tool_name":"read_file","unknown":{"deep":[true,false,null,-1e-5]}"#),
        approval(r#""tool_name":"read_file","unknown":1e400"#),
        approval(r#""tool_name":"read_file","unknown":"\ud800""#),
        approval(r#""tool_name":"read_file","unknown":"\ud83d\ude00""#),
        approval(r#""tool_name":"read_file","unknown":"bad \q escape""#),
        approval(r#""tool_name":"read_file","unknown":12345678901234567890123"#),
        approval(r#""tool_name":"read_file","unknown":-0"#),
        approval(&format!(r#""tool_name":"read_file","unknown":{deep}"#)),
        approval(r#""tool_name":"read_file","tool_params":{"x":1e400}"#),
        approval(r#""tool_name":"read_file","_codex_apps":{"call_id":"c-1","x":[1]}"#),
        approval(r#""tool_name":"read_file","_codex_apps":{"call_id":1e400}"#),
        approval(r#""tool_name":"read_file","_codex_apps":{"call_id":"\ud800"}"#),
        approval(r#""tool_name":"read_file","_codex_apps":[{"call_id":"c-1"}]"#),
        approval(
            r#""tool_name":"read_file","codex_strict_auto_review":true,"_codex_apps":{"call_id":"c","call_id":5}"#,
        ),
        approval(r#""tool_name":"read_file","codex_strict_auto_review":false,"persist":"session""#),
        approval(r#""tool_name":"read_file","connector_id":"c1""#),
        approval(r#""tool_name":"read_file","connector_id":" c1 ""#),
        approval("\"tool_name\":\"read\u{1}file\""),
        r#"{"codex_request_type":"approval_request","codex_approval_kind":"other","tool_name":"x"}"#
            .to_owned(),
        r#"{"codex_request_type":"approval_request","tool_name":"x"}"#.to_owned(),
        r#"{"codex_request_type":"other","codex_approval_kind":"mcp_tool_call","tool_name":"x"}"#
            .to_owned(),
        r#"{"codex_request_type":5,"codex_approval_kind":"mcp_tool_call","tool_name":"x"}"#
            .to_owned(),
        r#"{"codex_request_type":"other","codex_request_type":"approval_request","codex_approval_kind":"mcp_tool_call","tool_name":"x"}"#
            .to_owned(),
        r#"{"codex_strict_auto_review":true}"#.to_owned(),
        r#"{"progress":1}"#.to_owned(),
        "{}".to_owned(),
        " { } ".to_owned(),
        "".to_owned(),
        "null".to_owned(),
        "[]".to_owned(),
        "5".to_owned(),
        "\"text\"".to_owned(),
        "{".to_owned(),
        r#"{"a":1} x"#.to_owned(),
        r#"{"a":1,}"#.to_owned(),
        r#"{"a":1}{"b":2}"#.to_owned(),
        r#"{a:1}"#.to_owned(),
        format!("{{\"a\":{deep}}}"),
    ];
    metas.push(format!(
        "{{\"x\":{}}}",
        "{\"y\":".repeat(130) + "1" + &"}".repeat(130)
    ));
    metas
}

fn schemas() -> Vec<&'static str> {
    vec![
        r#"{"type":"object","properties":{}}"#,
        r#"{}"#,
        r#"{"type":"object"}"#,
        r#"{"properties":null}"#,
        r#"{"properties":{"a":{"type":"string"}}}"#,
        r#"{"properties":5}"#,
        r#"{"properties":[]}"#,
        r#"{"properties":"x"}"#,
        r#"{"properties":{"a":1},"properties":{}}"#,
        r#"{"properties":{},"properties":{"a":1}}"#,
        r#"{"properties":1e400}"#,
        r#"{"properties":{},"x":"\ud800"}"#,
        "[]",
        "[1,{\"properties\":{\"a\":1}}]",
        "5",
        "\"x\"",
        "null",
        "true",
        "{",
        "",
    ]
}

fn catalog_metas() -> Vec<Option<&'static str>> {
    vec![
        None,
        Some(r#"{}"#),
        Some(r#"{"connector_id":"c1","connector_name":"Catalog Docs"}"#),
        Some(r#"{"connector_id":" c1 ","connector_description":"  "}"#),
        Some(r#"{"connector_id":"c2"}"#),
        Some(r#"{"connector_id":5}"#),
        Some(r#"{"connector_id":"c1","connector_id":"c2"}"#),
        Some("not json"),
        Some("[]"),
        Some(r#"{"x":1e400}"#),
    ]
}

fn catalogs<'a>(metas: &'a [Option<&'static str>]) -> Vec<Catalog<'a>> {
    let mut catalogs = vec![Catalog::Unavailable, Catalog::NotListed];
    for (index, meta) in metas.iter().enumerate() {
        catalogs.push(Catalog::Listed(CatalogTool {
            name: if index == 1 {
                "other_tool"
            } else {
                "read_file"
            },
            title: [None, Some("Read"), Some("  ")][index % 3],
            description: [None, Some(" Reads "), Some("")][index % 3],
            annotations: [
                Annotations::default(),
                Annotations {
                    read_only: Some(true),
                    destructive: None,
                    open_world: Some(false),
                },
                Annotations {
                    read_only: Some(false),
                    destructive: Some(true),
                    open_world: None,
                },
            ][index % 3],
            meta: *meta,
        }));
    }
    catalogs
}

const CONFIGS: &[&str] = &[
    "{}",
    r#"{"allow":[{"server":"docs","tool":"read_*"}],"deny":[{"tool":"drop_*"}]}"#,
    r#"{"default":"allow"}"#,
    r#"{"deny":[{"tool":"*","reason":"no"}],"denial_instructions":"Ask."}"#,
    r#"{"allow":[{"tool":"*read*"},{"server":"d?cs","tool":"*_file"}]}"#,
    r#"{"allow":[{"tool":"read_file","reason":"exact"}]}"#,
    r#"{"unknown":1}"#,
    "not json",
    r#"{"deny":5}"#,
    r#"{"allow":[{"tool":5}]}"#,
    r#"{"allow":[{"tool":"read_*","oops":1}]}"#,
    r#"{"default":"maybe"}"#,
    r#"{"deny":[{"tool":"drop_*","reason":null}],"denial_instructions":null}"#,
    r#"{"allow":[{"server":"docs","tool":"read_*","reason":"escaped "why""}]}"#,
    r#"{"deny":[{"server":"docs","tool":"read_file","reason":"r"}],"denial_instructions":"Stop.
Ask."}"#,
    "null",
    "[]",
];

fn check(config: &str, input: &Input<'_>) {
    let expected = reference::review(config, input);
    let actual = logic::review(config, input);
    let what = || format!("config {config}, input {input:?}");
    assert_eq!(actual.decision, expected.decision, "{}", what());
    assert_eq!(actual.rationale, expected.rationale, "{}", what());
    assert_eq!(actual.risk, expected.risk, "{}", what());
    // The logged description: Codex's planned action, as JSON.
    let action = actual.request.as_ref().map(|call| {
        let text = model_review::planned_action_for(call, None).expect("a planned action");
        serde_json::from_str::<serde_json::Value>(&text).expect("JSON")
    });
    assert_eq!(action, expected.request, "{}", what());

    // The component's review, which keeps the call only for its debug log:
    // the same decision, no call kept, and the question asked exactly when
    // there was a call to keep.
    ASKED.with(|asked| asked.set(0));
    let lean = logic::review_with_call_keeping(config, input, None, keep_nothing);
    assert_eq!(lean.decision, actual.decision, "{}", what());
    assert_eq!(lean.rationale, actual.rationale, "{}", what());
    assert_eq!(lean.risk, actual.risk, "{}", what());
    assert_eq!(lean.request, None, "{}", what());
    let asked = ASKED.with(Cell::get);
    assert_eq!(asked, usize::from(actual.request.is_some()), "{}", what());
}

thread_local! {
    /// How often [`keep_nothing`] was asked on this thread.
    static ASKED: Cell<usize> = const { Cell::new(0) };
}

/// A `keep_call` that counts the question and keeps nothing.
fn keep_nothing() -> bool {
    ASKED.with(|asked| asked.set(asked.get() + 1));
    false
}

fn base<'a>(meta: Option<&'a str>, mode: Mode<'a>) -> Input<'a> {
    Input {
        mode,
        meta,
        server_name: "docs",
        request_id: RequestId::Number(7),
        policy: Policy::OnRequest,
        reviewer: Reviewer::AutoReview,
        auto_approve_prompts: false,
        catalog: Catalog::Unavailable,
    }
}

#[test]
fn metas_schemas_catalogs_and_configs() {
    let metas = metas();
    let catalog_metas = catalog_metas();
    let catalogs = catalogs(&catalog_metas);
    let schemas = schemas();
    let mut checked = 0;
    for meta in metas.iter().map(|meta| Some(meta.as_str())).chain([None]) {
        for schema in &schemas {
            for catalog in &catalogs {
                for config in CONFIGS {
                    let mut input = base(
                        meta,
                        Mode::Form {
                            requested_schema: schema,
                        },
                    );
                    input.catalog = *catalog;
                    check(config, &input);
                    checked += 1;
                }
            }
        }
    }
    assert!(checked > 10_000);
}

#[test]
fn metas_policies_reviewers_and_modes() {
    let metas = metas();
    let policies = [
        Policy::Untrusted,
        Policy::OnRequest,
        Policy::Never,
        Policy::Granular {
            mcp_elicitations: true,
        },
        Policy::Granular {
            mcp_elicitations: false,
        },
    ];
    for meta in metas.iter().map(|meta| Some(meta.as_str())).chain([None]) {
        for mode in [
            Mode::Url,
            Mode::Form {
                requested_schema: r#"{"type":"object","properties":{}}"#,
            },
            Mode::Form {
                requested_schema: r#"{"properties":{"a":{}}}"#,
            },
        ] {
            for policy in policies {
                for reviewer in [Reviewer::User, Reviewer::AutoReview] {
                    for auto_approve_prompts in [false, true] {
                        for request_id in [RequestId::Number(-3), RequestId::Text("req:1")] {
                            let mut input = base(meta, mode);
                            input.policy = policy;
                            input.reviewer = reviewer;
                            input.auto_approve_prompts = auto_approve_prompts;
                            input.request_id = request_id;
                            input.server_name = "d0cs";
                            check(CONFIGS[1], &input);
                            check(CONFIGS[4], &input);
                        }
                    }
                }
            }
        }
    }
}
