//! A model's spending budget: at most so many calls and so many tokens in a
//! sliding time window, shared by every module granted that model
//! ([`ModelGrant::with_budget`](crate::model::ModelGrant::with_budget)).
//!
//! A call is admitted ([`BudgetLedger::admit`]) before it is sent and counts
//! from then on, whether it answers or fails; when it returns, each retry
//! counts as a call more ([`BudgetLedger::retried`]) and its tokens are
//! counted ([`BudgetLedger::spent`]): the tokens the provider reported for
//! the answer, or, when it reported none, an estimate of a token per four
//! bytes of prompt and answer, and the prompt's estimate for each failed
//! attempt. A call is refused while the window already holds the most calls
//! or at least the most tokens, so the token limit can be passed by at most
//! the calls in flight when it is reached (each bounded by the grant's
//! `max_output_tokens` and the prompt caps). A refused call is answered
//! [`ModelError::OverBudget`](crate::model::ModelError::OverBudget), naming
//! the limit; modules fail closed on it.
//!
//! ```
//! use std::time::{Duration, Instant};
//! use gatehouse_core::model_budget::{BudgetLedger, ModelBudget};
//! let ledger = BudgetLedger::new(ModelBudget::new(2, 1_000, Duration::from_secs(60)));
//! let now = Instant::now();
//! assert!(ledger.admit("review", now).is_ok());
//! ledger.spent(300, now);
//! assert!(ledger.admit("review", now).is_ok());
//! let refused = ledger.admit("review", now).unwrap_err();
//! assert!(refused.contains("2 calls"), "{refused}");
//! // A minute later the window is empty again.
//! assert!(ledger.admit("review", now + Duration::from_secs(61)).is_ok());
//! ```

use std::collections::VecDeque;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

/// The default calls per window: 600 an hour, one every six seconds on
/// average, far above what a person's agents ask for approval, far below what
/// a runaway server could make a model answer.
pub const DEFAULT_BUDGET_CALLS: u32 = 600;
/// The default tokens per window (prompt and answer): 2,000,000 an hour,
/// some 3,300 a call at the default call limit.
pub const DEFAULT_BUDGET_TOKENS: u64 = 2_000_000;
/// The default window: an hour.
pub const DEFAULT_BUDGET_WINDOW: Duration = Duration::from_secs(3600);

/// The limits of one model's budget. Build with [`ModelBudget::new`]; the
/// [`Default`] is 600 calls and 2,000,000 tokens an hour.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ModelBudget {
    calls: u32,
    tokens: u64,
    window: Duration,
}

impl Default for ModelBudget {
    fn default() -> Self {
        ModelBudget {
            calls: DEFAULT_BUDGET_CALLS,
            tokens: DEFAULT_BUDGET_TOKENS,
            window: DEFAULT_BUDGET_WINDOW,
        }
    }
}

impl ModelBudget {
    /// At most `calls` calls and `tokens` tokens in any `window` (a call
    /// limit of 0 refuses every call; a window under a second is a second).
    pub fn new(calls: u32, tokens: u64, window: Duration) -> Self {
        ModelBudget {
            calls,
            tokens,
            window: window.max(Duration::from_secs(1)),
        }
    }
    /// The most calls in a window.
    pub fn calls(&self) -> u32 {
        self.calls
    }
    /// The most tokens in a window.
    pub fn tokens(&self) -> u64 {
        self.tokens
    }
    /// The window.
    pub fn window(&self) -> Duration {
        self.window
    }
}

/// What one model has spent in its window. Shared (behind an `Arc`) by every
/// grant of the model; cheap to consult, memory bounded by the call limit.
#[derive(Debug)]
pub struct BudgetLedger {
    budget: ModelBudget,
    spent: Mutex<Spent>,
}

#[derive(Debug, Default)]
struct Spent {
    /// When each call in the window was admitted, oldest first.
    calls: VecDeque<Instant>,
    /// When each returned call's tokens were counted, and how many.
    tokens: VecDeque<(Instant, u64)>,
    /// The sum of `tokens`.
    token_sum: u64,
}

impl Spent {
    fn forget_before(&mut self, start: Option<Instant>) {
        let Some(start) = start else { return };
        while self.calls.front().is_some_and(|at| *at <= start) {
            self.calls.pop_front();
        }
        while let Some(&(at, tokens)) = self.tokens.front() {
            if at > start {
                break;
            }
            self.token_sum = self.token_sum.saturating_sub(tokens);
            self.tokens.pop_front();
        }
    }
}

impl BudgetLedger {
    /// An empty ledger for `budget`.
    pub fn new(budget: ModelBudget) -> Self {
        BudgetLedger {
            budget,
            spent: Mutex::new(Spent::default()),
        }
    }

    /// The budget.
    pub fn budget(&self) -> ModelBudget {
        self.budget
    }

    /// Admits one call of model `name` at `now`, or says which limit refuses
    /// it (`[models.NAME] budget.calls: ...`).
    pub fn admit(&self, name: &str, now: Instant) -> Result<(), String> {
        let budget = self.budget;
        let mut spent = self.spent.lock().unwrap_or_else(PoisonError::into_inner);
        spent.forget_before(now.checked_sub(budget.window));
        let window = humanize(budget.window);
        if spent.calls.len() >= budget.calls as usize {
            return Err(format!(
                "[models.{name}] budget.calls: the model answered its limit of {} calls in the last {window}",
                budget.calls
            ));
        }
        if spent.token_sum >= budget.tokens {
            return Err(format!(
                "[models.{name}] budget.tokens: the model spent {} of its {} tokens in the last {window}",
                spent.token_sum, budget.tokens
            ));
        }
        spent.calls.push_back(now);
        Ok(())
    }

    /// What the window still allows at `now`: calls, then tokens (0 once a
    /// limit is reached).
    ///
    /// ```
    /// use std::time::{Duration, Instant};
    /// use gatehouse_core::model_budget::{BudgetLedger, ModelBudget};
    ///
    /// let ledger = BudgetLedger::new(ModelBudget::new(10, 1000, Duration::from_secs(60)));
    /// let now = Instant::now();
    /// ledger.admit("m", now).unwrap();
    /// ledger.spent(250, now);
    /// assert_eq!(ledger.remaining(now), (9, 750));
    /// ```
    pub fn remaining(&self, now: Instant) -> (u32, u64) {
        let budget = self.budget;
        let mut spent = self.spent.lock().unwrap_or_else(PoisonError::into_inner);
        spent.forget_before(now.checked_sub(budget.window));
        let calls = u32::try_from(spent.calls.len()).unwrap_or(u32::MAX);
        (
            budget.calls.saturating_sub(calls),
            budget.tokens.saturating_sub(spent.token_sum),
        )
    }

    /// Counts `retries` more requests an admitted call made (its attempts
    /// past the first), at `now`: each costs the budget a call.
    pub fn retried(&self, retries: u32, now: Instant) {
        if retries == 0 {
            return;
        }
        let mut spent = self.spent.lock().unwrap_or_else(PoisonError::into_inner);
        spent.forget_before(now.checked_sub(self.budget.window));
        spent
            .calls
            .extend(std::iter::repeat_n(now, retries as usize));
    }

    /// Counts `tokens` spent by a call that returned at `now`.
    pub fn spent(&self, tokens: u64, now: Instant) {
        if tokens == 0 {
            return;
        }
        let mut spent = self.spent.lock().unwrap_or_else(PoisonError::into_inner);
        spent.forget_before(now.checked_sub(self.budget.window));
        spent.token_sum = spent.token_sum.saturating_add(tokens);
        spent.tokens.push_back((now, tokens));
    }
}

/// `window` as an operator wrote it: `1h`, `10m`, `90s`.
fn humanize(window: Duration) -> String {
    let seconds = window.as_secs();
    if seconds.is_multiple_of(3600) {
        format!("{}h", seconds / 3600)
    } else if seconds.is_multiple_of(60) {
        format!("{}m", seconds / 60)
    } else {
        format!("{seconds}s")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calls_past_the_limit_are_refused_until_the_window_moves_on() {
        let ledger = BudgetLedger::new(ModelBudget::new(3, u64::MAX, Duration::from_secs(60)));
        let start = Instant::now();
        for second in 0..3 {
            assert!(
                ledger
                    .admit("m", start + Duration::from_secs(second))
                    .is_ok()
            );
        }
        let refused = ledger
            .admit("m", start + Duration::from_secs(59))
            .unwrap_err();
        assert_eq!(
            refused,
            "[models.m] budget.calls: the model answered its limit of 3 calls in the last 1m"
        );
        // The first call leaves the window 60 s after it was made: one more
        // fits, and the next is refused again.
        let later = start + Duration::from_millis(60_500);
        assert!(ledger.admit("m", later).is_ok());
        assert!(ledger.admit("m", later).is_err());
    }

    #[test]
    fn tokens_past_the_limit_refuse_the_next_call() {
        let ledger = BudgetLedger::new(ModelBudget::new(100, 1_000, Duration::from_secs(3600)));
        let start = Instant::now();
        assert!(ledger.admit("m", start).is_ok());
        ledger.spent(999, start);
        assert!(ledger.admit("m", start).is_ok());
        ledger.spent(1, start);
        let refused = ledger.admit("m", start).unwrap_err();
        assert_eq!(
            refused,
            "[models.m] budget.tokens: the model spent 1000 of its 1000 tokens in the last 1h"
        );
        assert!(ledger.admit("m", start + Duration::from_secs(3601)).is_ok());
    }

    #[test]
    fn retries_count_as_calls() {
        let ledger = BudgetLedger::new(ModelBudget::new(3, u64::MAX, Duration::from_secs(60)));
        let now = Instant::now();
        assert!(ledger.admit("m", now).is_ok());
        // That call took three attempts: the budget is spent.
        ledger.retried(2, now);
        assert!(ledger.admit("m", now).is_err());
    }

    #[test]
    fn a_zero_call_limit_refuses_everything() {
        let ledger = BudgetLedger::new(ModelBudget::new(0, 1, Duration::ZERO));
        assert_eq!(ledger.budget().window(), Duration::from_secs(1));
        assert!(ledger.admit("m", Instant::now()).is_err());
    }
}
