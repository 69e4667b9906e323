//! Stores keep per-key state and apply an algorithm atomically.
//!
//! The base capability is [`Store`]: the atomic single check and the
//! all-or-nothing multi-rule check. A store never knows about HTTP, gRPC or
//! config files.

#[cfg(feature = "redis")]
pub mod hybrid;
pub mod memory;
#[cfg(feature = "redis")]
pub mod redis;
pub mod url;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use crate::algorithm::Charged;
use crate::decision::{Decision, MultiDecision};
use crate::error::StoreError;
use crate::rule::Rule;
use crate::ticket::Ticket;
use crate::time::Micros;

pub use url::StoreUrl;

/// A shared live table as read ([`Store::runtime_read`]): its version
/// and every (field, value) entry.
pub type RuntimeEntries = (u64, Vec<(Vec<u8>, Vec<u8>)>);

/// One (rule, key, cost) triple of a check handed to a store.
#[derive(Debug, Clone, Copy)]
pub struct KeyCheck<'a> {
    /// The rule deciding.
    pub rule: &'a Rule,
    /// The identity being limited.
    pub key: &'a [u8],
    /// Units to consume; 0 peeks.
    pub cost: u64,
}

/// How settling (or cancelling) a reservation ended at the store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Settled {
    /// The store holds no such reservation: never made, or forgotten
    /// ([`crate::ticket::REMEMBERED_AFTER_TTL`] after its ttl).
    Unknown,
    /// It was settled or cancelled before; nothing changed.
    Finished,
    /// Settled now.
    Done {
        /// It came after the reservation's ttl: its estimate stayed
        /// charged, only usage beyond it was charged.
        late: bool,
        /// Each pair's state after, as a charge answers it.
        charged: Vec<Charged>,
        /// Each pair's estimate, as reserved: what the usage above it
        /// (charged, `clamped` included) is measured from.
        estimates: Vec<u64>,
    },
}

/// How releasing or renewing a lease ended at the store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Released {
    /// No such live lease: never taken, released before, or ended.
    Unknown,
    /// Released (or renewed) on every pair: each pair's state after, as a
    /// peek answers it.
    Done(Vec<Decision>),
}

/// One pair of a reservation being settled: its rule (the ticket names
/// it), and the actual usage (`None`: cancelled, all of the estimate
/// given back).
#[derive(Debug, Clone, Copy)]
pub struct SettlePair<'a> {
    /// The pair's rule.
    pub rule: &'a Rule,
    /// The usage to settle at; `None` cancels.
    pub actual: Option<u64>,
}

/// A key as [`Store::failure_domain`] is given it.
#[derive(Debug, Clone, Copy)]
pub enum DomainKey<'a> {
    /// A caller's key.
    Caller(&'a [u8]),
    /// A key by its name, as a ticket holds it ([`crate::ticket::TicketPair::key`]).
    Named(&'a [u8]),
}

/// A place that keeps rate-limit state and decides checks atomically.
///
/// `at` is the time of the check in microseconds; `None` means the store's
/// own clock (the memory store's [`crate::Clock`], or the Redis server's
/// `TIME`). Tests and replay pass it explicitly, at most [`crate::time::MAX_TIME`]
/// (the [`crate::Limiter`] refuses later times; a store may answer garbage).
///
/// # What a store must implement
///
/// Every operation a rule can ask for is required: checks
/// ([`check`](Store::check), [`check_all`](Store::check_all)), charges
/// and refunds, reservations ([`reserve_all`](Store::reserve_all),
/// [`settle`](Store::settle)), concurrency leases
/// ([`acquire_all`](Store::acquire_all), [`release`](Store::release)) and
/// [`reset`](Store::reset). Every store tollgate ships implements all of
/// them, and a config may give any rule to any store, so a store lacking
/// one would only fail at run time, on the first request that needs it; as
/// required methods, a new store (or a wrapper) cannot forget one. A test
/// double that never expects a call still says what it answers.
///
/// A store that only checks does not compile:
///
/// ```compile_fail,E0046
/// use tollgate::store::KeyCheck;
/// use tollgate::{Decision, MemoryStore, Micros, MultiDecision, Rule, Store, StoreError};
///
/// struct ChecksOnly(MemoryStore);
///
/// impl Store for ChecksOnly {
///     async fn check(
///         &self,
///         rule: &Rule,
///         key: &[u8],
///         cost: u64,
///         at: Option<Micros>,
///     ) -> Result<Decision, StoreError> {
///         self.0.check(rule, key, cost, at).await
///     }
///
///     async fn check_all(
///         &self,
///         checks: &[KeyCheck<'_>],
///         at: Option<Micros>,
///     ) -> Result<MultiDecision, StoreError> {
///         self.0.check_all(checks, at).await
///     }
/// }
/// ```
///
/// The rest have defaults that are true answers for a store in one
/// process, not refusals: the live table is not shared
/// ([`runtime_read`](Store::runtime_read) answers `None`,
/// [`runtime_write`](Store::runtime_write) `false`), there is no
/// heartbeat, one failure domain, no own timeout, and
/// [`ping`](Store::ping) always answers. A store shared between replicas
/// overrides them.
pub trait Store: Send + Sync + 'static {
    /// Decides one check atomically.
    fn check(
        &self,
        rule: &Rule,
        key: &[u8],
        cost: u64,
        at: Option<Micros>,
    ) -> impl Future<Output = Result<Decision, StoreError>> + Send;

    /// Decides several checks all-or-nothing: admitted only if every pair
    /// admits; when any denies, no pair consumes. `checks` is not empty.
    fn check_all(
        &self,
        checks: &[KeyCheck<'_>],
        at: Option<Micros>,
    ) -> impl Future<Output = Result<MultiDecision, StoreError>> + Send;

    /// Charges every pair unconditionally (docs/semantics.md, "Charge"),
    /// each at its own cost: never denied, so there is no all-or-nothing to
    /// keep; one answer per pair, in order. `checks` is not empty.
    fn charge_all(
        &self,
        checks: &[KeyCheck<'_>],
        at: Option<Micros>,
    ) -> impl Future<Output = Result<Vec<Charged>, StoreError>> + Send;

    /// Gives every pair its cost back now (docs/semantics.md, "Refund"),
    /// the units counted last first, never past empty/full; one answer per
    /// pair, in order, as a charge of nothing reads the key after it.
    /// `checks` is not empty.
    fn refund_all(
        &self,
        checks: &[KeyCheck<'_>],
        at: Option<Micros>,
    ) -> impl Future<Output = Result<Vec<Charged>, StoreError>> + Send;

    /// Decides `checks` all-or-nothing as [`Store::check_all`] does and,
    /// when every pair admits, keeps a record of the reservation `ticket`
    /// beside each pair's state: its estimate (the pair's cost), its time,
    /// and its `ttl` (µs).
    fn reserve_all(
        &self,
        checks: &[KeyCheck<'_>],
        ticket: &Ticket,
        ttl: Micros,
        at: Option<Micros>,
    ) -> impl Future<Output = Result<MultiDecision, StoreError>> + Send;

    /// Settles (or cancels) the reservation `ticket`, `pairs` in its
    /// order (docs/semantics.md, "Reserve, then settle"): usage above a
    /// pair's estimate is charged; below it, given back while the ttl runs;
    /// all of it or nothing, and only once.
    fn settle(
        &self,
        ticket: &Ticket,
        pairs: &[SettlePair<'_>],
        at: Option<Micros>,
    ) -> impl Future<Output = Result<Settled, StoreError>> + Send;

    /// Acquires `checks` (all `concurrency` pairs) all-or-nothing: when
    /// every pair has room, each takes a lease of its cost under `ticket`'s
    /// id, ending after the rule's lease (docs/semantics.md,
    /// "Concurrency").
    fn acquire_all(
        &self,
        checks: &[KeyCheck<'_>],
        ticket: &Ticket,
        at: Option<Micros>,
    ) -> impl Future<Output = Result<MultiDecision, StoreError>> + Send;

    /// Releases (or, `renew`, extends to a whole lease from now) the lease
    /// `ticket` on every pair, `rules` in its order: all of them live, or
    /// nothing changes.
    fn release(
        &self,
        ticket: &Ticket,
        rules: &[&Rule],
        renew: bool,
        at: Option<Micros>,
    ) -> impl Future<Output = Result<Released, StoreError>> + Send;

    /// Forgets (rule, key)'s state: the key reads as never checked (empty
    /// or full, per the algorithm) afterwards (docs/admin.md, "Reset a
    /// key"). Answers whether there was state to forget (`false` when the
    /// store cannot tell).
    fn reset(
        &self,
        rule: &Rule,
        key: &[u8],
    ) -> impl Future<Output = Result<bool, StoreError>> + Send;

    /// The live table shared by every replica of this store (blocks and
    /// runtime overrides, docs/admin.md): `None` when it is unchanged since
    /// version `since`, or when the store is not shared (the default: the
    /// table then lives in each process). Else its version and every
    /// (field, value) entry.
    fn runtime_read(
        &self,
        since: Option<u64>,
    ) -> impl Future<Output = Result<Option<RuntimeEntries>, StoreError>> + Send {
        let _ = since;
        std::future::ready(Ok(None))
    }

    /// Sets (`Some`) or deletes (`None`) one entry of the shared runtime
    /// table and gives it a version it never had (a reader compares
    /// versions for equality only), also deleting the fields `expired`
    /// names. Answers `false` when the store is not shared (the default):
    /// the caller keeps the entry in its own process.
    fn runtime_write(
        &self,
        field: &[u8],
        value: Option<&[u8]>,
        expired: &[Vec<u8>],
    ) -> impl Future<Output = Result<bool, StoreError>> + Send {
        let _ = (field, value, expired);
        std::future::ready(Ok(false))
    }

    /// Whether the store answers right now (Redis: a `PING`). An
    /// in-process store always does: the default.
    fn ping(&self) -> impl Future<Output = Result<(), StoreError>> + Send {
        std::future::ready(Ok(()))
    }

    /// Whether the store answers in this process, without I/O (the memory
    /// store); `false`, the default, for a store behind a network.
    /// [`crate::resilient::ResilientLimiter`] times only the calls of a
    /// store that is not in process (an in-process check takes about as
    /// long as reading the clock twice, and timing it was measured at 6%
    /// of the HTTP API's checks per second).
    fn in_process(&self) -> bool {
        false
    }

    /// What the store is (`memory`, `redis`, `hybrid`), as the spans of
    /// its calls name it (`tollgate.store`); `custom`, the default, for a
    /// store of another crate.
    fn kind(&self) -> &'static str {
        "custom"
    }

    /// The part of the store holding `key`'s state under the rule named
    /// `rule`, when its parts fail apart (a Redis Cluster: the master
    /// serving the key's slot, as `host:port`, once the store has read the
    /// slot map), so [`crate::resilient::ResilientLimiter`] keeps one
    /// circuit breaker per part and a dead one does not stop calls to the
    /// others. `None`, the default: the store fails as one.
    fn failure_domain(&self, rule: &str, key: DomainKey<'_>) -> Option<Arc<str>> {
        let _ = (rule, key);
        None
    }

    /// The longest any call of this store waits before it fails by itself
    /// with a [`StoreErrorKind::Timeout`](crate::StoreErrorKind), when the
    /// store bounds its calls itself (`None`, the default, when it does
    /// not). The Redis store's own connection does, with one timer for all
    /// its requests; [`crate::resilient::ResilientLimiter`] then adds no
    /// timer of its own when its timeout is no shorter (one per check,
    /// registered in tokio's timer wheel and taken out again).
    fn bounds_calls(&self) -> Option<Duration> {
        None
    }

    /// Told, by each [`crate::Limiter`] built over it, every rule that
    /// limiter may hand it (its rules and their per-key overrides): a store
    /// may treat any other rule (a per-call limit, [`crate::Check::under`])
    /// apart, and the newest limiter's list is the one that holds. The
    /// default ignores it; the hybrid store sends such checks straight to
    /// Redis, as a batch taken under a one-off limit would hold the shared
    /// counter's units until its window ends (docs/hybrid.md, "Per-call
    /// limits").
    fn rules_in_use(&self, rules: &[Rule]) {
        let _ = rules;
    }

    /// Records that replica `replica` is alive and returns how many
    /// replicas sharing this store (itself included) did so within `ttl`;
    /// `None` when the store is not shared between replicas (the default:
    /// an in-process store). Called about once a second by
    /// [`crate::resilient::ResilientLimiter`] to size its `local` fallback.
    fn heartbeat(
        &self,
        replica: &str,
        ttl: Duration,
    ) -> impl Future<Output = Result<Option<u64>, StoreError>> + Send {
        let _ = (replica, ttl);
        std::future::ready(Ok(None))
    }
}

impl<S: Store> Store for Arc<S> {
    fn check(
        &self,
        rule: &Rule,
        key: &[u8],
        cost: u64,
        at: Option<Micros>,
    ) -> impl Future<Output = Result<Decision, StoreError>> + Send {
        (**self).check(rule, key, cost, at)
    }

    fn check_all(
        &self,
        checks: &[KeyCheck<'_>],
        at: Option<Micros>,
    ) -> impl Future<Output = Result<MultiDecision, StoreError>> + Send {
        (**self).check_all(checks, at)
    }

    fn charge_all(
        &self,
        checks: &[KeyCheck<'_>],
        at: Option<Micros>,
    ) -> impl Future<Output = Result<Vec<Charged>, StoreError>> + Send {
        (**self).charge_all(checks, at)
    }

    fn refund_all(
        &self,
        checks: &[KeyCheck<'_>],
        at: Option<Micros>,
    ) -> impl Future<Output = Result<Vec<Charged>, StoreError>> + Send {
        (**self).refund_all(checks, at)
    }

    fn reserve_all(
        &self,
        checks: &[KeyCheck<'_>],
        ticket: &Ticket,
        ttl: Micros,
        at: Option<Micros>,
    ) -> impl Future<Output = Result<MultiDecision, StoreError>> + Send {
        (**self).reserve_all(checks, ticket, ttl, at)
    }

    fn settle(
        &self,
        ticket: &Ticket,
        pairs: &[SettlePair<'_>],
        at: Option<Micros>,
    ) -> impl Future<Output = Result<Settled, StoreError>> + Send {
        (**self).settle(ticket, pairs, at)
    }

    fn acquire_all(
        &self,
        checks: &[KeyCheck<'_>],
        ticket: &Ticket,
        at: Option<Micros>,
    ) -> impl Future<Output = Result<MultiDecision, StoreError>> + Send {
        (**self).acquire_all(checks, ticket, at)
    }

    fn release(
        &self,
        ticket: &Ticket,
        rules: &[&Rule],
        renew: bool,
        at: Option<Micros>,
    ) -> impl Future<Output = Result<Released, StoreError>> + Send {
        (**self).release(ticket, rules, renew, at)
    }

    fn reset(
        &self,
        rule: &Rule,
        key: &[u8],
    ) -> impl Future<Output = Result<bool, StoreError>> + Send {
        (**self).reset(rule, key)
    }

    fn runtime_read(
        &self,
        since: Option<u64>,
    ) -> impl Future<Output = Result<Option<RuntimeEntries>, StoreError>> + Send {
        (**self).runtime_read(since)
    }

    fn runtime_write(
        &self,
        field: &[u8],
        value: Option<&[u8]>,
        expired: &[Vec<u8>],
    ) -> impl Future<Output = Result<bool, StoreError>> + Send {
        (**self).runtime_write(field, value, expired)
    }

    fn ping(&self) -> impl Future<Output = Result<(), StoreError>> + Send {
        (**self).ping()
    }

    fn in_process(&self) -> bool {
        (**self).in_process()
    }

    fn kind(&self) -> &'static str {
        (**self).kind()
    }

    fn failure_domain(&self, rule: &str, key: DomainKey<'_>) -> Option<Arc<str>> {
        (**self).failure_domain(rule, key)
    }

    fn bounds_calls(&self) -> Option<Duration> {
        (**self).bounds_calls()
    }

    fn rules_in_use(&self, rules: &[Rule]) {
        (**self).rules_in_use(rules);
    }

    fn heartbeat(
        &self,
        replica: &str,
        ttl: Duration,
    ) -> impl Future<Output = Result<Option<u64>, StoreError>> + Send {
        (**self).heartbeat(replica, ttl)
    }
}
