//! Test guest `scatter`: each review first checks 128 bytes, one every other
//! 4 KiB page of a zeroed static buffer, then writes them all. Every write is
//! its own dirty region (wasmtime 48's in-place reset collects 32 at a time),
//! so a slot reset that misses any region shows up in the next review: it
//! declines with how many it found still written.
#![cfg(target_arch = "wasm32")]

use std::cell::UnsafeCell;

use test_guest_helper::{Decision, Outcome, ReviewRequest, Reviewer};

const PAGE: usize = 4096;
const SPOTS: usize = 128;

struct Buffer(UnsafeCell<[u8; 2 * SPOTS * PAGE]>);

// SAFETY: a component instance runs one call at a time, on one thread.
unsafe impl Sync for Buffer {}

static BUFFER: Buffer = Buffer(UnsafeCell::new([0; 2 * SPOTS * PAGE]));

struct Guest;

impl Reviewer for Guest {
    const NAME: &'static str = "scatter";

    fn review(_config: String, _request: ReviewRequest) -> Outcome {
        let buffer = BUFFER.0.get();
        let mut left = 0;
        for spot in 0..SPOTS {
            let offset = spot * 2 * PAGE;
            // SAFETY: in bounds; nothing else touches the buffer meanwhile.
            unsafe {
                let byte = std::ptr::read_volatile((*buffer).as_ptr().add(offset));
                if byte != 0 {
                    left += 1;
                }
                std::ptr::write_volatile((*buffer).as_mut_ptr().add(offset), 0xa5);
            }
        }
        Outcome {
            decision: if left == 0 {
                Decision::Defer
            } else {
                Decision::Decline(Some(format!("{left} of {SPOTS} writes left")))
            },
            rationale: None,
            risk: None,
        }
    }
}

test_guest_helper::export_reviewer!(Guest);
