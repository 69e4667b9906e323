//! Leases when Redis hangs (docs/failure-modes.md, "Charges, reservations
//! and leases"): under `on_error = "local"` an acquire takes a lease of the
//! in-process fallback at the rule's limit ÷ live replicas, and that lease
//! is released there, during the outage and after it; a lease Redis holds
//! cannot be released while Redis hangs.

use std::time::{Duration, Instant};

use redis_harness::RedisServer;
use tollgate::resilient::{OnError, Refusal, ResilientLimiter};
use tollgate::store::Released;
use tollgate::store::redis::{RedisOptions, RedisStore};
use tollgate::{Algorithm, Check, Limiter, RuleSpec};

const TIMEOUT: Duration = Duration::from_millis(100);

async fn replica(url: &str) -> ResilientLimiter<RedisStore> {
    let options = RedisOptions {
        prefix: "leases".to_owned(),
        timeout: TIMEOUT,
        ..RedisOptions::default()
    };
    let store = RedisStore::connect(url, options).await.expect("connect");
    let rule = RuleSpec::new("slots", Algorithm::Concurrency, 4, Duration::from_secs(30))
        .build()
        .expect("rule");
    ResilientLimiter::builder(Limiter::new(store, [rule]).expect("limiter"))
        .timeout(TIMEOUT)
        .rule_on_error("slots", OnError::Local)
        .heartbeat(Duration::from_millis(100))
        .build()
        .expect("resilient limiter")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_local_policy_holds_a_share_of_the_slots_and_releases_them() {
    let redis = RedisServer::start();
    let (a, b) = (replica(&redis.url()).await, replica(&redis.url()).await);
    let acquire = || async { a.acquire_all(&[Check::new("slots", "k")]).await };
    let held = acquire().await.expect("store up");
    assert_eq!(held.verdict.degraded, None);
    let in_redis = held.ticket.expect("a lease");
    // two replicas alive: each one's share of 4 slots is 2
    let start = Instant::now();
    while a.live_replicas() != 2 || b.live_replicas() != 2 {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "replicas never 2"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    redis.pause();
    let first = acquire().await.expect("local answers");
    assert_eq!(first.verdict.degraded, Some(OnError::Local));
    let first = first.ticket.expect("a local lease");
    let second = acquire().await.expect("local answers").ticket;
    assert!(second.is_some(), "the share holds 2");
    let full = acquire().await.expect("local answers");
    assert!(!full.verdict.multi.allowed, "{full:?}");
    assert_eq!(
        (full.verdict.degraded, full.ticket),
        (Some(OnError::Local), None)
    );
    // a local lease is released in the fallback while Redis hangs
    assert!(matches!(
        a.release(&first, false).await,
        Ok(Released::Done(_))
    ));
    assert!(acquire().await.expect("local answers").ticket.is_some());
    // a lease Redis holds cannot be released while it hangs, whatever
    // the rule's policy (which the refusal names)
    assert!(matches!(
        a.release(&in_redis, false).await,
        Err(Refusal::Stranded {
            policy: OnError::Local,
            ..
        })
    ));

    redis.resume();
    let start = Instant::now();
    while !matches!(a.release(&in_redis, false).await, Ok(Released::Done(_))) {
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "Redis never released it"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Redis answers, and does not know the local lease: the fallback
    // releases it, once
    let second = second.expect("a local lease");
    assert!(matches!(
        a.release(&second, false).await,
        Ok(Released::Done(_))
    ));
    assert!(matches!(
        a.release(&second, false).await,
        Ok(Released::Unknown)
    ));
    assert!(matches!(
        a.release(&in_redis, false).await,
        Ok(Released::Unknown)
    ));
}
