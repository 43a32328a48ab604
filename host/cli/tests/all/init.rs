//! `gatehouse init`: a config written from each client's own, loaded by the
//! real loader and by `gatehouse review`, with the modules' digests pinned,
//! what is not carried reported, nothing overwritten without `--force`, and
//! hostile text kept inside its TOML strings and escaped on the terminal.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use gatehouse_mcp::config::Config;
use gatehouse_mcp::router::ElicitationSettings;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use crate::paths::{guest, root};

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
        Command::new(env!("CARGO_BIN_EXE_gatehouse"))
            .arg("init")
            .args(args)
            .args(["--config", "gh/gatehouse.toml"])
            .current_dir(self.project())
            .env("HOME", self.home.path())
            .env_remove("CODEX_HOME")
            .env("GATEHOUSE_GUESTS_DIR", guests)
            .output()
            .expect("gatehouse runs")
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
        let written = std::fs::read(config.base_dir().join(&module.path)).expect("module written");
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
    assert_eq!(files.env["LOG"], "warn");
    assert_eq!(files.env_vars, ["GITHUB_TOKEN"]);
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
    assert_eq!(tracker.http_headers["X-Org"], "acme");
    assert_eq!(tracker.enabled, Some(false));
    assert_eq!(config.servers().expect("the servers check").len(), 2);

    let report =
        "server `tracker`: field `oauth_resource` not carried: gatehouse has no equivalent";
    assert!(stderr(&output).contains(report), "{}", stderr(&output));
    let text = std::fs::read_to_string(setup.config()).expect("written");
    assert!(text.contains(&format!("# {report}")), "{text}");

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
            "projects": {project: {"mcpServers": {
                "web": {"type": "http", "url": "https://web.example.com/mcp", "headers": {"Authorization": "Bearer abc"}},
            }}},
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
    assert_eq!(
        config.mcp_servers["web"].http_headers["Authorization"],
        "Bearer abc"
    );
    let errors = stderr(&output);
    for report in [
        "server `repo`: field `oauth` not carried: gatehouse has no equivalent",
        "server `legacy`: not carried: its transport is `sse`",
        "server `docs`: field `env` holds `${...}`",
    ] {
        assert!(errors.contains(report), "{report}: {errors}");
    }
    let entry: Value = serde_json::from_str(&printed_entry(&output)).expect("the entry is JSON");
    let gatehouse = &entry["mcpServers"]["gatehouse"];
    assert!(same_file(
        gatehouse["command"].as_str().expect("command"),
        Path::new(env!("CARGO_BIN_EXE_gatehouse"))
    ));
    assert_eq!(gatehouse["args"][0], "serve");
    assert_eq!(
        Path::new(gatehouse["args"][2].as_str().expect("config")),
        setup.config()
    );
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
    let output = setup.init(&["--from", "cursor"]);
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
    assert_eq!(raw.env[hostile], hostile);

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
