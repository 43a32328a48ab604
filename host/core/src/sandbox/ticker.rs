//! Deadlines: the reviews in flight, and a thread that advances the engine's
//! epoch when one of them reaches its deadline, which is what interrupts it.
//!
//! Every store's epoch deadline is the next epoch, and its deadline callback
//! ([`Deadline::passed`]) traps once the review's own deadline has passed and
//! otherwise waits for the epoch after. Reviews of different modules may have
//! different deadlines ([`ModuleLimits`](super::ModuleLimits)): the registry
//! holds when each is due. The thread sleeps until the earliest of them (or
//! for the sandbox's deadline when none is in flight), advances the epoch when
//! it has passed, and looks again a tick later while a review is overdue. A
//! review that enters due before the thread's next look wakes it; with one
//! deadline for all that never happens, so a sandbox reviewing quickly is
//! woken a few times a deadline, not at every review or tick: each wake-up
//! costs whichever review is running on that CPU.
//!
//! A review waiting on its model is paused: out of the registry, its clock
//! stopped. Resuming puts it back with the time it had used, so its deadline
//! may be earlier than the thread's next wake-up: resuming wakes the thread
//! to look again.

use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use wasmtime::Engine;

/// When each review in flight is due, by slot.
#[derive(Debug, Default)]
pub(crate) struct InFlight {
    slots: Mutex<Slots>,
    /// Wakes the deadline thread: a review due before its next look, or the
    /// end.
    changed: Condvar,
}

#[derive(Debug, Default)]
struct Slots {
    due: Vec<Option<Instant>>,
    free: Vec<usize>,
    /// When the deadline thread looks next (`None` while it is looking).
    next_look: Option<Instant>,
    /// Set when the ticker is dropped: the thread ends.
    stopped: bool,
}

impl Slots {
    /// Marks `slot` due at `due`; says whether the deadline thread must be
    /// woken to see it in time.
    fn set_due(&mut self, slot: usize, due: Instant) -> bool {
        self.due[slot] = Some(due);
        self.next_look.is_some_and(|look| due < look)
    }
}

impl InFlight {
    /// Registers a review starting now; it stays in flight until the
    /// [`Deadline`] is dropped.
    pub(crate) fn enter(self: &Arc<Self>, limit: Duration) -> Deadline {
        let started = Instant::now();
        let mut slots = self.lock();
        let slot = slots.free.pop().unwrap_or_else(|| {
            slots.due.push(None);
            slots.due.len() - 1
        });
        let wake = slots.set_due(slot, started + limit);
        drop(slots);
        if wake {
            self.changed.notify_all();
        }
        Deadline {
            in_flight: self.clone(),
            slot,
            started,
            limit,
        }
    }

    /// When the first review in flight is due, if any is.
    #[cfg(test)]
    fn earliest(&self) -> Option<Instant> {
        earliest(&self.lock())
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

    /// Stops the clock while the guest waits on the host (its model): the
    /// review leaves the in-flight registry, so the ticker does not end it
    /// for time it did not spend running. Returns the time used so far, for
    /// [`resume`](Self::resume).
    pub(crate) fn pause(&mut self) -> Duration {
        let used = self.started.elapsed();
        self.in_flight.lock().due[self.slot] = None;
        used
    }

    /// Starts the clock again with `used` already spent.
    pub(crate) fn resume(&mut self, used: Duration) {
        let now = Instant::now();
        self.started = now.checked_sub(used).unwrap_or(now);
        self.mark_due();
    }

    /// Starts the deadline again from now.
    pub(crate) fn restart(&mut self) {
        self.started = Instant::now();
        self.mark_due();
    }

    /// Puts the review's due time in the registry, waking the deadline
    /// thread if it would look too late.
    fn mark_due(&self) {
        let wake = self
            .in_flight
            .lock()
            .set_due(self.slot, self.started + self.limit);
        if wake {
            self.in_flight.changed.notify_all();
        }
    }
}

impl Drop for Deadline {
    fn drop(&mut self) {
        let mut slots = self.in_flight.lock();
        slots.due[self.slot] = None;
        slots.free.push(self.slot);
    }
}

fn earliest(slots: &Slots) -> Option<Instant> {
    slots.due.iter().flatten().min().copied()
}

/// The thread that advances the epoch; stops and joins it when dropped.
pub(crate) struct EpochTicker {
    in_flight: Arc<InFlight>,
    thread: Option<JoinHandle<()>>,
}

impl EpochTicker {
    /// Starts the thread: `idle` is how long it sleeps with no review in
    /// flight (the sandbox's deadline), `tick` how soon it looks again while
    /// one is overdue.
    pub(crate) fn start(
        engine: Engine,
        in_flight: Arc<InFlight>,
        idle: Duration,
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
                    let wake = match earliest(&slots) {
                        Some(due) if now >= due => {
                            engine.increment_epoch();
                            now + tick
                        }
                        Some(due) => due,
                        None => now + idle,
                    };
                    slots.next_look = Some(wake);
                    slots = shared
                        .changed
                        .wait_timeout(slots, wake.saturating_duration_since(now))
                        .map(|(slots, _)| slots)
                        .unwrap_or_else(|poisoned| poisoned.into_inner().0);
                    slots.next_look = None;
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
        let limit = Duration::from_millis(50);
        assert_eq!(in_flight.earliest(), None);
        let first = in_flight.enter(limit);
        let mut second = in_flight.enter(limit);
        assert_eq!(in_flight.earliest(), Some(first.started + limit));
        drop(first);
        assert_eq!(in_flight.earliest(), Some(second.started + limit));
        second.restart();
        assert_eq!(in_flight.earliest(), Some(second.started + limit));
        // A freed slot is reused.
        let third = in_flight.enter(Duration::ZERO);
        assert_eq!(in_flight.lock().due.len(), 2);
        assert!(third.passed());
        assert!(!second.passed());
        assert_eq!(in_flight.earliest(), Some(third.started));
        drop((second, third));
        assert_eq!(in_flight.earliest(), None);
    }

    #[test]
    fn a_review_due_before_the_next_look_asks_for_a_wake_up() {
        let in_flight = Arc::new(InFlight::default());
        let later = Instant::now() + Duration::from_secs(60);
        in_flight.lock().next_look = Some(later);
        let long = in_flight.enter(Duration::from_secs(120));
        assert!(
            !in_flight
                .lock()
                .set_due(long.slot, long.started + long.limit)
        );
        let short = in_flight.enter(Duration::from_millis(5));
        assert!(
            in_flight
                .lock()
                .set_due(short.slot, short.started + short.limit)
        );
        // While the thread is looking, nobody wakes it.
        in_flight.lock().next_look = None;
        assert!(!in_flight.lock().set_due(short.slot, short.started));
    }
}
