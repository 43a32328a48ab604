//! What one review's contract imports answer from ([`Granted`]): the
//! related call and, when the operator granted one, the model with its
//! budget for this review ([`ModelSession`]). The store holds it
//! (`state`); the imports read it (`capabilities`).

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::context::RelatedCall;
use crate::model::{Cancel, ModelCallRecord, ModelGrant};

/// What one review's `call` and `model` imports answer from.
#[derive(Default)]
pub(crate) struct Granted {
    /// The request's related call, shared with the request.
    pub(crate) related_call: Option<Arc<RelatedCall>>,
    /// The model, when the operator granted one to this module.
    pub(crate) model: Option<ModelSession>,
}

/// A granted model for one review: its budget, its cancel token and the
/// calls made so far.
pub(crate) struct ModelSession {
    pub(super) grant: ModelGrant,
    /// When the review's model budget ends (wall clock, all calls together).
    pub(super) deadline: Instant,
    pub(super) cancel: Cancel,
    pub(crate) calls: Vec<ModelCallRecord>,
}

impl ModelSession {
    /// A session whose budget starts now.
    pub(crate) fn new(grant: &ModelGrant, cancel: &Cancel) -> Self {
        let now = Instant::now();
        // A budget too long to represent is as good as none.
        let far = Duration::from_secs(365 * 24 * 3600);
        ModelSession {
            grant: grant.clone(),
            deadline: now
                .checked_add(grant.timeout())
                .or_else(|| now.checked_add(far))
                .unwrap_or(now),
            cancel: cancel.clone(),
            calls: Vec::new(),
        }
    }
}
