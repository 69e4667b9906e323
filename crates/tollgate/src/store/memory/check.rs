//! The check paths: the shards ([`Core`]), GCRA by compare-and-swap, the
//! other algorithms under a key's mutex, multi-rule checks under every
//! shard they touch.

use std::sync::atomic::{AtomicU64, Ordering};

use super::fingerprint::{Fp, Sip13};
use super::table::{Shard, Slot, Table};
use parking_lot::Mutex;

use crate::algorithm::{self, GcraState, KeyState, gcra};
use crate::decision::{Decision, MultiDecision};
use crate::rule::{Algorithm, Rule};
use crate::store::KeyCheck;
use crate::time::{Clock, Micros};

/// Everything but the clock: the hot path is compiled here, once, not in
/// every crate that names a clock type.
pub(super) struct Core {
    pub(super) shards: Box<[Shard]>,
    pub(super) shard_bits: u32,
    pub(super) shard_cap: usize,
    pub(super) shard_log_cap: usize,
    /// SipHash-1-3 keyed with the store's random secret.
    pub(super) sip: Sip13,
    /// Open and recently closed reservations.
    pub(super) reservations: super::records::Reservations,
    /// Live leases by id.
    pub(super) leases: super::records::LeaseIndex,
}

/// GCRA on one atomic word: compare-and-swap until the state we decided on
/// is the state we replace. Returns that state: the check's decision is the
/// step's on it.
///
/// The loop uses only the step's verdict and next state (the rest of the
/// step is dead code here and compiled out); the caller computes the
/// decision (its `remaining` is a division) from the returned state after
/// releasing the shard. Between reading the state and swapping it there is
/// thus as little as possible, so contending threads rarely retry. The step
/// is pure: the two computations agree.
///
/// The time is read after the state is (on every attempt), so the checks
/// of one key take effect in the order of their times: see [`When`].
#[inline]
fn gcra_cas(rule: &Rule, cell: &AtomicU64, when: When<'_>, cost: u64) -> (GcraState, Micros) {
    let mut current = cell.load(Ordering::Acquire);
    loop {
        let t = when.now();
        let (decision, next) = gcra::check(rule, Some(GcraState { tat: current }), t, cost);
        if !decision.allowed || next.tat == current {
            return (GcraState { tat: current }, t);
        }
        match cell.compare_exchange_weak(current, next.tat, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => return (GcraState { tat: current }, t),
            Err(actual) => current = actual,
        }
    }
}

/// When a check is decided: at an explicit time, or now by the store's
/// clock, read at the moment the check takes effect: after the key's state
/// is read (under its lock, or before the compare-and-swap that replaces
/// it). Reading the clock first, as a caller would, lets two concurrent
/// checks of one key take effect in the other order than their times, and
/// the later-stamped one then reports a `remaining` one lower than the
/// earlier one left (never an admission more: the decision is still
/// exact for its own time).
#[derive(Clone, Copy)]
pub(super) enum When<'a> {
    At(Micros),
    Now(&'a dyn Clock),
}

impl When<'_> {
    #[inline]
    pub(super) fn now(self) -> Micros {
        match self {
            When::At(t) => t,
            When::Now(clock) => clock.now(),
        }
    }
}

impl Core {
    pub(super) fn len(&self) -> usize {
        self.shards.iter().map(|s| s.0.read().len()).sum()
    }

    pub(super) fn log_entries(&self) -> usize {
        self.shards
            .iter()
            .map(|s| s.0.read().log_entries.load(Ordering::Relaxed))
            .sum()
    }

    pub(super) fn capacity(&self) -> usize {
        self.shard_cap * self.shards.len()
    }

    pub(super) fn sweep(&self, t: Micros) {
        for shard in &self.shards {
            let mut table = shard.0.write();
            table.drop_expired(t);
            // Removing keys frees no memory; rebuild tables left mostly empty.
            table.gcra.shrink();
            if table.other.len() * 4 < table.other.capacity() {
                table.other.shrink_to_fit();
            }
        }
    }

    /// The (rule, key) fingerprint: SipHash-1-3 (128 bits) under the
    /// store's secret of the pair's injective encoding (`fingerprint_input`
    /// in the tests), computed a word at a time from the name and straight
    /// from the key's memory. (Copying the parts into a buffer first made
    /// the hash read bytes just stored, a store-forwarding stall that cost
    /// more than the hashing.)
    #[inline]
    pub(super) fn fingerprint(&self, rule: &Rule, key: &[u8]) -> Fp {
        self.sip.fingerprint(rule.name().as_bytes(), key)
    }

    /// The shard holding a fingerprint.
    #[inline]
    pub(super) fn shard_of(&self, fp: Fp) -> &Shard {
        &self.shards[self.shard_index(fp)]
    }

    /// The shard of a fingerprint: the top bits of its second word (tables
    /// use the first).
    #[inline]
    pub(super) fn shard_index(&self, fp: Fp) -> usize {
        usize::try_from(fp.1.checked_shr(64 - self.shard_bits).unwrap_or(0)).unwrap_or(0)
    }

    /// Makes room after inserting, keeping `protect` (the keys just written).
    pub(super) fn enforce_caps(&self, table: &mut Table, t: Micros, protect: &[Fp]) {
        let over_keys = table.len() > self.shard_cap;
        let over_logs = *table.log_entries.get_mut() > self.shard_log_cap;
        if !over_keys && !over_logs {
            return;
        }
        table.drop_expired(t);
        if over_keys {
            let low = self.shard_cap - self.shard_cap / 8;
            if table.len() > low {
                table.evict_keys(table.len() - low, protect, t);
            }
        }
        if *table.log_entries.get_mut() > self.shard_log_cap {
            let low = self.shard_log_cap - self.shard_log_cap / 8;
            table.evict_log_entries(low, protect, t);
        }
    }

    /// Decides one check `when`.
    pub(super) fn check(&self, rule: &Rule, key: &[u8], cost: u64, when: When<'_>) -> Decision {
        if rule.algorithm() == Algorithm::Gcra {
            self.check_gcra(rule, key, cost, when)
        } else {
            self.check_other(rule, key, cost, when)
        }
    }

    /// The GCRA path: a held key is one compare-and-swap under the shared
    /// lock; its decision is computed after the lock is released.
    #[inline]
    fn check_gcra(&self, rule: &Rule, key: &[u8], cost: u64, when: When<'_>) -> Decision {
        let fp = self.fingerprint(rule, key);
        let shard = &self.shards[self.shard_index(fp)];
        let table = shard.0.read();
        let Some(cell) = table.gcra.get(fp) else {
            let t = when.now();
            drop(table);
            return self.create(shard, rule, fp, cost, t, when);
        };
        let (replaced, t) = gcra_cas(rule, cell, when, cost);
        drop(table);
        gcra::check(rule, Some(replaced), t, cost).0
    }

    /// The other algorithms: a held key is updated under its own mutex,
    /// under the shared lock.
    fn check_other(&self, rule: &Rule, key: &[u8], cost: u64, when: When<'_>) -> Decision {
        let fp = self.fingerprint(rule, key);
        let shard = &self.shards[self.shard_index(fp)];
        let t = {
            let table = shard.0.read();
            if let Some(slot) = table.other.get(&fp) {
                let mut slot = slot.lock();
                let t = when.now();
                let decision = algorithm::evaluate(rule, &slot.state, t, cost);
                if !decision.allowed || cost == 0 {
                    return decision;
                }
                let delta = slot.commit(rule, t, cost);
                drop(slot);
                if delta == 0 || table.add_log_entries(delta) <= self.shard_log_cap {
                    return decision;
                }
                drop(table);
                self.enforce_caps(&mut shard.0.write(), t, &[fp]);
                return decision;
            }
            when.now()
        };
        self.create(shard, rule, fp, cost, t, when)
    }

    /// A check on a key not held when looked at `t`: decide against the
    /// empty state; create the key only when the check consumes (then
    /// decided again, `when`, under the exclusive lock: another check may
    /// have created it meanwhile).
    #[cold]
    fn create(
        &self,
        shard: &Shard,
        rule: &Rule,
        fp: Fp,
        cost: u64,
        t: Micros,
        when: When<'_>,
    ) -> Decision {
        let decision = algorithm::evaluate(rule, &KeyState::Empty, t, cost);
        if !decision.allowed || cost == 0 {
            return decision;
        }
        let mut table = shard.0.write();
        let t = when.now();
        let decision = Self::commit_locked(&mut table, rule, fp, t, cost);
        self.enforce_caps(&mut table, t, &[fp]);
        decision
    }

    /// Decides and commits one check holding the shard exclusively,
    /// creating the key if needed.
    fn commit_locked(table: &mut Table, rule: &Rule, fp: Fp, t: Micros, cost: u64) -> Decision {
        if rule.algorithm() == Algorithm::Gcra {
            let cell = table.gcra.get_or_insert(fp, rule);
            let (decision, next) = gcra::check(
                rule,
                Some(GcraState {
                    tat: *cell.get_mut(),
                }),
                t,
                cost,
            );
            if decision.allowed {
                *cell.get_mut() = next.tat;
            }
            return decision;
        }
        let slot = table.other.entry(fp).or_insert_with(|| {
            Box::new(Mutex::new(Slot {
                state: KeyState::Empty,
                expires: 0,
                rule: rule.clone(),
            }))
        });
        let slot = slot.get_mut();
        let decision = algorithm::evaluate(rule, &slot.state, t, cost);
        if decision.allowed && cost > 0 {
            let delta = slot.commit(rule, t, cost);
            table.add_log_entries(delta);
        }
        decision
    }

    /// Evaluates one check against the current state of an exclusively held
    /// shard, changing nothing.
    pub(super) fn evaluate_locked(
        table: &Table,
        rule: &Rule,
        fp: Fp,
        t: Micros,
        cost: u64,
    ) -> Decision {
        if rule.algorithm() == Algorithm::Gcra {
            let tat = table.gcra.get(fp).map(|c| GcraState {
                tat: c.load(Ordering::Acquire),
            });
            return gcra::check(rule, tat, t, cost).0;
        }
        match table.other.get(&fp) {
            Some(slot) => algorithm::evaluate(rule, &slot.lock().state, t, cost),
            None => algorithm::evaluate(rule, &KeyState::Empty, t, cost),
        }
    }

    /// The pairs of `checks` with those naming the same (rule, key) merged,
    /// their costs added; and for each check, the index of its pair.
    pub(super) fn merged<'r>(
        &self,
        checks: &[KeyCheck<'r>],
    ) -> (Vec<(Fp, &'r Rule, u64)>, Vec<usize>) {
        let mut pairs: Vec<(Fp, &Rule, u64)> = Vec::with_capacity(checks.len());
        let mut slot_of = Vec::with_capacity(checks.len());
        for c in checks {
            let fp = self.fingerprint(c.rule, c.key);
            if let Some(i) = pairs.iter().position(|p| p.0 == fp) {
                pairs[i].2 = pairs[i].2.saturating_add(c.cost);
                slot_of.push(i);
            } else {
                slot_of.push(pairs.len());
                pairs.push((fp, c.rule, c.cost));
            }
        }
        (pairs, slot_of)
    }

    /// Decides several checks all-or-nothing, `when` (the clock read once
    /// every shard they touch is held).
    pub(super) fn check_all(&self, checks: &[KeyCheck<'_>], when: When<'_>) -> MultiDecision {
        // One pair is all-or-nothing by itself: the single check's path
        // (shared lock, compare-and-swap for GCRA) decides it exactly as
        // the exclusive path below would, without taking the shard
        // exclusively or allocating the bookkeeping vectors.
        if let [c] = checks {
            let decision = self.check(c.rule, c.key, c.cost, when);
            return MultiDecision {
                allowed: decision.allowed,
                deciding: 0,
                decisions: vec![decision],
            };
        }
        let (pairs, slot_of) = self.merged(checks);
        let mut guards = self.lock_all(pairs.iter().map(|p| p.0));
        let t = when.now();

        let decided: Vec<Decision> = pairs
            .iter()
            .map(|&(fp, rule, cost)| {
                Self::evaluate_locked(guards.table_of(self, fp), rule, fp, t, cost)
            })
            .collect();
        let allowed = decided.iter().all(|d| d.allowed);
        let decided: Vec<Decision> = if allowed {
            let mut committed = Vec::with_capacity(pairs.len());
            for &(fp, rule, cost) in &pairs {
                let table = guards.table_of_mut(self, fp);
                committed.push(if cost == 0 {
                    Self::evaluate_locked(table, rule, fp, t, 0)
                } else {
                    Self::commit_locked(table, rule, fp, t, cost)
                });
            }
            let written: Vec<Fp> = pairs.iter().map(|p| p.0).collect();
            guards.enforce_caps(self, t, &written);
            committed
        } else {
            // Nothing consumed: pairs that would admit report a peek.
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
}
