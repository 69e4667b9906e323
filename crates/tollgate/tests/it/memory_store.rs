//! The memory store's bounds and bookkeeping: caps under a flood of keys,
//! which keys go first, sweeping, and checks that must not create keys.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tollgate::algorithm::GcraState;
use tollgate::algorithm::gcra;
use tollgate::store::KeyCheck;
use tollgate::{Algorithm, Clock, FakeClock, MemoryStore, Rule};

use crate::support::{HOUR, rule};

/// A million distinct keys, half GCRA and half sliding log, through a store
/// capped at 10 000 keys and 5 000 log entries: the caps hold throughout,
/// the newest keys are kept, and the store still decides exactly for them.
#[test]
fn a_million_keys_stay_within_the_caps() {
    let clock = FakeClock::new();
    let store = MemoryStore::builder()
        .clock(clock.clone())
        .max_keys(10_000)
        .max_log_entries(5_000)
        .build();
    assert!(store.capacity() <= 10_000);
    assert!(store.capacity() >= 9_000, "capacity {}", store.capacity());
    let gcra_rule = rule("g", Algorithm::Gcra, 1, HOUR);
    let log_rule = rule("l", Algorithm::SlidingLog, 3, HOUR);
    let key = |i: u32| i.to_le_bytes();
    let mut created_at = Vec::with_capacity(1_000_000);
    let done = AtomicBool::new(false);
    std::thread::scope(|s| {
        // Another thread watches the caps while keys pour in.
        s.spawn(|| {
            let mut looks = 0;
            while !done.load(Ordering::Relaxed) || looks == 0 {
                assert!(store.len() <= store.capacity(), "{} keys", store.len());
                assert!(store.log_entries() <= 5_000, "{}", store.log_entries());
                looks += 1;
            }
        });
        flood(&store, &clock, &gcra_rule, &log_rule, &mut created_at);
        done.store(true, Ordering::Relaxed);
    });
    assert!(store.len() <= store.capacity());
    assert!(store.len() >= store.capacity() / 2, "{} keys", store.len());
    let now = clock.now();
    for i in (1_000_000 - 200..1_000_000u32).step_by(2) {
        let d = store.check_sync(&gcra_rule, &key(i), 1, None);
        let tat = created_at[i as usize] + gcra_rule.interval_micros();
        let expected = gcra::check(&gcra_rule, Some(GcraState { tat }), now, 1).0;
        assert_eq!(d, expected, "key {i}");
        assert!(!d.allowed);
    }
}

/// Key `i`, alternately GCRA and sliding log, one microsecond apart; every
/// tenth step also adds an entry to a recent log key.
fn flood(
    store: &MemoryStore<FakeClock>,
    clock: &FakeClock,
    gcra_rule: &Rule,
    log_rule: &Rule,
    created_at: &mut Vec<u64>,
) {
    let key = |i: u32| i.to_le_bytes();
    for i in 0..1_000_000u32 {
        clock.advance_micros(1);
        let rule = if i % 2 == 0 { gcra_rule } else { log_rule };
        assert!(store.check_sync(rule, &key(i), 1, None).allowed);
        created_at.push(clock.now());
        if i % 10 == 9 {
            // A second entry for a recent log key (if it is still held).
            assert!(store.check_sync(log_rule, &key(i - 4), 1, None).allowed);
        }
        if i % 1_000 == 999 {
            assert!(store.len() <= store.capacity(), "{} keys", store.len());
            assert!(
                store.log_entries() <= 5_000,
                "{} log entries",
                store.log_entries()
            );
        }
    }
}

/// A full shard whose keys are half idle (back to empty) and half live:
/// making room drops the idle ones and keeps every live one, state intact.
#[test]
fn idle_keys_are_dropped_before_live_ones() {
    let clock = FakeClock::new();
    let store = MemoryStore::builder()
        .clock(clock.clone())
        .shards(1)
        .max_keys(100)
        .build();
    let short = rule("short", Algorithm::FixedWindow, 1, Duration::from_millis(1));
    let long = rule("long", Algorithm::Gcra, 1, HOUR);
    for i in 0..50u8 {
        assert!(store.check_sync(&short, &[i], 1, None).allowed);
        assert!(store.check_sync(&long, &[i], 1, None).allowed);
    }
    assert_eq!(store.len(), 100);
    clock.advance(Duration::from_millis(2));
    // The 50 short keys are back to empty; a new key needs room.
    assert!(store.check_sync(&long, b"new", 1, None).allowed);
    assert_eq!(store.len(), 51);
    for i in 0..50u8 {
        let d = store.check_sync(&long, &[i], 1, None);
        assert!(!d.allowed, "live key {i} was forgotten");
        assert_eq!(
            d.retry_after,
            Some(HOUR - Duration::from_millis(2)),
            "key {i}"
        );
    }
}

/// With no idle key to drop and every key exhausted (limit 1), a full
/// shard evicts the keys nearest to reset, never more than an eighth of it
/// at once, and keeps the rest.
#[test]
fn live_keys_nearest_reset_are_evicted_first() {
    let clock = FakeClock::new();
    let store = MemoryStore::builder()
        .clock(clock.clone())
        .shards(1)
        .max_keys(80)
        .build();
    let long = rule("long", Algorithm::Gcra, 1, HOUR);
    for i in 0..81u8 {
        clock.advance(Duration::from_secs(1));
        assert!(store.check_sync(&long, &[i], 1, None).allowed);
        assert!(store.len() <= 80);
    }
    // Key 80 overflowed the shard: the 11 oldest keys (0..=10) went, down
    // to 7/8 of the cap.
    assert_eq!(store.len(), 70);
    for i in 11..81u8 {
        assert!(!store.check_sync(&long, &[i], 1, None).allowed, "key {i}");
    }
    for i in 0..11u8 {
        assert!(
            store.check_sync(&long, &[i], 0, None).remaining == 1,
            "key {i}"
        );
    }
}

/// Sliding-log entries past the cap evict log keys (all equally used here:
/// the ones nearest to reset); other keys are not touched for it.
#[test]
fn log_entries_stay_under_their_cap() {
    let clock = FakeClock::new();
    let store = MemoryStore::builder()
        .clock(clock.clone())
        .shards(1)
        .max_log_entries(64)
        .build();
    let log = rule("log", Algorithm::SlidingLog, 10, HOUR);
    let other = rule("other", Algorithm::Gcra, 1, HOUR);
    assert!(store.check_sync(&other, b"x", 1, None).allowed);
    for i in 0..40u8 {
        for _ in 0..4 {
            clock.advance_micros(1);
            assert!(store.check_sync(&log, &[i], 1, None).allowed);
            assert!(store.log_entries() <= 64, "{}", store.log_entries());
        }
    }
    assert!(!store.check_sync(&other, b"x", 1, None).allowed);
    // The newest log key keeps its four entries.
    assert_eq!(store.check_sync(&log, &[39], 0, None).remaining, 6);
}

/// `sweep` drops the keys back to empty at the store's time, of every
/// algorithm, and keeps the live ones.
#[test]
fn sweep_drops_idle_keys() {
    let clock = FakeClock::new();
    let store = MemoryStore::builder().clock(clock.clone()).build();
    let rules: Vec<Rule> = Algorithm::RATES
        .into_iter()
        .map(|a| rule(a.as_str(), a, 2, Duration::from_secs(1)))
        .collect();
    let live = rule("live", Algorithm::Gcra, 1, HOUR);
    for r in &rules {
        for key in [&b"a"[..], b"b", b"c"] {
            assert!(store.check_sync(r, key, 1, None).allowed);
        }
    }
    assert!(store.check_sync(&live, b"a", 1, None).allowed);
    assert_eq!(store.len(), 3 * rules.len() + 1);
    store.sweep();
    assert_eq!(store.len(), 3 * rules.len() + 1, "nothing is idle yet");
    // Two periods: every window has passed, every bucket refilled.
    clock.advance(Duration::from_secs(2));
    store.sweep();
    assert_eq!(store.len(), 1);
    assert_eq!(store.log_entries(), 0);
    assert!(!store.check_sync(&live, b"a", 1, None).allowed);
}

/// Peeks (cost 0) report without creating a key, alone or in a multi-rule
/// check.
#[test]
fn peeks_create_no_key() {
    let store = MemoryStore::builder().clock(FakeClock::new()).build();
    let rules: Vec<Rule> = Algorithm::RATES
        .into_iter()
        .map(|a| rule(a.as_str(), a, 5, Duration::from_secs(1)))
        .collect();
    for r in &rules {
        let d = store.check_sync(r, b"unknown", 0, None);
        assert!(d.allowed);
        assert_eq!(d.remaining, 5, "{}", r.name());
    }
    let checks: Vec<KeyCheck<'_>> = rules
        .iter()
        .map(|rule| KeyCheck {
            rule,
            key: b"other",
            cost: 0,
        })
        .collect();
    assert!(store.check_all_sync(&checks, None).allowed);
    assert_eq!(store.len(), 0);
    assert!(store.is_empty());
}

/// A denied check on a key not held (cost above the capacity, or a
/// multi-rule check another pair denies) creates no key.
#[test]
fn denied_checks_create_no_key() {
    let store = MemoryStore::builder().clock(FakeClock::new()).build();
    let rules: Vec<Rule> = Algorithm::RATES
        .into_iter()
        .map(|a| rule(a.as_str(), a, 5, Duration::from_secs(1)))
        .collect();
    for r in &rules {
        let d = store.check_sync(r, b"unknown", 6, None);
        assert!(d.is_never(), "{}", r.name());
    }
    assert_eq!(store.len(), 0);
    let mut checks: Vec<KeyCheck<'_>> = rules
        .iter()
        .map(|rule| KeyCheck {
            rule,
            key: b"pair",
            cost: 1,
        })
        .collect();
    checks[2].cost = 6;
    let d = store.check_all_sync(&checks, None);
    assert!(!d.allowed);
    assert_eq!(d.deciding, 2);
    assert_eq!(store.len(), 0);
    assert_eq!(store.log_entries(), 0);
}

/// A one-pair `check_all` (decided on the single check's path: shared lock,
/// compare-and-swap) answers exactly as the exclusive multi-rule path does
/// for the same pair, admitted, denied, never and peeked, for every
/// algorithm.
#[test]
fn a_one_pair_check_all_decides_as_the_multi_rule_path() {
    let clock = FakeClock::new();
    let one = MemoryStore::builder().clock(clock.clone()).build();
    let multi = MemoryStore::builder().clock(clock.clone()).build();
    let rules: Vec<Rule> = Algorithm::RATES
        .into_iter()
        .map(|a| rule(a.as_str(), a, 3, Duration::from_secs(1)))
        .collect();
    let costs = [1, 1, 0, 2, 1, 4, 1, 0, 1, 1, 1, 2];
    for (step, &cost) in costs.iter().cycle().take(60).enumerate() {
        for r in &rules {
            let pair = KeyCheck {
                rule: r,
                key: b"k",
                cost,
            };
            // A peek of another key always admits: the pair decides alone.
            let peek = KeyCheck {
                rule: r,
                key: b"other",
                cost: 0,
            };
            let got = one.check_all_sync(&[pair], None);
            let want = multi.check_all_sync(&[pair, peek], None);
            assert_eq!(got.allowed, want.allowed, "{} step {step}", r.name());
            assert_eq!(got.deciding, 0);
            assert_eq!(
                got.decisions,
                [want.decisions[0]],
                "{} step {step}",
                r.name()
            );
        }
        clock.advance(Duration::from_millis(130));
    }
    assert_eq!(one.len(), multi.len());
    assert_eq!(one.log_entries(), multi.log_entries());
}

/// The default store's time is the wall clock's (microseconds since the
/// Unix epoch, advanced monotonically): a fixed window ends on the wall
/// clock's boundary (SEMANTICS: `w = floor(t / period)`), not a period
/// after the process started.
#[tokio::test]
async fn the_default_clock_aligns_fixed_windows_to_the_wall_clock() {
    use std::time::{SystemTime, UNIX_EPOCH};
    let wall = || {
        u64::try_from(
            SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .expect("after 1970")
                .as_micros(),
        )
        .expect("fits")
    };
    let period = Duration::from_secs(60);
    let limiter = tollgate::Limiter::new(
        MemoryStore::default(),
        [rule("minute", Algorithm::FixedWindow, 5, period)],
    )
    .expect("limiter");
    // Started at 0, the store's window would end a whole period from now.
    // Wait for a moment well inside a wall-clock minute, so that the
    // answer tells the two apart by far more than the test's own delays.
    while !(5..=50).contains(&((wall() / 1_000_000) % 60)) {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let before = wall();
    let d = limiter.check("minute", "k", 1).await.expect("check");
    let after = wall();
    let period_us = 60_000_000;
    let end = (before / period_us + 1) * period_us;
    let reset = u64::try_from(d.reset_after.as_micros()).expect("fits");
    assert!(
        reset <= end - before && reset + 100_000 >= end - after,
        "reset_after {reset} µs; the wall-clock minute ends in {}..{} µs",
        end - after,
        end - before
    );
}
