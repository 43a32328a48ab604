//! Deadlines: the reviews in flight, and a thread that advances the engine's
//! epoch when one of them reaches its deadline, which is what interrupts it.
//!
//! Every store's epoch deadline is the next epoch, and its deadline callback
//! ([`Deadline::passed`]) traps once the review's own deadline has passed and
//! otherwise waits for the epoch after. The thread sleeps until the earliest
//! deadline among the reviews in flight (or for one deadline when there are
//! none, so that a review starting meanwhile is seen before its deadline),
//! advances the epoch when that deadline has passed, and looks again a tick
//! later while a review is overdue. A sandbox reviewing quickly is woken a few
//! times a deadline, not at every tick: each wake-up costs whichever review is
//! running on that CPU.
//!
//! A review waiting on its model is paused: out of the registry, its clock
//! stopped. Resuming puts it back with the time it had used, so its deadline
//! may be earlier than the thread's next wake-up: resuming wakes the thread
//! to look again.

use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use wasmtime::Engine;

/// The start times of the reviews in flight, by slot.
#[derive(Debug, Default)]
pub(crate) struct InFlight {
    slots: Mutex<Slots>,
    /// Wakes the deadline thread: a resumed review, or the end.
    changed: Condvar,
}

#[derive(Debug, Default)]
struct Slots {
    starts: Vec<Option<Instant>>,
    free: Vec<usize>,
    /// Set when the ticker is dropped: the thread ends.
    stopped: bool,
}

impl InFlight {
    /// Registers a review starting now; it stays in flight until the
    /// [`Deadline`] is dropped.
    pub(crate) fn enter(self: &Arc<Self>, limit: Duration) -> Deadline {
        let started = Instant::now();
        let mut slots = self.lock();
        let slot = match slots.free.pop() {
            Some(slot) => {
                slots.starts[slot] = Some(started);
                slot
            }
            None => {
                slots.starts.push(Some(started));
                slots.starts.len() - 1
            }
        };
        drop(slots);
        Deadline {
            in_flight: self.clone(),
            slot,
            started,
            limit,
        }
    }

    /// When the review in flight longest started, if any is.
    #[cfg(test)]
    fn oldest(&self) -> Option<Instant> {
        oldest(&self.lock())
    }

    fn lock(&self) -> MutexGuard<'_, Slots> {
        // The slots are consistent between statements; a panic elsewhere
        // does not make them wrong.
        self.slots.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// One review's deadline, registered in flight while it lives.
#[derive(Debug)]
pub(crate) struct Deadline {
    in_flight: Arc<InFlight>,
    slot: usize,
    started: Instant,
    limit: Duration,
}

impl Deadline {
    /// Whether the review has run for its whole deadline.
    pub(crate) fn passed(&self) -> bool {
        self.started.elapsed() >= self.limit
    }

    /// How long the review may still run (zero once it has passed).
    pub(crate) fn remaining(&self) -> Duration {
        self.limit.saturating_sub(self.started.elapsed())
    }

    /// Starts the deadline again from now.
    /// Stops the clock while the guest waits on the host (its model): the
    /// review leaves the in-flight registry, so the ticker does not end it
    /// for time it did not spend running. Returns the time used so far, for
    /// [`resume`](Self::resume).
    pub(crate) fn pause(&mut self) -> Duration {
        let used = self.started.elapsed();
        self.in_flight.lock().starts[self.slot] = None;
        used
    }

    /// Starts the clock again with `used` already spent.
    pub(crate) fn resume(&mut self, used: Duration) {
        let now = Instant::now();
        self.started = now.checked_sub(used).unwrap_or(now);
        self.in_flight.lock().starts[self.slot] = Some(self.started);
        // Its deadline may come before the thread's next look.
        self.in_flight.changed.notify_all();
    }

    pub(crate) fn restart(&mut self) {
        self.started = Instant::now();
        self.in_flight.lock().starts[self.slot] = Some(self.started);
    }
}

impl Drop for Deadline {
    fn drop(&mut self) {
        let mut slots = self.in_flight.lock();
        slots.starts[self.slot] = None;
        slots.free.push(self.slot);
    }
}

/// The thread that advances the epoch; stops and joins it when dropped.
fn oldest(slots: &Slots) -> Option<Instant> {
    slots.starts.iter().flatten().min().copied()
}

pub(crate) struct EpochTicker {
    in_flight: Arc<InFlight>,
    thread: Option<JoinHandle<()>>,
}

impl EpochTicker {
    pub(crate) fn start(
        engine: Engine,
        in_flight: Arc<InFlight>,
        deadline: Duration,
        tick: Duration,
    ) -> std::io::Result<EpochTicker> {
        let shared = in_flight.clone();
        let thread = std::thread::Builder::new()
            .name("gatehouse-epoch".to_owned())
            .spawn(move || {
                let mut slots = shared.lock();
                loop {
                    if slots.stopped {
                        return;
                    }
                    let now = Instant::now();
                    let wake = match oldest(&slots) {
                        Some(started) if now.duration_since(started) >= deadline => {
                            engine.increment_epoch();
                            now + tick
                        }
                        Some(started) => started + deadline,
                        None => now + deadline,
                    };
                    slots = shared
                        .changed
                        .wait_timeout(slots, wake.saturating_duration_since(now))
                        .map(|(slots, _)| slots)
                        .unwrap_or_else(|poisoned| poisoned.into_inner().0);
                }
            })?;
        Ok(EpochTicker {
            in_flight,
            thread: Some(thread),
        })
    }
}

impl Drop for EpochTicker {
    fn drop(&mut self) {
        self.in_flight.lock().stopped = true;
        self.in_flight.changed.notify_all();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reviews_in_flight_come_and_go() {
        let in_flight = Arc::new(InFlight::default());
        assert_eq!(in_flight.oldest(), None);
        let first = in_flight.enter(Duration::from_millis(50));
        let mut second = in_flight.enter(Duration::from_millis(50));
        assert_eq!(in_flight.oldest(), Some(first.started));
        drop(first);
        assert_eq!(in_flight.oldest(), Some(second.started));
        second.restart();
        assert_eq!(in_flight.oldest(), Some(second.started));
        // A freed slot is reused.
        let third = in_flight.enter(Duration::ZERO);
        assert_eq!(in_flight.lock().starts.len(), 2);
        assert!(third.passed());
        assert!(!second.passed());
        drop((second, third));
        assert_eq!(in_flight.oldest(), None);
    }
}
