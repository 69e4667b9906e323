//! Stores keep per-key state and apply an algorithm atomically.
//!
//! The base capability is [`Store`]: the atomic single check and the
//! all-or-nothing multi-rule check. A store never knows about HTTP, gRPC or
//! config files.

mod any;
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
use crate::error::{StoreError, StoreErrorKind};
use crate::rule::Rule;
use crate::time::Micros;

pub use any::AnyStore;
pub use url::StoreUrl;

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

/// A place that keeps rate-limit state and decides checks atomically.
///
/// `at` is the time of the check in microseconds; `None` means the store's
/// own clock (the memory store's [`crate::Clock`], or the Redis server's
/// `TIME`). Tests and replay pass it explicitly, at most [`crate::MAX_TIME`]
/// (the [`crate::Limiter`] refuses later times; a store may answer garbage).
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
    /// keep; one answer per pair, in order. `checks` is not empty. The
    /// default answers an error: a store that does not implement charges.
    fn charge_all(
        &self,
        checks: &[KeyCheck<'_>],
        at: Option<Micros>,
    ) -> impl Future<Output = Result<Vec<Charged>, StoreError>> + Send {
        let _ = (checks, at);
        std::future::ready(Err(StoreError::new(
            StoreErrorKind::Protocol,
            "this store does not implement charges",
        )))
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

    fn ping(&self) -> impl Future<Output = Result<(), StoreError>> + Send {
        (**self).ping()
    }

    fn in_process(&self) -> bool {
        (**self).in_process()
    }

    fn heartbeat(
        &self,
        replica: &str,
        ttl: Duration,
    ) -> impl Future<Output = Result<Option<u64>, StoreError>> + Send {
        (**self).heartbeat(replica, ttl)
    }
}
