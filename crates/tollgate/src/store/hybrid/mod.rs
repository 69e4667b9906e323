//! The hybrid store: a local fast path with Redis as the authority.
//!
//! Each replica takes batches of units of a (rule, key) from Redis (one
//! script run takes up to `batch` units, exactly as one check of that cost
//! would) and spends them locally; when Redis has nothing to give, the
//! replica remembers until when asking again is worthless and denies
//! locally until then. Redis is called far less than once per check; the
//! price is a bounded error, derived in `docs/hybrid.md`:
//!
//! * **over-admission**: in any interval, at most the units the replicas
//!   held at its start: at most `replicas × batch`, and at most the small
//!   batches' (a tenth of the capacity) plus what larger ones took in the
//!   `batch_life` before it (GCRA and token bucket: `batch_life / T`);
//!   none over a run that starts on an unused key, and none for fixed and
//!   sliding window (a batch ends with its window);
//! * **under-admission**: units sitting unspent in replicas' batches (at
//!   most `replicas × batch` at any moment, back at the holder's next check
//!   of the key once the batch expired), and
//!   GCRA / token bucket units of expired batches that cannot be safely
//!   given back (batch sizes follow each replica's demand to keep those
//!   few).
//!
//! GCRA and token bucket batches are paced: a charge whose units are spent
//! one per `T`, each when the algorithm would have admitted it, so every
//! batch call takes units even when the fleet saturates the key. Batches
//! live `batch_life` (by default 1 s for a small batch, at most a tenth of
//! the capacity per replica, and a tenth of the rule's period for a larger
//! one; never more than the period, and never past the end of a fixed or
//! sliding window). Unspent
//! units of an expired batch are given back in the same Redis call as the
//! key's next batch, taken at the replica's next check of the key even
//! when it remembered Redis as exhausted.
//!
//! "Batch" is this store's word; a "lease" is a concurrency rule's slot
//! (docs/semantics.md, "Concurrency"), which this store does not batch.
//! The `[store]` key `hybrid_lease` of the server's config is
//! [`HybridOptions::batch_life`], under the name users already write. The batch is at most `capacity /
//! (2 × replicas)` whatever the options say, so `replicas × batch` stays
//! below half the capacity: against a memory store on the same schedule,
//! each period the fleet admits within `replicas × batch` of it.
//!
//! ```no_run
//! use std::time::Duration;
//! use tollgate::store::hybrid::{HybridOptions, HybridStore};
//! use tollgate::store::redis::{RedisOptions, RedisStore};
//! use tollgate::{Algorithm, Limiter, RuleSpec};
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let redis = RedisStore::connect("redis://127.0.0.1:6379", RedisOptions::default()).await?;
//! // five replicas share the limit: each takes batches of up to min(1000 / (2 × 5), 100 ms / 1 ms) = 100 units
//! let store = HybridStore::new(redis, HybridOptions { replicas: 5, ..HybridOptions::default() });
//! let rule = RuleSpec::new("per_user", Algorithm::Gcra, 1000, Duration::from_secs(1)).build()?;
//! let limiter = Limiter::new(store, [rule])?;
//! let decision = limiter.check("per_user", "alice", 1).await?;
//! # Ok(()) }
//! ```

mod check;
mod entry;
mod plan;

use std::collections::HashMap;
use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, BuildHasherDefault, Hasher};
use std::ops::{Deref, DerefMut};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use arc_swap::ArcSwapOption;
use parking_lot::Mutex;

use self::entry::Entry;
use crate::algorithm::Charged;
use crate::decision::{Decision, MultiDecision};
use crate::error::StoreError;
use crate::rule::Rule;
use crate::store::memory::fingerprint::Sip13;
use crate::store::redis::RedisStore;
use crate::store::{KeyCheck, Released, SettlePair, Settled, Store};
use crate::ticket::Ticket;
use crate::time::{Clock, Micros, MonotonicClock, duration_to_micros};

/// How a [`HybridStore`] takes batches.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HybridOptions {
    /// How many replicas share the limits (default 1): the default batch is
    /// sized from it.
    pub replicas: u32,
    /// The most units one batch takes (batches follow this replica's
    /// demand up to it). `None` (default): `capacity / (2 × replicas)`, and
    /// for GCRA and token bucket no more than a batch life's worth
    /// (`batch_life / T`); at least 1. Always
    /// at most [`HybridOptions::most_for`], `capacity / (2 × replicas)`: a
    /// larger batch is lowered to it. A check costing more takes its cost.
    pub batch: Option<u64>,
    /// The longest a unit of a batch may wait to be spent (GCRA and token
    /// bucket: after the time the algorithm admits it): the batch's life.
    /// `None` (default): a batch of at most [`HybridOptions::small_for`]
    /// units (a tenth of the capacity per replica) lives 1 s, a larger one
    /// a tenth of the rule's period (docs/hybrid.md, "The error bound").
    /// Never longer than the period, nor past the end of a fixed or
    /// sliding window. The server's config calls it `hybrid_lease`.
    pub batch_life: Option<Duration>,
    /// Most (rule, key) entries kept locally (default 100,000).
    pub max_keys: usize,
}

impl Default for HybridOptions {
    fn default() -> Self {
        Self {
            replicas: 1,
            batch: None,
            batch_life: None,
            max_keys: 100_000,
        }
    }
}

impl HybridOptions {
    /// The batch size (most units one batch takes) for `rule`:
    /// [`HybridOptions::batch`] or its default, between 1 and the rule's
    /// capacity.
    #[must_use]
    pub fn batch_for(&self, rule: &Rule) -> u64 {
        let most = self.most_for(rule);
        let batch = self.batch.unwrap_or_else(|| {
            if paced(rule) {
                most.min(self.batch_life_for(rule) / rule.interval_micros().max(1))
            } else {
                most
            }
        });
        batch.clamp(1, most)
    }

    /// The largest batch `rule` allows: half its capacity shared out over
    /// the replicas, `C / (2R)` (at least 1). All replicas' batches together
    /// then hold at most half the capacity, so what they can strand (the
    /// bound of docs/hybrid.md, `R × B`) stays below the limit whatever
    /// `batch` says; a larger [`HybridOptions::batch`] is lowered to it.
    #[must_use]
    pub fn most_for(&self, rule: &Rule) -> u64 {
        (rule.capacity() / (2 * u64::from(self.replicas.max(1)))).max(1)
    }

    /// The life of a batch larger than [`HybridOptions::small_for`] units
    /// of `rule`, µs: `batch_life` or a tenth of the period, at most the
    /// period, at least 1 µs.
    #[must_use]
    pub fn batch_life_for(&self, rule: &Rule) -> Micros {
        let period = rule.period_micros();
        self.batch_life
            .map_or(period / 10, duration_to_micros)
            .min(period)
            .max(1)
    }

    /// The most units of `rule` a batch may take and live the longer life
    /// (1 s by default): a tenth of the capacity per replica, so that all
    /// replicas together hold at most a tenth of the capacity in such
    /// batches. A key each replica sees a few times a batch life keeps its
    /// batch between checks, however short the period.
    #[must_use]
    pub fn small_for(&self, rule: &Rule) -> u64 {
        (rule.capacity() / (10 * u64::from(self.replicas.max(1)))).max(1)
    }

    /// The life of a batch of `units` of `rule`, µs: `batch_life` when
    /// set; else 1 s (at most the period) up to
    /// [`HybridOptions::small_for`] units, and
    /// [`HybridOptions::batch_life_for`] above.
    #[must_use]
    pub fn life_for(&self, rule: &Rule, units: u64) -> Micros {
        if self.batch_life.is_none() && units <= self.small_for(rule) {
            SMALL_BATCH_LIFE.min(rule.period_micros()).max(1)
        } else {
            self.batch_life_for(rule)
        }
    }
}

/// Whether `rule`'s batches are paced (GCRA, token bucket: a charge whose
/// units are spent one per `T`, docs/hybrid.md).
fn paced(rule: &Rule) -> bool {
    matches!(
        rule.algorithm(),
        crate::Algorithm::Gcra | crate::Algorithm::TokenBucket
    )
}

/// The default life of a small batch (see [`HybridOptions::life_for`]), µs.
const SMALL_BATCH_LIFE: Micros = 1_000_000;

/// Local shards (a power of two).
const SHARDS: usize = 16;

/// One shard: its entries, keyed by the (rule, key) hash (already random:
/// the map uses its low word as is), and the checks it decided, counted
/// under its lock (a counter shared by every shard costs an atomic
/// read-modify-write of one cache line per check, fought over by threads).
#[derive(Default)]
struct Shard {
    map: HashMap<u128, Entry, BuildHasherDefault<PassHasher>>,
    checks: u64,
}

impl Deref for Shard {
    type Target = HashMap<u128, Entry, BuildHasherDefault<PassHasher>>;
    fn deref(&self) -> &Self::Target {
        &self.map
    }
}

impl DerefMut for Shard {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.map
    }
}

/// Passes a (rule, key) hash's low word through as the map's hash.
#[derive(Default)]
struct PassHasher(u64);

impl Hasher for PassHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(b);
        }
    }
    #[allow(clippy::cast_possible_truncation)] // the low word, on purpose
    fn write_u128(&mut self, n: u128) {
        self.0 = n as u64;
    }
}

/// The hybrid store: local batches over a [`RedisStore`]. Cheap to clone:
/// clones share batches and counters.
#[derive(Clone)]
pub struct HybridStore {
    inner: Arc<Inner>,
}

struct Inner {
    redis: RedisStore,
    options: HybridOptions,
    clock: Box<dyn Clock>,
    /// The (rule name, key) hash, as the memory store's.
    sip: Sip13,
    /// Keys the hash of a rule's definition (algorithm, limit, period,
    /// burst): foldhash, fast on four words, and the definitions are the
    /// operator's, not a client's.
    shape: foldhash::fast::RandomState,
    shards: Vec<Mutex<Shard>>,
    shard_cap: usize,
    calls: AtomicU64,
    /// Whether Redis decides at `clock`'s time ([`HybridStore::with_clock_time`])
    /// rather than its own `TIME`.
    clock_time: bool,
    /// Checks not counted by a shard (multi-rule, passed through to Redis).
    checks: AtomicU64,
    /// The identities of the rules of the limiter that took the store last
    /// ([`Store::rules_in_use`]; `None` before one did): any other rule is
    /// a per-call limit, decided in Redis. Replaced, not merged, so a freed
    /// rule's address is never mistaken for a live one.
    limiter_rules: ArcSwapOption<Vec<usize>>,
}

impl std::fmt::Debug for HybridStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HybridStore")
            .field("options", &self.inner.options)
            .field("redis", &self.inner.redis)
            .field("redis_calls", &self.redis_calls())
            .finish_non_exhaustive()
    }
}

impl HybridStore {
    /// A hybrid store over `redis`; batches expire by a monotonic clock.
    #[must_use]
    pub fn new(redis: RedisStore, options: HybridOptions) -> Self {
        Self::with_clock(redis, options, MonotonicClock::new())
    }

    /// A hybrid store whose batches expire by `clock` (tests pass a
    /// [`crate::FakeClock`]). Decisions still take Redis's time.
    #[must_use]
    pub fn with_clock(redis: RedisStore, options: HybridOptions, clock: impl Clock) -> Self {
        Self::build(redis, options, Box::new(clock), false)
    }

    /// A hybrid store whose batches expire by `clock` and whose Redis calls
    /// decide at `clock`'s time too (explicit times, as replays do): a
    /// fleet sharing one [`crate::FakeClock`] runs a schedule exactly, the
    /// way a memory store on that clock would (tests compare the two).
    #[must_use]
    pub fn with_clock_time(redis: RedisStore, options: HybridOptions, clock: impl Clock) -> Self {
        Self::build(redis, options, Box::new(clock), true)
    }

    fn build(
        redis: RedisStore,
        options: HybridOptions,
        clock: Box<dyn Clock>,
        clock_time: bool,
    ) -> Self {
        let max_keys = options.max_keys.max(SHARDS);
        let random = RandomState::new();
        let sip = Sip13::new(random.hash_one(1_u8), random.hash_one(2_u8));
        Self {
            inner: Arc::new(Inner {
                redis,
                shard_cap: max_keys / SHARDS,
                options,
                clock,
                clock_time,
                sip,
                shape: foldhash::fast::RandomState::default(),
                shards: (0..SHARDS).map(|_| Mutex::new(Shard::default())).collect(),
                calls: AtomicU64::new(0),
                checks: AtomicU64::new(0),
                limiter_rules: ArcSwapOption::empty(),
            }),
        }
    }

    /// The Redis store batches come from.
    #[must_use]
    pub fn redis(&self) -> &RedisStore {
        &self.inner.redis
    }

    /// The options.
    #[must_use]
    pub fn options(&self) -> &HybridOptions {
        &self.inner.options
    }

    /// Redis calls made so far: batches, give-backs and checks passed
    /// through (peeks, explicit times, costs above capacity).
    #[must_use]
    pub fn redis_calls(&self) -> u64 {
        self.inner.calls.load(Ordering::Relaxed)
    }

    /// Checks decided so far (a multi-rule check counts once).
    #[must_use]
    pub fn checks(&self) -> u64 {
        let local: u64 = self.inner.shards.iter().map(|s| s.lock().checks).sum();
        local + self.inner.checks.load(Ordering::Relaxed)
    }

    /// Local (rule, key) entries held.
    #[must_use]
    pub fn local_keys(&self) -> usize {
        self.inner.shards.iter().map(|s| s.lock().len()).sum()
    }

    /// Gives back to Redis every unspent unit of a batch this replica holds,
    /// one call per key (call it before a replica shuts down). Returns how
    /// many keys were given back. A failed call is skipped: its units stay
    /// consumed until the Redis state refills (an under-admission, never an
    /// over-admission).
    pub async fn give_back_all(&self) -> usize {
        let now = self.inner.clock.now();
        let mut todo = Vec::new();
        for shard in &self.inner.shards {
            for e in shard.lock().values_mut() {
                if e.inflight.is_none() {
                    e.retire();
                    e.expires = now;
                    if let Some(g) = e.give_back.take() {
                        todo.push((e.rule.clone(), e.redis_key.clone(), g));
                    }
                }
            }
        }
        let mut returned = 0;
        for (rule, key, g) in todo {
            self.inner.calls.fetch_add(1, Ordering::Relaxed);
            if (self
                .inner
                .redis
                .take_batch_at(&key, &rule, 0, 0, Some(g), 0, self.redis_time(None))
                .await)
                .is_ok()
            {
                returned += 1;
            }
        }
        returned
    }

    /// The time Redis decides at: `at`, else the clock's when the store
    /// was made [`HybridStore::with_clock_time`], else Redis's own.
    fn redis_time(&self, at: Option<Micros>) -> Option<Micros> {
        at.or_else(|| self.inner.clock_time.then(|| self.inner.clock.now()))
    }

    /// Whether `rule` is a per-call limit ([`crate::Check::under`]): not
    /// one of the limiter's rules, once it told them. Decided in Redis,
    /// never batched: a batch under a one-off limit would hold the shared
    /// counter's units until its window ends (docs/hybrid.md).
    fn per_call(&self, rule: &Rule) -> bool {
        self.inner
            .limiter_rules
            .load()
            .as_ref()
            .is_some_and(|ids| ids.binary_search(&rule.identity()).is_err())
    }

    /// The local identity of (rule, key): the memory store's 128-bit
    /// SipHash-1-3 of (rule name, key) under a random key, its first word
    /// mixed with a keyed hash of the rule's definition (so a reloaded rule
    /// of the same name with another limit is another entry). One pass
    /// over the key.
    #[inline] // called per check from check.rs, another codegen unit
    fn hash(&self, rule: &Rule, key: &[u8]) -> u128 {
        let fp = self.inner.sip.fingerprint(rule.name().as_bytes(), key);
        let shape = self.inner.shape.hash_one((
            rule.algorithm(),
            rule.limit(),
            rule.period_micros(),
            rule.burst(),
        ));
        (u128::from(fp.0 ^ shape) << 64) | u128::from(fp.1)
    }

    #[inline] // called per check from check.rs, another codegen unit
    fn pair<'r>(&self, rule: &'r Rule, key: &'r [u8], cost: u64) -> Pair<'r> {
        let hash = self.hash(rule, key);
        Pair {
            rule,
            key,
            hash,
            // SHARDS is a power of two; the high word's bits are uniform
            // (the map hashes with the low word).
            shard: usize::try_from((hash >> 64) % SHARDS as u128).unwrap_or(0),
            cost,
        }
    }
}

/// One merged pair of a check.
struct Pair<'r> {
    rule: &'r Rule,
    key: &'r [u8],
    hash: u128,
    shard: usize,
    cost: u64,
}

impl Store for HybridStore {
    fn kind(&self) -> &'static str {
        "hybrid"
    }

    fn rules_in_use(&self, rules: &[Rule]) {
        let mut ids: Vec<usize> = rules.iter().map(Rule::identity).collect();
        ids.sort_unstable();
        // The newest limiter's: an older one's checks still in flight (a
        // reload) go to Redis meanwhile, which is always right.
        self.inner.limiter_rules.store(Some(Arc::new(ids)));
    }

    fn check(
        &self,
        rule: &Rule,
        key: &[u8],
        cost: u64,
        at: Option<Micros>,
    ) -> impl Future<Output = Result<Decision, StoreError>> + Send {
        self.check_one(rule, key, cost, at)
    }

    fn check_all(
        &self,
        checks: &[KeyCheck<'_>],
        at: Option<Micros>,
    ) -> impl Future<Output = Result<MultiDecision, StoreError>> + Send {
        self.check_many(checks, at)
    }

    /// Charges go straight to Redis (one call per charge): usage known after
    /// the fact is rare next to checks, and Redis must hold all of it. Units
    /// this replica already holds in a local batch are still spent locally
    /// (docs/hybrid.md, "Charges").
    fn charge_all(
        &self,
        checks: &[KeyCheck<'_>],
        at: Option<Micros>,
    ) -> impl Future<Output = Result<Vec<Charged>, StoreError>> + Send {
        self.inner.calls.fetch_add(1, Ordering::Relaxed);
        Store::charge_all(&self.inner.redis, checks, self.redis_time(at))
    }

    /// Refunds go straight to Redis, as charges do: units this replica
    /// holds in a local batch stay spent there until it ends.
    fn refund_all(
        &self,
        checks: &[KeyCheck<'_>],
        at: Option<Micros>,
    ) -> impl Future<Output = Result<Vec<Charged>, StoreError>> + Send {
        self.inner.calls.fetch_add(1, Ordering::Relaxed);
        Store::refund_all(&self.inner.redis, checks, self.redis_time(at))
    }

    /// Reservations go straight to Redis, as charges do.
    fn reserve_all(
        &self,
        checks: &[KeyCheck<'_>],
        ticket: &Ticket,
        ttl: Micros,
        at: Option<Micros>,
    ) -> impl Future<Output = Result<MultiDecision, StoreError>> + Send {
        self.inner.calls.fetch_add(1, Ordering::Relaxed);
        Store::reserve_all(&self.inner.redis, checks, ticket, ttl, self.redis_time(at))
    }

    /// Settles go straight to Redis, where the reservation is.
    fn settle(
        &self,
        ticket: &Ticket,
        pairs: &[SettlePair<'_>],
        at: Option<Micros>,
    ) -> impl Future<Output = Result<Settled, StoreError>> + Send {
        self.inner.calls.fetch_add(1, Ordering::Relaxed);
        Store::settle(&self.inner.redis, ticket, pairs, self.redis_time(at))
    }

    /// Concurrency leases go straight to Redis: slots held fleet-wide
    /// cannot be lent out in batches (docs/hybrid.md, "Charges,
    /// reservations, leases").
    fn acquire_all(
        &self,
        checks: &[KeyCheck<'_>],
        ticket: &Ticket,
        at: Option<Micros>,
    ) -> impl Future<Output = Result<MultiDecision, StoreError>> + Send {
        self.inner.calls.fetch_add(1, Ordering::Relaxed);
        Store::acquire_all(&self.inner.redis, checks, ticket, self.redis_time(at))
    }

    /// Releases and renewals go straight to Redis, where the lease is.
    fn release(
        &self,
        ticket: &Ticket,
        rules: &[&Rule],
        renew: bool,
        at: Option<Micros>,
    ) -> impl Future<Output = Result<Released, StoreError>> + Send {
        self.inner.calls.fetch_add(1, Ordering::Relaxed);
        Store::release(&self.inner.redis, ticket, rules, renew, self.redis_time(at))
    }

    /// Forgets the key in Redis and this replica's batch of it.
    async fn reset(&self, rule: &Rule, key: &[u8]) -> Result<bool, StoreError> {
        // This replica's batch of the key goes too (other replicas' end
        // within their batch's life, at most `batch_life`: docs/admin.md).
        let pair = self.pair(rule, key, 0);
        self.inner.shards[pair.shard].lock().remove(&pair.hash);
        self.inner.calls.fetch_add(1, Ordering::Relaxed);
        Store::reset(&self.inner.redis, rule, key).await
    }

    fn runtime_read(
        &self,
        since: Option<u64>,
    ) -> impl Future<Output = Result<Option<crate::store::RuntimeEntries>, StoreError>> + Send {
        Store::runtime_read(&self.inner.redis, since)
    }

    fn runtime_write(
        &self,
        field: &[u8],
        value: Option<&[u8]>,
        expired: &[Vec<u8>],
    ) -> impl Future<Output = Result<bool, StoreError>> + Send {
        Store::runtime_write(&self.inner.redis, field, value, expired)
    }

    /// Redis answers `PING`: the hybrid store is as reachable as its Redis.
    fn ping(&self) -> impl Future<Output = Result<(), StoreError>> + Send {
        Store::ping(&self.inner.redis)
    }

    /// The live-replica heartbeat runs on the Redis store underneath.
    fn heartbeat(
        &self,
        replica: &str,
        ttl: Duration,
    ) -> impl Future<Output = Result<Option<u64>, StoreError>> + Send {
        Store::heartbeat(&self.inner.redis, replica, ttl)
    }
}
