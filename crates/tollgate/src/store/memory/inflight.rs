//! In-flight limits on the memory store (docs/semantics.md,
//! "Concurrency"): a `concurrency` key's state is its leases; an index by
//! lease id (a ticket's nonce) finds the keys of a lease to release or
//! renew, as a ticket names long keys only by their SHA-1. The index is
//! bounded like the keys: past the store's key capacity, ended leases go
//! first, then those that end soonest.

use parking_lot::Mutex;

use super::check::{Core, When};
use super::fingerprint::Fp;
use super::records::make_room;
use super::table::{Slot, Table};
use crate::algorithm::{KeyState, Leases};
use crate::decision::{Decision, MultiDecision};
use crate::rule::Rule;
use crate::store::{KeyCheck, Released};
use crate::ticket::Ticket;

impl Core {
    /// Acquires `checks` all-or-nothing at one time, under every shard
    /// they touch; admitted, each key takes a lease with the ticket's id
    /// (one lease of the slots added, for a key named twice).
    pub(super) fn acquire_all(
        &self,
        checks: &[KeyCheck<'_>],
        ticket: &Ticket,
        when: When<'_>,
    ) -> MultiDecision {
        let (pairs, slot_of) = self.merged(checks);
        let mut guards = self.lock_all(pairs.iter().map(|p| p.0));
        let t = when.now();
        let decided: Vec<Decision> = pairs
            .iter()
            .map(|&(fp, rule, cost)| {
                let table = &guards.table_of(self, fp);
                Self::evaluate_locked(table, rule, fp, t, cost)
            })
            .collect();
        let allowed = decided.iter().all(|d| d.allowed);
        let decided: Vec<Decision> = if allowed {
            for &(fp, rule, cost) in &pairs {
                let table = guards.table_of_mut(self, fp);
                let slot = table.other.entry(fp).or_insert_with(|| {
                    Box::new(Mutex::new(Slot {
                        state: KeyState::Empty,
                        expires: 0,
                        rule: rule.clone(),
                    }))
                });
                let (_, delta) = slot.get_mut().apply(rule, |state| {
                    let mut leases = match std::mem::take(state) {
                        KeyState::Concurrency(l) => l,
                        _ => Leases::default(),
                    };
                    leases.acquire(rule, t, cost, ticket.nonce);
                    *state = KeyState::Concurrency(leases);
                });
                table.add_log_entries(delta);
            }
            let written: Vec<Fp> = pairs.iter().map(|p| p.0).collect();
            guards.enforce_caps(self, t, &written);
            // The keys holding slots, in the ticket's order (cost 0 peeks).
            let held: Vec<Fp> = pairs.iter().filter(|p| p.2 > 0).map(|p| p.0).collect();
            let ends =
                t.saturating_add(pairs.iter().map(|p| p.1.period_micros()).max().unwrap_or(0));
            let mut index = self.leases.leases.lock();
            if index.len() >= self.capacity() {
                make_room(&mut index, t, |l| l.1);
            }
            if !held.is_empty() {
                index.insert(ticket.nonce, (held, ends, self.named(ticket)));
            }
            decided
        } else {
            pairs
                .iter()
                .zip(decided)
                .map(|(&(fp, rule, _), d)| {
                    if d.allowed {
                        Self::evaluate_locked(guards.table_of(self, fp), rule, fp, t, 0)
                    } else {
                        d
                    }
                })
                .collect()
        };
        drop(guards);
        MultiDecision::from_decisions(slot_of.into_iter().map(|i| decided[i]).collect())
    }

    /// Releases (or `renew`s) the lease `ticket` on every key it holds
    /// slots of, `rules` in its order: all of them live, or nothing changes.
    pub(super) fn release(
        &self,
        ticket: &Ticket,
        rules: &[&Rule],
        renew: bool,
        when: When<'_>,
    ) -> Released {
        // The index is read, let go, and taken again under the shards: the
        // order every caller takes them in is shards, then index (as an
        // acquire does), or two could wait on each other forever.
        let Some((fps, _, named)) = self.leases.leases.lock().get(&ticket.nonce).cloned() else {
            return Released::Unknown;
        };
        if fps.len() != rules.len() || named != self.named(ticket) {
            return Released::Unknown;
        }
        let mut guards = self.lock_all(fps.iter().copied());
        let mut index = self.leases.leases.lock();
        let t = when.now();
        let live = |table: &Table, fp: Fp| {
            table
                .other
                .get(&fp)
                .is_some_and(|slot| match &slot.lock().state {
                    KeyState::Concurrency(l) => {
                        l.iter().any(|l| l.id == ticket.nonce && l.expires > t)
                    }
                    _ => false,
                })
        };
        if !fps.iter().all(|&fp| live(guards.table_of(self, fp), fp)) {
            index.remove(&ticket.nonce);
            return Released::Unknown;
        }
        let mut ends = t;
        let decisions = fps
            .iter()
            .zip(rules)
            .map(|(&fp, &rule)| {
                let table = guards.table_of_mut(self, fp);
                if let Some(slot) = table.other.get_mut(&fp) {
                    let (_, delta) = slot.get_mut().apply(rule, |state| {
                        if let KeyState::Concurrency(l) = state {
                            if renew {
                                l.renew(rule, t, ticket.nonce);
                            } else {
                                l.release(t, ticket.nonce);
                            }
                        }
                    });
                    table.add_log_entries(delta);
                }
                ends = ends.max(t.saturating_add(rule.period_micros()));
                Self::evaluate_locked(table, rule, fp, t, 0)
            })
            .collect();
        if renew {
            index.insert(ticket.nonce, (fps, ends, named));
        } else {
            index.remove(&ticket.nonce);
        }
        Released::Done(decisions)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use crate::store::KeyCheck;
    use crate::ticket::{Ticket, TicketKind, TicketPair};
    use crate::{Algorithm, FakeClock, MemoryStore, RuleSpec};

    /// The lease index stays within the store's capacity however many
    /// leases are live (docs/memory-store.md: past it, ended leases go
    /// first, then those that end soonest): acquires on ever new keys
    /// whose slots eviction already forgot must not grow it for a whole
    /// lease.
    #[test]
    fn the_lease_index_is_bounded_while_leases_live() {
        let store = MemoryStore::builder()
            .clock(FakeClock::new())
            .max_keys(64)
            .build();
        let rule = RuleSpec::new("cc", Algorithm::Concurrency, 1, Duration::from_secs(3600))
            .build()
            .expect("valid rule");
        let cap = store.capacity();
        for i in 0..(20 * cap) {
            let key = format!("k{i}");
            let ticket = Ticket::new(
                TicketKind::Lease,
                vec![TicketPair::new("cc", key.as_bytes())],
            );
            let check = KeyCheck {
                rule: &rule,
                key: key.as_bytes(),
                cost: 1,
            };
            let t = u64::try_from(i).expect("small");
            let d = store
                .core
                .acquire_all(&[check], &ticket, super::When::At(t));
            assert!(d.allowed, "a fresh key has its slot");
        }
        let held = store.core.leases.leases.lock().len();
        assert!(held <= cap, "{held} leases indexed, capacity {cap}");
    }
}
