// The WIT glue: gatehouse calls `review.describe` and `review.review` (the
// `gatehouse:reviewer/review` export of the `reviewer` world). The policy is
// in policy.ts.

import { log } from "gatehouse:reviewer/logging@0.2.0";
import type { Outcome, Review, ReviewRequest } from "./contract.js";
import { type Config, ConfigError, decide, parseConfig, toolName } from "./policy.js";

export const review: Review = {
  describe() {
    return {
      name: "allowlist-js",
      version: "0.1.0",
      // This module keeps nothing between reviews.
      claims: ["stateless"],
    };
  },

  review(configText: string, request: ReviewRequest): Outcome {
    let config: Config;
    try {
      config = parseConfig(configText);
    } catch (error) {
      if (!(error instanceof ConfigError)) {
        throw error;
      }
      const why = `invalid allowlist config: ${error.message}`;
      log("error", why, []);
      return { decision: { tag: "decline", val: undefined }, rationale: why };
    }
    const { elicitation } = request;
    const { answer, rationale } = decide(config, {
      server: request.context.serverName,
      tool: toolName(request.meta),
      url: elicitation.tag === "url" ? elicitation.val.url : undefined,
    });
    switch (answer.kind) {
      case "defer":
        return { decision: { tag: "defer" }, rationale };
      case "accept":
        return { decision: { tag: "accept", val: answer.content }, rationale };
      case "decline":
        return { decision: { tag: "decline", val: answer.message }, rationale };
      case "cancel":
        return { decision: { tag: "cancel" }, rationale };
    }
  },
};
