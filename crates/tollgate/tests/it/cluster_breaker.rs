//! The circuit breaker on a real 3-master Redis Cluster: one breaker per
//! master, so a master that stops answering (SIGSTOP, then killed) sends
//! its own keys to the failure policy while keys on the other masters are
//! still decided by Redis.
//!
//! The nodes run with `cluster-require-full-coverage no`: with the default
//! `yes`, Redis itself refuses every key (`CLUSTERDOWN`) once a master
//! without a replica is marked failed, and no breaker can help.

use std::time::Duration;

use redis_harness::{RedisCluster, RedisServer};
use tollgate::resilient::{OnError, Refusal, ResilientLimiter};
use tollgate::store::redis::{RedisOptions, RedisStore};
use tollgate::{Algorithm, Limiter};

use crate::support::{HOUR, rule};

/// Long enough that a healthy master always answers in time on a busy
/// two-core machine; a frozen one costs this per check until its breaker
/// opens.
const TIMEOUT: Duration = Duration::from_millis(800);
/// Failures in a row that open a breaker.
const THRESHOLD: u32 = 2;
const PREFIX: &str = "cb";

/// A key of rule `r` whose slot `master` serves.
fn key_on(cluster: &RedisCluster, master: &RedisServer) -> String {
    key_of_rule_on(cluster, "r", master)
}

/// A key of rule `name` whose slot `master` serves.
fn key_of_rule_on(cluster: &RedisCluster, name: &str, master: &RedisServer) -> String {
    (0..)
        .map(|n| format!("k{n}"))
        .find(|k| {
            cluster
                .master_of(&format!("{PREFIX}:{{{name}:={k}}}:fw"))
                .port()
                == master.port()
        })
        .expect("some key")
}

async fn limiter(cluster: &RedisCluster) -> ResilientLimiter<RedisStore> {
    // Counts in a window of an hour on the real clock: not across its end.
    redis_harness::clear_of_window_edge(Duration::from_secs(3600), Duration::from_secs(60));
    let options = RedisOptions {
        prefix: PREFIX.to_owned(),
        timeout: TIMEOUT,
        ..RedisOptions::default()
    };
    let store = RedisStore::connect(&cluster.store_url(), options)
        .await
        .expect("connect");
    let limiter = Limiter::new(
        store,
        [
            rule("r", Algorithm::FixedWindow, 2, HOUR),
            rule("d", Algorithm::FixedWindow, 2, HOUR),
        ],
    )
    .expect("limiter");
    ResilientLimiter::builder(limiter)
        .timeout(TIMEOUT)
        .on_error(OnError::Allow)
        // A `deny` rule: its refusal tells a skipped store from a timeout.
        .rule_on_error("d", OnError::Deny)
        // Open for the whole test: no probe, whatever the machine's pace.
        .breaker(THRESHOLD, Duration::from_secs(3600))
        .heartbeat(None)
        .build()
        .expect("resilient")
}

/// Checks `key` once: (allowed, answered by the policy).
async fn check(limiter: &ResilientLimiter<RedisStore>, key: &str) -> (bool, bool) {
    let v = limiter.check("r", key, 1).await.expect("allow answers");
    (v.multi.allowed, v.degraded.is_some())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_master_opens_the_breaker_of_its_own_keys_only() {
    let cluster = RedisCluster::start(3, 0);
    for node in cluster.nodes() {
        let _ = node.cli(&["CONFIG", "SET", "cluster-require-full-coverage", "no"]);
    }
    let masters = cluster.masters();
    let dead = masters[0];
    let dead_key = key_on(&cluster, dead);
    let healthy: Vec<String> = masters[1..].iter().map(|m| key_on(&cluster, m)).collect();
    let limiter = limiter(&cluster).await;
    for key in healthy.iter().chain([&dead_key]) {
        assert_eq!(check(&limiter, key).await, (true, false), "{key} warm");
    }

    dead.pause();
    for n in 0..=THRESHOLD {
        assert_eq!(
            check(&limiter, &dead_key).await,
            (true, true),
            "check {n} of the frozen master's key: the policy answers"
        );
    }
    assert!(limiter.breaker_open(), "the frozen master's breaker opened");
    // Limit 2, one used: Redis admits one more and denies the next; the
    // `allow` policy would admit both.
    for key in &healthy {
        assert_eq!(
            check(&limiter, key).await,
            (true, false),
            "{key}: a healthy master's key decided by Redis"
        );
        assert_eq!(
            check(&limiter, key).await,
            (false, false),
            "{key}: a healthy master's key denied by Redis, not admitted by the policy"
        );
    }
    // The frozen master's keys: the policy, at once (its breaker is open:
    // the `deny` rule's refusal of a key there names the breaker, where a
    // call to the frozen master would have timed out).
    assert_eq!(check(&limiter, &dead_key).await, (true, true));
    let r = limiter
        .check("d", &key_of_rule_on(&cluster, "d", dead), 1)
        .await;
    assert!(
        matches!(&r, Err(Refusal::Unavailable(e)) if e.to_string().contains("circuit breaker open")),
        "its open breaker still waited: {r:?}"
    );

    // Killed outright: the same.
    dead.kill();
    for key in &healthy {
        assert_eq!(
            check(&limiter, key).await,
            (false, false),
            "{key} after the kill"
        );
    }
    assert_eq!(check(&limiter, &dead_key).await, (true, true));
}
