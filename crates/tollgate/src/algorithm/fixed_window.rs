//! Fixed window: a counter per epoch-aligned window `w = floor(t / period)`.

use std::time::Duration;

use super::{Charged, Usage};
use crate::decision::Decision;
use crate::rule::Rule;
use crate::time::Micros;

/// Fixed window state: the counted window's start and its count.
///
/// The window is identified by its start time, not its index, so state left
/// by a rule of another period (a config change under live keys) can never
/// pass for a later window of the new period.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct FixedWindowState {
    /// `floor(t / period) * period`: the counted window's start, µs.
    pub start: u64,
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
    let start = w * period;
    let count = state.filter(|s| s.start == start).map_or(0, |s| s.count);
    let fits = cost <= limit;
    let allowed = fits && count + cost <= limit;
    let after = if allowed { count + cost } else { count };
    let to_next = (w + 1) * period - t;
    let decision = Decision {
        allowed,
        limit,
        // `after` exceeds `limit` when the rule was lowered over live state
        remaining: limit.saturating_sub(after),
        reset_after: Duration::from_micros(to_next),
        retry_after: (!allowed && fits).then(|| Duration::from_micros(to_next)),
    };
    (
        decision,
        FixedWindowState {
            start,
            count: after,
        },
    )
}

/// How much of the limit `state` holds at `t`: its count if it is the
/// count of `t`'s window, else nothing.
#[must_use]
pub fn usage(rule: &Rule, state: FixedWindowState, t: Micros) -> Usage {
    let (decision, seen) = check(rule, Some(state), t, 1);
    let count = if decision.allowed {
        seen.count - 1
    } else {
        seen.count
    };
    Usage::of(
        u128::from(count),
        u128::from(rule.limit()),
        !decision.allowed,
    )
}

/// Charges `cost` at `t` unconditionally (docs/semantics.md, "Charge"):
/// `count[w] += cost`, at most [`Rule::max_debt`] over the limit (the rest
/// clamped); the debt ends with the window.
#[must_use]
pub fn charge(
    rule: &Rule,
    state: Option<FixedWindowState>,
    t: Micros,
    cost: u64,
) -> (Charged, FixedWindowState) {
    let period = rule.period_micros();
    let limit = rule.limit();
    let start = t / period * period;
    let count = state.filter(|s| s.start == start).map_or(0, |s| s.count);
    let units = cost.min((limit + rule.max_debt()).saturating_sub(count));
    let after = count + units;
    let charged = Charged {
        decision: Decision {
            allowed: true,
            limit,
            remaining: limit.saturating_sub(after),
            reset_after: Duration::from_micros(start + period - t),
            retry_after: None,
        },
        debt: after.saturating_sub(limit),
        clamped: cost - units,
    };
    (
        charged,
        FixedWindowState {
            start,
            count: after,
        },
    )
}

/// Gives back `units` counted in the window that held `counted_at`, if that
/// window is still the state's (a window that has ended counts nothing).
#[must_use]
pub fn give_back(
    rule: &Rule,
    state: FixedWindowState,
    counted_at: Micros,
    units: u64,
) -> FixedWindowState {
    let period = rule.period_micros();
    if state.start != counted_at / period * period {
        return state;
    }
    FixedWindowState {
        start: state.start,
        count: state.count - units.min(state.count),
    }
}

#[cfg(test)]
mod tests {
    //! Expected values by hand from docs/semantics.md, fixed window:
    //! `w = floor(t / period)`, `remaining = limit - count[w]`,
    //! `reset_after = retry_after = (w + 1) * period - t`.

    use std::time::Duration;

    use super::{FixedWindowState, check};
    use crate::algorithm::{KeyState, decide};
    use crate::decision::Decision;
    use crate::rule::{Algorithm, Rule, RuleSpec};

    fn rule(limit: u64, period_us: u64) -> Rule {
        RuleSpec::new(
            "r",
            Algorithm::FixedWindow,
            limit,
            Duration::from_micros(period_us),
        )
        .build()
        .expect("valid rule")
    }

    fn decision(allowed: bool, remaining: u64, reset_us: u64, retry: Option<u64>) -> Decision {
        Decision {
            allowed,
            limit: 3,
            remaining,
            reset_after: Duration::from_micros(reset_us),
            retry_after: retry.map(Duration::from_micros),
        }
    }

    #[test]
    fn counts_per_aligned_window_and_retries_at_its_end() {
        // 3 per 1 s. t = 2_250_000: w = 2, end of window 3_000_000, to_next 750_000.
        let r = rule(3, 1_000_000);
        let mut s = KeyState::Empty;
        assert_eq!(
            decide(&r, &mut s, 2_250_000, 1),
            decision(true, 2, 750_000, None)
        );
        assert_eq!(
            decide(&r, &mut s, 2_250_000, 1),
            decision(true, 1, 750_000, None)
        );
        // t = 2_500_000: to_next 500_000.
        assert_eq!(
            decide(&r, &mut s, 2_500_000, 1),
            decision(true, 0, 500_000, None)
        );
        assert_eq!(
            s,
            KeyState::FixedWindow(FixedWindowState {
                start: 2_000_000,
                count: 3
            })
        );
        assert_eq!(
            decide(&r, &mut s, 2_500_000, 1),
            decision(false, 0, 500_000, Some(500_000))
        );
        // the last microsecond of the window: still denied, retry 1.
        assert_eq!(
            decide(&r, &mut s, 2_999_999, 1),
            decision(false, 0, 1, Some(1))
        );
        // the window boundary: w = 3, count 0, to_next 1_000_000.
        assert_eq!(
            decide(&r, &mut s, 3_000_000, 1),
            decision(true, 2, 1_000_000, None)
        );
        // skipping a window forgets everything.
        assert_eq!(
            decide(&r, &mut s, 5_000_001, 3),
            decision(true, 0, 999_999, None)
        );
    }

    #[test]
    fn a_larger_cost_waits_for_the_next_window_and_never_above_limit() {
        let r = rule(3, 1_000_000);
        let mut s = KeyState::FixedWindow(FixedWindowState {
            start: 7_000_000,
            count: 2,
        });
        // count 2 + cost 2 > 3: retry to_next = 8_000_000 - 7_100_000.
        assert_eq!(
            decide(&r, &mut s, 7_100_000, 2),
            decision(false, 1, 900_000, Some(900_000))
        );
        // cost 4 > limit: never, reporting the state.
        assert_eq!(
            decide(&r, &mut s, 7_100_000, 4),
            decision(false, 1, 900_000, None)
        );
        // peek: admitted, remaining 1, nothing consumed.
        assert_eq!(
            decide(&r, &mut s, 7_100_000, 0),
            decision(true, 1, 900_000, None)
        );
        assert_eq!(
            s,
            KeyState::FixedWindow(FixedWindowState {
                start: 7_000_000,
                count: 2
            })
        );
        // cost 1 fills it exactly
        assert_eq!(
            decide(&r, &mut s, 7_100_000, 1),
            decision(true, 0, 900_000, None)
        );
        // a peek on an empty key still reports the window's end (SEMANTICS)
        assert_eq!(
            decide(&r, &mut KeyState::Empty, 7_100_000, 0),
            decision(true, 3, 900_000, None)
        );
    }

    #[test]
    fn a_state_from_a_past_window_counts_as_empty() {
        let r = rule(3, 1_000);
        let (d, next) = check(
            &r,
            Some(FixedWindowState {
                start: 4_000,
                count: 3,
            }),
            5_000,
            1,
        );
        // w = 5, to_next = 6_000 - 5_000.
        assert_eq!(d, decision(true, 2, 1_000, None));
        assert_eq!(
            next,
            FixedWindowState {
                start: 5_000,
                count: 1
            }
        );
    }

    #[test]
    fn three_per_second() {
        let r = rule(3, 1_000_000);
        let mut s = KeyState::Empty;
        for remaining in [2, 1, 0] {
            assert_eq!(
                decide(&r, &mut s, 0, 1),
                decision(true, remaining, 1_000_000, None)
            );
        }
        assert_eq!(
            decide(&r, &mut s, 0, 1),
            decision(false, 0, 1_000_000, Some(1_000_000))
        );
    }

    #[test]
    fn a_lowered_limit_over_live_state_reports_zero_remaining() {
        // A rule reloaded under the same name with a lower limit finds a
        // count above it (the memory store keys state by rule name; Redis
        // state outlives a deploy). Regression: `limit - count` underflowed
        // (a panic in debug, remaining = 2^64 - 3 in release).
        let r = rule(2, 1_000_000);
        let mut s = KeyState::FixedWindow(FixedWindowState { start: 0, count: 5 });
        let peek = decide(&r, &mut s, 400_000, 0);
        // count 5 + 0 > 2: even a peek is denied until the window ends.
        assert_eq!(
            peek,
            Decision {
                limit: 2,
                ..decision(false, 0, 600_000, Some(600_000))
            }
        );
        assert_eq!(
            decide(&r, &mut s, 1_000_000, 2),
            Decision {
                limit: 2,
                ..decision(true, 0, 1_000_000, None)
            }
        );
    }
}
