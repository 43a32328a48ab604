//! Server tables of one source: names checked, plugin-root placeholders
//! expanded, tables checked into [`ServerConfig`] and returned as [`DiscoveredServer`]s.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{Map, Value};

use super::names::qualified;
use super::warnings::Warnings;
use crate::server_config::{RawServer, ServerConfig, is_valid_server_name};

/// A server found in a root.
#[derive(Debug, Clone, PartialEq)]
pub struct DiscoveredServer {
    /// `{namespace}__{server}`; also `config.name`.
    pub name: String,
    /// The plugin's namespace.
    pub plugin: String,
    /// The id of the capability root it was found in.
    pub root: String,
    /// The file its table was read from: its manifest, the file trust is
    /// recorded for ([`TrustStore`](super::TrustStore)).
    pub source: PathBuf,
    /// The sha256 (hex) of the bytes of `source` its table was parsed from.
    pub sha256: String,
    /// The checked configuration.
    pub config: ServerConfig,
}

/// The placeholders replaced by the plugin folder's absolute path.
const PLACEHOLDERS: [&str; 2] = ["${CLAUDE_PLUGIN_ROOT}", "${PLUGIN_ROOT}"];

/// Where the servers of one source come from.
#[derive(Debug)]
pub(crate) struct Origin<'a> {
    /// The id of the root it is in.
    pub(crate) root: &'a str,
    /// The namespace.
    pub(crate) namespace: &'a str,
    /// The plugin folder (absolute): placeholders and relative `cwd`.
    pub(crate) plugin_dir: &'a Path,
    /// The file the map was read from.
    pub(crate) source: &'a Path,
    /// The sha256 (hex) of the bytes of `source` that were read.
    pub(crate) sha256: &'a str,
}

/// The valid servers in `map`; each invalid one is skipped with a warning
/// naming the file and the server.
pub(crate) fn servers(
    map: Map<String, Value>,
    origin: &Origin<'_>,
    warnings: &mut Warnings,
) -> Vec<DiscoveredServer> {
    let mut found = Vec::new();
    for (key, table) in map {
        match server(&key, table, origin) {
            Ok(server) => found.push(server),
            Err(reason) => warnings.push(format!(
                "{}: skipping server {key:?}: {reason}",
                origin.source.display()
            )),
        }
    }
    found
}

fn server(key: &str, table: Value, origin: &Origin<'_>) -> Result<DiscoveredServer, String> {
    if !is_valid_server_name(key) {
        return Err("server names may use only letters, digits, `_` and `-`".to_owned());
    }
    let mut raw: RawServer = serde_json::from_value(table).map_err(|error| error.to_string())?;
    check_durations(&raw)?;
    let plugin_root = origin.plugin_dir.to_string_lossy();
    raw.command = raw.command.map(|command| expand(&command, &plugin_root));
    for arg in &mut raw.args {
        *arg = expand(arg, &plugin_root);
    }
    raw.cwd = raw.cwd.map(|cwd| {
        let cwd = PathBuf::from(expand(&cwd.to_string_lossy(), &plugin_root));
        if cwd.is_relative() {
            origin.plugin_dir.join(cwd)
        } else {
            cwd
        }
    });
    let name = qualified(origin.namespace, key);
    let config = raw.check(&name).map_err(|error| error.to_string())?;
    Ok(DiscoveredServer {
        name,
        plugin: origin.namespace.to_owned(),
        root: origin.root.to_owned(),
        source: origin.source.to_path_buf(),
        sha256: origin.sha256.to_owned(),
        config,
    })
}

/// Refuses timeouts too long for a [`Duration`]: `RawServer::check` would
/// panic on them (`Duration::from_secs_f64`), and a manifest anyone drops
/// into a root must not be able to panic discovery (the panic would poison
/// the discovery cache and fail every refresh after it).
fn check_durations(raw: &RawServer) -> Result<(), String> {
    for (field, value) in [
        ("startup_timeout_sec", raw.startup_timeout_sec),
        ("tool_timeout_sec", raw.tool_timeout_sec),
    ] {
        if let Some(secs) = value
            && secs.is_finite()
            && secs > 0.0
            && Duration::try_from_secs_f64(secs).is_err()
        {
            return Err(format!(
                "`{field}`: {secs} seconds is longer than gatehouse can wait; use a number of seconds such as 30"
            ));
        }
    }
    Ok(())
}

/// `text` with every placeholder replaced by `plugin_root`, in one pass (so
/// a placeholder inside `plugin_root` stays as it is).
fn expand(text: &str, plugin_root: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    loop {
        let next = PLACEHOLDERS
            .iter()
            .filter_map(|placeholder| rest.find(placeholder).map(|at| (at, placeholder.len())))
            .min();
        let Some((at, len)) = next else {
            out.push_str(rest);
            return out;
        };
        out.push_str(&rest[..at]);
        out.push_str(plugin_root);
        rest = &rest[at + len..];
    }
}

#[cfg(test)]
mod tests {
    use super::expand;

    #[test]
    fn placeholders_expand_once() {
        assert_eq!(
            expand("${CLAUDE_PLUGIN_ROOT}/a:${PLUGIN_ROOT}/b:${OTHER}", "/p"),
            "/p/a:/p/b:${OTHER}"
        );
        assert_eq!(
            expand("${PLUGIN_ROOT}", "/x/${PLUGIN_ROOT}"),
            "/x/${PLUGIN_ROOT}"
        );
    }
}
