//! MCP servers imported from an MCP client's own config, for `gatehouse init`:
//! Codex (`~/.codex/config.toml`, `[mcp_servers.NAME]`), Claude Code
//! (`~/.claude.json`: `mcpServers` and the current project's entry under
//! `projects`; the project's `.mcp.json`) and Cursor (`~/.cursor/mcp.json`,
//! the project's `.cursor/mcp.json`).
//!
//! Only what the client itself would run is imported ([`Trust`]): a server
//! of a project's `.mcp.json` only when Claude Code's own state approves it
//! ([`claude::Approvals`]), never when Claude Code rejected it; Cursor's
//! project file, which Cursor runs without asking, only when the user says
//! so. What is left out is noted with the reason ([`NoteKind::NotTrusted`]).
//!
//! No `env` or HTTP header value is written into the config: each is read
//! from gatehouse's environment instead, and [`Import::exports`] says what
//! to export ([`secrets`]).
//!
//! Settings only the client reads (Codex's approval modes and
//! `startup_readiness`, Claude Code's `timeout`, `alwaysLoad` and per-tool
//! policies) are not written into the config either: they are kept on the
//! server ([`ImportedServer::client`], [`client_side`]) and moved onto the
//! gatehouse entry printed for the client ([`entry::gateway_entry`]);
//! permission rules kept elsewhere that name the servers' tools are
//! translated for the tools' gatehouse names ([`permissions`]). A server the
//! client does not run here (Claude Code's `disabledMcpServers` for this
//! project, `"disabled": true`) is not imported.
//!
//! Every server table is read with the same [`RawServer`] the rest of
//! gatehouse reads (`[mcp_servers.*]` and discovery's `.mcp.json`), one key at
//! a time: a key [`RawServer`] does not know, or whose value it refuses, is
//! left out and reported ([`Note`]), and the rest must pass
//! [`RawServer::check`], or the server is left out and reported. Nothing is
//! dropped silently.
//!
//! What the client wrote is untrusted text: [`Import::to_toml`] writes the
//! tables with the `toml` serializer and every comment line escaped
//! ([`gatehouse_base::escape`]), so a name or value can neither end a comment
//! nor start a table of its own. A value with a newline is written as a
//! multi-line string (still one value); a key whose value holds bidi
//! controls, line separators or invisible characters, which TOML would keep
//! raw, is not carried.

use std::collections::BTreeMap;
use std::fmt;
use std::io::Read as _;
use std::path::{Path, PathBuf};

use gatehouse_base::escape::{Escaped, needs_escape};
use serde_json::{Map, Value};

use crate::discovery::sanitize_name;
use crate::discovery::server_map;
use crate::server_config::{RawServer, is_valid_server_name};

pub mod claude;
pub mod client_side;
pub mod entry;
pub mod permissions;
pub mod secrets;

pub use client_side::ClientSide;
pub use entry::{EntryFormat, GatewayEntry, gateway_entry};
pub use secrets::{Export, ExportField};

/// The largest client config read (`~/.claude.json` keeps history too).
pub const MAX_CLIENT_CONFIG_BYTES: u64 = 64 * 1024 * 1024;

/// An MCP client whose config `gatehouse init --from` reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Client {
    /// OpenAI Codex: TOML, `[mcp_servers.NAME]`.
    Codex,
    /// Claude Code: JSON, `mcpServers`.
    Claude,
    /// Cursor: JSON, `mcpServers`.
    Cursor,
}

impl Client {
    /// The client named `name` (`codex`, `claude`, `cursor`), if any.
    pub fn from_name(name: &str) -> Option<Client> {
        match name {
            "codex" => Some(Client::Codex),
            "claude" => Some(Client::Claude),
            "cursor" => Some(Client::Cursor),
            _ => None,
        }
    }

    /// Its name as `--from` takes it.
    pub fn name(self) -> &'static str {
        match self {
            Client::Codex => "codex",
            Client::Claude => "claude",
            Client::Cursor => "cursor",
        }
    }

    /// The files this client reads its servers from, lowest precedence
    /// first (a later file's server replaces an earlier one of the same
    /// name): the user's under `home` (Codex: `codex_home`, its
    /// `CODEX_HOME`, when set), then the project's under `project`, each
    /// with what it is trusted with ([`Trust`]). `trust_project_servers`
    /// imports Cursor's project file, which Cursor runs without asking;
    /// Claude Code's `.mcp.json` follows Claude Code's own approvals either
    /// way.
    pub fn files(
        self,
        home: &Path,
        codex_home: Option<&Path>,
        project: &Path,
        trust_project_servers: bool,
    ) -> Vec<ClientFile> {
        let user = |path: PathBuf, format: FileFormat| ClientFile {
            path,
            format,
            trust: Trust::User,
            scope: Some(Scope::User),
        };
        match self {
            Client::Codex => vec![user(codex_config(home, codex_home), FileFormat::CodexToml)],
            // Claude's own order: user, then the project's `.mcp.json`,
            // then the local scope (this project's entry in `.claude.json`).
            Client::Claude => vec![
                user(
                    home.join(".claude.json"),
                    FileFormat::ClaudeJson { project: None },
                ),
                ClientFile {
                    path: project.join(".mcp.json"),
                    format: FileFormat::McpJson,
                    trust: Trust::ClaudeProject {
                        home: home.to_path_buf(),
                        project: project.to_path_buf(),
                    },
                    scope: Some(Scope::Project),
                },
                ClientFile {
                    scope: Some(Scope::Local),
                    ..user(
                        home.join(".claude.json"),
                        FileFormat::ClaudeJson {
                            project: Some(project.to_path_buf()),
                        },
                    )
                },
            ],
            Client::Cursor => vec![
                user(home.join(".cursor").join("mcp.json"), FileFormat::McpJson),
                ClientFile {
                    path: project.join(".cursor").join("mcp.json"),
                    format: FileFormat::McpJson,
                    trust: Trust::Project {
                        trusted: trust_project_servers,
                    },
                    scope: Some(Scope::Project),
                },
            ],
        }
    }
}

/// The file Codex reads its config from: `config.toml` in `codex_home`
/// (its `CODEX_HOME`) when set, else in `home/.codex`.
pub fn codex_config(home: &Path, codex_home: Option<&Path>) -> PathBuf {
    codex_home
        .map_or_else(|| home.join(".codex"), Path::to_path_buf)
        .join("config.toml")
}

/// Which servers of a file are imported: what its client would run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Trust {
    /// The user's own file (under the home directory, or named by `--from
    /// PATH`): every server.
    User,
    /// A Claude Code project's `.mcp.json`: a server only when Claude
    /// Code's own state approves it, never one it rejected
    /// ([`claude::Approvals`]).
    ClaudeProject {
        /// The home directory (`~/.claude.json`, `~/.claude/settings.json`).
        home: PathBuf,
        /// The project directory, as Claude Code keys it.
        project: PathBuf,
    },
    /// A project's own file that its client runs without asking (Cursor's
    /// `.cursor/mcp.json`): every server when `trusted`
    /// (`--trust-project-servers`), none otherwise.
    Project {
        /// Whether the user said to import it.
        trusted: bool,
    },
}

/// How a client file holds its servers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FileFormat {
    /// Codex's `config.toml`: `[mcp_servers.NAME]` tables.
    CodexToml,
    /// Claude Code's `~/.claude.json`: its `mcpServers` (the user scope),
    /// or with `project`, `projects[PROJECT].mcpServers` (the local scope).
    ClaudeJson {
        /// The project directory whose entry is read instead of the user's.
        project: Option<PathBuf>,
    },
    /// `.mcp.json` or Cursor's `mcp.json`: `{"mcpServers": {...}}`, or the
    /// server map itself.
    McpJson,
}

impl FileFormat {
    /// Whether servers in this format are JSON (Claude's and Cursor's
    /// shape) rather than Codex's TOML.
    pub fn is_json(&self) -> bool {
        !matches!(self, FileFormat::CodexToml)
    }
}

/// Where a client's entry for a server lives, as Claude Code names it (and
/// Cursor likewise, without `Local`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Scope {
    /// The user's own config (`~/.claude.json`'s `mcpServers`,
    /// `~/.cursor/mcp.json`, Codex's `config.toml`): every project.
    User,
    /// The project's shared file (`.mcp.json`, `.cursor/mcp.json`), which
    /// a repository carries to everyone who works on it.
    Project,
    /// Claude Code's entry for this project in `~/.claude.json`: this
    /// user, this project.
    Local,
}

impl Scope {
    /// Its name as `claude mcp --scope` takes it.
    pub fn name(self) -> &'static str {
        match self {
            Scope::User => "user",
            Scope::Project => "project",
            Scope::Local => "local",
        }
    }
}

/// One client config file, its format, and which of its servers to import.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientFile {
    /// The file.
    pub path: PathBuf,
    /// What it holds.
    pub format: FileFormat,
    /// Which of its servers are imported.
    pub trust: Trust,
    /// Which of the client's scopes it is, when it is one of the client's
    /// own files (not a file named by `--from PATH`).
    pub scope: Option<Scope>,
}

impl ClientFile {
    /// The file at `path`, its format told by its extension (`.toml`: Codex;
    /// `.json`: a `.claude.json` when it has `projects` or is named so, else
    /// an `.mcp.json`), else by its contents (TOML with `mcp_servers`, or JSON).
    /// The user named it: every server in it is imported ([`Trust::User`]).
    pub fn detect(path: &Path) -> Result<ClientFile, ImportError> {
        let extension = path.extension().and_then(|ext| ext.to_str());
        let format = match extension {
            Some("toml") => FileFormat::CodexToml,
            Some("json") => json_format(path, &read_json(path)?),
            _ => {
                let text = read_text(path)?;
                if let Ok(value) = serde_json::from_str::<Value>(&text) {
                    json_format(path, &value)
                } else if toml::from_str::<toml::Table>(&text)
                    .is_ok_and(|table| table.contains_key("mcp_servers"))
                {
                    FileFormat::CodexToml
                } else {
                    return Err(ImportError::UnknownFormat(path.to_path_buf()));
                }
            }
        };
        Ok(ClientFile {
            path: path.to_path_buf(),
            format,
            trust: Trust::User,
            scope: None,
        })
    }
}

fn json_format(path: &Path, value: &Value) -> FileFormat {
    let named_claude = path.file_name().is_some_and(|name| name == ".claude.json");
    if named_claude || value.get("projects").is_some_and(Value::is_object) {
        FileFormat::ClaudeJson { project: None }
    } else {
        FileFormat::McpJson
    }
}

/// Why a client's config could not be imported. Each names the file.
#[derive(Debug, thiserror::Error)]
pub enum ImportError {
    /// The file could not be read.
    #[error("{}: cannot read it: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The file is larger than [`MAX_CLIENT_CONFIG_BYTES`].
    #[error("{}: larger than {MAX_CLIENT_CONFIG_BYTES} bytes; is it a client config?", .0.display())]
    TooLarge(PathBuf),
    /// The file is not valid TOML or JSON, or its server map has the wrong
    /// shape.
    #[error("{}: {message}", path.display())]
    Parse {
        /// The file.
        path: PathBuf,
        /// What is wrong, and where.
        message: String,
    },
    /// `--from PATH` names a file that is neither TOML nor JSON.
    #[error(
        "{}: not a client config gatehouse knows: give a Codex config.toml, a .claude.json, an .mcp.json or a Cursor mcp.json",
        .0.display()
    )]
    UnknownFormat(PathBuf),
    /// None of the client's config files exists.
    #[error("no {client} config found; looked at {}", list(.looked))]
    NothingFound {
        /// The client's name.
        client: &'static str,
        /// The files looked at.
        looked: Vec<PathBuf>,
    },
    /// An imported table could not be written as TOML (a `cwd` that is not
    /// UTF-8).
    #[error("server `{}`: cannot write it as TOML: {message}", Escaped(.server))]
    Write {
        /// The server.
        server: String,
        /// The serializer's message.
        message: String,
    },
}

fn list(paths: &[PathBuf]) -> String {
    paths
        .iter()
        .map(|path| path.display().to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

/// A server brought over, under the name gatehouse knows it by.
#[derive(Debug, Clone, PartialEq)]
pub struct ImportedServer {
    /// Its name in the client's config (untrusted text: escape it to show it).
    pub original_name: String,
    /// The file it came from.
    pub source: PathBuf,
    /// The table, as gatehouse writes it (it passes [`RawServer::check`]).
    pub raw: RawServer,
    /// For a server of a project's file: what approved it (Claude Code's
    /// state, or `--trust-project-servers`).
    pub approval: Option<String>,
    /// The settings of its entry that only the client reads: not in
    /// [`ImportedServer::raw`], moved onto the gatehouse entry instead
    /// ([`entry::gateway_entry`]).
    pub client: ClientSide,
    /// The client's scope it came from ([`ClientFile::scope`]).
    pub scope: Option<Scope>,
}

impl ImportedServer {
    /// What `gatehouse serve` will run or reach: the command and its
    /// arguments (each quoted for a shell when it needs to be, and the
    /// working directory if set), or the URL. Escaped: one line, safe for a
    /// terminal.
    pub fn command_line(&self) -> String {
        let raw = &self.raw;
        let line = match (&raw.command, &raw.url) {
            (Some(command), _) => {
                let mut line = std::iter::once(command)
                    .chain(&raw.args)
                    .map(|word| shell_quote(word))
                    .collect::<Vec<_>>()
                    .join(" ");
                if let Some(cwd) = &raw.cwd {
                    line.push_str(&format!(" (in {})", cwd.display()));
                }
                line
            }
            (None, Some(url)) => url.clone(),
            (None, None) => String::new(),
        };
        Escaped(&line).to_string()
    }
}

/// `word` as a POSIX shell reads it back: as is when it holds only plain
/// characters, else in single quotes (each `'` in it written `'\''`).
///
/// ```
/// use gatehouse_mcp::import::shell_quote;
/// assert_eq!(shell_quote("docs"), "docs");
/// assert_eq!(shell_quote(r#"{"a":"it's"}"#), r#"'{"a":"it'\''s"}'"#);
/// ```
pub fn shell_quote(word: &str) -> String {
    let plain = |c: char| c.is_ascii_alphanumeric() || "-_./=:,+@%^".contains(c);
    if !word.is_empty() && word.chars().all(plain) {
        word.to_owned()
    } else {
        format!("'{}'", word.replace('\'', "'\\''"))
    }
}

/// Something about one server that the user must know: what was not carried
/// over, renamed, replaced or left out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Note {
    /// The server, as the client's config names it (untrusted text).
    pub server: String,
    /// The file whose entry it is about.
    pub source: PathBuf,
    /// What happened.
    pub kind: NoteKind,
}

/// What a [`Note`] says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NoteKind {
    /// A key was not carried over.
    FieldNotCarried {
        /// The key (untrusted text).
        field: String,
        /// Why.
        why: String,
    },
    /// The name is not a valid gatehouse server name; it was renamed.
    Renamed {
        /// The new name.
        to: String,
    },
    /// The whole server was left out.
    Skipped {
        /// Why.
        why: String,
    },
    /// The server is in a project's file and its client would not run it
    /// (or the user did not say to import that file): it was left out.
    NotTrusted {
        /// Why.
        why: String,
    },
    /// A later file's server of the same name replaced this one.
    Replaced {
        /// The file whose server won.
        by: PathBuf,
    },
    /// A value holds `${...}`, which the client expands and gatehouse does
    /// not.
    NotExpanded {
        /// The key.
        field: &'static str,
    },
}

impl Note {
    /// Whether it is about `server` (its name and its file).
    pub fn is_about(&self, server: &ImportedServer) -> bool {
        self.server == server.original_name && self.source == server.source
    }
}

impl fmt::Display for Note {
    /// One line, untrusted text escaped: safe for a terminal and for a TOML
    /// comment.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "server `{}`: ", Escaped(&self.server))?;
        match &self.kind {
            NoteKind::FieldNotCarried { field, why } => {
                write!(
                    f,
                    "field `{}` not carried: {}",
                    Escaped(field),
                    Escaped(why)
                )
            }
            NoteKind::Renamed { to } => write!(
                f,
                "renamed to `{}`: gatehouse server names use only letters, digits, `_` and `-`",
                Escaped(to)
            ),
            NoteKind::Skipped { why } => write!(f, "not carried: {}", Escaped(why)),
            NoteKind::NotTrusted { why } => write!(
                f,
                "skipped, from {}: {}",
                Escaped(&self.source.display().to_string()),
                Escaped(why)
            ),
            NoteKind::Replaced { by } => write!(
                f,
                "replaced by the server of the same name in {}",
                Escaped(&by.display().to_string())
            ),
            NoteKind::NotExpanded { field } => write!(
                f,
                "field `{field}` holds `${{...}}`, which the client expands and gatehouse does not: carried as written, edit it"
            ),
        }
    }
}

/// The servers imported from one client's files.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Import {
    /// The files that were read, in order.
    pub read: Vec<PathBuf>,
    /// The servers carried over, by gatehouse name.
    pub servers: BTreeMap<String, ImportedServer>,
    /// What the user must know, in the order it was found.
    pub notes: Vec<Note>,
    /// The `env` and header values moved out of the servers' tables: what
    /// the user must export for `gatehouse serve` ([`secrets`]).
    pub exports: Vec<Export>,
}

/// Why the keys gatehouse does not know are not carried.
const NO_EQUIVALENT: &str = "gatehouse has no equivalent";

/// The keys of a server entry that Claude and Cursor read (`.mcp.json`,
/// `~/.claude.json`, `mcp.json`): only these are carried from their files.
const JSON_CLIENT_FIELDS: &[&str] = &["type", "command", "args", "env", "url", "headers"];

/// Whether a client's server entry is gatehouse's own (named as init names
/// it, or running `gatehouse serve`).
fn is_gatehouse_itself(name: &str, table: &Map<String, Value>) -> bool {
    let runs_gatehouse = table
        .get("command")
        .and_then(Value::as_str)
        .and_then(|command| Path::new(command).file_stem())
        .is_some_and(|stem| stem == "gatehouse");
    let serves = table
        .get("args")
        .and_then(Value::as_array)
        .and_then(|args| args.first())
        .and_then(Value::as_str)
        == Some("serve");
    name == GATEWAY_ENTRY || (runs_gatehouse && serves)
}

impl Import {
    /// Imports the servers of `files`, lowest precedence first; files that do
    /// not exist are skipped. `client` names the client in the error when
    /// none exists.
    pub fn from_files(client: &'static str, files: &[ClientFile]) -> Result<Import, ImportError> {
        let mut import = Import::default();
        let mut disabled_here = Vec::new();
        for file in files {
            if std::fs::symlink_metadata(&file.path).is_err() {
                continue;
            }
            disabled_here.extend(import.read_file(file)?);
        }
        if import.read.is_empty() {
            return Err(ImportError::NothingFound {
                client,
                looked: files.iter().map(|file| file.path.clone()).collect(),
            });
        }
        // Claude Code does not start a server this project's entry
        // disables, whichever scope defines it.
        for (name, place) in disabled_here {
            let found: Vec<String> = import
                .servers
                .iter()
                .filter(|(_, server)| server.original_name == name)
                .map(|(key, _)| key.clone())
                .collect();
            for key in found {
                if let Some(server) = import.servers.remove(&key) {
                    import.note(
                        &server.original_name,
                        &server.source,
                        NoteKind::NotTrusted {
                            why: format!(
                                "Claude Code does not run it in this project (disabledMcpServers in {place})"
                            ),
                        },
                    );
                }
            }
        }
        import.move_values_out();
        Ok(import)
    }

    /// Imports the servers of one file that must exist.
    pub fn from_file(file: &ClientFile) -> Result<Import, ImportError> {
        let mut import = Import::default();
        import.read_file(file)?;
        import.move_values_out();
        Ok(import)
    }

    /// Reads the servers of `file`; returns the names this project's entry
    /// in Claude Code's `.claude.json` disables (`disabledMcpServers`), each
    /// with where.
    fn read_file(&mut self, file: &ClientFile) -> Result<Vec<(String, String)>, ImportError> {
        let mut disabled_here = Vec::new();
        let parse = |message: String| ImportError::Parse {
            path: file.path.clone(),
            message,
        };
        let maps: Vec<Map<String, Value>> = match &file.format {
            FileFormat::CodexToml => {
                let table: toml::Table = toml::from_str(&read_text(&file.path)?)
                    .map_err(|error| parse(error.to_string().trim_end().to_owned()))?;
                match table.get("mcp_servers") {
                    None => vec![Map::new()],
                    Some(servers) => match serde_json::to_value(servers) {
                        Ok(Value::Object(map)) => vec![map],
                        _ => return Err(parse("`mcp_servers` is not a table".to_owned())),
                    },
                }
            }
            FileFormat::McpJson => {
                vec![server_map(read_json(&file.path)?).map_err(|why| parse(why.to_owned()))?]
            }
            FileFormat::ClaudeJson { project: None } => {
                let value = read_json(&file.path)?;
                vec![match value.get("mcpServers") {
                    None => Map::new(),
                    Some(Value::Object(map)) => map.clone(),
                    Some(_) => return Err(parse("`mcpServers` is not an object".to_owned())),
                }]
            }
            FileFormat::ClaudeJson {
                project: Some(project),
            } => {
                let value = read_json(&file.path)?;
                // The entry Claude keys by this path as written, else one
                // naming the same directory (a trailing slash, a link).
                let entry = claude::project_entries(&value, project).pop();
                if let Some((key, entry)) = entry {
                    let place = format!(
                        "{} (projects[{}])",
                        file.path.display(),
                        Value::String(key.to_owned())
                    );
                    for name in entry
                        .get("disabledMcpServers")
                        .and_then(Value::as_array)
                        .into_iter()
                        .flatten()
                        .filter_map(Value::as_str)
                    {
                        disabled_here.push((name.to_owned(), place.clone()));
                    }
                }
                let local = entry.and_then(|(_, entry)| entry.get("mcpServers"));
                match local {
                    None => vec![],
                    Some(Value::Object(map)) => vec![map.clone()],
                    Some(_) => {
                        return Err(parse(
                            "the project's `mcpServers` is not an object".to_owned(),
                        ));
                    }
                }
            }
        };
        if !self.read.contains(&file.path) {
            self.read.push(file.path.clone());
        }
        let approvals = match &file.trust {
            Trust::ClaudeProject { home, project } => Some(claude::Approvals::load(home, project)),
            Trust::User | Trust::Project { .. } => None,
        };
        for map in maps {
            for (name, table) in map {
                let approval = match (&file.trust, &approvals) {
                    (Trust::User, _) => None,
                    (Trust::Project { trusted: true }, _) => {
                        Some("--trust-project-servers".to_owned())
                    }
                    (Trust::Project { trusted: false }, _) => {
                        self.note(
                            &name,
                            &file.path,
                            NoteKind::NotTrusted {
                                why: "a project's own file, whose servers Cursor runs without asking; pass --trust-project-servers to import them".to_owned(),
                            },
                        );
                        continue;
                    }
                    (Trust::ClaudeProject { .. }, approvals) => {
                        match approvals.as_ref().map(|approvals| approvals.verdict(&name)) {
                            Some(claude::Verdict::Approved(why)) => Some(why),
                            Some(claude::Verdict::Refused(why)) => {
                                self.note(&name, &file.path, NoteKind::NotTrusted { why });
                                continue;
                            }
                            None => {
                                self.note(
                                    &name,
                                    &file.path,
                                    NoteKind::NotTrusted {
                                        why: "Claude Code's approvals were not read".to_owned(),
                                    },
                                );
                                continue;
                            }
                        }
                    }
                };
                self.add(&name, table, file, approval);
            }
        }
        Ok(disabled_here)
    }

    fn note(&mut self, server: &str, source: &Path, kind: NoteKind) {
        self.notes.push(Note {
            server: server.to_owned(),
            source: source.to_path_buf(),
            kind,
        });
    }

    /// Converts one server table and adds it, or notes why not.
    fn add(&mut self, name: &str, table: Value, file: &ClientFile, approval: Option<String>) {
        let Value::Object(mut table) = table else {
            self.note(
                name,
                &file.path,
                NoteKind::Skipped {
                    why: "its entry is not a table".to_owned(),
                },
            );
            return;
        };
        if is_gatehouse_itself(name, &table) {
            self.note(
                name,
                &file.path,
                NoteKind::Skipped {
                    why: "it is gatehouse itself (the entry init prints): imported, gatehouse would start itself".to_owned(),
                },
            );
            return;
        }
        if file.format.is_json() && client_side::says_disabled(&table) {
            self.note(
                name,
                &file.path,
                NoteKind::Skipped {
                    why: "its entry says `\"disabled\": true`, so its client does not run it"
                        .to_owned(),
                },
            );
            return;
        }
        let (client, refused) = client_side::take(file, &mut table);
        for (field, why) in refused {
            self.note(name, &file.path, NoteKind::FieldNotCarried { field, why });
        }
        let known = RawServer::field_names();
        let mut carried = Map::new();
        for (field, value) in table {
            if file.format.is_json() && !JSON_CLIENT_FIELDS.contains(&field.as_str()) {
                // gatehouse has keys Claude and Cursor ignore (`env_vars`,
                // `bearer_token_env_var`, ...): from a project's file they
                // would grant what the client never did.
                let why = if known.contains(&field.as_str()) {
                    "Claude and Cursor ignore it, so it grants nothing there; add it by hand if you mean gatehouse to"
                } else {
                    NO_EQUIVALENT
                };
                self.note(
                    name,
                    &file.path,
                    NoteKind::FieldNotCarried {
                        field,
                        why: why.to_owned(),
                    },
                );
                continue;
            }
            if !known.contains(&field.as_str()) {
                self.note(
                    name,
                    &file.path,
                    NoteKind::FieldNotCarried {
                        field,
                        why: NO_EQUIVALENT.to_owned(),
                    },
                );
                continue;
            }
            // Each key on its own, so one bad value costs that key, not the
            // server.
            let single = Map::from_iter([(field.clone(), value.clone())]);
            if let Err(error) = serde_json::from_value::<RawServer>(Value::Object(single)) {
                self.note(
                    name,
                    &file.path,
                    NoteKind::FieldNotCarried {
                        field,
                        why: format!("its value is not what gatehouse reads: {error}"),
                    },
                );
                continue;
            }
            if holds_hidden_text(&value) {
                self.note(
                    name,
                    &file.path,
                    NoteKind::FieldNotCarried {
                        field,
                        why: "it holds invisible or text-direction characters, which TOML keeps as they are and which could disguise the file's text; add it by hand if it is meant".to_owned(),
                    },
                );
                continue;
            }
            carried.insert(field, value);
        }
        if file.format.is_json() && carried.get("type").and_then(Value::as_str) == Some("sse") {
            self.note(
                name,
                &file.path,
                NoteKind::Skipped {
                    why: "its transport is `sse` (HTTP with server-sent events, superseded); gatehouse speaks stdio and streamable HTTP".to_owned(),
                },
            );
            return;
        }
        let mut raw: RawServer = match serde_json::from_value(Value::Object(carried)) {
            Ok(raw) => raw,
            Err(error) => {
                self.note(
                    name,
                    &file.path,
                    NoteKind::Skipped {
                        why: error.to_string(),
                    },
                );
                return;
            }
        };
        // Claude's and Cursor's spelling, written as gatehouse's own.
        let headers = std::mem::take(&mut raw.headers);
        raw.http_headers.extend(headers);
        // Claude Code's per-call timeout: gatehouse applies it to the
        // server's calls itself (and the entry carries it for Claude Code).
        if let Some(ms) = client.timeout_ms
            && raw.tool_timeout_sec.is_none()
        {
            raw.tool_timeout_sec = Some(std::time::Duration::from_millis(ms).as_secs_f64());
        }
        if file.format.is_json() {
            for field in unexpanded(&raw) {
                self.note(name, &file.path, NoteKind::NotExpanded { field });
            }
        }
        let mut gatehouse_name = name.to_owned();
        if !is_valid_server_name(name) {
            gatehouse_name = sanitize_name(name);
            self.note(
                name,
                &file.path,
                NoteKind::Renamed {
                    to: gatehouse_name.clone(),
                },
            );
        }
        if let Err(error) = raw.check(&gatehouse_name) {
            self.note(
                name,
                &file.path,
                NoteKind::Skipped {
                    why: error.to_string(),
                },
            );
            return;
        }
        // `type` is implied by the fields; checked above.
        raw.kind = None;
        if let Some(earlier) = self.servers.get(&gatehouse_name) {
            let earlier_name = earlier.original_name.clone();
            if earlier.source == file.path && earlier_name != name {
                self.note(
                    name,
                    &file.path,
                    NoteKind::Skipped {
                        why: format!(
                            "its gatehouse name `{gatehouse_name}` is taken by the server `{}`",
                            Escaped(&earlier_name)
                        ),
                    },
                );
                return;
            }
            let earlier_source = earlier.source.clone();
            self.note(
                &earlier_name,
                &earlier_source,
                NoteKind::Replaced {
                    by: file.path.clone(),
                },
            );
        }
        self.servers.insert(
            gatehouse_name,
            ImportedServer {
                original_name: name.to_owned(),
                source: file.path.clone(),
                raw,
                approval,
                client,
                scope: file.scope,
            },
        );
    }

    /// The `[mcp_servers.NAME]` tables, each after comment lines saying where
    /// it came from and what of it was not carried; then, as comments, the
    /// notes about servers left out. The tables are written by the `toml`
    /// serializer and every comment line is escaped, so nothing the client's
    /// config says can break out of its value or its comment.
    pub fn to_toml(&self) -> Result<String, ImportError> {
        let mut out = String::new();
        for (name, server) in &self.servers {
            out.push('\n');
            comment(
                &mut out,
                &format!(
                    "From {} (server `{}`).",
                    server.source.display(),
                    server.original_name
                ),
            );
            if let Some(approval) = &server.approval {
                comment(&mut out, &format!("Imported as approved by {approval}."));
            }
            for note in self.notes_about(server) {
                comment(&mut out, &note.to_string());
            }
            for export in self.exports_of(name) {
                let (what, key) = match &export.field {
                    ExportField::Env(key) => ("env", key),
                    ExportField::Header(header) => ("header", header),
                };
                comment(
                    &mut out,
                    &format!(
                        "{what} `{key}`: its value is not written here; gatehouse reads it from ${} (export it before `gatehouse serve`).",
                        export.variable
                    ),
                );
            }
            let table = BTreeMap::from([(
                "mcp_servers",
                BTreeMap::from([(name.as_str(), &server.raw)]),
            )]);
            let text = toml::to_string(&table).map_err(|error| ImportError::Write {
                server: name.clone(),
                message: error.to_string(),
            })?;
            out.push_str(&text);
        }
        let left_out: Vec<&Note> = self
            .notes
            .iter()
            .filter(|note| !self.servers.values().any(|server| note.is_about(server)))
            .collect();
        if !left_out.is_empty() {
            out.push('\n');
            comment(&mut out, "Not carried over:");
            for note in left_out {
                comment(&mut out, &note.to_string());
            }
        }
        Ok(out)
    }

    /// The notes about a carried server.
    pub fn notes_about<'a>(
        &'a self,
        server: &'a ImportedServer,
    ) -> impl Iterator<Item = &'a Note> + 'a {
        self.notes.iter().filter(move |note| note.is_about(server))
    }
}

/// Appends `text` as one TOML comment line, escaped: a newline or any other
/// control character in it is written as a visible escape, so it cannot end
/// the comment (`Escaped` passes no control character, which is exactly what
/// TOML forbids in a comment).
fn comment(out: &mut String, text: &str) {
    out.push_str("# ");
    out.push_str(&Escaped(text).to_string());
    out.push('\n');
}

/// Whether a string or key in `value` holds a character that
/// [`needs_escape`] but that is no control character: the `toml` serializer
/// escapes controls (a newline goes into a multi-line string, the rest into
/// `\uXXXX`), but writes bidi controls, line separators and invisible
/// characters as they are, where they could make the file read otherwise
/// than it parses.
fn holds_hidden_text(value: &Value) -> bool {
    let hidden = |text: &str| text.chars().any(|c| needs_escape(c) && !c.is_control());
    match value {
        Value::String(text) => hidden(text),
        Value::Array(items) => items.iter().any(holds_hidden_text),
        Value::Object(map) => map
            .iter()
            .any(|(key, value)| hidden(key) || holds_hidden_text(value)),
        Value::Null | Value::Bool(_) | Value::Number(_) => false,
    }
}

/// The keys of `raw` whose text holds `${`, which Claude and Cursor expand
/// from the environment. (`env` and header values are not written as they
/// are: their [`Export`]s say how the client reads them.)
fn unexpanded(raw: &RawServer) -> Vec<&'static str> {
    let has = |text: &str| text.contains("${");
    [
        ("command", raw.command.as_deref().is_some_and(has)),
        ("args", raw.args.iter().any(|arg| has(arg))),
        ("url", raw.url.as_deref().is_some_and(has)),
        (
            "cwd",
            raw.cwd
                .as_ref()
                .is_some_and(|cwd| has(&cwd.to_string_lossy())),
        ),
    ]
    .into_iter()
    .filter_map(|(field, set)| set.then_some(field))
    .collect()
}

fn read_text(path: &Path) -> Result<String, ImportError> {
    let read = |source| ImportError::Read {
        path: path.to_path_buf(),
        source,
    };
    let file = std::fs::File::open(path).map_err(read)?;
    let mut text = String::new();
    file.take(MAX_CLIENT_CONFIG_BYTES + 1)
        .read_to_string(&mut text)
        .map_err(read)?;
    if text.len() as u64 > MAX_CLIENT_CONFIG_BYTES {
        return Err(ImportError::TooLarge(path.to_path_buf()));
    }
    Ok(text)
}

fn read_json(path: &Path) -> Result<Value, ImportError> {
    serde_json::from_str(&read_text(path)?).map_err(|error| ImportError::Parse {
        path: path.to_path_buf(),
        message: error.to_string(),
    })
}

/// The name the gateway's entry gets in the client's config.
pub const GATEWAY_ENTRY: &str = "gatehouse";

#[cfg(test)]
mod tests {
    use super::*;

    /// A written file as gatehouse reads its `[mcp_servers]` tables: parsed,
    /// then every server checked, as the gateway's `Config::parse` does (it
    /// embeds exactly these tables; the whole file's load is tested through
    /// `gatehouse init` in `host/cli/tests/all/init.rs`).
    #[derive(serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Config {
        #[serde(default)]
        mcp_servers: BTreeMap<String, RawServer>,
    }

    impl Config {
        fn parse(text: &str, _: &Path) -> Result<Config, String> {
            let config: Config = toml::from_str(text).map_err(|error| error.to_string())?;
            config.servers().map_err(|error| error.to_string())?;
            Ok(config)
        }

        fn servers(
            &self,
        ) -> Result<Vec<crate::server_config::ServerConfig>, crate::server_config::ServerConfigError>
        {
            self.mcp_servers
                .iter()
                .map(|(name, raw)| raw.check(name))
                .collect()
        }
    }

    fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
        let path = dir.join(name);
        std::fs::write(&path, text).expect("writes");
        path
    }

    fn codex(text: &str) -> (tempfile::TempDir, Import) {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = write(dir.path(), "config.toml", text);
        let import =
            Import::from_file(&ClientFile::detect(&path).expect("detected")).expect("imports");
        (dir, import)
    }

    #[test]
    fn codex_tables_are_carried_and_unknown_keys_reported() {
        let (_dir, import) = codex(
            r#"
model = "o3"
[mcp_servers.files]
command = "files-server"
args = ["--root", "/srv"]
env = { LOG = "warn" }
startup_timeout_sec = 20
enabled_tools = ["read"]
[mcp_servers.tracker]
url = "https://tracker.example.com/mcp"
bearer_token_env_var = "TRACKER_TOKEN"
http_headers = { "X-Org" = "acme" }
scopes = ["read"]
[mcp_servers.tracker.oauth]
client_id = "x"
"#,
        );
        assert_eq!(import.servers.len(), 2);
        let files = &import.servers["files"].raw;
        assert_eq!(files.command.as_deref(), Some("files-server"));
        assert_eq!(files.args, ["--root", "/srv"]);
        assert_eq!(files.startup_timeout_sec, Some(20.0));
        let notes: Vec<String> = import.notes.iter().map(Note::to_string).collect();
        assert_eq!(
            notes,
            [
                "server `tracker`: field `oauth` not carried: gatehouse has no equivalent",
                "server `tracker`: field `scopes` not carried: gatehouse has no equivalent",
            ]
        );
        let text = import.to_toml().expect("writes");
        assert!(
            text.contains("# server `tracker`: field `oauth` not carried"),
            "{text}"
        );
        let config = Config::parse(&text, Path::new("/etc/gatehouse.toml")).expect("loads");
        assert_eq!(config.mcp_servers["tracker"], import.servers["tracker"].raw);
        assert_eq!(config.servers().expect("checks").len(), 2);
    }

    #[test]
    fn a_bad_value_costs_its_key_and_a_bad_table_its_server() {
        let (_dir, import) = codex(
            "[mcp_servers.a]\ncommand = \"a\"\nenv_vars = \"NOT_A_LIST\"\n[mcp_servers.b]\ncommand = \"b\"\nurl = \"http://x\"\n",
        );
        assert_eq!(import.servers.keys().collect::<Vec<_>>(), ["a"]);
        let notes: Vec<String> = import.notes.iter().map(Note::to_string).collect();
        assert!(
            notes[0].starts_with("server `a`: field `env_vars` not carried: its value"),
            "{notes:?}"
        );
        assert!(
            notes[1].starts_with("server `b`: not carried: mcp_servers.b: `command` and `url`"),
            "{notes:?}"
        );
        let text = import.to_toml().expect("writes");
        assert!(text.contains("# Not carried over:\n# server `b`"), "{text}");
    }

    #[test]
    fn hostile_names_and_values_stay_inside_their_toml_strings() {
        let hostile = "evil\"]]\n[mcp_servers.pwned]\ncommand = \"sh\"\n# \u{1b}[31m\r\t";
        let name = format!("{hostile}\u{2028}\u{202e}");
        let dir = tempfile::tempdir().expect("tempdir");
        let json = serde_json::json!({"mcpServers": {
            name.clone(): {"command": hostile, "args": [hostile], "env": {hostile: hostile}, hostile: 1},
            "bidi": {"command": "ok", "args": ["\u{202e}fdp.exe"], "env": {"K\u{200b}": "v"}},
        }});
        let path = write(dir.path(), "mcp.json", &json.to_string());
        let import =
            Import::from_file(&ClientFile::detect(&path).expect("detected")).expect("imports");
        let text = import.to_toml().expect("writes");
        for line in text.lines().filter(|line| line.starts_with('#')) {
            assert!(!line.chars().any(needs_escape), "{line:?}");
        }
        assert!(
            !text.chars().any(|c| needs_escape(c) && c != '\n'),
            "{text}"
        );
        let config = Config::parse(&text, Path::new("/etc/gatehouse.toml")).expect("loads");
        assert_eq!(config.mcp_servers.len(), 2, "{text}");
        let (renamed, raw) = config
            .mcp_servers
            .iter()
            .find(|(key, _)| key.as_str() != "bidi")
            .expect("the hostile one");
        assert!(is_valid_server_name(renamed));
        assert_eq!(raw.command.as_deref(), Some(hostile));
        assert_eq!(raw.args, [hostile]);
        // No value is written, and a key that is no variable name cannot be
        // read from the environment: it is not carried, and said so.
        assert!(raw.env.is_empty() && raw.env_vars.is_empty(), "{raw:?}");
        let bidi = &config.mcp_servers["bidi"];
        assert!(bidi.args.is_empty() && bidi.env.is_empty(), "{bidi:?}");
        let notes: Vec<String> = import.notes.iter().map(Note::to_string).collect();
        assert!(
            notes.iter().any(|note| note.starts_with("server `evil")
                && note.contains("field `env.evil\"]]\\n[mcp_servers.pwned]")
                && note.contains("its name is no variable name")),
            "{notes:?}"
        );
        assert!(
            notes.contains(&"server `bidi`: field `args` not carried: it holds invisible or text-direction characters, which TOML keeps as they are and which could disguise the file's text; add it by hand if it is meant".to_owned()),
            "{notes:?}"
        );
    }

    #[test]
    fn json_servers_sse_placeholders_and_precedence() {
        let home = tempfile::tempdir().expect("tempdir");
        let project = tempfile::tempdir().expect("tempdir");
        write(
            home.path(),
            ".claude.json",
            &serde_json::json!({
                "mcpServers": {
                    "docs": {"type": "stdio", "command": "docs", "env": {"TOKEN": "${DOCS_TOKEN}"}},
                    "old": {"type": "sse", "url": "https://old.example.com/sse"},
                },
                "projects": {project.path().to_string_lossy(): {
                    "mcpServers": {
                        "web": {"type": "http", "url": "https://web.example.com/mcp", "headers": {"X": "1"}},
                    },
                    "enabledMcpjsonServers": ["docs"],
                }},
            })
            .to_string(),
        );
        write(
            project.path(),
            ".mcp.json",
            r#"{"mcpServers": {"docs": {"command": "docs-v2"}}}"#,
        );
        let files = Client::Claude.files(home.path(), None, project.path(), false);
        let import = Import::from_files("claude", &files).expect("imports");
        assert_eq!(import.read.len(), 2);
        assert_eq!(import.servers.keys().collect::<Vec<_>>(), ["docs", "web"]);
        assert_eq!(
            import.servers["docs"].raw.command.as_deref(),
            Some("docs-v2")
        );
        assert_eq!(
            import.servers["docs"]
                .approval
                .as_deref()
                .map(|why| why.starts_with("enabledMcpjsonServers in ")),
            Some(true)
        );
        // The header's value is read from the environment, not written.
        let web = &import.servers["web"].raw;
        assert_eq!(
            (web.kind.as_deref(), web.env_http_headers["X"].as_str()),
            (None, "WEB_X")
        );
        assert!(web.http_headers.is_empty(), "{web:?}");
        assert_eq!(
            import
                .exports
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>(),
            [format!(
                "WEB_X: the value of header `X` of server `web` in {}",
                home.path().join(".claude.json").display()
            )]
        );
        let notes: Vec<String> = import.notes.iter().map(Note::to_string).collect();
        assert!(
            notes
                .iter()
                .any(|n| n.starts_with("server `old`: not carried: its transport is `sse`")),
            "{notes:?}"
        );
        assert!(
            notes
                .iter()
                .any(|n| n.starts_with("server `docs`: replaced by")),
            "{notes:?}"
        );
        let text = import.to_toml().expect("writes");
        Config::parse(&text, Path::new("/g.toml")).expect("loads");
        let missing = Client::Cursor.files(home.path(), None, project.path(), true);
        let error = Import::from_files("cursor", &missing).expect_err("nothing there");
        assert!(
            error
                .to_string()
                .starts_with("no cursor config found; looked at "),
            "{error}"
        );
    }

    #[test]
    fn a_project_file_gains_nothing_its_client_would_not_grant() {
        let home = tempfile::tempdir().expect("tempdir");
        let project = tempfile::tempdir().expect("tempdir");
        // A cloned repository's .mcp.json: keys Claude ignores but gatehouse
        // would honour (the environment and a token passed through).
        write(
            project.path(),
            ".mcp.json",
            r#"{"mcpServers": {
                "docs": {"command": "docs", "env_vars": ["AWS_SECRET_ACCESS_KEY"], "required": true},
                "web": {"type": "http", "url": "https://web.example.com/mcp", "bearer_token_env_var": "GITHUB_TOKEN"},
                "gatehouse": {"command": "/usr/bin/gatehouse", "args": ["serve", "--config", "/g.toml"]},
                "again": {"command": "/opt/bin/gatehouse", "args": ["serve"]}
            }}"#,
        );
        write(
            home.path(),
            ".claude.json",
            &serde_json::json!({
                "projects": {project.path().to_string_lossy(): {
                    "mcpServers": {"docs": {"command": "docs-local"}},
                    "enableAllProjectMcpServers": true,
                }},
            })
            .to_string(),
        );
        let files = Client::Claude.files(home.path(), None, project.path(), false);
        let import = Import::from_files("claude", &files).expect("imports");
        assert_eq!(import.servers.keys().collect::<Vec<_>>(), ["docs", "web"]);
        // The local scope wins over the project's file, as in Claude.
        assert_eq!(
            import.servers["docs"].raw.command.as_deref(),
            Some("docs-local")
        );
        let web = &import.servers["web"].raw;
        assert_eq!(web.bearer_token_env_var, None);
        let notes: Vec<String> = import.notes.iter().map(Note::to_string).collect();
        for field in ["env_vars", "required", "bearer_token_env_var"] {
            assert!(
                notes.iter().any(|n| n.contains(&format!(
                    "field `{field}` not carried: Claude and Cursor ignore it"
                ))),
                "{field}: {notes:?}"
            );
        }
        for name in ["gatehouse", "again"] {
            assert!(
                notes.iter().any(|n| n.starts_with(&format!(
                    "server `{name}`: not carried: it is gatehouse itself"
                ))),
                "{name}: {notes:?}"
            );
        }
    }

    #[test]
    fn a_project_server_runs_only_as_its_client_would() {
        let home = tempfile::tempdir().expect("tempdir");
        let project = tempfile::tempdir().expect("tempdir");
        let servers = r#"{"mcpServers": {
            "helper": {"command": "/bin/sh", "args": ["-c", "touch MARKER"]},
            "stranger": {"command": "stranger"},
            "approved": {"command": "approved"}
        }}"#;
        write(project.path(), ".mcp.json", servers);
        std::fs::create_dir(project.path().join(".cursor")).expect("mkdir");
        write(&project.path().join(".cursor"), "mcp.json", servers);
        write(
            home.path(),
            ".claude.json",
            &serde_json::json!({"projects": {project.path().to_string_lossy(): {
                "enabledMcpjsonServers": ["approved", "helper"],
                "disabledMcpjsonServers": ["helper"],
            }}})
            .to_string(),
        );
        let files = Client::Claude.files(home.path(), None, project.path(), false);
        let import = Import::from_files("claude", &files).expect("imports");
        assert_eq!(import.servers.keys().collect::<Vec<_>>(), ["approved"]);
        let notes: Vec<String> = import.notes.iter().map(Note::to_string).collect();
        let mcp_json = project.path().join(".mcp.json");
        assert_eq!(
            notes[..2],
            [
                format!(
                    "server `helper`: skipped, from {}: Claude Code has it in disabledMcpjsonServers ({} (projects[\"{}\"]))",
                    mcp_json.display(),
                    home.path().join(".claude.json").display(),
                    project.path().display()
                ),
                format!(
                    "server `stranger`: skipped, from {}: not approved in Claude Code (neither enabledMcpjsonServers nor enableAllProjectMcpServers in {} (projects[\"{}\"]) or {})",
                    mcp_json.display(),
                    home.path().join(".claude.json").display(),
                    project.path().display(),
                    home.path().join(".claude/settings.json").display()
                ),
            ]
        );
        let text = import.to_toml().expect("writes");
        assert!(
            !text.contains("MARKER") && !text.contains("[mcp_servers.helper]"),
            "{text}"
        );

        // Cursor runs its project file unasked: imported only when told.
        let files = Client::Cursor.files(home.path(), None, project.path(), false);
        let import = Import::from_files("cursor", &files).expect("the file is read");
        assert!(import.servers.is_empty());
        assert_eq!(import.notes.len(), 3);
        assert!(
            import.notes[0]
                .to_string()
                .ends_with("a project's own file, whose servers Cursor runs without asking; pass --trust-project-servers to import them"),
            "{:?}",
            import.notes
        );
        let files = Client::Cursor.files(home.path(), None, project.path(), true);
        let import = Import::from_files("cursor", &files).expect("imports");
        assert_eq!(import.servers.len(), 3);
    }

    #[test]
    fn env_and_header_values_are_read_from_the_environment_never_written() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = write(
            dir.path(),
            ".claude.json",
            &serde_json::json!({"mcpServers": {
                "a": {"command": "a", "env": {"API_TOKEN": "s3cr3t-value", "SHARED": "same", "KEY": "${KEY}"}},
                "b": {"command": "b", "env": {"API_TOKEN": "other-value", "SHARED": "same", "bad-name": "x"}},
                "web": {"url": "https://web.example.com/mcp", "headers": {"Authorization": "Bearer s3cr3t-header"}},
            }})
            .to_string(),
        );
        let import =
            Import::from_file(&ClientFile::detect(&path).expect("detected")).expect("imports");
        let text = import.to_toml().expect("writes");
        for secret in ["s3cr3t", "other-value", "same"] {
            assert!(!text.contains(secret), "{secret}: {text}");
        }
        let a = &import.servers["a"].raw;
        assert!(a.env.is_empty());
        assert_eq!(a.env_vars, ["API_TOKEN", "KEY", "SHARED"]);
        let b = &import.servers["b"].raw;
        assert_eq!(b.env_vars, ["SHARED"]);
        let web = &import.servers["web"].raw;
        assert_eq!(web.env_http_headers["Authorization"], "WEB_AUTHORIZATION");
        let notes: Vec<String> = import.notes.iter().map(Note::to_string).collect();
        assert!(
            notes.contains(&"server `b`: field `env.API_TOKEN` not carried: server `a` takes another value from the variable `API_TOKEN`, and gatehouse passes one value per name; set it by hand in a config outside any working tree".to_owned()),
            "{notes:?}"
        );
        assert!(
            notes.iter().any(|note| note.starts_with(
                "server `b`: field `env.bad-name` not carried: its name is no variable name"
            )),
            "{notes:?}"
        );
        let exports: Vec<String> = import.exports.iter().map(ToString::to_string).collect();
        assert!(
            exports.contains(&format!(
                "KEY: the value of env `KEY` of server `a` in {} (written `${{KEY}}` there: the client reads it from $KEY)",
                path.display()
            )),
            "{exports:?}"
        );
        assert_eq!(
            import.environment().into_iter().collect::<Vec<_>>(),
            ["API_TOKEN", "KEY", "SHARED", "WEB_AUTHORIZATION"]
        );
        assert!(
            text.contains("# header `Authorization`: its value is not written here; gatehouse reads it from $WEB_AUTHORIZATION"),
            "{text}"
        );
        let config = Config::parse(&text, Path::new("/etc/gatehouse.toml")).expect("loads");
        assert_eq!(config.servers().expect("checks").len(), 3);
    }

    #[test]
    fn the_gateway_entry_is_toml_or_json_naming_the_program_and_config() {
        let (_dir, import) =
            codex("[mcp_servers.a]\ncommand = \"a\"\nenv = { API_TOKEN = \"x\" }\n");
        let toml_text = gateway_entry(
            EntryFormat::Codex,
            Path::new("/bin/gate \"house\""),
            Path::new("/etc/g.toml"),
            &import,
        )
        .expect("writes")
        .text;
        let table: toml::Table = toml::from_str(&toml_text).expect("TOML");
        let gatehouse = &table["mcp_servers"]["gatehouse"];
        assert_eq!(gatehouse["command"].as_str(), Some("/bin/gate \"house\""));
        // Codex passes a server only the variables it names.
        assert_eq!(
            gatehouse["env_vars"],
            toml::Value::Array(vec!["API_TOKEN".into()])
        );
        assert_eq!(gatehouse["required"].as_bool(), Some(true));
        let json_text = gateway_entry(
            EntryFormat::McpJson,
            Path::new("/bin/gatehouse"),
            Path::new("/etc/g.toml"),
            &import,
        )
        .expect("writes")
        .text;
        let value: Value = serde_json::from_str(&json_text).expect("JSON");
        assert_eq!(
            value["mcpServers"]["gatehouse"]["args"],
            serde_json::json!(["serve", "--config", "/etc/g.toml"])
        );
    }

    #[test]
    fn codex_approval_settings_are_not_written_where_nothing_reads_them() {
        let (_dir, import) = codex(
            r#"
[mcp_servers.files]
command = "files"
default_tools_approval_mode = "approve"
startup_readiness = "catalog"
startup_timeout_ms = 4000
[mcp_servers.files.tools.read]
approval_mode = "prompt"
"#,
        );
        let text = import.to_toml().expect("writes");
        for key in [
            "default_tools_approval_mode",
            "approval_mode",
            "startup_readiness",
            "tools",
        ] {
            assert!(!text.contains(key), "{key}: {text}");
        }
        assert!(import.notes.is_empty(), "{:?}", import.notes);
        let files = &import.servers["files"];
        assert_eq!(files.raw.startup_timeout_sec, Some(4.0));
        assert_eq!(
            files.client.default_tools_approval_mode,
            Some(client_side::CodexApproval::Approve)
        );
    }

    #[test]
    fn a_server_its_client_does_not_run_here_is_not_imported() {
        let home = tempfile::tempdir().expect("tempdir");
        let project = tempfile::tempdir().expect("tempdir");
        write(
            home.path(),
            ".claude.json",
            &serde_json::json!({
                "mcpServers": {"docs": {"command": "docs"}, "web": {"command": "web"}},
                "projects": {project.path().to_string_lossy(): {"disabledMcpServers": ["docs"]}},
            })
            .to_string(),
        );
        let files = Client::Claude.files(home.path(), None, project.path(), false);
        let import = Import::from_files("claude", &files).expect("imports");
        assert_eq!(import.servers.keys().collect::<Vec<_>>(), ["web"]);
        assert_eq!(import.servers["web"].scope, Some(Scope::User));
        assert!(
            import.notes[0]
                .to_string()
                .contains("Claude Code does not run it in this project (disabledMcpServers in "),
            "{:?}",
            import.notes
        );
        let path = write(
            home.path(),
            "cline.json",
            r#"{"mcpServers": {"off": {"command": "off", "disabled": true}, "on": {"command": "on", "disabled": false}}}"#,
        );
        let import =
            Import::from_file(&ClientFile::detect(&path).expect("detected")).expect("imports");
        assert_eq!(import.servers.keys().collect::<Vec<_>>(), ["on"]);
    }
}
