//! Sliding log: one entry per admitted check (entries made at the same
//! microsecond are merged). An entry made at `s` counts while `t < s + period`.

use std::collections::VecDeque;
use std::time::Duration;

use super::{Charged, Usage};
use crate::decision::Decision;
use crate::rule::Rule;
use crate::time::Micros;

/// The log of admitted `(timestamp, cost)` entries, oldest first.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SlidingLog {
    entries: VecDeque<(Micros, u64)>,
}

impl SlidingLog {
    /// An empty log.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// The stored entries, oldest first (expired ones may linger until the
    /// next admitted check prunes them).
    pub fn entries(&self) -> impl ExactSizeIterator<Item = (Micros, u64)> + '_ {
        self.entries.iter().copied()
    }

    /// How many entries are stored.
    #[must_use]
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether no entry is stored.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The newest entry's timestamp.
    #[must_use]
    pub fn newest(&self) -> Option<Micros> {
        self.entries.back().map(|e| e.0)
    }

    /// Index of the first entry still counting at `t`, and the units counting.
    fn live(&self, period: Micros, t: Micros) -> (usize, u64) {
        let start = self
            .entries
            .iter()
            .position(|&(s, _)| s.saturating_add(period) > t)
            .unwrap_or(self.entries.len());
        let used = self.entries.range(start..).map(|e| e.1).sum();
        (start, used)
    }

    /// Records an admitted check: drops expired entries and appends
    /// `(t, cost)`. Call only after [`check`] admitted it.
    pub fn record(&mut self, rule: &Rule, t: Micros, cost: u64) {
        let period = rule.period_micros();
        while self
            .entries
            .front()
            .is_some_and(|&(s, _)| s.saturating_add(period) <= t)
        {
            self.entries.pop_front();
        }
        if cost == 0 {
            return;
        }
        match self.entries.back_mut() {
            Some(last) if last.0 == t => last.1 += cost,
            Some(last) if last.0 > t => {
                // time went backwards: keep the log sorted
                let at = self.entries.partition_point(|&(s, _)| s <= t);
                if at > 0 && self.entries[at - 1].0 == t {
                    self.entries[at - 1].1 += cost;
                } else {
                    self.entries.insert(at, (t, cost));
                }
            }
            _ => self.entries.push_back((t, cost)),
        }
    }
    /// Takes `units` off the entries counting at `t`, newest first (a
    /// refund, docs/semantics.md "Refund"), removing each emptied entry.
    pub fn refund(&mut self, period: Micros, t: Micros, units: u64) {
        let (start, _) = self.live(period, t);
        let mut left = units;
        while left > 0 && self.entries.len() > start {
            let Some(last) = self.entries.back_mut() else {
                break;
            };
            let take = left.min(last.1);
            last.1 -= take;
            left -= take;
            if last.1 == 0 {
                self.entries.pop_back();
            }
        }
    }

    /// Shrinks the entry made at `counted_at` by up to `units` (a
    /// reservation settled below its estimate, or cancelled), removing it
    /// when nothing is left; nothing when no entry was made then.
    pub fn give_back(&mut self, counted_at: Micros, units: u64) {
        let at = self.entries.partition_point(|&(s, _)| s < counted_at);
        if let Some(entry) = self.entries.get_mut(at).filter(|e| e.0 == counted_at) {
            entry.1 -= units.min(entry.1);
            if entry.1 == 0 {
                self.entries.remove(at);
            }
        }
    }
}

/// Charges `cost` at `t` unconditionally (docs/semantics.md, "Charge"):
/// appends `(t, cost)` (merged with an entry of the same microsecond), so far
/// as the units counting stay within `limit` + [`Rule::max_debt`] (the rest
/// clamped).
pub fn charge(rule: &Rule, log: &mut SlidingLog, t: Micros, cost: u64) -> Charged {
    let period = rule.period_micros();
    let limit = rule.limit();
    let (_, used) = log.live(period, t);
    let units = cost.min((limit + rule.max_debt()).saturating_sub(used));
    log.record(rule, t, units);
    let after = used + units;
    let (start, _) = log.live(period, t);
    let newest = log.newest().filter(|_| start < log.len());
    Charged {
        decision: Decision {
            allowed: true,
            limit,
            remaining: limit.saturating_sub(after),
            reset_after: Duration::from_micros(newest.map_or(0, |n| n + period - t)),
            retry_after: None,
        },
        debt: after.saturating_sub(limit),
        clamped: cost - units,
    }
}

/// Decides a check of `cost` at `t` without changing the log. When it is
/// admitted with `cost > 0`, the caller records it with [`SlidingLog::record`].
#[must_use]
pub fn check(rule: &Rule, log: &SlidingLog, t: Micros, cost: u64) -> Decision {
    let period = rule.period_micros();
    let limit = rule.limit();
    let (start, used) = log.live(period, t);
    let capable = cost <= limit;
    let allowed = capable && used + cost <= limit;
    let after = if allowed { used + cost } else { used };
    let newest = if allowed && cost > 0 {
        Some(log.newest().map_or(t, |n| n.max(t)))
    } else {
        log.newest().filter(|_| start < log.len())
    };
    let retry_after = (!allowed && capable).then(|| {
        let mut freed = 0;
        log.entries
            .range(start..)
            .find(|&&(_, c)| {
                freed += c;
                used - freed + cost <= limit
            })
            .map_or(0, |&(s, _)| s + period - t)
    });
    Decision {
        allowed,
        limit,
        // `after` exceeds `limit` when the rule was lowered over live state
        remaining: limit.saturating_sub(after),
        reset_after: Duration::from_micros(newest.map_or(0, |n| n + period - t)),
        retry_after: retry_after.map(Duration::from_micros),
    }
}

/// How much of the limit `log` holds at `t`: the units of its entries
/// still counting.
#[must_use]
pub fn usage(rule: &Rule, log: &SlidingLog, t: Micros) -> Usage {
    let (_, used) = log.live(rule.period_micros(), t);
    let exhausted = !check(rule, log, t, 1).allowed;
    Usage::of(u128::from(used), u128::from(rule.limit()), exhausted)
}

#[cfg(test)]
mod tests {
    //! Expected values by hand from docs/semantics.md, sliding log, limit 5 per
    //! 1 s (P = 1_000_000): an entry made at `s` counts while `t < s + P`.

    use std::time::Duration;

    use super::{SlidingLog, check};
    use crate::algorithm::{KeyState, decide, evaluate};
    use crate::decision::Decision;
    use crate::rule::{Algorithm, Rule, RuleSpec};

    const P: u64 = 1_000_000;

    fn rule(limit: u64) -> Rule {
        RuleSpec::new("r", Algorithm::SlidingLog, limit, Duration::from_micros(P))
            .build()
            .expect("valid rule")
    }

    fn decision(allowed: bool, remaining: u64, reset_us: u64, retry: Option<u64>) -> Decision {
        Decision {
            allowed,
            limit: 5,
            remaining,
            reset_after: Duration::from_micros(reset_us),
            retry_after: retry.map(Duration::from_micros),
        }
    }

    fn entries(s: &KeyState) -> Vec<(u64, u64)> {
        match s {
            KeyState::SlidingLog(log) => log.entries().collect(),
            other => panic!("not a log: {other:?}"),
        }
    }

    /// The log (100, 2), (200, 1 + 1 merged), (300, 1): 5 units used.
    fn full() -> KeyState {
        let r = rule(5);
        let mut s = KeyState::Empty;
        // remaining 5 - 2 = 3, reset 100 + P - 100 = P.
        assert_eq!(decide(&r, &mut s, 100, 2), decision(true, 3, P, None));
        assert_eq!(decide(&r, &mut s, 200, 1), decision(true, 2, P, None));
        assert_eq!(decide(&r, &mut s, 200, 1), decision(true, 1, P, None));
        assert_eq!(decide(&r, &mut s, 300, 1), decision(true, 0, P, None));
        s
    }

    #[test]
    fn same_microsecond_entries_are_merged() {
        assert_eq!(entries(&full()), vec![(100, 2), (200, 2), (300, 1)]);
    }

    #[test]
    fn retry_waits_for_as_many_entries_as_needed() {
        let r = rule(5);
        let s = full();
        // cost 3 at 400: freeing (100, 2) leaves 3 + 3 > 5; freeing (200, 2) too
        // leaves 1 + 3 <= 5, so s_k = 200: retry 200 + P - 400 = 999_800.
        // reset = newest 300 + P - 400 = 999_900.
        assert_eq!(
            evaluate(&r, &s, 400, 3),
            decision(false, 0, 999_900, Some(999_800))
        );
        assert!(evaluate(&r, &s, 400 + 999_800, 3).allowed);
        assert!(!evaluate(&r, &s, 400 + 999_799, 3).allowed);
        // cost 1: freeing (100, 2) is enough: retry 100 + P - 400 = 999_700.
        assert_eq!(
            evaluate(&r, &s, 400, 1),
            decision(false, 0, 999_900, Some(999_700))
        );
        // cost 5 needs all three entries gone: 300 + P - 400 = 999_900.
        assert_eq!(
            evaluate(&r, &s, 400, 5),
            decision(false, 0, 999_900, Some(999_900))
        );
        // cost 6 > limit: never.
        assert_eq!(evaluate(&r, &s, 400, 6), decision(false, 0, 999_900, None));
    }

    #[test]
    fn entries_expire_exactly_one_period_later() {
        let r = rule(5);
        let mut s = full();
        // at 100 + P - 1 the first entry still counts: peek remaining 0.
        assert_eq!(decide(&r, &mut s, P + 99, 0), decision(true, 0, 201, None));
        // at 100 + P it does not: remaining 2, reset 300 + P - (P + 100) = 200.
        assert_eq!(decide(&r, &mut s, P + 100, 0), decision(true, 2, 200, None));
        // peeks and denials leave the log as it was, expired entries included.
        assert_eq!(
            decide(&r, &mut s, P + 100, 3),
            decision(false, 2, 200, Some(100))
        );
        assert_eq!(entries(&s), vec![(100, 2), (200, 2), (300, 1)]);
        // an admitted check drops what expired: (100, 2) and (200, 2) at P + 250.
        // used 1 + 2: remaining 2, reset P + 250 + P - (P + 250) = P.
        assert_eq!(decide(&r, &mut s, P + 250, 2), decision(true, 2, P, None));
        assert_eq!(entries(&s), vec![(300, 1), (P + 250, 2)]);
        // once everything expired the reset is 0.
        assert_eq!(decide(&r, &mut s, 3 * P, 0), decision(true, 5, 0, None));
        assert_eq!(
            check(&r, &SlidingLog::new(), 7, 0),
            decision(true, 5, 0, None)
        );
    }

    #[test]
    fn three_per_second() {
        let r = RuleSpec::new("r", Algorithm::SlidingLog, 3, Duration::from_secs(1))
            .build()
            .expect("valid rule");
        let mut s = KeyState::Empty;
        for (t, remaining) in [(0, 2), (10, 1), (20, 0)] {
            // reset = t + P - t = P: the newest entry is the one just made.
            assert_eq!(
                decide(&r, &mut s, t, 1),
                Decision {
                    limit: 3,
                    ..decision(true, remaining, P, None)
                }
            );
        }
        // 4th at 30: freeing (0, 1) suffices: retry 0 + P - 30; reset 20 + P - 30.
        assert_eq!(
            decide(&r, &mut s, 30, 1),
            Decision {
                limit: 3,
                ..decision(false, 0, P - 10, Some(P - 30))
            }
        );
    }

    #[test]
    fn a_lowered_limit_over_live_entries_reports_zero_remaining() {
        // The log was filled under limit 5; the rule now says 2.
        // Regression: `limit - used` underflowed.
        let r = RuleSpec::new("r", Algorithm::SlidingLog, 2, Duration::from_micros(P))
            .build()
            .expect("valid rule");
        let mut s = full();
        // used 5 > 2. cost 1 needs used - freed + 1 <= 2: freeing (100, 2)
        // leaves 3, (200, 2) too leaves 1: retry 200 + P - 400; reset 300 + P - 400.
        let d = decide(&r, &mut s, 400, 1);
        assert_eq!(
            d,
            Decision {
                limit: 2,
                ..decision(false, 0, 999_900, Some(999_800))
            }
        );
        assert_eq!(decide(&r, &mut s, 400, 0).remaining, 0);
    }
}
