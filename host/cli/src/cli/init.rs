//! `gatehouse init`: writes a commented `gatehouse.toml` to start from: the
//! reference chain (the allowlist, then the guardian) with its modules copied
//! beside the config and their sha256 pinned, the `[elicitations]` defaults
//! spelled out, and the MCP servers of the operator's client imported
//! ([`gatehouse_mcp::import`]); then prints the entry that points the client
//! at `gatehouse serve` instead.
//!
//! Before anything is written it says on stderr what was left out and why
//! (a project server its client would not run among them), every command
//! line and URL `gatehouse serve` will run or reach, and which variables to
//! export for the `env` and header values it does not write. Inside a git
//! work tree it adds the files gatehouse writes beside the config to the
//! work tree's `.gitignore`.
//!
//! The reference guests are not embedded in the binary (`gatehouse demo`
//! loads them from the build too): they are copied from where the demo finds
//! them, `--guests`, `GATEHOUSE_GUESTS_DIR`, or `wasm32-wasip2/guest` of the
//! target directory this binary was built in.

use std::io::ErrorKind;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, bail};
use gatehouse_core::escape::Escaped;
use gatehouse_core::private_fs;
use gatehouse_mcp::import::{Client, ClientFile, Import, gateway_entry};

/// Write a commented gatehouse.toml from your MCP client's config.
///
/// It holds the reference chain (the allowlist, then the guardian) with its
/// modules copied to `modules/` beside it and their sha256 pinned, the
/// [elicitations] defaults, and the MCP servers of your client's config
/// (--from). Then print the entry that points
/// your client at `gatehouse serve`.
///
/// Only servers the client itself would run are imported: from the
/// project's .mcp.json, only those Claude Code approved
/// (enabledMcpjsonServers or enableAllProjectMcpServers in ~/.claude.json or
/// ~/.claude/settings.json) and never one it rejected
/// (disabledMcpjsonServers); Cursor's ./.cursor/mcp.json only with
/// --trust-project-servers. What is left out, and why, and every command
/// line gatehouse will run, is printed on stderr before anything is written.
/// Fields gatehouse cannot carry over are reported on stderr and as
/// comments in the file.
///
/// No env or HTTP header value is written into the config: gatehouse reads
/// each from its environment (env_vars, env_http_headers), and stderr lists
/// the variables to export. Inside a git work tree, the files gatehouse
/// writes beside the config are added to the work tree's .gitignore.
/// Nothing is overwritten without --force; the config is written 0600.
#[derive(Debug, clap::Args)]
pub struct InitArgs {
    /// Import the MCP servers of `codex` (~/.codex/config.toml, or
    /// $CODEX_HOME/config.toml), `claude` (~/.claude.json, with this
    /// project's entry there, and the servers of ./.mcp.json Claude Code
    /// approved), `cursor` (~/.cursor/mcp.json, and ./.cursor/mcp.json with
    /// --trust-project-servers), or of the file at PATH (a config.toml, a
    /// .claude.json, an .mcp.json or an mcp.json; every server in it; write
    /// ./codex for a file named like a client). `~` is $HOME.
    #[arg(long, value_name = "codex|claude|cursor|PATH")]
    from: Option<String>,
    /// With `--from cursor`: also import the project's own
    /// ./.cursor/mcp.json, whose servers Cursor runs without asking (so a
    /// cloned repository can put any command there). Without it they are
    /// listed and left out. (Claude Code's ./.mcp.json needs no flag: its
    /// servers follow Claude Code's own approvals.)
    #[arg(long)]
    trust_project_servers: bool,
    /// The config file to write.
    #[arg(long, value_name = "FILE", default_value = "gatehouse.toml")]
    config: PathBuf,
    /// Replace the config and module files if they exist.
    #[arg(long)]
    force: bool,
    /// Where the built reference guests are (default: GATEHOUSE_GUESTS_DIR,
    /// else `wasm32-wasip2/guest` in the target directory of this binary,
    /// as `gatehouse demo`).
    #[arg(long, value_name = "DIR")]
    guests: Option<PathBuf>,
}

/// The reference chain, in order: the built guest's file stem, the name in
/// the chain, and the file beside the config.
const MODULES: [(&str, &str, &str); 2] = [
    ("gatehouse_allowlist", "allowlist", "modules/allowlist.wasm"),
    ("gatehouse_guardian", "guardian", "modules/guardian.wasm"),
];

/// A reference module to write: its name in the chain, its path relative to
/// the config and the absolute one, its bytes and their sha256 (hex).
struct Module {
    name: &'static str,
    relative: &'static str,
    path: PathBuf,
    bytes: Vec<u8>,
    digest: String,
}

/// Where the servers come from, and so which entry to print.
enum Source {
    Client(Client),
    File(ClientFile),
}

pub fn run(args: InitArgs) -> anyhow::Result<ExitCode> {
    let cwd = std::env::current_dir().context("cannot tell the current directory")?;
    let config = absolute(&cwd, &args.config);
    let base = config
        .parent()
        .map_or_else(|| cwd.clone(), Path::to_path_buf);

    // Everything is read and checked before anything is written.
    let source = match args.from.as_deref() {
        None => None,
        Some(name) => Some(match Client::from_name(name) {
            Some(client) => Source::Client(client),
            None => Source::File(ClientFile::detect(&absolute(&cwd, Path::new(name)))?),
        }),
    };
    if args.trust_project_servers && !matches!(source, Some(Source::Client(Client::Cursor))) {
        bail!(
            "--trust-project-servers goes with --from cursor (its ./.cursor/mcp.json); Claude Code's ./.mcp.json servers follow Claude Code's own approvals, and a PATH is imported whole"
        );
    }
    let import = match &source {
        None => Import::default(),
        Some(Source::Client(client)) => {
            let home = std::env::var_os("HOME")
                .map(PathBuf::from)
                .context("HOME is not set: it says where the client's config is (`~`)")?;
            let codex_home = std::env::var_os("CODEX_HOME").map(PathBuf::from);
            let files = client.files(
                &home,
                codex_home.as_deref(),
                &cwd,
                args.trust_project_servers,
            );
            Import::from_files(client.name(), &files)?
        }
        Some(Source::File(file)) => Import::from_file(file)?,
    };
    let guests = super::guests_dir(args.guests)?;
    let mut modules = Vec::new();
    for (stem, name, relative) in MODULES {
        let from = guests.join(format!("{stem}.wasm"));
        let bytes = std::fs::read(&from).with_context(|| {
            format!(
                "{}: cannot read the reference guest `{name}`; build the guests with `.ci/build-guests --reference` or pass --guests DIR",
                from.display()
            )
        })?;
        modules.push(Module {
            name,
            relative,
            path: base.join(relative),
            digest: gatehouse_core::sandbox::sha256_hex(&bytes),
            bytes,
        });
    }
    let text = config_text(source.is_some(), &modules, &import)?;

    let targets: Vec<&Path> = std::iter::once(config.as_path())
        .chain(modules.iter().map(|module| module.path.as_path()))
        .collect();
    if !args.force
        && let Some(existing) = targets
            .iter()
            .find(|path| std::fs::symlink_metadata(path).is_ok())
    {
        bail!(
            "{} exists; pass --force to replace it (and the other files init writes: {})",
            existing.display(),
            list(&targets)
        );
    }
    report(&import, &config, source.as_ref());

    let modules_dir = base.join("modules");
    std::fs::create_dir_all(&modules_dir)
        .with_context(|| format!("{}: cannot create the directory", modules_dir.display()))?;
    for module in &modules {
        write(&module.path, &module.bytes, args.force)?;
    }
    write(&config, text.as_bytes(), args.force)?;

    eprintln!(
        "gatehouse: wrote {} ({} MCP server{} imported) and {}",
        config.display(),
        import.servers.len(),
        if import.servers.len() == 1 { "" } else { "s" },
        list(&targets[1..]),
    );
    let local: Vec<PathBuf> = std::iter::once(config.clone())
        .chain(modules.iter().map(|module| module.path.clone()))
        .chain(STATE.iter().map(|state| base.join(state)))
        .collect();
    ignore_in_work_tree(&base, &local);
    print_next_steps(source.as_ref(), &import, &config)?;
    Ok(ExitCode::SUCCESS)
}

/// What `gatehouse serve` writes beside the config, by default: the audit
/// log (init writes its name into the config), the trust file of
/// discovered servers, and `.gatehouse/` (the control socket, the HTTP
/// token, the compile cache).
const STATE: [&str; 3] = [
    "gatehouse-audit.jsonl",
    "gatehouse-trust.toml",
    ".gatehouse/",
];

/// Prints (stderr), before anything is written: what was left out or
/// changed and why; every server that will be served with the command line
/// or URL `gatehouse serve` runs or reaches; and the variables to export
/// for the values not written into the config. Untrusted text is escaped.
fn report(import: &Import, config: &Path, source: Option<&Source>) {
    for note in &import.notes {
        eprintln!("gatehouse: warning: {note}");
    }
    if import.servers.is_empty() {
        return;
    }
    eprintln!(
        "gatehouse: {} MCP server{} to import; `gatehouse serve` will run or reach:",
        import.servers.len(),
        if import.servers.len() == 1 { "" } else { "s" },
    );
    for (name, server) in &import.servers {
        let approval = server
            .approval
            .as_ref()
            .map(|approval| format!("; approved by {approval}"))
            .unwrap_or_default();
        eprintln!(
            "gatehouse:   {name}: {}   (from {}{})",
            server.command_line(),
            Escaped(&server.source.display().to_string()),
            Escaped(&approval),
        );
    }
    if import.exports.is_empty() {
        return;
    }
    let codex = matches!(source, Some(Source::Client(Client::Codex)))
        || matches!(source, Some(Source::File(file)) if !file.format.is_json());
    eprintln!(
        "gatehouse: the imported servers' env and HTTP header values (where clients keep tokens) are not written to {}: gatehouse reads each from its own environment instead. Export these where `gatehouse serve` starts ({}), never in a file inside the project:",
        Escaped(&config.display().to_string()),
        if codex {
            "your shell profile; the Codex entry printed below passes them through with env_vars"
        } else {
            "your shell profile, or the env of gatehouse's entry in your client's user config"
        },
    );
    for export in &import.exports {
        eprintln!("gatehouse:   {export}");
    }
}

/// The `.gitignore` line for `path`, relative to the work tree `root`:
/// anchored with `/` (so no `#` or `!` leads it), every character
/// `.gitignore` gives a meaning escaped (`*`, `?`, `[`, `]`, `\`, a trailing
/// space). `None` for a path outside `root`, not UTF-8, or holding a line
/// break.
fn ignore_line(root: &Path, path: &Path, dir: bool) -> Option<String> {
    let relative = path.strip_prefix(root).ok()?.to_str()?;
    if relative.is_empty() || relative.contains(['\n', '\r']) {
        return None;
    }
    let mut line = String::from("/");
    for c in relative.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            line.push('\\');
        }
        line.push(c);
    }
    if line.ends_with(' ') {
        line.pop();
        line.push_str("\\ ");
    }
    if dir && !line.ends_with('/') {
        line.push('/');
    }
    Some(line)
}

/// The git work tree holding `dir`: the nearest directory at or above it
/// with a `.git` (a directory, or a file for a linked work tree or a
/// submodule). Git itself is not run: a repository's config could make it
/// run commands.
fn work_tree(dir: &Path) -> Option<PathBuf> {
    dir.ancestors()
        .find(|ancestor| std::fs::symlink_metadata(ancestor.join(".git")).is_ok())
        .map(Path::to_path_buf)
}

/// The largest `.gitignore` init reads to append to.
const MAX_GITIGNORE_BYTES: u64 = 1024 * 1024;

/// Adds `paths` (the files init and `gatehouse serve` write beside the
/// config; a trailing `/` marks a directory) to the `.gitignore` at the root
/// of the git work tree holding `base`, and says on stderr what it did. Only
/// lines missing from it are appended; it is created only inside a work
/// tree, and a `.gitignore` that is a symbolic link, not a regular file, or
/// has other hard links is left alone (the lines are printed instead).
fn ignore_in_work_tree(base: &Path, paths: &[PathBuf]) {
    let base = base.canonicalize().unwrap_or_else(|_| base.to_path_buf());
    let Some(root) = work_tree(&base) else {
        eprintln!(
            "gatehouse: {} is not inside a git work tree: no .gitignore written",
            Escaped(&base.display().to_string())
        );
        return;
    };
    let lines: Vec<String> = paths
        .iter()
        .filter_map(|path| {
            let dir = path.as_os_str().to_string_lossy().ends_with('/');
            let path = path
                .parent()
                .and_then(|parent| parent.canonicalize().ok())
                .zip(path.file_name())
                .map_or_else(|| path.clone(), |(parent, name)| parent.join(name));
            ignore_line(&root, &path, dir)
        })
        .collect();
    let gitignore = root.join(".gitignore");
    let shown = Escaped(&gitignore.display().to_string()).to_string();
    if lines.len() < paths.len() {
        eprintln!(
            "gatehouse: warning: some of gatehouse's files beside the config cannot be written as {shown} lines (a name not UTF-8 or with a line break): add them yourself"
        );
    }
    match append_missing(&gitignore, &lines) {
        Ok(added) if added.is_empty() => {
            eprintln!("gatehouse: {shown} already ignores gatehouse's files");
        }
        Ok(added) => eprintln!(
            "gatehouse: added to {shown} (gatehouse's files here are this machine's: the config made from your client's, the module copies, the audit log and serve's state): {}",
            Escaped(&added.join(" "))
        ),
        Err(why) => eprintln!(
            "gatehouse: warning: {shown} not changed ({why}); add these lines yourself: {}",
            Escaped(&lines.join(" "))
        ),
    }
}

/// Appends to `gitignore` the `lines` it does not hold (as written, or
/// without the leading `/`), under a comment; returns those appended.
fn append_missing(gitignore: &Path, lines: &[String]) -> Result<Vec<String>, String> {
    use std::io::Write as _;
    let existing = match std::fs::symlink_metadata(gitignore) {
        Err(error) if error.kind() == ErrorKind::NotFound => None,
        Err(error) => return Err(error.to_string()),
        Ok(metadata) => {
            if !metadata.file_type().is_file() {
                return Err("it is a symbolic link or not a regular file".to_owned());
            }
            #[cfg(unix)]
            {
                use std::os::unix::fs::MetadataExt as _;
                if metadata.nlink() > 1 {
                    return Err("it has other hard links".to_owned());
                }
            }
            if metadata.len() > MAX_GITIGNORE_BYTES {
                return Err(format!("larger than {MAX_GITIGNORE_BYTES} bytes"));
            }
            Some(std::fs::read(gitignore).map_err(|error| error.to_string())?)
        }
    };
    let text = existing
        .as_deref()
        .map(String::from_utf8_lossy)
        .unwrap_or_default();
    let present: Vec<&str> = text.lines().map(str::trim_end).collect();
    let missing: Vec<String> = lines
        .iter()
        .filter(|line| {
            !present.contains(&line.as_str()) && !present.contains(&line.trim_start_matches('/'))
        })
        .cloned()
        .collect();
    if missing.is_empty() {
        return Ok(missing);
    }
    let mut out = String::new();
    if !text.is_empty() && !text.ends_with('\n') {
        out.push('\n');
    }
    out.push_str("# gatehouse: local files (gatehouse init)\n");
    for line in &missing {
        out.push_str(line);
        out.push('\n');
    }
    let mut options = std::fs::OpenOptions::new();
    if existing.is_some() {
        options.append(true);
    } else {
        // O_EXCL: a link appearing in its place is not followed.
        options.write(true).create_new(true);
    }
    let mut file = options.open(gitignore).map_err(|error| error.to_string())?;
    file.write_all(out.as_bytes())
        .map_err(|error| error.to_string())?;
    Ok(missing)
}

/// The config file's text. Only the server tables hold text from the
/// client's config ([`Import::to_toml`] writes them safely); everything else
/// here is gatehouse's own.
fn config_text(imported: bool, modules: &[Module], import: &Import) -> anyhow::Result<String> {
    let defaults = gatehouse_core::sandbox::Limits::default();
    let mut text = HEADER
        .replace(
            "{deadline_ms}",
            &defaults.deadline().as_millis().to_string(),
        )
        .replace("{memory_bytes}", &defaults.memory_bytes().to_string())
        .replace(
            "{concurrent_reviews}",
            &defaults.concurrent_reviews().to_string(),
        );
    for Module {
        name,
        relative,
        digest,
        ..
    } in modules
    {
        let (comment, config) = match *name {
            "allowlist" => (ALLOWLIST_COMMENT, ALLOWLIST_CONFIG),
            _ => (GUARDIAN_COMMENT, GUARDIAN_CONFIG),
        };
        text.push_str(comment);
        text.push_str(&format!(
            "[[review.modules]]\nname = \"{name}\"\npath = \"{relative}\"\nsha256 = \"{digest}\"    # `gatehouse inspect {relative}` prints it; a module with another digest is refused\n"
        ));
        text.push_str(config);
    }
    text.push_str(ELICITATIONS);
    text.push_str(SERVERS_HEADER);
    if !imported {
        text.push_str(NO_SERVERS);
    } else if import.servers.is_empty() {
        text.push_str("# The client's config had no server gatehouse can carry over.\n");
    }
    text.push_str(&import.to_toml()?);
    Ok(text)
}

const HEADER: &str = r#"# gatehouse.toml, written by `gatehouse init`. Every key is documented in the
# README's Configuration section. Check it with `gatehouse review --config
# THIS_FILE --request R.json`; serve it with `gatehouse serve --config THIS_FILE`.

[review]
on_failure = "decline"         # a module that fails declines (fail closed); "defer" passes to the next module
verify_contract = true         # every module runs the conformance contract suite before it is used

[review.limits]                # per review, every module; each field optional, the defaults shown
deadline_ms = {deadline_ms}
memory_bytes = {memory_bytes}
concurrent_reviews = {concurrent_reviews}

"#;

const ALLOWLIST_COMMENT: &str = r#"# Policy first: the allowlist answers what its rules know and defers the rest.
# A rule: { server, tool, mode, url, decision, message, content }, first match
# wins; decision is accept | decline | cancel | defer. For example:
#   { mode = "url", url = "https://tracker.example.com/*", decision = "accept" },
#   { tool = "delete_*", decision = "decline", message = "Deleting is not allowed from this agent." },
"#;

const ALLOWLIST_CONFIG: &str = "config = { rules = [], default = \"defer\" }\n\n";

const GUARDIAN_COMMENT: &str = r#"# The reviewer last: Codex's Guardian review with rules for risk. Deny rules
# first, then allow rules ({ server, tool, reason }, `*` and `?` wildcards),
# then the tool's annotations (destructive: deny, read-only: allow), then
# `default`. For example:
#   allow = [{ server = "docs", tool = "read_*" }]
#   deny = [{ tool = "drop_*", reason = "dropping data needs a person" }]
"#;

const GUARDIAN_CONFIG: &str = "config = { allow = [], deny = [], default = \"deny\" }\n\n";

const ELICITATIONS: &str = r#"# How elicitations are routed, and the audit log. The defaults, written out.
[elicitations]
auto_deny = false                    # true: decline everything at once, no review
approval_policy = "on-request"       # untrusted | on-request | never | { granular = { mcp_elicitations = false } }
approvals_reviewer = "auto_review"   # "user" sends every approval to the person
auto_approve_prompts = false         # with "never": accept empty forms
on_unhandled = "decline"             # what neither a module nor the person decided: decline | cancel
person_timeout_sec = 300             # then the elicitation is cancelled
max_in_flight_per_server = 256       # more at once from one server are declined at once (and audited)
audit_log = "gatehouse-audit.jsonl"  # one JSON line per elicitation, relative to this file
audit_sync = "batch"                 # always (fdatasync before each answer) | batch (<= 200 ms) | never

# Per-server overrides, e.g. send one server's approvals to the person:
# [elicitations.servers.github]
# approvals_reviewer = "user"

"#;

const SERVERS_HEADER: &str = r#"# The MCP servers gatehouse serves, as Codex writes them: stdio (command,
# args, env, env_vars, cwd) or streamable HTTP (url, bearer_token_env_var,
# http_headers, env_http_headers); startup_timeout_sec, tool_timeout_sec,
# enabled, required, enabled_tools, disabled_tools.
"#;

const NO_SERVERS: &str = r#"# None imported (`gatehouse init --from codex|claude|cursor|PATH` brings a
# client's). For example:
# [mcp_servers.files]
# command = "my-mcp-server"
# args = ["--root", "/srv/docs"]
"#;

/// Writes `bytes` to `path`, 0600, whole or not at all: to a temporary file
/// beside it, then moved into place. Without `force` the move is a hard link,
/// which fails if anything appeared at `path` meanwhile, so nothing is ever
/// replaced.
fn write(path: &Path, bytes: &[u8], force: bool) -> anyhow::Result<()> {
    if force {
        return private_fs::replace(path, &[bytes], true)
            .with_context(|| format!("{}: cannot write it", path.display()));
    }
    let temporary = private_fs::temporary_path(path)?;
    private_fs::write_new(&temporary, &[bytes], true)
        .with_context(|| format!("{}: cannot write it", temporary.display()))?;
    let linked = std::fs::hard_link(&temporary, path);
    let _ = std::fs::remove_file(&temporary);
    match linked {
        Ok(()) => Ok(()),
        Err(error) if error.kind() == ErrorKind::AlreadyExists => {
            bail!("{} exists; pass --force to replace it", path.display())
        }
        Err(error) => Err(error).with_context(|| format!("{}: cannot write it", path.display())),
    }
}

/// Prints (stdout) the entry that points the client at `gatehouse serve`
/// and which of its servers to remove there.
fn print_next_steps(source: Option<&Source>, import: &Import, config: &Path) -> anyhow::Result<()> {
    let program = std::env::current_exe().context("cannot tell where this binary is")?;
    let config = config
        .canonicalize()
        .unwrap_or_else(|_| config.to_path_buf());
    let environment: Vec<String> = import.environment().into_iter().collect();
    let (json, place) = match source {
        Some(Source::Client(Client::Codex)) => (false, "~/.codex/config.toml".to_owned()),
        Some(Source::Client(Client::Claude)) => (true, "~/.claude.json or .mcp.json".to_owned()),
        Some(Source::Client(Client::Cursor)) => (true, "~/.cursor/mcp.json".to_owned()),
        Some(Source::File(file)) => (file.format.is_json(), file.path.display().to_string()),
        None => {
            println!("Point your client at gatehouse. Codex (~/.codex/config.toml):\n");
            println!(
                "{}\n",
                gateway_entry(false, &program, &config, &environment)?.trim_end()
            );
            println!("Claude Code (.mcp.json) or Cursor (~/.cursor/mcp.json):\n");
            println!(
                "{}",
                gateway_entry(true, &program, &config, &environment)?.trim_end()
            );
            return Ok(());
        }
    };
    println!(
        "Point your client at gatehouse: add this to {}\n",
        Escaped(&place)
    );
    println!(
        "{}",
        gateway_entry(json, &program, &config, &environment)?.trim_end()
    );
    if import.servers.is_empty() {
        return Ok(());
    }
    let names: Vec<String> = import
        .servers
        .values()
        .map(|server| format!("`{}`", Escaped(&server.original_name)))
        .collect();
    println!(
        "\nThen remove (or disable{}) the servers gatehouse now serves, so the client does not reach them directly: {}",
        if json { "" } else { ": enabled = false" },
        names.join(", ")
    );
    Ok(())
}

fn absolute(cwd: &Path, path: &Path) -> PathBuf {
    if path.is_absolute() {
        path.to_path_buf()
    } else {
        cwd.join(path)
    }
}

fn list(paths: &[&Path]) -> String {
    paths
        .iter()
        .map(|path| path.display().to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The limits the file shows are the defaults the sandbox has.
    #[test]
    fn the_limits_written_are_the_defaults() {
        let text = config_text(false, &[], &Import::default()).unwrap();
        let config: toml::Table = toml::from_str(&text).unwrap();
        let limits = &config["review"]["limits"];
        let defaults = gatehouse_core::sandbox::Limits::default();
        assert_eq!(
            limits["deadline_ms"].as_integer(),
            i64::try_from(defaults.deadline().as_millis()).ok()
        );
        assert_eq!(
            limits["memory_bytes"].as_integer(),
            i64::try_from(defaults.memory_bytes()).ok()
        );
        assert_eq!(
            limits["concurrent_reviews"].as_integer(),
            Some(i64::from(defaults.concurrent_reviews()))
        );
    }
}
