// The `model` interface the `model-reviewer` world imports, as componentize-js
// hands it to JavaScript (see contract.ts for the mapping). It exists only
// inside the component, and only when the operator grants the module a model.

declare module "gatehouse:reviewer/model@0.2.0" {
  /** Who wrote a message. */
  export type Role = "system" | "user" | "assistant";
  /** One message of a completion request. */
  export interface Message {
    role: Role;
    content: string;
  }
  /** What to ask. */
  export interface CompletionRequest {
    /** The conversation, in order. */
    messages: Message[];
    /** A JSON schema the answer should follow (JSON text). */
    outputSchema?: string;
    /** The most tokens wanted back; the operator's limit caps it. */
    maxOutputTokens?: number;
  }
  /** Why the model stopped. */
  export type FinishReason = "stop" | "length" | "content-filter" | "other";
  /** The model's answer. */
  export interface Completion {
    text: string;
    model: string;
    finishReason: FinishReason;
    inputTokens?: number;
    outputTokens?: number;
  }
  /** Why there is no answer. */
  export type ModelError =
    | { tag: "not-configured" }
    | { tag: "timeout" }
    | { tag: "cancelled" }
    | { tag: "rate-limited"; val: string }
    | { tag: "transient"; val: string }
    | { tag: "rejected"; val: string };
  /**
   * Asks the model. The `err` case of the WIT's
   * `result<completion, model-error>` is not returned: componentize-js throws
   * it, as an `Error` whose own `payload` property is the `ModelError`.
   */
  export function complete(request: CompletionRequest): Completion;
}
