//! A reservation settles under exactly the rule that admitted it
//! (docs/semantics.md, "Reserve, then settle"): a key's per-key override
//! (config or runtime) included. A settle used to look the rule up by
//! name alone, so a give-back or a usage above the estimate moved the
//! key's state by the base rule's interval, or in the base rule's window.

use std::time::Duration;

use redis_harness::RedisServer;
use tollgate::resilient::ResilientLimiter;
use tollgate::store::Settled;
use tollgate::store::redis::{RedisOptions, RedisStore};
use tollgate::ticket::Ticket;
use tollgate::{
    Algorithm, Check, FakeClock, KeyPattern, Limiter, MemoryStore, Overrides, RuntimeOverride,
    Store,
};

use crate::support::{HOUR, rule};

const DAY: Duration = Duration::from_secs(86_400);
/// On a minute and an hour boundary.
const T0: u64 = 1_764_000_000_000_000;

/// GCRA `g`: 10 a second, key `vip` 1000 a second (burst 1000); fixed
/// window `w`: 100 an hour, key `vip` 600 a minute.
fn with_overrides<S: Store>(store: S) -> Limiter<S> {
    let second = Duration::from_secs(1);
    let mut g = Overrides::new();
    g.insert(
        KeyPattern::parse("vip"),
        rule("g", Algorithm::Gcra, 1000, second),
    )
    .expect("override");
    let mut w = Overrides::new();
    w.insert(
        KeyPattern::parse("vip"),
        rule("w", Algorithm::FixedWindow, 600, Duration::from_secs(60)),
    )
    .expect("override");
    Limiter::with_overrides(
        store,
        [
            rule("g", Algorithm::Gcra, 10, second),
            rule("w", Algorithm::FixedWindow, 100, HOUR),
        ],
        vec![("g".to_owned(), g), ("w".to_owned(), w)],
    )
    .expect("limiter")
}

async fn reserve<S: Store>(limiter: &Limiter<S>, rule: &str, cost: u64, at: u64) -> Ticket {
    let r = limiter
        .reserve_all_at(&[Check::new(rule, "vip").cost(cost)], HOUR, Some(at))
        .await
        .expect("reserve");
    assert!(r.multi.allowed, "{rule}: {r:?}");
    r.ticket.expect("admitted")
}

async fn settle<S: Store>(limiter: &Limiter<S>, ticket: &Ticket, actual: u64, at: u64) {
    let got = limiter.settle_at(ticket, Some(&[actual]), Some(at)).await;
    assert!(
        matches!(got, Ok(Settled::Done { late: false, .. })),
        "{got:?}"
    );
}

async fn remaining<S: Store>(limiter: &Limiter<S>, rule: &str, at: u64) -> u64 {
    let d = limiter
        .check_at(rule, "vip", 0, Some(at))
        .await
        .expect("peek");
    d.remaining
}

async fn config_overrides_settle_under_the_override<S: Store>(limiter: &Limiter<S>) {
    // 30 s into the second minute of an hour: the override's window
    // (this minute) and the base rule's (this hour) start apart.
    let w = T0 + 90_000_000;
    // (rule, time, estimate, usage, remaining after, what)
    let steps = [
        // GCRA: 500 back by the override's 1 ms each (the base rule's
        // 100 ms each gave back everything).
        ("g", T0, 800, 300, 700, "g after a give-back"),
        // 150 more at 1 ms each (the base rule's 100 ms each put the key
        // 15 s in debt).
        ("g", T0, 100, 250, 450, "g after usage above"),
        // Fixed window: the 100 above land in the override's minute
        // window (the base rule's hour window replaced the key's).
        ("w", w, 300, 400, 200, "w after usage above"),
        // And a give-back comes out of the same window.
        ("w", w, 150, 50, 150, "w after a give-back"),
    ];
    for (rule, at, estimate, usage, left, what) in steps {
        let t = reserve(limiter, rule, estimate, at).await;
        settle(limiter, &t, usage, at).await;
        assert_eq!(remaining(limiter, rule, at).await, left, "{what}");
    }
}

#[tokio::test]
async fn memory_settles_under_a_config_override() {
    let store = MemoryStore::builder().clock(FakeClock::new()).build();
    config_overrides_settle_under_the_override(&with_overrides(store)).await;
}

#[tokio::test]
async fn redis_settles_under_a_config_override() {
    let server = RedisServer::start();
    let store = RedisStore::connect(&server.url(), RedisOptions::default())
        .await
        .expect("connect to the test redis-server");
    config_overrides_settle_under_the_override(&with_overrides(store)).await;
}

/// Through the resilient limiter at the store's own time, under an
/// operator's runtime override: GCRA `g` 10 a day, `vip` 1000 a day; fixed
/// window `w` 100 a day, `vip` 600 an hour. Day-long periods: the time the
/// test takes moves nothing by a unit. `windows`: also the fixed window
/// (at the store's time a window may end mid-test, so only on a fake
/// clock).
async fn runtime_overrides_settle_under_the_override<S: Store>(store: S, windows: bool) {
    let limiter = ResilientLimiter::builder(
        Limiter::new(
            store,
            [
                rule("g", Algorithm::Gcra, 10, DAY),
                rule("w", Algorithm::FixedWindow, 100, DAY),
            ],
        )
        .expect("limiter"),
    )
    .heartbeat(None)
    // A busy machine's Redis is slow, never down: no store timeout.
    .timeout(Duration::from_secs(30))
    .build()
    .expect("resilient limiter");
    for (name, limit, period) in [("g", 1000, None), ("w", 600, Some(HOUR))] {
        limiter
            .set_override(RuntimeOverride {
                rule: name.into(),
                key: b"vip".to_vec(),
                limit,
                period,
                burst: None,
                ends_ms: None,
            })
            .await
            .expect("override");
    }
    let reserve = |rule: &'static str, cost: u64| {
        let limiter = &limiter;
        async move {
            let r = limiter
                .reserve_all(&[Check::new(rule, "vip").cost(cost)], HOUR)
                .await
                .expect("reserve");
            assert!(r.verdict.multi.allowed, "{rule}: {r:?}");
            r.ticket.expect("admitted")
        }
    };
    let settle = |t: Ticket, actual: u64| {
        let limiter = &limiter;
        async move {
            let got = limiter.settle(&t, Some(&[actual])).await;
            assert!(
                matches!(got, Ok(Settled::Done { late: false, .. })),
                "{got:?}"
            );
        }
    };
    let remaining = |rule: &'static str| {
        let limiter = &limiter;
        async move {
            let v = limiter.check(rule, "vip", 0).await.expect("peek");
            v.decision().remaining
        }
    };
    settle(reserve("g", 800).await, 300).await;
    assert_eq!(remaining("g").await, 700, "g after a give-back");
    settle(reserve("g", 100).await, 250).await;
    assert_eq!(remaining("g").await, 450, "g after usage above");
    if windows {
        settle(reserve("w", 300).await, 400).await;
        assert_eq!(remaining("w").await, 200, "w after usage above");
    }
}

#[tokio::test]
async fn memory_settles_under_a_runtime_override() {
    let store = MemoryStore::builder().clock(FakeClock::at(T0)).build();
    runtime_overrides_settle_under_the_override(store, true).await;
}

#[tokio::test]
async fn redis_settles_under_a_runtime_override() {
    let server = RedisServer::start();
    let store = RedisStore::connect(&server.url(), RedisOptions::default())
        .await
        .expect("connect to the test redis-server");
    runtime_overrides_settle_under_the_override(store, false).await;
}
