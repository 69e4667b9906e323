//! The reference models the properties compare the algorithms with:
//! docs/semantics.md's formulas written as plainly as possible (a `Vec` of
//! admitted checks scanned on every check, a wait searched for one
//! microsecond at a time), so that they are obviously right.

use std::time::Duration;

use tollgate::{Decision, Rule};

fn us(x: u64) -> Duration {
    Duration::from_micros(x)
}

/// GCRA exactly as docs/semantics.md writes it, for rules whose `T` is whole;
/// `T` and `tau` are computed here, not taken from the rule.
pub(crate) struct GcraRef {
    t: i128,
    tau: i128,
    burst: u64,
    tat: Option<i128>,
}

impl GcraRef {
    pub(crate) fn new(r: &Rule) -> Self {
        assert_eq!(r.period_micros() % r.limit(), 0, "whole T only");
        let t = i128::from(r.period_micros() / r.limit());
        Self {
            t,
            tau: i128::from(r.burst()) * t,
            burst: r.burst(),
            tat: None,
        }
    }

    pub(crate) fn check(&mut self, now: u64, cost: u64) -> Decision {
        let now = i128::from(now);
        let tat = self.tat.unwrap_or(now).max(now);
        let new_tat = tat + i128::from(cost) * self.t;
        let allowed = new_tat - now <= self.tau;
        if allowed {
            self.tat = Some(new_tat);
        }
        let stored = if allowed { new_tat } else { tat };
        let n = |x: i128| u64::try_from(x).expect("non-negative");
        Decision {
            allowed,
            limit: self.burst,
            remaining: n((self.tau - (stored - now)) / self.t),
            reset_after: us(n(stored - now)),
            retry_after: (!allowed && cost <= self.burst).then(|| us(n(new_tat - self.tau - now))),
        }
    }
}

/// A textbook token bucket counting tokens exactly as `tokens * period`:
/// `limit` per µs flow in, a token is `period`, the bucket holds
/// `burst * period`.
pub(crate) struct BucketRef {
    period: u128,
    limit: u128,
    burst: u64,
    scaled: u128,
    last: Option<u64>,
}

impl BucketRef {
    pub(crate) fn new(r: &Rule) -> Self {
        Self {
            period: u128::from(r.period_micros()),
            limit: u128::from(r.limit()),
            burst: r.burst(),
            scaled: u128::from(r.burst()) * u128::from(r.period_micros()),
            last: None,
        }
    }

    pub(crate) fn check(&mut self, now: u64, cost: u64) -> Decision {
        let full = u128::from(self.burst) * self.period;
        let elapsed = u128::from(now - self.last.unwrap_or(now));
        let have = (self.scaled + elapsed * self.limit).min(full);
        let need = u128::from(cost) * self.period;
        let allowed = cost <= self.burst && have >= need;
        let after = if allowed { have - need } else { have };
        if allowed && cost > 0 {
            self.scaled = after;
            self.last = Some(now);
        }
        let n = |x: u128| u64::try_from(x).expect("fits");
        Decision {
            allowed,
            limit: self.burst,
            remaining: n(after / self.period),
            reset_after: us(n((full - after).div_ceil(self.limit))),
            retry_after: (!allowed && cost <= self.burst)
                .then(|| us(n((need - have).div_ceil(self.limit)))),
        }
    }
}

/// Fixed window by counting every admitted check in `t`'s window.
pub(crate) struct FixedRef {
    period: u64,
    limit: u64,
    admitted: Vec<(u64, u64)>,
}

impl FixedRef {
    pub(crate) fn new(r: &Rule) -> Self {
        Self {
            period: r.period_micros(),
            limit: r.limit(),
            admitted: Vec::new(),
        }
    }

    pub(crate) fn check(&mut self, t: u64, cost: u64) -> Decision {
        let w = t / self.period;
        let count: u64 = self
            .admitted
            .iter()
            .filter(|e| e.0 / self.period == w)
            .map(|e| e.1)
            .sum();
        let allowed = cost <= self.limit && count + cost <= self.limit;
        if allowed {
            self.admitted.push((t, cost));
        }
        let end = (w + 1) * self.period - t;
        Decision {
            allowed,
            limit: self.limit,
            remaining: self.limit - count - if allowed { cost } else { 0 },
            reset_after: us(end),
            retry_after: (!allowed && cost <= self.limit).then(|| us(end)),
        }
    }
}

/// Sliding log as a plain `Vec` of every admitted check, never merged or
/// pruned.
pub(crate) struct LogRef {
    period: u64,
    limit: u64,
    admitted: Vec<(u64, u64)>,
}

impl LogRef {
    pub(crate) fn new(r: &Rule) -> Self {
        Self {
            period: r.period_micros(),
            limit: r.limit(),
            admitted: Vec::new(),
        }
    }

    fn live(&self, at: u64) -> impl Iterator<Item = &(u64, u64)> {
        self.admitted
            .iter()
            .filter(move |e| e.0 <= at && at < e.0 + self.period)
    }

    fn used(&self, at: u64) -> u64 {
        self.live(at).map(|e| e.1).sum()
    }

    pub(crate) fn check(&mut self, t: u64, cost: u64) -> Decision {
        let used = self.used(t);
        let capable = cost <= self.limit;
        let allowed = capable && used + cost <= self.limit;
        // Nothing changes between expiries, so the earliest admitting
        // moment is one of them: try each in order.
        let retry_after = (!allowed && capable).then(|| {
            let mut expiries: Vec<u64> = self.live(t).map(|e| e.0 + self.period - t).collect();
            expiries.sort_unstable();
            let d = expiries
                .into_iter()
                .find(|&d| self.used(t + d) + cost <= self.limit)
                .expect("everything expires");
            us(d)
        });
        if allowed && cost > 0 {
            self.admitted.push((t, cost));
        }
        let after = self.used(t);
        let newest = self.live(t).map(|e| e.0).max();
        Decision {
            allowed,
            limit: self.limit,
            remaining: self.limit - after,
            reset_after: us(newest.map_or(0, |n| n + self.period - t)),
            retry_after,
        }
    }
}

/// Sliding window counter from a `Vec` of every admitted check: counts by
/// scanning, `remaining` by adding cost-1 checks until one does not fit,
/// `retry_after` by trying every microsecond.
pub(crate) struct WindowRef {
    period: u64,
    limit: u64,
    admitted: Vec<(u64, u64)>,
}

impl WindowRef {
    pub(crate) fn new(r: &Rule) -> Self {
        Self {
            period: r.period_micros(),
            limit: r.limit(),
            admitted: Vec::new(),
        }
    }

    fn count(&self, w: Option<u64>) -> u64 {
        w.map_or(0, |w| {
            self.admitted
                .iter()
                .filter(|e| e.0 / self.period == w)
                .map(|e| e.1)
                .sum()
        })
    }

    /// Whether `extra` more units at `at` fit, per SEMANTICS, in exact
    /// integers.
    fn fits(&self, at: u64, extra: u64) -> bool {
        let p = u128::from(self.period);
        let w = at / self.period;
        let e = u128::from(at % self.period);
        let prev = u128::from(self.count(w.checked_sub(1)));
        let curr = u128::from(self.count(Some(w)));
        prev * (p - e) + (curr + u128::from(extra)) * p <= u128::from(self.limit) * p
    }

    pub(crate) fn check(&mut self, t: u64, cost: u64) -> Decision {
        let capable = cost <= self.limit;
        let allowed = capable && self.fits(t, cost);
        let retry_after = (!allowed && capable).then(|| {
            let d = (1..=3 * self.period)
                .find(|&d| self.fits(t + d, cost))
                .expect("two windows later everything is empty");
            us(d)
        });
        if allowed && cost > 0 {
            self.admitted.push((t, cost));
        }
        let mut remaining = 0;
        while remaining <= self.limit && self.fits(t, remaining + 1) {
            remaining += 1;
        }
        let w = t / self.period;
        let reset = if self.count(Some(w)) > 0 {
            (w + 2) * self.period - t
        } else if self.count(w.checked_sub(1)) > 0 {
            (w + 1) * self.period - t
        } else {
            0
        };
        Decision {
            allowed,
            limit: self.limit,
            remaining,
            reset_after: us(reset),
            retry_after,
        }
    }
}
