//! The limiter's own behaviour: rules by name, errors, and `until_ready`.

use std::time::Duration;

use tollgate::limits::MAX_KEY_LEN;
use tollgate::{
    Algorithm, Check, Error, FakeClock, Limiter, MemoryStore, RuleSpec, TokioClock, WaitError,
};

fn gcra(name: &str, limit: u64, period: Duration) -> tollgate::Rule {
    RuleSpec::new(name, Algorithm::Gcra, limit, period)
        .build()
        .expect("valid rule")
}

#[tokio::test]
async fn unknown_rule_and_long_key_are_errors_not_denials() {
    let store = MemoryStore::builder().clock(FakeClock::new()).build();
    let limiter = Limiter::new(store, [gcra("r", 1, Duration::from_secs(1))]).unwrap();
    assert_eq!(
        limiter.check("nope", "k", 1).await,
        Err(Error::UnknownRule("nope".into()))
    );
    let long = vec![b'x'; MAX_KEY_LEN + 1];
    assert_eq!(
        limiter.check("r", &long, 1).await,
        Err(Error::KeyTooLong {
            len: MAX_KEY_LEN + 1
        })
    );
    // A key of exactly the limit is fine, and so is the empty key.
    assert!(
        limiter
            .check("r", vec![b'x'; MAX_KEY_LEN], 1)
            .await
            .unwrap()
            .allowed
    );
    assert!(limiter.check("r", "", 1).await.unwrap().allowed);
    assert_eq!(limiter.check_all(&[]).await, Err(Error::NoChecks));
    let bad = [Check::new("r", "a"), Check::new("missing", "b")];
    assert_eq!(
        limiter.check_all(&bad).await,
        Err(Error::UnknownRule("missing".into()))
    );
    // The failed multi-check consumed nothing from "r"/"a".
    assert!(limiter.check("r", "a", 1).await.unwrap().allowed);
}

#[test]
fn duplicate_rule_names_are_rejected() {
    let store = MemoryStore::new();
    let err = Limiter::new(
        store,
        [
            gcra("same", 1, Duration::from_secs(1)),
            gcra("same", 2, Duration::from_secs(1)),
        ],
    )
    .unwrap_err();
    assert_eq!(err.field, "name");
    assert!(err.message.contains("same"), "{err}");
}

#[tokio::test(start_paused = true)]
async fn until_ready_waits_exactly_the_retry_time() {
    let store = MemoryStore::builder().clock(TokioClock::new()).build();
    let limiter = Limiter::new(store, [gcra("r", 2, Duration::from_secs(1))]).unwrap();
    let start = tokio::time::Instant::now();
    for _ in 0..2 {
        limiter.until_ready("r", "k", 1, None).await.unwrap();
    }
    assert_eq!(start.elapsed(), Duration::ZERO);
    // The third unit is emitted 500 ms later (T = 1s / 2).
    let d = limiter.until_ready("r", "k", 1, None).await.unwrap();
    assert!(d.allowed);
    assert_eq!(start.elapsed(), Duration::from_millis(500));
    // And the fourth 500 ms after that.
    limiter.until_ready("r", "k", 1, None).await.unwrap();
    assert_eq!(start.elapsed(), Duration::from_millis(1000));
}

#[tokio::test(start_paused = true)]
async fn until_ready_fails_early_past_the_deadline_and_consumes_nothing() {
    let store = MemoryStore::builder().clock(TokioClock::new()).build();
    let limiter = Limiter::new(store, [gcra("r", 1, Duration::from_secs(10))]).unwrap();
    limiter.until_ready("r", "k", 1, None).await.unwrap();
    let start = tokio::time::Instant::now();
    let err = limiter
        .until_ready("r", "k", 1, Some(Duration::from_secs(9)))
        .await
        .unwrap_err();
    assert_eq!(
        err,
        WaitError::DeadlineExceeded {
            retry_after: Duration::from_secs(10)
        }
    );
    // It failed at once rather than sleeping into the failure.
    assert_eq!(start.elapsed(), Duration::ZERO);
    // A deadline exactly at the retry time is enough.
    let d = limiter
        .until_ready("r", "k", 1, Some(Duration::from_secs(10)))
        .await
        .unwrap();
    assert!(d.allowed);
    assert_eq!(start.elapsed(), Duration::from_secs(10));
}

#[tokio::test(start_paused = true)]
async fn until_ready_refuses_a_cost_above_capacity() {
    let store = MemoryStore::builder().clock(TokioClock::new()).build();
    let limiter = Limiter::new(store, [gcra("r", 5, Duration::from_secs(1))]).unwrap();
    assert_eq!(
        limiter.until_ready("r", "k", 6, None).await,
        Err(WaitError::Never)
    );
    // Nothing was consumed: the full burst is still there.
    let d = limiter.check("r", "k", 5).await.unwrap();
    assert!(d.allowed);
    assert_eq!(d.remaining, 0);
}

#[tokio::test(start_paused = true)]
async fn concurrent_waiters_are_all_admitted_at_the_rate() {
    let store = MemoryStore::builder().clock(TokioClock::new()).build();
    let limiter =
        std::sync::Arc::new(Limiter::new(store, [gcra("r", 10, Duration::from_secs(1))]).unwrap());
    let start = tokio::time::Instant::now();
    let tasks: Vec<_> = (0..30)
        .map(|_| {
            let limiter = limiter.clone();
            tokio::spawn(async move { limiter.until_ready("r", "k", 1, None).await })
        })
        .collect();
    for t in tasks {
        assert!(t.await.unwrap().unwrap().allowed);
    }
    // 10 at once, then one every 100 ms: the 30th at 2 s, not earlier.
    assert!(
        start.elapsed() >= Duration::from_secs(2),
        "{:?}",
        start.elapsed()
    );
    assert!(
        start.elapsed() < Duration::from_secs(3),
        "{:?}",
        start.elapsed()
    );
}

#[tokio::test]
async fn explicit_times_past_max_time_are_refused() {
    let store = MemoryStore::new();
    let rule = RuleSpec::new("fw", Algorithm::FixedWindow, 3, Duration::from_secs(1))
        .build()
        .unwrap();
    let limiter = Limiter::new(store, [rule]).unwrap();
    let late = tollgate::time::MAX_TIME + 1;
    assert_eq!(
        limiter.check_at("fw", "k", 1, Some(late)).await,
        Err(Error::TimeOutOfRange { at: late })
    );
    assert_eq!(
        limiter
            .check_all_at(&[Check::new("fw", "k")], Some(u64::MAX))
            .await,
        Err(Error::TimeOutOfRange { at: u64::MAX })
    );
    let d = limiter
        .check_at("fw", "k", 1, Some(tollgate::time::MAX_TIME))
        .await
        .unwrap();
    assert!(d.allowed);
}
