//! The properties the fuzz targets under `fuzz/` check, one function per
//! parser that reads untrusted bytes: elicitation params (from any MCP
//! server) into the contract types, `gatehouse.toml`, and plugin manifests
//! found by discovery.
//!
//! Each function takes arbitrary bytes. Whatever the parser refuses is fine;
//! whatever it accepts must keep the invariants listed on the function, and
//! a broken invariant comes back as an [`Violation`]. A panic inside is a
//! bug the fuzzer found. The fuzz targets turn a `Violation` into a panic;
//! `tests/all/fuzz_corpus.rs` replays the committed corpus through the same
//! functions in every test run.
//!
//! ```
//! let params = br#"{"message": "Allow?", "requestedSchema": {"type": "object", "properties": {}}}"#;
//! assert_eq!(gatehouse_fuzzing::elicitation_params(params), Ok(gatehouse_fuzzing::Accepted::Yes));
//! assert_eq!(gatehouse_fuzzing::elicitation_params(b"[1, 2"), Ok(gatehouse_fuzzing::Accepted::No));
//! ```

use std::path::{Path, PathBuf};

use serde_json::{Map, Value, json};

use gatehouse_core::context::ReviewContext;
use gatehouse_core::elicitation::{Elicitation, ElicitationParams, RequestId, TRANSPORT_META_KEYS};
use gatehouse_core::request::ReviewRequest;
use gatehouse_core::schema;
use gatehouse_gateway::config::Config;
use gatehouse_mcp::ELICITATION_METHOD;
use gatehouse_mcp::discovery::{CapabilityRoot, DiscoveryLimits, discover_root};
use gatehouse_mcp::rescue::{
    RAW_PARAMS_KEY, RESCUE_GROWTH, UTF8_BOM, rescue_message, unwrap_params,
};
use gatehouse_mcp::server_config::is_valid_server_name;

/// Whether the parser took the input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Accepted {
    /// It parsed and every invariant held.
    Yes,
    /// It was refused with an error (which is fine).
    No,
}

/// An invariant that did not hold for an accepted input.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{target}: {what}")]
pub struct Violation {
    /// The target that found it.
    pub target: &'static str,
    /// What broke.
    pub what: String,
}

fn violation(target: &'static str, what: impl Into<String>) -> Violation {
    Violation {
        target,
        what: what.into(),
    }
}

/// Elicitation params → [`ElicitationParams`] → the contract's
/// `review-request`.
///
/// For accepted params: no transport key is left in `_meta`; the contract
/// form (read back with [`ReviewRequest::elicitation_from_contract`]) has the
/// same mode and message, and its schema text parses back to a
/// schema that still passes [`schema::check_form_schema`] with the same
/// properties; the URL fields are carried unchanged; checking arbitrary
/// content (the input itself, `{}`) against the schema returns rather than
/// panics. The captured-message reader ([`ElicitationParams::from_captured`])
/// must agree with the wire reader on bare params.
///
/// Whole messages also go through [`rescue_message`]. What it rewrites is
/// JSON, at most [`RESCUE_GROWTH`] bytes longer, keeps its id and method,
/// gives back the original params through [`unwrap_params`], and is either
/// a message rmcp's model could not decode or one whose params forge the
/// wrapper. After the rescue, every `"2.0"` `elicitation/create` request
/// with a string or integer id and no members but `jsonrpc`, `id`, `method`
/// and `params` decodes in rmcp's model.
pub fn elicitation_params(data: &[u8]) -> Result<Accepted, Violation> {
    const TARGET: &str = "elicitation_params";
    check_rescue(data, rescue_message(data).as_deref()).map_err(|what| violation(TARGET, what))?;
    let Ok(value) = serde_json::from_slice::<Value>(data) else {
        return Ok(Accepted::No);
    };
    let wire = ElicitationParams::from_wire(&value);
    if value.get("method").is_none() {
        let captured = ElicitationParams::from_captured(&value).map(|(params, _)| params);
        if captured.as_ref().ok() != wire.as_ref().ok() {
            return Err(violation(
                TARGET,
                "from_captured and from_wire disagree on bare params",
            ));
        }
    }
    let Ok(params) = wire else {
        return Ok(Accepted::No);
    };
    if let Some(meta) = &params.meta
        && let Some(key) = TRANSPORT_META_KEYS
            .iter()
            .find(|key| meta.contains_key(**key))
    {
        return Err(violation(
            TARGET,
            format!("transport key {key} kept in _meta"),
        ));
    }
    let request = ReviewRequest::new(
        params.clone(),
        ReviewContext::new("fuzz", RequestId::Number(1)),
    );
    let contract = request
        .elicitation_from_contract()
        .map_err(|error| violation(TARGET, format!("schema text does not parse: {error}")))?;
    match (&params.elicitation, &contract) {
        (
            Elicitation::Form {
                message,
                requested_schema,
            },
            Elicitation::Form {
                message: contract_message,
                requested_schema: back,
            },
        ) => {
            if contract_message != message {
                return Err(violation(TARGET, "form message changed"));
            }
            schema::check_form_schema(back)
                .map_err(|error| violation(TARGET, format!("schema no longer valid: {error}")))?;
            let keys = |schema: &Map<String, Value>| -> Vec<String> {
                schema
                    .get("properties")
                    .and_then(Value::as_object)
                    .map(|properties| properties.keys().cloned().collect())
                    .unwrap_or_default()
            };
            if keys(back) != keys(requested_schema) {
                return Err(violation(TARGET, "schema properties changed"));
            }
            let _ = schema::validate_content(requested_schema, &value);
            let _ = schema::validate_content(requested_schema, &json!({}));
        }
        (
            Elicitation::Url {
                message,
                url,
                elicitation_id,
            },
            Elicitation::Url {
                message: contract_message,
                url: contract_url,
                elicitation_id: contract_id,
            },
        ) => {
            if (contract_message, contract_url, contract_id) != (message, url, elicitation_id) {
                return Err(violation(TARGET, "URL fields changed"));
            }
        }
        _ => {
            return Err(violation(
                TARGET,
                "the mode changed on the way to the contract",
            ));
        }
    }
    Ok(Accepted::Yes)
}

/// `gatehouse.toml` text → [`Config`].
///
/// For an accepted config: its servers check (as [`Config::parse`]
/// promised), their names are valid, its limits convert, and every module's
/// config is JSON text that parses back.
pub fn config(data: &[u8]) -> Result<Accepted, Violation> {
    const TARGET: &str = "config";
    let Ok(text) = std::str::from_utf8(data) else {
        return Ok(Accepted::No);
    };
    let Ok(config) = Config::parse(text, Path::new("fuzz.toml")) else {
        return Ok(Accepted::No);
    };
    let servers = config
        .servers()
        .map_err(|error| violation(TARGET, format!("parsed, then servers refused: {error}")))?;
    if let Some(server) = servers
        .iter()
        .find(|server| !is_valid_server_name(&server.name))
    {
        return Err(violation(
            TARGET,
            format!("invalid server name {:?}", server.name),
        ));
    }
    let _ = config.review.limits.to_limits();
    for module in &config.review.modules {
        serde_json::from_str::<Value>(&module.config_json())
            .map_err(|error| violation(TARGET, format!("module config is not JSON: {error}")))?;
    }
    Ok(Accepted::Yes)
}

/// Plugin manifest and `.mcp.json` bytes → discovered servers.
///
/// The input is split at its first NUL byte: the part before is written as
/// a Codex plugin manifest (`plugin/.codex-plugin/plugin.json`), the part
/// after as `.mcp.json` in the plugin folder and in a bare folder beside it;
/// then the root is discovered under `scratch` (a directory the caller owns
/// and reuses). For every discovery: server names are valid and unique,
/// every server's source file is inside the root, and nothing fails but
/// through warnings.
pub fn discovery(data: &[u8], scratch: &Path) -> Result<Accepted, Violation> {
    const TARGET: &str = "discovery";
    let (manifest, mcp_json) = match data.iter().position(|byte| *byte == 0) {
        Some(split) => (&data[..split], &data[split + 1..]),
        None => (data, &data[..0]),
    };
    let plugin = scratch.join("plugin");
    let bare = scratch.join("bare");
    let write = |path: PathBuf, bytes: &[u8]| {
        path.parent()
            .map(std::fs::create_dir_all)
            .transpose()
            .and_then(|_| std::fs::write(&path, bytes))
            .map_err(|error| violation(TARGET, format!("scratch {}: {error}", path.display())))
    };
    write(plugin.join(".codex-plugin/plugin.json"), manifest)?;
    write(plugin.join(".mcp.json"), mcp_json)?;
    write(bare.join(".mcp.json"), mcp_json)?;
    let root = CapabilityRoot::new("fuzz", scratch);
    let found = discover_root(&root, &DiscoveryLimits::default())
        .map_err(|error| violation(TARGET, format!("the scratch root failed: {error}")))?;
    let canonical = scratch
        .canonicalize()
        .map_err(|error| violation(TARGET, format!("scratch: {error}")))?;
    let mut names = std::collections::HashSet::new();
    for server in &found.servers {
        if !is_valid_server_name(&server.name) || server.name != server.config.name {
            return Err(violation(
                TARGET,
                format!("bad server name {:?}", server.name),
            ));
        }
        if !names.insert(server.name.clone()) {
            return Err(violation(TARGET, format!("{} listed twice", server.name)));
        }
        let source = server
            .source
            .canonicalize()
            .unwrap_or_else(|_| server.source.clone());
        if !source.starts_with(&canonical) {
            return Err(violation(
                TARGET,
                format!(
                    "{} read from outside the root: {}",
                    server.name,
                    source.display()
                ),
            ));
        }
    }
    Ok(if found.servers.is_empty() {
        Accepted::No
    } else {
        Accepted::Yes
    })
}

/// The invariants of [`rescue_message`] on one message (see
/// [`elicitation_params`]).
fn check_rescue(original: &[u8], rescued: Option<&[u8]>) -> Result<(), String> {
    let original = original.strip_prefix(UTF8_BOM).unwrap_or(original);
    let decodes =
        |line: &[u8]| serde_json::from_slice::<rmcp::model::ServerJsonRpcMessage>(line).is_ok();
    let Ok(before) = serde_json::from_slice::<Value>(original) else {
        // JSON that no `Value` holds (a number beyond f64 outside the
        // params) may still be rescued, if the result decodes.
        let json = serde_json::from_slice::<serde::de::IgnoredAny>(original).is_ok();
        return match rescued {
            None => Ok(()),
            Some(rescued) if json && decodes(rescued) => Ok(()),
            Some(_) => Err("rescued a message that is not JSON, or to no effect".to_owned()),
        };
    };
    if let Some(rescued) = rescued {
        if rescued.len() > original.len() + RESCUE_GROWTH {
            return Err(format!(
                "the rescue grew the message from {} to {} bytes",
                original.len(),
                rescued.len()
            ));
        }
        let after: Value = serde_json::from_slice(rescued)
            .map_err(|error| format!("the rescued message is not JSON: {error}"))?;
        if after.get("id") != before.get("id") || after.get("method") != before.get("method") {
            return Err("the rescue changed the id or the method".to_owned());
        }
        let params = unwrap_params(after.get("params").cloned().unwrap_or(Value::Null));
        if &params != before.get("params").unwrap_or(&Value::Null) {
            return Err("the rescued params do not unwrap to the original".to_owned());
        }
        let forged = before
            .get("params")
            .and_then(Value::as_object)
            .is_some_and(|params| params.contains_key(RAW_PARAMS_KEY));
        if !forged && decodes(original) {
            return Err("rescued a message rmcp decodes as it is".to_owned());
        }
        if !decodes(rescued) {
            return Err("rmcp cannot decode the rescued message".to_owned());
        }
    }
    let id_typable = before
        .get("id")
        .is_some_and(|id| id.is_string() || id.is_i64());
    // The rescue mends params, not the envelope: a "request" that also
    // carries `result` or `error` (or any other member) is left to rmcp.
    let envelope_only = before.as_object().is_some_and(|members| {
        members
            .keys()
            .all(|key| matches!(key.as_str(), "jsonrpc" | "id" | "method" | "params"))
    });
    if envelope_only
        && before.get("jsonrpc") == Some(&json!("2.0"))
        && before.get("method") == Some(&json!(ELICITATION_METHOD))
        && id_typable
        && !decodes(rescued.unwrap_or(original))
    {
        return Err("rmcp cannot decode the request after the rescue".to_owned());
    }
    Ok(())
}
