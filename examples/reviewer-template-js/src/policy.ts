// The allowlist policy: the first matching rule from the module config
// decides; no match gives the config's `default` (`defer` unless set).
//
//   {
//     "rules": [
//       { "server": "docs", "tool": "read_*", "decision": "accept" },
//       { "mode": "url", "url": "https://*.example.com/*", "decision": "accept" },
//       { "server": "*", "tool": "delete_*", "decision": "decline",
//         "message": "Deletions are not allowed from this agent." }
//     ],
//     "default": "defer"
//   }
//
// A rule matches when every pattern it sets matches (`*` and `?` are
// wildcards). `tool` is matched against the elicitation's `_meta.tool_name`;
// a rule that sets `tool` never matches a request without one. An `accept`
// in form mode answers with the rule's `content` (default `{}`), which the
// host validates against the form's schema; in URL mode it carries none.
//
// This is `guests/allowlist/src/lib.rs` line for line, config format and
// answers included, so the two can be run on the same cases.

import { check, JsonError, JsonObject, type JsonValue, parse, stringify, trim } from "./json.js";

// Tests and callers have long imported it from here.
export { trim };

/** The elicitation mode a rule applies to. */
export type ModeRule = "any" | "form" | "url";

/** What a matching rule answers. */
export type Action = "accept" | "decline" | "cancel" | "defer";

/** One rule. */
export interface Rule {
  /** Server name pattern. */
  server?: string;
  /** Tool name pattern (`_meta.tool_name`). */
  tool?: string;
  /** Mode the rule applies to. */
  mode: ModeRule;
  /** URL pattern (URL mode only). */
  url?: string;
  /** The answer. */
  decision: Action;
  /** Message for the agent on a decline. */
  message?: string;
  /** Content of a form-mode accept (default `{}`). */
  content?: JsonObject;
}

/** The module config. */
export interface Config {
  /** The rules, first match wins. */
  rules: Rule[];
  /** The answer when no rule matches. */
  default: Action;
}

/** The request as the rules see it. */
export interface Subject {
  /** The server's name. */
  server: string;
  /** `_meta.tool_name`, trimmed, if present. */
  tool?: string;
  /** The URL in URL mode; absent in form mode. */
  url?: string;
}

/** The module's answer. */
export type Answer =
  | { kind: "defer" }
  /** Accept with optional content (JSON text). */
  | { kind: "accept"; content?: string }
  /** Decline with an optional message. */
  | { kind: "decline"; message?: string }
  | { kind: "cancel" };

/** Why a config is refused. */
export class ConfigError extends Error {}

const MODES: readonly ModeRule[] = ["any", "form", "url"];
const ACTIONS: readonly Action[] = ["accept", "decline", "cancel", "defer"];
const CONFIG_FIELDS = ["rules", "default"] as const;
const RULE_FIELDS = ["server", "tool", "mode", "url", "decision", "message", "content"] as const;

/**
 * Reads the config as the Rust allowlist's serde derive does: unknown and
 * repeated fields are refused, `null` is accepted only where a field is
 * optional, and (as serde accepts for any struct) an array of the fields in
 * order stands for an object.
 */
export function parseConfig(text: string): Config {
  let value: JsonValue;
  try {
    value = parse(text);
  } catch (error) {
    throw error instanceof JsonError ? new ConfigError(error.message) : error;
  }
  const fields = structFields(value, "Config", CONFIG_FIELDS, []);
  const rules = fields.get("rules");
  const fallback = fields.get("default");
  return {
    rules: rules === undefined ? [] : sequence(rules).map(parseRule),
    default: fallback === undefined ? "defer" : variant(fallback, ACTIONS),
  };
}

function parseRule(value: JsonValue): Rule {
  const fields = structFields(value, "Rule", RULE_FIELDS, ["decision"]);
  const rule: Rule = {
    mode: "any",
    decision: variant(fields.get("decision")!, ACTIONS),
  };
  const server = optionalString(fields.get("server"));
  const tool = optionalString(fields.get("tool"));
  const mode = fields.get("mode");
  const url = optionalString(fields.get("url"));
  const message = optionalString(fields.get("message"));
  const content = fields.get("content");
  if (server !== undefined) rule.server = server;
  if (tool !== undefined) rule.tool = tool;
  if (mode !== undefined) rule.mode = variant(mode, MODES);
  if (url !== undefined) rule.url = url;
  if (message !== undefined) rule.message = message;
  if (content !== undefined && content !== null) {
    if (!(content instanceof JsonObject)) {
      throw new ConfigError(`invalid type: ${describe(content)}, expected a map`);
    }
    rule.content = content;
  }
  return rule;
}

/** The fields a struct was given, by name. */
function structFields(
  value: JsonValue,
  name: string,
  known: readonly string[],
  required: readonly string[],
): Map<string, JsonValue> {
  const fields = new Map<string, JsonValue>();
  if (value instanceof JsonObject) {
    for (const [key, field] of value.entries) {
      if (!known.includes(key)) {
        throw new ConfigError(`unknown field \`${key}\`, expected ${oneOf(known)}`);
      }
      if (fields.has(key)) {
        throw new ConfigError(`duplicate field \`${key}\``);
      }
      fields.set(key, field);
    }
  } else if (Array.isArray(value)) {
    if (value.length > known.length) {
      throw new ConfigError("trailing characters");
    }
    value.forEach((field, index) => fields.set(known[index]!, field));
  } else {
    throw new ConfigError(`invalid type: ${describe(value)}, expected struct ${name}`);
  }
  for (const field of required) {
    if (!fields.has(field)) {
      throw new ConfigError(
        Array.isArray(value)
          ? `invalid length ${known.indexOf(field)}, expected struct ${name} with ${known.length} elements`
          : `missing field \`${field}\``,
      );
    }
  }
  return fields;
}

function sequence(value: JsonValue): JsonValue[] {
  if (!Array.isArray(value)) {
    throw new ConfigError(`invalid type: ${describe(value)}, expected a sequence`);
  }
  return value;
}

function optionalString(value: JsonValue | undefined): string | undefined {
  if (value === undefined || value === null) {
    return undefined;
  }
  if (typeof value !== "string") {
    throw new ConfigError(`invalid type: ${describe(value)}, expected a string`);
  }
  return value;
}

/** A unit variant: `"name"`, or serde's `{"name": null}`. */
function variant<T extends string>(value: JsonValue, variants: readonly T[]): T {
  let name: string;
  if (typeof value === "string") {
    name = value;
  } else if (value instanceof JsonObject && value.entries.length > 0) {
    const [key, unit] = value.entries[0]!;
    name = key;
    if ((variants as readonly string[]).includes(name) && unit !== null) {
      throw new ConfigError(`invalid type: ${describe(unit)}, expected unit`);
    }
    if ((variants as readonly string[]).includes(name) && value.entries.length > 1) {
      throw new ConfigError("expected value");
    }
  } else {
    throw new ConfigError("expected value");
  }
  if (!(variants as readonly string[]).includes(name)) {
    throw new ConfigError(`unknown variant \`${name}\`, expected ${oneOf(variants)}`);
  }
  return name as T;
}

/** serde's list of what it expected: `` `a` ``, `` `a` or `b` ``, `` one of `a`, `b`, `c` ``. */
function oneOf(names: readonly string[]): string {
  const quoted = names.map((name) => `\`${name}\``);
  return quoted.length <= 2 ? quoted.join(" or ") : `one of ${quoted.join(", ")}`;
}

function describe(value: JsonValue): string {
  if (value === null) return "null";
  if (typeof value === "boolean") return `boolean \`${value}\``;
  if (typeof value === "string") return `string ${JSON.stringify(value)}`;
  if (Array.isArray(value)) return "sequence";
  if (value instanceof JsonObject) return "map";
  return /^-?\d+$/.test(value.text) ? `integer \`${value.text}\`` : `floating point \`${value.text}\``;
}

/**
 * The trimmed `_meta.tool_name` from `_meta` JSON text, if it is a non-empty
 * string. `_meta` that is not a JSON object reads as `{}`.
 */
export function toolName(meta: string | undefined): string | undefined {
  if (meta === undefined) {
    return undefined;
  }
  let value: unknown;
  try {
    value = check(meta);
  } catch {
    return undefined;
  }
  if (typeof value !== "object" || value === null || Array.isArray(value)) {
    return undefined;
  }
  const name: unknown = Object.hasOwn(value, "tool_name") ? (value as Record<string, unknown>)["tool_name"] : undefined;
  if (typeof name !== "string") {
    return undefined;
  }
  const trimmed = trim(name);
  return trimmed === "" ? undefined : trimmed;
}


/**
 * The `wildmatch` crate's `WildMatch::matches`: `*` matches any run of
 * characters (none too), `?` exactly one; no escapes; case-sensitive;
 * characters are Unicode scalar values, not UTF-16 units.
 */
export function wildmatch(patternText: string, inputText: string): boolean {
  // Consecutive `*`s are one.
  const pattern = Array.from(patternText).filter((char, index, all) => !(char === "*" && all[index - 1] === "*"));
  if (pattern.length === 0) {
    return inputText === "";
  }
  const input = Array.from(inputText);
  let patternIndex = 0;
  let inputIndex = 0;
  if (input.length > 0) {
    let star = -1;
    let resume = 0;
    for (;;) {
      if (patternIndex < pattern.length && pattern[patternIndex] === "*") {
        star = patternIndex;
        resume = inputIndex + 1;
        patternIndex++;
      } else if (
        patternIndex < pattern.length &&
        (pattern[patternIndex] === "?" || pattern[patternIndex] === input[inputIndex])
      ) {
        patternIndex++;
        inputIndex++;
        if (inputIndex === input.length) {
          break;
        }
      } else if (star >= 0) {
        patternIndex = star + 1;
        if (resume === input.length) {
          break;
        }
        inputIndex = resume;
        resume++;
      } else {
        return false;
      }
    }
  }
  while (patternIndex < pattern.length && pattern[patternIndex] === "*") {
    patternIndex++;
  }
  return patternIndex === pattern.length;
}

function patternMatches(pattern: string | undefined, value: string | undefined): boolean {
  if (pattern === undefined) return true;
  if (value === undefined) return false;
  return wildmatch(pattern, value);
}

function ruleMatches(rule: Rule, subject: Subject): boolean {
  const modeOk = rule.mode === "any" || (rule.mode === "form") === (subject.url === undefined);
  return (
    modeOk &&
    patternMatches(rule.server, subject.server) &&
    patternMatches(rule.tool, subject.tool) &&
    patternMatches(rule.url, subject.url)
  );
}

/** Decides by the first matching rule. Returns the answer and a rationale. */
export function decide(config: Config, subject: Subject): { answer: Answer; rationale: string } {
  const index = config.rules.findIndex((rule) => ruleMatches(rule, subject));
  const rule = index >= 0 ? config.rules[index] : undefined;
  const action = rule === undefined ? config.default : rule.decision;
  let answer: Answer;
  switch (action) {
    case "defer":
      answer = { kind: "defer" };
      break;
    case "cancel":
      answer = { kind: "cancel" };
      break;
    case "decline":
      answer = rule?.message === undefined ? { kind: "decline" } : { kind: "decline", message: rule.message };
      break;
    case "accept":
      answer =
        subject.url !== undefined
          ? { kind: "accept" }
          : { kind: "accept", content: stringify(rule?.content ?? new JsonObject([])) };
      break;
  }
  const rationale =
    index >= 0 ? `allowlist rule #${index + 1} matched` : "no allowlist rule matched; default applies";
  return { answer, rationale };
}
