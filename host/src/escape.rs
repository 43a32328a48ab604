//! Text from guests, servers and manifests, made safe to print.
//!
//! Anything a guest, an MCP server or a plugin manifest wrote may reach a
//! terminal or a log: a rationale, a log message, a stderr line, a resource
//! URI, an error message. Printed raw, it can retitle or clear the terminal
//! (ESC and C1 sequences), rewrite what is already on the line (CR), forge a
//! second log line (LF), or reorder what the reader sees (bidi overrides).
//! Every such string goes through [`Escaped`] (or [`escape`]) on its way out.
//!
//! What is escaped: every control character (C0 including TAB, CR and LF;
//! DEL; C1, U+0080–U+009F, which some terminals read as CSI and OSC), the
//! bidi formatting characters (U+061C, U+200E, U+200F, U+202A–U+202E,
//! U+2066–U+2069) and the line and paragraph separators U+2028 and U+2029.
//! TAB, CR and LF become `\t`, `\r` and `\n`; the others `\u{..}` in hex, as
//! Rust writes them. Everything else, backslashes and quotes included, is
//! left as it is, so clean text (paths, URLs, JSON) reads unchanged, costs
//! no allocation, and escaping twice changes nothing. The result is for
//! reading, not for parsing back: a literal `\n` in the input looks like an
//! escaped newline, but can never end a line.
//!
//! `str::escape_debug` is close but not this: it escapes backslashes and
//! quotes (doubling them on every pass, so escaped text cannot be escaped
//! again harmlessly), always allocates through its iterator, and escapes
//! every character Rust deems non-printable, such as the zero-width joiner
//! inside emoji sequences.
//!
//! ```
//! use gatehouse::escape::{Escaped, escape};
//!
//! let hostile = "ok\u{1b}]0;pwned\u{7}\r\nINFO looks fine: accepted";
//! assert_eq!(
//!     Escaped(hostile).to_string(),
//!     r"ok\u{1b}]0;pwned\u{7}\r\nINFO looks fine: accepted"
//! );
//! // Clean text is borrowed as it is.
//! assert!(matches!(escape("C:\\plugins\\a.json"), std::borrow::Cow::Borrowed(_)));
//! ```

use std::borrow::Cow;
use std::fmt::{self, Write};

/// Whether `c` is escaped: a control character, a bidi formatting
/// character, or a line or paragraph separator.
pub fn needs_escape(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{061c}'
                | '\u{200e}'
                | '\u{200f}'
                | '\u{202a}'..='\u{202e}'
                | '\u{2066}'..='\u{2069}'
                | '\u{2028}'
                | '\u{2029}'
        )
}

/// `text` with every character that could control a terminal or break a
/// log line escaped (see the [module docs](self)); borrowed when there is
/// none.
pub fn escape(text: &str) -> Cow<'_, str> {
    if text.chars().any(needs_escape) {
        Cow::Owned(Escaped(text).to_string())
    } else {
        Cow::Borrowed(text)
    }
}

/// Displays the wrapped text escaped (see the [module docs](self)), without
/// allocating: `tracing::warn!(uri = %Escaped(&uri), "...")`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Escaped<'a>(pub &'a str);

impl fmt::Display for Escaped<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if f.width().is_none() && f.precision().is_none() {
            EscapeWriter(f).write_str(self.0)
        } else {
            // Width and precision apply to the escaped text, as printed.
            f.pad(&escape(self.0))
        }
    }
}

/// A [`fmt::Write`] that escapes what is written through it before passing
/// it on: `write!(EscapeWriter(out), "{value:?}")` escapes a value's
/// formatting as it is produced.
#[derive(Debug)]
pub struct EscapeWriter<W>(pub W);

impl<W: Write> Write for EscapeWriter<W> {
    fn write_str(&mut self, text: &str) -> fmt::Result {
        let mut clean = 0;
        for (at, c) in text.char_indices() {
            if !needs_escape(c) {
                continue;
            }
            self.0.write_str(&text[clean..at])?;
            match c {
                '\t' => self.0.write_str("\\t")?,
                '\r' => self.0.write_str("\\r")?,
                '\n' => self.0.write_str("\\n")?,
                other => write!(self.0, "\\u{{{:x}}}", u32::from(other))?,
            }
            clean = at + c.len_utf8();
        }
        self.0.write_str(&text[clean..])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn escaped(text: &str) -> String {
        Escaped(text).to_string()
    }

    #[test]
    fn escape_sequences_lose_their_escape() {
        // Retitle the terminal (OSC), erase the line, colour the rest.
        let out = escaped("\u{1b}]0;pwned\u{7}\u{1b}[2K\u{1b}[32mfine\u{1b}[0m");
        assert_eq!(out, r"\u{1b}]0;pwned\u{7}\u{1b}[2K\u{1b}[32mfine\u{1b}[0m");
        assert!(!out.contains('\u{1b}') && !out.contains('\u{7}'));
    }

    #[test]
    fn cr_and_lf_cannot_forge_a_second_line() {
        let out = escaped("declined\r\n2026-01-01T00:00:00Z  INFO looks fine: accepted\rover");
        assert_eq!(
            out,
            r"declined\r\n2026-01-01T00:00:00Z  INFO looks fine: accepted\rover"
        );
        assert_eq!(out.lines().count(), 1);
        assert!(!out.contains('\r'));
    }

    #[test]
    fn c1_controls_del_and_the_rest_of_c0_are_escaped() {
        assert_eq!(escaped("\u{9b}31m"), r"\u{9b}31m");
        assert_eq!(escaped("\u{9d}0;x\u{9c}"), r"\u{9d}0;x\u{9c}");
        assert_eq!(escaped("a\u{7f}\u{0}\u{8}\tb"), r"a\u{7f}\u{0}\u{8}\tb");
        assert_eq!(escaped("\u{85}"), r"\u{85}", "NEL");
    }

    #[test]
    fn bidi_controls_and_line_separators_are_escaped() {
        // "accepted" spelled backwards behind a right-to-left override
        // reads as "accepted" on screen.
        assert_eq!(
            escaped("\u{202e}detpecca\u{202c}"),
            r"\u{202e}detpecca\u{202c}"
        );
        for c in [
            '\u{061c}', '\u{200e}', '\u{200f}', '\u{202a}', '\u{202b}', '\u{202d}', '\u{2066}',
            '\u{2067}', '\u{2068}', '\u{2069}', '\u{2028}', '\u{2029}',
        ] {
            let out = escaped(&c.to_string());
            assert_eq!(out, format!("\\u{{{:x}}}", u32::from(c)));
        }
    }

    #[test]
    fn clean_text_is_borrowed_unchanged() {
        for clean in [
            "",
            "plain ascii: with \"quotes\" and \\backslashes\\",
            "C:\\Users\\a\\gatehouse.toml",
            "{\"a\":\"\\u001b\"}",
            "héllo wörld — 日本語 👨\u{200d}👩\u{200d}👧",
            "demo://git/readme?x=1#y",
        ] {
            assert!(
                matches!(escape(clean), Cow::Borrowed(text) if text == clean),
                "{clean}"
            );
            assert_eq!(escaped(clean), clean);
        }
    }

    #[test]
    fn escaping_twice_changes_nothing() {
        let once = escaped("a\u{1b}[31m\r\n\u{202e}\\n\u{9b}");
        assert_eq!(escaped(&once), once);
        assert!(matches!(escape(&once), Cow::Borrowed(_)));
    }

    #[test]
    fn padding_applies_to_the_escaped_text() {
        assert_eq!(format!("[{:<8}]", Escaped("a\nb")), "[a\\nb    ]");
        assert_eq!(format!("[{:>4}]", Escaped("ab")), "[  ab]");
        assert_eq!(format!("[{:.3}]", Escaped("\u{1b}[2J")), "[\\u{]");
    }

    #[test]
    fn the_writer_escapes_formatted_values() {
        let mut out = String::new();
        let line = "x\ny";
        write!(EscapeWriter(&mut out), "{line}|{:?}", 'z').unwrap();
        assert_eq!(out, r"x\ny|'z'");
    }
}
