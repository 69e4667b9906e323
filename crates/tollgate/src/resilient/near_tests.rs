//! `tollgate_near_limit_total`: the units past the threshold counted
//! exactly, for every algorithm, at the default ratio and another.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use metrics::{Counter, Gauge, Histogram, Key, KeyName, Metadata, Recorder, SharedString, Unit};
use parking_lot::Mutex;

use super::{OnError, ResilientLimiter, metric};
use crate::limiter::{Check, Limiter};
use crate::rule::{Algorithm, RuleSpec};
use crate::store::memory::MemoryStore;
use crate::time::FakeClock;

/// Counters by `name{label=value,…}`; gauges and histograms dropped.
#[derive(Default)]
pub(super) struct Counters(Mutex<HashMap<String, Arc<AtomicU64>>>);

impl Counters {
    pub(super) fn get(&self, series: &str) -> u64 {
        self.0
            .lock()
            .get(series)
            .map_or(0, |c| c.load(Ordering::Relaxed))
    }
}

impl Recorder for Counters {
    fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
        let labels: Vec<String> = key
            .labels()
            .map(|l| format!("{}={}", l.key(), l.value()))
            .collect();
        let series = format!("{}{{{}}}", key.name(), labels.join(","));
        Counter::from_arc(Arc::clone(self.0.lock().entry(series).or_default()))
    }
    fn register_gauge(&self, _: &Key, _: &Metadata<'_>) -> Gauge {
        Gauge::noop()
    }
    fn register_histogram(&self, _: &Key, _: &Metadata<'_>) -> Histogram {
        Histogram::noop()
    }
}

/// Runs `f` on a limiter of the one rule `algorithm`, capacity 10, with
/// near-limit ratio `ratio` (the default when `None`), on a clock that
/// never moves; answers the near-limit and allowed counts of the rule.
fn run<F>(algorithm: Algorithm, ratio: Option<f64>, f: F) -> (u64, u64)
where
    F: AsyncFnOnce(&ResilientLimiter<MemoryStore<FakeClock>>),
{
    let counters = Counters::default();
    let store = MemoryStore::builder()
        .clock(FakeClock::at(1_000_000))
        .build();
    let rule = RuleSpec::new("r", algorithm, 10, Duration::from_secs(60))
        .build()
        .expect("rule");
    let limiter = Limiter::new(store, [rule]).expect("limiter");
    let mut builder = ResilientLimiter::builder(limiter).heartbeat(None);
    if let Some(ratio) = ratio {
        builder = builder.near_limit_ratio(ratio);
    }
    metrics::with_local_recorder(&counters, || {
        let limiter = builder.build().expect("resilient limiter");
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime")
            .block_on(f(&limiter));
    });
    (
        counters.get(&format!("{}{{rule=r}}", metric::NEAR_LIMIT)),
        counters.get(&format!("{}{{rule=r,outcome=allowed}}", metric::CHECKS)),
    )
}

/// `n` checks of `cost` on key `key`; answers how many were admitted.
async fn checks(
    limiter: &ResilientLimiter<MemoryStore<FakeClock>>,
    key: &str,
    cost: u64,
    n: u32,
) -> u32 {
    let mut admitted = 0;
    for _ in 0..n {
        let verdict = limiter.check("r", key, cost).await.expect("check");
        admitted += u32::from(verdict.multi.allowed);
    }
    admitted
}

const RATED: [Algorithm; 5] = [
    Algorithm::Gcra,
    Algorithm::TokenBucket,
    Algorithm::FixedWindow,
    Algorithm::SlidingWindow,
    Algorithm::SlidingLog,
];

#[test]
fn units_past_eighty_percent_count_one_by_one() {
    // Capacity 10, ratio 0.8: threshold 8. The 9th and 10th admitted
    // units land past it; the 11th is denied and adds nothing.
    for algorithm in RATED {
        let (near, allowed) = run(algorithm, None, async |l| {
            assert_eq!(checks(l, "a", 1, 11).await, 10, "{algorithm:?}");
        });
        assert_eq!((near, allowed), (2, 10), "{algorithm:?}");
    }
}

#[test]
fn a_check_crossing_the_threshold_counts_only_its_units_past_it() {
    // 6 units (used 6, under 8), then 3 (used 9: 1 past, though the
    // check took 3), then 1 (used 10: all of its 1), then 5 (denied).
    for algorithm in RATED {
        let (near, _) = run(algorithm, None, async |l| {
            for (cost, admitted) in [(6, true), (3, true), (1, true), (5, false)] {
                let v = l.check("r", "a", cost).await.expect("check");
                assert_eq!(v.multi.allowed, admitted, "{algorithm:?} cost {cost}");
            }
        });
        assert_eq!(near, 2, "{algorithm:?}");
    }
}

#[test]
fn another_ratio_moves_the_threshold() {
    // Ratio 0.35: threshold floor(3.5) = 3. Ten units one by one: the 4th
    // to the 10th land past it.
    for algorithm in RATED {
        let (near, _) = run(algorithm, Some(0.35), async |l| {
            assert_eq!(checks(l, "a", 1, 10).await, 10);
        });
        assert_eq!(near, 7, "{algorithm:?}");
    }
    // Ratio 1: nothing is ever past the capacity.
    let (near, allowed) = run(Algorithm::FixedWindow, Some(1.0), async |l| {
        checks(l, "a", 1, 12).await;
    });
    assert_eq!((near, allowed), (0, 10));
}

#[test]
fn keys_count_apart_and_peeks_count_nothing() {
    let (near, _) = run(Algorithm::Gcra, None, async |l| {
        checks(l, "a", 1, 9).await; // 1 past
        checks(l, "b", 1, 9).await; // 1 past
        checks(l, "a", 0, 3).await; // peeks at used 9: nothing taken
    });
    assert_eq!(near, 2);
}

#[test]
fn a_key_named_twice_counts_once_at_its_costs_added() {
    let (near, allowed) = run(Algorithm::FixedWindow, None, async |l| {
        let pair = [Check::new("r", "a").cost(4), Check::new("r", "a").cost(5)];
        assert!(l.check_all(&pair).await.expect("check").multi.allowed);
    });
    // Used 9 after 4 + 5: 1 past the threshold, counted once.
    assert_eq!((near, allowed), (1, 1));
}

#[test]
fn pairs_denied_by_another_pair_count_nothing() {
    let counters = Counters::default();
    let store = MemoryStore::builder()
        .clock(FakeClock::at(1_000_000))
        .build();
    let rule = |name, limit| {
        RuleSpec::new(name, Algorithm::FixedWindow, limit, Duration::from_secs(60))
            .build()
            .expect("rule")
    };
    let limiter = Limiter::new(store, [rule("big", 10), rule("small", 1)]).expect("limiter");
    metrics::with_local_recorder(&counters, || {
        let limiter = ResilientLimiter::builder(limiter)
            .heartbeat(None)
            .build()
            .expect("resilient limiter");
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime")
            .block_on(async {
                let both = [
                    Check::new("big", "k").cost(9),
                    Check::new("small", "k").cost(2),
                ];
                // small denies: big would have been at 9, past 8, but took nothing.
                assert!(!limiter.check_all(&both).await.expect("check").multi.allowed);
            });
    });
    assert_eq!(counters.get("tollgate_near_limit_total{rule=big}"), 0);
    assert_eq!(
        counters.get("tollgate_checks_total{rule=big,outcome=denied_by_other}"),
        1
    );
}

#[test]
fn leases_count_as_admissions() {
    let (near, allowed) = run(Algorithm::Concurrency, None, async |l| {
        for _ in 0..10 {
            let v = l
                .acquire_all(&[Check::new("r", "a")])
                .await
                .expect("acquire");
            assert!(v.verdict.multi.allowed);
        }
    });
    // Slots 9 and 10 are past 8.
    assert_eq!((near, allowed), (2, 10));
}

#[test]
fn ratios_outside_zero_to_one_are_refused() {
    for bad in [0.0, -0.5, 1.01, f64::NAN, f64::INFINITY] {
        let limiter = Limiter::new(
            MemoryStore::new(),
            [
                RuleSpec::new("r", Algorithm::Gcra, 1, Duration::from_secs(1))
                    .build()
                    .expect("rule"),
            ],
        )
        .expect("limiter");
        let err = ResilientLimiter::builder(limiter)
            .near_limit_ratio(bad)
            .build()
            .expect_err("a bad ratio");
        assert_eq!(err.field, "near_limit_ratio");
        assert!(
            err.message
                .starts_with("near_limit_ratio must be above 0 and at most 1, got"),
            "{}",
            err.message
        );
    }
    assert_eq!(metric::near_limit_threshold(10, 0.8), 8);
    assert_eq!(metric::near_limit_threshold(3, 0.5), 1);
    assert_eq!(
        metric::near_limit_threshold(1_000_000_000_000, 1.0),
        1_000_000_000_000
    );
}

#[test]
fn the_local_policy_counts_past_its_share() {
    // Not through a failing store (the memory store does not fail): the
    // local fallback's own check path, which counts as the store path does.
    let counters = Counters::default();
    let rule = RuleSpec::new("r", Algorithm::FixedWindow, 20, Duration::from_secs(60))
        .build()
        .expect("rule");
    metrics::with_local_recorder(&counters, || {
        let limiter =
            ResilientLimiter::builder(Limiter::new(MemoryStore::new(), [rule]).expect("limiter"))
                .heartbeat(None)
                .replicas(2)
                .on_error(OnError::Local)
                .build()
                .expect("resilient limiter");
        let inner = &limiter.inner;
        let rules = inner.limiter.rules();
        for _ in 0..10 {
            let pair = [crate::store::KeyCheck {
                rule: &rules[0],
                key: b"a",
                cost: 1,
            }];
            let multi = inner.check_locally(&pair, &[0]);
            assert!(multi.allowed);
            assert_eq!(multi.decisions[0].limit, 10, "the share of 2 replicas");
            inner.count(&pair, &[0], &multi);
        }
    });
    // Share 10, threshold 8: units 9 and 10.
    assert_eq!(counters.get("tollgate_near_limit_total{rule=r}"), 2);
}
