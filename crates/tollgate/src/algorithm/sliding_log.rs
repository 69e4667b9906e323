//! Sliding log: one entry per admitted check (entries made at the same
//! microsecond are merged). An entry made at `s` counts while `t < s + period`.

use std::collections::VecDeque;
use std::time::Duration;

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
        remaining: limit - after,
        reset_after: Duration::from_micros(newest.map_or(0, |n| n + period - t)),
        retry_after: retry_after.map(Duration::from_micros),
    }
}
