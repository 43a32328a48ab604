//! Questions for clients of protocol 2026-07-28, which take no request from
//! a server: what a server asks the person while an upstream request is in
//! flight goes back as that request's result, an `InputRequiredResult`
//! (SEP-2322) holding the forwarded elicitations and an opaque
//! `requestState`; the client sends the request again with its answers
//! (`inputResponses`) and that state, and the request goes on where it was.
//!
//! The forwarded request does not start again: it runs in a task of its own
//! from its first round to its last ([`Rounds::start`]), and between rounds
//! it is parked here under its state ([`Rounds::resume`] takes it back). The
//! state is a random 256-bit handle, never data: it names a parked request
//! of the same session and the same name, or nothing. A request whose client
//! does not come back within [`PARKED_FOR_AT_MOST`] is dropped: its
//! forwarded call is cancelled and its questions end as
//! [`NoAnswer::NotReturned`].

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::BoxFuture;
use rmcp::model::{
    CallToolResponse, CallToolResult, ElicitRequest, ElicitRequestParams, ElicitResult, ErrorData,
    GetPromptResponse, GetPromptResult, InputRequest, InputRequests, InputRequiredResult,
    InputResponses, ReadResourceResponse, ReadResourceResult,
};
use tokio::sync::{mpsc, oneshot};

use crate::calls::{CallGuard, CallKey, CallKind, SessionId};
use crate::router::NoAnswer;

/// How many requests may be parked at once, across every client; past it a
/// request whose server asks the person is cancelled and its client told
/// why, so parked requests cannot hold memory and server calls without
/// bound.
pub const MAX_PARKED: usize = 1024;

/// Who may send a parked request again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Owner {
    /// The session that sent it (a connection: stdio).
    Session(SessionId),
    /// Any client the HTTP listener let in: over streamable HTTP each
    /// 2026-07-28 request is a session of its own, so the state alone
    /// names the request.
    Http,
}

/// How long a request waits, parked, for its client to send it again with
/// the answers. Longer than the person's default timeout (300 s), so the
/// person's own timeout ends a question first.
pub const PARKED_FOR_AT_MOST: Duration = Duration::from_secs(600);

/// One question on its way to a client that takes questions in results.
pub(crate) struct Asked {
    /// The elicitation as the person's client gets it.
    pub params: ElicitRequestParams,
    /// Where the answer goes.
    pub answer: oneshot::Sender<Result<ElicitResult, NoAnswer>>,
}

/// What a forwarded request ends with.
#[derive(Debug)]
pub(crate) enum Output {
    /// A `tools/call` result.
    Tool(CallToolResult),
    /// A `resources/read` result.
    Resource(ReadResourceResult),
    /// A `prompts/get` result.
    Prompt(GetPromptResult),
}

/// The forwarded request's work: the call to the server.
pub(crate) type Work = BoxFuture<'static, Result<Output, ErrorData>>;

/// How one round ends: the request is done, or its client must answer.
#[derive(Debug)]
pub(crate) enum Round {
    /// The forwarded request ended.
    Done(Result<Output, ErrorData>),
    /// Questions for the person; the request is parked under the state.
    Ask(InputRequiredResult),
}

impl Round {
    /// The round as the answer to a request whose result `pick` takes out
    /// of the request's [`Output`].
    fn into_response<T, R>(self, pick: impl FnOnce(Output) -> Option<T>) -> Result<R, ErrorData>
    where
        R: From<T> + From<InputRequiredResult>,
    {
        match self {
            Round::Done(Ok(output)) => pick(output).map(R::from).ok_or_else(not_this_kind),
            Round::Done(Err(error)) => Err(error),
            Round::Ask(asking) => Ok(R::from(asking)),
        }
    }

    /// The round as a `tools/call` answer.
    pub fn into_tool(self) -> Result<CallToolResponse, ErrorData> {
        self.into_response(|output| match output {
            Output::Tool(result) => Some(result),
            _ => None,
        })
    }

    /// The round as a `resources/read` answer.
    pub fn into_resource(self) -> Result<ReadResourceResponse, ErrorData> {
        self.into_response(|output| match output {
            Output::Resource(result) => Some(result),
            _ => None,
        })
    }

    /// The round as a `prompts/get` answer.
    pub fn into_prompt(self) -> Result<GetPromptResponse, ErrorData> {
        self.into_response(|output| match output {
            Output::Prompt(result) => Some(result),
            _ => None,
        })
    }
}

/// A request resumed under a state of another kind: [`Rounds::resume`]
/// checks the kind, so this is never reached.
fn not_this_kind() -> ErrorData {
    ErrorData::internal_error("a request ended with another kind's result", None)
}

/// Aborts the task when dropped: a request given up cancels its call.
struct AbortOnDrop<T>(tokio::task::JoinHandle<T>);

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// A forwarded request of a 2026-07-28 session, from its first round to
/// its last.
pub(crate) struct Run {
    owner: Owner,
    kind: CallKind,
    name: String,
    task: AbortOnDrop<Result<Output, ErrorData>>,
    questions: mpsc::UnboundedReceiver<Asked>,
    /// Asked in a round and not answered yet, by their key in the round.
    waiting: BTreeMap<String, Asked>,
    next_question: u64,
    /// The call stays in flight (for binding and for the next question)
    /// while the request runs or is parked.
    _call: CallGuard,
}

/// The requests of 2026-07-28 sessions: where their questions go while
/// they run, and where they wait between rounds.
#[derive(Default)]
pub(crate) struct Rounds {
    /// Where a question for a running request goes, by its call.
    open: Mutex<HashMap<CallKey, mpsc::UnboundedSender<Asked>>>,
    /// Requests waiting for their client to come back, by their state.
    parked: Mutex<HashMap<String, Run>>,
}

impl std::fmt::Debug for Rounds {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Rounds").finish_non_exhaustive()
    }
}

/// Why a request sent again with a `requestState` cannot go on.
pub(crate) fn unknown_state() -> ErrorData {
    ErrorData::invalid_params(
        "unknown or expired requestState: send the request again without it to start over",
        None,
    )
}

impl Rounds {
    /// Starts `work`, the forwarded request `kind` `name` that `owner` may
    /// send again, under `call`; what its server asks the person while it
    /// runs comes to this run ([`Rounds::ask`]).
    pub fn start(
        &self,
        owner: Owner,
        kind: CallKind,
        name: &str,
        call: CallGuard,
        work: Work,
    ) -> Run {
        let (sender, questions) = mpsc::unbounded_channel();
        let key = call.key();
        if let Ok(mut open) = self.open.lock() {
            open.retain(|_, known| !known.is_closed());
            open.insert(key, sender);
        }
        let task = AbortOnDrop(tokio::spawn(crate::calls::on_behalf(key, work)));
        Run {
            owner,
            kind,
            name: name.to_owned(),
            task,
            questions,
            waiting: BTreeMap::new(),
            next_question: 0,
            _call: call,
        }
    }

    /// Puts a question to the request running under `call`, if it is one of
    /// a 2026-07-28 session and still running; `false` if it is not (the
    /// question is dropped, and its answer channel with it).
    pub fn ask(&self, call: CallKey, asked: Asked) -> bool {
        let sender = self
            .open
            .lock()
            .ok()
            .and_then(|open| open.get(&call).cloned());
        sender.is_some_and(|sender| sender.send(asked).is_ok())
    }

    /// Takes back the request parked under `state` for its next round,
    /// delivering `responses` to its questions. It must be `owner`'s and
    /// the same request (`kind`, `name`); otherwise it stays parked and
    /// the caller gets an error that says nothing of it. An answer that
    /// cannot be read ends its question as the client's failure; a
    /// question left unanswered is asked again in the next round.
    pub fn resume(
        &self,
        owner: Owner,
        kind: CallKind,
        name: &str,
        state: &str,
        responses: InputResponses,
    ) -> Result<Run, ErrorData> {
        let mut run = {
            let mut parked = self.parked.lock().map_err(|_| unknown_state())?;
            match parked.get(state) {
                Some(run) if run.owner == owner && run.kind == kind && run.name == name => {}
                _ => return Err(unknown_state()),
            }
            parked.remove(state).ok_or_else(unknown_state)?
        };
        for (key, response) in responses {
            let Some(asked) = run.waiting.remove(&key) else {
                continue;
            };
            let answer = serde_json::from_value::<ElicitResult>(response).map_err(|error| {
                NoAnswer::ClientFailed(format!("its answer could not be read: {error}"))
            });
            // The router may have stopped waiting (its timeout): nothing to do.
            let _ = asked.answer.send(answer);
        }
        Ok(run)
    }

    /// Runs `run` until its request ends or its server asks the person:
    /// then it is parked, and the questions go to the client with the
    /// state to send back.
    pub async fn round(self: &Arc<Self>, mut run: Run) -> Round {
        loop {
            // Questions the router stopped waiting for are not asked again.
            run.waiting.retain(|_, asked| !asked.answer.is_closed());
            if !run.waiting.is_empty() {
                return match self.park(run) {
                    Ok(asking) => Round::Ask(asking),
                    Err(refused) => Round::Done(Err(refused)),
                };
            }
            tokio::select! {
                ended = &mut run.task.0 => {
                    return Round::Done(ended.unwrap_or_else(|error| {
                        Err(ErrorData::internal_error(
                            format!("the forwarded request failed: {error}"),
                            None,
                        ))
                    }));
                }
                Some(asked) = run.questions.recv() => {
                    run.add(asked);
                    while let Ok(more) = run.questions.try_recv() {
                        run.add(more);
                    }
                }
            }
        }
    }

    /// Parks `run` under a fresh state and returns what the client gets:
    /// every question still waiting, and the state. When it cannot be
    /// parked (no randomness for a state, or [`MAX_PARKED`] reached), `run`
    /// is dropped, which cancels its call and ends its questions.
    fn park(self: &Arc<Self>, run: Run) -> Result<InputRequiredResult, ErrorData> {
        let requests: InputRequests = run
            .waiting
            .iter()
            .map(|(key, asked)| {
                (
                    key.clone(),
                    InputRequest::Elicitation(ElicitRequest::new(asked.params.clone())),
                )
            })
            .collect();
        let state = fresh_state().ok_or_else(|| {
            ErrorData::internal_error(
                "no randomness to make a requestState with; the request was cancelled",
                None,
            )
        })?;
        {
            let mut parked = self.parked.lock().map_err(|_| unknown_state())?;
            if parked.len() >= MAX_PARKED {
                return Err(ErrorData::new(
                    rmcp::model::ErrorCode(-32000),
                    format!(
                        "{MAX_PARKED} requests already wait for their clients to answer; this one was cancelled, retry later"
                    ),
                    None,
                ));
            }
            parked.insert(state.clone(), run);
        }
        let rounds = Arc::downgrade(self);
        let expiring = state.clone();
        tokio::spawn(async move {
            tokio::time::sleep(PARKED_FOR_AT_MOST).await;
            let Some(rounds) = rounds.upgrade() else {
                return;
            };
            let expired = rounds
                .parked
                .lock()
                .ok()
                .and_then(|mut parked| parked.remove(&expiring));
            if expired.is_some() {
                tracing::info!(
                    "a request waited {} s for its client to send it again with the answers; given up",
                    PARKED_FOR_AT_MOST.as_secs()
                );
            }
        });
        Ok(InputRequiredResult::new(Some(requests), Some(state)))
    }

    /// Drops every request `session` has parked (its client went away):
    /// their calls are cancelled and their questions end.
    pub fn forget(&self, session: SessionId) {
        let dropped: Vec<Run> = match self.parked.lock() {
            Ok(mut parked) => {
                let states: Vec<String> = parked
                    .iter()
                    .filter(|(_, run)| run.owner == Owner::Session(session))
                    .map(|(state, _)| state.clone())
                    .collect();
                states
                    .into_iter()
                    .filter_map(|state| parked.remove(&state))
                    .collect()
            }
            Err(_) => Vec::new(),
        };
        drop(dropped);
    }

    /// How many requests are parked.
    #[cfg(test)]
    fn parked(&self) -> usize {
        self.parked.lock().map(|parked| parked.len()).unwrap_or(0)
    }
}

impl Run {
    fn add(&mut self, asked: Asked) {
        self.next_question += 1;
        self.waiting
            .insert(format!("q{}", self.next_question), asked);
    }
}

/// A state nobody can guess: 256 random bits, hex; `None` when the system
/// has no randomness to give.
fn fresh_state() -> Option<String> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).ok()?;
    Some(bytes.iter().map(|byte| format!("{byte:02x}")).collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::calls::{Calls, UpstreamCall};

    fn form(message: &str) -> ElicitRequestParams {
        serde_json::from_value(serde_json::json!({
            "message": message,
            "requestedSchema": {"type": "object", "properties": {"name": {"type": "string"}}}
        }))
        .expect("form params")
    }

    /// A run of `session` calling `tool`, whose work asks `questions` and
    /// then returns what the answers said.
    fn asking_run(
        rounds: &Arc<Rounds>,
        calls: &Arc<Calls>,
        session: SessionId,
        tool: &str,
        questions: usize,
    ) -> Run {
        let call = calls.begin(UpstreamCall::new(
            session,
            CallKind::ToolCall,
            "git",
            tool,
            tool,
        ));
        let key = call.key();
        let asker = rounds.clone();
        let work: Work = Box::pin(async move {
            let mut answers = Vec::new();
            let mut waiting = Vec::new();
            for index in 0..questions {
                let (answer, answered) = oneshot::channel();
                let asked = Asked {
                    params: form(&format!("question {index}")),
                    answer,
                };
                if !asker.ask(key, asked) {
                    return Err(ErrorData::internal_error("not asked", None));
                }
                waiting.push(answered);
            }
            for answered in waiting {
                answers.push(match answered.await {
                    Ok(Ok(result)) => format!("{:?}", result.action),
                    Ok(Err(no_answer)) => no_answer.to_string(),
                    Err(_) => "dropped".to_owned(),
                });
            }
            Ok(Output::Tool(CallToolResult::success(vec![
                rmcp::model::ContentBlock::text(answers.join(",")),
            ])))
        });
        rounds.start(
            Owner::Session(session),
            CallKind::ToolCall,
            tool,
            call,
            work,
        )
    }

    fn asking(round: Round) -> (String, Vec<String>) {
        match round {
            Round::Ask(asking) => (
                asking.request_state.expect("a state"),
                asking
                    .input_requests
                    .expect("questions")
                    .into_keys()
                    .collect(),
            ),
            Round::Done(done) => panic!("expected questions, got {done:?}"),
        }
    }

    fn done_text(round: Round) -> String {
        match round {
            Round::Done(Ok(Output::Tool(result))) => serde_json::to_value(&result.content)
                .expect("serializes")[0]["text"]
                .as_str()
                .unwrap_or_default()
                .to_owned(),
            other => panic!("expected a tool result, got {other:?}"),
        }
    }

    fn accept() -> Value {
        serde_json::json!({"action": "accept", "content": {"name": "Ada"}})
    }

    use serde_json::Value;

    #[tokio::test]
    async fn a_state_resumes_only_its_own_sessions_request_once() {
        let (rounds, calls) = (Arc::new(Rounds::default()), Arc::new(Calls::default()));
        let (alice, bob) = (SessionId::next(), SessionId::next());
        let run = asking_run(&rounds, &calls, alice, "git__ask", 1);
        let (state, keys) = asking(rounds.round(run).await);
        assert_eq!(keys, ["q1"]);
        let responses = || InputResponses::from([("q1".to_owned(), accept())]);
        // Another session, another kind, another name, a made-up state.
        for refused in [
            rounds.resume(
                Owner::Session(bob),
                CallKind::ToolCall,
                "git__ask",
                &state,
                responses(),
            ),
            rounds.resume(
                Owner::Http,
                CallKind::ToolCall,
                "git__ask",
                &state,
                responses(),
            ),
            rounds.resume(
                Owner::Session(alice),
                CallKind::PromptGet,
                "git__ask",
                &state,
                responses(),
            ),
            rounds.resume(
                Owner::Session(alice),
                CallKind::ToolCall,
                "git__other",
                &state,
                responses(),
            ),
            rounds.resume(
                Owner::Session(alice),
                CallKind::ToolCall,
                "git__ask",
                "f00d",
                responses(),
            ),
        ] {
            assert!(refused.is_err());
            assert_eq!(rounds.parked(), 1, "still parked for its own client");
        }
        let run = rounds
            .resume(
                Owner::Session(alice),
                CallKind::ToolCall,
                "git__ask",
                &state,
                responses(),
            )
            .expect("its own");
        assert_eq!(done_text(rounds.round(run).await), "Accept");
        assert!(
            rounds
                .resume(
                    Owner::Session(alice),
                    CallKind::ToolCall,
                    "git__ask",
                    &state,
                    responses()
                )
                .is_err(),
            "used once"
        );
        assert_eq!(rounds.parked(), 0);
    }

    #[tokio::test]
    async fn unanswered_questions_are_asked_again_and_unreadable_answers_fail() {
        let (rounds, calls) = (Arc::new(Rounds::default()), Arc::new(Calls::default()));
        let session = SessionId::next();
        let run = asking_run(&rounds, &calls, session, "git__ask", 2);
        let (state, keys) = asking(rounds.round(run).await);
        assert_eq!(keys, ["q1", "q2"]);
        // Only q1 answered (and an unknown key ignored): q2 is asked again.
        let run = rounds
            .resume(
                Owner::Session(session),
                CallKind::ToolCall,
                "git__ask",
                &state,
                InputResponses::from([("q1".to_owned(), accept()), ("q9".to_owned(), accept())]),
            )
            .expect("resumed");
        let (state, keys) = asking(rounds.round(run).await);
        assert_eq!(keys, ["q2"]);
        let run = rounds
            .resume(
                Owner::Session(session),
                CallKind::ToolCall,
                "git__ask",
                &state,
                InputResponses::from([("q2".to_owned(), serde_json::json!({"action": 7}))]),
            )
            .expect("resumed");
        let text = done_text(rounds.round(run).await);
        assert!(
            text.starts_with("Accept,the upstream client failed: its answer could not be read"),
            "{text}"
        );
    }

    #[tokio::test]
    async fn a_forgotten_session_cancels_its_parked_requests() {
        let (rounds, calls) = (Arc::new(Rounds::default()), Arc::new(Calls::default()));
        let (alice, bob) = (SessionId::next(), SessionId::next());
        let (answer, answered) = oneshot::channel();
        let call = calls.begin(UpstreamCall::new(
            alice,
            CallKind::ToolCall,
            "git",
            "git__ask",
            "ask",
        ));
        let key = call.key();
        let asker = rounds.clone();
        let work: Work = Box::pin(async move {
            asker.ask(
                key,
                Asked {
                    params: form("q"),
                    answer,
                },
            );
            std::future::pending().await
        });
        let run = rounds.start(
            Owner::Session(alice),
            CallKind::ToolCall,
            "git__ask",
            call,
            work,
        );
        let _ = asking(rounds.round(run).await);
        rounds.forget(bob);
        assert_eq!(
            rounds.parked(),
            1,
            "another session's leaving changes nothing"
        );
        assert_eq!(calls.in_flight_for(alice), 1);
        rounds.forget(alice);
        assert_eq!(rounds.parked(), 0);
        assert!(
            answered.await.is_err(),
            "the question ended with its request"
        );
        assert_eq!(
            calls.in_flight_for(alice),
            0,
            "the call is no longer in flight"
        );
        // A question for a request that is not running is not taken.
        let (answer, _answered) = oneshot::channel();
        let late = Asked {
            params: form("late"),
            answer,
        };
        assert!(!rounds.ask(key, late));
    }

    #[tokio::test]
    async fn past_max_parked_a_request_is_cancelled_and_its_client_told() {
        let (rounds, calls) = (Arc::new(Rounds::default()), Arc::new(Calls::default()));
        let session = SessionId::next();
        for _ in 0..MAX_PARKED {
            let run = asking_run(&rounds, &calls, session, "git__ask", 1);
            let _ = asking(rounds.round(run).await);
        }
        let run = asking_run(&rounds, &calls, session, "git__ask", 1);
        match rounds.round(run).await {
            Round::Done(Err(error)) => {
                assert!(error.message.contains("already wait"), "{error:?}")
            }
            other => panic!("parked past the cap: {other:?}"),
        }
        assert_eq!(rounds.parked(), MAX_PARKED);
        assert_eq!(
            calls.in_flight_for(session),
            MAX_PARKED,
            "the refused request's call is cancelled"
        );
    }
}
