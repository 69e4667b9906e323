//! What a full shard forgets: what costs least to forget, first.
//!
//! Every key's stake is its [`Usage`] at the eviction time under the rule
//! it was last written with: how much of the limit forgetting it would
//! hand back. Keys are evicted in the order (stake, end of state): first
//! the keys that are not exhausted, the least used first; the exhausted
//! keys last, those whose state ends soonest first. Ties (equal stake)
//! go to the key whose state ends first. The candidates are every key of
//! the shard but those the current check wrote.
//!
//! Keys that tie on both (exhausted keys of one fixed window end together)
//! are taken in an order drawn afresh for each eviction. A fixed order (by
//! fingerprint) made the keys that survived one eviction rank last in every
//! later one, so in a shard full of exhausted keys each newly exhausted key
//! (an abuser's) was the first to get its quota back: 65% of them against
//! 8–20% of older ones (`tests/it/eviction.rs`).

use super::fingerprint::EMPTY;
use super::fingerprint::Fp;
use super::table::{GcraTable, Slot, Table};
use crate::time::Micros;

/// The order keys are evicted in, smallest first: stake, then the end of
/// the state (the key's `tat` or `expires`), then a draw for this eviction
/// ([`draw`]), then the fingerprint (only so the order is total).
type Rank = (u64, Micros, u64, Fp);

/// A fresh order of the keys for one eviction: the fingerprints are
/// secret-keyed and uniform, and mixing them with a salt that changes from
/// one eviction to the next (splitmix64's finalizer) orders them anew each
/// time, with no order a client can aim at.
fn draw(fp: Fp, salt: u64) -> u64 {
    let mut z = (fp.0 ^ salt).wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// This eviction's salt: the time and the shard's size, which change from
/// one eviction to the next.
fn salt(t: Micros, len: usize) -> u64 {
    draw(Fp(t, 0), len as u64)
}

impl Table {
    /// Evicts `n` keys (fewer if fewer are evictable), never one in
    /// `protect`, in the order of the module docs at `t`: no key is evicted
    /// while a key of lower rank is held, so no exhausted key goes while a
    /// key that is not exhausted is a candidate.
    pub(super) fn evict_keys(&mut self, n: usize, protect: &[Fp], t: Micros) {
        let mut candidates: Vec<(Rank, bool)> = Vec::with_capacity(self.len());
        let salt = salt(t, self.len());
        let rules = &self.gcra.rules;
        candidates.extend(
            self.gcra
                .slots
                .iter_mut()
                .map(|s| (s.fp, *s.tat.get_mut()))
                .filter(|&(fp, _)| {
                    !GcraTable::same(fp, EMPTY) && !protect.iter().any(|&p| GcraTable::same(fp, p))
                })
                .map(|(fp, tat)| {
                    let usage = rules.usage(GcraTable::class(fp), tat, t);
                    ((usage.stake(), tat, draw(fp, salt), fp), true)
                }),
        );
        candidates.extend(
            self.other
                .iter_mut()
                .filter(|(fp, _)| !protect.contains(fp))
                .map(|(fp, slot)| {
                    let (stake, ends) = other_rank(slot.get_mut(), t);
                    ((stake, ends, draw(*fp, salt), *fp), false)
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
        for &((_, _, _, fp), is_gcra) in &candidates[..n] {
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
        let salt = salt(t, self.len());
        let mut candidates: Vec<Rank> = self
            .other
            .iter_mut()
            .filter_map(|(fp, slot)| {
                let slot = slot.get_mut();
                let eligible = !protect.contains(fp) && slot.state.log_entries() > 0;
                eligible.then(|| {
                    let (stake, ends) = other_rank(slot, t);
                    (stake, ends, draw(*fp, salt), *fp)
                })
            })
            .collect();
        candidates.sort_unstable();
        for (_, _, _, fp) in candidates {
            if *self.log_entries.get_mut() <= target {
                break;
            }
            self.remove_other(fp);
        }
    }
}

/// The stake and end of a key of another algorithm than GCRA.
fn other_rank(slot: &Slot, t: Micros) -> (u64, Micros) {
    (slot.state.usage(&slot.rule, t).stake(), slot.expires)
}
