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
JSON is read and written as serde_json does it by `strict_json.py` (a link to
`../reviewer-template-py/strict_json.py`, shared with the allowlist template).
"""

from strict_json import NOT_JSON, RUST_WHITESPACE, parse_json, to_json

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
# Rust's formatting
# ----------------------------------------------------------------------------

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
    verdict = parse_json(text.strip(RUST_WHITESPACE))
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
