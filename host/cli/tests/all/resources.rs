//! Resource ownership through `gatehouse serve`: a read goes only to the
//! server that lists the URI or has a template that matches it, never to
//! every server; an unclaimed URI is read by nobody; a URI two servers offer
//! is readable from each under its qualified URI and refused bare.
//!
//! Every demo-server logs the reads it receives (`--reads-log`), so each
//! test sees which servers were asked. `aaa` is a plugin named to sort
//! first that answers any read it gets (`--answer-any-read`).

use std::path::{Path, PathBuf};
use std::time::Duration;

use rmcp::model::{ReadResourceRequestParams, ReadResourceResult};
use rmcp::service::{RunningService, ServiceError};
use rmcp::transport::TokioChildProcess;
use rmcp::{RoleClient, ServiceExt};
use serde_json::Value;

use crate::paths::demo_server;

/// `gatehouse serve` over stdio in front of demo-servers, each with its
/// own reads log.
struct Gateway {
    dir: tempfile::TempDir,
    client: RunningService<RoleClient, ()>,
}

impl Gateway {
    /// Starts gatehouse with one demo-server per `(name, extra args)`.
    async fn start(servers: &[(&str, &[&str])]) -> Gateway {
        let demo = demo_server();
        let dir = tempfile::tempdir().expect("tempdir");
        let mut config = String::new();
        for (name, extra) in servers {
            let mut args = vec![
                "--name".to_owned(),
                (*name).to_owned(),
                "--reads-log".to_owned(),
                reads_log(dir.path(), name).display().to_string(),
            ];
            args.extend(extra.iter().map(|arg| (*arg).to_owned()));
            config.push_str(&format!(
                "[mcp_servers.{name}]\ncommand = {:?}\nargs = {args:?}\n\n",
                demo.display().to_string()
            ));
        }
        let path = dir.path().join("gatehouse.toml");
        std::fs::write(&path, config).expect("config");
        let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_gatehouse"));
        command.arg("serve").arg("--config").arg(&path);
        let transport = TokioChildProcess::new(command).expect("gatehouse starts");
        let client = tokio::time::timeout(Duration::from_secs(60), ().serve(transport))
            .await
            .expect("initialize in time")
            .expect("initialize");
        Gateway { dir, client }
    }

    /// The URIs `server` was asked to read, in order.
    fn reads(&self, server: &str) -> Vec<String> {
        std::fs::read_to_string(reads_log(self.dir.path(), server))
            .unwrap_or_default()
            .lines()
            .map(|line| serde_json::from_str(line).expect("a JSON string a line"))
            .collect()
    }

    async fn read(&self, uri: &str) -> Result<ReadResourceResult, ServiceError> {
        self.client
            .read_resource(ReadResourceRequestParams::new(uri))
            .await
    }

    /// The text and URI of the one content a read of `uri` returns.
    async fn read_text(&self, uri: &str) -> (String, String) {
        let read = self
            .read(uri)
            .await
            .unwrap_or_else(|error| panic!("read {uri}: {error}"));
        let body = serde_json::to_value(&read.contents).expect("json");
        assert_eq!(body.as_array().map(Vec::len), Some(1), "{body}");
        (
            body[0]["text"].as_str().unwrap_or_default().to_owned(),
            body[0]["uri"].as_str().unwrap_or_default().to_owned(),
        )
    }

    async fn close(self) {
        self.client.cancel().await.expect("close");
    }
}

fn reads_log(dir: &Path, server: &str) -> PathBuf {
    dir.join(format!("{server}.reads"))
}

/// The JSON-RPC error a refused read came back with: (code, message, data).
fn refusal(result: Result<ReadResourceResult, ServiceError>) -> (i32, String, Value) {
    match result {
        Err(ServiceError::McpError(error)) => (
            error.code.0,
            error.message.to_string(),
            error.data.unwrap_or_default(),
        ),
        other => panic!("expected a JSON-RPC error, got {other:?}"),
    }
}

const GIT: (&str, &[&str]) = ("git", &["--template", "demo://git/notes/{id}"]);
const GREEDY_AAA: (&str, &[&str]) = ("aaa", &["--answer-any-read"]);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_named_to_sort_first_cannot_capture_another_servers_reads() {
    let gateway = Gateway::start(&[GIT, GREEDY_AAA]).await;
    let (text, _) = gateway.read_text("demo://git/readme").await;
    assert!(text.starts_with("[git] readme"), "{text}");
    // Not listed, made from git's template: before, every server was asked
    // in name order and `aaa` answered first.
    let (text, uri) = gateway.read_text("demo://git/notes/7").await;
    assert_eq!(text, "[git] resource demo://git/notes/7");
    assert_eq!(uri, "demo://git/notes/7");
    assert_eq!(gateway.reads("aaa"), Vec::<String>::new());
    assert_eq!(
        gateway.reads("git"),
        ["demo://git/readme", "demo://git/notes/7"]
    );
    gateway.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unlisted_uri_is_refused_without_asking_any_server() {
    let gateway = Gateway::start(&[GIT, GREEDY_AAA]).await;
    for uri in [
        "demo://nobody/secret",
        // Not what git's template makes: `/` is no part of `{id}`.
        "demo://git/notes/7/8",
        // A qualified URI names a server, which must claim the URI in it.
        "gatehouse://resource/aaa/demo://git/readme",
    ] {
        let (code, message, data) = refusal(gateway.read(uri).await);
        assert_eq!(code, -32002, "{uri}: {message}");
        assert!(message.contains(uri), "{message}");
        assert_eq!(data["uri"], uri);
    }
    assert_eq!(gateway.reads("aaa"), Vec::<String>::new());
    assert_eq!(gateway.reads("git"), Vec::<String>::new());
    gateway.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_servers_listing_one_uri_are_both_readable_by_qualified_uri_and_the_bare_uri_is_refused()
 {
    let gateway = Gateway::start(&[
        ("git", &["--resource", "demo://shared"]),
        ("aaa", &["--resource", "demo://shared"]),
    ])
    .await;
    let resources = gateway
        .client
        .list_all_resources()
        .await
        .expect("resources/list");
    let uris: Vec<&str> = resources.iter().map(|r| r.uri.as_str()).collect();
    assert_eq!(
        uris,
        [
            "demo://aaa/readme",
            "gatehouse://resource/aaa/demo://shared",
            "demo://git/readme",
            "gatehouse://resource/git/demo://shared",
        ]
    );
    for server in ["aaa", "git"] {
        let qualified = format!("gatehouse://resource/{server}/demo://shared");
        let (text, uri) = gateway.read_text(&qualified).await;
        assert_eq!(text, format!("[{server}] resource demo://shared"));
        assert_eq!(uri, qualified, "the contents carry the URI asked for");
    }
    let (code, message, data) = refusal(gateway.read("demo://shared").await);
    assert_eq!(code, -32602, "{message}");
    assert!(
        message.contains("gatehouse://resource/aaa/demo://shared")
            && message.contains("gatehouse://resource/git/demo://shared"),
        "{message}"
    );
    assert_eq!(
        data["qualified"],
        serde_json::json!([
            "gatehouse://resource/aaa/demo://shared",
            "gatehouse://resource/git/demo://shared",
        ])
    );
    // Each server was asked once, by its qualified URI; the bare read
    // reached neither.
    assert_eq!(gateway.reads("aaa"), ["demo://shared"]);
    assert_eq!(gateway.reads("git"), ["demo://shared"]);
    gateway.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_template_matched_uri_goes_to_the_templates_server_only() {
    let gateway = Gateway::start(&[
        GIT,
        (
            "aaa",
            &["--answer-any-read", "--template", "demo://aaa/{+path}"],
        ),
    ])
    .await;
    let templates = gateway
        .client
        .list_all_resource_templates()
        .await
        .expect("resources/templates/list");
    let templates: Vec<&str> = templates.iter().map(|t| t.uri_template.as_str()).collect();
    assert_eq!(templates, ["demo://aaa/{+path}", "demo://git/notes/{id}"]);
    let (text, _) = gateway.read_text("demo://git/notes/9").await;
    assert_eq!(text, "[git] resource demo://git/notes/9");
    let (text, _) = gateway.read_text("demo://aaa/docs/a.txt").await;
    assert_eq!(text, "[aaa] resource demo://aaa/docs/a.txt");
    assert_eq!(gateway.reads("git"), ["demo://git/notes/9"]);
    assert_eq!(gateway.reads("aaa"), ["demo://aaa/docs/a.txt"]);
    gateway.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_uri_the_templates_of_two_servers_match_is_refused_bare_and_read_qualified() {
    let gateway = Gateway::start(&[
        GIT,
        (
            "aaa",
            &["--answer-any-read", "--template", "demo://git/{+rest}"],
        ),
    ])
    .await;
    let (code, message, data) = refusal(gateway.read("demo://git/notes/1").await);
    assert_eq!(code, -32602, "{message}");
    assert_eq!(
        data["qualified"],
        serde_json::json!([
            "gatehouse://resource/aaa/demo://git/notes/1",
            "gatehouse://resource/git/demo://git/notes/1",
        ])
    );
    assert_eq!(gateway.reads("aaa"), Vec::<String>::new());
    assert_eq!(gateway.reads("git"), Vec::<String>::new());
    let (text, uri) = gateway
        .read_text("gatehouse://resource/git/demo://git/notes/1")
        .await;
    assert_eq!(text, "[git] resource demo://git/notes/1");
    assert_eq!(uri, "gatehouse://resource/git/demo://git/notes/1");
    assert_eq!(gateway.reads("aaa"), Vec::<String>::new());
    assert_eq!(gateway.reads("git"), ["demo://git/notes/1"]);
    gateway.close().await;
}
