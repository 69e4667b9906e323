//! A store chosen at run time (from a config file or a URL): the library's
//! stores are types of their own, and the server picks one by `[store]
//! url`.

use std::time::Duration;

use tollgate::store::hybrid::HybridStore;
use tollgate::store::redis::RedisStore;
use tollgate::store::{DomainKey, KeyCheck, Released, RuntimeEntries, SettlePair, Settled};
use tollgate::ticket::Ticket;
use tollgate::{Charged, Decision, MemoryStore, Micros, MultiDecision, Rule, Store, StoreError};

/// Any of the library's stores, dispatched by a `match`.
#[derive(Debug)]
#[non_exhaustive]
pub enum AnyStore {
    /// The in-process store.
    Memory(MemoryStore),
    /// The Redis store.
    Redis(RedisStore),
    /// The hybrid store (local batches over Redis).
    Hybrid(HybridStore),
}

impl From<HybridStore> for AnyStore {
    fn from(s: HybridStore) -> Self {
        AnyStore::Hybrid(s)
    }
}

impl From<MemoryStore> for AnyStore {
    fn from(s: MemoryStore) -> Self {
        AnyStore::Memory(s)
    }
}

impl From<RedisStore> for AnyStore {
    fn from(s: RedisStore) -> Self {
        AnyStore::Redis(s)
    }
}

impl Store for AnyStore {
    fn in_process(&self) -> bool {
        matches!(self, AnyStore::Memory(_))
    }

    fn kind(&self) -> &'static str {
        match self {
            AnyStore::Memory(s) => s.kind(),
            AnyStore::Redis(s) => s.kind(),
            AnyStore::Hybrid(s) => s.kind(),
        }
    }

    fn bounds_calls(&self) -> Option<std::time::Duration> {
        match self {
            AnyStore::Redis(r) => r.bounds_calls(),
            _ => None,
        }
    }

    fn failure_domain(&self, rule: &str, key: DomainKey<'_>) -> Option<std::sync::Arc<str>> {
        match self {
            AnyStore::Redis(r) => r.failure_domain(rule, key),
            _ => {
                let _ = (rule, key);
                None
            }
        }
    }

    fn rules_in_use(&self, rules: &[Rule]) {
        if let AnyStore::Hybrid(h) = self {
            h.rules_in_use(rules);
        }
    }

    async fn check(
        &self,
        rule: &Rule,
        key: &[u8],
        cost: u64,
        at: Option<Micros>,
    ) -> Result<Decision, StoreError> {
        match self {
            AnyStore::Memory(s) => s.check(rule, key, cost, at).await,
            AnyStore::Redis(s) => s.check(rule, key, cost, at).await,
            AnyStore::Hybrid(s) => s.check(rule, key, cost, at).await,
        }
    }

    async fn check_all(
        &self,
        checks: &[KeyCheck<'_>],
        at: Option<Micros>,
    ) -> Result<MultiDecision, StoreError> {
        match self {
            AnyStore::Memory(s) => s.check_all(checks, at).await,
            // Boxed: a Redis check's future is over a kilobyte, and inline
            // it would make every caller's future (the memory store's
            // too) that large, copied each time it moves.
            AnyStore::Redis(s) => Box::pin(s.check_all(checks, at)).await,
            AnyStore::Hybrid(s) => Box::pin(s.check_all(checks, at)).await,
        }
    }

    async fn charge_all(
        &self,
        checks: &[KeyCheck<'_>],
        at: Option<Micros>,
    ) -> Result<Vec<Charged>, StoreError> {
        match self {
            AnyStore::Memory(s) => s.charge_all(checks, at).await,
            AnyStore::Redis(s) => Box::pin(s.charge_all(checks, at)).await,
            AnyStore::Hybrid(s) => Box::pin(s.charge_all(checks, at)).await,
        }
    }

    async fn refund_all(
        &self,
        checks: &[KeyCheck<'_>],
        at: Option<Micros>,
    ) -> Result<Vec<Charged>, StoreError> {
        match self {
            AnyStore::Memory(s) => s.refund_all(checks, at).await,
            AnyStore::Redis(s) => Box::pin(s.refund_all(checks, at)).await,
            AnyStore::Hybrid(s) => Box::pin(s.refund_all(checks, at)).await,
        }
    }

    async fn reserve_all(
        &self,
        checks: &[KeyCheck<'_>],
        ticket: &Ticket,
        ttl: Micros,
        at: Option<Micros>,
    ) -> Result<MultiDecision, StoreError> {
        match self {
            AnyStore::Memory(s) => s.reserve_all(checks, ticket, ttl, at).await,
            AnyStore::Redis(s) => Box::pin(s.reserve_all(checks, ticket, ttl, at)).await,
            AnyStore::Hybrid(s) => Box::pin(s.reserve_all(checks, ticket, ttl, at)).await,
        }
    }

    async fn settle(
        &self,
        ticket: &Ticket,
        pairs: &[SettlePair<'_>],
        at: Option<Micros>,
    ) -> Result<Settled, StoreError> {
        match self {
            AnyStore::Memory(s) => s.settle(ticket, pairs, at).await,
            AnyStore::Redis(s) => Box::pin(s.settle(ticket, pairs, at)).await,
            AnyStore::Hybrid(s) => Box::pin(s.settle(ticket, pairs, at)).await,
        }
    }

    async fn acquire_all(
        &self,
        checks: &[KeyCheck<'_>],
        ticket: &Ticket,
        at: Option<Micros>,
    ) -> Result<MultiDecision, StoreError> {
        match self {
            AnyStore::Memory(s) => s.acquire_all(checks, ticket, at).await,
            AnyStore::Redis(s) => Box::pin(s.acquire_all(checks, ticket, at)).await,
            AnyStore::Hybrid(s) => Box::pin(s.acquire_all(checks, ticket, at)).await,
        }
    }

    async fn release(
        &self,
        ticket: &Ticket,
        rules: &[&Rule],
        renew: bool,
        at: Option<Micros>,
    ) -> Result<Released, StoreError> {
        match self {
            AnyStore::Memory(s) => s.release(ticket, rules, renew, at).await,
            AnyStore::Redis(s) => Box::pin(s.release(ticket, rules, renew, at)).await,
            AnyStore::Hybrid(s) => Box::pin(s.release(ticket, rules, renew, at)).await,
        }
    }

    async fn ping(&self) -> Result<(), StoreError> {
        match self {
            AnyStore::Memory(s) => s.ping().await,
            AnyStore::Redis(s) => Store::ping(s).await,
            AnyStore::Hybrid(s) => s.ping().await,
        }
    }

    async fn reset(&self, rule: &Rule, key: &[u8]) -> Result<bool, StoreError> {
        match self {
            AnyStore::Memory(s) => s.reset(rule, key).await,
            AnyStore::Redis(s) => s.reset(rule, key).await,
            AnyStore::Hybrid(s) => s.reset(rule, key).await,
        }
    }

    async fn runtime_read(&self, since: Option<u64>) -> Result<Option<RuntimeEntries>, StoreError> {
        match self {
            AnyStore::Memory(s) => s.runtime_read(since).await,
            AnyStore::Redis(s) => s.runtime_read(since).await,
            AnyStore::Hybrid(s) => s.runtime_read(since).await,
        }
    }

    async fn runtime_write(
        &self,
        field: &[u8],
        value: Option<&[u8]>,
        expired: &[Vec<u8>],
    ) -> Result<bool, StoreError> {
        match self {
            AnyStore::Memory(s) => s.runtime_write(field, value, expired).await,
            AnyStore::Redis(s) => s.runtime_write(field, value, expired).await,
            AnyStore::Hybrid(s) => s.runtime_write(field, value, expired).await,
        }
    }

    async fn heartbeat(&self, replica: &str, ttl: Duration) -> Result<Option<u64>, StoreError> {
        match self {
            AnyStore::Memory(s) => s.heartbeat(replica, ttl).await,
            AnyStore::Redis(s) => s.heartbeat(replica, ttl).await,
            AnyStore::Hybrid(s) => s.heartbeat(replica, ttl).await,
        }
    }
}
