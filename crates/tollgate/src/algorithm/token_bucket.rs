//! Token bucket: capacity `burst`, refilled continuously at `limit` per
//! `period`, starting full.
//!
//! Tokens are kept as microseconds of credit (`tokens = credit / T`), so a
//! fractional token is exact and the bucket decides exactly as GCRA does on
//! every trace with non-decreasing time: `credit == burst*T - (tat - t)`.

use std::time::Duration;

use super::{Charged, Usage};
use crate::decision::Decision;
use crate::rule::Rule;
use crate::time::Micros;

/// Token bucket state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct TokenBucketState {
    /// Tokens held, in microseconds of credit (one token = `T` µs);
    /// negative while a charge's debt is being paid off.
    pub credit: i64,
    /// When `credit` was last refilled.
    pub last: Micros,
}

/// Decides a check of `cost` at `t`. Returns the decision and the state to
/// store when admitted (denied checks store nothing).
#[must_use]
pub fn check(
    rule: &Rule,
    state: Option<TokenBucketState>,
    t: Micros,
    cost: u64,
) -> (Decision, TokenBucketState) {
    let tau = rule.tau_micros();
    let (credit, last) = refill(rule, state, t);
    let need = rule.increment_micros(cost);
    let fits = cost <= rule.burst();
    let allowed = fits && credit >= signed(need);
    let after = if allowed {
        credit - signed(need)
    } else {
        credit
    };
    let decision = Decision {
        allowed,
        limit: rule.burst(),
        remaining: unsigned(after) / rule.interval_micros(),
        reset_after: Duration::from_micros(unsigned(signed(tau) - after)),
        retry_after: (!allowed && fits)
            .then(|| Duration::from_micros(unsigned(signed(need) - credit))),
    };
    (
        decision,
        TokenBucketState {
            credit: after,
            last,
        },
    )
}

/// The credit and last refill at `t`: a new key starts full; credit grows
/// by the time since the last refill, up to `tau` (more only when a burst
/// was lowered under live state, which counts as full).
fn refill(rule: &Rule, state: Option<TokenBucketState>, t: Micros) -> (i64, Micros) {
    let tau = signed(rule.tau_micros());
    match state {
        None => (tau, t),
        Some(s) => (
            tau.min(s.credit.saturating_add(signed(t.saturating_sub(s.last)))),
            s.last.max(t),
        ),
    }
}

/// When `state` is a full bucket again: `last + tau - credit` (credit
/// above `tau`, a lowered burst, is full at once).
pub(crate) fn full_at(rule: &Rule, state: TokenBucketState) -> Micros {
    state
        .last
        .saturating_add(unsigned(signed(rule.tau_micros()) - state.credit))
}

/// A time in µs as credit: every time and `tau` is below 2^53.
fn signed(us: Micros) -> i64 {
    i64::try_from(us).unwrap_or(i64::MAX)
}

/// Credit as µs, negative as 0.
fn unsigned(credit: i64) -> Micros {
    u64::try_from(credit).unwrap_or(0)
}

/// Charges `cost` at `t` unconditionally (docs/semantics.md, "Charge"): the
/// credit goes negative by the debt, at most [`Rule::max_debt`] units of it
/// (the rest clamped). Decides exactly as [`gcra::charge`](super::gcra::charge)
/// with `credit == tau - (tat - t)`.
#[must_use]
pub fn charge(
    rule: &Rule,
    state: Option<TokenBucketState>,
    t: Micros,
    cost: u64,
) -> (Charged, TokenBucketState) {
    let tau = rule.tau_micros();
    let interval = rule.interval_micros();
    let (credit, last) = refill(rule, state, t);
    let floor = -signed(rule.max_debt() * interval);
    let units = cost.min(unsigned(credit - floor) / interval);
    let after = credit - signed(units * interval);
    let charged = Charged {
        decision: Decision {
            allowed: true,
            limit: rule.burst(),
            remaining: unsigned(after) / interval,
            reset_after: Duration::from_micros(unsigned(signed(tau) - after)),
            retry_after: None,
        },
        debt: unsigned(-after).div_ceil(interval),
        clamped: cost - units,
    };
    (
        charged,
        TokenBucketState {
            credit: after,
            last,
        },
    )
}

/// Gives `units` back at `t`: `units * T` of credit, never past a full
/// bucket.
#[must_use]
pub fn give_back(rule: &Rule, state: TokenBucketState, t: Micros, units: u64) -> TokenBucketState {
    let (credit, last) = refill(rule, Some(state), t);
    TokenBucketState {
        credit: credit
            .saturating_add(signed(rule.increment_micros(units)))
            .min(signed(rule.tau_micros()).max(credit)),
        last,
    }
}

/// How much of the bucket `state` has drawn at `t`: the credit missing
/// from a full bucket, of `tau`.
#[must_use]
pub fn usage(rule: &Rule, state: TokenBucketState, t: Micros) -> Usage {
    let tau = rule.tau_micros();
    // the refill `check` applies, without taking the unit it asks for
    let (credit, _) = refill(rule, Some(state), t);
    let exhausted = !check(rule, Some(state), t, 1).0.allowed;
    Usage::of(
        u128::from(unsigned(signed(tau) - credit)),
        u128::from(tau),
        exhausted,
    )
}

#[cfg(test)]
mod tests {
    //! Expected values by hand. Tokens are kept as microseconds of credit:
    //! one token is `T = period / limit` µs, a full bucket `tau = burst * T`.
    //! `remaining = floor(credit_after / T)`, `reset_after = tau - credit_after`,
    //! `retry_after = need - credit`.

    use std::time::Duration;

    use super::{TokenBucketState, check};
    use crate::algorithm::{KeyState, decide, evaluate};
    use crate::decision::Decision;
    use crate::rule::{Algorithm, Rule, RuleSpec};

    fn rule(algorithm: Algorithm, limit: u64, period_us: u64, burst: Option<u64>) -> Rule {
        let mut spec = RuleSpec::new("r", algorithm, limit, Duration::from_micros(period_us));
        spec.burst = burst;
        spec.build().expect("valid rule")
    }

    fn tb(limit: u64, period_us: u64, burst: Option<u64>) -> Rule {
        rule(Algorithm::TokenBucket, limit, period_us, burst)
    }

    fn decision(
        allowed: bool,
        limit: u64,
        remaining: u64,
        reset_us: u64,
        retry: Option<u64>,
    ) -> Decision {
        Decision {
            allowed,
            limit,
            remaining,
            reset_after: Duration::from_micros(reset_us),
            retry_after: retry.map(Duration::from_micros),
        }
    }

    #[test]
    fn starts_full_drains_and_refills_continuously() {
        // T = 500_000, tau = 1_000_000.
        let r = tb(2, 1_000_000, None);
        let mut s = KeyState::Empty;
        // credit 1_000_000 - 500_000 = 500_000: remaining 1, reset 500_000.
        assert_eq!(
            decide(&r, &mut s, 0, 1),
            decision(true, 2, 1, 500_000, None)
        );
        assert_eq!(
            s,
            KeyState::TokenBucket(TokenBucketState {
                credit: 500_000,
                last: 0
            })
        );
        assert_eq!(
            decide(&r, &mut s, 0, 1),
            decision(true, 2, 0, 1_000_000, None)
        );
        // need 500_000, credit 0: retry 500_000.
        assert_eq!(
            decide(&r, &mut s, 0, 1),
            decision(false, 2, 0, 1_000_000, Some(500_000))
        );
        // t = 200_000: credit 200_000, retry 300_000, reset 800_000.
        assert_eq!(
            decide(&r, &mut s, 200_000, 1),
            decision(false, 2, 0, 800_000, Some(300_000))
        );
        // denied checks store nothing, not even the refill
        assert_eq!(
            s,
            KeyState::TokenBucket(TokenBucketState { credit: 0, last: 0 })
        );
        // t = 500_000: credit 500_000 = need: admitted, credit 0.
        assert_eq!(
            decide(&r, &mut s, 500_000, 1),
            decision(true, 2, 0, 1_000_000, None)
        );
        // 10 s idle: credit capped at tau = 1_000_000, after 500_000.
        assert_eq!(
            decide(&r, &mut s, 10_500_000, 1),
            decision(true, 2, 1, 500_000, None)
        );
        assert_eq!(
            s,
            KeyState::TokenBucket(TokenBucketState {
                credit: 500_000,
                last: 10_500_000
            })
        );
    }

    #[test]
    fn burst_above_limit() {
        // 1 per 100 ms, burst 3: T = 100_000, tau = 300_000.
        let r = tb(1, 100_000, Some(3));
        let mut s = KeyState::Empty;
        for remaining in [2, 1, 0] {
            let reset = 300_000 - remaining * 100_000;
            assert_eq!(
                decide(&r, &mut s, 1_000, 1),
                decision(true, 3, remaining, reset, None)
            );
        }
        // cost 2 at 151_000: credit 150_000 < need 200_000, retry 50_000.
        assert_eq!(
            decide(&r, &mut s, 151_000, 2),
            decision(false, 3, 1, 150_000, Some(50_000))
        );
        assert_eq!(
            decide(&r, &mut s, 201_000, 2),
            decision(true, 3, 0, 300_000, None)
        );
    }

    #[test]
    fn cost_above_burst_and_peek() {
        let r = tb(1, 100_000, Some(3));
        let mut s = KeyState::TokenBucket(TokenBucketState {
            credit: 120_000,
            last: 0,
        });
        // t = 30_000: credit 150_000 -> remaining 1, reset 150_000.
        assert_eq!(
            decide(&r, &mut s, 30_000, 4),
            decision(false, 3, 1, 150_000, None)
        );
        assert_eq!(
            decide(&r, &mut s, 30_000, 0),
            decision(true, 3, 1, 150_000, None)
        );
        assert_eq!(
            s,
            KeyState::TokenBucket(TokenBucketState {
                credit: 120_000,
                last: 0
            })
        );
        assert_eq!(
            evaluate(&r, &KeyState::Empty, 9, 0),
            decision(true, 3, 3, 0, None)
        );
        // the pure step on a denial hands back the refilled bucket, which
        // `decide` does not store
        let (d, next) = check(&r, Some(TokenBucketState { credit: 0, last: 0 }), 40_000, 1);
        assert_eq!(d, decision(false, 3, 0, 260_000, Some(60_000)));
        assert_eq!(
            next,
            TokenBucketState {
                credit: 40_000,
                last: 40_000
            }
        );
    }

    #[test]
    fn three_per_second_is_sane_although_t_is_not_whole() {
        // T = 333_333, tau = 3 * T = 999_999: credit 666_666, 333_333, 0 after three.
        let r = tb(3, 1_000_000, None);
        let mut s = KeyState::Empty;
        assert_eq!(
            decide(&r, &mut s, 0, 1),
            decision(true, 3, 2, 333_333, None)
        );
        assert_eq!(
            decide(&r, &mut s, 0, 1),
            decision(true, 3, 1, 666_666, None)
        );
        assert_eq!(
            decide(&r, &mut s, 0, 1),
            decision(true, 3, 0, 999_999, None)
        );
        // need 333_333, credit 0: retry 333_333.
        assert_eq!(
            decide(&r, &mut s, 0, 1),
            decision(false, 3, 0, 999_999, Some(333_333))
        );
        assert!(!evaluate(&r, &s, 333_332, 1).allowed);
        assert!(evaluate(&r, &s, 333_333, 1).allowed);
    }

    #[test]
    fn decides_exactly_as_gcra_on_a_scripted_trace() {
        let trace: [(u64, u64); 12] = [
            (0, 1),
            (0, 2),
            (0, 1),
            (10_000, 1),
            (90_000, 0),
            (133_333, 3),
            (133_334, 1),
            (500_000, 5),
            (500_000, 2),
            (800_001, 1),
            (5_000_000, 4),
            (5_000_000, 0),
        ];
        for (limit, period, burst) in [
            (3, 1_000_000, Some(4)),
            (7, 100_000, Some(2)),
            (4, 400_000, None),
        ] {
            let g = rule(Algorithm::Gcra, limit, period, burst);
            let b = tb(limit, period, burst);
            let (mut sg, mut sb) = (KeyState::Empty, KeyState::Empty);
            for &(t, cost) in &trace {
                assert_eq!(
                    decide(&g, &mut sg, t, cost),
                    decide(&b, &mut sb, t, cost),
                    "limit {limit} period {period} burst {burst:?} t {t} cost {cost}"
                );
            }
            // and the stored forms agree: credit == tau - (tat - last)
            if let (KeyState::Gcra(g_state), KeyState::TokenBucket(b_state)) = (&sg, &sb) {
                assert_eq!(
                    b_state.credit,
                    i64::try_from(g.tau_micros() - (g_state.tat - b_state.last))
                        .expect("credit below 2^63")
                );
            } else {
                panic!("states {sg:?} {sb:?}");
            }
        }
    }
}
