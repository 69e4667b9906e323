//! Fixed window: a counter per epoch-aligned window `w = floor(t / period)`.

use std::time::Duration;

use crate::decision::Decision;
use crate::rule::Rule;
use crate::time::Micros;

/// Fixed window state: the window index and its count.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct FixedWindowState {
    /// `floor(t / period)` of the counted window.
    pub window: u64,
    /// Units admitted in that window.
    pub count: u64,
}

/// Decides a check of `cost` at `t`. Returns the decision and the state to
/// store when admitted.
#[must_use]
pub fn check(
    rule: &Rule,
    state: Option<FixedWindowState>,
    t: Micros,
    cost: u64,
) -> (Decision, FixedWindowState) {
    let period = rule.period_micros();
    let limit = rule.limit();
    let w = t / period;
    let count = state.filter(|s| s.window == w).map_or(0, |s| s.count);
    let fits = cost <= limit;
    let allowed = fits && count + cost <= limit;
    let after = if allowed { count + cost } else { count };
    let to_next = (w + 1) * period - t;
    let decision = Decision {
        allowed,
        limit,
        remaining: limit - after,
        reset_after: Duration::from_micros(to_next),
        retry_after: (!allowed && fits).then(|| Duration::from_micros(to_next)),
    };
    (
        decision,
        FixedWindowState {
            window: w,
            count: after,
        },
    )
}
