//! Traces: the `[traces]` section, and the hook through which the process
//! that exports spans continues an upstream request's trace and carries it
//! on to the servers downstream.
//!
//! The libraries emit spans through [`tracing`] under
//! [`gatehouse_base::trace::TARGET`]; they link no OpenTelemetry. The
//! `gatehouse` binary exports those spans over OTLP when `[traces]` is set,
//! and installs a [`Propagation`] that reads and writes W3C trace context
//! (`traceparent`, `tracestate`) in a request's `_meta`.

use std::collections::BTreeMap;
use std::sync::OnceLock;

use serde_json::{Map, Value};

/// The `_meta` keys of W3C trace context.
pub const TRACE_CONTEXT_KEYS: [&str; 2] = ["traceparent", "tracestate"];

/// The longest `traceparent` or `tracestate` value read from a request's
/// `_meta`, in bytes; a longer one is ignored (W3C allows 512 for
/// `tracestate`; `traceparent` is 55).
pub const MAX_TRACE_CONTEXT_BYTES: usize = 512;

/// The path an OTLP/HTTP collector takes traces at, appended to an
/// [`TracesConfig::endpoint`] that does not end with it.
pub const OTLP_TRACES_PATH: &str = "/v1/traces";

/// The `[traces]` section: where spans go, over OTLP/HTTP (protobuf).
/// Absent, nothing is exported and no trace context is read or sent.
///
/// ```
/// use gatehouse_telemetry::traces::TracesConfig;
/// let config: TracesConfig = serde_json::from_value(serde_json::json!({
///     "endpoint": "http://127.0.0.1:4318",
/// }))?;
/// assert_eq!(config.traces_url()?, "http://127.0.0.1:4318/v1/traces");
/// assert!(!config.content);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TracesConfig {
    /// The collector's OTLP/HTTP address (`http://HOST:4318`, or https);
    /// spans are posted to its [`OTLP_TRACES_PATH`].
    pub endpoint: String,
    /// Whether spans carry what a server or an agent wrote: a form's
    /// message and a call's arguments. Off by default: they may hold
    /// secrets, and a trace backend is rarely as closely held as the audit
    /// log.
    #[serde(default)]
    pub content: bool,
    /// The `service.name` resource of every span (default `gatehouse`).
    #[serde(default = "default_service_name")]
    pub service_name: String,
    /// Headers sent with every export (a collector's API key).
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// How long one export may take, in seconds (default 10).
    #[serde(default = "default_timeout_sec")]
    pub timeout_sec: u64,
}

fn default_service_name() -> String {
    "gatehouse".to_owned()
}

fn default_timeout_sec() -> u64 {
    10
}

/// What is wrong with a `[traces]` section (the field and what to write).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("traces.{field}: {problem}")]
pub struct TracesConfigError {
    /// The field.
    pub field: &'static str,
    /// What is wrong and what to write.
    pub problem: String,
}

impl TracesConfig {
    /// The URL spans are posted to: [`TracesConfig::endpoint`] with
    /// [`OTLP_TRACES_PATH`] appended unless it ends with it. Errs unless the
    /// endpoint is an `http` or `https` URL with a host, the timeout is 1 to
    /// 300 seconds and every header is a valid HTTP header.
    pub fn traces_url(&self) -> Result<String, TracesConfigError> {
        let endpoint = self.endpoint.trim_end_matches('/');
        let rest = endpoint
            .strip_prefix("http://")
            .or_else(|| endpoint.strip_prefix("https://"))
            .ok_or_else(|| TracesConfigError {
                field: "endpoint",
                problem: format!(
                    "`{}` is not an http:// or https:// URL (write the collector's OTLP/HTTP address, e.g. http://127.0.0.1:4318)",
                    gatehouse_base::escape::Escaped(&self.endpoint)
                ),
            })?;
        let authority = rest.split('/').next().unwrap_or_default();
        if authority.is_empty()
            || authority.contains(['@', '?', '#'])
            || authority
                .chars()
                .any(|c| c.is_whitespace() || c.is_control())
        {
            return Err(TracesConfigError {
                field: "endpoint",
                problem: format!(
                    "`{}` names no host (write http://HOST:PORT, without credentials)",
                    gatehouse_base::escape::Escaped(&self.endpoint)
                ),
            });
        }
        if !(1..=300).contains(&self.timeout_sec) {
            return Err(TracesConfigError {
                field: "timeout_sec",
                problem: format!("{} is not 1 to 300 seconds", self.timeout_sec),
            });
        }
        if self.service_name.is_empty() {
            return Err(TracesConfigError {
                field: "service_name",
                problem: "is empty".to_owned(),
            });
        }
        for (name, value) in &self.headers {
            let name_ok = !name.is_empty()
                && name
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b));
            if !name_ok {
                return Err(TracesConfigError {
                    field: "headers",
                    problem: format!(
                        "`{}` is not an HTTP header name",
                        gatehouse_base::escape::Escaped(name)
                    ),
                });
            }
            if value.bytes().any(|b| b.is_ascii_control() && b != b'\t') {
                return Err(TracesConfigError {
                    field: "headers",
                    problem: format!("the value of `{name}` holds a control character"),
                });
            }
        }
        if endpoint.ends_with(OTLP_TRACES_PATH) {
            Ok(endpoint.to_owned())
        } else {
            Ok(format!("{endpoint}{OTLP_TRACES_PATH}"))
        }
    }
}

/// Reads and writes trace context: installed once by the process that
/// exports spans ([`install`]).
pub trait Propagation: Send + Sync + 'static {
    /// Makes `span` (not yet entered) continue the trace `context` names:
    /// the W3C `traceparent` and `tracestate` of an upstream request's
    /// `_meta`, already bounded ([`trace_context`]). An invalid context is
    /// ignored: the span starts a trace of its own.
    fn continue_from(&self, span: &tracing::Span, context: &Map<String, Value>);

    /// `span`'s trace context as `_meta` entries (`traceparent`, and
    /// `tracestate` when there is one), for a request sent on its behalf;
    /// empty when the span is not exported.
    fn carry(&self, span: &tracing::Span) -> Map<String, Value>;
}

struct Installed {
    propagation: Box<dyn Propagation>,
    content: bool,
}

static INSTALLED: OnceLock<Installed> = OnceLock::new();

/// Installs the process's [`Propagation`], and whether spans carry content
/// ([`TracesConfig::content`]). Once per process: a second call changes
/// nothing and returns `false`.
pub fn install(propagation: Box<dyn Propagation>, content: bool) -> bool {
    INSTALLED
        .set(Installed {
            propagation,
            content,
        })
        .is_ok()
}

/// The installed [`Propagation`], if traces are on.
pub fn propagation() -> Option<&'static dyn Propagation> {
    INSTALLED.get().map(|installed| &*installed.propagation)
}

/// Whether spans may carry content ([`TracesConfig::content`]); `false`
/// while traces are off.
pub fn content() -> bool {
    INSTALLED.get().is_some_and(|installed| installed.content)
}

/// The W3C trace context in a request's `_meta`: `traceparent` and
/// `tracestate`, each only when it is a string of at most
/// [`MAX_TRACE_CONTEXT_BYTES`]. Whether the values are well formed is the
/// [`Propagation`]'s to check.
///
/// ```
/// use gatehouse_telemetry::traces::trace_context;
/// let meta = serde_json::json!({
///     "traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
///     "tracestate": 7,
///     "turnId": "t",
/// });
/// let context = trace_context(meta.as_object().unwrap());
/// assert_eq!(context.len(), 1);
/// assert!(context.contains_key("traceparent"));
/// ```
pub fn trace_context(meta: &Map<String, Value>) -> Map<String, Value> {
    TRACE_CONTEXT_KEYS
        .iter()
        .filter_map(|key| {
            let value = meta.get(*key)?.as_str()?;
            (value.len() <= MAX_TRACE_CONTEXT_BYTES)
                .then(|| ((*key).to_owned(), Value::String(value.to_owned())))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(endpoint: &str) -> TracesConfig {
        TracesConfig {
            endpoint: endpoint.to_owned(),
            content: false,
            service_name: default_service_name(),
            headers: BTreeMap::new(),
            timeout_sec: 10,
        }
    }

    #[test]
    fn the_traces_url_is_the_endpoint_with_the_otlp_path() {
        assert_eq!(
            config("http://collector:4318/").traces_url().as_deref(),
            Ok("http://collector:4318/v1/traces")
        );
        assert_eq!(
            config("https://collector/otlp/v1/traces")
                .traces_url()
                .as_deref(),
            Ok("https://collector/otlp/v1/traces")
        );
    }

    #[test]
    fn a_bad_section_names_its_field() {
        for endpoint in [
            "collector:4318",
            "ftp://x",
            "http://",
            "http://user:pw@x",
            "http://a b",
        ] {
            let error = config(endpoint).traces_url().expect_err(endpoint);
            assert_eq!(error.field, "endpoint", "{endpoint}: {error}");
            assert!(
                error.to_string().starts_with("traces.endpoint: "),
                "{error}"
            );
        }
        let mut zero = config("http://x");
        zero.timeout_sec = 0;
        assert_eq!(zero.traces_url().map_err(|e| e.field), Err("timeout_sec"));
        let mut header = config("http://x");
        header.headers.insert("bad name".into(), "v".into());
        assert_eq!(header.traces_url().map_err(|e| e.field), Err("headers"));
        let mut value = config("http://x");
        value.headers.insert("x-key".into(), "a\r\nb".into());
        assert_eq!(value.traces_url().map_err(|e| e.field), Err("headers"));
        let unknown: Result<TracesConfig, _> =
            serde_json::from_value(serde_json::json!({"endpoint": "http://x", "sample": 1}));
        assert!(unknown.is_err());
    }

    #[test]
    fn only_bounded_strings_are_read_as_trace_context() {
        let long = "0".repeat(MAX_TRACE_CONTEXT_BYTES + 1);
        let meta = serde_json::json!({"traceparent": long, "tracestate": "k=v"});
        let context = trace_context(meta.as_object().expect("object"));
        assert_eq!(context.len(), 1);
        assert_eq!(context["tracestate"], "k=v");
        assert!(trace_context(&Map::new()).is_empty());
    }
}
