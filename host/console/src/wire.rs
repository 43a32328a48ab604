//! The line protocol between a `gatehouse serve` instance ([`crate::link`])
//! and the console ([`crate::socket`]) over the console's private socket:
//! one JSON object per line, each at most [`MAX_LINE`] bytes.
//!
//! The instance says who it is ([`ToConsole::Hello`]), then hands over
//! questions ([`ToConsole::Ask`]) under its own ids and withdraws those it
//! stopped waiting for ([`ToConsole::Withdraw`]). The console sends back
//! the person's answers ([`ToInstance::Answer`]) and refusals
//! ([`ToInstance::Refused`]). The instance also reports its modules and
//! backends ([`ToConsole::Status`]) and its metrics ([`ToConsole::Metrics`]) and reloads when an operator asks
//! ([`ToInstance::Reload`], answered by [`ToConsole::Reloaded`]). Closing the connection withdraws everything
//! on either side: the console takes the instance's questions off the page,
//! and the instance answers what still waited `on_unhandled`.

use serde::{Deserialize, Serialize};

use crate::question::{Question, Reply};
use crate::status::InstanceStatus;

/// The longest line either side sends or reads, in bytes (a question with
/// its schema, call arguments and rationales).
pub const MAX_LINE: usize = 1024 * 1024;

/// What an instance sends.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum ToConsole {
    /// The first line: which instance this is.
    Hello {
        /// The instance id (as in its audit lines).
        instance: String,
        /// Its process id.
        pid: u32,
    },
    /// A question for the person, under the instance's id `id`.
    Ask {
        /// The instance's id for it.
        id: u64,
        /// The question.
        question: Box<Question>,
    },
    /// The instance no longer waits for `id`.
    Withdraw {
        /// The instance's id for it.
        id: u64,
    },
    /// The instance's modules and backends now.
    Status {
        /// Its state.
        status: Box<InstanceStatus>,
    },
    /// The instance's cumulative metrics now (see
    /// `gatehouse_telemetry::totals`): sent when they changed, and once more
    /// as it shuts down.
    Metrics {
        /// Every counter and histogram, and its gauges.
        snapshot: gatehouse_telemetry::series::Snapshot,
    },
    /// How a reload the console asked for went.
    Reloaded {
        /// The line `gatehouse reload` would print (`ok …` or `error: …`).
        line: String,
    },
}

/// What the console sends.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum ToInstance {
    /// A person answered `id`.
    Answer {
        /// The instance's id for the question.
        id: u64,
        /// The answer (checked against the question's schema).
        reply: Reply,
        /// The console session that answered.
        session: String,
    },
    /// The console will not show `id`.
    Refused {
        /// The instance's id for the question.
        id: u64,
        /// Why.
        reason: String,
    },
    /// An operator asked for a reload (as `gatehouse reload` does).
    Reload,
}

/// Encodes one message as a line (with its newline).
pub fn line<T: Serialize>(message: &T) -> Result<String, serde_json::Error> {
    let mut text = serde_json::to_string(message)?;
    text.push('\n');
    Ok(text)
}

/// Reads one line of at most [`MAX_LINE`] bytes; `Ok(None)` at the end of
/// the stream. A longer line is an error (the connection is not read
/// further).
pub async fn read_line<R>(reader: &mut R, buffer: &mut Vec<u8>) -> std::io::Result<Option<String>>
where
    R: tokio::io::AsyncBufRead + Unpin,
{
    use tokio::io::AsyncBufReadExt;
    buffer.clear();
    loop {
        let available = reader.fill_buf().await?;
        if available.is_empty() {
            return if buffer.is_empty() {
                Ok(None)
            } else {
                Err(std::io::Error::new(
                    std::io::ErrorKind::UnexpectedEof,
                    "the connection ended inside a line",
                ))
            };
        }
        let (taken, done) = match available.iter().position(|&byte| byte == b'\n') {
            Some(at) => (at + 1, true),
            None => (available.len(), false),
        };
        if buffer.len() + taken > MAX_LINE + 1 {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("a line is longer than {MAX_LINE} bytes"),
            ));
        }
        buffer.extend_from_slice(&available[..taken]);
        reader.consume(taken);
        if done {
            buffer.pop();
            return String::from_utf8(std::mem::take(buffer))
                .map(Some)
                .map_err(|_| {
                    std::io::Error::new(std::io::ErrorKind::InvalidData, "a line is not UTF-8")
                });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn lines_are_bounded() {
        let long = vec![b'a'; MAX_LINE + 10];
        let mut reader = tokio::io::BufReader::new(&long[..]);
        let mut buffer = Vec::new();
        assert!(read_line(&mut reader, &mut buffer).await.is_err());
        let two = b"{\"a\":1}\n{\"b\":2}\n";
        let mut reader = tokio::io::BufReader::new(&two[..]);
        assert_eq!(
            read_line(&mut reader, &mut buffer)
                .await
                .unwrap()
                .as_deref(),
            Some("{\"a\":1}")
        );
        assert_eq!(
            read_line(&mut reader, &mut buffer)
                .await
                .unwrap()
                .as_deref(),
            Some("{\"b\":2}")
        );
        assert_eq!(read_line(&mut reader, &mut buffer).await.unwrap(), None);
    }

    #[test]
    fn unknown_messages_are_refused() {
        assert!(serde_json::from_str::<ToConsole>(r#"{"type":"reload"}"#).is_err());
        assert!(serde_json::from_str::<ToConsole>(r#"{"type":"withdraw","id":1,"x":2}"#).is_err());
        let hello = ToConsole::Hello {
            instance: "i".into(),
            pid: 1,
        };
        let text = line(&hello).unwrap();
        assert!(text.ends_with('\n'));
        assert_eq!(
            serde_json::from_str::<ToConsole>(text.trim_end()).unwrap(),
            hello
        );
    }
}
