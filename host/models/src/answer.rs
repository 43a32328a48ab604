//! What an HTTP answer comes to: a [`Completion`], a failure another
//! attempt might not have, or one it would repeat; decided from the status,
//! the headers and the body.

use std::time::Duration;

use gatehouse_base::escape::escape;
use gatehouse_core::model::{Completion, FinishReason, ModelError};
use reqwest::header::{HeaderMap, LOCATION};
use serde_json::Value;

use super::redact::{provider_text, truncate};
use super::retry::retry_after;

/// The largest answer body read; a larger one is unusable output.
pub const MAX_RESPONSE_BYTES: usize = 1 << 20;
/// The most of a provider's error message kept in an error, in bytes.
pub const MAX_ERROR_MESSAGE_BYTES: usize = 500;

/// The most of an unusable answer quoted in the error.
const MAX_QUOTED_ANSWER_BYTES: usize = 200;

/// What one attempt came to.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Attempt {
    /// An answer.
    Answered(Completion),
    /// A failure another attempt might not have: retry while attempts and
    /// time are left, waiting at least `retry_after`.
    Retry {
        error: ModelError,
        retry_after: Option<Duration>,
    },
    /// A failure another attempt would repeat.
    Failed(ModelError),
}

/// What an HTTP answer comes to (see the [module docs](super)).
pub(super) fn classify(
    status: u16,
    headers: &HeaderMap,
    body: &[u8],
    truncated: bool,
    wants_json: bool,
    key: Option<&str>,
) -> Attempt {
    match status {
        200..=299 => {
            if truncated {
                return Attempt::Retry {
                    error: ModelError::Transient(format!(
                        "the answer is larger than {MAX_RESPONSE_BYTES} bytes"
                    )),
                    retry_after: None,
                };
            }
            parse_answer(body, wants_json, key)
        }
        300..=399 => {
            let location = headers
                .get(LOCATION)
                .and_then(|value| value.to_str().ok())
                .map(|location| {
                    format!(
                        " to {}",
                        truncate(&escape(location), MAX_ERROR_MESSAGE_BYTES)
                    )
                })
                .unwrap_or_default();
            Attempt::Failed(ModelError::Rejected(format!(
                "HTTP {status}: the endpoint redirects{location}; set endpoint to the base URL it leads to (redirects are not followed)"
            )))
        }
        408 => Attempt::Retry {
            error: ModelError::Transient(status_message(status, body, key)),
            retry_after: None,
        },
        429 => Attempt::Retry {
            error: ModelError::RateLimited(status_message(status, body, key)),
            retry_after: retry_after(headers),
        },
        400..=499 => Attempt::Failed(ModelError::Rejected(status_message(status, body, key))),
        _ => Attempt::Retry {
            error: ModelError::Transient(status_message(status, body, key)),
            retry_after: None,
        },
    }
}

/// `HTTP 400: <the provider's message>`, the message taken from an OpenAI
/// error body (`error.message`) or the body's text, without the key,
/// escaped and truncated.
fn status_message(status: u16, body: &[u8], key: Option<&str>) -> String {
    let text = String::from_utf8_lossy(body);
    let message = serde_json::from_str::<Value>(&text)
        .ok()
        .and_then(|value| {
            [
                value.pointer("/error/message"),
                value.get("error"),
                value.get("message"),
                value.get("detail"),
            ]
            .into_iter()
            .flatten()
            .find_map(|value| value.as_str().map(str::to_owned))
        })
        .unwrap_or_else(|| text.trim().to_owned());
    if message.is_empty() {
        return format!("HTTP {status}");
    }
    format!(
        "HTTP {status}: {}",
        provider_text(&message, MAX_ERROR_MESSAGE_BYTES, key)
    )
}

/// A 2xx body: `choices[0].message.content` and the rest, or why it cannot
/// be used.
fn parse_answer(body: &[u8], wants_json: bool, key: Option<&str>) -> Attempt {
    let unusable = |problem: String| Attempt::Retry {
        error: ModelError::Transient(problem),
        retry_after: None,
    };
    let Ok(value) = serde_json::from_slice::<Value>(body) else {
        let text = String::from_utf8_lossy(body);
        return unusable(format!(
            "the answer is not JSON: {}",
            provider_text(text.trim(), MAX_QUOTED_ANSWER_BYTES, key)
        ));
    };
    let Some(choice) = value.pointer("/choices/0") else {
        let detail = value
            .pointer("/error/message")
            .and_then(Value::as_str)
            .map(|message| format!(": {}", provider_text(message, MAX_ERROR_MESSAGE_BYTES, key)))
            .unwrap_or_default();
        return unusable(format!("the answer has no choices{detail}"));
    };
    let finish_reason = match choice.get("finish_reason").and_then(Value::as_str) {
        Some("stop") => FinishReason::Stop,
        Some("length") => FinishReason::Length,
        Some("content_filter") => FinishReason::ContentFilter,
        _ => FinishReason::Other,
    };
    let message = choice.get("message");
    let content = match message.and_then(|message| message.get("content")) {
        Some(Value::String(text)) => Some(text.clone()),
        // Content parts: the text ones, joined.
        Some(Value::Array(parts)) => Some(
            parts
                .iter()
                .filter_map(|part| part.get("text").and_then(Value::as_str))
                .collect::<String>(),
        ),
        _ => None,
    };
    let Some(text) =
        content.filter(|text| !text.is_empty() || finish_reason == FinishReason::ContentFilter)
    else {
        if let Some(refusal) = message
            .and_then(|message| message.get("refusal"))
            .and_then(Value::as_str)
        {
            return Attempt::Failed(ModelError::Rejected(format!(
                "the model refused: {}",
                provider_text(refusal, MAX_ERROR_MESSAGE_BYTES, key)
            )));
        }
        return unusable("the answer has no content".to_owned());
    };
    if wants_json && finish_reason != FinishReason::ContentFilter && !contains_json_object(&text) {
        return unusable(format!(
            "the answer holds no JSON object: {}",
            provider_text(text.trim(), MAX_QUOTED_ANSWER_BYTES, key)
        ));
    }
    let tokens = |field: &str| {
        value
            .pointer(&format!("/usage/{field}"))
            .and_then(Value::as_u64)
            .map(|count| u32::try_from(count).unwrap_or(u32::MAX))
    };
    Attempt::Answered(Completion {
        text,
        model: value
            .get("model")
            .and_then(Value::as_str)
            .filter(|model| !model.is_empty())
            .map(str::to_owned)
            .unwrap_or_default(),
        finish_reason,
        input_tokens: tokens("prompt_tokens"),
        output_tokens: tokens("completion_tokens"),
    })
}

/// Whether `text` is a JSON object, or holds one from its first `{` to its
/// last `}` (how the reviewer parses a model's answer).
fn contains_json_object(text: &str) -> bool {
    let is_object =
        |text: &str| matches!(serde_json::from_str::<Value>(text), Ok(Value::Object(_)));
    if is_object(text.trim()) {
        return true;
    }
    match (text.find('{'), text.rfind('}')) {
        (Some(start), Some(end)) if start < end => is_object(&text[start..=end]),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use reqwest::header::{HeaderValue, RETRY_AFTER};
    use serde_json::json;

    fn answer(content: Value, finish_reason: &str) -> Vec<u8> {
        json!({
            "model": "served-model",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": finish_reason}],
            "usage": {"prompt_tokens": 12, "completion_tokens": 3},
        })
        .to_string()
        .into_bytes()
    }

    fn retried(attempt: &Attempt) -> Option<&ModelError> {
        match attempt {
            Attempt::Retry { error, .. } => Some(error),
            _ => None,
        }
    }

    #[test]
    fn answers_are_parsed_and_unusable_ones_retried() {
        let none = HeaderMap::new();
        let Attempt::Answered(completion) = classify(
            200,
            &none,
            &answer(json!(r#"{"outcome":"allow"}"#), "stop"),
            false,
            true,
            None,
        ) else {
            panic!("an answer");
        };
        assert_eq!(completion.text, r#"{"outcome":"allow"}"#);
        assert_eq!(completion.model, "served-model");
        assert_eq!(completion.finish_reason, FinishReason::Stop);
        assert_eq!(
            (completion.input_tokens, completion.output_tokens),
            (Some(12), Some(3))
        );
        for (reason, expected) in [
            ("length", FinishReason::Length),
            ("content_filter", FinishReason::ContentFilter),
            ("tool_calls", FinishReason::Other),
        ] {
            let Attempt::Answered(completion) =
                classify(200, &none, &answer(json!("{}"), reason), false, true, None)
            else {
                panic!("{reason}");
            };
            assert_eq!(completion.finish_reason, expected);
        }
        // Prose around the object is fine; no object at all is not, with a schema.
        let fenced = answer(json!("Sure:\n```json\n{\"outcome\":\"deny\"}\n```"), "stop");
        assert!(matches!(
            classify(200, &none, &fenced, false, true, None),
            Attempt::Answered(_)
        ));
        let prose = answer(json!("I think it is fine."), "stop");
        let error = retried(&classify(200, &none, &prose, false, true, None)).cloned();
        assert!(
            matches!(&error, Some(ModelError::Transient(message)) if message.contains("no JSON object") && message.contains("I think")),
            "{error:?}"
        );
        assert!(matches!(
            classify(200, &none, &prose, false, false, None),
            Attempt::Answered(_)
        ));
        // A filtered answer is the module's to judge.
        let filtered = answer(json!(""), "content_filter");
        assert!(matches!(
            classify(200, &none, &filtered, false, true, None),
            Attempt::Answered(_)
        ));
        for (body, problem) in [
            (b"<html>busy</html>".to_vec(), "not JSON"),
            (br#"{"choices":[]}"#.to_vec(), "no choices"),
            (
                br#"{"error":{"message":"overloaded"}}"#.to_vec(),
                "no choices: overloaded",
            ),
            (
                br#"{"choices":[{"message":{"content":null}}]}"#.to_vec(),
                "no content",
            ),
        ] {
            let error = retried(&classify(200, &none, &body, false, true, None)).cloned();
            assert!(
                matches!(&error, Some(ModelError::Transient(message)) if message.contains(problem)),
                "{problem}: {error:?}"
            );
        }
        let too_big = retried(&classify(200, &none, b"{", true, false, None)).cloned();
        assert!(
            matches!(too_big, Some(ModelError::Transient(message)) if message.contains("larger than"))
        );
        let refusal =
            br#"{"choices":[{"message":{"content":null,"refusal":"I can't help with that."}}]}"#;
        assert_eq!(
            classify(200, &none, refusal, false, true, None),
            Attempt::Failed(ModelError::Rejected(
                "the model refused: I can't help with that.".to_owned()
            ))
        );
        let parts = answer(
            json!([{"type": "text", "text": "{\"outcome\":"}, {"type": "text", "text": "\"allow\"}"}]),
            "stop",
        );
        let Attempt::Answered(completion) = classify(200, &none, &parts, false, true, None) else {
            panic!("content parts");
        };
        assert_eq!(completion.text, r#"{"outcome":"allow"}"#);
    }

    #[test]
    fn statuses_are_classified_and_messages_truncated_escaped_and_redacted() {
        let none = HeaderMap::new();
        let body = br#"{"error":{"message":"Incorrect API key provided: sk-secret-123.","type":"invalid_request_error"}}"#;
        assert_eq!(
            classify(401, &none, body, false, true, Some("sk-secret-123")),
            Attempt::Failed(ModelError::Rejected(
                "HTTP 401: Incorrect API key provided: [redacted].".to_owned()
            ))
        );
        assert!(
            matches!(classify(400, &none, b"", false, true, None), Attempt::Failed(ModelError::Rejected(m)) if m == "HTTP 400")
        );
        assert!(
            matches!(retried(&classify(500, &none, b"oops", false, true, None)), Some(ModelError::Transient(m)) if m == "HTTP 500: oops")
        );
        assert!(matches!(
            retried(&classify(503, &none, b"", false, true, None)),
            Some(ModelError::Transient(_))
        ));
        assert!(matches!(
            retried(&classify(408, &none, b"", false, true, None)),
            Some(ModelError::Transient(_))
        ));
        let mut headers = HeaderMap::new();
        headers.insert(RETRY_AFTER, HeaderValue::from_static("7"));
        assert_eq!(
            classify(
                429,
                &headers,
                br#"{"error":{"message":"slow down"}}"#,
                false,
                true,
                None
            ),
            Attempt::Retry {
                error: ModelError::RateLimited("HTTP 429: slow down".to_owned()),
                retry_after: Some(Duration::from_secs(7)),
            }
        );
        headers.insert(
            RETRY_AFTER,
            HeaderValue::from_static("Wed, 21 Oct 2015 07:28:00 GMT"),
        );
        assert!(matches!(
            classify(429, &headers, b"", false, true, None),
            Attempt::Retry {
                retry_after: None,
                ..
            }
        ));
        headers.insert(
            LOCATION,
            HeaderValue::from_static("https://elsewhere/v1/chat/completions"),
        );
        assert!(matches!(
            classify(301, &headers, b"", false, true, None),
            Attempt::Failed(ModelError::Rejected(m)) if m.contains("redirects to https://elsewhere/v1/chat/completions")
        ));
        let hostile = "\u{1b}]0;pwned\u{7}\r\nINFO all fine ".repeat(100);
        let Attempt::Failed(ModelError::Rejected(message)) =
            classify(403, &none, hostile.as_bytes(), false, true, None)
        else {
            panic!("a rejection");
        };
        assert!(
            !message.contains(['\u{1b}', '\r', '\n', '\u{7}']),
            "{message}"
        );
        assert!(
            message.contains(r"\u{1b}]0;pwned\u{7}\r\nINFO"),
            "{message}"
        );
        assert!(
            message.len() <= "HTTP 403: ".len() + MAX_ERROR_MESSAGE_BYTES + '…'.len_utf8(),
            "{}",
            message.len()
        );
        assert!(message.ends_with('…'));
    }

    #[test]
    fn json_objects_are_found_whole_or_between_the_outer_braces() {
        assert!(contains_json_object(r#" {"outcome":"allow"} "#));
        assert!(contains_json_object(
            "Answer: {\"outcome\": \"deny\", \"x\": {\"y\": 1}} done"
        ));
        assert!(!contains_json_object("no braces"));
        assert!(!contains_json_object("} backwards {"));
        assert!(!contains_json_object("[1, 2]"));
        assert!(!contains_json_object("{truncated: "));
    }
}
