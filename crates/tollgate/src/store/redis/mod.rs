//! The Redis store: the five algorithms as atomic Lua scripts over one
//! shared counter per (rule, key), on standalone Redis, Sentinel or Cluster.
//!
//! * **Atomic**: each check is decided inside one script run (concurrent
//!   single checks may share one, each decided on its own, in order);
//!   all-or-nothing multi-rule checks are one script when their keys share
//!   a node.
//! * **One clock**: scripts read `TIME` on the Redis server, so replicas
//!   with skewed clocks decide identically. An explicit `t` is accepted only
//!   for replay and tests.
//! * **Every key has a TTL**, set by the same script that writes it, at the
//!   moment the key is back to its empty/full state. Denied checks write
//!   nothing.
//! * **Keys**: `{prefix}:{<rule>:<key>}:<algorithm>` (see [`keys`]); long
//!   keys hashed.
//! * **Connections**: one connection per node carries every concurrent
//!   check, pipelined. Standalone (over TCP or TLS) and Sentinel use
//!   tollgate's own connection (`conn/`: commands encoded straight into
//!   one write buffer, one `write` per batch, replies parsed in order: an
//!   eighth of redis-rs's client instructions per check; concurrent single
//!   checks batched into one script run, which costs Redis well under half
//!   as much per check); Cluster uses redis-rs. Reconnection is automatic; a check that
//!   may have run is never sent twice.
//!
//! ```no_run
//! use std::time::Duration;
//! use tollgate::store::redis::{RedisOptions, RedisStore};
//! use tollgate::{Algorithm, Limiter, RuleSpec};
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let store = RedisStore::connect("redis://127.0.0.1:6379", RedisOptions::default()).await?;
//! let rule = RuleSpec::new("per_user", Algorithm::Gcra, 100, Duration::from_secs(1)).build()?;
//! let limiter = Limiter::new(store, [rule])?;
//! let decision = limiter.check("per_user", "alice", 1).await?;
//! # Ok(()) }
//! ```

mod admin;
mod charge;
mod check;
mod conn;
mod encode;
mod eval;
pub(crate) mod hybrid_batch;
mod inflight;
pub mod keys;
mod open;
mod replicas;
mod reserve;
mod resp;
mod scripts;
mod slots;
mod tls;

/// The RESP reply parser, for the fuzz targets (`fuzz/`): not an API.
#[doc(hidden)]
pub use self::resp::fuzzing as resp_fuzzing;
pub use self::tls::RedisTls;

use std::sync::Arc;
use std::time::Duration;

use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use redis::{ErrorKind, RedisError, ServerErrorKind};

use self::conn::Conn;
use self::encode::{CHARGE, REFUND, RuleCache};
use self::resp::{Reply, Value};
use self::scripts::Scripts;
use crate::algorithm::Charged;
use crate::decision::{Decision, MultiDecision};
use crate::error::{StoreError, StoreErrorKind};
use crate::rule::Rule;
use crate::store::{DomainKey, KeyCheck, Released, SettlePair, Settled, Store};
use crate::ticket::Ticket;
use crate::time::Micros;

/// How the Redis store connects and names its keys.
#[derive(Debug, Clone)]
pub struct RedisOptions {
    /// Prefix of every key (default `tollgate`); no `{`, `}` or whitespace.
    pub prefix: String,
    /// Longest wait for one reply or one connection attempt.
    pub timeout: Duration,
    /// Added to every TTL when a check passes an explicit time (replay,
    /// tests): their clock is not the server's, so a key must outlive the
    /// real time the run takes. Default 10 minutes.
    pub explicit_time_ttl_margin: Duration,
    /// Make no connection in `connect`: the first check connects (default
    /// `false`: `connect` opens the first connection, so an unreachable
    /// server or a refused password is an error there). Lazily, a store
    /// whose server is down starts anyway and its checks fail as
    /// [`StoreErrorKind::Unavailable`] (the failure policy answers) until
    /// the server answers; a bad password then shows in every check's error.
    pub lazy: bool,
    /// TLS settings of a `rediss://` URL (CA, client certificate, server
    /// name); `None`: the system's CA roots and the URL's host. Any other
    /// URL refuses them.
    pub tls: Option<RedisTls>,
}

impl Default for RedisOptions {
    fn default() -> Self {
        Self {
            prefix: "tollgate".to_owned(),
            timeout: Duration::from_secs(1),
            explicit_time_ttl_margin: Duration::from_secs(600),
            lazy: false,
            tls: None,
        }
    }
}

enum Backend {
    /// Standalone (TCP or TLS) or Sentinel: tollgate's own pipelined
    /// connection (see `conn/`).
    Lean(Conn),
    /// Cluster: redis-rs, connected on first use when lazy (and again after
    /// a failed first attempt).
    Cluster {
        /// Boxed: a client is over 500 bytes, the other variants 8.
        client: Box<ClusterClient>,
        conn: tokio::sync::OnceCell<ClusterConnection>,
        /// Which master serves each slot: the breaker's failure domains.
        slots: slots::Slots,
    },
}

/// The Redis store. Cheap to clone: clones share connections.
#[derive(Clone)]
pub struct RedisStore {
    inner: Arc<Inner>,
}

struct Inner {
    backend: Backend,
    scripts: Scripts,
    prefix: String,
    margin_ms: u64,
}

impl std::fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisStore")
            .field("prefix", &self.inner.prefix)
            .finish_non_exhaustive()
    }
}

fn store_error(e: &RedisError) -> StoreError {
    let kind = if e.is_timeout() {
        StoreErrorKind::Timeout
    } else if e.is_io_error()
        || e.is_connection_dropped()
        || e.is_connection_refusal()
        || matches!(
            e.kind(),
            ErrorKind::Server(
                ServerErrorKind::ReadOnly
                    | ServerErrorKind::ClusterDown
                    | ServerErrorKind::MasterDown
                    | ServerErrorKind::TryAgain
                    | ServerErrorKind::BusyLoading
            ) | ErrorKind::ClusterConnectionNotFound
                | ErrorKind::MasterNameNotFoundBySentinel
        )
    {
        StoreErrorKind::Unavailable
    } else {
        StoreErrorKind::Protocol
    };
    StoreError::new(kind, e.to_string())
}

fn protocol(message: impl Into<String>) -> StoreError {
    StoreError::new(StoreErrorKind::Protocol, message)
}

impl RedisStore {
    /// The key prefix.
    #[must_use]
    pub fn prefix(&self) -> &str {
        &self.inner.prefix
    }

    /// The Redis key holding (rule, key)'s state.
    #[must_use]
    pub fn redis_key(&self, rule: &Rule, key: &[u8]) -> Vec<u8> {
        keys::redis_key(&self.inner.prefix, rule.name(), rule.algorithm(), key)
    }

    /// Each check as a script's pair, its Redis key built, in order (not
    /// merged: usage operations apply each pair in turn).
    fn pairs_of<'a>(&self, checks: &[KeyCheck<'a>]) -> Vec<encode::Pair<'a>> {
        checks
            .iter()
            .map(|c| encode::Pair {
                rule: c.rule,
                key: self.redis_key(c.rule, c.key),
                cost: c.cost,
            })
            .collect()
    }

    /// The slot map, on a Cluster.
    fn slots(&self) -> Option<&slots::Slots> {
        match &self.inner.backend {
            Backend::Cluster { slots, .. } => Some(slots),
            _ => None,
        }
    }

    /// Sends `PING`: whether the store answers (all nodes' answers are not
    /// required on a cluster; one suffices).
    ///
    /// # Errors
    /// The store did not answer.
    pub async fn ping(&self) -> Result<(), StoreError> {
        if let Backend::Lean(conn) = &self.inner.backend {
            let ping = |out: &mut Vec<u8>, _: &mut RuleCache| resp::command(out, &[b"PING"]);
            return match conn.call(ping).await? {
                Reply::Other(Value::Text(_)) => Ok(()),
                Reply::Error(e) => Err(conn::server_error(&e)),
                other => Err(protocol(format!("PING answered {other:?}"))),
            };
        }
        self.query::<String>(&redis::cmd("PING")).await.map(|_| ())
    }
}

impl Store for RedisStore {
    fn kind(&self) -> &'static str {
        "redis"
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

    async fn check_all(
        &self,
        checks: &[KeyCheck<'_>],
        at: Option<Micros>,
    ) -> Result<MultiDecision, StoreError> {
        // One pair is a single check: it can share a batch with other
        // concurrent checks (front doors check through `check_all`).
        if let [one] = checks {
            let d = self.check_one(one.rule, one.key, one.cost, at).await?;
            return Ok(MultiDecision::from_decisions(vec![d]));
        }
        self.check_many(checks, at).await
    }

    fn charge_all(
        &self,
        checks: &[KeyCheck<'_>],
        at: Option<Micros>,
    ) -> impl Future<Output = Result<Vec<Charged>, StoreError>> + Send {
        self.charge_pairs(checks, at, CHARGE)
    }

    fn refund_all(
        &self,
        checks: &[KeyCheck<'_>],
        at: Option<Micros>,
    ) -> impl Future<Output = Result<Vec<Charged>, StoreError>> + Send {
        self.charge_pairs(checks, at, REFUND)
    }

    fn reserve_all(
        &self,
        checks: &[KeyCheck<'_>],
        ticket: &Ticket,
        ttl: Micros,
        at: Option<Micros>,
    ) -> impl Future<Output = Result<MultiDecision, StoreError>> + Send {
        self.reserve_pairs(checks, ticket, ttl, at)
    }

    fn settle(
        &self,
        ticket: &Ticket,
        pairs: &[SettlePair<'_>],
        at: Option<Micros>,
    ) -> impl Future<Output = Result<Settled, StoreError>> + Send {
        self.settle_pairs(ticket, pairs, at)
    }

    fn acquire_all(
        &self,
        checks: &[KeyCheck<'_>],
        ticket: &Ticket,
        at: Option<Micros>,
    ) -> impl Future<Output = Result<MultiDecision, StoreError>> + Send {
        self.acquire_pairs(checks, ticket, at)
    }

    fn release(
        &self,
        ticket: &Ticket,
        rules: &[&Rule],
        renew: bool,
        at: Option<Micros>,
    ) -> impl Future<Output = Result<Released, StoreError>> + Send {
        self.release_pairs(ticket, rules, renew, at)
    }

    fn ping(&self) -> impl Future<Output = Result<(), StoreError>> + Send {
        RedisStore::ping(self)
    }

    fn bounds_calls(&self) -> Option<Duration> {
        match &self.inner.backend {
            // every request fails after the timeout (see `conn/`), and a
            // call made again after an error only within what is left
            // (`eval::lean_eval`)
            Backend::Lean(conn) => Some(conn.timeout()),
            _ => None,
        }
    }

    fn failure_domain(&self, rule: &str, key: DomainKey<'_>) -> Option<Arc<str>> {
        let slots = self.slots()?;
        self.read_slots_soon(false);
        // The slot of the hash tag every key of the pair has:
        // `{<rule>:<name>}`.
        let mut tag = Vec::with_capacity(rule.len() + 48);
        tag.push(b'{');
        tag.extend_from_slice(rule.as_bytes());
        tag.push(b':');
        match key {
            DomainKey::Caller(k) => keys::write_key_body(&mut tag, k),
            DomainKey::Named(n) => tag.extend_from_slice(n),
        }
        tag.push(b'}');
        slots.owner(keys::slot(&tag))
    }

    fn reset(
        &self,
        rule: &Rule,
        key: &[u8],
    ) -> impl Future<Output = Result<bool, StoreError>> + Send {
        self.reset_key(rule, key)
    }

    fn runtime_read(
        &self,
        since: Option<u64>,
    ) -> impl Future<Output = Result<Option<crate::store::RuntimeEntries>, StoreError>> + Send {
        self.read_runtime(since)
    }

    async fn runtime_write(
        &self,
        field: &[u8],
        value: Option<&[u8]>,
        expired: &[Vec<u8>],
    ) -> Result<bool, StoreError> {
        self.write_runtime(field, value, expired).await?;
        Ok(true)
    }

    async fn heartbeat(&self, replica: &str, ttl: Duration) -> Result<Option<u64>, StoreError> {
        self.replica_heartbeat(replica, ttl).await.map(Some)
    }
}
