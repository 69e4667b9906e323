//! The five algorithms of docs/semantics.md as pure steps, and their
//! charge and give-back steps (`charge.rs`).
//!
//! Each module exposes `check(rule, state, t, cost)`: no I/O, no clock, no
//! allocation (but for the sliding log's own entries). A denied check never
//! changes state. [`KeyState`] with [`evaluate`] / [`commit`] gives stores
//! one shape for all five, split in two so a multi-rule check can evaluate
//! every pair before it commits any.
//!
//! ```
//! use std::time::Duration;
//! use tollgate::algorithm::{KeyState, decide};
//! use tollgate::{Algorithm, RuleSpec};
//!
//! let rule = RuleSpec::new("r", Algorithm::FixedWindow, 2, Duration::from_secs(1)).build()?;
//! let mut state = KeyState::Empty;
//! assert!(decide(&rule, &mut state, 0, 1).allowed);
//! assert!(decide(&rule, &mut state, 10, 1).allowed);
//! let denied = decide(&rule, &mut state, 20, 1);
//! assert_eq!(denied.retry_after, Some(Duration::from_micros(999_980)));
//! # Ok::<(), tollgate::RuleError>(())
//! ```

mod charge;
pub mod concurrency;
pub mod fixed_window;
pub mod gcra;
pub mod sliding_log;
pub mod sliding_window;
pub mod token_bucket;
mod usage;

pub use charge::{Charged, charge, give_back, refund};
pub use concurrency::Leases;
pub use fixed_window::FixedWindowState;
pub use gcra::GcraState;
pub use sliding_log::SlidingLog;
pub use sliding_window::SlidingWindowState;
pub use token_bucket::TokenBucketState;
pub use usage::Usage;

use crate::decision::Decision;
use crate::rule::{Algorithm, Rule};
use crate::time::Micros;

/// Per-key state of any algorithm. `Empty` is the state of a key never seen
/// (or forgotten after it reset); a state of another algorithm than the
/// rule's counts as `Empty`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum KeyState {
    /// Nothing recorded.
    #[default]
    Empty,
    /// GCRA.
    Gcra(GcraState),
    /// Token bucket.
    TokenBucket(TokenBucketState),
    /// Fixed window.
    FixedWindow(FixedWindowState),
    /// Sliding window counter.
    SlidingWindow(SlidingWindowState),
    /// Sliding log.
    SlidingLog(SlidingLog),
    /// Concurrency: the leases held.
    Concurrency(Leases),
}

impl KeyState {
    /// When this state is back to empty/full and can be forgotten without
    /// changing any decision, given `rule`. `None` for `Empty`.
    #[must_use]
    pub fn expires_at(&self, rule: &Rule) -> Option<Micros> {
        let period = rule.period_micros();
        match self {
            KeyState::Empty => None,
            KeyState::Gcra(s) => Some(s.tat),
            // credit above tau (a lowered burst) is a full bucket
            KeyState::TokenBucket(s) => Some(token_bucket::full_at(rule, *s)),
            KeyState::FixedWindow(s) => Some(s.start + period),
            KeyState::SlidingWindow(s) => Some(s.start + 2 * period),
            KeyState::SlidingLog(log) => log.newest().map(|n| n + period),
            KeyState::Concurrency(l) => Some(l.iter().map(|l| l.expires).max().unwrap_or(0)),
        }
    }

    /// How much of `rule`'s limit this state holds at `t`, and whether it
    /// is exhausted then: what forgetting it would hand back to the key.
    /// `Empty`, or a state of another algorithm than the rule's, holds
    /// nothing.
    #[must_use]
    pub fn usage(&self, rule: &Rule, t: Micros) -> Usage {
        match (rule.algorithm(), self) {
            (Algorithm::Gcra, KeyState::Gcra(s)) => gcra::usage(rule, *s, t),
            (Algorithm::TokenBucket, KeyState::TokenBucket(s)) => token_bucket::usage(rule, *s, t),
            (Algorithm::FixedWindow, KeyState::FixedWindow(s)) => fixed_window::usage(rule, *s, t),
            (Algorithm::SlidingWindow, KeyState::SlidingWindow(s)) => {
                sliding_window::usage(rule, *s, t)
            }
            (Algorithm::SlidingLog, KeyState::SlidingLog(log)) => sliding_log::usage(rule, log, t),
            (Algorithm::Concurrency, KeyState::Concurrency(l)) => concurrency::usage(rule, l, t),
            _ => Usage::NONE,
        }
    }

    /// How many sliding-log entries or leases this state holds (0 for the
    /// others): what the memory store bounds besides keys.
    #[must_use]
    pub fn log_entries(&self) -> usize {
        match self {
            KeyState::SlidingLog(log) => log.len(),
            KeyState::Concurrency(l) => l.len(),
            _ => 0,
        }
    }
}

/// Decides a check of `cost` at `t` against `state` without changing it.
#[must_use]
pub fn evaluate(rule: &Rule, state: &KeyState, t: Micros, cost: u64) -> Decision {
    match (rule.algorithm(), state) {
        (Algorithm::Gcra, KeyState::Gcra(s)) => gcra::check(rule, Some(*s), t, cost).0,
        (Algorithm::Gcra, _) => gcra::check(rule, None, t, cost).0,
        (Algorithm::TokenBucket, KeyState::TokenBucket(s)) => {
            token_bucket::check(rule, Some(*s), t, cost).0
        }
        (Algorithm::TokenBucket, _) => token_bucket::check(rule, None, t, cost).0,
        (Algorithm::FixedWindow, KeyState::FixedWindow(s)) => {
            fixed_window::check(rule, Some(*s), t, cost).0
        }
        (Algorithm::FixedWindow, _) => fixed_window::check(rule, None, t, cost).0,
        (Algorithm::SlidingWindow, KeyState::SlidingWindow(s)) => {
            sliding_window::check(rule, Some(*s), t, cost).0
        }
        (Algorithm::SlidingWindow, _) => sliding_window::check(rule, None, t, cost).0,
        (Algorithm::SlidingLog, KeyState::SlidingLog(log)) => {
            sliding_log::check(rule, log, t, cost)
        }
        (Algorithm::SlidingLog, _) => sliding_log::check(rule, &SlidingLog::new(), t, cost),
        (Algorithm::Concurrency, KeyState::Concurrency(l)) => concurrency::check(rule, l, t, cost),
        (Algorithm::Concurrency, _) => concurrency::check(rule, &Leases::default(), t, cost),
    }
}

/// Applies an admitted check of `cost` at `t` to `state`. Call only when
/// [`evaluate`] admitted that same check on that same state.
pub fn commit(rule: &Rule, state: &mut KeyState, t: Micros, cost: u64) {
    if cost == 0 {
        return;
    }
    *state = match (rule.algorithm(), std::mem::take(state)) {
        (Algorithm::Gcra, s) => {
            let prev = if let KeyState::Gcra(g) = s {
                Some(g)
            } else {
                None
            };
            KeyState::Gcra(gcra::check(rule, prev, t, cost).1)
        }
        (Algorithm::TokenBucket, s) => {
            let prev = if let KeyState::TokenBucket(g) = s {
                Some(g)
            } else {
                None
            };
            KeyState::TokenBucket(token_bucket::check(rule, prev, t, cost).1)
        }
        (Algorithm::FixedWindow, s) => {
            let prev = if let KeyState::FixedWindow(g) = s {
                Some(g)
            } else {
                None
            };
            KeyState::FixedWindow(fixed_window::check(rule, prev, t, cost).1)
        }
        (Algorithm::SlidingWindow, s) => {
            let prev = if let KeyState::SlidingWindow(g) = s {
                Some(g)
            } else {
                None
            };
            KeyState::SlidingWindow(sliding_window::check(rule, prev, t, cost).1)
        }
        (Algorithm::SlidingLog, s) => {
            let mut log = if let KeyState::SlidingLog(l) = s {
                l
            } else {
                SlidingLog::new()
            };
            log.record(rule, t, cost);
            KeyState::SlidingLog(log)
        }
        // A check of a concurrency rule takes a lease with no ticket, never
        // released (the limiters refuse such checks; see `acquire`).
        (Algorithm::Concurrency, s) => {
            let mut leases = if let KeyState::Concurrency(l) = s {
                l
            } else {
                Leases::default()
            };
            leases.acquire(rule, t, cost, [0; 16]);
            KeyState::Concurrency(leases)
        }
    };
}

/// Evaluates and, when admitted, commits: the whole single-key step.
pub fn decide(rule: &Rule, state: &mut KeyState, t: Micros, cost: u64) -> Decision {
    let decision = evaluate(rule, state, t, cost);
    if decision.allowed {
        commit(rule, state, t, cost);
    }
    decision
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::{KeyState, TokenBucketState, evaluate};
    use crate::rule::{Algorithm, RuleSpec};

    #[test]
    fn expires_at_survives_a_lowered_burst() {
        // A bucket saved under burst 10 (tau = 1_000_000 at T = 100_000) and
        // read under burst 2 (tau = 200_000) holds more credit than the new
        // capacity: it is full, so it can be forgotten at once. Regression:
        // `tau - credit` underflowed.
        let r = RuleSpec::new("r", Algorithm::TokenBucket, 10, Duration::from_secs(1))
            .burst(2)
            .build()
            .expect("valid rule");
        let s = KeyState::TokenBucket(TokenBucketState {
            credit: 900_000,
            last: 5_000,
        });
        assert_eq!(s.expires_at(&r), Some(5_000));
        assert_eq!(
            evaluate(&r, &s, 5_000, 0),
            evaluate(&r, &KeyState::Empty, 5_000, 0)
        );
    }
}
