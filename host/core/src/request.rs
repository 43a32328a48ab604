//! A review request: the server's elicitation plus the host's context, turned
//! into the contract's `review-request` once and shared by every module in
//! the chain.

use crate::context::{ApprovalPolicy, ApprovalsReviewer, CatalogEntry, ReviewContext};
use crate::contract::types as wit;
use crate::elicitation::{Elicitation, ElicitationParams, RequestId};

/// One elicitation to review.
///
/// ```
/// use gatehouse_core::context::ReviewContext;
/// use gatehouse_core::elicitation::{ElicitationParams, RequestId};
/// use gatehouse_core::request::ReviewRequest;
/// let params = ElicitationParams::from_wire(&serde_json::json!({
///     "message": "Allow?", "requestedSchema": {"type": "object", "properties": {}}
/// })).unwrap();
/// let request = ReviewRequest::new(params, ReviewContext::new("docs", RequestId::Number(1)));
/// assert_eq!(request.context().server_name, "docs");
/// ```
#[derive(Debug, Clone)]
pub struct ReviewRequest {
    params: ElicitationParams,
    context: ReviewContext,
    wire: wit::ReviewRequest,
    /// The context's related call, shared with every review's store.
    related_call: Option<std::sync::Arc<crate::context::RelatedCall>>,
}

impl ReviewRequest {
    /// Builds the request.
    pub fn new(params: ElicitationParams, context: ReviewContext) -> Self {
        let wire = wit::ReviewRequest {
            elicitation: match &params.elicitation {
                Elicitation::Form {
                    message,
                    requested_schema,
                } => wit::Elicitation::Form(wit::FormElicitation {
                    message: message.clone(),
                    requested_schema: serde_json::Value::Object(requested_schema.clone())
                        .to_string(),
                }),
                Elicitation::Url {
                    message,
                    url,
                    elicitation_id,
                } => wit::Elicitation::Url(wit::UrlElicitation {
                    message: message.clone(),
                    url: url.clone(),
                    elicitation_id: elicitation_id.clone(),
                }),
            },
            meta: params
                .meta
                .as_ref()
                .map(|meta| serde_json::Value::Object(meta.clone()).to_string()),
            context: wire_context(&context),
        };
        let related_call = context.related_call.clone().map(std::sync::Arc::new);
        ReviewRequest {
            params,
            context,
            wire,
            related_call,
        }
    }

    /// What the server sent.
    pub fn params(&self) -> &ElicitationParams {
        &self.params
    }

    /// What the host knows.
    pub fn context(&self) -> &ReviewContext {
        &self.context
    }

    /// The related call, shared with each review's store (the `call`
    /// import answers from it).
    pub(crate) fn related_call(&self) -> Option<&std::sync::Arc<crate::context::RelatedCall>> {
        self.related_call.as_ref()
    }

    /// The contract form passed to guests (the wire types are crate-private:
    /// see [`crate::contract`]).
    pub(crate) fn wire(&self) -> &wit::ReviewRequest {
        &self.wire
    }

    /// The elicitation read back from the contract form a guest receives:
    /// the message, URL and id as passed, the schema parsed back from the
    /// JSON text the guest gets. It equals `self.params().elicitation`;
    /// `gatehouse-fuzzing` checks that it does for every params it accepts.
    /// Reviewing never needs it: use [`params`](Self::params).
    ///
    /// Fails only if the schema text does not parse back as a JSON object,
    /// which would be a bug in the conversion.
    pub fn elicitation_from_contract(&self) -> Result<Elicitation, serde_json::Error> {
        Ok(match &self.wire.elicitation {
            wit::Elicitation::Form(form) => Elicitation::Form {
                message: form.message.clone(),
                requested_schema: serde_json::from_str(&form.requested_schema)?,
            },
            wit::Elicitation::Url(url) => Elicitation::Url {
                message: url.message.clone(),
                url: url.url.clone(),
                elicitation_id: url.elicitation_id.clone(),
            },
        })
    }
}

fn wire_context(context: &ReviewContext) -> wit::ReviewContext {
    wit::ReviewContext {
        server_name: context.server_name.clone(),
        request_id: match &context.request_id {
            RequestId::Number(number) => wit::RequestId::Number(*number),
            RequestId::Text(text) => wit::RequestId::Text(text.clone()),
        },
        protocol_version: context.protocol_version.clone(),
        approval_policy: match context.approval_policy {
            ApprovalPolicy::Untrusted => wit::ApprovalPolicy::Untrusted,
            ApprovalPolicy::OnRequest => wit::ApprovalPolicy::OnRequest,
            ApprovalPolicy::Granular(flags) => wit::ApprovalPolicy::Granular(wit::GranularPolicy {
                sandbox_approval: flags.sandbox_approval,
                rules: flags.rules,
                skill_approval: flags.skill_approval,
                request_permissions: flags.request_permissions,
                mcp_elicitations: flags.mcp_elicitations,
            }),
            ApprovalPolicy::Never => wit::ApprovalPolicy::Never,
        },
        approvals_reviewer: match context.approvals_reviewer {
            ApprovalsReviewer::User => wit::ApprovalsReviewer::User,
            ApprovalsReviewer::AutoReview => wit::ApprovalsReviewer::AutoReview,
        },
        auto_approve_prompts: context.auto_approve_prompts,
        session_id: context.session_id.clone(),
        turn_id: context.turn_id.clone(),
        catalog: match &context.catalog {
            CatalogEntry::Unavailable => wit::CatalogEntry::Unavailable,
            CatalogEntry::NotListed => wit::CatalogEntry::NotListed,
            CatalogEntry::Listed(tool) => wit::CatalogEntry::Listed(wit::CatalogTool {
                name: tool.name.clone(),
                title: tool.title.clone(),
                description: tool.description.clone(),
                annotations: wit::ToolAnnotations {
                    read_only_hint: tool.annotations.read_only_hint,
                    destructive_hint: tool.annotations.destructive_hint,
                    idempotent_hint: tool.annotations.idempotent_hint,
                    open_world_hint: tool.annotations.open_world_hint,
                },
                meta: tool
                    .meta
                    .as_ref()
                    .map(|meta| serde_json::Value::Object(meta.clone()).to_string()),
            }),
        },
    }
}
