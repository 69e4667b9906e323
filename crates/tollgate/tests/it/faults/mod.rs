//! The [`ResilientLimiter`] against real `redis-server` processes that
//! hang (SIGSTOP), die, come back empty, lose their scripts or fail over
//! (Sentinel, Cluster). Every test asserts the decisions AND that each
//! check ends: a check of a frozen Redis can only end by the store timeout,
//! so its answer (by the policy, the error a timeout) is the proof; a check
//! that never ends fails the test after [`HANG`]. Each test also asserts
//! that the limiter recovers by itself, and afterwards that no Redis key
//! lacks a TTL (the heartbeat's included).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use redis_harness::{RedisCluster, RedisServer, SentinelSetup};
use tollgate::resilient::{OnError, Refusal, ResilientLimiter, Verdict};
use tollgate::store::redis::{RedisOptions, RedisStore};
use tollgate::{Algorithm, Limiter, Rule, RuleSpec, Store, StoreErrorKind};

use crate::support::{HOUR, rule};

mod local;

/// The store timeout every test uses.
const TIMEOUT: Duration = Duration::from_millis(100);
/// A check still running after this never ends: a hang guard, not a
/// bound on how late a check may be. How long a check took is no
/// assertion here: on a loaded machine any thread may stand still for a
/// second. That the timeout, not luck, ended a check shows in its answer.
const HANG: Duration = Duration::from_secs(10);
/// The heartbeat interval of the tests.
const HEARTBEAT: Duration = Duration::from_millis(100);

async fn connect(url: &str, prefix: &str) -> RedisStore {
    let options = RedisOptions {
        prefix: prefix.to_owned(),
        timeout: TIMEOUT,
        ..RedisOptions::default()
    };
    RedisStore::connect(url, options).await.expect("connect")
}

/// The rules' windows are hours on the real clock: called as each test
/// builds its limiters, so no window ends while a test counts in it.
fn clear_of_the_hour() {
    redis_harness::clear_of_window_edge(Duration::from_secs(3600), Duration::from_secs(60));
}

/// Three rules, one per policy, each with a limit of 4.
fn three_rules() -> Vec<Rule> {
    vec![
        rule("strict", Algorithm::FixedWindow, 4, HOUR),
        rule("open", Algorithm::Gcra, 4, HOUR),
        rule("fallback", Algorithm::SlidingWindow, 4, HOUR),
    ]
}

fn resilient(store: RedisStore, rules: Vec<Rule>) -> ResilientLimiter<RedisStore> {
    resilient_with(store, rules, tollgate::resilient::DEFAULT_BREAKER_OPEN_FOR)
}

/// [`resilient`] with a breaker open for `open_for` after 5 failures.
fn resilient_with(
    store: RedisStore,
    rules: Vec<Rule>,
    open_for: Duration,
) -> ResilientLimiter<RedisStore> {
    clear_of_the_hour();
    ResilientLimiter::builder(Limiter::new(store, rules).expect("limiter"))
        .timeout(TIMEOUT)
        .breaker(5, open_for)
        .rule_on_error("strict", OnError::Deny)
        .rule_on_error("open", OnError::Allow)
        .rule_on_error("fallback", OnError::Local)
        .heartbeat(HEARTBEAT)
        // Until the first heartbeat: a count the tests can tell from 1.
        .replicas(3)
        .build()
        .expect("resilient limiter")
}

/// A check, and how long it took; panics when it has not ended after
/// [`HANG`].
async fn timed(
    limiter: &ResilientLimiter<RedisStore>,
    rule: &str,
    key: &str,
) -> (Result<Verdict, Refusal>, Duration) {
    let start = Instant::now();
    let result = ended(limiter.check(rule, key, 1), &format!("{rule}/{key}")).await;
    (result, start.elapsed())
}

/// `call`'s answer; panics when it has not ended after [`HANG`].
async fn ended<T>(call: impl Future<Output = T>, what: &str) -> T {
    tokio::time::timeout(HANG, call)
        .await
        .unwrap_or_else(|_| panic!("{what} still running after {HANG:?}: no timeout ended it"))
}

/// Whether `r` is the refusal of a check the open breaker kept from the
/// store (a check sent to a frozen store fails by its timeout instead).
fn skipped_by_the_breaker(r: &Result<Verdict, Refusal>) -> bool {
    matches!(r, Err(Refusal::Unavailable(e)) if e.to_string().contains("circuit breaker open"))
}

/// Waits (at most `within`) until a check of `rule` is decided by the store
/// again; every attempt still answers within the bound.
async fn until_store_answers(
    limiter: &ResilientLimiter<RedisStore>,
    rule: &str,
    key: &str,
    within: Duration,
) -> Verdict {
    let start = Instant::now();
    loop {
        if let (Ok(v), _) = timed(limiter, rule, key).await
            && v.degraded.is_none()
        {
            return v;
        }
        assert!(
            start.elapsed() < within,
            "the store did not answer again within {within:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Waits until every limiter has learned `n` live replicas.
async fn until_live(limiters: &[&ResilientLimiter<RedisStore>], n: u64) {
    let start = Instant::now();
    while limiters.iter().any(|l| l.live_replicas() != n) {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "live replicas: {:?}, expected {n}",
            limiters
                .iter()
                .map(|l| l.live_replicas())
                .collect::<Vec<_>>()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn assert_all_keys_expire(bare: &[String]) {
    assert!(bare.is_empty(), "keys without a TTL: {bare:?}");
}

/// Every policy while Redis is frozen (SIGSTOP: the kernel still accepts
/// connections, nothing answers), the breaker skipping the store once open,
/// `ready` failing fast, then recovery after SIGCONT without a restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_redis_is_answered_by_each_policy_within_the_timeout() {
    let redis = RedisServer::start();
    // Open 5 s once open: the checks that show it skipping the store come
    // long before a probe could, however slow the machine.
    let limiter = resilient_with(
        connect(&redis.url(), "hung").await,
        three_rules(),
        Duration::from_secs(5),
    );
    for r in ["strict", "open", "fallback"] {
        let (v, _) = timed(&limiter, r, "warm").await;
        assert_eq!(v.expect("store up").degraded, None);
    }
    until_live(&[&limiter], 1).await;
    assert!(limiter.ready().await.is_ok());

    redis.pause();
    // deny: refused, by the timeout (nothing else ends a call to a frozen
    // Redis).
    let (r, _) = timed(&limiter, "strict", "k").await;
    assert!(
        matches!(&r, Err(Refusal::Unavailable(e)) if e.kind() == StoreErrorKind::Timeout),
        "{r:?}"
    );
    // allow: admitted, degraded.
    let (r, _) = timed(&limiter, "open", "k").await;
    let v = r.expect("allow admits");
    assert_eq!(v.degraded, Some(OnError::Allow));
    assert!(v.multi.allowed);
    // local: the in-process share (4 / 1 live replica), exact.
    let mut local = Vec::new();
    for _ in 0..6 {
        let (r, _) = timed(&limiter, "fallback", "k").await;
        let v = r.expect("local decides");
        assert_eq!(v.degraded, Some(OnError::Local));
        local.push(v.multi.allowed);
    }
    assert_eq!(local, [true, true, true, true, false, false]);
    // A multi-rule check takes the strictest policy.
    let both = [
        tollgate::Check::new("open", "m"),
        tollgate::Check::new("strict", "m"),
    ];
    assert!(matches!(
        limiter.check_all(&both).await,
        Err(Refusal::Unavailable(_))
    ));
    // By now the breaker is open: checks no longer wait on Redis (the
    // `deny` rule's refusal names the breaker, not a timeout).
    assert!(limiter.breaker_open(), "the breaker opened");
    for _ in 0..20 {
        let (r, _) = timed(&limiter, "open", "fast").await;
        assert_eq!(r.expect("allow").degraded, Some(OnError::Allow));
        let (r, _) = timed(&limiter, "strict", "fast").await;
        assert!(
            skipped_by_the_breaker(&r),
            "an open breaker still waited: {r:?}"
        );
    }
    let not_ready = ended(limiter.ready(), "ready").await;
    assert!(
        not_ready
            .as_ref()
            .is_err_and(|e| e.to_string().contains("circuit breaker open")),
        "readiness still waited on the store: {not_ready:?}"
    );

    redis.resume();
    // The breaker's 5 s run out first.
    let v = until_store_answers(&limiter, "strict", "after", Duration::from_secs(30)).await;
    assert_eq!(v.decision().remaining, 3);
    assert!(!limiter.breaker_open());
    assert!(limiter.ready().await.is_ok());
    assert_all_keys_expire(&redis.keys_without_ttl());
    let ttl: i64 = redis.cli(&["PTTL", "hung:replicas"]).parse().expect("PTTL");
    assert!(ttl > 0, "the heartbeat key has a TTL: {ttl}");
}

/// Charges while Redis is frozen follow each rule's policy within the
/// timeout (deny refuses, allow answers as an untouched key, local charges
/// the in-process share, debt and all); once Redis answers, charges are
/// recorded there again and a check waits their debt out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn charges_to_a_hung_redis_follow_each_policy_and_are_recorded_after() {
    let redis = RedisServer::start();
    let limiter = resilient(connect(&redis.url(), "charge").await, three_rules());
    let charge = |rule: &'static str, cost: u64| {
        let limiter = &limiter;
        async move {
            ended(
                limiter.charge_all(&[tollgate::Check::new(rule, "k").cost(cost)]),
                rule,
            )
            .await
        }
    };
    let up = charge("strict", 1).await.expect("store up");
    assert_eq!((up.degraded, up.charged[0].debt), (None, 0));
    until_live(&[&limiter], 1).await;

    redis.pause();
    assert!(matches!(
        charge("strict", 3).await,
        Err(Refusal::Unavailable(_))
    ));
    let open = charge("open", 10).await.expect("allow answers");
    assert_eq!(open.degraded, Some(OnError::Allow));
    assert_eq!(
        (open.charged[0].decision.remaining, open.charged[0].debt),
        (0, 0)
    );
    // local: the whole limit of 4 (one live replica); 7 units leave a
    // debt of 3.
    let local = charge("fallback", 7).await.expect("local answers");
    assert_eq!(local.degraded, Some(OnError::Local));
    assert_eq!(local.charged[0].debt, 3);
    // A refund follows the policy as a charge does: deny refuses it, local
    // gives the in-process share back.
    let refund = |rule: &'static str, cost: u64| {
        let limiter = &limiter;
        async move {
            limiter
                .refund_all(&[tollgate::Check::new(rule, "k").cost(cost)])
                .await
        }
    };
    assert!(matches!(
        refund("strict", 1).await,
        Err(Refusal::Unavailable(_))
    ));
    let local = refund("fallback", 2).await.expect("local answers");
    assert_eq!(
        (local.degraded, local.charged[0].debt),
        (Some(OnError::Local), 1)
    );

    redis.resume();
    let start = Instant::now();
    let recorded = loop {
        if let Ok(v) = charge("strict", 6).await
            && v.degraded.is_none()
        {
            break v;
        }
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "Redis never answered"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    // 1 before the outage + 6 now in a window of 4: 3 over, or 6 when the
    // refused charge of 3, sent before the timeout gave up on it, ran as
    // Redis woke (docs/failure-modes.md, "Charges").
    assert!([3, 6].contains(&recorded.charged[0].debt), "{recorded:?}");
    let v = limiter.check("strict", "k", 0).await.expect("store up");
    assert!(!v.multi.allowed, "a key in debt refuses even a peek: {v:?}");
    // A refund gives the debt back in Redis, and never past empty.
    let back = refund("strict", 100).await.expect("store up");
    assert_eq!(
        (
            back.degraded,
            back.charged[0].debt,
            back.charged[0].decision.remaining
        ),
        (None, 0, 4)
    );
    assert_all_keys_expire(&redis.keys_without_ttl());
}

/// Redis killed (connections refused: checks fail at once, not after the
/// timeout) and restarted empty on the same port: decisions come from the
/// store again, from an empty state, and the heartbeat re-creates its key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_killed_and_restarted_empty() {
    let redis = RedisServer::start();
    let limiter = resilient(connect(&redis.url(), "killed").await, three_rules());
    for _ in 0..3 {
        let (v, _) = timed(&limiter, "strict", "k").await;
        assert!(v.expect("up").multi.allowed);
    }
    until_live(&[&limiter], 1).await;

    redis.kill();
    for _ in 0..10 {
        let (r, _) = timed(&limiter, "strict", "k").await;
        assert!(matches!(r, Err(Refusal::Unavailable(_))), "{r:?}");
        let (r, _) = timed(&limiter, "fallback", "k").await;
        assert_eq!(r.expect("local").degraded, Some(OnError::Local));
    }
    assert!(limiter.ready().await.is_err());

    redis.restart();
    assert_eq!(redis.dbsize(), 0);
    let v = until_store_answers(&limiter, "strict", "k", Duration::from_secs(10)).await;
    assert_eq!(
        v.decision().remaining,
        3,
        "the restarted Redis starts empty"
    );
    assert!(limiter.ready().await.is_ok());
    // The heartbeat finds its way back too.
    let start = Instant::now();
    while redis.cli(&["EXISTS", "killed:replicas"]) != "1" {
        assert!(start.elapsed() < Duration::from_secs(5), "no heartbeat");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_all_keys_expire(&redis.keys_without_ttl());
}

/// `SCRIPT FLUSH`: the next check reloads its script (EVALSHA → NOSCRIPT →
/// EVAL) and is decided by the store, in time; so is the heartbeat.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn script_flush_costs_one_reload_not_a_failure() {
    let redis = RedisServer::start();
    let limiter = resilient(connect(&redis.url(), "flush").await, three_rules());
    for r in ["strict", "open", "fallback"] {
        let (v, _) = timed(&limiter, r, "k").await;
        assert_eq!(v.expect("up").degraded, None);
    }
    until_live(&[&limiter], 1).await;
    for round in 1..=3u64 {
        redis.script_flush();
        for r in ["strict", "open", "fallback"] {
            let (v, _) = timed(&limiter, r, "k").await;
            let v = v.expect("decided after a flush");
            assert_eq!(v.degraded, None, "{r} round {round}");
            assert_eq!(v.decision().remaining, 3 - round, "{r} round {round}");
        }
        // The heartbeat script is reloaded too: its score keeps moving.
        let before = redis.cli(&["ZSCORE", "flush:replicas", limiter.replica_id()]);
        let start = Instant::now();
        while redis.cli(&["ZSCORE", "flush:replicas", limiter.replica_id()]) == before {
            assert!(start.elapsed() < Duration::from_secs(3), "heartbeat stuck");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    assert_all_keys_expire(&redis.keys_without_ttl());
}

/// Keeps checking `rule` from a background task until `stop` is set;
/// returns (checks, decided by the store, answered by the policy, longest).
fn hammer(
    limiter: Arc<ResilientLimiter<RedisStore>>,
    rule: &'static str,
    stop: Arc<AtomicU64>,
) -> tokio::task::JoinHandle<(u64, u64, u64, Duration)> {
    tokio::spawn(async move {
        let (mut n, mut stored, mut degraded, mut longest) = (0, 0, 0, Duration::ZERO);
        let mut i = 0u64;
        while stop.load(Ordering::Acquire) == 0 {
            i += 1;
            let key = format!("h{}", i % 50);
            let (r, took) = timed(&limiter, rule, &key).await;
            longest = longest.max(took);
            n += 1;
            match r {
                Ok(v) if v.degraded.is_none() => stored += 1,
                Ok(_) | Err(Refusal::Unavailable(_)) => degraded += 1,
                Err(e) => panic!("{e}"),
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        (n, stored, degraded, longest)
    })
}

/// A Sentinel failover under traffic: every check answers within the
/// bound (by the store or the policy), and the store decides again after
/// the replica is promoted, without a restart of anything but Redis.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sentinel_failover_is_survived() {
    sentinel_failover(false).await;
}

/// The same when the master crashes (SIGKILL): the sentinels notice after
/// `down-after-milliseconds` and promote the replica; meanwhile the policy
/// answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sentinel_master_crash_is_survived() {
    sentinel_failover(true).await;
}

async fn sentinel_failover(crash: bool) {
    let setup = SentinelSetup::start();
    let limiter = Arc::new(resilient(
        connect(&setup.store_url(), "sentinel").await,
        three_rules(),
    ));
    let _ = until_store_answers(&limiter, "strict", "before", Duration::from_secs(5)).await;
    until_live(&[&limiter], 1).await; // the heartbeat works behind Sentinel
    let stop = Arc::new(AtomicU64::new(0));
    let traffic = hammer(Arc::clone(&limiter), "fallback", Arc::clone(&stop));
    let report = tokio::task::spawn_blocking(move || {
        let report = if crash {
            setup.kill_master()
        } else {
            setup.failover()
        };
        (setup, report)
    })
    .await
    .expect("failover");
    let (setup, report) = report;
    eprintln!("sentinel failover (crash: {crash}): {report:?}");
    let v = until_store_answers(&limiter, "strict", "after", Duration::from_secs(30)).await;
    assert_eq!(v.decision().remaining, 3);
    stop.store(1, Ordering::Release);
    let (n, stored, degraded, longest) = traffic.await.expect("traffic");
    eprintln!(
        "during the failover: {n} checks, {stored} by the store, {degraded} by the policy, longest {longest:?}"
    );
    assert!(n > 0, "no traffic during the failover");
    assert!(limiter.ready().await.is_ok());
    assert_all_keys_expire(&setup.keys_without_ttl());
}

/// A Cluster master fails (killed; its replica is promoted) under
/// traffic: checks answer within the bound throughout, and the store
/// decides again once the cluster has converged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_failover_is_survived() {
    let cluster = RedisCluster::start(3, 1);
    let limiter = Arc::new(resilient(
        connect(&cluster.store_url(), "cluster").await,
        three_rules(),
    ));
    let v = until_store_answers(&limiter, "strict", "k", Duration::from_secs(5)).await;
    assert_eq!(v.decision().remaining, 3);
    until_live(&[&limiter], 1).await; // the heartbeat works on a Cluster
    let stop = Arc::new(AtomicU64::new(0));
    let traffic = hammer(Arc::clone(&limiter), "open", Arc::clone(&stop));
    let key =
        String::from_utf8(limiter.store().redis_key(&limiter.rules()[0], b"k")).expect("utf-8 key");
    let (cluster, report) = tokio::task::spawn_blocking(move || {
        let report = cluster.kill_master_of(&key);
        (cluster, report)
    })
    .await
    .expect("failover");
    eprintln!("cluster failover: {report:?}");
    // The key lived on the killed master; its promoted replica answers.
    let v = until_store_answers(&limiter, "strict", "k", Duration::from_secs(30)).await;
    eprintln!("after the failover: {v:?}");
    stop.store(1, Ordering::Release);
    let (n, stored, degraded, longest) = traffic.await.expect("traffic");
    eprintln!(
        "during the failover: {n} checks, {stored} by the store, {degraded} by the policy, longest {longest:?}"
    );
    assert!(n > 0, "no traffic during the failover");
    assert!(limiter.ready().await.is_ok());
    assert_all_keys_expire(&cluster.keys_without_ttl());
}

/// A replica that goes away stops beating (its task ends with the
/// limiter): the others learn they are fewer, and once the last one is
/// gone the heartbeat key expires.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_limiter_stops_its_heartbeat() {
    let redis = RedisServer::start();
    let make = async || {
        let store = connect(&redis.url(), "drop").await;
        let limiter = Limiter::new(store, [rule("r", Algorithm::Gcra, 5, HOUR)]).expect("limiter");
        ResilientLimiter::builder(limiter)
            .timeout(TIMEOUT)
            .heartbeat(HEARTBEAT)
            .build()
            .expect("resilient limiter")
    };
    let (a, b) = (make().await, make().await);
    until_live(&[&a, &b], 2).await;
    drop(b);
    until_live(&[&a], 1).await;
    drop(a);
    let start = Instant::now();
    while redis.cli(&["EXISTS", "drop:replicas"]) != "0" {
        assert!(
            start.elapsed() < Duration::from_secs(3),
            "the heartbeat key outlived every replica"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_all_keys_expire(&redis.keys_without_ttl());
}

/// The timeout covers reconnection: Redis dies, comes back frozen (the
/// kernel accepts the new connection, nothing answers), and every check
/// still answers within the bound; after SIGCONT the store decides again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reconnection_to_a_hung_redis_is_bounded_too() {
    let redis = RedisServer::start();
    let limiter = resilient(connect(&redis.url(), "reconnect").await, three_rules());
    let _ = until_store_answers(&limiter, "strict", "k", Duration::from_secs(5)).await;
    redis.kill();
    redis.restart();
    redis.pause();
    let start = Instant::now();
    let mut refused = 0;
    while start.elapsed() < Duration::from_millis(2500) {
        let (r, _) = timed(&limiter, "strict", "k").await;
        match r {
            Err(Refusal::Unavailable(_)) => refused += 1,
            other => panic!("a frozen Redis decided: {other:?}"),
        }
        let (r, _) = timed(&limiter, "fallback", "k").await;
        assert_eq!(r.expect("local").degraded, Some(OnError::Local));
    }
    assert!(refused > 0);
    redis.resume();
    let v = until_store_answers(&limiter, "strict", "k", Duration::from_secs(5)).await;
    assert_eq!(
        v.decision().remaining,
        3,
        "the restarted Redis started empty"
    );
    assert_all_keys_expire(&redis.keys_without_ttl());
}

/// A frozen Cluster master (redis-rs's connection, not tollgate's own):
/// checks of keys it holds answer within the bound by the policy; after
/// SIGCONT the store decides again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_cluster_master_is_bounded() {
    let cluster = RedisCluster::start(3, 0);
    let limiter = resilient(connect(&cluster.store_url(), "clhung").await, three_rules());
    let _ = until_store_answers(&limiter, "strict", "k", Duration::from_secs(5)).await;
    let key =
        String::from_utf8(limiter.store().redis_key(&limiter.rules()[0], b"k")).expect("utf-8 key");
    let master = cluster.master_of(&key);
    // A key of the `open` rule on the same master.
    let open_key = (0..1000)
        .map(|i| format!("o{i}"))
        .find(|k| {
            let redis_key = limiter.store().redis_key(&limiter.rules()[1], k.as_bytes());
            let redis_key = String::from_utf8(redis_key).expect("utf-8 key");
            cluster.master_of(&redis_key).port() == master.port()
        })
        .expect("a key on the same master");
    master.pause();
    for _ in 0..10 {
        let (r, _) = timed(&limiter, "strict", "k").await;
        assert!(matches!(r, Err(Refusal::Unavailable(_))), "{r:?}");
        let (r, _) = timed(&limiter, "open", &open_key).await;
        assert_eq!(r.expect("allow").degraded, Some(OnError::Allow));
    }
    master.resume();
    let v = until_store_answers(&limiter, "strict", "k", Duration::from_secs(10)).await;
    // Checks written to the frozen master before the breaker opened ran
    // when it woke, though the policy had answered them: the error is
    // towards denial (`docs/failure-modes.md`).
    eprintln!("after SIGCONT: {v:?}");
    assert!(v.decision().remaining <= 2);
    assert_all_keys_expire(&cluster.keys_without_ttl());
}

/// The earliest time recorded, as µs since a start (0 = none yet).
#[derive(Default)]
struct FirstTime(AtomicU64);

impl FirstTime {
    fn set(&self, at: Duration) {
        let us = u64::try_from(at.as_micros()).unwrap_or(u64::MAX).max(1);
        let _ = self
            .0
            .compare_exchange(0, us, Ordering::AcqRel, Ordering::Acquire);
    }

    fn get(&self) -> Duration {
        Duration::from_micros(self.0.load(Ordering::Acquire))
    }
}

/// A peer on the store's address that answers the connection's `PING`, then
/// meets the first check with an array reply that never ends (the reply
/// claims two billion items and streams them). It is not Redis, and no
/// Redis does this; it is what a broken proxy or a hostile service on the
/// configured port can do. The store drops the connection once the reply
/// passes its size bound, instead of buffering it without end: the peer's
/// writes fail soon, after a bounded number of bytes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_endless_reply_is_cut_off_not_buffered() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let peer = tokio::spawn(async move {
        let (mut s, _) = listener.accept().await.expect("accept");
        let mut buf = vec![0; 64 * 1024];
        let _ = s.read(&mut buf).await.expect("handshake");
        s.write_all(b"+PONG\r\n").await.expect("pong");
        let _ = s.read(&mut buf).await.expect("a check");
        s.write_all(b"*2000000000\r\n").await.expect("array head");
        let items = b":1\r\n".repeat(16 * 1024);
        let (started, mut sent) = (Instant::now(), 0_usize);
        while started.elapsed() < Duration::from_secs(20) {
            if s.write_all(&items).await.is_err() {
                return Ok((sent, started.elapsed()));
            }
            sent += items.len();
        }
        Err(sent)
    });
    let store = connect(&format!("redis://127.0.0.1:{port}"), "endless").await;
    let r = rule("endless", Algorithm::Gcra, 4, HOUR);
    let got = ended(store.check(&r, b"k", 1, None), "the check").await;
    assert!(got.is_err(), "{got:?}");
    let (sent, took) = peer
        .await
        .expect("peer")
        .unwrap_or_else(|sent| panic!("the store read {sent} bytes of one reply and kept going"));
    eprintln!("the peer sent {sent} bytes in {took:?} before the store hung up");
    assert!(sent < 64 << 20, "{sent} bytes of one reply were read");
}
