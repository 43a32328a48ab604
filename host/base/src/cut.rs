//! Text someone else chose, cut to a bound: a server's request id, a name
//! or a free text that goes into a record or a log line. What is cut keeps
//! its start and says how long the whole was and what its sha256 is, so it
//! can still be matched against the original; what fits is kept as it is,
//! without a copy.

use std::borrow::Cow;

use sha2::{Digest, Sha256};

/// The most characters of a server's request id kept whole: a longer id is
/// [`cut`] to at most this many on its way in (the connection does it to the
/// id rmcp, the router and the logs see) and in the audit record.
pub const MAX_ID_CHARS: usize = 256;

/// What starts the mark a cut text ends with.
pub const CUT_MARK: &str = "…[cut: ";

/// Characters the mark takes at most: `…[cut: ` (7), the byte count (up to
/// 20 digits), ` bytes, sha256:` (15), 64 hex digits and `]`.
const MARK_CHARS: usize = 7 + 20 + 15 + 64 + 1;

/// `text` as it is when it has at most `max_chars` characters; otherwise
/// its first characters and `…[cut: N bytes, sha256:HEX]` (N the length of
/// the whole text in UTF-8 bytes, HEX their sha256 in lower-case hex), at
/// most `max_chars` characters in all (at least the mark, when `max_chars`
/// is shorter than it). Cutting what was cut changes nothing.
///
/// ```
/// use gatehouse_base::cut::{cut, CUT_MARK};
/// assert_eq!(cut("short", 256), "short");
/// let long = "\u{85}".repeat(3 << 20);
/// let cut_once = cut(&long, 256);
/// assert!(cut_once.chars().count() <= 256);
/// assert!(cut_once.contains(&format!("{CUT_MARK}6291456 bytes, sha256:")));
/// assert_eq!(cut(&cut_once, 256), cut_once);
/// ```
pub fn cut(text: &str, max_chars: usize) -> Cow<'_, str> {
    // A character is at least one byte: no more bytes, no more characters.
    if text.len() <= max_chars || text.chars().count() <= max_chars {
        return Cow::Borrowed(text);
    }
    let keep = max_chars.saturating_sub(MARK_CHARS);
    let end = text
        .char_indices()
        .nth(keep)
        .map_or(text.len(), |(at, _)| at);
    Cow::Owned(format!(
        "{}{CUT_MARK}{} bytes, sha256:{}]",
        &text[..end],
        text.len(),
        hex::encode(Sha256::digest(text.as_bytes()))
    ))
}
