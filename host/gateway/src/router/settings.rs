//! `[elicitations]`: how the host routes elicitations, with per-server
//! overrides.
//!
//! ```toml
//! [elicitations]
//! auto_deny = false                 # decline everything at once, no review
//! approval_policy = "on-request"    # untrusted | on-request | never | { granular = {...} }
//! approvals_reviewer = "auto_review" # or "user": the person answers (strict review excepted)
//! on_unhandled = "decline"          # what no module and no person decided: decline | cancel
//! person_timeout_sec = 300          # then the elicitation is cancelled
//! person = "client"                 # who puts the question to the person: client | console | client-then-console
//! max_in_flight_per_server = 256    # more at once from one server are declined at once
//! max_model_reviews_per_call = 4    # model-reviewed elicitations one agent call may cause
//! max_model_reviews_per_server_per_minute = 60
//! audit_log = "gatehouse-audit.jsonl"
//! audit_sync = "batch"              # always | batch | never: when records are fdatasynced
//!
//! [elicitations.servers.github]
//! approvals_reviewer = "user"       # this server's strict requests too: declined unreviewed
//! ```
//!
//! A strict request (`_meta.codex_strict_auto_review`) heeds only the
//! per-server `approvals_reviewer`, never the global one
//! ([`Effective::strict_reviewer`]).

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Deserialize;

use gatehouse_core::context::{ApprovalPolicy, ApprovalsReviewer};

/// What answers an elicitation nobody decided.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Unhandled {
    /// Decline (the default).
    #[default]
    Decline,
    /// Cancel.
    Cancel,
}

/// Where a question for the person goes (`[elicitations] person`, and per
/// server).
///
/// The console is the approvals console (`[console]`, `gatehouse console`):
/// without one configured, a question routed to it is answered
/// `on_unhandled`, audited with why.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum PersonRoute {
    /// The upstream client of the session that made the call (the
    /// default). A client that declared no elicitation support for the
    /// question's mode is passed over for the console, when one is
    /// configured.
    #[default]
    Client,
    /// The console, always: for clients that answer by themselves
    /// (`codex exec` declines, `claude -p` cancels) or run unattended.
    Console,
    /// The client when it can be asked (a session to ask, the mode
    /// declared, room for another question); the console otherwise.
    ClientThenConsole,
}

impl PersonRoute {
    /// Its name in the config.
    pub fn name(self) -> &'static str {
        match self {
            PersonRoute::Client => "client",
            PersonRoute::Console => "console",
            PersonRoute::ClientThenConsole => "client-then-console",
        }
    }
}

/// Per-server overrides; unset fields inherit.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServerOverrides {
    /// Decline everything from this server at once.
    pub auto_deny: Option<bool>,
    /// The approval policy for this server.
    pub approval_policy: Option<ApprovalPolicy>,
    /// Who answers this server's approvals.
    pub approvals_reviewer: Option<ApprovalsReviewer>,
    /// Whether this server's permission profile auto-approves prompts.
    pub auto_approve_prompts: Option<bool>,
    /// Where this server's questions for the person go.
    pub person: Option<PersonRoute>,
}

/// The `[elicitations]` section.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ElicitationSettings {
    /// Decline every elicitation at once (Codex's auto-deny switch).
    pub auto_deny: bool,
    /// The approval policy.
    pub approval_policy: ApprovalPolicy,
    /// Who answers approvals.
    pub approvals_reviewer: ApprovalsReviewer,
    /// Whether permission profiles auto-approve prompts.
    pub auto_approve_prompts: bool,
    /// What answers what nobody decided.
    pub on_unhandled: Unhandled,
    /// How long the person has, in seconds.
    pub person_timeout_sec: f64,
    /// Where questions for the person go.
    pub person: PersonRoute,
    /// How many elicitations one server may have in flight (in review or
    /// waiting for the person); more are declined at once, unreviewed, and
    /// audited. Bounds the memory a flooding server can take and keeps it
    /// from starving the others.
    pub max_in_flight_per_server: usize,
    /// How many elicitations tied to one agent call may be reviewed by a
    /// module granted a model; past that they are declined before the model
    /// is asked, and audited with the bound. An identical request later in
    /// the same call reuses the earlier verdict and counts nothing. `0`: no
    /// elicitation tied to a call reaches a model.
    pub max_model_reviews_per_call: usize,
    /// How many elicitations of one server may be reviewed by a module
    /// granted a model in any 60 seconds; past that they are declined before
    /// the model is asked, and audited with the bound.
    pub max_model_reviews_per_server_per_minute: usize,
    /// Overrides by server name.
    pub servers: BTreeMap<String, ServerOverrides>,
    /// The audit log file, relative to the config file (default
    /// `gatehouse-audit.jsonl`).
    pub audit_log: Option<std::path::PathBuf>,
    /// When audit records are `fdatasync`ed: `always` (before each answer),
    /// `batch` (the default: in the background, at most every 200 ms) or
    /// `never` (left to the OS). Read at start-up.
    pub audit_sync: gatehouse_audit::AuditSync,
}

impl Default for ElicitationSettings {
    fn default() -> Self {
        ElicitationSettings {
            auto_deny: false,
            approval_policy: ApprovalPolicy::OnRequest,
            approvals_reviewer: ApprovalsReviewer::AutoReview,
            auto_approve_prompts: false,
            on_unhandled: Unhandled::Decline,
            person_timeout_sec: 300.0,
            person: PersonRoute::Client,
            max_in_flight_per_server: DEFAULT_MAX_IN_FLIGHT_PER_SERVER,
            max_model_reviews_per_call: DEFAULT_MAX_MODEL_REVIEWS_PER_CALL,
            max_model_reviews_per_server_per_minute:
                DEFAULT_MAX_MODEL_REVIEWS_PER_SERVER_PER_MINUTE,
            servers: BTreeMap::new(),
            audit_log: None,
            audit_sync: gatehouse_audit::AuditSync::default(),
        }
    }
}

/// The default of `max_in_flight_per_server`.
pub const DEFAULT_MAX_IN_FLIGHT_PER_SERVER: usize = 256;

/// The default of `max_model_reviews_per_call`: an agent's tool call asks
/// for one approval, rarely a few; four leaves room for those and stops a
/// server that asks again and again under one call.
pub const DEFAULT_MAX_MODEL_REVIEWS_PER_CALL: usize = 4;

/// The default of `max_model_reviews_per_server_per_minute`: one model
/// review a second, sustained, is more than a person's agent makes calls
/// that need approval, and at most 60 model requests' worth of tokens a
/// minute for a server that floods.
pub const DEFAULT_MAX_MODEL_REVIEWS_PER_SERVER_PER_MINUTE: usize = 60;

/// The settings in force for one server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Effective {
    /// Decline at once.
    pub auto_deny: bool,
    /// The approval policy.
    pub approval_policy: ApprovalPolicy,
    /// Who answers approvals: the server's override, else the global
    /// setting.
    pub approvals_reviewer: ApprovalsReviewer,
    /// The server's own `approvals_reviewer` override
    /// (`[elicitations.servers.NAME]`), when it has one: the only reviewer
    /// setting strict review heeds ([`Effective::strict_reviewer`]).
    pub server_reviewer: Option<ApprovalsReviewer>,
    /// Whether prompts are auto-approved.
    pub auto_approve_prompts: bool,
    /// Where questions for the person go.
    pub person: PersonRoute,
}

impl Effective {
    /// Who answers a strict review (`codex_strict_auto_review`): the
    /// server's own override, else `auto_review`. The global
    /// `approvals_reviewer` does not count.
    ///
    /// This follows Codex's strict path (seed `session_mcp.rs` lines
    /// 751-757): it asks `mcp_approvals_reviewer_from_layers` with
    /// `AutoReview` as the default, where the ordinary path (lines 825-831)
    /// passes the session's `approvals_reviewer`. The only settings that
    /// function reads besides that default are the narrower ones, an app's
    /// (connector's) own reviewer; gatehouse's narrower setting is the
    /// per-server override, so a server set to `user` gets the strict
    /// decline unreviewed, and every other strict request is reviewed.
    pub fn strict_reviewer(&self) -> ApprovalsReviewer {
        self.server_reviewer
            .unwrap_or(ApprovalsReviewer::AutoReview)
    }

    /// The settings a strict review runs under: these, with
    /// `approvals_reviewer` set to [`Effective::strict_reviewer`], so that the
    /// modules' review context names the reviewer in force for the request.
    pub fn for_strict_review(&self) -> Effective {
        Effective {
            approvals_reviewer: self.strict_reviewer(),
            ..*self
        }
    }
}

impl ElicitationSettings {
    /// The bounds on model-reviewed elicitations.
    pub(super) fn spend_limits(&self) -> super::spend::SpendLimits {
        super::spend::SpendLimits {
            per_call: self.max_model_reviews_per_call,
            per_server_per_minute: self.max_model_reviews_per_server_per_minute,
        }
    }

    /// The settings for `server`, overrides applied.
    pub fn for_server(&self, server: &str) -> Effective {
        let overrides = self.servers.get(server).cloned().unwrap_or_default();
        Effective {
            auto_deny: overrides.auto_deny.unwrap_or(self.auto_deny),
            approval_policy: overrides.approval_policy.unwrap_or(self.approval_policy),
            approvals_reviewer: overrides
                .approvals_reviewer
                .unwrap_or(self.approvals_reviewer),
            server_reviewer: overrides.approvals_reviewer,
            auto_approve_prompts: overrides
                .auto_approve_prompts
                .unwrap_or(self.auto_approve_prompts),
            person: overrides.person.unwrap_or(self.person),
        }
    }

    /// How long the person has.
    pub fn person_timeout(&self) -> Duration {
        if self.person_timeout_sec.is_finite() && self.person_timeout_sec > 0.0 {
            // Longer than a Duration holds: as good as forever.
            Duration::try_from_secs_f64(self.person_timeout_sec).unwrap_or(Duration::MAX)
        } else {
            Duration::from_secs(300)
        }
    }
}
