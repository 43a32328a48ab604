"""Native tests of the policy (no WebAssembly, no dependencies):
`python3 -m unittest -v test_allowlist` here. `build.sh` runs them first.

They are the Rust guest's unit tests, an exhaustive check of the wildcard
matcher against a reference, the JSON strictness that `gatehouse` itself
never lets reach a module (it re-serialises every config), and every case of
`cases/` (the reference allowlist's own cases, `guests/allowlist/cases`) evaluated
directly on `allowlist.py`. The same case files run on the
built component with `gatehouse conformance reviewer.wasm --cases cases`
(and on the Rust guest, which passes them too).
"""

import itertools
import json
import pathlib
import unittest

import allowlist
from allowlist import ConfigError, decide, parse_config, parse_meta, tool_name

HERE = pathlib.Path(__file__).resolve().parent


def config(text):
    return parse_config(text)


FORM = dict(server="docs", tool="read_file", url=None)


class RustGuestTests(unittest.TestCase):
    """guests/allowlist/src/lib.rs `mod tests`, one for one."""

    def test_first_matching_rule_wins(self):
        c = config('{"rules": ['
                   '{"server": "docs", "tool": "read_*", "decision": "accept"},'
                   '{"server": "*", "decision": "decline", "message": "no"}]}')
        self.assertEqual(decide(c, **FORM)[0], ("accept", "{}"))
        self.assertEqual(decide(c, **dict(FORM, tool="write_file"))[0], ("decline", "no"))

    def test_a_tool_pattern_never_matches_a_request_without_a_tool(self):
        c = config('{"rules": [{"tool": "*", "decision": "accept"}]}')
        self.assertEqual(decide(c, **dict(FORM, tool=None))[0], ("defer",))

    def test_modes_and_urls_are_matched(self):
        c = config('{"rules": [{"mode": "url", "url": "https://*.example.com/*", '
                   '"decision": "accept"}], "default": "decline"}')
        good = dict(FORM, url="https://auth.example.com/login")
        bad = dict(FORM, url="https://evil.test/login")
        self.assertEqual(decide(c, **good)[0], ("accept", None))
        self.assertEqual(decide(c, **bad)[0], ("decline", None))
        self.assertEqual(decide(c, **FORM)[0], ("decline", None))

    def test_accept_content_comes_from_the_rule(self):
        c = config('{"rules": [{"decision": "accept", "content": {"ok": true}}]}')
        self.assertEqual(decide(c, **FORM)[0], ("accept", '{"ok":true}'))

    def test_unknown_fields_are_refused(self):
        with self.assertRaises(ConfigError):
            config('{"rulez": []}')


def reference_match(pattern, value):
    """The dynamic-programming reference wildmatch's own tests use."""
    dp = [True] + [False] * len(value)
    for p in pattern:
        if p == "*":
            nxt, seen = [], False
            for cell in dp:
                seen = seen or cell
                nxt.append(seen)
        else:
            nxt = [False] + [dp[j - 1] and (p == "?" or p == value[j - 1])
                             for j in range(1, len(value) + 1)]
        dp = nxt
    return dp[len(value)]


class WildcardTests(unittest.TestCase):
    def test_matches_the_reference_exhaustively(self):
        def strings(alphabet, longest):
            for length in range(longest + 1):
                for chars in itertools.product(alphabet, repeat=length):
                    yield "".join(chars)

        inputs = list(strings("ab", 6))
        for pattern in strings("ab*?", 5):
            for value in inputs:
                self.assertEqual(allowlist.wildcard_match(pattern, value),
                                 reference_match(pattern, value), (pattern, value))

    def test_hostile_patterns_stay_fast(self):
        self.assertFalse(allowlist.wildcard_match("*a" * 200 + "b", "a" * 5000))


class ToolNameTests(unittest.TestCase):
    def test_trimmed_like_rust_str_trim(self):
        self.assertEqual(tool_name({"tool_name": "\u3000 read \u0085"}), "read")
        # Python's str.strip() would strip these; Rust's trim does not.
        self.assertEqual(tool_name({"tool_name": "\x1fread\x1c"}), "\x1fread\x1c")
        self.assertEqual(tool_name({"tool_name": "\u200bread"}), "\u200bread")

    def test_absent_blank_or_not_a_string_is_none(self):
        for meta in ({}, {"tool_name": ""}, {"tool_name": " \n"}, {"tool_name": 1},
                     {"tool_name": None}, {"tool_name": ["x"]}):
            self.assertIsNone(tool_name(meta), meta)

    def test_meta_that_is_not_an_object_is_empty(self):
        for text in (None, "", "[]", '"x"', "null", "{", '{"tool_name": NaN}'):
            self.assertEqual(parse_meta(text), {}, text)
        self.assertEqual(parse_meta('{"tool_name": "a", "tool_name": "b"}'), {"tool_name": "b"})


class StrictJsonTests(unittest.TestCase):
    """What serde_json refuses and json.loads would take. gatehouse's own
    paths re-serialise configs, so these matter to embedders that hand a
    module config text of their own (`ChainLink::with_config`)."""

    def refused(self, text, part):
        with self.assertRaises(ConfigError) as caught:
            parse_config(text)
        self.assertIn(part, str(caught.exception))

    def test_non_json_numbers(self):
        for text in ('{"rules": [{"decision": "accept", "content": {"x": NaN}}]}',
                     '{"rules": [{"decision": "accept", "content": {"x": Infinity}}]}',
                     '{"rules": [{"decision": "accept", "content": {"x": -Infinity}}]}'):
            self.refused(text, "expected value")
        self.refused('{"rules": [{"decision": "accept", "content": {"x": 1e400}}]}',
                     "number out of range")
        self.refused('{"rules": [{"decision": "accept", "content": {"x": 1%s}}]}' % ("0" * 400),
                     "number out of range")

    def test_numbers_as_serde_keeps_them(self):
        c = config('{"rules": [{"decision": "accept", "content": '
                   '{"a": -0, "b": 18446744073709551616, "c": 1e-400, "d": -9223372036854775809}}]}')
        content = json.loads(decide(c, **FORM)[0][1])
        self.assertEqual(repr(content["a"]), "-0.0")
        self.assertIsInstance(content["b"], float)
        self.assertEqual(content["c"], 0.0)
        self.assertIsInstance(content["d"], float)

    def test_lone_surrogates(self):
        self.refused('{"rules": [{"tool": "\\ud800", "decision": "accept"}]}', "surrogate")
        self.refused('{"rules": [{"decision": "accept", "content": {"\\udfff": 1}}]}', "surrogate")
        # A pair is a character.
        c = config('{"rules": [{"tool": "\\ud83d\\ude00", "decision": "accept"}]}')
        self.assertEqual(c.rules[0].tool, "\U0001F600")

    def test_nesting_limit(self):
        def nested(levels):
            # The config object, the rules list, the rule and the content
            # are 4 levels; the rest are lists inside the content.
            inner = "[" * (levels - 4) + "]" * (levels - 4)
            return '{"rules": [{"decision": "accept", "content": {"x": %s}}]}' % inner

        config(nested(127))  # serde_json's most
        self.refused(nested(128), "recursion limit exceeded")
        self.refused("[" * 100000 + "]" * 100000, "recursion limit exceeded")

    def test_duplicate_fields(self):
        self.refused('{"rules": [], "rules": []}', "duplicate field `rules`")
        self.refused('{"rules": [{"decision": "accept", "decision": "cancel"}]}',
                     "duplicate field `decision`")
        # In content (a map), the last of duplicate keys wins.
        c = config('{"rules": [{"decision": "accept", "content": {"a": 1, "a": 2}}]}')
        self.assertEqual(decide(c, **FORM)[0], ("accept", '{"a":2}'))

    def test_content_keys_are_sorted_like_a_btreemap(self):
        c = config('{"rules": [{"decision": "accept", "content": {"b": 1, "a": {"d": 1, "c": 2}, "é": 0, "Z": 0}}]}')
        self.assertEqual(decide(c, **FORM)[0][1], '{"Z":0,"a":{"c":2,"d":1},"b":1,"é":0}')

    def test_not_json(self):
        for text in ("", "{", "{} x", "{'rules': []}", '{"rules": [],}'):
            with self.assertRaises(ConfigError):
                parse_config(text)


class CaseFileTests(unittest.TestCase):
    """Every case of cases/ (the allowlist's) on the policy itself, as the kit checks it."""

    def test_cases(self):
        files = sorted((HERE / "cases").glob("*.json"))
        self.assertTrue(files)
        for path in files:
            for case in json.loads(path.read_text(encoding="utf-8")):
                with self.subTest(case=case["name"]):
                    self.check(case)

    def check(self, case):
        request = case["request"]
        conf = case.get("config")
        # The kit hands a module `Value::to_string()` of the case's config
        # (`{}` for none or null): compact, keys sorted.
        text = "{}" if conf is None else json.dumps(conf, separators=(",", ":"), sort_keys=True,
                                                    ensure_ascii=False)
        meta = request.get("_meta")
        url = request["url"] if request.get("mode") == "url" else None
        try:
            parsed = parse_config(text)
        except ConfigError as error:
            answer, rationale = ("decline", None), f"invalid allowlist config: {error}"
        else:
            answer, rationale = decide(
                parsed,
                server=case["context"]["server_name"],
                tool=tool_name(parse_meta(None if meta is None else json.dumps(meta))),
                url=url,
            )
        expect = case["expect"]
        self.assertIn(answer[0], expect["decision"].split("|"))
        if "message" in expect:
            self.assertEqual(answer[1] if answer[0] == "decline" else None, expect["message"])
        if "rationale_contains" in expect:
            self.assertIn(expect["rationale_contains"], rationale)
        if "content" in expect:
            self.assertEqual(json.loads(answer[1]), expect["content"])


if __name__ == "__main__":
    unittest.main()
