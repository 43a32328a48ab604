// The WIT glue: gatehouse calls `review.describe` and `review.review` (the
// `gatehouse:reviewer/review` export of the `model-reviewer` world), and the
// module asks the model granted to it through the `model` import. The rule
// is in rule.ts.

import { complete } from "gatehouse:reviewer/model@0.2.0";
import type { Completion } from "gatehouse:reviewer/model@0.2.0";
import type { Outcome, Review, ReviewRequest } from "./contract.js";
import { completionRequest, defer, modelErrorOutcome, toolCall, verdictOutcome } from "./rule.js";

export const review: Review = {
  describe() {
    return {
      name: "gatehouse-model-reviewer-template-js",
      version: "0.1.0",
      // "stateless": this module keeps nothing between reviews.
      claims: ["stateless"],
    };
  },

  review(_config: string, request: ReviewRequest): Outcome {
    const call = toolCall(request);
    if (call === undefined) {
      return defer();
    }
    let completion: Completion;
    try {
      // An `err` from the host is thrown (see model.d.ts).
      completion = complete(completionRequest(request.context.serverName, call));
    } catch (error) {
      return modelErrorOutcome(error);
    }
    return verdictOutcome(call.tool, completion.text);
  },
};
