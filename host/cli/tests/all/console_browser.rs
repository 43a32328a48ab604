//! The approvals console in a real browser (Chromium over WebDriver): a
//! person logs in, sees a deferred question appear while the agent's call
//! waits, fills the form rendered from the server's schema, and the server
//! gets exactly that; hostile text from a server stays text.

use std::sync::Arc;

use rmcp::ServiceExt as _;
use serde_json::{Value, json};

use crate::browser::{Browser, Driver};
use crate::console_support::{self, ConsoleProcess, TOKEN, elicit, raw_answer};
use crate::http_gateway::HttpGateway;
use crate::waiting::wait_for;

/// A form with every kind of field the MCP restricted schema has.
fn every_field() -> Value {
    json!({
        "message": "Fill in the release form",
        "requestedSchema": {
            "type": "object",
            "properties": {
                "owner": {"type": "string", "title": "Owner", "minLength": 2, "maxLength": 20,
                          "description": "Who owns the release"},
                "email": {"type": "string", "format": "email", "title": "Email"},
                "site": {"type": "string", "format": "uri", "title": "Site"},
                "day": {"type": "string", "format": "date", "title": "Day"},
                "at": {"type": "string", "format": "date-time", "title": "At"},
                "replicas": {"type": "integer", "title": "Replicas", "minimum": 1, "maximum": 9, "default": 3},
                "ratio": {"type": "number", "title": "Ratio", "minimum": 0, "maximum": 1},
                "notify": {"type": "boolean", "title": "Notify", "default": true},
                "region": {"type": "string", "title": "Region", "enum": ["eu", "us"],
                           "enumNames": ["Europe", "United States"]},
                "tier": {"type": "string", "title": "Tier",
                         "oneOf": [{"const": "gold", "title": "Gold"}, {"const": "free", "title": "Free"}]},
                "checks": {"type": "array", "title": "Checks", "minItems": 1,
                           "items": {"anyOf": [{"const": "lint", "title": "Lint"},
                                               {"const": "test", "title": "Tests"}]}}
            },
            "required": ["owner", "email", "replicas", "region", "checks"]
        }
    })
}

/// The value of `name`'s field in the question card, set by script (the
/// date pickers take no typing in headless Chromium).
async fn set(browser: &Browser, name: &str, value: &str) {
    browser
        .run(&format!(
            "const f = document.querySelector('article.question [name=\"{name}\"]'); f.value = {value:?}; return true;"
        ))
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_person_answers_in_the_browser_while_the_agent_waits() {
    let Some(driver) = Driver::start().await else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let config = console_support::config(dir.path(), "person = \"console\"");
    let console = ConsoleProcess::start(&config);
    let person = driver.browser().await;
    // Without the token there is no way in.
    person.goto(&format!("{}/", console.base)).await;
    let field = person.wait_for("#token").await;
    person.screenshot("console-login").await;
    field
        .send_keys("not-the-console-token\u{E007}")
        .await
        .expect("type");
    let problem = person.wait_for(".problem").await;
    assert_eq!(
        problem.text().await.expect("text"),
        "That is not the console's token."
    );
    person.login(&console.base, TOKEN).await;
    let watcher = driver.browser().await;
    watcher.login(&console.base, TOKEN).await;

    let gateway = HttpGateway::start(&config);
    let client = Arc::new(().serve(gateway.transport()).await.expect("initialize"));
    let call = elicit(&client, every_field());
    // It appears live, without a reload, in both (how long after the
    // console took it is printed, not asserted: a measurement).
    let card = person.wait_for("article.question").await;
    watcher.wait_for("article.question").await;
    for (who, browser) in [("person", &person), ("watcher", &watcher)] {
        let shown = browser
            .run("return document.querySelector('article.question').dataset.shownAfterMs;")
            .await;
        eprintln!(
            "console: the question was on the {who}'s page {shown} ms after the console took it"
        );
    }
    let text = card.text().await.expect("text");
    for shown in [
        "Fill in the release form",
        "demo__elicit_raw",
        "gatehouse_guardian",
        "defer",
        "Europe",
        "Gold",
        "Tests",
        "Who owns the release",
    ] {
        assert!(text.contains(shown), "{shown} in {text}");
    }
    person.screenshot("console-question").await;
    // Invalid input is refused in the page: nothing is sent.
    set(&person, "owner", "A").await;
    set(&person, "email", "not an email").await;
    person
        .wait_for("article.question button.accept")
        .await
        .click()
        .await
        .expect("click");
    assert_eq!(
        person
            .run("return document.querySelector('article.question form').checkValidity();")
            .await,
        Value::Bool(false)
    );
    assert!(!call.is_finished());
    // Filled in properly, by keyboard and script as a person would.
    set(&person, "owner", "").await;
    let owner = person
        .wait_for("article.question input[name=\"owner\"]")
        .await;
    owner.send_keys("Ada").await.expect("type");
    set(&person, "email", "ada@example.com").await;
    set(&person, "site", "https://example.com/release").await;
    set(&person, "day", "2026-12-05").await;
    set(&person, "at", "2026-12-05T10:30").await;
    set(&person, "ratio", "0.5").await;
    person
        .run("const s = document.querySelector('article.question select[name=\"region\"]'); s.value = '1'; return true;")
        .await;
    person
        .run("document.querySelector('article.question select[name=\"tier\"]').value = '0'; return true;")
        .await;
    person
        .run("document.querySelector('article.question input[name=\"checks\"][value=\"test\"]').click(); return true;")
        .await;
    // Enter in a field submits the form.
    owner.send_keys("\u{E007}").await.expect("enter");
    let result = call.await.expect("the call ends");
    let answer = raw_answer(&result);
    assert_eq!(answer["action"], "accept", "{result}");
    let content = &answer["content"];
    assert_eq!(content["owner"], "Ada", "{result}");
    assert_eq!(content["email"], "ada@example.com");
    assert_eq!(content["site"], "https://example.com/release");
    assert_eq!(content["day"], "2026-12-05");
    assert!(
        content["at"]
            .as_str()
            .is_some_and(|at| at.starts_with("2026-12-05T") && at.ends_with('Z')),
        "{result}"
    );
    assert_eq!(content["replicas"], 3, "the default");
    assert_eq!(content["ratio"], 0.5);
    assert_eq!(content["notify"], true, "the default");
    assert_eq!(content["region"], "us");
    assert_eq!(content["tier"], "gold");
    assert_eq!(content["checks"], json!(["test"]));
    // The audit line: the person, through the console.
    wait_for("the audit line", || {
        !console_support::decisions(dir.path()).is_empty()
    })
    .await;
    let line = &console_support::decisions(dir.path())[0];
    assert_eq!(line["decided_by"], "person", "{line}");
    assert_eq!(line["person"]["channel"], "console", "{line}");
    // The other browser sees who answered.
    let session = line["person"]["session"]
        .as_str()
        .expect("session")
        .to_owned();
    watcher
        .until(
            "the watcher sees the answer",
            &format!(
                "return document.getElementById('closed').textContent.includes('accept by console session {session}') && !document.querySelector('article.question');"
            ),
        )
        .await;
    person.screenshot("console-answered").await;
    // The instances page: the chain and the backend, and a reload by
    // keyboard (the button focused, then Enter).
    person.goto(&format!("{}/instances", console.base)).await;
    let modules = person.wait_for(".instance table").await;
    assert!(
        modules
            .text()
            .await
            .expect("text")
            .contains("gatehouse_guardian")
    );
    person
        .run("document.getElementById('reload-all').focus(); return true;")
        .await;
    person
        .client
        .active_element()
        .await
        .expect("focused")
        .send_keys("\u{E007}")
        .await
        .expect("enter");
    person
        .until(
            "the instance answers the reload",
            "return [...document.querySelectorAll('#reloads li')].some(li => li.textContent.includes(': ok'));",
        )
        .await;
    person.screenshot("console-instances").await;
    // The audit page lists it.
    person.goto(&format!("{}/audit", console.base)).await;
    let row = person.wait_for("#audit-records tbody tr").await;
    assert!(row.text().await.expect("text").contains("person"));
    person.screenshot("console-audit").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_text_stays_text_and_decline_and_cancel_reach_the_server() {
    let Some(driver) = Driver::start().await else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let config = console_support::config(dir.path(), "person = \"console\"");
    let console = ConsoleProcess::start(&config);
    let person = driver.browser().await;
    person.login(&console.base, TOKEN).await;
    let gateway = HttpGateway::start(&config);
    let client = Arc::new(().serve(gateway.transport()).await.expect("initialize"));
    let hostile = "<script>window.__pwned=1</script><img src=x onerror=\"window.__pwned=2\">\u{202E}gnp.exe\rForged line";
    let form = json!({
        "message": hostile,
        "requestedSchema": {"type": "object", "properties": {
            "pick": {"type": "string", "title": "<img src=x onerror=\"window.__pwned=3\">",
                     "enum": ["a"], "enumNames": ["<b onclick=\"window.__pwned=4\">bold</b>"]}}}
    });
    let declined = elicit(&client, form);
    let card = person.wait_for("article.question").await;
    let message = person.wait_for("article.question .message").await;
    let shown = message.text().await.expect("text");
    assert!(
        shown.contains("<script>window.__pwned=1</script>"),
        "{shown}"
    );
    assert!(
        shown.contains("\\u{202E}gnp.exe"),
        "the override is shown, not obeyed: {shown}"
    );
    assert!(shown.contains("\\u{000D}Forged line"), "{shown}");
    assert!(card.text().await.expect("text").contains("<b onclick="));
    // No element came from the server's text, and nothing of it ran.
    assert_eq!(
        person
            .run("return document.querySelectorAll('article.question script, article.question img, article.question b').length;")
            .await,
        json!(0)
    );
    person.screenshot("console-hostile").await;
    // Declined by keyboard alone: from the field, Tab past Accept to
    // Decline, then Enter.
    person
        .run("document.querySelector('article.question select').focus(); return true;")
        .await;
    for key in ["\u{E004}", "\u{E004}"] {
        let focused = person.client.active_element().await.expect("focused");
        focused.send_keys(key).await.expect("tab");
    }
    assert_eq!(
        person.run("return document.activeElement.className;").await,
        json!("decline")
    );
    let focused = person.client.active_element().await.expect("focused");
    focused.send_keys("\u{E007}").await.expect("enter");
    let result = declined.await.expect("the call ends");
    assert_eq!(raw_answer(&result)["action"], "decline", "{result}");
    // A URL: shown with its real host, never opened or linked.
    let url = json!({
        "mode": "url",
        "message": "Sign in to your bank",
        "url": "https://bank.example@evil.test/login",
        "elicitationId": "e1",
    });
    let cancelled = elicit(&client, url);
    let host = person.wait_for("article.question .host").await;
    assert_eq!(host.text().await.expect("text"), "evil.test");
    assert_eq!(
        person
            .run("return document.querySelectorAll('article.question a').length;")
            .await,
        json!(0)
    );
    person
        .wait_for("article.question button.cancel")
        .await
        .click()
        .await
        .expect("cancel");
    let result = cancelled.await.expect("the call ends");
    assert!(result.contains("cancel"), "{result}");
    assert_eq!(
        person.run("return window.__pwned === undefined;").await,
        Value::Bool(true),
        "no script from the server ran"
    );
}
