//! What a full shard forgets: what costs least to forget, first.
//!
//! Every key's stake is its [`Usage`] at the eviction time under the rule
//! it was last written with: how much of the limit forgetting it would
//! hand back. Keys are evicted in the order (stake, end of state): first
//! the keys that are not exhausted, the least used first; the exhausted
//! keys last, those whose state ends soonest first. Ties (equal stake)
//! go to the key whose state ends first. The candidates are every key of
//! the shard but those the current check wrote.

use std::collections::HashMap;

use super::{Fp, GcraTable, Table};
use crate::algorithm::{GcraState, Usage, gcra};
use crate::rule::Rule;
use crate::time::Micros;

/// The class of a GCRA key whose rule is not recorded (the shard already
/// records [`MAX_CLASSES`] rules): it counts as exhausted, so it is kept
/// as long as any key known to hold less is held.
pub(super) const UNKNOWN_CLASS: u16 = u16::MAX;

/// The most distinct GCRA rule shapes a shard records: a bound on memory
/// when rules come and go (reloads, rules built per request); they are
/// forgotten when no key names them.
const MAX_CLASSES: usize = 256;

/// The GCRA rules a shard's keys were written under, numbered by shape:
/// the table's slots hold the number (their class), not the rule, so a
/// slot stays 24 bytes. GCRA usage depends only on `tau` and `T`, so rules
/// of one shape share a class.
#[derive(Debug, Default)]
pub(super) struct GcraRules {
    rules: Vec<Rule>,
    by_shape: HashMap<(Micros, Micros), u16>,
}

impl GcraRules {
    /// How many classes are recorded.
    pub(super) fn len(&self) -> usize {
        self.rules.len()
    }

    /// `rule`'s class, recorded if new (or [`UNKNOWN_CLASS`] when full).
    pub(super) fn class_of(&mut self, rule: &Rule) -> u16 {
        // The usual case, a few configured rules: a pointer comparison each
        // is cheaper than hashing the shape (multi-rule checks come here).
        if let Some(class) = self.rules.iter().take(4).position(|r| r.same(rule)) {
            return u16::try_from(class).unwrap_or(UNKNOWN_CLASS);
        }
        let shape = (rule.tau_micros(), rule.interval_micros());
        if let Some(&class) = self.by_shape.get(&shape) {
            return class;
        }
        if self.rules.len() >= MAX_CLASSES {
            return UNKNOWN_CLASS;
        }
        let class = u16::try_from(self.rules.len()).unwrap_or(UNKNOWN_CLASS);
        self.rules.push(rule.clone());
        self.by_shape.insert(shape, class);
        class
    }

    /// The stake of a GCRA key of `class` with `tat`, at `t`.
    fn usage(&self, class: u16, tat: Micros, t: Micros) -> Usage {
        match self.rules.get(usize::from(class)) {
            Some(rule) => gcra::usage(rule, GcraState { tat }, t),
            None => Usage {
                exhausted: true,
                share: u64::MAX,
            },
        }
    }

    /// Keeps the classes marked in `used`; returns the new number of every
    /// old class ([`UNKNOWN_CLASS`] for those dropped) if any was dropped.
    pub(super) fn retain(&mut self, used: &[bool]) -> Option<Vec<u16>> {
        if used.iter().all(|&u| u) {
            return None;
        }
        let mut renumber = Vec::with_capacity(self.rules.len());
        let mut kept = Vec::new();
        for (rule, &u) in std::mem::take(&mut self.rules).into_iter().zip(used) {
            if u {
                renumber.push(u16::try_from(kept.len()).unwrap_or(UNKNOWN_CLASS));
                kept.push(rule);
            } else {
                renumber.push(UNKNOWN_CLASS);
            }
        }
        self.by_shape = kept
            .iter()
            .zip(0..)
            .map(|(r, class)| ((r.tau_micros(), r.interval_micros()), class))
            .collect();
        self.rules = kept;
        Some(renumber)
    }
}

/// The order keys are evicted in, smallest first: stake, then the end of
/// the state (the key's `tat` or `expires`), then the fingerprint (only so
/// the order is total).
type Rank = (u64, Micros, Fp);

impl Table {
    /// Evicts `n` keys (fewer if fewer are evictable), never one in
    /// `protect`, in the order of the module docs at `t`: no key is evicted
    /// while a key of lower rank is held, so no exhausted key goes while a
    /// key that is not exhausted is a candidate.
    pub(super) fn evict_keys(&mut self, n: usize, protect: &[Fp], t: Micros) {
        let mut candidates: Vec<(Rank, bool)> = Vec::with_capacity(self.len());
        let rules = &self.gcra.rules;
        candidates.extend(
            self.gcra
                .slots
                .iter_mut()
                .map(|s| (s.fp, *s.tat.get_mut()))
                .filter(|&(fp, _)| {
                    !GcraTable::same(fp, super::EMPTY)
                        && !protect.iter().any(|&p| GcraTable::same(fp, p))
                })
                .map(|(fp, tat)| {
                    let usage = rules.usage(GcraTable::class(fp), tat, t);
                    ((usage.stake(), tat, fp), true)
                }),
        );
        candidates.extend(
            self.other
                .iter_mut()
                .filter(|(fp, _)| !protect.contains(fp))
                .map(|(fp, slot)| {
                    let (stake, ends) = other_rank(slot.get_mut(), t);
                    ((stake, ends, *fp), false)
                }),
        );
        let n = n.min(candidates.len());
        if n == 0 {
            return;
        }
        if n < candidates.len() {
            candidates.select_nth_unstable(n - 1);
        }
        let mut gcra: Vec<Fp> = Vec::new();
        let mut other: Vec<Fp> = Vec::new();
        for &((_, _, fp), is_gcra) in &candidates[..n] {
            if is_gcra {
                gcra.push(fp);
            } else {
                other.push(fp);
            }
        }
        if !gcra.is_empty() {
            gcra.sort_unstable();
            self.gcra.retain(|fp, _| gcra.binary_search(&fp).is_err());
        }
        for fp in other {
            self.remove_other(fp);
        }
    }

    /// Evicts sliding-log keys, never one in `protect`, in the order of the
    /// module docs at `t`, until at most `target` entries are held (or no
    /// candidate is left).
    pub(super) fn evict_log_entries(&mut self, target: usize, protect: &[Fp], t: Micros) {
        let mut candidates: Vec<Rank> = self
            .other
            .iter_mut()
            .filter_map(|(fp, slot)| {
                let slot = slot.get_mut();
                let eligible = !protect.contains(fp) && slot.state.log_entries() > 0;
                eligible.then(|| {
                    let (stake, ends) = other_rank(slot, t);
                    (stake, ends, *fp)
                })
            })
            .collect();
        candidates.sort_unstable();
        for (_, _, fp) in candidates {
            if *self.log_entries.get_mut() <= target {
                break;
            }
            self.remove_other(fp);
        }
    }
}

/// The stake and end of a key of another algorithm than GCRA.
fn other_rank(slot: &super::Slot, t: Micros) -> (u64, Micros) {
    (slot.state.usage(&slot.rule, t).stake(), slot.expires)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::{GcraRules, MAX_CLASSES, UNKNOWN_CLASS};
    use crate::rule::{Algorithm, Rule, RuleSpec};
    use crate::store::memory::{Fp, GcraTable};

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
