//! The in-process store: sharded, safe under concurrent use, bounded.
//!
//! * Keys are never stored: each (rule, key) pair is reduced to a 128-bit
//!   SipHash-1-3 fingerprint under a random per-store secret, so a long or
//!   hostile key costs 16 bytes and an attacker cannot aim for collisions.
//! * GCRA state is one `AtomicU64` per key, updated by compare-and-swap
//!   under the shard's *shared* lock: concurrent GCRA checks never exclude
//!   each other. The other algorithms keep their state behind a per-key
//!   mutex, also under the shared lock.
//! * Creating a key, evicting, and multi-rule checks take the shard's
//!   exclusive lock; a multi-rule check takes every shard it touches in
//!   index order, so it is atomic against every other check.
//! * Bounded: at most `max_keys` keys (and `max_log_entries` sliding-log
//!   entries). A full shard first drops keys that are back to their
//!   empty/full state (forgetting them changes no decision), then, if still
//!   full, evicts the eighth of its keys nearest to that state. Under a
//!   flood of distinct keys beyond the cap the store therefore forgets the
//!   keys closest to reset, erring towards admission, and memory stays
//!   bounded.

use std::collections::HashMap;
use std::hash::{BuildHasher, BuildHasherDefault, Hash, Hasher};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use parking_lot::{Mutex, RwLock, RwLockWriteGuard};
use siphasher::sip128::{Hasher128, SipHasher13};

use crate::algorithm::{self, GcraState, KeyState, gcra};
use crate::decision::{Decision, MultiDecision};
use crate::error::StoreError;
use crate::rule::{Algorithm, Rule};
use crate::store::{KeyCheck, Store};
use crate::time::{Clock, Micros, MonotonicClock};

/// Default cap on keys held.
pub const DEFAULT_MAX_KEYS: usize = 1_000_000;
/// Default cap on sliding-log entries held across all keys.
pub const DEFAULT_MAX_LOG_ENTRIES: usize = 4_000_000;

/// A (rule, key) fingerprint. Hashed by its first word: it is already random.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct Fp(u64, u64);

impl Hash for Fp {
    fn hash<H: Hasher>(&self, state: &mut H) {
        state.write_u64(self.0);
    }
}

/// Passes a fingerprint word through as the hash.
#[derive(Default)]
struct FpHasher(u64);

impl Hasher for FpHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(b);
        }
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }
}

type FpMap<V> = HashMap<Fp, V, BuildHasherDefault<FpHasher>>;

/// State of a non-GCRA key and when it is back to empty.
#[derive(Debug)]
struct Slot {
    state: KeyState,
    expires: Micros,
}

impl Slot {
    /// Applies an admitted check and refreshes `expires`; returns the change
    /// in sliding-log entries.
    fn commit(&mut self, rule: &Rule, t: Micros, cost: u64) -> isize {
        let before = self.state.log_entries();
        algorithm::commit(rule, &mut self.state, t, cost);
        self.expires = self.state.expires_at(rule).unwrap_or(0);
        entries_delta(before, self.state.log_entries())
    }
}

fn entries_delta(before: usize, after: usize) -> isize {
    isize::try_from(after).unwrap_or(isize::MAX) - isize::try_from(before).unwrap_or(isize::MAX)
}

#[derive(Debug, Default)]
struct Table {
    gcra: FpMap<AtomicU64>,
    other: FpMap<Box<Mutex<Slot>>>,
    /// Sliding-log entries held by `other`.
    log_entries: AtomicUsize,
}

impl Table {
    fn len(&self) -> usize {
        self.gcra.len() + self.other.len()
    }

    fn add_log_entries(&self, delta: isize) -> usize {
        if delta >= 0 {
            self.log_entries.fetch_add(delta.unsigned_abs(), Ordering::Relaxed) + delta.unsigned_abs()
        } else {
            self.log_entries.fetch_sub(delta.unsigned_abs(), Ordering::Relaxed) - delta.unsigned_abs()
        }
    }

    /// Drops every key whose state is back to empty/full at `t`.
    fn drop_expired(&mut self, t: Micros) {
        self.gcra.retain(|_, tat| *tat.get_mut() > t);
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

    /// Evicts at least `n` keys (fewer if fewer are evictable), those
    /// nearest to reset first, never one in `protect`. With `logs_only`,
    /// only sliding-log keys are candidates.
    fn evict(&mut self, n: usize, protect: &[Fp], logs_only: bool) {
        let mut candidates: Vec<(Micros, Fp)> = Vec::new();
        if !logs_only {
            candidates.extend(
                self.gcra
                    .iter_mut()
                    .filter(|(fp, _)| !protect.contains(fp))
                    .map(|(fp, tat)| (*tat.get_mut(), *fp)),
            );
        }
        candidates.extend(
            self.other
                .iter_mut()
                .filter_map(|(fp, slot)| {
                    let slot = slot.get_mut();
                    let eligible =
                        !protect.contains(fp) && (!logs_only || slot.state.log_entries() > 0);
                    eligible.then_some((slot.expires, *fp))
                }),
        );
        let n = n.min(candidates.len());
        if n == 0 {
            return;
        }
        if n < candidates.len() {
            candidates.select_nth_unstable(n - 1);
        }
        for (_, fp) in &candidates[..n] {
            if self.gcra.remove(fp).is_none()
                && let Some(slot) = self.other.remove(fp)
            {
                *self.log_entries.get_mut() -= slot.lock().state.log_entries();
            }
        }
    }
}

/// One shard, on its own cache lines.
#[derive(Debug, Default)]
#[repr(align(128))]
struct Shard(RwLock<Table>);

/// Builds a [`MemoryStore`].
#[derive(Debug, Clone)]
pub struct MemoryStoreBuilder<C = MonotonicClock> {
    clock: C,
    max_keys: usize,
    max_log_entries: usize,
    shards: usize,
}

impl MemoryStoreBuilder<MonotonicClock> {
    fn new() -> Self {
        let cores = std::thread::available_parallelism().map_or(4, std::num::NonZero::get);
        Self {
            clock: MonotonicClock::new(),
            max_keys: DEFAULT_MAX_KEYS,
            max_log_entries: DEFAULT_MAX_LOG_ENTRIES,
            shards: (cores * 16).next_power_of_two().max(64),
        }
    }
}

impl<C: Clock> MemoryStoreBuilder<C> {
    /// Uses `clock` for checks that do not pass a time.
    pub fn clock<C2: Clock>(self, clock: C2) -> MemoryStoreBuilder<C2> {
        MemoryStoreBuilder {
            clock,
            max_keys: self.max_keys,
            max_log_entries: self.max_log_entries,
            shards: self.shards,
        }
    }

    /// The most keys held at once (default [`DEFAULT_MAX_KEYS`], at least 1).
    #[must_use]
    pub fn max_keys(mut self, n: usize) -> Self {
        self.max_keys = n.max(1);
        self
    }

    /// The most sliding-log entries held across all keys (default
    /// [`DEFAULT_MAX_LOG_ENTRIES`], at least 1).
    #[must_use]
    pub fn max_log_entries(mut self, n: usize) -> Self {
        self.max_log_entries = n.max(1);
        self
    }

    /// How many shards (rounded down to a power of two, at most `max_keys`).
    #[must_use]
    pub fn shards(mut self, n: usize) -> Self {
        self.shards = n.max(1);
        self
    }

    /// Builds the store.
    #[must_use]
    pub fn build(self) -> MemoryStore<C> {
        let wanted = self.shards.min(self.max_keys).max(1);
        let shards = 1usize << wanted.ilog2();
        let random = std::collections::hash_map::RandomState::new();
        MemoryStore {
            clock: self.clock,
            shards: (0..shards).map(|_| Shard::default()).collect(),
            shard_bits: shards.ilog2(),
            shard_cap: self.max_keys / shards,
            shard_log_cap: (self.max_log_entries / shards).max(1),
            k0: random.hash_one(0x746f_6c6c_u64),
            k1: random.hash_one(0x6761_7465_u64),
        }
    }
}

/// The in-process store. See the module docs for its design.
///
/// ```
/// use std::time::Duration;
/// use tollgate::{Algorithm, FakeClock, MemoryStore, RuleSpec};
///
/// let store = MemoryStore::builder().clock(FakeClock::new()).max_keys(10_000).build();
/// let rule = RuleSpec::new("r", Algorithm::Gcra, 1, Duration::from_secs(1)).build().unwrap();
/// assert!(store.check_sync(&rule, b"k", 1, None).allowed);
/// assert!(!store.check_sync(&rule, b"k", 1, None).allowed);
/// assert_eq!(store.len(), 1);
/// ```
#[derive(Debug)]
pub struct MemoryStore<C = MonotonicClock> {
    clock: C,
    shards: Box<[Shard]>,
    shard_bits: u32,
    shard_cap: usize,
    shard_log_cap: usize,
    k0: u64,
    k1: u64,
}

impl MemoryStore<MonotonicClock> {
    /// A builder with the defaults: monotonic clock, [`DEFAULT_MAX_KEYS`].
    #[must_use]
    pub fn builder() -> MemoryStoreBuilder<MonotonicClock> {
        MemoryStoreBuilder::new()
    }

    /// A store with the defaults.
    #[must_use]
    pub fn new() -> Self {
        Self::builder().build()
    }
}

impl Default for MemoryStore<MonotonicClock> {
    fn default() -> Self {
        Self::new()
    }
}

/// GCRA on one atomic word: compare-and-swap until the state we decided on
/// is the state we replace.
fn gcra_cas(rule: &Rule, cell: &AtomicU64, t: Micros, cost: u64) -> Decision {
    let mut current = cell.load(Ordering::Acquire);
    loop {
        let (decision, next) = gcra::check(rule, Some(GcraState { tat: current }), t, cost);
        if !decision.allowed || next.tat == current {
            return decision;
        }
        match cell.compare_exchange_weak(current, next.tat, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => return decision,
            Err(actual) => current = actual,
        }
    }
}

impl<C: Clock> MemoryStore<C> {
    /// The store's clock.
    pub fn clock(&self) -> &C {
        &self.clock
    }

    /// How many keys are held.
    #[must_use]
    pub fn len(&self) -> usize {
        self.shards.iter().map(|s| s.0.read().len()).sum()
    }

    /// Whether no key is held.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// How many sliding-log entries are held across all keys.
    #[must_use]
    pub fn log_entries(&self) -> usize {
        self.shards
            .iter()
            .map(|s| s.0.read().log_entries.load(Ordering::Relaxed))
            .sum()
    }

    /// The most keys this store holds at once (the configured cap rounded
    /// down to a multiple of the shard count).
    #[must_use]
    pub fn capacity(&self) -> usize {
        self.shard_cap * self.shards.len()
    }

    /// Drops every key that is back to its empty/full state at the store's
    /// current time. Never needed for correctness; frees memory early.
    pub fn sweep(&self) {
        let t = self.clock.now();
        for shard in &self.shards {
            shard.0.write().drop_expired(t);
        }
    }

    fn fingerprint(&self, rule: &Rule, key: &[u8]) -> Fp {
        let mut h = SipHasher13::new_with_keys(self.k0, self.k1);
        h.write(rule.name().as_bytes());
        // 0xff never occurs in a rule name, so (name, key) maps to one input.
        h.write_u8(0xff);
        h.write(key);
        let h = h.finish128();
        Fp(h.h1, h.h2)
    }

    fn shard(&self, fp: Fp) -> &Shard {
        let i = fp.1.checked_shr(64 - self.shard_bits).unwrap_or(0);
        &self.shards[usize::try_from(i).unwrap_or(0)]
    }

    fn shard_index(&self, fp: Fp) -> usize {
        usize::try_from(fp.1.checked_shr(64 - self.shard_bits).unwrap_or(0)).unwrap_or(0)
    }

    /// Makes room after inserting, keeping `protect` (the keys just written).
    fn enforce_caps(&self, table: &mut Table, t: Micros, protect: &[Fp]) {
        let over_keys = table.len() > self.shard_cap;
        let over_logs = *table.log_entries.get_mut() > self.shard_log_cap;
        if !over_keys && !over_logs {
            return;
        }
        table.drop_expired(t);
        if table.len() > self.shard_cap {
            let n = table.len() - self.shard_cap + self.shard_cap / 8;
            table.evict(n.max(1), protect, false);
        }
        while *table.log_entries.get_mut() > self.shard_log_cap {
            let before = table.len();
            table.evict(1, protect, true);
            if table.len() == before {
                break;
            }
        }
    }

    /// Decides one check now, synchronously. `at` overrides the clock.
    pub fn check_sync(&self, rule: &Rule, key: &[u8], cost: u64, at: Option<Micros>) -> Decision {
        let t = at.unwrap_or_else(|| self.clock.now());
        let fp = self.fingerprint(rule, key);
        let shard = self.shard(fp);
        let gcra = rule.algorithm() == Algorithm::Gcra;
        {
            let table = shard.0.read();
            if gcra {
                if let Some(cell) = table.gcra.get(&fp) {
                    return gcra_cas(rule, cell, t, cost);
                }
            } else if let Some(slot) = table.other.get(&fp) {
                let mut slot = slot.lock();
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
        }
        // A key not held: decide against the empty state; create it only
        // when the check consumes.
        let decision = algorithm::evaluate(rule, &KeyState::Empty, t, cost);
        if !decision.allowed || cost == 0 {
            return decision;
        }
        let mut table = shard.0.write();
        let decision = self.commit_locked(&mut table, rule, fp, t, cost);
        self.enforce_caps(&mut table, t, &[fp]);
        decision
    }

    /// Decides and commits one check holding the shard exclusively,
    /// creating the key if needed.
    fn commit_locked(
        &self,
        table: &mut Table,
        rule: &Rule,
        fp: Fp,
        t: Micros,
        cost: u64,
    ) -> Decision {
        if rule.algorithm() == Algorithm::Gcra {
            let cell = table.gcra.entry(fp).or_insert_with(|| AtomicU64::new(0));
            let (decision, next) =
                gcra::check(rule, Some(GcraState { tat: *cell.get_mut() }), t, cost);
            if decision.allowed {
                *cell.get_mut() = next.tat;
            }
            return decision;
        }
        let slot = table.other.entry(fp).or_insert_with(|| {
            Box::new(Mutex::new(Slot {
                state: KeyState::Empty,
                expires: 0,
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
    fn evaluate_locked(table: &Table, rule: &Rule, fp: Fp, t: Micros, cost: u64) -> Decision {
        if rule.algorithm() == Algorithm::Gcra {
            let tat = table.gcra.get(&fp).map(|c| GcraState {
                tat: c.load(Ordering::Acquire),
            });
            return gcra::check(rule, tat, t, cost).0;
        }
        match table.other.get(&fp) {
            Some(slot) => algorithm::evaluate(rule, &slot.lock().state, t, cost),
            None => algorithm::evaluate(rule, &KeyState::Empty, t, cost),
        }
    }

    /// Decides several checks all-or-nothing, synchronously. The same
    /// (rule, key) named twice counts once with the costs added.
    ///
    /// # Panics
    /// Never for a non-empty `checks`; an empty one is answered by the
    /// [`crate::Limiter`] before it reaches a store.
    pub fn check_all_sync(&self, checks: &[KeyCheck<'_>], at: Option<Micros>) -> MultiDecision {
        let t = at.unwrap_or_else(|| self.clock.now());
        // Merge pairs naming the same (rule, key).
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
        let mut shard_ids: Vec<usize> = pairs.iter().map(|p| self.shard_index(p.0)).collect();
        shard_ids.sort_unstable();
        shard_ids.dedup();
        let mut guards: Vec<RwLockWriteGuard<'_, Table>> =
            shard_ids.iter().map(|&i| self.shards[i].0.write()).collect();
        let guard_of = |fp: Fp| {
            shard_ids
                .binary_search(&self.shard_index(fp))
                .unwrap_or_default()
        };

        let decided: Vec<Decision> = pairs
            .iter()
            .map(|&(fp, rule, cost)| Self::evaluate_locked(&guards[guard_of(fp)], rule, fp, t, cost))
            .collect();
        let allowed = decided.iter().all(|d| d.allowed);
        let decided: Vec<Decision> = if allowed {
            let mut committed = Vec::with_capacity(pairs.len());
            for &(fp, rule, cost) in &pairs {
                let table = &mut guards[guard_of(fp)];
                committed.push(if cost == 0 {
                    Self::evaluate_locked(table, rule, fp, t, 0)
                } else {
                    self.commit_locked(table, rule, fp, t, cost)
                });
            }
            let written: Vec<Fp> = pairs.iter().map(|p| p.0).collect();
            for table in &mut guards {
                self.enforce_caps(table, t, &written);
            }
            committed
        } else {
            // Nothing consumed: pairs that would admit report a peek.
            pairs
                .iter()
                .zip(decided)
                .map(|(&(fp, rule, _), d)| {
                    if d.allowed {
                        Self::evaluate_locked(&guards[guard_of(fp)], rule, fp, t, 0)
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

impl<C: Clock> Store for MemoryStore<C> {
    fn check(
        &self,
        rule: &Rule,
        key: &[u8],
        cost: u64,
        at: Option<Micros>,
    ) -> impl Future<Output = Result<Decision, StoreError>> + Send {
        std::future::ready(Ok(self.check_sync(rule, key, cost, at)))
    }

    fn check_all(
        &self,
        checks: &[KeyCheck<'_>],
        at: Option<Micros>,
    ) -> impl Future<Output = Result<MultiDecision, StoreError>> + Send {
        std::future::ready(Ok(self.check_all_sync(checks, at)))
    }
}
