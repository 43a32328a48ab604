//! The servers one folder brings: as a plugin (it has a manifest) or as a
//! bare `.mcp.json`.

use std::path::{Path, PathBuf};

use serde_json::Value;

use super::files::Reader;
use super::manifest::{MCP_JSON, find_manifest, present, reference_path, server_map_or_warn};
use super::names::namespace;
use super::servers::DiscoveredServer;
use super::servers::{Origin, servers};
use super::warnings::Warnings;

/// What one folder contributed.
#[derive(Debug)]
pub(crate) struct Visit {
    /// Its servers.
    pub(crate) servers: Vec<DiscoveredServer>,
    /// The namespace its subfolders' bare `.mcp.json` files inherit.
    pub(crate) inherited: Option<String>,
}

/// The servers of folder `dir` (absolute, inside the root). `inherited` is
/// the nearest ancestor plugin's namespace; `root_id` names bare
/// `.mcp.json` files outside any plugin.
pub(crate) fn visit(
    dir: &Path,
    inherited: Option<&str>,
    root_id: &str,
    reader: &mut Reader<'_>,
    warnings: &mut Warnings,
) -> Visit {
    if let Some(manifest) = find_manifest(dir) {
        let (namespace, servers) = plugin(dir, &manifest, root_id, reader, warnings);
        return Visit {
            servers,
            inherited: Some(namespace),
        };
    }
    let inherited = inherited.map(str::to_owned);
    let mcp_json = dir.join(MCP_JSON);
    if !present(&mcp_json) {
        return Visit {
            servers: Vec::new(),
            inherited,
        };
    }
    if let Ok(canonical) = reader.resolve_inside(&mcp_json)
        && reader.was_read(&canonical)
    {
        // A manifest already pointed at this file.
        return Visit {
            servers: Vec::new(),
            inherited,
        };
    }
    let namespace = inherited
        .clone()
        .unwrap_or_else(|| namespace(None, root_id));
    let servers = server_file(&mcp_json, &namespace, dir, root_id, reader, warnings);
    Visit { servers, inherited }
}

/// A plugin folder: its namespace and its servers.
fn plugin(
    dir: &Path,
    manifest: &Path,
    root_id: &str,
    reader: &mut Reader<'_>,
    warnings: &mut Warnings,
) -> (String, Vec<DiscoveredServer>) {
    let folder = dir
        .file_name()
        .map(|name| name.to_string_lossy().into_owned())
        .unwrap_or_default();
    let Some((value, sha256)) = reader.read_json(manifest, warnings) else {
        return (namespace(None, &folder), Vec::new());
    };
    let Value::Object(mut fields) = value else {
        warnings.push(format!("{}: not a JSON object", manifest.display()));
        return (namespace(None, &folder), Vec::new());
    };
    let namespace = namespace(fields.get("name").and_then(Value::as_str), &folder);
    let servers = match fields.remove("mcpServers") {
        Some(Value::Object(map)) => {
            let origin = Origin {
                root: root_id,
                namespace: &namespace,
                plugin_dir: dir,
                source: manifest,
                sha256: &sha256,
            };
            servers(map, &origin, warnings)
        }
        Some(Value::String(reference)) => {
            let resolved = reference_path(dir, &reference)
                .and_then(|path| reader.resolve_inside(&path))
                .and_then(|path| inside_plugin(dir, path));
            match resolved {
                Ok(path) => server_file(&path, &namespace, dir, root_id, reader, warnings),
                Err(reason) => {
                    warnings.push(format!(
                        "{}: refusing `mcpServers` path {reference:?}: {reason}; the plugin contributes no servers",
                        manifest.display()
                    ));
                    Vec::new()
                }
            }
        }
        Some(_) => {
            warnings.push(format!(
                "{}: `mcpServers` must be an object or a `./` path",
                manifest.display()
            ));
            Vec::new()
        }
        None => {
            let mcp_json = dir.join(MCP_JSON);
            if present(&mcp_json) {
                server_file(&mcp_json, &namespace, dir, root_id, reader, warnings)
            } else {
                Vec::new()
            }
        }
    };
    (namespace, servers)
}

/// The servers in the server file `file`, for a plugin at `plugin_dir`.
fn server_file(
    file: &Path,
    namespace: &str,
    plugin_dir: &Path,
    root_id: &str,
    reader: &mut Reader<'_>,
    warnings: &mut Warnings,
) -> Vec<DiscoveredServer> {
    let Some((value, sha256)) = reader.read_json(file, warnings) else {
        return Vec::new();
    };
    let Some(map) = server_map_or_warn(value, file, warnings) else {
        return Vec::new();
    };
    let origin = Origin {
        root: root_id,
        namespace,
        plugin_dir,
        source: file,
        sha256: &sha256,
    };
    servers(map, &origin, warnings)
}

/// `path` (resolved) if it lies in the plugin's own folder `dir`. A plugin
/// may point only at its own files: a link to another plugin's server file
/// would run that plugin's servers, trusted under its digest, from this
/// plugin's folder.
fn inside_plugin(dir: &Path, path: PathBuf) -> Result<PathBuf, String> {
    let folder = std::fs::canonicalize(dir)
        .map_err(|error| format!("cannot resolve the plugin's folder: {error}"))?;
    if path.starts_with(&folder) {
        Ok(path)
    } else {
        Err(format!(
            "it resolves to {}, outside the plugin's folder {}; a plugin may only point at its own files",
            path.display(),
            folder.display()
        ))
    }
}
