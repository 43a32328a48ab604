//! Nearest-rank percentiles, the one definition `gatehouse bench` and
//! `gatehouse audit --stats` both report.

/// The nearest-rank percentile of ascending `sorted` samples: the smallest
/// sample with at least `percent`% of all samples at or below it (`0` gives
/// the minimum, `100` and more the maximum). `None` for no samples.
///
/// ```
/// use gatehouse_base::percentile::percentile;
/// let samples: Vec<u64> = (1..=100).collect();
/// assert_eq!(percentile(&samples, 99), Some(99));
/// assert_eq!(percentile(&samples, 50), Some(50));
/// assert_eq!(percentile(&[], 50), None);
/// ```
pub fn percentile(sorted: &[u64], percent: u32) -> Option<u64> {
    let count = sorted.len();
    let rank = (count.saturating_mul(percent.min(100) as usize)).div_ceil(100);
    sorted.get(rank.clamp(1, count.max(1)) - 1).copied()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_and_its_edges() {
        let hundred: Vec<u64> = (1..=100).collect();
        assert_eq!(percentile(&hundred, 50), Some(50));
        assert_eq!(percentile(&hundred, 90), Some(90));
        assert_eq!(percentile(&hundred, 99), Some(99));
        assert_eq!(percentile(&hundred, 100), Some(100));
        // Ten values: p50 is the 5th, p90 the 9th, p99 the 10th.
        let ten: Vec<u64> = (1..=10).map(|n| n * 10).collect();
        assert_eq!(percentile(&ten, 50), Some(50));
        assert_eq!(percentile(&ten, 90), Some(90));
        assert_eq!(percentile(&ten, 99), Some(100));
        // Out-of-range percents are clamped, never an index out of bounds.
        assert_eq!(percentile(&ten, 0), Some(10));
        assert_eq!(percentile(&ten, 250), Some(100));
        assert_eq!(percentile(&[], 99), None);
        assert_eq!(percentile(&[7], 0), Some(7));
        assert_eq!(percentile(&[7], 99), Some(7));
        assert_eq!(percentile(&[1, 2], 50), Some(1));
        assert_eq!(percentile(&[1, 2], 51), Some(2));
    }
}
