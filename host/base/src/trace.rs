//! The one target every span of a gatehouse trace is emitted under, and how
//! text someone else chose becomes a span attribute.
//!
//! The libraries emit their spans with [`tracing`] at debug level under
//! [`TARGET`]: an upstream request, the call to the downstream server, each
//! elicitation, each module's review, each model call and the wait for the
//! person. Nothing is exported unless a host subscribes to the target (the
//! `gatehouse` binary does when traces are configured, and sends them over
//! OTLP); with no subscriber a span costs a check of a cached interest.
//!
//! ```
//! let span = tracing::debug_span!(target: gatehouse_base::trace::TARGET, "review");
//! // No subscriber here: the span is disabled and records nothing.
//! assert!(span.is_disabled());
//! ```

use crate::cut::cut;
use crate::escape::Escaped;

/// The target of every span of a gatehouse trace.
pub const TARGET: &str = "gatehouse::trace";

/// The most characters of an attribute's value taken from a server, a
/// client or a module (a tool name, a server name, a reason).
pub const MAX_ATTRIBUTE_CHARS: usize = 256;

/// `text` from a server, a client or a module as an attribute value:
/// escaped like a log line (controls, bidi and invisible characters as
/// `\u{…}`) and cut to [`MAX_ATTRIBUTE_CHARS`].
///
/// ```
/// use gatehouse_base::trace::attribute;
/// assert_eq!(attribute("git__delete_branch"), "git__delete_branch");
/// assert_eq!(attribute("a\nb"), r"a\nb");
/// assert!(attribute(&"x".repeat(10_000)).chars().count() <= 256);
/// ```
pub fn attribute(text: &str) -> String {
    let escaped = Escaped(text).to_string();
    cut(&escaped, MAX_ATTRIBUTE_CHARS).into_owned()
}
