//! MCP server configuration, compatible with Codex's `[mcp_servers.<name>]`
//! tables: a raw form as written in TOML or `.mcp.json`, checked into
//! [`ServerConfig`] with errors that name the server and the field.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// The default time a server has to start and answer `initialize`.
pub const DEFAULT_STARTUP_TIMEOUT: Duration = Duration::from_secs(30);
/// The default time a tool call may take.
pub const DEFAULT_TOOL_TIMEOUT: Duration = Duration::from_secs(300);

/// A server table as written. Every field is optional here; [`RawServer::check`]
/// decides what is valid. It serializes back to the same table, leaving out
/// what is unset or empty (`gatehouse init` writes imported servers so).
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RawServer {
    /// stdio: the program to start.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
    /// stdio: its arguments.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub args: Vec<String>,
    /// stdio: environment variables to set.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
    /// stdio: host environment variables to pass through.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub env_vars: Vec<String>,
    /// stdio: the working directory.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cwd: Option<PathBuf>,
    /// HTTP: the streamable HTTP endpoint.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// HTTP: the environment variable holding a bearer token.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bearer_token_env_var: Option<String>,
    /// HTTP: headers to send.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub http_headers: BTreeMap<String, String>,
    /// HTTP: headers whose values come from environment variables.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env_http_headers: BTreeMap<String, String>,
    /// `.mcp.json` only: `"stdio"`, `"http"` or `"streamable-http"`.
    #[serde(default, rename = "type", skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// `.mcp.json` only: HTTP headers (Claude's spelling).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub headers: BTreeMap<String, String>,
    /// Seconds to start (default 30). Fractions allowed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub startup_timeout_sec: Option<f64>,
    /// Seconds a tool call may take (default 300).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_timeout_sec: Option<f64>,
    /// Whether to start it (default true).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
    /// Whether failing to start fails the whole runtime (default false).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub required: Option<bool>,
    /// Only these tools (applied first).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub enabled_tools: Option<Vec<String>>,
    /// Not these tools.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub disabled_tools: Vec<String>,
    /// Codex's default approval mode for the server's tools.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub default_tools_approval_mode: Option<ApprovalMode>,
    /// gatehouse's own: which MCP protocol to speak (see [`Lifecycle`]);
    /// `"2026-07-28"`, `"auto"`, or a dated version with the `initialize`
    /// handshake. Default: the `initialize` handshake at the newest version
    /// the server accepts.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub protocol_version: Option<String>,
}

/// How a connection starts and which protocol it speaks.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Lifecycle {
    /// The `initialize` handshake; the server picks the newest version it
    /// has up to `2025-11-25` (Codex's behaviour, and the default).
    #[default]
    Initialize,
    /// The `initialize` handshake asking for exactly this version.
    Pinned(String),
    /// `server/discover` and protocol `2026-07-28`: no server-to-client
    /// requests; elicitations arrive as input requests inside tool results.
    Discover,
    /// Try `server/discover` first; fall back to `initialize` when the
    /// server is older (it may take up to 10 s to find out).
    Auto,
}

/// The protocol version that replaced the handshake with `server/discover`.
pub const DISCOVER_PROTOCOL_VERSION: &str = "2026-07-28";

/// Codex's `default_tools_approval_mode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ApprovalMode {
    /// Decide automatically.
    Auto,
    /// Ask.
    Prompt,
    /// Approve.
    Approve,
}

/// How to reach a server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Transport {
    /// A child process speaking MCP on stdin/stdout.
    Stdio {
        /// The program.
        command: String,
        /// Its arguments.
        args: Vec<String>,
        /// Variables to set.
        env: BTreeMap<String, String>,
        /// Host variables to pass through.
        env_vars: Vec<String>,
        /// Working directory.
        cwd: Option<PathBuf>,
    },
    /// Streamable HTTP.
    Http {
        /// The endpoint.
        url: String,
        /// The variable holding a bearer token.
        bearer_token_env_var: Option<String>,
        /// Headers to send.
        headers: BTreeMap<String, String>,
        /// Headers from environment variables (header → variable).
        env_headers: BTreeMap<String, String>,
    },
}

/// A checked server configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct ServerConfig {
    /// The server's name (`^[a-zA-Z0-9_-]+$`).
    pub name: String,
    /// How to reach it.
    pub transport: Transport,
    /// Time to start.
    pub startup_timeout: Duration,
    /// Time per tool call.
    pub tool_timeout: Duration,
    /// Whether to start it.
    pub enabled: bool,
    /// Whether its failure fails start-up.
    pub required: bool,
    /// Only these tools, if set.
    pub enabled_tools: Option<Vec<String>>,
    /// Not these tools.
    pub disabled_tools: Vec<String>,
    /// Codex's default approval mode.
    pub default_tools_approval_mode: Option<ApprovalMode>,
    /// How to start the connection (`protocol_version`).
    pub lifecycle: Lifecycle,
}

impl ServerConfig {
    /// Whether the server exposes `tool` after `enabled_tools` (first) and
    /// `disabled_tools`.
    ///
    /// ```
    /// use gatehouse_mcp::server_config::RawServer;
    /// let raw = RawServer {
    ///     command: Some("srv".into()),
    ///     enabled_tools: Some(vec!["a".into(), "b".into()]),
    ///     disabled_tools: vec!["b".into()],
    ///     ..RawServer::default()
    /// };
    /// let server = raw.check("s").unwrap();
    /// assert!(server.exposes("a") && !server.exposes("b") && !server.exposes("c"));
    /// ```
    pub fn exposes(&self, tool: &str) -> bool {
        self.enabled_tools
            .as_ref()
            .is_none_or(|enabled| enabled.iter().any(|name| name == tool))
            && !self.disabled_tools.iter().any(|name| name == tool)
    }
}

/// Why a server table is invalid. Each names the server and the field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ServerConfigError {
    /// The name has characters outside `[a-zA-Z0-9_-]`, or is empty.
    #[error("mcp_servers.{0}: server names may use only letters, digits, `_` and `-`")]
    BadName(String),
    /// Both `command` and an HTTP field are set.
    #[error(
        "mcp_servers.{server}: `command` and `{field}` cannot both be set; a server is either stdio (`command`) or HTTP (`url`)"
    )]
    BothTransports {
        /// The server.
        server: String,
        /// The HTTP field found.
        field: &'static str,
    },
    /// Neither `command` nor `url` is set.
    #[error("mcp_servers.{0}: invalid transport: set `command` (stdio) or `url` (streamable HTTP)")]
    NoTransport(String),
    /// A field has a bad value.
    #[error("mcp_servers.{server}.{field}: {message}")]
    BadValue {
        /// The server.
        server: String,
        /// The field.
        field: &'static str,
        /// What is wrong.
        message: String,
    },
}

/// Whether `name` is a valid server name.
pub fn is_valid_server_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .bytes()
            .all(|byte| byte.is_ascii_alphanumeric() || byte == b'_' || byte == b'-')
}

impl RawServer {
    /// The keys a server table may have, as written (`type` included): what
    /// serde's derive gives the deserializer, so the list cannot drift from
    /// the struct. `gatehouse init` uses it to tell the fields it carries from
    /// a client's config from those it reports as not carried.
    ///
    /// ```
    /// use gatehouse_mcp::server_config::RawServer;
    /// assert!(RawServer::field_names().contains(&"bearer_token_env_var"));
    /// assert!(RawServer::field_names().contains(&"type"));
    /// assert!(!RawServer::field_names().contains(&"oauth"));
    /// ```
    pub fn field_names() -> &'static [&'static str] {
        let mut probe = FieldProbe(&[]);
        // The probe always ends in an error, after recording the names.
        let _ = RawServer::deserialize(&mut probe);
        probe.0
    }

    /// Checks the table of server `name`.
    pub fn check(&self, name: &str) -> Result<ServerConfig, ServerConfigError> {
        if !is_valid_server_name(name) {
            return Err(ServerConfigError::BadName(name.to_owned()));
        }
        let bad = |field: &'static str, message: String| ServerConfigError::BadValue {
            server: name.to_owned(),
            field,
            message,
        };
        let http_field = [
            ("url", self.url.is_some()),
            ("bearer_token_env_var", self.bearer_token_env_var.is_some()),
            ("http_headers", !self.http_headers.is_empty()),
            ("env_http_headers", !self.env_http_headers.is_empty()),
            ("headers", !self.headers.is_empty()),
        ]
        .into_iter()
        .find_map(|(field, set)| set.then_some(field));
        let transport = match (&self.command, http_field) {
            (Some(_), Some(field)) => {
                return Err(ServerConfigError::BothTransports {
                    server: name.to_owned(),
                    field,
                });
            }
            (Some(command), None) => {
                if command.trim().is_empty() {
                    return Err(bad("command", "must not be empty".to_owned()));
                }
                Transport::Stdio {
                    command: command.clone(),
                    args: self.args.clone(),
                    env: self.env.clone(),
                    env_vars: self.env_vars.clone(),
                    cwd: self.cwd.clone(),
                }
            }
            (None, Some(_)) => {
                let url = self
                    .url
                    .clone()
                    .ok_or_else(|| ServerConfigError::NoTransport(name.to_owned()))?;
                if !(url.starts_with("http://") || url.starts_with("https://")) {
                    return Err(bad(
                        "url",
                        format!("{url:?} is not an http:// or https:// URL"),
                    ));
                }
                let mut headers = self.http_headers.clone();
                headers.extend(self.headers.clone());
                Transport::Http {
                    url,
                    bearer_token_env_var: self.bearer_token_env_var.clone(),
                    headers,
                    env_headers: self.env_http_headers.clone(),
                }
            }
            (None, None) => return Err(ServerConfigError::NoTransport(name.to_owned())),
        };
        if let Some(kind) = &self.kind {
            let matches = match kind.as_str() {
                "stdio" => matches!(transport, Transport::Stdio { .. }),
                "http" | "streamable-http" | "streamableHttp" => {
                    matches!(transport, Transport::Http { .. })
                }
                _ => false,
            };
            if !matches {
                return Err(bad(
                    "type",
                    format!("{kind:?} does not match the fields set"),
                ));
            }
        }
        let seconds = |field: &'static str, value: Option<f64>, default: Duration| match value {
            None => Ok(default),
            Some(secs) if secs.is_finite() && secs > 0.0 => Duration::try_from_secs_f64(secs)
                .map_err(|_| {
                    bad(
                        field,
                        format!("{secs} seconds is too long; use at most {}", u64::MAX),
                    )
                }),
            Some(secs) => Err(bad(
                field,
                format!("{secs} is not a positive number of seconds"),
            )),
        };
        let lifecycle = match self.protocol_version.as_deref() {
            None => Lifecycle::Initialize,
            Some("auto") => Lifecycle::Auto,
            Some(DISCOVER_PROTOCOL_VERSION) => Lifecycle::Discover,
            Some(version @ ("2024-11-05" | "2025-03-26" | "2025-06-18" | "2025-11-25")) => {
                Lifecycle::Pinned(version.to_owned())
            }
            Some(other) => {
                return Err(bad(
                    "protocol_version",
                    format!(
                        "{other:?} is not a protocol version gatehouse speaks; use \"2026-07-28\", \"2025-11-25\", \"2025-06-18\" or \"auto\""
                    ),
                ));
            }
        };
        Ok(ServerConfig {
            name: name.to_owned(),
            transport,
            startup_timeout: seconds(
                "startup_timeout_sec",
                self.startup_timeout_sec,
                DEFAULT_STARTUP_TIMEOUT,
            )?,
            tool_timeout: seconds(
                "tool_timeout_sec",
                self.tool_timeout_sec,
                DEFAULT_TOOL_TIMEOUT,
            )?,
            enabled: self.enabled.unwrap_or(true),
            required: self.required.unwrap_or(false),
            enabled_tools: self.enabled_tools.clone(),
            disabled_tools: self.disabled_tools.clone(),
            default_tools_approval_mode: self.default_tools_approval_mode,
            lifecycle,
        })
    }
}

/// A deserializer that records the field names a derived `Deserialize`
/// asks for, then stops ([`RawServer::field_names`]).
struct FieldProbe(&'static [&'static str]);

impl<'de> serde::Deserializer<'de> for &mut FieldProbe {
    type Error = serde::de::value::Error;

    fn deserialize_any<V: serde::de::Visitor<'de>>(self, _: V) -> Result<V::Value, Self::Error> {
        Err(serde::de::Error::custom("only structs are probed"))
    }

    fn deserialize_struct<V: serde::de::Visitor<'de>>(
        self,
        _: &'static str,
        fields: &'static [&'static str],
        _: V,
    ) -> Result<V::Value, Self::Error> {
        self.0 = fields;
        Err(serde::de::Error::custom("probed"))
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string
        bytes byte_buf option unit unit_struct newtype_struct seq tuple
        tuple_struct map enum identifier ignored_any
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(toml_text: &str) -> RawServer {
        toml::from_str(toml_text).expect("valid TOML")
    }

    #[test]
    fn stdio_and_http_tables_check() {
        let stdio = parse("command = \"srv\"\nargs = [\"--x\"]\nstartup_timeout_sec = 2.5\n")
            .check("files")
            .expect("valid");
        assert!(
            matches!(stdio.transport, Transport::Stdio { ref command, .. } if command == "srv")
        );
        assert_eq!(stdio.startup_timeout, Duration::from_millis(2500));
        assert_eq!(stdio.tool_timeout, DEFAULT_TOOL_TIMEOUT);
        let http = parse("url = \"http://127.0.0.1:9/mcp\"\nhttp_headers = { X = \"1\" }\n")
            .check("web")
            .expect("valid");
        assert!(matches!(http.transport, Transport::Http { .. }));
    }

    #[test]
    fn a_timeout_too_long_to_represent_is_an_error_not_a_panic() {
        let error = parse("command = \"srv\"\nstartup_timeout_sec = 1e300\n")
            .check("huge")
            .expect_err("refused");
        assert!(error.to_string().contains("startup_timeout_sec"), "{error}");
        assert!(error.to_string().contains("too long"), "{error}");
    }

    #[test]
    fn errors_name_the_server_and_the_field() {
        let both = parse("command = \"a\"\nurl = \"http://x\"\n")
            .check("dual")
            .unwrap_err();
        assert_eq!(
            both.to_string(),
            "mcp_servers.dual: `command` and `url` cannot both be set; a server is either stdio (`command`) or HTTP (`url`)"
        );
        let neither = parse("args = []\n").check("empty").unwrap_err();
        assert!(
            neither
                .to_string()
                .contains("mcp_servers.empty: invalid transport")
        );
        let name = parse("command = \"a\"\n").check("bad name").unwrap_err();
        assert_eq!(name, ServerConfigError::BadName("bad name".into()));
        let timeout = parse("command = \"a\"\nstartup_timeout_sec = -1\n")
            .check("t")
            .unwrap_err();
        assert!(
            timeout
                .to_string()
                .starts_with("mcp_servers.t.startup_timeout_sec:")
        );
        let scheme = parse("url = \"ftp://x\"\n").check("f").unwrap_err();
        assert!(scheme.to_string().starts_with("mcp_servers.f.url:"));
    }

    #[test]
    fn protocol_version_selects_the_lifecycle() {
        let lifecycle = |value: &str| {
            parse(&format!("command = \"a\"\nprotocol_version = {value:?}\n")).check("p")
        };
        assert_eq!(
            parse("command = \"a\"\n").check("p").map(|s| s.lifecycle),
            Ok(Lifecycle::Initialize)
        );
        assert_eq!(
            lifecycle("2026-07-28").map(|s| s.lifecycle),
            Ok(Lifecycle::Discover)
        );
        assert_eq!(lifecycle("auto").map(|s| s.lifecycle), Ok(Lifecycle::Auto));
        assert_eq!(
            lifecycle("2025-06-18").map(|s| s.lifecycle),
            Ok(Lifecycle::Pinned("2025-06-18".to_owned()))
        );
        let error = lifecycle("2027-01-01").unwrap_err().to_string();
        assert!(
            error.starts_with("mcp_servers.p.protocol_version: \"2027-01-01\""),
            "{error}"
        );
    }

    #[test]
    fn field_names_are_every_key_a_table_may_have() {
        let names = RawServer::field_names();
        assert_eq!(names.len(), 19, "{names:?}");
        for name in names {
            let error = toml::from_str::<RawServer>(&format!("{name} = 0\n"))
                .err()
                .map(|error| error.to_string())
                .unwrap_or_default();
            assert!(!error.contains("unknown field"), "{name}: {error}");
        }
    }

    #[test]
    fn a_table_serializes_back_to_itself_without_its_unset_fields() {
        let text =
            "command = \"srv\"\nargs = [\"a\\nb\"]\nenv = { K = \"v\" }\ntool_timeout_sec = 5.0\n";
        let raw = parse(text);
        let written = toml::to_string(&raw).expect("serializes");
        assert!(!written.contains("url"), "{written}");
        assert_eq!(parse(&written), raw);
    }

    #[test]
    fn unknown_fields_are_refused() {
        assert!(toml::from_str::<RawServer>("comand = \"typo\"\n").is_err());
    }
}
