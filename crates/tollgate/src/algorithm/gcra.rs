//! GCRA: one timestamp per key, the theoretical arrival time `tat`.
//!
//! ```text
//! tat     = max(stored_tat or t, t)
//! new_tat = tat + cost * T
//! allowed = new_tat - t <= burst * T
//! ```

use std::time::Duration;

use super::{Charged, Usage};
use crate::decision::Decision;
use crate::rule::Rule;
use crate::time::Micros;

/// GCRA state: the theoretical arrival time in microseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct GcraState {
    /// Theoretical arrival time.
    pub tat: Micros,
}

/// Decides a check of `cost` at `t`. Returns the decision and the state to
/// store: the advanced `tat` when admitted, the unchanged one when denied.
#[must_use]
pub fn check(rule: &Rule, state: Option<GcraState>, t: Micros, cost: u64) -> (Decision, GcraState) {
    let tau = rule.tau_micros();
    let tat = state.map_or(t, |s| s.tat.max(t));
    let new_tat = tat.saturating_add(rule.increment_micros(cost));
    let fits = cost <= rule.burst();
    let allowed = fits && new_tat - t <= tau;
    let stored = if allowed { new_tat } else { tat };
    let used = stored - t;
    let decision = Decision {
        allowed,
        limit: rule.burst(),
        remaining: tau.saturating_sub(used) / rule.interval_micros(),
        reset_after: Duration::from_micros(used),
        retry_after: (!allowed && fits).then(|| Duration::from_micros(new_tat - tau - t)),
    };
    (decision, GcraState { tat: stored })
}

/// How much of the burst `state` holds at `t`: `tat - t` of `tau`.
#[must_use]
pub fn usage(rule: &Rule, state: GcraState, t: Micros) -> Usage {
    let exhausted = !check(rule, Some(state), t, 1).0.allowed;
    let used = state.tat.saturating_sub(t);
    Usage::of(u128::from(used), u128::from(rule.tau_micros()), exhausted)
}

/// Charges `cost` at `t` unconditionally (docs/semantics.md, "Charge"):
/// `new_tat = max(tat, t) + cost * T`, the units past the debt cap
/// ([`Rule::max_debt`]) clamped. Returns what the charge answers and the
/// state to store.
#[must_use]
pub fn charge(rule: &Rule, state: Option<GcraState>, t: Micros, cost: u64) -> (Charged, GcraState) {
    let (next, units) = charge_step(rule, state, t, cost);
    (charged(rule, t, next, cost - units), next)
}

/// The state a charge leaves and the units it records: [`charge`]
/// without its answer (the memory store's compare-and-swap loop runs only
/// this, and [`charged`] once it has swapped).
#[inline]
#[must_use]
pub fn charge_step(
    rule: &Rule,
    state: Option<GcraState>,
    t: Micros,
    cost: u64,
) -> (GcraState, u64) {
    let interval = rule.interval_micros();
    let tat = state.map_or(t, |s| s.tat.max(t));
    // The latest TAT the cap allows: `tau` plus `max_debt` units of wait.
    let ceiling = t + rule.tau_micros() + rule.max_debt() * interval;
    let units = cost.min(ceiling.saturating_sub(tat) / interval);
    (
        GcraState {
            tat: tat + units * interval,
        },
        units,
    )
}

/// What a charge that left `next` at `t` answers, `clamped` units not
/// recorded.
#[must_use]
pub fn charged(rule: &Rule, t: Micros, next: GcraState, clamped: u64) -> Charged {
    let tau = rule.tau_micros();
    let interval = rule.interval_micros();
    let used = next.tat - t;
    Charged {
        decision: Decision {
            allowed: true,
            limit: rule.burst(),
            remaining: tau.saturating_sub(used) / interval,
            reset_after: Duration::from_micros(used),
            retry_after: None,
        },
        // No division while within the limit (the usual charge).
        debt: match used.saturating_sub(tau) {
            0 => 0,
            over => over.div_ceil(interval),
        },
        clamped,
    }
}

/// Gives `units` back at `t` (a reservation settled below its estimate, or
/// cancelled): the TAT moves back by `units * T`, never below `t`.
#[must_use]
pub fn give_back(rule: &Rule, state: GcraState, t: Micros, units: u64) -> GcraState {
    GcraState {
        tat: state
            .tat
            .saturating_sub(rule.increment_micros(units))
            .max(t.min(state.tat)),
    }
}

#[cfg(test)]
mod tests {
    //! Expected values are worked out by hand from docs/semantics.md, GCRA:
    //! `T = period / limit`, `tau = burst * T`,
    //! `remaining = floor((tau - (stored - t)) / T)`, `reset_after = stored - t`,
    //! `retry_after = new_tat - tau - t`.

    use std::time::Duration;

    use super::{GcraState, check};
    use crate::algorithm::{KeyState, decide, evaluate};
    use crate::decision::Decision;
    use crate::rule::{Algorithm, Rule, RuleSpec};

    fn rule(limit: u64, period_us: u64, burst: Option<u64>) -> Rule {
        let mut spec = RuleSpec::new(
            "r",
            Algorithm::Gcra,
            limit,
            Duration::from_micros(period_us),
        );
        spec.burst = burst;
        spec.build().expect("valid rule")
    }

    fn allowed(limit: u64, remaining: u64, reset_us: u64) -> Decision {
        Decision {
            allowed: true,
            limit,
            remaining,
            reset_after: Duration::from_micros(reset_us),
            retry_after: None,
        }
    }

    fn denied(limit: u64, remaining: u64, reset_us: u64, retry_us: Option<u64>) -> Decision {
        Decision {
            allowed: false,
            limit,
            remaining,
            reset_after: Duration::from_micros(reset_us),
            retry_after: retry_us.map(Duration::from_micros),
        }
    }

    #[test]
    fn two_per_second_counts_down_and_retries_exactly() {
        // T = 1_000_000 / 2 = 500_000, tau = 2 * 500_000 = 1_000_000.
        let r = rule(2, 1_000_000, None);
        let mut s = KeyState::Empty;
        // tat = 0, new_tat = 500_000 <= 0 + tau; remaining (1e6 - 5e5) / 5e5 = 1.
        assert_eq!(decide(&r, &mut s, 0, 1), allowed(2, 1, 500_000));
        // new_tat = 1_000_000 - 0 <= tau; remaining 0; reset 1e6.
        assert_eq!(decide(&r, &mut s, 0, 1), allowed(2, 0, 1_000_000));
        assert_eq!(s, KeyState::Gcra(GcraState { tat: 1_000_000 }));
        // new_tat = 1_500_000 > tau: retry = 1_500_000 - 1_000_000 - 0 = 500_000.
        assert_eq!(
            decide(&r, &mut s, 0, 1),
            denied(2, 0, 1_000_000, Some(500_000))
        );
        // at t = 499_999: retry = 1_500_000 - 1_000_000 - 499_999 = 1;
        // reset = 1_000_000 - 499_999 = 500_001; remaining (1e6 - 500_001) / 5e5 = 0.
        assert_eq!(
            decide(&r, &mut s, 499_999, 1),
            denied(2, 0, 500_001, Some(1))
        );
        assert_eq!(s, KeyState::Gcra(GcraState { tat: 1_000_000 }));
        // at t = 500_000: new_tat - t = 1_500_000 - 500_000 = tau: admitted.
        assert_eq!(decide(&r, &mut s, 500_000, 1), allowed(2, 0, 1_000_000));
        // a long idle time resets: tat = max(1_500_000, 9_000_000) = t.
        assert_eq!(decide(&r, &mut s, 9_000_000, 1), allowed(2, 1, 500_000));
    }

    #[test]
    fn burst_above_limit_admits_the_burst_then_the_rate() {
        // 1 per 100 ms, burst 3: T = 100_000, tau = 300_000.
        let r = rule(1, 100_000, Some(3));
        let mut s = KeyState::Empty;
        assert_eq!(decide(&r, &mut s, 0, 1), allowed(3, 2, 100_000));
        assert_eq!(decide(&r, &mut s, 0, 1), allowed(3, 1, 200_000));
        assert_eq!(decide(&r, &mut s, 0, 1), allowed(3, 0, 300_000));
        // new_tat = 400_000: retry = 400_000 - 300_000 - 0 = 100_000.
        assert_eq!(
            decide(&r, &mut s, 0, 1),
            denied(3, 0, 300_000, Some(100_000))
        );
        // t = 250_000: new_tat = 400_000, used 150_000 <= tau;
        // remaining (300_000 - 150_000) / 100_000 = 1.
        assert_eq!(decide(&r, &mut s, 250_000, 1), allowed(3, 1, 150_000));
        // cost 2 at 250_000: new_tat = 400_000 + 200_000 = 600_000,
        // 600_000 - 250_000 = 350_000 > tau; retry = 600_000 - 300_000 - 250_000 = 50_000.
        assert_eq!(
            decide(&r, &mut s, 250_000, 2),
            denied(3, 1, 150_000, Some(50_000))
        );
        // at 300_000: 600_000 - 300_000 = tau, admitted; remaining 0.
        assert_eq!(decide(&r, &mut s, 300_000, 2), allowed(3, 0, 300_000));
    }

    #[test]
    fn cost_above_burst_is_never_admitted_and_changes_nothing() {
        let r = rule(1, 100_000, Some(3));
        let mut s = KeyState::Gcra(GcraState { tat: 100_000 });
        // used = 100_000 - 0; remaining (300_000 - 100_000) / 100_000 = 2.
        assert_eq!(decide(&r, &mut s, 0, 4), denied(3, 2, 100_000, None));
        assert_eq!(decide(&r, &mut s, 0, u64::MAX), denied(3, 2, 100_000, None));
        assert_eq!(s, KeyState::Gcra(GcraState { tat: 100_000 }));
        // even on an empty key
        assert_eq!(
            decide(&r, &mut KeyState::Empty, 7, 4),
            denied(3, 3, 0, None)
        );
    }

    #[test]
    fn peek_reports_the_state_and_consumes_nothing() {
        let r = rule(1, 100_000, Some(3));
        let mut s = KeyState::Gcra(GcraState { tat: 200_000 });
        // t = 50_000: used = 150_000, remaining (300_000 - 150_000) / 100_000 = 1.
        assert_eq!(decide(&r, &mut s, 50_000, 0), allowed(3, 1, 150_000));
        assert_eq!(s, KeyState::Gcra(GcraState { tat: 200_000 }));
        // a peek on a full bucket is admitted too, reporting zero left
        let mut full = KeyState::Gcra(GcraState { tat: 300_000 });
        assert_eq!(decide(&r, &mut full, 0, 0), allowed(3, 0, 300_000));
        assert_eq!(full, KeyState::Gcra(GcraState { tat: 300_000 }));
        // an empty key
        assert_eq!(evaluate(&r, &KeyState::Empty, 5, 0), allowed(3, 3, 0));
    }

    #[test]
    fn pure_step_returns_the_unchanged_tat_on_denial() {
        let r = rule(1, 100_000, Some(1));
        let (d, next) = check(&r, Some(GcraState { tat: 150_000 }), 60_000, 1);
        // new_tat = 250_000, used 190_000 > 100_000; retry 250_000 - 100_000 - 60_000.
        assert_eq!(d, denied(1, 0, 90_000, Some(90_000)));
        assert_eq!(next, GcraState { tat: 150_000 });
    }

    #[test]
    fn three_per_second_is_sane_although_t_is_not_whole() {
        // T = floor(1_000_000 / 3) = 333_333, tau = 3 * T = 999_999.
        let r = rule(3, 1_000_000, None);
        assert_eq!((r.interval_micros(), r.tau_micros()), (333_333, 999_999));
        let mut s = KeyState::Empty;
        // remaining (999_999 - 333_333) / 333_333 = 2
        assert_eq!(decide(&r, &mut s, 0, 1), allowed(3, 2, 333_333));
        assert_eq!(decide(&r, &mut s, 0, 1), allowed(3, 1, 666_666));
        assert_eq!(decide(&r, &mut s, 0, 1), allowed(3, 0, 999_999));
        // new_tat = 1_333_332 > tau; retry = 1_333_332 - 999_999 = 333_333.
        assert_eq!(
            decide(&r, &mut s, 0, 1),
            denied(3, 0, 999_999, Some(333_333))
        );
        assert!(!evaluate(&r, &s, 333_332, 1).allowed);
        assert!(evaluate(&r, &s, 333_333, 1).allowed);
        // cost 3 takes 3 * T, the whole burst window
        assert_eq!(
            decide(&r, &mut KeyState::Empty, 0, 3),
            allowed(3, 0, 999_999)
        );
    }

    #[test]
    fn a_burst_is_exactly_burst_units_although_t_is_not_whole() {
        // 3 per 1 ms with burst 1000: T = 333 µs, tau = 333_000 µs. With
        // tau = floor(burst * period / limit) = 333_333 a 1001st unit fit.
        let r = rule(3, 1_000, Some(1_000));
        let mut s = KeyState::Empty;
        assert_eq!(evaluate(&r, &s, 0, 0).remaining, 1_000);
        for _ in 0..1_000 {
            assert!(decide(&r, &mut s, 0, 1).allowed);
        }
        assert!(!decide(&r, &mut s, 0, 1).allowed);
    }
}
