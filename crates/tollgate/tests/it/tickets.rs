//! Tickets a client rewrote: a reservation or lease id whose rule names
//! were swapped for another rule's, keeping the nonce, must find nothing
//! on every store (docs/http-api.md, "Usage and in-flight limits"), and
//! the real ticket must still settle or release, once.

use std::time::Duration;

use redis_harness::RedisServer;
use tollgate::store::redis::{RedisOptions, RedisStore};
use tollgate::store::{Released, Settled};
use tollgate::ticket::Ticket;
use tollgate::{Algorithm, Check, FakeClock, Limiter, MemoryStore, RuleSpec, Store};

fn rules() -> Vec<tollgate::Rule> {
    let minute = Duration::from_secs(60);
    [
        RuleSpec::new("tb", Algorithm::TokenBucket, 100, minute),
        RuleSpec::new("g", Algorithm::Gcra, 100, minute),
        RuleSpec::new("short", Algorithm::Concurrency, 4, Duration::from_secs(2)),
        RuleSpec::new("long", Algorithm::Concurrency, 4, Duration::from_secs(3600)),
    ]
    .iter()
    .map(|s| s.build().expect("valid rule"))
    .collect()
}

/// `ticket` with every pair's rule renamed `to`, the nonce kept.
fn renamed(ticket: &Ticket, to: &str) -> Ticket {
    let mut other = ticket.clone();
    for p in &mut other.pairs {
        p.rule = to.to_owned();
    }
    assert_eq!(
        Ticket::parse(&other.to_string(), ticket.kind).as_ref(),
        Ok(&other),
        "the rewritten id parses: only the store can refuse it"
    );
    other
}

const T0: u64 = 1_764_000_000_000_000;

async fn rewritten_tickets_find_nothing<S: Store>(limiter: &Limiter<S>) {
    let reserved = limiter
        .reserve_all_at(
            &[Check::new("tb", "k").cost(10)],
            Duration::from_secs(60),
            Some(T0),
        )
        .await
        .expect("reserve");
    let ticket = reserved.ticket.expect("admitted");
    // Settled far over the estimate under another rule: nothing happens.
    let forged = renamed(&ticket, "g");
    let got = limiter.settle_at(&forged, Some(&[90]), Some(T0 + 1)).await;
    assert_eq!(got, Ok(Settled::Unknown), "the forged settle");
    let g = limiter.check_at("g", "k", 0, Some(T0 + 2)).await.unwrap();
    assert_eq!(g.remaining, 100, "rule g was not charged: {g:?}");
    // The real reservation is still open, and settles once.
    let got = limiter.settle_at(&ticket, Some(&[4]), Some(T0 + 3)).await;
    assert!(
        matches!(got, Ok(Settled::Done { late: false, .. })),
        "{got:?}"
    );
    let tb = limiter.check_at("tb", "k", 0, Some(T0 + 4)).await.unwrap();
    assert_eq!(tb.remaining, 96, "4 used of the 10 reserved: {tb:?}");

    // A lease of the 2 s rule renewed as the hour-long rule's.
    let acquired = limiter
        .acquire_all_at(&[Check::new("short", "k")], Some(T0))
        .await
        .expect("acquire");
    let lease = acquired.ticket.expect("admitted");
    let forged = renamed(&lease, "long");
    let got = limiter.release_at(&forged, true, Some(T0 + 1)).await;
    assert_eq!(got, Ok(Released::Unknown), "the forged renew");
    // The slot ends with the short rule's lease, not an hour later.
    let after = limiter
        .check_at("short", "k", 0, Some(T0 + 3_000_000))
        .await
        .unwrap();
    assert_eq!(after.remaining, 4, "the slot came back: {after:?}");
}

#[tokio::test]
async fn memory_refuses_a_ticket_with_another_rule() {
    let store = MemoryStore::builder().clock(FakeClock::new()).build();
    let limiter = Limiter::new(store, rules()).expect("limiter");
    rewritten_tickets_find_nothing(&limiter).await;
}

#[tokio::test]
async fn redis_refuses_a_ticket_with_another_rule() {
    let server = RedisServer::start();
    let store = RedisStore::connect(&server.url(), RedisOptions::default())
        .await
        .expect("connect to the test redis-server");
    let limiter = Limiter::new(store, rules()).expect("limiter");
    rewritten_tickets_find_nothing(&limiter).await;
}

/// A reservation naming one (rule, key) twice is refused, consuming
/// nothing: on Redis both pairs shared one record, so the reserve took one
/// estimate and the settle counted the pair twice.
async fn a_pair_named_twice_is_refused<S: Store>(limiter: &Limiter<S>) {
    let twice = [
        Check::new("tb", "d").cost(10),
        Check::new("tb", "d").cost(10),
    ];
    let got = limiter
        .reserve_all_at(&twice, Duration::from_secs(60), Some(T0))
        .await;
    assert!(
        matches!(&got, Err(tollgate::Error::Mismatch(m)) if m.contains("named twice")),
        "{got:?}"
    );
    let tb = limiter.check_at("tb", "d", 0, Some(T0 + 1)).await.unwrap();
    assert_eq!(tb.remaining, 100, "nothing reserved: {tb:?}");
}

#[tokio::test]
async fn memory_refuses_a_reservation_naming_a_pair_twice() {
    let store = MemoryStore::builder().clock(FakeClock::new()).build();
    let limiter = Limiter::new(store, rules()).expect("limiter");
    a_pair_named_twice_is_refused(&limiter).await;
}

#[tokio::test]
async fn redis_refuses_a_reservation_naming_a_pair_twice() {
    let server = RedisServer::start();
    let store = RedisStore::connect(&server.url(), RedisOptions::default())
        .await
        .expect("connect to the test redis-server");
    let limiter = Limiter::new(store, rules()).expect("limiter");
    a_pair_named_twice_is_refused(&limiter).await;
}
