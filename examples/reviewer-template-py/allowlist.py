"""The allowlist policy, in plain Python: the first matching rule of the
module config decides; no match answers the config's `default` (`defer`
unless set).

This is `guests/allowlist` (Rust) ported to Python, with the same config
format and the same answers (`cases/` holds the proof, run on both)::

    {
      "rules": [
        { "server": "docs", "tool": "read_*", "decision": "accept" },
        { "mode": "url", "url": "https://*.example.com/*", "decision": "accept" },
        { "server": "*", "tool": "delete_*", "decision": "decline",
          "message": "Deletions are not allowed from this agent." }
      ],
      "default": "defer"
    }

A rule matches when every pattern it sets matches (`*` and `?` are the only
wildcards; everything else is literal and case-sensitive). `tool` is matched
against the elicitation's `_meta.tool_name` (trimmed; a blank one counts as
none); a rule that sets `tool` never matches a request without one. An
`accept` in form mode answers with the rule's `content` (default `{}`), which
the host validates against the form's schema; in URL mode it carries none.

Nothing here imports the WIT bindings, so it runs (and is tested) with any
Python 3: `python3 -m unittest test_allowlist test_strict_json`. `app.py` is
the glue that turns the host's records into the three strings `decide` reads.

To write your own policy, change this file (and its tests) and keep `app.py`
and `strict_json.py`.

Why the JSON reading is fussier than `json.loads`: the Rust guest reads its
config with serde, and a config one of them refuses must be refused by the
other. `strict_json.py` (shared with the model-reviewer template) refuses
what `serde_json` refuses but `json.loads` takes (`NaN` and `Infinity`, lone
surrogates, numbers out of `f64` range, more than 127 levels of nesting) and
keeps numbers as serde does (`-0` is `-0.0`). `Config` and `Rule` are
decoded here the way `#[derive(Deserialize)]` with `deny_unknown_fields`
decodes them: unknown and duplicate fields are errors, `null` is "not set"
for the optional patterns, `message` and `content`, a struct may also be
written as an array of its fields in order, and an enum value as
`{"accept": null}`. Error messages follow serde's wording, without its
`at line L column C` (and when a config has several faults, serde may name
another one first).
"""

import json

from strict_json import RUST_WHITESPACE, JsonError, loads

__all__ = [
    "ConfigError", "Config", "Rule", "parse_config", "parse_meta", "tool_name",
    "wildcard_match", "decide",
]

# ----------------------------------------------------------------------------
# The config as serde decodes it
# ----------------------------------------------------------------------------


class ConfigError(JsonError):
    """The config (or other JSON text) is not what serde would accept."""


class _Object(dict):
    """A JSON object: a dict (the last of duplicate keys wins, as in a
    `serde_json::Map`) that also keeps its pairs in order, so that a struct
    can be decoded the way serde decodes it (and see duplicates)."""

    __slots__ = ("pairs",)


def _object(pairs):
    obj = _Object(pairs)
    obj.pairs = pairs
    return obj


def _load_json(text):
    """`serde_json::from_str::<Value>`, objects as `_Object`: the value, or
    ConfigError."""
    try:
        return loads(text, object_pairs_hook=_object)
    except JsonError as error:
        raise ConfigError(str(error)) from None


def _unexpected(value):
    """serde's `Unexpected` wording for a JSON value."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"boolean `{'true' if value else 'false'}`"
    if isinstance(value, int):
        return f"integer `{value}`"
    if isinstance(value, float):
        return f"floating point `{_rust_float(value)}`"
    if isinstance(value, str):
        return f"string {json.dumps(value, ensure_ascii=False)}"
    if isinstance(value, list):
        return "sequence"
    return "map"


def _rust_float(value):
    if value == int(value) and abs(value) < 1e16:
        return f"{value:.1f}"
    return repr(value)


def _invalid_type(value, expected):
    return ConfigError(f"invalid type: {_unexpected(value)}, expected {expected}")


def _one_of(names):
    names = [f"`{name}`" for name in names]
    if len(names) == 1:
        return names[0]
    if len(names) == 2:
        return f"{names[0]} or {names[1]}"
    return "one of " + ", ".join(names)


def _optional_string(value):
    """`Option<String>`: null is None."""
    if value is None or isinstance(value, str):
        return value
    raise _invalid_type(value, "a string")


def _unit_enum(value, variants):
    """A serde unit-variant enum: `"name"`, or `{"name": null}`. serde_json
    answers anything else (null, a number, a list, a map without exactly one
    key) with "expected value"."""
    if isinstance(value, str):
        variant = value
    elif isinstance(value, _Object) and len(value.pairs) == 1:
        variant, payload = value.pairs[0]
        if variant in variants and payload is not None:
            raise _invalid_type(payload, "unit")
    else:
        raise ConfigError("expected value")
    if variant not in variants:
        raise ConfigError(f"unknown variant `{variant}`, expected {_one_of(variants)}")
    return variant


def _struct(value, name, fields, required, decoders):
    """A `#[derive(Deserialize)] #[serde(deny_unknown_fields)]` struct whose
    fields are all `#[serde(default)]` except `required`: a dict of the
    fields that were set."""
    decoded = {}
    if isinstance(value, list):
        # serde also reads a struct from an array of its fields in order; a
        # missing field takes its default, and the first missing one without
        # a default is the error.
        for field, item in zip(fields, value):
            decoded[field] = decoders[field](item)
        if len(value) > len(fields):
            raise ConfigError("trailing characters")
        for index in range(len(value), len(fields)):
            if fields[index] in required:
                raise ConfigError(
                    f"invalid length {index}, expected struct {name} with {len(fields)} elements"
                )
        return decoded
    if not isinstance(value, _Object):
        raise _invalid_type(value, f"struct {name}")
    for key, item in value.pairs:
        if key not in fields:
            raise ConfigError(f"unknown field `{key}`, expected {_one_of(fields)}")
        if key in decoded:
            raise ConfigError(f"duplicate field `{key}`")
        decoded[key] = decoders[key](item)
    for field in required:
        if field not in decoded:
            raise ConfigError(f"missing field `{field}`")
    return decoded


# ----------------------------------------------------------------------------
# The config
# ----------------------------------------------------------------------------

MODES = ("any", "form", "url")
DECISIONS = ("accept", "decline", "cancel", "defer")


class Rule:
    """One rule. A pattern of `None` is not set (matches anything)."""

    _FIELDS = ("server", "tool", "mode", "url", "decision", "message", "content")

    def __init__(self, decision, server=None, tool=None, mode="any", url=None,
                 message=None, content=None):
        self.decision = decision
        self.server = server
        self.tool = tool
        self.mode = mode
        self.url = url
        self.message = message
        self.content = content

    @classmethod
    def from_json(cls, value):
        def content(item):
            if item is None or isinstance(item, dict):
                return item
            raise _invalid_type(item, "a map")

        decoders = {
            "server": _optional_string,
            "tool": _optional_string,
            "mode": lambda item: _unit_enum(item, MODES),
            "url": _optional_string,
            "decision": lambda item: _unit_enum(item, DECISIONS),
            "message": _optional_string,
            "content": content,
        }
        return cls(**_struct(value, "Rule", cls._FIELDS, ("decision",), decoders))

    def matches(self, server, tool, url):
        mode_ok = (
            self.mode == "any"
            or (self.mode == "form" and url is None)
            or (self.mode == "url" and url is not None)
        )
        return (
            mode_ok
            and _pattern_matches(self.server, server)
            and _pattern_matches(self.tool, tool)
            and _pattern_matches(self.url, url)
        )


class Config:
    """The module config: the rules (first match wins) and the default."""

    _FIELDS = ("rules", "default")

    def __init__(self, rules=(), default="defer"):
        self.rules = list(rules)
        self.default = default

    @classmethod
    def from_json(cls, value):
        def rules(item):
            if not isinstance(item, list):
                raise _invalid_type(item, "a sequence")
            return [Rule.from_json(rule) for rule in item]

        decoders = {
            "rules": rules,
            "default": lambda item: _unit_enum(item, DECISIONS),
        }
        return cls(**_struct(value, "Config", cls._FIELDS, (), decoders))


def parse_config(text):
    """Reads the module config (JSON text); raises ConfigError."""
    return Config.from_json(_load_json(text))


# ----------------------------------------------------------------------------
# Matching and deciding
# ----------------------------------------------------------------------------


def wildcard_match(pattern, value):
    """`wildmatch::WildMatch::new(pattern).matches(value)`: `*` matches any
    run of characters (none too), `?` exactly one; case-sensitive. Linear
    backtracking, so a hostile pattern cannot make it slow."""
    p = v = 0
    star = -1
    mark = 0
    while v < len(value):
        if p < len(pattern) and (pattern[p] == "?" or pattern[p] == value[v]):
            p += 1
            v += 1
        elif p < len(pattern) and pattern[p] == "*":
            star = p
            mark = v
            p += 1
        elif star != -1:
            p = star + 1
            mark += 1
            v = mark
        else:
            return False
    while p < len(pattern) and pattern[p] == "*":
        p += 1
    return p == len(pattern)


def _pattern_matches(pattern, value):
    if pattern is None:
        return True
    if value is None:
        return False
    return wildcard_match(pattern, value)


def parse_meta(text):
    """The request's `_meta` (JSON text or None) as a dict; `{}` when absent,
    not valid JSON or not an object (the Rust guest's `unwrap_or_default`)."""
    if text is None:
        return {}
    try:
        meta = _load_json(text)
    except ConfigError:
        return {}
    return meta if isinstance(meta, dict) else {}


def tool_name(meta):
    """The trimmed `_meta.tool_name`, or None when absent, not a string or
    blank."""
    name = meta.get("tool_name")
    if not isinstance(name, str):
        return None
    name = name.strip(RUST_WHITESPACE)
    return name or None


def _content_text(content):
    """`Value::Object(content).to_string()`: compact, keys sorted (a
    `serde_json::Map` without `preserve_order` is a BTreeMap), non-ASCII
    as is."""
    return json.dumps(content, ensure_ascii=False, separators=(",", ":"), sort_keys=True,
                      allow_nan=False)


def decide(config, server, tool, url):
    """Decides by the first matching rule.

    `server` is the server's name, `tool` the request's tool name (see
    `tool_name`) or None, `url` the URL in URL mode and None in form mode.
    Returns `(answer, rationale)`, where `answer` is one of `("defer",)`,
    `("accept", content_text_or_None)`, `("decline", message_or_None)`,
    `("cancel",)`.
    """
    index, rule = next(
        ((index, rule) for index, rule in enumerate(config.rules)
         if rule.matches(server, tool, url)),
        (None, None),
    )
    action = config.default if rule is None else rule.decision
    if action == "defer":
        answer = ("defer",)
    elif action == "cancel":
        answer = ("cancel",)
    elif action == "decline":
        answer = ("decline", None if rule is None else rule.message)
    elif url is not None:
        answer = ("accept", None)
    else:
        content = {} if rule is None or rule.content is None else rule.content
        answer = ("accept", _content_text(content))
    if index is None:
        rationale = "no allowlist rule matched; default applies"
    else:
        rationale = f"allowlist rule #{index + 1} matched"
    return answer, rationale
