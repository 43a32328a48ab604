//! An elicitation as the server sent it: the `params` of an
//! `elicitation/create` request, parsed and checked against MCP's rules.
//!
//! Parsing keeps everything a reviewer may need (the raw schema, every `_meta`
//! key but transport ones) and refuses what no MCP client should act on, with
//! an error that names the field.

use std::fmt;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::schema::{self, SchemaError};

/// `_meta` keys that belong to the transport, not to the request, and are
/// removed before review (rmcp adds `progressToken`).
pub const TRANSPORT_META_KEYS: &[&str] = &["progressToken"];

/// The JSON-RPC id of a server's request: a string or an integer, kept as sent.
///
/// ```
/// use gatehouse_core::elicitation::RequestId;
/// let id: RequestId = serde_json::from_str("7").unwrap();
/// assert_eq!(id, RequestId::Number(7));
/// assert_eq!(id.to_string(), "7");
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(untagged)]
pub enum RequestId {
    /// An integer id.
    Number(i64),
    /// A string id.
    Text(String),
}

impl fmt::Display for RequestId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RequestId::Number(number) => write!(f, "{number}"),
            RequestId::Text(text) => f.write_str(text),
        }
    }
}

/// The two elicitation modes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// Structured input through a form.
    Form,
    /// Consent to open a URL.
    Url,
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Mode::Form => "form",
            Mode::Url => "url",
        })
    }
}

/// What the server asks for.
#[derive(Debug, Clone, PartialEq)]
pub enum Elicitation {
    /// Form mode.
    Form {
        /// The message for the person.
        message: String,
        /// The `requestedSchema` object, checked to be a flat MCP form schema.
        requested_schema: Map<String, Value>,
    },
    /// URL mode.
    Url {
        /// The message for the person.
        message: String,
        /// The URL to open.
        url: String,
        /// The server's id for this elicitation.
        elicitation_id: String,
    },
}

impl Elicitation {
    /// The mode.
    pub fn mode(&self) -> Mode {
        match self {
            Elicitation::Form { .. } => Mode::Form,
            Elicitation::Url { .. } => Mode::Url,
        }
    }

    /// The message for the person.
    pub fn message(&self) -> &str {
        match self {
            Elicitation::Form { message, .. } | Elicitation::Url { message, .. } => message,
        }
    }
}

/// Why an `elicitation/create` request's params were refused. Each names the
/// field at fault; a server gets these as JSON-RPC -32602 (invalid params).
#[derive(Debug, thiserror::Error)]
pub enum ParamsError {
    /// The params are not an object.
    #[error("elicitation params must be a JSON object, not {0}")]
    NotAnObject(&'static str),
    /// `mode` names no known mode.
    #[error("`mode` is {0}; this host knows the modes \"form\" and \"url\"")]
    UnknownMode(String),
    /// A required string field is missing or has another type.
    #[error("`{0}` must be a string")]
    NotAString(&'static str),
    /// `requestedSchema` is missing or not an object.
    #[error("`requestedSchema` must be a JSON object")]
    SchemaNotAnObject,
    /// `requestedSchema` is not a flat MCP form schema.
    #[error("`requestedSchema` is not a valid MCP form schema: {0}")]
    Schema(#[from] SchemaError),
    /// `_meta` is present but not an object.
    #[error("`_meta` must be a JSON object, not {0}")]
    MetaNotAnObject(&'static str),
    /// A URL-mode request without an `elicitationId`, which protocols before
    /// 2026-07-28 require.
    #[error("`elicitationId` must be a non-empty string (protocols before 2026-07-28 require it)")]
    MissingElicitationId,
    /// A URL-mode `url` that is not an absolute http(s) URL with a host.
    #[error("`url` must be an absolute http:// or https:// URL with a host, not {url:?}: {reason}")]
    NotAUrl {
        /// What was sent.
        url: String,
        /// What is wrong with it.
        reason: String,
    },
}

/// The parsed `params` of an `elicitation/create` request.
///
/// ```
/// use gatehouse_core::elicitation::{ElicitationParams, Mode};
/// let params = serde_json::json!({
///     "message": "Run delete_repo?",
///     "requestedSchema": {"type": "object", "properties": {}},
///     "_meta": {"codex_request_type": "approval_request", "progressToken": 3}
/// });
/// let parsed = ElicitationParams::from_wire(&params).unwrap();
/// assert_eq!(parsed.elicitation.mode(), Mode::Form);
/// // Transport keys are stripped before review.
/// assert!(!parsed.meta.unwrap().contains_key("progressToken"));
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct ElicitationParams {
    /// What the server asks for.
    pub elicitation: Elicitation,
    /// `_meta` less [`TRANSPORT_META_KEYS`]; `None` when the server sent none.
    pub meta: Option<Map<String, Value>>,
}

impl ElicitationParams {
    /// Parses `params` as sent on the wire. A missing `mode` is form mode.
    pub fn from_wire(params: &Value) -> Result<Self, ParamsError> {
        let object = params
            .as_object()
            .ok_or(ParamsError::NotAnObject(json_kind(params)))?;
        let meta = match object.get("_meta") {
            None | Some(Value::Null) => None,
            Some(Value::Object(meta)) => Some(strip_transport_keys(meta.clone())),
            Some(other) => return Err(ParamsError::MetaNotAnObject(json_kind(other))),
        };
        let message = string_field(object, "message")?;
        let elicitation = match object.get("mode") {
            None | Some(Value::Null) => form(object, message)?,
            Some(Value::String(mode)) if mode == "form" => form(object, message)?,
            Some(Value::String(mode)) if mode == "url" => Elicitation::Url {
                message,
                url: checked_url(string_field(object, "url")?)?,
                // Protocol 2026-07-28 dropped the field; before it, the
                // router requires it (see `Router::route`).
                elicitation_id: match object.get("elicitationId") {
                    None | Some(Value::Null) => String::new(),
                    Some(_) => string_field(object, "elicitationId")?,
                },
            },
            Some(other) => return Err(ParamsError::UnknownMode(other.to_string())),
        };
        Ok(ElicitationParams { elicitation, meta })
    }
}

/// Why a captured `elicitation/create` request could not be read.
#[derive(Debug, thiserror::Error)]
pub enum CapturedError {
    /// A JSON-RPC message with another method.
    #[error("a `{0}` message, not elicitation/create")]
    OtherMethod(String),
    /// The params are refused (the inner error names the field).
    #[error("invalid elicitation/create params: {0}")]
    Params(ParamsError),
}

impl ElicitationParams {
    /// Reads a captured request: the `params` of `elicitation/create` as on
    /// the wire, or the whole JSON-RPC message, whose `id` is returned too
    /// (`None` for bare params or an id that is neither string nor integer).
    ///
    /// ```
    /// use gatehouse_core::elicitation::{ElicitationParams, RequestId};
    /// let message = serde_json::json!({
    ///     "jsonrpc": "2.0", "id": 12, "method": "elicitation/create",
    ///     "params": {"message": "Allow?", "requestedSchema": {"type": "object", "properties": {}}}
    /// });
    /// let (params, id) = ElicitationParams::from_captured(&message).unwrap();
    /// assert_eq!(id, Some(RequestId::Number(12)));
    /// assert_eq!(params.elicitation.message(), "Allow?");
    /// let bare = serde_json::json!({"message": "Allow?", "requestedSchema": {"type": "object"}});
    /// assert_eq!(ElicitationParams::from_captured(&bare).unwrap().1, None);
    /// ```
    pub fn from_captured(value: &Value) -> Result<(Self, Option<RequestId>), CapturedError> {
        let (params, id) = match value.get("method").and_then(Value::as_str) {
            Some("elicitation/create") => (
                value.get("params").unwrap_or(&Value::Null),
                value
                    .get("id")
                    .cloned()
                    .and_then(|id| serde_json::from_value(id).ok()),
            ),
            Some(other) => return Err(CapturedError::OtherMethod(other.to_owned())),
            None => (value, None),
        };
        let params = ElicitationParams::from_wire(params).map_err(CapturedError::Params)?;
        Ok((params, id))
    }
}

fn form(object: &Map<String, Value>, message: String) -> Result<Elicitation, ParamsError> {
    let requested_schema = object
        .get("requestedSchema")
        .and_then(Value::as_object)
        .ok_or(ParamsError::SchemaNotAnObject)?
        .clone();
    schema::check_form_schema(&requested_schema)?;
    Ok(Elicitation::Form {
        message,
        requested_schema,
    })
}

/// A URL the person may be shown: absolute, http(s), with a host.
fn checked_url(url: String) -> Result<String, ParamsError> {
    let refuse = |reason: String| ParamsError::NotAUrl {
        url: url.chars().take(200).collect(),
        reason,
    };
    let parsed = url::Url::parse(&url).map_err(|error| refuse(error.to_string()))?;
    if !matches!(parsed.scheme(), "http" | "https") {
        return Err(refuse(format!("the scheme is {:?}", parsed.scheme())));
    }
    if parsed.host_str().is_none_or(str::is_empty) {
        return Err(refuse("it has no host".to_owned()));
    }
    Ok(url)
}

fn string_field(object: &Map<String, Value>, field: &'static str) -> Result<String, ParamsError> {
    object
        .get(field)
        .and_then(Value::as_str)
        .map(str::to_owned)
        .ok_or(ParamsError::NotAString(field))
}

/// Removes [`TRANSPORT_META_KEYS`] from a `_meta` object.
pub fn strip_transport_keys(mut meta: Map<String, Value>) -> Map<String, Value> {
    for key in TRANSPORT_META_KEYS {
        meta.remove(*key);
    }
    meta
}

/// The JSON type of a value, for error messages ([`crate::schema::json_kind`],
/// named here too, where it was first public).
pub use crate::schema::json_kind;

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn url_mode_needs_its_fields() {
        let params = json!({"mode": "url", "message": "Sign in", "url": "https://example.com", "elicitationId": 7});
        let error = ElicitationParams::from_wire(&params).unwrap_err();
        assert_eq!(error.to_string(), "`elicitationId` must be a string");
        // 2026-07-28 dropped the id: its absence is the router's call.
        let params = json!({"mode": "url", "message": "Sign in", "url": "https://example.com"});
        assert!(matches!(
            ElicitationParams::from_wire(&params).map(|p| p.elicitation),
            Ok(Elicitation::Url { elicitation_id, .. }) if elicitation_id.is_empty()
        ));
    }

    #[test]
    fn url_mode_needs_an_absolute_http_url_with_a_host() {
        for url in [
            "not a url",
            "/relative/path",
            "javascript:alert(1)",
            "file:///etc/passwd",
            "https://",
        ] {
            let params = json!({"mode": "url", "message": "Go", "url": url, "elicitationId": "e"});
            let error = ElicitationParams::from_wire(&params).unwrap_err();
            assert!(
                matches!(error, ParamsError::NotAUrl { .. }),
                "{url}: {error}"
            );
            assert!(
                error.to_string().starts_with("`url` must be an absolute"),
                "{error}"
            );
        }
        let params = json!({"mode": "url", "message": "Go", "url": "http://localhost:8080/x?y", "elicitationId": "e"});
        assert!(ElicitationParams::from_wire(&params).is_ok());
    }

    #[test]
    fn unknown_modes_and_bad_meta_are_refused() {
        let params = json!({"mode": "telepathy", "message": "?"});
        assert!(matches!(
            ElicitationParams::from_wire(&params),
            Err(ParamsError::UnknownMode(_))
        ));
        let params = json!({"message": "?", "requestedSchema": {"type": "object"}, "_meta": [1]});
        assert!(matches!(
            ElicitationParams::from_wire(&params),
            Err(ParamsError::MetaNotAnObject("an array"))
        ));
    }

    #[test]
    fn nested_schemas_are_refused() {
        let params = json!({
            "message": "?",
            "requestedSchema": {"type": "object", "properties": {"a": {"type": "object"}}}
        });
        assert!(matches!(
            ElicitationParams::from_wire(&params),
            Err(ParamsError::Schema(_))
        ));
    }

    #[test]
    fn meta_absent_stays_absent() {
        let params = json!({"message": "?", "requestedSchema": {"type": "object"}});
        let parsed = ElicitationParams::from_wire(&params).unwrap();
        assert_eq!(parsed.meta, None);
    }
}
