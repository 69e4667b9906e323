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
            remaining: n((self.tau - (stored - now)).max(0) / self.t),
            reset_after: us(n(stored - now)),
            retry_after: (!allowed && cost <= self.burst).then(|| us(n(new_tat - self.tau - now))),
        }
    }

    /// A charge: the largest part of `cost` whose debt stays within
    /// `max_debt`, taken unconditionally; the decision, the debt and the
    /// units taken.
    pub(crate) fn charge(&mut self, now: u64, cost: u64, max_debt: u64) -> (Decision, u64, u64) {
        let now = i128::from(now);
        let tat = self.tat.unwrap_or(now).max(now);
        let debt_at = |new_tat: i128| {
            let over = new_tat - now - self.tau;
            if over <= 0 {
                0
            } else {
                (over + self.t - 1) / self.t
            }
        };
        let units = (0..=cost)
            .rev()
            .find(|&u| debt_at(tat + i128::from(u) * self.t) <= i128::from(max_debt))
            .expect("no charge fits");
        let new_tat = tat + i128::from(units) * self.t;
        self.tat = Some(new_tat);
        let n = |x: i128| u64::try_from(x).expect("non-negative");
        let decision = Decision {
            allowed: true,
            limit: self.burst,
            remaining: n((self.tau - (new_tat - now)).max(0) / self.t),
            reset_after: us(n(new_tat - now)),
            retry_after: None,
        };
        (decision, n(debt_at(new_tat)), units)
    }

    /// Gives back `units` at `now`: the TAT moves back, never below `now`.
    pub(crate) fn give_back(&mut self, now: u64, units: u64) {
        let now = i128::from(now);
        if let Some(tat) = self.tat.filter(|&tat| tat > now) {
            self.tat = Some((tat - i128::from(units) * self.t).max(now));
        }
    }
}

/// A textbook token bucket counting tokens exactly as `tokens * period`:
/// `limit` per µs flow in, a token is `period`, the bucket holds
/// `burst * period`.
pub(crate) struct BucketRef {
    period: i128,
    limit: i128,
    burst: u64,
    /// Tokens times `period`; negative while in debt.
    scaled: i128,
    last: Option<u64>,
}

impl BucketRef {
    pub(crate) fn new(r: &Rule) -> Self {
        Self {
            period: i128::from(r.period_micros()),
            limit: i128::from(r.limit()),
            burst: r.burst(),
            scaled: i128::from(r.burst()) * i128::from(r.period_micros()),
            last: None,
        }
    }

    fn have(&self, now: u64) -> i128 {
        let full = i128::from(self.burst) * self.period;
        let elapsed = i128::from(now - self.last.unwrap_or(now));
        (self.scaled + elapsed * self.limit).min(full)
    }

    fn decision(&self, allowed: bool, after: i128, retry: Option<i128>) -> Decision {
        let full = i128::from(self.burst) * self.period;
        let n = |x: i128| u64::try_from(x).expect("fits");
        let up = |x: i128| (x + self.limit - 1) / self.limit;
        Decision {
            allowed,
            limit: self.burst,
            remaining: n(after.max(0) / self.period),
            reset_after: us(n(up(full - after))),
            retry_after: retry.map(|r| us(n(up(r)))),
        }
    }

    pub(crate) fn check(&mut self, now: u64, cost: u64) -> Decision {
        let have = self.have(now);
        let need = i128::from(cost) * self.period;
        let allowed = cost <= self.burst && have >= need;
        let after = if allowed { have - need } else { have };
        if allowed && cost > 0 {
            self.scaled = after;
            self.last = Some(now);
        }
        self.decision(
            allowed,
            after,
            (!allowed && cost <= self.burst).then_some(need - have),
        )
    }

    /// A charge, as [`GcraRef::charge`]: debt in whole tokens owed.
    pub(crate) fn charge(&mut self, now: u64, cost: u64, max_debt: u64) -> (Decision, u64, u64) {
        let have = self.have(now);
        let debt_at = |after: i128| {
            if after >= 0 {
                0
            } else {
                (-after + self.period - 1) / self.period
            }
        };
        let units = (0..=cost)
            .rev()
            .find(|&u| debt_at(have - i128::from(u) * self.period) <= i128::from(max_debt))
            .expect("no charge fits");
        let after = have - i128::from(units) * self.period;
        self.scaled = after;
        self.last = Some(now);
        let debt = u64::try_from(debt_at(after)).expect("fits");
        (self.decision(true, after, None), debt, units)
    }

    /// Gives back `units` tokens at `now`, never past a full bucket.
    pub(crate) fn give_back(&mut self, now: u64, units: u64) {
        if self.last.is_none() {
            return;
        }
        let full = i128::from(self.burst) * self.period;
        self.scaled = (self.have(now) + i128::from(units) * self.period).min(full);
        self.last = Some(now);
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
            remaining: self
                .limit
                .saturating_sub(count + if allowed { cost } else { 0 }),
            reset_after: us(end),
            retry_after: (!allowed && cost <= self.limit).then(|| us(end)),
        }
    }

    fn count(&self, t: u64) -> u64 {
        let w = t / self.period;
        self.admitted
            .iter()
            .filter(|e| e.0 / self.period == w)
            .map(|e| e.1)
            .sum()
    }

    /// A charge: count what fits within `limit + max_debt`.
    pub(crate) fn charge(&mut self, t: u64, cost: u64, max_debt: u64) -> (Decision, u64, u64) {
        let count = self.count(t);
        let units = cost.min((self.limit + max_debt).saturating_sub(count));
        self.admitted.push((t, units));
        let after = count + units;
        let decision = Decision {
            allowed: true,
            limit: self.limit,
            remaining: self.limit.saturating_sub(after),
            reset_after: us((t / self.period + 1) * self.period - t),
            retry_after: None,
        };
        (decision, after.saturating_sub(self.limit), units)
    }

    /// Gives back `units` of the check made at `at`, while its window is
    /// `t`'s.
    pub(crate) fn give_back(&mut self, t: u64, at: u64, units: u64) {
        if at / self.period == t / self.period {
            shrink(
                &mut self.admitted,
                |e| e.0 / self.period == at / self.period,
                units,
            );
        }
    }
}

/// Takes `units` off the entries `which` picks, newest first, none below 0.
fn shrink(entries: &mut [(u64, u64)], which: impl Fn(&(u64, u64)) -> bool, mut units: u64) {
    for e in entries.iter_mut().rev().filter(|e| which(e)) {
        let take = units.min(e.1);
        e.1 -= take;
        units -= take;
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
        self.decision(allowed, t, retry_after)
    }

    fn decision(&self, allowed: bool, t: u64, retry_after: Option<Duration>) -> Decision {
        let after = self.used(t);
        let newest = self.live(t).filter(|e| e.1 > 0).map(|e| e.0).max();
        Decision {
            allowed,
            limit: self.limit,
            remaining: self.limit.saturating_sub(after),
            reset_after: us(newest.map_or(0, |n| n + self.period - t)),
            retry_after,
        }
    }

    /// A charge: log what fits within `limit + max_debt`.
    pub(crate) fn charge(&mut self, t: u64, cost: u64, max_debt: u64) -> (Decision, u64, u64) {
        let units = cost.min((self.limit + max_debt).saturating_sub(self.used(t)));
        if units > 0 {
            self.admitted.push((t, units));
        }
        let debt = self.used(t).saturating_sub(self.limit);
        (self.decision(true, t, None), debt, units)
    }

    /// Shrinks the entries made at `at` by `units`.
    pub(crate) fn give_back(&mut self, at: u64, units: u64) {
        shrink(&mut self.admitted, |e| e.0 == at, units);
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

    /// The weighted units at `at` times `period`, with `extra` more.
    fn weighted(&self, at: u64, extra: u64) -> u128 {
        let p = u128::from(self.period);
        let w = at / self.period;
        let e = u128::from(at % self.period);
        let prev = u128::from(self.count(w.checked_sub(1)));
        let curr = u128::from(self.count(Some(w)));
        prev * (p - e) + (curr + u128::from(extra)) * p
    }

    /// A charge: count what keeps the debt within `max_debt`.
    pub(crate) fn charge(&mut self, t: u64, cost: u64, max_debt: u64) -> (Decision, u64, u64) {
        let (p, limit) = (u128::from(self.period), self.limit);
        let debt_at = |w: u128| {
            u64::try_from(w.div_ceil(p))
                .expect("fits")
                .saturating_sub(limit)
        };
        let units = (0..=cost)
            .rev()
            .find(|&u| debt_at(self.weighted(t, u)) <= max_debt)
            .unwrap_or(0);
        if units > 0 {
            self.admitted.push((t, units));
        }
        let mut decision = self.check(t, 0);
        decision.allowed = true;
        decision.retry_after = None;
        (decision, debt_at(self.weighted(t, 0)), units)
    }

    /// Gives back `units` of the check made at `at`, while its window still
    /// counts at `t`.
    pub(crate) fn give_back(&mut self, t: u64, at: u64, units: u64) {
        let (w, counted) = (t / self.period, at / self.period);
        if counted == w || counted + 1 == w {
            shrink(&mut self.admitted, |e| e.0 / self.period == counted, units);
        }
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
