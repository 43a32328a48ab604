// Unit tests of the policy and the JSON handling under Node (the WIT glue,
// src/reviewer.ts, runs only inside the component: `gatehouse conformance`
// proves it). Run `npm test` after `npm run compile`.

import assert from "node:assert/strict";
import { test } from "node:test";

import { JsonError, check, formatF64, parse, stringify } from "../dist/json.js";
import { ConfigError, decide, parseConfig, toolName, trim, wildmatch } from "../dist/policy.js";

const FORM = { server: "docs", tool: "read_file" };
const answer = (config, subject) => decide(parseConfig(config), subject).answer;

// The unit tests of guests/allowlist/src/lib.rs.

test("first matching rule wins", () => {
  const config = `{"rules": [
    {"server": "docs", "tool": "read_*", "decision": "accept"},
    {"server": "*", "decision": "decline", "message": "no"}
  ]}`;
  assert.deepEqual(answer(config, FORM), { kind: "accept", content: "{}" });
  assert.deepEqual(answer(config, { ...FORM, tool: "write_file" }), { kind: "decline", message: "no" });
});

test("a tool pattern never matches a request without a tool", () => {
  const config = `{"rules": [{"tool": "*", "decision": "accept"}]}`;
  assert.deepEqual(answer(config, { server: "docs" }), { kind: "defer" });
});

test("modes and urls are matched", () => {
  const config = `{"rules": [{"mode": "url", "url": "https://*.example.com/*", "decision": "accept"}],
                   "default": "decline"}`;
  assert.deepEqual(answer(config, { ...FORM, url: "https://auth.example.com/login" }), { kind: "accept" });
  assert.deepEqual(answer(config, { ...FORM, url: "https://evil.test/login" }), { kind: "decline" });
  assert.deepEqual(answer(config, FORM), { kind: "decline" });
});

test("accept content comes from the rule", () => {
  const config = `{"rules": [{"decision": "accept", "content": {"ok": true}}]}`;
  assert.deepEqual(answer(config, FORM), { kind: "accept", content: '{"ok":true}' });
});

test("unknown fields are refused", () => {
  assert.throws(() => parseConfig(`{"rulez": []}`), ConfigError);
});

// What serde derive reads, and refuses.

test("the config is read as serde derive reads it", () => {
  const refused = [
    "",
    "[1,]",
    `"accept"`,
    `{"rules": null}`,
    `{"default": null}`,
    `{"default": "allow"}`,
    `{"rules": [{"decision": "accept", "decision": "decline"}]}`,
    `{"rules": [{"mode": null, "decision": "accept"}]}`,
    `{"rules": [{"server": 5, "decision": "accept"}]}`,
    `{"rules": [{"decision": "accept", "content": []}]}`,
    `{"rules": [{"decision": {"accept": 1}}]}`,
    `{"rules": [["docs", "read_*"]]}`,
    `{"rules": [["docs", "read_*", "any", null, "accept", null, null, null]]}`,
  ];
  for (const text of refused) {
    assert.throws(() => parseConfig(text), ConfigError, text);
  }
  assert.deepEqual(parseConfig("[]"), { rules: [], default: "defer" });
  assert.deepEqual(parseConfig(`{"rules": [{"decision": {"cancel": null}}]}`).rules[0].decision, "cancel");
  assert.deepEqual(parseConfig(`{"rules": [["docs", null, "url", null, "accept"]]}`).rules[0], {
    server: "docs",
    mode: "url",
    decision: "accept",
  });
  assert.equal(
    (() => {
      try {
        parseConfig(`{"rulez": []}`);
      } catch (error) {
        return error.message;
      }
    })(),
    "unknown field `rulez`, expected `rules` or `default`",
  );
});

// Matching.

test("wildcards match as the wildmatch crate does", () => {
  const cases = [
    ["cat", "cat", true],
    ["*cat*", "dog_cat_dog", true],
    ["c?t", "cot", true],
    ["dog", "cat", false],
    ["*d", "cat", false],
    ["????", "cat", false],
    ["?", "cat", false],
    ["", "", true],
    ["", "a", false],
    ["*", "", true],
    ["**", "", true],
    ["?", "", false],
    ["a*b*c", "abbbc", true],
    ["a*b*c", "abcb", false],
    ["*_c_*", "a_b_c_d", true],
    ["emoji_?", "emoji_\u{1F600}", true],
    ["emoji_??", "emoji_\u{1F600}", false],
    ["Docs", "docs", false],
  ];
  for (const [pattern, input, expected] of cases) {
    assert.equal(wildmatch(pattern, input), expected, `${pattern} ~ ${input}`);
  }
});

test("trim strips what Rust's str::trim strips", () => {
  assert.equal(trim("\u0085 read\u3000\n"), "read");
  assert.equal(trim("\ufeffread"), "\ufeffread");
  assert.equal(trim(" \t "), "");
});

test("the tool name is read from _meta as serde_json reads it", () => {
  assert.equal(toolName(`{"tool_name": "  read_file "}`), "read_file");
  assert.equal(toolName(`{"tool_name": "a", "tool_name": "b"}`), "b");
  assert.equal(toolName(`{"tool_name": "   "}`), undefined);
  assert.equal(toolName(`{"tool_name": 5}`), undefined);
  assert.equal(toolName(`["tool_name"]`), undefined);
  assert.equal(toolName(`{"tool_name": "a"`), undefined);
  assert.equal(toolName(undefined), undefined);
  // What JSON.parse takes and serde_json does not: the whole _meta is void.
  assert.equal(toolName(`{"tool_name": "a", "x": "\\ud800"}`), undefined);
  assert.equal(toolName(`{"tool_name": "a", "x": 1e400}`), undefined);
  assert.equal(toolName(`{"tool_name": "a", "x": ${"[".repeat(127)}${"]".repeat(127)}}`), undefined);
  assert.equal(toolName(`{"tool_name": "a", "x": ${"[".repeat(126)}${"]".repeat(126)}}`), "a");
  assert.equal(toolName(`{"tool_name": "\\ud83d\\ude00"}`), "\u{1F600}");
  assert.equal(toolName(`{"tool_name": "a", "x": "${"[".repeat(200)}"}`), "a");
});

// JSON as serde_json reads and writes it.

test("numbers are written back as serde_json writes them", () => {
  const cases = [
    ["0", "0"],
    ["-0", "-0.0"],
    ["1.0", "1.0"],
    ["1e2", "100.0"],
    ["1E+2", "100.0"],
    ["0.1", "0.1"],
    ["-1.5", "-1.5"],
    ["1e15", "1000000000000000.0"],
    ["1e16", "1e+16"],
    ["0.00001", "0.00001"],
    ["0.000001", "1e-6"],
    ["1.5e-7", "1.5e-7"],
    ["123456.789", "123456.789"],
    ["18446744073709551615", "18446744073709551615"],
    ["18446744073709551616", "1.8446744073709552e+19"],
    ["-9223372036854775808", "-9223372036854775808"],
    ["-9223372036854775809", "-9.223372036854776e+18"],
    ["1e-400", "0.0"],
    ["-1e-400", "-0.0"],
    ["5e-324", "5e-324"],
    ["1.7976931348623157e308", "1.7976931348623157e+308"],
    ["6.62607015e-34", "6.62607015e-34"],
    ["3.439070283483335e+35", "3.439070283483335e+35"],
    ["544431068535091.6", "544431068535091.6"],
    ["0e99999999999", "0.0"],
    ["1e-99999999999", "0.0"],
  ];
  for (const [text, written] of cases) {
    assert.equal(stringify(parse(text)), written, text);
  }
  assert.throws(() => parse("1e400"), JsonError);
  assert.throws(() => parse("1e99999999999"), JsonError);
  assert.throws(() => parse(`1${"0".repeat(400)}`), JsonError);
  assert.equal(formatF64(2.9802322387695312e-8), "2.9802322387695312e-8");
});

test("objects are written with sorted keys, the last of repeated keys kept", () => {
  assert.equal(stringify(parse(`{"b": 1, "a": [true, null], "b": "x"}`)), `{"a":[true,null],"b":"x"}`);
  // UTF-8 byte order: U+FFFF before U+1F600 (UTF-16 order has them the other way).
  assert.equal(stringify(parse(`{"\u{1F600}": 1, "\uffff": 2, "Z": 3, "a": 4}`)), `{"Z":3,"a":4,"\uffff":2,"\u{1F600}":1}`);
  assert.equal(stringify(parse(`"\\u0001\\n\\"\\\\/\u007f"`)), `"\\u0001\\n\\"\\\\/\u007f"`);
});

test("serde_json's limits: nesting, surrogates", () => {
  assert.doesNotThrow(() => parse("[".repeat(127) + "]".repeat(127)));
  assert.throws(() => parse("[".repeat(128) + "]".repeat(128)), JsonError);
  assert.throws(() => parse(`"\\udc00"`), JsonError);
  assert.throws(() => parse(`"\\ud800"`), JsonError);
  assert.throws(() => parse(`"\\ud800\\u0041"`), JsonError);
  assert.doesNotThrow(() => check("[".repeat(127) + "]".repeat(127)));
  assert.throws(() => check("[".repeat(128) + "]".repeat(128)), JsonError);
});
