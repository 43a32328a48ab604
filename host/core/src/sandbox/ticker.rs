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

use std::sync::mpsc::{self, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use wasmtime::Engine;

/// The start times of the reviews in flight, by slot.
#[derive(Debug, Default)]
pub(crate) struct InFlight {
    slots: Mutex<Slots>,
}

#[derive(Debug, Default)]
struct Slots {
    starts: Vec<Option<Instant>>,
    free: Vec<usize>,
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
    fn oldest(&self) -> Option<Instant> {
        self.lock().starts.iter().flatten().min().copied()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Slots> {
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
pub(crate) struct EpochTicker {
    stop: Option<Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl EpochTicker {
    /// Watches `in_flight` for reviews older than `deadline`; `tick` is the
    /// interval between interruptions while one is overdue.
    pub(crate) fn start(
        engine: Engine,
        in_flight: Arc<InFlight>,
        deadline: Duration,
        tick: Duration,
    ) -> std::io::Result<EpochTicker> {
        let (stop, stopped) = mpsc::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("gatehouse-epoch".to_owned())
            .spawn(move || {
                loop {
                    let now = Instant::now();
                    let wake = match in_flight.oldest() {
                        Some(started) if now.duration_since(started) >= deadline => {
                            engine.increment_epoch();
                            now + tick
                        }
                        Some(started) => started + deadline,
                        None => now + deadline,
                    };
                    match stopped.recv_timeout(wake.saturating_duration_since(now)) {
                        Err(RecvTimeoutError::Timeout) => {}
                        Ok(()) | Err(RecvTimeoutError::Disconnected) => return,
                    }
                }
            })?;
        Ok(EpochTicker {
            stop: Some(stop),
            thread: Some(thread),
        })
    }
}

impl Drop for EpochTicker {
    fn drop(&mut self) {
        drop(self.stop.take());
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
