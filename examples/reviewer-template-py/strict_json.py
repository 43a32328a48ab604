"""JSON read and written as serde_json does it, so that a Python module
decides exactly as its Rust counterpart does.

`json.loads` accepts things that `serde_json::from_str::<Value>` refuses:
`NaN` and `Infinity`, lone surrogates (`"\\ud800"`), numbers out of `f64`
range, and more than 127 levels of nesting. It also keeps numbers differently:
`-0` is `-0.0` in serde_json, and integers outside i64/u64 become floats.
`json.dumps` writes floats the way Python does. This module mirrors
serde_json on all of these points, within the standard library only (it runs
on the CPython that componentize-py bundles and on the one the native tests
use).

- `loads(text)` reads like `serde_json::from_str::<Value>` and raises
  `JsonError` where serde_json returns an error.
- `parse_json(text)` is `serde_json::from_str::<Value>(text).ok()`: the value,
  or `NOT_JSON`.
- `to_json(value)` writes like `Value::to_string()` (floats: see `_ryu`).
- `RUST_WHITESPACE` is what Rust's `str::trim` strips.

Duplicate keys: the last one wins, as in a `serde_json::Map`. A reader that
needs to see them (serde's `deny_unknown_fields` structs do) passes
`object_pairs_hook` to `loads`.

Used by `allowlist.py` (in `reviewer-template-py`) and `model_rule.py` (in
`model-reviewer-template-py`, through a symbolic link to this file);
`test_strict_json.py` tests it.
"""

import json
import math

__all__ = [
    "MAX_DEPTH", "RUST_WHITESPACE", "JsonError", "NOT_JSON", "loads", "parse_json", "to_json",
]

#: serde_json's recursion limit: 127 nested arrays/objects are read, 128 are
#: refused.
MAX_DEPTH = 127

#: Rust's `char::is_whitespace` (Unicode White_Space), which `str::trim`
#: strips. Python's `str.strip()` would also strip U+001C..U+001F.
RUST_WHITESPACE = (
    "\t\n\x0b\x0c\r \x85\xa0\u1680"
    + "".join(chr(point) for point in range(0x2000, 0x200B))
    + "\u2028\u2029\u202f\u205f\u3000"
)


class JsonError(ValueError):
    """Text that serde_json would refuse. The message is serde_json's wording
    (without its `at line L column C`) where json.loads would take the text,
    and json.loads's own where both refuse it."""


# ----------------------------------------------------------------------------
# Reading
# ----------------------------------------------------------------------------

def _parse_float(text):
    value = float(text)
    if math.isinf(value):
        raise JsonError("number out of range")
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
    raise JsonError(f"expected value (found `{name}`)")


def _check_strings_and_depth(value):
    """Refuses what json.loads lets through but serde_json does not: lone
    surrogates (from `\\ud800` escapes) and nesting deeper than serde's
    recursion limit. Iterative, so no input can exhaust the stack here."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, str):
            try:
                item.encode("utf-8")
            except UnicodeEncodeError:
                raise JsonError("lone leading surrogate in hex escape") from None
        elif isinstance(item, (list, dict)):
            if depth > MAX_DEPTH:
                raise JsonError("recursion limit exceeded")
            children = item.items() if isinstance(item, dict) else ((None, v) for v in item)
            for key, child in children:
                if key is not None:
                    stack.append((key, depth))
                stack.append((child, depth + 1))


def loads(text, object_pairs_hook=None):
    """`serde_json::from_str::<Value>(text)`: the value (JSON `null` is None,
    an object a dict, an array a list), or JsonError.

    `object_pairs_hook`, as for json.loads, is called with each object's
    `(key, value)` pairs in order and must return a dict (a subclass may keep
    the pairs); without it the last of duplicate keys wins."""
    try:
        value = json.loads(
            text,
            object_pairs_hook=object_pairs_hook,
            parse_float=_parse_float,
            parse_int=_parse_int,
            parse_constant=_parse_constant,
        )
    except JsonError:
        raise
    except RecursionError:
        raise JsonError("recursion limit exceeded") from None
    except ValueError as error:  # json.JSONDecodeError is one
        raise JsonError(str(error)) from None
    _check_strings_and_depth(value)
    return value


#: What `parse_json` returns for text serde_json would refuse (test it with
#: `is`: JSON `null`, `false`, `0` and `""` are falsy too).
NOT_JSON = object()


def parse_json(text):
    """`serde_json::from_str::<Value>(text).ok()`: the value (JSON `null` is
    None), or NOT_JSON when serde_json would refuse the text."""
    try:
        return loads(text)
    except JsonError:
        return NOT_JSON


# ----------------------------------------------------------------------------
# Writing
# ----------------------------------------------------------------------------

def _ryu(value):
    """A finite float as the `ryu` crate writes it: `1e20`, `1e-7`,
    `0.00001`, `1.5`, `-0.0`. (serde_json 1.0.154, the version in the
    repository's Cargo.lock, writes floats with `zmij` instead, which is the
    same but for a `+` in exponents from 16 up: `1e+20`.)"""
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
