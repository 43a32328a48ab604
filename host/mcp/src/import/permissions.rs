//! Permission rules a client keeps outside its server entries that name the
//! imported servers' tools: Claude Code's `permissions.allow`, `ask` and
//! `deny` (`mcp__SERVER`, `mcp__SERVER__TOOL`, with `*` in the tool part)
//! in its settings files and the `allowedTools` of this project's entry in
//! `~/.claude.json`, plus the per-tool policies of a server's own entry
//! (`tools`, `toolPermissions`), which Claude Code's entry for gatehouse (a
//! stdio server) cannot hold; and Cursor's `mcpAllowlist` (`SERVER:TOOL`)
//! in `permissions.json`.
//!
//! Once the client reaches those tools through gatehouse they have other
//! names (`mcp__gatehouse__SERVER__TOOL`, `gatehouse:SERVER__TOOL`), so
//! every such rule stops matching: an allow that no longer applies asks
//! more, but a deny that no longer applies lets through what the user
//! refused. [`claude_rules`] and [`cursor_rules`] give, for each, the rule
//! naming the same tools through gatehouse ([`RuleMove`]); a wildcard that
//! would also match another server's tools is not given for an allow list
//! (it would widen it), and the move says what to write instead. Nothing
//! is written: init prints them. Rules and names are untrusted text,
//! escaped when shown.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

use gatehouse_base::escape::Escaped;
use serde_json::Value;

use super::client_side::{
    ToolPermission, exposed_names, is_plain_name, prefix_shared_with, sanitized_prefix,
};
use super::{GATEWAY_ENTRY, Import, Scope, claude, read_text};
use crate::naming::MAX_NAME_BYTES;

/// One rule to write again for the tools' gatehouse names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuleMove {
    /// The file where the rule is (or, for a server entry's policy, where
    /// its scope keeps rules): where the new rule goes.
    pub file: PathBuf,
    /// The list in that file: `permissions.allow`, `permissions.ask`,
    /// `permissions.deny`, `allowedTools` or `mcpAllowlist`.
    pub list: String,
    /// What the rule was (untrusted text).
    pub from: String,
    /// The rule naming the same tools through gatehouse, if one does.
    pub to: Option<String>,
    /// Why there is none, or what to check.
    pub why: Option<String>,
}

impl fmt::Display for RuleMove {
    /// One line, untrusted text escaped.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} {}: {}",
            Escaped(&self.file.display().to_string()),
            self.list,
            Escaped(&self.from)
        )?;
        if let Some(to) = &self.to {
            write!(f, " -> add `{}`", Escaped(to))?;
        }
        if let Some(why) = &self.why {
            write!(f, " ({})", Escaped(why))?;
        }
        Ok(())
    }
}

/// A rule's server and tool parts: `mcp__S__T` (Claude) or `S:T` (Cursor).
struct Rule<'a> {
    server: &'a str,
    tool: Option<&'a str>,
}

fn claude_rule(rule: &str) -> Option<Rule<'_>> {
    if rule.contains('(') {
        return None;
    }
    let rest = rule.strip_prefix("mcp__")?;
    match rest.split_once("__") {
        Some((server, tool)) => Some(Rule {
            server,
            tool: Some(tool),
        }),
        None => Some(Rule {
            server: rest,
            tool: None,
        }),
    }
}

fn cursor_rule(rule: &str) -> Option<Rule<'_>> {
    let (server, tool) = rule.split_once(':')?;
    Some(Rule {
        server,
        tool: Some(tool),
    })
}

/// The gatehouse name of the imported server the client knew as `original`.
fn gatehouse_name<'a>(import: &'a Import, original: &str) -> Option<&'a String> {
    import
        .servers
        .iter()
        .find(|(_, server)| server.original_name == original)
        .map(|(name, _)| name)
}

/// What a rule for `tool` of the gatehouse server `server` becomes: the
/// tool part through gatehouse (after the client's own prefix), or why
/// there is none. `widening` says whether matching more would widen the
/// list (an allow list).
fn translate(
    import: &Import,
    names: &BTreeMap<(String, String), String>,
    server: &str,
    tool: Option<&str>,
    widening: bool,
) -> Result<(String, Option<String>), String> {
    let prefix = sanitized_prefix(server);
    let wildcard = |pattern: &str| -> Result<(String, Option<String>), String> {
        if prefix.len() + 13 > MAX_NAME_BYTES {
            return Err(format!(
                "the server's name is too long for one wildcard through gatehouse (long tool names are shortened); name each tool, `{prefix}TOOL`"
            ));
        }
        let shared = prefix_shared_with(&prefix, server, import.servers.keys());
        if widening && !shared.is_empty() {
            return Err(format!(
                "`{prefix}{pattern}` would also match the tools of {}; name each tool, `{prefix}TOOL`",
                shared
                    .iter()
                    .map(|other| format!("`{other}`"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
        Ok((format!("{prefix}{pattern}"), None))
    };
    match tool {
        None | Some("*") => wildcard("*"),
        Some(pattern) if pattern.contains('*') => {
            if pattern
                .chars()
                .all(|c| c == '*' || c.is_ascii_alphanumeric() || c == '_')
            {
                wildcard(pattern)
            } else {
                Err(format!(
                    "gatehouse writes the characters of tool names other than letters, digits and `_` as `_`; write it for `{prefix}...` by hand"
                ))
            }
        }
        Some(tool) => {
            let Some(exposed) = names.get(&(server.to_owned(), tool.to_owned())) else {
                return Err(
                    "gatehouse does not serve that tool (enabled_tools or disabled_tools in gatehouse.toml leave it out), so no rule is needed".to_owned(),
                );
            };
            let caveat = (!is_plain_name(server, tool, exposed)).then(|| {
                "a name gatehouse shortened or set apart with a hash: if its tool list shows another, use that".to_owned()
            });
            Ok((exposed.clone(), caveat))
        }
    }
}

/// Every `(server, tool)` a set of rules names exactly, for
/// [`exposed_names`].
fn exact_tools<'a>(
    import: &Import,
    rules: impl Iterator<Item = Rule<'a>>,
) -> Vec<(String, String)> {
    rules
        .filter_map(|rule| {
            let server = gatehouse_name(import, rule.server)?;
            let tool = rule.tool.filter(|tool| !tool.contains('*'))?;
            Some((server.clone(), tool.to_owned()))
        })
        .collect()
}

/// The string items of `value[key]`.
fn strings<'a>(value: &'a Value, key: &str) -> Vec<&'a str> {
    value
        .get(key)
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect()
}

/// The JSON at `path`, `None` when it does not exist or cannot be read as
/// JSON (with `//` and `/* */` comments, as Cursor allows).
fn read_jsonc(path: &Path) -> Option<Value> {
    if std::fs::symlink_metadata(path).is_err() {
        return None;
    }
    let text = read_text(path).ok()?;
    serde_json::from_str(&strip_comments(&text)).ok()
}

/// `text` without `//` and `/* */` comments outside strings.
fn strip_comments(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    let mut in_string = false;
    while let Some(c) = chars.next() {
        if in_string {
            out.push(c);
            if c == '\\' {
                if let Some(next) = chars.next() {
                    out.push(next);
                }
            } else if c == '"' {
                in_string = false;
            }
            continue;
        }
        match (c, chars.peek()) {
            ('"', _) => {
                in_string = true;
                out.push(c);
            }
            ('/', Some('/')) => {
                for next in chars.by_ref() {
                    if next == '\n' {
                        out.push('\n');
                        break;
                    }
                }
            }
            ('/', Some('*')) => {
                chars.next();
                let mut previous = ' ';
                for next in chars.by_ref() {
                    if previous == '*' && next == '/' {
                        break;
                    }
                    previous = next;
                }
                out.push(' ');
            }
            _ => out.push(c),
        }
    }
    out
}

/// Where Claude Code keeps permission rules for `scope`: the user's
/// settings, the project's shared settings, or the project's local ones.
pub fn claude_settings_file(home: &Path, project: &Path, scope: Option<Scope>) -> PathBuf {
    match scope {
        Some(Scope::Project) => project.join(".claude").join("settings.json"),
        Some(Scope::Local) => project.join(".claude").join("settings.local.json"),
        Some(Scope::User) | None => home.join(".claude").join("settings.json"),
    }
}

/// Claude Code's rules naming the imported servers' tools (see the
/// module's documentation), from `home/.claude/settings.json`, the
/// project's `.claude/settings.json` and `.claude/settings.local.json`,
/// `allowedTools` of the project's entry in `home/.claude.json`, and the
/// servers' own per-tool policies.
pub fn claude_rules(home: &Path, project: &Path, import: &Import) -> Vec<RuleMove> {
    let mut sources: Vec<(PathBuf, String, Vec<String>)> = Vec::new();
    for path in [
        home.join(".claude").join("settings.json"),
        project.join(".claude").join("settings.json"),
        project.join(".claude").join("settings.local.json"),
    ] {
        let Some(value) = read_jsonc(&path) else {
            continue;
        };
        let Some(permissions) = value.get("permissions") else {
            continue;
        };
        for list in ["allow", "ask", "deny"] {
            let rules: Vec<String> = strings(permissions, list)
                .into_iter()
                .map(str::to_owned)
                .collect();
            sources.push((path.clone(), format!("permissions.{list}"), rules));
        }
    }
    let claude_json = home.join(".claude.json");
    if let Some(value) = read_jsonc(&claude_json)
        && let Some((_, entry)) = claude::project_entries(&value, project).pop()
    {
        let rules: Vec<String> = strings(entry, "allowedTools")
            .into_iter()
            .map(str::to_owned)
            .collect();
        sources.push((claude_json.clone(), "allowedTools".to_owned(), rules));
    }
    let mut also = exact_tools(
        import,
        sources
            .iter()
            .flat_map(|(_, _, rules)| rules.iter().filter_map(|rule| claude_rule(rule))),
    );
    for (name, server) in &import.servers {
        also.extend(
            server
                .client
                .tool_permissions
                .keys()
                .map(|tool| (name.clone(), tool.clone())),
        );
    }
    let names = exposed_names(import, &also);
    let mut moves = Vec::new();
    for (file, list, rules) in &sources {
        let widening = list == "permissions.allow" || list == "allowedTools";
        for rule in rules {
            let Some(parsed) = claude_rule(rule) else {
                continue;
            };
            if parsed.server == GATEWAY_ENTRY {
                continue;
            }
            let Some(server) = gatehouse_name(import, parsed.server) else {
                continue;
            };
            let (to, why) = match translate(import, &names, server, parsed.tool, widening) {
                Ok((tool, caveat)) => (Some(format!("mcp__{GATEWAY_ENTRY}__{tool}")), caveat),
                Err(why) => (None, Some(why)),
            };
            moves.push(RuleMove {
                file: file.clone(),
                list: list.clone(),
                from: format!("`{rule}`"),
                to,
                why,
            });
        }
    }
    for (name, server) in &import.servers {
        for (tool, permission) in &server.client.tool_permissions {
            let widening = *permission == ToolPermission::Allow;
            let (to, why) = match translate(import, &names, name, Some(tool), widening) {
                Ok((exposed, caveat)) => (Some(format!("mcp__{GATEWAY_ENTRY}__{exposed}")), caveat),
                Err(why) => (None, Some(why)),
            };
            moves.push(RuleMove {
                file: claude_settings_file(home, project, server.scope),
                list: format!("permissions.{}", permission.list()),
                from: format!(
                    "the permission policy server `{}` gave its tool `{tool}` in {} (Claude Code's entry for gatehouse has no such field)",
                    server.original_name,
                    server.source.display()
                ),
                to,
                why,
            });
        }
    }
    moves
}

/// Cursor's `mcpAllowlist` entries naming the imported servers' tools, from
/// `home/.cursor/permissions.json` and the project's
/// `.cursor/permissions.json`.
pub fn cursor_rules(home: &Path, project: &Path, import: &Import) -> Vec<RuleMove> {
    let mut sources = Vec::new();
    for path in [
        home.join(".cursor").join("permissions.json"),
        project.join(".cursor").join("permissions.json"),
    ] {
        if let Some(value) = read_jsonc(&path) {
            let rules: Vec<String> = strings(&value, "mcpAllowlist")
                .into_iter()
                .map(str::to_owned)
                .collect();
            sources.push((path, rules));
        }
    }
    let also = exact_tools(
        import,
        sources
            .iter()
            .flat_map(|(_, rules)| rules.iter().filter_map(|rule| cursor_rule(rule))),
    );
    let names = exposed_names(import, &also);
    let mut moves = Vec::new();
    for (file, rules) in &sources {
        for rule in rules {
            let Some(parsed) = cursor_rule(rule) else {
                continue;
            };
            let Some(server) = gatehouse_name(import, parsed.server) else {
                continue;
            };
            let (to, why) = match translate(import, &names, server, parsed.tool, true) {
                Ok((tool, caveat)) => (Some(format!("{GATEWAY_ENTRY}:{tool}")), caveat),
                Err(why) => (None, Some(why)),
            };
            moves.push(RuleMove {
                file: file.clone(),
                list: "mcpAllowlist".to_owned(),
                from: format!("`{rule}`"),
                to,
                why,
            });
        }
    }
    moves
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::import::{Client, Import};
    use serde_json::json;

    fn write(path: &Path, text: &str) {
        std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
        std::fs::write(path, text).expect("writes");
    }

    #[test]
    fn comments_are_stripped_outside_strings() {
        let text = "{\"a\": \"x//y\", // note\n \"b\": /* c */ [\"/*z*/\"]}";
        let value: Value = serde_json::from_str(&strip_comments(text)).expect("JSON");
        assert_eq!(value, json!({"a": "x//y", "b": ["/*z*/"]}));
    }

    #[test]
    fn claude_rules_are_renamed_and_a_widening_wildcard_is_refused() {
        let home = tempfile::tempdir().expect("tempdir");
        let project = tempfile::tempdir().expect("tempdir");
        write(
            &home.path().join(".claude.json"),
            &json!({"mcpServers": {
                "docs": {"command": "docs"},
                "docs__v2": {"command": "docs2"},
                "web": {"type": "http", "url": "https://w", "tools": [{"name": "post", "permission_policy": "always_deny"}]},
            }})
            .to_string(),
        );
        write(
            &home.path().join(".claude/settings.json"),
            &json!({"permissions": {
                "allow": ["mcp__docs", "mcp__docs__read", "Bash(ls)", "mcp__other"],
                "deny": ["mcp__docs__delete_*", "mcp__web"],
            }})
            .to_string(),
        );
        let files = Client::Claude.files(home.path(), None, project.path(), false);
        let import = Import::from_files("claude", &files).expect("imports");
        let moves = claude_rules(home.path(), project.path(), &import);
        let shown: Vec<String> = moves.iter().map(ToString::to_string).collect();
        let settings = home
            .path()
            .join(".claude/settings.json")
            .display()
            .to_string();
        assert_eq!(
            shown,
            [
                format!(
                    "{settings} permissions.allow: `mcp__docs` (`docs__*` would also match the tools of `docs__v2`; name each tool, `docs__TOOL`)"
                ),
                format!(
                    "{settings} permissions.allow: `mcp__docs__read` -> add `mcp__gatehouse__docs__read`"
                ),
                format!(
                    "{settings} permissions.deny: `mcp__docs__delete_*` -> add `mcp__gatehouse__docs__delete_*`"
                ),
                format!("{settings} permissions.deny: `mcp__web` -> add `mcp__gatehouse__web__*`"),
                format!(
                    "{settings} permissions.deny: the permission policy server `web` gave its tool `post` in {} (Claude Code's entry for gatehouse has no such field) -> add `mcp__gatehouse__web__post`",
                    home.path().join(".claude.json").display()
                ),
            ]
        );
    }

    #[test]
    fn cursor_allowlist_entries_are_renamed() {
        let home = tempfile::tempdir().expect("tempdir");
        let project = tempfile::tempdir().expect("tempdir");
        write(
            &home.path().join(".cursor/mcp.json"),
            r#"{"mcpServers": {"linear": {"url": "https://l"}, "git-hub": {"command": "gh"}}}"#,
        );
        write(
            &home.path().join(".cursor/permissions.json"),
            "{\n // mine\n \"mcpAllowlist\": [\"linear:list_issues\", \"git-hub:*\", \"other:x\"]\n}",
        );
        let files = Client::Cursor.files(home.path(), None, project.path(), false);
        let import = Import::from_files("cursor", &files).expect("imports");
        let moves = cursor_rules(home.path(), project.path(), &import);
        let to: Vec<Option<&str>> = moves.iter().map(|m| m.to.as_deref()).collect();
        assert_eq!(
            to,
            [
                Some("gatehouse:linear__list_issues"),
                Some("gatehouse:git_hub__*")
            ]
        );
    }
}
