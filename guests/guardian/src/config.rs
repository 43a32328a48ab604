//! The guardian's module configuration: the rules that stand in for Codex's
//! model-based risk assessment.
//!
//! ```json
//! {
//!   "deny":  [{ "server": "*", "tool": "delete_*", "reason": "deletions need a person" }],
//!   "allow": [{ "server": "docs", "tool": "*" }],
//!   "default": "deny",
//!   "denial_instructions": "..."
//! }
//! ```
//! Every field is optional; `{}` denies every tool that is neither allowed
//! nor marked read-only.

use std::borrow::Cow;

use serde::Deserialize;
use wildmatch::WildMatch;

/// The default instructions appended to a denial.
pub const DEFAULT_DENIAL_INSTRUCTIONS: &str = "The agent must not attempt to achieve the same outcome via workaround, indirect execution, or policy circumvention. Proceed only with a materially safer alternative, or if the user explicitly approves the action after being informed of the risk. Otherwise, stop and request user input.";

/// One allow or deny rule. `*` and `?` are wildcards. Strings are borrowed
/// from the configuration text when they have no escapes.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Rule<'a> {
    /// Server name pattern (default `*`).
    #[serde(default = "any", borrow)]
    pub server: Cow<'a, str>,
    /// Tool name pattern (default `*`).
    #[serde(default = "any", borrow)]
    pub tool: Cow<'a, str>,
    /// Why the rule exists; used as the rationale when it matches.
    #[serde(default, borrow)]
    pub reason: Option<Cow<'a, str>>,
}

fn any() -> Cow<'static, str> {
    Cow::Borrowed("*")
}

impl Rule<'_> {
    /// Whether the rule covers `tool` on `server`.
    pub fn matches(&self, server: &str, tool: &str) -> bool {
        wildcard_match(&self.server, server) && wildcard_match(&self.tool, tool)
    }
}

/// `WildMatch::new(pattern).matches(text)`, without compiling the pattern
/// for the common shapes: no wildcard, `*`, `prefix*` and `*suffix`.
fn wildcard_match(pattern: &str, text: &str) -> bool {
    let is_wild = |c: char| c == '*' || c == '?';
    let trimmed = pattern.trim_matches('*');
    if trimmed.contains(is_wild) {
        return WildMatch::new(pattern).matches(text);
    }
    match (pattern.starts_with('*'), pattern.ends_with('*')) {
        (false, false) => text == pattern,
        (false, true) => text.starts_with(trimmed),
        (true, false) => text.ends_with(trimmed),
        (true, true) => trimmed.is_empty() || WildMatch::new(pattern).matches(text),
    }
}

/// What happens to a tool no rule or annotation decides.
#[derive(Debug, Default, Clone, Copy, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Fallback {
    /// Deny it (the default: fail closed).
    #[default]
    Deny,
    /// Allow it.
    Allow,
}

/// The guardian's configuration.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config<'a> {
    /// Rules that deny; checked first.
    #[serde(default, borrow)]
    pub deny: Vec<Rule<'a>>,
    /// Rules that allow; checked after `deny`.
    #[serde(default, borrow)]
    pub allow: Vec<Rule<'a>>,
    /// What happens to a tool nothing else decides.
    #[serde(default)]
    pub default: Fallback,
    /// Replaces the instructions appended to a denial message.
    #[serde(default, borrow)]
    pub denial_instructions: Option<Cow<'a, str>>,
}

impl<'a> Config<'a> {
    /// Parses the module configuration (JSON text).
    pub fn parse(text: &'a str) -> Result<Config<'a>, String> {
        serde_json::from_str(text).map_err(|error| format!("invalid guardian config: {error}"))
    }

    /// The instructions appended to a denial message.
    pub fn denial_instructions(&self) -> &str {
        self.denial_instructions
            .as_deref()
            .unwrap_or(DEFAULT_DENIAL_INSTRUCTIONS)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_wildcard_shortcuts_agree_with_wildmatch() {
        let patterns = [
            "",
            "*",
            "**",
            "read_*",
            "read_**",
            "*_file",
            "**_file",
            "read_file",
            "read?file",
            "*read*",
            "r*d",
            "?",
            "é*",
            "*é",
            "a*b*c",
        ];
        let texts = [
            "",
            "read_file",
            "read_",
            "read",
            "_file",
            "file",
            "readXfile",
            "é",
            "éa",
            "aé",
            "abc",
            "axbyc",
            "r",
            "rd",
        ];
        for pattern in patterns {
            for text in texts {
                assert_eq!(
                    wildcard_match(pattern, text),
                    WildMatch::new(pattern).matches(text),
                    "{pattern:?} {text:?}"
                );
            }
        }
    }
}
