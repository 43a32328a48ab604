"""Native tests of `strict_json.py`, the JSON reader and writer the allowlist
and the model-reviewer template share: `python3 -m unittest -v
test_strict_json` here. `build.sh` runs them first.

Each test is a point where json.loads or json.dumps differs from
serde_json, which the Rust guests use: what serde_json refuses, how it keeps
numbers, how it writes them, and what Rust's `str::trim` strips.
"""

import unittest

import strict_json
from strict_json import MAX_DEPTH, NOT_JSON, RUST_WHITESPACE, JsonError, loads, parse_json, to_json


class ReadTests(unittest.TestCase):
    def refused(self, text, message):
        with self.assertRaises(JsonError) as caught:
            loads(text)
        self.assertEqual(str(caught.exception), message)
        self.assertIs(parse_json(text), NOT_JSON)

    def test_what_json_loads_takes_and_serde_json_refuses(self):
        for name in ("NaN", "Infinity", "-Infinity"):
            self.refused(name, f"expected value (found `{name}`)")
            self.refused('{"x": [%s]}' % name, f"expected value (found `{name}`)")
        self.refused("1e400", "number out of range")
        self.refused("-1e400", "number out of range")
        self.refused("1" + "0" * 400, "number out of range")
        self.refused('"\\ud800"', "lone leading surrogate in hex escape")
        self.refused('"a\\udfffb"', "lone leading surrogate in hex escape")
        self.refused('{"\\ud800": 1}', "lone leading surrogate in hex escape")
        self.refused('[[["\\udbff"]]]', "lone leading surrogate in hex escape")

    def test_the_recursion_limit(self):
        self.assertEqual(MAX_DEPTH, 127)
        self.assertIsInstance(loads("[" * 127 + "]" * 127), list)  # serde_json's most
        self.assertIsInstance(loads('{"a":' * 126 + "[]" + "}" * 126), dict)
        self.refused("[" * 128 + "]" * 128, "recursion limit exceeded")
        self.refused('{"a":' * 127 + "[]" + "}" * 127, "recursion limit exceeded")
        self.refused('[{"a":' * 64 + "0" + "}]" * 64, "recursion limit exceeded")
        # Past the interpreter's own limit: json.loads's RecursionError.
        self.refused("[" * 100000 + "]" * 100000, "recursion limit exceeded")

    def test_numbers_as_serde_json_keeps_them(self):
        value = loads("[-0, 0, 18446744073709551615, 18446744073709551616, -9223372036854775808, "
                      "-9223372036854775809, 1e-400, 100000000000000000000, 1.0]")
        self.assertEqual([type(number) for number in value],
                         [float, int, int, float, int, float, float, float, float])
        self.assertEqual(repr(value[0]), "-0.0")
        self.assertEqual(value[2], (1 << 64) - 1)
        self.assertEqual(value[4], -(1 << 63))
        self.assertEqual(value[6], 0.0)
        self.assertEqual(value[7], 1e20)

    def test_strings(self):
        # A surrogate pair is one character.
        self.assertEqual(loads('"\\ud83d\\ude00"'), "\U0001F600")
        self.assertEqual(loads('"\\u0000é"'), "\x00é")

    def test_not_json(self):
        for text in ("", " ", "{", "{} x", "{'a': 1}", '{"a": 1,}', "[1,]", "01", "1.", ".5",
                     "\u3000{}", "\x0c{}", '"\x01"', "tru"):
            with self.assertRaises(JsonError, msg=text):
                loads(text)
            self.assertIs(parse_json(text), NOT_JSON, text)
        # JsonError is a ValueError, with json.loads's message where both refuse.
        with self.assertRaises(ValueError) as caught:
            loads("{")
        self.assertIn("line 1 column 2", str(caught.exception))

    def test_values(self):
        self.assertIsNone(loads(" null "))
        self.assertIsNone(parse_json("\n\t\r null"))
        self.assertIs(parse_json("false"), False)
        self.assertEqual(parse_json('{"a": [1, "x", {}]}'), {"a": [1, "x", {}]})

    def test_duplicate_keys(self):
        # The last wins, as in serde_json's map ...
        self.assertEqual(loads('{"a": 1, "b": 2, "a": 3}'), {"a": 3, "b": 2})
        # ... unless the caller wants to see them.
        class Pairs(dict):
            pass

        def hook(pairs):
            obj = Pairs(pairs)
            obj.pairs = pairs
            return obj

        value = loads('{"a": 1, "a": {"b": 2}}', object_pairs_hook=hook)
        self.assertEqual(value.pairs, [("a", 1), ("a", {"b": 2})])
        self.assertIsInstance(value["a"], Pairs)
        self.assertEqual(value["a"].pairs, [("b", 2)])
        # The checks run on what the hook returns too.
        with self.assertRaises(JsonError):
            loads('{"\\ud800": 1}', object_pairs_hook=hook)
        with self.assertRaises(JsonError):
            loads('{"a":' * 128 + "0" + "}" * 128, object_pairs_hook=hook)


class WriteTests(unittest.TestCase):
    def test_numbers(self):
        # Floats as the ryu crate writes them (see `_ryu`): an exponent from
        # 1e16 up and below 1e-5, without `+`; integers as they are.
        text = ('[0, -0, 1.0, 1.5, 1e20, 1e16, 1e15, 123456789.125, 0.0001, 0.00001, 0.000001, '
                '1.5e-7, 2.5e300, 18446744073709551615, 18446744073709551616, '
                '-9223372036854775808, -9223372036854775809, 5e-324, 1.7976931348623157e308, 0.1]')
        self.assertEqual(
            to_json(loads(text)),
            '[0,-0.0,1.0,1.5,1e20,1e16,1000000000000000.0,123456789.125,0.0001,0.00001,1e-6,'
            '1.5e-7,2.5e300,18446744073709551615,1.8446744073709552e19,-9223372036854775808,'
            '-9.223372036854776e18,5e-324,1.7976931348623157e308,0.1]')
        self.assertEqual(to_json(-1.5e-7), "-1.5e-7")
        self.assertEqual(to_json(-0.0), "-0.0")
        self.assertEqual(to_json(-12.5), "-12.5")

    def test_every_float_reads_back(self):
        for value in (0.1, 1 / 3, 2 ** 53 + 0.0, 2 ** 70 + 0.0, 1e-5 / 3, 6.02214076e23, -2.5e-300):
            self.assertEqual(loads(to_json(value)), value, value)

    def test_constants_and_booleans(self):
        self.assertEqual(to_json([None, True, False, 1, 0]), "[null,true,false,1,0]")

    def test_strings(self):
        # Non-ASCII as is; control characters escaped, the usual ones short.
        self.assertEqual(to_json('é\n\t\r\b\f\x01\x1f"\\/\x7f\u2028'),
                         '"é\\n\\t\\r\\b\\f\\u0001\\u001f\\"\\\\/\x7f\u2028"')

    def test_objects_are_compact_with_keys_sorted(self):
        # A BTreeMap<String, _> sorts by UTF-8 bytes, which is code point order.
        value = {"b": 1, "a": {"d": [], "c": {}}, "é": 0, "Z": 0, "\U0001F600": 0, "\uffff": 0}
        self.assertEqual(to_json(value),
                         '{"Z":0,"a":{"c":{},"d":[]},"b":1,"é":0,"\uffff":0,"\U0001F600":0}')

    def test_round_trip(self):
        text = '{"a":[1,-0.0,1e-7,"x\\u0000",{"b":null}],"c":true}'
        self.assertEqual(to_json(loads(text)), text)


class RustWhitespaceTests(unittest.TestCase):
    def test_unicode_white_space(self):
        # Unicode's White_Space: what str.isspace() takes, less the four
        # separators U+001C..U+001F that Python adds.
        expected = {chr(point) for point in range(0x110000) if chr(point).isspace()}
        self.assertEqual(set(RUST_WHITESPACE), expected - set("\x1c\x1d\x1e\x1f"))
        self.assertEqual(len(RUST_WHITESPACE), len(set(RUST_WHITESPACE)))

    def test_trim(self):
        self.assertEqual("\u3000\x85 x \u2028\n".strip(RUST_WHITESPACE), "x")
        self.assertEqual("\x1cx\u200b".strip(RUST_WHITESPACE), "\x1cx\u200b")


class PublicNamesTests(unittest.TestCase):
    def test_all(self):
        for name in strict_json.__all__:
            self.assertTrue(hasattr(strict_json, name), name)


if __name__ == "__main__":
    unittest.main()
