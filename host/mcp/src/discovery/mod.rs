//! Capability roots and the MCP servers discovered in them.
//!
//! A *capability root* ([`CapabilityRoot`]) is a directory, named by an id,
//! that may hold plugins bringing MCP servers. Roots selected at run time come
//! before configured ones ([`combine_roots`]): the first root with an id wins,
//! and at most [`MAX_ROOTS`] are used.
//!
//! [`discover_root`] walks one root and reads its servers:
//!
//! - The root must exist and be a directory. A missing root
//!   ([`DiscoveryError::Missing`]) and other I/O errors are transient; a
//!   non-directory is permanent ([`DiscoveryError::is_transient`]).
//! - The walk goes depth first in sorted order, so its results are
//!   deterministic. It does not follow symlinked directories and does not
//!   enter hidden directories (names starting with `.`; the manifest
//!   directories are read directly, never walked), `node_modules` or
//!   `target`. [`DiscoveryLimits`] bounds the depth, the directories visited,
//!   the directory entries looked at, the size of one file and the bytes read
//!   from one root; reaching a limit stops the walk with a warning and keeps
//!   what was found.
//! - A *plugin folder* holds a manifest: `.codex-plugin/plugin.json`,
//!   `.claude-plugin/plugin.json` or `.cursor-plugin/plugin.json`, checked in
//!   that order; the first found wins. Its `name` is the plugin's namespace
//!   (when missing or not a valid server name, the folder's name with every
//!   character outside `[A-Za-z0-9_-]` replaced by `_`). Its `mcpServers` is
//!   an inline object of server tables or a `./relative` path to a JSON file
//!   holding `{"mcpServers": {...}}` or the server map itself. Without
//!   `mcpServers`, the folder's `.mcp.json` (either shape) is read.
//! - A folder with a `.mcp.json` and no manifest is a source too: its
//!   namespace is the nearest ancestor plugin's, else the root's id
//!   (sanitised the same way).
//! - A path in a manifest must start with `./`, have no `..` component, and
//!   resolve (symlinks included) inside the root; every file read must resolve
//!   inside the root. A refused path is a warning and that plugin contributes
//!   no servers.
//! - In each server's `command`, `args` and `cwd`, `${CLAUDE_PLUGIN_ROOT}` and
//!   `${PLUGIN_ROOT}` become the absolute path of the plugin folder (for a
//!   bare `.mcp.json`, the folder holding it); a relative `cwd` is resolved
//!   against that folder.
//! - A server is named `{namespace}__{server}` and checked with
//!   [`RawServer::check`](crate::server_config::RawServer::check). Bad server
//!   keys, tables that do not check, invalid JSON, and later servers with a
//!   name already taken are skipped with warnings; the walk goes on.
//!
//! [`DiscoveryCache`] runs passes over many roots: successes and permanent
//! errors are kept until [`DiscoveryCache::invalidate`] or
//! [`DiscoveryCache::clear`]; transient errors are retried on the next pass,
//! and [`DiscoveryPass::recovered`] tells when a root that failed now
//! succeeds. In restricted mode ([`DiscoveryCache::restricted`],
//! [`discover_root_within`]) a root whose canonical path is outside every
//! allowed workspace directory is refused with
//! [`DiscoveryError::OutsideWorkspace`] (fail closed).
//!
//! Discovering a server is not running it. [`assess`] decides which run:
//! outside a root configured with `trusted = true`, an entry that would read
//! gatehouse's environment (`env_vars`, `bearer_token_env_var`,
//! `env_http_headers`), set a `cwd` outside its root or be `required` is
//! refused; and unless `[capabilities] trust = "all"`, a server runs only
//! while the trust file ([`TrustStore`]) records the sha256 of the manifest
//! bytes discovery read ([`DiscoveredServer::sha256`]).

mod cache;
mod error;
mod files;
mod limits;
mod manifest;
mod names;
mod root;
mod roots;
mod servers;
mod sources;
mod trust;
mod walk;
mod warnings;
mod workspace;

pub use cache::{DiscoveryCache, DiscoveryPass, RootResult};
pub use error::DiscoveryError;
pub use limits::DiscoveryLimits;
pub use manifest::{MANIFESTS, server_map};
pub use names::sanitize_name;
pub use root::{RootDiscovery, discover_root, discover_root_within};
pub use roots::{CapabilityRoot, MAX_ROOTS, combine_roots};
pub use servers::DiscoveredServer;
pub use trust::{
    PluginStatus, Refusal, TRUST_FILE_NAME, TrustError, TrustMode, TrustPolicy, TrustRecord,
    TrustState, TrustStore, assess, refusals,
};
