//! The approvals console in a real browser (Chromium over WebDriver): a
//! person logs in, sees a deferred question appear while the agent's call
//! waits, fills the form rendered from the server's schema, and the server
//! gets exactly that; hostile text from a server stays text.

use std::sync::Arc;

use rmcp::ServiceExt as _;
use serde_json::{Value, json};

use crate::browser::{Browser, Driver};
use crate::console_support::{self, ConsoleProcess, TOKEN, elicit, name_form, raw_answer};
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
    // The page redraws an instance's section at each of its changes, so an
    // element found once may be gone by the time it is read: ask the page.
    person
        .until(
            "the instance's chain lists the guardian",
            "return [...document.querySelectorAll('.instance table')].some(t => t.textContent.includes('gatehouse_guardian'));",
        )
        .await;
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
    person
        .until(
            "the audit page lists the person's answer",
            "return [...document.querySelectorAll('#audit-records tbody tr')].some(tr => tr.textContent.includes('person'));",
        )
        .await;
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
    // A schema with options the page cannot take at their word (a bare
    // string, a number, null; rmcp's typed parse may drop them before
    // gatehouse sees them): the question is shown and can be answered.
    let odd = json!({
        "message": "odd options",
        "requestedSchema": {"type": "object", "properties": {
            "pick": {"type": "string", "oneOf": ["x", 7, null, {"const": "a", "title": "A"}]}}}
    });
    let odd_call = elicit(&client, odd);
    // Waits for the new question by its text: the declined one may still be
    // on the page, and an element found just before the page redraws is
    // stale when read.
    person
        .until(
            "the odd question is shown",
            r#"return [...document.querySelectorAll("article.question .message")]
                .some(message => message.innerText === "odd options");"#,
        )
        .await;
    person
        .wait_for("article.question button.cancel")
        .await
        .click()
        .await
        .expect("cancel");
    let result = odd_call.await.expect("the call ends");
    assert!(result.contains("cancel"), "{result}");
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

/// Two `gatehouse serve` on one config: both questions on one page, each
/// answered there, each answer reaching its own server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn questions_from_two_instances_share_one_page_and_each_answer_goes_home() {
    let Some(driver) = Driver::start().await else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let config = console_support::config(dir.path(), "person = \"console\"");
    let console = ConsoleProcess::start(&config);
    let person = driver.browser().await;
    person.login(&console.base, TOKEN).await;
    let first = HttpGateway::start(&config);
    let second = HttpGateway::start(&config);
    let first_client = Arc::new(().serve(first.transport()).await.expect("initialize"));
    let second_client = Arc::new(().serve(second.transport()).await.expect("initialize"));
    let first_call = elicit(&first_client, name_form("asked by the first instance"));
    let second_call = elicit(&second_client, name_form("asked by the second instance"));
    person
        .until(
            "both questions on the page",
            "return document.querySelectorAll('article.question').length === 2;",
        )
        .await;
    for (message, name) in [
        ("asked by the first instance", "Uno"),
        ("asked by the second instance", "Dos"),
    ] {
        let field = person
            .run(&format!(
                "const card = [...document.querySelectorAll('article.question')].find(c => c.querySelector('.message').textContent === {message:?}); \
                 card.querySelector('input[name=\"name\"]').focus(); return true;"
            ))
            .await;
        assert_eq!(field, Value::Bool(true));
        let focused = person.client.active_element().await.expect("focused");
        focused
            .send_keys(&format!("{name}\u{E007}"))
            .await
            .expect("type");
    }
    let first_result = first_call.await.expect("first");
    let second_result = second_call.await.expect("second");
    assert_eq!(
        raw_answer(&first_result)["content"]["name"],
        "Uno",
        "{first_result}"
    );
    assert_eq!(
        raw_answer(&second_result)["content"]["name"],
        "Dos",
        "{second_result}"
    );
}

/// A page of another origin, opened in the browser that is logged in to the
/// console (on the same host, so the cookie even goes along: same site),
/// tries to answer, to log the person out and to frame the console: every
/// attempt is refused, and the question is still open.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_origins_page_cannot_act_through_the_logged_in_browser() {
    let Some(driver) = Driver::start().await else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let config = console_support::config(dir.path(), "person = \"console\"");
    let log = dir.path().join("console.log");
    let console = ConsoleProcess::start_logging(&config, std::fs::File::create(&log).expect("log"));
    let person = driver.browser().await;
    person.login(&console.base, TOKEN).await;
    let gateway = HttpGateway::start(&config);
    let client = Arc::new(().serve(gateway.transport()).await.expect("initialize"));
    let call = elicit(&client, name_form("attacked from another origin"));
    person.wait_for("article.question").await;
    let session = console_support::Session::login(&console.base, TOKEN)
        .await
        .expect("login");
    let id = session.open(1).await[0]["id"].clone();
    // The attacker's page, on another port of the same host.
    let site = tempfile::tempdir().expect("site");
    let answer = json!({"id": id, "action": "accept", "content": {"name": "Mallory"}}).to_string();
    std::fs::write(
        site.path().join("attack.html"),
        format!(
            r#"<!doctype html><html><body>
<iframe id="frame" src="{base}/"></iframe>
<form id="logout" method="post" action="{base}/logout" target="sink"><input name="csrf" value="guess"></form>
<iframe name="sink"></iframe>
<script>
window.results = [];
fetch("{base}/api/answer", {{method: "POST", mode: "no-cors", credentials: "include",
  headers: {{"Content-Type": "text/plain"}}, body: {answer:?}}})
  .then(() => window.results.push("answer sent"), e => window.results.push("answer failed: " + e));
fetch("{base}/api/state", {{credentials: "include"}})
  .then(r => r.text()).then(t => window.results.push("state read: " + t), e => window.results.push("state unreadable"));
document.getElementById("logout").submit();
</script></body></html>"#,
            base = console.base
        ),
    )
    .expect("attack page");
    let port = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port");
        listener.local_addr().expect("address").port()
    };
    let mut attacker = std::process::Command::new("/usr/bin/python3")
        .args([
            "-m",
            "http.server",
            "--bind",
            "127.0.0.1",
            &port.to_string(),
            "--directory",
        ])
        .arg(site.path())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("the attacker's server");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            std::time::Instant::now() < deadline,
            "the attacker's server"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let page = driver.browser().await;
    page.login(&console.base, TOKEN).await;
    page.goto(&format!("http://127.0.0.1:{port}/attack.html"))
        .await;
    page.until(
        "the attacker's requests settled",
        "return window.results && window.results.length === 2;",
    )
    .await;
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    let results = page.run("return window.results;").await;
    eprintln!("the attacker's page saw: {results}");
    assert!(
        !results.to_string().contains("state read: {"),
        "another origin read the state: {results}"
    );
    // The framed console shows nothing (frame-ancestors 'none').
    let framed = page
        .run("try { return document.getElementById('frame').contentDocument === null || document.getElementById('frame').contentDocument.body.innerText === ''; } catch (e) { return true; }")
        .await;
    assert_eq!(framed, Value::Bool(true));
    // Both actions reached the console and were refused there, for their
    // Origin (the two origins are one site, so SameSite lets the cookie go
    // along: the Origin check and the CSRF token are what stop them).
    let said = std::fs::read_to_string(&log).expect("the console's log");
    let refused: Vec<&str> = said
        .lines()
        .filter(|line| line.contains("requests from another Origin are not allowed"))
        .collect();
    assert!(
        refused.iter().any(|line| line.contains("/api/answer"))
            && refused.iter().any(|line| line.contains("/logout")),
        "{said}"
    );
    // The question is still open, and the person is still logged in.
    assert_eq!(
        session.state().await["open"].as_array().map(Vec::len),
        Some(1)
    );
    assert!(!call.is_finished());
    page.goto(&format!("{}/", console.base)).await;
    page.wait_for("#questions").await;
    let _ = attacker.kill();
    let _ = attacker.wait();
}
