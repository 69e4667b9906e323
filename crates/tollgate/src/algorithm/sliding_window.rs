//! Sliding window counter: the current and previous fixed-window counts, the
//! previous one weighted by how much of it still overlaps the trailing
//! period. Exact integer arithmetic (the estimate multiplied out by
//! `period`), in 128 bits so no product can overflow.

use std::time::Duration;

use super::{Charged, Usage};
use crate::decision::Decision;
use crate::rule::Rule;
use crate::time::Micros;

/// Sliding window state: the current window's start and the two counts.
///
/// Windows are identified by their start time, not their index, so state
/// left by a rule of another period can never pass for a later window.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct SlidingWindowState {
    /// `floor(t / period) * period`: the current window's start, µs.
    pub start: u64,
    /// Units admitted in the window before (starting `start - period`).
    pub prev: u64,
    /// Units admitted in the window starting at `start`.
    pub curr: u64,
}

/// `(prev, curr)` as seen from the window starting at `start`.
fn counts(state: Option<SlidingWindowState>, start: u64, period: u64) -> (u64, u64) {
    match state {
        Some(s) if s.start == start => (s.prev, s.curr),
        Some(s) if s.start.checked_add(period) == Some(start) => (s.curr, 0),
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
    let (prev, curr) = counts(state, w * period, period);
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
            start: w * period,
            prev,
            curr: after,
        },
    )
}

/// How much of the limit `state` holds at `t`: the weighted count the
/// check compares with the limit.
#[must_use]
pub fn usage(rule: &Rule, state: SlidingWindowState, t: Micros) -> Usage {
    let period = rule.period_micros();
    let limit = rule.limit();
    let w = t / period;
    let elapsed = t - w * period;
    let (prev, curr) = counts(Some(state), w * period, period);
    let p = u128::from(period);
    let used = u128::from(prev) * (p - u128::from(elapsed)) + u128::from(curr) * p;
    let exhausted = !fits(period, limit, elapsed, prev, curr, 1);
    Usage::of(used, u128::from(limit) * p, exhausted)
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

/// Charges `cost` at `t` unconditionally (docs/semantics.md, "Charge"):
/// `count[w] += cost`, so far as the debt
/// `ceil((prev * (period - elapsed) + count[w] * period) / period) - limit`
/// stays within [`Rule::max_debt`] (the rest clamped).
#[must_use]
pub fn charge(
    rule: &Rule,
    state: Option<SlidingWindowState>,
    t: Micros,
    cost: u64,
) -> (Charged, SlidingWindowState) {
    let period = rule.period_micros();
    let limit = rule.limit();
    let w = t / period;
    let start = w * period;
    let elapsed = t - start;
    let (prev, curr) = counts(state, start, period);
    let p = u128::from(period);
    let weight = u128::from(prev) * (p - u128::from(elapsed));
    // The most `count[w]` may hold: weight + count * p <= (limit + max_debt) * p.
    let most = (u128::from(limit + rule.max_debt()) * p).saturating_sub(weight) / p;
    let most = u64::try_from(most).unwrap_or(u64::MAX);
    let units = cost.min(most.saturating_sub(curr));
    let after = curr + units;
    let used = weight + u128::from(after) * p;
    let debt = u64::try_from(used.div_ceil(p))
        .unwrap_or(u64::MAX)
        .saturating_sub(limit);
    let left = (u128::from(limit) * p).saturating_sub(used);
    let reset_after = if after > 0 {
        (w + 2) * period - t
    } else if prev > 0 {
        (w + 1) * period - t
    } else {
        0
    };
    let charged = Charged {
        decision: Decision {
            allowed: true,
            limit,
            remaining: u64::try_from(left / p).unwrap_or(u64::MAX),
            reset_after: Duration::from_micros(reset_after),
            retry_after: None,
        },
        debt,
        clamped: cost - units,
    };
    (
        charged,
        SlidingWindowState {
            start,
            prev,
            curr: after,
        },
    )
}

/// Gives back `units` counted in the window that held `counted_at`, while
/// that window still counts at `t` (as the current or the previous one).
#[must_use]
pub fn give_back(
    rule: &Rule,
    state: SlidingWindowState,
    t: Micros,
    counted_at: Micros,
    units: u64,
) -> SlidingWindowState {
    let period = rule.period_micros();
    let start = t / period * period;
    if state.start > start {
        // state from a later time than `t`: leave it as it is
        return state;
    }
    let (mut prev, mut curr) = counts(Some(state), start, period);
    let counted = counted_at / period * period;
    if counted == start {
        curr -= units.min(curr);
    } else if counted.checked_add(period) == Some(start) {
        prev -= units.min(prev);
    } else {
        return state;
    }
    SlidingWindowState { start, prev, curr }
}

/// Gives back `units` at `t` (a refund, docs/semantics.md "Refund"): from
/// the current window's count first, then the previous one's, never below
/// zero.
#[must_use]
pub fn refund(rule: &Rule, state: SlidingWindowState, t: Micros, units: u64) -> SlidingWindowState {
    let period = rule.period_micros();
    let start = t / period * period;
    if state.start > start {
        // state from a later time than `t`: leave it as it is
        return state;
    }
    let (prev, curr) = counts(Some(state), start, period);
    let from_curr = units.min(curr);
    let from_prev = (units - from_curr).min(prev);
    SlidingWindowState {
        start,
        prev: prev - from_prev,
        curr: curr - from_curr,
    }
}

#[cfg(test)]
mod tests {
    //! Expected values by hand from docs/semantics.md, sliding window counter,
    //! mostly with limit 10 per 1 s (P = 1_000_000) at t = 5_250_000:
    //! `w = 5`, `elapsed = 250_000`, the previous window weighs `P - e = 750_000`.
    //! Admitted iff `prev * (P - e) + (curr + cost) * P <= 10 * P`.

    use std::time::Duration;

    use super::{SlidingWindowState, check};
    use crate::algorithm::{KeyState, decide, evaluate};
    use crate::decision::Decision;
    use crate::rule::{Algorithm, Rule, RuleSpec};

    const P: u64 = 1_000_000;
    const T: u64 = 5_250_000;

    fn rule(limit: u64, period_us: u64) -> Rule {
        RuleSpec::new(
            "r",
            Algorithm::SlidingWindow,
            limit,
            Duration::from_micros(period_us),
        )
        .build()
        .expect("valid rule")
    }

    /// State stored in window number `window` of period `P`.
    fn state(window: u64, prev: u64, curr: u64) -> KeyState {
        KeyState::SlidingWindow(SlidingWindowState {
            start: window * P,
            prev,
            curr,
        })
    }

    fn decision(allowed: bool, remaining: u64, reset_us: u64, retry: Option<u64>) -> Decision {
        Decision {
            allowed,
            limit: 10,
            remaining,
            reset_after: Duration::from_micros(reset_us),
            retry_after: retry.map(Duration::from_micros),
        }
    }

    /// `retry_after` is exact: admitted at `t + d`, denied at `t + d - 1`.
    fn assert_exact(r: &Rule, s: &KeyState, t: u64, cost: u64, d: u64) {
        assert!(evaluate(r, s, t + d, cost).allowed, "at t + {d}");
        assert!(!evaluate(r, s, t + d - 1, cost).allowed, "at t + {d} - 1");
    }

    #[test]
    fn the_previous_window_is_weighted_by_its_overlap() {
        let r = rule(10, P);
        // stored in window 4: seen from window 5 it is the previous window.
        let mut s = state(4, 0, 8);
        // peek: 8 * 750_000 = 6_000_000 used; remaining floor(4_000_000 / P) = 4;
        // curr == 0, prev > 0: reset = 6_000_000 - 5_250_000 = 750_000.
        assert_eq!(decide(&r, &mut s, T, 0), decision(true, 4, 750_000, None));
        assert_eq!(s, state(4, 0, 8));
        // 6_000_000 + 1 * P <= 10 * P: admitted; remaining floor(3_000_000 / P) = 3;
        // curr > 0: reset = 7_000_000 - 5_250_000 = 1_750_000.
        assert_eq!(decide(&r, &mut s, T, 1), decision(true, 3, 1_750_000, None));
        assert_eq!(s, state(5, 8, 1));
        // cost 3: 6_000_000 + 4 * P = 10 * P exactly: admitted, remaining 0.
        assert_eq!(decide(&r, &mut s, T, 3), decision(true, 0, 1_750_000, None));
        // cost 1: 6_000_000 + 5 * P > 10 * P. Later in this window:
        // 8 * (P - e') <= (10 - 4 - 1) * P  =>  P - e' <= 625_000  =>  e' >= 375_000,
        // retry = 375_000 - 250_000 = 125_000.
        assert_eq!(
            decide(&r, &mut s, T, 1),
            decision(false, 0, 1_750_000, Some(125_000))
        );
        assert_eq!(s, state(5, 8, 4));
        assert_exact(&r, &s, T, 1, 125_000);
    }

    #[test]
    fn retry_later_in_the_same_window_rounds_up_to_a_whole_microsecond() {
        let r = rule(10, P);
        let mut s = state(5, 7, 3);
        // 7 * 750_000 = 5_250_000 + 4 * P = 9_250_000 <= 10 * P: admitted;
        // remaining floor(750_000 / P) = 0.
        assert_eq!(decide(&r, &mut s, T, 1), decision(true, 0, 1_750_000, None));
        // 5_250_000 + 5 * P > 10 * P: 7 * (P - e') <= 5 * P
        // => P - e' <= floor(5_000_000 / 7) = 714_285 => e' >= 285_715, d = 35_715.
        // (7 * 714_285 = 4_999_995 fits; 7 * 714_286 = 5_000_002 does not.)
        assert_eq!(
            decide(&r, &mut s, T, 1),
            decision(false, 0, 1_750_000, Some(35_715))
        );
        assert_exact(&r, &s, T, 1, 35_715);
        // a peek half-way: 7 * 500_000 + 4 * P = 7_500_000, remaining 2, reset 1_500_000.
        assert_eq!(
            evaluate(&r, &s, 5_500_000, 0),
            decision(true, 2, 1_500_000, None)
        );
    }

    #[test]
    fn retry_in_the_next_window() {
        let r = rule(10, P);
        let s = state(5, 1, 9);
        // cost 2: curr + cost = 11 > 10, so not in this window. In window 6,
        // prev' = 9: 9 * (P - e'') + 2 * P <= 10 * P => P - e'' <= floor(8 * P / 9)
        // = 888_888 => e'' >= 111_112; d = (6_000_000 - 5_250_000) + 111_112 = 861_112.
        // remaining floor((10 * P - 750_000 - 9 * P) / P) = floor(0.25) = 0.
        assert_eq!(
            evaluate(&r, &s, T, 2),
            decision(false, 0, 1_750_000, Some(861_112))
        );
        assert_exact(&r, &s, T, 2, 861_112);
        // cost 1: in this window 1 * (P - e') + 10 * P <= 10 * P needs e' = P, which
        // is the next window; there prev' = 9: 9 * P + 1 * P <= 10 * P at e'' = 0.
        // d = 750_000 exactly, the window boundary.
        assert_eq!(
            evaluate(&r, &s, T, 1),
            decision(false, 0, 1_750_000, Some(750_000))
        );
        assert_exact(&r, &s, T, 1, 750_000);
        // the previous window empty: at the last microsecond of window 5 the
        // next window is 1 µs away; 10 * (P - e'') + 1 * P <= 10 * P =>
        // e'' >= 100_000; d = 1 + 100_000.
        let full = state(5, 0, 10);
        assert_eq!(
            evaluate(&r, &full, 5_999_999, 1),
            decision(false, 0, 1_000_001, Some(100_001))
        );
        assert_exact(&r, &full, 5_999_999, 1, 100_001);
    }

    #[test]
    fn retry_two_windows_later() {
        let r = rule(10, P);
        let s = state(5, 0, 1);
        // cost 10 (= limit): not in window 5 (1 + 10 > 10); in window 6 prev' = 1
        // and 1 * (P - e'') + 10 * P > 10 * P for every e'' < P; window 7 is empty.
        // d = 750_000 + P = 1_750_000. remaining floor(9 * P / P) = 9.
        assert_eq!(
            evaluate(&r, &s, T, 10),
            decision(false, 9, 1_750_000, Some(1_750_000))
        );
        assert_exact(&r, &s, T, 10, 1_750_000);
    }

    #[test]
    fn cost_above_limit_peeks_and_empty_keys() {
        let r = rule(10, P);
        let mut s = state(5, 8, 4);
        // 8 * 750_000 + 4 * P = 10 * P: remaining 0.
        assert_eq!(
            decide(&r, &mut s, T, 11),
            decision(false, 0, 1_750_000, None)
        );
        assert_eq!(decide(&r, &mut s, T, 0), decision(true, 0, 1_750_000, None));
        assert_eq!(s, state(5, 8, 4));
        // nothing in either window: reset_after 0.
        assert_eq!(
            evaluate(&r, &KeyState::Empty, T, 0),
            decision(true, 10, 0, None)
        );
        // a state two windows old counts as empty.
        assert_eq!(
            evaluate(&r, &state(3, 10, 10), T, 0),
            decision(true, 10, 0, None)
        );
        let (d, next) = check(
            &r,
            Some(SlidingWindowState {
                start: 3 * P,
                prev: 10,
                curr: 10,
            }),
            T,
            10,
        );
        assert_eq!(d, decision(true, 0, 1_750_000, None));
        assert_eq!(
            next,
            SlidingWindowState {
                start: 5 * P,
                prev: 0,
                curr: 10
            }
        );
    }

    #[test]
    fn three_per_second() {
        let r = rule(3, P);
        let mut s = KeyState::Empty;
        // remaining floor((3 * P - n * P) / P) = 3 - n; reset (0 + 2) * P.
        for remaining in [2, 1, 0] {
            assert_eq!(
                decide(&r, &mut s, 0, 1),
                Decision {
                    limit: 3,
                    ..decision(true, remaining, 2 * P, None)
                }
            );
        }
        // 4th: in window 1, prev' = 3: 3 * (P - e) + P <= 3 * P => P - e <= 666_666
        // => e >= 333_334; d = P + 333_334.
        assert_eq!(
            decide(&r, &mut s, 0, 1),
            Decision {
                limit: 3,
                ..decision(false, 0, 2 * P, Some(1_333_334))
            }
        );
        assert_exact(&r, &s, 0, 1, 1_333_334);
    }
}
