//! RFC 6570 URI templates, matched rather than expanded: could this URI be
//! an expansion of this template?
//!
//! Every operator is understood: simple `{var}`, reserved `{+var}`,
//! fragment `{#var}`, label `{.var}`, path `{/var}`, path parameters
//! `{;var}`, query `{?var}` and continuation `{&var}`, with several
//! variables, explode (`*`) and prefixes (`:n`). An expression matches
//! nothing (every variable undefined) or its operator's first character
//! followed by characters that operator can produce: RFC 6570's unreserved
//! characters (plus the reserved ones for `+` and `#`), the separators it
//! puts between values and names, and whole `%XX` triplets. The match is
//! exact for the one-variable forms servers use (`{var}`, `{+var}`,
//! `{/var}`, `{?var}`); with several variables it can accept a separator
//! pattern no expansion produces (names and `=` are not checked
//! one by one), and `:n` lengths are not checked. Literal text must appear
//! byte for byte.
//!
//! Matching walks the URI once per template part (no backtracking), so a
//! hostile template costs time linear in its parts times the URI's length;
//! templates longer than [`MAX_TEMPLATE_LEN`] are refused.

/// The longest template accepted, in bytes.
pub const MAX_TEMPLATE_LEN: usize = 8 * 1024;

/// Why a URI template cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TemplateError {
    /// Longer than [`MAX_TEMPLATE_LEN`].
    #[error("the template is longer than {MAX_TEMPLATE_LEN} bytes")]
    TooLong,
    /// A `{` without its `}`.
    #[error("an expression is not closed: `{{` without `}}`")]
    Unclosed,
    /// A `}` outside an expression.
    #[error("`}}` without `{{`")]
    StrayClose,
    /// An expression RFC 6570 does not allow (empty, a reserved operator,
    /// a bad variable name or modifier).
    #[error("the expression `{{{0}}}` is not RFC 6570")]
    BadExpression(String),
}

/// A parsed template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UriTemplate {
    parts: Vec<Part>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Part {
    Literal(String),
    Expression(Expression),
}

/// What one expression can expand to: nothing, or `lead` (if any)
/// followed by bytes of `allowed` and whole `%XX` triplets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Expression {
    lead: Option<u8>,
    allowed: Set,
}

/// A set of ASCII bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Set(u128);

impl Set {
    const fn of(bytes: &[u8]) -> Set {
        let mut set = 0u128;
        let mut i = 0;
        while i < bytes.len() {
            set |= 1 << bytes[i];
            i += 1;
        }
        Set(set)
    }

    const fn with(self, other: Set) -> Set {
        Set(self.0 | other.0)
    }

    fn contains(self, byte: u8) -> bool {
        byte < 128 && self.0 & (1 << byte) != 0
    }
}

/// RFC 3986 unreserved: `ALPHA / DIGIT / "-" / "." / "_" / "~"`.
const UNRESERVED: Set =
    Set::of(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~");
/// RFC 3986 reserved: gen-delims and sub-delims.
const RESERVED: Set = Set::of(b":/?#[]@!$&'()*+,;=");

impl UriTemplate {
    /// Parses `template`.
    pub fn parse(template: &str) -> Result<UriTemplate, TemplateError> {
        if template.len() > MAX_TEMPLATE_LEN {
            return Err(TemplateError::TooLong);
        }
        let mut parts = Vec::new();
        let mut rest = template;
        while !rest.is_empty() {
            match rest.find(['{', '}']) {
                None => {
                    parts.push(Part::Literal(rest.to_owned()));
                    break;
                }
                Some(at) if rest[at..].starts_with('}') => return Err(TemplateError::StrayClose),
                Some(at) => {
                    if at > 0 {
                        parts.push(Part::Literal(rest[..at].to_owned()));
                    }
                    let inner = &rest[at + 1..];
                    let end = inner.find('}').ok_or(TemplateError::Unclosed)?;
                    parts.push(Part::Expression(Expression::parse(&inner[..end])?));
                    rest = &inner[end + 1..];
                }
            }
        }
        Ok(UriTemplate { parts })
    }

    /// Whether some values of the variables expand the template to `uri`.
    pub fn matches(&self, uri: &str) -> bool {
        let bytes = uri.as_bytes();
        let mut reach = vec![false; bytes.len() + 1];
        let mut next = vec![false; bytes.len() + 1];
        reach[0] = true;
        for part in &self.parts {
            next.fill(false);
            match part {
                Part::Literal(literal) => {
                    let literal = literal.as_bytes();
                    for (at, _) in reach.iter().enumerate().filter(|(_, reached)| **reached) {
                        if bytes[at..].starts_with(literal) {
                            next[at + literal.len()] = true;
                        }
                    }
                }
                Part::Expression(expression) => expression.step(bytes, &reach, &mut next),
            }
            std::mem::swap(&mut reach, &mut next);
            if !reach.contains(&true) {
                return false;
            }
        }
        reach[bytes.len()]
    }
}

impl Expression {
    fn parse(body: &str) -> Result<Expression, TemplateError> {
        let bad = || TemplateError::BadExpression(body.to_owned());
        let (operator, list) = match body.as_bytes().first() {
            Some(&byte @ (b'+' | b'#' | b'.' | b'/' | b';' | b'?' | b'&')) => {
                (Some(byte), &body[1..])
            }
            // Reserved for future extensions by RFC 6570.
            Some(b'=' | b',' | b'!' | b'@' | b'|') => return Err(bad()),
            _ => (None, body),
        };
        let mut explode = false;
        for spec in list.split(',') {
            let name = match spec.split_once(':') {
                Some((name, length)) => {
                    let digits = length.len();
                    if !(1..=4).contains(&digits)
                        || !length.bytes().all(|byte| byte.is_ascii_digit())
                        || length.starts_with('0')
                    {
                        return Err(bad());
                    }
                    name
                }
                None => match spec.strip_suffix('*') {
                    Some(name) => {
                        explode = true;
                        name
                    }
                    None => spec,
                },
            };
            if !is_variable_name(name) {
                return Err(bad());
            }
        }
        // The separators each operator writes between values, and the `=`
        // of exploded (or, for `;?&`, every) name=value pair.
        let equals = if explode { Set::of(b"=") } else { Set(0) };
        let (lead, allowed) = match operator {
            None => (None, UNRESERVED.with(Set::of(b",")).with(equals)),
            Some(b'+') => (None, UNRESERVED.with(RESERVED)),
            Some(b'#') => (Some(b'#'), UNRESERVED.with(RESERVED)),
            Some(b'.') => (Some(b'.'), UNRESERVED.with(Set::of(b",")).with(equals)),
            Some(b'/') => (Some(b'/'), UNRESERVED.with(Set::of(b",/")).with(equals)),
            Some(b';') => (Some(b';'), UNRESERVED.with(Set::of(b",;="))),
            Some(other) => (Some(other), UNRESERVED.with(Set::of(b",&="))),
        };
        Ok(Expression { lead, allowed })
    }

    /// From every reached position, marks where this expression can end.
    fn step(&self, bytes: &[u8], reach: &[bool], next: &mut [bool]) {
        const BOUNDARY: u8 = 1;
        const PERCENT: u8 = 2;
        const HEX: u8 = 4;
        let mut starts = vec![false; reach.len()];
        for (at, _) in reach.iter().enumerate().filter(|(_, reached)| **reached) {
            // Every variable undefined: the expression expands to nothing.
            next[at] = true;
            match self.lead {
                None => starts[at] = true,
                Some(lead) if bytes.get(at) == Some(&lead) => starts[at + 1] = true,
                Some(_) => {}
            }
        }
        // One pass over the URI, keeping every state a value could be in.
        let mut state = 0u8;
        for (at, start) in starts.iter().enumerate() {
            if *start {
                state |= BOUNDARY;
            }
            if state & BOUNDARY != 0 {
                next[at] = true;
            }
            let Some(&byte) = bytes.get(at) else { break };
            let mut after = 0;
            if state & BOUNDARY != 0 && self.allowed.contains(byte) {
                after |= BOUNDARY;
            }
            if state & BOUNDARY != 0 && byte == b'%' {
                after |= PERCENT;
            }
            if state & PERCENT != 0 && byte.is_ascii_hexdigit() {
                after |= HEX;
            }
            if state & HEX != 0 && byte.is_ascii_hexdigit() {
                after |= BOUNDARY;
            }
            state = after;
        }
    }
}

/// RFC 6570 `varname`: `varchar *( ["."] varchar )`, `varchar` being
/// `ALPHA / DIGIT / "_" / pct-encoded`.
fn is_variable_name(name: &str) -> bool {
    let bytes = name.as_bytes();
    let mut at = 0;
    let mut after_dot = true;
    while at < bytes.len() {
        match bytes[at] {
            b'.' if !after_dot => after_dot = true,
            b'%' if bytes.get(at + 1).is_some_and(u8::is_ascii_hexdigit)
                && bytes.get(at + 2).is_some_and(u8::is_ascii_hexdigit) =>
            {
                at += 2;
                after_dot = false;
            }
            byte if byte.is_ascii_alphanumeric() || byte == b'_' => after_dot = false,
            _ => return false,
        }
        at += 1;
    }
    !bytes.is_empty() && !after_dot
}

#[cfg(test)]
mod tests {
    use super::*;

    fn matches(template: &str, uri: &str) -> bool {
        UriTemplate::parse(template)
            .unwrap_or_else(|error| panic!("{template}: {error}"))
            .matches(uri)
    }

    #[test]
    fn a_simple_variable_matches_one_unreserved_or_percent_encoded_value() {
        let template = "demo://git/notes/{id}";
        assert!(matches(template, "demo://git/notes/1"));
        assert!(matches(template, "demo://git/notes/a-b_c.d~e"));
        assert!(matches(template, "demo://git/notes/a%2Fb%20c"));
        // Undefined or empty.
        assert!(matches(template, "demo://git/notes/"));
        // `/`, `?`, `#` and a lone `%` are never produced by `{id}`.
        assert!(!matches(template, "demo://git/notes/a/b"));
        assert!(!matches(template, "demo://git/notes/a?b"));
        assert!(!matches(template, "demo://git/notes/a#b"));
        assert!(!matches(template, "demo://git/notes/100%"));
        assert!(!matches(template, "demo://git/notes/%zz"));
        assert!(!matches(template, "demo://git/notes/é"));
        // Literals match exactly, before and after.
        assert!(!matches(template, "demo://gitx/notes/1"));
        assert!(!matches(template, "demo://git/notes"));
        assert!(matches("demo://{name}/readme", "demo://alpha/readme"));
        assert!(!matches("demo://{name}/readme", "demo://alpha/readme/x"));
        assert!(!matches("demo://{name}/readme", "demo://a/b/readme"));
    }

    #[test]
    fn a_reserved_variable_also_matches_reserved_characters() {
        let template = "file:///{+path}";
        assert!(matches(template, "file:///etc/hosts"));
        assert!(matches(template, "file:///a/b?c=d#e"));
        assert!(matches(template, "file:///a%20b"));
        assert!(!matches(template, "file:///a b"));
        assert!(!matches(template, "file:///a%2"));
        assert!(!matches(template, "file://etc"));
        assert!(matches("{+uri}", "anything:at/all"));
    }

    #[test]
    fn operators_need_their_lead_character() {
        assert!(matches("demo://x{/segments*}", "demo://x/a/b/c"));
        assert!(matches("demo://x{/segments*}", "demo://x"));
        assert!(!matches("demo://x{/segments*}", "demo://xa"));
        assert!(matches(
            "demo://x/search{?q,lang}",
            "demo://x/search?q=rust&lang=en"
        ));
        assert!(matches("demo://x/search{?q,lang}", "demo://x/search"));
        assert!(!matches("demo://x/search{?q}", "demo://x/search&q=1"));
        assert!(!matches("demo://x/search{?q}", "demo://x/search?q=a/b"));
        assert!(matches("demo://x/{a}{&b}", "demo://x/1&b=2"));
        assert!(matches("demo://x{.ext}", "demo://x.tar"));
        assert!(matches("demo://x{;p}", "demo://x;p=1"));
        assert!(matches("demo://x{#frag}", "demo://x#a/b"));
        assert!(matches("demo://{a}-{b}", "demo://1-2"));
        assert!(matches("demo://{a,b}", "demo://1,2"));
        assert!(!matches("demo://{a}", "demo://1,2=3"));
        assert!(matches("demo://{a*}", "demo://k=v,k2=v2"));
        assert!(matches("demo://{name:3}", "demo://abc"));
    }

    #[test]
    fn adjacent_expressions_are_matched_without_backtracking_blowup() {
        let template = "{a}".repeat(2000) + "!";
        let parsed = UriTemplate::parse(&template).expect("parses");
        let uri = "a".repeat(4000);
        let started = std::time::Instant::now();
        assert!(!parsed.matches(&uri));
        assert!(parsed.matches(&(uri + "!")));
        assert!(started.elapsed() < std::time::Duration::from_secs(2));
    }

    #[test]
    fn malformed_templates_are_refused() {
        for bad in [
            "demo://{",
            "demo://}",
            "demo://{}",
            "demo://{=x}",
            "demo://{|x}",
            "demo://{a b}",
            "demo://{a.}",
            "demo://{.}",
            "demo://{a:0}",
            "demo://{a:10000}",
            "demo://{a,}",
            "demo://{a{b}}",
        ] {
            assert!(UriTemplate::parse(bad).is_err(), "{bad}");
        }
        assert_eq!(
            UriTemplate::parse(&"a".repeat(MAX_TEMPLATE_LEN + 1)),
            Err(TemplateError::TooLong)
        );
        assert!(UriTemplate::parse("demo://{a.b%41_c}/{+x}{?y*}").is_ok());
        assert!(matches("demo://no-expressions", "demo://no-expressions"));
        assert!(!matches("demo://no-expressions", "demo://no-expression"));
    }
}
