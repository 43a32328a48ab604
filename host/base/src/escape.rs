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
//! U+2066–U+2069), the line and paragraph separators U+2028 and U+2029, and
//! the invisible characters that can hide or disguise text: the soft hyphen
//! U+00AD, the zero-width space U+200B, the word joiner and invisible
//! operators U+2060–U+2064, the deprecated format controls U+206A–U+206F, the
//! byte order mark U+FEFF, the Mongolian vowel separator U+180E, the
//! interlinear annotation controls U+FFF9–U+FFFB, the tag characters
//! U+E0000–U+E007F, and the Hangul fillers U+115F, U+1160, U+3164 and U+FFA0.
//! The zero-width joiner and non-joiner (U+200D, U+200C) and the variation
//! selectors are kept: emoji and many scripts need them, and they cannot hide
//! a character on their own. TAB, CR and LF become `\t`, `\r` and `\n`; the
//! others `\u{..}` in hex, as Rust writes them. Everything else, backslashes and quotes included, is
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
//! use gatehouse_base::escape::{Escaped, escape};
//!
//! let hostile = "ok\u{1b}]0;pwned\u{7}\r\nINFO looks fine: accepted";
//! assert_eq!(
//!     Escaped(hostile).to_string(),
//!     r"ok\u{1b}]0;pwned\u{7}\r\nINFO looks fine: accepted"
//! );
//! // Clean text is borrowed as it is.
//! assert!(matches!(escape("C:\\plugins\\a.json"), std::borrow::Cow::Borrowed(_)));
//! ```
//!
//! Output for machines gets the same treatment in its own syntax:
//! [`to_json_string`] (and [`JsonEscaper`], a `serde_json` formatter) writes
//! every such character as a JSON `\uXXXX` escape, so the JSON stays valid
//! and means exactly the same strings, but shows no raw control to whoever
//! reads it in a terminal.

use std::borrow::Cow;
use std::fmt::{self, Write};
use std::io;

/// Whether `c` is escaped: a control character, a bidi formatting
/// character, a line or paragraph separator, or an invisible character that
/// can hide or disguise text (see the [module docs](self)).
pub fn needs_escape(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{00ad}'
                | '\u{061c}'
                | '\u{115f}'
                | '\u{1160}'
                | '\u{180e}'
                | '\u{200b}'
                | '\u{200e}'
                | '\u{200f}'
                | '\u{202a}'..='\u{202e}'
                | '\u{2028}'
                | '\u{2029}'
                | '\u{2060}'..='\u{2064}'
                | '\u{2066}'..='\u{206f}'
                | '\u{3164}'
                | '\u{feff}'
                | '\u{ffa0}'
                | '\u{fff9}'..='\u{fffb}'
                | '\u{e0000}'..='\u{e007f}'
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

/// What [`one_line`] shows in place of a line break.
pub const LINE_BREAK_MARK: &str = " \u{23ce} ";

/// `text` as one line for a person to read in a dialog, where the escapes
/// of [`escape`] would be noise but a server must not be able to pose as
/// someone else: every run of line breaks (CR, LF, VT, FF, NEL, U+2028,
/// U+2029) becomes [`LINE_BREAK_MARK`] (` ⏎ `), every other character
/// [`needs_escape`] names (controls, bidi formatting, invisibles) becomes
/// U+FFFD, every run of white space (tabs and Unicode spaces included)
/// becomes one space, and white space at either end is dropped. So text put
/// after a prefix (`[server] `) cannot start a line of its own, push itself
/// out of view with padding, or reorder what the reader sees; and clean
/// single-line text comes back borrowed.
///
/// ```
/// use gatehouse_base::escape::one_line;
/// let forged = "Sign in again\r\n\n[github]    Paste\u{202e} your token";
/// assert_eq!(one_line(forged), "Sign in again \u{23ce} [github] Paste\u{fffd} your token");
/// assert!(matches!(one_line("Allow push?"), std::borrow::Cow::Borrowed(_)));
/// ```
pub fn one_line(text: &str) -> Cow<'_, str> {
    let clean = !text.starts_with(is_blank)
        && !text.ends_with(is_blank)
        && !text.contains("  ")
        && !text
            .chars()
            .any(|c| needs_escape(c) || (is_blank(c) && c != ' '));
    if clean {
        return Cow::Borrowed(text);
    }
    let mut line = String::with_capacity(text.len());
    // What separates the last character written from the next: nothing, a
    // space, or a line break (which wins over spaces around it).
    let mut gap = Gap::None;
    for c in text.chars() {
        if is_line_break(c) {
            gap = Gap::Break;
        } else if is_blank(c) {
            if gap == Gap::None {
                gap = Gap::Space;
            }
        } else {
            if !line.is_empty() {
                match gap {
                    Gap::None => {}
                    Gap::Space => line.push(' '),
                    Gap::Break => line.push_str(LINE_BREAK_MARK),
                }
            }
            gap = Gap::None;
            line.push(if needs_escape(c) { '\u{fffd}' } else { c });
        }
    }
    Cow::Owned(line)
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Gap {
    None,
    Space,
    Break,
}

/// A character that ends a line in some reader.
fn is_line_break(c: char) -> bool {
    matches!(
        c,
        '\n' | '\r' | '\u{0b}' | '\u{0c}' | '\u{85}' | '\u{2028}' | '\u{2029}'
    )
}

/// White space that is not a line break, and what renders as white space
/// without being it (U+2800 BRAILLE PATTERN BLANK): padding either way.
fn is_blank(c: char) -> bool {
    (c.is_whitespace() || c == '\u{2800}') && !is_line_break(c)
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

/// `value` as compact JSON with every character [`needs_escape`] names
/// written as a `\uXXXX` escape (see [`JsonEscaper`]): for the audit log and
/// `--format json` outputs.
pub fn to_json_string<T: serde::Serialize + ?Sized>(value: &T) -> serde_json::Result<String> {
    json_string(value, serde_json::ser::CompactFormatter)
}

/// [`to_json_string`], indented for people.
pub fn to_json_string_pretty<T: serde::Serialize + ?Sized>(
    value: &T,
) -> serde_json::Result<String> {
    json_string(value, serde_json::ser::PrettyFormatter::new())
}

fn json_string<T: serde::Serialize + ?Sized>(
    value: &T,
    formatter: impl serde_json::ser::Formatter,
) -> serde_json::Result<String> {
    let mut out = Vec::with_capacity(128);
    value.serialize(&mut serde_json::Serializer::with_formatter(
        &mut out,
        JsonEscaper(formatter),
    ))?;
    // serde_json writes UTF-8, and the escaper only replaces whole
    // characters with ASCII.
    String::from_utf8(out).map_err(<serde_json::Error as serde::ser::Error>::custom)
}

/// A `serde_json` [`Formatter`](serde_json::ser::Formatter) that writes like
/// the one it wraps, except that every character [`needs_escape`] names is
/// written as a `\uXXXX` escape (two, a surrogate pair, above U+FFFF), in
/// strings and object keys alike. The JSON is as valid and means the same
/// strings; a terminal showing it gets no raw DEL, C1, bidi control, line
/// separator or invisible character (serde_json already escapes C0).
#[derive(Debug, Clone, Default)]
pub struct JsonEscaper<F>(pub F);

/// Writes `fragment`, each character `escaped` picks as `\uXXXX`.
fn write_json_escaped<W: ?Sized + io::Write>(
    writer: &mut W,
    fragment: &str,
    escaped: impl Fn(char) -> bool,
) -> io::Result<()> {
    let mut clean = 0;
    for (at, c) in fragment.char_indices() {
        if !escaped(c) {
            continue;
        }
        writer.write_all(&fragment.as_bytes()[clean..at])?;
        let mut units = [0u16; 2];
        for unit in c.encode_utf16(&mut units) {
            write!(writer, "\\u{unit:04x}")?;
        }
        clean = at + c.len_utf8();
    }
    writer.write_all(&fragment.as_bytes()[clean..])
}

impl<F: serde_json::ser::Formatter> serde_json::ser::Formatter for JsonEscaper<F> {
    fn write_string_fragment<W: ?Sized + io::Write>(
        &mut self,
        writer: &mut W,
        fragment: &str,
    ) -> io::Result<()> {
        write_json_escaped(writer, fragment, needs_escape)
    }

    fn write_raw_fragment<W: ?Sized + io::Write>(
        &mut self,
        writer: &mut W,
        fragment: &str,
    ) -> io::Result<()> {
        // Raw JSON (`RawValue`): whitespace between tokens stays; any other
        // such character can only be inside a string, where `\u` is valid.
        write_json_escaped(writer, fragment, |c| {
            needs_escape(c) && !matches!(c, '\t' | '\n' | '\r')
        })
    }

    fn begin_string<W: ?Sized + io::Write>(&mut self, writer: &mut W) -> io::Result<()> {
        self.0.begin_string(writer)
    }

    fn end_string<W: ?Sized + io::Write>(&mut self, writer: &mut W) -> io::Result<()> {
        self.0.end_string(writer)
    }

    fn write_char_escape<W: ?Sized + io::Write>(
        &mut self,
        writer: &mut W,
        char_escape: serde_json::ser::CharEscape,
    ) -> io::Result<()> {
        self.0.write_char_escape(writer, char_escape)
    }

    fn begin_array<W: ?Sized + io::Write>(&mut self, writer: &mut W) -> io::Result<()> {
        self.0.begin_array(writer)
    }

    fn end_array<W: ?Sized + io::Write>(&mut self, writer: &mut W) -> io::Result<()> {
        self.0.end_array(writer)
    }

    fn begin_array_value<W: ?Sized + io::Write>(
        &mut self,
        writer: &mut W,
        first: bool,
    ) -> io::Result<()> {
        self.0.begin_array_value(writer, first)
    }

    fn end_array_value<W: ?Sized + io::Write>(&mut self, writer: &mut W) -> io::Result<()> {
        self.0.end_array_value(writer)
    }

    fn begin_object<W: ?Sized + io::Write>(&mut self, writer: &mut W) -> io::Result<()> {
        self.0.begin_object(writer)
    }

    fn end_object<W: ?Sized + io::Write>(&mut self, writer: &mut W) -> io::Result<()> {
        self.0.end_object(writer)
    }

    fn begin_object_key<W: ?Sized + io::Write>(
        &mut self,
        writer: &mut W,
        first: bool,
    ) -> io::Result<()> {
        self.0.begin_object_key(writer, first)
    }

    fn end_object_key<W: ?Sized + io::Write>(&mut self, writer: &mut W) -> io::Result<()> {
        self.0.end_object_key(writer)
    }

    fn begin_object_value<W: ?Sized + io::Write>(&mut self, writer: &mut W) -> io::Result<()> {
        self.0.begin_object_value(writer)
    }

    fn end_object_value<W: ?Sized + io::Write>(&mut self, writer: &mut W) -> io::Result<()> {
        self.0.end_object_value(writer)
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
    fn invisible_characters_that_hide_or_disguise_text_are_escaped() {
        for c in [
            '\u{00ad}',
            '\u{115f}',
            '\u{1160}',
            '\u{180e}',
            '\u{200b}',
            '\u{2060}',
            '\u{2061}',
            '\u{2062}',
            '\u{2063}',
            '\u{2064}',
            '\u{206a}',
            '\u{206f}',
            '\u{3164}',
            '\u{feff}',
            '\u{ffa0}',
            '\u{fff9}',
            '\u{fffa}',
            '\u{fffb}',
            '\u{e0000}',
            '\u{e0001}',
            '\u{e0041}',
            '\u{e007f}',
        ] {
            assert!(needs_escape(c), "{:x}", u32::from(c));
            let out = escaped(&format!("a{c}b"));
            assert_eq!(out, format!("a\\u{{{:x}}}b", u32::from(c)));
        }
        // "paypal" with a zero-width space and a soft hyphen in it reads as
        // "paypal"; escaped, it does not.
        assert_eq!(escaped("pay\u{200b}pa\u{ad}l"), r"pay\u{200b}pa\u{ad}l");
        // A hidden instruction in tag characters.
        assert_eq!(escaped("ok\u{e0041}\u{e0042}"), r"ok\u{e0041}\u{e0042}");
    }

    #[test]
    fn joiners_and_variation_selectors_stay_for_emoji_and_scripts() {
        for c in [
            '\u{200c}',
            '\u{200d}',
            '\u{fe0e}',
            '\u{fe0f}',
            '\u{e0100}',
            '\u{e01ef}',
        ] {
            assert!(!needs_escape(c), "{:x}", u32::from(c));
        }
        for clean in [
            "👨\u{200d}👩\u{200d}👧",
            "❤\u{fe0f}",
            "می\u{200c}خواهم",
            "🏳\u{fe0f}\u{200d}🌈",
        ] {
            assert!(matches!(escape(clean), Cow::Borrowed(_)), "{clean}");
        }
    }

    /// Every character `needs_escape` names, and some it does not.
    const HOSTILE: &str = "a\u{7f}b\u{85}\u{9b}2J\u{202e}detpecca\u{2028}\u{2029}\u{200b}\u{feff}\u{e0041}\u{1b}]0;t\u{7}\r\n\t\"\\ é 👨\u{200d}👩";

    #[test]
    fn json_escapes_what_needs_escaping_and_means_the_same() {
        let value = serde_json::json!({
            "text": HOSTILE,
            HOSTILE: [HOSTILE, 1, null, true, {"k": 2.5}],
        });
        let json = to_json_string(&value).expect("serializes");
        assert!(!json.chars().any(needs_escape), "{json:?}");
        assert!(
            json.contains(r#"a\u007fb\u0085\u009b2J\u202edetpecca\u2028\u2029\u200b\ufeff\udb40\udc41\u001b]0;t\u0007\r\n\t\"\\ é 👨‍👩"#),
            "{json}"
        );
        let back: serde_json::Value = serde_json::from_str(&json).expect("valid JSON");
        assert_eq!(back, value, "lossless");
        // Clean JSON is written as serde_json writes it.
        let clean = serde_json::json!({"a": ["b", 1], "é": "👨\u{200d}👩"});
        assert_eq!(
            to_json_string(&clean).expect("serializes"),
            serde_json::to_string(&clean).expect("serializes")
        );
        assert_eq!(
            to_json_string_pretty(&clean).expect("serializes"),
            serde_json::to_string_pretty(&clean).expect("serializes")
        );
    }

    #[test]
    fn pretty_json_escapes_too() {
        let value = serde_json::json!({"module": HOSTILE, "results": [{"case": HOSTILE}]});
        let json = to_json_string_pretty(&value).expect("serializes");
        assert!(
            !json.chars().any(|c| needs_escape(c) && c != '\n'),
            "{json:?}"
        );
        assert!(json.contains("\n  \"module\": \"a\\u007fb"), "{json}");
        let back: serde_json::Value = serde_json::from_str(&json).expect("valid JSON");
        assert_eq!(back, value);
    }

    #[test]
    fn raw_json_fragments_keep_their_whitespace_and_lose_their_controls() {
        let raw = serde_json::value::RawValue::from_string(format!(
            "{{\n\t\"k\": {}\r\n}}",
            serde_json::to_string("x\u{9b}\u{202e}").expect("string")
        ))
        .expect("raw JSON");
        let json = to_json_string(&raw).expect("serializes");
        assert_eq!(json, "{\n\t\"k\": \"x\\u009b\\u202e\"\r\n}");
        let back: serde_json::Value = serde_json::from_str(&json).expect("valid JSON");
        assert_eq!(back["k"], "x\u{9b}\u{202e}");
    }

    #[test]
    fn the_writer_escapes_formatted_values() {
        let mut out = String::new();
        let line = "x\ny";
        write!(EscapeWriter(&mut out), "{line}|{:?}", 'z').unwrap();
        assert_eq!(out, r"x\ny|'z'");
    }

    #[test]
    fn one_line_keeps_the_prefix_in_front() {
        let message = format!(
            "[evil] {}",
            one_line("ok\n\n[github] Your session expired. Paste a token")
        );
        assert_eq!(
            message,
            "[evil] ok \u{23ce} [github] Your session expired. Paste a token"
        );
        // Padding, tabs and Unicode spaces fold; nothing leads or trails.
        assert_eq!(one_line(" \t a\u{3000}\u{2003}   b \u{a0}"), "a b");
        // Braille blanks render as spaces: 200 of them cannot wrap the
        // rest of the message onto a line of its own.
        let padded = format!("Done.{} [github] Paste a token", "\u{2800}".repeat(200));
        assert_eq!(one_line(&padded), "Done. [github] Paste a token");
        // CR alone, NEL and the separators break lines too; runs fold into one mark.
        assert_eq!(
            one_line("a\rb\u{85}c\u{2028}\u{2029}d"),
            "a \u{23ce} b \u{23ce} c \u{23ce} d"
        );
        // Controls, bidi and invisibles cannot hide or reorder anything.
        assert_eq!(
            one_line("x\u{1b}[2J\u{202e}y\u{200b}"),
            "x\u{fffd}[2J\u{fffd}y\u{fffd}"
        );
        // The result is one line and stable.
        let once = one_line("a\r\n  b\u{2066}");
        assert!(!once.chars().any(|c| is_line_break(c) || needs_escape(c)));
        assert_eq!(one_line(&once), once);
        assert_eq!(one_line(""), "");
        assert_eq!(one_line("\n\n"), "");
    }
}
