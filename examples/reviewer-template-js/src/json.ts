// JSON as the Rust allowlist (serde_json 1.x, default features) reads and
// writes it, so that this module answers every input exactly as
// `guests/allowlist` does. `JSON.parse` and `JSON.stringify` differ from
// serde_json at the edges, and each difference would be a different answer:
//
// - serde_json refuses lone UTF-16 surrogates (`"\ud800"`), numbers beyond
//   f64 (`1e400`) and documents nested 128 deep; `JSON.parse` takes them. A
//   `_meta` serde_json refuses reads as `{}` (no tool name), a config it
//   refuses is declined.
// - serde_json keeps an integer an integer and a float a float: `1.0` is
//   written back as `1.0`, `1e2` as `100.0`, `-0` as `-0.0`; `JSON.stringify`
//   writes `1`, `100`, `0`. The host compares accept content as JSON values,
//   where the integer 1 and the float 1.0 differ.
// - serde_json's maps (without its `preserve_order` feature) are sorted by
//   key, so accept content is written with its keys in UTF-8 byte order.
//
// If you write your own policy and none of that matters to you, `JSON.parse`
// and `JSON.stringify` will do.

/** A JSON number, held as the text serde_json writes for it. */
export class JsonNumber {
  constructor(readonly text: string) {}
}

/** A JSON object: its members in document order, duplicates kept. */
export class JsonObject {
  constructor(readonly entries: ReadonlyArray<readonly [string, JsonValue]>) {}

  /** The value of `key`; the last one when the key is repeated (as serde_json's maps keep it). */
  get(key: string): JsonValue | undefined {
    for (let index = this.entries.length - 1; index >= 0; index--) {
      const entry = this.entries[index]!;
      if (entry[0] === key) {
        return entry[1];
      }
    }
    return undefined;
  }
}

export type JsonValue = null | boolean | string | JsonNumber | JsonValue[] | JsonObject;

/** Why a text is not JSON serde_json would take. */
export class JsonError extends Error {}

/** serde_json's nesting limit: 127 levels parse, 128 do not. */
const RECURSION_LIMIT = 128;

/** A number token (already known to be valid JSON). */
const NUMBER = /-?(\d+)(?:\.(\d+))?(?:[eE]([+-]?)(\d+))?/y;

/**
 * Parses `text` as `serde_json::from_str` would, or throws a {@link JsonError}.
 *
 * `JSON.parse` checks the syntax first: it is native code, far faster than
 * anything written in JavaScript inside the engine, and what it refuses
 * serde_json refuses too (the error message is its own). The parser below
 * then only walks valid JSON, and refuses what serde_json refuses beyond it.
 */
export function parse(text: string): JsonValue {
  try {
    JSON.parse(text);
  } catch (error) {
    throw new JsonError(error instanceof Error ? error.message : String(error));
  }
  return new Parser(text).value();
}

/**
 * `JSON.parse(text)`, when serde_json would take `text` too; else throws a
 * {@link JsonError}. Faster than {@link parse} where only the plain value is
 * wanted (a `_meta` object of any size): the full parse runs only when a
 * cheap look cannot rule out what serde_json refuses beyond `JSON.parse`.
 */
export function check(text: string): unknown {
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (error) {
    throw new JsonError(error instanceof Error ? error.message : String(error));
  }
  // A `\u` escape (a surrogate?), 128 brackets (nested 128 deep?) or a
  // number near f64's end (out of range as serde_json computes it?).
  if (text.includes("\\u") || atLeast(text, "[", "{", RECURSION_LIMIT) || !numbersInRange(value)) {
    new Parser(text).value();
  }
  return value;
}

/** Whether `a` and `b` occur at least `count` times in `text`, together. */
function atLeast(text: string, a: string, b: string, count: number): boolean {
  let seen = 0;
  for (const char of [a, b]) {
    for (let at = text.indexOf(char); at >= 0 && seen < count; at = text.indexOf(char, at + 1)) {
      seen++;
    }
  }
  return seen >= count;
}

/** Whether every number in a parsed value is well inside f64's range. */
function numbersInRange(value: unknown): boolean {
  if (typeof value === "number") {
    return value < 1e300 && value > -1e300;
  }
  if (typeof value !== "object" || value === null) {
    return true;
  }
  const record = value as Record<string, unknown>;
  for (const key in record) {
    const member = record[key];
    if (typeof member === "object" ? !numbersInRange(member) : typeof member === "number" && !(member < 1e300 && member > -1e300)) {
      return false;
    }
  }
  return true;
}

/** Walks text that `JSON.parse` accepted. */
class Parser {
  private at = 0;
  private depth = RECURSION_LIMIT;
  // The next `"` and `\` at or after `at` (text.length when there is none),
  // found once each, so that long strings cost one native scan.
  private nextQuote = -1;
  private nextBackslash = -1;

  constructor(private readonly text: string) {}

  private whitespace(): void {
    const text = this.text;
    for (;;) {
      const code = text.charCodeAt(this.at);
      if (code === 0x20 || code === 0x0a || code === 0x09 || code === 0x0d) {
        this.at++;
      } else {
        return;
      }
    }
  }

  value(): JsonValue {
    this.whitespace();
    switch (this.text[this.at]) {
      case "n":
        this.at += 4;
        return null;
      case "t":
        this.at += 4;
        return true;
      case "f":
        this.at += 5;
        return false;
      case '"':
        return this.string();
      case "[":
        return this.array();
      case "{":
        return this.object();
      default:
        return this.number();
    }
  }

  private enter(): void {
    this.depth--;
    if (this.depth === 0) {
      throw new JsonError("recursion limit exceeded");
    }
    this.at++;
  }

  private array(): JsonValue[] {
    this.enter();
    const items: JsonValue[] = [];
    this.whitespace();
    if (this.text[this.at] !== "]") {
      do {
        items.push(this.value());
        this.whitespace();
      } while (this.text[this.at++] === ",");
    } else {
      this.at++;
    }
    this.depth++;
    return items;
  }

  private object(): JsonObject {
    this.enter();
    const entries: Array<[string, JsonValue]> = [];
    this.whitespace();
    if (this.text[this.at] !== "}") {
      do {
        this.whitespace();
        const key = this.string();
        this.whitespace();
        this.at++; // the `:`
        entries.push([key, this.value()]);
        this.whitespace();
      } while (this.text[this.at++] === ",");
    } else {
      this.at++;
    }
    this.depth++;
    return new JsonObject(entries);
  }

  private string(): string {
    const text = this.text;
    this.at++; // the opening quote
    let out = "";
    for (;;) {
      if (this.nextQuote < this.at) {
        this.nextQuote = found(text.indexOf('"', this.at), text);
      }
      if (this.nextBackslash < this.at) {
        this.nextBackslash = found(text.indexOf("\\", this.at), text);
      }
      if (this.nextQuote < this.nextBackslash) {
        out += text.slice(this.at, this.nextQuote);
        this.at = this.nextQuote + 1;
        return out;
      }
      out += text.slice(this.at, this.nextBackslash);
      this.at = this.nextBackslash + 1;
      out += this.escape();
    }
  }

  private escape(): string {
    const char = this.text[this.at++];
    switch (char) {
      case "b":
        return "\b";
      case "f":
        return "\f";
      case "n":
        return "\n";
      case "r":
        return "\r";
      case "t":
        return "\t";
      case "u": {
        // serde_json reads into UTF-8: a surrogate must be half of a pair.
        const first = this.hex();
        if (first >= 0xdc00 && first <= 0xdfff) {
          throw new JsonError("lone leading surrogate in hex escape");
        }
        if (first < 0xd800 || first > 0xdbff) {
          return String.fromCharCode(first);
        }
        if (!this.text.startsWith("\\u", this.at)) {
          throw new JsonError("unexpected end of hex escape");
        }
        this.at += 2;
        const second = this.hex();
        if (second < 0xdc00 || second > 0xdfff) {
          throw new JsonError("lone leading surrogate in hex escape");
        }
        return String.fromCharCode(first, second);
      }
      default:
        return char!; // `"`, `\\` or `/`
    }
  }

  private hex(): number {
    const code = parseInt(this.text.slice(this.at, this.at + 4), 16);
    this.at += 4;
    return code;
  }

  /**
   * serde_json's number parser (without its `float_roundtrip` feature): an
   * integer that fits u64 (or i64 when negative) stays an integer; any other
   * number is an f64, computed as serde_json computes it (which is not
   * always the nearest f64).
   */
  private number(): JsonNumber {
    NUMBER.lastIndex = this.at;
    const match = NUMBER.exec(this.text)!;
    this.at = NUMBER.lastIndex;
    const positive = !match[0].startsWith("-");
    const whole = match[1]!;
    const fraction = match[2];
    const exponentSign = match[3];
    const exponentDigits = match[4];
    let significand = 0n;
    let exponent = 0;
    if (whole.length + (fraction?.length ?? 0) <= 19) {
      // No overflow possible: u64 holds every 19-digit number.
      significand = BigInt(whole + (fraction ?? ""));
      exponent = -(fraction?.length ?? 0);
    } else {
      let overflowed = false;
      for (const char of whole) {
        if (overflowed || overflows(significand, Number(char))) {
          // Past u64, serde_json drops the digits and counts the places.
          overflowed = true;
          exponent++;
        } else {
          significand = significand * 10n + BigInt(char);
        }
      }
      for (const char of fraction ?? "") {
        if (overflows(significand, Number(char))) {
          break;
        }
        significand = significand * 10n + BigInt(char);
        exponent--;
      }
      if (overflowed && fraction === undefined && exponentDigits === undefined) {
        return new JsonNumber(formatF64(f64FromParts(positive, significand, exponent)));
      }
    }
    if (exponentDigits !== undefined) {
      let written = 0;
      for (const char of exponentDigits) {
        const digit = Number(char);
        if (written > (I32_MAX - digit) / 10) {
          // An exponent beyond i32: infinity is an error, zero is zero.
          if (significand !== 0n && exponentSign !== "-") {
            throw new JsonError("number out of range");
          }
          return new JsonNumber(positive ? "0.0" : "-0.0");
        }
        written = written * 10 + digit;
      }
      exponent = saturate(exponentSign === "-" ? exponent - written : exponent + written);
    } else if (fraction === undefined) {
      if (positive) {
        return new JsonNumber(whole);
      }
      if (significand !== 0n && significand <= I64_MIN_MAGNITUDE) {
        return new JsonNumber(`-${whole}`);
      }
      // serde_json reads `-0` and integers below i64::MIN as f64.
      return new JsonNumber(formatF64(-Number(significand)));
    }
    return new JsonNumber(formatF64(f64FromParts(positive, significand, exponent)));
  }
}

/** An index from `indexOf`, with "none" as the end of the text. */
function found(index: number, text: string): number {
  return index < 0 ? text.length : index;
}

const U64_MAX = 18446744073709551615n;
const I64_MIN_MAGNITUDE = 9223372036854775808n;
const I32_MAX = 2147483647;
const I32_MIN = -2147483648;

function overflows(significand: bigint, digit: number): boolean {
  return significand >= U64_MAX / 10n && (significand > U64_MAX / 10n || BigInt(digit) > U64_MAX % 10n);
}

function saturate(exponent: number): number {
  return Math.min(I32_MAX, Math.max(I32_MIN, exponent));
}

/** 1e0 ..= 1e308, as Rust's literals (and JavaScript's) round them. */
const POW10: number[] = Array.from({ length: 309 }, (_, index) => Number(`1e${index}`));

/** serde_json's `f64_from_parts`: one multiplication or division by a power of ten. */
function f64FromParts(positive: boolean, significand: bigint, exponentIn: number): number {
  let value = Number(significand);
  let exponent = exponentIn;
  for (;;) {
    const pow = POW10[Math.abs(exponent)];
    if (pow !== undefined) {
      if (exponent >= 0) {
        value *= pow;
        if (!Number.isFinite(value)) {
          throw new JsonError("number out of range");
        }
      } else {
        value /= pow;
      }
      break;
    }
    if (value === 0) {
      break;
    }
    if (exponent >= 0) {
      throw new JsonError("number out of range");
    }
    value /= 1e308;
    exponent += 308;
  }
  return positive ? value : -value;
}

/**
 * An f64 as serde_json writes it (the `zmij` crate): the shortest digits that
 * read back as the same f64, in plain notation with at least one fractional
 * digit when the decimal exponent is within -5..=15 (`100.0`, `0.00001`), else
 * in scientific notation with a signed exponent (`1e+16`, `1.5e-7`).
 */
export function formatF64(value: number): string {
  if (value === 0) {
    return Object.is(value, -0) ? "-0.0" : "0.0";
  }
  const sign = value < 0 ? "-" : "";
  // String() gives the shortest round-trip digits, as zmij does.
  const [mantissa, power] = String(Math.abs(value)).split("e") as [string, string | undefined];
  const [whole, fraction = ""] = mantissa.split(".") as [string, string | undefined];
  let digits = (whole + fraction).replace(/^0+/, "");
  const leadingZeros = (whole + fraction).length - digits.length;
  digits = digits.replace(/0+$/, "");
  // The decimal exponent of the first significant digit.
  const exponent = whole.length - 1 - leadingZeros + (power === undefined ? 0 : Number(power));
  if (exponent >= -5 && exponent <= 15) {
    if (digits.length - 1 <= exponent) {
      return `${sign}${digits}${"0".repeat(exponent - (digits.length - 1))}.0`;
    }
    if (exponent >= 0) {
      return `${sign}${digits.slice(0, exponent + 1)}.${digits.slice(exponent + 1)}`;
    }
    return `${sign}0.${"0".repeat(-exponent - 1)}${digits}`;
  }
  const rest = digits.length > 1 ? `.${digits.slice(1)}` : "";
  return `${sign}${digits[0]}${rest}e${exponent < 0 ? "-" : "+"}${Math.abs(exponent)}`;
}

/** Writes `value` as `serde_json::Value::to_string` does: compact, object keys sorted. */
export function stringify(value: JsonValue): string {
  if (value === null) {
    return "null";
  }
  if (typeof value === "boolean") {
    return value ? "true" : "false";
  }
  if (typeof value === "string") {
    // serde_json escapes exactly what JSON.stringify escapes in a well-formed string.
    return JSON.stringify(value);
  }
  if (value instanceof JsonNumber) {
    return value.text;
  }
  if (Array.isArray(value)) {
    return `[${value.map(stringify).join(",")}]`;
  }
  return `{${sortedMembers(value)
    .map(([key, member]) => `${JSON.stringify(key)}:${stringify(member)}`)
    .join(",")}}`;
}

/** The members of an object as serde_json's map holds them: the last of each key, in UTF-8 byte order. */
export function sortedMembers(object: JsonObject): Array<readonly [string, JsonValue]> {
  const last = new Map<string, JsonValue>();
  for (const [key, member] of object.entries) {
    last.set(key, member);
  }
  return [...last.entries()].sort(([a], [b]) => compareCodePoints(a, b));
}

/** Orders strings by code point, which is UTF-8 byte order (`<` on strings orders UTF-16 units). */
function compareCodePoints(a: string, b: string): number {
  const left = a[Symbol.iterator]();
  const right = b[Symbol.iterator]();
  for (;;) {
    const x = left.next();
    const y = right.next();
    if (x.done || y.done) {
      return x.done && y.done ? 0 : x.done ? -1 : 1;
    }
    const difference = x.value.codePointAt(0)! - y.value.codePointAt(0)!;
    if (difference !== 0) {
      return difference;
    }
  }
}

/**
 * Rust's `str::trim`: strips Unicode White_Space. (`String.prototype.trim`
 * also strips U+FEFF and keeps U+0085.)
 */
export function trim(text: string): string {
  let start = 0;
  let end = text.length;
  while (start < end && isWhitespace(text.charCodeAt(start))) start++;
  while (end > start && isWhitespace(text.charCodeAt(end - 1))) end--;
  return text.slice(start, end);
}

function isWhitespace(code: number): boolean {
  return (
    (code >= 0x09 && code <= 0x0d) ||
    code === 0x20 ||
    code === 0x85 ||
    code === 0xa0 ||
    code === 0x1680 ||
    (code >= 0x2000 && code <= 0x200a) ||
    code === 0x2028 ||
    code === 0x2029 ||
    code === 0x202f ||
    code === 0x205f ||
    code === 0x3000
  );
}
