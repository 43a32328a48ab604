//! Settings a client keeps in its own entry for a server and applies itself:
//! Codex's approval modes (`default_tools_approval_mode`,
//! `[mcp_servers.S.tools.T] approval_mode`), `startup_readiness`,
//! `supports_parallel_tool_calls`, `tool_input_schema_max_bytes` and per-tool
//! `output_token_limit`; Claude Code's `timeout` (milliseconds per tool call),
//! `alwaysLoad` and per-tool permission policies (`tools`,
//! `toolPermissions`).
//!
//! gatehouse reads none of them, so none is written into `gatehouse.toml`:
//! they are taken out of the server's table as it is imported
//! and moved onto the gatehouse entry printed for the client
//! ([`super::entry`]), with tools renamed as gatehouse exposes them
//! ([`exposed_names`], which asks [`crate::naming::qualified_names`]).
//! Settings gatehouse does read stay in its table: `startup_timeout_sec`,
//! `tool_timeout_sec` (Claude's `timeout` becomes it), `enabled`,
//! `enabled_tools`, `disabled_tools`.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use serde::Serialize;
use serde_json::{Map, Value};

use super::{ClientFile, FileFormat, Import, Trust};
use crate::naming::{MAX_NAME_BYTES, SEPARATOR, qualified_names};

/// Codex's approval mode for a server's tools, least strict first: the
/// order [`Ord`] gives, which is how servers that disagree are reconciled
/// (the stricter wins).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum CodexApproval {
    /// `approve`: Codex calls the tools without asking.
    Approve,
    /// `auto` (Codex's default): Codex asks for tools whose annotations
    /// hint at risk, and under `approval_policy = "never"` refuses every
    /// tool that is not marked read-only.
    Auto,
    /// `writes`: Codex calls tools marked read-only without asking and
    /// asks before every other call.
    Writes,
    /// `prompt`: Codex asks before every call.
    Prompt,
}

impl CodexApproval {
    /// The mode spelled `text` in Codex's config, if any.
    pub fn parse(text: &str) -> Option<CodexApproval> {
        match text {
            "approve" => Some(CodexApproval::Approve),
            "auto" => Some(CodexApproval::Auto),
            "writes" => Some(CodexApproval::Writes),
            "prompt" => Some(CodexApproval::Prompt),
            _ => None,
        }
    }

    /// Its spelling in Codex's config.
    pub fn name(self) -> &'static str {
        match self {
            CodexApproval::Approve => "approve",
            CodexApproval::Auto => "auto",
            CodexApproval::Writes => "writes",
            CodexApproval::Prompt => "prompt",
        }
    }

    /// What Codex does with a tool in this mode, as a clause.
    pub fn meaning(self) -> &'static str {
        match self {
            CodexApproval::Approve => {
                "Codex makes the calls without asking, under approval_policy = \"never\" too"
            }
            CodexApproval::Auto => {
                "Codex asks before calls whose annotations hint at risk, and under approval_policy = \"never\" refuses every tool not marked read-only"
            }
            CodexApproval::Writes => {
                "Codex calls tools marked read-only without asking and asks before any other call"
            }
            CodexApproval::Prompt => "Codex asks before every call",
        }
    }
}

impl fmt::Display for CodexApproval {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Codex's `startup_readiness`: when a server counts as started.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum StartupReadiness {
    /// `catalog`: a usable cached tool catalog is enough; the connection
    /// comes up meanwhile.
    Catalog,
    /// `connection` (Codex's default): the live connection.
    Connection,
}

/// Codex's settings for one tool of a server (`[mcp_servers.S.tools.T]`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CodexTool {
    /// `approval_mode`.
    pub approval_mode: Option<CodexApproval>,
    /// `output_token_limit`.
    pub output_token_limit: Option<u64>,
}

/// A Claude Code permission for one tool: what its entry's `tools`
/// (`permission_policy`) or `toolPermissions` said.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum ToolPermission {
    /// `always_allow` / `allow`.
    Allow,
    /// `always_ask` / `ask`.
    Ask,
    /// `always_deny` / `blocked`.
    Deny,
}

impl ToolPermission {
    /// The key of Claude Code's `permissions` that takes such a rule.
    pub fn list(self) -> &'static str {
        match self {
            ToolPermission::Allow => "allow",
            ToolPermission::Ask => "ask",
            ToolPermission::Deny => "deny",
        }
    }
}

/// The settings of a server's entry that only its client reads, taken out
/// of the table before it is written into `gatehouse.toml`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ClientSide {
    /// Codex: `default_tools_approval_mode`.
    pub default_tools_approval_mode: Option<CodexApproval>,
    /// Codex: `[tools.T]`, by the tool's own name.
    pub tools: BTreeMap<String, CodexTool>,
    /// Codex: `startup_readiness`.
    pub startup_readiness: Option<StartupReadiness>,
    /// Codex: `supports_parallel_tool_calls`.
    pub supports_parallel_tool_calls: Option<bool>,
    /// Codex: `tool_input_schema_max_bytes`.
    pub tool_input_schema_max_bytes: Option<u64>,
    /// Claude Code: `timeout`, milliseconds per tool call (values under
    /// 1000 are ignored by Claude Code and not kept).
    pub timeout_ms: Option<u64>,
    /// Claude Code: `alwaysLoad`.
    pub always_load: Option<bool>,
    /// Claude Code: per-tool permission policies, by the tool's own name.
    pub tool_permissions: BTreeMap<String, ToolPermission>,
}

impl ClientSide {
    /// Whether nothing was set.
    pub fn is_empty(&self) -> bool {
        *self == ClientSide::default()
    }
}

/// What [`take`] found wrong with a key: the key and why it is not carried.
pub(super) type Refused = (String, String);

/// Claude Code's tool-call timeouts under this many milliseconds are
/// ignored (it falls back to `MCP_TOOL_TIMEOUT`).
const CLAUDE_MIN_TIMEOUT_MS: u64 = 1000;

/// Whether `file` is one of Claude Code's (its `.claude.json`, or a
/// project's `.mcp.json` as Claude Code reads it).
fn is_claude(file: &ClientFile) -> bool {
    matches!(file.format, FileFormat::ClaudeJson { .. })
        || matches!(file.trust, Trust::ClaudeProject { .. })
}

/// Takes the client-only settings out of `table` (a server of `file`):
/// returns them, and the keys among them whose value is not what the
/// client reads (each with why). Codex's `startup_timeout_ms` becomes
/// `startup_timeout_sec` in `table` unless that is set (gatehouse reads
/// it).
pub(super) fn take(
    file: &ClientFile,
    table: &mut Map<String, Value>,
) -> (ClientSide, Vec<Refused>) {
    let mut side = ClientSide::default();
    let mut refused = Vec::new();
    if file.format == FileFormat::CodexToml {
        take_codex(table, &mut side, &mut refused);
    } else if is_claude(file) {
        take_claude(table, &mut side, &mut refused);
    }
    (side, refused)
}

fn positive(value: &Value) -> Option<u64> {
    value.as_u64().filter(|n| *n > 0)
}

fn take_codex(table: &mut Map<String, Value>, side: &mut ClientSide, refused: &mut Vec<Refused>) {
    let modes = "expected one of `auto`, `prompt`, `writes`, `approve`";
    if let Some(value) = table.remove("default_tools_approval_mode") {
        match value.as_str().and_then(CodexApproval::parse) {
            Some(mode) => side.default_tools_approval_mode = Some(mode),
            None => refused.push((
                "default_tools_approval_mode".to_owned(),
                format!("its value is not a mode Codex reads ({modes})"),
            )),
        }
    }
    if let Some(value) = table.remove("tools") {
        match value {
            Value::Object(tools) => {
                for (tool, settings) in tools {
                    let Value::Object(settings) = settings else {
                        refused.push((format!("tools.{tool}"), "not a table".to_owned()));
                        continue;
                    };
                    let mut moved = CodexTool::default();
                    for (key, value) in settings {
                        let field = format!("tools.{tool}.{key}");
                        match key.as_str() {
                            "approval_mode" => match value.as_str().and_then(CodexApproval::parse) {
                                Some(mode) => moved.approval_mode = Some(mode),
                                None => refused.push((
                                    field,
                                    format!("its value is not a mode Codex reads ({modes})"),
                                )),
                            },
                            "output_token_limit" => match positive(&value) {
                                Some(limit) => moved.output_token_limit = Some(limit),
                                None => refused.push((field, "not a positive integer".to_owned())),
                            },
                            _ => refused.push((
                                field,
                                "gatehouse moves a tool's approval_mode and output_token_limit onto its own entry, not this".to_owned(),
                            )),
                        }
                    }
                    if moved != CodexTool::default() {
                        side.tools.insert(tool, moved);
                    }
                }
            }
            _ => refused.push(("tools".to_owned(), "not a table".to_owned())),
        }
    }
    if let Some(value) = table.remove("startup_readiness") {
        match value.as_str() {
            Some("catalog") => side.startup_readiness = Some(StartupReadiness::Catalog),
            Some("connection") => side.startup_readiness = Some(StartupReadiness::Connection),
            _ => refused.push((
                "startup_readiness".to_owned(),
                "expected `connection` or `catalog`".to_owned(),
            )),
        }
    }
    if let Some(value) = table.remove("supports_parallel_tool_calls") {
        match value.as_bool() {
            Some(parallel) => side.supports_parallel_tool_calls = Some(parallel),
            None => refused.push((
                "supports_parallel_tool_calls".to_owned(),
                "not a boolean".to_owned(),
            )),
        }
    }
    if let Some(value) = table.remove("tool_input_schema_max_bytes") {
        match positive(&value) {
            Some(bytes) => side.tool_input_schema_max_bytes = Some(bytes),
            None => refused.push((
                "tool_input_schema_max_bytes".to_owned(),
                "not a positive integer".to_owned(),
            )),
        }
    }
    if let Some(value) = table.remove("startup_timeout_ms") {
        match positive(&value) {
            Some(ms) if !table.contains_key("startup_timeout_sec") => {
                let seconds = std::time::Duration::from_millis(ms).as_secs_f64();
                table.insert("startup_timeout_sec".to_owned(), Value::from(seconds));
            }
            Some(_) => {}
            None => refused.push((
                "startup_timeout_ms".to_owned(),
                "not a positive integer".to_owned(),
            )),
        }
    }
}

fn take_claude(table: &mut Map<String, Value>, side: &mut ClientSide, refused: &mut Vec<Refused>) {
    if let Some(value) = table.remove("timeout") {
        match positive(&value) {
            Some(ms) if ms >= CLAUDE_MIN_TIMEOUT_MS => side.timeout_ms = Some(ms),
            Some(_) => refused.push((
                "timeout".to_owned(),
                "under 1000 ms, which Claude Code ignores".to_owned(),
            )),
            None => refused.push((
                "timeout".to_owned(),
                "not a positive integer (milliseconds)".to_owned(),
            )),
        }
    }
    if let Some(value) = table.remove("alwaysLoad") {
        match value.as_bool() {
            Some(always) => side.always_load = Some(always),
            None => refused.push(("alwaysLoad".to_owned(), "not a boolean".to_owned())),
        }
    }
    if let Some(value) = table.remove("tools") {
        let items = match value {
            Value::Array(items) => items,
            _ => {
                refused.push(("tools".to_owned(), "not an array".to_owned()));
                Vec::new()
            }
        };
        for item in items {
            let name = item.get("name").and_then(Value::as_str);
            let policy = item
                .get("permission_policy")
                .and_then(Value::as_str)
                .and_then(|policy| match policy {
                    "always_allow" => Some(ToolPermission::Allow),
                    "always_ask" => Some(ToolPermission::Ask),
                    "always_deny" => Some(ToolPermission::Deny),
                    _ => None,
                });
            match (name, policy) {
                (Some(name), Some(policy)) => {
                    side.tool_permissions.insert(name.to_owned(), policy);
                }
                (Some(_), None) if item.get("permission_policy").is_none() => {}
                _ => refused.push((
                    "tools".to_owned(),
                    "an item is not {name, permission_policy: always_allow|always_ask|always_deny}"
                        .to_owned(),
                )),
            }
        }
    }
    if let Some(value) = table.remove("toolPermissions") {
        match value {
            Value::Object(map) => {
                for (tool, policy) in map {
                    let policy = match policy.as_str() {
                        Some("allow") => ToolPermission::Allow,
                        Some("ask") => ToolPermission::Ask,
                        Some("blocked") => ToolPermission::Deny,
                        _ => {
                            refused.push((
                                format!("toolPermissions.{tool}"),
                                "expected allow, ask or blocked".to_owned(),
                            ));
                            continue;
                        }
                    };
                    // The stricter of the two places wins.
                    let entry = side.tool_permissions.entry(tool).or_insert(policy);
                    *entry = (*entry).max(policy);
                }
            }
            _ => refused.push(("toolPermissions".to_owned(), "not an object".to_owned())),
        }
    }
    if table.remove("bareElicitationCapability") == Some(Value::Bool(true)) {
        refused.push((
            "bareElicitationCapability".to_owned(),
            "gatehouse offers every server form and URL elicitation; a server that refuses that (Java MCP SDK 0.17.0 or older) fails behind gatehouse too: upgrade it".to_owned(),
        ));
    }
}

/// Whether a JSON server entry says its client does not run it
/// (`"disabled": true`, as several clients write it).
pub(super) fn says_disabled(table: &Map<String, Value>) -> bool {
    table.get("disabled") == Some(&Value::Bool(true))
}

/// The names gatehouse exposes the tools `(server, tool)` under (`server`
/// as `gatehouse.toml` names it, `tool` as the server lists it), from
/// [`qualified_names`] over every tool the import knows by name and
/// gatehouse serves (listed in `enabled_tools`, a client's per-tool
/// settings, and `also`, less what `enabled_tools` and `disabled_tools`
/// leave out). A name gatehouse has to shorten, or that collides with another
/// once sanitised, gets a hash suffix that depends on every tool served, so
/// such a name is only as good as the tools known here:
/// [`is_plain_name`] tells.
pub fn exposed_names(
    import: &Import,
    also: &[(String, String)],
) -> BTreeMap<(String, String), String> {
    let mut known: BTreeSet<(String, String)> = also.iter().cloned().collect();
    for (name, server) in &import.servers {
        let raw = &server.raw;
        if raw.enabled == Some(false) {
            continue;
        }
        let client = &server.client;
        for tool in raw
            .enabled_tools
            .iter()
            .flatten()
            .chain(client.tools.keys())
            .chain(client.tool_permissions.keys())
        {
            known.insert((name.clone(), tool.clone()));
        }
    }
    // gatehouse names only the tools it serves.
    known.retain(|(name, tool)| {
        import.servers.get(name).is_none_or(|server| {
            let raw = &server.raw;
            raw.enabled_tools
                .as_ref()
                .is_none_or(|enabled| enabled.contains(tool))
                && !raw.disabled_tools.contains(tool)
        })
    });
    let identities: Vec<(&str, &str)> = known
        .iter()
        .map(|(server, tool)| (server.as_str(), tool.as_str()))
        .collect();
    let names = qualified_names(&identities);
    known.into_iter().zip(names).collect()
}

/// Whether `exposed` is `server__tool` sanitised as is, without a hash
/// suffix (see [`exposed_names`]).
pub fn is_plain_name(server: &str, tool: &str, exposed: &str) -> bool {
    let plain = sanitize(&format!("{server}{SEPARATOR}{tool}"));
    plain.len() <= MAX_NAME_BYTES && exposed == plain
}

fn sanitize(text: &str) -> String {
    text.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// What every tool of `server` that gatehouse exposes begins with:
/// `server__`, sanitised as [`qualified_names`] sanitises (`-` becomes
/// `_`). A name gatehouse shortens keeps its first 51 bytes, so this
/// holds while the prefix is shorter than that.
pub fn sanitized_prefix(server: &str) -> String {
    sanitize(&format!("{server}{SEPARATOR}"))
}

/// The servers among `servers` whose tools' names could begin with
/// `prefix` too ([`sanitized_prefix`] of another server): a wildcard
/// `prefix*` would cover their tools as well.
pub fn prefix_shared_with<'a>(
    prefix: &str,
    own: &str,
    servers: impl IntoIterator<Item = &'a String>,
) -> Vec<&'a String> {
    servers
        .into_iter()
        .filter(|other| other.as_str() != own && sanitized_prefix(other).starts_with(prefix))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    fn codex_file() -> ClientFile {
        ClientFile {
            path: PathBuf::from("/c/config.toml"),
            format: FileFormat::CodexToml,
            trust: Trust::User,
            scope: None,
        }
    }

    #[test]
    fn modes_are_ordered_by_strictness() {
        let mut modes = ["prompt", "approve", "writes", "auto"]
            .map(|m| CodexApproval::parse(m).expect("a mode"));
        modes.sort();
        assert_eq!(
            modes.map(CodexApproval::name),
            ["approve", "auto", "writes", "prompt"]
        );
        assert_eq!(CodexApproval::parse("never"), None);
    }

    #[test]
    fn codex_keys_are_taken_out_and_bad_values_refused() {
        let mut table = serde_json::json!({
            "command": "x",
            "default_tools_approval_mode": "approve",
            "tools": {"read": {"approval_mode": "prompt", "output_token_limit": 9, "other": 1}, "bad": {"approval_mode": "yes"}},
            "startup_readiness": "catalog",
            "supports_parallel_tool_calls": true,
            "tool_input_schema_max_bytes": 12000,
            "startup_timeout_ms": 2500,
        });
        let Value::Object(table) = &mut table else {
            unreachable!()
        };
        let (side, refused) = take(&codex_file(), table);
        assert_eq!(
            table.keys().collect::<Vec<_>>(),
            ["command", "startup_timeout_sec"]
        );
        assert_eq!(table["startup_timeout_sec"], 2.5);
        assert_eq!(
            side.default_tools_approval_mode,
            Some(CodexApproval::Approve)
        );
        assert_eq!(
            side.tools["read"],
            CodexTool {
                approval_mode: Some(CodexApproval::Prompt),
                output_token_limit: Some(9)
            }
        );
        assert!(!side.tools.contains_key("bad"));
        assert_eq!(side.startup_readiness, Some(StartupReadiness::Catalog));
        assert_eq!(side.supports_parallel_tool_calls, Some(true));
        assert_eq!(side.tool_input_schema_max_bytes, Some(12000));
        let fields: Vec<&str> = refused.iter().map(|(field, _)| field.as_str()).collect();
        assert_eq!(fields, ["tools.bad.approval_mode", "tools.read.other"]);
    }

    #[test]
    fn claude_keys_are_taken_out_the_stricter_permission_winning() {
        let file = ClientFile {
            path: PathBuf::from("/h/.claude.json"),
            format: FileFormat::ClaudeJson { project: None },
            trust: Trust::User,
            scope: None,
        };
        let mut table = serde_json::json!({
            "url": "https://x",
            "timeout": 600000,
            "alwaysLoad": true,
            "tools": [{"name": "read", "permission_policy": "always_allow"}, {"name": "drop", "permission_policy": "always_allow"}],
            "toolPermissions": {"drop": "blocked"},
            "bareElicitationCapability": true,
        });
        let Value::Object(table) = &mut table else {
            unreachable!()
        };
        let (side, refused) = take(&file, table);
        assert_eq!(table.keys().collect::<Vec<_>>(), ["url"]);
        assert_eq!(
            (side.timeout_ms, side.always_load),
            (Some(600_000), Some(true))
        );
        assert_eq!(side.tool_permissions["read"], ToolPermission::Allow);
        assert_eq!(side.tool_permissions["drop"], ToolPermission::Deny);
        assert_eq!(refused.len(), 1, "{refused:?}");
        // Another client's file keeps its keys for the generic report.
        let cursor = ClientFile {
            format: FileFormat::McpJson,
            ..file
        };
        let mut table = serde_json::json!({"command": "x", "timeout": 5000});
        let Value::Object(table) = &mut table else {
            unreachable!()
        };
        let (side, _) = take(&cursor, table);
        assert!(side.is_empty() && table.contains_key("timeout"));
    }

    #[test]
    fn prefixes_follow_gatehouse_naming() {
        assert_eq!(sanitized_prefix("git-hub"), "git_hub__");
        let names = qualified_names(&[("git-hub", "create.issue")]);
        assert!(names[0].starts_with(&sanitized_prefix("git-hub")));
        let servers = [
            "a_b".to_owned(),
            "a-b".to_owned(),
            "a".to_owned(),
            "a__x".to_owned(),
        ];
        assert_eq!(prefix_shared_with("a_b__", "a_b", &servers), [&servers[1]]);
        assert_eq!(prefix_shared_with("a__", "a", &servers), [&servers[3]]);
        assert!(is_plain_name("docs", "read", "docs__read"));
        assert!(!is_plain_name(
            "docs",
            &"t".repeat(80),
            &qualified_names(&[("docs", &"t".repeat(80))])[0]
        ));
    }
}
