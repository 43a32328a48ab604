// The host functions the `reviewer` world imports. componentize-js resolves
// these module names to the component's imports; they exist only inside the
// component (not under Node).

declare module "gatehouse:reviewer/logging@0.2.0" {
  /** A log level, from the most to the least verbose. */
  export type Level = "trace" | "debug" | "info" | "warn" | "error";
  /** Records a log entry; the host caps entries per review and drops the excess. */
  export function log(level: Level, message: string, fields: Array<[string, string]>): void;
  /** The most verbose level the host records. */
  export function maxLevel(): Level;
}

declare module "gatehouse:reviewer/call@0.2.0" {
  /** What kind of request the agent made. */
  export type CallKind = "tool-call" | "resource-read" | "prompt-get";
  /** One request the agent made through the host. */
  export interface RelatedCall {
    sessionId: string;
    kind: CallKind;
    qualifiedName: string;
    name: string;
    /** The arguments exactly as forwarded (JSON text), if any. */
    arguments?: string;
    /** The upstream request's JSON-RPC id (JSON text), if known. */
    id?: string;
  }
  /** The call behind the elicitation under review, when the host can tie it to exactly one. */
  export function related(): RelatedCall | undefined;
}
