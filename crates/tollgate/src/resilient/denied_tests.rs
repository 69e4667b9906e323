//! [`ResilientLimiter::top_denied`]: what counts as a denial of a rule's
//! key, and that a report forgets what is older than the previous epoch.

use std::time::Duration;

use super::{OnError, Refusal, ResilientLimiter};
use crate::error::{Error, StoreError, StoreErrorKind};
use crate::limiter::{Check, Limiter};
use crate::rule::{Algorithm, RuleSpec};
use crate::store::memory::MemoryStore;

fn two_rules() -> Limiter<MemoryStore> {
    let rules = [
        RuleSpec::new("a", Algorithm::Gcra, 1, Duration::from_secs(3600))
            .build()
            .expect("rule"),
        RuleSpec::new("b", Algorithm::Gcra, 100, Duration::from_secs(3600))
            .build()
            .expect("rule"),
    ];
    Limiter::new(MemoryStore::new(), rules).expect("limiter")
}

#[tokio::test]
async fn a_rule_counts_its_own_denials_only() {
    let limiter = ResilientLimiter::builder(two_rules())
        .heartbeat(None)
        .build()
        .expect("resilient");
    // Rule a denies k's second and third checks; b would have admitted
    // them: not b's denials.
    for _ in 0..3 {
        let pairs = [Check::new("a", "k"), Check::new("b", "k")];
        limiter.check_all(&pairs).await.expect("decided");
    }
    let a = limiter.top_denied("a", 5).expect("rule");
    assert_eq!(a.len(), 1);
    assert_eq!(
        (a[0].key.as_slice(), a[0].count, a[0].error),
        (&b"k"[..], 2, 0)
    );
    assert_eq!(limiter.denied_lately("a").expect("rule"), 2);
    assert!(limiter.top_denied("b", 5).expect("rule").is_empty());
    // A bad request is refused, not counted.
    let long = vec![b'x'; crate::limits::MAX_KEY_LEN + 1];
    assert!(matches!(
        limiter.check("a", &long, 1).await,
        Err(Refusal::Invalid(_))
    ));
    assert_eq!(limiter.denied_lately("a").expect("rule"), 2);
    assert_eq!(
        limiter.top_denied("c", 5),
        Err(Error::UnknownRule("c".to_owned()))
    );
}

#[tokio::test]
async fn the_local_fallback_denials_count_and_deny_policy_refusals_do_not() {
    let limiter = ResilientLimiter::builder(two_rules())
        .heartbeat(None)
        .breaker(0, Duration::from_secs(1))
        .build()
        .expect("resilient");
    let failed = StoreError::new(StoreErrorKind::Unavailable, "down");
    let inner = &limiter.inner;
    let resolved = inner
        .limiter
        .resolve_all(&[Check::new("a", "k")], crate::op::Op::Check, None)
        .expect("valid");
    for _ in 0..3 {
        let _ = inner
            .on_store_error(
                resolved.pairs(),
                resolved.index(),
                &failed,
                Some(OnError::Local),
            )
            .await;
        let refused = inner
            .on_store_error(
                resolved.pairs(),
                resolved.index(),
                &failed,
                Some(OnError::Deny),
            )
            .await;
        assert!(matches!(refused, Err(Refusal::Unavailable(_))));
    }
    // Under `local`, a's share of 1 admits the first and denies two.
    let a = limiter.top_denied("a", 5).expect("rule");
    assert_eq!((a.len(), a[0].count), (1, 2), "{a:?}");
}

#[tokio::test]
async fn a_report_forgets_what_is_two_epochs_old() {
    let epoch = Duration::from_millis(100);
    let limiter = ResilientLimiter::builder(two_rules())
        .heartbeat(None)
        .top_denied_epoch(epoch)
        .build()
        .expect("resilient");
    assert_eq!(limiter.top_denied_epoch(), epoch);
    for _ in 0..3 {
        limiter.check("a", "k", 1).await.expect("decided");
    }
    assert_eq!(limiter.top_denied("a", 5).expect("rule")[0].count, 2);
    // Two epochs on: the denials' epoch is neither current nor previous.
    tokio::time::sleep(2 * epoch + Duration::from_millis(10)).await;
    assert!(limiter.top_denied("a", 5).expect("rule").is_empty());
    assert_eq!(limiter.denied_lately("a").expect("rule"), 0);
}

#[tokio::test]
async fn capacity_zero_records_nothing() {
    let limiter = ResilientLimiter::builder(two_rules())
        .heartbeat(None)
        .top_denied(0)
        .build()
        .expect("resilient");
    for _ in 0..3 {
        limiter.check("a", "k", 1).await.expect("decided");
    }
    assert!(limiter.top_denied("a", 5).expect("rule").is_empty());
    assert_eq!(limiter.top_denied_sketch().heap_bytes(), 0);
}
