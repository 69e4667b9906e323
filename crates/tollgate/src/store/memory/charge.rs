//! The charge path (docs/semantics.md, "Charge"): like a check's, a held
//! GCRA key by compare-and-swap under the shard's shared lock and any other
//! key under its own mutex, but never denied, so a charge of several pairs
//! is each pair's charge in turn: there is nothing to keep all-or-nothing.

use std::sync::atomic::Ordering;

use parking_lot::Mutex;

use super::check::{Core, When};
use super::fingerprint::Fp;
use super::table::{Shard, Slot, Table};
use crate::algorithm::{self, Charged, GcraState, KeyState, gcra};
use crate::rule::{Algorithm, Rule};
use crate::store::KeyCheck;
use crate::time::Micros;

impl Core {
    /// Charges every pair in turn, `when`; one answer per pair.
    pub(super) fn charge_all(&self, checks: &[KeyCheck<'_>], when: When<'_>) -> Vec<Charged> {
        if let [c] = checks {
            return vec![self.charge(c.rule, c.key, c.cost, when)];
        }
        checks
            .iter()
            .map(|c| self.charge(c.rule, c.key, c.cost, when))
            .collect()
    }

    /// Charges `cost` to (rule, key), `when`.
    #[inline]
    pub(super) fn charge(&self, rule: &Rule, key: &[u8], cost: u64, when: When<'_>) -> Charged {
        self.charge_fp(rule, self.fingerprint(rule, key), cost, when)
    }

    /// Charges `cost` to the key of fingerprint `fp` under `rule`, `when`.
    #[inline]
    pub(super) fn charge_fp(&self, rule: &Rule, fp: Fp, cost: u64, when: When<'_>) -> Charged {
        let shard = self.shard_of(fp);
        {
            let table = shard.0.read();
            if rule.algorithm() == Algorithm::Gcra {
                if let Some(cell) = table.gcra.get(fp) {
                    // As a check's: only the step in the loop, the answer
                    // (divisions) after the swap and the shard's lock.
                    let mut current = cell.load(Ordering::Acquire);
                    let (t, next, units) = loop {
                        let t = when.now();
                        let (next, units) =
                            gcra::charge_step(rule, Some(GcraState { tat: current }), t, cost);
                        if next.tat == current {
                            break (t, next, units);
                        }
                        match cell.compare_exchange_weak(
                            current,
                            next.tat,
                            Ordering::AcqRel,
                            Ordering::Acquire,
                        ) {
                            Ok(_) => break (t, next, units),
                            Err(actual) => current = actual,
                        }
                    };
                    drop(table);
                    return gcra::charged(rule, t, next, cost - units);
                }
            } else if let Some(slot) = table.other.get(&fp) {
                let mut slot = slot.lock();
                let t = when.now();
                let (charged, delta) =
                    slot.apply(rule, |state| algorithm::charge(rule, state, t, cost));
                drop(slot);
                if delta <= 0 || table.add_log_entries(delta) <= self.shard_log_cap {
                    return charged;
                }
                drop(table);
                self.enforce_caps(&mut shard.0.write(), t, &[fp]);
                return charged;
            }
        }
        self.charge_new(shard, rule, fp, cost, when)
    }

    /// A charge to a key not held when looked at: create it under the
    /// exclusive lock (another call may have created it meanwhile).
    #[cold]
    fn charge_new(&self, shard: &Shard, rule: &Rule, fp: Fp, cost: u64, when: When<'_>) -> Charged {
        let mut table = shard.0.write();
        let t = when.now();
        let charged = Self::charge_locked(&mut table, rule, fp, t, cost);
        self.enforce_caps(&mut table, t, &[fp]);
        charged
    }

    /// Refunds every pair its cost in turn, `when` (docs/semantics.md,
    /// "Refund"); one answer per pair.
    pub(super) fn refund_all(&self, checks: &[KeyCheck<'_>], when: When<'_>) -> Vec<Charged> {
        checks
            .iter()
            .map(|c| self.refund_fp(c.rule, self.fingerprint(c.rule, c.key), c.cost, when))
            .collect()
    }

    /// Gives `units` back now to the key of `fp` under `rule`
    /// ([`algorithm::refund`]); a key not held has nothing to give back and
    /// is not created.
    fn refund_fp(&self, rule: &Rule, fp: Fp, units: u64, when: When<'_>) -> Charged {
        let shard = self.shard_of(fp);
        let table = shard.0.read();
        if rule.algorithm() == Algorithm::Gcra {
            if let Some(cell) = table.gcra.get(fp) {
                let t = when.now();
                let back = |tat| gcra::give_back(rule, GcraState { tat }, t, units).tat;
                let tat = match cell
                    .fetch_update(Ordering::AcqRel, Ordering::Acquire, |tat| Some(back(tat)))
                {
                    Ok(before) | Err(before) => back(before),
                };
                drop(table);
                return gcra::charged(rule, t, GcraState { tat: tat.max(t) }, 0);
            }
        } else if let Some(slot) = table.other.get(&fp) {
            let t = when.now();
            let (charged, delta) = slot
                .lock()
                .apply(rule, |state| algorithm::refund(rule, state, t, units));
            table.add_log_entries(delta);
            return charged;
        }
        drop(table);
        algorithm::refund(rule, &mut KeyState::Empty, when.now(), units)
    }

    /// Gives `units` back at `t` to the key of `fp` under `rule`, of a
    /// check admitted at `counted_at` ([`algorithm::give_back`]); a key
    /// no longer held (forgotten, evicted) holds nothing to give back.
    pub(super) fn give_back_fp(
        &self,
        rule: &Rule,
        fp: Fp,
        t: Micros,
        counted_at: Micros,
        units: u64,
    ) {
        let shard = self.shard_of(fp);
        let table = shard.0.read();
        if rule.algorithm() == Algorithm::Gcra {
            if let Some(cell) = table.gcra.get(fp) {
                let _ = cell.fetch_update(Ordering::AcqRel, Ordering::Acquire, |tat| {
                    Some(gcra::give_back(rule, GcraState { tat }, t, units).tat)
                });
            }
        } else if let Some(slot) = table.other.get(&fp) {
            let (_, delta) = slot.lock().apply(rule, |state| {
                algorithm::give_back(rule, state, t, counted_at, units);
            });
            table.add_log_entries(delta);
        }
    }

    fn charge_locked(table: &mut Table, rule: &Rule, fp: Fp, t: Micros, cost: u64) -> Charged {
        if rule.algorithm() == Algorithm::Gcra {
            let cell = table.gcra.get_or_insert(fp, rule);
            let (charged, next) = gcra::charge(
                rule,
                Some(GcraState {
                    tat: *cell.get_mut(),
                }),
                t,
                cost,
            );
            *cell.get_mut() = next.tat;
            return charged;
        }
        let slot = table.other.entry(fp).or_insert_with(|| {
            Box::new(Mutex::new(Slot {
                state: KeyState::Empty,
                expires: 0,
                rule: rule.clone(),
            }))
        });
        let (charged, delta) = slot
            .get_mut()
            .apply(rule, |state| algorithm::charge(rule, state, t, cost));
        table.add_log_entries(delta);
        charged
    }
}
