//! The most denied keys lately, per rule: [`TopDenied`], a bounded
//! heavy-hitter sketch (docs/semantics.md, "Top denied keys").
//!
//! **Which sketch.** Space-Saving (one summary per rule and epoch, see
//! `space_saving.rs`) rather than a count-min sketch with a top-k heap:
//! for the same memory it keeps the keys themselves (a count-min sketch
//! only answers for keys one asks about, so it needs the heap beside it
//! anyway), its counts are never below the truth, and it reports each
//! key's error bound, so a caller knows how far to trust a count. It is
//! deterministic and costs one hash, one probe and `O(log capacity)`
//! integer swaps per record.
//!
//! **What "lately" means.** Time is cut into epochs of
//! [`TopDenied::epoch`] (default [`DEFAULT_TOP_DENIED_EPOCH`], aligned on
//! the clock: `floor(now / epoch)`); a rule keeps the current epoch's
//! summary and the previous one's. A report covers both: every denial
//! since the start of the previous epoch, so between one and two epochs
//! back (60 to 120 s with the default). An epoch with no denial and no
//! read in between forgets both.
//!
//! **Bounds.** With `k` the capacity and `N_c`, `N_p` the rule's denials
//! in the current and the previous epoch, every key reported has
//! `count − error ≤ true ≤ count` and `error ≤ N_c/k + N_p/k`; a key
//! denied more than `N_c/k` times in the current epoch, or more than
//! `N_p/k` in the previous one, is always among the keys ranked (so a
//! report of `2k` keys lists it). A summary that never filled (at most `k`
//! distinct keys denied in its epoch) is exact: error 0.
//!
//! **Memory.** Independent of how many keys are denied: a rule's two
//! summaries are allocated at its first denial and never grow,
//! [`TopDenied::bytes_per_rule`] (216 to 232 bytes per counter; 54 KiB
//! per rule at the default capacity, and a boxed head); rules never
//! denied hold nothing but their 16-byte slot. A key longer than [`KEPT_KEY_BYTES`] keeps only its first
//! bytes, told apart from others by its length and a 64-bit hash of the
//! whole key (with a random seed per sketch).
//!
//! **Cost.** Recorded for denied pairs only, under a per-rule mutex held
//! for the record; an admitted check pays nothing.
//!
//! ```
//! use std::time::Duration;
//! use tollgate::top::TopDenied;
//!
//! // 2 rules, 4 counters each, epochs of a minute.
//! let top = TopDenied::new(2, 4, Duration::from_secs(60));
//! let now = 1_000_000; // µs
//! for key in ["mallory", "mallory", "mallory", "eve", "bob"] {
//!     top.record(0, key.as_bytes(), now);
//! }
//! let most = top.top(0, 2, now);
//! assert_eq!(most[0].key, b"mallory");
//! assert_eq!((most[0].count, most[0].error), (3, 0)); // exact: never full
//! assert_eq!(most.len(), 2);
//! assert!(top.top(1, 10, now).is_empty()); // rule 1: no denial
//! ```

use std::hash::BuildHasher;
use std::sync::OnceLock;
use std::time::Duration;

use parking_lot::Mutex;

use crate::time::{Micros, duration_to_micros};

mod recent;
mod space_saving;
mod table;
#[cfg(test)]
mod tests;

use recent::{Recent, epoch_of};

/// Default counters per rule and epoch: every key behind more than 1/256
/// of a rule's denials in an epoch is guaranteed a place.
pub const DEFAULT_TOP_DENIED_CAPACITY: usize = 256;
/// The most counters per rule and epoch (about 21 MiB per rule).
pub const MAX_TOP_DENIED_CAPACITY: usize = 100_000;
/// Default epoch: a report covers the last one to two minutes.
pub const DEFAULT_TOP_DENIED_EPOCH: Duration = Duration::from_secs(60);
/// The shortest epoch.
pub const MIN_TOP_DENIED_EPOCH: Duration = Duration::from_millis(1);
/// A key's bytes kept whole; a longer key keeps this many, its first.
pub const KEPT_KEY_BYTES: usize = 64;

/// One key of a [`TopDenied`] report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeniedKey {
    /// The key, or its first [`KEPT_KEY_BYTES`] bytes when longer (see
    /// [`DeniedKey::truncated`]).
    pub key: Vec<u8>,
    /// The key's whole length in bytes.
    pub key_len: usize,
    /// Denials counted for the key over the report's horizon: never below
    /// the true number.
    pub count: u64,
    /// How much of `count` may belong to other keys: the key was denied
    /// at least `count − error` times.
    pub error: u64,
}

impl DeniedKey {
    /// Whether `key` holds only the key's first bytes.
    #[must_use]
    pub fn truncated(&self) -> bool {
        self.key_len > self.key.len()
    }

    /// The fewest denials the key can have had: `count − error`.
    #[must_use]
    pub fn lower(&self) -> u64 {
        self.count.saturating_sub(self.error)
    }
}

/// Per rule, the most denied keys over the last one to two epochs; see the
/// [module](self) docs. Thread-safe: one mutex per rule.
#[derive(Debug)]
pub struct TopDenied {
    /// Per rule (by index), made at its first denial; empty when the
    /// capacity is 0. Boxed: a rule never denied holds only the 16-byte
    /// slot, not the summaries' 200-byte heads (a config of 100,000
    /// rules, most never denied, paid 20 MB for them).
    rules: Box<[OnceLock<Box<Mutex<Recent>>>]>,
    capacity: usize,
    epoch: Micros,
    hasher: foldhash::quality::RandomState,
}

impl TopDenied {
    /// A sketch for `rules` rules of `capacity` counters per rule and
    /// epoch (0 records nothing; at most [`MAX_TOP_DENIED_CAPACITY`],
    /// larger is taken as that), epochs `epoch` long (at least
    /// [`MIN_TOP_DENIED_EPOCH`]).
    #[must_use]
    pub fn new(rules: usize, capacity: usize, epoch: Duration) -> Self {
        let capacity = capacity.min(MAX_TOP_DENIED_CAPACITY);
        let rules = if capacity == 0 { 0 } else { rules };
        Self {
            rules: (0..rules).map(|_| OnceLock::new()).collect(),
            capacity,
            epoch: duration_to_micros(epoch.max(MIN_TOP_DENIED_EPOCH)),
            hasher: foldhash::quality::RandomState::default(),
        }
    }

    /// Counters per rule and epoch.
    #[must_use]
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// The epoch: a report covers the current one and the previous one.
    #[must_use]
    pub fn epoch(&self) -> Duration {
        Duration::from_micros(self.epoch)
    }

    /// Records one denial of `key` under rule `rule` (its index) at `now`
    /// (µs, never going back). A rule index out of range is ignored.
    pub fn record(&self, rule: usize, key: &[u8], now: Micros) {
        let Some(slot) = self.rules.get(rule) else {
            return;
        };
        let hash = self.hasher.hash_one(key);
        let epoch = epoch_of(now, self.epoch);
        slot.get_or_init(|| Box::new(Mutex::new(Recent::new(self.capacity, epoch))))
            .lock()
            .record(epoch, hash, key);
    }

    /// The `n` most denied keys of rule `rule` (its index) at `now`, most
    /// denied first (ties: the higher lower bound, then the key's bytes);
    /// empty for a rule never denied or out of range.
    #[must_use]
    pub fn top(&self, rule: usize, n: usize, now: Micros) -> Vec<DeniedKey> {
        self.read(rule, now, |r| r.top(n)).unwrap_or_default()
    }

    /// The denials of rule `rule` (its index) over the horizon at `now`:
    /// the `N` of the bounds in the [module](self) docs.
    #[must_use]
    pub fn denials(&self, rule: usize, now: Micros) -> u64 {
        self.read(rule, now, Recent::total).unwrap_or(0)
    }

    fn read<T>(&self, rule: usize, now: Micros, f: impl FnOnce(&Recent) -> T) -> Option<T> {
        let mut recent = self.rules.get(rule)?.get()?.lock();
        recent.rotate(epoch_of(now, self.epoch));
        Some(f(&recent))
    }

    /// The heap bytes one rule's summaries hold once it was denied, at
    /// `capacity` counters (0 for a capacity of 0).
    #[must_use]
    pub fn bytes_per_rule(capacity: usize) -> usize {
        match capacity.min(MAX_TOP_DENIED_CAPACITY) {
            0 => 0,
            c => size_of::<Mutex<Recent>>() + Recent::bytes_for(c),
        }
    }

    /// The most heap bytes a sketch of `rules` rules at `capacity` holds,
    /// whatever it records: every rule denied.
    #[must_use]
    pub fn bytes_bound(rules: usize, capacity: usize) -> usize {
        if capacity == 0 {
            return 0;
        }
        rules * (size_of::<OnceLock<Box<Mutex<Recent>>>>() + Self::bytes_per_rule(capacity))
    }

    /// The heap bytes held now, from the allocations themselves.
    #[must_use]
    pub fn heap_bytes(&self) -> usize {
        let slots = self.rules.len() * size_of::<OnceLock<Box<Mutex<Recent>>>>();
        slots
            + self
                .rules
                .iter()
                .filter_map(OnceLock::get)
                .map(|r| size_of::<Mutex<Recent>>() + r.lock().heap_bytes())
                .sum::<usize>()
    }
}
