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
//!   check, pipelined. Standalone and Sentinel over plain TCP use
//!   tollgate's own connection (`conn.rs`: commands encoded straight into
//!   one write buffer, one `write` per batch, replies parsed in order: an
//!   eighth of redis-rs's client instructions per check; concurrent single
//!   checks batched into one script run, which costs Redis well under half
//!   as much per check); Cluster and TLS
//!   (`rediss://`) use redis-rs. Reconnection is automatic; a check that
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

mod conn;
pub mod keys;
pub(crate) mod lease;
mod replicas;
mod resp;
mod scripts;

use std::sync::Arc;
use std::time::Duration;

use futures_util::future::join_all;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use redis::{Cmd, ErrorKind, RedisError, ServerErrorKind};

use self::conn::Conn;
use self::resp::{Args, Encoder, Ints, Reply, Value};
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
    /// Make no connection in `connect`: the first check connects (default
    /// `false`: `connect` opens the first connection, so an unreachable
    /// server or a refused password is an error there). Lazily, a store
    /// whose server is down starts anyway and its checks fail as
    /// [`StoreErrorKind::Unavailable`] (the failure policy answers) until
    /// the server answers; a bad password then shows in every check's error.
    pub lazy: bool,
}

impl Default for RedisOptions {
    fn default() -> Self {
        Self {
            prefix: "tollgate".to_owned(),
            timeout: Duration::from_secs(1),
            explicit_time_ttl_margin: Duration::from_secs(600),
            lazy: false,
        }
    }
}

/// A check of one (rule, key) pair, ready for a script.
struct Pair<'a> {
    rule: &'a Rule,
    key: Vec<u8>,
    cost: u64,
}

/// The pairs of one script run: a single check (its Redis key written
/// straight into the command), or merged pairs with their keys built.
#[derive(Clone, Copy)]
enum Pairs<'a, 'r> {
    One {
        rule: &'r Rule,
        key: &'a [u8],
        cost: u64,
    },
    Many(&'a [Pair<'r>]),
}

impl Pairs<'_, '_> {
    fn len(&self) -> usize {
        match self {
            Pairs::One { .. } => 1,
            Pairs::Many(pairs) => pairs.len(),
        }
    }

    fn rule_cost(&self, i: usize) -> (&Rule, u64) {
        match self {
            Pairs::One { rule, cost, .. } => (rule, *cost),
            Pairs::Many(pairs) => (pairs[i].rule, pairs[i].cost),
        }
    }

    fn key(&self, i: usize, prefix: &str, a: &mut impl Args) {
        match self {
            Pairs::One { rule, key, .. } => a.redis_key(prefix, rule, key),
            Pairs::Many(pairs) => a.bytes(&pairs[i].key),
        }
    }
}

/// The six script arguments of a pair (docs/semantics.md parameters precomputed
/// in exact integers; see `prelude.lua`).
fn push_pair_args(a: &mut impl Args, rule: &Rule, cost: u64) {
    let cost = clamp_cost(rule, cost);
    a.uint(u64::from(scripts::code(rule.algorithm())));
    a.uint(cost);
    if has_increment(rule.algorithm()) {
        a.uint(rule.increment_micros(cost));
    }
    push_rule_args(a, rule);
}

/// A cost above capacity is "never" whatever its size: keep it small.
fn clamp_cost(rule: &Rule, cost: u64) -> u64 {
    cost.min(rule.capacity().saturating_add(1))
}

/// Whether the pair's third argument is the cost's increment (GCRA and
/// token bucket) rather than a rule constant.
fn has_increment(algorithm: Algorithm) -> bool {
    matches!(algorithm, Algorithm::Gcra | Algorithm::TokenBucket)
}

/// The pair arguments that depend on the rule alone (after the code, the
/// cost and any increment).
fn push_rule_args(a: &mut impl Args, rule: &Rule) {
    if has_increment(rule.algorithm()) {
        a.uint(rule.tau_micros());
        a.uint(rule.interval_micros());
        a.uint(rule.burst());
    } else {
        a.uint(rule.period_micros());
        a.uint(rule.limit());
        a.uint(0);
        a.uint(0);
    }
}

/// Most rules a connection keeps encoded.
const RULE_CACHE: usize = 16;

/// The encoded bytes of a single check that depend on its rule alone (and
/// the store's prefix), kept for the last rules seen: a service checks the
/// same few rules over and over, and formatting them was most of what
/// encoding a check cost. An entry is found by the rule's equality: the
/// same `Rule` (its shared address: the entry holds a clone, so the
/// address is never reused while cached) in one comparison, else equal
/// contents; so a hit is always right. Lives in the connection's state,
/// under the lock commands are encoded under.
#[derive(Default)]
pub(super) struct RuleCache {
    entries: Vec<RuleBytes>,
    next: usize,
}

struct RuleBytes {
    /// The rule (a clone: its address cannot be reused while cached, and
    /// `Rule`'s equality compares the addresses first, then the contents).
    rule: Rule,
    /// `{prefix}:{<rule>:`
    key_head: Vec<u8>,
    /// `}:<algorithm>` and the `\r\n` ending the key's bulk string.
    key_tail: Vec<u8>,
    /// The algorithm's code, encoded.
    code: Vec<u8>,
    /// [`push_rule_args`], encoded.
    rule_args: Vec<u8>,
    /// All six pair arguments of a check of cost 1 (the usual one), encoded.
    pair_cost_one: Vec<u8>,
}

impl RuleBytes {
    fn new(prefix: &str, rule: &Rule) -> Self {
        let mut key_head = Vec::new();
        keys::write_key_head(&mut key_head, prefix, rule.name());
        let mut key_tail = Vec::new();
        keys::write_key_tail(&mut key_tail, rule.algorithm());
        key_tail.extend_from_slice(b"\r\n");
        let mut code = Vec::new();
        Encoder::append(&mut code).uint(u64::from(scripts::code(rule.algorithm())));
        let mut rule_args = Vec::new();
        push_rule_args(&mut Encoder::append(&mut rule_args), rule);
        let mut pair_cost_one = Vec::new();
        push_pair_args(&mut Encoder::append(&mut pair_cost_one), rule, 1);
        Self {
            rule: rule.clone(),
            key_head,
            key_tail,
            code,
            rule_args,
            pair_cost_one,
        }
    }

    fn is(&self, rule: &Rule) -> bool {
        self.rule == *rule
    }
}

impl RuleCache {
    fn get(&mut self, prefix: &str, rule: &Rule) -> &RuleBytes {
        let i = match self.entries.iter().position(|e| e.is(rule)) {
            Some(i) => i,
            None if self.entries.len() < RULE_CACHE => {
                self.entries.push(RuleBytes::new(prefix, rule));
                self.entries.len() - 1
            }
            None => {
                let i = self.next;
                self.next = (i + 1) % RULE_CACHE;
                self.entries[i] = RuleBytes::new(prefix, rule);
                i
            }
        };
        &self.entries[i]
    }
}

enum Backend {
    /// Standalone or Sentinel over plain TCP: tollgate's own pipelined
    /// connection (see `conn.rs`).
    Lean(Conn),
    /// Standalone over TLS (`rediss://`): redis-rs.
    Standalone(ConnectionManager),
    /// Cluster: redis-rs, connected on first use when lazy (and again after
    /// a failed first attempt).
    Cluster {
        /// Boxed: a client is over 500 bytes, the other variants 8.
        client: Box<ClusterClient>,
        conn: tokio::sync::OnceCell<ClusterConnection>,
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
    /// Connects to the Redis named by a store URL (docs/cli.md, "Store URLs").
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
        let scripts = Scripts::new();
        let margin_ms =
            u64::try_from(options.explicit_time_ttl_margin.as_millis()).unwrap_or(u64::MAX);
        let checks = conn::Checks {
            scripts: scripts.clone(),
            margin_ms,
        };
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
                if !*tls {
                    let config = conn::Config {
                        target: conn::Target::Direct(node.clone()),
                        credentials: credentials.clone(),
                        db: *db,
                        timeout: t,
                    };
                    Backend::Lean(Conn::connect(config, checks.clone(), options.lazy).await?)
                } else {
                    let client = redis::Client::open(node.client_url(*tls, credentials, *db))
                        .map_err(|e| store_error(&e))?;
                    let config = ConnectionManagerConfig::new()
                        .set_connection_timeout(Some(t))
                        .set_response_timeout(Some(t))
                        .set_number_of_retries(2)
                        .set_max_delay(Duration::from_secs(1));
                    let manager = if options.lazy {
                        ConnectionManager::new_lazy_with_config(client, config)
                    } else {
                        ConnectionManager::new_with_config(client, config).await
                    };
                    Backend::Standalone(manager.map_err(|e| store_error(&e))?)
                }
            }
            StoreUrl::Cluster { credentials, nodes } => {
                let nodes = nodes.iter().map(|n| n.client_url(false, credentials, 0));
                let client = ClusterClient::builder(nodes)
                    .connection_timeout(t)
                    .response_timeout(t)
                    .retries(3)
                    .build()
                    .map_err(|e| store_error(&e))?;
                let conn = tokio::sync::OnceCell::new();
                if !options.lazy {
                    let first = client
                        .get_async_connection()
                        .await
                        .map_err(|e| store_error(&e))?;
                    let _ = conn.set(first);
                }
                Backend::Cluster {
                    client: Box::new(client),
                    conn,
                }
            }
            StoreUrl::Sentinel {
                credentials,
                nodes,
                master,
            } => {
                let config = conn::Config {
                    target: conn::Target::Sentinel {
                        sentinels: nodes.clone(),
                        master: master.clone(),
                    },
                    credentials: credentials.clone(),
                    db: 0,
                    timeout: t,
                };
                Backend::Lean(Conn::connect(config, checks.clone(), options.lazy).await?)
            }
        };
        Ok(Self {
            inner: Arc::new(Inner {
                backend,
                scripts,
                prefix: options.prefix,
                margin_ms,
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

    async fn query<T: redis::FromRedisValue>(&self, cmd: &Cmd) -> Result<T, StoreError> {
        self.query_raw(cmd).await.map_err(|e| store_error(&e))
    }

    /// Runs `cmd` over a redis-rs connection (TLS or Cluster).
    async fn query_raw<T: redis::FromRedisValue>(&self, cmd: &Cmd) -> Result<T, RedisError> {
        match &self.inner.backend {
            Backend::Standalone(c) => cmd.query_async(&mut c.clone()).await,
            Backend::Cluster { client, conn } => {
                let c = conn
                    .get_or_try_init(|| client.get_async_connection())
                    .await?;
                cmd.query_async(&mut c.clone()).await
            }
            Backend::Lean(_) => Err(RedisError::from((
                ErrorKind::Client,
                "tollgate: query_raw on a lean connection",
            ))),
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
        let reply = self.eval(script, Pairs::Many(pairs), mode, at).await?;
        parse_reply(reply.as_slice(), pairs)
    }

    /// Runs `script` and returns its integers, falling back from EVALSHA
    /// to EVAL on `NOSCRIPT` (after a restart, a failover or `SCRIPT
    /// FLUSH`), and, behind Sentinel, trying once more on `READONLY` (the
    /// master was demoted; nothing ran, and the connection looks the new
    /// master up).
    async fn eval(
        &self,
        script: &Script,
        pairs: Pairs<'_, '_>,
        mode: &str,
        at: Option<Micros>,
    ) -> Result<Ints, StoreError> {
        let run = Run { pairs, mode, at };
        let (prefix, margin_ms) = (self.inner.prefix.as_str(), self.inner.margin_ms);
        let Backend::Lean(conn) = &self.inner.backend else {
            let build = |verb: &str, body: &str| {
                let mut cmd = redis::cmd(verb);
                cmd.arg(body).arg(pairs.len());
                script_args(&mut cmd, prefix, margin_ms, run);
                cmd
            };
            let reply: Vec<i64> = match self.query_raw(&build("EVALSHA", &script.sha)).await {
                Err(e) if e.kind() == ErrorKind::Server(ServerErrorKind::NoScript) => self
                    .query_raw(&build("EVAL", script.source))
                    .await
                    .map_err(|e| store_error(&e))?,
                other => other.map_err(|e| store_error(&e))?,
            };
            return Ok(Ints::Heap(reply));
        };
        lean_eval(conn, |by_sha| {
            conn.call(move |out: &mut Vec<u8>, cache: &mut RuleCache| {
                encode_run(out, cache, script, by_sha, prefix, margin_ms, run);
            })
        })
        .await
    }
}

/// Runs a script on the lean connection through `call(by_sha)`, falling
/// back from `EVALSHA` to `EVAL` on `NOSCRIPT` (nothing ran), and, behind
/// Sentinel, trying once more on `READONLY` (the master was demoted;
/// nothing ran, and the connection looks the new master up).
async fn lean_eval<F, C>(conn: &Conn, mut call: F) -> Result<Ints, StoreError>
where
    F: FnMut(bool) -> C,
    C: Future<Output = Result<Reply, StoreError>>,
{
    let (mut by_sha, mut retried) = (true, false);
    loop {
        match call(by_sha).await? {
            Reply::Ints(ints) => return Ok(ints),
            Reply::Error(e) if by_sha && e.starts_with("NOSCRIPT") => by_sha = false,
            Reply::Error(e) if !retried && e.starts_with("READONLY") && conn.follows_sentinel() => {
                retried = true;
            }
            Reply::Error(e) => return Err(conn::server_error(&e)),
            Reply::Other(v) => return Err(protocol(format!("the script answered {v:?}"))),
        }
    }
}

/// One run of a script: its pairs, mode (`c`onsume, `d`ry run, `r`efund)
/// and explicit time, if any.
#[derive(Clone, Copy)]
struct Run<'a, 'r> {
    pairs: Pairs<'a, 'r>,
    mode: &'a str,
    at: Option<Micros>,
}

/// The arguments after `EVALSHA sha nkeys` or `EVAL source nkeys`:
/// `keys… t margin n mode` and six per pair (see `check.lua`), with keys
/// under `prefix` and `margin_ms` added to TTLs at explicit times.
fn script_args(a: &mut impl Args, prefix: &str, margin_ms: u64, run: Run<'_, '_>) {
    let Run { pairs, mode, at } = run;
    let n = pairs.len();
    for i in 0..n {
        pairs.key(i, prefix, a);
    }
    push_common_args(a, n, margin_ms, mode, at);
    for i in 0..n {
        let (rule, cost) = pairs.rule_cost(i);
        push_pair_args(a, rule, cost);
    }
}

/// `t margin n mode` (see `check.lua`).
fn push_common_args(a: &mut impl Args, n: usize, margin_ms: u64, mode: &str, at: Option<Micros>) {
    match at {
        // The common case, encoded once.
        None if n == 1 && mode == "c" => a.preencoded(NOW_ONE_CHECK.0, NOW_ONE_CHECK.1),
        None => {
            a.bytes(b"");
            a.uint(0);
            a.uint(n as u64);
            a.bytes(mode.as_bytes());
        }
        Some(t) => {
            a.uint(t);
            a.uint(margin_ms);
            a.uint(n as u64);
            a.bytes(mode.as_bytes());
        }
    }
}

/// Appends `run` of `script` (by hash, or with `by_sha` false by source)
/// as one RESP command; a single check's rule-dependent bytes come from
/// (and go to) `cache`.
fn encode_run(
    out: &mut Vec<u8>,
    cache: &mut RuleCache,
    script: &Script,
    by_sha: bool,
    prefix: &str,
    margin_ms: u64,
    run: Run<'_, '_>,
) {
    let Pairs::One { rule, key, cost } = run.pairs else {
        let n = run.pairs.len();
        let mut e = Encoder::command(out, 7 + 7 * n);
        e.encoded(script.head(by_sha));
        e.uint(n as u64);
        script_args(&mut e, prefix, margin_ms, run);
        return;
    };
    let cached = cache.get(prefix, rule);
    Encoder::append(out).encoded(script.head_one_key(by_sha));
    encode_key(out, cached, key);
    push_common_args(&mut Encoder::append(out), 1, margin_ms, run.mode, run.at);
    encode_pair(out, cached, rule, cost);
}

/// Appends the Redis key of (`cached`'s rule, `key`) as a RESP bulk string.
fn encode_key(out: &mut Vec<u8>, cached: &RuleBytes, key: &[u8]) {
    let mut e = Encoder::append(out);
    // A bulk string (its \r\n ends `key_tail`).
    e.bulk_header(cached.key_head.len() + keys::key_body_len(key) + cached.key_tail.len() - 2);
    e.encoded(&cached.key_head);
    e.with_buffer(|out| keys::write_key_body(out, key));
    e.encoded(&cached.key_tail);
}

/// Appends the six pair arguments of a check of `rule` (`cached`'s).
fn encode_pair(out: &mut Vec<u8>, cached: &RuleBytes, rule: &Rule, cost: u64) {
    let mut e = Encoder::append(out);
    if cost == 1 {
        e.encoded(&cached.pair_cost_one);
        return;
    }
    e.encoded(&cached.code);
    let cost = clamp_cost(rule, cost);
    e.uint(cost);
    if has_increment(rule.algorithm()) {
        e.uint(rule.increment_micros(cost));
    }
    e.encoded(&cached.rule_args);
}

/// Appends a single check's parts for [`Conn::check`]: its key, then its
/// pair arguments. Returns the key's length.
fn encode_check(
    out: &mut Vec<u8>,
    cache: &mut RuleCache,
    prefix: &str,
    rule: &Rule,
    key: &[u8],
    cost: u64,
) -> usize {
    let cached = cache.get(prefix, rule);
    let start = out.len();
    encode_key(out, cached, key);
    let key_len = out.len() - start;
    encode_pair(out, cached, rule, cost);
    key_len
}

/// `t margin n mode` of a single check at the server's time (`"" 0 1 c`),
/// and their RESP encoding.
const NOW_ONE_CHECK: (&[&[u8]], &[u8]) = (
    &[b"", b"0", b"1", b"c"],
    b"$0\r\n\r\n$1\r\n0\r\n$1\r\n1\r\n$1\r\nc\r\n",
);

/// One pair's decision from its four integers.
fn decision(r: &[i64], rule: &Rule) -> Result<Decision, StoreError> {
    let unsigned = |v: i64| u64::try_from(v).map_err(|_| protocol(format!("negative value {v}")));
    Ok(Decision {
        allowed: r[0] == 1,
        limit: rule.capacity(),
        remaining: unsigned(r[1])?,
        reset_after: Duration::from_micros(unsigned(r[2])?),
        retry_after: if r[3] < 0 {
            None
        } else {
            Some(Duration::from_micros(unsigned(r[3])?))
        },
    })
}

fn parse_reply(reply: &[i64], pairs: &[Pair<'_>]) -> Result<(Micros, Vec<Decision>), StoreError> {
    if reply.len() != 1 + 4 * pairs.len() {
        return Err(protocol(format!(
            "script replied {} integers for {} pairs",
            reply.len(),
            pairs.len()
        )));
    }
    let t = u64::try_from(reply[0]).map_err(|_| protocol(format!("negative time {}", reply[0])))?;
    let decisions = reply[1..]
        .chunks_exact(4)
        .zip(pairs)
        .map(|(r, p)| decision(r, p.rule))
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
        let reply = match &self.inner.backend {
            // May share a script run with other checks (see `conn.rs`).
            Backend::Lean(conn) => {
                let (code, prefix) = (scripts::code(rule.algorithm()), &*self.inner.prefix);
                lean_eval(conn, |by_sha| {
                    let encode = move |out: &mut Vec<u8>, cache: &mut RuleCache| {
                        encode_check(out, cache, prefix, rule, key, cost)
                    };
                    conn.check(code, by_sha, at, encode)
                })
                .await?
            }
            _ => {
                let script = self.inner.scripts.single(rule.algorithm());
                self.eval(script, Pairs::One { rule, key, cost }, "c", at)
                    .await?
            }
        };
        match reply.as_slice() {
            [t, r @ ..] if r.len() == 4 && *t >= 0 => decision(r, rule),
            other => Err(protocol(format!(
                "script replied {other:?} to a single check"
            ))),
        }
    }

    async fn check_many(
        &self,
        checks: &[KeyCheck<'_>],
        at: Option<Micros>,
    ) -> Result<MultiDecision, StoreError> {
        let (pairs, index) = merge(&self.inner.prefix, checks);
        let multi = &self.inner.scripts.multi;
        let decided = if matches!(self.inner.backend, Backend::Cluster { .. }) {
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

    fn ping(&self) -> impl Future<Output = Result<(), StoreError>> + Send {
        RedisStore::ping(self)
    }

    async fn heartbeat(&self, replica: &str, ttl: Duration) -> Result<Option<u64>, StoreError> {
        self.replica_heartbeat(replica, ttl).await.map(Some)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rule::RuleSpec;

    /// The refund a cross-node multi-check issues when a later node denies
    /// (traffic raced in between its dry run and its consumption) gives back
    /// exactly what was taken: every algorithm's state reads as before.
    /// The lean connection's commands are byte for byte what redis-rs
    /// sends for the same run.
    #[test]
    fn runs_are_encoded_as_redis_rs_encodes_them() {
        let scripts = Scripts::new();
        let rules: Vec<Rule> = Algorithm::ALL
            .iter()
            .map(|&a| {
                RuleSpec::new(format!("r_{a}"), a, 100_000, Duration::from_secs(1))
                    .build()
                    .expect("valid rule")
            })
            .collect();
        // Same name, other parameters: never mistaken for the first.
        let renamed = |r: &Rule| RuleSpec::new(r.name(), r.algorithm(), 7, Duration::from_secs(3));
        let rules: Vec<Rule> = rules
            .iter()
            .flat_map(|r| [r.clone(), renamed(r).build().expect("valid rule")])
            .collect();
        let long = vec![b'x'; 300];
        let pairs: Vec<Pair<'_>> = rules
            .iter()
            .zip([&b"alice"[..], b"", &long, b"k", b"\r\n"])
            .map(|(rule, key)| Pair {
                rule,
                key: keys::redis_key("tg", rule.name(), rule.algorithm(), key),
                cost: 3,
            })
            .collect();
        let mut runs = vec![Pairs::Many(&pairs), Pairs::Many(&pairs[..1])];
        let mut cache = RuleCache::default();
        let keys = [&b"alice"[..], b"", &long, b"k", b"\r\n"];
        for (rule, key) in rules.iter().zip(keys.iter().cycle()) {
            for cost in [0, 1, 12_345, u64::MAX] {
                runs.push(Pairs::One { rule, key, cost });
            }
        }
        // Twice: the second time every rule is cached.
        for pairs in runs.iter().chain(&runs).copied() {
            for at in [None, Some(1_764_000_000_000_000)] {
                for mode in ["c", "d", "r"] {
                    for (by_sha, verb) in [(true, "EVALSHA"), (false, "EVAL")] {
                        let script = &scripts.multi;
                        let run = Run { pairs, mode, at };
                        let mut lean = Vec::new();
                        encode_run(&mut lean, &mut cache, script, by_sha, "tg", 600_000, run);
                        let mut cmd = redis::cmd(verb);
                        let body = if by_sha { &script.sha } else { script.source };
                        cmd.arg(body).arg(pairs.len());
                        script_args(&mut cmd, "tg", 600_000, run);
                        assert_eq!(
                            String::from_utf8_lossy(&lean),
                            String::from_utf8_lossy(&cmd.get_packed_command()),
                        );
                    }
                }
            }
        }
    }

    /// A run of single checks, as the connection writes it (alone, or
    /// batched), is byte for byte what redis-rs sends for that run.
    #[test]
    fn batched_checks_are_encoded_as_redis_rs_encodes_them() {
        let scripts = Scripts::new();
        let rules: Vec<Rule> = Algorithm::ALL
            .iter()
            .map(|&a| {
                RuleSpec::new(format!("b_{a}"), a, 1_000, Duration::from_secs(60))
                    .build()
                    .expect("valid rule")
            })
            .collect();
        let long = vec![b'y'; 200];
        let keys = [&b"alice"[..], b"", &long, b"k", b"\r\n"];
        let checks: Vec<(&Rule, &[u8], u64)> = (0..70)
            .map(|i| (&rules[i % 7 % 5], keys[i % 5], [0, 1, 5, u64::MAX][i % 4]))
            .collect();
        let same: Vec<(&Rule, &[u8], u64)> = checks
            .iter()
            .map(|&(_, key, cost)| (&rules[3], key, cost))
            .collect();
        let mut cache = RuleCache::default();
        for run in [
            &checks[..1],
            &checks[..2],
            &checks[..],
            &same[..1],
            &same[..],
        ] {
            for at in [None, Some(1_764_000_000_000_000)] {
                for by_sha in [true, false] {
                    let (mut parts, mut key_lens) = (Vec::new(), Vec::new());
                    for &(rule, key, cost) in run {
                        let mut part = Vec::new();
                        key_lens.push(encode_check(&mut part, &mut cache, "tg", rule, key, cost));
                        parts.push(part);
                    }
                    let code = run[0].0.algorithm();
                    let all_same = run.iter().all(|c| c.0.algorithm() == code);
                    let mut lean = Vec::new();
                    scripts.write_checks(
                        &mut lean,
                        all_same.then(|| scripts::code(code)),
                        by_sha,
                        at.map(|t| (t, 600_000)),
                        parts.iter().zip(&key_lens).map(|(p, &k)| &p[..k]),
                        parts.iter().zip(&key_lens).map(|(p, &k)| &p[k..]),
                    );
                    let script = if all_same {
                        scripts.single(code)
                    } else {
                        &scripts.multi
                    };
                    let mut cmd = redis::cmd(if by_sha { "EVALSHA" } else { "EVAL" });
                    cmd.arg(if by_sha { &script.sha } else { script.source });
                    cmd.arg(run.len());
                    for &(rule, key, _) in run {
                        cmd.arg(keys::redis_key("tg", rule.name(), rule.algorithm(), key));
                    }
                    if run.len() == 1 {
                        push_common_args(&mut cmd, 1, 600_000, "c", at);
                        push_pair_args(&mut cmd, run[0].0, run[0].2);
                    } else {
                        // Each distinct (rule, cost) once, in order of first
                        // use; one byte per check names its tuple.
                        push_common_args(&mut cmd, run.len(), 600_000, "b", at);
                        let mut tuples: Vec<(&Rule, u64)> = Vec::new();
                        let mut refs = Vec::new();
                        for &(rule, _, cost) in run {
                            let cost = clamp_cost(rule, cost);
                            let i = tuples
                                .iter()
                                .position(|&(r, c)| r == rule && c == cost)
                                .unwrap_or_else(|| {
                                    tuples.push((rule, cost));
                                    tuples.len() - 1
                                });
                            refs.push(u8::try_from(i + 1).expect("few tuples"));
                        }
                        cmd.arg(refs);
                        for (rule, cost) in tuples {
                            push_pair_args(&mut cmd, rule, cost);
                        }
                    }
                    assert_eq!(
                        String::from_utf8_lossy(&lean),
                        String::from_utf8_lossy(&cmd.get_packed_command()),
                    );
                }
            }
        }
    }

    #[test]
    fn preencoded_arguments_are_what_they_encode() {
        let mut plain = Vec::new();
        let mut e = Encoder::append(&mut plain);
        for arg in NOW_ONE_CHECK.0 {
            e.bytes(arg);
        }
        assert_eq!(plain, NOW_ONE_CHECK.1);
    }

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
