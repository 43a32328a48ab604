//! The requests a bench cycles through: a file of JSON lines, a JSON array,
//! or a single JSON document; each entry is what `gatehouse review --request`
//! takes (the `params` of `elicitation/create` as on the wire, or the whole
//! JSON-RPC message). Errors name the file and the line of the entry.

use std::path::{Path, PathBuf};

use serde_json::Value;

use gatehouse_core::context::ReviewContext;
use gatehouse_core::elicitation::{ElicitationParams, RequestId};
use gatehouse_core::request::ReviewRequest;

/// Why a requests file could not be used.
#[derive(Debug, thiserror::Error)]
pub enum RequestsError {
    /// The file could not be read.
    #[error("{}: cannot read: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// Text that is not JSON.
    #[error("{origin}: line {line}: not valid JSON: {detail}")]
    Json {
        /// The file.
        origin: String,
        /// The line (1-based) where the problem is.
        line: usize,
        /// serde_json's message.
        detail: String,
    },
    /// An entry that is not an elicitation/create request.
    #[error("{origin}: line {line}: {detail}")]
    Entry {
        /// The file.
        origin: String,
        /// The line (1-based) where the entry starts.
        line: usize,
        /// What is wrong, naming the field.
        detail: String,
    },
    /// No entries at all.
    #[error("{origin}: no requests in it")]
    Empty {
        /// The file.
        origin: String,
    },
}

/// The embedded sample ([`super::sample_elicitation`]) as the one request,
/// with `context` (request id 1).
pub fn sample_requests(context: &ReviewContext) -> Result<Vec<ReviewRequest>, RequestsError> {
    entry(
        "the embedded sample",
        1,
        &super::sample_elicitation(),
        1,
        context,
    )
    .map(|request| vec![request])
}

/// Reads a requests file (see [`parse_requests`]).
pub fn load_requests(
    path: impl AsRef<Path>,
    context: &ReviewContext,
) -> Result<Vec<ReviewRequest>, RequestsError> {
    let path = path.as_ref();
    let text = std::fs::read_to_string(path).map_err(|source| RequestsError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    parse_requests(&text, &path.display().to_string(), context)
}

/// Parses requests: a JSON array of entries, one JSON document, or JSON
/// lines (blank lines skipped). Each request gets `context`, with the
/// JSON-RPC `id` of its message as request id, or else its position
/// (1-based). `origin` names the text in errors.
///
/// ```
/// use gatehouse_bench::parse_requests;
/// use gatehouse_core::context::ReviewContext;
/// let lines = r#"{"message": "A?", "requestedSchema": {"type": "object"}}
/// {"jsonrpc": "2.0", "id": 9, "method": "elicitation/create", "params": {"message": "B?", "requestedSchema": {"type": "object"}}}"#;
/// let requests = parse_requests(lines, "r.jsonl", &ReviewContext::default()).unwrap();
/// assert_eq!(requests[1].context().request_id.to_string(), "9");
/// let error = parse_requests("{}\n", "r.jsonl", &ReviewContext::default()).unwrap_err();
/// assert!(error.to_string().starts_with("r.jsonl: line 1: "));
/// ```
pub fn parse_requests(
    text: &str,
    origin: &str,
    context: &ReviewContext,
) -> Result<Vec<ReviewRequest>, RequestsError> {
    let entries = if text.trim_start().starts_with('[') {
        array_entries(text, origin)?
    } else if let Ok(value) = serde_json::from_str::<Value>(text) {
        vec![(line_of(text, text.len() - text.trim_start().len()), value)]
    } else {
        line_entries(text, origin)?
    };
    if entries.is_empty() {
        return Err(RequestsError::Empty {
            origin: origin.to_owned(),
        });
    }
    entries
        .iter()
        .enumerate()
        .map(|(index, (line, value))| entry(origin, *line, value, index + 1, context))
        .collect()
}

fn entry(
    origin: &str,
    line: usize,
    value: &Value,
    position: usize,
    context: &ReviewContext,
) -> Result<ReviewRequest, RequestsError> {
    let (params, id) =
        ElicitationParams::from_captured(value).map_err(|error| RequestsError::Entry {
            origin: origin.to_owned(),
            line,
            detail: error.to_string(),
        })?;
    let mut context = context.clone();
    context.request_id =
        id.unwrap_or_else(|| RequestId::Number(i64::try_from(position).unwrap_or(i64::MAX)));
    Ok(ReviewRequest::new(params, context))
}

/// JSON lines: one document per non-blank line.
fn line_entries(text: &str, origin: &str) -> Result<Vec<(usize, Value)>, RequestsError> {
    let mut entries = Vec::new();
    for (index, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let value = serde_json::from_str(line).map_err(|error| RequestsError::Json {
            origin: origin.to_owned(),
            line: index + 1,
            detail: error.to_string(),
        })?;
        entries.push((index + 1, value));
    }
    Ok(entries)
}

/// A JSON array, each element with the line it starts on.
fn array_entries(text: &str, origin: &str) -> Result<Vec<(usize, Value)>, RequestsError> {
    let mut lines = Lines::new(text);
    let mut entries = Vec::new();
    let mut at = skip_space(text, text.len() - text.trim_start().len() + 1);
    if text[at..].starts_with(']') {
        return trailing_end(text, at + 1, origin).map(|()| entries);
    }
    loop {
        let mut stream = serde_json::Deserializer::from_str(&text[at..]).into_iter::<Value>();
        let value = match stream.next() {
            Some(Ok(value)) => value,
            Some(Err(error)) => {
                return Err(RequestsError::Json {
                    origin: origin.to_owned(),
                    line: lines.at(at) + error.line().saturating_sub(1),
                    detail: error.to_string(),
                });
            }
            None => return Err(syntax(text, at, origin, "expected an array element")),
        };
        entries.push((lines.at(at), value));
        at = skip_space(text, at + stream.byte_offset());
        match text[at..].chars().next() {
            Some(',') => at = skip_space(text, at + 1),
            Some(']') => return trailing_end(text, at + 1, origin).map(|()| entries),
            _ => return Err(syntax(text, at, origin, "expected `,` or `]`")),
        }
    }
}

/// Line numbers of increasing byte offsets, counted once.
struct Lines<'a> {
    text: &'a str,
    offset: usize,
    line: usize,
}

impl<'a> Lines<'a> {
    fn new(text: &'a str) -> Self {
        Lines {
            text,
            offset: 0,
            line: 1,
        }
    }

    /// The 1-based line of `offset`, which is not before the last one asked.
    fn at(&mut self, offset: usize) -> usize {
        let span = self
            .text
            .as_bytes()
            .get(self.offset..offset)
            .unwrap_or_default();
        self.line += span.iter().filter(|&&byte| byte == b'\n').count();
        self.offset = self.offset.max(offset);
        self.line
    }
}

fn trailing_end(text: &str, at: usize, origin: &str) -> Result<(), RequestsError> {
    let at = skip_space(text, at);
    if at < text.len() {
        return Err(syntax(
            text,
            at,
            origin,
            "trailing characters after the array",
        ));
    }
    Ok(())
}

fn syntax(text: &str, at: usize, origin: &str, detail: &str) -> RequestsError {
    RequestsError::Json {
        origin: origin.to_owned(),
        line: line_of(text, at),
        detail: detail.to_owned(),
    }
}

fn skip_space(text: &str, at: usize) -> usize {
    let rest = text.get(at..).unwrap_or_default();
    at + (rest.len() - rest.trim_start().len())
}

/// The 1-based line of byte `offset`.
fn line_of(text: &str, offset: usize) -> usize {
    text.as_bytes()
        .iter()
        .take(offset)
        .filter(|&&byte| byte == b'\n')
        .count()
        + 1
}

#[cfg(test)]
mod tests {
    use super::*;

    const ENTRY: &str = r#"{"message": "?", "requestedSchema": {"type": "object"}}"#;

    fn parse(text: &str) -> Result<Vec<ReviewRequest>, RequestsError> {
        parse_requests(
            text,
            "r.json",
            &ReviewContext::new("docs", RequestId::Number(0)),
        )
    }

    fn error(text: &str) -> String {
        parse(text).unwrap_err().to_string()
    }

    #[test]
    fn json_lines_arrays_and_single_documents() {
        assert_eq!(parse(&format!("{ENTRY}\n\n{ENTRY}\n")).unwrap().len(), 2);
        assert_eq!(
            parse(&format!("[\n  {ENTRY},\n  {ENTRY}\n]"))
                .unwrap()
                .len(),
            2
        );
        let pretty = serde_json::to_string_pretty(&crate::sample_elicitation()).unwrap();
        let requests = parse(&pretty).unwrap();
        assert_eq!(requests.len(), 1);
        assert_eq!(requests[0].context().server_name, "docs");
        assert_eq!(requests[0].context().request_id, RequestId::Number(1));
    }

    #[test]
    fn bad_json_lines_name_the_line() {
        assert_eq!(
            error(&format!("{ENTRY}\n{ENTRY}\n{{\"message\": \n")),
            "r.json: line 3: not valid JSON: EOF while parsing a value at line 1 column 12"
        );
    }

    #[test]
    fn bad_entries_name_the_line_and_field() {
        let text = format!("{ENTRY}\n\n{{\"message\": 1, \"requestedSchema\": {{}}}}\n");
        assert_eq!(
            error(&text),
            "r.json: line 3: invalid elicitation/create params: `message` must be a string"
        );
        let text = format!("[\n  {ENTRY},\n  {{\"method\": \"tools/call\"}}\n]");
        assert_eq!(
            error(&text),
            "r.json: line 3: a `tools/call` message, not elicitation/create"
        );
    }

    #[test]
    fn bad_arrays_name_the_line() {
        let text = format!("[\n  {ENTRY},\n\n  {{\"message\": ]\n]");
        assert!(
            error(&text).starts_with("r.json: line 4: not valid JSON"),
            "{}",
            error(&text)
        );
        let text = format!("[\n  {ENTRY}\n  {ENTRY}\n]");
        assert_eq!(
            error(&text),
            "r.json: line 3: not valid JSON: expected `,` or `]`"
        );
        assert_eq!(error("[\n]"), "r.json: no requests in it");
        assert_eq!(error("  \n"), "r.json: no requests in it");
        assert_eq!(
            error(&format!("[{ENTRY}]\nx")),
            "r.json: line 2: not valid JSON: trailing characters after the array"
        );
    }

    #[test]
    fn json_rpc_ids_become_request_ids() {
        let text = format!(
            "{ENTRY}\n{{\"jsonrpc\": \"2.0\", \"id\": \"abc\", \"method\": \"elicitation/create\", \"params\": {ENTRY}}}"
        );
        let requests = parse(&text).unwrap();
        assert_eq!(requests[0].context().request_id, RequestId::Number(1));
        assert_eq!(
            requests[1].context().request_id,
            RequestId::Text("abc".to_owned())
        );
    }
}
