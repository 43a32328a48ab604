//! A small policy guest: the first matching rule from the module config
//! decides; no match defers to the next module.
//!
//! ```json
//! {
//!   "rules": [
//!     { "server": "docs", "tool": "read_*", "decision": "accept" },
//!     { "mode": "url", "url": "https://*.example.com/*", "decision": "accept" },
//!     { "server": "*", "tool": "delete_*", "decision": "decline",
//!       "message": "Deletions are not allowed from this agent." }
//!   ],
//!   "default": "defer"
//! }
//! ```
//! A rule matches when every pattern it sets matches (`*` and `?` are
//! wildcards). `tool` is matched against the elicitation's `_meta.tool_name`;
//! a rule that sets `tool` never matches a request without one. An `accept`
//! in form mode answers with the rule's `content` (default `{}`), which the
//! host validates against the form's schema; in URL mode it carries none.

use serde::Deserialize;
use serde_json::{Map, Value};
use wildmatch::WildMatch;

#[cfg(target_arch = "wasm32")]
mod component;

/// The elicitation mode a rule applies to.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ModeRule {
    /// Either mode.
    #[default]
    Any,
    /// Form mode only.
    Form,
    /// URL mode only.
    Url,
}

/// What a matching rule answers.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Action {
    /// Accept.
    Accept,
    /// Decline (with the rule's `message`, if any).
    Decline,
    /// Cancel.
    Cancel,
    /// No decision: the next module reviews it.
    #[default]
    Defer,
}

/// One rule.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Rule {
    /// Server name pattern.
    #[serde(default)]
    pub server: Option<String>,
    /// Tool name pattern (`_meta.tool_name`).
    #[serde(default)]
    pub tool: Option<String>,
    /// Mode the rule applies to.
    #[serde(default)]
    pub mode: ModeRule,
    /// URL pattern (URL mode only).
    #[serde(default)]
    pub url: Option<String>,
    /// The answer.
    pub decision: Action,
    /// Message for the agent on a decline.
    #[serde(default)]
    pub message: Option<String>,
    /// Content of a form-mode accept (default `{}`).
    #[serde(default)]
    pub content: Option<Map<String, Value>>,
}

/// The module config.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// The rules, first match wins.
    #[serde(default)]
    pub rules: Vec<Rule>,
    /// The answer when no rule matches.
    #[serde(default)]
    pub default: Action,
}

/// The request as the rules see it.
#[derive(Debug, Clone, Copy)]
pub struct Subject<'a> {
    /// The server's name.
    pub server: &'a str,
    /// `_meta.tool_name`, trimmed, if present.
    pub tool: Option<&'a str>,
    /// The URL in URL mode; `None` in form mode.
    pub url: Option<&'a str>,
}

/// The module's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// Defer.
    Defer,
    /// Accept with optional content (JSON text).
    Accept(Option<String>),
    /// Decline with an optional message.
    Decline(Option<String>),
    /// Cancel.
    Cancel,
}

impl Rule {
    fn matches(&self, subject: &Subject<'_>) -> bool {
        let mode_ok = match self.mode {
            ModeRule::Any => true,
            ModeRule::Form => subject.url.is_none(),
            ModeRule::Url => subject.url.is_some(),
        };
        mode_ok
            && pattern_matches(self.server.as_deref(), Some(subject.server))
            && pattern_matches(self.tool.as_deref(), subject.tool)
            && pattern_matches(self.url.as_deref(), subject.url)
    }
}

fn pattern_matches(pattern: Option<&str>, value: Option<&str>) -> bool {
    match (pattern, value) {
        (None, _) => true,
        (Some(_), None) => false,
        (Some(pattern), Some(value)) => WildMatch::new(pattern).matches(value),
    }
}

/// Extracts the trimmed `_meta.tool_name` from `_meta` JSON text.
pub fn tool_name(meta: &Map<String, Value>) -> Option<&str> {
    meta.get("tool_name")
        .and_then(Value::as_str)
        .map(str::trim)
        .filter(|name| !name.is_empty())
}

/// Decides by the first matching rule. Returns the answer and a rationale.
pub fn decide(config: &Config, subject: &Subject<'_>) -> (Answer, String) {
    let (index, rule) = match config
        .rules
        .iter()
        .enumerate()
        .find(|(_, rule)| rule.matches(subject))
    {
        Some((index, rule)) => (Some(index), Some(rule)),
        None => (None, None),
    };
    let action = rule.map_or(config.default, |rule| rule.decision);
    let answer = match action {
        Action::Defer => Answer::Defer,
        Action::Cancel => Answer::Cancel,
        Action::Decline => Answer::Decline(rule.and_then(|rule| rule.message.clone())),
        Action::Accept if subject.url.is_some() => Answer::Accept(None),
        Action::Accept => {
            let content = rule
                .and_then(|rule| rule.content.clone())
                .unwrap_or_default();
            Answer::Accept(Some(Value::Object(content).to_string()))
        }
    };
    let rationale = match index {
        Some(index) => format!("allowlist rule #{} matched", index + 1),
        None => "no allowlist rule matched; default applies".to_owned(),
    };
    (answer, rationale)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(json: &str) -> Config {
        serde_json::from_str(json).expect("valid config")
    }

    const FORM: Subject<'static> = Subject {
        server: "docs",
        tool: Some("read_file"),
        url: None,
    };

    #[test]
    fn first_matching_rule_wins() {
        let config = config(
            r#"{"rules": [
                {"server": "docs", "tool": "read_*", "decision": "accept"},
                {"server": "*", "decision": "decline", "message": "no"}
            ]}"#,
        );
        assert_eq!(
            decide(&config, &FORM).0,
            Answer::Accept(Some("{}".to_owned()))
        );
        let other = Subject {
            tool: Some("write_file"),
            ..FORM
        };
        assert_eq!(
            decide(&config, &other).0,
            Answer::Decline(Some("no".to_owned()))
        );
    }

    #[test]
    fn a_tool_pattern_never_matches_a_request_without_a_tool() {
        let config = config(r#"{"rules": [{"tool": "*", "decision": "accept"}]}"#);
        let untooled = Subject { tool: None, ..FORM };
        assert_eq!(decide(&config, &untooled).0, Answer::Defer);
    }

    #[test]
    fn modes_and_urls_are_matched() {
        let config = config(
            r#"{"rules": [{"mode": "url", "url": "https://*.example.com/*", "decision": "accept"}],
                "default": "decline"}"#,
        );
        let good = Subject {
            url: Some("https://auth.example.com/login"),
            ..FORM
        };
        let bad = Subject {
            url: Some("https://evil.test/login"),
            ..FORM
        };
        assert_eq!(decide(&config, &good).0, Answer::Accept(None));
        assert_eq!(decide(&config, &bad).0, Answer::Decline(None));
        assert_eq!(decide(&config, &FORM).0, Answer::Decline(None));
    }

    #[test]
    fn accept_content_comes_from_the_rule() {
        let config = config(r#"{"rules": [{"decision": "accept", "content": {"ok": true}}]}"#);
        assert_eq!(
            decide(&config, &FORM).0,
            Answer::Accept(Some(r#"{"ok":true}"#.to_owned()))
        );
    }

    #[test]
    fn unknown_fields_are_refused() {
        assert!(serde_json::from_str::<Config>(r#"{"rulez": []}"#).is_err());
    }
}
