//! The real clients, unmodified, in front of the built `gatehouse serve`:
//! Codex CLI and Claude Code at the versions `tests/clients/package-lock.json`
//! pins, each talking to a scripted model API on loopback
//! (`tests/clients/model-server.mjs`) and starting gatehouse (with
//! demo-server `git` and the rules guardian behind it) as their MCP server.
//!
//! For each client: gatehouse's tools are offered to the model on the first
//! turn (also with a backend that takes seconds to start); the model calls
//! tools whose approvals the guardian declines (a destructive tool; a request
//! that lies about its call) and accepts, and each answer reaches the server
//! and the model, one audit line each; a form no module decides reaches the
//! client's programmatic channel (Codex: `codex app-server`'s
//! `mcpServer/elicitation/request`; Claude Code: the stream-json host's
//! `elicitation` control request, and its `Elicitation` hook) and the answer
//! reaches the server; unattended (`codex exec`, `claude -p`) the client
//! answers it itself; and gatehouse is gone soon after a SIGTERM or after its
//! client is killed while a form waits (Claude Code gives it a socketpair for
//! stdio, Codex pipes), with the waiting form audited.
//!
//! Nothing leaves the machine: the clients' `HTTP(S)_PROXY` points at the
//! model server, which records (and fails the test on) any request it was not
//! scripted to expect, a proxy tunnel to anywhere included.
//!
//! `.ci/run` installs the clients (`tests/clients/setup`) and sets
//! `GATEHOUSE_CLIENTS` to their directory; then a missing client fails these
//! tests. Without the variable they are skipped with a note (installing the
//! clients needs npm and the registry). They need `node` on `PATH`.

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::http_gateway::HttpGateway;
use crate::paths::{demo_server, guest, root, spawn_listening};

/// Set (by `.ci/run`) to the directory `tests/clients/setup` installed the
/// clients in: then they must be there.
const REQUIRED: &str = "GATEHOUSE_CLIENTS";

/// How long one client run (or one step of a session) may take before the
/// test gives up: generous, for two busy cores.
const RUN: Duration = Duration::from_secs(180);

/// How long gatehouse may take to exit once its client is gone or it got a
/// signal. The issue asks for well under a second; this bound only tells an
/// exit from a hang on a loaded machine, and the time taken is printed.
const GONE: Duration = Duration::from_secs(15);

/// How long the slow backend takes before it starts.
const SLOW_START_SECS: u32 = 4;

/// demo-server's tools, each listed by gatehouse as `git__TOOL`.
const DEMO_TOOLS: [&str; 11] = [
    "echo",
    "read_file",
    "delete_branch",
    "rename_branch",
    "ask_name",
    "open_url",
    "add_tool",
    "elicit_raw",
    "elicit_then_cancel",
    "hold",
    "ask_approvals",
];

/// The installed clients.
struct Clients {
    codex: PathBuf,
    claude: PathBuf,
}

/// The installed clients, or `None` (with a note) when `GATEHOUSE_CLIENTS` is
/// unset; fails the test if it is set and a client is missing.
fn clients() -> Option<Clients> {
    let Some(dir) = std::env::var_os(REQUIRED).filter(|dir| !dir.is_empty()) else {
        eprintln!(
            "skipped: {REQUIRED} is unset (.ci/run sets it to what tests/clients/setup prints, \
             after installing Codex CLI and Claude Code from npm; then a missing client fails \
             this test)"
        );
        return None;
    };
    let bin = PathBuf::from(dir).join("node_modules/.bin");
    let clients = Clients {
        codex: bin.join("codex"),
        claude: bin.join("claude"),
    };
    for client in [&clients.codex, &clients.claude] {
        assert!(
            client.exists(),
            "{REQUIRED} is set but {} is missing: run tests/clients/setup",
            client.display()
        );
    }
    Some(clients)
}

// --- the machine a test runs on ----------------------------------------------------------------

/// A temporary directory with a gatehouse config (demo-server `git` and the
/// rules guardian, allowing `rename_branch`), the wrapper the clients start
/// gatehouse through, an empty HOME and the working directory of the client.
struct Setup {
    dir: tempfile::TempDir,
    config: PathBuf,
    /// `gatehouse.sh`: appends its pid to `gatehouse.pids`, then execs
    /// gatehouse with its arguments (so the pid is gatehouse's, and its stdio
    /// is what the client gave it), its stderr appended to `gatehouse.log`
    /// with the gateway's and the binary's info lines on (its start and
    /// its stop: a signal says `shutting down`).
    wrapper: PathBuf,
    home: PathBuf,
    work: PathBuf,
    /// Set by [`Setup::over_http`]: the clients reach this gatehouse over
    /// streamable HTTP with its token instead of starting their own.
    http: Option<HttpGateway>,
}

impl Setup {
    /// The setup; with `slow`, a second backend `slow` (demo-server again)
    /// that sleeps [`SLOW_START_SECS`] before it starts.
    fn new(slow: bool) -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path();
        let server = demo_server().display().to_string();
        let guardian = guest("gatehouse_guardian").display().to_string();
        let mut servers =
            format!("[mcp_servers.git]\ncommand = {server:?}\nargs = [\"--name\", \"git\"]\n\n");
        if slow {
            let slow_script = path.join("slow-server.sh");
            write_script(
                &slow_script,
                &format!(
                    "#!/bin/sh\nsleep {SLOW_START_SECS}\nexec {} --name slow\n",
                    sh_quote(&server)
                ),
            );
            servers.push_str(&format!(
                "[mcp_servers.slow]\ncommand = {:?}\n\n",
                slow_script.display().to_string()
            ));
        }
        let config = path.join("gatehouse.toml");
        std::fs::write(
            &config,
            format!(
                "{servers}[[review.modules]]\npath = {guardian:?}\n\
                 config = {{ allow = [{{ tool = \"rename_branch\" }}] }}\n\n\
                 [elicitations]\naudit_log = \"audit.jsonl\"\nperson_timeout_sec = 120\n"
            ),
        )
        .expect("write config");
        let wrapper = path.join("gatehouse.sh");
        write_script(
            &wrapper,
            &format!(
                "#!/bin/sh\necho $$ >> {}\nRUST_LOG=warn,gatehouse_gateway=info,gatehouse=info exec {} \"$@\" 2>> {}\n",
                sh_quote(&path.join("gatehouse.pids").display().to_string()),
                sh_quote(env!("CARGO_BIN_EXE_gatehouse")),
                sh_quote(&path.join("gatehouse.log").display().to_string()),
            ),
        );
        let (home, work) = (path.join("home"), path.join("work"));
        for dir in [&home, &work] {
            std::fs::create_dir_all(dir).expect("create dir");
        }
        Setup {
            dir,
            config,
            wrapper,
            home,
            work,
            http: None,
        }
    }

    /// The same setup with one `gatehouse serve --listen` on loopback, which
    /// the clients reach over streamable HTTP with its bearer token (Codex:
    /// `url` and `bearer_token_env_var`; Claude Code: `type: "http"` with an
    /// `Authorization` header), its log in `gatehouse.log` with the
    /// gateway's debug lines on (over HTTP, a 2026-07-28 client is announced
    /// at debug: every request is a session).
    fn over_http(mut self) -> Self {
        let log = std::fs::File::create(self.path().join("gatehouse.log")).expect("log file");
        let (child, url) = spawn_listening(
            Command::new(env!("CARGO_BIN_EXE_gatehouse"))
                .args(["serve", "--listen", "127.0.0.1:0", "--config"])
                .arg(&self.config)
                .env("RUST_LOG", "warn,gatehouse_gateway=debug")
                .stderr(log),
            "listening on ",
            "gatehouse starts",
        );
        let token =
            std::fs::read_to_string(self.path().join(".gatehouse/token")).expect("the token file");
        self.http = Some(HttpGateway { child, url, token });
        self
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    /// The audit log's lines.
    fn audit(&self) -> Vec<Value> {
        std::fs::read_to_string(self.path().join("audit.jsonl"))
            .unwrap_or_default()
            .lines()
            .map(|line| serde_json::from_str(line).expect("an audit line is JSON"))
            .collect()
    }

    /// The pids of every gatehouse the client started so far.
    fn gatehouse_pids(&self) -> Vec<u32> {
        std::fs::read_to_string(self.path().join("gatehouse.pids"))
            .unwrap_or_default()
            .lines()
            .filter_map(|line| line.trim().parse().ok())
            .collect()
    }

    /// The one gatehouse the client started.
    fn gatehouse_pid(&self) -> u32 {
        let pids = self.gatehouse_pids();
        assert_eq!(
            pids.len(),
            1,
            "gatehouse started {} times: {pids:?}",
            pids.len()
        );
        pids[0]
    }

    /// Fails unless every gatehouse the client started has exited within
    /// [`GONE`] (`after` says after what).
    fn assert_gatehouse_gone(&self, label: &str, after: &str) {
        let pids = self.gatehouse_pids();
        assert!(
            !pids.is_empty(),
            "{label}: the client never started gatehouse"
        );
        for pid in pids {
            match wait_gone(pid, GONE) {
                Some(took) => eprintln!(
                    "{label}: gatehouse {pid} gone {:.2} s {after}",
                    took.as_secs_f64()
                ),
                None => {
                    let state = process_state(pid);
                    // Not left behind the test (it may be gone by now).
                    let _ = Command::new("kill")
                        .args(["-KILL", &pid.to_string()])
                        .status();
                    panic!(
                        "{label}: gatehouse {pid} still running {} s {after}\n{state}",
                        GONE.as_secs()
                    );
                }
            }
        }
        self.assert_no_socket_left(label);
    }

    /// Fails if a socket is left under `.gatehouse/` beside the config (the
    /// control socket): gatehouse removes its own when it shuts down, so one
    /// left behind by a gatehouse that is gone means it was killed before its
    /// cleanup ran.
    fn assert_no_socket_left(&self, label: &str) {
        use std::os::unix::fs::FileTypeExt;
        let mut dirs = vec![self.path().join(".gatehouse")];
        let mut left = Vec::new();
        while let Some(dir) = dirs.pop() {
            for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
                let Ok(kind) = entry.file_type() else {
                    continue;
                };
                if kind.is_dir() {
                    dirs.push(entry.path());
                } else if kind.is_socket() {
                    left.push(entry.path().display().to_string());
                }
            }
        }
        assert!(
            left.is_empty(),
            "{label}: gatehouse is gone but left its socket(s) {left:?}: it did not shut down cleanly\n\
             its log:\n{}",
            tail(&self.path().join("gatehouse.log"), 20)
        );
    }

    /// Whether a gatehouse the client started said its client speaks
    /// protocol 2026-07-28 (it opened with `server/discover`, and its
    /// questions rode in results).
    fn spoke_2026(&self) -> bool {
        std::fs::read_to_string(self.path().join("gatehouse.log"))
            .unwrap_or_default()
            .contains("speaks protocol 2026-07-28")
    }

    /// A log file in the setup for `name`.
    fn log(&self, name: &str) -> PathBuf {
        self.path().join(format!("{name}.log"))
    }
}

fn write_script(path: &Path, text: &str) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::write(path, text).expect("write script");
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
}

/// `text` quoted for sh.
fn sh_quote(text: &str) -> String {
    format!("'{}'", text.replace('\'', r"'\''"))
}

/// Whether `pid` is a live process (a zombie is not).
fn alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state follows the parenthesised command name.
        Ok(stat) => stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.trim_start().chars().next())
            .is_some_and(|state| state != 'Z' && state != 'X'),
        Err(_) => false,
    }
}

/// Waits until `pid` is gone; how long that took, or `None` after `within`.
fn wait_gone(pid: u32, within: Duration) -> Option<Duration> {
    let started = Instant::now();
    while alive(pid) {
        if started.elapsed() > within {
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Some(started.elapsed())
}

/// What /proc says about `pid`, for a failure message.
fn process_state(pid: u32) -> String {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let stack = std::fs::read_to_string(format!("/proc/{pid}/stack")).unwrap_or_default();
    format!(
        "{}\n{stack}",
        status.lines().take(8).collect::<Vec<_>>().join("\n")
    )
}

/// The parent of `pid`.
fn parent(pid: u32) -> u32 {
    let status =
        std::fs::read_to_string(format!("/proc/{pid}/status")).expect("the process is there");
    status
        .lines()
        .find_map(|line| line.strip_prefix("PPid:"))
        .and_then(|ppid| ppid.trim().parse().ok())
        .expect("a PPid line")
}

/// What `pid`'s standard input is (`socket:[N]`, `pipe:[N]`, a path).
fn stdin_of(pid: u32) -> String {
    std::fs::read_link(format!("/proc/{pid}/fd/0"))
        .map(|target| target.display().to_string())
        .unwrap_or_else(|error| format!("unknown ({error})"))
}

pub(crate) fn signal(pid: u32, signal: &str) {
    let status = Command::new("kill")
        .args([format!("-{signal}"), pid.to_string()])
        .status()
        .expect("kill runs");
    assert!(status.success(), "kill -{signal} {pid} failed");
}

/// The last `lines` lines of a log file.
fn tail(path: &Path, lines: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

// --- the scripted model ------------------------------------------------------------------------

/// `tests/clients/model-server.mjs` running a script, with its record.
struct ModelServer {
    child: Child,
    url: String,
    record: PathBuf,
    stderr: PathBuf,
    steps: usize,
}

impl ModelServer {
    fn start(setup: &Setup, script: &Value) -> Self {
        let script_path = setup.path().join("model-script.json");
        std::fs::write(&script_path, script.to_string()).expect("write script");
        let record = setup.path().join("model-requests.jsonl");
        let stderr = setup.log("model-server");
        let mut command = Command::new("node");
        command
            .arg(root().join("tests/clients/model-server.mjs"))
            .arg("--script")
            .arg(&script_path)
            .arg("--record")
            .arg(&record)
            // It exits when its stdin closes: with the test.
            .stdin(Stdio::piped())
            .stderr(std::fs::File::create(&stderr).expect("log file"));
        let (child, url) = spawn_listening(
            &mut command,
            "listening on ",
            "the scripted model server (node tests/clients/model-server.mjs) starts",
        );
        let steps = script["steps"].as_array().map_or(0, Vec::len);
        ModelServer {
            child,
            url,
            record,
            stderr,
            steps,
        }
    }

    /// The errors it reported so far (one a line on its stderr): requests it
    /// did not expect.
    fn errors(&self) -> Vec<String> {
        model_errors(&self.stderr)
    }

    /// Fails (after `stop`, which ends the client) once it reported an error:
    /// the client would only retry, for minutes.
    fn fail_fast(&self, label: &str, stop: impl FnOnce()) {
        let errors = self.errors();
        if !errors.is_empty() {
            stop();
            panic!(
                "{label}: the model server got an unexpected request:\n  {}",
                errors.join("\n  ")
            );
        }
    }

    /// Every request it got, in order.
    fn requests(&self) -> Vec<Value> {
        std::fs::read_to_string(&self.record)
            .unwrap_or_default()
            .lines()
            .map(|line| serde_json::from_str(line).expect("a record line is JSON"))
            .collect()
    }

    /// The request that step `step` answered first.
    fn request_of_step(&self, step: usize) -> Value {
        self.requests()
            .into_iter()
            .find(|request| request["step"] == json!(step))
            .unwrap_or_else(|| panic!("no request reached step {step}"))
    }

    /// Fails on any unexpected request, and unless every step was used.
    fn assert_clean(&self, label: &str) {
        let requests = self.requests();
        let errors: Vec<String> = requests
            .iter()
            .filter_map(|request| request["error"].as_str().map(str::to_owned))
            .collect();
        assert!(
            errors.is_empty(),
            "{label}: the model server got {} unexpected request(s):\n  {}\nits stderr:\n{}",
            errors.len(),
            errors.join("\n  "),
            tail(&self.stderr, 20)
        );
        let used: BTreeSet<u64> = requests
            .iter()
            .filter_map(|request| request["step"].as_u64())
            .collect();
        assert_eq!(
            used.len(),
            self.steps,
            "{label}: the model's script was not played to its end (steps used: {used:?})"
        );
    }
}

impl Drop for ModelServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The errors a model server with this stderr reported.
fn model_errors(stderr: &Path) -> Vec<String> {
    std::fs::read_to_string(stderr)
        .unwrap_or_default()
        .lines()
        .filter(|line| line.starts_with("model-server: "))
        .map(str::to_owned)
        .collect()
}

/// The names (`server__tool`) of the gatehouse tools a recorded model request
/// offered: Codex's namespace `mcp__gatehouse`; Claude Code's tools named
/// `mcp__gatehouse__TOOL`, and the deferred tools its text lists by name (one
/// a line; the model loads their schemas with ToolSearch).
fn offered_tools(request: &Value) -> BTreeSet<String> {
    const PREFIX: &str = "mcp__gatehouse__";
    let body = &request["body"];
    let mut offered = BTreeSet::new();
    for tool in body["tools"].as_array().into_iter().flatten() {
        let name = tool["name"].as_str().unwrap_or_default();
        if tool["type"] == "namespace" && name == "mcp__gatehouse" {
            for inner in tool["tools"].as_array().into_iter().flatten() {
                offered.extend(inner["name"].as_str().map(str::to_owned));
            }
        } else if let Some(rest) = name.strip_prefix(PREFIX) {
            offered.insert(rest.to_owned());
        }
    }
    let mut texts = Vec::new();
    strings(&body["system"], &mut texts);
    strings(&body["messages"], &mut texts);
    for text in texts {
        for line in text.lines() {
            if let Some(rest) = line.trim().strip_prefix(PREFIX)
                && !rest.is_empty()
                && !rest.contains(char::is_whitespace)
            {
                offered.insert(rest.to_owned());
            }
        }
    }
    offered
}

/// Every string inside `value`.
fn strings<'a>(value: &'a Value, out: &mut Vec<&'a str>) {
    match value {
        Value::String(text) => out.push(text),
        Value::Array(items) => items.iter().for_each(|item| strings(item, out)),
        Value::Object(map) => map.values().for_each(|item| strings(item, out)),
        _ => {}
    }
}

/// Fails unless the first request the model got offered every demo-server
/// tool through gatehouse.
fn assert_first_turn_lists_gatehouse_tools(label: &str, model: &ModelServer) {
    let requests = model.requests();
    let first = requests
        .first()
        .unwrap_or_else(|| panic!("{label}: the model was never asked"));
    let offered = offered_tools(first);
    let missing: Vec<String> = DEMO_TOOLS
        .iter()
        .map(|tool| format!("git__{tool}"))
        .filter(|tool| !offered.contains(tool))
        .collect();
    assert!(
        missing.is_empty(),
        "{label}: the first turn did not offer {missing:?} (offered through gatehouse: {offered:?})"
    );
}

/// The texts of the tool results a recorded model request carries.
fn tool_outputs(request: &Value) -> Vec<String> {
    let body = &request["body"];
    let mut outputs = Vec::new();
    for item in body["input"].as_array().into_iter().flatten() {
        if item["type"]
            .as_str()
            .is_some_and(|kind| kind.ends_with("_call_output"))
        {
            outputs.push(text_of(&item["output"]));
        }
    }
    for message in body["messages"].as_array().into_iter().flatten() {
        for block in message["content"].as_array().into_iter().flatten() {
            if block["type"] == "tool_result" {
                outputs.push(text_of(&block["content"]));
            }
        }
    }
    outputs
}

/// The text of a tool result: a string, or the `text` of its parts.
fn text_of(value: &Value) -> String {
    match value {
        Value::String(text) => text.clone(),
        Value::Array(parts) => parts.iter().map(text_of).collect::<Vec<_>>().join("\n"),
        Value::Object(part) => part.get("text").map(text_of).unwrap_or_default(),
        _ => String::new(),
    }
}

// --- the clients -------------------------------------------------------------------------------

/// The environment every client runs in: only `PATH` from ours, an empty
/// HOME, and every proxy variable pointing at the model server, so a request
/// for anywhere but loopback reaches it (and fails the test) instead of
/// leaving the machine.
fn client_command(program: &Path, setup: &Setup, model: &ModelServer) -> Command {
    let mut command = Command::new(program);
    command
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", &setup.home)
        .env("LANG", "C.UTF-8")
        .current_dir(&setup.work);
    for proxy in [
        "HTTPS_PROXY",
        "https_proxy",
        "HTTP_PROXY",
        "http_proxy",
        "ALL_PROXY",
        "all_proxy",
    ] {
        command.env(proxy, &model.url);
    }
    for bypass in ["NO_PROXY", "no_proxy"] {
        command.env(bypass, "127.0.0.1,localhost");
    }
    command
}

/// `codex ARGS` with a CODEX_HOME whose config.toml points Codex at the model
/// server (a `[model_providers.scripted]` entry) and at gatehouse (the entry
/// `gatehouse init --from codex` prints: `required = true`, tools approved),
/// with update checks, analytics and the ChatGPT-backed features off.
fn codex(clients: &Clients, setup: &Setup, model: &ModelServer, args: &[&str]) -> Command {
    let codex_home = setup.home.join(".codex");
    std::fs::create_dir_all(&codex_home).expect("CODEX_HOME");
    std::fs::write(
        codex_home.join("config.toml"),
        format!(
            "model = \"scripted-model\"\n\
             model_provider = \"scripted\"\n\
             approval_policy = \"never\"\n\
             sandbox_mode = \"read-only\"\n\
             check_for_update_on_startup = false\n\n\
             [analytics]\nenabled = false\n\n\
             [features]\nplugins = false\nremote_plugin = false\napps = false\n\n\
             [model_providers.scripted]\nname = \"scripted\"\nbase_url = \"{url}/v1\"\n\
             wire_api = \"responses\"\nenv_key = \"SCRIPTED_MODEL_API_KEY\"\n\n\
             [mcp_servers.gatehouse]\n{entry}\
             required = true\ndefault_tools_approval_mode = \"approve\"\n",
            url = model.url,
            entry = match &setup.http {
                Some(http) => format!(
                    "url = {:?}\nbearer_token_env_var = \"GATEHOUSE_TOKEN\"\n",
                    http.url
                ),
                None => format!(
                    "command = {:?}\nargs = [\"serve\", \"--config\", {:?}]\n",
                    setup.wrapper.display().to_string(),
                    setup.config.display().to_string()
                ),
            },
        ),
    )
    .expect("write Codex config");
    let mut command = client_command(&clients.codex, setup, model);
    if let Some(http) = &setup.http {
        command.env("GATEHOUSE_TOKEN", &http.token);
    }
    command
        .env("CODEX_HOME", &codex_home)
        .env("SCRIPTED_MODEL_API_KEY", "scripted")
        .args(args);
    command
}

/// `claude ARGS` with gatehouse added in the user scope (`claude mcp add-json
/// --scope user`, as `gatehouse init --from claude` says), its tools allowed
/// (`--allowedTools mcp__gatehouse`), `ANTHROPIC_BASE_URL` at the model
/// server and the switches that keep Claude Code off the network.
fn claude(clients: &Clients, setup: &Setup, model: &ModelServer, args: &[&str]) -> Command {
    let entry = match &setup.http {
        Some(http) => json!({
            "type": "http",
            "url": http.url,
            "headers": {"Authorization": format!("Bearer {}", http.token)},
        }),
        None => json!({
            "type": "stdio",
            "command": setup.wrapper,
            "args": ["serve", "--config", setup.config],
        }),
    };
    let config = setup.home.join(".claude.json");
    if !std::fs::read_to_string(&config).is_ok_and(|text| text.contains("\"gatehouse\"")) {
        let mut add = claude_env(client_command(&clients.claude, setup, model), model);
        add.args([
            "mcp",
            "add-json",
            "--scope",
            "user",
            "gatehouse",
            &entry.to_string(),
        ]);
        let output = add.output().expect("claude mcp add-json runs");
        assert!(
            output.status.success(),
            "claude mcp add-json failed: {}\n{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }
    let mut command = claude_env(client_command(&clients.claude, setup, model), model);
    command
        .args(args)
        .args(["--allowedTools", "mcp__gatehouse"]);
    command
}

fn claude_env(mut command: Command, model: &ModelServer) -> Command {
    command
        .env("ANTHROPIC_BASE_URL", &model.url)
        .env("ANTHROPIC_API_KEY", "sk-ant-scripted")
        .env("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1")
        .env("DISABLE_AUTOUPDATER", "1")
        .env("DISABLE_TELEMETRY", "1")
        .env("DISABLE_ERROR_REPORTING", "1")
        .env("DISABLE_BUG_COMMAND", "1");
    command
}

/// What a client run to its end printed.
struct Ran {
    status: ExitStatus,
    stdout: String,
    stderr: String,
}

/// Runs `command` to its end, with no stdin; kills it and fails after
/// [`RUN`], or as soon as `model` gets a request it did not expect.
fn run(label: &str, setup: &Setup, model: &ModelServer, mut command: Command) -> Ran {
    let (stdout, stderr) = (
        setup.log(&format!("{label}.stdout")),
        setup.log(&format!("{label}.stderr")),
    );
    let started = Instant::now();
    let mut child = command
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&stdout).expect("log file"))
        .stderr(std::fs::File::create(&stderr).expect("log file"))
        .spawn()
        .unwrap_or_else(|error| panic!("{label}: the client does not start: {error}"));
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break status;
        }
        model.fail_fast(label, || {
            std::thread::sleep(Duration::from_secs(2));
            let _ = child.kill();
            let _ = child.wait();
        });
        if started.elapsed() > RUN {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "{label}: still running after {} s\nstdout:\n{}\nstderr:\n{}",
                RUN.as_secs(),
                tail(&stdout, 30),
                tail(&stderr, 30)
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    eprintln!(
        "{label}: ran in {:.1} s, {status}",
        started.elapsed().as_secs_f64()
    );
    Ran {
        status,
        stdout: std::fs::read_to_string(&stdout).unwrap_or_default(),
        stderr: std::fs::read_to_string(&stderr).unwrap_or_default(),
    }
}

/// Runs the client `label` names (`codex …` or `claude …`) unattended on
/// `prompt` (`codex exec`, `claude -p`) and fails unless it succeeds.
fn run_unattended(
    label: &str,
    clients: &Clients,
    setup: &Setup,
    model: &ModelServer,
    prompt: &str,
) -> Ran {
    let command = if label.starts_with("codex") {
        codex(
            clients,
            setup,
            model,
            &["exec", "--skip-git-repo-check", prompt],
        )
    } else {
        claude(clients, setup, model, &["-p", prompt])
    };
    let ran = run(label, setup, model, command);
    assert!(
        ran.status.success(),
        "{label}: {}\n{}\n{}",
        ran.status,
        ran.stdout,
        ran.stderr
    );
    ran
}

/// A client speaking JSON lines on stdio: `codex app-server` (JSON-RPC) or
/// `claude -p --input-format stream-json --output-format stream-json`.
struct Session {
    label: String,
    child: Child,
    stdin: Option<ChildStdin>,
    lines: mpsc::Receiver<Value>,
    stderr: PathBuf,
    /// The model server's stderr (see [`ModelServer::errors`]).
    model_stderr: PathBuf,
    /// What it said so far, for failure messages.
    said: Vec<Value>,
}

impl Session {
    fn start(label: &str, setup: &Setup, model: &ModelServer, mut command: Command) -> Self {
        let stderr = setup.log(&format!("{label}.stderr"));
        let mut child = command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&stderr).expect("log file"))
            .spawn()
            .unwrap_or_else(|error| panic!("{label}: the client does not start: {error}"));
        let stdout = child.stdout.take().expect("stdout");
        let (send, lines) = mpsc::channel();
        let reader_label = label.to_owned();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                match serde_json::from_str::<Value>(&line) {
                    Ok(message) => {
                        if send.send(message).is_err() {
                            break;
                        }
                    }
                    Err(_) => eprintln!("{reader_label}: not JSON on stdout: {line}"),
                }
            }
        });
        Session {
            label: label.to_owned(),
            stdin: child.stdin.take(),
            child,
            lines,
            stderr,
            model_stderr: model.stderr.clone(),
            said: Vec::new(),
        }
    }

    fn send(&mut self, message: &Value) {
        let stdin = self.stdin.as_mut().expect("stdin is open");
        writeln!(stdin, "{message}")
            .and_then(|()| stdin.flush())
            .unwrap_or_else(|error| panic!("{}: cannot write to the client: {error}", self.label));
    }

    /// Reads messages until `pick` returns `Some`; fails after [`RUN`], when
    /// the client's stdout closes, or as soon as the model server got a
    /// request it did not expect.
    fn until<T>(&mut self, what: &str, mut pick: impl FnMut(&mut Self, &Value) -> Option<T>) -> T {
        let deadline = Instant::now() + RUN;
        loop {
            let errors = model_errors(&self.model_stderr);
            let problem = if !errors.is_empty() {
                format!(
                    "the model server got an unexpected request:\n  {}",
                    errors.join("\n  ")
                )
            } else if Instant::now() > deadline {
                format!("nothing after {} s", RUN.as_secs())
            } else {
                match self.lines.recv_timeout(Duration::from_millis(250)) {
                    Ok(message) => {
                        self.said.push(message.clone());
                        if let Some(found) = pick(self, &message) {
                            return found;
                        }
                        continue;
                    }
                    Err(mpsc::RecvTimeoutError::Timeout) => continue,
                    Err(mpsc::RecvTimeoutError::Disconnected) => "its stdout closed".to_owned(),
                }
            };
            panic!(
                "{}: no {what}: {problem}\nit said:\n{}\nstderr:\n{}",
                self.label,
                self.transcript(),
                tail(&self.stderr, 30)
            );
        }
    }

    /// The last messages, shortened.
    fn transcript(&self) -> String {
        self.said[self.said.len().saturating_sub(25)..]
            .iter()
            .map(|message| {
                let text = message.to_string();
                text.chars().take(400).collect::<String>()
            })
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// Closes stdin and waits for the exit, within [`RUN`].
    fn finish(mut self) -> ExitStatus {
        self.stdin = None;
        let started = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().expect("wait") {
                return status;
            }
            assert!(
                started.elapsed() < RUN,
                "{}: still running {} s after its stdin closed",
                self.label,
                RUN.as_secs()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

// --- Codex app-server --------------------------------------------------------------------------

/// `codex app-server` with a thread started (approval policy `on-request`, so
/// that elicitations are put to this client) and one turn asking `prompt`.
fn codex_app_server_turn(
    clients: &Clients,
    setup: &Setup,
    model: &ModelServer,
    prompt: &str,
) -> Session {
    let mut session = Session::start(
        "codex app-server",
        setup,
        model,
        codex(clients, setup, model, &["app-server"]),
    );
    session.send(&json!({
        "id": 1, "method": "initialize",
        "params": {"clientInfo": {"name": "gatehouse-clients-test", "version": "0"}},
    }));
    session.until("initialize result", |_, message| {
        (message["id"] == 1).then_some(())
    });
    session.send(&json!({"method": "initialized"}));
    session.send(&json!({
        "id": 2, "method": "thread/start",
        "params": {"cwd": setup.work, "approvalPolicy": "on-request"},
    }));
    let thread = session.until("thread/start result", |_, message| {
        (message["id"] == 2).then(|| {
            message["result"]["thread"]["id"]
                .as_str()
                .map(str::to_owned)
        })
    });
    let thread = thread.expect("thread/start gave a thread id");
    session.send(&json!({
        "id": 3, "method": "turn/start",
        "params": {"threadId": thread, "input": [{"type": "text", "text": prompt}]},
    }));
    session
}

/// Reads app-server messages until its `mcpServer/elicitation/request`,
/// failing on any other request to the client or a turn that ends first.
fn codex_elicitation(session: &mut Session) -> Value {
    session.until("mcpServer/elicitation/request", |session, message| {
        let method = message["method"].as_str().unwrap_or_default();
        if method == "mcpServer/elicitation/request" {
            return Some(message.clone());
        }
        assert!(
            !(method == "turn/completed" || (method.contains('/') && message.get("id").is_some())),
            "{}: {method} before any elicitation: {message}\n{}",
            session.label,
            session.transcript()
        );
        None
    })
}

/// Reads app-server messages until `turn/completed`; returns the turn.
fn codex_turn_completed(session: &mut Session) -> Value {
    session.until("turn/completed", |session, message| {
        let method = message["method"].as_str().unwrap_or_default();
        assert!(
            !(method.contains('/') && message.get("id").is_some()),
            "{}: unexpected request {method}: {message}",
            session.label
        );
        (method == "turn/completed").then(|| message["params"]["turn"].clone())
    })
}

// --- Claude Code stream-json -------------------------------------------------------------------

/// `claude -p` as an SDK host drives it (stream-json both ways), with one
/// user message.
fn claude_host(clients: &Clients, setup: &Setup, model: &ModelServer, prompt: &str) -> Session {
    let command = claude(
        clients,
        setup,
        model,
        &[
            "-p",
            "--input-format",
            "stream-json",
            "--output-format",
            "stream-json",
            "--verbose",
        ],
    );
    let mut session = Session::start("claude stream-json", setup, model, command);
    session.send(&json!({"type": "user", "message": {"role": "user", "content": prompt}}));
    session
}

/// Reads stream-json messages until the `elicitation` control request,
/// failing on any other control request or a result that comes first.
fn claude_elicitation(session: &mut Session) -> Value {
    session.until("elicitation control request", |session, message| {
        if message["type"] == "control_request" {
            assert_eq!(
                message["request"]["subtype"], "elicitation",
                "{}: unexpected control request: {message}",
                session.label
            );
            return Some(message.clone());
        }
        assert!(
            message["type"] != "result",
            "{}: the turn ended before any elicitation: {message}\n{}",
            session.label,
            session.transcript()
        );
        None
    })
}

/// Reads stream-json messages until the `result`; returns it.
fn claude_result(session: &mut Session) -> Value {
    session.until("result", |session, message| {
        assert!(
            message["type"] != "control_request",
            "{}: unexpected control request: {message}",
            session.label
        );
        (message["type"] == "result").then(|| message.clone())
    })
}

// --- scripts -----------------------------------------------------------------------------------

/// The model deletes `main` (destructive: the guardian declines), renames
/// `main` (the server's approval request lies, naming `scratch`: gatehouse
/// declines), renames `scratch` (honest, allowed: the guardian accepts), and
/// each step waits for the server's report of the answer to the one before.
fn approvals_script() -> Value {
    json!({"steps": [
        {"when": {"no_tool_output": true},
         "reply": {"call": {"tool": "git__delete_branch", "arguments": {"branch": "main"}}}},
        {"when": {"tool_output_contains": "[git] elicitation answered: decline"},
         "reply": {"call": {"tool": "git__rename_branch", "arguments": {"branch": "main", "new_name": "release"}}}},
        {"when": {"tool_output_contains": "rename main to release: elicitation answered: decline"},
         "reply": {"call": {"tool": "git__rename_branch", "arguments": {"branch": "scratch", "new_name": "release"}}}},
        {"when": {"tool_output_contains": "rename scratch to release: elicitation answered: accept"},
         "reply": {"text": "main is kept; scratch is renamed to release."}},
    ]})
}

const APPROVALS_PROMPT: &str =
    "Delete the branch main, then rename main to release, then scratch to release.";

/// Checks what [`approvals_script`] leaves behind: the model's record (each
/// answer reached the server, whose report reached the model) and one audit
/// line per approval, decided as the guardian and gatehouse should.
fn assert_approvals(label: &str, setup: &Setup, model: &ModelServer) {
    model.assert_clean(label);
    assert_first_turn_lists_gatehouse_tools(label, model);
    let last = tool_outputs(&model.request_of_step(3)).join("\n");
    assert!(last.contains("unacceptable risk"), "{label}: {last}");
    assert!(
        last.contains("does not match"),
        "{label}: the lie's decline: {last}"
    );
    let lines = setup.audit();
    let decided: Vec<(&str, &str)> = lines
        .iter()
        .map(|line| {
            (
                line["decided_by"].as_str().unwrap_or_default(),
                line["action"].as_str().unwrap_or_default(),
            )
        })
        .collect();
    // The lie is declined by gatehouse's own check of the request against
    // the agent's call (`policy`) or by the guardian, which is shown the call.
    assert!(
        matches!(
            decided[..],
            [
                ("guest", "decline"),
                ("policy" | "guest", "decline"),
                ("guest", "accept")
            ]
        ),
        "{label}: one audit line per approval: {decided:?}\n{lines:#?}"
    );
    assert!(
        lines.iter().all(|line| line["server"] == "git"),
        "{lines:?}"
    );
}

/// The model asks for the person's name (demo-server `ask_name`: a form no
/// module decides), then ends once the server's answer contains `expect`.
fn ask_name_script(expect: &str) -> Value {
    json!({"steps": [
        {"when": {"no_tool_output": true}, "reply": {"call": {"tool": "git__ask_name", "arguments": {}}}},
        {"when": {"tool_output_contains": expect}, "reply": {"text": "Greeted."}},
    ]})
}

const ASK_PROMPT: &str = "Greet me by my name.";

/// The model asks for the name, and answers whatever comes back (the tests
/// that end gatehouse or the client while the form waits).
fn ask_name_then_anything() -> Value {
    json!({
        "steps": [{"when": {"no_tool_output": true},
                   "reply": {"call": {"tool": "git__ask_name", "arguments": {}}}}],
        "any": [{"reply": {"text": "The tool failed."}}],
    })
}

/// Checks the one audit line of a form answered by the person through the
/// client, with `name`.
fn assert_person_answered(label: &str, setup: &Setup, name: &str) {
    let lines = setup.audit();
    assert_eq!(lines.len(), 1, "{label}: {lines:#?}");
    let line = &lines[0];
    assert_eq!(line["decided_by"], "person", "{label}: {line}");
    assert_eq!(line["answer"]["action"], "accept", "{label}: {line}");
    assert_eq!(line["answer"]["content"]["name"], name, "{label}: {line}");
}

// --- approvals ---------------------------------------------------------------------------------

/// `client` (`codex exec` or `claude -p`) runs [`approvals_script`] through
/// gatehouse, which it starts itself or, `over_http`, reaches on loopback
/// with the token: the guardian and gatehouse decide as they should, each
/// answer reaching the server and the model.
fn approvals(client: &str, over_http: bool) {
    let Some(clients) = clients() else { return };
    let label = if over_http {
        format!("{client} over HTTP")
    } else {
        client.to_owned()
    };
    let setup = if over_http {
        Setup::new(false).over_http()
    } else {
        Setup::new(false)
    };
    let model = ModelServer::start(&setup, &approvals_script());
    let ran = run_unattended(&label, &clients, &setup, &model, APPROVALS_PROMPT);
    assert_approvals(&label, &setup, &model);
    assert!(
        ran.stdout.contains("scratch is renamed"),
        "{label}: {}",
        ran.stdout
    );
    if !over_http {
        setup.assert_gatehouse_gone(&label, "after the client ended");
    }
}

#[test]
fn codex_exec_offers_gatehouse_tools_and_the_guardian_decides_its_approvals() {
    approvals("codex exec", false);
}

#[test]
fn claude_print_offers_gatehouse_tools_and_the_guardian_decides_its_approvals() {
    approvals("claude -p", false);
}

/// A backend that takes seconds to start must not keep gatehouse's other
/// tools from the first turn of `client` (`codex` or `claude`, unattended).
fn first_turn_with_a_slow_backend(client: &str) {
    let Some(clients) = clients() else { return };
    let label = format!("{client} (slow backend)");
    let setup = Setup::new(true);
    let model = ModelServer::start(&setup, &echo_script());
    run_unattended(&label, &clients, &setup, &model, "Echo hi.");
    model.assert_clean(&label);
    assert_first_turn_lists_gatehouse_tools(&label, &model);
    setup.assert_gatehouse_gone(&label, "after the client ended");
}

#[test]
fn codex_exec_offers_gatehouse_tools_on_the_first_turn_with_a_slow_backend() {
    first_turn_with_a_slow_backend("codex exec");
}

#[test]
fn claude_print_offers_gatehouse_tools_on_the_first_turn_with_a_slow_backend() {
    first_turn_with_a_slow_backend("claude -p");
}

// --- forms for the person ----------------------------------------------------------------------

/// Codex's app-server puts the form to its client as
/// `mcpServer/elicitation/request`; the answer reaches the server.
#[test]
fn codex_app_server_puts_a_deferred_form_to_its_client_and_the_answer_reaches_the_server() {
    let Some(clients) = clients() else { return };
    let setup = Setup::new(false);
    let model = ModelServer::start(&setup, &ask_name_script("[git] hello Ada"));
    let mut session = codex_app_server_turn(&clients, &setup, &model, ASK_PROMPT);
    let request = codex_elicitation(&mut session);
    let params = &request["params"];
    assert_eq!(params["serverName"], "gatehouse", "{request}");
    assert_eq!(params["mode"], "form", "{request}");
    assert_eq!(params["message"], "[git] What is your name?", "{request}");
    assert_eq!(params["_meta"]["io.gatehouse/server"], "git", "{request}");
    assert!(
        params["requestedSchema"]["properties"]["name"].is_object(),
        "{request}"
    );
    let host = Host::CodexAppServer;
    host.answer(
        &mut session,
        &request,
        json!({"action": "accept", "content": {"name": "Ada"}}),
    );
    assert!(
        host.turn_ended(&mut session),
        "codex app-server: the turn failed"
    );
    let status = session.finish();
    assert!(status.success(), "codex app-server: {status}");
    model.assert_clean("codex app-server");
    assert_first_turn_lists_gatehouse_tools("codex app-server", &model);
    assert_person_answered("codex app-server", &setup, "Ada");
    // Codex opens with `initialize`: the form went to it as a request.
    assert!(
        !setup.spoke_2026(),
        "codex app-server: Codex 0.169.0 was not known to speak 2026-07-28 to its servers"
    );
    setup.assert_gatehouse_gone("codex app-server", "after codex app-server ended");
}

/// Claude Code's stream-json mode asks its SDK host with an `elicitation`
/// control request; the host's answer reaches the server.
#[test]
fn claude_stream_json_puts_a_deferred_form_to_its_host_and_the_answer_reaches_the_server() {
    let Some(clients) = clients() else { return };
    let setup = Setup::new(false);
    let model = ModelServer::start(&setup, &ask_name_script("[git] hello Ada"));
    let mut session = claude_host(&clients, &setup, &model, ASK_PROMPT);
    let request = claude_elicitation(&mut session);
    let asked = &request["request"];
    assert_eq!(asked["mcp_server_name"], "gatehouse", "{request}");
    assert_eq!(asked["mode"], "form", "{request}");
    assert_eq!(asked["message"], "[git] What is your name?", "{request}");
    assert!(
        asked["requested_schema"]["properties"]["name"].is_object(),
        "{request}"
    );
    let host = Host::ClaudeStreamJson;
    host.answer(
        &mut session,
        &request,
        json!({"action": "accept", "content": {"name": "Ada"}}),
    );
    assert!(
        host.turn_ended(&mut session),
        "claude stream-json: the turn failed"
    );
    let status = session.finish();
    assert!(status.success(), "claude stream-json: {status}");
    model.assert_clean("claude stream-json");
    assert_first_turn_lists_gatehouse_tools("claude stream-json", &model);
    assert_person_answered("claude stream-json", &setup, "Ada");
    // Claude Code opens with `server/discover`: the form rode in the result
    // of its call, and its answer came back in the call sent again.
    assert!(
        setup.spoke_2026(),
        "claude stream-json: gatehouse never said its client speaks 2026-07-28"
    );
    setup.assert_gatehouse_gone("claude stream-json", "after claude ended");
}

/// Claude Code's `Elicitation` hook answers the form in `claude -p`, before
/// any dialog; its answer reaches the server.
#[test]
fn claude_elicitation_hook_answers_a_deferred_form_and_the_answer_reaches_the_server() {
    let Some(clients) = clients() else { return };
    let setup = Setup::new(false);
    let model = ModelServer::start(&setup, &ask_name_script("[git] hello Hook"));
    let hook = setup.path().join("elicitation-hook.sh");
    let hook_input = setup.path().join("hook-input.json");
    write_script(
        &hook,
        &format!(
            "#!/bin/sh\ncat > {}\nprintf '%s\\n' '{}'\n",
            sh_quote(&hook_input.display().to_string()),
            json!({"hookSpecificOutput": {"hookEventName": "Elicitation", "action": "accept",
                                          "content": {"name": "Hook"}}})
        ),
    );
    let settings = setup.path().join("claude-settings.json");
    std::fs::write(
        &settings,
        json!({"hooks": {"Elicitation": [{"matcher": "gatehouse",
                                          "hooks": [{"type": "command", "command": hook}]}]}})
        .to_string(),
    )
    .expect("write settings");
    let settings = settings.display().to_string();
    let ran = run(
        "claude -p (Elicitation hook)",
        &setup,
        &model,
        claude(
            &clients,
            &setup,
            &model,
            &["-p", ASK_PROMPT, "--settings", &settings],
        ),
    );
    assert!(
        ran.status.success(),
        "claude -p: {}\n{}\n{}",
        ran.status,
        ran.stdout,
        ran.stderr
    );
    model.assert_clean("claude -p (Elicitation hook)");
    let input: Value =
        serde_json::from_str(&std::fs::read_to_string(&hook_input).expect("the hook ran"))
            .expect("the hook's input is JSON");
    assert_eq!(input["hook_event_name"], "Elicitation", "{input}");
    assert_eq!(input["mcp_server_name"], "gatehouse", "{input}");
    assert_eq!(input["message"], "[git] What is your name?", "{input}");
    assert_person_answered("claude -p (Elicitation hook)", &setup, "Hook");
    setup.assert_gatehouse_gone("claude -p (Elicitation hook)", "after claude -p ended");
}

/// Unattended, each client answers a forwarded form itself: `codex exec`
/// declines, `claude -p` cancels. The answer reaches the server, and the
/// audit line names the client that gave it.
#[test]
fn codex_exec_and_claude_print_answer_a_deferred_form_unattended() {
    let Some(clients) = clients() else { return };
    for (label, action, client_name) in [
        ("codex exec (unattended)", "decline", "codex-mcp-client"),
        ("claude -p (unattended)", "cancel", "claude-code"),
    ] {
        let setup = Setup::new(false);
        let model = ModelServer::start(&setup, &ask_name_script(&format!("[git] {action}")));
        run_unattended(label, &clients, &setup, &model, ASK_PROMPT);
        model.assert_clean(label);
        let lines = setup.audit();
        assert_eq!(lines.len(), 1, "{label}: {lines:#?}");
        assert_eq!(
            lines[0]["answer"]["action"], action,
            "{label}: {}",
            lines[0]
        );
        eprintln!("{label}: the answering client: {}", lines[0]["client"]);
        assert!(
            lines[0]["client"]["name"] == client_name,
            "{label}: the audit line does not name the client that answered: {}",
            lines[0]
        );
        setup.assert_gatehouse_gone(label, "after the client ended");
    }
}

/// Unattended runs (`codex exec`, `claude -p`) that must not answer for
/// the person: with `person = "console"` the deferred form waits in the
/// approvals console, a person answers it there in a real browser, and the
/// tool result the model gets carries that answer. The audit line says the
/// person answered through the console, not the client.
#[test]
fn codex_exec_and_claude_print_wait_for_the_person_in_the_console() {
    use crate::browser::Driver;
    use crate::console_support::{ConsoleProcess, TOKEN};
    let Some(clients) = clients() else { return };
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let Some(driver) = runtime.block_on(Driver::start()) else {
        return;
    };
    for (label, name) in [
        ("codex exec (console)", "Console Codex"),
        ("claude -p (console)", "Console Claude"),
    ] {
        let setup = Setup::new(false);
        let config = std::fs::read_to_string(&setup.config).expect("config");
        let config = config.replace("[elicitations]\n", "[elicitations]\nperson = \"console\"\n")
            + "\n[console]\n";
        std::fs::write(&setup.config, config).expect("config");
        let console = ConsoleProcess::start(&setup.config);
        let person = runtime.block_on(async {
            let person = driver.browser().await;
            person.login(&console.base, TOKEN).await;
            person
        });
        let model = ModelServer::start(&setup, &ask_name_script(&format!("hello {name}")));
        let ran = std::thread::scope(|scope| {
            let client =
                scope.spawn(|| run_unattended(label, &clients, &setup, &model, ASK_PROMPT));
            runtime.block_on(async {
                let field = person
                    .wait_for("article.question input[name=\"name\"]")
                    .await;
                field
                    .send_keys(&format!("{name}\u{E007}"))
                    .await
                    .expect("type");
            });
            client.join().expect("the client run")
        });
        model.assert_clean(label);
        eprintln!("{label}: {}", ran.stdout.trim());
        let lines = setup.audit();
        assert_eq!(lines.len(), 1, "{label}: {lines:#?}");
        let line = &lines[0];
        assert_eq!(line["decided_by"], "person", "{label}: {line}");
        assert_eq!(line["person"]["channel"], "console", "{label}: {line}");
        assert_eq!(line["answer"]["content"]["name"], name, "{label}: {line}");
        drop(console);
        setup.assert_gatehouse_gone(label, "after the client ended");
    }
}

// --- shutdown ----------------------------------------------------------------------------------

/// Fails unless the one audit line is the waiting form's, neither an accept
/// nor recorded as the person's answer (no person answered), with a reason
/// that says `why`.
fn assert_waiting_form_audited(label: &str, setup: &Setup, why: &str) {
    let lines = setup.audit();
    assert_eq!(
        lines.len(),
        1,
        "{label}: the waiting form's audit line: {lines:#?}"
    );
    let line = &lines[0];
    assert_eq!(line["server"], "git", "{label}: {line}");
    assert_ne!(line["answer"]["action"], "accept", "{label}: {line}");
    assert_ne!(
        line["decided_by"], "person",
        "{label}: no person answered: {line}"
    );
    assert!(
        line["reason"]
            .as_str()
            .is_some_and(|reason| reason.contains(why)),
        "{label}: the reason should say \"{why}\": {line}"
    );
    eprintln!("{label}: audited {line}");
}

/// The model echoes `hi` through gatehouse.
fn echo_script() -> Value {
    json!({"steps": [
        {"when": {"no_tool_output": true},
         "reply": {"call": {"tool": "git__echo", "arguments": {"text": "hi"}}}},
        {"when": {"tool_output_contains": "[git] hi"}, "reply": {"text": "Echoed."}},
    ]})
}

/// A client as a program drives it, with a form for the person: Codex's
/// app-server (pipes for stdio) or Claude Code's stream-json host (a
/// socketpair).
#[derive(Clone, Copy)]
enum Host {
    CodexAppServer,
    ClaudeStreamJson,
}

impl Host {
    fn label(self) -> &'static str {
        match self {
            Host::CodexAppServer => "codex app-server",
            Host::ClaudeStreamJson => "claude stream-json",
        }
    }

    /// Starts a turn asking `prompt`.
    fn start(self, clients: &Clients, setup: &Setup, model: &ModelServer, prompt: &str) -> Session {
        match self {
            Host::CodexAppServer => codex_app_server_turn(clients, setup, model, prompt),
            Host::ClaudeStreamJson => claude_host(clients, setup, model, prompt),
        }
    }

    /// Waits for the form; returns the client's request for it.
    fn elicitation(self, session: &mut Session) -> Value {
        match self {
            Host::CodexAppServer => codex_elicitation(session),
            Host::ClaudeStreamJson => claude_elicitation(session),
        }
    }

    /// Answers the form `request` with `answer` (an elicitation result).
    fn answer(self, session: &mut Session, request: &Value, answer: Value) {
        match self {
            Host::CodexAppServer => session.send(&json!({"id": request["id"], "result": answer})),
            Host::ClaudeStreamJson => session.send(&json!({
                "type": "control_response",
                "response": {"subtype": "success", "request_id": request["request_id"],
                             "response": answer},
            })),
        }
    }

    /// Waits for the end of the turn; whether it succeeded.
    fn turn_ended(self, session: &mut Session) -> bool {
        match self {
            Host::CodexAppServer => codex_turn_completed(session)["status"] == "completed",
            Host::ClaudeStreamJson => claude_result(session)["subtype"] == "success",
        }
    }

    /// The message of the form `request` puts to the person.
    fn message(self, request: &Value) -> String {
        let message = match self {
            Host::CodexAppServer => &request["params"]["message"],
            Host::ClaudeStreamJson => &request["request"]["message"],
        };
        message.as_str().unwrap_or_default().to_owned()
    }

    /// What stdin the client gives its MCP servers, as `/proc` names it.
    fn stdio_kind(self) -> &'static str {
        match self {
            Host::CodexAppServer => "pipe:",
            Host::ClaudeStreamJson => "socket:",
        }
    }
}

/// SIGTERM to gatehouse between two turns of `host`'s session, whose
/// client keeps gatehouse's stdin open (Claude Code's is a socketpair):
/// gatehouse exits and cleans up (before, a blocking read of the socket held
/// it forever).
fn sigterm_between_turns(host: Host) {
    let Some(clients) = clients() else { return };
    let label = format!("{}, SIGTERM to gatehouse between turns", host.label());
    let setup = Setup::new(false);
    let model = ModelServer::start(&setup, &echo_script());
    let mut session = host.start(&clients, &setup, &model, "Echo hi.");
    assert!(
        host.turn_ended(&mut session),
        "{label}: the first turn failed"
    );
    let pid = setup.gatehouse_pid();
    let stdin = stdin_of(pid);
    assert!(
        stdin.starts_with(host.stdio_kind()),
        "{label}: gatehouse's stdin is {stdin}"
    );
    signal(pid, "TERM");
    setup.assert_gatehouse_gone(&label, "after SIGTERM");
    session.finish();
    model.assert_clean(&label);
}

/// SIGTERM to gatehouse while a form waits for `host`'s person: gatehouse
/// exits at once and cleans up, the form is audited as cancelled by the
/// shutdown (not as the person's), and the client carries on without it.
fn sigterm_while_a_form_waits(host: Host) {
    let Some(clients) = clients() else { return };
    let label = format!("{}, SIGTERM to gatehouse", host.label());
    let setup = Setup::new(false);
    let model = ModelServer::start(&setup, &ask_name_then_anything());
    let mut session = host.start(&clients, &setup, &model, ASK_PROMPT);
    let request = host.elicitation(&mut session);
    let pid = setup.gatehouse_pid();
    let stdin = stdin_of(pid);
    assert!(
        stdin.starts_with(host.stdio_kind()),
        "{label}: gatehouse's stdin is {stdin}"
    );
    signal(pid, "TERM");
    setup.assert_gatehouse_gone(&label, "after SIGTERM");
    assert_waiting_form_audited(&label, &setup, "gatehouse is shutting down");
    // The client may still wait for its own person's answer (Claude Code
    // does; the server that asked is gone and the answer goes nowhere).
    if matches!(host, Host::ClaudeStreamJson) {
        host.answer(&mut session, &request, json!({"action": "cancel"}));
    }
    host.turn_ended(&mut session);
    session.finish();
    model.assert_clean(&label);
}

/// `host`'s client killed while a form waits for its person: gatehouse
/// answers the server, audits that the client went away and exits.
fn killed_while_a_form_waits(host: Host) {
    let Some(clients) = clients() else { return };
    let label = format!("{}, killed", host.label());
    let setup = Setup::new(false);
    let model = ModelServer::start(&setup, &ask_name_then_anything());
    let mut session = host.start(&clients, &setup, &model, ASK_PROMPT);
    host.elicitation(&mut session);
    let pid = setup.gatehouse_pid();
    let client = parent(pid);
    eprintln!(
        "{label}: gatehouse {pid} (stdin {}), client {client}",
        stdin_of(pid)
    );
    signal(client, "KILL");
    setup.assert_gatehouse_gone(&label, "after its client was killed");
    assert_waiting_form_audited(&label, &setup, "went away");
    drop(session);
    model.assert_clean(&label);
}

#[test]
fn claude_sigterm_to_gatehouse_between_turns_on_socketpair_stdio_exits() {
    sigterm_between_turns(Host::ClaudeStreamJson);
}

#[test]
fn codex_sigterm_to_gatehouse_between_turns_exits() {
    sigterm_between_turns(Host::CodexAppServer);
}

#[test]
fn claude_sigterm_to_gatehouse_on_socketpair_stdio_exits_and_audits_the_waiting_form() {
    sigterm_while_a_form_waits(Host::ClaudeStreamJson);
}

#[test]
fn claude_killed_while_a_form_waits_gatehouse_answers_audits_and_exits() {
    killed_while_a_form_waits(Host::ClaudeStreamJson);
}

#[test]
fn codex_sigterm_to_gatehouse_exits_and_audits_the_waiting_form() {
    sigterm_while_a_form_waits(Host::CodexAppServer);
}

#[test]
fn codex_killed_while_a_form_waits_gatehouse_answers_audits_and_exits() {
    killed_while_a_form_waits(Host::CodexAppServer);
}

// --- over streamable HTTP ----------------------------------------------------------------------

/// Both clients reach one `gatehouse serve --listen` over streamable HTTP
/// with its bearer token: the tools are offered, and the guardian decides
/// the approvals as over stdio.
#[test]
fn over_http_with_the_token_both_clients_get_the_tools_and_the_guardian_decides() {
    approvals("codex exec", true);
    approvals("claude -p", true);
}

/// Over streamable HTTP a form no module decides reaches each client's
/// programmatic channel and the answer reaches the server: Codex's on the
/// POST stream of its call (it opens with `initialize`), Claude Code's in
/// the result of its call (it opens with `server/discover`: protocol
/// 2026-07-28, each request a session of its own).
#[test]
fn over_http_a_deferred_form_reaches_each_client_and_the_answer_the_server() {
    let Some(clients) = clients() else { return };
    for host in [Host::CodexAppServer, Host::ClaudeStreamJson] {
        let label = format!("{} over HTTP", host.label());
        let setup = Setup::new(false).over_http();
        let model = ModelServer::start(&setup, &ask_name_script("[git] hello Ada"));
        let mut session = host.start(&clients, &setup, &model, ASK_PROMPT);
        let request = host.elicitation(&mut session);
        assert_eq!(
            host.message(&request),
            "[git] What is your name?",
            "{label}: {request}"
        );
        host.answer(
            &mut session,
            &request,
            json!({"action": "accept", "content": {"name": "Ada"}}),
        );
        assert!(host.turn_ended(&mut session), "{label}: the turn failed");
        let status = session.finish();
        assert!(status.success(), "{label}: {status}");
        model.assert_clean(&label);
        assert_person_answered(&label, &setup, "Ada");
        let client = &setup.audit()[0]["client"]["name"];
        let expected = match host {
            Host::CodexAppServer => "codex-mcp-client",
            Host::ClaudeStreamJson => "claude-code",
        };
        assert_eq!(client, expected, "{label}: the audit names the client");
        assert_eq!(
            setup.spoke_2026(),
            matches!(host, Host::ClaudeStreamJson),
            "{label}: which protocol the client spoke"
        );
    }
}

// --- instances ---------------------------------------------------------------------------------

/// Runs `gatehouse reload --config config`: whether it succeeded, and its
/// stdout (a line `INSTANCE: answer` per live instance).
fn reload_all(config: &Path) -> (bool, String) {
    let output = Command::new(env!("CARGO_BIN_EXE_gatehouse"))
        .args(["reload", "--config"])
        .arg(config)
        .output()
        .expect("gatehouse reload runs");
    (
        output.status.success(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
    )
}

/// Two Claude Code sessions at once on one config start a gatehouse each
/// (Claude Code starts one per session): both run side by side, `gatehouse
/// reload` reaches each, and when one session ends, the other's gatehouse
/// still reloads.
#[test]
fn two_claude_sessions_on_one_config_each_keep_their_gatehouse_and_reload_reaches_both() {
    let Some(clients) = clients() else { return };
    let label = "two claude stream-json sessions";
    let setup = Setup::new(false);
    let model = ModelServer::start(&setup, &json!({"any": [{"reply": {"text": "Hello."}}]}));
    let host = Host::ClaudeStreamJson;
    let mut first = host.start(&clients, &setup, &model, "Say hello.");
    assert!(
        host.turn_ended(&mut first),
        "{label}: the first session's turn"
    );
    let mut second = host.start(&clients, &setup, &model, "Say hello.");
    assert!(
        host.turn_ended(&mut second),
        "{label}: the second session's turn"
    );
    let pids = setup.gatehouse_pids();
    assert_eq!(pids.len(), 2, "{label}: a gatehouse per session: {pids:?}");
    assert!(pids.iter().all(|pid| alive(*pid)), "{label}: {pids:?}");
    let (reloaded, said) = reload_all(&setup.config);
    assert!(reloaded, "{label}: reload: {said}");
    assert_eq!(
        said.lines().count(),
        2,
        "{label}: one answer per instance: {said}"
    );
    assert!(
        said.lines().all(|line| line.contains(": ok")),
        "{label}: {said}"
    );
    // The second session ends: its gatehouse goes, the first's still
    // reloads.
    second.finish();
    assert!(
        wait_gone(pids[1], GONE).is_some(),
        "{label}: the second gatehouse outlived its session"
    );
    let (reloaded, said) = reload_all(&setup.config);
    assert!(reloaded, "{label}: reload after one ended: {said}");
    assert_eq!(said.lines().count(), 1, "{label}: {said}");
    first.finish();
    setup.assert_gatehouse_gone(label, "after both sessions ended");
    model.assert_clean(label);
}
