//! The wait before reconnecting to the ADS server: from `initial` up to
//! `max`, doubling the bound at each failure, each wait drawn at random
//! between `initial` and the bound (so a fleet restarted together does not
//! reconnect together); back to `initial` after a good response.

use std::time::Duration;

/// Jittered exponential backoff between two bounds.
#[derive(Debug)]
pub(crate) struct Backoff {
    initial: Duration,
    max: Duration,
    failures: u32,
    seed: u64,
}

impl Backoff {
    /// Waits from `initial` to `max` (`max` at least `initial`).
    pub(crate) fn new(initial: Duration, max: Duration) -> Self {
        let seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0x9e37_79b9_7f4a_7c15, |d| {
                d.as_secs().wrapping_mul(1_000_000_007) ^ u64::from(d.subsec_nanos())
            })
            | 1;
        Backoff {
            initial,
            max: max.max(initial),
            failures: 0,
            seed,
        }
    }

    /// The next wait, and the bound doubled for the one after.
    pub(crate) fn next_wait(&mut self) -> Duration {
        let bound = self
            .initial
            .saturating_mul(1u32 << self.failures.min(20))
            .min(self.max);
        self.failures = self.failures.saturating_add(1);
        let span = bound.saturating_sub(self.initial);
        // xorshift64: no statistical quality needed, only spread.
        self.seed ^= self.seed << 13;
        self.seed ^= self.seed >> 7;
        self.seed ^= self.seed << 17;
        let fraction = (self.seed >> 11) as f64 / (1u64 << 53) as f64;
        self.initial + span.mul_f64(fraction)
    }

    /// After a good response: the next wait starts from `initial` again.
    pub(crate) fn reset(&mut self) {
        self.failures = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waits_stay_between_the_bounds_grow_and_reset() {
        let (initial, max) = (Duration::from_millis(100), Duration::from_secs(3));
        let mut b = Backoff::new(initial, max);
        assert_eq!(b.next_wait(), initial, "the first bound is initial itself");
        let mut bound = initial;
        for _ in 0..40 {
            bound = (bound * 2).min(max);
            let w = b.next_wait();
            assert!(
                w >= initial && w <= bound,
                "{w:?} outside {initial:?}..={bound:?}"
            );
        }
        let many: Vec<Duration> = (0..20).map(|_| b.next_wait()).collect();
        assert!(many.iter().any(|w| *w != many[0]), "jittered: {many:?}");
        b.reset();
        assert_eq!(b.next_wait(), initial);
    }

    #[test]
    fn equal_bounds_wait_exactly_that() {
        let d = Duration::from_secs(10);
        let mut b = Backoff::new(d, d);
        for _ in 0..5 {
            assert_eq!(b.next_wait(), d);
        }
    }
}
