//! How much of its limit a key's state holds at a time: what forgetting the
//! state would hand back. Stores use it to choose what to evict.

/// The share of a rule's limit a state holds at some time, and whether a
/// check of cost 1 would be denied then (exhausted). Forgetting the state
/// hands that share back to the key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Usage {
    /// A check of cost 1 would be denied: the key is at its limit.
    pub exhausted: bool,
    /// The share of the limit in use, in 2^-32 parts: `1 << 32` is all of
    /// it (more when the limit was lowered over live state), 0 none.
    pub share: u64,
}

impl Usage {
    /// Nothing in use: the state of a key never seen.
    pub const NONE: Usage = Usage {
        exhausted: false,
        share: 0,
    };

    /// `used` of `of`, exhausted or not. `of == 0` counts any use as all.
    #[must_use]
    pub fn of(used: u128, of: u128, exhausted: bool) -> Self {
        let share = match used.checked_mul(1 << 32).map(|u| u.checked_div(of)) {
            Some(Some(s)) => u64::try_from(s).unwrap_or(u64::MAX),
            _ if used == 0 => 0,
            _ => u64::MAX,
        };
        Usage { exhausted, share }
    }

    /// What forgetting the state costs, as one number to sort by: the
    /// share, capped below `u64::MAX`, which is every exhausted state's.
    /// So any state that is not exhausted sorts before every exhausted one,
    /// the smaller share first; exhausted states tie (a store breaks ties,
    /// as every other, by when the state ends).
    #[must_use]
    pub fn stake(self) -> u64 {
        if self.exhausted {
            u64::MAX
        } else {
            self.share.min(u64::MAX - 1)
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::Usage;
    use crate::algorithm::{KeyState, decide};
    use crate::rule::{Algorithm, RuleSpec};

    const HALF: u64 = 1 << 31;

    #[test]
    fn every_algorithm_reports_its_share_and_exhaustion() {
        for algorithm in Algorithm::RATES {
            // 4 per second; t = 1_000_000 is a window start.
            let r = RuleSpec::new("r", algorithm, 4, Duration::from_secs(1))
                .build()
                .expect("valid rule");
            let t = 1_000_000;
            let mut s = KeyState::Empty;
            assert_eq!(s.usage(&r, t), Usage::NONE, "{algorithm}");
            assert!(decide(&r, &mut s, t, 2).allowed);
            let half = s.usage(&r, t);
            assert_eq!((half.exhausted, half.share), (false, HALF), "{algorithm}");
            assert!(decide(&r, &mut s, t, 2).allowed);
            let full = s.usage(&r, t);
            assert_eq!((full.exhausted, full.share), (true, 1 << 32), "{algorithm}");
            assert_eq!(full.stake(), u64::MAX);
            assert!(half.stake() < full.stake());
            // Three periods on, the state holds nothing.
            assert_eq!(s.usage(&r, t + 3_000_000).share, 0, "{algorithm}");
            assert!(!s.usage(&r, t + 3_000_000).exhausted, "{algorithm}");
        }
    }

    #[test]
    fn time_drains_buckets_and_slides_windows() {
        let at = |algorithm, t| {
            let r = RuleSpec::new("r", algorithm, 4, Duration::from_secs(1))
                .build()
                .expect("valid rule");
            let mut s = KeyState::Empty;
            assert!(decide(&r, &mut s, 0, 4).allowed);
            s.usage(&r, t)
        };
        // Half a period later: GCRA and token bucket refilled half, the
        // sliding window weighs the full previous window by half, the fixed
        // window and the log still count everything.
        assert_eq!(at(Algorithm::Gcra, 500_000).share, HALF);
        assert_eq!(at(Algorithm::TokenBucket, 500_000).share, HALF);
        assert_eq!(at(Algorithm::SlidingWindow, 1_500_000).share, HALF);
        assert!(at(Algorithm::FixedWindow, 500_000).exhausted);
        assert!(at(Algorithm::SlidingLog, 999_999).exhausted);
        assert_eq!(at(Algorithm::SlidingLog, 1_000_000), Usage::NONE);
    }

    #[test]
    fn shares_saturate_and_never_divide_by_zero() {
        assert_eq!(Usage::of(0, 0, false).share, 0);
        assert_eq!(Usage::of(1, 0, false).share, u64::MAX);
        assert_eq!(Usage::of(u128::MAX, 1, false).share, u64::MAX);
        assert_eq!(Usage::of(3, 2, true).share, 3 << 31);
        // Not exhausted sorts below exhausted whatever the share.
        assert!(Usage::of(u128::MAX, 1, false).stake() < Usage::of(0, 1, true).stake());
    }
}
