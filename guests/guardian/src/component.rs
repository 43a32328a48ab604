//! The WIT glue: contract types in, [`crate::logic::review`], contract types out.

wit_bindgen::generate!({
    world: "reviewer",
    path: "../../wit",
});

use exports::gatehouse::reviewer::review::Guest;
use gatehouse::reviewer::logging::{self, Level};
use gatehouse::reviewer::types::{
    ApprovalPolicy, ApprovalsReviewer, CatalogEntry, Decision, Elicitation, ModuleInfo, Outcome,
    RequestId, ReviewRequest, RiskLevel,
};

use crate::input;

struct Guardian;

impl Guest for Guardian {
    fn describe() -> ModuleInfo {
        ModuleInfo {
            name: crate::NAME.to_owned(),
            version: env!("CARGO_PKG_VERSION").to_owned(),
            claims: crate::CLAIMS
                .iter()
                .map(|claim| (*claim).to_owned())
                .collect(),
        }
    }

    fn review(config: String, request: ReviewRequest) -> Outcome {
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
        let view = input::Input {
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
        };
        let verdict = crate::logic::review(&config, &view);
        if let Some(reviewed) = &verdict.request
            && logging::max_level() <= Level::Debug
            && let Some(reviewed) = reviewed.to_json()
        {
            logging::log(
                Level::Debug,
                "guardian reviewed a tool call",
                &[("request".to_owned(), reviewed.to_string())],
            );
        }
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
}

export!(Guardian);
