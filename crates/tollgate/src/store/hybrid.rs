//! The hybrid store: a local fast path with Redis as the authority.
//!
//! Each replica leases batches of units of a (rule, key) from Redis (one
//! script run takes up to `batch` units, exactly as one check of that cost
//! would) and spends them locally; when Redis has nothing to lease, the
//! replica remembers until when asking again is worthless and denies
//! locally until then. Redis is called far less than once per check; the
//! price is a bounded error, derived in `docs/hybrid.md`:
//!
//! * **over-admission**: in any interval, at most the units the replicas
//!   held at its start: at most `replicas × batch`, and at most what was
//!   leased in the `lease` before it (GCRA and token bucket: `lease / T`);
//!   none over a run that starts on an unused key, and none for fixed and
//!   sliding window (a lease ends with its window);
//! * **under-admission**: units sitting unspent in replicas' leases (at
//!   most `replicas × batch` at any moment, back at most `lease` later), and
//!   GCRA / token bucket units of expired leases that cannot be safely given
//!   back (lease sizes follow each replica's demand to keep those few).
//!
//! Leases live at most `lease` (default 1 s, never more than the rule's
//! period, and never past the end of a fixed or sliding window). Unspent
//! units of an expired lease are given back in the same Redis call as the
//! key's next lease.
//!
//! ```no_run
//! use std::time::Duration;
//! use tollgate::store::hybrid::{HybridOptions, HybridStore};
//! use tollgate::store::redis::{RedisOptions, RedisStore};
//! use tollgate::{Algorithm, Limiter, RuleSpec};
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let redis = RedisStore::connect("redis://127.0.0.1:6379", RedisOptions::default()).await?;
//! // five replicas share the limit: each leases 1000 / (10 × 5) = 20 units at a time
//! let store = HybridStore::new(redis, HybridOptions { replicas: 5, ..HybridOptions::default() });
//! let rule = RuleSpec::new("per_user", Algorithm::Gcra, 1000, Duration::from_secs(1)).build()?;
//! let limiter = Limiter::new(store, [rule])?;
//! let decision = limiter.check("per_user", "alice", 1).await?;
//! # Ok(()) }
//! ```

use std::collections::HashMap;
use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use futures_util::future::join_all;
use parking_lot::{Mutex, MutexGuard};
use tokio::sync::Notify;
use tokio::sync::futures::OwnedNotified;

use crate::algorithm::Usage;
use crate::decision::{Decision, MultiDecision};
use crate::error::StoreError;
use crate::rule::Rule;
use crate::store::redis::RedisStore;
use crate::store::redis::keys;
use crate::store::redis::lease::{GiveBack, Lease};
use crate::store::{KeyCheck, Store};
use crate::time::{Clock, Micros, MonotonicClock, duration_to_micros};

/// How a [`HybridStore`] leases.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HybridOptions {
    /// How many replicas share the limits (default 1): the default batch is
    /// sized from it.
    pub replicas: u32,
    /// Units taken per lease. `None` (default): `capacity / (10 ×
    /// replicas)`, at least 1. Always capped at the rule's capacity; a
    /// check costing more leases its cost.
    pub batch: Option<u64>,
    /// The longest a lease lives (default 1 s; also never longer than the
    /// rule's period, nor past the end of a fixed or sliding window).
    pub lease: Duration,
    /// Most (rule, key) entries kept locally (default 100,000).
    pub max_keys: usize,
}

impl Default for HybridOptions {
    fn default() -> Self {
        Self {
            replicas: 1,
            batch: None,
            lease: Duration::from_secs(1),
            max_keys: 100_000,
        }
    }
}

impl HybridOptions {
    /// The batch for `rule`: [`HybridOptions::batch`] or its default,
    /// between 1 and the rule's capacity.
    #[must_use]
    pub fn batch_for(&self, rule: &Rule) -> u64 {
        let capacity = rule.capacity();
        let batch = self
            .batch
            .unwrap_or(capacity / (10 * u64::from(self.replicas.max(1))));
        batch.clamp(1, capacity.max(1))
    }

    /// The longest life of a lease of `rule`, µs: `lease`, at most the
    /// rule's period, at least 1 µs.
    #[must_use]
    pub fn lease_for(&self, rule: &Rule) -> Micros {
        duration_to_micros(self.lease)
            .min(rule.period_micros())
            .max(1)
    }
}

/// Local shards (a power of two).
const SHARDS: usize = 16;

type Shard = HashMap<u128, Entry>;

/// The hybrid store: local leases over a [`RedisStore`]. Cheap to clone:
/// clones share leases and counters.
#[derive(Clone)]
pub struct HybridStore {
    inner: Arc<Inner>,
}

struct Inner {
    redis: RedisStore,
    options: HybridOptions,
    clock: Box<dyn Clock>,
    hashers: [RandomState; 2],
    shards: Vec<Mutex<Shard>>,
    shard_cap: usize,
    calls: AtomicU64,
    checks: AtomicU64,
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

/// One (rule, key)'s local state on this replica.
#[derive(Debug)]
struct Entry {
    rule: Rule,
    redis_key: Box<[u8]>,
    /// Leased units not spent yet (valid while `now < expires`).
    units: u64,
    /// Local time the lease ends.
    expires: Micros,
    /// Units the current lease took, and the size of the next (0: the
    /// batch).
    leased: u64,
    size: u64,
    /// The lease's Redis time and reset_after right after it.
    t0: Micros,
    reset_after: Micros,
    /// Redis's remaining right after the last lease, and the local time it
    /// was seen (for the reported remaining and reset_after).
    remaining: u64,
    seen: Micros,
    /// Local time before which asking Redis again is worthless.
    not_before: Micros,
    /// Units of an expired lease to give back with the next lease.
    give_back: Option<GiveBack>,
    /// A lease in flight: callers wait for it instead of asking too.
    inflight: Option<Arc<Notify>>,
    /// Bumped when a lease completes; `failed` holds the error of the last
    /// one (and its generation) when it failed.
    generation: u64,
    failed: Option<(u64, StoreError)>,
    last_used: Micros,
}

impl Entry {
    fn new(rule: Rule, redis_key: Box<[u8]>) -> Self {
        Self {
            rule,
            redis_key,
            units: 0,
            expires: 0,
            leased: 0,
            size: 0,
            t0: 0,
            reset_after: 0,
            remaining: 0,
            seen: 0,
            not_before: 0,
            give_back: None,
            inflight: None,
            generation: 0,
            failed: None,
            last_used: 0,
        }
    }

    /// Moves the units of an expired lease to `give_back`.
    fn expire(&mut self, now: Micros) {
        if self.units > 0 && now >= self.expires {
            self.retire();
        }
    }

    /// Stops spending the current lease; its units go back with the next.
    fn retire(&mut self) {
        if self.units > 0 {
            self.give_back = Some(GiveBack {
                units: self.units,
                t0: self.t0,
                reset_after: self.reset_after,
            });
            self.units = 0;
        }
    }

    /// What this replica knows of the pair now: remaining (Redis's at the
    /// last lease plus the units held) and reset_after.
    fn view(&self, now: Micros) -> (u64, Duration) {
        let remaining = self
            .remaining
            .saturating_add(self.units)
            .min(self.rule.capacity());
        let elapsed = now.saturating_sub(self.seen);
        (
            remaining,
            Duration::from_micros(self.reset_after.saturating_sub(elapsed)),
        )
    }

    fn admitted(&self, now: Micros) -> Decision {
        let (remaining, reset_after) = self.view(now);
        Decision {
            allowed: true,
            limit: self.rule.capacity(),
            remaining,
            reset_after,
            retry_after: None,
        }
    }

    fn denied(&self, now: Micros) -> Decision {
        let (_, reset_after) = self.view(now);
        let retry = Duration::from_micros(self.not_before.saturating_sub(now));
        Decision {
            allowed: false,
            limit: self.rule.capacity(),
            remaining: 0,
            reset_after: reset_after.max(retry),
            retry_after: Some(retry),
        }
    }

    /// What forgetting this entry loses, to order evictions: its leased
    /// units not spent yet (current, or waiting to be given back) as a
    /// share of the rule's capacity (see [`Usage`]). A remembered denial
    /// holds none: Redis still has the key's state.
    fn stake(&self) -> u64 {
        let held = self
            .units
            .saturating_add(self.give_back.map_or(0, |g| g.units));
        Usage::of(u128::from(held), u128::from(self.rule.capacity()), false).stake()
    }

    /// Whether forgetting this entry changes nothing.
    fn is_dead(&self, now: Micros) -> bool {
        self.inflight.is_none()
            && (self.units == 0 || now >= self.expires)
            && self.give_back.is_none()
            && now >= self.not_before
    }
}

/// Clears a lease in flight when its leader finishes or is dropped
/// (cancelled), and wakes the callers waiting for it.
struct Flight<'a> {
    inner: &'a Inner,
    shard: usize,
    hash: u128,
    notify: Arc<Notify>,
}

impl Drop for Flight<'_> {
    fn drop(&mut self) {
        let mut shard = self.inner.shards[self.shard].lock();
        if let Some(e) = shard.get_mut(&self.hash)
            && e.inflight
                .as_ref()
                .is_some_and(|n| Arc::ptr_eq(n, &self.notify))
        {
            e.inflight = None;
        }
        drop(shard);
        self.notify.notify_waiters();
    }
}

impl HybridStore {
    /// A hybrid store over `redis`; leases expire by a monotonic clock.
    #[must_use]
    pub fn new(redis: RedisStore, options: HybridOptions) -> Self {
        Self::with_clock(redis, options, MonotonicClock::new())
    }

    /// A hybrid store whose leases expire by `clock` (tests pass a
    /// [`crate::FakeClock`]). Decisions still take Redis's time.
    #[must_use]
    pub fn with_clock(redis: RedisStore, options: HybridOptions, clock: impl Clock) -> Self {
        let max_keys = options.max_keys.max(SHARDS);
        Self {
            inner: Arc::new(Inner {
                redis,
                shard_cap: max_keys / SHARDS,
                options,
                clock: Box::new(clock),
                hashers: [RandomState::new(), RandomState::new()],
                shards: (0..SHARDS).map(|_| Mutex::new(HashMap::new())).collect(),
                calls: AtomicU64::new(0),
                checks: AtomicU64::new(0),
            }),
        }
    }

    /// The Redis store leases come from.
    #[must_use]
    pub fn redis(&self) -> &RedisStore {
        &self.inner.redis
    }

    /// The options.
    #[must_use]
    pub fn options(&self) -> &HybridOptions {
        &self.inner.options
    }

    /// Redis calls made so far: leases, give-backs and checks passed
    /// through (peeks, explicit times, costs above capacity).
    #[must_use]
    pub fn redis_calls(&self) -> u64 {
        self.inner.calls.load(Ordering::Relaxed)
    }

    /// Checks decided so far (a multi-rule check counts once).
    #[must_use]
    pub fn checks(&self) -> u64 {
        self.inner.checks.load(Ordering::Relaxed)
    }

    /// Local (rule, key) entries held.
    #[must_use]
    pub fn local_keys(&self) -> usize {
        self.inner.shards.iter().map(|s| s.lock().len()).sum()
    }

    /// Gives back to Redis every unspent leased unit this replica holds,
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
                .lease_at(&key, &rule, 0, 0, Some(g), None)
                .await)
                .is_ok()
            {
                returned += 1;
            }
        }
        returned
    }

    /// The local identity of (rule, key): a 128-bit SipHash under random
    /// keys of the rule's definition and the key.
    fn hash(&self, rule: &Rule, key: &[u8]) -> u128 {
        let id = (
            rule.name(),
            rule.algorithm(),
            rule.limit(),
            rule.period_micros(),
            rule.burst(),
            key,
        );
        let [a, b] = &self.inner.hashers;
        (u128::from(a.hash_one(id)) << 64) | u128::from(b.hash_one(id))
    }

    fn pair<'r>(&self, rule: &'r Rule, key: &'r [u8], cost: u64) -> Pair<'r> {
        let hash = self.hash(rule, key);
        Pair {
            rule,
            key,
            hash,
            // SHARDS is a power of two; the hash's low bits are uniform.
            shard: usize::try_from(hash % SHARDS as u128).unwrap_or(0),
            cost,
        }
    }
}

impl Inner {
    /// `p`'s entry in its locked shard, created when missing. A full shard
    /// first forgets dead entries, then an eighth of those without a lease
    /// in flight, what costs least to forget first: the fewest leased units
    /// at stake (as a share of the rule's capacity), then the least
    /// recently used. Forgetting an entry admits nothing Redis would deny
    /// (Redis holds every key's state); it loses the entry's unspent units
    /// until the Redis state refills, and a remembered denial costs one
    /// Redis call to learn again.
    fn entry<'s>(&self, shard: &'s mut Shard, p: &Pair<'_>, now: Micros) -> &'s mut Entry {
        if shard.len() >= self.shard_cap && !shard.contains_key(&p.hash) {
            shard.retain(|_, e| !e.is_dead(now));
            if shard.len() >= self.shard_cap {
                let mut ranks: Vec<(u64, Micros, u128)> = shard
                    .iter()
                    .filter(|(_, e)| e.inflight.is_none())
                    .map(|(&hash, e)| (e.stake(), e.last_used, hash))
                    .collect();
                let n = (self.shard_cap / 8).max(1).min(ranks.len());
                if n > 0 {
                    if n < ranks.len() {
                        ranks.select_nth_unstable(n - 1);
                    }
                    for &(_, _, hash) in &ranks[..n] {
                        shard.remove(&hash);
                    }
                }
            }
        }
        let e = shard.entry(p.hash).or_insert_with(|| {
            let key = keys::redis_key(
                self.redis.prefix(),
                p.rule.name(),
                p.rule.algorithm(),
                p.key,
            );
            Entry::new(p.rule.clone(), key.into())
        });
        e.last_used = now;
        e
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

impl HybridStore {
    async fn check_one(
        &self,
        rule: &Rule,
        key: &[u8],
        cost: u64,
        at: Option<Micros>,
    ) -> Result<Decision, StoreError> {
        self.inner.checks.fetch_add(1, Ordering::Relaxed);
        if at.is_some() || cost == 0 || cost > rule.capacity() {
            self.inner.calls.fetch_add(1, Ordering::Relaxed);
            return self.inner.redis.check(rule, key, cost, at).await;
        }
        let pair = self.pair(rule, key, cost);
        // The fast path: units at hand.
        {
            let now = self.inner.clock.now();
            let mut shard = self.inner.shards[pair.shard].lock();
            if let Some(e) = shard.get_mut(&pair.hash) {
                e.expire(now);
                if e.units >= cost {
                    e.units -= cost;
                    e.last_used = now;
                    return Ok(e.admitted(now));
                }
                if now < e.not_before {
                    e.last_used = now;
                    return Ok(e.denied(now));
                }
            }
        }
        let decided = self.decide(std::slice::from_ref(&pair)).await?;
        Ok(decided.decisions[0])
    }

    async fn check_many(
        &self,
        checks: &[KeyCheck<'_>],
        at: Option<Micros>,
    ) -> Result<MultiDecision, StoreError> {
        self.inner.checks.fetch_add(1, Ordering::Relaxed);
        let mut pairs: Vec<Pair<'_>> = Vec::with_capacity(checks.len());
        let mut index = Vec::with_capacity(checks.len());
        for c in checks {
            let p = self.pair(c.rule, c.key, c.cost);
            if let Some(i) = pairs.iter().position(|q| q.hash == p.hash) {
                pairs[i].cost = pairs[i].cost.saturating_add(c.cost);
                index.push(i);
            } else {
                index.push(pairs.len());
                pairs.push(p);
            }
        }
        if at.is_some()
            || pairs
                .iter()
                .any(|p| p.cost == 0 || p.cost > p.rule.capacity())
        {
            self.inner.calls.fetch_add(1, Ordering::Relaxed);
            return self.inner.redis.check_all(checks, at).await;
        }
        let decided = self.decide(&pairs).await?;
        Ok(MultiDecision::from_decisions(
            index.into_iter().map(|i| decided.decisions[i]).collect(),
        ))
    }

    /// Decides merged pairs (each cost between 1 and its capacity)
    /// all-or-nothing: locally when every pair has the units, or when one
    /// is known exhausted; otherwise after leasing (single-flight per key)
    /// for the pairs that need it.
    async fn decide(&self, pairs: &[Pair<'_>]) -> Result<MultiDecision, StoreError> {
        let inner = &*self.inner;
        let mut shard_ids: Vec<usize> = pairs.iter().map(|p| p.shard).collect();
        shard_ids.sort_unstable();
        shard_ids.dedup();
        // The flight this caller waited for (pair, generation then): its
        // error is this caller's error.
        let mut waited: Option<(usize, u64)> = None;
        loop {
            let (flights, calls) = match inner.plan(pairs, &shard_ids, waited) {
                Plan::Done(result) => return result,
                Plan::Retry => {
                    tokio::task::yield_now().await;
                    continue;
                }
                Plan::Wait(notified, w) => {
                    waited = Some(w);
                    notified.await;
                    continue;
                }
                Plan::Lease(flights, calls) => (flights, calls),
            };
            let sent = inner.clock.now();
            inner.calls.fetch_add(calls.len() as u64, Ordering::Relaxed);
            let results = join_all(calls.iter().map(|c| {
                let rule = pairs[c.pair].rule;
                inner
                    .redis
                    .lease_at(&c.redis_key, rule, c.need, c.n, c.give_back, None)
            }))
            .await;
            let received = inner.clock.now();
            let mut error = None;
            // pairs whose lease could not cover their cost: when the same
            // check would be admitted (µs from `received`)
            let mut short: Vec<(usize, Option<Micros>)> = Vec::new();
            for (c, result) in calls.iter().zip(results) {
                let p = &pairs[c.pair];
                let mut shard = inner.shards[p.shard].lock();
                let e = inner.entry(&mut shard, p, received);
                e.generation += 1;
                match result {
                    Ok(lease) => {
                        e.failed = None;
                        inner.apply(e, &lease, sent, received);
                        if lease.units < c.need {
                            short.push((c.pair, lease.wait_need));
                        }
                    }
                    Err(err) => {
                        e.failed = Some((e.generation, err.clone()));
                        error = Some(err);
                    }
                }
            }
            drop(flights);
            if let Some(err) = error {
                return Err(err);
            }
            if !short.is_empty() {
                // Denied by Redis itself: answer now (asking again at once
                // would be denied again), consuming nothing.
                return Ok(inner.refused(pairs, &shard_ids, &short, received));
            }
        }
    }
}

/// What a check does next.
enum Plan<'a> {
    /// Decided.
    Done(Result<MultiDecision, StoreError>),
    /// Look again.
    Retry,
    /// Wait for another caller's lease of pair `.1 .0` (generation `.1 .1`).
    Wait(OwnedNotified, (usize, u64)),
    /// Lease for these pairs (this caller leads their flights).
    Lease(Vec<Flight<'a>>, Vec<LeaseCall>),
}

/// One lease to run.
struct LeaseCall {
    pair: usize,
    redis_key: Box<[u8]>,
    give_back: Option<GiveBack>,
    need: u64,
    n: u64,
}

impl Inner {
    /// Under the locks of every shard `pairs` touch (in index order, so a
    /// multi-rule check is atomic against every other check): decide, or
    /// say what to wait for or lease.
    fn plan<'a>(
        &'a self,
        pairs: &[Pair<'_>],
        shard_ids: &[usize],
        waited: Option<(usize, u64)>,
    ) -> Plan<'a> {
        let now = self.clock.now();
        let mut guards: Vec<(usize, MutexGuard<'_, Shard>)> = shard_ids
            .iter()
            .map(|&s| (s, self.shards[s].lock()))
            .collect();
        let mut blocked = false;
        let mut all_ready = true;
        let mut wait_for: Option<(usize, Arc<Notify>, u64)> = None;
        let mut to_lease: Vec<usize> = Vec::new();
        for (i, p) in pairs.iter().enumerate() {
            let e = self.entry(shard_mut(&mut guards, p.shard), p, now);
            e.expire(now);
            if let (Some((w, generation)), Some((g, err))) = (waited, &e.failed)
                && w == i
                && *g == generation + 1
            {
                return Plan::Done(Err(err.clone()));
            }
            if e.units >= p.cost {
                continue;
            }
            all_ready = false;
            if now < e.not_before {
                blocked = true;
            } else if let Some(n) = &e.inflight {
                if wait_for.is_none() {
                    wait_for = Some((i, n.clone(), e.generation));
                }
            } else {
                to_lease.push(i);
            }
        }
        if all_ready || blocked {
            let mut out = Vec::with_capacity(pairs.len());
            for p in pairs {
                let e = self.entry(shard_mut(&mut guards, p.shard), p, now);
                if all_ready {
                    e.units -= p.cost;
                    out.push(e.admitted(now));
                } else if e.units < p.cost && now < e.not_before {
                    out.push(e.denied(now));
                } else {
                    // would have admitted: what this replica knows, unchanged
                    out.push(e.admitted(now));
                }
            }
            return Plan::Done(Ok(MultiDecision::from_decisions(out)));
        }
        if to_lease.is_empty() {
            return match wait_for {
                Some((i, notify, generation)) => {
                    Plan::Wait(notify.notified_owned(), (i, generation))
                }
                None => Plan::Retry,
            };
        }
        let mut flights = Vec::with_capacity(to_lease.len());
        let mut calls = Vec::with_capacity(to_lease.len());
        for i in to_lease {
            let p = &pairs[i];
            let e = self.entry(shard_mut(&mut guards, p.shard), p, now);
            // Size leases to this replica's demand for the key: a lease
            // spent out before it expired doubles the next (up to the
            // batch); one that expired with units unspent makes the next
            // what was spent.
            let batch = self.options.batch_for(p.rule);
            let current = if e.size == 0 { batch } else { e.size };
            e.size = match e.give_back {
                Some(g) => e.leased.saturating_sub(g.units),
                None if e.units == 0 && e.leased > 0 && now < e.expires => {
                    current.saturating_mul(2)
                }
                None => current,
            }
            .clamp(1, batch);
            // Units too few for this cost go back with the new lease.
            e.retire();
            let notify = Arc::new(Notify::new());
            e.inflight = Some(notify.clone());
            flights.push(Flight {
                inner: self,
                shard: p.shard,
                hash: p.hash,
                notify,
            });
            calls.push(LeaseCall {
                pair: i,
                redis_key: e.redis_key.clone(),
                give_back: e.give_back.take(),
                need: p.cost,
                n: e.size.max(p.cost),
            });
        }
        Plan::Lease(flights, calls)
    }
}

impl Inner {
    /// Records a lease in its entry.
    fn apply(&self, e: &mut Entry, lease: &Lease, sent: Micros, received: Micros) {
        if lease.units > 0 {
            let mut life = self.options.lease_for(&e.rule);
            if let Some(end) = lease.window_end {
                life = life.min(end.saturating_sub(lease.t));
            }
            e.units = lease.units;
            e.leased = lease.units;
            // From the time the call was sent: the lease was taken after
            // it, so the local expiry is never later than the real one.
            e.expires = sent.saturating_add(life);
            e.t0 = lease.t;
        }
        e.reset_after = lease.reset_after;
        e.remaining = lease.remaining;
        e.seen = received;
        // Units left in Redis: worth asking as soon as the local ones run
        // out. None: not before `n` units are back (asking for fewer would
        // mostly be answered with fewer, at the cost of more calls).
        e.not_before = match lease.wait {
            _ if lease.remaining > 0 => 0,
            Some(0) => 0,
            Some(w) => received.saturating_add(w),
            None => received.saturating_add(e.rule.period_micros()),
        };
    }

    /// The answer to a check one of whose leases (`short`: pair, wait in
    /// µs from `now`) could not cover its cost: denied, nothing consumed.
    fn refused(
        &self,
        pairs: &[Pair<'_>],
        shard_ids: &[usize],
        short: &[(usize, Option<Micros>)],
        now: Micros,
    ) -> MultiDecision {
        let mut guards: Vec<(usize, MutexGuard<'_, Shard>)> = shard_ids
            .iter()
            .map(|&s| (s, self.shards[s].lock()))
            .collect();
        let out = pairs
            .iter()
            .enumerate()
            .map(|(i, p)| {
                let e = self.entry(shard_mut(&mut guards, p.shard), p, now);
                match short.iter().find(|s| s.0 == i) {
                    Some(&(_, wait)) => {
                        let mut d = e.denied(now);
                        d.remaining = e.view(now).0;
                        d.retry_after = wait.map(Duration::from_micros);
                        d.reset_after = d.reset_after.max(d.retry_after.unwrap_or_default());
                        d
                    }
                    None => e.admitted(now),
                }
            })
            .collect();
        MultiDecision::from_decisions(out)
    }
}

fn shard_mut<'a>(guards: &'a mut [(usize, MutexGuard<'_, Shard>)], shard: usize) -> &'a mut Shard {
    let i = guards.iter().position(|g| g.0 == shard).unwrap_or(0);
    &mut guards[i].1
}

impl Store for HybridStore {
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
