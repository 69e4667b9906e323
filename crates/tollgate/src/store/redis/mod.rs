//! The Redis store: the five algorithms as atomic Lua scripts over one
//! shared counter per (rule, key), on standalone Redis, Sentinel or Cluster.
//!
//! * **Atomic**: each check is one script run; all-or-nothing multi-rule
//!   checks are one script when their keys share a node.
//! * **One clock**: scripts read `TIME` on the Redis server, so replicas
//!   with skewed clocks decide identically. An explicit `t` is accepted only
//!   for replay and tests.
//! * **Every key has a TTL**, set by the same script that writes it, at the
//!   moment the key is back to its empty/full state. Denied checks write
//!   nothing.
//! * **Keys**: `{prefix}:{<rule>:<key>}:<algorithm>` (see [`keys`]); long
//!   keys hashed.
//! * **Connections**: one multiplexed connection per node carries every
//!   concurrent check, pipelined; reconnection is automatic.
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

pub mod keys;
mod scripts;

use std::sync::Arc;
use std::time::Duration;

use futures_util::future::join_all;
use redis::aio::{ConnectionManager, ConnectionManagerConfig, MultiplexedConnection};
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use redis::sentinel::{SentinelClient, SentinelNodeConnectionInfo, SentinelServerType};
use redis::{Cmd, ErrorKind, RedisError, ServerErrorKind};

use self::scripts::{Script, Scripts};
use crate::decision::{Decision, MultiDecision};
use crate::error::{StoreError, StoreErrorKind};
use crate::rule::{Algorithm, Rule};
use crate::store::url::StoreUrl;
use crate::store::{KeyCheck, Store};
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
}

impl Default for RedisOptions {
    fn default() -> Self {
        Self {
            prefix: "tollgate".to_owned(),
            timeout: Duration::from_secs(1),
            explicit_time_ttl_margin: Duration::from_secs(600),
        }
    }
}

/// A check of one (rule, key) pair, ready for a script.
struct Pair<'a> {
    rule: &'a Rule,
    key: Vec<u8>,
    cost: u64,
}

impl Pair<'_> {
    /// The six script arguments of this pair (SEMANTICS.md parameters
    /// precomputed in exact integers; see `prelude.lua`).
    fn push_args(&self, cmd: &mut Cmd) {
        let rule = self.rule;
        // A cost above capacity is "never" whatever its size: keep it small.
        let cost = self.cost.min(rule.capacity().saturating_add(1));
        cmd.arg(scripts::code(rule.algorithm())).arg(cost);
        match rule.algorithm() {
            Algorithm::Gcra | Algorithm::TokenBucket => {
                cmd.arg(rule.increment_micros(cost))
                    .arg(rule.tau_micros())
                    .arg(rule.interval_micros())
                    .arg(rule.burst());
            }
            _ => {
                cmd.arg(rule.period_micros())
                    .arg(rule.limit())
                    .arg(0)
                    .arg(0);
            }
        }
    }
}

enum Backend {
    Standalone(ConnectionManager),
    Cluster(ClusterConnection),
    Sentinel(Box<SentinelBackend>),
}

/// A connection to the current master as the sentinels name it, replaced
/// when it fails or the master turns out to be a replica after a failover.
struct SentinelBackend {
    client: tokio::sync::Mutex<SentinelClient>,
    conn: parking_lot::RwLock<Option<MultiplexedConnection>>,
    timeout: Duration,
}

impl SentinelBackend {
    async fn connection(&self) -> Result<MultiplexedConnection, RedisError> {
        if let Some(c) = self.conn.read().clone() {
            return Ok(c);
        }
        let mut client = self.client.lock().await;
        if let Some(c) = self.conn.read().clone() {
            return Ok(c);
        }
        let config = redis::AsyncConnectionConfig::new()
            .set_connection_timeout(Some(self.timeout))
            .set_response_timeout(Some(self.timeout));
        let c = client.get_async_connection_with_config(&config).await?;
        *self.conn.write() = Some(c.clone());
        Ok(c)
    }

    fn invalidate(&self) {
        *self.conn.write() = None;
    }
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
    /// Connects to the Redis named by a store URL (CONTRACT.md).
    ///
    /// # Errors
    /// A bad URL or prefix, the `memory` URL, or `rediss://` without the
    /// `redis-tls` feature ([`StoreErrorKind::Protocol`]); no server
    /// reachable ([`StoreErrorKind::Unavailable`] / `Timeout`).
    pub async fn connect(url: &str, options: RedisOptions) -> Result<Self, StoreError> {
        let url: StoreUrl = url.parse().map_err(protocol)?;
        Self::connect_to(&url, options).await
    }

    /// Connects to the Redis a parsed store URL names.
    ///
    /// # Errors
    /// As [`RedisStore::connect`].
    pub async fn connect_to(url: &StoreUrl, options: RedisOptions) -> Result<Self, StoreError> {
        if options.prefix.is_empty()
            || options
                .prefix
                .chars()
                .any(|c| matches!(c, '{' | '}') || c.is_whitespace())
        {
            return Err(protocol(format!(
                "prefix {:?} must be non-empty without braces or whitespace",
                options.prefix
            )));
        }
        let t = options.timeout;
        let backend = match url {
            StoreUrl::Memory => {
                return Err(protocol("the memory URL names no Redis store"));
            }
            StoreUrl::Redis {
                tls,
                credentials,
                node,
                db,
            } => {
                if *tls && !cfg!(feature = "redis-tls") {
                    return Err(protocol(
                        "rediss:// needs tollgate built with the redis-tls feature",
                    ));
                }
                #[cfg(feature = "redis-tls")]
                if *tls {
                    // rustls needs a process-wide crypto provider; a second
                    // install (another store, or the application's) is fine.
                    let _ = rustls::crypto::ring::default_provider().install_default();
                }
                let client = redis::Client::open(node.client_url(*tls, credentials, *db))
                    .map_err(|e| store_error(&e))?;
                let config = ConnectionManagerConfig::new()
                    .set_connection_timeout(Some(t))
                    .set_response_timeout(Some(t))
                    .set_number_of_retries(2)
                    .set_max_delay(Duration::from_secs(1));
                Backend::Standalone(
                    ConnectionManager::new_with_config(client, config)
                        .await
                        .map_err(|e| store_error(&e))?,
                )
            }
            StoreUrl::Cluster { credentials, nodes } => {
                let nodes = nodes.iter().map(|n| n.client_url(false, credentials, 0));
                let client = ClusterClient::builder(nodes)
                    .connection_timeout(t)
                    .response_timeout(t)
                    .retries(3)
                    .build()
                    .map_err(|e| store_error(&e))?;
                Backend::Cluster(
                    client
                        .get_async_connection()
                        .await
                        .map_err(|e| store_error(&e))?,
                )
            }
            StoreUrl::Sentinel {
                credentials,
                nodes,
                master,
            } => {
                let mut info = redis::RedisConnectionInfo::default();
                if let Some(user) = &credentials.username {
                    info = info.set_username(user);
                }
                if let Some(pass) = &credentials.password {
                    info = info.set_password(pass);
                }
                let sentinels: Vec<String> = nodes
                    .iter()
                    .map(|n| n.client_url(false, &super::url::Credentials::default(), 0))
                    .collect();
                let node = SentinelNodeConnectionInfo::default().set_redis_connection_info(info);
                let client = SentinelClient::build(
                    sentinels,
                    master.clone(),
                    Some(node),
                    SentinelServerType::Master,
                )
                .map_err(|e| store_error(&e))?;
                let backend = SentinelBackend {
                    client: tokio::sync::Mutex::new(client),
                    conn: parking_lot::RwLock::new(None),
                    timeout: t,
                };
                backend.connection().await.map_err(|e| store_error(&e))?;
                Backend::Sentinel(Box::new(backend))
            }
        };
        Ok(Self {
            inner: Arc::new(Inner {
                backend,
                scripts: Scripts::new(),
                prefix: options.prefix,
                margin_ms: u64::try_from(options.explicit_time_ttl_margin.as_millis())
                    .unwrap_or(u64::MAX),
            }),
        })
    }

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

    /// Sends `PING`: whether the store answers (all nodes' answers are not
    /// required on a cluster; one suffices).
    ///
    /// # Errors
    /// The store did not answer.
    pub async fn ping(&self) -> Result<(), StoreError> {
        self.query::<String>(&redis::cmd("PING")).await.map(|_| ())
    }

    async fn query<T: redis::FromRedisValue>(&self, cmd: &Cmd) -> Result<T, StoreError> {
        self.query_raw(cmd).await.map_err(|e| store_error(&e))
    }

    async fn query_raw<T: redis::FromRedisValue>(&self, cmd: &Cmd) -> Result<T, RedisError> {
        match &self.inner.backend {
            Backend::Standalone(c) => cmd.query_async(&mut c.clone()).await,
            Backend::Cluster(c) => cmd.query_async(&mut c.clone()).await,
            Backend::Sentinel(s) => {
                let result = match s.connection().await {
                    Ok(mut c) => cmd.query_async(&mut c).await,
                    Err(e) => Err(e),
                };
                if let Err(e) = &result {
                    // After a failover the old master answers READONLY; a
                    // dead connection stays dead: look the master up again.
                    let read_only = e.kind() == ErrorKind::Server(ServerErrorKind::ReadOnly);
                    if read_only
                        || e.is_io_error()
                        || e.is_connection_dropped()
                        || e.is_connection_refusal()
                        || e.is_timeout()
                    {
                        s.invalidate();
                    }
                    if read_only || e.is_connection_refusal() {
                        // Not executed: safe to try once more on the new master.
                        let mut c = s.connection().await?;
                        return cmd.query_async(&mut c).await;
                    }
                }
                result
            }
        }
    }

    /// Runs `script` over `pairs` in `mode`, falling back from EVALSHA to
    /// EVAL when the server lost its script cache. Returns the script's time
    /// and one decision per pair.
    async fn run(
        &self,
        script: &Script,
        pairs: &[Pair<'_>],
        mode: &str,
        at: Option<Micros>,
    ) -> Result<(Micros, Vec<Decision>), StoreError> {
        let build = |verb: &str, body: &str| {
            let mut cmd = redis::cmd(verb);
            cmd.arg(body).arg(pairs.len());
            for p in pairs {
                cmd.arg(&p.key);
            }
            match at {
                Some(t) => cmd.arg(t).arg(self.inner.margin_ms),
                None => cmd.arg("").arg(0),
            };
            cmd.arg(pairs.len()).arg(mode);
            for p in pairs {
                p.push_args(&mut cmd);
            }
            cmd
        };
        let reply: Vec<i64> = match self.query_raw(&build("EVALSHA", &script.sha)).await {
            Err(e) if e.kind() == ErrorKind::Server(ServerErrorKind::NoScript) => self
                .query_raw(&build("EVAL", script.source))
                .await
                .map_err(|e| store_error(&e))?,
            other => other.map_err(|e| store_error(&e))?,
        };
        parse_reply(&reply, pairs)
    }
}

fn parse_reply(reply: &[i64], pairs: &[Pair<'_>]) -> Result<(Micros, Vec<Decision>), StoreError> {
    if reply.len() != 1 + 4 * pairs.len() {
        return Err(protocol(format!(
            "script replied {} integers for {} pairs",
            reply.len(),
            pairs.len()
        )));
    }
    let unsigned = |v: i64| u64::try_from(v).map_err(|_| protocol(format!("negative value {v}")));
    let t = unsigned(reply[0])?;
    let decisions = reply[1..]
        .chunks_exact(4)
        .zip(pairs)
        .map(|(r, p)| {
            Ok(Decision {
                allowed: r[0] == 1,
                limit: p.rule.capacity(),
                remaining: unsigned(r[1])?,
                reset_after: Duration::from_micros(unsigned(r[2])?),
                retry_after: if r[3] < 0 {
                    None
                } else {
                    Some(Duration::from_micros(unsigned(r[3])?))
                },
            })
        })
        .collect::<Result<Vec<_>, StoreError>>()?;
    Ok((t, decisions))
}

/// Merges pairs naming the same (rule, key), adding their costs. Returns the
/// merged pairs and, for each input, the index of its merged pair.
fn merge<'a>(prefix: &str, checks: &[KeyCheck<'a>]) -> (Vec<Pair<'a>>, Vec<usize>) {
    let mut pairs: Vec<Pair<'a>> = Vec::with_capacity(checks.len());
    let mut index = Vec::with_capacity(checks.len());
    for c in checks {
        let key = keys::redis_key(prefix, c.rule.name(), c.rule.algorithm(), c.key);
        if let Some(i) = pairs.iter().position(|p| p.key == key) {
            pairs[i].cost = pairs[i].cost.saturating_add(c.cost);
            index.push(i);
        } else {
            index.push(pairs.len());
            pairs.push(Pair {
                rule: c.rule,
                key,
                cost: c.cost,
            });
        }
    }
    (pairs, index)
}

impl RedisStore {
    async fn check_one(
        &self,
        rule: &Rule,
        key: &[u8],
        cost: u64,
        at: Option<Micros>,
    ) -> Result<Decision, StoreError> {
        let pair = Pair {
            rule,
            key: self.redis_key(rule, key),
            cost,
        };
        let script = self.inner.scripts.single(rule.algorithm());
        let (_, mut d) = self
            .run(script, std::slice::from_ref(&pair), "c", at)
            .await?;
        d.pop().ok_or_else(|| protocol("empty reply"))
    }

    async fn check_many(
        &self,
        checks: &[KeyCheck<'_>],
        at: Option<Micros>,
    ) -> Result<MultiDecision, StoreError> {
        let (pairs, index) = merge(&self.inner.prefix, checks);
        let multi = &self.inner.scripts.multi;
        let decided = if matches!(self.inner.backend, Backend::Cluster(_)) {
            self.check_across_slots(pairs, at).await?
        } else {
            self.run(multi, &pairs, "c", at).await?.1
        };
        Ok(MultiDecision::from_decisions(
            index.into_iter().map(|i| decided[i]).collect(),
        ))
    }

    /// All-or-nothing over pairs that may live on different cluster nodes.
    ///
    /// Pairs are grouped by slot; each group is atomic by itself. First a
    /// dry run of every group (in parallel) decides without writing: if any
    /// pair denies, nothing was consumed and that is the answer. Otherwise
    /// the groups consume in slot order; if one now denies (traffic raced
    /// in between), the groups already consumed are refunded.
    async fn check_across_slots(
        &self,
        pairs: Vec<Pair<'_>>,
        at: Option<Micros>,
    ) -> Result<Vec<Decision>, StoreError> {
        let multi = &self.inner.scripts.multi;
        let mut groups: Vec<(u16, Vec<usize>)> = Vec::new();
        for (i, p) in pairs.iter().enumerate() {
            let slot = keys::slot(&p.key);
            match groups.iter_mut().find(|g| g.0 == slot) {
                Some(g) => g.1.push(i),
                None => groups.push((slot, vec![i])),
            }
        }
        if groups.len() == 1 {
            return Ok(self.run(multi, &pairs, "c", at).await?.1);
        }
        groups.sort_unstable_by_key(|g| g.0);
        let take = |g: &[usize]| -> Vec<Pair<'_>> {
            g.iter()
                .map(|&i| Pair {
                    rule: pairs[i].rule,
                    key: pairs[i].key.clone(),
                    cost: pairs[i].cost,
                })
                .collect()
        };
        let grouped: Vec<Vec<Pair<'_>>> = groups.iter().map(|g| take(&g.1)).collect();
        let mut out: Vec<Option<Decision>> = vec![None; pairs.len()];

        let dry = join_all(grouped.iter().map(|g| self.run(multi, g, "d", at))).await;
        let mut all = true;
        for (g, result) in groups.iter().zip(dry) {
            let (_, ds) = result?;
            for (&i, d) in g.1.iter().zip(ds) {
                all &= d.allowed;
                out[i] = Some(d);
            }
        }
        if all {
            let mut consumed: Vec<(usize, Micros)> = Vec::new();
            for (n, g) in groups.iter().enumerate() {
                let (t, ds) = match self.run(multi, &grouped[n], "c", at).await {
                    Ok(r) => r,
                    Err(e) => {
                        self.refund(&grouped, &consumed).await;
                        return Err(e);
                    }
                };
                let admitted = ds.iter().all(|d| d.allowed);
                for (&i, d) in g.1.iter().zip(ds) {
                    out[i] = Some(d);
                }
                if admitted {
                    consumed.push((n, t));
                } else {
                    for (m, ds) in self.refund(&grouped, &consumed).await {
                        for (&i, d) in groups[m].1.iter().zip(ds) {
                            out[i] = Some(d);
                        }
                    }
                    break;
                }
            }
        }
        out.into_iter()
            .map(|d| d.ok_or_else(|| protocol("a pair was left undecided")))
            .collect()
    }

    /// Gives back what `consumed` groups took; returns their peeks after.
    async fn refund(
        &self,
        grouped: &[Vec<Pair<'_>>],
        consumed: &[(usize, Micros)],
    ) -> Vec<(usize, Vec<Decision>)> {
        let multi = &self.inner.scripts.multi;
        let runs = consumed
            .iter()
            .map(|&(n, t)| async move { (n, self.run(multi, &grouped[n], "r", Some(t)).await) });
        join_all(runs)
            .await
            .into_iter()
            .filter_map(|(n, r)| r.ok().map(|(_, ds)| (n, ds)))
            .collect()
    }
}

impl Store for RedisStore {
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
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rule::RuleSpec;

    /// The refund a cross-node multi-check issues when a later node denies
    /// (traffic raced in between its dry run and its consumption) gives back
    /// exactly what was taken: every algorithm's state reads as before.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_refund_restores_the_state_before_the_consumption() {
        let server = redis_harness::RedisServer::start();
        let store = RedisStore::connect(&server.url(), RedisOptions::default())
            .await
            .expect("connect");
        let multi = &store.inner.scripts.multi;
        for algorithm in Algorithm::ALL {
            let rule = RuleSpec::new(
                format!("r_{algorithm}"),
                algorithm,
                5,
                Duration::from_secs(10),
            )
            .build()
            .unwrap();
            let key = store.redis_key(&rule, b"k");
            let pair = |cost| Pair {
                rule: &rule,
                key: key.clone(),
                cost,
            };
            let t0 = 1_764_000_000_000_000;
            // Some earlier history, then a peek to compare against.
            store.run(multi, &[pair(2)], "c", Some(t0)).await.unwrap();
            let t1 = t0 + 1_300_000;
            let (_, before) = store.run(multi, &[pair(0)], "c", Some(t1)).await.unwrap();
            // Consume 2 at t1, then refund them.
            let (t, taken) = store.run(multi, &[pair(2)], "c", Some(t1)).await.unwrap();
            assert_eq!(t, t1);
            assert!(taken[0].allowed, "{algorithm}");
            assert_eq!(taken[0].remaining + 2, before[0].remaining, "{algorithm}");
            let (_, refunded) = store.run(multi, &[pair(2)], "r", Some(t)).await.unwrap();
            assert_eq!(refunded, before, "{algorithm}: refund peek");
            let (_, after) = store.run(multi, &[pair(0)], "c", Some(t1)).await.unwrap();
            assert_eq!(after, before, "{algorithm}: state after the refund");
        }
        assert!(server.keys_without_ttl().is_empty());
    }
}
