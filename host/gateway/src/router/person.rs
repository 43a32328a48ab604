//! The person: what no module decided is put in front of whoever made the
//! upstream request the elicitation belongs to, through their client
//! ([`Person`]). Asking is bounded: it ends at the first of the person's
//! answer, `person_timeout_sec`, the server's cancellation (or disconnect),
//! a cancel of the router's pending registry (shutdown, a disconnected
//! server) and the server reusing the request id; all but the answer are
//! answered `cancel`. An accepted form is checked against its schema before
//! it goes back.

use futures::future::BoxFuture;
use rmcp::model::{ElicitResult, ErrorData};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use std::sync::Arc;

use super::pending::Pending;
use super::policy::{Decided, unhandled};
use super::settings::{ElicitationSettings, PersonRoute, Unhandled};
use crate::calls::{Binding, SessionId, UpstreamCall};
use gatehouse_audit::{AuditStep, ClientName, DecidedBy, PersonChannel};
use gatehouse_console::link::Link;
use gatehouse_console::question as console;
use gatehouse_core::answer::{Action, ElicitAnswer};
use gatehouse_core::elicitation::{Elicitation, ElicitationParams};
use gatehouse_core::request::ReviewRequest;
use gatehouse_core::schema;
use gatehouse_mcp::handler::IncomingElicitation;

/// The audit reason of a question given up because its server's connection
/// ended while the person was asked (the question is withdrawn from the
/// person's client too).
pub const SERVER_GONE_REASON: &str =
    "the server went away (its connection ended) while the person was asked";

/// The audit reason of a question given up because the upstream request it
/// belongs to ended first (its server answered or failed it, its stream
/// broke, or it was cancelled); the question is withdrawn from the person's
/// client too.
pub const CALL_ENDED_REASON: &str = "the request it belongs to ended before the person answered";

/// The audit reason of a question given up because the server sent another
/// request under its id while it waited.
const REUSED_ID_REASON: &str = "cancelled: the server reused this request id while it waited";

/// Why the person was not asked.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NotAsked {
    /// No upstream client is connected (or the session asked for is gone).
    #[error("no upstream client to ask")]
    NoClient,
    /// The client did not declare this elicitation mode.
    #[error("the upstream client does not accept {0} elicitations")]
    ModeNotDeclared(&'static str),
    /// The params cannot be put on the wire as an elicitation.
    #[error("the elicitation cannot be forwarded: {0}")]
    Unforwardable(String),
    /// The session already has this many questions waiting.
    #[error("the upstream session already has {limit} questions waiting (max_pending_per_session)")]
    TooManyPending {
        /// The configured limit.
        limit: usize,
    },
}

/// Why a person who was asked gave no answer. Nobody decided, so the
/// server gets `[elicitations] on_unhandled` and the audit line says which.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NoAnswer {
    /// The person's client went away (its transport closed: killed,
    /// crashed, stdin closed, HTTP session ended) before it answered.
    #[error("the upstream client went away before the person answered")]
    ClientGone,
    /// The client answered with an error, or its answer could not be read.
    #[error("the upstream client failed: {0}")]
    ClientFailed(String),
    /// The approvals console went away, refused the question, or is not
    /// running.
    #[error("the console gave no answer: {0}")]
    Console(String),
    /// The question rode in the result of an upstream request (protocol
    /// 2026-07-28), and that request's client did not come back with an
    /// answer before the request ended or was given up.
    #[error("the upstream client did not send the request that carried the question again")]
    NotReturned,
}

impl From<ErrorData> for NoAnswer {
    fn from(error: ErrorData) -> Self {
        NoAnswer::ClientFailed(error.message.into_owned())
    }
}

/// Puts an elicitation in front of the person (through the upstream client).
pub trait Person: Send + Sync + 'static {
    /// Asks the person behind `session` (the upstream session the
    /// elicitation is tied to; `None` when the router has no call registry,
    /// as in tests and embeddings without a gateway) and returns their
    /// answer, or why nobody was asked.
    fn ask(
        &self,
        elicitation: &IncomingElicitation,
        session: Option<SessionId>,
    ) -> Result<BoxFuture<'static, Result<ElicitResult, NoAnswer>>, NotAsked>;

    /// The client of `session`, as it named itself, for the audit line.
    /// The default knows none.
    fn client(&self, session: SessionId) -> Option<ClientName> {
        let _ = session;
        None
    }

    /// The server finished the URL-mode elicitation `elicitation_id` out of
    /// band; tell the person's client if it was shown there. The default
    /// does nothing.
    fn completed(&self, server: &str, elicitation_id: &str) {
        let _ = (server, elicitation_id);
    }
}

/// Nobody to ask: every elicitation the routing would put to the person
/// (`approvals_reviewer = "user"`, or every module deferred) is answered by
/// `[elicitations] on_unhandled` at once, audited as `unhandled`.
///
/// The person of a host with nobody behind it: a batch or CI host, or an
/// embedding of the [`Router`](super::Router) without the gateway, where
/// only the chain of modules and the settings decide.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoPerson;

impl Person for NoPerson {
    fn ask(
        &self,
        _: &IncomingElicitation,
        _: Option<SessionId>,
    ) -> Result<BoxFuture<'static, Result<ElicitResult, NoAnswer>>, NotAsked> {
        Err(NotAsked::NoClient)
    }
}

/// What ties an elicitation to others, learned on arrival.
pub(super) struct Tie<'a> {
    /// Cancelled when the server reuses the request id while it waits
    /// (its entry in the router's arrivals registry).
    pub(super) replaced: Option<CancellationToken>,
    /// Whose upstream request it belongs to (with a call registry).
    pub(super) binding: Option<&'a Binding>,
}

/// One question for the person.
pub(super) struct Question<'a> {
    /// The elicitation as the server sent it.
    pub(super) elicitation: &'a IncomingElicitation,
    /// Its review request (the parsed params).
    pub(super) request: &'a ReviewRequest,
    /// What ties it to others.
    pub(super) tie: Tie<'a>,
    /// The agent's call it belongs to, when one is known.
    pub(super) call: Option<&'a UpstreamCall>,
    /// The modules' steps so far, for the audit line.
    pub(super) steps: Vec<AuditStep>,
    /// Why the person is asked, for the audit line.
    pub(super) why: &'a str,
}

/// Who can put a question to the person: the upstream client (through
/// the [`Person`]) and, when one is configured, the approvals console.
#[derive(Clone, Copy)]
pub(super) struct Channels<'a> {
    /// The upstream clients.
    pub(super) client: &'a dyn Person,
    /// The console, when `[console]` is configured.
    pub(super) console: Option<&'a Arc<Link>>,
    /// The questions waiting on each, counted for the metrics.
    pub(super) waiting: &'a Waiting,
}

/// How many questions wait for the person on each channel now.
#[derive(Debug, Default)]
pub(super) struct Waiting {
    client: std::sync::atomic::AtomicUsize,
    console: std::sync::atomic::AtomicUsize,
}

impl Waiting {
    /// The counts, by channel name.
    pub(super) fn by_channel(&self) -> [(&'static str, usize); 2] {
        use std::sync::atomic::Ordering::Relaxed;
        [
            ("client", self.client.load(Relaxed)),
            ("console", self.console.load(Relaxed)),
        ]
    }

    /// Counts one question waiting on the console (or the client) until
    /// the guard drops.
    fn hold(&self, console: bool) -> WaitingGuard<'_> {
        let count = if console { &self.console } else { &self.client };
        count.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        WaitingGuard(count)
    }
}

struct WaitingGuard<'a>(&'a std::sync::atomic::AtomicUsize);

impl Drop for WaitingGuard<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
    }
}

/// The person's answer and how it came.
type Asking = BoxFuture<'static, Result<(ElicitResult, PersonChannel), NoAnswer>>;

/// Asks the person through the channel `[elicitations] person` names (see
/// [`PersonRoute`]) and waits for the answer, with the question registered
/// in `pending` for as long as it waits.
pub(super) async fn ask(
    channels: Channels<'_>,
    pending: &Pending,
    settings: &ElicitationSettings,
    question: Question<'_>,
) -> Decided {
    let Question {
        elicitation,
        request,
        tie: Tie { replaced, binding },
        call,
        steps,
        why,
    } = question;
    let replaced = replaced.unwrap_or_default();
    let route = settings.for_server(&elicitation.server).person;
    // The person is whoever made the request the server is answering; an
    // elicitation that cannot be tied to one session is shown to no client
    // (the console, which answers for no session, may still show it).
    let (session, unbound) = match binding {
        None => (None, None),
        Some(binding) => match binding.session() {
            Some(session) => (Some(session), None),
            None => (None, Some(binding.why_unbound().unwrap_or_default())),
        },
    };
    // The client first, unless the route says console; the console when the
    // client is passed over (`because`, which joins the reason the person
    // and the audit line read).
    let mut because: Option<String> = None;
    let mut asking: Option<Asking> = None;
    match (route, &unbound) {
        (PersonRoute::Console, unbound) => because = unbound.clone(),
        (PersonRoute::ClientThenConsole, Some(unbound)) => because = Some(unbound.clone()),
        (PersonRoute::Client, Some(why_unbound)) => {
            return unhandled(
                settings.on_unhandled,
                format!("{why}; {why_unbound}"),
                steps,
            );
        }
        (PersonRoute::Client | PersonRoute::ClientThenConsole, None) => {
            match channels.client.ask(elicitation, session) {
                Ok(client) => {
                    asking = Some(Box::pin(async move {
                        client.await.map(|result| (result, PersonChannel::Client))
                    }));
                }
                Err(not_asked) => {
                    // A client that cannot show this mode is passed over for
                    // the console even under `client`; under
                    // `client-then-console`, every client that cannot be asked.
                    let passed_over = route == PersonRoute::ClientThenConsole
                        || matches!(not_asked, NotAsked::ModeNotDeclared(_));
                    if !(passed_over && channels.console.is_some()) {
                        return unhandled(
                            settings.on_unhandled,
                            format!("{why}; {not_asked}"),
                            steps,
                        );
                    }
                    because = Some(not_asked.to_string());
                }
            }
        }
    }
    let why = match &because {
        Some(because) => format!("{why}; {because}"),
        None => why.to_owned(),
    };
    let why = why.as_str();
    let on_console = asking.is_none();
    let asking = match asking {
        Some(asking) => Ok(asking),
        None => match channels.console {
            None => Err(unhandled(
                settings.on_unhandled,
                format!(
                    "{why}; person = \"{}\" but no console is configured ([console] in gatehouse.toml)",
                    route.name()
                ),
                steps.clone(),
            )),
            Some(console) => {
                let shown = console_question(
                    channels.client,
                    elicitation,
                    request,
                    session,
                    call,
                    &steps,
                    why,
                    settings,
                );
                let console = console.clone();
                let asking: Asking = Box::pin(async move {
                    let answered = console
                        .ask(shown)
                        .await
                        .map_err(|error| NoAnswer::Console(error.to_string()))?;
                    let result = console_result(&answered.reply)?;
                    Ok((
                        result,
                        PersonChannel::Console {
                            session: answered.session,
                        },
                    ))
                });
                Ok(asking)
            }
        },
    };
    let asking = match asking {
        Ok(asking) => asking,
        Err(decided) => return decided,
    };
    // Duplicate ids are settled on arrival (`Router::route`); here every
    // waiting elicitation just needs its own entry, for shutdown and
    // disconnects.
    let entry = pending.register_unique(
        &elicitation.server,
        &request.context().request_id.to_string(),
    );
    let _waiting = channels.waiting.hold(on_console);
    // The call the question belongs to, when it is one: once it has ended
    // (its server answered or failed it, or it was given up) nobody waits
    // for the answer.
    let call_ended = async {
        match binding {
            Some(Binding::Call(call)) => call.ended().await,
            _ => std::future::pending().await,
        }
    };
    let cancel = |reason: &str, steps: Vec<AuditStep>| Decided {
        answer: Ok(ElicitAnswer::cancel()),
        by: DecidedBy::Person,
        reason: reason.to_owned(),
        steps,
        person: None,
    };
    // Biased: an answer (or the client having gone) that is ready wins over
    // a shutdown cancel that came after it.
    let answered = tokio::select! {
        biased;
        answered = asking => answered,
        () = tokio::time::sleep(settings.person_timeout()) => return cancel("the person did not answer in time", steps),
        () = elicitation.server_gone.cancelled() => return cancel(SERVER_GONE_REASON, steps),
        // Before the call's end: a shutdown (or a disconnected server) ends
        // the calls too, and is why.
        () = entry.replaced.cancelled() => {
            // Nobody answered: the registry was cancelled under it.
            let because = pending.cancelled_because();
            return unhandled(settings.on_unhandled, format!("{why}; {because}"), steps);
        }
        () = call_ended => {
            // Given up because its client went away or cancelled it: nobody
            // decided, as when the person's client goes.
            return match binding.and_then(given_up) {
                Some(why_given_up) => unhandled(settings.on_unhandled, format!("{why}; {why_given_up}"), steps),
                None => cancel(CALL_ENDED_REASON, steps),
            };
        }
        () = elicitation.cancelled.cancelled() => return cancel("the server cancelled the request or disconnected", steps),
        () = replaced.cancelled() => return cancel(REUSED_ID_REASON, steps),
        () = elicitation.arrival.superseded.cancelled() => return cancel(REUSED_ID_REASON, steps),
    };
    drop(entry);
    match answered {
        Ok((result, channel)) => {
            let mut decided = checked(&result, request.params(), settings.on_unhandled, why, steps);
            if decided.by == DecidedBy::Person {
                decided.person = Some(channel);
            }
            decided
        }
        // The person's client (or the console) went away or failed: nobody
        // decided, so the server hears `on_unhandled`, and the audit line
        // says why.
        Err(no_answer) => unhandled(settings.on_unhandled, format!("{why}; {no_answer}"), steps),
    }
}

/// The question as the console shows it.
#[allow(clippy::too_many_arguments)]
fn console_question(
    client: &dyn Person,
    elicitation: &IncomingElicitation,
    request: &ReviewRequest,
    session: Option<SessionId>,
    call: Option<&UpstreamCall>,
    steps: &[AuditStep],
    why: &str,
    settings: &ElicitationSettings,
) -> console::Question {
    let ask = match &request.params().elicitation {
        Elicitation::Form {
            message,
            requested_schema,
        } => console::Ask::Form {
            message: message.clone(),
            requested_schema: requested_schema.clone(),
        },
        Elicitation::Url { message, url, .. } => console::Ask::Url {
            message: message.clone(),
            url: url.clone(),
        },
    };
    console::Question {
        server: elicitation.server.clone(),
        ask,
        session: session.map(SessionId::get),
        client: session
            .and_then(|session| client.client(session))
            .map(|name| console::ClientLabel {
                name: name.name,
                version: name.version,
            }),
        call: call.map(|call| console::CallLabel::new(&call.name, call.arguments.as_ref())),
        verdicts: steps
            .iter()
            .map(|step| console::ModuleVerdict {
                module: step.module.clone(),
                outcome: step.outcome.clone(),
                rationale: step.rationale.clone(),
                risk: step
                    .risk
                    .and_then(|risk| serde_json::to_value(risk).ok())
                    .and_then(|risk| risk.as_str().map(str::to_owned)),
            })
            .collect(),
        why: why.to_owned(),
        timeout_ms: u64::try_from(settings.person_timeout().as_millis()).unwrap_or(u64::MAX),
    }
}

/// The console's reply as an `ElicitResult` (checked against the schema
/// again by [`checked`]).
fn console_result(reply: &console::Reply) -> Result<ElicitResult, NoAnswer> {
    let mut wire = serde_json::json!({ "action": reply.action.name() });
    if let Some(content) = &reply.content {
        wire["content"] = Value::Object(content.clone());
    }
    serde_json::from_value(wire)
        .map_err(|error| NoAnswer::Console(format!("the console's answer is malformed: {error}")))
}

/// Why the gateway gave up the call `binding` names, if it did.
fn given_up(binding: &Binding) -> Option<&'static str> {
    match binding {
        Binding::Call(call) => call.given_up(),
        _ => None,
    }
}

/// The person's answer, checked: one that does not read as an answer is
/// `on_unhandled`'s; accepted form content that breaks the requested
/// schema is declined.
fn checked(
    result: &ElicitResult,
    params: &ElicitationParams,
    on_unhandled: Unhandled,
    why: &str,
    steps: Vec<AuditStep>,
) -> Decided {
    let wire = serde_json::to_value(result).unwrap_or(Value::Null);
    let answer: ElicitAnswer = match serde_json::from_value(wire) {
        Ok(answer) => answer,
        Err(error) => {
            return unhandled(
                on_unhandled,
                format!("the person's answer is malformed: {error}"),
                steps,
            );
        }
    };
    if answer.action == Action::Accept
        && let Elicitation::Form {
            requested_schema, ..
        } = &params.elicitation
    {
        let content = answer.content.clone().unwrap_or(Value::Null);
        if let Err(error) = schema::validate_content(requested_schema, &content) {
            return Decided::new(
                ElicitAnswer::plain_decline(),
                DecidedBy::Policy,
                format!("the person's content does not match the schema: {error}"),
            );
        }
    }
    Decided {
        person: None,
        answer: Ok(answer),
        by: DecidedBy::Person,
        reason: why.to_owned(),
        steps,
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use rmcp::model::{ElicitationAction, RequestId};
    use serde_json::json;

    use super::*;
    use gatehouse_core::context::ReviewContext;
    use gatehouse_mcp::handler::Delivery;

    fn asks_a_name() -> ElicitationParams {
        ElicitationParams::from_wire(&json!({
            "message": "Your name?",
            "requestedSchema": {"type": "object",
                                "properties": {"name": {"type": "string"}},
                                "required": ["name"]},
        }))
        .expect("valid params")
    }

    fn incoming() -> IncomingElicitation {
        IncomingElicitation {
            server: "s".to_owned(),
            request_id: RequestId::Number(7),
            protocol_version: String::new(),
            params: json!({}),
            cancelled: CancellationToken::new(),
            server_gone: CancellationToken::new(),
            arrival: Default::default(),
            delivery: Delivery::Request,
            call: None,
        }
    }

    /// A question with no ties, no steps, asked for `why`.
    fn question<'a>(
        elicitation: &'a IncomingElicitation,
        request: &'a ReviewRequest,
        why: &'a str,
    ) -> Question<'a> {
        Question {
            elicitation,
            request,
            tie: Tie {
                replaced: None,
                binding: None,
            },
            call: None,
            steps: Vec::new(),
            why,
        }
    }

    /// A person who never answers.
    struct Silent;

    impl Person for Silent {
        fn ask(
            &self,
            _: &IncomingElicitation,
            _: Option<SessionId>,
        ) -> Result<BoxFuture<'static, Result<ElicitResult, NoAnswer>>, NotAsked> {
            Ok(Box::pin(futures::future::pending()))
        }
    }

    #[test]
    fn the_persons_content_must_match_the_schema() {
        let accepted =
            ElicitResult::new(ElicitationAction::Accept).with_content(json!({"name": "Ada"}));
        let decided = checked(
            &accepted,
            &asks_a_name(),
            Unhandled::Decline,
            "asked",
            Vec::new(),
        );
        assert_eq!(decided.by, DecidedBy::Person);
        assert_eq!(decided.reason, "asked");
        let wrong = ElicitResult::new(ElicitationAction::Accept).with_content(json!({"name": 5}));
        let decided = checked(
            &wrong,
            &asks_a_name(),
            Unhandled::Decline,
            "asked",
            Vec::new(),
        );
        assert_eq!(decided.by, DecidedBy::Policy);
        assert!(matches!(decided.answer, Ok(answer) if answer.action == Action::Decline));
        let declined = ElicitResult::new(ElicitationAction::Decline);
        let decided = checked(
            &declined,
            &asks_a_name(),
            Unhandled::Decline,
            "asked",
            Vec::new(),
        );
        assert_eq!(decided.by, DecidedBy::Person);
    }

    #[test]
    fn no_person_is_never_asked() {
        assert!(matches!(
            NoPerson.ask(&incoming(), None),
            Err(NotAsked::NoClient)
        ));
    }

    #[tokio::test]
    async fn nobody_to_ask_is_unhandled_and_registers_nothing() {
        let pending = Pending::default();
        let settings = ElicitationSettings {
            on_unhandled: Unhandled::Cancel,
            ..ElicitationSettings::default()
        };
        let elicitation = incoming();
        let request = ReviewRequest::new(asks_a_name(), ReviewContext::default());
        let question = question(&elicitation, &request, "routed to the user");
        let decided = ask(
            Channels {
                client: &NoPerson,
                console: None,
                waiting: &Waiting::default(),
            },
            &pending,
            &settings,
            question,
        )
        .await;
        assert_eq!(decided.by, DecidedBy::Unhandled);
        assert_eq!(
            decided.reason,
            "routed to the user; no upstream client to ask"
        );
        assert!(matches!(decided.answer, Ok(answer) if answer.action == Action::Cancel));
        assert!(pending.is_empty());
    }

    #[tokio::test]
    async fn a_question_waits_registered_until_the_registry_cancels_it() {
        let pending = Arc::new(Pending::default());
        let settings = ElicitationSettings::default();
        let elicitation = incoming();
        let request = ReviewRequest::new(asks_a_name(), ReviewContext::default());
        let waiting = {
            let pending = pending.clone();
            tokio::spawn(async move {
                let question = question(&elicitation, &request, "routed to the user");
                ask(
                    Channels {
                        client: &Silent,
                        console: None,
                        waiting: &Waiting::default(),
                    },
                    &pending,
                    &settings,
                    question,
                )
                .await
            })
        };
        while pending.is_empty() {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        pending.cancel_all(None);
        let decided = waiting.await.expect("the question ends");
        // Nobody answered: not the person's decision, and the reason is the
        // one that happened.
        assert_eq!(decided.by, DecidedBy::Unhandled);
        assert_eq!(
            decided.reason,
            "routed to the user; cancelled: gatehouse is shutting down"
        );
        // `on_unhandled` (decline by default), not a cancel of the person's.
        assert!(matches!(decided.answer, Ok(answer) if answer.action == Action::Decline));
        assert!(pending.is_empty(), "the entry leaves with its waiter");
    }

    #[tokio::test]
    async fn the_console_route_without_a_console_is_unhandled_and_says_so() {
        let pending = Pending::default();
        let settings = ElicitationSettings {
            person: PersonRoute::Console,
            ..ElicitationSettings::default()
        };
        let elicitation = incoming();
        let request = ReviewRequest::new(asks_a_name(), ReviewContext::default());
        let question = question(&elicitation, &request, "every module deferred");
        // The client would answer at once; the route says console.
        let channels = Channels {
            client: &Silent,
            console: None,
            waiting: &Waiting::default(),
        };
        let decided = ask(channels, &pending, &settings, question).await;
        assert_eq!(decided.by, DecidedBy::Unhandled);
        assert_eq!(
            decided.reason,
            "every module deferred; person = \"console\" but no console is configured ([console] in gatehouse.toml)"
        );
        assert!(pending.is_empty());
    }

    #[tokio::test]
    async fn the_person_has_person_timeout_sec() {
        let pending = Pending::default();
        let settings = ElicitationSettings {
            person_timeout_sec: 0.01,
            ..ElicitationSettings::default()
        };
        let elicitation = incoming();
        let request = ReviewRequest::new(asks_a_name(), ReviewContext::default());
        let question = question(&elicitation, &request, "routed to the user");
        let decided = ask(
            Channels {
                client: &Silent,
                console: None,
                waiting: &Waiting::default(),
            },
            &pending,
            &settings,
            question,
        )
        .await;
        assert_eq!(decided.reason, "the person did not answer in time");
        assert!(matches!(decided.answer, Ok(answer) if answer.action == Action::Cancel));
        assert!(pending.is_empty());
    }
}
