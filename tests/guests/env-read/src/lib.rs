//! Test guest `env-read`: reads its environment, arguments and working
//! directory on every review, as CPython does when it starts, then defers.
//! It declines with what it found (`env=1 args=0 cwd="/home"`) if anything was
//! there, so a sandbox that leaks the host's environment shows in the outcome.
#![cfg(target_arch = "wasm32")]

use test_guest_helper::{Decision, Outcome, ReviewRequest, Reviewer};

struct Guest;

impl Reviewer for Guest {
    const NAME: &'static str = "env-read";

    fn review(_config: String, _request: ReviewRequest) -> Outcome {
        let env = std::env::vars_os().count();
        let args = std::env::args_os().count();
        // With no initial directory, wasi-libc answers `/`.
        let cwd = std::env::current_dir()
            .map(|dir| dir.display().to_string())
            .unwrap_or_default();
        let decision = if env == 0 && args == 0 && (cwd.is_empty() || cwd == "/") {
            Decision::Defer
        } else {
            Decision::Decline(Some(format!("env={env} args={args} cwd={cwd:?}")))
        };
        Outcome {
            decision,
            rationale: None,
            risk: None,
        }
    }
}

test_guest_helper::export_reviewer!(Guest);
