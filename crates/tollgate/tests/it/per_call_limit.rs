//! Per-call limits (`Check::under`): decided against the given limit on
//! the named rule's counter, on every store, and refused when they would
//! read the counter differently (docs/semantics.md, "Per-call limits").

use std::time::Duration;

use redis_harness::RedisServer;
use tollgate::store::hybrid::{HybridOptions, HybridStore};
use tollgate::store::redis::{RedisOptions, RedisStore};
use tollgate::{Algorithm, Check, Error, Limiter, MemoryStore, Store};

use crate::support::{HOUR, rule};

/// Counting in windows of an hour on the real clock: called before each
/// test, so no window ends half-way.
fn clear_of_the_hour() {
    redis_harness::clear_of_window_edge(Duration::from_secs(3600), Duration::from_secs(60));
}

async fn shares_the_counter<S: Store>(store: S) {
    clear_of_the_hour();
    let limiter = Limiter::new(
        store,
        [
            rule("fw", Algorithm::FixedWindow, 100, HOUR),
            rule("sw", Algorithm::SlidingWindow, 100, HOUR),
            rule("g", Algorithm::Gcra, 100, HOUR),
        ],
    )
    .expect("limiter");
    // Windows count units: the rule's limit and a per-call one read the
    // same count.
    for (name, algorithm) in [
        ("fw", Algorithm::FixedWindow),
        ("sw", Algorithm::SlidingWindow),
    ] {
        let three = rule(name, algorithm, 3, HOUR);
        let check = [Check::new(name, "k").under(&three)];
        for left in [2, 1, 0] {
            let d = limiter.check_all(&check).await.expect("check");
            assert!(d.allowed, "{name}");
            assert_eq!((d.decisions[0].limit, d.decisions[0].remaining), (3, left));
        }
        assert!(
            !limiter.check_all(&check).await.expect("check").allowed,
            "{name}"
        );
        // the rule's own limit reads the same counter: 3 of 100 taken
        let d = limiter.check(name, "k", 0).await.expect("peek");
        assert_eq!((d.limit, d.remaining), (100, 97), "{name}");
        // and a larger per-call limit admits past the rule's
        let big = rule(name, algorithm, 1000, HOUR);
        let d = limiter
            .check_all(&[Check::new(name, "k").under(&big).cost(150)])
            .await
            .expect("check");
        assert!(d.allowed, "{name}");
        assert_eq!(d.decisions[0].remaining, 1000 - 153, "{name}");
    }
    // GCRA keeps a time, not a count: a per-call limit spaces its units at
    // its own rate.
    let three = rule("g", Algorithm::Gcra, 3, HOUR);
    let check = [Check::new("g", "k").under(&three)];
    for _ in 0..3 {
        assert!(limiter.check_all(&check).await.expect("check").allowed);
    }
    assert!(!limiter.check_all(&check).await.expect("check").allowed);
    // A per-call limit that would read the counter another way is refused.
    for (bad, why) in [
        (rule("other", Algorithm::FixedWindow, 3, HOUR), "name"),
        (rule("fw", Algorithm::SlidingWindow, 3, HOUR), "algorithm"),
        (
            rule("fw", Algorithm::FixedWindow, 3, Duration::from_secs(60)),
            "period",
        ),
    ] {
        let got = limiter
            .check_all(&[Check::new("fw", "k").under(&bad)])
            .await;
        match got {
            Err(Error::Mismatch(m)) => assert!(m.contains("per-call limit"), "{why}: {m}"),
            other => panic!("{why}: {other:?}"),
        }
    }
}

#[tokio::test]
async fn per_call_limits_on_the_memory_store() {
    shares_the_counter(MemoryStore::new()).await;
}

#[tokio::test]
async fn per_call_limits_on_redis() {
    let server = RedisServer::start();
    let store = RedisStore::connect(&server.url(), RedisOptions::default())
        .await
        .expect("connect");
    shares_the_counter(store).await;
}

#[tokio::test]
async fn per_call_limits_in_hybrid_mode() {
    let server = RedisServer::start();
    let store = RedisStore::connect(&server.url(), RedisOptions::default())
        .await
        .expect("connect");
    shares_the_counter(HybridStore::new(store, HybridOptions::default())).await;
}

/// In hybrid mode a per-call limit must not hold the named rule's units in
/// a lease of its own that nothing gives back: one check under a large
/// per-call limit takes 1 unit of the shared counter, as on every other
/// store, so the rule's own check after it still sees 99 of 100 left.
#[tokio::test]
async fn hybrid_per_call_limit_does_not_strand_leased_units() {
    clear_of_the_hour();
    let server = RedisServer::start();
    let store = RedisStore::connect(&server.url(), RedisOptions::default())
        .await
        .expect("connect");
    let limiter = Limiter::new(
        HybridStore::new(store, HybridOptions::default()),
        [rule("fw", Algorithm::FixedWindow, 100, HOUR)],
    )
    .expect("limiter");
    let big = rule("fw", Algorithm::FixedWindow, 1000, HOUR);
    let d = limiter
        .check_all(&[Check::new("fw", "k").under(&big)])
        .await
        .expect("check");
    assert!(d.allowed);
    // well past the hybrid lease (1 s): unspent units are back by now
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let d = limiter.check("fw", "k", 1).await.expect("check");
    assert!(d.allowed, "the rule's own check was denied: {d:?}");
    let peek = limiter.check("fw", "k", 0).await.expect("peek");
    // Redis holds the per-call check's 1 unit and the batch the rule's own
    // check leased (a tenth of 100), nothing more.
    assert_eq!(peek.remaining, 100 - 1 - 10, "{peek:?}");
}
