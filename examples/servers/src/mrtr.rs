//! Elicitation on protocol `2026-07-28` (SEP-2322, multi round-trip requests).
//!
//! From `2026-07-28` on a server may not send requests to the client, so a
//! tool that needs an answer returns an `input_required` result instead: the
//! `elicitation/create` request it would have sent, under the key
//! [`INPUT_KEY`] of `inputRequests`, plus a `requestState`. The client
//! answers it and calls the tool again with the same arguments, the answer
//! under the same key of `inputResponses` and the `requestState` echoed back.
//!
//! The demo server is stateless across rounds: everything it needs on the
//! retry is in the arguments and in `requestState`, which is the JSON text of
//! a [`RoundState`], e.g. `{"tool":"delete_branch"}` or
//! `{"tool":"open_url","elicitationId":"demo-4242-7"}`. It is not sealed:
//! the demo trusts nothing in it beyond checking that it names the tool being
//! called.

use rmcp::{
    RoleServer,
    model::{
        ElicitRequest, ElicitRequestParams, InputRequest, InputRequests, InputRequiredResult,
        InputResponses, ProtocolVersion,
    },
    service::RequestContext,
};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The key of the one input request (and of its response) an eliciting tool
/// returns on `2026-07-28`.
pub(crate) const INPUT_KEY: &str = "elicitation";

/// What the demo server keeps in `requestState` between two rounds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RoundState {
    /// The tool that issued the input request.
    pub tool: String,
    /// `open_url` only: the id of the URL elicitation it asked for.
    #[serde(
        rename = "elicitationId",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub elicitation_id: Option<String>,
}

impl RoundState {
    /// The state of a first round of `tool`.
    pub(crate) fn new(tool: &str) -> Self {
        Self {
            tool: tool.to_owned(),
            elicitation_id: None,
        }
    }
}

/// The retry fields of a `tools/call`: both absent on the first round.
#[derive(Debug, Default)]
pub(crate) struct Round {
    /// `requestState` as the client echoed it.
    pub request_state: Option<String>,
    /// `inputResponses` as the client sent them.
    pub input_responses: Option<InputResponses>,
}

impl Round {
    /// Whether this is the first call (no retry fields at all).
    pub(crate) fn is_first(&self) -> bool {
        self.request_state.is_none() && self.input_responses.is_none()
    }

    /// The state and the raw answer of a retry of `tool`, or what is wrong
    /// with the retry.
    pub(crate) fn answer(self, tool: &str) -> Result<(RoundState, Value), String> {
        let Some(text) = self.request_state else {
            return Err(format!(
                "retry of {tool} has inputResponses but no requestState"
            ));
        };
        let state: RoundState = serde_json::from_str(&text)
            .map_err(|error| format!("requestState {text:?} was not issued by {tool}: {error}"))?;
        if state.tool != tool {
            return Err(format!(
                "requestState was issued by {}, not by {tool}",
                state.tool
            ));
        }
        let Some(mut responses) = self.input_responses else {
            return Err(format!(
                "retry of {tool} has no inputResponses (expected the key `{INPUT_KEY}`)"
            ));
        };
        match responses.remove(INPUT_KEY) {
            Some(response) => Ok((state, response)),
            None => Err(format!(
                "inputResponses has no `{INPUT_KEY}` entry (keys: {:?})",
                responses.keys().collect::<Vec<_>>()
            )),
        }
    }
}

/// Whether the request being handled negotiated `2026-07-28` or later, so
/// elicitations travel as input requests in the tool result.
///
/// rmcp's [`RequestContext::protocol_version`] gives the version from the
/// request's own `_meta` (discover-lifecycle clients send it with every
/// request) or, failing that, the one agreed at `initialize`.
pub(crate) fn uses_input_requests(context: &RequestContext<RoleServer>) -> bool {
    context
        .protocol_version()
        .is_some_and(|version| version.as_str() >= ProtocolVersion::V_2026_07_28.as_str())
}

/// The `input_required` result asking the client for `params` under
/// [`INPUT_KEY`], with `state` as `requestState`.
pub(crate) fn input_required(
    state: &RoundState,
    params: ElicitRequestParams,
) -> Result<InputRequiredResult, String> {
    let request_state = serde_json::to_string(state)
        .map_err(|error| format!("cannot encode the requestState: {error}"))?;
    let mut requests = InputRequests::new();
    requests.insert(
        INPUT_KEY.to_owned(),
        InputRequest::Elicitation(ElicitRequest::new(params)),
    );
    Ok(InputRequiredResult::new(
        Some(requests),
        Some(request_state),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn retry(state: Option<&str>, responses: Option<Value>) -> Round {
        Round {
            request_state: state.map(str::to_owned),
            input_responses: responses.map(|value| serde_json::from_value(value).unwrap()),
        }
    }

    #[test]
    fn state_round_trips_as_json_text() {
        let state = RoundState {
            tool: "open_url".into(),
            elicitation_id: Some("demo-1-2".into()),
        };
        let text = serde_json::to_string(&state).unwrap();
        assert_eq!(text, r#"{"tool":"open_url","elicitationId":"demo-1-2"}"#);
        assert_eq!(
            serde_json::to_string(&RoundState::new("ask_name")).unwrap(),
            r#"{"tool":"ask_name"}"#
        );
        let answer = json!({"action": "accept"});
        let round = retry(Some(&text), Some(json!({ INPUT_KEY: answer })));
        assert_eq!(round.answer("open_url"), Ok((state, answer)));
    }

    #[test]
    fn bad_retries_name_the_problem() {
        let state = r#"{"tool":"ask_name"}"#;
        let ok = Some(json!({ INPUT_KEY: {"action": "accept"} }));
        let problem = |round: Round| round.answer("ask_name").unwrap_err();
        assert!(problem(retry(None, ok.clone())).contains("no requestState"));
        assert!(problem(retry(Some("junk"), ok.clone())).contains("was not issued"));
        assert!(
            problem(retry(Some(r#"{"tool":"open_url"}"#), ok.clone()))
                .contains("issued by open_url")
        );
        assert!(problem(retry(Some(state), None)).contains("no inputResponses"));
        assert!(problem(retry(Some(state), Some(json!({"other": {}})))).contains("\"other\""));
        assert!(retry(None, None).is_first());
        assert!(!retry(Some(state), None).is_first());
    }
}
