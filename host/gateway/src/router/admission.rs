//! Fair admission to the review pool. The router may run `concurrent_reviews`
//! chains at once (the sandbox's instance pool); elicitations beyond that
//! wait here, queued per server, and a freed permit goes round-robin to the
//! next server with waiters. A server with one waiting elicitation is
//! therefore admitted after at most one grant to each other waiting server,
//! however many elicitations those have queued: one server's slow or hostile
//! traffic never starves another server's reviews.
//!
//! Cancel-safe: a waiter dropped before its grant leaves its queue (and an
//! emptied queue is removed); a permit granted to a waiter that is dropped
//! before it sees the grant is passed on to the next one.

use std::collections::{HashMap, VecDeque};
use std::sync::{Mutex, MutexGuard, PoisonError};

use tokio::sync::oneshot;

/// The gate: `capacity` permits, handed out round-robin across servers.
#[derive(Debug)]
pub struct Admission {
    state: Mutex<State>,
}

/// The gate's bookkeeping. Invariants: every queue in `queues` is non-empty
/// and its server is in `turns` exactly once (and only those servers are);
/// while anyone waits, `free` is zero.
#[derive(Debug)]
struct State {
    /// Permits nobody holds.
    free: usize,
    /// Who waits, per server, oldest first.
    queues: HashMap<String, VecDeque<Waiter>>,
    /// The servers with waiters, in the order they get their next permit.
    turns: VecDeque<String>,
    /// The next waiter's ticket (unique among the waiters).
    next_ticket: u64,
}

/// One waiting elicitation.
#[derive(Debug)]
struct Waiter {
    /// Identifies the waiter when it leaves its queue early.
    ticket: u64,
    /// Sends it its permit.
    grant: oneshot::Sender<()>,
}

/// One admitted review; the permit goes back to the gate (to the next
/// server in turn) when this is dropped.
#[derive(Debug)]
#[must_use = "the permit is released as soon as it is dropped"]
pub struct Permit<'a> {
    gate: &'a Admission,
}

impl Drop for Permit<'_> {
    fn drop(&mut self) {
        self.gate.lock().hand_on();
    }
}

/// A waiter's place in its queue while `acquire` awaits its grant; dropping
/// it (a cancelled `acquire`) gives the place, or a grant that arrived, up.
struct Waiting<'a, 's> {
    gate: &'a Admission,
    server: &'s str,
    ticket: u64,
    /// `None` once the grant was received (or can no longer come).
    receiver: Option<oneshot::Receiver<()>>,
}

impl Waiting<'_, '_> {
    /// Waits for the grant: `true` when it came, `false` if it never can.
    async fn granted(&mut self) -> bool {
        let Some(receiver) = self.receiver.as_mut() else {
            return false;
        };
        let granted = receiver.await.is_ok();
        self.receiver = None;
        granted
    }
}

impl Drop for Waiting<'_, '_> {
    fn drop(&mut self) {
        let Some(mut receiver) = self.receiver.take() else {
            return;
        };
        let mut state = self.gate.lock();
        if state.leave(self.server, self.ticket) {
            return;
        }
        // Out of the queue already, so the grant was sent: pass it on.
        if receiver.try_recv().is_ok() {
            state.hand_on();
        }
    }
}

impl Admission {
    /// A gate with `capacity` permits (at least one).
    pub fn new(capacity: usize) -> Admission {
        Admission {
            state: Mutex::new(State {
                free: capacity.max(1),
                queues: HashMap::new(),
                turns: VecDeque::new(),
                next_ticket: 0,
            }),
        }
    }

    /// Waits for a permit for one of `server`'s reviews: at once if one is
    /// free, else in `server`'s queue until its turn comes. Cancel-safe.
    pub async fn acquire(&self, server: &str) -> Permit<'_> {
        loop {
            let (ticket, receiver) = {
                let mut state = self.lock();
                if state.free > 0 {
                    state.free -= 1;
                    return Permit { gate: self };
                }
                state.join(server)
            };
            let mut waiting = Waiting {
                gate: self,
                server,
                ticket,
                receiver: Some(receiver),
            };
            if waiting.granted().await {
                return Permit { gate: self };
            }
            // The grant can no longer come (its sender is gone, which the
            // gate never does to a queued waiter): queue again.
        }
    }

    /// The state; a poisoned lock is taken over, since no critical section
    /// leaves the state half-changed.
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl State {
    /// Queues a new waiter for `server`: its ticket and where its grant
    /// arrives.
    fn join(&mut self, server: &str) -> (u64, oneshot::Receiver<()>) {
        let ticket = self.next_ticket;
        self.next_ticket = ticket.wrapping_add(1);
        let (grant, receiver) = oneshot::channel();
        let waiter = Waiter { ticket, grant };
        match self.queues.get_mut(server) {
            Some(queue) => queue.push_back(waiter),
            None => {
                self.queues
                    .insert(server.to_owned(), VecDeque::from([waiter]));
                self.turns.push_back(server.to_owned());
            }
        }
        (ticket, receiver)
    }

    /// Takes the waiter `ticket` out of `server`'s queue (removing the
    /// queue, and the server's turn, when it empties); `false` if it is not
    /// queued (it was granted already).
    fn leave(&mut self, server: &str, ticket: u64) -> bool {
        let Some(queue) = self.queues.get_mut(server) else {
            return false;
        };
        let Some(position) = queue.iter().position(|waiter| waiter.ticket == ticket) else {
            return false;
        };
        queue.remove(position);
        if queue.is_empty() {
            self.queues.remove(server);
            self.turns.retain(|turn| turn != server);
        }
        true
    }

    /// A permit came back: to the oldest waiter of the server whose turn it
    /// is (that server goes to the back of the line if more of its
    /// elicitations wait), or to the free ones if nobody waits.
    fn hand_on(&mut self) {
        while let Some(server) = self.turns.pop_front() {
            let Some(queue) = self.queues.get_mut(&server) else {
                continue;
            };
            let waiter = queue.pop_front();
            if queue.is_empty() {
                self.queues.remove(&server);
            } else {
                self.turns.push_back(server);
            }
            // A waiter whose receiver is gone takes nothing: the next one.
            if let Some(waiter) = waiter
                && waiter.grant.send(()).is_ok()
            {
                return;
            }
        }
        self.free += 1;
    }
}

#[cfg(test)]
mod tests {
    use std::future::Future;
    use std::pin::Pin;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::task::{Context, Poll, Waker};
    use std::time::Duration;

    use super::*;

    /// Polls `future` once, without a runtime.
    fn poll_once<F: Future + Unpin>(future: &mut F) -> Poll<F::Output> {
        let mut context = Context::from_waker(Waker::noop());
        Pin::new(future).poll(&mut context)
    }

    /// The permit `future` holds right away.
    fn ready<'a, F: Future<Output = Permit<'a>> + Unpin>(mut future: F) -> Permit<'a> {
        match poll_once(&mut future) {
            Poll::Ready(permit) => permit,
            Poll::Pending => panic!("a free permit was not granted at once"),
        }
    }

    /// Releases `held`, then each permit granted in turn, and returns the
    /// servers of `waiting` in the order they were granted. Exactly one
    /// waiter must be granted per release.
    fn grant_order<'a, F: Future<Output = Permit<'a>> + Unpin>(
        held: Permit<'a>,
        mut waiting: Vec<(&'static str, F)>,
    ) -> Vec<&'static str> {
        for (server, future) in &mut waiting {
            assert!(poll_once(future).is_pending(), "{server} got in early");
        }
        let mut order = Vec::new();
        let mut held = held;
        while !waiting.is_empty() {
            drop(held);
            let mut granted = Vec::new();
            for (index, (_, future)) in waiting.iter_mut().enumerate() {
                if let Poll::Ready(permit) = poll_once(future) {
                    granted.push((index, permit));
                }
            }
            assert_eq!(granted.len(), 1, "one release, one grant (after {order:?})");
            let (index, permit) = granted.pop().expect("checked above");
            order.push(waiting.remove(index).0);
            held = permit;
        }
        order
    }

    /// The gate's bookkeeping is back to `capacity` free permits and nobody
    /// queued.
    fn assert_idle(gate: &Admission, capacity: usize) {
        let state = gate.lock();
        assert_eq!(state.free, capacity);
        assert!(state.queues.is_empty(), "{:?}", state.queues);
        assert!(state.turns.is_empty(), "{:?}", state.turns);
    }

    #[test]
    fn a_server_behind_a_flood_is_granted_within_two_grants() {
        let gate = Admission::new(1);
        let held = ready(Box::pin(gate.acquire("a")));
        let mut waiting: Vec<_> = (0..50)
            .map(|_| ("a", Box::pin(gate.acquire("a"))))
            .collect();
        waiting.push(("b", Box::pin(gate.acquire("b"))));
        let order = grant_order(held, waiting);
        let b = order.iter().position(|server| *server == "b");
        assert!(b.is_some_and(|b| b < 2), "{order:?}");
        assert_eq!(order.len(), 51);
        assert_idle(&gate, 1);
    }

    #[test]
    fn permits_go_round_robin_across_servers() {
        let gate = Admission::new(1);
        let held = ready(Box::pin(gate.acquire("x")));
        let mut waiting = Vec::new();
        for server in ["a", "b", "c"] {
            for _ in 0..3 {
                waiting.push((server, Box::pin(gate.acquire(server))));
            }
        }
        let order = grant_order(held, waiting);
        assert_eq!(order, ["a", "b", "c", "a", "b", "c", "a", "b", "c"]);
        assert_idle(&gate, 1);
    }

    #[test]
    fn a_waiter_dropped_before_its_grant_leaves_its_queue() {
        let gate = Admission::new(1);
        let held = ready(Box::pin(gate.acquire("a")));
        let mut first = Box::pin(gate.acquire("a"));
        let mut second = Box::pin(gate.acquire("a"));
        let mut other = Box::pin(gate.acquire("b"));
        for future in [&mut first, &mut second, &mut other] {
            assert!(poll_once(future).is_pending());
        }
        drop(first);
        drop(other);
        {
            let state = gate.lock();
            assert_eq!(state.queues.len(), 1, "b's emptied queue is removed");
            assert_eq!(state.turns, ["a"]);
            assert_eq!(state.queues.get("a").map(VecDeque::len), Some(1));
        }
        drop(held);
        let permit = ready(second);
        drop(permit);
        assert_idle(&gate, 1);
    }

    #[test]
    fn a_grant_to_a_dropped_waiter_is_passed_on() {
        let gate = Admission::new(1);
        let held = ready(Box::pin(gate.acquire("a")));
        let mut granted = Box::pin(gate.acquire("a"));
        let mut next = Box::pin(gate.acquire("b"));
        assert!(poll_once(&mut granted).is_pending());
        assert!(poll_once(&mut next).is_pending());
        // The grant is sent to `granted`, which is dropped before it sees it.
        drop(held);
        drop(granted);
        let permit = ready(next);
        drop(permit);
        assert_idle(&gate, 1);
    }

    /// Counts one permit holder out when dropped.
    struct Holding<'a>(&'a AtomicUsize);

    impl Drop for Holding<'_> {
        fn drop(&mut self) {
            self.0.fetch_sub(1, Ordering::SeqCst);
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn capacity_is_never_exceeded_and_nothing_leaks() {
        const CAPACITY: usize = 3;
        let gate = Arc::new(Admission::new(CAPACITY));
        let holding = Arc::new(AtomicUsize::new(0));
        let most = Arc::new(AtomicUsize::new(0));
        let mut tasks = Vec::new();
        for index in 0..80_usize {
            let (gate, holding, most) = (gate.clone(), holding.clone(), most.clone());
            tasks.push(tokio::spawn(async move {
                let server = ["a", "b", "c", "d"][index % 4];
                let hold = async {
                    let _permit = gate.acquire(server).await;
                    let now = holding.fetch_add(1, Ordering::SeqCst) + 1;
                    // Counted out before the permit goes, even if cancelled.
                    let _holding = Holding(&holding);
                    most.fetch_max(now, Ordering::SeqCst);
                    tokio::time::sleep(Duration::from_millis(2)).await;
                };
                if index % 3 == 0 {
                    // Some give up while queued (or while holding).
                    let _ = tokio::time::timeout(Duration::from_millis(3), hold).await;
                } else {
                    hold.await;
                }
            }));
        }
        for task in tasks {
            task.await.expect("task");
        }
        let most = most.load(Ordering::SeqCst);
        assert!((1..=CAPACITY).contains(&most), "{most} held at once");
        assert_idle(&gate, CAPACITY);
    }
}
