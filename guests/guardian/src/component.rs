//! The WIT glue: contract types in, [`crate::logic::review_with_call_keeping`],
//! contract types out. The conversions are [`crate::component_glue!`], which
//! the model guardian (`guests/model-guardian`) shares.

wit_bindgen::generate!({
    world: "reviewer",
    path: "../../wit",
});

use exports::gatehouse::reviewer::review::Guest;
use gatehouse::reviewer::call;
use gatehouse::reviewer::types::{ModuleInfo, Outcome, ReviewRequest};

crate::component_glue!();

struct Guardian;

impl Guest for Guardian {
    fn describe() -> ModuleInfo {
        module_info(crate::NAME, crate::CLAIMS)
    }

    fn review(config: String, request: ReviewRequest) -> Outcome {
        // The agent's call behind the elicitation (contract 0.2), when the
        // host can tie it: an approval request that does not describe it is
        // never accepted.
        let related = call::related();
        let related = related.as_ref().map(related_view);
        // The reviewed call is kept for the debug log alone: copied out of
        // the request only if the host records debug entries.
        let verdict = crate::logic::review_with_call_keeping(
            &config,
            &input_view(&request),
            related.as_ref(),
            debug_enabled,
        );
        log_reviewed(&verdict, related.as_ref());
        outcome(verdict)
    }
}

export!(Guardian);
