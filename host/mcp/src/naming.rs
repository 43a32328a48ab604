//! Qualified tool names: every server's tools under one namespace, as
//! `server__tool`, safe for any model API.
//!
//! Characters outside `[A-Za-z0-9_]` become `_`; a name is at most 64 bytes.
//! Names that collide after sanitising, and names that are too long, get `_`
//! and 12 hex digits of the sha256 of the raw `(server, tool)` identity, so
//! the result depends only on the identity and the set it collides with, not
//! on the order servers answered.

use std::collections::HashMap;

use sha2::{Digest, Sha256};

/// The longest qualified name.
pub const MAX_NAME_BYTES: usize = 64;
/// Between server and tool.
pub const SEPARATOR: &str = "__";
const HASH_HEX: usize = 12;

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

fn hashed(base: &str, server: &str, tool: &str) -> String {
    let mut hasher = Sha256::new();
    hasher.update(server.as_bytes());
    hasher.update([0]);
    hasher.update(tool.as_bytes());
    let digest = hex::encode(hasher.finalize());
    let keep = MAX_NAME_BYTES - HASH_HEX - 1;
    // `base` is ASCII after sanitising, so any byte index is a boundary.
    let prefix = &base[..base.len().min(keep)];
    format!("{prefix}_{}", &digest[..HASH_HEX])
}

/// Qualified names for `(server, tool)` identities, in the same order.
///
/// ```
/// use gatehouse_mcp::naming::qualified_names;
/// let names = qualified_names(&[("git-hub", "create.issue"), ("git_hub", "create_issue"), ("docs", "read")]);
/// assert_eq!(names[2], "docs__read");
/// // Both are `git_hub__create_issue` after sanitising: both get a hash suffix.
/// assert!(names[0].starts_with("git_hub__create_issue_") && names[0].len() == 34);
/// assert_ne!(names[0], names[1]);
/// ```
pub fn qualified_names(identities: &[(&str, &str)]) -> Vec<String> {
    let bases: Vec<String> = identities
        .iter()
        .map(|(server, tool)| sanitize(&format!("{server}{SEPARATOR}{tool}")))
        .collect();
    let mut counts: HashMap<&str, usize> = HashMap::new();
    for base in &bases {
        *counts.entry(base.as_str()).or_default() += 1;
    }
    let mut names: Vec<String> = identities
        .iter()
        .zip(&bases)
        .map(|((server, tool), base)| {
            if base.len() > MAX_NAME_BYTES || counts.get(base.as_str()).copied().unwrap_or(0) > 1 {
                hashed(base, server, tool)
            } else {
                base.clone()
            }
        })
        .collect();
    // A hashed name could in theory equal another plain one; hash it again
    // with the full identity until unique (never seen in practice).
    let mut seen: HashMap<String, usize> = HashMap::new();
    for index in 0..names.len() {
        if seen.contains_key(&names[index]) {
            let (server, tool) = identities[index];
            names[index] = hashed(&names[index], server, &format!("{tool}#{index}"));
        }
        seen.insert(names[index].clone(), index);
    }
    names
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_names_pass_through_sanitised() {
        assert_eq!(
            qualified_names(&[("my-server", "do.it")]),
            ["my_server__do_it"]
        );
    }

    #[test]
    fn long_names_are_cut_and_hashed_within_64_bytes() {
        let tool = "t".repeat(100);
        let names = qualified_names(&[("server", &tool)]);
        assert_eq!(names[0].len(), MAX_NAME_BYTES);
        assert!(names[0].starts_with("server__ttt"));
        // Stable: the same identity gives the same name.
        assert_eq!(names, qualified_names(&[("server", &tool)]));
    }

    #[test]
    fn collisions_do_not_depend_on_order() {
        let forward = qualified_names(&[("a-b", "c"), ("a_b", "c")]);
        let backward = qualified_names(&[("a_b", "c"), ("a-b", "c")]);
        assert_eq!(forward[0], backward[1]);
        assert_eq!(forward[1], backward[0]);
        assert_ne!(forward[0], forward[1]);
    }

    #[test]
    fn non_ascii_is_replaced_byte_safely() {
        let names = qualified_names(&[("ünï", "ツール")]);
        assert!(names[0].is_ascii());
        assert!(names[0].len() <= MAX_NAME_BYTES);
    }
}
