//! Which keys a full memory store forgets: what costs least to forget
//! first. A flood of fresh keys must never hand an exhausted key its quota
//! back while a key with less at stake is held (issue 22: with a fixed
//! window all keys of one window end together, so ordering by the end of
//! the state alone let the flood reset 19 of 20 exhausted keys).

use std::time::Duration;

use tollgate::{Algorithm, FakeClock, MemoryStore};

use crate::support::{HOUR, rule};

fn key(prefix: &str, i: u32) -> Vec<u8> {
    format!("{prefix}-{i}").into_bytes()
}

/// Twenty keys exhaust a fixed window, then 20,000 checks on fresh keys
/// go through a store capped at 1,000 keys: every exhausted key is still
/// denied, all in the same window as the flood.
#[test]
fn a_flood_of_fresh_keys_never_resets_exhausted_fixed_window_keys() {
    for shards in [1, 4] {
        let clock = FakeClock::new();
        let store = MemoryStore::builder()
            .clock(clock.clone())
            .shards(shards)
            .max_keys(1_000)
            .build();
        let r = rule("per_key", Algorithm::FixedWindow, 5, HOUR);
        for i in 0..20 {
            for _ in 0..5 {
                assert!(store.check_sync(&r, &key("abuser", i), 1, None).allowed);
            }
            assert!(!store.check_sync(&r, &key("abuser", i), 1, None).allowed);
        }
        for i in 0..20_000 {
            clock.advance_micros(1);
            assert!(store.check_sync(&r, &key("fresh", i), 1, None).allowed);
            assert!(store.len() <= store.capacity());
        }
        let reset: Vec<u32> = (0..20)
            .filter(|&i| store.check_sync(&r, &key("abuser", i), 1, None).allowed)
            .collect();
        assert!(
            reset.is_empty(),
            "{shards} shard(s): exhausted keys reset: {reset:?}"
        );
    }
}

/// GCRA across two rules: an exhausted key of 10 per second ends sooner
/// than a one-hit key of 1000 per hour, yet it has far more at stake. The
/// one-hit keys go first.
#[test]
fn exhausted_gcra_keys_of_a_short_rule_outlive_one_hit_keys_of_a_long_rule() {
    let clock = FakeClock::new();
    let store = MemoryStore::builder()
        .clock(clock.clone())
        .shards(1)
        .max_keys(100)
        .build();
    let short = rule("short", Algorithm::Gcra, 10, Duration::from_secs(1));
    let long = rule("long", Algorithm::Gcra, 1000, HOUR);
    for i in 0..10 {
        for _ in 0..10 {
            assert!(store.check_sync(&short, &key("abuser", i), 1, None).allowed);
        }
        assert!(!store.check_sync(&short, &key("abuser", i), 1, None).allowed);
    }
    for i in 0..500 {
        assert!(store.check_sync(&long, &key("fresh", i), 1, None).allowed);
        assert!(store.len() <= 100);
    }
    for i in 0..10 {
        let d = store.check_sync(&short, &key("abuser", i), 1, None);
        assert!(!d.allowed, "exhausted key {i} was forgotten");
    }
    // The newest one-hit keys are held too (the flood evicts its own kind).
    assert_eq!(
        store
            .check_sync(&long, &key("fresh", 499), 0, None)
            .remaining,
        999
    );
}

/// When every candidate is exhausted, the one whose state ends soonest
/// goes first: across two GCRA rules, by the time each is full again.
#[test]
fn among_exhausted_keys_the_soonest_to_end_goes_first() {
    let clock = FakeClock::new();
    let store = MemoryStore::builder()
        .clock(clock.clone())
        .shards(1)
        .max_keys(16)
        .build();
    let short = rule("short", Algorithm::Gcra, 1, Duration::from_secs(1));
    let long = rule("long", Algorithm::Gcra, 1, HOUR);
    for i in 0..8 {
        assert!(store.check_sync(&long, &key("long", i), 1, None).allowed);
        assert!(store.check_sync(&short, &key("short", i), 1, None).allowed);
    }
    assert_eq!(store.len(), 16);
    // One more exhausted key: 17 held, three go (down to 7/8 of 16); the
    // short ones end in a second, the long ones in an hour.
    assert!(store.check_sync(&long, b"one more", 1, None).allowed);
    assert_eq!(store.len(), 14);
    for i in 0..8 {
        assert!(!store.check_sync(&long, &key("long", i), 1, None).allowed);
    }
    let forgotten = (0..8)
        .filter(|&i| {
            store
                .check_sync(&short, &key("short", i), 0, None)
                .remaining
                == 1
        })
        .count();
    assert_eq!(forgotten, 3);
}

/// Sliding-log entries over their cap: the keys with the least of their
/// limit in use go first, not the exhausted ones that merely end sooner.
#[test]
fn log_entry_eviction_keeps_exhausted_logs() {
    let clock = FakeClock::new();
    let store = MemoryStore::builder()
        .clock(clock.clone())
        .shards(1)
        .max_log_entries(64)
        .build();
    let log = rule("log", Algorithm::SlidingLog, 4, HOUR);
    for i in 0..5 {
        for _ in 0..4 {
            clock.advance_micros(1);
            assert!(store.check_sync(&log, &key("abuser", i), 1, None).allowed);
        }
    }
    assert_eq!(store.log_entries(), 20);
    for i in 0..1_000 {
        clock.advance_micros(1);
        assert!(store.check_sync(&log, &key("fresh", i), 1, None).allowed);
        assert!(store.log_entries() <= 64, "{}", store.log_entries());
    }
    for i in 0..5 {
        let d = store.check_sync(&log, &key("abuser", i), 1, None);
        assert!(!d.allowed, "exhausted log {i} was forgotten");
    }
}

/// Among keys that are not exhausted, the least used go first: keys with
/// three of five units used outlive keys with one, whatever their ages.
#[test]
fn the_least_used_keys_go_first() {
    for algorithm in Algorithm::RATES {
        let clock = FakeClock::new();
        let store = MemoryStore::builder()
            .clock(clock.clone())
            .shards(1)
            .max_keys(64)
            .build();
        let r = rule(algorithm.as_str(), algorithm, 5, HOUR);
        for i in 0..10 {
            clock.advance_micros(1);
            assert!(store.check_sync(&r, &key("busy", i), 3, None).allowed);
        }
        for i in 0..200 {
            clock.advance_micros(1);
            assert!(store.check_sync(&r, &key("light", i), 1, None).allowed);
        }
        for i in 0..10 {
            let d = store.check_sync(&r, &key("busy", i), 0, None);
            assert_eq!(d.remaining, 2, "{algorithm}: busy key {i} was forgotten");
        }
    }
}

/// A store already full of exhausted keys: each new key must evict one of
/// them, and they all end together (one fixed window). The one forgotten
/// must not be chosen by a fixed order of the keys: keys that survived
/// earlier evictions would then rank last for good, and every newly
/// exhausted key (an abuser's) would be the first to get its quota back.
/// Newly exhausted keys are forgotten no more often than old ones.
#[test]
fn keys_exhausted_last_are_not_forgotten_first() {
    let clock = FakeClock::new();
    let store = MemoryStore::builder()
        .clock(clock.clone())
        .shards(1)
        .max_keys(1_000)
        .build();
    let cheap = rule("cheap", Algorithm::FixedWindow, 1, HOUR);
    let per_key = rule("per_key", Algorithm::FixedWindow, 5, HOUR);
    for i in 0..3_000 {
        clock.advance_micros(1);
        assert!(store.check_sync(&cheap, &key("old", i), 1, None).allowed);
    }
    let old_held = |store: &MemoryStore<FakeClock>| {
        (0..3_000)
            .filter(|&i| store.check_sync(&cheap, &key("old", i), 0, None).remaining == 0)
            .count()
    };
    let before = old_held(&store);
    for i in 0..300 {
        for _ in 0..5 {
            clock.advance_micros(1);
            assert!(store.check_sync(&per_key, &key("new", i), 1, None).allowed);
        }
    }
    let new_held = (0..300)
        .filter(|&i| {
            store
                .check_sync(&per_key, &key("new", i), 0, None)
                .remaining
                == 0
        })
        .count();
    let old_lost = 1.0 - old_held(&store) as f64 / before as f64;
    let new_lost = 1.0 - new_held as f64 / 300.0;
    eprintln!(
        "newly exhausted keys lost {:.1}%, older ones {:.1}%",
        new_lost * 100.0,
        old_lost * 100.0
    );
    assert!(
        new_lost <= old_lost + 0.2,
        "newly exhausted keys lost {:.0}%, older ones {:.0}%",
        new_lost * 100.0,
        old_lost * 100.0
    );
}
