//! Namespaces and qualified server names.

use crate::server_config::is_valid_server_name;

/// `raw` as a server-name fragment: every character outside
/// `[A-Za-z0-9_-]` becomes `_` (an empty string becomes `_`).
///
/// ```
/// assert_eq!(gatehouse_mcp::discovery::sanitize_name("my plugin.v2"), "my_plugin_v2");
/// ```
pub fn sanitize_name(raw: &str) -> String {
    if raw.is_empty() {
        return "_".to_owned();
    }
    raw.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// The namespace from a manifest's `name`, else the sanitised `fallback`.
pub(crate) fn namespace(name: Option<&str>, fallback: &str) -> String {
    match name {
        Some(name) if is_valid_server_name(name) => name.to_owned(),
        _ => sanitize_name(fallback),
    }
}

/// The name a discovered server is known by: `{namespace}__{server}`.
pub(crate) fn qualified(namespace: &str, server: &str) -> String {
    format!("{namespace}__{server}")
}
