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
//!   entries). A shard that goes over its share first drops every key that
//!   is back to its empty/full state (forgetting them changes no decision);
//!   if that leaves less than an eighth of its share free, it also evicts
//!   live keys until an eighth is free. The scan is thus paid once per
//!   eighth of a shard of new keys, never once per key, even when keys
//!   expire exactly as fast as new ones arrive. Memory stays bounded under
//!   any flood of distinct keys. A key's own sliding log is never cut: the
//!   log cap may be exceeded by the entries of the keys the current check
//!   wrote (at most their rules' `limit` each).
//! * What is evicted is what costs least to forget (`evict.rs`). A key's
//!   stake is the share of its rule's limit its state holds at the
//!   eviction time ([`KeyState::usage`]): what forgetting it hands back. A
//!   key is *exhausted* when a check of cost 1 would be denied. Keys go in
//!   the order: not exhausted before exhausted; among those, the least used
//!   first, ties to the key whose state ends soonest; among exhausted keys,
//!   the one whose state ends soonest. The candidates are every key of the
//!   shard except those the current check wrote, so the guarantee is:
//!   **no exhausted key is evicted while its shard holds a key that is not
//!   exhausted** (other than the ones just written), and no key that is not
//!   exhausted is evicted while a less used one is in its shard. (The
//!   share is measured at the eviction time, so a drained bucket counts as
//!   little used however busy it was; the promise is per shard, as keys
//!   are spread over shards by fingerprint.) A flood of fresh keys evicts
//!   fresh keys, not the abuser's exhausted ones; only when a shard holds
//!   nothing but exhausted keys does one get its quota back early. Sliding-
//!   log entries over their cap evict log keys in the same order.
//!
//! GCRA keys live in a table of their own: open addressing over 24-byte
//! slots holding the fingerprint next to the state, at most 4/5 full, so a
//! held key is found in one cache line and an idle key costs 30 to 60 bytes,
//! whatever the key's length. The table compares 112 of the fingerprint's
//! bits; the other 16 number the key's rule (its "class", written when the
//! key is created or checked under the exclusive lock, never by the
//! compare-and-swap), so eviction can weigh a `tat` against its rule. The
//! other algorithms' states are boxed, with their rule, in a general hash
//! map.
//!
//! The hot path is not generic: [`MemoryStore::check_sync`] calls into code
//! compiled once in this crate (the clock behind a `&dyn Clock`), where the
//! algorithm step inlines into the compare-and-swap loop. Between reading a
//! GCRA state and swapping it there is only the clock's reading and the
//! step's verdict; the decision is computed after the shard's lock is
//! released, so threads on one key hold the lock and the state's cache line
//! as briefly as possible.
//!
//! The clock is read after the key's state (under its lock, or between
//! loading the GCRA word and swapping it, again on every retry), so the
//! checks of one key take effect in the order of their times: concurrent
//! admissions report `remaining` values that count down one by one, as
//! they would one after another.

use std::collections::HashMap;
use std::fmt;
use std::hash::{BuildHasher, BuildHasherDefault, Hash, Hasher};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use parking_lot::{Mutex, RwLock, RwLockWriteGuard};

use crate::algorithm::{self, GcraState, KeyState, gcra};
use crate::decision::{Decision, MultiDecision};
use crate::error::StoreError;
use crate::rule::{Algorithm, Rule};
use crate::store::{KeyCheck, Store};
use crate::time::{Clock, Micros, MonotonicClock};

mod evict;

use evict::{GcraRules, UNKNOWN_CLASS};

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

// The name's length is one byte of the fingerprint input.
const _: () = assert!(crate::rule::MAX_NAME_LEN < 256);

/// The byte string a (rule name, key) pair is hashed as:
///
/// * one word: the name's length in the top byte, its first 7 bytes (zero
///   padded) below;
/// * the rest of the name in 8-byte little-endian words, the last one zero
///   padded;
/// * the key.
///
/// The length says where the name ends, so the encoding parses back into the
/// pair: distinct pairs are distinct inputs. Its words are whole, so the key
/// starts on a word boundary and is hashed straight from its own memory.
/// (The store computes the same hash without building this string; tests
/// check the two agree.)
#[cfg(test)]
fn fingerprint_input(name: &[u8], key: &[u8]) -> Vec<u8> {
    let (head, rest) = name.split_at(name.len().min(7));
    let mut out = Vec::with_capacity(16 + name.len() + key.len());
    out.extend_from_slice(head);
    out.resize(7, 0);
    out.push(u8::try_from(name.len()).unwrap_or(u8::MAX));
    for word in rest.chunks(8) {
        out.extend_from_slice(word);
        out.resize(out.len() + 8 - word.len(), 0);
    }
    out.extend_from_slice(key);
    out
}

/// Up to 7 bytes as a little-endian word, zero padded, in at most three
/// loads.
#[inline]
fn le_word(b: &[u8]) -> u64 {
    debug_assert!(b.len() < 8);
    let mut word = 0;
    let mut i = 0;
    if b.len() >= 4 {
        word = u64::from(u32::from_le_bytes([b[0], b[1], b[2], b[3]]));
        i = 4;
    }
    if b.len() - i >= 2 {
        word |= u64::from(u16::from_le_bytes([b[i], b[i + 1]])) << (8 * i);
        i += 2;
    }
    if i < b.len() {
        word |= u64::from(b[i]) << (8 * i);
    }
    word
}

/// Exactly 8 bytes as a little-endian word.
#[inline]
fn le_word8(b: &[u8]) -> u64 {
    let mut word = [0; 8];
    word.copy_from_slice(&b[..8]);
    u64::from_le_bytes(word)
}

/// SipHash-1-3 with a 128-bit output (the reference algorithm, as the
/// `siphasher` crate computes it; a test checks they agree), written out so
/// the whole hash stays in registers and inlines into the check.
#[derive(Clone, Copy)]
struct Sip13 {
    /// The state after keying.
    v: [u64; 4],
}

impl Sip13 {
    fn new(k0: u64, k1: u64) -> Self {
        Self {
            v: [
                k0 ^ 0x736f_6d65_7073_6575,
                // 0x646f72616e646f6d ^ 0xee: the 128-bit variant's tweak.
                k1 ^ 0x646f_7261_6e64_6f83,
                k0 ^ 0x6c79_6765_6e65_7261,
                k1 ^ 0x7465_6462_7974_6573,
            ],
        }
    }

    #[inline(always)]
    fn round(v: &mut [u64; 4]) {
        v[0] = v[0].wrapping_add(v[1]);
        v[1] = v[1].rotate_left(13) ^ v[0];
        v[0] = v[0].rotate_left(32);
        v[2] = v[2].wrapping_add(v[3]);
        v[3] = v[3].rotate_left(16) ^ v[2];
        v[0] = v[0].wrapping_add(v[3]);
        v[3] = v[3].rotate_left(21) ^ v[0];
        v[2] = v[2].wrapping_add(v[1]);
        v[1] = v[1].rotate_left(17) ^ v[2];
        v[2] = v[2].rotate_left(32);
    }

    #[inline(always)]
    fn absorb(v: &mut [u64; 4], m: u64) {
        v[3] ^= m;
        Self::round(v);
        v[0] ^= m;
    }

    /// The hash of `fingerprint_input(name, key)`, computed from the parts;
    /// never [`EMPTY`], not even in the 112 bits a [`GcraTable`] compares:
    /// the 2^16 fingerprints that are would become (0, 2^16), which then
    /// shares a key's state with a few other inputs in 2^128, as any
    /// collision would.
    #[inline(always)]
    fn fingerprint(&self, name: &[u8], key: &[u8]) -> Fp {
        let mut v = self.v;
        let (head, rest) = name.split_at(name.len().min(7));
        Self::absorb(&mut v, le_word(head) | (name.len() as u64) << 56);
        let mut words = rest.chunks_exact(8);
        for word in &mut words {
            Self::absorb(&mut v, le_word8(word));
        }
        let mut len = 8 * (1 + rest.len().div_ceil(8));
        if !words.remainder().is_empty() {
            Self::absorb(&mut v, le_word(words.remainder()));
        }
        let mut words = key.chunks_exact(8);
        for word in &mut words {
            Self::absorb(&mut v, le_word8(word));
        }
        len += key.len();
        // The last block: the input's length (mod 256) on top of its tail.
        Self::absorb(&mut v, le_word(words.remainder()) | (len as u64) << 56);
        v[2] ^= 0xee;
        Self::round(&mut v);
        Self::round(&mut v);
        Self::round(&mut v);
        let h1 = v[0] ^ v[1] ^ v[2] ^ v[3];
        v[1] ^= 0xdd;
        Self::round(&mut v);
        Self::round(&mut v);
        Self::round(&mut v);
        let fp = Fp(h1, v[0] ^ v[1] ^ v[2] ^ v[3]);
        if GcraTable::same(fp, EMPTY) {
            Fp(0, 1 << CLASS_BITS)
        } else {
            fp
        }
    }
}

/// State of a non-GCRA key, when it is back to empty, and the rule it was
/// last written under (eviction weighs the state against it).
#[derive(Debug)]
struct Slot {
    state: KeyState,
    expires: Micros,
    rule: Rule,
}

impl Slot {
    /// Applies an admitted check and refreshes `expires`; returns the change
    /// in sliding-log entries.
    fn commit(&mut self, rule: &Rule, t: Micros, cost: u64) -> isize {
        if !self.rule.same(rule) {
            self.rule = rule.clone();
        }
        let before = self.state.log_entries();
        algorithm::commit(rule, &mut self.state, t, cost);
        self.expires = self.state.expires_at(rule).unwrap_or(0);
        entries_delta(before, self.state.log_entries())
    }
}

fn entries_delta(before: usize, after: usize) -> isize {
    isize::try_from(after).unwrap_or(isize::MAX) - isize::try_from(before).unwrap_or(isize::MAX)
}

/// The fingerprint marking an empty slot of a [`GcraTable`]; no key has it
/// (see `Sip13::fingerprint`).
const EMPTY: Fp = Fp(0, 0);

/// The low bits of a [`GcraSlot`]'s second fingerprint word hold the key's
/// rule class (see [`GcraRules`]) instead of fingerprint bits: the slot
/// stays 24 bytes, and 112 bits still tell keys apart.
const CLASS_BITS: u32 = 16;

/// One key of a [`GcraTable`]: its fingerprint, with its rule class in the
/// low [`CLASS_BITS`] (written only when the key is inserted or checked
/// under the exclusive lock), and its `tat`: 24 bytes.
#[derive(Debug)]
struct GcraSlot {
    fp: Fp,
    tat: AtomicU64,
}

impl GcraSlot {
    fn empty() -> Self {
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
struct GcraTable {
    /// Empty, or a power of two of slots.
    slots: Box<[GcraSlot]>,
    len: usize,
    /// The rules the slots' classes name.
    rules: GcraRules,
}

impl GcraTable {
    fn len(&self) -> usize {
        self.len
    }

    /// Whether two fingerprints name the same key here: equal but for the
    /// class bits.
    #[inline]
    fn same(a: Fp, b: Fp) -> bool {
        a.0 == b.0 && (a.1 ^ b.1) >> CLASS_BITS == 0
    }

    /// The class bits of a slot's fingerprint.
    fn class(fp: Fp) -> u16 {
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
    fn get(&self, fp: Fp) -> Option<&AtomicU64> {
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
    fn get_or_insert(&mut self, fp: Fp, rule: &Rule) -> &mut AtomicU64 {
        let class = self.rules.class_of(rule);
        self.insert(Self::with_class(fp, class))
    }

    /// The slot of `fp` (class bits included), inserted if not held.
    fn insert(&mut self, fp: Fp) -> &mut AtomicU64 {
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
    fn iter(&mut self) -> impl Iterator<Item = (Fp, Micros)> + '_ {
        self.slots
            .iter_mut()
            .filter(|s| !Self::same(s.fp, EMPTY))
            .map(|s| (s.fp, *s.tat.get_mut()))
    }

    /// Keeps the keys for which `keep(fp, tat)` holds (asked twice per
    /// key: it must not change its answer).
    fn retain(&mut self, mut keep: impl FnMut(Fp, Micros) -> bool) {
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
    fn shrink(&mut self) {
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
    fn rebuild(&mut self, size: usize, mut keep: impl FnMut(Fp, Micros) -> bool) {
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
struct Table {
    gcra: GcraTable,
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
    fn drop_expired(&mut self, t: Micros) {
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
    fn remove_other(&mut self, fp: Fp) {
        if let Some(mut slot) = self.other.remove(&fp) {
            *self.log_entries.get_mut() -= slot.get_mut().state.log_entries();
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
            core: Core {
                shards: (0..shards).map(|_| Shard::default()).collect(),
                shard_bits: shards.ilog2(),
                shard_cap: self.max_keys / shards,
                shard_log_cap: (self.max_log_entries / shards).max(1),
                sip: Sip13::new(
                    random.hash_one(0x746f_6c6c_u64),
                    random.hash_one(0x6761_7465_u64),
                ),
            },
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
pub struct MemoryStore<C = MonotonicClock> {
    clock: C,
    core: Core,
}

/// Everything but the clock: the hot path is compiled here, once, not in
/// every crate that names a clock type.
struct Core {
    shards: Box<[Shard]>,
    shard_bits: u32,
    shard_cap: usize,
    shard_log_cap: usize,
    /// SipHash-1-3 keyed with the store's random secret.
    sip: Sip13,
}

impl<C: fmt::Debug> fmt::Debug for MemoryStore<C> {
    /// Sizes and caps only: neither the secret nor every key's state.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemoryStore")
            .field("clock", &self.clock)
            .field("keys", &self.core.len())
            .field("capacity", &self.core.capacity())
            .field("log_entries", &self.core.log_entries())
            .field("shards", &self.core.shards.len())
            .finish_non_exhaustive()
    }
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
enum When<'a> {
    At(Micros),
    Now(&'a dyn Clock),
}

impl When<'_> {
    #[inline]
    fn now(self) -> Micros {
        match self {
            When::At(t) => t,
            When::Now(clock) => clock.now(),
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
        self.core.len()
    }

    /// Whether no key is held.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// How many sliding-log entries are held across all keys.
    #[must_use]
    pub fn log_entries(&self) -> usize {
        self.core.log_entries()
    }

    /// The most keys this store holds at once (the configured cap rounded
    /// down to a multiple of the shard count).
    #[must_use]
    pub fn capacity(&self) -> usize {
        self.core.capacity()
    }

    /// Drops every key that is back to its empty/full state at the store's
    /// current time, and gives back the memory of shards left mostly empty.
    /// Never needed for correctness; frees memory early.
    pub fn sweep(&self) {
        self.core.sweep(self.clock.now());
    }

    /// Decides one check now, synchronously. `at` overrides the clock.
    #[inline]
    pub fn check_sync(&self, rule: &Rule, key: &[u8], cost: u64, at: Option<Micros>) -> Decision {
        self.core.check(rule, key, cost, self.when(at))
    }

    /// Decides several checks all-or-nothing, synchronously. The same
    /// (rule, key) named twice counts once with the costs added.
    ///
    /// # Panics
    /// Never for a non-empty `checks`; an empty one is answered by the
    /// [`crate::Limiter`] before it reaches a store.
    pub fn check_all_sync(&self, checks: &[KeyCheck<'_>], at: Option<Micros>) -> MultiDecision {
        self.core.check_all(checks, self.when(at))
    }

    #[inline]
    fn when(&self, at: Option<Micros>) -> When<'_> {
        match at {
            Some(t) => When::At(t),
            None => When::Now(&self.clock),
        }
    }
}

impl Core {
    fn len(&self) -> usize {
        self.shards.iter().map(|s| s.0.read().len()).sum()
    }

    fn log_entries(&self) -> usize {
        self.shards
            .iter()
            .map(|s| s.0.read().log_entries.load(Ordering::Relaxed))
            .sum()
    }

    fn capacity(&self) -> usize {
        self.shard_cap * self.shards.len()
    }

    fn sweep(&self, t: Micros) {
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
    fn fingerprint(&self, rule: &Rule, key: &[u8]) -> Fp {
        self.sip.fingerprint(rule.name().as_bytes(), key)
    }

    /// The shard of a fingerprint: the top bits of its second word (tables
    /// use the first).
    #[inline]
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
    fn check(&self, rule: &Rule, key: &[u8], cost: u64, when: When<'_>) -> Decision {
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
    fn evaluate_locked(table: &Table, rule: &Rule, fp: Fp, t: Micros, cost: u64) -> Decision {
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

    /// Decides several checks all-or-nothing, `when` (the clock read once
    /// every shard they touch is held).
    fn check_all(&self, checks: &[KeyCheck<'_>], when: When<'_>) -> MultiDecision {
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
        let mut guards: Vec<RwLockWriteGuard<'_, Table>> = shard_ids
            .iter()
            .map(|&i| self.shards[i].0.write())
            .collect();
        let t = when.now();
        let guard_of = |fp: Fp| {
            shard_ids
                .binary_search(&self.shard_index(fp))
                .unwrap_or_default()
        };

        let decided: Vec<Decision> = pairs
            .iter()
            .map(|&(fp, rule, cost)| {
                Self::evaluate_locked(&guards[guard_of(fp)], rule, fp, t, cost)
            })
            .collect();
        let allowed = decided.iter().all(|d| d.allowed);
        let decided: Vec<Decision> = if allowed {
            let mut committed = Vec::with_capacity(pairs.len());
            for &(fp, rule, cost) in &pairs {
                let table = &mut guards[guard_of(fp)];
                committed.push(if cost == 0 {
                    Self::evaluate_locked(table, rule, fp, t, 0)
                } else {
                    Self::commit_locked(table, rule, fp, t, cost)
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

    fn in_process(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use siphasher::sip128::SipHasher13;

    use super::*;
    use crate::rule::RuleSpec;

    fn store() -> MemoryStore<crate::FakeClock> {
        MemoryStore::builder()
            .clock(crate::FakeClock::new())
            .build()
    }

    /// The reference SipHash-1-3-128 keyed as `store`'s, recovered from its
    /// state (v0 = k0 ^ c0, v1 = k1 ^ c1').
    fn reference(store: &MemoryStore<crate::FakeClock>) -> SipHasher13 {
        let v = store.core.sip.v;
        SipHasher13::new_with_keys(v[0] ^ 0x736f_6d65_7073_6575, v[1] ^ 0x646f_7261_6e64_6f83)
    }

    fn rule(name: &str) -> Rule {
        RuleSpec::new(name, Algorithm::Gcra, 1, Duration::from_secs(1))
            .build()
            .expect("valid rule")
    }

    /// Undoes [`fingerprint_input`]: the encoding is injective.
    fn parse_input(input: &[u8]) -> (Vec<u8>, Vec<u8>) {
        let len = usize::from(input[7]);
        let mut name = input[..len.min(7)].to_vec();
        let rest_words = len.saturating_sub(7).div_ceil(8);
        name.extend_from_slice(&input[8..8 + len.saturating_sub(7)]);
        (name, input[8 + 8 * rest_words..].to_vec())
    }

    #[test]
    fn fingerprint_is_siphash_of_an_injective_encoding() {
        let store = store();
        let names = [
            "a",
            "api",
            "per_ip",
            "per_use",
            "per_user",
            "per_user_route",
            "a.b-c_d.e-f_g.h-i",
            &"x".repeat(128),
        ];
        let keys: Vec<Vec<u8>> = (0..40)
            .map(|n| {
                (0..n)
                    .map(|i| u8::try_from(i * 37 % 256).unwrap_or(0))
                    .collect()
            })
            .collect();
        let mut seen = std::collections::HashSet::new();
        let reference = reference(&store);
        for name in names {
            let rule = rule(name);
            for key in &keys {
                let input = fingerprint_input(name.as_bytes(), key);
                assert_eq!(parse_input(&input), (name.as_bytes().to_vec(), key.clone()));
                let h = reference.hash(&input);
                let fp = store.core.fingerprint(&rule, key);
                assert_eq!(fp, Fp(h.h1, h.h2), "{name:?} {key:?}");
                assert!(seen.insert(fp));
            }
        }
    }

    #[test]
    fn gcra_table_finds_inserts_grows_and_drops() {
        let r = rule("r");
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
    fn le_word_reads_every_length() {
        let bytes = [1u8, 2, 3, 4, 5, 6, 7, 8];
        for n in 0..8 {
            let mut padded = [0u8; 8];
            padded[..n].copy_from_slice(&bytes[..n]);
            assert_eq!(le_word(&bytes[..n]), u64::from_le_bytes(padded));
        }
        assert_eq!(le_word8(&bytes), u64::from_le_bytes(bytes));
    }

    #[test]
    fn debug_shows_sizes_not_the_secret() {
        let store = store();
        let text = format!("{store:?}");
        assert!(text.contains("keys: 0"), "{text}");
        assert!(!text.contains("sip"), "{text}");
    }
}
