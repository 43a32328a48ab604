//! The MCP runtime against real MCP servers (`examples/servers`' demo-server)
//! over stdio and streamable HTTP on loopback.

use std::sync::Arc;
use std::time::Duration;

use gatehouse_gateway::source::ConfigSource;
use gatehouse_mcp::handler::DeclineAll;
use gatehouse_mcp::runtime::{McpRuntime, RuntimeError};
use gatehouse_mcp::server_config::{RawServer, ServerConfig};
use gatehouse_tests::result_text as text;
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
    let catalog = gatehouse_gateway::catalog::tool_catalog(&snapshot, "files").expect("catalog");
    assert!(matches!(
        catalog.lookup(Some("delete_branch")),
        gatehouse_core::context::CatalogEntry::Listed(tool) if tool.annotations.destructive_hint == Some(true)
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
        gatehouse_mcp::watch::FileWatcher::new(&[path.as_path()], move |_| watched.invalidate())
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
    // The operator controls this root: everything found in it runs.
    std::fs::write(
        &path,
        "[capabilities]\ntrust = \"all\"\nroots = [{ id = \"workspace\", path = \"plugins\" }]\n",
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
    if let gatehouse_mcp::server_config::Transport::Http {
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
    std::fs::write(&path, "[capabilities]\ntrust = \"all\"\n").expect("config");
    let selected = dir.path().join("selected");
    plugin_root(&selected, "picked");
    let source = Arc::new(ConfigSource::new(&path));
    let runtime = McpRuntime::new(source.clone(), Arc::new(DeclineAll));
    runtime.refresh_if_dirty().await.expect("refresh");
    assert!(runtime.snapshot().tools().is_empty());
    let roots = vec![gatehouse_mcp::discovery::CapabilityRoot::new(
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
        "[capabilities]\ntrust = \"all\"\nroots = [{ id = \"later\", path = \"later\" }]\n",
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
    let allowed: Vec<&str> = gatehouse_mcp::connection::BASE_ENV_VARS
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

/// `dir/gatehouse.toml` with the capability root `drop` (`dir/drop`, which
/// is created) and `capabilities`, more `[capabilities]` keys.
fn drop_root_config(dir: &std::path::Path, capabilities: &str, root: &str) -> std::path::PathBuf {
    std::fs::create_dir_all(dir.join("drop")).expect("mkdir");
    let path = dir.join("gatehouse.toml");
    std::fs::write(
        &path,
        format!(
            "[capabilities]\n{capabilities}\nroots = [{{ id = \"drop\", path = \"drop\"{root} }}]\n"
        ),
    )
    .expect("config");
    path
}

/// Drops plugin `name` with one server `srv` (`entry`) into `root`: what
/// anyone who can write to the root can do while gatehouse runs.
fn drop_plugin(root: &std::path::Path, name: &str, entry: serde_json::Value) {
    let manifest = root.join(name).join(".codex-plugin").join("plugin.json");
    std::fs::create_dir_all(manifest.parent().expect("a folder")).expect("mkdir");
    std::fs::write(
        &manifest,
        json!({"name": name, "mcpServers": {"srv": entry}}).to_string(),
    )
    .expect("manifest");
}

/// A demo-server answering as `name`.
fn demo_entry(name: &str) -> serde_json::Value {
    json!({"command": demo_server(), "args": ["--name", name], "startup_timeout_sec": 20})
}

/// What a server's `tools/list_changed` makes the gateway do.
async fn list_changed_refresh(runtime: &McpRuntime) -> Result<bool, RuntimeError> {
    runtime.invalidate();
    runtime.refresh_if_dirty().await
}

/// Records every discovered server as trusted, as `gatehouse plugins trust
/// --all` does.
fn trust_everything(source: &ConfigSource) {
    let report = source.plugins().expect("the plugins");
    let mut store = report.store;
    for status in &report.plugins {
        store.trust(&status.server);
    }
    store.save().expect("the trust file is written");
}

fn state_of(source: &ConfigSource, name: &str) -> (gatehouse_mcp::discovery::TrustState, bool) {
    let report = source.plugins().expect("the plugins");
    let status = report
        .plugins
        .iter()
        .find(|status| status.server.name == name)
        .unwrap_or_else(|| panic!("{name} is discovered"));
    (status.state, status.runs)
}

/// A plugin dropped into a capability root while the gateway runs is found
/// by the next refresh (any server can cause one with `tools/list_changed`)
/// but runs nothing until the operator trusts it; then it runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_dropped_at_run_time_runs_nothing_until_it_is_trusted() {
    use gatehouse_mcp::discovery::TrustState;

    let dir = tempfile::tempdir().expect("tempdir");
    let path = drop_root_config(dir.path(), "", "");
    let source = Arc::new(ConfigSource::new(&path));
    let runtime = McpRuntime::new(source.clone(), Arc::new(DeclineAll));
    runtime.refresh_if_dirty().await.expect("refresh");
    assert!(runtime.snapshot().tools().is_empty());

    drop_plugin(&dir.path().join("drop"), "dropped", demo_entry("dropped"));
    list_changed_refresh(&runtime).await.expect("refresh");
    assert!(
        runtime.snapshot().tool("dropped__srv__echo").is_none(),
        "an untrusted plugin does not run"
    );
    assert_eq!(runtime.connects(), 0, "nothing was started");
    assert_eq!(state_of(&source, "dropped__srv"), (TrustState::New, false));

    trust_everything(&source);
    assert_eq!(
        state_of(&source, "dropped__srv"),
        (TrustState::Trusted, true)
    );
    list_changed_refresh(&runtime).await.expect("refresh");
    let result = runtime
        .call_tool("dropped__srv__echo", args(json!({"text": "q"})))
        .await
        .expect("the trusted plugin runs");
    assert!(text(&result).contains("[dropped] q"), "{}", text(&result));
}

/// Trust is for a manifest's exact bytes: an edit (here, to what the server
/// is started with) makes it `changed`, and it stops running at the next
/// refresh until it is trusted again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_changed_manifest_stops_running_until_it_is_trusted_again() {
    use gatehouse_mcp::discovery::TrustState;

    let dir = tempfile::tempdir().expect("tempdir");
    let path = drop_root_config(dir.path(), "", "");
    let root = dir.path().join("drop");
    drop_plugin(&root, "edited", demo_entry("before"));
    let source = Arc::new(ConfigSource::new(&path));
    trust_everything(&source);
    let runtime = McpRuntime::new(source.clone(), Arc::new(DeclineAll));
    runtime.refresh_if_dirty().await.expect("refresh");
    let before = runtime
        .call_tool("edited__srv__echo", args(json!({"text": "x"})))
        .await
        .expect("trusted: it runs");
    assert!(text(&before).contains("[before] x"));

    drop_plugin(&root, "edited", demo_entry("after"));
    list_changed_refresh(&runtime).await.expect("refresh");
    assert!(
        runtime.snapshot().tool("edited__srv__echo").is_none(),
        "the changed manifest does not run"
    );
    assert_eq!(
        state_of(&source, "edited__srv"),
        (TrustState::Changed, false)
    );

    trust_everything(&source);
    list_changed_refresh(&runtime).await.expect("refresh");
    let after = runtime
        .call_tool("edited__srv__echo", args(json!({"text": "y"})))
        .await
        .expect("trusted again: it runs");
    assert!(text(&after).contains("[after] y"), "{}", text(&after));
}

/// Outside a root configured `trusted = true`, a discovered entry cannot
/// read gatehouse's environment (`env_vars`), set a `cwd` outside its root,
/// or be `required` (a failing required plugin would stop gatehouse): each
/// such entry is refused, even with `trust = "all"`, and the rest run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_untrusted_root_cannot_reach_the_environment_a_cwd_outside_or_required() {
    const SECRET: &str = "GATEHOUSE_TEST_SECRET_FOR_NO_PLUGIN";
    // SAFETY: no other test reads or writes this variable.
    unsafe { std::env::set_var(SECRET, "plugin-loot") };
    let dir = tempfile::tempdir().expect("tempdir");
    let path = drop_root_config(dir.path(), "trust = \"all\"", "");
    let root = dir.path().join("drop");
    let outside = dir.path().join("outside");
    std::fs::create_dir_all(&outside).expect("mkdir");
    let hostile = hostile_server().display().to_string();
    drop_plugin(
        &root,
        "envy",
        json!({"command": hostile, "args": ["--mode", "environment"], "env_vars": [SECRET]}),
    );
    drop_plugin(
        &root,
        "plain",
        json!({"command": hostile, "args": ["--mode", "environment"], "env": {"OWN": "mine"}}),
    );
    let mut roams = demo_entry("roams");
    roams["cwd"] = json!(outside);
    drop_plugin(&root, "roams", roams);
    let mut vital = demo_entry("vital");
    vital["args"] = json!(["--fail"]);
    vital["required"] = json!(true);
    drop_plugin(&root, "vital", vital);

    let source = Arc::new(ConfigSource::new(&path));
    let runtime = McpRuntime::new(source.clone(), Arc::new(DeclineAll));
    runtime
        .refresh_if_dirty()
        .await
        .expect("a required plugin cannot stop gatehouse");
    let snapshot = runtime.snapshot();
    assert!(snapshot.tool("envy__srv__go").is_none(), "env_vars refused");
    assert!(snapshot.tool("roams__srv__echo").is_none(), "cwd refused");
    assert!(
        snapshot.connection("vital__srv").is_none(),
        "required refused"
    );
    let result = runtime
        .call_tool("plain__srv__go", None)
        .await
        .expect("a plugin asking for nothing more runs");
    let report: serde_json::Value = serde_json::from_str(&text(&result)).expect("JSON");
    assert_eq!(report["environment"]["OWN"], "mine", "its own env is set");
    assert!(!text(&result).contains("plugin-loot"), "{}", text(&result));

    let plugins = source.plugins().expect("the plugins").plugins;
    let refused = |name: &str| -> Vec<&str> {
        plugins
            .iter()
            .find(|status| status.server.name == name)
            .expect("discovered")
            .refused
            .iter()
            .map(|refusal| refusal.field)
            .collect()
    };
    assert_eq!(refused("envy__srv"), ["env_vars"]);
    assert_eq!(refused("roams__srv"), ["cwd"]);
    assert_eq!(refused("vital__srv"), ["required"]);
    assert!(refused("plain__srv").is_empty());
}

/// In a root configured `trusted = true`, the same entries do what they
/// say: `env_vars` passes the variable, the `cwd` outside is used, and a
/// failing `required` server fails the refresh.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trusted_root_may_pass_the_environment_set_a_cwd_and_be_required() {
    const PASSED: &str = "GATEHOUSE_TEST_PASSED_TO_A_TRUSTED_ROOT";
    // SAFETY: no other test reads or writes this variable.
    unsafe { std::env::set_var(PASSED, "operator-chose-this") };
    let dir = tempfile::tempdir().expect("tempdir");
    let path = drop_root_config(dir.path(), "trust = \"all\"", ", trusted = true");
    let root = dir.path().join("drop");
    let outside = dir.path().join("outside");
    std::fs::create_dir_all(&outside).expect("mkdir");
    drop_plugin(
        &root,
        "envy",
        json!({"command": hostile_server(), "args": ["--mode", "environment"], "env_vars": [PASSED]}),
    );
    let mut roams = demo_entry("roams");
    roams["cwd"] = json!(outside);
    drop_plugin(&root, "roams", roams);

    let source = Arc::new(ConfigSource::new(&path));
    let runtime = McpRuntime::new(source.clone(), Arc::new(DeclineAll));
    runtime.refresh_if_dirty().await.expect("refresh");
    let result = runtime.call_tool("envy__srv__go", None).await.expect("go");
    let report: serde_json::Value = serde_json::from_str(&text(&result)).expect("JSON");
    assert_eq!(report["environment"][PASSED], "operator-chose-this");
    runtime
        .call_tool("roams__srv__echo", args(json!({"text": "r"})))
        .await
        .expect("a cwd outside the root is allowed here");

    let mut vital = demo_entry("vital");
    vital["args"] = json!(["--fail"]);
    vital["required"] = json!(true);
    drop_plugin(&root, "vital", vital);
    let error = list_changed_refresh(&runtime)
        .await
        .expect_err("a required server of a trusted root counts");
    assert!(matches!(error, RuntimeError::RequiredServerFailed(_)));
    assert!(error.to_string().contains("vital__srv"), "{error}");
}

/// `trust = "all"` is the opt-in for roots the operator controls: what is
/// discovered runs, with no trust file.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trust_all_runs_discovered_plugins_without_a_trust_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = drop_root_config(dir.path(), "trust = \"all\"", "");
    let source = Arc::new(ConfigSource::new(&path));
    let runtime = McpRuntime::new(source.clone(), Arc::new(DeclineAll));
    runtime.refresh_if_dirty().await.expect("refresh");
    drop_plugin(&dir.path().join("drop"), "open", demo_entry("open"));
    list_changed_refresh(&runtime).await.expect("refresh");
    let result = runtime
        .call_tool("open__srv__echo", args(json!({"text": "o"})))
        .await
        .expect("it runs");
    assert!(text(&result).contains("[open] o"));
    assert!(!dir.path().join("gatehouse-trust.toml").exists());
}
