//! The wait between two attempts: an exponential backoff with jitter, or
//! the provider's `Retry-After` when it names a longer one.

use std::time::Duration;

use reqwest::header::{HeaderMap, RETRY_AFTER};

/// The first backoff between attempts (before jitter); it doubles after
/// every attempt.
pub const BACKOFF_BASE: Duration = Duration::from_millis(250);
/// The longest backoff between attempts (before jitter).
pub const BACKOFF_MAX: Duration = Duration::from_secs(8);

/// The longest `Retry-After` taken as a number (a longer one cannot fit a
/// review's budget anyway).
const MAX_RETRY_AFTER: Duration = Duration::from_secs(3600);

/// The backoff before attempt `attempt + 1`: [`BACKOFF_BASE`] doubled per
/// attempt up to [`BACKOFF_MAX`], then between half and all of that by
/// `jitter` (0..1; "equal jitter").
pub(super) fn backoff(attempt: u32, jitter: f64) -> Duration {
    let doublings = attempt.saturating_sub(1).min(16);
    let full = BACKOFF_BASE.saturating_mul(1 << doublings).min(BACKOFF_MAX);
    let jitter = if jitter.is_finite() {
        jitter.clamp(0.0, 1.0)
    } else {
        0.5
    };
    full / 2 + (full / 2).mul_f64(jitter)
}

/// A uniform number in 0..1 for the backoff's jitter.
pub(super) fn jitter() -> f64 {
    // 53 random bits make an f64 in 0..1 exactly.
    getrandom::u64().map_or(0.5, |bits| (bits >> 11) as f64 / (1u64 << 53) as f64)
}

/// `Retry-After` as a number of seconds (an HTTP date is ignored).
pub(super) fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    let seconds: u64 = headers
        .get(RETRY_AFTER)?
        .to_str()
        .ok()?
        .trim()
        .parse()
        .ok()?;
    Some(Duration::from_secs(seconds).min(MAX_RETRY_AFTER))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_within_its_jitter_and_stops_at_the_cap() {
        for (attempt, full) in [
            (1, 250),
            (2, 500),
            (3, 1000),
            (4, 2000),
            (5, 4000),
            (6, 8000),
            (7, 8000),
        ] {
            let full = Duration::from_millis(full);
            assert_eq!(backoff(attempt, 0.0), full / 2, "attempt {attempt}");
            assert_eq!(backoff(attempt, 1.0), full, "attempt {attempt}");
            let middle = backoff(attempt, 0.5);
            assert!(
                middle > full / 2 && middle < full,
                "attempt {attempt}: {middle:?}"
            );
        }
        for attempt in [0, 40, u32::MAX] {
            assert!(backoff(attempt, 1.0) <= BACKOFF_MAX, "attempt {attempt}");
        }
        for wild in [-1.0, 2.0, f64::NAN, f64::INFINITY] {
            let delay = backoff(2, wild);
            assert!(
                delay >= Duration::from_millis(250) && delay <= Duration::from_millis(500),
                "{wild}"
            );
        }
        for _ in 0..100 {
            let jitter = jitter();
            assert!((0.0..1.0).contains(&jitter), "{jitter}");
        }
    }
}
