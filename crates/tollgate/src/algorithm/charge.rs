//! Usage known after the fact (docs/semantics.md, "Charge"): a charge
//! consumes its cost unconditionally, carrying what goes past the limit as
//! debt, and a give-back returns units of an admitted check (a reservation
//! settled below its estimate, or cancelled), and a refund returns units
//! now (docs/semantics.md, "Refund"). One entry point each over
//! [`KeyState`], as [`decide`](super::decide) is for checks.

use super::{KeyState, SlidingLog, fixed_window, gcra, sliding_log, sliding_window, token_bucket};
use crate::decision::Decision;
use crate::rule::{Algorithm, Rule};
use crate::time::Micros;

/// What a charge answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Charged {
    /// The key's state after the charge by the check formulas: always
    /// `allowed`, `remaining` 0 while in debt, no `retry_after`.
    pub decision: Decision,
    /// How many units over its limit the key now is.
    pub debt: u64,
    /// Units of the charge not recorded because the debt reached its cap
    /// ([`Rule::max_debt`]).
    pub clamped: u64,
}

/// Charges `cost` at `t` to `state`, whatever it holds: never denied.
pub fn charge(rule: &Rule, state: &mut KeyState, t: Micros, cost: u64) -> Charged {
    let (charged, next) = match (rule.algorithm(), std::mem::take(state)) {
        (Algorithm::Gcra, s) => {
            let prev = if let KeyState::Gcra(g) = s {
                Some(g)
            } else {
                None
            };
            let (c, n) = gcra::charge(rule, prev, t, cost);
            (c, KeyState::Gcra(n))
        }
        (Algorithm::TokenBucket, s) => {
            let prev = if let KeyState::TokenBucket(g) = s {
                Some(g)
            } else {
                None
            };
            let (c, n) = token_bucket::charge(rule, prev, t, cost);
            (c, KeyState::TokenBucket(n))
        }
        (Algorithm::FixedWindow, s) => {
            let prev = if let KeyState::FixedWindow(g) = s {
                Some(g)
            } else {
                None
            };
            let (c, n) = fixed_window::charge(rule, prev, t, cost);
            (c, KeyState::FixedWindow(n))
        }
        (Algorithm::SlidingWindow, s) => {
            let prev = if let KeyState::SlidingWindow(g) = s {
                Some(g)
            } else {
                None
            };
            let (c, n) = sliding_window::charge(rule, prev, t, cost);
            (c, KeyState::SlidingWindow(n))
        }
        (Algorithm::SlidingLog, s) => {
            let mut log = if let KeyState::SlidingLog(l) = s {
                l
            } else {
                SlidingLog::new()
            };
            let c = sliding_log::charge(rule, &mut log, t, cost);
            (c, KeyState::SlidingLog(log))
        }
        // Slots are acquired, never charged: nothing is recorded.
        (Algorithm::Concurrency, s) => {
            let decision = super::evaluate(rule, &s, t, 0);
            let charged = Charged {
                decision: Decision {
                    allowed: true,
                    ..decision
                },
                debt: 0,
                clamped: cost,
            };
            (charged, s)
        }
    };
    *state = next;
    charged
}

/// Gives `units` back at `t` whatever counted them (docs/semantics.md,
/// "Refund"): the units counted last come off first, never past
/// empty/full — GCRA and token bucket move back by `units * T`, the fixed
/// window's count shrinks, the sliding window's current count and then the
/// previous one's, the sliding log's newest entries. Answers the key's
/// state after it as a charge of nothing reads it (`clamped` 0).
pub fn refund(rule: &Rule, state: &mut KeyState, t: Micros, units: u64) -> Charged {
    match (rule.algorithm(), &mut *state) {
        (Algorithm::SlidingWindow, KeyState::SlidingWindow(s)) => {
            *s = sliding_window::refund(rule, *s, t, units);
        }
        (Algorithm::SlidingLog, KeyState::SlidingLog(log)) => {
            log.refund(rule.period_micros(), t, units);
        }
        _ => give_back(rule, state, t, t, units),
    }
    charge(rule, state, t, 0)
}

/// Gives back at `t` `units` of a check admitted at `counted_at` (at or
/// before `t`): GCRA and token bucket move back by `units * T`, never past
/// empty; the windows subtract from the window that counted them while it
/// still counts; the sliding log shrinks that check's entry. A state of
/// another algorithm than the rule's, or none, holds nothing to give back.
pub fn give_back(rule: &Rule, state: &mut KeyState, t: Micros, counted_at: Micros, units: u64) {
    if units == 0 {
        return;
    }
    match (rule.algorithm(), state) {
        (Algorithm::Gcra, KeyState::Gcra(s)) => *s = gcra::give_back(rule, *s, t, units),
        (Algorithm::TokenBucket, KeyState::TokenBucket(s)) => {
            *s = token_bucket::give_back(rule, *s, t, units);
        }
        (Algorithm::FixedWindow, KeyState::FixedWindow(s)) => {
            *s = fixed_window::give_back(rule, *s, counted_at, units);
        }
        (Algorithm::SlidingWindow, KeyState::SlidingWindow(s)) => {
            *s = sliding_window::give_back(rule, *s, t, counted_at, units);
        }
        (Algorithm::SlidingLog, KeyState::SlidingLog(log)) => log.give_back(counted_at, units),
        _ => {}
    }
}
