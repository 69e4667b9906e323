//! Token bucket: capacity `burst`, refilled continuously at `limit` per
//! `period`, starting full.
//!
//! Tokens are kept as microseconds of credit (`tokens = credit / T`), so a
//! fractional token is exact and the bucket decides exactly as GCRA does on
//! every trace with non-decreasing time: `credit == burst*T - (tat - t)`.

use std::time::Duration;

use crate::decision::Decision;
use crate::rule::Rule;
use crate::time::Micros;

/// Token bucket state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct TokenBucketState {
    /// Tokens held, in microseconds of credit (one token = `T` µs).
    pub credit: Micros,
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
    let (credit, last) = match state {
        None => (tau, t),
        Some(s) => (
            tau.min(s.credit.saturating_add(t.saturating_sub(s.last))),
            s.last.max(t),
        ),
    };
    let need = rule.increment_micros(cost);
    let fits = cost <= rule.burst();
    let allowed = fits && credit >= need;
    let after = if allowed { credit - need } else { credit };
    let decision = Decision {
        allowed,
        limit: rule.burst(),
        remaining: after / rule.interval_micros(),
        reset_after: Duration::from_micros(tau - after),
        retry_after: (!allowed && fits).then(|| Duration::from_micros(need - credit)),
    };
    (decision, TokenBucketState { credit: after, last })
}
