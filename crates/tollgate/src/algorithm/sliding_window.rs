//! Sliding window counter: the current and previous fixed-window counts, the
//! previous one weighted by how much of it still overlaps the trailing
//! period. Exact integer arithmetic (the estimate multiplied out by
//! `period`), in 128 bits so no product can overflow.

use std::time::Duration;

use crate::decision::Decision;
use crate::rule::Rule;
use crate::time::Micros;

/// Sliding window state: the current window index and the two counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct SlidingWindowState {
    /// `floor(t / period)` of the current window.
    pub window: u64,
    /// Units admitted in window `window - 1`.
    pub prev: u64,
    /// Units admitted in window `window`.
    pub curr: u64,
}

/// `(prev, curr)` as seen from window `w`.
fn counts(state: Option<SlidingWindowState>, w: u64) -> (u64, u64) {
    match state {
        Some(s) if s.window == w => (s.prev, s.curr),
        Some(s) if s.window.checked_add(1) == Some(w) => (s.curr, 0),
        _ => (0, 0),
    }
}

/// Whether `prev * (period - elapsed) + (curr + cost) * period <= limit * period`.
fn fits(period: u64, limit: u64, elapsed: u64, prev: u64, curr: u64, cost: u64) -> bool {
    let p = u128::from(period);
    u128::from(prev) * (p - u128::from(elapsed)) + (u128::from(curr) + u128::from(cost)) * p
        <= u128::from(limit) * p
}

/// Decides a check of `cost` at `t`. Returns the decision and the state to
/// store when admitted.
#[must_use]
pub fn check(
    rule: &Rule,
    state: Option<SlidingWindowState>,
    t: Micros,
    cost: u64,
) -> (Decision, SlidingWindowState) {
    let period = rule.period_micros();
    let limit = rule.limit();
    let w = t / period;
    let elapsed = t - w * period;
    let (prev, curr) = counts(state, w);
    let capable = cost <= limit;
    let allowed = capable && fits(period, limit, elapsed, prev, curr, cost);
    let after = if allowed { curr + cost } else { curr };

    let p = i128::from(period);
    let left = i128::from(limit) * p
        - i128::from(prev) * (p - i128::from(elapsed))
        - i128::from(after) * p;
    let remaining = u64::try_from((left / p).max(0)).unwrap_or(0);
    let reset_after = if after > 0 {
        (w + 2) * period - t
    } else if prev > 0 {
        (w + 1) * period - t
    } else {
        0
    };
    let retry_after = (!allowed && capable)
        .then(|| Duration::from_micros(retry_after(period, limit, elapsed, prev, curr, cost)));
    let decision = Decision {
        allowed,
        limit,
        remaining,
        reset_after: Duration::from_micros(reset_after),
        retry_after,
    };
    (
        decision,
        SlidingWindowState {
            window: w,
            prev,
            curr: after,
        },
    )
}

/// The smallest `d` such that the same check at `t + d` is admitted with no
/// other traffic. Requires `cost <= limit` and that the check is denied now.
fn retry_after(period: u64, limit: u64, elapsed: u64, prev: u64, curr: u64, cost: u64) -> u64 {
    let p = u128::from(period);
    // Later in this window: need prev * (period - e') <= (limit - curr - cost) * period.
    if prev > 0 && curr + cost <= limit {
        let q = u128::from(limit - curr - cost) * p / u128::from(prev);
        if q >= 1 {
            // e' = period - q, at least `elapsed`; below `period` since q >= 1.
            let q = u64::try_from(q.min(p)).unwrap_or(period);
            return (period - q).max(elapsed) - elapsed;
        }
    }
    // In the next window: prev' = curr, curr' = 0.
    let to_next = period - elapsed;
    if curr == 0 {
        return to_next;
    }
    let q = u128::from(limit - cost) * p / u128::from(curr);
    if q >= 1 {
        let q = u64::try_from(q.min(p)).unwrap_or(period);
        return to_next + (period - q);
    }
    // Both windows are then past: the one after next starts empty.
    to_next + period
}
