//! Plugin manifests: where they are, and the shapes of the server maps they
//! point to.

use std::fs;
use std::path::{Component, Path, PathBuf};

use serde_json::{Map, Value};

use super::warnings::Warnings;

/// The manifests that make a folder a plugin, in the order they are checked;
/// the first found wins.
pub const MANIFESTS: [&str; 3] = [
    ".codex-plugin/plugin.json",
    ".claude-plugin/plugin.json",
    ".cursor-plugin/plugin.json",
];

/// The server file read when a manifest has no `mcpServers`, and the file
/// that makes a folder without a manifest a source.
pub(crate) const MCP_JSON: &str = ".mcp.json";

/// The first manifest present in `dir`. Anything at the path counts (a
/// symlink too): reading it decides whether it is usable.
pub(crate) fn find_manifest(dir: &Path) -> Option<PathBuf> {
    MANIFESTS
        .iter()
        .map(|manifest| dir.join(manifest))
        .find(|path| fs::symlink_metadata(path).is_ok())
}

/// Whether anything is at `path`.
pub(crate) fn present(path: &Path) -> bool {
    fs::symlink_metadata(path).is_ok()
}

/// `reference` (a manifest's `mcpServers` string) joined to `plugin_dir`, or
/// why it is refused: it must start with `./` and have no `..` component.
/// Whether it stays in the root is checked when it is resolved.
pub(crate) fn reference_path(plugin_dir: &Path, reference: &str) -> Result<PathBuf, String> {
    if !reference.starts_with("./") {
        return Err("paths must start with `./`".to_owned());
    }
    let relative = Path::new(reference);
    if relative
        .components()
        .any(|component| !matches!(component, Component::CurDir | Component::Normal(_)))
    {
        return Err("paths may not contain `..`".to_owned());
    }
    Ok(plugin_dir.join(relative))
}

/// The server map in a server file: `{"mcpServers": {...}}` or the map
/// itself. `None` after a warning when it is neither.
pub(crate) fn server_map_or_warn(
    value: Value,
    file: &Path,
    warnings: &mut Warnings,
) -> Option<Map<String, Value>> {
    server_map(value)
        .map_err(|why| warnings.push(format!("{}: {why}", file.display())))
        .ok()
}

/// The server map in a server file (`.mcp.json`, Cursor's `mcp.json`):
/// `{"mcpServers": {...}}` or the map itself; otherwise what is wrong.
/// Discovery and `gatehouse init`'s import read server files with it.
pub fn server_map(value: Value) -> Result<Map<String, Value>, &'static str> {
    let Value::Object(mut object) = value else {
        return Err("not a JSON object");
    };
    match object.remove("mcpServers") {
        None => Ok(object),
        Some(Value::Object(servers)) => Ok(servers),
        Some(_) => Err("`mcpServers` is not an object"),
    }
}
