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
//!   eviction time ([`KeyState::usage`](crate::algorithm::KeyState::usage)): what forgetting it hands back. A
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

use std::fmt;
use std::hash::BuildHasher;

use crate::algorithm::Charged;
use crate::decision::{Decision, MultiDecision};
use crate::error::StoreError;
use crate::rule::Rule;
use crate::store::{KeyCheck, Released, SettlePair, Settled, Store};
use crate::ticket::Ticket;
use crate::time::{Clock, Micros, MonotonicClock};

mod charge;
mod check;
mod classes;
mod evict;
pub(crate) mod fingerprint;
mod guards;
mod inflight;
mod records;
mod reserve;
mod reset;
mod table;

use check::{Core, When};
use fingerprint::Sip13;
use table::Shard;

/// Default cap on keys held.
pub const DEFAULT_MAX_KEYS: usize = 1_000_000;
/// Default cap on sliding-log entries held across all keys.
pub const DEFAULT_MAX_LOG_ENTRIES: usize = 4_000_000;

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
                reservations: records::Reservations::default(),
                leases: records::LeaseIndex::default(),
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

impl<C: fmt::Debug> fmt::Debug for MemoryStore<C> {
    /// Sizes and caps only: neither the secret nor every key's state.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemoryStore")
            .field("clock", &self.clock)
            .field("keys", &self.core.len())
            .field("capacity", &self.core.capacity())
            .field("log_entries", &self.core.log_entries())
            .field("shards", &self.core.shards.len())
            .field("reservations", &self.core.reservations.len())
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

    /// Charges `cost` to (rule, key) now, synchronously (docs/semantics.md,
    /// "Charge"): never denied. `at` overrides the clock.
    #[inline]
    pub fn charge_sync(&self, rule: &Rule, key: &[u8], cost: u64, at: Option<Micros>) -> Charged {
        self.core.charge(rule, key, cost, self.when(at))
    }

    /// Charges every pair in turn, synchronously (docs/semantics.md,
    /// "Charge"): never denied; one answer per pair.
    pub fn charge_all_sync(&self, checks: &[KeyCheck<'_>], at: Option<Micros>) -> Vec<Charged> {
        self.core.charge_all(checks, self.when(at))
    }

    /// Acquires `checks` all-or-nothing under `ticket` at `at` (this
    /// store's clock when `None`): [`Store::acquire_all`] without the future.
    pub fn acquire_all_sync(
        &self,
        checks: &[KeyCheck<'_>],
        ticket: &Ticket,
        at: Option<Micros>,
    ) -> MultiDecision {
        self.core.acquire_all(checks, ticket, self.when(at))
    }

    /// Releases (or `renew`s) the lease `ticket` at `at`:
    /// [`Store::release`] without the future.
    pub fn release_sync(
        &self,
        ticket: &Ticket,
        rules: &[&Rule],
        renew: bool,
        at: Option<Micros>,
    ) -> Released {
        self.core.release(ticket, rules, renew, self.when(at))
    }

    /// Gives every pair its cost back, in turn, at `at` (this store's
    /// clock when `None`): [`Store::refund_all`] without the future.
    pub fn refund_all_sync(&self, checks: &[KeyCheck<'_>], at: Option<Micros>) -> Vec<Charged> {
        self.core.refund_all(checks, self.when(at))
    }

    #[inline]
    fn when(&self, at: Option<Micros>) -> When<'_> {
        match at {
            Some(t) => When::At(t),
            None => When::Now(&self.clock),
        }
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

    fn charge_all(
        &self,
        checks: &[KeyCheck<'_>],
        at: Option<Micros>,
    ) -> impl Future<Output = Result<Vec<Charged>, StoreError>> + Send {
        std::future::ready(Ok(self.charge_all_sync(checks, at)))
    }

    fn refund_all(
        &self,
        checks: &[KeyCheck<'_>],
        at: Option<Micros>,
    ) -> impl Future<Output = Result<Vec<Charged>, StoreError>> + Send {
        std::future::ready(Ok(self.refund_all_sync(checks, at)))
    }

    fn reserve_all(
        &self,
        checks: &[KeyCheck<'_>],
        ticket: &Ticket,
        ttl: Micros,
        at: Option<Micros>,
    ) -> impl Future<Output = Result<MultiDecision, StoreError>> + Send {
        std::future::ready(Ok(self.core.reserve_all(
            checks,
            ticket,
            ttl,
            self.when(at),
        )))
    }

    fn settle(
        &self,
        ticket: &Ticket,
        pairs: &[SettlePair<'_>],
        at: Option<Micros>,
    ) -> impl Future<Output = Result<Settled, StoreError>> + Send {
        std::future::ready(Ok(self.core.settle(ticket, pairs, self.when(at))))
    }

    fn acquire_all(
        &self,
        checks: &[KeyCheck<'_>],
        ticket: &Ticket,
        at: Option<Micros>,
    ) -> impl Future<Output = Result<MultiDecision, StoreError>> + Send {
        std::future::ready(Ok(self.acquire_all_sync(checks, ticket, at)))
    }

    fn release(
        &self,
        ticket: &Ticket,
        rules: &[&Rule],
        renew: bool,
        at: Option<Micros>,
    ) -> impl Future<Output = Result<Released, StoreError>> + Send {
        std::future::ready(Ok(self.release_sync(ticket, rules, renew, at)))
    }

    fn reset(
        &self,
        rule: &Rule,
        key: &[u8],
    ) -> impl Future<Output = Result<bool, StoreError>> + Send {
        std::future::ready(Ok(self.core.reset(rule, key)))
    }

    fn in_process(&self) -> bool {
        true
    }

    fn kind(&self) -> &'static str {
        "memory"
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use siphasher::sip128::SipHasher13;

    use super::*;
    use crate::rule::{Algorithm, RuleSpec};
    use fingerprint::{Fp, fingerprint_input, le_word, le_word8};

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
