//! `gatehouse init`: writes a commented `gatehouse.toml` to start from: the
//! reference chain (the allowlist, then the guardian) with its modules copied
//! beside the config and their sha256 pinned, the `[elicitations]` defaults
//! spelled out, and the MCP servers of the operator's client imported
//! ([`gatehouse_mcp::import`]); then prints what points the client at
//! `gatehouse serve` instead: for Codex the entry for the `config.toml` it
//! reads (`$CODEX_HOME`'s when set), for Claude Code the `claude mcp
//! add-json` and `claude mcp remove` commands with their scopes, for Cursor
//! the entry for its `mcp.json`; the settings the client kept in its
//! entries for the servers moved onto gatehouse's, one sentence each on
//! stderr ([`gatehouse_mcp::import::entry`]); and the client's permission
//! rules for the servers' tools, given again for their gatehouse names
//! ([`gatehouse_mcp::import::permissions`]).
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
//! them, `--guests`, `GATEHOUSE_GUESTS_DIR`, `wasm32-wasip2/guest` of the
//! target directory this binary was built in, or `../share/gatehouse/guests`
//! beside an installed binary (`.ci/install-gatehouse`).

use std::io::ErrorKind;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, bail};
use gatehouse_base::escape::Escaped;
use gatehouse_core::private_fs;
use gatehouse_mcp::import::permissions::{RuleMove, claude_rules, cursor_rules};
use gatehouse_mcp::import::{
    Client, ClientFile, EntryFormat, GATEWAY_ENTRY, GatewayEntry, Import, Scope, codex_config,
    gateway_entry, shell_quote,
};
use gatehouse_mcp::server_config::is_valid_server_name;

/// Write a commented gatehouse.toml from your MCP client's config.
///
/// It holds the reference chain (the allowlist, then the guardian) with its
/// modules copied to `modules/` beside it and their sha256 pinned, the
/// [elicitations] defaults, and the MCP servers of your client's config
/// (--from). Then print what points your client at `gatehouse serve`: for
/// Codex the [mcp_servers.gatehouse] entry for the config.toml it reads
/// ($CODEX_HOME/config.toml when CODEX_HOME is set), with required = true;
/// for Claude Code the `claude mcp add-json` command and a `claude mcp
/// remove` per imported server, each with its scope (user, project, local);
/// for Cursor the entry for its mcp.json.
///
/// Settings only the client reads are not written into gatehouse.toml but
/// moved onto that entry, one sentence each on stderr: Codex's
/// default_tools_approval_mode (the strictest where servers disagree),
/// per-tool approval modes (tools renamed SERVER__TOOL, as gatehouse
/// exposes them), startup_readiness, timeouts; Claude Code's timeout and
/// alwaysLoad. The client's permission rules for the servers' tools
/// (Claude Code's permissions, Cursor's mcpAllowlist) are printed again for
/// the tools' gatehouse names.
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
    /// else `wasm32-wasip2/guest` in the target directory of this binary, or
    /// `../share/gatehouse/guests` beside an installed one, as `gatehouse
    /// demo`).
    #[arg(long, value_name = "DIR")]
    guests: Option<PathBuf>,
    /// Build the chain from reviewer modules published to OCI registries
    /// instead of the reference guests on disk: each REF
    /// (`HOST[:PORT]/REPO:TAG`) becomes an `oci` entry, in the order given.
    /// Before anything is written, each is pulled, verified against
    /// --trust-key (or let through by --allow-unsigned), proven by the
    /// conformance kit, and locked in gatehouse.lock beside the config.
    #[arg(long, value_name = "REF", num_args = 1..)]
    modules: Vec<String>,
    /// The public key (cosign.pub) that must have signed every --modules
    /// artifact; copied to keys/trusted.pub beside the config and named in
    /// its [trust] policy.
    #[arg(long, value_name = "FILE", requires = "modules")]
    trust_key: Option<PathBuf>,
    /// Let the --modules run unsigned (a registry of your own, while
    /// developing); the [trust] policy says so for their repositories.
    #[arg(long, requires = "modules", conflicts_with = "trust_key")]
    allow_unsigned: bool,
}

/// Where `--trust-key` is copied, relative to the config.
const TRUSTED_KEY: &str = "keys/trusted.pub";

/// A `--modules` entry: its name in the chain and its reference.
struct OciModule {
    name: String,
    reference: gatehouse_registry::ModuleRef,
    text: String,
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
    let home = std::env::var_os("HOME").map(PathBuf::from);
    // Codex reads $CODEX_HOME/config.toml when it is set: so does init, and
    // so says its advice.
    let codex_home = std::env::var_os("CODEX_HOME")
        .filter(|value| !value.is_empty())
        .map(PathBuf::from);
    let import = match &source {
        None => Import::default(),
        Some(Source::Client(client)) => {
            let home = home
                .clone()
                .context("HOME is not set: it says where the client's config is (`~`)")?;
            let codex_home = codex_home.as_deref().map(|path| absolute(&cwd, path));
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
    let mut oci = Vec::new();
    for text in &args.modules {
        let reference: gatehouse_registry::ModuleRef = text.parse()?;
        let name = reference.short_name().to_owned();
        oci.push(OciModule {
            name,
            reference,
            text: text.clone(),
        });
    }
    if !oci.is_empty() && args.trust_key.is_none() && !args.allow_unsigned {
        bail!(
            "--modules need a --trust-key FILE (the cosign.pub that signed them), or --allow-unsigned for modules of your own in development"
        );
    }
    let trust_key = match &args.trust_key {
        Some(path) => {
            let path = absolute(&cwd, path);
            let pem = std::fs::read(&path)
                .with_context(|| format!("{}: cannot read the trusted key", path.display()))?;
            gatehouse_registry::signature::PublicKey::from_pem(&path.display().to_string(), &pem)?;
            Some((path, pem))
        }
        None => None,
    };
    let guests = if oci.is_empty() {
        Some(super::guests_dir(args.guests)?)
    } else {
        None
    };
    let mut modules = Vec::new();
    for (stem, name, relative) in MODULES {
        let Some(guests) = &guests else {
            break;
        };
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
    let text = config_text(source.is_some(), &modules, &oci, &import)?;
    let lock_path = gatehouse_registry::lock::Lock::path_beside(&config);
    let key_path = base.join(TRUSTED_KEY);
    let trust = trust_text(&oci, trust_key.as_ref().map(|_| TRUSTED_KEY));
    // The modules are checked and locked before anything is written: with
    // the key where it is now, the config as it will be.
    let candidates = if oci.is_empty() {
        Vec::new()
    } else {
        let checked_trust = trust_text(
            &oci,
            trust_key
                .as_ref()
                .map(|(path, _)| path.to_str().unwrap_or_default()),
        );
        let parsed =
            gatehouse_gateway::config::Config::parse(&format!("{text}{checked_trust}"), &config)?;
        match super::modules::check_candidates(&parsed, &[], None)? {
            Ok(candidates) => candidates,
            Err(refused) => {
                for reason in &refused {
                    eprintln!("gatehouse: refused: {reason}");
                }
                bail!("no file was written: the modules above were refused");
            }
        }
    };
    let text = format!("{text}{trust}");

    let mut targets: Vec<&Path> = std::iter::once(config.as_path())
        .chain(modules.iter().map(|module| module.path.as_path()))
        .collect();
    if !oci.is_empty() {
        targets.push(&lock_path);
    }
    if trust_key.is_some() {
        targets.push(&key_path);
    }
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

    if !modules.is_empty() {
        let modules_dir = base.join("modules");
        std::fs::create_dir_all(&modules_dir)
            .with_context(|| format!("{}: cannot create the directory", modules_dir.display()))?;
    }
    for module in &modules {
        write(&module.path, &module.bytes, args.force)?;
    }
    if let Some((_, pem)) = &trust_key {
        let keys_dir = base.join("keys");
        std::fs::create_dir_all(&keys_dir)
            .with_context(|| format!("{}: cannot create the directory", keys_dir.display()))?;
        write(&key_path, pem, args.force)?;
    }
    write(&config, text.as_bytes(), args.force)?;
    if !oci.is_empty() {
        super::modules::write_lock(&lock_path, None, &candidates)?;
    }

    eprintln!(
        "gatehouse: wrote {} ({} MCP server{} imported) and {}",
        config.display(),
        import.servers.len(),
        if import.servers.len() == 1 { "" } else { "s" },
        list(&targets[1..]),
    );
    let local: Vec<PathBuf> = std::iter::once(config.clone())
        .chain(modules.iter().map(|module| module.path.clone()))
        .chain(trust_key.as_ref().map(|_| key_path.clone()))
        .chain(STATE.iter().map(|state| base.join(state)))
        .collect();
    ignore_in_work_tree(&base, &local);
    let places = Places {
        home: home.as_deref(),
        codex_home: codex_home.as_deref(),
        project: &cwd,
    };
    print_next_steps(source.as_ref(), &import, &config, &places)?;
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
/// The `[trust]` section for `oci` modules: each repository must be signed
/// by the key at `key` (relative to the config), or, without one, may run
/// unsigned. Empty without `oci` modules.
fn trust_text(oci: &[OciModule], key: Option<&str>) -> String {
    if oci.is_empty() {
        return String::new();
    }
    let mut text = String::from(
        "# Which keys must have signed which modules (gatehouse modules update checks it).\n",
    );
    if let Some(key) = key {
        text.push_str(&format!("[trust.keys]\ntrusted = {key:?}\n\n"));
    }
    let mut seen = std::collections::BTreeSet::new();
    for module in oci {
        let name = module.reference.name();
        if !seen.insert(name.clone()) {
            continue;
        }
        text.push_str(&format!("[[trust.rules]]\nmatch = {name:?}\n"));
        match key {
            Some(_) => text.push_str("keys = [\"trusted\"]\n\n"),
            None => {
                text.push_str("allow_unsigned = true    # `gatehouse init --allow-unsigned`\n\n")
            }
        }
    }
    text
}

fn config_text(
    imported: bool,
    modules: &[Module],
    oci: &[OciModule],
    import: &Import,
) -> anyhow::Result<String> {
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
    for OciModule {
        name,
        text: reference,
        ..
    } in oci
    {
        let (comment, config) = if name.starts_with("allowlist") {
            (ALLOWLIST_COMMENT, ALLOWLIST_CONFIG)
        } else if name == "guardian" {
            (GUARDIAN_COMMENT, GUARDIAN_CONFIG)
        } else {
            ("", "\n")
        };
        text.push_str(comment);
        text.push_str(&format!(
            "[[review.modules]]\nname = {name:?}\noci = {reference:?}    # runs the digest gatehouse.lock names; `gatehouse modules update` moves it\n"
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

/// Where the clients keep their configs on this machine.
struct Places<'a> {
    /// `$HOME`, if set.
    home: Option<&'a Path>,
    /// `$CODEX_HOME`, if set.
    codex_home: Option<&'a Path>,
    /// The project: the directory init runs in.
    project: &'a Path,
}

impl Places<'_> {
    /// `home/relative`, or `~/relative` when HOME is not set.
    fn in_home(&self, relative: &str) -> String {
        self.home.map_or_else(
            || format!("~/{relative}"),
            |home| home.join(relative).display().to_string(),
        )
    }

    /// The file Codex reads, and how it was found.
    fn codex_config(&self) -> String {
        match (self.codex_home, self.home) {
            (Some(codex_home), _) => format!(
                "{} (CODEX_HOME is set, so Codex reads $CODEX_HOME/config.toml, not ~/.codex/config.toml)",
                absolute(self.project, &codex_home.join("config.toml")).display()
            ),
            (None, Some(home)) => codex_config(home, None).display().to_string(),
            (None, None) => "~/.codex/config.toml".to_owned(),
        }
    }

    /// Where a Claude Code scope lives, in one line.
    fn claude_scope(&self, scope: Scope) -> String {
        match scope {
            Scope::User => format!(
                "user: mcpServers in {}, for you in every project",
                self.in_home(".claude.json")
            ),
            Scope::Local => format!(
                "local: this project's entry in {} (projects[\"{}\"]), for you in this project only",
                self.in_home(".claude.json"),
                self.project.display()
            ),
            Scope::Project => format!(
                "project: {}, shared with everyone who works on this repository",
                self.project.join(".mcp.json").display()
            ),
        }
    }
}

/// Prints the moved settings' sentences (stderr), one line each.
fn print_moved(client: &str, moved: &[String]) {
    for sentence in moved {
        eprintln!("gatehouse: {client} entry: {}", Escaped(sentence));
    }
}

/// Prints permission rules to write again for the tools' gatehouse names.
fn print_rules(client: &str, rules: &[RuleMove], names: &str) {
    if rules.is_empty() {
        return;
    }
    let denies = rules.iter().any(|rule| rule.list.ends_with("deny"));
    println!(
        "\n{client}'s permission rules name the tools of servers gatehouse now serves; through gatehouse those tools are named {names}, so the rules no longer match them{}. Add these rules beside them:",
        if denies {
            " (and a deny that no longer matches no longer protects)"
        } else {
            ""
        }
    );
    for rule in rules {
        println!("  {rule}");
    }
}

/// The files the imported servers came from, escaped.
fn sources(import: &Import) -> String {
    let files: std::collections::BTreeSet<String> = import
        .servers
        .values()
        .map(|server| Escaped(&server.source.display().to_string()).to_string())
        .collect();
    files.into_iter().collect::<Vec<_>>().join(", ")
}

/// The imported servers' names as the client knows them, each quoted.
fn original_names(import: &Import) -> Vec<String> {
    import
        .servers
        .values()
        .map(|server| format!("`{}`", Escaped(&server.original_name)))
        .collect()
}

/// Prints (stdout) what points the client at `gatehouse serve`: the entry,
/// where it goes (or for Claude Code the `claude mcp` commands to run, with
/// the scope), which of its servers to remove, and the permission rules to
/// write again; and (stderr) one sentence per client-side setting moved
/// onto the entry.
fn print_next_steps(
    source: Option<&Source>,
    import: &Import,
    config: &Path,
    places: &Places<'_>,
) -> anyhow::Result<()> {
    let program = std::env::current_exe().context("cannot tell where this binary is")?;
    let config = config
        .canonicalize()
        .unwrap_or_else(|_| config.to_path_buf());
    let entry = |format| gateway_entry(format, &program, &config, import);
    match source {
        None => {
            let codex = entry(EntryFormat::Codex)?;
            println!(
                "Point your client at gatehouse.\n\nCodex: add this to {}\n\n{}\n",
                Escaped(&places.codex_config()),
                codex.text.trim_end()
            );
            let claude = entry(EntryFormat::ClaudeCommand)?;
            println!(
                "Claude Code: run\n\n  claude mcp add-json --scope local {GATEWAY_ENTRY} {}\n\n({})\n",
                shell_quote(&claude.text),
                Escaped(&places.claude_scope(Scope::Local))
            );
            let cursor = entry(EntryFormat::McpJson)?;
            println!(
                "Cursor: add this to {} (every workspace) or {} (this one)\n\n{}",
                Escaped(&places.in_home(".cursor/mcp.json")),
                Escaped(
                    &places
                        .project
                        .join(".cursor/mcp.json")
                        .display()
                        .to_string()
                ),
                cursor.text.trim_end()
            );
            print_moved("Codex", &codex.moved);
        }
        Some(Source::Client(Client::Codex)) => {
            let codex = entry(EntryFormat::Codex)?;
            print_moved("Codex", &codex.moved);
            let place = places.codex_config();
            println!(
                "Point Codex at gatehouse: add this to {}\n\n{}",
                Escaped(&place),
                codex.text.trim_end()
            );
            if !import.servers.is_empty() {
                println!(
                    "\nThen remove (or disable: enabled = false) the servers gatehouse now serves in that file, so Codex does not reach them directly: {}",
                    original_names(import).join(", ")
                );
            }
        }
        Some(Source::Client(Client::Claude)) => {
            print_claude(import, places, &entry(EntryFormat::ClaudeCommand)?)
        }
        Some(Source::Client(Client::Cursor)) => {
            let cursor = entry(EntryFormat::McpJson)?;
            print_moved("Cursor", &cursor.moved);
            let from_project = import
                .servers
                .values()
                .any(|server| server.scope == Some(Scope::Project));
            let place = if from_project {
                format!(
                    "{} (the project's file, as gatehouse serves this project's servers; the entry names this machine's paths, so keep that change out of commits)",
                    places.project.join(".cursor/mcp.json").display()
                )
            } else {
                format!("{} (every workspace)", places.in_home(".cursor/mcp.json"))
            };
            println!(
                "Point Cursor at gatehouse: add this to {}\n\n{}",
                Escaped(&place),
                cursor.text.trim_end()
            );
            if !import.servers.is_empty() {
                println!(
                    "\nThen remove the servers gatehouse now serves from {}, so Cursor does not reach them directly: {}",
                    sources(import),
                    original_names(import).join(", ")
                );
            }
            if let Some(home) = places.home {
                print_rules(
                    "Cursor",
                    &cursor_rules(home, places.project, import),
                    "gatehouse:SERVER__TOOL",
                );
            }
        }
        Some(Source::File(file)) => {
            let (format, client) = if file.format.is_json() {
                (EntryFormat::McpJson, "JSON")
            } else {
                (EntryFormat::Codex, "Codex")
            };
            let written = entry(format)?;
            print_moved(client, &written.moved);
            println!(
                "Point your client at gatehouse: add this to {}\n\n{}",
                Escaped(&file.path.display().to_string()),
                written.text.trim_end()
            );
            if !import.servers.is_empty() {
                println!(
                    "\nThen remove (or disable{}) the servers gatehouse now serves, so the client does not reach them directly: {}",
                    if file.format.is_json() {
                        ""
                    } else {
                        ": enabled = false"
                    },
                    original_names(import).join(", ")
                );
            }
        }
    }
    Ok(())
}

/// Claude Code: the `claude mcp add-json` command for gatehouse's entry
/// and a `claude mcp remove` per imported server, each with its scope
/// spelled out. gatehouse goes in the user scope when every server it
/// serves came from there, else in the local one: a project's servers
/// then run only in this project, as before, and the entry, which names
/// this machine's binary and a config kept out of git, stays out of the
/// shared `.mcp.json`.
fn print_claude(import: &Import, places: &Places<'_>, claude: &GatewayEntry) {
    print_moved("Claude Code", &claude.moved);
    let scopes: std::collections::BTreeSet<Scope> = import
        .servers
        .values()
        .filter_map(|server| server.scope)
        .collect();
    let scope = if !scopes.is_empty() && scopes.iter().all(|scope| *scope == Scope::User) {
        Scope::User
    } else {
        Scope::Local
    };
    println!(
        "Point Claude Code at gatehouse: run\n\n  claude mcp add-json --scope {} {GATEWAY_ENTRY} {}",
        scope.name(),
        shell_quote(&claude.text)
    );
    let mut explained = std::collections::BTreeSet::from([scope]);
    explained.extend(scopes.iter().copied());
    if scope == Scope::Local && !scopes.is_empty() {
        println!(
            "\n(gatehouse goes in the local scope, as some servers it serves are this project's: in another scope they would run in your other projects too, and the entry names this machine's binary and a config kept out of git.)"
        );
    }
    if !import.servers.is_empty() {
        println!(
            "\nThen remove the servers gatehouse now serves, so Claude Code does not reach them directly:\n"
        );
        for server in import.servers.values() {
            let name = &server.original_name;
            match server.scope {
                Some(from) if is_valid_server_name(name) => println!(
                    "  claude mcp remove --scope {} {}",
                    from.name(),
                    shell_quote(name)
                ),
                _ => println!(
                    "  # `{}`: remove it from {} by hand",
                    Escaped(name),
                    Escaped(&server.source.display().to_string())
                ),
            }
        }
        if scope == Scope::Local
            && scopes
                .iter()
                .any(|from| matches!(from, Scope::User | Scope::Project))
        {
            println!(
                "\n(Removing a user-scope server takes it from your other projects too, and a project-scope one from everyone's ./.mcp.json: to stop one only here, disable it in Claude Code's /mcp menu instead.)"
            );
        }
    }
    println!("\nClaude Code's scopes:");
    for scope in explained {
        println!("  {}", Escaped(&places.claude_scope(scope)));
    }
    if let Some(home) = places.home {
        print_rules(
            "Claude Code",
            &claude_rules(home, places.project, import),
            "mcp__gatehouse__SERVER__TOOL",
        );
    }
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
        let text = config_text(false, &[], &[], &Import::default()).unwrap();
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
