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

use serde::Deserialize;
use wildmatch::WildMatch;

/// The default instructions appended to a denial.
pub const DEFAULT_DENIAL_INSTRUCTIONS: &str = "The agent must not attempt to achieve the same outcome via workaround, indirect execution, or policy circumvention. Proceed only with a materially safer alternative, or if the user explicitly approves the action after being informed of the risk. Otherwise, stop and request user input.";

/// One allow or deny rule. `*` and `?` are wildcards.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Rule {
    /// Server name pattern (default `*`).
    #[serde(default = "any")]
    pub server: String,
    /// Tool name pattern (default `*`).
    #[serde(default = "any")]
    pub tool: String,
    /// Why the rule exists; used as the rationale when it matches.
    #[serde(default)]
    pub reason: Option<String>,
}

fn any() -> String {
    "*".to_owned()
}

impl Rule {
    /// Whether the rule covers `tool` on `server`.
    pub fn matches(&self, server: &str, tool: &str) -> bool {
        WildMatch::new(&self.server).matches(server) && WildMatch::new(&self.tool).matches(tool)
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
pub struct Config {
    /// Rules that deny; checked first.
    #[serde(default)]
    pub deny: Vec<Rule>,
    /// Rules that allow; checked after `deny`.
    #[serde(default)]
    pub allow: Vec<Rule>,
    /// What happens to a tool nothing else decides.
    #[serde(default)]
    pub default: Fallback,
    /// Replaces the instructions appended to a denial message.
    #[serde(default)]
    pub denial_instructions: Option<String>,
}

impl Config {
    /// Parses the module configuration (JSON text).
    pub fn parse(text: &str) -> Result<Config, String> {
        serde_json::from_str(text).map_err(|error| format!("invalid guardian config: {error}"))
    }

    /// The instructions appended to a denial message.
    pub fn denial_instructions(&self) -> &str {
        self.denial_instructions
            .as_deref()
            .unwrap_or(DEFAULT_DENIAL_INSTRUCTIONS)
    }
}
