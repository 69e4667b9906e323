//! The Redis store on a 3-master Cluster and behind Sentinel, with real
//! `redis-server` processes: the same decisions as the memory store
//! (multi-rule checks across cluster nodes included), one limit for a fleet,
//! and checks that carry on through failovers.

use std::time::{Duration, Instant};

use redis_harness::{RedisCluster, SentinelSetup};
use tollgate::store::KeyCheck;
use tollgate::store::redis::{RedisOptions, RedisStore};
use tollgate::{Algorithm, Decision, MemoryStore, Rule, RuleSpec, Store, StoreError};

use crate::support::fleet;

const EPOCH: u64 = 1_764_000_000_000_000;

async fn connect(url: &str, prefix: &str) -> RedisStore {
    let options = RedisOptions {
        prefix: prefix.to_owned(),
        timeout: Duration::from_secs(2),
        ..RedisOptions::default()
    };
    RedisStore::connect(url, options).await.expect("connect")
}

fn rules(prefix: &str) -> Vec<Rule> {
    Algorithm::RATES
        .iter()
        .map(|&a| {
            RuleSpec::new(format!("{prefix}_{a}"), a, 5, Duration::from_secs(2))
                .build()
                .unwrap()
        })
        .collect()
}

/// Retries a check while the store reports a transient failure (a failover
/// in progress), for at most 20 s. Any other error fails the test.
async fn settle(mut f: impl AsyncFnMut() -> Result<Decision, StoreError>) -> (Decision, u32) {
    let start = Instant::now();
    let mut failures = 0;
    loop {
        match f().await {
            Ok(d) => return (d, failures),
            Err(e) => {
                assert!(e.is_transient(), "a non-transient error: {e}");
                assert!(
                    start.elapsed() < Duration::from_secs(20),
                    "no recovery within 20 s: {e}"
                );
                failures += 1;
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

/// Steps through a trace of cost-1 checks on every rule, comparing with a
/// memory store; `between` runs once, halfway.
async fn trace_through(store: &RedisStore, rules: &[Rule], between: impl FnOnce()) {
    let memory = MemoryStore::new();
    let mut between = Some(between);
    for step in 0..16u64 {
        if step == 8 {
            (between.take().unwrap())();
        }
        let t = EPOCH + step * 150_000;
        for rule in rules {
            let expected = memory.check_sync(rule, b"k", 1, Some(t));
            let (got, _) = settle(async || store.check(rule, b"k", 1, Some(t)).await).await;
            assert_eq!(got, expected, "{} step {step}", rule.name());
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_decisions_equal_the_memory_store_across_nodes() {
    let cluster = RedisCluster::start(3, 0);
    let store = connect(&cluster.store_url(), "cl").await;
    let rules = rules("c");
    let memory = MemoryStore::new();
    // Keys chosen so the pairs of a multi-check land on different slots
    // (and, with 3 masters, usually on different nodes).
    let keys: Vec<Vec<u8>> = (0..6).map(|i| format!("user{i}").into_bytes()).collect();
    let mut state = 7u64;
    let mut rand = |n: u64| {
        state = state
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1);
        (state >> 33) % n
    };
    for step in 0..200u64 {
        let t = EPOCH + step * 37_000;
        let n = 1 + rand(4);
        let checks: Vec<KeyCheck<'_>> = (0..n)
            .map(|_| KeyCheck {
                rule: &rules[usize::try_from(rand(5)).unwrap()],
                key: &keys[usize::try_from(rand(6)).unwrap()],
                cost: rand(3),
            })
            .collect();
        let expected = memory.check_all_sync(&checks, Some(t));
        let got = store.check_all(&checks, Some(t)).await.unwrap();
        assert_eq!(got, expected, "step {step}");
    }
    let bare = cluster.keys_without_ttl();
    assert!(bare.is_empty(), "keys without a TTL: {bare:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_denied_multi_check_across_nodes_consumes_nothing() {
    let cluster = RedisCluster::start(3, 0);
    let store = connect(&cluster.store_url(), "deny").await;
    // Per hour, on the real clock: GCRA gives a unit back every 6 min,
    // and the fixed window does not end while the test counts in it.
    redis_harness::clear_of_window_edge(Duration::from_secs(3600), Duration::from_secs(60));
    let open = RuleSpec::new("open", Algorithm::Gcra, 10, Duration::from_secs(3600))
        .build()
        .unwrap();
    let tight = RuleSpec::new(
        "tight",
        Algorithm::FixedWindow,
        1,
        Duration::from_secs(3600),
    )
    .build()
    .unwrap();
    // Find two keys whose Redis keys live on different masters.
    let a = b"alpha".as_slice();
    let b = (0..100)
        .map(|i| format!("beta{i}").into_bytes())
        .find(|k| {
            let ka = String::from_utf8(store.redis_key(&open, a)).unwrap();
            let kb = String::from_utf8(store.redis_key(&tight, k)).unwrap();
            cluster.master_of(&ka).port() != cluster.master_of(&kb).port()
        })
        .expect("keys on two masters");
    let both = [
        KeyCheck {
            rule: &open,
            key: a,
            cost: 1,
        },
        KeyCheck {
            rule: &tight,
            key: &b,
            cost: 1,
        },
    ];
    assert!(store.check_all(&both, None).await.unwrap().allowed);
    for _ in 0..5 {
        let d = store.check_all(&both, None).await.unwrap();
        assert!(!d.allowed);
        assert_eq!(d.deciding, 1);
        assert_eq!(d.decisions[0].remaining, 9, "the open rule lost nothing");
    }
    let peek = store.check(&open, a, 0, None).await.unwrap();
    assert_eq!(peek.remaining, 9);
    assert!(cluster.keys_without_ttl().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_fleet_admits_exactly_the_limit() {
    let cluster = RedisCluster::start(3, 0);
    let mut fleet = Vec::new();
    for _ in 0..3 {
        fleet.push(connect(&cluster.store_url(), "fleet").await);
    }
    for algorithm in Algorithm::RATES {
        let rule = RuleSpec::new(
            format!("f_{algorithm}"),
            algorithm,
            23,
            Duration::from_secs(3600),
        )
        .build()
        .unwrap();
        let admitted = fleet::admitted(&fleet, &rule, b"hot", 6, 10).await;
        assert_eq!(admitted, 23, "{algorithm}");
    }
    assert!(cluster.keys_without_ttl().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn checks_carry_on_through_a_cluster_failover() {
    let cluster = RedisCluster::start(3, 1);
    let store = connect(&cluster.store_url(), "fo").await;
    let rules = rules("fo");
    let key = String::from_utf8(store.redis_key(&rules[0], b"k")).unwrap();
    // A graceful failover (replica promoted after catching up) loses no
    // write, so every decision still equals the memory store's.
    trace_through(&store, &rules, || {
        let report = cluster.failover_master_of(&key);
        assert_ne!(report.new_master_port, report.old_master_port);
    })
    .await;
    // A master killed outright: checks fail for a moment (transient), then
    // carry on against the promoted replica.
    let rule = &rules[0];
    cluster.kill_master_of(&key);
    let (d, _) = settle(async || store.check(rule, b"after-kill", 1, None).await).await;
    assert!(d.allowed);
    assert!(cluster.keys_without_ttl().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn checks_carry_on_through_a_sentinel_failover() {
    let setup = SentinelSetup::start();
    let store = connect(&setup.store_url(), "sent").await;
    let rules = rules("s");
    trace_through(&store, &rules, || {
        let report = setup.failover();
        assert_ne!(report.new_master_port, report.old_master_port);
    })
    .await;
    // The old master, now a replica, refuses writes; the store looked the
    // new one up. Kill that one too: the store follows again.
    setup.kill_master();
    let (d, _) = settle(async || store.check(&rules[0], b"after-kill", 1, None).await).await;
    assert!(d.allowed);
    assert!(setup.keys_without_ttl().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sentinel_fleet_admits_exactly_the_limit() {
    let setup = SentinelSetup::start();
    let mut fleet = Vec::new();
    for _ in 0..3 {
        fleet.push(connect(&setup.store_url(), "sfleet").await);
    }
    let rule = RuleSpec::new("sf", Algorithm::Gcra, 19, Duration::from_secs(3600))
        .build()
        .unwrap();
    assert_eq!(fleet::admitted(&fleet, &rule, b"hot", 5, 10).await, 19);
    assert!(setup.keys_without_ttl().is_empty());
}

/// A forced (`SENTINEL FAILOVER`) failover promotes the replica while the
/// old master stays up and keeps accepting writes until the Sentinels
/// demote it, some 10 s later (on their next `INFO` poll); it then resyncs
/// from the new master and drops whatever it took meanwhile. A client that
/// only notices a failover by a `READONLY` reply writes to the old master
/// all that while, and every check it admits there is lost: an outside test
/// saw 15 admitted against a limit of 10. The store follows the Sentinels'
/// `+switch-master` announcement instead: checks made after the failover
/// land on the new master.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn checks_after_a_forced_failover_land_on_the_new_master() {
    let setup = SentinelSetup::start();
    let store = connect(&setup.store_url(), "switch").await;
    // GCRA, 10 an hour: each admitted check moves the key's expiry 6 min on.
    let rule = RuleSpec::new("switch", Algorithm::Gcra, 10, Duration::from_secs(3600))
        .build()
        .unwrap();
    for _ in 0..5 {
        assert!(store.check(&rule, b"k", 1, None).await.unwrap().allowed);
    }
    let report = setup.failover();
    assert_ne!(report.new_master_port, report.old_master_port);
    // The announcement reaches the store within milliseconds; give it ample
    // time (the old master takes writes for about 10 s).
    tokio::time::sleep(Duration::from_millis(1500)).await;
    for i in 0..5 {
        let (d, _) = settle(async || store.check(&rule, b"k", 1, None).await).await;
        assert!(d.allowed, "check {i} after the failover: {d:?}");
    }
    let key = String::from_utf8(store.redis_key(&rule, b"k")).unwrap();
    let master = setup.master();
    assert_eq!(master.port(), report.new_master_port);
    let pttl = master.command(&["PTTL", &key]).as_int().expect("PTTL");
    // Ten checks held: about 60 min to go; five (the last five lost on
    // the old master): about 30.
    assert!(
        pttl > 50 * 60 * 1000,
        "the new master holds {pttl} ms of the key: checks after the failover went elsewhere"
    );
}

/// `RedisOptions::lazy`: no connection in `connect`, so a store whose
/// server is down can be built; its checks fail as `Unavailable` (not a
/// hang) until the server answers, then connect on first use. For each
/// kind of backend: the lean connection (standalone), and redis-rs's
/// Cluster connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lazy_store_starts_without_its_server_and_connects_on_first_use() {
    let rule = RuleSpec::new("lazy", Algorithm::Gcra, 5, Duration::from_secs(60))
        .build()
        .unwrap();
    let lazy = |prefix: &str| RedisOptions {
        prefix: prefix.to_owned(),
        timeout: Duration::from_millis(200),
        lazy: true,
        ..RedisOptions::default()
    };
    // Nothing listens on port 1.
    for url in ["redis://127.0.0.1:1", "redis+cluster://127.0.0.1:1"] {
        let store = RedisStore::connect(url, lazy("lazy"))
            .await
            .unwrap_or_else(|e| panic!("{url}: {e}"));
        // Not a hang: the check ends (a guard of 30 s only turns one that
        // never does into a failure), refused, not timed out.
        let e = tokio::time::timeout(Duration::from_secs(30), store.check(&rule, b"k", 1, None))
            .await
            .unwrap_or_else(|_| panic!("{url}: a check still running after 30 s"))
            .expect_err(url);
        assert_eq!(
            e.kind(),
            tollgate::StoreErrorKind::Unavailable,
            "{url}: {e}"
        );
    }
    let cluster = RedisCluster::start(3, 0);
    let server = redis_harness::RedisServer::start();
    for url in [server.url(), cluster.store_url()] {
        let store = RedisStore::connect(&url, lazy("lazy2")).await.unwrap();
        let (d, _) = settle(async || store.check(&rule, b"k", 1, None).await).await;
        assert!(d.allowed, "{url}");
        assert_eq!(d.remaining, 4, "{url}");
    }
}

/// Checks made without a pause through a forced failover are all kept: the
/// new master holds every admitted one. Following `+switch-master` alone
/// still lost about a second of them (an outside test: ~1 s per failover):
/// Sentinel announces the switch only once the promotion is confirmed,
/// while the old master keeps taking writes it will drop. The store stops
/// writing to the old master as soon as the leader announces the replica it
/// chose (`+selected-slave`), and waits for that replica's promotion.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn checks_during_a_forced_failover_are_all_kept() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    let setup = SentinelSetup::start();
    let store = connect(&setup.store_url(), "fence").await;
    // GCRA, 100,000 a year, burst 100,000: each admitted check moves the
    // key's expiry T = 315,360 s on, and the test lasts far less than T,
    // so ceil(PTTL / T) is the number of admitted checks the key holds.
    let rule = RuleSpec::new(
        "fence",
        Algorithm::Gcra,
        100_000,
        Duration::from_secs(365 * 86_400),
    )
    .build()
    .unwrap();
    let t_ms: i64 = 315_360;
    let (stop, admitted) = (
        Arc::new(AtomicBool::new(false)),
        Arc::new(AtomicU64::new(0)),
    );
    let traffic = {
        let (store, rule) = (store.clone(), rule.clone());
        let (stop, admitted) = (Arc::clone(&stop), Arc::clone(&admitted));
        tokio::spawn(async move {
            let mut failed = 0_u64;
            while !stop.load(Ordering::Acquire) {
                match store.check(&rule, b"busy", 1, None).await {
                    Ok(d) => {
                        assert!(d.allowed, "{d:?}");
                        admitted.fetch_add(1, Ordering::AcqRel);
                    }
                    Err(_) => failed += 1,
                }
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
            failed
        })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    let setup = tokio::task::spawn_blocking(move || {
        let report = setup.failover();
        assert_ne!(report.new_master_port, report.old_master_port);
        setup
    })
    .await
    .expect("failover");
    tokio::time::sleep(Duration::from_millis(1500)).await;
    stop.store(true, Ordering::Release);
    let failed = traffic.await.expect("traffic");
    let admitted = admitted.load(Ordering::Acquire);
    let key = String::from_utf8(store.redis_key(&rule, b"busy")).unwrap();
    let pttl = setup
        .master()
        .command(&["PTTL", &key])
        .as_int()
        .expect("PTTL");
    let held = (pttl + t_ms - 1) / t_ms;
    eprintln!("admitted {admitted}, failed {failed}, the new master holds {held} (PTTL {pttl} ms)");

    assert!(admitted > 100, "too little traffic: {admitted}");
    assert!(
        u64::try_from(held).unwrap() >= admitted,
        "{admitted} admitted, the new master holds {held}: {} lost",
        admitted - u64::try_from(held).unwrap_or(0)
    );
}
