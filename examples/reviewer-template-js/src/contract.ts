// The types of `wit/reviewer.wit` (package gatehouse:reviewer@0.2.0) as
// componentize-js hands them to JavaScript: records are objects with
// camelCase fields, variants are `{ tag, val }`, enums are kebab-case
// strings, `option<T>` is `T | undefined`, `s64` is a BigInt, `json` is a
// string. These are the `types` interface; wit/reviewer.wit says what each
// field means. The imported functions (`logging`, and `call`, which this
// module does not use) are declared in wit.d.ts.

export type Json = string;

export type RequestId = { tag: "text"; val: string } | { tag: "number"; val: bigint };

export interface FormElicitation {
  message: string;
  requestedSchema: Json;
}

export interface UrlElicitation {
  message: string;
  url: string;
  elicitationId: string;
}

export type Elicitation = { tag: "form"; val: FormElicitation } | { tag: "url"; val: UrlElicitation };

export interface GranularPolicy {
  sandboxApproval: boolean;
  rules: boolean;
  skillApproval: boolean;
  requestPermissions: boolean;
  mcpElicitations: boolean;
}

export type ApprovalPolicy =
  | { tag: "untrusted" }
  | { tag: "on-request" }
  | { tag: "granular"; val: GranularPolicy }
  | { tag: "never" };

export type ApprovalsReviewer = "user" | "auto-review";

export interface ToolAnnotations {
  readOnlyHint?: boolean;
  destructiveHint?: boolean;
  idempotentHint?: boolean;
  openWorldHint?: boolean;
}

export interface CatalogTool {
  name: string;
  title?: string;
  description?: string;
  annotations: ToolAnnotations;
  meta?: Json;
}

export type CatalogEntry = { tag: "unavailable" } | { tag: "not-listed" } | { tag: "listed"; val: CatalogTool };

export interface ReviewContext {
  serverName: string;
  requestId: RequestId;
  protocolVersion: string;
  approvalPolicy: ApprovalPolicy;
  approvalsReviewer: ApprovalsReviewer;
  autoApprovePrompts: boolean;
  sessionId?: string;
  turnId?: string;
  catalog: CatalogEntry;
}

export interface ReviewRequest {
  elicitation: Elicitation;
  meta?: Json;
  context: ReviewContext;
}

export type RiskLevel = "low" | "medium" | "high" | "critical";

export type Decision =
  | { tag: "defer" }
  | { tag: "accept"; val: Json | undefined }
  | { tag: "decline"; val: string | undefined }
  | { tag: "cancel" };

export interface Outcome {
  decision: Decision;
  rationale?: string;
  risk?: RiskLevel;
}

export interface ModuleInfo {
  name: string;
  version: string;
  claims: string[];
}


/** What the module exports as `gatehouse:reviewer/review`. */
export interface Review {
  describe(): ModuleInfo;
  review(config: Json, request: ReviewRequest): Outcome;
}
