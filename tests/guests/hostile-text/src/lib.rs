//! Test guest `hostile-text`: Says terminal escapes, CR/LF and bidi overrides
//! everywhere it can (its `describe()` name and version, a log message and
//! its fields, stderr, its rationale and decline message): the host must
//! escape what it prints. With a module config containing `"trap"` it writes
//! the text to stderr and panics (so the failure and its stderr are logged);
//! otherwise it declines.
#![cfg(target_arch = "wasm32")]

use test_guest_helper::{Decision, Level, ModuleInfo, Outcome, ReviewRequest, Reviewer, logging};

/// Retitles the terminal, erases the line, returns the cursor and forges a
/// green second log line; then a C1 CSI (clear screen) and a right-to-left
/// override ("accepted" backwards).
const HOSTILE: &str = "ok\u{1b}]0;pwned\u{7}\u{1b}[2K\rFORGED looks fine: accepted\r\nFORGED \u{1b}[32maccepted\u{1b}[0m \u{9b}2J\u{202e}detpecca";

struct Guest;

impl Reviewer for Guest {
    const NAME: &'static str = "hostile-text";

    fn describe() -> ModuleInfo {
        ModuleInfo {
            name: format!("hostile-text {HOSTILE}"),
            version: format!("0.0.0{HOSTILE}"),
            claims: vec![HOSTILE.to_owned()],
        }
    }

    fn review(config: String, _request: ReviewRequest) -> Outcome {
        logging::log(
            Level::Error,
            HOSTILE,
            &[(format!("key{HOSTILE}"), HOSTILE.to_owned())],
        );
        if config.contains("trap") {
            eprintln!("{HOSTILE}");
            panic!("{HOSTILE}");
        }
        Outcome {
            decision: Decision::Decline(Some(HOSTILE.to_owned())),
            rationale: Some(HOSTILE.to_owned()),
            risk: None,
        }
    }
}

test_guest_helper::export_reviewer!(Guest);
