//! What the console shows and what a person answers: a [`Question`] as an
//! instance hands it over, the [`Open`] question as the console lists it,
//! and the person's [`Reply`].
//!
//! Every string here came from an MCP server, a guest or an upstream client:
//! the page puts it into text nodes only, never into markup.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// What the person did with a question: accept, decline or cancel (the
/// core's, as on the wire).
pub use gatehouse_core::answer::Action;

/// The longest message, title or rationale the console keeps, in bytes;
/// longer text is cut (on a character boundary) and marked.
pub const MAX_TEXT: usize = 16 * 1024;

/// One question for the person, as a `gatehouse serve` instance hands it to
/// the console.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Question {
    /// The configured name of the MCP server that asks.
    pub server: String,
    /// What the server asks for.
    pub ask: Ask,
    /// The upstream session the question belongs to, if it is tied to one
    /// (ids are per instance).
    #[serde(default)]
    pub session: Option<u64>,
    /// The upstream client of that session, as it named itself.
    #[serde(default)]
    pub client: Option<ClientLabel>,
    /// The agent's call the question belongs to, when one is known.
    #[serde(default)]
    pub call: Option<CallLabel>,
    /// Each module's verdict so far.
    #[serde(default)]
    pub verdicts: Vec<ModuleVerdict>,
    /// Why the person is asked (the routing branch).
    pub why: String,
    /// How long the person has, in milliseconds from when the console
    /// receives the question.
    pub timeout_ms: u64,
}

/// What the server asks for: a form, or to open a URL.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "mode", rename_all = "lowercase", deny_unknown_fields)]
pub enum Ask {
    /// Form mode: a message and the restricted JSON schema of the content.
    Form {
        /// The server's message.
        message: String,
        /// The requested schema (a flat object of primitive properties).
        requested_schema: Map<String, Value>,
    },
    /// URL mode: a message and the URL the server wants opened. The
    /// console shows it and its host; it never opens it.
    Url {
        /// The server's message.
        message: String,
        /// The URL, as the server sent it.
        url: String,
    },
}

impl Ask {
    /// The server's message.
    pub fn message(&self) -> &str {
        match self {
            Ask::Form { message, .. } | Ask::Url { message, .. } => message,
        }
    }
}

/// An upstream client, as it named itself in `initialize`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClientLabel {
    /// `clientInfo.name`.
    pub name: String,
    /// `clientInfo.version`.
    pub version: String,
}

/// The agent's call a question belongs to.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CallLabel {
    /// What was called (a tool name as the client used it, a prompt, a URI).
    pub name: String,
    /// The call's arguments as forwarded, if any.
    #[serde(default)]
    pub arguments: Option<Value>,
}

/// One module's verdict on the question.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModuleVerdict {
    /// The module's name in the chain.
    pub module: String,
    /// What it decided (`defer`, `decline`, a failure code…).
    pub outcome: String,
    /// Its rationale, if it gave one.
    #[serde(default)]
    pub rationale: Option<String>,
    /// The risk it saw, if it said.
    #[serde(default)]
    pub risk: Option<String>,
}

/// The person's answer to one question.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Reply {
    /// What they did.
    pub action: Action,
    /// The form's content, when they accepted a form.
    #[serde(default)]
    pub content: Option<Map<String, Value>>,
}

/// A question on the console, as the page gets it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Open {
    /// The console's id for it (random, unique while the console runs).
    pub id: String,
    /// The instance that asked (its id, as in its audit lines).
    pub instance: String,
    /// The question.
    pub question: Question,
    /// The URL's host, in URL mode, as the browser would resolve it
    /// (internationalized names in their `xn--` form), or why it has none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub url_host: Option<String>,
    /// When the console received it (Unix milliseconds).
    pub asked_at_ms: u64,
    /// When the person's time runs out (Unix milliseconds).
    pub deadline_ms: u64,
}

/// How a question left the console.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "how", rename_all = "snake_case")]
pub enum Closed {
    /// A person answered it in a console.
    Answered {
        /// What they did.
        action: Action,
        /// The console session that answered.
        session: String,
    },
    /// Its instance withdrew it (the time ran out, the call ended, the
    /// server went away).
    Withdrawn,
    /// Its instance went away.
    InstanceGone,
}

/// The host of `url` as a browser would resolve it, for showing plainly;
/// `None` if it has none or does not parse.
pub fn url_host(url: &str) -> Option<String> {
    let parsed = url::Url::parse(url).ok()?;
    let host = parsed.host_str()?;
    Some(match parsed.port() {
        Some(port) => format!("{host}:{port}"),
        None => host.to_owned(),
    })
}

/// The longest arguments of the agent's call shown in full, as JSON text;
/// longer ones are shown cut, as text ([`CallLabel::new`]).
pub const MAX_ARGUMENTS: usize = 64 * 1024;

/// The most module verdicts a question carries.
pub const MAX_VERDICTS: usize = 64;

impl Question {
    /// The question with its text cut to the console's bounds: strings to
    /// [`MAX_TEXT`], the call's arguments to [`MAX_ARGUMENTS`], at most
    /// [`MAX_VERDICTS`] verdicts. The instance cuts before it sends, and the
    /// console again when it receives.
    pub fn bounded(mut self) -> Question {
        self.server = bounded(&self.server);
        self.why = bounded(&self.why);
        self.ask = match self.ask {
            Ask::Form {
                message,
                requested_schema,
            } => Ask::Form {
                message: bounded(&message),
                requested_schema,
            },
            Ask::Url { message, url } => Ask::Url {
                message: bounded(&message),
                url: bounded(&url),
            },
        };
        self.client = self.client.map(|client| ClientLabel {
            name: bounded(&client.name),
            version: bounded(&client.version),
        });
        self.call = self
            .call
            .map(|call| CallLabel::new(&call.name, call.arguments.as_ref()));
        self.verdicts.truncate(MAX_VERDICTS);
        for verdict in &mut self.verdicts {
            verdict.module = bounded(&verdict.module);
            verdict.outcome = bounded(&verdict.outcome);
            verdict.rationale = verdict.rationale.as_deref().map(bounded);
            verdict.risk = verdict.risk.as_deref().map(bounded);
        }
        self
    }
}

impl CallLabel {
    /// The call `name` with `arguments`, cut: arguments longer than
    /// [`MAX_ARGUMENTS`] as JSON text become a string of their start, marked
    /// with their whole size.
    pub fn new(name: &str, arguments: Option<&Value>) -> CallLabel {
        let arguments = arguments.map(|arguments| {
            let text = serde_json::to_string(arguments).unwrap_or_default();
            if text.len() <= MAX_ARGUMENTS {
                return arguments.clone();
            }
            let mut end = MAX_ARGUMENTS;
            while !text.is_char_boundary(end) {
                end -= 1;
            }
            Value::String(format!(
                "{}… [cut: {} bytes of arguments in all]",
                &text[..end],
                text.len()
            ))
        });
        CallLabel {
            name: bounded(name),
            arguments,
        }
    }
}

/// `text` cut to [`MAX_TEXT`] bytes on a character boundary, marked when cut.
pub fn bounded(text: &str) -> String {
    if text.len() <= MAX_TEXT {
        return text.to_owned();
    }
    let mut end = MAX_TEXT;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}… [cut: {} bytes in all]", &text[..end], text.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_url_shows_the_host_a_browser_would_resolve() {
        assert_eq!(
            url_host("https://example.com/login?next=1").as_deref(),
            Some("example.com")
        );
        // The user-info trick: the host is what follows the `@`.
        assert_eq!(
            url_host("https://bank.example@evil.test/").as_deref(),
            Some("evil.test")
        );
        // A look-alike name in its ASCII form.
        assert_eq!(
            url_host("https://gооgle.com/").as_deref(),
            Some("xn--ggle-55da.com")
        );
        assert_eq!(
            url_host("http://127.0.0.1:8080/x").as_deref(),
            Some("127.0.0.1:8080")
        );
        assert_eq!(url_host("not a url"), None);
        assert_eq!(url_host("mailto:a@example.com"), None);
    }

    #[test]
    fn huge_arguments_are_shown_cut() {
        let big = serde_json::json!({"content": "x".repeat(2 * 1024 * 1024)});
        let label = CallLabel::new("write_file", Some(&big));
        let shown = label.arguments.unwrap();
        let text = shown.as_str().unwrap();
        assert!(text.len() < MAX_ARGUMENTS + 100);
        assert!(
            text.ends_with("bytes of arguments in all]"),
            "{}",
            &text[text.len() - 60..]
        );
        let small = serde_json::json!({"branch": "main"});
        assert_eq!(CallLabel::new("x", Some(&small)).arguments, Some(small));
    }

    #[test]
    fn long_text_is_cut_on_a_character_boundary() {
        let long = "é".repeat(MAX_TEXT);
        let cut = bounded(&long);
        assert!(cut.len() < long.len());
        assert!(cut.contains("[cut: "));
        assert_eq!(bounded("short"), "short");
    }

    #[test]
    fn a_question_round_trips_and_refuses_unknown_fields() {
        let question = Question {
            server: "s".into(),
            ask: Ask::Url {
                message: "m".into(),
                url: "https://example.com".into(),
            },
            session: Some(3),
            client: None,
            call: None,
            verdicts: vec![],
            why: "w".into(),
            timeout_ms: 5,
        };
        let text = serde_json::to_string(&question).unwrap();
        assert_eq!(serde_json::from_str::<Question>(&text).unwrap(), question);
        let mut value: Value = serde_json::from_str(&text).unwrap();
        value["extra"] = Value::Bool(true);
        assert!(serde_json::from_value::<Question>(value).is_err());
    }
}
