//! Reading the few fields the guardian needs from JSON text without building
//! a `serde_json::Value` tree: the `_meta` objects and the requested schema.
//!
//! The readers accept and refuse exactly what parsing into a `Value` (a
//! `Map<String, Value>` for objects) does: every value goes through the same
//! deserializer entry point (`deserialize_any`), so numbers, escapes and
//! nesting are checked the same way, and a repeated key counts with its last
//! value, as a map insert would. They only skip the allocations for what the
//! guardian does not read. Strings without escapes are borrowed from the text.

use std::borrow::Cow;
use std::fmt;

use serde::Deserialize;
use serde::de::{self, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::Value;

/// `_meta` key: the server opts in to automated review.
pub const REQUEST_TYPE_KEY: &str = "codex_request_type";
/// The only `codex_request_type` value that asks for review.
pub const REQUEST_TYPE_APPROVAL: &str = "approval_request";
/// `_meta` key: what kind of approval is asked for.
pub const APPROVAL_KIND_KEY: &str = "codex_approval_kind";
/// The only reviewable approval kind.
pub const APPROVAL_KIND_TOOL_CALL: &str = "mcp_tool_call";
/// `_meta` key: strict review; JSON `true` asks for it, `false` does not,
/// anything else fails closed.
pub const STRICT_KEY: &str = "codex_strict_auto_review";
/// `_meta` key: a request to remember the approval.
pub const PERSIST_KEY: &str = "persist";
/// `_meta` key: the tool under review.
pub const TOOL_NAME_KEY: &str = "tool_name";
/// `_meta` key: the tool call's arguments.
pub const TOOL_PARAMS_KEY: &str = "tool_params";
/// `_meta` key: the tool's title.
pub const TOOL_TITLE_KEY: &str = "tool_title";
/// `_meta` key: the tool's description.
pub const TOOL_DESCRIPTION_KEY: &str = "tool_description";
/// `_meta` key: the connector behind the tool.
pub const CONNECTOR_ID_KEY: &str = "connector_id";
/// `_meta` key: the connector's name.
pub const CONNECTOR_NAME_KEY: &str = "connector_name";
/// `_meta` key: the connector's description.
pub const CONNECTOR_DESCRIPTION_KEY: &str = "connector_description";
/// `_meta` key: Codex's apps metadata, an object.
pub const CODEX_APPS_META_KEY: &str = "_codex_apps";
/// The member of [`CODEX_APPS_META_KEY`] that names the agent's call.
pub const CODEX_APPS_CALL_ID_KEY: &str = "call_id";

/// What the guardian reads from a `_meta` object (or a catalog tool's
/// `_meta`). A text field is `Some` when the key is present with a JSON
/// string value, exactly as written (untrimmed: identity is compared on the
/// raw strings, and only what is shown is trimmed).
#[derive(Debug, Default)]
pub(crate) struct Meta<'a> {
    pub(crate) request_type: Option<Cow<'a, str>>,
    pub(crate) approval_kind: Option<Cow<'a, str>>,
    /// The strict-review marker, whatever its value.
    pub(crate) strict: Option<Value>,
    /// Whether the `persist` key is present.
    pub(crate) persist: bool,
    pub(crate) tool_name: Option<Cow<'a, str>>,
    /// Whether `tool_params` is present, and whether it is an object.
    pub(crate) tool_params: Option<Shape>,
    pub(crate) tool_title: Option<Cow<'a, str>>,
    pub(crate) tool_description: Option<Cow<'a, str>>,
    pub(crate) connector_id: Option<Cow<'a, str>>,
    pub(crate) connector_name: Option<Cow<'a, str>>,
    pub(crate) connector_description: Option<Cow<'a, str>>,
    /// `_codex_apps.call_id`: `Some` when `_codex_apps` is an object whose
    /// `call_id` is a string.
    pub(crate) codex_apps_call_id: Option<Cow<'a, str>>,
}

/// Of a JSON value: whether it is an object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Shape {
    Object,
    Other,
}

impl<'a> Meta<'a> {
    /// Parses `text`, which must hold a JSON object, as parsing it into a
    /// `Map<String, Value>` would; errors are that parse's errors.
    pub(crate) fn parse(text: &'a str) -> Result<Meta<'a>, serde_json::Error> {
        serde_json::from_str(text)
    }
}

impl<'de> Deserialize<'de> for Meta<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct MetaVisitor;

        impl<'de> Visitor<'de> for MetaVisitor {
            type Value = Meta<'de>;

            // As `Map<String, Value>` says, so that errors read the same.
            fn expecting(&self, formatter: &mut fmt::Formatter) -> fmt::Result {
                formatter.write_str("a map")
            }

            fn visit_unit<E: de::Error>(self) -> Result<Meta<'de>, E> {
                Ok(Meta::default())
            }

            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Meta<'de>, A::Error> {
                let mut meta = Meta::default();
                while let Some(Text(key)) = map.next_key()? {
                    let text = |value: TextOrOther<'de>| value.0;
                    match &*key {
                        REQUEST_TYPE_KEY => meta.request_type = text(map.next_value()?),
                        APPROVAL_KIND_KEY => meta.approval_kind = text(map.next_value()?),
                        STRICT_KEY => meta.strict = Some(map.next_value()?),
                        PERSIST_KEY => {
                            map.next_value::<Checked>()?;
                            meta.persist = true;
                        }
                        TOOL_NAME_KEY => meta.tool_name = text(map.next_value()?),
                        TOOL_PARAMS_KEY => meta.tool_params = Some(map.next_value()?),
                        TOOL_TITLE_KEY => meta.tool_title = text(map.next_value()?),
                        TOOL_DESCRIPTION_KEY => meta.tool_description = text(map.next_value()?),
                        CONNECTOR_ID_KEY => meta.connector_id = text(map.next_value()?),
                        CONNECTOR_NAME_KEY => meta.connector_name = text(map.next_value()?),
                        CONNECTOR_DESCRIPTION_KEY => {
                            meta.connector_description = text(map.next_value()?)
                        }
                        CODEX_APPS_META_KEY => {
                            meta.codex_apps_call_id = map.next_value::<CodexApps<'de>>()?.0
                        }
                        _ => {
                            map.next_value::<Checked>()?;
                        }
                    }
                }
                Ok(meta)
            }
        }

        deserializer.deserialize_map(MetaVisitor)
    }
}

/// The `_codex_apps` value: its `call_id` when it is an object whose
/// `call_id` (the last one, when repeated) is a string; `None` otherwise.
struct CodexApps<'a>(Option<Cow<'a, str>>);

impl<'de> Deserialize<'de> for CodexApps<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct CodexAppsVisitor;

        impl<'de> Visitor<'de> for CodexAppsVisitor {
            type Value = CodexApps<'de>;

            fn expecting(&self, formatter: &mut fmt::Formatter) -> fmt::Result {
                formatter.write_str("any valid JSON value")
            }

            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<CodexApps<'de>, A::Error> {
                let mut call_id = None;
                while let Some(Text(key)) = map.next_key()? {
                    if key == CODEX_APPS_CALL_ID_KEY {
                        call_id = map.next_value::<TextOrOther<'de>>()?.0;
                    } else {
                        map.next_value::<Checked>()?;
                    }
                }
                Ok(CodexApps(call_id))
            }

            fn visit_bool<E: de::Error>(self, _: bool) -> Result<CodexApps<'de>, E> {
                Ok(CodexApps(None))
            }
            fn visit_i64<E: de::Error>(self, _: i64) -> Result<CodexApps<'de>, E> {
                Ok(CodexApps(None))
            }
            fn visit_u64<E: de::Error>(self, _: u64) -> Result<CodexApps<'de>, E> {
                Ok(CodexApps(None))
            }
            fn visit_f64<E: de::Error>(self, _: f64) -> Result<CodexApps<'de>, E> {
                Ok(CodexApps(None))
            }
            fn visit_str<E: de::Error>(self, _: &str) -> Result<CodexApps<'de>, E> {
                Ok(CodexApps(None))
            }
            fn visit_unit<E: de::Error>(self) -> Result<CodexApps<'de>, E> {
                Ok(CodexApps(None))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<CodexApps<'de>, A::Error> {
                Checked::drain_seq(seq)?;
                Ok(CodexApps(None))
            }
        }

        deserializer.deserialize_any(CodexAppsVisitor)
    }
}

/// Whether `text` is JSON whose `properties` member, if it is an object that
/// has one, is `null` or an empty object: what reading it into a `Value` and
/// calling `get("properties")` would find. Not JSON: `false`.
pub(crate) fn has_no_properties(text: &str) -> bool {
    matches!(
        serde_json::from_str::<Properties>(text),
        Ok(Properties::Absent | Properties::Null | Properties::Empty)
    )
}

/// What a schema's `properties` member is.
enum Properties {
    Absent,
    Null,
    Empty,
    Other,
}

impl<'de> Deserialize<'de> for Properties {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        /// Reads the schema: only an object can have members.
        struct SchemaVisitor;

        impl<'de> Visitor<'de> for SchemaVisitor {
            type Value = Properties;

            fn expecting(&self, formatter: &mut fmt::Formatter) -> fmt::Result {
                formatter.write_str("any valid JSON value")
            }

            fn visit_bool<E: de::Error>(self, _: bool) -> Result<Properties, E> {
                Ok(Properties::Absent)
            }
            fn visit_i64<E: de::Error>(self, _: i64) -> Result<Properties, E> {
                Ok(Properties::Absent)
            }
            fn visit_u64<E: de::Error>(self, _: u64) -> Result<Properties, E> {
                Ok(Properties::Absent)
            }
            fn visit_f64<E: de::Error>(self, _: f64) -> Result<Properties, E> {
                Ok(Properties::Absent)
            }
            fn visit_str<E: de::Error>(self, _: &str) -> Result<Properties, E> {
                Ok(Properties::Absent)
            }
            fn visit_unit<E: de::Error>(self) -> Result<Properties, E> {
                Ok(Properties::Absent)
            }
            fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Properties, A::Error> {
                Checked::drain_seq(seq)?;
                Ok(Properties::Absent)
            }

            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Properties, A::Error> {
                let mut properties = Properties::Absent;
                while let Some(Text(key)) = map.next_key()? {
                    if key == "properties" {
                        properties = map.next_value::<PropertiesValue>()?.0;
                    } else {
                        map.next_value::<Checked>()?;
                    }
                }
                Ok(properties)
            }
        }

        deserializer.deserialize_any(SchemaVisitor)
    }
}

/// The value of a `properties` member.
struct PropertiesValue(Properties);

impl<'de> Deserialize<'de> for PropertiesValue {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct PropertiesVisitor;

        impl<'de> Visitor<'de> for PropertiesVisitor {
            type Value = PropertiesValue;

            fn expecting(&self, formatter: &mut fmt::Formatter) -> fmt::Result {
                formatter.write_str("any valid JSON value")
            }

            fn visit_unit<E: de::Error>(self) -> Result<PropertiesValue, E> {
                Ok(PropertiesValue(Properties::Null))
            }

            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<PropertiesValue, A::Error> {
                let members = Checked::drain_map(map)?;
                Ok(PropertiesValue(if members == 0 {
                    Properties::Empty
                } else {
                    Properties::Other
                }))
            }

            fn visit_bool<E: de::Error>(self, _: bool) -> Result<PropertiesValue, E> {
                Ok(PropertiesValue(Properties::Other))
            }
            fn visit_i64<E: de::Error>(self, _: i64) -> Result<PropertiesValue, E> {
                Ok(PropertiesValue(Properties::Other))
            }
            fn visit_u64<E: de::Error>(self, _: u64) -> Result<PropertiesValue, E> {
                Ok(PropertiesValue(Properties::Other))
            }
            fn visit_f64<E: de::Error>(self, _: f64) -> Result<PropertiesValue, E> {
                Ok(PropertiesValue(Properties::Other))
            }
            fn visit_str<E: de::Error>(self, _: &str) -> Result<PropertiesValue, E> {
                Ok(PropertiesValue(Properties::Other))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<PropertiesValue, A::Error> {
                Checked::drain_seq(seq)?;
                Ok(PropertiesValue(Properties::Other))
            }
        }

        deserializer.deserialize_any(PropertiesVisitor)
    }
}

/// A JSON string, borrowed from the text when it has no escapes.
struct Text<'a>(Cow<'a, str>);

impl<'de> Deserialize<'de> for Text<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct TextVisitor;

        impl<'de> Visitor<'de> for TextVisitor {
            type Value = Text<'de>;

            fn expecting(&self, formatter: &mut fmt::Formatter) -> fmt::Result {
                formatter.write_str("a string")
            }

            fn visit_borrowed_str<E: de::Error>(self, text: &'de str) -> Result<Text<'de>, E> {
                Ok(Text(Cow::Borrowed(text)))
            }

            fn visit_str<E: de::Error>(self, text: &str) -> Result<Text<'de>, E> {
                Ok(Text(Cow::Owned(text.to_owned())))
            }

            fn visit_string<E: de::Error>(self, text: String) -> Result<Text<'de>, E> {
                Ok(Text(Cow::Owned(text)))
            }
        }

        deserializer.deserialize_str(TextVisitor)
    }
}

/// Any JSON value, kept only when it is a string.
struct TextOrOther<'a>(Option<Cow<'a, str>>);

impl<'de> Deserialize<'de> for TextOrOther<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct TextOrOtherVisitor;

        impl<'de> Visitor<'de> for TextOrOtherVisitor {
            type Value = TextOrOther<'de>;

            fn expecting(&self, formatter: &mut fmt::Formatter) -> fmt::Result {
                formatter.write_str("any valid JSON value")
            }

            fn visit_borrowed_str<E: de::Error>(
                self,
                text: &'de str,
            ) -> Result<TextOrOther<'de>, E> {
                Ok(TextOrOther(Some(Cow::Borrowed(text))))
            }
            fn visit_str<E: de::Error>(self, text: &str) -> Result<TextOrOther<'de>, E> {
                Ok(TextOrOther(Some(Cow::Owned(text.to_owned()))))
            }
            fn visit_string<E: de::Error>(self, text: String) -> Result<TextOrOther<'de>, E> {
                Ok(TextOrOther(Some(Cow::Owned(text))))
            }
            fn visit_bool<E: de::Error>(self, _: bool) -> Result<TextOrOther<'de>, E> {
                Ok(TextOrOther(None))
            }
            fn visit_i64<E: de::Error>(self, _: i64) -> Result<TextOrOther<'de>, E> {
                Ok(TextOrOther(None))
            }
            fn visit_u64<E: de::Error>(self, _: u64) -> Result<TextOrOther<'de>, E> {
                Ok(TextOrOther(None))
            }
            fn visit_f64<E: de::Error>(self, _: f64) -> Result<TextOrOther<'de>, E> {
                Ok(TextOrOther(None))
            }
            fn visit_unit<E: de::Error>(self) -> Result<TextOrOther<'de>, E> {
                Ok(TextOrOther(None))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<TextOrOther<'de>, A::Error> {
                Checked::drain_seq(seq)?;
                Ok(TextOrOther(None))
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<TextOrOther<'de>, A::Error> {
                Checked::drain_map(map)?;
                Ok(TextOrOther(None))
            }
        }

        deserializer.deserialize_any(TextOrOtherVisitor)
    }
}

impl<'de> Deserialize<'de> for Shape {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Ok(match deserializer.deserialize_any(CheckedVisitor)? {
            Checked::Object => Shape::Object,
            Checked::Other => Shape::Other,
        })
    }
}

/// Any JSON value, checked as thoroughly as reading it into a `Value` would
/// and then dropped; only whether it was an object is kept.
enum Checked {
    Object,
    Other,
}

impl Checked {
    fn drain_seq<'de, A: SeqAccess<'de>>(mut seq: A) -> Result<(), A::Error> {
        while seq.next_element::<Checked>()?.is_some() {}
        Ok(())
    }

    /// The number of members.
    fn drain_map<'de, A: MapAccess<'de>>(mut map: A) -> Result<usize, A::Error> {
        let mut members = 0;
        while map.next_key::<Text<'de>>()?.is_some() {
            map.next_value::<Checked>()?;
            members += 1;
        }
        Ok(members)
    }
}

impl<'de> Deserialize<'de> for Checked {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(CheckedVisitor)
    }
}

struct CheckedVisitor;

impl<'de> Visitor<'de> for CheckedVisitor {
    type Value = Checked;

    fn expecting(&self, formatter: &mut fmt::Formatter) -> fmt::Result {
        formatter.write_str("any valid JSON value")
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<Checked, E> {
        Ok(Checked::Other)
    }
    fn visit_i64<E: de::Error>(self, _: i64) -> Result<Checked, E> {
        Ok(Checked::Other)
    }
    fn visit_u64<E: de::Error>(self, _: u64) -> Result<Checked, E> {
        Ok(Checked::Other)
    }
    fn visit_f64<E: de::Error>(self, _: f64) -> Result<Checked, E> {
        Ok(Checked::Other)
    }
    fn visit_str<E: de::Error>(self, _: &str) -> Result<Checked, E> {
        Ok(Checked::Other)
    }
    fn visit_unit<E: de::Error>(self) -> Result<Checked, E> {
        Ok(Checked::Other)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Checked, A::Error> {
        Checked::drain_seq(seq)?;
        Ok(Checked::Other)
    }
    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Checked, A::Error> {
        Checked::drain_map(map)?;
        Ok(Checked::Object)
    }
}

/// A `_meta` text (or any JSON object text) as an object.
pub(crate) fn parse_object(
    text: &str,
) -> Result<serde_json::Map<String, Value>, serde_json::Error> {
    serde_json::from_str(text)
}
