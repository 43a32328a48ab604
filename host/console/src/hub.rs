//! The hub: every open question of every attached instance, in one place.
//!
//! Instances attach ([`Hub::attach`], from [`crate::socket`]) and hand over
//! questions; browsers read them ([`Hub::snapshot`], [`Hub::subscribe`])
//! and answer ([`Hub::answer`]). The first answer wins: a question leaves
//! the open list under the hub's lock as it is answered, so a second answer
//! finds it closed and is told by whom. A question also leaves when its
//! instance withdraws it or goes away; the last [`RECENTLY_CLOSED`] closed
//! questions are kept so that every open page can show what became of them.
//!
//! Everything an instance sends is bounded: [`MAX_OPEN_PER_INSTANCE`]
//! questions each, [`MAX_OPEN`] in all, text cut to
//! [`MAX_TEXT`](crate::question::MAX_TEXT).

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::Serialize;
use serde_json::Value;
use tokio::sync::{broadcast, mpsc};

use crate::question::{Action, Ask, Closed, Open, Question, Reply, bounded, url_host};
use crate::status::InstanceStatus;
use crate::wire::ToInstance;
use gatehouse_telemetry::totals::Totals;

/// Open questions one instance may have on the console.
pub const MAX_OPEN_PER_INSTANCE: usize = 256;

/// Open questions on the console in all.
pub const MAX_OPEN: usize = 1024;

/// How many closed questions the console remembers for its pages.
pub const RECENTLY_CLOSED: usize = 64;

/// How much earlier than the instance's wait the console's deadline for an
/// answer is, at most (a tenth of the time, for short waits).
pub const DEADLINE_MARGIN_MS: u64 = 250;

/// Instances attached at once.
pub const MAX_INSTANCES: usize = 256;

/// Events a slow page may fall behind by before it is sent the whole state
/// again.
const EVENT_BACKLOG: usize = 256;

/// The hub's handle on one attached instance.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Attachment(u64);

/// What changed, as every open page hears it.
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Event {
    /// A new question.
    Asked {
        /// The question.
        open: Box<Open>,
    },
    /// A question left.
    Closed {
        /// Which.
        id: String,
        /// How.
        closed: Closed,
        /// When (Unix milliseconds).
        at_ms: u64,
    },
    /// The instances attached, or their state, changed.
    Instances {
        /// Those attached now.
        instances: Vec<InstanceView>,
    },
    /// An instance answered an operator's reload.
    Reloaded {
        /// The instance.
        instance: String,
        /// What it said (`ok …` or `error: …`).
        line: String,
        /// When (Unix milliseconds).
        at_ms: u64,
    },
}

/// An attached instance, as the pages show it.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct InstanceView {
    /// Its id.
    pub instance: String,
    /// Its process id.
    pub pid: u32,
    /// Its open questions.
    pub open: usize,
    /// What it last reported about its modules and backends.
    pub status: Option<InstanceStatus>,
}

/// A closed question, remembered.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ClosedView {
    /// The question as it was open.
    pub open: Open,
    /// How it left.
    pub closed: Closed,
    /// When (Unix milliseconds).
    pub at_ms: u64,
}

/// Everything a page needs to start from.
#[derive(Debug, Clone, Serialize)]
pub struct Snapshot {
    /// The open questions, oldest first.
    pub open: Vec<Open>,
    /// The recently closed ones, newest last.
    pub closed: Vec<ClosedView>,
    /// The attached instances.
    pub instances: Vec<InstanceView>,
}

/// Why an instance's question was not put on the console.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AskError {
    /// The instance has too many open.
    #[error("the instance already has {MAX_OPEN_PER_INSTANCE} questions on the console")]
    InstanceFull,
    /// The console has too many open.
    #[error("the console already has {MAX_OPEN} questions open")]
    ConsoleFull,
    /// The instance reused an id of an open question.
    #[error("question {0} is already open")]
    Duplicate(u64),
    /// The instance is not attached (any more).
    #[error("the instance is not attached")]
    NotAttached,
}

/// Why an answer was refused.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum AnswerError {
    /// No question has this id.
    #[error("no question {0} is open")]
    Unknown(String),
    /// It was already answered or withdrawn.
    #[error("the question is no longer open")]
    Closed(Box<ClosedView>),
    /// The person's time ran out.
    #[error("the time to answer ran out")]
    TooLate,
    /// The reply does not fit the question.
    #[error("{0}")]
    Invalid(String),
    /// Its instance went away or cannot take the answer.
    #[error("the instance that asked went away")]
    InstanceGone,
}

struct Attached {
    instance: String,
    pid: u32,
    to_instance: mpsc::Sender<ToInstance>,
    open: usize,
    status: Option<InstanceStatus>,
}

struct Entry {
    attachment: Attachment,
    local: u64,
    open: Open,
}

#[derive(Default)]
struct State {
    next_attachment: u64,
    attached: BTreeMap<Attachment, Attached>,
    open: BTreeMap<String, Entry>,
    by_local: HashMap<(Attachment, u64), String>,
    closed: VecDeque<ClosedView>,
}

/// The console's questions. Share it behind an `Arc`.
///
/// ```
/// use gatehouse_console::hub::Hub;
/// use gatehouse_console::question::{Ask, Question, Reply, Action};
///
/// # tokio::runtime::Runtime::new().unwrap().block_on(async {
/// let hub = Hub::new();
/// let (to_instance, mut answers) = tokio::sync::mpsc::channel(8);
/// let attachment = hub.attach("instance-1", 42, to_instance).unwrap();
/// let question = Question {
///     server: "github".into(),
///     ask: Ask::Url { message: "Sign in".into(), url: "https://github.com/login".into() },
///     session: None, client: None, call: None, verdicts: vec![],
///     why: "every module deferred".into(), timeout_ms: 60_000,
/// };
/// hub.ask(attachment, 7, question).unwrap();
/// let id = hub.snapshot().open[0].id.clone();
/// hub.answer(&id, Reply { action: Action::Decline, content: None }, "s1").unwrap();
/// assert!(answers.recv().await.is_some());
/// // The first answer won; a second one hears who answered.
/// assert!(hub.answer(&id, Reply { action: Action::Cancel, content: None }, "s2").is_err());
/// # });
/// ```
pub struct Hub {
    state: Mutex<State>,
    events: broadcast::Sender<Event>,
    /// Every instance's metrics, summed for the operator's scrape; an
    /// instance's counts stay when it detaches.
    totals: Mutex<Totals>,
}

impl std::fmt::Debug for Hub {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Hub").finish_non_exhaustive()
    }
}

impl Default for Hub {
    fn default() -> Self {
        Hub::new()
    }
}

impl Hub {
    /// An empty hub.
    pub fn new() -> Hub {
        let (events, _) = broadcast::channel(EVENT_BACKLOG);
        Hub {
            state: Mutex::new(State::default()),
            events,
            totals: Mutex::new(Totals::default()),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn publish(&self, event: Event) {
        // Nobody listening is fine.
        let _ = self.events.send(event);
    }

    fn instances(state: &State) -> Vec<InstanceView> {
        state
            .attached
            .values()
            .map(|attached| InstanceView {
                instance: attached.instance.clone(),
                pid: attached.pid,
                open: attached.open,
                status: attached.status.clone(),
            })
            .collect()
    }

    /// Attaches an instance; its answers go to `to_instance`.
    pub fn attach(
        &self,
        instance: &str,
        pid: u32,
        to_instance: mpsc::Sender<ToInstance>,
    ) -> Result<Attachment, String> {
        let mut state = self.state();
        if state.attached.len() >= MAX_INSTANCES {
            return Err(format!(
                "the console already has {MAX_INSTANCES} instances attached"
            ));
        }
        state.next_attachment += 1;
        let attachment = Attachment(state.next_attachment);
        state.attached.insert(
            attachment,
            Attached {
                instance: bounded(instance),
                pid,
                to_instance,
                open: 0,
                status: None,
            },
        );
        let instances = Hub::instances(&state);
        drop(state);
        self.publish(Event::Instances { instances });
        Ok(attachment)
    }

    /// Detaches an instance: its questions leave the page.
    pub fn detach(&self, attachment: Attachment) {
        let mut state = self.state();
        let Some(detached) = state.attached.remove(&attachment) else {
            return;
        };
        self.totals
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .ended(&detached.instance);
        let ids: Vec<String> = state
            .open
            .iter()
            .filter(|(_, entry)| entry.attachment == attachment)
            .map(|(id, _)| id.clone())
            .collect();
        let mut events = Vec::new();
        for id in ids {
            if let Some(event) = close(&mut state, &id, Closed::InstanceGone) {
                events.push(event);
            }
        }
        events.push(Event::Instances {
            instances: Hub::instances(&state),
        });
        drop(state);
        events.into_iter().for_each(|event| self.publish(event));
    }

    /// Puts an instance's question `local` on the console.
    pub fn ask(
        &self,
        attachment: Attachment,
        local: u64,
        question: Question,
    ) -> Result<(), AskError> {
        let now = now_ms();
        let question = question.bounded();
        let mut state = self.state();
        let State {
            attached,
            open,
            by_local,
            ..
        } = &mut *state;
        let Some(asker) = attached.get_mut(&attachment) else {
            return Err(AskError::NotAttached);
        };
        if by_local.contains_key(&(attachment, local)) {
            return Err(AskError::Duplicate(local));
        }
        if asker.open >= MAX_OPEN_PER_INSTANCE {
            return Err(AskError::InstanceFull);
        }
        if open.len() >= MAX_OPEN {
            return Err(AskError::ConsoleFull);
        }
        let id = new_id();
        let url_host = match &question.ask {
            Ask::Url { url, .. } => Some(url_host(url).unwrap_or_default()),
            Ask::Form { .. } => None,
        };
        let entry = Open {
            id: id.clone(),
            instance: asker.instance.clone(),
            // A little before the instance's own end of the wait, so that
            // an answer the console takes still finds it waiting.
            deadline_ms: now.saturating_add(
                question
                    .timeout_ms
                    .saturating_sub((question.timeout_ms / 10).min(DEADLINE_MARGIN_MS)),
            ),
            question,
            url_host,
            asked_at_ms: now,
        };
        asker.open += 1;
        by_local.insert((attachment, local), id.clone());
        open.insert(
            id,
            Entry {
                attachment,
                local,
                open: entry.clone(),
            },
        );
        drop(state);
        self.publish(Event::Asked {
            open: Box::new(entry),
        });
        Ok(())
    }

    /// Takes an instance's question `local` off the console.
    pub fn withdraw(&self, attachment: Attachment, local: u64) {
        let mut state = self.state();
        let Some(id) = state.by_local.get(&(attachment, local)).cloned() else {
            return;
        };
        let event = close(&mut state, &id, Closed::Withdrawn);
        drop(state);
        if let Some(event) = event {
            self.publish(event);
        }
    }

    /// A person's answer to question `id`, from console session `session`.
    /// It is checked against the question (a form's content against its
    /// schema) and handed to the instance that asked; the question is
    /// closed for every page. The first answer wins.
    pub fn answer(&self, id: &str, reply: Reply, session: &str) -> Result<(), AnswerError> {
        let mut state = self.state();
        let Some(entry) = state.open.get(id) else {
            return Err(match state.closed.iter().rev().find(|c| c.open.id == id) {
                Some(closed) => AnswerError::Closed(Box::new(closed.clone())),
                None => AnswerError::Unknown(bounded(id)),
            });
        };
        if now_ms() > entry.open.deadline_ms {
            return Err(AnswerError::TooLate);
        }
        let reply = checked_reply(&entry.open.question.ask, reply)?;
        let size = serde_json::to_string(&reply).map_or(usize::MAX, |text| text.len());
        if size > crate::wire::MAX_LINE / 2 {
            return Err(AnswerError::Invalid(format!(
                "the answer is {size} bytes; the console takes at most {}",
                crate::wire::MAX_LINE / 2
            )));
        }
        let local = entry.local;
        let Some(asker) = state.attached.get(&entry.attachment) else {
            return Err(AnswerError::InstanceGone);
        };
        let message = ToInstance::Answer {
            id: local,
            reply: reply.clone(),
            session: session.to_owned(),
        };
        if asker.to_instance.try_send(message).is_err() {
            return Err(AnswerError::InstanceGone);
        }
        let closed = Closed::Answered {
            action: reply.action,
            session: session.to_owned(),
        };
        let event = close(&mut state, id, closed);
        drop(state);
        if let Some(event) = event {
            self.publish(event);
        }
        Ok(())
    }

    /// Records what an instance reports about itself.
    pub fn status(&self, attachment: Attachment, status: InstanceStatus) {
        let mut state = self.state();
        let Some(attached) = state.attached.get_mut(&attachment) else {
            return;
        };
        attached.status = Some(status.bounded());
        let instances = Hub::instances(&state);
        drop(state);
        self.publish(Event::Instances { instances });
    }

    /// Takes an instance's cumulative metrics (checked and bounded by
    /// [`Totals::update`]).
    pub fn metrics(&self, attachment: Attachment, snapshot: gatehouse_telemetry::series::Snapshot) {
        let state = self.state();
        let Some(attached) = state.attached.get(&attachment) else {
            return;
        };
        let instance = attached.instance.clone();
        drop(state);
        self.totals
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .update(&instance, snapshot);
    }

    /// How many instances are attached now.
    pub fn instance_count(&self) -> usize {
        self.state().attached.len()
    }

    /// Every instance's metrics summed, those that ended included.
    pub fn totals(&self) -> gatehouse_telemetry::series::Snapshot {
        self.totals
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .sum()
    }

    /// Asks every attached instance to reload; returns how many were asked.
    pub fn reload_all(&self) -> usize {
        let state = self.state();
        state
            .attached
            .values()
            .filter(|attached| attached.to_instance.try_send(ToInstance::Reload).is_ok())
            .count()
    }

    /// Publishes an instance's answer to a reload.
    pub fn reloaded(&self, attachment: Attachment, line: &str) {
        let state = self.state();
        let Some(attached) = state.attached.get(&attachment) else {
            return;
        };
        let event = Event::Reloaded {
            instance: attached.instance.clone(),
            line: bounded(line),
            at_ms: now_ms(),
        };
        drop(state);
        self.publish(event);
    }

    /// The open and recently closed questions, and the instances.
    pub fn snapshot(&self) -> Snapshot {
        let state = self.state();
        let mut open: Vec<Open> = state.open.values().map(|e| e.open.clone()).collect();
        open.sort_by(|a, b| a.asked_at_ms.cmp(&b.asked_at_ms).then(a.id.cmp(&b.id)));
        Snapshot {
            open,
            closed: state.closed.iter().cloned().collect(),
            instances: Hub::instances(&state),
        }
    }

    /// Every change from now on. A receiver that falls more than a few
    /// hundred events behind gets `Lagged` and should start again from a
    /// [`Hub::snapshot`].
    pub fn subscribe(&self) -> broadcast::Receiver<Event> {
        self.events.subscribe()
    }
}

/// Removes `id` from the open list, remembers how it closed, and returns
/// the event to publish.
fn close(state: &mut State, id: &str, closed: Closed) -> Option<Event> {
    let entry = state.open.remove(id)?;
    state.by_local.remove(&(entry.attachment, entry.local));
    if let Some(asker) = state.attached.get_mut(&entry.attachment) {
        asker.open = asker.open.saturating_sub(1);
    }
    let at_ms = now_ms();
    if state.closed.len() >= RECENTLY_CLOSED {
        state.closed.pop_front();
    }
    state.closed.push_back(ClosedView {
        open: entry.open,
        closed: closed.clone(),
        at_ms,
    });
    Some(Event::Closed {
        id: id.to_owned(),
        closed,
        at_ms,
    })
}

/// `reply`, if it answers `ask`: a form's accepted content must match its
/// schema; nothing else carries content.
pub fn checked_reply(ask: &Ask, reply: Reply) -> Result<Reply, AnswerError> {
    match (ask, reply.action, reply.content) {
        (
            Ask::Form {
                requested_schema, ..
            },
            Action::Accept,
            content,
        ) => {
            let content = content.unwrap_or_default();
            let value = Value::Object(content.clone());
            gatehouse_core::schema::validate_content(requested_schema, &value)
                .map_err(AnswerError::Invalid)?;
            Ok(Reply {
                action: Action::Accept,
                content: Some(content),
            })
        }
        (_, action, Some(_)) => Err(AnswerError::Invalid(format!(
            "a {} answer carries no content",
            if action == Action::Accept {
                "URL"
            } else {
                action.name()
            }
        ))),
        (_, action, None) => Ok(Reply {
            action,
            content: None,
        }),
    }
}

/// A fresh random id for a question (hex of 96 random bits).
pub(crate) fn new_id() -> String {
    let mut bytes = [0u8; 12];
    random(&mut bytes);
    hex::encode(bytes)
}

/// Fills `bytes` from the operating system's random source. Without one
/// there is no safe console: it stops rather than hand out guessable ids.
pub(crate) fn random(bytes: &mut [u8]) {
    if let Err(error) = getrandom::fill(bytes) {
        tracing::error!("no random numbers from the operating system: {error}");
        std::process::abort();
    }
}

/// Now, in Unix milliseconds.
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or(Duration::ZERO)
        .as_millis()
        .try_into()
        .unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn form(timeout_ms: u64) -> Question {
        let schema = json!({"type": "object",
            "properties": {"name": {"type": "string", "minLength": 2}},
            "required": ["name"]});
        Question {
            server: "s".into(),
            ask: Ask::Form {
                message: "Name?".into(),
                requested_schema: schema.as_object().cloned().unwrap(),
            },
            session: Some(1),
            client: None,
            call: None,
            verdicts: vec![],
            why: "deferred".into(),
            timeout_ms,
        }
    }

    fn attached(hub: &Hub) -> (Attachment, mpsc::Receiver<ToInstance>) {
        let (sender, receiver) = mpsc::channel(8);
        (hub.attach("i", 1, sender).unwrap(), receiver)
    }

    #[test]
    fn the_first_answer_wins_and_the_second_hears_who() {
        let hub = Hub::new();
        let (attachment, mut answers) = attached(&hub);
        hub.ask(attachment, 1, form(60_000)).unwrap();
        let id = hub.snapshot().open[0].id.clone();
        let reply = Reply {
            action: Action::Accept,
            content: json!({"name": "Ada"}).as_object().cloned(),
        };
        hub.answer(&id, reply.clone(), "first").unwrap();
        match answers.try_recv().unwrap() {
            ToInstance::Answer { id, session, reply } => {
                assert_eq!((id, session.as_str()), (1, "first"));
                assert_eq!(reply.content.unwrap()["name"], "Ada");
            }
            other => panic!("{other:?}"),
        }
        match hub.answer(&id, reply, "second") {
            Err(AnswerError::Closed(closed)) => assert_eq!(
                closed.closed,
                Closed::Answered {
                    action: Action::Accept,
                    session: "first".into()
                }
            ),
            other => panic!("{other:?}"),
        }
        assert!(
            answers.try_recv().is_err(),
            "exactly one answer reaches the instance"
        );
    }

    #[test]
    fn content_is_checked_against_the_schema() {
        let hub = Hub::new();
        let (attachment, mut answers) = attached(&hub);
        hub.ask(attachment, 1, form(60_000)).unwrap();
        let id = hub.snapshot().open[0].id.clone();
        for bad in [
            json!({"name": "A"}),
            json!({"name": 5}),
            json!({}),
            json!({"name": "Ada", "x": 1}),
        ] {
            let reply = Reply {
                action: Action::Accept,
                content: bad.as_object().cloned(),
            };
            assert!(
                matches!(hub.answer(&id, reply, "s"), Err(AnswerError::Invalid(_))),
                "{bad}"
            );
        }
        let decline_with_content = Reply {
            action: Action::Decline,
            content: json!({"name": "Ada"}).as_object().cloned(),
        };
        assert!(matches!(
            hub.answer(&id, decline_with_content, "s"),
            Err(AnswerError::Invalid(_))
        ));
        assert!(answers.try_recv().is_err());
        assert_eq!(hub.snapshot().open.len(), 1, "still open after refusals");
    }

    #[test]
    fn a_late_answer_is_refused() {
        let hub = Hub::new();
        let (attachment, _answers) = attached(&hub);
        hub.ask(attachment, 1, form(0)).unwrap();
        let id = hub.snapshot().open[0].id.clone();
        std::thread::sleep(Duration::from_millis(5));
        let reply = Reply {
            action: Action::Decline,
            content: None,
        };
        assert_eq!(hub.answer(&id, reply, "s"), Err(AnswerError::TooLate));
    }

    #[test]
    fn an_instance_going_takes_its_questions_and_only_its_own() {
        let hub = Hub::new();
        let (first, _a) = attached(&hub);
        let (second, _b) = attached(&hub);
        hub.ask(first, 1, form(60_000)).unwrap();
        hub.ask(second, 1, form(60_000)).unwrap();
        assert_eq!(hub.ask(first, 1, form(60_000)), Err(AskError::Duplicate(1)));
        let mut events = hub.subscribe();
        hub.detach(first);
        let snapshot = hub.snapshot();
        assert_eq!(snapshot.open.len(), 1);
        assert_eq!(snapshot.instances.len(), 1);
        assert!(matches!(
            events.try_recv().unwrap(),
            Event::Closed {
                closed: Closed::InstanceGone,
                ..
            }
        ));
        assert_eq!(hub.ask(first, 2, form(60_000)), Err(AskError::NotAttached));
        hub.withdraw(second, 1);
        assert!(hub.snapshot().open.is_empty());
    }

    #[test]
    fn an_instance_cannot_flood_the_console() {
        let hub = Hub::new();
        let (attachment, _answers) = attached(&hub);
        for local in 0..MAX_OPEN_PER_INSTANCE as u64 {
            hub.ask(attachment, local, form(60_000)).unwrap();
        }
        assert_eq!(
            hub.ask(attachment, u64::MAX, form(60_000)),
            Err(AskError::InstanceFull)
        );
        let (other, _b) = attached(&hub);
        hub.ask(other, 0, form(60_000)).unwrap();
    }
}
