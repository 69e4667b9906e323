//! A settle, cancel, release or renew the store cannot answer (Redis
//! stopped by the harness) is refused whatever the rule's failure policy:
//! the refusal and the unrecorded units name the rule's own policy, not
//! `deny`.

use std::time::Duration;

use redis_harness::RedisServer;

use super::near_tests::Counters;
use super::{OnError, ResilientLimiter, metric};
use crate::limiter::{Check, Limiter};
use crate::rule::{Algorithm, RuleSpec};
use crate::store::redis::{RedisOptions, RedisStore};

/// Runs `f` on a current-thread runtime.
fn block_on<T>(f: impl std::future::Future<Output = T>) -> T {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
        .block_on(f)
}

/// A limiter over `redis` (100 ms store timeout, no heartbeat) with
/// `rules`, each under `on_error = allow`.
async fn limiter_on(redis: &RedisServer, rules: &[RuleSpec]) -> ResilientLimiter<RedisStore> {
    let options = RedisOptions {
        timeout: Duration::from_millis(100),
        ..RedisOptions::default()
    };
    let store = RedisStore::connect(&redis.url(), options)
        .await
        .expect("connect");
    let built: Vec<_> = rules.iter().map(|s| s.build().expect("rule")).collect();
    let mut builder = ResilientLimiter::builder(Limiter::new(store, built).expect("limiter"))
        .timeout(Duration::from_millis(100))
        .heartbeat(None);
    for spec in rules {
        builder = builder.rule_on_error(&spec.name, OnError::Allow);
    }
    builder.build().expect("resilient")
}

#[test]
fn refusals_of_an_allow_rule_name_allow() {
    let redis = RedisServer::start();
    let counters = Counters::default();
    metrics::with_local_recorder(&counters, || {
        block_on(async {
            let hour = Duration::from_secs(3600);
            let rules = [
                RuleSpec::new("open", Algorithm::Gcra, 100, hour),
                RuleSpec::new("slots", Algorithm::Concurrency, 4, hour),
            ];
            let limiter = limiter_on(&redis, &rules).await;
            let reserved = limiter
                .reserve_all(&[Check::new("open", "k").cost(10)], hour)
                .await
                .expect("store up");
            let reservation = reserved.ticket.expect("admitted");
            let acquired = limiter
                .acquire_all(&[Check::new("slots", "k")])
                .await
                .expect("store up");
            let lease = acquired.ticket.expect("admitted");

            redis.pause();
            let refusals = [
                (
                    "settle",
                    limiter.settle(&reservation, Some(&[30])).await.err(),
                ),
                ("cancel", limiter.settle(&reservation, None).await.err()),
                ("release", limiter.release(&lease, false).await.err()),
                ("renew", limiter.release(&lease, true).await.err()),
            ];
            redis.resume();
            for (what, refused) in refusals {
                let refused = refused.unwrap_or_else(|| panic!("{what} answered"));
                let text = refused.to_string();
                assert!(
                    text.contains("allow") && !text.contains("deny"),
                    "{what}: {text}"
                );
            }
        });
    });
    let unrecorded = |policy: &str| {
        counters.get(&format!(
            "{}{{rule=open,policy={policy}}}",
            metric::CHARGE_UNRECORDED
        ))
    };
    assert_eq!((unrecorded("allow"), unrecorded("deny")), (30, 0));
}

/// `settle_within` tries a failed settle again until the store answers:
/// the usage is recorded once (the attempt that timed out ran when the
/// store came back; the next finds the ticket settled), and nothing is
/// counted as unrecorded.
#[test]
fn a_settle_within_a_window_outlasts_a_stalled_store() {
    let redis = RedisServer::start();
    let counters = Counters::default();
    let left = metrics::with_local_recorder(&counters, || {
        block_on(async {
            let hour = Duration::from_secs(3600);
            let rules = [RuleSpec::new("open", Algorithm::FixedWindow, 100, hour)];
            let limiter = limiter_on(&redis, &rules).await;
            let reserved = limiter
                .reserve_all(&[Check::new("open", "k").cost(10)], hour)
                .await
                .expect("store up");
            let reservation = reserved.ticket.expect("admitted");
            redis.pause();
            let (settled, ()) = tokio::join!(
                limiter.settle_within(&reservation, Some(&[30]), Duration::from_secs(60)),
                async {
                    // Long enough for several tries to fail.
                    tokio::time::sleep(Duration::from_millis(500)).await;
                    redis.resume();
                }
            );
            settled.expect("settled once the store answered");
            limiter
                .inspect("open", b"k")
                .await
                .expect("inspect")
                .decision
                .remaining
        })
    });
    assert_eq!(left, 70, "30 recorded, once");
    assert_eq!(
        counters.get(&format!(
            "{}{{rule=open,policy=allow}}",
            metric::CHARGE_UNRECORDED
        )),
        0
    );
}
