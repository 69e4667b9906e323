//! An operator's reset (docs/admin.md, "Reset a key") forgets the key's
//! open reservations as it forgets its leases: a reservation made before
//! the reset settles nothing afterwards (its estimate was counted in the
//! state the reset dropped), one made after it settles as usual.

use std::time::Duration;

use redis_harness::RedisServer;
use tollgate::resilient::ResilientLimiter;
use tollgate::store::Settled;
use tollgate::store::redis::{RedisOptions, RedisStore};
use tollgate::{Algorithm, Check, FakeClock, Limiter, MemoryStore, RuleSpec, Store};

const DAY: Duration = Duration::from_secs(86_400);

/// Day-long rules: at the store's own time the test moves no unit back.
/// `algorithms`: the ones to try (a window may end mid-test on a real
/// clock, so the windows only on a fake one).
async fn a_reset_forgets_open_reservations<S: Store>(store: S, algorithms: &[Algorithm]) {
    let rules = algorithms.iter().map(|&a| {
        RuleSpec::new(a.as_str(), a, 100, DAY)
            .build()
            .expect("rule")
    });
    let limiter = ResilientLimiter::builder(Limiter::new(store, rules).expect("limiter"))
        .heartbeat(None)
        // A busy machine's Redis is slow, never down: no store timeout.
        .timeout(Duration::from_secs(30))
        .build()
        .expect("resilient");
    for a in algorithms {
        let rule = a.as_str();
        let reserve = |cost: u64| {
            let limiter = &limiter;
            async move {
                let r = limiter
                    .reserve_all(&[Check::new(rule, "k").cost(cost)], DAY)
                    .await
                    .expect("reserve");
                r.ticket.expect("admitted")
            }
        };
        let before = reserve(60).await;
        let held = limiter.reset(rule, b"k").await.expect("reset");
        assert_eq!(held, [rule]);
        let after = reserve(30).await;
        let v = limiter.check(rule, "k", 70).await.expect("check");
        assert!(v.multi.allowed, "{rule}: a fresh key holds 100: {v:?}");
        // The reservation made before the reset is forgotten: its cancel
        // gives nothing back out of the new state.
        let got = limiter.settle(&before, None).await;
        assert_eq!(got, Ok(Settled::Unknown), "{rule}: the cancel before");
        let left = limiter.check(rule, "k", 0).await.expect("peek");
        assert_eq!(left.decision().remaining, 0, "{rule}: {left:?}");
        // The one made after it settles.
        let got = limiter.settle(&after, None).await;
        assert!(matches!(got, Ok(Settled::Done { .. })), "{rule}: {got:?}");
        let left = limiter.check(rule, "k", 0).await.expect("peek");
        assert_eq!(left.decision().remaining, 30, "{rule}: {left:?}");
    }
}

#[tokio::test]
async fn memory_reset_forgets_open_reservations() {
    let store = MemoryStore::builder()
        .clock(FakeClock::at(1_764_000_000_000_000))
        .build();
    let all = [
        Algorithm::Gcra,
        Algorithm::TokenBucket,
        Algorithm::FixedWindow,
        Algorithm::SlidingWindow,
        Algorithm::SlidingLog,
    ];
    a_reset_forgets_open_reservations(store, &all).await;
}

#[tokio::test]
async fn redis_reset_forgets_open_reservations() {
    let server = RedisServer::start();
    let store = RedisStore::connect(&server.url(), RedisOptions::default())
        .await
        .expect("connect to the test redis-server");
    a_reset_forgets_open_reservations(store, &[Algorithm::Gcra, Algorithm::TokenBucket]).await;
}
