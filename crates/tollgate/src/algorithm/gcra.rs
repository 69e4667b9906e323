//! GCRA: one timestamp per key, the theoretical arrival time `tat`.
//!
//! ```text
//! tat     = max(stored_tat or t, t)
//! new_tat = tat + cost * T
//! allowed = new_tat - t <= burst * T
//! ```

use std::time::Duration;

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
