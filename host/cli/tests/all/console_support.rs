//! The approvals console in the tests: `gatehouse console` in a child
//! process on a loopback port, a logged-in HTTP session against it, and a
//! config that routes questions to it.
//!
//! A module of the gathered test binary `host/cli/tests/all`, shared by the
//! console tests (`console.rs`, `console_browser.rs`).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use rmcp::model::CallToolRequestParams;
use serde_json::{Value, json};

use crate::tool_result::result_text;

/// The token the tests' consoles take from `GATEHOUSE_CONSOLE_TOKEN`.
pub const TOKEN: &str = "test-console-token-0123456789";

/// A config with demo-server `demo`, the guardian, `[console]`, audited to
/// `audit.jsonl`; `elicitations` are extra keys of `[elicitations]`.
pub fn config(dir: &Path, elicitations: &str) -> PathBuf {
    let path = dir.join("gatehouse.toml");
    std::fs::write(
        &path,
        format!(
            "[mcp_servers.demo]\ncommand = {server:?}\nargs = [\"--name\", \"demo\"]\n\n\
             [[review.modules]]\npath = {guardian:?}\n\n\
             [console]\n\n\
             [elicitations]\naudit_log = \"audit.jsonl\"\naudit_sync = \"batch\"\n{elicitations}\n",
            server = crate::paths::demo_server().display().to_string(),
            guardian = crate::paths::guest("gatehouse_guardian")
                .display()
                .to_string(),
        ),
    )
    .expect("write config");
    path
}

/// The audit lines of `dir/audit.jsonl` (decisions only).
pub fn decisions(dir: &Path) -> Vec<Value> {
    std::fs::read_to_string(dir.join("audit.jsonl"))
        .unwrap_or_default()
        .lines()
        .map(|line| serde_json::from_str::<Value>(line).expect("JSON line"))
        .filter(|line| line.get("event").is_none())
        .collect()
}

/// `gatehouse console` on a loopback port, killed when dropped.
pub struct ConsoleProcess {
    /// The process.
    pub child: Child,
    /// `http://127.0.0.1:PORT` (no trailing slash).
    pub base: String,
}

impl ConsoleProcess {
    /// Starts it on `config` with [`TOKEN`], its log on the test's stderr.
    pub fn start(config: &Path) -> ConsoleProcess {
        ConsoleProcess::start_logging(config, Stdio::inherit())
    }

    /// Starts it on `config` with [`TOKEN`], its log (info and up) to
    /// `stderr`.
    pub fn start_logging(config: &Path, stderr: impl Into<Stdio>) -> ConsoleProcess {
        let (child, url) = crate::paths::spawn_listening(
            Command::new(env!("CARGO_BIN_EXE_gatehouse"))
                .args(["console", "--listen", "127.0.0.1:0", "--config"])
                .arg(config)
                .env("GATEHOUSE_CONSOLE_TOKEN", TOKEN)
                .env("RUST_LOG", "gatehouse=info")
                .stderr(stderr),
            "console on ",
            "gatehouse console starts",
        );
        ConsoleProcess {
            child,
            base: url.trim_end_matches('/').to_owned(),
        }
    }

    /// Kills it now (SIGKILL: as if it crashed).
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for ConsoleProcess {
    /// Stops it as an operator would (SIGTERM: it removes its socket), or
    /// kills it after 10 s.
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while std::time::Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        self.kill();
    }
}

/// A logged-in session, as a script would hold it.
pub struct Session {
    pub base: String,
    pub cookie: String,
    pub csrf: String,
    pub client: reqwest::Client,
}

/// An HTTP client that follows no redirects.
pub fn http() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .expect("client")
}

impl Session {
    /// Logs in with `token`.
    pub async fn login(base: &str, token: &str) -> Result<Session, reqwest::StatusCode> {
        let client = http();
        let response = client
            .post(format!("{base}/login"))
            .header("origin", base)
            .header("content-type", "application/x-www-form-urlencoded")
            .body(format!("token={token}"))
            .send()
            .await
            .expect("login");
        if response.status() != reqwest::StatusCode::SEE_OTHER {
            return Err(response.status());
        }
        let set_cookie = response
            .headers()
            .get("set-cookie")
            .and_then(|v| v.to_str().ok())
            .expect("a session cookie")
            .to_owned();
        assert!(set_cookie.contains("HttpOnly"), "{set_cookie}");
        assert!(set_cookie.contains("SameSite=Strict"), "{set_cookie}");
        let cookie = set_cookie.split(';').next().unwrap_or_default().to_owned();
        let page = client
            .get(format!("{base}/"))
            .header("cookie", &cookie)
            .send()
            .await
            .expect("page")
            .text()
            .await
            .expect("text");
        let csrf = page
            .split("name=\"gatehouse-csrf\" content=\"")
            .nth(1)
            .and_then(|rest| rest.split('"').next())
            .expect("the CSRF token in the page")
            .to_owned();
        Ok(Session {
            base: base.to_owned(),
            cookie,
            csrf,
            client,
        })
    }

    /// `GET /api/state`.
    pub async fn state(&self) -> Value {
        let body = self
            .client
            .get(format!("{}/api/state", self.base))
            .header("cookie", &self.cookie)
            .send()
            .await
            .expect("state")
            .bytes()
            .await
            .expect("body");
        serde_json::from_slice(&body).expect("state JSON")
    }

    /// The open questions, once `count` are open (waits up to 30 s).
    pub async fn open(&self, count: usize) -> Vec<Value> {
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(30);
        loop {
            let state = self.state().await;
            let open = state["open"].as_array().cloned().unwrap_or_default();
            if open.len() >= count {
                return open;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "{count} open questions: {state}"
            );
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    }

    /// The state once no question is open (waits up to 30 s). A question
    /// leaves the page when the instance's withdrawal reaches the console,
    /// which may be after the call it belonged to has ended.
    pub async fn none_open(&self) -> Value {
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(30);
        loop {
            let state = self.state().await;
            if state["open"].as_array().is_some_and(Vec::is_empty) {
                return state;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "questions still open: {state}"
            );
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    }

    /// `POST /api/answer` with `answer`; the status and the JSON said.
    pub async fn answer(&self, answer: &Value) -> (reqwest::StatusCode, Value) {
        let response = self
            .client
            .post(format!("{}/api/answer", self.base))
            .header("cookie", &self.cookie)
            .header("origin", &self.base)
            .header("x-gatehouse-csrf", &self.csrf)
            .header("content-type", "application/json")
            .body(answer.to_string())
            .send()
            .await
            .expect("answer");
        let status = response.status();
        let body = response.bytes().await.expect("body");
        (status, serde_json::from_slice(&body).unwrap_or(Value::Null))
    }
}

/// An MCP client of the gateway that declares nothing.
pub type Client = rmcp::service::RunningService<rmcp::RoleClient, ()>;

/// Calls `demo__elicit_raw` with `params` in the background; the tool
/// result's text when it ends.
pub fn elicit(client: &std::sync::Arc<Client>, params: Value) -> tokio::task::JoinHandle<String> {
    let client = client.clone();
    tokio::spawn(async move {
        let arguments = json!({ "params": params });
        let result = client
            .call_tool(
                CallToolRequestParams::new("demo__elicit_raw")
                    .with_arguments(arguments.as_object().cloned().unwrap_or_default()),
            )
            .await
            .expect("call");
        result_text(&result)
    })
}

/// A form asking for a name of at least two characters.
pub fn name_form(message: &str) -> Value {
    json!({
        "message": message,
        "requestedSchema": {"type": "object",
            "properties": {"name": {"type": "string", "minLength": 2}},
            "required": ["name"]},
    })
}

/// The elicitation result `demo__elicit_raw` returned, from its text
/// (`[demo] {...}`).
pub fn raw_answer(result: &str) -> Value {
    let json = result.split_once(' ').map_or(result, |(_, json)| json);
    serde_json::from_str(json).unwrap_or_else(|_| panic!("the raw result: {result}"))
}
