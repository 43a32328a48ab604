//! Which discovered servers may run: the operator's trust, recorded per
//! server as the sha256 of its manifest, and what a discovered entry may ask
//! for at all.
//!
//! A server found in a capability root runs only when
//!
//! - nothing in its entry is refused ([`refusals`]): outside a root
//!   configured with `trusted = true`, an entry may not pass gatehouse's
//!   environment variables through (`env_vars`), read credentials or header
//!   values from it (`bearer_token_env_var`, `env_http_headers`), set a
//!   `cwd` outside its root, or be `required`; and
//! - the operator trusts it: `[capabilities] trust = "all"`
//!   ([`TrustMode::All`]), or the trust file ([`TrustStore`],
//!   `gatehouse-trust.toml` beside the config) records its name, root,
//!   manifest path and the sha256 of the manifest bytes discovery parsed
//!   ([`TrustState::Trusted`]). A manifest whose bytes differ is
//!   [`TrustState::Changed`] and does not run until it is trusted again.
//!
//! [`assess`] applies both to a [`DiscoveryPass`].

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::path::{Component, Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::cache::DiscoveryPass;
use super::roots::CapabilityRoot;
use super::servers::DiscoveredServer;
use crate::server_config::{ServerConfig, Transport};
use gatehouse_base::private_fs::{self, PrivateError};

/// The trust file's name, beside the config file.
pub const TRUST_FILE_NAME: &str = "gatehouse-trust.toml";

/// The largest trust file read.
const MAX_TRUST_FILE_BYTES: u64 = 4 * 1024 * 1024;

/// The format version written and understood.
const VERSION: u32 = 1;

/// What the file starts with when gatehouse writes it.
const HEADER: &str = "# Discovered MCP servers the operator trusts, written by `gatehouse plugins trust`.\n\
# A server runs only while its manifest's sha256 is the one recorded here.\n\n";

/// `[capabilities] trust`: whether discovered servers need the operator's
/// trust to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TrustMode {
    /// Only servers recorded in the trust file with their manifest's current
    /// sha256 run (the default).
    #[default]
    Ask,
    /// Every discovered server runs, trusted or not: for roots only the
    /// operator can write to.
    All,
}

impl TrustMode {
    /// The name as written in the config.
    pub fn name(self) -> &'static str {
        match self {
            Self::Ask => "ask",
            Self::All => "all",
        }
    }
}

/// A discovered server's standing in the trust file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TrustState {
    /// Recorded with this root, manifest path and manifest sha256.
    Trusted,
    /// Not recorded.
    New,
    /// Recorded, but its manifest (its bytes, path or root) is not the one
    /// that was trusted.
    Changed,
}

impl TrustState {
    /// `trusted`, `new` or `changed`.
    pub fn name(self) -> &'static str {
        match self {
            Self::Trusted => "trusted",
            Self::New => "new",
            Self::Changed => "changed",
        }
    }
}

/// What the trust file records for one server.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TrustRecord {
    /// The id of the root it was found in.
    pub root: String,
    /// Its manifest (the file its table is read from).
    pub manifest: PathBuf,
    /// The manifest's sha256, hex.
    pub sha256: String,
}

/// The trust file as written.
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct TrustFile {
    version: u32,
    #[serde(default)]
    plugins: BTreeMap<String, TrustRecord>,
}

/// Why the trust file could not be used. Each names the file and says what
/// to do.
#[derive(Debug, thiserror::Error)]
pub enum TrustError {
    /// Reading or writing failed.
    #[error("{}: cannot {action}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// What was being done.
        action: &'static str,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The file is not one gatehouse can trust ([`private_fs`]): a symbolic
    /// link, not a regular file, another user's, open to group or others, or
    /// too large.
    #[error(
        "{}: refusing the trust file: {problem}; remove it (or fix it as said) and trust the plugins again with `gatehouse plugins trust`",
        path.display()
    )]
    Unsafe {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        problem: private_fs::Refusal,
    },
    /// The file is not a trust file of this version.
    #[error(
        "{}: {message}; fix it, or remove it and trust the plugins again with `gatehouse plugins trust`",
        path.display()
    )]
    Parse {
        /// The file.
        path: PathBuf,
        /// What is wrong, and where.
        message: String,
    },
    /// The records cannot be written as TOML (a path that is not UTF-8).
    #[error("{}: cannot write the trust file: {message}", path.display())]
    Serialize {
        /// The file.
        path: PathBuf,
        /// Why.
        message: String,
    },
}

/// The trust file: per discovered server name, the root, manifest and
/// manifest sha256 the operator trusted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TrustStore {
    path: PathBuf,
    records: BTreeMap<String, TrustRecord>,
}

impl TrustStore {
    /// A store at `path` with nothing trusted (nothing is read).
    pub fn empty(path: impl Into<PathBuf>) -> Self {
        Self {
            path: path.into(),
            records: BTreeMap::new(),
        }
    }

    /// Reads the trust file at `path`; a missing file is an empty store. The
    /// file is read as a private file ([`private_fs::read`]): never through a
    /// symbolic link, and refused unless it is a regular file of this user's
    /// that nobody else may access, of at most 4 MiB.
    ///
    /// ```
    /// use gatehouse_mcp::discovery::TrustStore;
    /// let dir = tempfile::tempdir()?;
    /// let store = TrustStore::load(dir.path().join("gatehouse-trust.toml"))?;
    /// assert!(store.records().is_empty());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn load(path: impl Into<PathBuf>) -> Result<Self, TrustError> {
        let path = path.into();
        let bytes = match private_fs::read(&path, MAX_TRUST_FILE_BYTES) {
            Ok(bytes) => bytes,
            Err(error) if error.is_not_found() => return Ok(Self::empty(path)),
            Err(error) => return Err(error.into()),
        };
        let text = String::from_utf8(bytes).map_err(|error| TrustError::Io {
            path: path.clone(),
            action: "read the trust file",
            source: std::io::Error::new(std::io::ErrorKind::InvalidData, error),
        })?;
        let file: TrustFile = toml::from_str(&text).map_err(|error| TrustError::Parse {
            path: path.clone(),
            message: error.to_string().trim_end().to_owned(),
        })?;
        if file.version != VERSION {
            return Err(TrustError::Parse {
                path,
                message: format!(
                    "version {} is not one this gatehouse reads (it reads {VERSION})",
                    file.version
                ),
            });
        }
        Ok(Self {
            path,
            records: file.plugins,
        })
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The records, by server name.
    pub fn records(&self) -> &BTreeMap<String, TrustRecord> {
        &self.records
    }

    /// Where `server` stands: [`TrustState::Trusted`] only when its name is
    /// recorded with its root, its manifest path and the sha256 of the
    /// manifest bytes discovery read.
    pub fn state(&self, server: &DiscoveredServer) -> TrustState {
        match self.records.get(&server.name) {
            None => TrustState::New,
            Some(record)
                if record.root == server.root
                    && record.manifest == server.source
                    && record.sha256.eq_ignore_ascii_case(&server.sha256) =>
            {
                TrustState::Trusted
            }
            Some(_) => TrustState::Changed,
        }
    }

    /// Records `server` as trusted, as discovery read it (replacing an
    /// earlier record of its name). [`TrustStore::save`] writes it.
    pub fn trust(&mut self, server: &DiscoveredServer) {
        self.records.insert(
            server.name.clone(),
            TrustRecord {
                root: server.root.clone(),
                manifest: server.source.clone(),
                sha256: server.sha256.clone(),
            },
        );
    }

    /// Forgets the record of server `name`; whether there was one.
    pub fn untrust(&mut self, name: &str) -> bool {
        self.records.remove(name).is_some()
    }

    /// Writes the store ([`private_fs::replace`]): to a new 0600 file beside
    /// it (created without following a symbolic link), synced, then renamed
    /// over the old one, so readers see the old file or the new one, never a
    /// part.
    pub fn save(&self) -> Result<(), TrustError> {
        let file = TrustFile {
            version: VERSION,
            plugins: self.records.clone(),
        };
        let body = toml::to_string(&file).map_err(|error| TrustError::Serialize {
            path: self.path.clone(),
            message: error.to_string(),
        })?;
        private_fs::replace(&self.path, &[HEADER.as_bytes(), body.as_bytes()], true)?;
        Ok(())
    }
}

impl From<PrivateError> for TrustError {
    /// A refused trust file is [`TrustError::Unsafe`]; a failed read or
    /// write is [`TrustError::Io`], naming the file it failed on.
    fn from(error: PrivateError) -> Self {
        match error {
            PrivateError::Refused { path, refusal } => TrustError::Unsafe {
                path,
                problem: refusal,
            },
            PrivateError::Io {
                path,
                action,
                source,
            } => TrustError::Io {
                path,
                action,
                source,
            },
        }
    }
}

/// A field of a discovered entry that is refused outside a trusted root.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// The field, as written in the manifest.
    pub field: &'static str,
    /// What it would do.
    pub reason: String,
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "`{}` {}; only servers in a capability root configured with `trusted = true` may set it",
            self.field, self.reason
        )
    }
}

/// What in `config` (a server discovered in the root whose canonical path is
/// `root`, `None` if it cannot be resolved) reaches beyond the plugin:
/// gatehouse's environment (`env_vars`, `bearer_token_env_var`,
/// `env_http_headers`), a `cwd` outside the root, or `required`. Values the
/// entry sets itself (`env`, `headers`) are its own and allowed.
pub fn refusals(config: &ServerConfig, root: Option<&Path>) -> Vec<Refusal> {
    let mut refused = Vec::new();
    let list = |names: &mut dyn Iterator<Item = &String>| {
        names
            .map(|name| format!("`{name}`"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    match &config.transport {
        Transport::Stdio { env_vars, cwd, .. } => {
            if !env_vars.is_empty() {
                refused.push(Refusal {
                    field: "env_vars",
                    reason: format!(
                        "would pass gatehouse's environment variables {} to it",
                        list(&mut env_vars.iter())
                    ),
                });
            }
            if let Some(cwd) = cwd
                && !root.is_some_and(|root| inside(cwd, root))
            {
                refused.push(Refusal {
                    field: "cwd",
                    reason: format!("{} is outside its capability root", cwd.display()),
                });
            }
        }
        Transport::Http {
            bearer_token_env_var,
            env_headers,
            ..
        } => {
            if let Some(variable) = bearer_token_env_var {
                refused.push(Refusal {
                    field: "bearer_token_env_var",
                    reason: format!(
                        "would send gatehouse's environment variable `{variable}` as a credential"
                    ),
                });
            }
            if !env_headers.is_empty() {
                refused.push(Refusal {
                    field: "env_http_headers",
                    reason: format!(
                        "would send gatehouse's environment variables {} as headers",
                        list(&mut env_headers.values())
                    ),
                });
            }
        }
    }
    if config.required {
        refused.push(Refusal {
            field: "required",
            reason: "would let its failure to start stop gatehouse".to_owned(),
        });
    }
    refused
}

/// Whether `path` (absolute) is inside `root` (canonical): where it resolves
/// to, symbolic links included, when it exists; otherwise where its nearest
/// existing ancestor resolves to, and it may not contain `..`.
fn inside(path: &Path, root: &Path) -> bool {
    if !path.is_absolute() {
        return false;
    }
    if let Ok(real) = std::fs::canonicalize(path) {
        return real.starts_with(root);
    }
    if path
        .components()
        .any(|component| matches!(component, Component::ParentDir))
    {
        return false;
    }
    path.ancestors()
        .skip(1)
        .find_map(|ancestor| std::fs::canonicalize(ancestor).ok())
        .is_some_and(|real| real.starts_with(root))
}

/// What the operator configured about trust.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TrustPolicy {
    /// `[capabilities] trust`.
    pub mode: TrustMode,
    /// The configured roots with `trusted = true`. A root counts only if
    /// both its id and its path match one of these, so a root selected at
    /// run time under a trusted root's id is not trusted.
    pub trusted_roots: Vec<CapabilityRoot>,
}

/// A discovered server and what trust decides for it.
#[derive(Debug, Clone, PartialEq)]
pub struct PluginStatus {
    /// The server as discovered.
    pub server: DiscoveredServer,
    /// Its root's path.
    pub root_path: PathBuf,
    /// Whether its root is configured with `trusted = true`.
    pub root_trusted: bool,
    /// Its standing in the trust file.
    pub state: TrustState,
    /// The fields refused in its entry (empty in a trusted root).
    pub refused: Vec<Refusal>,
    /// Whether a configured server has its name (the configured one wins).
    pub shadowed: bool,
    /// Whether it runs: nothing refused, not shadowed, and trusted (or
    /// `trust = "all"`).
    pub runs: bool,
}

impl PluginStatus {
    /// Marks it shadowed by a configured server of its name: it does not
    /// run.
    pub fn shadow(&mut self) {
        self.shadowed = true;
        self.runs = false;
    }
}

/// Every server of `pass` with its trust state, refused fields and whether
/// it runs, in the pass's order.
pub fn assess(pass: &DiscoveryPass, policy: &TrustPolicy, store: &TrustStore) -> Vec<PluginStatus> {
    let mut roots: HashMap<&str, (&CapabilityRoot, Option<PathBuf>, bool)> = HashMap::new();
    for entry in &pass.roots {
        roots.entry(entry.root.id.as_str()).or_insert_with(|| {
            (
                &entry.root,
                std::fs::canonicalize(&entry.root.path).ok(),
                policy.trusted_roots.contains(&entry.root),
            )
        });
    }
    pass.servers()
        .iter()
        .map(|server| {
            let (root_path, canonical, root_trusted) = match roots.get(server.root.as_str()) {
                Some((root, canonical, trusted)) => {
                    (root.path.clone(), canonical.as_deref(), *trusted)
                }
                None => (PathBuf::new(), None, false),
            };
            let refused = if root_trusted {
                Vec::new()
            } else {
                refusals(&server.config, canonical)
            };
            let state = store.state(server);
            let runs = refused.is_empty()
                && (policy.mode == TrustMode::All || state == TrustState::Trusted);
            PluginStatus {
                server: server.clone(),
                root_path,
                root_trusted,
                state,
                refused,
                shadowed: false,
                runs,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::server_config::RawServer;
    use std::io::Write;

    fn server(name: &str, source: &Path, sha256: &str) -> DiscoveredServer {
        DiscoveredServer {
            name: name.to_owned(),
            plugin: "p".to_owned(),
            root: "r".to_owned(),
            source: source.to_path_buf(),
            sha256: sha256.to_owned(),
            config: RawServer {
                command: Some("srv".to_owned()),
                ..RawServer::default()
            }
            .check(name)
            .expect("valid"),
        }
    }

    #[test]
    fn states_follow_the_recorded_digest_path_and_root() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut store = TrustStore::empty(dir.path().join(TRUST_FILE_NAME));
        let trusted = server("p__s", Path::new("/r/p/.mcp.json"), "ab");
        assert_eq!(store.state(&trusted), TrustState::New);
        store.trust(&trusted);
        assert_eq!(store.state(&trusted), TrustState::Trusted);
        let edited = server("p__s", Path::new("/r/p/.mcp.json"), "cd");
        assert_eq!(store.state(&edited), TrustState::Changed);
        let moved = server("p__s", Path::new("/r/q/.mcp.json"), "ab");
        assert_eq!(store.state(&moved), TrustState::Changed);
        let mut elsewhere = trusted.clone();
        elsewhere.root = "other".to_owned();
        assert_eq!(store.state(&elsewhere), TrustState::Changed);
        assert!(store.untrust("p__s"));
        assert!(!store.untrust("p__s"));
        assert_eq!(store.state(&trusted), TrustState::New);
    }

    #[cfg(unix)]
    #[test]
    fn the_file_round_trips_0600_and_replaces_a_symlink_without_following_it() {
        use std::os::unix::fs::{PermissionsExt, symlink};

        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join(TRUST_FILE_NAME);
        let target = dir.path().join("elsewhere");
        std::fs::write(&target, "untouched").expect("write");
        symlink(&target, &path).expect("symlink");
        let refused = TrustStore::load(&path).expect_err("a symlink is refused");
        assert!(refused.to_string().contains("symbolic link"), "{refused}");

        let mut store = TrustStore::empty(&path);
        store.trust(&server("p__s", Path::new("/r/p/.mcp.json"), "ab"));
        store.save().expect("save");
        assert_eq!(
            std::fs::read_to_string(&target).expect("read"),
            "untouched",
            "the link's target is not written"
        );
        let metadata = std::fs::symlink_metadata(&path).expect("stat");
        assert!(metadata.is_file());
        assert_eq!(metadata.permissions().mode() & 0o777, 0o600);
        assert_eq!(TrustStore::load(&path).expect("load"), store);
        let leftovers: Vec<_> = std::fs::read_dir(dir.path())
            .expect("list")
            .filter_map(Result::ok)
            .filter(|entry| entry.file_name().to_string_lossy().ends_with(".tmp"))
            .collect();
        assert!(leftovers.is_empty(), "{leftovers:?}");

        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o666)).expect("chmod");
        let loose = TrustStore::load(&path).expect_err("a file others may write is refused");
        let message = loose.to_string();
        assert!(message.contains(&path.display().to_string()), "{message}");
        assert!(message.contains("chmod 600"), "{message}");
        // Stricter since the trust file became a private file: one others may
        // only read is refused too.
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).expect("chmod");
        let readable = TrustStore::load(&path).expect_err("a file others may read is refused");
        assert!(readable.to_string().contains("chmod 600"), "{readable}");
    }

    #[test]
    fn a_bad_file_is_refused_naming_it() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join(TRUST_FILE_NAME);
        let mut options = std::fs::OpenOptions::new();
        options.write(true).create_new(true);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
        options
            .open(&path)
            .and_then(|mut file| file.write_all(b"version = 7\n"))
            .expect("write");
        let error = TrustStore::load(&path).expect_err("unknown version");
        let message = error.to_string();
        assert!(
            message.starts_with(&path.display().to_string()),
            "{message}"
        );
        assert!(message.contains("version 7"), "{message}");
    }

    #[test]
    fn refusals_name_each_field_that_reaches_beyond_the_plugin() {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = std::fs::canonicalize(dir.path()).expect("canonical");
        std::fs::create_dir_all(root.join("p/work")).expect("mkdir");
        let check = |raw: RawServer| {
            refusals(&raw.check("s").expect("valid"), Some(&root))
                .into_iter()
                .map(|refusal| refusal.field)
                .collect::<Vec<_>>()
        };
        let stdio = |cwd: Option<PathBuf>| RawServer {
            command: Some("srv".to_owned()),
            env: [("OWN".to_owned(), "value".to_owned())].into(),
            cwd,
            ..RawServer::default()
        };
        assert!(check(stdio(None)).is_empty());
        assert!(check(stdio(Some(root.join("p/work")))).is_empty());
        assert!(check(stdio(Some(root.join("p/not-yet")))).is_empty());
        assert_eq!(check(stdio(Some(PathBuf::from("/")))), ["cwd"]);
        assert_eq!(check(stdio(Some(root.join("p/../..")))), ["cwd"]);
        assert_eq!(check(stdio(Some(root.join("p/missing/../../..")))), ["cwd"]);
        assert_eq!(
            check(RawServer {
                env_vars: vec!["HOME_SECRET".to_owned()],
                required: Some(true),
                ..stdio(None)
            }),
            ["env_vars", "required"]
        );
        assert_eq!(
            check(RawServer {
                url: Some("https://example.com/mcp".to_owned()),
                headers: [("X-Own".to_owned(), "v".to_owned())].into(),
                bearer_token_env_var: Some("TOKEN".to_owned()),
                env_http_headers: [("X-Key".to_owned(), "KEY".to_owned())].into(),
                ..RawServer::default()
            }),
            ["bearer_token_env_var", "env_http_headers"]
        );
        let refusal = &refusals(
            &stdio(Some(PathBuf::from("/"))).check("s").expect("valid"),
            None,
        )[0];
        assert!(refusal.to_string().contains("trusted = true"), "{refusal}");
    }
}
