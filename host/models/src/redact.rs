//! A provider's text made fit for an error or a log: the key cut out,
//! escaped, truncated.

use gatehouse_base::escape::escape;

/// A provider's text made fit for an error and a log: the key cut out,
/// escaped, at most `limit` bytes (and a marker when cut).
pub(super) fn provider_text(text: &str, limit: usize, key: Option<&str>) -> String {
    let redacted = redact(text, key);
    truncate(&escape(&redacted), limit)
}

/// `text` with every occurrence of the key replaced.
pub(super) fn redact(text: &str, key: Option<&str>) -> String {
    match key {
        Some(key) if !key.is_empty() && text.contains(key) => text.replace(key, "[redacted]"),
        _ => text.to_owned(),
    }
}

/// At most `limit` bytes of `text`, cut at a character boundary, with `…`
/// when cut.
pub(super) fn truncate(text: &str, limit: usize) -> String {
    if text.len() <= limit {
        return text.to_owned();
    }
    let mut end = limit;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn truncation_cuts_at_a_character_boundary_and_marks_the_cut() {
        assert_eq!(truncate("ééé", 3), "é…");
        assert_eq!(truncate("abc", 3), "abc");
    }
}
