//! The `[trust]` section of `gatehouse.toml`: which keys must have signed
//! the modules of which registries and repositories. It fails closed: a
//! module no rule matches is refused, and so is an unsigned one, unless its
//! rule says `allow_unsigned`.
//!
//! ```toml
//! [trust.keys]
//! release = "keys/release.pub"          # cosign.pub, relative to the config
//!
//! [[trust.rules]]
//! match = "registry.example.com/security/*"   # HOST[:PORT]/REPO, `*` any run
//! keys = ["release"]                          # one of these must have signed
//!
//! [[trust.rules]]
//! match = "localhost:5000/*"
//! allow_unsigned = true                       # a developer's own registry
//! ```
//!
//! The first rule whose `match` fits the module's `HOST[:PORT]/REPO` decides.
//! Rules name keys today; a rule may later name signer identities (keyless
//! signing with a transparency log), beside `keys`.
//!
//! ```
//! use gatehouse_registry::trust::{Requirement, TrustConfig};
//!
//! let config: TrustConfig = serde_json::from_value(serde_json::json!({
//!     "rules": [{"match": "localhost:5000/*", "allow_unsigned": true}]
//! }))?;
//! let policy = config.policy(std::path::Path::new("."))?;
//! let dev = "localhost:5000/me/reviewer:1".parse()?;
//! assert!(matches!(policy.requirement(&dev), Requirement::Optional { .. }));
//! let prod = "registry.example.com/security/guardian:1".parse()?;
//! assert!(matches!(policy.requirement(&prod), Requirement::NoRule));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::reference::ModuleRef;
use crate::signature::{PublicKey, SignatureError};

/// The `[trust]` section.
#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct TrustConfig {
    /// Named public keys (PEM files, relative to the config).
    #[serde(default)]
    pub keys: BTreeMap<String, PathBuf>,
    /// The rules, first match wins.
    #[serde(default)]
    pub rules: Vec<TrustRule>,
}

/// One `[[trust.rules]]` entry.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct TrustRule {
    /// A pattern over `HOST[:PORT]/REPO`; `*` matches any run of
    /// characters, `/` included.
    #[serde(rename = "match")]
    pub pattern: String,
    /// Keys of `[trust.keys]`, one of which must have signed.
    #[serde(default)]
    pub keys: Vec<String>,
    /// Whether an unsigned module may run (a signature by one of `keys`
    /// is still verified and recorded when there is one).
    #[serde(default)]
    pub allow_unsigned: bool,
}

/// The policy, keys read.
#[derive(Debug, Clone)]
pub struct TrustPolicy {
    rules: Vec<(TrustRule, Vec<PublicKey>)>,
}

/// What the policy asks of one module.
#[derive(Debug, Clone)]
pub enum Requirement<'a> {
    /// One of `keys` must have signed it.
    Signed {
        /// The rule's pattern.
        rule: &'a str,
        /// The keys.
        keys: &'a [PublicKey],
    },
    /// It may run unsigned; a signature by one of `keys` is recorded.
    Optional {
        /// The rule's pattern.
        rule: &'a str,
        /// The keys.
        keys: &'a [PublicKey],
    },
    /// No rule matches: refused.
    NoRule,
}

/// Why the `[trust]` section is refused.
#[derive(Debug, thiserror::Error)]
pub enum TrustError {
    /// A rule names a key `[trust.keys]` does not define.
    #[error("[[trust.rules]] {rule:?}: the key {key:?} is not in [trust.keys]")]
    UnknownKey {
        /// The rule's pattern.
        rule: String,
        /// The key.
        key: String,
    },
    /// A rule that would refuse everything it matches.
    #[error("[[trust.rules]] {0:?}: name `keys`, or set `allow_unsigned = true`")]
    Empty(String),
    /// A key file that cannot be read or is not a public key.
    #[error("[trust.keys] {name} ({}): {reason}", path.display())]
    KeyFile {
        /// The key's name.
        name: String,
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
}

impl TrustConfig {
    /// Reads the keys and checks the rules; relative key paths are taken
    /// from `base_dir`.
    pub fn policy(&self, base_dir: &Path) -> Result<TrustPolicy, TrustError> {
        let mut keys = BTreeMap::new();
        for (name, path) in &self.keys {
            let path = base_dir.join(path);
            let pem = std::fs::read(&path).map_err(|err| TrustError::KeyFile {
                name: name.clone(),
                path: path.clone(),
                reason: err.to_string(),
            })?;
            let key = PublicKey::from_pem(name, &pem).map_err(|err| TrustError::KeyFile {
                name: name.clone(),
                path: path.clone(),
                reason: match err {
                    SignatureError::Key { reason, .. } => reason,
                    other => other.to_string(),
                },
            })?;
            keys.insert(name.clone(), key);
        }
        let mut rules = Vec::with_capacity(self.rules.len());
        for rule in &self.rules {
            if rule.keys.is_empty() && !rule.allow_unsigned {
                return Err(TrustError::Empty(rule.pattern.clone()));
            }
            let mut rule_keys = Vec::with_capacity(rule.keys.len());
            for name in &rule.keys {
                let key = keys.get(name).ok_or_else(|| TrustError::UnknownKey {
                    rule: rule.pattern.clone(),
                    key: name.clone(),
                })?;
                rule_keys.push(key.clone());
            }
            rules.push((rule.clone(), rule_keys));
        }
        Ok(TrustPolicy { rules })
    }
}

impl TrustPolicy {
    /// What the first matching rule asks of `reference`.
    pub fn requirement(&self, reference: &ModuleRef) -> Requirement<'_> {
        let name = reference.name();
        for (rule, keys) in &self.rules {
            if wildmatch::WildMatch::new(&rule.pattern).matches(&name) {
                return if rule.allow_unsigned {
                    Requirement::Optional {
                        rule: &rule.pattern,
                        keys,
                    }
                } else {
                    Requirement::Signed {
                        rule: &rule.pattern,
                        keys,
                    }
                };
            }
        }
        Requirement::NoRule
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_matching_rule_decides_and_no_rule_refuses() {
        let config: TrustConfig = serde_json::from_value(serde_json::json!({
            "rules": [
                {"match": "reg.example.com/security/*", "allow_unsigned": true},
                {"match": "reg.example.com/*", "allow_unsigned": false, "keys": []}
            ]
        }))
        .expect("parses");
        // The second rule names no keys and allows nothing: refused.
        let err = config.policy(Path::new(".")).expect_err("empty rule");
        assert!(err.to_string().contains("reg.example.com/*"), "{err}");

        let config: TrustConfig = serde_json::from_value(serde_json::json!({
            "rules": [{"match": "reg.example.com/security/*", "allow_unsigned": true}]
        }))
        .expect("parses");
        let policy = config.policy(Path::new(".")).expect("policy");
        let inside: ModuleRef = "reg.example.com/security/a/b:1".parse().expect("ref");
        let outside: ModuleRef = "reg.example.com/other:1".parse().expect("ref");
        let lookalike: ModuleRef = "reg.example.com.evil.io/security/a:1".parse().expect("ref");
        assert!(matches!(
            policy.requirement(&inside),
            Requirement::Optional { .. }
        ));
        assert!(matches!(policy.requirement(&outside), Requirement::NoRule));
        assert!(matches!(
            policy.requirement(&lookalike),
            Requirement::NoRule
        ));
    }

    #[test]
    fn keys_must_exist_and_be_public_keys() {
        let config: TrustConfig = serde_json::from_value(serde_json::json!({
            "rules": [{"match": "*", "keys": ["nobody"]}]
        }))
        .expect("parses");
        let err = config.policy(Path::new(".")).expect_err("unknown key");
        assert!(err.to_string().contains("\"nobody\""), "{err}");
        let dir = tempfile::tempdir().expect("dir");
        std::fs::write(dir.path().join("k.pub"), "garbage").expect("write");
        let config: TrustConfig = serde_json::from_value(serde_json::json!({
            "keys": {"k": "k.pub"},
            "rules": [{"match": "*", "keys": ["k"]}]
        }))
        .expect("parses");
        let err = config.policy(dir.path()).expect_err("not a key");
        assert!(err.to_string().contains("k.pub"), "{err}");
    }
}
