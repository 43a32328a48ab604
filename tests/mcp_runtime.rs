//! The MCP runtime against real MCP servers (`examples/servers`' demo-server)
//! over stdio and streamable HTTP on loopback.

use std::sync::Arc;
use std::time::Duration;

use gatehouse::mcp::config::{RawServer, ServerConfig};
use gatehouse::mcp::connection::DeclineAll;
use gatehouse::mcp::result_text as text;
use gatehouse::mcp::runtime::{McpRuntime, RuntimeError};
use gatehouse::mcp::source::ConfigSource;
use gatehouse_tests::{HttpServer, demo_server, hostile_server};
use serde_json::json;

fn stdio(name: &str, extra: &[&str]) -> ServerConfig {
    let mut args = vec!["--name".to_owned(), name.to_owned()];
    args.extend(extra.iter().map(|arg| (*arg).to_owned()));
    RawServer {
        command: Some(demo_server().display().to_string()),
        args,
        startup_timeout_sec: Some(20.0),
        ..RawServer::default()
    }
    .check(name)
    .expect("valid server")
}

fn http(name: &str, url: &str) -> ServerConfig {
    RawServer {
        url: Some(url.to_owned()),
        startup_timeout_sec: Some(20.0),
        ..RawServer::default()
    }
    .check(name)
    .expect("valid server")
}

fn args(value: serde_json::Value) -> Option<rmcp::model::JsonObject> {
    value.as_object().cloned()
}

async fn eventually(what: &str, mut check: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while !check() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connects_lists_and_calls_over_stdio_and_http() {
    let web = HttpServer::start("web");
    let runtime = McpRuntime::new(
        vec![stdio("files", &[]), http("web", &web.url)],
        Arc::new(DeclineAll),
    );
    assert!(runtime.refresh_if_dirty().await.expect("refresh"));
    let snapshot = runtime.snapshot();
    let names: Vec<&str> = snapshot
        .tools()
        .iter()
        .map(|entry| entry.qualified.as_str())
        .collect();
    assert!(names.contains(&"files__echo"), "{names:?}");
    assert!(names.contains(&"web__echo"), "{names:?}");
    let files = runtime
        .call_tool("files__echo", args(json!({"text": "hi"})))
        .await
        .expect("call");
    assert!(text(&files).contains("[files] hi"), "{}", text(&files));
    let web_result = runtime
        .call_tool("web__echo", args(json!({"text": "hey"})))
        .await
        .expect("call");
    assert!(
        text(&web_result).contains("[web] hey"),
        "{}",
        text(&web_result)
    );
    // The identity-binding catalog comes from the server's listing.
    let catalog = snapshot.catalog_for("files").expect("catalog");
    assert!(matches!(
        catalog.lookup(Some("delete_branch")),
        gatehouse::context::CatalogEntry::Listed(tool) if tool.annotations.destructive_hint == Some(true)
    ));
    assert!(matches!(
        runtime.call_tool("files__nope", None).await,
        Err(RuntimeError::UnknownTool(_))
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_changed_marks_dirty_and_the_refresh_adds_the_tool() {
    let runtime = McpRuntime::new(vec![stdio("files", &[])], Arc::new(DeclineAll));
    runtime.refresh_if_dirty().await.expect("refresh");
    let mut changes = runtime.catalog_changes();
    changes.borrow_and_update();
    assert!(!runtime.is_dirty());
    runtime
        .call_tool("files__add_tool", args(json!({"name": "extra"})))
        .await
        .expect("add_tool");
    eventually("the list_changed notification", || runtime.is_dirty()).await;
    assert!(runtime.refresh_if_dirty().await.expect("refresh"));
    assert!(runtime.snapshot().tool("files__extra").is_some());
    assert!(changes.has_changed().expect("sender alive"));
    // The connection was reused, not reopened.
    assert_eq!(runtime.connects(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_optional_server_is_skipped_and_reported() {
    let runtime = McpRuntime::new(
        vec![stdio("good", &[]), stdio("broken", &["--fail"])],
        Arc::new(DeclineAll),
    );
    runtime
        .refresh_if_dirty()
        .await
        .expect("optional failures do not fail the refresh");
    let snapshot = runtime.snapshot();
    assert!(snapshot.connection("good").is_some());
    assert!(snapshot.connection("broken").is_none());
    let why = snapshot
        .failures()
        .get("broken")
        .expect("the failure is reported");
    assert!(why.contains("mcp server `broken`"), "{why}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_required_server_fails_start_up_with_its_name() {
    let mut broken = stdio("vital", &["--fail"]);
    broken.required = true;
    let runtime = McpRuntime::new(vec![stdio("good", &[]), broken], Arc::new(DeclineAll));
    let error = runtime
        .refresh_if_dirty()
        .await
        .expect_err("required failure");
    assert!(matches!(error, RuntimeError::RequiredServerFailed(_)));
    assert!(error.to_string().contains("`vital`"), "{error}");
    assert!(
        runtime.is_dirty(),
        "a failed refresh leaves the runtime dirty"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_never_starts_times_out() {
    let mut hanging = stdio("slow", &["--hang"]);
    hanging.startup_timeout = Duration::from_millis(500);
    hanging.required = true;
    let runtime = McpRuntime::new(vec![hanging], Arc::new(DeclineAll));
    let error = runtime.refresh_if_dirty().await.expect_err("timeout");
    assert!(
        error.to_string().contains("did not start within"),
        "{error}"
    );
}

fn write_config(path: &std::path::Path, b_name: &str) {
    let server = demo_server().display().to_string();
    std::fs::write(
        path,
        format!(
            "[mcp_servers.a]\ncommand = {server:?}\nargs = [\"--name\", \"a\"]\n\n\
             [mcp_servers.b]\ncommand = {server:?}\nargs = [\"--name\", {b_name:?}]\n"
        ),
    )
    .expect("write config");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_config_edit_reconnects_exactly_the_changed_server() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("gatehouse.toml");
    write_config(&path, "b");
    let runtime = McpRuntime::new(Arc::new(ConfigSource::new(&path)), Arc::new(DeclineAll));
    runtime.refresh_if_dirty().await.expect("refresh");
    assert_eq!(runtime.connects(), 2);
    let before = runtime.snapshot();

    write_config(&path, "b-renamed");
    runtime.invalidate();
    runtime.refresh_if_dirty().await.expect("refresh");
    let after = runtime.snapshot();
    assert_eq!(runtime.connects(), 3, "only b reconnects");
    assert!(Arc::ptr_eq(
        before.connection("a").expect("a"),
        after.connection("a").expect("a")
    ));
    assert!(!Arc::ptr_eq(
        before.connection("b").expect("b"),
        after.connection("b").expect("b")
    ));
    let new_b = runtime
        .call_tool("b__echo", args(json!({"text": "x"})))
        .await
        .expect("call");
    assert!(text(&new_b).contains("[b-renamed] x"));
    // Holders of the old snapshot keep a working connection until they drop it.
    let old_b = before
        .connection("b")
        .expect("b")
        .call_tool("echo", args(json!({"text": "y"})))
        .await
        .expect("old connection still works");
    assert!(text(&old_b).contains("[b] y"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_watcher_marks_the_runtime_dirty_on_a_config_edit() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("gatehouse.toml");
    write_config(&path, "b");
    let runtime = McpRuntime::new(Arc::new(ConfigSource::new(&path)), Arc::new(DeclineAll));
    runtime.refresh_if_dirty().await.expect("refresh");
    let watched = runtime.clone();
    let _watcher =
        gatehouse::watch::FileWatcher::new(&[path.as_path()], move |_| watched.invalidate())
            .expect("watch");
    assert!(!runtime.is_dirty());
    write_config(&path, "b2");
    eventually("the watcher", || runtime.is_dirty()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hard_refresh_reconnects_one_server() {
    let runtime = McpRuntime::new(vec![stdio("a", &[]), stdio("b", &[])], Arc::new(DeclineAll));
    runtime.refresh_if_dirty().await.expect("refresh");
    let before = runtime.snapshot();
    runtime.hard_refresh("b");
    runtime.refresh_if_dirty().await.expect("refresh");
    let after = runtime.snapshot();
    assert_eq!(runtime.connects(), 3);
    assert!(Arc::ptr_eq(
        before.connection("a").expect("a"),
        after.connection("a").expect("a")
    ));
    assert!(!Arc::ptr_eq(
        before.connection("b").expect("b"),
        after.connection("b").expect("b")
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_concurrent_invalidations_cause_at_most_two_refreshes() {
    let runtime = McpRuntime::new(vec![stdio("a", &[])], Arc::new(DeclineAll));
    runtime.refresh_if_dirty().await.expect("refresh");
    let before = runtime.refreshes();
    // All invalidate at once, then all ask for a refresh at once.
    let barrier = Arc::new(tokio::sync::Barrier::new(1000));
    let mut tasks = Vec::new();
    for _ in 0..1000 {
        let (runtime, barrier) = (runtime.clone(), barrier.clone());
        tasks.push(tokio::spawn(async move {
            runtime.invalidate();
            barrier.wait().await;
            runtime.refresh_if_dirty().await
        }));
    }
    for task in tasks {
        task.await.expect("task").expect("refresh");
    }
    let refreshes = runtime.refreshes() - before;
    assert!((1..=2).contains(&refreshes), "{refreshes} refreshes");
    assert_eq!(
        runtime.connects(),
        1,
        "nothing changed, nothing reconnected"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refresh_cancelled_half_way_is_redone_by_the_next_call() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("gatehouse.toml");
    let server = demo_server().display().to_string();
    // A server that never finishes starting keeps the refresh busy.
    std::fs::write(
        &path,
        format!(
            "[mcp_servers.a]\ncommand = {server:?}\nargs = [\"--name\", \"a\"]\n\n\
             [mcp_servers.slow]\ncommand = {server:?}\nargs = [\"--hang\"]\nstartup_timeout_sec = 60\n"
        ),
    )
    .expect("write");
    let runtime = McpRuntime::new(Arc::new(ConfigSource::new(&path)), Arc::new(DeclineAll));
    let abandoned =
        tokio::time::timeout(Duration::from_millis(500), runtime.refresh_if_dirty()).await;
    assert!(abandoned.is_err(), "the refresh was still connecting");
    assert!(
        runtime.is_dirty(),
        "the abandoned refresh left the runtime dirty"
    );
    assert_eq!(runtime.refreshes(), 0);
    // Drop the hanging server; the next call refreshes before it runs.
    write_config(&path, "b");
    let result = runtime
        .call_tool("a__echo", args(json!({"text": "z"})))
        .await
        .expect("call");
    assert!(text(&result).contains("[a] z"));
    assert_eq!(runtime.refreshes(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn servers_discovered_in_a_capability_root_are_connected() {
    let dir = tempfile::tempdir().expect("tempdir");
    let plugin = dir.path().join("plugins").join("helper");
    std::fs::create_dir_all(plugin.join(".claude-plugin")).expect("mkdir");
    std::fs::write(
        plugin.join(".claude-plugin").join("plugin.json"),
        r#"{"name": "helper"}"#,
    )
    .expect("manifest");
    std::fs::write(
        plugin.join(".mcp.json"),
        json!({"mcpServers": {"tools": {"command": demo_server(), "args": ["--name", "found"]}}})
            .to_string(),
    )
    .expect(".mcp.json");
    let path = dir.path().join("gatehouse.toml");
    std::fs::write(
        &path,
        "[capabilities]\nroots = [{ id = \"workspace\", path = \"plugins\" }]\n",
    )
    .expect("config");
    let runtime = McpRuntime::new(Arc::new(ConfigSource::new(&path)), Arc::new(DeclineAll));
    runtime.refresh_if_dirty().await.expect("refresh");
    let result = runtime
        .call_tool("helper__tools__echo", args(json!({"text": "q"})))
        .await
        .expect("call the discovered server");
    assert!(text(&result).contains("[found] q"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_changed_credential_reconnects_the_server() {
    const VARIABLE: &str = "GATEHOUSE_TEST_CREDENTIAL_ROTATION";
    // SAFETY: no other test reads or writes this variable.
    unsafe { std::env::set_var(VARIABLE, "first-token") };
    let web = HttpServer::start("web");
    let mut server = http("web", &web.url);
    if let gatehouse::mcp::config::Transport::Http {
        bearer_token_env_var,
        ..
    } = &mut server.transport
    {
        *bearer_token_env_var = Some(VARIABLE.to_owned());
    }
    let runtime = McpRuntime::new(vec![server], Arc::new(DeclineAll));
    runtime.refresh_if_dirty().await.expect("refresh");
    assert!(!runtime.refresh_if_dirty().await.expect("nothing changed"));
    // SAFETY: as above.
    unsafe { std::env::set_var(VARIABLE, "rotated-token") };
    assert!(
        runtime.refresh_if_dirty().await.expect("refresh"),
        "the rotation is noticed"
    );
    assert_eq!(runtime.connects(), 2);
}

fn plugin_root(dir: &std::path::Path, name: &str) -> std::path::PathBuf {
    let plugin = dir.join(name);
    std::fs::create_dir_all(plugin.join(".codex-plugin")).expect("mkdir");
    std::fs::write(
        plugin.join(".codex-plugin").join("plugin.json"),
        json!({"name": name, "mcpServers": {"srv": {"command": demo_server(), "args": ["--name", name]}}})
            .to_string(),
    )
    .expect("manifest");
    plugin
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn selecting_roots_at_run_time_adds_their_servers() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("gatehouse.toml");
    std::fs::write(&path, "").expect("config");
    let selected = dir.path().join("selected");
    plugin_root(&selected, "picked");
    let source = Arc::new(ConfigSource::new(&path));
    let runtime = McpRuntime::new(source.clone(), Arc::new(DeclineAll));
    runtime.refresh_if_dirty().await.expect("refresh");
    assert!(runtime.snapshot().tools().is_empty());
    let roots = vec![gatehouse::discovery::CapabilityRoot::new(
        "thread", &selected,
    )];
    assert!(source.select_roots(roots.clone()), "a change");
    assert!(!source.select_roots(roots), "no change the second time");
    runtime.invalidate();
    runtime.refresh_if_dirty().await.expect("refresh");
    assert!(runtime.snapshot().tool("picked__srv__echo").is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_root_that_appears_later_is_noticed_by_a_probe() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("gatehouse.toml");
    std::fs::write(
        &path,
        "[capabilities]\nroots = [{ id = \"later\", path = \"later\" }]\n",
    )
    .expect("config");
    let source = Arc::new(ConfigSource::new(&path));
    let runtime = McpRuntime::new(source.clone(), Arc::new(DeclineAll));
    runtime
        .refresh_if_dirty()
        .await
        .expect("a missing root is not fatal");
    assert!(runtime.snapshot().tools().is_empty());
    assert!(!source.probe().expect("probe"), "still missing");
    plugin_root(&dir.path().join("later"), "late");
    assert!(source.probe().expect("probe"), "the root recovered");
    runtime.invalidate();
    runtime.refresh_if_dirty().await.expect("refresh");
    assert!(runtime.snapshot().tool("late__srv__echo").is_some());
}

/// A stdio server starts with the base variables (`BASE_ENV_VARS`), its
/// `env` and its `env_vars`, and nothing else of the host's environment: a
/// secret in gatehouse's environment does not reach it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stdio_server_gets_only_the_environment_it_is_given() {
    const SECRET: &str = "GATEHOUSE_TEST_SECRET_NOT_FOR_SERVERS";
    const PASSED: &str = "GATEHOUSE_TEST_PASSED_THROUGH";
    // SAFETY: no other test reads or writes these variables.
    unsafe {
        std::env::set_var(SECRET, "hunter2");
        std::env::set_var(PASSED, "through");
    }
    let server = RawServer {
        command: Some(hostile_server().display().to_string()),
        args: vec!["--mode".into(), "environment".into()],
        env: [("GIVEN".to_owned(), "given value".to_owned())].into(),
        env_vars: vec![PASSED.to_owned()],
        startup_timeout_sec: Some(20.0),
        ..RawServer::default()
    }
    .check("envy")
    .expect("valid server");
    let runtime = McpRuntime::new(vec![server], Arc::new(DeclineAll));
    runtime.refresh_if_dirty().await.expect("refresh");
    let result = runtime.call_tool("envy__go", None).await.expect("go");
    let report: serde_json::Value = serde_json::from_str(&text(&result)).expect("a JSON report");
    let environment = report["environment"].as_object().expect("the environment");
    assert_eq!(environment.get("GIVEN"), Some(&json!("given value")));
    assert_eq!(environment.get(PASSED), Some(&json!("through")));
    assert!(!environment.contains_key(SECRET), "{environment:?}");
    assert!(
        environment.values().all(|value| value != "hunter2"),
        "{environment:?}"
    );
    let allowed: Vec<&str> = gatehouse::mcp::connection::BASE_ENV_VARS
        .iter()
        .copied()
        .chain(["GIVEN", PASSED])
        .collect();
    let extra: Vec<&String> = environment
        .keys()
        .filter(|name| !allowed.contains(&name.as_str()))
        .collect();
    assert!(extra.is_empty(), "not given: {extra:?}");
    if let Some(path) = std::env::var_os("PATH") {
        assert_eq!(
            environment.get("PATH"),
            Some(&json!(path.to_string_lossy())),
            "the base variables pass through"
        );
    }
}
