//! MCP form schemas: what a server may ask for (`requestedSchema` is a flat
//! object of primitive properties) and whether an answer's content fits.
//!
//! The host checks both sides: a request with a schema MCP does not allow is
//! refused before review, and a guest's accept content is validated before it
//! is sent, so a module can never answer what the server did not ask for.

use serde_json::{Map, Value};

/// Why a `requestedSchema` is not a flat MCP form schema.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SchemaError {
    /// The schema's `type` is not `"object"`.
    #[error("`type` must be \"object\", not {0}")]
    NotAnObjectSchema(String),
    /// `properties` is not an object.
    #[error("`properties` must be an object, not {0}")]
    PropertiesNotAnObject(&'static str),
    /// A property's schema is not an object.
    #[error("property `{0}` must be a schema object")]
    PropertyNotAnObject(String),
    /// A property has a type forms cannot carry (objects, arrays of objects, ...).
    #[error(
        "property `{name}` has type {found}; MCP forms allow string, number, integer, boolean and arrays of enumerated strings"
    )]
    UnsupportedType {
        /// The property.
        name: String,
        /// The type found.
        found: String,
    },
    /// `required` is not a list of property names.
    #[error("`required` must list property names; {0}")]
    BadRequired(String),
}

/// Checks that `schema` is a flat MCP form schema.
///
/// ```
/// use gatehouse_core::schema::check_form_schema;
/// let flat = serde_json::json!({"type": "object", "properties": {"name": {"type": "string"}}});
/// assert!(check_form_schema(flat.as_object().unwrap()).is_ok());
/// let nested = serde_json::json!({"type": "object", "properties": {"a": {"type": "object"}}});
/// assert!(check_form_schema(nested.as_object().unwrap()).is_err());
/// ```
pub fn check_form_schema(schema: &Map<String, Value>) -> Result<(), SchemaError> {
    match schema.get("type") {
        None => {}
        Some(Value::String(kind)) if kind == "object" => {}
        Some(other) => return Err(SchemaError::NotAnObjectSchema(other.to_string())),
    }
    let empty = Map::new();
    let properties = match schema.get("properties") {
        None => &empty,
        Some(Value::Object(properties)) => properties,
        Some(other) => return Err(SchemaError::PropertiesNotAnObject(json_kind(other))),
    };
    for (name, property) in properties {
        let property = property
            .as_object()
            .ok_or_else(|| SchemaError::PropertyNotAnObject(name.clone()))?;
        check_property(name, property)?;
    }
    match schema.get("required") {
        None => Ok(()),
        Some(Value::Array(names)) => {
            for name in names {
                match name.as_str() {
                    Some(name) if properties.contains_key(name) => {}
                    Some(name) => {
                        return Err(SchemaError::BadRequired(format!(
                            "`{name}` is not a property"
                        )));
                    }
                    None => {
                        return Err(SchemaError::BadRequired(format!("{name} is not a string")));
                    }
                }
            }
            Ok(())
        }
        Some(other) => Err(SchemaError::BadRequired(format!(
            "found {}",
            json_kind(other)
        ))),
    }
}

fn check_property(name: &str, property: &Map<String, Value>) -> Result<(), SchemaError> {
    let unsupported = |found: String| SchemaError::UnsupportedType {
        name: name.to_owned(),
        found,
    };
    match property.get("type").and_then(Value::as_str) {
        Some("string" | "number" | "integer" | "boolean") => Ok(()),
        Some("array") => {
            let items = property
                .get("items")
                .and_then(Value::as_object)
                .ok_or_else(|| unsupported("array without an items schema".to_owned()))?;
            let enumerated = items.get("type").and_then(Value::as_str) == Some("string")
                && items.contains_key("enum")
                || items.contains_key("anyOf");
            if enumerated {
                Ok(())
            } else {
                Err(unsupported(format!(
                    "array of {}",
                    Value::Object(items.clone())
                )))
            }
        }
        Some(other) => Err(unsupported(format!("\"{other}\""))),
        None if property.contains_key("enum") || property.contains_key("oneOf") => Ok(()),
        None => Err(unsupported("no type".to_owned())),
    }
}

/// Checks an accept's `content` against the form's schema: an object whose
/// keys are properties of the schema, whose values are primitives (or lists of
/// strings for multi-select), and which validates as JSON Schema, formats
/// included.
///
/// ```
/// use gatehouse_core::schema::validate_content;
/// let schema = serde_json::json!({
///     "type": "object",
///     "properties": {"age": {"type": "integer", "minimum": 0}},
///     "required": ["age"]
/// });
/// let schema = schema.as_object().unwrap();
/// assert!(validate_content(schema, &serde_json::json!({"age": 3})).is_ok());
/// assert!(validate_content(schema, &serde_json::json!({"age": -1})).is_err());
/// assert!(validate_content(schema, &serde_json::json!({})).is_err());
/// ```
pub fn validate_content(schema: &Map<String, Value>, content: &Value) -> Result<(), String> {
    let object = content
        .as_object()
        .ok_or_else(|| format!("content must be an object, not {}", json_kind(content)))?;
    let properties = schema.get("properties").and_then(Value::as_object);
    for (key, value) in object {
        if !properties.is_some_and(|properties| properties.contains_key(key)) {
            return Err(format!("`{key}` is not a property of the requested schema"));
        }
        let primitive = match value {
            Value::String(_) | Value::Number(_) | Value::Bool(_) => true,
            Value::Array(items) => items.iter().all(Value::is_string),
            Value::Null | Value::Object(_) => false,
        };
        if !primitive {
            return Err(format!(
                "`{key}` must be a primitive value, not {}",
                json_kind(value)
            ));
        }
    }
    let validator = jsonschema::options()
        .should_validate_formats(true)
        .build(&Value::Object(schema.clone()))
        .map_err(|error| format!("the requested schema cannot be compiled: {error}"))?;
    let errors: Vec<String> = validator
        .iter_errors(content)
        .map(|error| {
            let path = error.instance_path().to_string();
            if path.is_empty() {
                error.to_string()
            } else {
                format!("{path}: {error}")
            }
        })
        .collect();
    if errors.is_empty() {
        Ok(())
    } else {
        Err(errors.join("; "))
    }
}

/// The JSON type of a value, for error messages.
pub fn json_kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn schema(value: Value) -> Map<String, Value> {
        value.as_object().cloned().unwrap()
    }

    #[test]
    fn multi_select_arrays_are_allowed_object_arrays_are_not() {
        let multi = schema(json!({"type": "object", "properties": {
            "tags": {"type": "array", "items": {"type": "string", "enum": ["a", "b"]}}
        }}));
        assert_eq!(check_form_schema(&multi), Ok(()));
        let objects = schema(json!({"type": "object", "properties": {
            "rows": {"type": "array", "items": {"type": "object"}}
        }}));
        assert!(matches!(
            check_form_schema(&objects),
            Err(SchemaError::UnsupportedType { .. })
        ));
    }

    #[test]
    fn required_must_name_properties() {
        let bad = schema(json!({"type": "object", "properties": {}, "required": ["ghost"]}));
        assert!(matches!(
            check_form_schema(&bad),
            Err(SchemaError::BadRequired(_))
        ));
    }

    #[test]
    fn content_with_unknown_keys_or_bad_formats_is_refused() {
        let form = schema(json!({"type": "object", "properties": {
            "email": {"type": "string", "format": "email"}
        }}));
        assert!(validate_content(&form, &json!({"email": "a@example.com"})).is_ok());
        assert!(validate_content(&form, &json!({"email": "not an address"})).is_err());
        assert!(validate_content(&form, &json!({"other": "x"})).is_err());
        assert!(validate_content(&form, &json!({"email": {"nested": true}})).is_err());
        assert!(validate_content(&form, &json!("text")).is_err());
    }
}
