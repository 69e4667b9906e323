//! Concurrency: at most `limit` slots held at once (docs/semantics.md,
//! "Concurrency"). A lease of `cost` slots taken at `t` ends when released,
//! or at `t + lease` unless renewed first; an ended lease no longer counts.
//!
//! ```text
//! held        = slots of leases with expiry > t
//! allowed     = held + cost <= limit
//! remaining   = limit - held_after
//! reset_after = latest expiry - t           (0 when nothing is held)
//! retry_after = the expiry at which held + cost - limit slots have
//!               freed by themselves, minus t (absent when cost > limit)
//! ```
//!
//! The rule's `period` is its lease duration.

use std::time::Duration;

use super::Usage;
use crate::decision::Decision;
use crate::rule::Rule;
use crate::time::Micros;

/// One lease: when it ends, how many slots it holds, and its id (a
/// ticket's nonce; zero for one taken by a check, which has no ticket).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Lease {
    /// When it ends unless renewed.
    pub expires: Micros,
    /// Slots held.
    pub slots: u64,
    /// The lease's id.
    pub id: [u8; 16],
}

/// A key's leases, ended ones dropped as it is changed.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct Leases {
    leases: Vec<Lease>,
}

impl Leases {
    /// The leases held, live or not yet dropped.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = &Lease> {
        self.leases.iter()
    }

    /// How many leases are stored.
    #[must_use]
    pub fn len(&self) -> usize {
        self.leases.len()
    }

    /// Whether none is stored.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.leases.is_empty()
    }

    /// The slots held at `t`.
    #[must_use]
    pub fn held(&self, t: Micros) -> u64 {
        self.live(t).map(|l| l.slots).sum()
    }

    /// The latest expiry of a lease live at `t`.
    #[must_use]
    pub fn latest(&self, t: Micros) -> Option<Micros> {
        self.live(t).map(|l| l.expires).max()
    }

    fn live(&self, t: Micros) -> impl Iterator<Item = &Lease> {
        self.leases.iter().filter(move |l| l.expires > t)
    }

    fn prune(&mut self, t: Micros) {
        self.leases.retain(|l| l.expires > t);
    }

    /// Takes a lease of `slots` with `id` at `t` (call only when
    /// [`check`] admitted it).
    pub fn acquire(&mut self, rule: &Rule, t: Micros, slots: u64, id: [u8; 16]) {
        self.prune(t);
        if slots > 0 {
            self.leases.push(Lease {
                expires: t.saturating_add(rule.period_micros()),
                slots,
                id,
            });
        }
    }

    /// Ends the lease `id` at `t`; whether it was live.
    pub fn release(&mut self, t: Micros, id: [u8; 16]) -> bool {
        self.prune(t);
        let before = self.leases.len();
        self.leases.retain(|l| l.id != id);
        self.leases.len() < before
    }

    /// Extends the lease `id` to `t + lease`; whether it was live.
    pub fn renew(&mut self, rule: &Rule, t: Micros, id: [u8; 16]) -> bool {
        self.prune(t);
        match self.leases.iter_mut().find(|l| l.id == id) {
            Some(l) => {
                l.expires = l.expires.max(t.saturating_add(rule.period_micros()));
                true
            }
            None => false,
        }
    }
}

/// Decides an acquire of `cost` slots at `t` without changing `leases`.
#[must_use]
pub fn check(rule: &Rule, leases: &Leases, t: Micros, cost: u64) -> Decision {
    let limit = rule.limit();
    let held = leases.held(t);
    let capable = cost <= limit;
    let allowed = capable && held + cost <= limit;
    let after = if allowed { held + cost } else { held };
    let latest = match (allowed && cost > 0, leases.latest(t)) {
        (true, l) => Some(l.map_or(t + rule.period_micros(), |l| {
            l.max(t + rule.period_micros())
        })),
        (false, l) => l,
    };
    let retry_after = (!allowed && capable).then(|| {
        // The leases in the order they end; wait until enough have.
        let mut live: Vec<&Lease> = leases.live(t).collect();
        live.sort_unstable_by_key(|l| l.expires);
        let need = held + cost - limit;
        let mut freed = 0;
        live.iter()
            .find(|l| {
                freed += l.slots;
                freed >= need
            })
            .map_or(0, |l| l.expires - t)
    });
    Decision {
        allowed,
        limit,
        remaining: limit.saturating_sub(after),
        reset_after: Duration::from_micros(latest.map_or(0, |l| l - t)),
        retry_after: retry_after.map(Duration::from_micros),
    }
}

/// How much of the limit `leases` hold at `t`.
#[must_use]
pub fn usage(rule: &Rule, leases: &Leases, t: Micros) -> Usage {
    let held = leases.held(t);
    Usage::of(
        u128::from(held),
        u128::from(rule.limit()),
        held >= rule.limit(),
    )
}

#[cfg(test)]
mod tests {
    //! By hand from docs/semantics.md, "Concurrency": limit 3, lease 10 s.

    use std::time::Duration;

    use super::{Leases, check};
    use crate::rule::{Algorithm, RuleSpec};

    const S: u64 = 1_000_000;

    #[test]
    fn slots_are_held_released_renewed_and_expire() {
        let r = RuleSpec::new("c", Algorithm::Concurrency, 3, Duration::from_secs(10))
            .build()
            .expect("valid rule");
        let mut l = Leases::default();
        let d = check(&r, &l, 0, 2);
        assert!(d.allowed);
        assert_eq!((d.remaining, d.reset_after), (1, Duration::from_secs(10)));
        l.acquire(&r, 0, 2, [1; 16]);
        l.acquire(&r, 4 * S, 1, [2; 16]);
        // Full: an acquire of 1 waits for the first lease (2 slots) to end.
        let d = check(&r, &l, 5 * S, 1);
        assert!(!d.allowed);
        assert_eq!(d.retry_after, Some(Duration::from_secs(5)));
        assert_eq!(d.reset_after, Duration::from_secs(9));
        // An acquire of more than the limit can never be admitted.
        assert_eq!(check(&r, &l, 5 * S, 4).retry_after, None);
        // Released: its slots come back at once; twice is nothing.
        assert!(l.release(6 * S, [1; 16]));
        assert!(!l.release(6 * S, [1; 16]));
        assert_eq!(check(&r, &l, 6 * S, 0).remaining, 2);
        // Renewed: the second lease now ends at 13 s, not 14 s... later.
        assert!(l.renew(&r, 7 * S, [2; 16]));
        assert_eq!(check(&r, &l, 7 * S, 0).reset_after, Duration::from_secs(10));
        // Expired: gone, and not renewable.
        assert_eq!(check(&r, &l, 17 * S, 0).remaining, 3);
        assert!(!l.renew(&r, 17 * S, [2; 16]));
        assert!(l.is_empty());
    }
}
