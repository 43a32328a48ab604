"""The rule of the model-reviewer template, in plain Python (no WIT): the
behaviour of `examples/model-reviewer-template/src/lib.rs`, case for case.

An approval of an MCP tool call (a form that asks for nothing, with
`codex_approval_kind = "mcp_tool_call"` in its `_meta`) is put to the model,
which answers allow or deny; everything else is not this module's to decide
and is deferred without asking. When the model cannot be asked or gives no
verdict, the module declines: a review that could not happen must not let the
call through, nor hand it on as if the model had never been asked.

`app.py` is the WIT glue: it hands `review` the request's parts and a function
that asks the model. The tests (`test_model_rule.py`) hand it a fake one.
"""

import json
import math

#: What the model is told, before the call it assesses.
POLICY = (
    "You review actions an AI coding agent wants to take through MCP tools. "
    "Allow what is read-only or easily undone; deny what deletes, overwrites, publishes, pays or "
    "sends data outside the organization. Answer only with JSON: "
    '{"outcome": "allow" or "deny", "rationale": "one sentence"}.'
)

#: The answer's shape, sent as the endpoint's response format.
VERDICT_SCHEMA = (
    '{"type":"object","properties":{"outcome":{"type":"string","enum":["allow","deny"]},'
    '"rationale":{"type":"string"}},"required":["outcome","rationale"]}'
)

#: The most tokens wanted back.
MAX_OUTPUT_TOKENS = 200


class ModelUnavailable(Exception):
    """Raised by the `ask` function given to `review` when the model cannot be
    asked; `str(error)` is the reason (the glue writes the WIT `model-error`
    as Rust's `{:?}` would: `ModelError::Timeout`,
    `ModelError::Transient("...")`)."""


# ----------------------------------------------------------------------------
# JSON as serde_json reads and writes it
# ----------------------------------------------------------------------------

class _NotJson(Exception):
    pass


#: serde_json's recursion limit: 128 nested arrays/objects are refused.
_MAX_DEPTH = 127

#: Rust's `char::is_whitespace` (Unicode White_Space), which `str::trim`
#: strips. Python's `str.strip()` would also strip U+001C..U+001F.
_RUST_WHITESPACE = (
    "\t\n\x0b\x0c\r \x85\xa0\u1680"
    + "".join(chr(point) for point in range(0x2000, 0x200B))
    + "\u2028\u2029\u202f\u205f\u3000"
)


def _parse_float(text):
    value = float(text)
    if math.isinf(value):
        raise _NotJson("number out of range")
    return value


def _parse_int(text):
    # serde_json keeps integers in i64/u64 and reads larger ones as f64;
    # `-0` is the float -0.0.
    if text == "-0":
        return -0.0
    if len(text) <= 21:
        value = int(text)
        if -(1 << 63) <= value < (1 << 64):
            return value
    return _parse_float(text)


def _parse_constant(name):
    # NaN, Infinity and -Infinity are not JSON.
    raise _NotJson(name)


def _check_strings_and_depth(value):
    """What json.loads lets through and serde_json does not: lone surrogates
    and nesting past serde's recursion limit. Iterative."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, str):
            try:
                item.encode("utf-8")
            except UnicodeEncodeError:
                raise _NotJson("lone surrogate") from None
        elif isinstance(item, (list, dict)):
            if depth > _MAX_DEPTH:
                raise _NotJson("recursion limit exceeded")
            children = item.items() if isinstance(item, dict) else ((None, v) for v in item)
            for key, child in children:
                if key is not None:
                    stack.append((key, depth))
                stack.append((child, depth + 1))


#: What `parse_json` returns for text serde_json would refuse.
NOT_JSON = object()


def parse_json(text):
    """`serde_json::from_str::<Value>(text).ok()`: the value (JSON `null` is
    None), or NOT_JSON when serde_json would refuse the text."""
    try:
        value = json.loads(text, parse_float=_parse_float, parse_int=_parse_int,
                           parse_constant=_parse_constant)
        _check_strings_and_depth(value)
    except (_NotJson, ValueError, RecursionError):
        return NOT_JSON
    return value


def _ryu(value):
    """A finite float as serde_json writes it (the `ryu` crate): `1e20`,
    `1e-7`, `0.00001`, `1.5`, `-0.0`."""
    if value == 0:
        return "-0.0" if math.copysign(1.0, value) < 0 else "0.0"
    sign = "-" if value < 0 else ""
    text = repr(abs(value))  # the shortest digits that round-trip, like ryu
    mantissa, _, exponent = text.partition("e")
    whole, _, fraction = mantissa.partition(".")
    digits = whole + fraction
    point = len(whole) + (int(exponent) if exponent else 0)
    stripped = digits.lstrip("0")
    point -= len(digits) - len(stripped)
    digits = stripped.rstrip("0")
    length = len(digits)
    k = point - length
    if 0 <= k and point <= 16:
        body = digits + "0" * k + ".0"
    elif 0 < point <= 16:
        body = digits[:point] + "." + digits[point:]
    elif -5 < point <= 0:
        body = "0." + "0" * -point + digits
    elif length == 1:
        body = f"{digits}e{point - 1}"
    else:
        body = f"{digits[0]}.{digits[1:]}e{point - 1}"
    return sign + body


def to_json(value):
    """`Value::to_string()`: compact, object keys sorted (serde_json's map is
    a BTreeMap without `preserve_order`), non-ASCII as is, floats as ryu."""
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return _ryu(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, list):
        return "[" + ",".join(to_json(item) for item in value) + "]"
    return "{" + ",".join(json.dumps(key, ensure_ascii=False) + ":" + to_json(value[key])
                          for key in sorted(value)) + "}"


def rust_debug_str(text):
    """`format!("{:?}", text)` for a string, near enough: quoted, with `\\`,
    `"`, `\\t`, `\\r`, `\\n`, `\\0` and unprintable characters escaped."""
    out = []
    for char in text:
        if char in '\\"':
            out.append("\\" + char)
        elif char == "\t":
            out.append("\\t")
        elif char == "\r":
            out.append("\\r")
        elif char == "\n":
            out.append("\\n")
        elif char == "\0":
            out.append("\\0")
        elif char != " " and not char.isprintable():
            out.append(f"\\u{{{ord(char):x}}}")
        else:
            out.append(char)
    return '"' + "".join(out) + '"'


# ----------------------------------------------------------------------------
# The rule
# ----------------------------------------------------------------------------

def tool_call(requested_schema, meta):
    """The tool and its arguments (JSON text), when the request approves an
    MCP tool call with a form that asks for nothing; else None.

    `requested_schema` is the form's schema (JSON text), None in URL mode;
    `meta` the request's `_meta` (JSON text) or None.
    """
    if requested_schema is None or meta is None:
        return None
    schema = parse_json(requested_schema)
    if schema is NOT_JSON:
        return None
    properties = schema.get("properties") if isinstance(schema, dict) else None
    asks_nothing = ("properties" not in schema if isinstance(schema, dict) else True) or (
        isinstance(properties, dict) and not properties)
    meta_value = parse_json(meta)
    if not asks_nothing or not isinstance(meta_value, dict):
        return None
    if meta_value.get("codex_approval_kind") != "mcp_tool_call":
        return None
    tool = meta_value.get("tool_name")
    if not isinstance(tool, str):
        return None
    arguments = to_json(meta_value["tool_params"]) if "tool_params" in meta_value else "{}"
    return tool, arguments


def completion_request(server, tool, arguments):
    """What the model is asked: `(messages, output_schema,
    max_output_tokens)`, each message a `(role, content)` pair."""
    messages = [
        ("system", POLICY),
        ("user", f"The agent calls the tool `{tool}` of the MCP server `{server}` with these "
                 f"arguments: {arguments}"),
    ]
    return messages, VERDICT_SCHEMA, MAX_OUTPUT_TOKENS


def decline(why):
    return ("decline", f"Not allowed: {why}"), why, "high"


def defer():
    return ("defer",), None, None


def judge(server, tool, arguments, ask):
    """Asks the model about one tool call and turns its verdict into the
    answer. `ask(messages, output_schema, max_output_tokens)` returns the
    completion's text or raises ModelUnavailable."""
    try:
        text = ask(*completion_request(server, tool, arguments))
    except ModelUnavailable as error:
        return decline(f"the model could not be asked: {error}")
    verdict = parse_json(text.strip(_RUST_WHITESPACE))
    if not isinstance(verdict, dict):
        verdict = {}
    rationale = verdict.get("rationale")
    if not isinstance(rationale, str):
        rationale = "no rationale given"
    outcome = verdict.get("outcome")
    if outcome == "allow":
        return ("accept", "{}"), f"the model allows `{tool}`: {rationale}", "low"
    if outcome == "deny":
        return decline(f"the model denies `{tool}`: {rationale}")
    return decline("the model gave no verdict")


def review(server, requested_schema, meta, ask):
    """The whole review: `(answer, rationale, risk)`, where `answer` is
    `("defer",)`, `("accept", content_text)` or `("decline", message)` and
    `risk` is None, `"low"` or `"high"`."""
    call = tool_call(requested_schema, meta)
    if call is None:
        return defer()
    tool, arguments = call
    return judge(server, tool, arguments, ask)
