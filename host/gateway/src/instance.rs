//! The instance id of a `gatehouse serve` process: eight random hex
//! digits, made once at start. Several instances may serve one config (a
//! client starts one per session, a health check one more); the id names an
//! instance's control socket (`.gatehouse/control/<id>.sock`) and every
//! audit line it writes, so that `gatehouse reload` can reach each one and
//! lines sharing one log can be told apart (session ids are per instance).

/// A new instance id: eight lowercase hex digits from the OS's random
/// source (the process id and time if that fails).
///
/// ```
/// let id = gatehouse_gateway::instance::new_id();
/// assert!(gatehouse_gateway::instance::is_id(&id));
/// ```
pub fn new_id() -> String {
    let bits = getrandom::u32().unwrap_or_else(|_| {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |elapsed| elapsed.subsec_nanos());
        std::process::id().rotate_left(16) ^ nanos
    });
    format!("{bits:08x}")
}

/// Whether `text` is an instance id as [`new_id`] makes them (what
/// `gatehouse reload --instance` accepts, and the only socket names it
/// considers).
pub fn is_id(text: &str) -> bool {
    text.len() == 8
        && text
            .bytes()
            .all(|byte| byte.is_ascii_digit() || (b'a'..=b'f').contains(&byte))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_eight_hex_digits_and_differ() {
        let (a, b) = (new_id(), new_id());
        assert!(is_id(&a) && is_id(&b), "{a} {b}");
        assert_ne!(a, b);
        assert!(!is_id("0123456"));
        assert!(!is_id("0123456G"));
        assert!(!is_id("../../x1"));
    }
}
