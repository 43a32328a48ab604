// The one rule, as examples/model-reviewer-template/src/lib.rs has it: an
// approval of an MCP tool call (a form that asks for nothing, with
// `codex_approval_kind = "mcp_tool_call"` in its `_meta`) is put to the
// model, which answers allow or deny; everything else is deferred without
// asking. When the model cannot be asked or gives no verdict, the module
// declines: a review that could not happen must not let the call through,
// nor hand it on as if the model had never been asked.
//
// Nothing here touches the host, so it runs under Node too (test/); the WIT
// glue is reviewer.ts. JSON is read as serde_json reads it (json.ts), so the
// answers are the Rust module's.

import type { CompletionRequest } from "gatehouse:reviewer/model@0.2.0";
import type { Outcome, ReviewRequest } from "./contract.js";
import { check, JsonError, JsonObject, parse, stringify, trim } from "./json.js";

/** What the model is told, before the call it assesses. */
export const POLICY =
  "You review actions an AI coding agent wants to take through MCP tools. " +
  "Allow what is read-only or easily undone; deny what deletes, overwrites, publishes, pays or " +
  "sends data outside the organization. Answer only with JSON: " +
  '{"outcome": "allow" or "deny", "rationale": "one sentence"}.';

/** The answer's shape, sent as the endpoint's response format. */
export const VERDICT_SCHEMA =
  '{"type":"object","properties":{"outcome":{"type":"string","enum":["allow","deny"]},"rationale":{"type":"string"}},"required":["outcome","rationale"]}';

/** A tool call to put to the model. */
export interface ToolCall {
  tool: string;
  /** The arguments, JSON text as serde_json writes it (`{}` when there are none). */
  arguments: string;
}

/**
 * The tool and its arguments, when the request approves an MCP tool call
 * with a form that asks for nothing.
 */
export function toolCall(request: ReviewRequest): ToolCall | undefined {
  const { elicitation, meta } = request;
  if (elicitation.tag !== "form") {
    return undefined;
  }
  const schema = read(elicitation.val.requestedSchema);
  if (schema === undefined) {
    return undefined;
  }
  // A schema that is not an object has no `properties` (serde_json's `get`).
  const properties = field(schema.value, "properties");
  const asksNothing = properties === undefined || (isObject(properties) && Object.keys(properties).length === 0);
  if (meta === undefined) {
    return undefined;
  }
  const metaValue = read(meta);
  if (metaValue === undefined || !asksNothing || field(metaValue.value, "codex_approval_kind") !== "mcp_tool_call") {
    return undefined;
  }
  const tool = field(metaValue.value, "tool_name");
  if (typeof tool !== "string") {
    return undefined;
  }
  // Written back as serde_json writes a `Value` (keys sorted, `1.0` kept).
  const params = (parse(meta) as JsonObject).get("tool_params");
  return { tool, arguments: params === undefined ? "{}" : stringify(params) };
}

/** What to ask the model about one tool call of `server`. */
export function completionRequest(server: string, call: ToolCall): CompletionRequest {
  return {
    messages: [
      { role: "system", content: POLICY },
      {
        role: "user",
        content: `The agent calls the tool \`${call.tool}\` of the MCP server \`${server}\` with these arguments: ${call.arguments}`,
      },
    ],
    outputSchema: VERDICT_SCHEMA,
    maxOutputTokens: 200,
  };
}

/** The answer to the model's text: its verdict, or a decline when it gave none. */
export function verdictOutcome(tool: string, text: string): Outcome {
  const verdict = read(trim(text));
  const rationaleField = verdict === undefined ? undefined : field(verdict.value, "rationale");
  const rationale = typeof rationaleField === "string" ? rationaleField : "no rationale given";
  const outcome = verdict === undefined ? undefined : field(verdict.value, "outcome");
  switch (outcome) {
    case "allow":
      return {
        decision: { tag: "accept", val: "{}" },
        rationale: `the model allows \`${tool}\`: ${rationale}`,
        risk: "low",
      };
    case "deny":
      return decline(`the model denies \`${tool}\`: ${rationale}`);
    default:
      return decline("the model gave no verdict");
  }
}

/** The answer when `complete` threw `error` (the model could not be asked). */
export function modelErrorOutcome(error: unknown): Outcome {
  return decline(`the model could not be asked: ${describeModelError(error)}`);
}

/**
 * A thrown model error as Rust's `{error:?}` writes the `ModelError` that
 * wit-bindgen generates: `ModelError::Timeout`, `ModelError::RateLimited("…")`.
 * componentize-js throws an `Error` with the variant as its own `payload`;
 * anything else thrown is written as its message.
 */
export function describeModelError(error: unknown): string {
  const payload: unknown =
    typeof error === "object" && error !== null && Object.hasOwn(error, "payload")
      ? (error as { payload: unknown }).payload
      : error;
  if (typeof payload === "object" && payload !== null && typeof (payload as { tag?: unknown }).tag === "string") {
    const { tag, val } = payload as { tag: string; val?: unknown };
    const name = `ModelError::${tag.replace(/(^|-)(.)/g, (_, __, char: string) => char.toUpperCase())}`;
    return typeof val === "string" ? `${name}(${rustDebugString(val)})` : name;
  }
  return error instanceof Error ? error.message : String(error);
}

/**
 * A string as Rust's `Debug` writes it: quoted; `\t \r \n \0 \\ \"` escaped
 * by name, other characters Rust does not print as they are as `\u{hex}`.
 * Rust's table (every unprintable or grapheme-extending character) is not
 * copied: the engine has no Unicode property escapes (`\p{…}`, no ICU), so
 * this covers the controls, the separators but the space, the common format
 * characters, the combining marks of U+0300..U+036F and private use. Other
 * characters are written as they are, where Rust may escape them.
 */
export function rustDebugString(text: string): string {
  let out = '"';
  for (const char of text) {
    switch (char) {
      case "\t":
        out += "\\t";
        break;
      case "\r":
        out += "\\r";
        break;
      case "\n":
        out += "\\n";
        break;
      case "\0":
        out += "\\0";
        break;
      case "\\":
        out += "\\\\";
        break;
      case '"':
        out += '\\"';
        break;
      default:
        out += char !== " " && UNPRINTABLE.test(char) ? `\\u{${char.codePointAt(0)!.toString(16)}}` : char;
    }
  }
  return `${out}"`;
}

const UNPRINTABLE =
  /^[\u0000-\u001f\u007f-\u00a0\u00ad\u0300-\u036f\u061c\u1680\u180e\u2000-\u200f\u2028-\u202f\u205f-\u2064\u2066-\u206f\u3000\ud800-\uf8ff\ufeff\ufff9-\ufffb\u{f0000}-\u{10ffff}]$/u;

/** A decline with the reason: a review that could not happen lets nothing through. */
export function decline(why: string): Outcome {
  return { decision: { tag: "decline", val: `Not allowed: ${why}` }, rationale: why, risk: "high" };
}

/** Not this module's to decide. */
export function defer(): Outcome {
  return { decision: { tag: "defer" } };
}

/** JSON text read as `serde_json::from_str::<Value>` reads it; `undefined` when serde_json refuses it. */
function read(text: string): { value: unknown } | undefined {
  try {
    return { value: check(text) };
  } catch (error) {
    if (error instanceof JsonError) {
      return undefined;
    }
    throw error;
  }
}

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

/** serde_json's `value.get(key)`: a member of an object; nothing of anything else. */
function field(value: unknown, key: string): unknown {
  return isObject(value) && Object.hasOwn(value, key) ? value[key] : undefined;
}

