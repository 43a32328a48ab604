//! `gatehouse.toml`: the reviewer chain, its limits and each module's
//! configuration.
//!
//! ```toml
//! [review]
//! on_failure = "decline"          # or "defer"
//!
//! [review.limits]
//! deadline_ms = 50
//! memory_bytes = 16777216
//!
//! [[review.modules]]
//! path = "allowlist.wasm"         # relative to this file
//! config = { rules = [{ server = "docs", decision = "accept" }] }
//!
//! [[review.modules]]
//! path = "guardian.wasm"
//! sha256 = "…"                    # optional pin
//! config = { deny = [{ tool = "delete_*" }] }
//!
//! [gateway]                       # `gatehouse serve --listen` (HTTP)
//! bearer_token_env_var = "GATEHOUSE_TOKEN"   # else a random token in .gatehouse/token
//! allowed_origins = ["http://localhost:3000"]
//! max_http_sessions = 64
//!
//! [models.review]                 # a model modules may ask (gatehouse_models)
//! endpoint = "https://api.openai.com/v1"
//! model = "gpt-4o-mini"
//! api_key_env_var = "OPENAI_API_KEY"
//! ```

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use gatehouse_core::config::ReviewConfig;
use gatehouse_core::sandbox::{Sandbox, SandboxBuilder};
use gatehouse_mcp::discovery::{TRUST_FILE_NAME, TrustMode};
use gatehouse_mcp::server_config::{RawServer, ServerConfig, ServerConfigError};

/// Why a config could not be used. Each names the file and the field.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("{}: cannot read the config: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The file is not valid TOML for this schema (the message names the key
    /// and the line).
    #[error("{}: {message}", path.display())]
    Parse {
        /// The file.
        path: PathBuf,
        /// What is wrong, and where.
        message: String,
    },
    /// The file is empty: a save still under way or a file cut short, never
    /// taken in place of a whole one ([`crate::config_file`]).
    #[error(
        "{}: the file is empty (a save still under way?); the last whole version keeps serving. To serve no servers, say so: `mcp_servers = {{}}`",
        path.display()
    )]
    Empty {
        /// The file.
        path: PathBuf,
    },
    /// The file kept changing; it was not read ([`crate::config_file`]).
    #[error(
        "{}: the file kept changing for {waited:?} and was not read; the last whole version keeps serving, and the next change is read once the file is left alone",
        path.display()
    )]
    Unsettled {
        /// The file.
        path: PathBuf,
        /// How long it was waited for.
        waited: std::time::Duration,
    },
    /// An `[mcp_servers.*]` table is invalid.
    #[error("{}: {source}", path.display())]
    Server {
        /// The config file.
        path: PathBuf,
        /// What is wrong, naming the server and the field.
        source: ServerConfigError,
    },
    /// A `[gateway]` key is invalid.
    #[error("{}: [gateway] {field}: {problem}", path.display())]
    Gateway {
        /// The config file.
        path: PathBuf,
        /// The key.
        field: &'static str,
        /// What is wrong and what to write instead.
        problem: String,
    },
    /// A `[models.NAME]` table is invalid.
    #[error("{}: {source}", path.display())]
    Model {
        /// The config file.
        path: PathBuf,
        /// What is wrong, naming the table and the field.
        source: gatehouse_models::ModelConfigError,
    },
    /// The `[traces]` section is invalid.
    #[error("{}: {source}", path.display())]
    Traces {
        /// The config file.
        path: PathBuf,
        /// The field and what is wrong.
        source: gatehouse_telemetry::traces::TracesConfigError,
    },
    /// A `[[review.modules]]` entry names no component, or two, or a
    /// reference that is not one.
    #[error("{}: review.modules[{index}]: {problem}", path.display())]
    Module {
        /// The config file.
        path: PathBuf,
        /// The entry's position.
        index: usize,
        /// What is wrong and what to write.
        problem: String,
    },
}

/// The whole config file.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// The `[review]` section.
    #[serde(default)]
    pub review: ReviewConfig,
    /// The `[mcp_servers.<name>]` tables, as written.
    #[serde(default)]
    pub mcp_servers: BTreeMap<String, RawServer>,
    /// The `[capabilities]` section.
    #[serde(default)]
    pub capabilities: CapabilitiesConfig,
    /// The `[elicitations]` section: routing settings and the audit log.
    #[serde(default)]
    pub elicitations: crate::router::ElicitationSettings,
    /// The `[gateway]` section: the HTTP listener of `gatehouse serve --listen`.
    #[serde(default)]
    pub gateway: GatewayConfig,
    /// The `[models.NAME]` tables: language models modules may ask
    /// ([`gatehouse_models`]).
    #[serde(default)]
    pub models: BTreeMap<String, gatehouse_models::ModelConfig>,
    /// The `[registry]` section: the module store and how registries are
    /// reached ([`gatehouse_registry::config`]).
    #[serde(default)]
    pub registry: gatehouse_registry::config::RegistryConfig,
    /// The `[trust]` section: which keys must have signed which modules
    /// ([`gatehouse_registry::trust`]).
    #[serde(default)]
    pub trust: gatehouse_registry::trust::TrustConfig,
    /// The `[console]` section: the approvals console
    /// ([`gatehouse_console::config`]). Present, it sends the questions
    /// `[elicitations] person` routes to the console there.
    #[serde(default)]
    pub console: Option<gatehouse_console::config::ConsoleConfig>,
    /// The `[telemetry]` section: the operator address
    /// ([`gatehouse_telemetry::endpoint`]). Present, every instance on this
    /// config reports its metrics to the config's console process, which
    /// serves their sum there, never reset when an instance ends.
    #[serde(default)]
    pub telemetry: Option<gatehouse_telemetry::endpoint::EndpointConfig>,
    /// The `[traces]` section: the OTLP collector spans go to
    /// ([`gatehouse_telemetry::traces`]). Absent, no span is exported. Read
    /// when `gatehouse serve` starts.
    #[serde(default)]
    pub traces: Option<gatehouse_telemetry::traces::TracesConfig>,
    /// The file the config was read from (for relative paths and errors).
    #[serde(skip)]
    pub origin: PathBuf,
}

impl Config {
    /// Reads and parses a config file.
    pub fn load(path: impl AsRef<Path>) -> Result<Config, ConfigError> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        Config::parse(&text, path)
    }

    /// Parses config text; `origin` names it in errors and anchors relative
    /// module paths.
    pub fn parse(text: &str, origin: &Path) -> Result<Config, ConfigError> {
        let mut config: Config = toml::from_str(text).map_err(|error| ConfigError::Parse {
            path: origin.to_path_buf(),
            message: error.to_string().trim_end().to_owned(),
        })?;
        config.origin = origin.to_path_buf();
        config.servers()?;
        config
            .gateway
            .check(&config.mcp_servers)
            .map_err(|(field, problem)| ConfigError::Gateway {
                path: origin.to_path_buf(),
                field,
                problem,
            })?;
        if let Some(traces) = &config.traces {
            traces.traces_url().map_err(|source| ConfigError::Traces {
                path: origin.to_path_buf(),
                source,
            })?;
        }
        for (name, model) in &config.models {
            model.check(name).map_err(|source| ConfigError::Model {
                path: origin.to_path_buf(),
                source,
            })?;
        }
        for (index, module) in config.review.modules.iter().enumerate() {
            if module.mode == gatehouse_core::config::ModuleMode::Shadow && module.model.is_some() {
                return Err(ConfigError::Module {
                    path: origin.to_path_buf(),
                    index,
                    problem: "a shadow module cannot be granted a model yet (its calls would spend outside the bounds on model spend); remove `model` or make it live".to_owned(),
                });
            }
            if module.oci.is_some() && module.sha256.is_some() {
                return Err(ConfigError::Module {
                    path: origin.to_path_buf(),
                    index,
                    problem: "`sha256` pins a file; an `oci` module runs the digest gatehouse.lock names (pin it in the reference instead: `oci = \"HOST/REPO@sha256:…\"`)".to_owned(),
                });
            }
            let problem = match module.source() {
                Err(err) => err.to_string(),
                Ok(gatehouse_core::config::ModuleSource::Oci(reference)) => {
                    match reference.parse::<gatehouse_registry::ModuleRef>() {
                        Err(err) => format!("oci: {err}"),
                        Ok(_) => continue,
                    }
                }
                Ok(gatehouse_core::config::ModuleSource::File(_)) => continue,
            };
            return Err(ConfigError::Module {
                path: origin.to_path_buf(),
                index,
                problem,
            });
        }
        Ok(config)
    }

    /// The checked `[mcp_servers]`, in name order. Relative `cwd`s are
    /// resolved against the config file's directory.
    pub fn servers(&self) -> Result<Vec<ServerConfig>, ConfigError> {
        self.mcp_servers
            .iter()
            .map(|(name, raw)| {
                let mut raw = raw.clone();
                if let Some(cwd) = raw.cwd.as_mut().filter(|cwd| cwd.is_relative()) {
                    *cwd = self.base_dir().join(&*cwd);
                }
                raw.check(name).map_err(|source| ConfigError::Server {
                    path: self.origin.clone(),
                    source,
                })
            })
            .collect()
    }

    /// `gatehouse.lock`, beside the config: the digests its `oci` modules
    /// run at.
    pub fn lock_path(&self) -> PathBuf {
        gatehouse_registry::lock::Lock::path_beside(&self.origin)
    }

    /// The module store ([`gatehouse_registry::config::RegistryConfig::store_dir`]).
    pub fn store_dir(&self) -> PathBuf {
        self.registry.store_dir(self.base_dir())
    }

    /// The directory relative module paths are resolved against.
    pub fn base_dir(&self) -> &Path {
        self.origin.parent().unwrap_or(Path::new("."))
    }
}

/// `[capabilities]`: where plugin folders with MCP servers are discovered,
/// and whether what is found there needs the operator's trust to run.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CapabilitiesConfig {
    /// Capability roots, relative to the config file.
    #[serde(default)]
    pub roots: Vec<RootConfig>,
    /// Restricted mode: roots outside these directories are skipped.
    #[serde(default)]
    pub allowed_dirs: Option<Vec<PathBuf>>,
    /// `"ask"` (the default): a discovered server runs only once
    /// `gatehouse plugins trust` recorded its manifest's sha256 in the trust
    /// file ([`Config::trust_file`]); `"all"`: every discovered server runs,
    /// for roots only the operator can write to.
    #[serde(default)]
    pub trust: TrustMode,
}

/// `[gateway]`: who may use the HTTP listener of `gatehouse serve --listen`
/// ([`crate::http`]).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GatewayConfig {
    /// The environment variable holding the bearer token clients must send.
    /// Unset here: gatehouse makes a random token at every start and writes
    /// it to `.gatehouse/token` beside this file. Required for a bind
    /// address other than loopback.
    #[serde(default)]
    pub bearer_token_env_var: Option<String>,
    /// Browser origins allowed to call (exact, like `http://localhost:3000`);
    /// a request with any other `Origin` header is refused with 403. Requests
    /// without an `Origin` (non-browser clients) are not affected. Stored
    /// lowercased.
    #[serde(default)]
    pub allowed_origins: Vec<String>,
    /// HTTP sessions open at once; more `initialize` requests are refused
    /// with 503 until one is closed (DELETE) or expires.
    #[serde(default = "default_max_http_sessions")]
    pub max_http_sessions: usize,
    /// Requests one upstream session may have in flight at once; more are
    /// refused with a JSON-RPC error.
    #[serde(default = "default_max_calls_per_session")]
    pub max_calls_per_session: usize,
    /// Questions that may wait for one session's person at once; more get
    /// `on_unhandled`, audited with why.
    #[serde(default = "default_max_pending_per_session")]
    pub max_pending_per_session: usize,
}

fn default_max_calls_per_session() -> usize {
    crate::DEFAULT_MAX_CALLS_PER_SESSION
}

fn default_max_pending_per_session() -> usize {
    crate::DEFAULT_MAX_PENDING_PER_SESSION
}

fn default_max_http_sessions() -> usize {
    crate::http::DEFAULT_MAX_SESSIONS
}

impl Default for GatewayConfig {
    fn default() -> Self {
        GatewayConfig {
            bearer_token_env_var: None,
            allowed_origins: Vec::new(),
            max_http_sessions: default_max_http_sessions(),
            max_calls_per_session: default_max_calls_per_session(),
            max_pending_per_session: default_max_pending_per_session(),
        }
    }
}

impl GatewayConfig {
    /// Checks the keys and normalises the origins; an error names the key
    /// and says what to write. The token's variable must not be one that
    /// `servers` pass on to a server, or the gateway's token would reach it.
    fn check(
        &mut self,
        servers: &BTreeMap<String, RawServer>,
    ) -> Result<(), (&'static str, String)> {
        if let Some(name) = &self.bearer_token_env_var {
            if name.is_empty() || name.contains(['=', '\0']) {
                return Err((
                    "bearer_token_env_var",
                    format!(
                        "{name:?} is not an environment variable name; write the name of the variable that holds the token, e.g. \"GATEHOUSE_TOKEN\""
                    ),
                ));
            }
            for (server, raw) in servers {
                let passed_on = if raw.env_vars.contains(name) {
                    Some("env_vars")
                } else if raw.bearer_token_env_var.as_ref() == Some(name) {
                    Some("bearer_token_env_var")
                } else if raw.env_http_headers.values().any(|var| var == name) {
                    Some("env_http_headers")
                } else {
                    None
                };
                if let Some(key) = passed_on {
                    return Err((
                        "bearer_token_env_var",
                        format!(
                            "mcp_servers.{server} passes {name} on to its server (`{key}`), so the gateway's token would reach it; give the gateway a variable of its own"
                        ),
                    ));
                }
            }
        }
        for origin in &mut self.allowed_origins {
            *origin = crate::http::parse_origin(origin)
                .map_err(|problem| ("allowed_origins", problem))?;
        }
        if self.max_http_sessions == 0 {
            return Err((
                "max_http_sessions",
                "must be at least 1 (the default is 64)".to_owned(),
            ));
        }
        Ok(())
    }
}

/// One configured capability root.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RootConfig {
    /// Its id (duplicates: the first wins).
    pub id: String,
    /// The directory.
    pub path: PathBuf,
    /// Whether its servers may pass gatehouse's environment through
    /// (`env_vars`, `bearer_token_env_var`, `env_http_headers`), set a `cwd`
    /// outside it and be `required` (default false: such entries are
    /// refused). Only for a root the operator alone can write to.
    #[serde(default)]
    pub trusted: bool,
}

impl Config {
    /// The sandbox this config's chain runs in, as `gatehouse serve` builds
    /// it: `[review.limits]` with room for every module's own limits, and
    /// the compile cache ([`Config::compile_cache_dir`]) bounded by
    /// `[review] compile_cache_max_bytes`. The conformance kit that checks
    /// a module before a swap is built from it too, so what the kit compiles
    /// the swap finds compiled.
    ///
    /// ```
    /// use gatehouse_gateway::config::Config;
    ///
    /// let dir = tempfile::tempdir()?;
    /// let file = dir.path().join("gatehouse.toml");
    /// std::fs::write(&file, "[review]\ncompile_cache_max_bytes = 4096\n")?;
    /// let config = Config::load(&file)?;
    /// let sandbox = config.sandbox_builder().build()?;
    /// assert_eq!(
    ///     sandbox.compile_cache_dir(),
    ///     Some(dir.path().join(".gatehouse/compiled").as_path())
    /// );
    /// assert_eq!(sandbox.compile_cache_max_bytes(), Some(4096));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn sandbox_builder(&self) -> SandboxBuilder {
        Sandbox::builder()
            .limits(self.review.to_limits())
            .compile_cache(self.compile_cache_dir())
            .compile_cache_max_bytes(self.review.compile_cache_max_bytes())
    }

    /// The compiled-module cache directory.
    pub fn compile_cache_dir(&self) -> PathBuf {
        self.base_dir().join(
            self.review
                .compile_cache
                .clone()
                .unwrap_or_else(|| PathBuf::from(".gatehouse/compiled")),
        )
    }

    /// The audit log file (`[elicitations] audit_log`, relative to this
    /// file; default `gatehouse-audit.jsonl`).
    pub fn audit_log_path(&self) -> PathBuf {
        self.base_dir().join(
            self.elicitations
                .audit_log
                .clone()
                .unwrap_or_else(|| PathBuf::from("gatehouse-audit.jsonl")),
        )
    }

    /// The directory of the control sockets of the instances serving this
    /// config, one `<instance>.sock` each (a directory only this user may
    /// enter; see [`crate::control`]).
    pub fn control_dir(&self) -> PathBuf {
        self.base_dir().join(".gatehouse/control")
    }

    /// The control socket of instance `instance` ([`crate::instance`]),
    /// which `gatehouse reload` talks to.
    pub fn control_socket(&self, instance: &str) -> PathBuf {
        self.control_dir().join(format!("{instance}.sock"))
    }

    /// The trust file of discovered servers (`gatehouse-trust.toml` beside
    /// this file; see [`TrustStore`](gatehouse_mcp::discovery::TrustStore)).
    pub fn trust_file(&self) -> PathBuf {
        self.base_dir().join(TRUST_FILE_NAME)
    }

    /// Where `gatehouse serve --listen` writes the token it makes when
    /// `[gateway] bearer_token_env_var` is not set (0600, in the same
    /// private directory as the control socket).
    pub fn token_file(&self) -> PathBuf {
        self.base_dir().join(".gatehouse/token")
    }

    /// The approvals console's socket, which every instance serving this
    /// config attaches to (`.gatehouse/console.sock` beside this file).
    pub fn console_socket(&self) -> PathBuf {
        self.base_dir().join(".gatehouse/console.sock")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_name_the_file_and_the_key() {
        let text = "[review]\non_failure = \"explode\"\n";
        let error = Config::parse(text, Path::new("conf/gatehouse.toml")).unwrap_err();
        let message = error.to_string();
        assert!(message.starts_with("conf/gatehouse.toml:"), "{message}");
        assert!(message.contains("on_failure"), "{message}");
    }

    #[test]
    fn module_entries_name_exactly_one_component_and_pin_it_their_way() {
        for (entry, says) in [
            ("name = \"x\"", "name the component"),
            (
                "path = \"a.wasm\"\noci = \"localhost:5000/a:1\"",
                "both name the component",
            ),
            ("oci = \"team/guardian:1\"", "name the registry host"),
            (
                "oci = \"localhost:5000/a:1\"\nsha256 = \"00\"",
                "runs the digest gatehouse.lock names",
            ),
            (
                "oci = \"localhost:5000/a:1\"\nmode = \"shadow\"\nmodel = \"m\"",
                "shadow module cannot be granted a model",
            ),
        ] {
            let text = format!("[[review.modules]]\n{entry}\n");
            let message = Config::parse(&text, Path::new("g.toml"))
                .expect_err(says)
                .to_string();
            assert!(
                message.starts_with("g.toml: review.modules[0]: ") && message.contains(says),
                "{says}: {message}"
            );
        }
        let config = Config::parse(
            "[[review.modules]]\noci = \"localhost:5000/a:1\"\nmode = \"shadow\"\n",
            Path::new("/etc/gatehouse/g.toml"),
        )
        .expect("an oci shadow module");
        assert_eq!(
            config.lock_path(),
            Path::new("/etc/gatehouse/gatehouse.lock")
        );
    }

    #[test]
    fn module_config_tables_become_json() {
        let text = r#"
            [[review.modules]]
            path = "g.wasm"
            config = { deny = [{ tool = "delete_*" }], default = "allow" }
        "#;
        let config = Config::parse(text, Path::new("/etc/gatehouse.toml")).unwrap();
        let json: serde_json::Value =
            serde_json::from_str(&config.review.modules[0].config_json()).unwrap();
        assert_eq!(json["deny"][0]["tool"], "delete_*");
        assert_eq!(config.base_dir(), Path::new("/etc"));
    }

    #[test]
    fn server_errors_name_the_file_server_and_field() {
        let text = "[mcp_servers.both]\ncommand = \"x\"\nurl = \"http://y\"\n";
        let error = Config::parse(text, Path::new("g.toml")).unwrap_err();
        assert_eq!(
            error.to_string(),
            "g.toml: mcp_servers.both: `command` and `url` cannot both be set; a server is either stdio (`command`) or HTTP (`url`)"
        );
        let text = "[mcp_servers.ok]\ncommand = \"x\"\ncwd = \"sub\"\n";
        let servers = Config::parse(text, Path::new("/etc/g.toml"))
            .unwrap()
            .servers()
            .unwrap();
        assert!(matches!(
            &servers[0].transport,
            gatehouse_mcp::server_config::Transport::Stdio { cwd: Some(cwd), .. } if cwd == Path::new("/etc/sub")
        ));
    }

    #[test]
    fn limits_fill_in_defaults() {
        let text = "[review.limits]\ndeadline_ms = 20\n";
        let limits = Config::parse(text, Path::new("g.toml"))
            .unwrap()
            .review
            .limits
            .to_limits();
        assert_eq!(limits.deadline(), std::time::Duration::from_millis(20));
        assert_eq!(
            limits.memory_bytes(),
            gatehouse_core::sandbox::Limits::default().memory_bytes()
        );
    }

    #[test]
    fn capability_trust_defaults_to_ask_and_roots_to_untrusted() {
        let defaulted = Config::parse(
            "[capabilities]\nroots = [{ id = \"p\", path = \"plugins\" }]\n",
            Path::new("/etc/g.toml"),
        )
        .expect("parses");
        assert_eq!(defaulted.capabilities.trust, TrustMode::Ask);
        assert!(!defaulted.capabilities.roots[0].trusted);
        assert_eq!(
            defaulted.trust_file(),
            Path::new("/etc/gatehouse-trust.toml")
        );
        let set = Config::parse(
            "[capabilities]\ntrust = \"all\"\nroots = [{ id = \"p\", path = \"p\", trusted = true }]\n",
            Path::new("g.toml"),
        )
        .expect("parses");
        assert_eq!(set.capabilities.trust, TrustMode::All);
        assert!(set.capabilities.roots[0].trusted);
        let message = Config::parse("[capabilities]\ntrust = \"some\"\n", Path::new("g.toml"))
            .unwrap_err()
            .to_string();
        assert!(message.starts_with("g.toml:"), "{message}");
        assert!(message.contains("trust"), "{message}");
        assert!(message.contains("ask"), "{message}");
    }

    #[test]
    fn the_gateway_section_defaults_checks_and_names_the_key() {
        let defaulted = Config::parse("", Path::new("/etc/g.toml")).expect("parses");
        assert_eq!(defaulted.gateway.bearer_token_env_var, None);
        assert!(defaulted.gateway.allowed_origins.is_empty());
        assert_eq!(
            defaulted.gateway.max_http_sessions,
            crate::http::DEFAULT_MAX_SESSIONS
        );
        assert_eq!(defaulted.token_file(), Path::new("/etc/.gatehouse/token"));
        let text = "[gateway]\nbearer_token_env_var = \"GH_TOKEN\"\nallowed_origins = [\"http://LocalHost:3000\"]\nmax_http_sessions = 2\n";
        let config = Config::parse(text, Path::new("g.toml")).expect("parses");
        assert_eq!(
            config.gateway.bearer_token_env_var.as_deref(),
            Some("GH_TOKEN")
        );
        assert_eq!(config.gateway.allowed_origins, ["http://localhost:3000"]);
        assert_eq!(config.gateway.max_http_sessions, 2);
        for (text, field) in [
            (
                "allowed_origins = [\"http://localhost:3000/\"]",
                "allowed_origins",
            ),
            ("allowed_origins = [\"*\"]", "allowed_origins"),
            ("max_http_sessions = 0", "max_http_sessions"),
            ("bearer_token_env_var = \"\"", "bearer_token_env_var"),
            ("bearer_token = \"x\"", "bearer_token"),
            (
                "bearer_token_env_var = \"SHARED\"\n[mcp_servers.up]\ncommand = \"x\"\nenv_vars = [\"SHARED\"]",
                "mcp_servers.up passes SHARED on",
            ),
            (
                "bearer_token_env_var = \"SHARED\"\n[mcp_servers.up]\nurl = \"http://u\"\nbearer_token_env_var = \"SHARED\"",
                "mcp_servers.up passes SHARED on",
            ),
        ] {
            let message = Config::parse(&format!("[gateway]\n{text}\n"), Path::new("g.toml"))
                .expect_err(text)
                .to_string();
            assert!(message.starts_with("g.toml:"), "{message}");
            assert!(message.contains(field), "{text}: {message}");
        }
    }

    #[test]
    fn audit_sync_takes_three_values_and_names_the_field_otherwise() {
        use gatehouse_audit::AuditSync;
        let parse = |value: &str| {
            Config::parse(
                &format!("[elicitations]\naudit_sync = {value}\n"),
                Path::new("g.toml"),
            )
        };
        for mode in AuditSync::ALL {
            let config = parse(&format!("{:?}", mode.name())).expect("parses");
            assert_eq!(config.elicitations.audit_sync, mode);
        }
        let defaulted = Config::parse("", Path::new("g.toml")).expect("parses");
        assert_eq!(defaulted.elicitations.audit_sync, AuditSync::Batch);
        for wrong in ["\"sometimes\"", "\"ALWAYS\"", "\"\"", "1", "true"] {
            let message = parse(wrong).unwrap_err().to_string();
            assert!(message.starts_with("g.toml:"), "{message}");
            assert!(message.contains("audit_sync"), "{wrong}: {message}");
            assert!(message.contains("\"batch\""), "{wrong}: {message}");
        }
    }

    #[test]
    fn models_tables_parse_with_defaults_and_refuse_unknown_keys() {
        use gatehouse_models::ModelConfig;
        use std::path::Path;
        use std::time::Duration;
        let text = "[models.review]\nendpoint = \"http://localhost:11434/v1\"\nmodel = \"llama3.2\"\n\n[models.strict]\nendpoint = \"https://api.openai.com/v1\"\nmodel = \"gpt-4o-mini\"\napi_key_env_var = \"OPENAI_API_KEY\"\ntimeout_sec = 30\nmax_attempts = 1\nmax_output_tokens = 800\ntemperature = 0\naudit_prompts = true\njson_schema = false\n";
        let config = Config::parse(text, Path::new("g.toml")).expect("parses");
        let review = &config.models["review"];
        assert_eq!(
            review,
            &ModelConfig::new("http://localhost:11434/v1", "llama3.2")
        );
        assert_eq!(review.timeout_sec, 90.0);
        assert_eq!(review.max_attempts, 3);
        assert!(review.json_schema && !review.audit_prompts);
        let strict = &config.models["strict"];
        assert_eq!(strict.timeout(), Duration::from_secs(30));
        assert_eq!(strict.max_attempts, 1);
        assert_eq!(strict.max_output_tokens, Some(800));
        assert_eq!(strict.temperature, Some(0.0));
        assert!(strict.audit_prompts && !strict.json_schema);
        for (text, expected) in [
            (
                "[models.review]\nendpoint = \"https://a/v1\"\nmodel = \"m\"\napi_key = \"sk-x\"\n",
                "api_key",
            ),
            (
                "[models.review]\nendpoint = \"https://a/v1\"\n",
                "[models.review] model: missing",
            ),
            (
                "[models.review]\nendpoint = \"gopher://a\"\nmodel = \"m\"\n",
                "[models.review] endpoint:",
            ),
            (
                "[models.review]\nendpoint = \"https://a/v1\"\nmodel = \"m\"\nmax_attempts = 0\n",
                "[models.review] max_attempts:",
            ),
        ] {
            let message = Config::parse(text, Path::new("g.toml"))
                .expect_err(text)
                .to_string();
            assert!(message.starts_with("g.toml:"), "{message}");
            assert!(message.contains(expected), "{expected}\n{message}");
        }
    }
}
