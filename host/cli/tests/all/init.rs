//! `gatehouse init`: a config written from each client's own, loaded by the
//! real loader and by `gatehouse review`, with the modules' digests pinned,
//! what is not carried reported, nothing overwritten without `--force`, and
//! hostile text kept inside its TOML strings and escaped on the terminal.
//! Only servers the client itself would run are imported (a project's
//! `.mcp.json` as Claude Code approved it, Cursor's project file when told),
//! no `env` or header value lands in the working tree, and the files
//! gatehouse writes there are added to its `.gitignore`.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::Arc;
use std::sync::atomic::AtomicUsize;
use std::time::{Duration, Instant};

use gatehouse_gateway::config::Config;
use gatehouse_gateway::router::ElicitationSettings;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use crate::gateway::{Client, stdio_client};
use crate::paths::{demo_server, guest, root};

/// A home and a project directory for one run, and where the config goes.
struct Setup {
    home: tempfile::TempDir,
    project: tempfile::TempDir,
}

impl Setup {
    fn new() -> Setup {
        Setup {
            home: tempfile::tempdir().expect("tempdir"),
            project: tempfile::tempdir().expect("tempdir"),
        }
    }

    /// The project directory as the binary sees its working directory.
    fn project(&self) -> PathBuf {
        self.project.path().canonicalize().expect("canonical")
    }

    fn config(&self) -> PathBuf {
        self.project().join("gh/gatehouse.toml")
    }

    fn write(&self, relative: &str, text: &str) -> PathBuf {
        let path = self.home.path().join(relative);
        std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
        std::fs::write(&path, text).expect("writes");
        path
    }

    fn write_project(&self, relative: &str, text: &str) -> PathBuf {
        let path = self.project().join(relative);
        std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
        std::fs::write(&path, text).expect("writes");
        path
    }

    /// `gatehouse init ARGS --config gh/gatehouse.toml`, HOME the temporary
    /// home, run in the project directory.
    fn init(&self, args: &[&str]) -> Output {
        self.init_with_guests(args, &guests_dir())
    }

    fn init_with_guests(&self, args: &[&str], guests: &Path) -> Output {
        self.command(args, "gh/gatehouse.toml", guests)
            .output()
            .expect("gatehouse runs")
    }

    /// `gatehouse init ARGS --config CONFIG` with `CODEX_HOME` set.
    fn init_codex_home(&self, args: &[&str], codex_home: &Path) -> Output {
        self.command(args, "gh/gatehouse.toml", &guests_dir())
            .env("CODEX_HOME", codex_home)
            .output()
            .expect("gatehouse runs")
    }

    /// `gatehouse init ARGS --config CONFIG` (relative to the project).
    fn init_config(&self, args: &[&str], config: &str) -> Output {
        self.command(args, config, &guests_dir())
            .output()
            .expect("gatehouse runs")
    }

    fn command(&self, args: &[&str], config: &str, guests: &Path) -> Command {
        let mut command = Command::new(env!("CARGO_BIN_EXE_gatehouse"));
        command
            .arg("init")
            .args(args)
            .args(["--config", config])
            .current_dir(self.project())
            .env("HOME", self.home.path())
            .env_remove("CODEX_HOME")
            .env("GATEHOUSE_GUESTS_DIR", guests);
        command
    }
}

fn guests_dir() -> PathBuf {
    guest("gatehouse_guardian")
        .parent()
        .expect("a directory")
        .to_path_buf()
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

fn assert_ok(output: &Output) {
    assert_eq!(
        output.status.code(),
        Some(0),
        "stdout:\n{}\nstderr:\n{}",
        stdout(output),
        stderr(output)
    );
}

/// The entry printed after "add this to ...", up to the next blank line
/// followed by prose (or the end).
fn printed_entry(output: &Output) -> String {
    let out = stdout(output);
    let (_, after) = out.split_once("add this to").expect("an entry is printed");
    let after = after.split_once('\n').map_or("", |(_, rest)| rest);
    after
        .split("\nThen remove")
        .next()
        .unwrap_or_default()
        .trim()
        .to_owned()
}

/// The printed Codex entry's `[mcp_servers.gatehouse]` table.
fn codex_entry(output: &Output) -> toml::Table {
    let entry: toml::Table = toml::from_str(&printed_entry(output)).expect("the entry is TOML");
    entry["mcp_servers"]["gatehouse"]
        .as_table()
        .expect("a table")
        .clone()
}

/// `word` as `/bin/sh` reads it: proof the printed command quotes it.
fn shell_word(word: &str) -> String {
    let output = Command::new("/bin/sh")
        .arg("-c")
        .arg(format!("printf '%s' {word}"))
        .output()
        .expect("sh runs");
    assert!(output.status.success(), "{}", stderr(&output));
    stdout(&output)
}

/// The printed `claude mcp add-json --scope SCOPE gatehouse 'JSON'`: the
/// scope and the JSON, as a shell passes it to `claude`.
fn claude_add_json(output: &Output) -> (String, Value) {
    let out = stdout(output);
    let line = out
        .lines()
        .find_map(|line| line.trim().strip_prefix("claude mcp add-json --scope "))
        .unwrap_or_else(|| panic!("no add-json command in:\n{out}"));
    let (scope, rest) = line.split_once(' ').expect("a scope");
    let quoted = rest.strip_prefix("gatehouse ").expect("named gatehouse");
    let json = serde_json::from_str(&shell_word(quoted)).expect("the entry is JSON");
    (scope.to_owned(), json)
}

fn same_file(a: &str, b: &Path) -> bool {
    Path::new(a).canonicalize().ok() == b.canonicalize().ok()
}

/// The written config loads with the real loader; its chain is the
/// reference chain with each module's digest pinned and matching the file
/// written beside it (a copy of the built guest), and its `[elicitations]`
/// are the defaults.
fn assert_reference_chain(setup: &Setup) -> Config {
    let config = Config::load(setup.config()).expect("the written config loads");
    let modules = &config.review.modules;
    let names: Vec<_> = modules.iter().map(|m| m.name.as_deref()).collect();
    assert_eq!(names, [Some("allowlist"), Some("guardian")]);
    for (module, built) in modules
        .iter()
        .zip(["gatehouse_allowlist", "gatehouse_guardian"])
    {
        let written = std::fs::read(
            config
                .base_dir()
                .join(module.path.as_deref().expect("a file module")),
        )
        .expect("module written");
        assert_eq!(written, std::fs::read(guest(built)).expect("built guest"));
        assert_eq!(
            module.sha256.as_deref(),
            Some(hex::encode(Sha256::digest(&written)).as_str())
        );
    }
    assert_eq!(
        config.elicitations,
        ElicitationSettings {
            audit_log: Some(PathBuf::from("gatehouse-audit.jsonl")),
            ..ElicitationSettings::default()
        }
    );
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(setup.config())
            .expect("exists")
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600, "{mode:o}");
    }
    config
}

const CODEX: &str = r#"
model = "o3"

[mcp_servers.files]
command = "files-server"
args = ["--root", "/srv/docs"]
env = { LOG = "warn" }
env_vars = ["GITHUB_TOKEN"]
cwd = "/srv"
startup_timeout_sec = 20
tool_timeout_sec = 60
enabled_tools = ["read_file", "search"]
disabled_tools = ["search"]

[mcp_servers.tracker]
url = "https://tracker.example.com/mcp"
bearer_token_env_var = "TRACKER_TOKEN"
http_headers = { "X-Org" = "acme" }
enabled = false
oauth_resource = "https://tracker.example.com"
"#;

#[test]
fn init_from_codex_writes_a_config_that_loads_and_reviews_with_pinned_modules() {
    let setup = Setup::new();
    setup.write(".codex/config.toml", CODEX);
    let output = setup.init(&["--from", "codex"]);
    assert_ok(&output);
    let config = assert_reference_chain(&setup);

    let files = &config.mcp_servers["files"];
    assert_eq!(files.command.as_deref(), Some("files-server"));
    assert_eq!(files.args, ["--root", "/srv/docs"]);
    // The env value is read from gatehouse's environment, not written.
    assert!(files.env.is_empty(), "{:?}", files.env);
    assert_eq!(files.env_vars, ["GITHUB_TOKEN", "LOG"]);
    assert_eq!(files.cwd.as_deref(), Some(Path::new("/srv")));
    assert_eq!(
        (files.startup_timeout_sec, files.tool_timeout_sec),
        (Some(20.0), Some(60.0))
    );
    assert_eq!(
        files.enabled_tools.as_deref(),
        Some(&["read_file".to_owned(), "search".to_owned()][..])
    );
    assert_eq!(files.disabled_tools, ["search"]);
    let tracker = &config.mcp_servers["tracker"];
    assert_eq!(
        tracker.url.as_deref(),
        Some("https://tracker.example.com/mcp")
    );
    assert_eq!(
        tracker.bearer_token_env_var.as_deref(),
        Some("TRACKER_TOKEN")
    );
    assert!(tracker.http_headers.is_empty());
    assert_eq!(tracker.env_http_headers["X-Org"], "TRACKER_X_ORG");
    assert_eq!(tracker.enabled, Some(false));
    assert_eq!(config.servers().expect("the servers check").len(), 2);

    let report =
        "server `tracker`: field `oauth_resource` not carried: gatehouse has no equivalent";
    assert!(stderr(&output).contains(report), "{}", stderr(&output));
    let text = std::fs::read_to_string(setup.config()).expect("written");
    assert!(text.contains(&format!("# {report}")), "{text}");
    assert!(!text.contains("warn") && !text.contains("acme"), "{text}");
    for export in [
        "LOG: the value of env `LOG` of server `files`",
        "TRACKER_X_ORG: the value of header `X-Org` of server `tracker`",
    ] {
        assert!(
            stderr(&output).contains(export),
            "{export}: {}",
            stderr(&output)
        );
    }

    // The printed entry is Codex's TOML, pointing at this binary and the
    // written config, and the imported servers are named for removal.
    let entry: toml::Table = toml::from_str(&printed_entry(&output)).expect("the entry is TOML");
    let gatehouse = &entry["mcp_servers"]["gatehouse"];
    assert!(same_file(
        gatehouse["command"].as_str().expect("command"),
        Path::new(env!("CARGO_BIN_EXE_gatehouse"))
    ));
    let args: Vec<&str> = gatehouse["args"]
        .as_array()
        .expect("args")
        .iter()
        .filter_map(toml::Value::as_str)
        .collect();
    assert_eq!(args[..2], ["serve", "--config"]);
    assert_eq!(Path::new(args[2]), setup.config());
    // Codex passes a server only the variables it names: the entry names
    // every one the imported servers read.
    let passed: Vec<&str> = gatehouse["env_vars"]
        .as_array()
        .expect("env_vars")
        .iter()
        .filter_map(toml::Value::as_str)
        .collect();
    assert_eq!(
        passed,
        ["GITHUB_TOKEN", "LOG", "TRACKER_TOKEN", "TRACKER_X_ORG"]
    );
    assert!(
        stdout(&output).contains("`files`, `tracker`"),
        "{}",
        stdout(&output)
    );

    // The real chain loader takes it: the pinned modules load and review.
    let config_arg = setup.config().display().to_string();
    let review = |config: &str| {
        Command::new(env!("CARGO_BIN_EXE_gatehouse"))
            .args(["review", "--config", config, "--server", "docs"])
            .env("XDG_CACHE_HOME", crate::paths::cache_home())
            .args(["--request", "examples/requests/approve-read-only.json"])
            .current_dir(root())
            .output()
            .expect("gatehouse runs")
    };
    let reviewed = review(&config_arg);
    assert!(
        matches!(reviewed.status.code(), Some(0 | 3)),
        "{}",
        stderr(&reviewed)
    );
    // A module that is not the one pinned is refused.
    let guardian = setup.config().with_file_name("modules/guardian.wasm");
    let mut bytes = std::fs::read(&guardian).expect("written");
    bytes.extend_from_slice(b"\0");
    std::fs::write(&guardian, bytes).expect("rewrites");
    let refused = review(&config_arg);
    assert_eq!(refused.status.code(), Some(1), "{}", stderr(&refused));
    assert!(stderr(&refused).contains("sha256"), "{}", stderr(&refused));
}

#[test]
fn a_second_run_refuses_to_overwrite_without_force() {
    let setup = Setup::new();
    setup.write(".codex/config.toml", "[mcp_servers.a]\ncommand = \"a\"\n");
    assert_ok(&setup.init(&["--from", "codex"]));
    std::fs::write(setup.config(), "# edited by hand\n").expect("edits");
    let again = setup.init(&["--from", "codex"]);
    assert_eq!(again.status.code(), Some(1));
    let message = stderr(&again);
    assert!(
        message.contains(&setup.config().display().to_string()),
        "{message}"
    );
    assert!(message.contains("--force"), "{message}");
    assert_eq!(
        std::fs::read_to_string(setup.config()).expect("kept"),
        "# edited by hand\n"
    );
    // A module file alone is not overwritten either.
    std::fs::remove_file(setup.config()).expect("removes");
    let modules = setup.config().with_file_name("modules");
    std::fs::remove_dir_all(&modules).expect("removes");
    std::fs::create_dir(&modules).expect("creates");
    let module = modules.join("guardian.wasm");
    std::fs::write(&module, b"mine").expect("writes");
    let again = setup.init(&["--from", "codex"]);
    assert_eq!(again.status.code(), Some(1));
    assert!(
        stderr(&again).contains("modules/guardian.wasm"),
        "{}",
        stderr(&again)
    );
    assert!(!setup.config().exists(), "nothing written on refusal");
    assert!(
        !modules.join("allowlist.wasm").exists(),
        "nothing written on refusal"
    );
    assert_eq!(std::fs::read(&module).expect("kept"), b"mine");

    assert_ok(&setup.init(&["--from", "codex", "--force"]));
    assert_reference_chain(&setup);
}

#[test]
fn init_from_claude_reads_the_user_the_local_and_the_project_servers() {
    let setup = Setup::new();
    let project = setup.project().display().to_string();
    setup.write(
        ".claude.json",
        &json!({
            "numStartups": 3,
            "mcpServers": {
                "docs": {"type": "stdio", "command": "npx", "args": ["-y", "docs-mcp"], "env": {"KEY": "${DOCS_KEY}"}},
                "legacy": {"type": "sse", "url": "https://legacy.example.com/sse"},
            },
            "projects": {project.clone(): {
                "mcpServers": {
                    "web": {"type": "http", "url": "https://web.example.com/mcp", "headers": {"Authorization": "Bearer abc"}},
                },
                "enabledMcpjsonServers": ["repo"],
            }},
        })
        .to_string(),
    );
    setup.write_project(
        ".mcp.json",
        &json!({"mcpServers": {"repo": {"command": "repo-mcp", "oauth": {"clientId": "x"}}}})
            .to_string(),
    );
    let output = setup.init(&["--from", "claude"]);
    assert_ok(&output);
    let config = assert_reference_chain(&setup);
    assert_eq!(
        config.mcp_servers.keys().collect::<Vec<_>>(),
        ["docs", "repo", "web"]
    );
    assert_eq!(config.mcp_servers["docs"].args, ["-y", "docs-mcp"]);
    assert_eq!(config.mcp_servers["docs"].env_vars, ["KEY"]);
    assert_eq!(
        config.mcp_servers["web"].env_http_headers["Authorization"],
        "WEB_AUTHORIZATION"
    );
    let text = std::fs::read_to_string(setup.config()).expect("written");
    assert!(!text.contains("Bearer abc"), "{text}");
    let errors = stderr(&output);
    for report in [
        "server `repo`: field `oauth` not carried: gatehouse has no equivalent",
        "server `legacy`: not carried: its transport is `sse`",
        "KEY: the value of env `KEY` of server `docs` in ",
        "(written `${DOCS_KEY}` there: the client reads it from $DOCS_KEY)",
        "WEB_AUTHORIZATION: the value of header `Authorization` of server `web`",
        "repo: repo-mcp   (from ",
    ] {
        assert!(errors.contains(report), "{report}: {errors}");
    }
    // Claude Code gets the commands to run, each with its scope: gatehouse
    // in the local one, as it serves this project's servers, and each
    // server removed from the scope it came from.
    let (scope, gatehouse) = claude_add_json(&output);
    assert_eq!(scope, "local");
    assert!(same_file(
        gatehouse["command"].as_str().expect("command"),
        Path::new(env!("CARGO_BIN_EXE_gatehouse"))
    ));
    assert_eq!(gatehouse["type"], "stdio");
    assert_eq!(gatehouse["args"][0], "serve");
    assert_eq!(
        Path::new(gatehouse["args"][2].as_str().expect("config")),
        setup.config()
    );
    let out = stdout(&output);
    assert!(!out.contains("\"mcpServers\""), "{out}");
    let claude_json = setup.home.path().join(".claude.json");
    for line in [
        "  claude mcp remove --scope user docs\n".to_owned(),
        "  claude mcp remove --scope project repo\n".to_owned(),
        "  claude mcp remove --scope local web\n".to_owned(),
        format!(
            "  user: mcpServers in {}, for you in every project\n",
            claude_json.display()
        ),
        format!(
            "  local: this project's entry in {} (projects[\"{project}\"]), for you in this project only\n",
            claude_json.display()
        ),
        format!(
            "  project: {}, shared with everyone who works on this repository\n",
            setup.project().join(".mcp.json").display()
        ),
    ] {
        assert!(out.contains(&line), "{line}: {out}");
    }
}

#[test]
fn init_from_cursor_and_from_a_path() {
    let setup = Setup::new();
    setup.write(
        ".cursor/mcp.json",
        r#"{"mcpServers": {"linear": {"url": "https://mcp.linear.app/mcp", "auth": {"CLIENT_ID": "x"}}}}"#,
    );
    setup.write_project(
        ".cursor/mcp.json",
        r#"{"mcpServers": {"local": {"command": "node", "args": ["server.js"], "envFile": ".env"}}}"#,
    );
    let output = setup.init(&["--from", "cursor", "--trust-project-servers"]);
    assert_ok(&output);
    let config = assert_reference_chain(&setup);
    assert_eq!(
        config.mcp_servers.keys().collect::<Vec<_>>(),
        ["linear", "local"]
    );
    let errors = stderr(&output);
    assert!(
        errors.contains("server `linear`: field `auth` not carried"),
        "{errors}"
    );
    assert!(
        errors.contains("server `local`: field `envFile` not carried"),
        "{errors}"
    );
    serde_json::from_str::<Value>(&printed_entry(&output)).expect("the entry is JSON");

    // A Codex config at any path, told by its extension.
    let file = setup.write("elsewhere/codex.toml", CODEX);
    let output = setup.init(&["--from", file.to_str().expect("utf-8"), "--force"]);
    assert_ok(&output);
    let config = assert_reference_chain(&setup);
    assert_eq!(
        config.mcp_servers.keys().collect::<Vec<_>>(),
        ["files", "tracker"]
    );
    toml::from_str::<toml::Table>(&printed_entry(&output)).expect("the entry is TOML");
}

/// A value with newlines and no other control character: the serializer may
/// write it as a multi-line string, which still holds it whole.
const NEWLINES: &str = "a\n[mcp_servers.pwned]\ncommand = \"sh\"\n\"\"\"\n[x]";

#[test]
fn hostile_names_and_values_cannot_break_the_toml_or_reach_the_terminal() {
    let setup = Setup::new();
    let hostile = "x\"]]\n[mcp_servers.pwned]\ncommand = \"sh\" # \u{1b}]0;title\u{7}\u{1b}[2J\r";
    let name = format!("{hostile}\u{202e}\u{2028}");
    let file = setup.write(
        "hostile/.mcp.json",
        &json!({"mcpServers": {
            name.clone(): {"command": hostile, "args": [hostile, "'''", "\"\"\"", NEWLINES], "env": {hostile: hostile}},
            "plain": {"command": "ok", hostile: true, "args": ["\u{202e}txt.exe"]},
        }})
        .to_string(),
    );
    let output = setup.init(&["--from", file.to_str().expect("utf-8")]);
    assert_ok(&output);
    let config = assert_reference_chain(&setup);
    assert_eq!(
        config.mcp_servers.len(),
        2,
        "{:?}",
        config.mcp_servers.keys()
    );
    assert!(!config.mcp_servers.contains_key("pwned"));
    let (_, raw) = config
        .mcp_servers
        .iter()
        .find(|(name, _)| name.as_str() != "plain")
        .expect("the hostile server, renamed");
    assert_eq!(raw.command.as_deref(), Some(hostile));
    assert_eq!(raw.args, [hostile, "'''", "\"\"\"", NEWLINES]);
    // An env key that is no variable name is not carried (no value is
    // written, and it cannot be read from the environment), and said so.
    assert!(raw.env.is_empty() && raw.env_vars.is_empty(), "{raw:?}");
    assert!(
        stderr(&output).contains("its name is no variable name"),
        "{}",
        stderr(&output)
    );

    assert!(config.mcp_servers["plain"].args.is_empty());
    assert!(
        stderr(&output).contains("server `plain`: field `args` not carried: it holds invisible"),
        "{}",
        stderr(&output)
    );

    // Every comment line is one line: the hostile text is escaped in it.
    // The file holds no text-direction or separator character anywhere.
    let text = std::fs::read_to_string(setup.config()).expect("written");
    for line in text.lines().filter(|line| line.starts_with('#')) {
        assert!(!line.chars().any(char::is_control), "{line:?}");
    }
    assert!(!text.contains(['\u{202e}', '\u{2028}']), "{text}");
    for (what, printed) in [("stdout", stdout(&output)), ("stderr", stderr(&output))] {
        assert!(
            !printed
                .chars()
                .any(|c| (c.is_control() && c != '\n') || c == '\u{202e}'),
            "{what}: {printed:?}"
        );
        assert!(
            !printed.contains("\n[mcp_servers.pwned"),
            "{what}: {printed}"
        );
    }
    assert!(
        stderr(&output).contains("renamed to"),
        "{}",
        stderr(&output)
    );
}

#[test]
fn without_the_guests_nothing_is_written_and_the_error_says_how_to_build_them() {
    let setup = Setup::new();
    let empty = tempfile::tempdir().expect("tempdir");
    let output = setup.init_with_guests(&[], empty.path());
    assert_eq!(output.status.code(), Some(1));
    assert!(
        stderr(&output).contains(".ci/build-guests"),
        "{}",
        stderr(&output)
    );
    assert!(!setup.config().exists());

    // Without --from: the chain and the defaults, both entries printed.
    let output = setup.init(&[]);
    assert_ok(&output);
    let config = assert_reference_chain(&setup);
    assert!(config.mcp_servers.is_empty());
    assert!(
        stdout(&output).contains("[mcp_servers.gatehouse]"),
        "{}",
        stdout(&output)
    );
    assert!(
        stdout(&output).contains("\"mcpServers\""),
        "{}",
        stdout(&output)
    );
}

#[test]
fn a_missing_client_config_names_the_files_looked_at() {
    let setup = Setup::new();
    let output = setup.init(&["--from", "cursor"]);
    assert_eq!(output.status.code(), Some(1));
    let message = stderr(&output);
    assert!(message.contains("no cursor config found"), "{message}");
    assert!(message.contains(".cursor/mcp.json"), "{message}");
    assert!(!setup.config().exists());
}

/// `/bin/sh -c 'touch MARKER'`: a server that proves it ran by leaving
/// `marker` behind.
fn toucher(marker: &Path) -> Value {
    json!({"command": "/bin/sh", "args": ["-c", format!("touch '{}'", marker.display())]})
}

/// Runs `gatehouse serve` on the written config with a real client, lists
/// the tools, and returns their names once `started` exists (a server every
/// run starts), so whatever serve was going to run has been run.
async fn serve_and_list(setup: &Setup, started: &Path) -> Vec<String> {
    let client = stdio_client(
        &setup.config(),
        Client {
            elicitation: false,
            content: None,
            asked: Arc::new(AtomicUsize::new(0)),
        },
    )
    .await;
    let tools = tokio::time::timeout(Duration::from_secs(60), client.list_all_tools())
        .await
        .expect("tools in time")
        .expect("tools");
    let deadline = Instant::now() + Duration::from_secs(30);
    while !started.exists() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(started.exists(), "serve never ran the imported servers");
    let _ = client.cancel().await;
    tools
        .into_iter()
        .map(|tool| tool.name.into_owned())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_project_server_claude_code_rejected_or_never_approved_is_not_imported_and_never_runs() {
    let setup = Setup::new();
    let project = setup.project();
    let (rejected, unapproved, control) = (
        project.join("MARKER-rejected"),
        project.join("MARKER-unapproved"),
        project.join("CONTROL"),
    );
    // A cloned repository's .mcp.json: one server Claude Code rejected (it
    // is in disabledMcpjsonServers, which wins even over an approval), one
    // never approved, one approved.
    setup.write_project(
        ".mcp.json",
        &json!({"mcpServers": {
            "helper": toucher(&rejected),
            "stranger": toucher(&unapproved),
            "approved": {"command": demo_server(), "args": ["--name", "approved"]},
        }})
        .to_string(),
    );
    setup.write(
        ".claude.json",
        &json!({
            // The user's own server: imported, and run by serve (the control).
            "mcpServers": {"mine": toucher(&control)},
            "projects": {project.display().to_string(): {
                "enabledMcpjsonServers": ["approved", "helper"],
                "disabledMcpjsonServers": ["helper"],
            }},
        })
        .to_string(),
    );
    // The repository approves its own servers in its settings: not taken.
    setup.write_project(
        ".claude/settings.json",
        &json!({"enableAllProjectMcpServers": true, "enabledMcpjsonServers": ["stranger"]})
            .to_string(),
    );
    let output = setup.init(&["--from", "claude"]);
    assert_ok(&output);
    let config = assert_reference_chain(&setup);
    assert_eq!(
        config.mcp_servers.keys().collect::<Vec<_>>(),
        ["approved", "mine"]
    );
    let text = std::fs::read_to_string(setup.config()).expect("written");
    assert!(!text.contains("MARKER"), "{text}");

    // Both are reported with their reason, before anything is written; so
    // is every command line serve will run.
    let errors = stderr(&output);
    let mcp_json = project.join(".mcp.json").display().to_string();
    let skipped = |name: &str| format!("server `{name}`: skipped, from {mcp_json}: ");
    let at = |text: &str| {
        errors
            .find(text)
            .unwrap_or_else(|| panic!("{text:?} not in:\n{errors}"))
    };
    let written = at("gatehouse: wrote ");
    assert!(
        at(&format!(
            "{}Claude Code has it in disabledMcpjsonServers",
            skipped("helper")
        )) < written
    );
    assert!(
        at(&format!(
            "{}not approved in Claude Code",
            skipped("stranger")
        )) < written
    );
    assert!(at(".claude/settings.json is inside the project") < written);
    assert!(
        at(&format!(
            "approved: {} --name approved   (from {mcp_json}; approved by enabledMcpjsonServers in ",
            demo_server().display()
        )) < written
    );
    assert!(
        at(&format!(
            "mine: /bin/sh -c 'touch '\\''{}'\\'''",
            control.display()
        )) < written
    );

    // Serving the config runs the user's server and the approved one, and
    // neither of the others.
    let tools = serve_and_list(&setup, &control).await;
    assert!(
        tools.iter().any(|tool| tool.starts_with("approved__")),
        "{tools:?}"
    );
    assert!(!rejected.exists(), "the rejected server ran");
    assert!(!unapproved.exists(), "the unapproved server ran");
}

#[test]
fn approved_project_servers_are_imported_by_name_or_all_and_only_for_this_project() {
    let setup = Setup::new();
    let project = setup.project();
    setup.write_project(
        ".mcp.json",
        r#"{"mcpServers": {"one": {"command": "one"}, "two": {"command": "two"}}}"#,
    );
    let imported = |claude: Value| {
        setup.write(".claude.json", &claude.to_string());
        let output = setup.init(&["--from", "claude", "--force"]);
        assert_ok(&output);
        let config = Config::load(setup.config()).expect("loads");
        let names: Vec<String> = config.mcp_servers.keys().cloned().collect();
        (names, stderr(&output))
    };
    // By name, under the project's path with a trailing slash.
    let (names, errors) = imported(json!({"projects": {
        format!("{}/", project.display()): {"enabledMcpjsonServers": ["one"]},
    }}));
    assert_eq!(names, ["one"]);
    assert!(errors.contains("server `two`: skipped"), "{errors}");

    // All, under a path that links to the project.
    let link_dir = tempfile::tempdir().expect("tempdir");
    let link = link_dir.path().join("link");
    std::os::unix::fs::symlink(&project, &link).expect("symlink");
    let (names, errors) = imported(json!({"projects": {
        link.display().to_string(): {"enableAllProjectMcpServers": true},
    }}));
    assert_eq!(names, ["one", "two"], "{errors}");
    assert!(
        errors.contains("approved by enableAllProjectMcpServers in "),
        "{errors}"
    );

    // Another project's approval, or the parent directory's, approves
    // nothing here.
    let other = project.with_file_name(format!(
        "{}-other",
        project.file_name().expect("name").to_string_lossy()
    ));
    let (names, errors) = imported(json!({"projects": {
        other.display().to_string(): {"enableAllProjectMcpServers": true},
        project.parent().expect("parent").display().to_string(): {"enableAllProjectMcpServers": true},
        format!("{}/sub", project.display()): {"enabledMcpjsonServers": ["one"]},
    }}));
    assert!(names.is_empty(), "{names:?}");
    assert!(errors.contains("server `one`: skipped"), "{errors}");
}

#[test]
fn cursors_project_file_is_imported_only_with_the_flag() {
    let setup = Setup::new();
    setup.write(
        ".cursor/mcp.json",
        r#"{"mcpServers": {"user": {"command": "user-mcp"}}}"#,
    );
    let marker = setup.project().join("MARKER");
    setup.write_project(
        ".cursor/mcp.json",
        &json!({"mcpServers": {"local": toucher(&marker)}}).to_string(),
    );
    let output = setup.init(&["--from", "cursor"]);
    assert_ok(&output);
    let config = assert_reference_chain(&setup);
    assert_eq!(config.mcp_servers.keys().collect::<Vec<_>>(), ["user"]);
    let errors = stderr(&output);
    assert!(
        errors.contains(&format!(
            "server `local`: skipped, from {}: a project's own file, whose servers Cursor runs without asking; pass --trust-project-servers to import them",
            setup.project().join(".cursor/mcp.json").display()
        )),
        "{errors}"
    );

    let output = setup.init(&["--from", "cursor", "--trust-project-servers", "--force"]);
    assert_ok(&output);
    let config = assert_reference_chain(&setup);
    assert_eq!(
        config.mcp_servers.keys().collect::<Vec<_>>(),
        ["local", "user"]
    );
    assert!(
        stderr(&output).contains("approved by --trust-project-servers"),
        "{}",
        stderr(&output)
    );
    // The flag is Cursor's: Claude Code's own approvals decide for .mcp.json.
    let output = setup.init(&["--from", "claude", "--trust-project-servers", "--force"]);
    assert_eq!(output.status.code(), Some(1));
    assert!(
        stderr(&output).contains("--trust-project-servers goes with --from cursor"),
        "{}",
        stderr(&output)
    );
}

/// Every file under `dir`, recursively (links not followed).
fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).expect("readable") {
        let path = entry.expect("entry").path();
        let kind = std::fs::symlink_metadata(&path)
            .expect("metadata")
            .file_type();
        if kind.is_dir() {
            files.extend(files_under(&path));
        } else {
            files.push(path);
        }
    }
    files
}

#[test]
fn env_and_header_values_stay_out_of_the_working_tree_and_stderr_says_what_to_export() {
    let setup = Setup::new();
    std::fs::create_dir(setup.project().join(".git")).expect("a work tree");
    setup.write(
        ".claude.json",
        &json!({"mcpServers": {
            "docs": {"command": "docs-mcp", "env": {"API_TOKEN": "s3cr3t-value"}},
            "web": {"type": "http", "url": "https://web.example.com/mcp", "headers": {"Authorization": "Bearer s3cr3t-header"}},
        }})
        .to_string(),
    );
    let output = setup.init(&["--from", "claude"]);
    assert_ok(&output);
    let config = assert_reference_chain(&setup);
    for file in files_under(&setup.project()) {
        let bytes = std::fs::read(&file).expect("readable");
        let text = String::from_utf8_lossy(&bytes);
        assert!(
            !text.contains("s3cr3t"),
            "{} holds a secret",
            file.display()
        );
    }
    for printed in [stdout(&output), stderr(&output)] {
        assert!(!printed.contains("s3cr3t"), "{printed}");
    }
    let docs = &config.mcp_servers["docs"];
    assert!(docs.env.is_empty());
    assert_eq!(docs.env_vars, ["API_TOKEN"]);
    let web = &config.mcp_servers["web"];
    assert_eq!(web.env_http_headers["Authorization"], "WEB_AUTHORIZATION");
    assert_eq!(config.servers().expect("the servers check").len(), 2);
    let errors = stderr(&output);
    let claude_json = setup.home.path().join(".claude.json").display().to_string();
    for line in [
        "are not written to ".to_owned(),
        "Export these where `gatehouse serve` starts".to_owned(),
        format!("API_TOKEN: the value of env `API_TOKEN` of server `docs` in {claude_json}"),
        format!(
            "WEB_AUTHORIZATION: the value of header `Authorization` of server `web` in {claude_json}"
        ),
    ] {
        assert!(errors.contains(&line), "{line}: {errors}");
    }
}

#[test]
fn the_files_gatehouse_writes_in_a_work_tree_are_added_to_its_gitignore_once() {
    let setup = Setup::new();
    setup.write(".codex/config.toml", "[mcp_servers.a]\ncommand = \"a\"\n");
    // Outside a work tree, no .gitignore is made.
    let output = setup.init(&["--from", "codex"]);
    assert_ok(&output);
    assert!(!setup.project().join(".gitignore").exists());
    assert!(!setup.project().join("gh/.gitignore").exists());
    assert!(
        stderr(&output).contains("is not inside a git work tree: no .gitignore written"),
        "{}",
        stderr(&output)
    );

    // Inside one, the lines missing from the root's .gitignore are added.
    std::fs::create_dir(setup.project().join(".git")).expect("a work tree");
    let gitignore = setup.write_project(".gitignore", "target/\n/gh/gatehouse.toml");
    let output = setup.init(&["--from", "codex", "--force"]);
    assert_ok(&output);
    let expected = "target/\n/gh/gatehouse.toml\n# gatehouse: local files (gatehouse init)\n\
                    /gh/modules/allowlist.wasm\n/gh/modules/guardian.wasm\n\
                    /gh/gatehouse-audit.jsonl\n/gh/gatehouse-trust.toml\n/gh/.gatehouse/\n";
    assert_eq!(
        std::fs::read_to_string(&gitignore).expect("written"),
        expected
    );
    assert!(
        stderr(&output).contains(&format!("added to {}", gitignore.display())),
        "{}",
        stderr(&output)
    );
    // Again: nothing to add.
    let output = setup.init(&["--from", "codex", "--force"]);
    assert_ok(&output);
    assert_eq!(std::fs::read_to_string(&gitignore).expect("kept"), expected);
    assert!(
        stderr(&output).contains("already ignores gatehouse's files"),
        "{}",
        stderr(&output)
    );

    // A .gitignore that links elsewhere is not followed.
    let elsewhere = setup.write("bashrc", "# mine\n");
    std::fs::remove_file(&gitignore).expect("removes");
    std::os::unix::fs::symlink(&elsewhere, &gitignore).expect("symlink");
    let output = setup.init(&["--from", "codex", "--force"]);
    assert_ok(&output);
    assert_eq!(
        std::fs::read_to_string(&elsewhere).expect("kept"),
        "# mine\n"
    );
    assert!(
        stderr(&output).contains("not changed (it is a symbolic link or not a regular file); add these lines yourself: /gh/gatehouse.toml"),
        "{}",
        stderr(&output)
    );
}

#[test]
fn codex_home_decides_which_config_init_reads_and_where_it_says_the_entry_goes() {
    let setup = Setup::new();
    // ~/.codex holds another config: with CODEX_HOME set, Codex ignores it.
    setup.write(
        ".codex/config.toml",
        "[mcp_servers.wrong]\ncommand = \"wrong\"\n",
    );
    let codex_home = tempfile::tempdir().expect("tempdir");
    let codex_config = codex_home.path().join("config.toml");
    std::fs::write(&codex_config, "[mcp_servers.right]\ncommand = \"right\"\n").expect("writes");
    let output = setup.init_codex_home(&["--from", "codex"], codex_home.path());
    assert_ok(&output);
    let config = assert_reference_chain(&setup);
    assert_eq!(config.mcp_servers.keys().collect::<Vec<_>>(), ["right"]);
    let out = stdout(&output);
    assert!(
        out.starts_with(&format!(
            "Point Codex at gatehouse: add this to {} (CODEX_HOME is set, so Codex reads $CODEX_HOME/config.toml, not ~/.codex/config.toml)\n",
            codex_config.display()
        )),
        "{out}"
    );
    codex_entry(&output);

    // Without --from, the advice names the same file.
    let output = setup.init_codex_home(&["--force"], codex_home.path());
    assert_ok(&output);
    assert!(
        stdout(&output).contains(&format!(
            "Codex: add this to {} (CODEX_HOME",
            codex_config.display()
        )),
        "{}",
        stdout(&output)
    );

    // Without CODEX_HOME: the real path under HOME, not `~`.
    let output = setup.init(&["--from", "codex", "--force"]);
    assert_ok(&output);
    let config = assert_reference_chain(&setup);
    assert_eq!(config.mcp_servers.keys().collect::<Vec<_>>(), ["wrong"]);
    assert!(
        stdout(&output).starts_with(&format!(
            "Point Codex at gatehouse: add this to {}\n",
            setup.home.path().join(".codex/config.toml").display()
        )),
        "{}",
        stdout(&output)
    );
}

#[test]
fn codex_client_settings_move_onto_the_entry_and_nothing_lands_where_nothing_reads_it() {
    let setup = Setup::new();
    setup.write(
        ".codex/config.toml",
        r#"
[mcp_servers.files]
command = "files-server"
env = { LOG = "warn" }
default_tools_approval_mode = "approve"
startup_readiness = "catalog"
startup_timeout_sec = 25
tool_timeout_sec = 600

[mcp_servers.files.tools.write_file]
approval_mode = "prompt"

[mcp_servers.git-hub]
command = "gh-mcp"
default_tools_approval_mode = "approve"
startup_readiness = "catalog"

[mcp_servers.git-hub.tools."create.issue"]
approval_mode = "writes"
output_token_limit = 2000
"#,
    );
    let output = setup.init(&["--from", "codex"]);
    assert_ok(&output);
    let config = assert_reference_chain(&setup);
    // gatehouse reads none of Codex's approval settings: none is written.
    let text = std::fs::read_to_string(setup.config()).expect("written");
    for key in [
        "default_tools_approval_mode",
        "approval_mode",
        "startup_readiness",
        "output_token_limit",
    ] {
        assert!(!text.contains(key), "{key} in:\n{text}");
    }
    let errors = stderr(&output);
    assert!(!errors.contains("not carried"), "{errors}");
    // What gatehouse does read stays in its table.
    let files = &config.mcp_servers["files"];
    assert_eq!(files.default_tools_approval_mode, None);
    assert_eq!(
        (files.startup_timeout_sec, files.tool_timeout_sec),
        (Some(25.0), Some(600.0))
    );

    // The entry carries them, the tools under gatehouse's names for them.
    let gatehouse = codex_entry(&output);
    assert_eq!(gatehouse["required"].as_bool(), Some(true));
    assert_eq!(
        gatehouse["default_tools_approval_mode"].as_str(),
        Some("approve")
    );
    assert_eq!(gatehouse["startup_readiness"].as_str(), Some("catalog"));
    assert_eq!(gatehouse["startup_timeout_sec"].as_float(), Some(25.0));
    assert_eq!(gatehouse["tool_timeout_sec"].as_float(), Some(600.0));
    assert_eq!(
        gatehouse["env_vars"],
        toml::Value::Array(vec!["LOG".into()])
    );
    let names = gatehouse_mcp::naming::qualified_names(&[
        ("files", "write_file"),
        ("git-hub", "create.issue"),
    ]);
    assert_eq!(names, ["files__write_file", "git_hub__create_issue"]);
    let tools = gatehouse["tools"].as_table().expect("tools");
    assert_eq!(
        tools.keys().collect::<Vec<_>>(),
        names.iter().collect::<Vec<_>>()
    );
    assert_eq!(tools[&names[0]]["approval_mode"].as_str(), Some("prompt"));
    assert_eq!(tools[&names[1]]["approval_mode"].as_str(), Some("writes"));
    assert_eq!(
        tools[&names[1]]["output_token_limit"].as_integer(),
        Some(2000)
    );
    // One sentence per moved setting, on stderr.
    for sentence in [
        "gatehouse: Codex entry: required = true: Codex waits for gatehouse before the first turn",
        "gatehouse: Codex entry: default_tools_approval_mode = \"approve\", as every server gatehouse serves had it: for gatehouse's tools Codex makes the calls without asking, under approval_policy = \"never\" too.",
        "gatehouse: Codex entry: tools.git_hub__create_issue: `git-hub`'s settings for its tool `create.issue`, under the name gatehouse gives it: approval_mode = \"writes\"",
        "gatehouse: Codex entry: startup_readiness = \"catalog\", as every server had it",
        "gatehouse: Codex entry: tool_timeout_sec = 600: Codex lets a call through gatehouse run that long, as it let `files`'s",
    ] {
        assert!(errors.contains(sentence), "{sentence}\n{errors}");
    }
}

#[test]
fn codex_servers_that_disagree_get_the_stricter_mode_never_a_wider_one() {
    let setup = Setup::new();
    setup.write(
        ".codex/config.toml",
        r#"
[mcp_servers.a]
command = "a"
default_tools_approval_mode = "approve"
enabled_tools = ["read", "list"]
[mcp_servers.b]
command = "b"
default_tools_approval_mode = "prompt"
[mcp_servers.c]
command = "c"
default_tools_approval_mode = "approve"
"#,
    );
    let output = setup.init(&["--from", "codex"]);
    assert_ok(&output);
    let gatehouse = codex_entry(&output);
    assert_eq!(
        gatehouse["default_tools_approval_mode"].as_str(),
        Some("prompt")
    );
    // `a`'s tools are known: they keep `approve` one by one; `c`'s are not,
    // and stderr says how to keep them.
    let tools = gatehouse["tools"].as_table().expect("tools");
    assert_eq!(tools.keys().collect::<Vec<_>>(), ["a__list", "a__read"]);
    assert!(
        tools
            .values()
            .all(|tool| tool["approval_mode"].as_str() == Some("approve"))
    );
    let errors = stderr(&output);
    for sentence in [
        "default_tools_approval_mode = \"prompt\": the servers disagree, and the entry takes the strictest, from `b`",
        "`c` had the looser \"approve\"",
        "add [mcp_servers.gatehouse.tools.c__TOOL] approval_mode = \"approve\"",
    ] {
        assert!(errors.contains(sentence), "{sentence}\n{errors}");
    }

    // A server without a mode has Codex's `auto`: another's `approve` does
    // not reach its tools.
    setup.write(
        ".codex/config.toml",
        "[mcp_servers.a]\ncommand = \"a\"\ndefault_tools_approval_mode = \"approve\"\n[mcp_servers.b]\ncommand = \"b\"\n",
    );
    let output = setup.init(&["--from", "codex", "--force"]);
    assert_ok(&output);
    let gatehouse = codex_entry(&output);
    assert!(
        !gatehouse.contains_key("default_tools_approval_mode"),
        "{gatehouse:?}"
    );
    assert!(
        stderr(&output)
            .contains("default_tools_approval_mode = \"auto\" (Codex's default, so not written)"),
        "{}",
        stderr(&output)
    );
}

#[test]
fn claude_client_settings_move_onto_the_command_and_its_permission_rules_are_renamed() {
    let setup = Setup::new();
    let project = setup.project().display().to_string();
    setup.write(
        ".claude.json",
        &json!({
            "mcpServers": {
                "docs": {"type": "stdio", "command": "docs-mcp", "timeout": 120000, "alwaysLoad": true},
                "web": {"type": "http", "url": "https://web.example.com/mcp", "timeout": 300000,
                        "tools": [{"name": "post", "permission_policy": "always_deny"}]},
                "old": {"command": "old-mcp"},
            },
            // Claude Code does not run `old` in this project.
            "projects": {project: {"disabledMcpServers": ["old"]}},
        })
        .to_string(),
    );
    setup.write(
        ".claude/settings.json",
        &json!({"permissions": {"allow": ["mcp__docs"], "deny": ["mcp__docs__drop_table"]}})
            .to_string(),
    );
    // A config path a shell must quote.
    let output = setup.init_config(&["--from", "claude"], "it's here/gatehouse.toml");
    assert_ok(&output);
    let config_path = setup.project().join("it's here/gatehouse.toml");
    let config = Config::load(&config_path).expect("loads");
    assert_eq!(
        config.mcp_servers.keys().collect::<Vec<_>>(),
        ["docs", "web"]
    );
    // gatehouse applies each server's timeout itself.
    assert_eq!(config.mcp_servers["docs"].tool_timeout_sec, Some(120.0));
    assert_eq!(config.mcp_servers["web"].tool_timeout_sec, Some(300.0));
    let errors = stderr(&output);
    assert!(
        errors.contains("server `old`: skipped, from ")
            && errors
                .contains("Claude Code does not run it in this project (disabledMcpServers in "),
        "{errors}"
    );
    assert!(
        !errors.contains("field `timeout`") && !errors.contains("field `tools`"),
        "{errors}"
    );

    // Every server came from the user scope: so does gatehouse, and the
    // command passes the path whole through the shell.
    let (scope, gatehouse) = claude_add_json(&output);
    assert_eq!(scope, "user");
    assert_eq!(
        Path::new(gatehouse["args"][2].as_str().expect("config")),
        config_path
    );
    assert_eq!(gatehouse["timeout"], 300_000);
    assert_eq!(gatehouse["alwaysLoad"], true);
    for sentence in [
        "gatehouse: Claude Code entry: timeout = 300000: Claude Code lets a call through gatehouse run 300000 ms",
        "gatehouse: Claude Code entry: alwaysLoad = true, as `docs` had it",
    ] {
        assert!(errors.contains(sentence), "{sentence}\n{errors}");
    }
    let out = stdout(&output);
    let settings = setup
        .home
        .path()
        .join(".claude/settings.json")
        .display()
        .to_string();
    for line in [
        "  claude mcp remove --scope user docs\n".to_owned(),
        "  claude mcp remove --scope user web\n".to_owned(),
        format!("  {settings} permissions.allow: `mcp__docs` -> add `mcp__gatehouse__docs__*`\n"),
        format!(
            "  {settings} permissions.deny: `mcp__docs__drop_table` -> add `mcp__gatehouse__docs__drop_table`\n"
        ),
        format!(
            "  {settings} permissions.deny: the permission policy server `web` gave its tool `post` in "
        ),
    ] {
        assert!(out.contains(&line), "{line}\n{out}");
    }
    assert!(out.contains("-> add `mcp__gatehouse__web__post`"), "{out}");
}

#[test]
fn cursor_entry_names_the_file_on_this_machine_and_its_allowlist_entries_move() {
    let setup = Setup::new();
    setup.write(
        ".cursor/mcp.json",
        r#"{"mcpServers": {"linear": {"url": "https://mcp.linear.app/mcp"}, "git-hub": {"command": "gh-mcp"}}}"#,
    );
    setup.write(
        ".cursor/permissions.json",
        "{\n  // mine\n  \"mcpAllowlist\": [\"linear:list_issues\", \"git-hub:*\", \"other:x\"]\n}",
    );
    let output = setup.init(&["--from", "cursor"]);
    assert_ok(&output);
    let cursor_json = setup.home.path().join(".cursor/mcp.json");
    let out = stdout(&output);
    assert!(
        out.starts_with(&format!(
            "Point Cursor at gatehouse: add this to {} (every workspace)\n",
            cursor_json.display()
        )),
        "{out}"
    );
    let entry: Value = serde_json::from_str(&printed_entry(&output)).expect("the entry is JSON");
    assert_eq!(entry["mcpServers"]["gatehouse"]["type"], "stdio");
    let permissions = setup
        .home
        .path()
        .join(".cursor/permissions.json")
        .display()
        .to_string();
    for line in [
        format!(
            "Then remove the servers gatehouse now serves from {}, so Cursor does not reach them directly: `git-hub`, `linear`",
            cursor_json.display()
        ),
        format!(
            "  {permissions} mcpAllowlist: `linear:list_issues` -> add `gatehouse:linear__list_issues`\n"
        ),
        format!("  {permissions} mcpAllowlist: `git-hub:*` -> add `gatehouse:git_hub__*`\n"),
    ] {
        assert!(out.contains(&line), "{line}\n{out}");
    }
    assert!(!out.contains("other:x"), "{out}");

    // Serving a project's own servers, the entry goes in the project's file.
    setup.write_project(
        ".cursor/mcp.json",
        r#"{"mcpServers": {"local": {"command": "local-mcp"}}}"#,
    );
    let output = setup.init(&["--from", "cursor", "--trust-project-servers", "--force"]);
    assert_ok(&output);
    assert!(
        stdout(&output).starts_with(&format!(
            "Point Cursor at gatehouse: add this to {} (the project's file",
            setup.project().join(".cursor/mcp.json").display()
        )),
        "{}",
        stdout(&output)
    );
}

/// `.ci/install-gatehouse`'s layout, without a checkout: `PREFIX/bin/gatehouse`
/// and `PREFIX/share/gatehouse/guests`; no `GATEHOUSE_GUESTS_DIR`, nothing
/// built beside it. init finds the reference guests and writes a config
/// that loads.
#[test]
fn an_installed_binary_finds_the_reference_guests_it_was_installed_with() {
    let setup = Setup::new();
    let prefix = tempfile::tempdir().expect("tempdir");
    let bin = prefix.path().join("bin");
    let shared = prefix.path().join("share/gatehouse/guests");
    std::fs::create_dir_all(&bin).expect("mkdir");
    std::fs::create_dir_all(&shared).expect("mkdir");
    let installed = bin.join("gatehouse");
    std::fs::copy(env!("CARGO_BIN_EXE_gatehouse"), &installed).expect("copy the binary");
    for guest in [
        "gatehouse_guardian",
        "gatehouse_model_guardian",
        "gatehouse_allowlist",
    ] {
        std::fs::copy(
            guests_dir().join(format!("{guest}.wasm")),
            shared.join(format!("{guest}.wasm")),
        )
        .expect("copy a guest");
    }
    let output = Command::new(&installed)
        .args(["init", "--config", "gh/gatehouse.toml"])
        .current_dir(setup.project())
        .env("HOME", setup.home.path())
        .env_remove("CODEX_HOME")
        .env_remove("GATEHOUSE_GUESTS_DIR")
        .output()
        .expect("the installed gatehouse runs");
    assert_ok(&output);
    assert_reference_chain(&setup);
}
