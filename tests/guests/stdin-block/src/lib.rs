//! Test guest `stdin-block`: waits for input on stdin (a blocking read, then
//! its pollable), forever, then tries the other blocking stream calls on
//! stdout and stderr: the review must still end at its deadline.
#![cfg(target_arch = "wasm32")]

use test_guest_helper::{Decision, Outcome, ReviewRequest, Reviewer};
use wasip2::cli::{stderr, stdin, stdout};

struct Guest;

impl Reviewer for Guest {
    const NAME: &'static str = "stdin-block";

    fn review(_config: String, _request: ReviewRequest) -> Outcome {
        let input = stdin::get_stdin();
        let output = stdout::get_stdout();
        let errors = stderr::get_stderr();
        let mut read = 0usize;
        loop {
            if let Ok(bytes) = input.blocking_read(1 << 16) {
                read += bytes.len();
            }
            let _ = input.blocking_skip(1 << 16);
            input.subscribe().block();
            let _ = output.blocking_write_and_flush(b"waiting\n");
            let _ = output.blocking_flush();
            let _ = errors.blocking_write_zeroes_and_flush(4096);
            let _ = output.blocking_splice(&input, 1 << 16);
            if std::hint::black_box(read) == usize::MAX {
                break;
            }
        }
        Outcome {
            decision: Decision::Accept(Some("{}".to_owned())),
            rationale: Some("read stdin".to_owned()),
            risk: None,
        }
    }
}

test_guest_helper::export_reviewer!(Guest);
