//! The entry that points a client at `gatehouse serve`, carrying the
//! settings the client kept in its entries for the servers gatehouse now
//! serves ([`super::client_side`]), each with a sentence saying what it
//! means on the gatehouse entry.
//!
//! Where servers disagree, the entry never grants more than each server
//! had: the stricter setting wins for all of gatehouse, and the looser one
//! is kept tool by tool where the tools are known (`enabled_tools`), or the
//! sentence says what to add by hand.

use std::collections::BTreeMap;
use std::path::Path;

use gatehouse_base::escape::Escaped;
use serde::Serialize;

use super::client_side::{
    CodexApproval, StartupReadiness, exposed_names, is_plain_name, sanitized_prefix,
};
use super::{GATEWAY_ENTRY, Import, ImportError, ImportedServer};

/// Codex's default time to start a server (`startup_timeout_sec`), seconds.
pub const CODEX_DEFAULT_STARTUP_SEC: f64 = 10.0;
/// Codex's default time for a tool call (`tool_timeout_sec`), seconds.
pub const CODEX_DEFAULT_TOOL_SEC: f64 = 60.0;

/// Which client's entry to write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EntryFormat {
    /// Codex: a `[mcp_servers.gatehouse]` table (and its `tools` tables).
    Codex,
    /// Claude Code's server object on one line of JSON, for `claude mcp
    /// add-json`.
    ClaudeCommand,
    /// `{"mcpServers": {"gatehouse": {...}}}`, for an `.mcp.json` or
    /// Cursor's `mcp.json`.
    McpJson,
}

/// The entry, and what was moved onto it.
#[derive(Debug, Clone, PartialEq)]
pub struct GatewayEntry {
    /// The entry, written by the `toml` or JSON serializer (the JSON with
    /// every control character escaped).
    pub text: String,
    /// One sentence per client-side setting of the imported servers: what
    /// it became on this entry and what that means, or why it is not on it.
    /// Server names in it are escaped.
    pub moved: Vec<String>,
}

#[derive(Serialize)]
struct CodexToolEntry {
    #[serde(skip_serializing_if = "Option::is_none")]
    approval_mode: Option<CodexApproval>,
    #[serde(skip_serializing_if = "Option::is_none")]
    output_token_limit: Option<u64>,
}

#[derive(Serialize)]
struct CodexEntry<'a> {
    command: &'a str,
    args: [&'a str; 3],
    #[serde(skip_serializing_if = "Vec::is_empty")]
    env_vars: Vec<String>,
    required: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    startup_timeout_sec: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_timeout_sec: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    startup_readiness: Option<StartupReadiness>,
    #[serde(skip_serializing_if = "Option::is_none")]
    default_tools_approval_mode: Option<CodexApproval>,
    #[serde(skip_serializing_if = "Option::is_none")]
    supports_parallel_tool_calls: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_input_schema_max_bytes: Option<u64>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    tools: BTreeMap<String, CodexToolEntry>,
}

#[derive(Serialize)]
struct JsonEntry<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    command: &'a str,
    args: [&'a str; 3],
    #[serde(skip_serializing_if = "Option::is_none")]
    timeout: Option<u64>,
    #[serde(rename = "alwaysLoad", skip_serializing_if = "Option::is_none")]
    always_load: Option<bool>,
}

/// `server` escaped, in backquotes.
fn quoted(server: &str) -> String {
    format!("`{}`", Escaped(server))
}

fn quoted_list(servers: &[&str]) -> String {
    servers
        .iter()
        .map(|server| quoted(server))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The servers gatehouse will start (not `enabled = false`), by gatehouse
/// name.
fn served(import: &Import) -> Vec<(&String, &ImportedServer)> {
    import
        .servers
        .iter()
        .filter(|(_, server)| server.raw.enabled != Some(false))
        .collect()
}

/// The tools of `server` that are known by name and served: its
/// `enabled_tools` without its `disabled_tools`. `None` when it has no
/// `enabled_tools` (its tools are known only once it runs).
fn known_tools(server: &ImportedServer) -> Option<Vec<&String>> {
    let raw = &server.raw;
    raw.enabled_tools.as_ref().map(|enabled| {
        enabled
            .iter()
            .filter(|tool| !raw.disabled_tools.contains(tool))
            .collect()
    })
}

/// Whether gatehouse serves `tool` of `server` (its `enabled_tools` and
/// `disabled_tools` allow it).
fn serves(server: &ImportedServer, tool: &str) -> bool {
    let raw = &server.raw;
    raw.enabled_tools
        .as_ref()
        .is_none_or(|enabled| enabled.iter().any(|name| name == tool))
        && !raw.disabled_tools.iter().any(|name| name == tool)
}

/// The entry for `format` that runs `gatehouse serve --config CONFIG`
/// (`program` the gatehouse binary), with the client-side settings of
/// `import`'s servers moved onto it. Codex's entry says `required = true`
/// and names in `env_vars` every variable the imported servers read from
/// gatehouse's environment (Codex passes a server only those it names);
/// Claude Code and Cursor pass their own environment on.
pub fn gateway_entry(
    format: EntryFormat,
    program: &Path,
    config: &Path,
    import: &Import,
) -> Result<GatewayEntry, ImportError> {
    let not_utf8 = |path: &Path| ImportError::Write {
        server: GATEWAY_ENTRY.to_owned(),
        message: format!("{} is not UTF-8", path.display()),
    };
    let program = program.to_str().ok_or_else(|| not_utf8(program))?;
    let config = config.to_str().ok_or_else(|| not_utf8(config))?;
    let args = ["serve", "--config", config];
    let mut moved = Vec::new();
    let written = match format {
        EntryFormat::Codex => {
            let entry = codex_entry(program, args, import, &mut moved);
            let table =
                BTreeMap::from([("mcp_servers", BTreeMap::from([(GATEWAY_ENTRY, &entry)]))]);
            toml::to_string(&table).map_err(|error| error.to_string())
        }
        EntryFormat::ClaudeCommand | EntryFormat::McpJson => {
            let entry = json_entry(program, args, import, &mut moved);
            if format == EntryFormat::ClaudeCommand {
                gatehouse_base::escape::to_json_string(&entry)
            } else {
                let document =
                    BTreeMap::from([("mcpServers", BTreeMap::from([(GATEWAY_ENTRY, &entry)]))]);
                gatehouse_base::escape::to_json_string_pretty(&document)
            }
            .map_err(|error| error.to_string())
        }
    };
    let text = written.map_err(|message| ImportError::Write {
        server: GATEWAY_ENTRY.to_owned(),
        message,
    })?;
    Ok(GatewayEntry { text, moved })
}

fn codex_entry<'a>(
    program: &'a str,
    args: [&'a str; 3],
    import: &Import,
    moved: &mut Vec<String>,
) -> CodexEntry<'a> {
    let served = served(import);
    let names = exposed_names(import, &[]);
    let mut entry = CodexEntry {
        command: program,
        args,
        env_vars: import.environment().into_iter().collect(),
        required: true,
        startup_timeout_sec: None,
        tool_timeout_sec: None,
        startup_readiness: None,
        default_tools_approval_mode: None,
        supports_parallel_tool_calls: None,
        tool_input_schema_max_bytes: None,
        tools: BTreeMap::new(),
    };
    moved.push(
        "required = true: Codex waits for gatehouse before the first turn, and `codex exec` stops with an error if gatehouse cannot start rather than working without its tools.".to_owned(),
    );
    if served.is_empty() {
        return entry;
    }
    codex_approvals(&served, &names, &mut entry, moved);
    codex_tools(&served, &names, &mut entry, moved);
    codex_timeouts(&served, &mut entry, moved);
    codex_startup_and_schema(&served, &mut entry, moved);
    let filtered: Vec<&str> = served
        .iter()
        .filter(|(_, server)| {
            server.raw.enabled_tools.is_some() || !server.raw.disabled_tools.is_empty()
        })
        .map(|(name, _)| name.as_str())
        .collect();
    if !filtered.is_empty() {
        moved.push(format!(
            "enabled_tools and disabled_tools of {} stay in gatehouse.toml, not on the entry: gatehouse applies them, so Codex never sees the tools they leave out.",
            quoted_list(&filtered)
        ));
    }
    entry
}

/// `default_tools_approval_mode`: the strictest of the servers' (Codex's
/// default `auto` for a server that set none), and the looser ones kept
/// tool by tool where the tools are known.
fn codex_approvals(
    served: &[(&String, &ImportedServer)],
    names: &BTreeMap<(String, String), String>,
    entry: &mut CodexEntry<'_>,
    moved: &mut Vec<String>,
) {
    let mode = |server: &ImportedServer| {
        server
            .client
            .default_tools_approval_mode
            .unwrap_or(CodexApproval::Auto)
    };
    if served
        .iter()
        .all(|(_, server)| server.client.default_tools_approval_mode.is_none())
    {
        return;
    }
    let Some(strictest) = served.iter().map(|(_, server)| mode(server)).max() else {
        return;
    };
    let strict: Vec<&str> = served
        .iter()
        .filter(|(_, server)| mode(server) == strictest)
        .map(|(name, _)| name.as_str())
        .collect();
    let unwritten = if strictest == CodexApproval::Auto {
        " (Codex's default, so not written)"
    } else {
        entry.default_tools_approval_mode = Some(strictest);
        ""
    };
    if strict.len() == served.len() {
        moved.push(format!(
            "default_tools_approval_mode = \"{strictest}\"{unwritten}, as every server gatehouse serves had it: for gatehouse's tools {}.",
            strictest.meaning()
        ));
        return;
    }
    moved.push(format!(
        "default_tools_approval_mode = \"{strictest}\"{unwritten}: the servers disagree, and the entry takes the strictest, from {}: for gatehouse's tools {}.",
        quoted_list(&strict),
        strictest.meaning()
    ));
    for (name, server) in served {
        let looser = mode(server);
        if looser == strictest {
            continue;
        }
        match known_tools(server) {
            Some(tools) => {
                let mut kept = Vec::new();
                for tool in tools {
                    if server.client.tools.get(tool).is_some_and(|t| t.approval_mode.is_some()) {
                        continue;
                    }
                    if let Some(exposed) = names.get(&((*name).clone(), tool.clone())) {
                        entry
                            .tools
                            .entry(exposed.clone())
                            .or_insert(CodexToolEntry {
                                approval_mode: None,
                                output_token_limit: None,
                            })
                            .approval_mode = Some(looser);
                        kept.push(exposed.clone());
                    }
                }
                moved.push(format!(
                    "{} had the looser \"{looser}\" ({}): its tools, known from its enabled_tools, keep it one by one on the entry: {}.",
                    quoted(name),
                    looser.meaning(),
                    if kept.is_empty() {
                        "none".to_owned()
                    } else {
                        kept.iter()
                            .map(|tool| format!("tools.{tool}"))
                            .collect::<Vec<_>>()
                            .join(", ")
                    }
                ));
            }
            None => moved.push(format!(
                "{} had the looser \"{looser}\" ({}), and its tools are not known until it runs, so they get \"{strictest}\" too; to keep one as it was, add [mcp_servers.{GATEWAY_ENTRY}.tools.{}TOOL] approval_mode = \"{looser}\" (TOOL its name on that server).",
                quoted(name),
                looser.meaning(),
                Escaped(&sanitized_prefix(name))
            )),
        }
    }
}

/// `[tools.T]`: each server's per-tool settings, under the name gatehouse
/// gives the tool.
fn codex_tools(
    served: &[(&String, &ImportedServer)],
    names: &BTreeMap<(String, String), String>,
    entry: &mut CodexEntry<'_>,
    moved: &mut Vec<String>,
) {
    for (name, server) in served {
        for (tool, settings) in &server.client.tools {
            if !serves(server, tool) {
                moved.push(format!(
                    "tools.{} of {} is not moved: gatehouse does not serve that tool (its enabled_tools or disabled_tools leave it out).",
                    Escaped(tool),
                    quoted(name)
                ));
                continue;
            }
            let Some(exposed) = names.get(&((*name).clone(), tool.clone())) else {
                continue;
            };
            let slot = entry
                .tools
                .entry(exposed.clone())
                .or_insert(CodexToolEntry {
                    approval_mode: None,
                    output_token_limit: None,
                });
            let mut what = Vec::new();
            if let Some(mode) = settings.approval_mode {
                slot.approval_mode = Some(mode);
                what.push(format!("approval_mode = \"{mode}\", so {}", mode.meaning()));
            }
            if let Some(limit) = settings.output_token_limit {
                slot.output_token_limit = Some(limit);
                what.push(format!(
                    "output_token_limit = {limit}, so Codex keeps at most that many tokens of its output"
                ));
            }
            let renamed = if is_plain_name(name, tool, exposed) {
                String::new()
            } else {
                " (a name gatehouse shortened or set apart from another with a hash; if its tool list shows another, use that)".to_owned()
            };
            moved.push(format!(
                "tools.{exposed}: {}'s settings for its tool `{}`, under the name gatehouse gives it{renamed}: {}.",
                quoted(name),
                Escaped(tool),
                what.join("; ")
            ));
        }
    }
}

/// `startup_timeout_sec` and `tool_timeout_sec`: the longest Codex gave
/// any server (its default for a server that set none), written when
/// longer than Codex's default.
fn codex_timeouts(
    served: &[(&String, &ImportedServer)],
    entry: &mut CodexEntry<'_>,
    moved: &mut Vec<String>,
) {
    let longest = |value: fn(&ImportedServer) -> Option<f64>, default: f64| {
        served
            .iter()
            .filter_map(|(name, server)| value(server).map(|seconds| (seconds, name.as_str())))
            .filter(|(seconds, _)| *seconds > default)
            .max_by(|a, b| a.0.total_cmp(&b.0))
    };
    if let Some((seconds, name)) = longest(|s| s.raw.startup_timeout_sec, CODEX_DEFAULT_STARTUP_SEC)
    {
        entry.startup_timeout_sec = Some(seconds);
        moved.push(format!(
            "startup_timeout_sec = {seconds}: Codex waits that long for gatehouse to start, as it waited for {}; gatehouse waits for each server as its startup_timeout_sec in gatehouse.toml says.",
            quoted(name)
        ));
    }
    if let Some((seconds, name)) = longest(|s| s.raw.tool_timeout_sec, CODEX_DEFAULT_TOOL_SEC) {
        entry.tool_timeout_sec = Some(seconds);
        moved.push(format!(
            "tool_timeout_sec = {seconds}: Codex lets a call through gatehouse run that long, as it let {}'s (gatehouse still stops each server's calls at its own tool_timeout_sec in gatehouse.toml).",
            quoted(name)
        ));
    }
}

/// `startup_readiness` and `supports_parallel_tool_calls` only when every
/// server had them (they apply to all of gatehouse), and the largest
/// `tool_input_schema_max_bytes`.
fn codex_startup_and_schema(
    served: &[(&String, &ImportedServer)],
    entry: &mut CodexEntry<'_>,
    moved: &mut Vec<String>,
) {
    let readiness: Vec<(&str, StartupReadiness)> = served
        .iter()
        .map(|(name, server)| {
            (
                name.as_str(),
                server
                    .client
                    .startup_readiness
                    .unwrap_or(StartupReadiness::Connection),
            )
        })
        .collect();
    let catalog: Vec<&str> = readiness
        .iter()
        .filter(|(_, readiness)| *readiness == StartupReadiness::Catalog)
        .map(|(name, _)| *name)
        .collect();
    if !catalog.is_empty() && catalog.len() == served.len() {
        entry.startup_readiness = Some(StartupReadiness::Catalog);
        moved.push(
            "startup_readiness = \"catalog\", as every server had it: Codex may start a turn with gatehouse's tools from its cached list while gatehouse connects (a call still waits for the connection).".to_owned(),
        );
    } else if !catalog.is_empty() {
        moved.push(format!(
            "startup_readiness = \"catalog\" of {} is not on the entry: the other servers waited for their connection (Codex's default), and the entry keeps that for all of gatehouse.",
            quoted_list(&catalog)
        ));
    }
    let parallel: Vec<&str> = served
        .iter()
        .filter(|(_, server)| server.client.supports_parallel_tool_calls == Some(true))
        .map(|(name, _)| name.as_str())
        .collect();
    if !parallel.is_empty() && parallel.len() == served.len() {
        entry.supports_parallel_tool_calls = Some(true);
        moved.push(
            "supports_parallel_tool_calls = true, as every server had it: Codex may call several of gatehouse's tools at once.".to_owned(),
        );
    } else if !parallel.is_empty() {
        moved.push(format!(
            "supports_parallel_tool_calls = true of {} is not on the entry: it would mark every gatehouse tool safe to call in parallel, the other servers' too.",
            quoted_list(&parallel)
        ));
    }
    if let Some((bytes, name)) = served
        .iter()
        .filter_map(|(name, server)| {
            server
                .client
                .tool_input_schema_max_bytes
                .map(|bytes| (bytes, name.as_str()))
        })
        .max()
    {
        entry.tool_input_schema_max_bytes = Some(bytes);
        moved.push(format!(
            "tool_input_schema_max_bytes = {bytes}, the largest ({}'s): Codex shows the model tool schemas up to that size before shortening them, for every gatehouse tool.",
            quoted(name)
        ));
    }
}

fn json_entry<'a>(
    program: &'a str,
    args: [&'a str; 3],
    import: &Import,
    moved: &mut Vec<String>,
) -> JsonEntry<'a> {
    let served = served(import);
    let mut entry = JsonEntry {
        kind: "stdio",
        command: program,
        args,
        timeout: None,
        always_load: None,
    };
    let timed: Vec<(u64, &str)> = served
        .iter()
        .filter_map(|(name, server)| server.client.timeout_ms.map(|ms| (ms, name.as_str())))
        .collect();
    if let Some(&(ms, name)) = timed.iter().max() {
        if timed.len() == served.len() {
            entry.timeout = Some(ms);
            moved.push(format!(
                "timeout = {ms}: Claude Code lets a call through gatehouse run {ms} ms, the longest it gave a server ({}'s); gatehouse stops each server's calls at its own timeout (tool_timeout_sec in gatehouse.toml).",
                quoted(name)
            ));
        } else {
            let names: Vec<&str> = timed.iter().map(|(_, name)| *name).collect();
            moved.push(format!(
                "the timeout of {} is not on the entry: other servers had none, so Claude Code's default (MCP_TOOL_TIMEOUT) stays for all of gatehouse; gatehouse stops their calls at that timeout itself (tool_timeout_sec in gatehouse.toml).",
                quoted_list(&names)
            ));
        }
    }
    let always: Vec<&str> = served
        .iter()
        .filter(|(_, server)| server.client.always_load == Some(true))
        .map(|(name, _)| name.as_str())
        .collect();
    if !always.is_empty() {
        entry.always_load = Some(true);
        moved.push(format!(
            "alwaysLoad = true, as {} had it: Claude Code puts every gatehouse tool in the prompt from the first turn (none deferred behind tool search), and waits up to 5 s for gatehouse at start.",
            quoted_list(&always)
        ));
    }
    entry
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::import::ClientFile;
    use std::path::PathBuf;

    fn codex(text: &str) -> (tempfile::TempDir, Import) {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("config.toml");
        std::fs::write(&path, text).expect("writes");
        let import =
            Import::from_file(&ClientFile::detect(&path).expect("detected")).expect("imports");
        (dir, import)
    }

    fn entry(import: &Import) -> (toml::Table, Vec<String>) {
        let entry = gateway_entry(
            EntryFormat::Codex,
            Path::new("/bin/gatehouse"),
            Path::new("/g.toml"),
            import,
        )
        .expect("writes");
        let table: toml::Table = toml::from_str(&entry.text).expect("TOML");
        let gatehouse = table["mcp_servers"]["gatehouse"]
            .as_table()
            .expect("a table")
            .clone();
        (gatehouse, entry.moved)
    }

    #[test]
    fn servers_that_agree_pass_their_mode_on_and_per_tool_modes_are_renamed() {
        let (_dir, import) = codex(
            r#"
[mcp_servers.docs]
command = "docs"
default_tools_approval_mode = "approve"
[mcp_servers.docs.tools.search]
approval_mode = "prompt"
output_token_limit = 500
[mcp_servers.git-hub]
command = "gh"
default_tools_approval_mode = "approve"
[mcp_servers.git-hub.tools."create.issue"]
approval_mode = "writes"
"#,
        );
        let (gatehouse, moved) = entry(&import);
        assert_eq!(gatehouse["required"].as_bool(), Some(true));
        assert_eq!(
            gatehouse["default_tools_approval_mode"].as_str(),
            Some("approve")
        );
        let tools = gatehouse["tools"].as_table().expect("tools");
        assert_eq!(
            tools["docs__search"]["approval_mode"].as_str(),
            Some("prompt")
        );
        assert_eq!(
            tools["docs__search"]["output_token_limit"].as_integer(),
            Some(500)
        );
        assert_eq!(
            tools["git_hub__create_issue"]["approval_mode"].as_str(),
            Some("writes")
        );
        assert!(
            moved.iter().any(
                |m| m.starts_with("default_tools_approval_mode = \"approve\", as every server")
            ),
            "{moved:?}"
        );
        assert!(
            moved.iter().any(|m| m.starts_with(
                "tools.git_hub__create_issue: `git-hub`'s settings for its tool `create.issue`"
            )),
            "{moved:?}"
        );
    }

    #[test]
    fn servers_that_disagree_get_the_stricter_default_and_known_tools_keep_theirs() {
        let (_dir, import) = codex(
            r#"
[mcp_servers.a]
command = "a"
default_tools_approval_mode = "approve"
enabled_tools = ["read", "list", "gone"]
disabled_tools = ["gone"]
[mcp_servers.b]
command = "b"
default_tools_approval_mode = "prompt"
[mcp_servers.c]
command = "c"
default_tools_approval_mode = "approve"
[mcp_servers.off]
command = "off"
enabled = false
default_tools_approval_mode = "prompt"
"#,
        );
        let (gatehouse, moved) = entry(&import);
        assert_eq!(
            gatehouse["default_tools_approval_mode"].as_str(),
            Some("prompt")
        );
        let tools = gatehouse["tools"].as_table().expect("tools");
        assert_eq!(tools.keys().collect::<Vec<_>>(), ["a__list", "a__read"]);
        assert_eq!(tools["a__read"]["approval_mode"].as_str(), Some("approve"));
        assert!(
            moved
                .iter()
                .any(|m| m.contains("`c` had the looser \"approve\"")
                    && m.contains(
                        "[mcp_servers.gatehouse.tools.c__TOOL] approval_mode = \"approve\""
                    )),
            "{moved:?}"
        );
        // A server that set nothing counts as Codex's `auto`: approve never
        // spreads to it.
        let (_dir, import) = codex(
            "[mcp_servers.a]\ncommand = \"a\"\ndefault_tools_approval_mode = \"approve\"\n[mcp_servers.b]\ncommand = \"b\"\n",
        );
        let (gatehouse, moved) = entry(&import);
        assert!(
            !gatehouse.contains_key("default_tools_approval_mode"),
            "{gatehouse:?}"
        );
        assert!(
            moved.iter().any(|m| m.starts_with(
                "default_tools_approval_mode = \"auto\" (Codex's default, so not written)"
            )),
            "{moved:?}"
        );
    }

    #[test]
    fn timeouts_readiness_and_parallelism_apply_to_all_of_gatehouse() {
        let (_dir, import) = codex(
            r#"
[mcp_servers.a]
command = "a"
startup_timeout_sec = 25
tool_timeout_sec = 30
startup_readiness = "catalog"
supports_parallel_tool_calls = true
tool_input_schema_max_bytes = 9000
[mcp_servers.b]
command = "b"
tool_timeout_sec = 600
startup_readiness = "catalog"
"#,
        );
        let (gatehouse, moved) = entry(&import);
        assert_eq!(gatehouse["startup_timeout_sec"].as_float(), Some(25.0));
        assert_eq!(gatehouse["tool_timeout_sec"].as_float(), Some(600.0));
        assert_eq!(gatehouse["startup_readiness"].as_str(), Some("catalog"));
        assert!(!gatehouse.contains_key("supports_parallel_tool_calls"));
        assert_eq!(
            gatehouse["tool_input_schema_max_bytes"].as_integer(),
            Some(9000)
        );
        assert!(
            moved
                .iter()
                .any(|m| m
                    .starts_with("supports_parallel_tool_calls = true of `a` is not on the entry")),
            "{moved:?}"
        );
        // gatehouse reads its own timeouts: they stay in its tables.
        assert_eq!(import.servers["b"].raw.tool_timeout_sec, Some(600.0));
        assert_eq!(import.servers["a"].raw.default_tools_approval_mode, None);
    }

    #[test]
    fn the_json_entry_takes_claudes_timeout_only_when_every_server_had_one() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join(".claude.json");
        std::fs::write(
            &path,
            serde_json::json!({"mcpServers": {
                "a": {"command": "a", "timeout": 120000, "alwaysLoad": true},
                "b": {"command": "b", "timeout": 600000},
            }})
            .to_string(),
        )
        .expect("writes");
        let import =
            Import::from_file(&ClientFile::detect(&path).expect("detected")).expect("imports");
        assert_eq!(import.servers["b"].raw.tool_timeout_sec, Some(600.0));
        let entry = gateway_entry(
            EntryFormat::ClaudeCommand,
            Path::new("/bin/gatehouse"),
            &PathBuf::from("/g.toml"),
            &import,
        )
        .expect("writes");
        assert!(!entry.text.contains('\n'), "{}", entry.text);
        let value: serde_json::Value = serde_json::from_str(&entry.text).expect("JSON");
        assert_eq!(value["timeout"], 600_000);
        assert_eq!(value["alwaysLoad"], true);
        assert_eq!(value["type"], "stdio");
    }
}
