//! The tables of a shard: GCRA keys in an open-addressing table of 24-byte
//! slots, the other algorithms' states boxed in a hash map.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use parking_lot::{Mutex, RwLock};

use super::classes::{GcraRules, UNKNOWN_CLASS};
use super::fingerprint::{CLASS_BITS, EMPTY, Fp, FpMap};
use crate::algorithm::{self, KeyState};
use crate::rule::Rule;
use crate::time::Micros;

/// State of a non-GCRA key, when it is back to empty, and the rule it was
/// last written under (eviction weighs the state against it).
#[derive(Debug)]
pub(super) struct Slot {
    pub(super) state: KeyState,
    pub(super) expires: Micros,
    pub(super) rule: Rule,
}

impl Slot {
    /// Applies an admitted check and refreshes `expires`; returns the change
    /// in sliding-log entries.
    #[inline] // called from check.rs, another codegen unit: keep it inlined there
    pub(super) fn commit(&mut self, rule: &Rule, t: Micros, cost: u64) -> isize {
        if !self.rule.same(rule) {
            self.rule = rule.clone();
        }
        let before = self.state.log_entries();
        algorithm::commit(rule, &mut self.state, t, cost);
        self.expires = self.state.expires_at(rule).unwrap_or(0);
        entries_delta(before, self.state.log_entries())
    }
}

impl Slot {
    /// Applies `step` (a charge, a give-back) to the state under `rule` and
    /// refreshes `expires`; returns the step's answer and the change in
    /// sliding-log entries.
    pub(super) fn apply<R>(
        &mut self,
        rule: &Rule,
        step: impl FnOnce(&mut KeyState) -> R,
    ) -> (R, isize) {
        if !self.rule.same(rule) {
            self.rule = rule.clone();
        }
        let before = self.state.log_entries();
        let answer = step(&mut self.state);
        self.expires = self.state.expires_at(rule).unwrap_or(0);
        (answer, entries_delta(before, self.state.log_entries()))
    }
}

fn entries_delta(before: usize, after: usize) -> isize {
    isize::try_from(after).unwrap_or(isize::MAX) - isize::try_from(before).unwrap_or(isize::MAX)
}

/// One key of a [`GcraTable`]: its fingerprint, with its rule class in the
/// low [`CLASS_BITS`] (written only when the key is inserted or checked
/// under the exclusive lock), and its `tat`: 24 bytes.
#[derive(Debug)]
pub(super) struct GcraSlot {
    pub(super) fp: Fp,
    pub(super) tat: AtomicU64,
}

impl GcraSlot {
    pub(super) fn empty() -> Self {
        Self {
            fp: EMPTY,
            tat: AtomicU64::new(0),
        }
    }
}

/// The GCRA keys of a shard: open addressing with linear probing over
/// slots that hold the fingerprint next to the state, so finding a key
/// reads one cache line (a general hash map keeps its probe bytes in a
/// separate array: two misses per check on a large store). Slots change
/// only under the shard's exclusive lock; `tat` is updated by
/// compare-and-swap under the shared lock. At most 4/5 full, at least 2/5
/// after growing: 30 to 60 bytes per key.
#[derive(Debug, Default)]
pub(super) struct GcraTable {
    /// Empty, or a power of two of slots.
    pub(super) slots: Box<[GcraSlot]>,
    pub(super) len: usize,
    /// The rules the slots' classes name.
    pub(super) rules: GcraRules,
}

impl GcraTable {
    pub(super) fn len(&self) -> usize {
        self.len
    }

    /// Whether two fingerprints name the same key here: equal but for the
    /// class bits.
    #[inline]
    pub(super) fn same(a: Fp, b: Fp) -> bool {
        a.0 == b.0 && (a.1 ^ b.1) >> CLASS_BITS == 0
    }

    /// The class bits of a slot's fingerprint.
    pub(super) fn class(fp: Fp) -> u16 {
        u16::try_from(fp.1 & ((1 << CLASS_BITS) - 1)).unwrap_or(UNKNOWN_CLASS)
    }

    /// `fp` with `class` in its class bits.
    fn with_class(fp: Fp, class: u16) -> Fp {
        Fp(fp.0, (fp.1 >> CLASS_BITS << CLASS_BITS) | u64::from(class))
    }

    /// Where `fp`'s probe starts: the low bits of its first word (the shard
    /// index is taken from the second).
    #[inline]
    fn start(&self, fp: Fp) -> usize {
        let mask = self.slots.len() - 1;
        usize::try_from(fp.0 & mask as u64).unwrap_or(mask)
    }

    /// The state of `fp`, if held.
    #[inline]
    pub(super) fn get(&self, fp: Fp) -> Option<&AtomicU64> {
        if self.slots.is_empty() {
            return None;
        }
        let mask = self.slots.len() - 1;
        let mut i = self.start(fp);
        loop {
            let slot = &self.slots[i];
            if Self::same(slot.fp, fp) {
                return Some(&slot.tat);
            }
            if Self::same(slot.fp, EMPTY) {
                return None;
            }
            i = (i + 1) & mask;
        }
    }

    /// The state of `fp`, a key of `rule`, inserted as 0 (an empty GCRA
    /// state) if not held; the key's class becomes `rule`'s.
    pub(super) fn get_or_insert(&mut self, fp: Fp, rule: &Rule) -> &mut AtomicU64 {
        let class = self.rules.class_of(rule);
        self.insert(Self::with_class(fp, class))
    }

    /// The slot of `fp` (class bits included), inserted if not held.
    pub(super) fn insert(&mut self, fp: Fp) -> &mut AtomicU64 {
        if (self.len + 1) * 5 > self.slots.len() * 4 {
            self.rebuild((self.slots.len() * 2).max(8), |_, _| true);
        }
        let mask = self.slots.len() - 1;
        let mut i = self.start(fp);
        while !Self::same(self.slots[i].fp, fp) && !Self::same(self.slots[i].fp, EMPTY) {
            i = (i + 1) & mask;
        }
        if Self::same(self.slots[i].fp, EMPTY) {
            self.len += 1;
        }
        self.slots[i].fp = fp;
        &mut self.slots[i].tat
    }

    /// Every key held (class bits included) and its `tat`.
    pub(super) fn iter(&mut self) -> impl Iterator<Item = (Fp, Micros)> + '_ {
        self.slots
            .iter_mut()
            .filter(|s| !Self::same(s.fp, EMPTY))
            .map(|s| (s.fp, *s.tat.get_mut()))
    }

    /// Keeps the keys for which `keep(fp, tat)` holds (asked twice per
    /// key: it must not change its answer).
    pub(super) fn retain(&mut self, mut keep: impl FnMut(Fp, Micros) -> bool) {
        let dropped = self.iter().filter(|&(fp, tat)| !keep(fp, tat)).count();
        if dropped > 0 {
            self.rebuild(self.slots.len(), keep);
            self.forget_unused_rules();
        }
    }

    /// Forgets the rules no key names any more, renumbering the classes.
    /// (Not part of `rebuild`: growing runs inside an insert, whose class
    /// may not be in a slot yet.)
    fn forget_unused_rules(&mut self) {
        let mut used = vec![false; self.rules.len()];
        for slot in &self.slots {
            if let Some(u) = used.get_mut(usize::from(Self::class(slot.fp))) {
                *u = !Self::same(slot.fp, EMPTY) || *u;
            }
        }
        if let Some(renumber) = self.rules.retain(&used) {
            for slot in &mut self.slots {
                if !Self::same(slot.fp, EMPTY) {
                    let class = usize::from(Self::class(slot.fp));
                    let class = renumber.get(class).copied().unwrap_or(UNKNOWN_CLASS);
                    slot.fp = Self::with_class(slot.fp, class);
                }
            }
        }
    }

    /// Gives memory back when at most a quarter full.
    pub(super) fn shrink(&mut self) {
        if self.len * 4 <= self.slots.len() {
            let mut size = 8;
            while self.len * 5 > size * 2 {
                size *= 2;
            }
            let size = if self.len == 0 { 0 } else { size };
            self.rebuild(size, |_, _| true);
        }
    }

    /// Moves the kept keys to `size` new slots, classes unchanged.
    pub(super) fn rebuild(&mut self, size: usize, mut keep: impl FnMut(Fp, Micros) -> bool) {
        let old = std::mem::replace(
            &mut self.slots,
            (0..size).map(|_| GcraSlot::empty()).collect(),
        );
        self.len = 0;
        for mut slot in old {
            let tat = *slot.tat.get_mut();
            if !Self::same(slot.fp, EMPTY) && keep(slot.fp, tat) {
                *self.insert(slot.fp).get_mut() = tat;
            }
        }
    }
}

#[derive(Debug, Default)]
pub(super) struct Table {
    pub(super) gcra: GcraTable,
    pub(super) other: FpMap<Box<Mutex<Slot>>>,
    /// Sliding-log entries held by `other`.
    pub(super) log_entries: AtomicUsize,
}

impl Table {
    pub(super) fn len(&self) -> usize {
        self.gcra.len() + self.other.len()
    }

    pub(super) fn add_log_entries(&self, delta: isize) -> usize {
        if delta >= 0 {
            self.log_entries
                .fetch_add(delta.unsigned_abs(), Ordering::Relaxed)
                + delta.unsigned_abs()
        } else {
            self.log_entries
                .fetch_sub(delta.unsigned_abs(), Ordering::Relaxed)
                - delta.unsigned_abs()
        }
    }

    /// Drops every key whose state is back to empty/full at `t`.
    pub(super) fn drop_expired(&mut self, t: Micros) {
        self.gcra.retain(|_, tat| tat > t);
        let mut freed = 0;
        self.other.retain(|_, slot| {
            let slot = slot.get_mut();
            let keep = slot.expires > t;
            if !keep {
                freed += slot.state.log_entries();
            }
            keep
        });
        *self.log_entries.get_mut() -= freed;
    }

    /// Removes one key of another algorithm than GCRA.
    pub(super) fn remove_other(&mut self, fp: Fp) {
        if let Some(mut slot) = self.other.remove(&fp) {
            *self.log_entries.get_mut() -= slot.get_mut().state.log_entries();
        }
    }
}

/// One shard, on its own cache lines.
#[derive(Debug, Default)]
#[repr(align(128))]
pub(super) struct Shard(pub(super) RwLock<Table>);

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::rule::{Algorithm, RuleSpec};
    use crate::store::memory::classes::MAX_CLASSES;

    fn gcra(name: &str, limit: u64, period: Duration) -> Rule {
        RuleSpec::new(name, Algorithm::Gcra, limit, period)
            .build()
            .expect("valid rule")
    }

    /// The tau of the rule a slot's class names.
    fn tau_of(table: &mut GcraTable, fp: Fp) -> Option<u64> {
        let class = table
            .iter()
            .find(|&(f, _)| GcraTable::same(f, fp))
            .map(|(f, _)| GcraTable::class(f))?;
        table
            .rules
            .rules
            .get(usize::from(class))
            .map(Rule::tau_micros)
    }

    #[test]
    fn gcra_table_finds_inserts_grows_and_drops() {
        let r = gcra("r", 1, Duration::from_secs(1));
        let mut table = GcraTable::default();
        assert!(table.get(Fp(1, 1)).is_none());
        // Colliding starts (same low bits) probe on; many keys force growth.
        let fps: Vec<Fp> = (1..=1000u64).map(|i| Fp(i << 40 | 5, i)).collect();
        for (i, &fp) in fps.iter().enumerate() {
            *table.get_or_insert(fp, &r).get_mut() = i as u64 + 100;
            assert_eq!(table.len(), i + 1);
            assert!(table.len() * 5 <= table.slots.len() * 4);
        }
        *table.get_or_insert(fps[7], &r).get_mut() += 0;
        assert_eq!(table.len(), 1000);
        for (i, &fp) in fps.iter().enumerate() {
            let tat = table.get(fp).map(|c| c.load(Ordering::Relaxed));
            assert_eq!(tat, Some(i as u64 + 100));
        }
        assert!(table.get(Fp(5, 5)).is_none());
        table.retain(|_, tat| tat % 2 == 0);
        assert_eq!(table.len(), 500);
        for (i, &fp) in fps.iter().enumerate() {
            assert_eq!(table.get(fp).is_some(), i % 2 == 0, "{i}");
        }
        table.retain(|_, tat| tat < 200);
        table.shrink();
        assert_eq!(table.len(), 50);
        assert!(table.slots.len() <= 256, "{}", table.slots.len());
        assert_eq!(table.iter().count(), 50);
        table.retain(|_, _| false);
        table.shrink();
        assert_eq!((table.len(), table.slots.len()), (0, 0));
        assert!(table.get(fps[0]).is_none());
    }

    #[test]
    fn classes_survive_growth_and_unused_rules_are_forgotten() {
        let a = gcra("a", 10, Duration::from_secs(1));
        let b = gcra("b", 1000, Duration::from_secs(3600));
        // Same shape as `a`: shares its class.
        let a2 = gcra("a2", 10, Duration::from_secs(1));
        let mut table = GcraTable::default();
        let fps: Vec<Fp> = (1..=300u64)
            .map(|i| Fp(i << 20 | 3, i << 40 | 0xffff))
            .collect();
        for (i, &fp) in fps.iter().enumerate() {
            let rule = [&a, &b, &a2][i % 3];
            *table.get_or_insert(fp, rule).get_mut() = i as u64 + 1;
        }
        assert_eq!(table.rules.len(), 2);
        for (i, &fp) in fps.iter().enumerate() {
            let tau = [&a, &b, &a2][i % 3].tau_micros();
            assert_eq!(tau_of(&mut table, fp), Some(tau), "key {i}");
            // The class bits do not change which key a fingerprint finds.
            assert_eq!(
                table
                    .get(fp)
                    .map(|c| c.load(std::sync::atomic::Ordering::Relaxed)),
                Some(i as u64 + 1)
            );
        }
        // Drop every key of `a`'s shape: the class goes, `b`'s is renumbered.
        table.retain(|_, tat| (tat - 1) % 3 == 1);
        assert_eq!(table.len(), 100);
        assert_eq!(table.rules.len(), 1);
        for (i, &fp) in fps.iter().enumerate().filter(|(i, _)| i % 3 == 1) {
            assert_eq!(tau_of(&mut table, fp), Some(b.tau_micros()), "key {i}");
        }
        // A key checked under another rule takes that rule's class.
        *table.get_or_insert(fps[1], &a).get_mut() += 0;
        assert_eq!(tau_of(&mut table, fps[1]), Some(a.tau_micros()));
    }

    #[test]
    fn a_full_register_counts_new_shapes_as_exhausted() {
        let mut rules = GcraRules::default();
        for limit in 1..=MAX_CLASSES as u64 {
            let class = rules.class_of(&gcra("r", limit, Duration::from_secs(1)));
            assert_eq!(usize::from(class), rules.len() - 1);
        }
        let extra = gcra("r", 10_000, Duration::from_secs(1));
        assert_eq!(rules.class_of(&extra), UNKNOWN_CLASS);
        assert_eq!(rules.len(), MAX_CLASSES);
        let unknown = rules.usage(UNKNOWN_CLASS, 0, 0);
        assert!(unknown.exhausted);
        // A known class with nothing in use is not.
        assert!(!rules.usage(0, 0, 0).exhausted);
    }
}
