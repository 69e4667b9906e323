//! tollgate's in-memory store, every algorithm, on each scenario.

use std::time::Duration;

use tollgate::{Algorithm, FakeClock, MemoryStore, Rule, RuleSpec};

use crate::scenarios::common::{self, Footprint, MANY_KEYS, Runner, Scenario};

/// A rule under which every check of the benchmark is admitted at a frozen
/// clock. GCRA and token bucket: governor's quota exactly, 10^6 per second
/// (T = 1 µs) with a burst of `u32::MAX`; the windows: a limit of 10^12.
/// The sliding log's limit is capped at 100 000, so its benchmark moves the
/// clock a period on every 32768 checks.
fn rule(algorithm: Algorithm) -> Rule {
    let spec = match algorithm {
        Algorithm::Gcra | Algorithm::TokenBucket => {
            RuleSpec::new("api", algorithm, 1_000_000, Duration::from_secs(1))
                .burst(u64::from(u32::MAX))
        }
        Algorithm::SlidingLog => RuleSpec::new("api", algorithm, 100_000, Duration::from_secs(1)),
        _ => RuleSpec::new("api", algorithm, 1_000_000_000_000, Duration::from_secs(1)),
    };
    spec.build().expect("valid bench rule")
}

/// A store big enough to hold [`MANY_KEYS`] keys without evicting.
fn store(clock: &FakeClock) -> MemoryStore<FakeClock> {
    MemoryStore::builder()
        .clock(clock.clone())
        .max_keys(4 * MANY_KEYS)
        .build()
}

/// Moves the clock a period on before the sliding log's limit is reached:
/// at the start of every run and every 32768 checks of a thread, so no
/// period sees more than 65536 of the 100 000 units (one atomic add per
/// 32768 checks).
#[inline]
fn tick(algorithm: Algorithm, clock: &FakeClock, i: u64) {
    if algorithm == Algorithm::SlidingLog && i & 32767 == 0 {
        clock.advance(Duration::from_secs(1));
    }
}

/// A runner of `scenario` for `algorithm`. Filling the many-keys GCRA store
/// records tollgate's bytes per idle key.
pub(crate) fn runner(algorithm: Algorithm, scenario: Scenario) -> Runner {
    let rule = rule(algorithm);
    let clock = FakeClock::new();
    let key = b"user:00000000";
    match scenario {
        Scenario::SingleKey => {
            let store = store(&clock);
            common::single(move |i| {
                tick(algorithm, &clock, i);
                assert!(std::hint::black_box(store.check_sync(&rule, key, 1, None)).allowed);
            })
        }
        Scenario::ManyKeys => {
            let keys = common::keys();
            let store = fill(&rule, &clock, keys);
            let mut next = 0;
            common::single(move |i| {
                tick(algorithm, &clock, i);
                let key = &keys[next][..];
                next += 1;
                if next == keys.len() {
                    next = 0;
                }
                assert!(std::hint::black_box(store.check_sync(&rule, key, 1, None)).allowed);
            })
        }
        Scenario::TwoThreads => {
            let store = store(&clock);
            common::two_threads(move |_, i| {
                tick(algorithm, &clock, i);
                assert!(std::hint::black_box(store.check_sync(&rule, key, 1, None)).allowed);
            })
        }
    }
}

/// A store holding every key once; for GCRA, records the bytes per key.
fn fill(rule: &Rule, clock: &FakeClock, keys: &[Vec<u8>]) -> MemoryStore<FakeClock> {
    let (bytes, store) = common::bytes_per_key(keys.len(), || {
        let store = store(clock);
        for key in keys {
            assert!(store.check_sync(rule, key, 1, None).allowed);
        }
        store
    });
    assert_eq!(store.len(), keys.len(), "the bench store must not evict");
    if rule.algorithm() == Algorithm::Gcra {
        common::record_footprint(Footprint {
            who: "tollgate (gcra)".to_owned(),
            bytes,
            key_bytes: 0.0,
        });
    }
    store
}
