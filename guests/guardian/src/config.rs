//! The guardian's module configuration: the rules that stand in for Codex's
//! model-based risk assessment, and the settings of the model review when the
//! operator grants the module a model.
//!
//! ```json
//! {
//!   "deny":  [{ "server": "*", "tool": "delete_*", "reason": "deletions need a person" }],
//!   "allow": [{ "server": "docs", "tool": "*" }],
//!   "default": "deny",
//!   "denial_instructions": "...",
//!   "policy": "Writes to the staging database are expected; production is off limits.",
//!   "model_max_output_tokens": 512
//! }
//! ```
//! Every field is optional; `{}` denies every tool that is neither allowed
//! nor marked read-only. `policy` and `model_max_output_tokens` only matter to
//! the model review ([`crate::model_review`]).

use std::borrow::Cow;
use std::num::NonZeroU32;

use serde::Deserialize;
use wildmatch::WildMatch;

/// The output-token cap asked of the model unless the config sets
/// `model_max_output_tokens`: a verdict with a few sentences of rationale
/// needs well under 200 tokens; 512 leaves room for a model that thinks aloud
/// before its JSON.
pub const DEFAULT_MAX_OUTPUT_TOKENS: u32 = 512;

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
    /// The operator's own review policy, put in the model's instructions
    /// (trusted text; the model review only).
    #[serde(default, borrow)]
    pub policy: Option<Cow<'a, str>>,
    /// The most tokens the model may answer with (the model review only;
    /// default [`DEFAULT_MAX_OUTPUT_TOKENS`]; the
    /// operator's limit in the host caps it). Zero is refused.
    #[serde(default)]
    pub model_max_output_tokens: Option<NonZeroU32>,
}

/// The configuration as it was before the model review's fields: a config
/// that does not parse is reported as this one reports it, so that a config
/// without model settings fails with the same text as before (serde's
/// unknown-field error lists the expected fields; its messages name the
/// struct, hence the name).
mod earlier {
    use std::borrow::Cow;

    use serde::Deserialize;

    use super::{Fallback, Rule};

    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    pub(super) struct Config<'a> {
        #[serde(default, borrow)]
        deny: Vec<Rule<'a>>,
        #[serde(default, borrow)]
        allow: Vec<Rule<'a>>,
        #[serde(default)]
        default: Fallback,
        #[serde(default, borrow)]
        denial_instructions: Option<Cow<'a, str>>,
    }
}

/// The fields only the model review reads.
const MODEL_FIELDS: [&str; 2] = ["policy", "model_max_output_tokens"];

impl<'a> Config<'a> {
    /// Parses the module configuration (JSON text).
    pub fn parse(text: &'a str) -> Result<Config<'a>, String> {
        serde_json::from_str(text).map_err(|error| {
            let error = match serde_json::from_str::<earlier::Config<'_>>(text) {
                // The same failure as before the model fields, unless it is
                // about one of them.
                Err(earlier)
                    if !MODEL_FIELDS.iter().any(|field| {
                        earlier
                            .to_string()
                            .starts_with(&format!("unknown field `{field}`"))
                    }) =>
                {
                    earlier
                }
                _ => error,
            };
            format!("invalid guardian config: {error}")
        })
    }

    /// The instructions appended to a denial message.
    pub fn denial_instructions(&self) -> &str {
        self.denial_instructions
            .as_deref()
            .unwrap_or(DEFAULT_DENIAL_INSTRUCTIONS)
    }

    /// The operator's review policy, when set and not blank.
    pub fn policy(&self) -> Option<&str> {
        self.policy
            .as_deref()
            .map(str::trim)
            .filter(|policy| !policy.is_empty())
    }

    /// The output-token cap asked of the model.
    pub fn model_max_output_tokens(&self) -> u32 {
        self.model_max_output_tokens
            .map_or(DEFAULT_MAX_OUTPUT_TOKENS, NonZeroU32::get)
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
