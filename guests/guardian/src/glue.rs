//! The WIT glue, as a macro: one copy of the conversion between the
//! contract's types and the guardian's plain types, for every component built
//! on the guardian's logic.
//!
//! `wit_bindgen::generate!` emits distinct Rust types in each crate that
//! invokes it, so a conversion written against one crate's bindings does not
//! type-check against another's. [`component_glue!`](crate::component_glue)
//! is written against the paths the bindings have (`gatehouse::reviewer::...`)
//! and expands in the invoking module, where they resolve to that crate's own
//! bindings; the guardian's types are reached through `$crate`. The
//! guardian's component (world `reviewer`) invokes it as
//! `crate::component_glue!`, and so does the model guardian (world
//! `model-reviewer`), which compiles this file with the rest of the
//! guardian's library modules (see `guests/model-guardian/src/lib.rs`).

/// Defines, in the invoking module, the functions that convert between the
/// contract's types and the guardian's:
///
/// - `module_info(name, claims) -> ModuleInfo`: the `describe` answer, with
///   the invoking crate's `CARGO_PKG_VERSION`;
/// - `input_view(&ReviewRequest) -> $crate::input::Input`: the request,
///   borrowed;
/// - `related_view(&call::RelatedCall) -> $crate::model_review::RelatedCall`:
///   the related call, borrowed;
/// - `outcome(Verdict) -> Outcome`: the verdict as the contract's outcome;
/// - `debug_enabled() -> bool` and `log_debug(message, fields)`: debug
///   logging through the `logging` import;
/// - `log_reviewed(&Verdict, Option<&RelatedCall>)`: the guardian's debug
///   entry for a reviewed tool call ("guardian reviewed a tool call", with the
///   call as Codex's planned action: `model_review::planned_action_for`, the
///   JSON a model review shows the model).
///
/// The module must have the bindings of a world that includes `reviewer` in
/// scope as `gatehouse::reviewer::...` (what `wit_bindgen::generate!` emits
/// at the module it is invoked in).
#[macro_export]
macro_rules! component_glue {
    () => {
        /// The module's `describe` answer.
        fn module_info(name: &str, claims: &[&str]) -> gatehouse::reviewer::types::ModuleInfo {
            gatehouse::reviewer::types::ModuleInfo {
                name: name.to_owned(),
                version: env!("CARGO_PKG_VERSION").to_owned(),
                claims: claims.iter().map(|claim| (*claim).to_owned()).collect(),
            }
        }

        /// The contract's request as the guardian's input, borrowed.
        fn input_view(
            request: &gatehouse::reviewer::types::ReviewRequest,
        ) -> $crate::input::Input<'_> {
            use gatehouse::reviewer::types::{
                ApprovalPolicy, ApprovalsReviewer, CatalogEntry, Elicitation, RequestId,
            };
            use $crate::input;

            let context = &request.context;
            let catalog = match &context.catalog {
                CatalogEntry::Unavailable => input::Catalog::Unavailable,
                CatalogEntry::NotListed => input::Catalog::NotListed,
                CatalogEntry::Listed(tool) => input::Catalog::Listed(input::CatalogTool {
                    name: &tool.name,
                    title: tool.title.as_deref(),
                    description: tool.description.as_deref(),
                    annotations: input::Annotations {
                        read_only: tool.annotations.read_only_hint,
                        destructive: tool.annotations.destructive_hint,
                        open_world: tool.annotations.open_world_hint,
                    },
                    meta: tool.meta.as_deref(),
                }),
            };
            input::Input {
                mode: match &request.elicitation {
                    Elicitation::Form(form) => input::Mode::Form {
                        requested_schema: &form.requested_schema,
                    },
                    Elicitation::Url(_) => input::Mode::Url,
                },
                meta: request.meta.as_deref(),
                server_name: &context.server_name,
                request_id: match &context.request_id {
                    RequestId::Text(text) => input::RequestId::Text(text),
                    RequestId::Number(number) => input::RequestId::Number(*number),
                },
                policy: match context.approval_policy {
                    ApprovalPolicy::Untrusted => input::Policy::Untrusted,
                    ApprovalPolicy::OnRequest => input::Policy::OnRequest,
                    ApprovalPolicy::Granular(flags) => input::Policy::Granular {
                        mcp_elicitations: flags.mcp_elicitations,
                    },
                    ApprovalPolicy::Never => input::Policy::Never,
                },
                reviewer: match context.approvals_reviewer {
                    ApprovalsReviewer::User => input::Reviewer::User,
                    ApprovalsReviewer::AutoReview => input::Reviewer::AutoReview,
                },
                auto_approve_prompts: context.auto_approve_prompts,
                catalog,
            }
        }

        /// The contract's related call as the guardian's, borrowed.
        fn related_view(
            call: &gatehouse::reviewer::call::RelatedCall,
        ) -> $crate::model_review::RelatedCall<'_> {
            use gatehouse::reviewer::call::CallKind;
            use $crate::model_review;

            model_review::RelatedCall {
                session_id: &call.session_id,
                kind: match call.kind {
                    CallKind::ToolCall => model_review::CallKind::ToolCall,
                    CallKind::ResourceRead => model_review::CallKind::ResourceRead,
                    CallKind::PromptGet => model_review::CallKind::PromptGet,
                },
                qualified_name: &call.qualified_name,
                name: &call.name,
                arguments: call.arguments.as_deref(),
                id: call.id.as_deref(),
            }
        }

        /// The guardian's verdict as the contract's outcome.
        fn outcome(verdict: $crate::input::Verdict) -> gatehouse::reviewer::types::Outcome {
            use gatehouse::reviewer::types::{Decision, Outcome, RiskLevel};
            use $crate::input;

            Outcome {
                decision: match verdict.decision {
                    input::Decision::Defer => Decision::Defer,
                    input::Decision::Accept(content) => Decision::Accept(Some(content)),
                    input::Decision::Decline(message) => Decision::Decline(message),
                    input::Decision::Cancel => Decision::Cancel,
                },
                rationale: verdict.rationale,
                risk: verdict.risk.map(|risk| match risk {
                    input::Risk::Low => RiskLevel::Low,
                    input::Risk::Medium => RiskLevel::Medium,
                    input::Risk::High => RiskLevel::High,
                    input::Risk::Critical => RiskLevel::Critical,
                }),
            }
        }

        /// Whether the host records debug entries.
        fn debug_enabled() -> bool {
            gatehouse::reviewer::logging::max_level() <= gatehouse::reviewer::logging::Level::Debug
        }

        /// A debug entry (callers check [`debug_enabled`] before building
        /// costly fields).
        fn log_debug(message: &str, fields: &[(String, String)]) {
            gatehouse::reviewer::logging::log(
                gatehouse::reviewer::logging::Level::Debug,
                message,
                fields,
            );
        }

        /// The guardian's debug entry for the tool call a verdict was reached
        /// on, if it got that far: the call as Codex's planned action (the
        /// related call's arguments when there is one), compact; or why it
        /// cannot be described.
        fn log_reviewed(
            verdict: &$crate::input::Verdict,
            related: Option<&$crate::model_review::RelatedCall<'_>>,
        ) {
            let Some(reviewed) = &verdict.request else {
                return;
            };
            if !debug_enabled() {
                return;
            }
            let field = match $crate::model_review::planned_action_for(reviewed, related) {
                // The pretty-printed action as one line; the keys stay sorted.
                Ok(action) => match serde_json::from_str::<serde_json::Value>(&action) {
                    Ok(action) => ("request".to_owned(), action.to_string()),
                    Err(error) => ("error".to_owned(), error.to_string()),
                },
                Err(why) => ("error".to_owned(), why),
            };
            log_debug("guardian reviewed a tool call", &[field]);
        }
    };
}
