//! `gatehouse serve --listen` over real HTTP on loopback: the bearer token on
//! every request (401 without it), the Origin check (403), the token file and
//! its secrecy, the loopback rule, the token variable, and the session limit
//! (503), with `demo-server` behind the gateway.

use std::io::{BufRead, Read};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use gatehouse_gateway::http::{HttpAuth, HttpServer};
use rmcp::model::CallToolRequestParams;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::{ServerHandler, ServiceExt};
use serde_json::json;

use crate::paths::demo_server;
use crate::tool_result::result_text as text;

/// A config with demo-server `git` and `gateway` as its `[gateway]` section.
fn config(dir: &Path, gateway: &str) -> PathBuf {
    let server = demo_server();
    let path = dir.join("gatehouse.toml");
    std::fs::write(
        &path,
        format!(
            "[mcp_servers.git]\ncommand = {:?}\nargs = [\"--name\", \"git\"]\n\n\
             [elicitations]\naudit_log = \"audit.jsonl\"\n\n[gateway]\n{gateway}\n",
            server.display().to_string(),
        ),
    )
    .expect("write config");
    path
}

fn mode(path: &Path) -> u32 {
    std::fs::symlink_metadata(path)
        .expect("exists")
        .permissions()
        .mode()
        & 0o7777
}

/// `gatehouse serve --listen`, its stdout and stderr kept; killed when
/// dropped.
struct Served {
    child: std::process::Child,
    url: String,
    stdout: Arc<Mutex<Vec<u8>>>,
    stderr: PathBuf,
}

impl Served {
    fn start(config: &Path, listen: &str, env: &[(&str, Option<&str>)]) -> Served {
        let stderr = config.with_file_name("stderr.log");
        let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_gatehouse"));
        command
            .args(["serve", "--listen", listen, "--config"])
            .arg(config)
            .env("RUST_LOG", "trace")
            .stdout(std::process::Stdio::piped())
            .stderr(std::fs::File::create(&stderr).expect("stderr file"));
        for (name, value) in env {
            match value {
                Some(value) => command.env(name, value),
                None => command.env_remove(name),
            };
        }
        let mut child = command.spawn().expect("gatehouse starts");
        let mut out = std::io::BufReader::new(child.stdout.take().expect("stdout"));
        let mut line = String::new();
        out.read_line(&mut line).expect("listening line");
        let url = line
            .trim()
            .strip_prefix("listening on ")
            .unwrap_or_else(|| {
                panic!(
                    "unexpected {line:?}; stderr: {}",
                    std::fs::read_to_string(&stderr).unwrap_or_default()
                )
            })
            .to_owned();
        let stdout = Arc::new(Mutex::new(line.into_bytes()));
        let rest = stdout.clone();
        std::thread::spawn(move || {
            let mut buffer = [0u8; 4096];
            while let Ok(read) = out.read(&mut buffer) {
                if read == 0 {
                    break;
                }
                rest.lock()
                    .expect("stdout")
                    .extend_from_slice(&buffer[..read]);
            }
        });
        Served {
            child,
            url,
            stdout,
            stderr,
        }
    }

    /// Stops it and returns what it printed: stdout, stderr.
    fn stop(mut self) -> (String, String) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        std::thread::sleep(Duration::from_millis(100));
        let stdout = String::from_utf8_lossy(&self.stdout.lock().expect("stdout")).into_owned();
        let stderr = std::fs::read_to_string(&self.stderr).unwrap_or_default();
        (stdout, stderr)
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Runs `gatehouse serve --listen` expecting it to refuse to start; returns
/// its stderr.
fn refused(config: &Path, listen: &str, env: &[(&str, Option<&str>)]) -> String {
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_gatehouse"));
    command
        .args(["serve", "--listen", listen, "--config"])
        .arg(config)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    for (name, value) in env {
        match value {
            Some(value) => command.env(name, value),
            None => command.env_remove(name),
        };
    }
    let mut child = command.spawn().expect("gatehouse starts");
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("gatehouse serve --listen {listen} was not refused");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut stderr = String::new();
    child
        .stderr
        .take()
        .expect("stderr")
        .read_to_string(&mut stderr)
        .expect("read stderr");
    let mut stdout = String::new();
    child
        .stdout
        .take()
        .expect("stdout")
        .read_to_string(&mut stdout)
        .expect("read stdout");
    assert!(!status.success(), "refused: {stderr}");
    assert!(!stdout.contains("listening"), "it never listened: {stdout}");
    stderr
}

fn token_file(config: &Path) -> PathBuf {
    config.with_file_name(".gatehouse/token")
}

const INITIALIZE: &str = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"0"}}}"#;

/// POSTs `initialize` with `headers`.
async fn initialize(url: &str, headers: &[(&str, &str)]) -> reqwest::Response {
    let mut request = reqwest::Client::new()
        .post(url)
        .header("accept", "application/json, text/event-stream")
        .header("content-type", "application/json")
        .body(INITIALIZE);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    request.send().await.expect("HTTP request")
}

fn bearer(token: &str) -> String {
    format!("Bearer {token}")
}

fn session_id(response: &reqwest::Response) -> String {
    response
        .headers()
        .get("mcp-session-id")
        .expect("a session id")
        .to_str()
        .expect("ASCII")
        .to_owned()
}

async fn delete(url: &str, session: &str, authorization: Option<&str>) -> reqwest::StatusCode {
    let mut request = reqwest::Client::new()
        .delete(url)
        .header("mcp-session-id", session);
    if let Some(authorization) = authorization {
        request = request.header("authorization", authorization);
    }
    request.send().await.expect("DELETE").status()
}

fn assert_unauthorized(response: &reqwest::Response, what: &str) {
    assert_eq!(
        response.status(),
        reqwest::StatusCode::UNAUTHORIZED,
        "{what}"
    );
    let challenge = response
        .headers()
        .get("www-authenticate")
        .unwrap_or_else(|| panic!("{what}: no WWW-Authenticate"))
        .to_str()
        .expect("ASCII");
    assert!(challenge.starts_with("Bearer"), "{what}: {challenge}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_request_needs_the_token_and_a_foreign_origin_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = config(dir.path(), "allowed_origins = [\"http://localhost:3000\"]");
    let served = Served::start(&config, "127.0.0.1:0", &[]);
    let token = std::fs::read_to_string(token_file(&config)).expect("the token file");
    let url = served.url.clone();
    let right = bearer(&token);

    let response = initialize(&url, &[]).await;
    assert_unauthorized(&response, "no token");
    let response = initialize(&url, &[("authorization", "Bearer wrong-token-0123456789")]).await;
    assert_unauthorized(&response, "a wrong token");
    let response = initialize(&url, &[("authorization", &format!("Bearer {token}x"))]).await;
    assert_unauthorized(&response, "the token with one more character");
    let response = initialize(&url, &[("authorization", &format!("Basic {token}"))]).await;
    assert_unauthorized(&response, "another scheme");
    let response = reqwest::Client::new()
        .get(&url)
        .header("accept", "text/event-stream")
        .send()
        .await
        .expect("GET");
    assert_unauthorized(&response, "GET (the SSE stream) without a token");

    let response = initialize(
        &url,
        &[
            ("authorization", right.as_str()),
            ("origin", "http://evil.example"),
        ],
    )
    .await;
    assert_eq!(
        response.status(),
        reqwest::StatusCode::FORBIDDEN,
        "a foreign Origin is refused even with the token"
    );
    let response = initialize(
        &url,
        &[("authorization", right.as_str()), ("origin", "null")],
    )
    .await;
    assert_eq!(
        response.status(),
        reqwest::StatusCode::FORBIDDEN,
        "Origin: null"
    );
    let response = initialize(
        &url,
        &[
            ("authorization", right.as_str()),
            ("origin", "http://localhost:3001"),
        ],
    )
    .await;
    assert_eq!(
        response.status(),
        reqwest::StatusCode::FORBIDDEN,
        "another port"
    );

    let response = initialize(
        &url,
        &[
            ("authorization", right.as_str()),
            ("origin", "http://localhost:3000"),
        ],
    )
    .await;
    assert_eq!(
        response.status(),
        reqwest::StatusCode::OK,
        "an allowed Origin with the token"
    );
    let session = session_id(&response);
    drop(response);
    let response = initialize(&url, &[("authorization", right.as_str())]).await;
    assert_eq!(
        response.status(),
        reqwest::StatusCode::OK,
        "no Origin: a non-browser client"
    );
    drop(response);

    let response = reqwest::Client::new()
        .get(&url)
        .header("accept", "text/event-stream")
        .header("mcp-session-id", &session)
        .header("authorization", "Bearer wrong-token-0123456789")
        .send()
        .await
        .expect("GET");
    assert_unauthorized(&response, "GET in a session with a wrong token");
    assert_eq!(
        delete(&url, &session, None).await,
        reqwest::StatusCode::UNAUTHORIZED,
        "DELETE without a token"
    );
    assert!(
        delete(&url, &session, Some(&right)).await.is_success(),
        "DELETE with the token closes the session"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_token_works_end_to_end_lives_in_a_private_file_and_is_never_printed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = config(dir.path(), "");
    let served = Served::start(&config, "127.0.0.1:0", &[]);
    let file = token_file(&config);
    assert_eq!(mode(&file), 0o600, "the token file is private");
    assert_eq!(mode(file.parent().expect("dir")), 0o700);
    let token = std::fs::read_to_string(&file).expect("the token file");
    assert_eq!(token.len(), 64, "32 random bytes, hex");
    assert!(token.bytes().all(|byte| byte.is_ascii_hexdigit()));

    let client = ()
        .serve(StreamableHttpClientTransport::from_config(
            StreamableHttpClientTransportConfig::with_uri(served.url.clone())
                .auth_header(token.clone()),
        ))
        .await
        .expect("initialize with the token");
    let tools = client.list_all_tools().await.expect("tools/list");
    let names: Vec<String> = tools.iter().map(|tool| tool.name.to_string()).collect();
    assert!(names.contains(&"git__echo".to_owned()), "{names:?}");
    let echo = client
        .call_tool(
            CallToolRequestParams::new("git__echo").with_arguments(
                json!({"text": "hi"})
                    .as_object()
                    .cloned()
                    .unwrap_or_default(),
            ),
        )
        .await
        .expect("tools/call");
    assert!(text(&echo).contains("[git] hi"), "{}", text(&echo));
    client.cancel().await.expect("close");

    let (stdout, stderr) = served.stop();
    assert!(
        stderr.contains(&file.display().to_string()),
        "the path is printed: {stderr}"
    );
    assert!(!stdout.contains(&token), "the token is not on stdout");
    assert!(
        !stderr.contains(&token),
        "the token is not on stderr, even at trace level"
    );
    assert!(stderr.len() > 1000, "trace logs were written: {stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_session_limit_refuses_the_excess_session_until_one_is_closed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = config(dir.path(), "max_http_sessions = 2");
    let served = Served::start(&config, "127.0.0.1:0", &[]);
    let token = std::fs::read_to_string(token_file(&config)).expect("the token file");
    let right = bearer(&token);
    let url = served.url.clone();
    let mut sessions = Vec::new();
    for _ in 0..2 {
        let response = initialize(&url, &[("authorization", right.as_str())]).await;
        assert_eq!(response.status(), reqwest::StatusCode::OK);
        sessions.push(session_id(&response));
    }
    let response = initialize(&url, &[("authorization", right.as_str())]).await;
    assert_eq!(
        response.status(),
        reqwest::StatusCode::SERVICE_UNAVAILABLE,
        "the third session is refused"
    );
    assert!(response.headers().contains_key("retry-after"));
    let body = response.text().await.expect("body");
    assert!(body.contains("max_http_sessions"), "{body}");
    let response = initialize(&url, &[]).await;
    assert_unauthorized(
        &response,
        "the limit tells nothing to a client without the token",
    );

    assert!(delete(&url, &sessions[0], Some(&right)).await.is_success());
    let response = initialize(&url, &[("authorization", right.as_str())]).await;
    assert_eq!(
        response.status(),
        reqwest::StatusCode::OK,
        "a closed session frees its slot"
    );
}

#[test]
fn a_non_loopback_address_without_a_configured_token_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = config(dir.path(), "");
    for address in [
        "0.0.0.0:0",
        "[::]:0",
        "192.0.2.1:8080",
        "gatehouse.example:8080",
    ] {
        let stderr = refused(&config, address, &[]);
        assert!(stderr.contains(address), "{address}: {stderr}");
        assert!(
            stderr.contains("not a loopback address"),
            "{address}: {stderr}"
        );
        assert!(
            stderr.contains("set `[gateway] bearer_token_env_var`"),
            "{address}: {stderr}"
        );
    }
    assert!(
        !token_file(&config).exists(),
        "no token is written for a refused address"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_configured_token_variable_must_be_set_and_then_any_address_may_be_bound() {
    const VAR: &str = "GATEHOUSE_TEST_HTTP_TOKEN";
    let dir = tempfile::tempdir().expect("tempdir");
    let config = config(dir.path(), &format!("bearer_token_env_var = {VAR:?}"));
    let stderr = refused(&config, "127.0.0.1:0", &[(VAR, None)]);
    assert!(stderr.contains(VAR), "{stderr}");
    assert!(stderr.contains("not set"), "{stderr}");
    let stderr = refused(&config, "127.0.0.1:0", &[(VAR, Some(""))]);
    assert!(stderr.contains(VAR) && stderr.contains("empty"), "{stderr}");
    let stderr = refused(&config, "127.0.0.1:0", &[(VAR, Some("short-secret"))]);
    assert!(stderr.contains(VAR), "{stderr}");
    assert!(
        !stderr.contains("short-secret"),
        "the value is never quoted: {stderr}"
    );

    let secret = "a-token-the-operator-chose-0123456789";
    let served = Served::start(&config, "0.0.0.0:0", &[(VAR, Some(secret))]);
    assert!(
        !token_file(&config).exists(),
        "no token file when the token comes from the environment"
    );
    let port = served
        .url
        .rsplit_once(':')
        .and_then(|(_, rest)| rest.strip_suffix("/mcp"))
        .expect("a port")
        .to_owned();
    let url = format!("http://127.0.0.1:{port}/mcp");
    let response = initialize(&url, &[]).await;
    assert_unauthorized(&response, "no token");
    let response = initialize(&url, &[("authorization", bearer(secret).as_str())]).await;
    assert_eq!(response.status(), reqwest::StatusCode::OK);
    drop(response);
    let (stdout, stderr) = served.stop();
    assert!(
        !stdout.contains(secret) && !stderr.contains(secret),
        "never printed"
    );
}

/// An MCP server with nothing in it.
#[derive(Clone)]
struct Nothing;

impl ServerHandler for Nothing {}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_session_expires_and_frees_its_slot() {
    const TOKEN: &str = "the-library-token-0123456789";
    let server = HttpServer::new("127.0.0.1:0", HttpAuth::given(TOKEN).expect("token"))
        .expect("loopback")
        .max_sessions(1)
        // Long enough that a loaded machine still sends the second
        // initialize while the first session is alive.
        .session_idle_timeout(Duration::from_secs(3));
    let listening = server.bind().await.expect("bind");
    let url = listening.url();
    let serving = tokio::spawn(listening.serve(|| Ok(Nothing), std::future::pending()));
    let right = bearer(TOKEN);
    let response = initialize(&url, &[("authorization", right.as_str())]).await;
    assert_eq!(response.status(), reqwest::StatusCode::OK);
    drop(response);
    let response = initialize(&url, &[("authorization", right.as_str())]).await;
    assert_eq!(
        response.status(),
        reqwest::StatusCode::SERVICE_UNAVAILABLE,
        "one session is the limit"
    );
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let response = initialize(&url, &[("authorization", right.as_str())]).await;
        if response.status() == reqwest::StatusCode::OK {
            break;
        }
        assert_eq!(response.status(), reqwest::StatusCode::SERVICE_UNAVAILABLE);
        assert!(
            Instant::now() < deadline,
            "the idle session never freed its slot"
        );
    }
    serving.abort();
}
