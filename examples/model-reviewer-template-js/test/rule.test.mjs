// Unit tests of the rule under Node (the WIT glue, src/reviewer.ts, runs only
// inside the component: `gatehouse conformance` proves it). Run `npm test`.

import assert from "node:assert/strict";
import { test } from "node:test";

import {
  POLICY,
  completionRequest,
  describeModelError,
  modelErrorOutcome,
  rustDebugString,
  toolCall,
  verdictOutcome,
} from "../dist/rule.js";

const context = { serverName: "git" };
const form = (schema, meta) => ({
  elicitation: { tag: "form", val: { message: "Allow?", requestedSchema: schema } },
  meta,
  context,
});
const APPROVAL = `{"codex_approval_kind": "mcp_tool_call", "tool_name": "delete_branch", "tool_params": {"branch": "main"}}`;

test("an MCP tool-call approval is a tool call, with its arguments as serde_json writes them", () => {
  assert.deepEqual(toolCall(form(`{"type": "object", "properties": {}}`, APPROVAL)), {
    tool: "delete_branch",
    arguments: `{"branch":"main"}`,
  });
  assert.deepEqual(
    toolCall(form(`{}`, `{"codex_approval_kind": "mcp_tool_call", "tool_name": " t ", "tool_params": {"z": 1.0, "a": -0}}`)),
    { tool: " t ", arguments: `{"a":-0.0,"z":1.0}` },
  );
  assert.deepEqual(toolCall(form(`[]`, `{"codex_approval_kind": "mcp_tool_call", "tool_name": "t"}`)), {
    tool: "t",
    arguments: "{}",
  });
});

test("anything else is not a tool call", () => {
  const url = { elicitation: { tag: "url", val: { message: "m", url: "https://x", elicitationId: "e" } }, meta: APPROVAL, context };
  assert.equal(toolCall(url), undefined);
  assert.equal(toolCall(form(`{"properties": {"name": {"type": "string"}}}`, APPROVAL)), undefined);
  assert.equal(toolCall(form(`{"properties": null}`, APPROVAL)), undefined);
  assert.equal(toolCall(form(`{"properties": []}`, APPROVAL)), undefined);
  assert.equal(toolCall(form(`not json`, APPROVAL)), undefined);
  assert.equal(toolCall(form(`{}`, undefined)), undefined);
  assert.equal(toolCall(form(`{}`, `{"codex_approval_kind": "exec", "tool_name": "t"}`)), undefined);
  assert.equal(toolCall(form(`{}`, `{"codex_approval_kind": "mcp_tool_call", "tool_name": 5}`)), undefined);
  // What JSON.parse takes and serde_json does not.
  assert.equal(toolCall(form(`{}`, `{"codex_approval_kind": "mcp_tool_call", "tool_name": "t", "x": 1e400}`)), undefined);
});

test("the model is asked with the Rust template's prompt", () => {
  const request = completionRequest("git", { tool: "delete_branch", arguments: `{"branch":"main"}` });
  assert.equal(request.messages[0].role, "system");
  assert.equal(request.messages[0].content, POLICY);
  assert.equal(
    request.messages[1].content,
    'The agent calls the tool `delete_branch` of the MCP server `git` with these arguments: {"branch":"main"}',
  );
  assert.equal(request.maxOutputTokens, 200);
});

test("verdicts", () => {
  assert.deepEqual(verdictOutcome("t", ` {"outcome": "allow", "rationale": "read-only"}\n`), {
    decision: { tag: "accept", val: "{}" },
    rationale: "the model allows `t`: read-only",
    risk: "low",
  });
  assert.deepEqual(verdictOutcome("t", `{"outcome": "deny"}`), {
    decision: { tag: "decline", val: "Not allowed: the model denies `t`: no rationale given" },
    rationale: "the model denies `t`: no rationale given",
    risk: "high",
  });
  // The last of repeated keys, as serde_json keeps it.
  assert.equal(verdictOutcome("t", `{"outcome": "deny", "outcome": "allow"}`).decision.tag, "accept");
  for (const text of ["I allow it", `{"outcome": "ALLOW"}`, `["allow"]`, `{"outcome": "allow"`, "", `"allow"`]) {
    assert.deepEqual(verdictOutcome("t", text).decision, { tag: "decline", val: "Not allowed: the model gave no verdict" }, text);
  }
});

test("model errors are written as Rust's Debug writes them", () => {
  const thrown = (payload) => Object.defineProperty(new Error("x"), "payload", { value: payload });
  assert.equal(describeModelError(thrown({ tag: "timeout" })), "ModelError::Timeout");
  assert.equal(describeModelError(thrown({ tag: "not-configured" })), "ModelError::NotConfigured");
  assert.equal(describeModelError(thrown({ tag: "rate-limited", val: 'HTTP 429 "slow"\n' })), 'ModelError::RateLimited("HTTP 429 \\"slow\\"\\n")');
  assert.equal(rustDebugString("a\u0000\u0007\u200b é\\"), '"a\\0\\u{7}\\u{200b} é\\\\"');
  assert.deepEqual(modelErrorOutcome(thrown({ tag: "cancelled" })), {
    decision: { tag: "decline", val: "Not allowed: the model could not be asked: ModelError::Cancelled" },
    rationale: "the model could not be asked: ModelError::Cancelled",
    risk: "high",
  });
});
