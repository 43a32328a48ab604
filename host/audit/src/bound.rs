//! Bounds on what goes into an audit record, so that every record stays one
//! line a reader can read whatever a server sends.
//!
//! A server chooses the JSON-RPC id of its requests, the values quoted in
//! the error that refuses its params, the names in its schema (the keys of
//! a person's answer); a guest writes its rationale, a model its answer, the
//! upstream client its turn id. None of them has a length limit of its own
//! below the 16 MiB a stdio line may carry, and the log writes each
//! character that could drive a terminal as a six-byte `\uXXXX` escape: a
//! 6 MiB id of C1 controls became an 18 MiB record, longer than
//! [`read::DEFAULT_MAX_LINE`](super::read::DEFAULT_MAX_LINE), which hid its
//! accept from `gatehouse audit`.
//!
//! So, before a record is written ([`bounded`]):
//!
//! - `request_id`: a string id of more than [`MAX_ID_CHARS`] characters (or
//!   any other JSON of more than that once written) is recorded [`cut`]: its
//!   first characters, then `…[cut: N bytes, sha256:HEX]`, HEX the sha256 of
//!   the whole id (its UTF-8 bytes), so that it can still be matched against
//!   the id a server logged. A connection does the same to the ids rmcp and
//!   the router see (`connection::inbound`), so the id in the record is
//!   the one every log line shows.
//! - names (`server`, `turn`, `mode`, a step's `module`, `sha256`,
//!   `outcome` and `failure`, a model call's `grant`, `model`, digests,
//!   `error` and `limit`, the keys in `answer`): at most [`MAX_NAME_CHARS`] characters,
//!   cut the same way.
//! - free text (`reason`, a step's `rationale`, a model call's `prompt` and
//!   `answer`, every string in `answer`: what the person typed, the message
//!   of a JSON-RPC error): at most [`MAX_TEXT_CHARS`] characters each, cut
//!   the same way.
//! - the whole line: a record still longer than [`MAX_RECORD_BYTES`] once
//!   written (a form of thousands of fields, a chain of many steps) is
//!   written shrunk ([`shrunk`]): the answer becomes its action (or its
//!   error) with the size and sha256 of what was sent, rationales, prompts
//!   and model answers are cut to [`SHRUNK_TEXT_CHARS`], and the reason says
//!   so.
//!
//! Numbers, booleans and `null` are never cut. Text that fits is written as
//! it is, without a copy.

use std::borrow::Cow;

use serde_json::{Map, Value};

use sha2::{Digest, Sha256};

pub use gatehouse_base::cut::{CUT_MARK, MAX_ID_CHARS, cut};

use super::AuditRecord;

/// The most characters of a name (server, turn, mode, module, outcome,
/// failure code, digest, model, the keys of an answer) kept whole.
pub const MAX_NAME_CHARS: usize = 256;

/// The most characters of one free text (reason, rationale, prompt, model
/// answer, each string of the answer) kept whole.
pub const MAX_TEXT_CHARS: usize = 64 * 1024;

/// The longest record line written, in bytes (1 MiB, a sixteenth of what
/// the reader takes); a longer one is written [`shrunk`].
pub const MAX_RECORD_BYTES: usize = 1 << 20;

/// The most characters of a rationale, prompt or model answer in a shrunk
/// record.
pub const SHRUNK_TEXT_CHARS: usize = 1024;

/// `id` as it goes into a record: a string of at most [`MAX_ID_CHARS`]
/// characters, a number or `null` as it is; a longer string [`cut`]; any
/// other JSON (no JSON-RPC id is an array or an object, but a record's id is
/// any JSON) as it is if its text fits, else its text cut, as a string.
pub fn bound_id(id: &Value) -> Cow<'_, Value> {
    match id {
        Value::String(text) => match cut(text, MAX_ID_CHARS) {
            Cow::Borrowed(_) => Cow::Borrowed(id),
            Cow::Owned(cut) => Cow::Owned(Value::String(cut)),
        },
        Value::Null | Value::Bool(_) | Value::Number(_) => Cow::Borrowed(id),
        Value::Array(_) | Value::Object(_) => {
            let text = id.to_string();
            match cut(&text, MAX_ID_CHARS) {
                Cow::Borrowed(_) => Cow::Borrowed(id),
                Cow::Owned(cut) => Cow::Owned(Value::String(cut)),
            }
        }
    }
}

/// `value` with every string cut to `max_text` characters and every object
/// key to [`MAX_NAME_CHARS`]; `None` when nothing needed cutting.
pub fn bound_value(value: &Value, max_text: usize) -> Option<Value> {
    match value {
        Value::String(text) => match cut(text, max_text) {
            Cow::Borrowed(_) => None,
            Cow::Owned(cut) => Some(Value::String(cut)),
        },
        Value::Array(items) => {
            let cut: Vec<Option<Value>> = items
                .iter()
                .map(|item| bound_value(item, max_text))
                .collect();
            cut.iter().any(Option::is_some).then(|| {
                Value::Array(
                    items
                        .iter()
                        .zip(cut)
                        .map(|(item, cut)| cut.unwrap_or_else(|| item.clone()))
                        .collect(),
                )
            })
        }
        Value::Object(members) => {
            let cut: Vec<(Cow<'_, str>, Option<Value>)> = members
                .iter()
                .map(|(key, item)| (cut(key, MAX_NAME_CHARS), bound_value(item, max_text)))
                .collect();
            let changed = cut
                .iter()
                .any(|(key, item)| matches!(key, Cow::Owned(_)) || item.is_some());
            changed.then(|| {
                let mut object = Map::new();
                for ((key, cut), (_, item)) in cut.into_iter().zip(members) {
                    object.insert(key.into_owned(), cut.unwrap_or_else(|| item.clone()));
                }
                Value::Object(object)
            })
        }
        Value::Null | Value::Bool(_) | Value::Number(_) => None,
    }
}

/// `record` with every field bounded as the [module docs](self) say;
/// borrowed when every field fits (the usual case: no copy).
pub fn bounded(record: &AuditRecord) -> Cow<'_, AuditRecord> {
    fn empty_client() -> crate::ClientName {
        crate::ClientName {
            name: String::new(),
            version: String::new(),
        }
    }
    /// Cuts `current` (the field `field` picks, as in `record`) in `out`,
    /// copying the record first if it is still borrowed.
    fn text(
        out: &mut Cow<'_, AuditRecord>,
        current: &str,
        max: usize,
        field: &dyn Fn(&mut AuditRecord) -> &mut String,
    ) {
        if let Cow::Owned(cut) = cut(current, max) {
            *field(out.to_mut()) = cut;
        }
    }
    let mut out = Cow::Borrowed(record);
    text(&mut out, &record.server, MAX_NAME_CHARS, &|r| &mut r.server);
    text(&mut out, &record.mode, MAX_NAME_CHARS, &|r| &mut r.mode);
    text(&mut out, &record.reason, MAX_TEXT_CHARS, &|r| &mut r.reason);
    if let Some(client) = &record.client {
        // The upstream client's own words.
        text(&mut out, &client.name, MAX_NAME_CHARS, &|r| {
            &mut r.client.get_or_insert_with(empty_client).name
        });
        text(&mut out, &client.version, MAX_NAME_CHARS, &|r| {
            &mut r.client.get_or_insert_with(empty_client).version
        });
    }
    if let Some(turn) = &record.turn {
        text(&mut out, turn, MAX_NAME_CHARS, &|r| {
            r.turn.get_or_insert_with(String::new)
        });
    }
    if let Cow::Owned(id) = bound_id(&record.request_id) {
        out.to_mut().request_id = id;
    }
    if let Some(answer) = bound_value(&record.answer, MAX_TEXT_CHARS) {
        out.to_mut().answer = answer;
    }
    for (i, step) in record.steps.iter().enumerate() {
        text(&mut out, &step.module, MAX_NAME_CHARS, &|r| {
            &mut r.steps[i].module
        });
        text(&mut out, &step.sha256, MAX_NAME_CHARS, &|r| {
            &mut r.steps[i].sha256
        });
        text(&mut out, &step.outcome, MAX_NAME_CHARS, &|r| {
            &mut r.steps[i].outcome
        });
        if let Some(signer) = &step.signed_by {
            text(&mut out, signer, MAX_NAME_CHARS, &|r| {
                r.steps[i].signed_by.get_or_insert_with(String::new)
            });
        }
        if let Some(failure) = &step.failure {
            text(&mut out, failure, MAX_NAME_CHARS, &|r| {
                r.steps[i].failure.get_or_insert_with(String::new)
            });
        }
        if let Some(rationale) = &step.rationale {
            text(&mut out, rationale, MAX_TEXT_CHARS, &|r| {
                r.steps[i].rationale.get_or_insert_with(String::new)
            });
        }
        for (j, call) in step.model_calls.iter().enumerate() {
            let names = [(&call.grant, 0), (&call.model, 1), (&call.prompt_sha256, 2)];
            for (name, which) in names {
                text(&mut out, name, MAX_NAME_CHARS, &|r| {
                    let call = &mut r.steps[i].model_calls[j];
                    match which {
                        0 => &mut call.grant,
                        1 => &mut call.model,
                        _ => &mut call.prompt_sha256,
                    }
                });
            }
            let optional = [
                (&call.prompt, MAX_TEXT_CHARS, 0),
                (&call.answer, MAX_TEXT_CHARS, 1),
                (&call.answer_sha256, MAX_NAME_CHARS, 2),
                (&call.error, MAX_NAME_CHARS, 3),
                (&call.limit, MAX_NAME_CHARS, 4),
            ];
            for (value, max, which) in optional {
                if let Some(value) = value {
                    text(&mut out, value, max, &|r| {
                        let call = &mut r.steps[i].model_calls[j];
                        match which {
                            0 => &mut call.prompt,
                            1 => &mut call.answer,
                            2 => &mut call.answer_sha256,
                            3 => &mut call.error,
                            _ => &mut call.limit,
                        }
                        .get_or_insert_with(String::new)
                    });
                }
            }
        }
    }
    out
}

/// `record` (already [`bounded`]) shrunk to fit [`MAX_RECORD_BYTES`] when
/// it was `written` bytes long: the answer becomes `{"action": ...,
/// "gatehouse/cut": {"bytes": N, "sha256": HEX}}` (the size and digest of
/// the answer as written), or its error with the message cut to
/// [`SHRUNK_TEXT_CHARS`]; each step keeps its module, digest, outcome,
/// failure and latency, with its rationale and its model calls' prompts and
/// answers cut to [`SHRUNK_TEXT_CHARS`]; and the reason ends by saying the
/// record was cut and from what size.
pub fn shrunk(record: &AuditRecord, written: usize) -> AuditRecord {
    let mut small = record.clone();
    let answer = serde_json::to_string(&record.answer).unwrap_or_default();
    small.answer = match record.answer.get("error") {
        Some(error) => {
            let message = error
                .get("message")
                .and_then(Value::as_str)
                .map(|message| cut(message, SHRUNK_TEXT_CHARS).into_owned());
            serde_json::json!({"error": {
                "code": error.get("code").cloned().unwrap_or(Value::Null),
                "message": message,
            }})
        }
        None => serde_json::json!({
            "action": record.answer.get("action").cloned().unwrap_or(Value::Null),
            "gatehouse/cut": {
                "bytes": answer.len(),
                "sha256": hex::encode(Sha256::digest(answer.as_bytes())),
            },
        }),
    };
    let shorten = |text: &mut Option<String>| {
        if let Some(value) = text
            && let Cow::Owned(cut) = cut(value, SHRUNK_TEXT_CHARS)
        {
            *value = cut;
        }
    };
    for step in &mut small.steps {
        shorten(&mut step.rationale);
        for call in &mut step.model_calls {
            shorten(&mut call.prompt);
            shorten(&mut call.answer);
        }
    }
    small.reason = format!(
        "{} [record shrunk: {written} bytes written whole, over the {MAX_RECORD_BYTES}-byte limit]",
        cut(&record.reason, SHRUNK_TEXT_CHARS)
    );
    small
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{AuditStep, DecidedBy};
    use serde_json::json;

    fn record() -> AuditRecord {
        AuditRecord {
            person: None,
            time: "2026-05-01T10:00:00.000001Z".to_owned(),
            server: "git".to_owned(),
            request_id: json!(7),
            session: Some(1),
            turn: Some("t-1".to_owned()),
            instance: None,
            client: None,
            mode: "form".to_owned(),
            decided_by: DecidedBy::Person,
            reason: "routed to the user".to_owned(),
            steps: vec![AuditStep {
                module: "guardian".to_owned(),
                sha256: "ab".repeat(32),
                signed_by: None,
                outcome: "defer".to_owned(),
                failure: None,
                rationale: Some("not mine".to_owned()),
                risk: None,
                latency_us: 3,
                model_calls: Vec::new(),
            }],
            answer: json!({"action": "accept", "content": {"name": "Ada"}}),
            latency_us: 9,
        }
    }

    #[test]
    fn a_record_that_fits_is_not_copied() {
        let record = record();
        assert!(matches!(bounded(&record), Cow::Borrowed(_)));
    }

    #[test]
    fn a_long_id_is_cut_with_the_digest_of_the_whole() {
        let id = "\u{85}".repeat(3 << 20);
        let digest = hex::encode(Sha256::digest(id.as_bytes()));
        let mut record = record();
        record.request_id = Value::String(id.clone());
        let bounded = bounded(&record);
        let Value::String(cut_id) = &bounded.request_id else {
            panic!("a string id stays a string");
        };
        assert!(cut_id.chars().count() <= MAX_ID_CHARS, "{cut_id}");
        assert!(cut_id.starts_with("\u{85}\u{85}"), "{cut_id}");
        assert!(
            cut_id.ends_with(&format!("{CUT_MARK}{} bytes, sha256:{digest}]", id.len())),
            "{cut_id}"
        );
        // The rest is as it was.
        assert_eq!(bounded.server, "git");
        assert_eq!(bounded.answer, record.answer);
        // Numbers are never cut; an object id is cut as its text.
        assert_eq!(bound_id(&json!(i64::MAX)), Cow::Borrowed(&json!(i64::MAX)));
        let object = json!({"k": "x".repeat(1000)});
        assert!(
            matches!(bound_id(&object).as_ref(), Value::String(text) if text.contains(CUT_MARK))
        );
    }

    #[test]
    fn every_long_text_and_name_is_cut() {
        let huge = "\u{9b}".repeat(MAX_TEXT_CHARS + 1);
        let mut record = record();
        record.server = huge.clone();
        record.turn = Some(huge.clone());
        record.client = Some(crate::ClientName {
            name: huge.clone(),
            version: huge.clone(),
        });
        record.mode = huge.clone();
        record.reason = huge.clone();
        record.steps[0].module = huge.clone();
        record.steps[0].rationale = Some(huge.clone());
        record.steps[0]
            .model_calls
            .push(gatehouse_core::model::ModelCallRecord {
                grant: huge.clone(),
                model: huge.clone(),
                prompt_sha256: "p".to_owned(),
                prompt: Some(huge.clone()),
                input_tokens: None,
                output_tokens: None,
                attempts: 1,
                latency_us: 1,
                answer: Some(huge.clone()),
                answer_sha256: None,
                error: Some(huge.clone()),
                limit: Some(huge.clone()),
            });
        record.answer = json!({"error": {"code": -32602, "message": huge.clone()},
            huge.clone(): [huge.clone(), 5]});
        let bounded = bounded(&record).into_owned();
        let client = bounded.client.clone().expect("kept");
        let names = [
            &client.name,
            &client.version,
            &bounded.server,
            bounded.turn.as_ref().unwrap_or(&huge),
            &bounded.mode,
            &bounded.steps[0].module,
            &bounded.steps[0].model_calls[0].grant,
            &bounded.steps[0].model_calls[0].model,
            bounded.steps[0].model_calls[0]
                .error
                .as_ref()
                .unwrap_or(&huge),
        ];
        for name in names {
            assert!(name.chars().count() <= MAX_NAME_CHARS, "{}", name.len());
            assert!(name.contains(CUT_MARK));
        }
        let texts = [
            &bounded.reason,
            bounded.steps[0].rationale.as_ref().unwrap_or(&huge),
            bounded.steps[0].model_calls[0]
                .prompt
                .as_ref()
                .unwrap_or(&huge),
            bounded.steps[0].model_calls[0]
                .answer
                .as_ref()
                .unwrap_or(&huge),
        ];
        for text in texts {
            assert!(text.chars().count() <= MAX_TEXT_CHARS, "{}", text.len());
            assert!(text.contains(CUT_MARK));
        }
        let written = serde_json::to_string(&bounded.answer).expect("JSON");
        assert!(written.len() < 5 * MAX_TEXT_CHARS, "{}", written.len());
        assert_eq!(bounded.answer["error"]["code"], -32602);
        assert!(!written.contains(&huge));
    }

    #[test]
    fn a_record_too_long_as_a_whole_is_shrunk_keeping_its_decision() {
        let mut record = record();
        let content: Map<String, Value> = (0..100)
            .map(|n| {
                (
                    format!("field{n}"),
                    Value::String("y".repeat(MAX_TEXT_CHARS)),
                )
            })
            .collect();
        record.answer = json!({"action": "accept", "content": content});
        let written = serde_json::to_string(&record).expect("JSON").len();
        assert!(written > MAX_RECORD_BYTES);
        let small = shrunk(&record, written);
        let line = serde_json::to_string(&small).expect("JSON");
        assert!(line.len() < 16 * 1024, "{}", line.len());
        assert_eq!(small.answer["action"], "accept");
        assert_eq!(small.action(), crate::read::Action::Accept);
        assert_eq!(
            small.answer["gatehouse/cut"]["bytes"],
            serde_json::to_string(&record.answer).expect("JSON").len()
        );
        assert!(small.reason.contains("record shrunk"), "{}", small.reason);
        assert_eq!(small.decided_by, DecidedBy::Person);
    }
}
