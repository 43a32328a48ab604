"""Native tests of the rule, with a fake model (no WebAssembly, no
dependencies): `python3 -m unittest -v test_model_rule` here. `build.sh` runs
them first.

They check the rule against the Rust model-reviewer template
(`examples/model-reviewer-template/src/lib.rs`): what is put to the model
(the same messages, schema and token limit), how each verdict or failure is
answered, what is deferred without asking, and the JSON the Rust guest reads
and writes (serde_json's). Then every case of `cases/` (the Rust template's,
`../model-reviewer-template/cases`) with each of its `with_model` runs,
answered by a fake model that gives the conformance kit's stub answers. The
same case files run on the built component with
`gatehouse conformance reviewer.wasm --cases cases`.
"""

import json
import pathlib
import unittest

import model_rule
from model_rule import ModelUnavailable, review

HERE = pathlib.Path(__file__).resolve().parent

# The conformance kit's stub answers (host/conformance/src/model.rs).
ALLOW = ('{"outcome":"allow","risk_level":"low","user_authorization":"unknown",'
         '"rationale":"The scripted model allows this action (gatehouse conformance kit)."}')
DENY = ('{"outcome":"deny","risk_level":"high","user_authorization":"unknown",'
        '"rationale":"The scripted model denies this action (gatehouse conformance kit)."}')
MALFORMED = ("I am not able to assess this request. Please try again later. "
             "(gatehouse conformance kit)")

EMPTY_FORM = '{"type":"object","properties":{}}'


def meta(**fields):
    fields.setdefault("codex_approval_kind", "mcp_tool_call")
    return json.dumps(fields)


class FakeModel:
    """Answers with `answer` (text) or raises ModelUnavailable(`error`);
    records what it was asked."""

    def __init__(self, answer=None, error=None):
        self.answer, self.error, self.calls = answer, error, []

    def __call__(self, messages, output_schema, max_output_tokens):
        self.calls.append((messages, output_schema, max_output_tokens))
        if self.error is not None:
            raise ModelUnavailable(self.error)
        return self.answer


def never(*_):
    raise AssertionError("the model was asked")


class AskingTests(unittest.TestCase):
    def test_what_the_model_is_asked(self):
        fake = FakeModel(ALLOW)
        review("git", EMPTY_FORM, meta(tool_name="delete_branch", tool_params={"branch": "main"}),
               fake)
        self.assertEqual(fake.calls, [(
            [("system",
              "You review actions an AI coding agent wants to take through MCP tools. Allow what "
              "is read-only or easily undone; deny what deletes, overwrites, publishes, pays or "
              "sends data outside the organization. Answer only with JSON: {\"outcome\": "
              "\"allow\" or \"deny\", \"rationale\": \"one sentence\"}."),
             ("user", "The agent calls the tool `delete_branch` of the MCP server `git` with "
                      'these arguments: {"branch":"main"}')],
            '{"type":"object","properties":{"outcome":{"type":"string","enum":["allow","deny"]},'
            '"rationale":{"type":"string"}},"required":["outcome","rationale"]}',
            200,
        )])

    def test_arguments_are_written_as_serde_json_writes_them(self):
        cases = [
            (None, "{}"),  # no tool_params
            ({"b": 1, "a": [True, None, "é\n\x01"]}, '{"a":[true,null,"é\\n\\u0001"],"b":1}'),
            ({"x": None}, '{"x":null}'),
        ]
        for params, expected in cases:
            fake = FakeModel(ALLOW)
            fields = {"tool_name": "t"}
            if params is not None:
                fields["tool_params"] = params
            review("s", EMPTY_FORM, meta(**fields), fake)
            self.assertTrue(fake.calls[0][0][1][1].endswith(f"arguments: {expected}"), params)
        fake = FakeModel(ALLOW)
        review("s", EMPTY_FORM, '{"codex_approval_kind":"mcp_tool_call","tool_name":"t",'
                                '"tool_params":null}', fake)
        self.assertTrue(fake.calls[0][0][1][1].endswith("arguments: null"))

    def test_numbers_as_serde_json(self):
        text = ('[0, -0, 1.0, 1.5, 1e20, 1e16, 1e15, 123456789.125, 0.0001, 0.00001, 0.000001, '
                '1.5e-7, 2.5e300, 18446744073709551615, 18446744073709551616, '
                '-9223372036854775808, -9223372036854775809]')
        self.assertEqual(
            model_rule.to_json(model_rule.parse_json(text)),
            '[0,-0.0,1.0,1.5,1e20,1e16,1000000000000000.0,123456789.125,0.0001,0.00001,1e-6,'
            '1.5e-7,2.5e300,18446744073709551615,1.8446744073709552e19,-9223372036854775808,'
            '-9.223372036854776e18]')

    def test_json_serde_refuses(self):
        for text in ("", "{", "NaN", '{"x": Infinity}', "1e400", '"\\ud800"',
                     "[" * 128 + "]" * 128, "{} x", "{'a': 1}"):
            self.assertIs(model_rule.parse_json(text), model_rule.NOT_JSON, text)
        deepest = model_rule.parse_json("[" * 127 + "]" * 127)  # serde_json's most
        self.assertIsInstance(deepest, list)
        self.assertIsNone(model_rule.parse_json(" null "))


class VerdictTests(unittest.TestCase):
    def ask(self, model):
        return review("git", EMPTY_FORM, meta(tool_name="delete_branch"), model)

    def test_allow_accepts_with_empty_content(self):
        self.assertEqual(self.ask(FakeModel(ALLOW)), (
            ("accept", "{}"),
            "the model allows `delete_branch`: The scripted model allows this action "
            "(gatehouse conformance kit).",
            "low"))

    def test_deny_declines(self):
        why = ("the model denies `delete_branch`: The scripted model denies this action "
               "(gatehouse conformance kit).")
        self.assertEqual(self.ask(FakeModel(DENY)), (("decline", f"Not allowed: {why}"), why, "high"))

    def test_a_model_error_declines(self):
        why = 'the model could not be asked: ModelError::Transient("down")'
        self.assertEqual(self.ask(FakeModel(error='ModelError::Transient("down")')),
                         (("decline", f"Not allowed: {why}"), why, "high"))

    def test_no_verdict_declines(self):
        for text in (MALFORMED, "", "null", "[]", '{"outcome": "maybe"}', '{"outcome": true}',
                     '{"rationale": "x"}', '{"outcome": "allow", "n": NaN}',
                     '{"outcome": "allow"} trailing', '{"outcome": "Allow"}'):
            why = "the model gave no verdict"
            self.assertEqual(self.ask(FakeModel(text)),
                             (("decline", f"Not allowed: {why}"), why, "high"), text)

    def test_verdict_details(self):
        # Trimmed like Rust's str::trim (Unicode White_Space), the rationale optional.
        self.assertEqual(self.ask(FakeModel('\u3000\n{"outcome":"allow"}\u2028'))[1],
                         "the model allows `delete_branch`: no rationale given")
        self.assertEqual(self.ask(FakeModel('{"outcome":"deny","rationale":7}'))[1],
                         "the model denies `delete_branch`: no rationale given")
        # Duplicate keys: the last wins, as in serde_json's map.
        self.assertEqual(self.ask(FakeModel('{"outcome":"deny","outcome":"allow"}'))[0][0],
                         "accept")
        # \x1c is not Rust whitespace: serde_json refuses it.
        self.assertEqual(self.ask(FakeModel('\x1c{"outcome":"allow"}'))[1],
                         "the model gave no verdict")


class DeferTests(unittest.TestCase):
    def test_not_a_tool_call_approval_is_deferred_unasked(self):
        tool = meta(tool_name="t")
        for schema, meta_text in [
            (None, tool),  # URL mode
            (EMPTY_FORM, None),  # no _meta
            ('{"type":"object","properties":{"name":{"type":"string"}}}', tool),
            ('{"properties":null}', tool),
            ('{"properties":[]}', tool),
            ("{", tool),
            (EMPTY_FORM, "{"),
            (EMPTY_FORM, "[]"),
            (EMPTY_FORM, json.dumps({"codex_approval_kind": "exec", "tool_name": "t"})),
            (EMPTY_FORM, json.dumps({"tool_name": "t"})),
            (EMPTY_FORM, json.dumps({"codex_approval_kind": "mcp_tool_call"})),
            (EMPTY_FORM, json.dumps({"codex_approval_kind": "mcp_tool_call", "tool_name": 1})),
            (EMPTY_FORM, '{"codex_approval_kind": "mcp_tool_call", "tool_name": "t", "x": NaN}'),
        ]:
            self.assertEqual(review("s", schema, meta_text, never), (("defer",), None, None),
                             (schema, meta_text))

    def test_forms_that_ask_nothing(self):
        for schema in (EMPTY_FORM, '{"type":"object"}', "{}", "null", "[1]", '"x"', "7"):
            self.assertEqual(review("s", schema, meta(tool_name="t"), FakeModel(ALLOW))[0],
                             ("accept", "{}"), schema)

    def test_tool_name_is_taken_as_is(self):
        # Not trimmed, and an empty name is a name (unlike the allowlist's).
        fake = FakeModel(DENY)
        self.assertIn("denies `  t `:", review("s", EMPTY_FORM, meta(tool_name="  t "), fake)[1])
        self.assertIn("the tool `  t ` of", fake.calls[0][0][1][1])
        self.assertIn("denies ``:", review("s", EMPTY_FORM, meta(tool_name=""), FakeModel(DENY))[1])


class RustDebugTests(unittest.TestCase):
    def test_strings(self):
        self.assertEqual(model_rule.rust_debug_str('a "b" \\ \n\t\r\0 é \x1b'),
                         '"a \\"b\\" \\\\ \\n\\t\\r\\0 é \\u{1b}"')


STUBS = {
    "allow": FakeModel(ALLOW),
    "deny": FakeModel(DENY),
    "malformed": FakeModel(MALFORMED),
    "timeout": FakeModel(error="ModelError::Timeout"),
    "error": FakeModel(error='ModelError::Transient("scripted")'),
}


class CaseFileTests(unittest.TestCase):
    """Every case of cases/ and each of its `with_model` runs, on the rule
    itself with a fake model, as the kit checks them (the kit's default
    model, `stub:error`, for the case itself)."""

    def test_cases(self):
        files = sorted((HERE / "cases").glob("*.json"))
        self.assertTrue(files)
        runs = 0
        for path in files:
            for case in json.loads(path.read_text(encoding="utf-8")):
                runs += 1
                with self.subTest(case=case["name"]):
                    self.check(case, case.get("model", "error"), case["expect"])
                for run in case.get("with_model", []):
                    runs += 1
                    with self.subTest(case=case["name"], model=run["model"]):
                        self.check(case, run["model"], run["expect"])
        self.assertEqual(runs, 8)

    def check(self, case, stub, expect):
        request = case["request"]
        schema = (None if request.get("mode") == "url"
                  else json.dumps(request["requestedSchema"], separators=(",", ":")))
        meta_value = request.get("_meta")
        fake = FakeModel(STUBS[stub].answer, STUBS[stub].error)
        answer, rationale, risk = review(
            case["context"]["server_name"], schema,
            None if meta_value is None else json.dumps(meta_value), fake)
        self.assertIn(answer[0], expect["decision"].split("|"))
        message = answer[1] if answer[0] == "decline" else None
        if "message" in expect:
            self.assertEqual(message, expect["message"])
        if "message_contains" in expect:
            self.assertIn(expect["message_contains"], message)
        if "rationale_contains" in expect:
            self.assertIn(expect["rationale_contains"], rationale)
        if "risk" in expect:
            self.assertEqual(risk, expect["risk"])
        if "content" in expect:
            self.assertEqual(json.loads(answer[1]), expect["content"])
        if "model_calls" in expect:
            self.assertEqual(len(fake.calls), expect["model_calls"])


if __name__ == "__main__":
    unittest.main()
