//! The hybrid store against real `redis-server` processes: a fleet of five
//! replicas under ten times the demand a limit allows admits the limit
//! (±0.5 %, and within the bound docs/hybrid.md derives) with at most 0.002
//! Redis calls per check; light demand is
//! all admitted; a fixed-window batch never outlives its window; multi-rule
//! checks are all-or-nothing; costs above the batch; one batch call per key
//! at a time. After every test, no key without a TTL.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use redis_harness::RedisServer;
use tollgate::store::KeyCheck;
use tollgate::store::hybrid::{HybridOptions, HybridStore};
use tollgate::store::redis::{RedisOptions, RedisStore};
use tollgate::{Algorithm, FakeClock, Rule, RuleSpec, Store};

use crate::support::redis::assert_no_key_without_ttl;
use crate::support::{SECOND, rule};

const REPLICAS: u32 = 5;

/// A store on `server`, first waiting, if need be, until the hour has a
/// minute left: tests here count in windows of an hour on Redis's clock.
async fn redis(server: &RedisServer) -> RedisStore {
    redis_harness::clear_of_window_edge(Duration::from_secs(3600), Duration::from_secs(60));
    RedisStore::connect(&server.url(), RedisOptions::default())
        .await
        .expect("connect to the test redis-server")
}

/// Five replicas, each with its own connection.
async fn fleet(server: &RedisServer) -> Vec<HybridStore> {
    let mut fleet = Vec::new();
    for _ in 0..REPLICAS {
        let options = HybridOptions {
            replicas: REPLICAS,
            ..HybridOptions::default()
        };
        fleet.push(HybridStore::new(redis(server).await, options));
    }
    fleet
}

/// The Redis server's clock, µs.
fn redis_time(server: &RedisServer) -> u64 {
    let reply = server.command(&["TIME"]);
    let parts = reply.as_array().expect("TIME answers an array");
    let num = |i: usize| -> u64 { parts[i].as_text().unwrap().parse().unwrap() };
    num(0) * 1_000_000 + num(1)
}

/// EVALSHA + EVAL calls the server counted since the last `CONFIG RESETSTAT`.
fn script_calls(server: &RedisServer) -> u64 {
    let info = server.cli(&["INFO", "commandstats"]);
    info.lines()
        .filter(|l| l.starts_with("cmdstat_evalsha:") || l.starts_with("cmdstat_eval:"))
        .filter_map(|l| {
            let calls = l.split("calls=").nth(1)?.split(',').next()?;
            calls.parse::<u64>().ok()
        })
        .sum()
}

struct Run {
    checks: u64,
    admitted: u64,
    calls: u64,
    server_calls: u64,
    start: u64,
    end: u64,
}

/// Every replica makes `per_tick` cost-1 checks of `key` every `tick`
/// until `until` (Redis time, µs). Returns the tally, the store-counted and
/// server-counted Redis calls, and the Redis time around the run.
async fn drive(
    server: &RedisServer,
    fleet: &[HybridStore],
    rule: &Rule,
    key: &'static [u8],
    tick: Duration,
    per_tick: u64,
    until: u64,
) -> Run {
    let _ = server.cli(&["CONFIG", "RESETSTAT"]);
    let calls_before: u64 = fleet.iter().map(HybridStore::redis_calls).sum();
    let checks = Arc::new(AtomicU64::new(0));
    let admitted = Arc::new(AtomicU64::new(0));
    let start = redis_time(server);
    let duration = Duration::from_micros(until.saturating_sub(start));
    let mut handles = Vec::new();
    for store in fleet {
        let (store, rule) = (store.clone(), rule.clone());
        let (checks, admitted) = (checks.clone(), admitted.clone());
        handles.push(tokio::spawn(async move {
            let deadline = tokio::time::Instant::now() + duration;
            let mut interval = tokio::time::interval(tick);
            interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
            while interval.tick().await < deadline {
                for _ in 0..per_tick {
                    let d = store.check(&rule, key, 1, None).await.unwrap();
                    checks.fetch_add(1, Ordering::Relaxed);
                    if d.allowed {
                        admitted.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
        }));
    }
    for h in handles {
        h.await.unwrap();
    }
    let end = redis_time(server);
    Run {
        checks: checks.load(Ordering::Relaxed),
        admitted: admitted.load(Ordering::Relaxed),
        calls: fleet.iter().map(HybridStore::redis_calls).sum::<u64>() - calls_before,
        server_calls: script_calls(server),
        start,
        end,
    }
}

/// Five replicas, over 10,000 checks/s against 1,000/s: GCRA and token bucket
/// admit burst + rate × elapsed (Redis time), fixed window the limit of
/// each window the run covers, within ±0.5 %, and within the bound of
/// docs/hybrid.md: from an unused key never above the allowance, never
/// below it by more than `replicas × batch`; at most 0.002 Redis calls per
/// check, counted by the stores and by the server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fleet_under_ten_times_the_demand_admits_the_limit() {
    let server = RedisServer::start();
    let fleet = fleet(&server).await;
    for algorithm in [
        Algorithm::Gcra,
        Algorithm::TokenBucket,
        Algorithm::FixedWindow,
    ] {
        let rule = rule(&format!("heavy_{algorithm}"), algorithm, 1000, SECOND);
        let period = rule.period_micros();
        let now = redis_time(&server);
        let (from, until) = if algorithm == Algorithm::FixedWindow {
            // five whole windows: start 20 ms into one, stop 150 ms before
            // the fifth ends (10x demand spends a window in ~100 ms)
            let from = (now / period + 1) * period + 20_000;
            (from, from - 20_000 + 5 * period - 150_000)
        } else {
            // 6 s: at ±0.5 % the end of the run (units due but not yet
            // spent) must be a small share of the allowance
            (now, now + 6_000_000)
        };
        tokio::time::sleep(Duration::from_micros(from.saturating_sub(now))).await;
        // 5 replicas x 3 checks per ms = 15,000 checks/s nominal (timer
        // ticks run late on a busy machine: at least 10x in practice)
        let run = drive(
            &server,
            &fleet,
            &rule,
            b"k",
            Duration::from_millis(1),
            3,
            until,
        )
        .await;
        let allowance = if algorithm == Algorithm::FixedWindow {
            rule.limit() * (run.end / period - run.start / period + 1)
        } else {
            rule.burst() + (run.end - run.start) / rule.interval_micros()
        };
        let ratio = run.admitted as f64 / allowance as f64;
        let demand = run.checks as f64 / allowance as f64;
        let per_check = run.calls as f64 / run.checks as f64;
        let server_per_check = run.server_calls as f64 / run.checks as f64;
        eprintln!(
            "{algorithm}: {} checks ({demand:.1}x the allowance), admitted {} of {allowance} \
             ({:+.2}%), {} Redis calls ({per_check:.4}/check; server counted {} = {server_per_check:.4}/check), \
             {:.2} s",
            run.checks,
            run.admitted,
            (ratio - 1.0) * 100.0,
            run.calls,
            run.server_calls,
            (run.end - run.start) as f64 / 1e6,
        );
        assert!(
            demand >= 3.0,
            "{algorithm}: demand only {demand:.1}x: the machine is too slow for this test"
        );
        // The bound (docs/hybrid.md, "The error bound"): a run from an
        // unused key admits at most the allowance, and at least the
        // allowance less the units the replicas may hold.
        let held = u64::from(REPLICAS) * fleet[0].options().batch_for(&rule);
        assert!(
            run.admitted <= allowance,
            "{algorithm}: over-admitted: {} of {allowance}",
            run.admitted
        );
        assert!(
            run.admitted + held >= allowance,
            "{algorithm}: under-admitted beyond the bound: {} of {allowance} (R × B = {held})",
            run.admitted
        );
        // The goal: within ±0.5 %.
        assert!(
            (0.995..=1.005).contains(&ratio),
            "{algorithm}: {} of {allowance} is off by more than 0.5 %",
            run.admitted
        );
        assert!(
            per_check <= 0.002,
            "{algorithm}: {per_check:.4} Redis calls per check"
        );
        assert!(
            server_per_check <= 0.002,
            "{algorithm}: the server counted {server_per_check:.4} per check"
        );
    }
    assert_no_key_without_ttl(&server);
}

/// 30 % of the limit spread over five replicas: every check admitted, for
/// every algorithm, with far fewer Redis calls than checks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn light_demand_is_all_admitted() {
    let server = RedisServer::start();
    let fleet = fleet(&server).await;
    for algorithm in Algorithm::RATES {
        let rule = rule(&format!("light_{algorithm}"), algorithm, 1000, SECOND);
        let until = redis_time(&server) + 2_500_000;
        // 5 replicas x 3 checks per 50 ms = 300 checks/s
        let run = drive(
            &server,
            &fleet,
            &rule,
            b"k",
            Duration::from_millis(50),
            3,
            until,
        )
        .await;
        let per_check = run.calls as f64 / run.checks as f64;
        eprintln!(
            "{algorithm}: {} checks, {} admitted, {} Redis calls ({per_check:.3}/check)",
            run.checks, run.admitted, run.calls
        );
        assert!(run.checks >= 300, "{algorithm}: only {} checks", run.checks);
        assert_eq!(
            run.admitted, run.checks,
            "{algorithm}: a check was denied under light demand"
        );
        assert!(
            per_check <= 0.2,
            "{algorithm}: {per_check:.3} Redis calls per check"
        );
    }
    assert_no_key_without_ttl(&server);
}

/// A fixed-window batch taken near a window's end is never spent in the
/// next window: the local clock (fake here) reaching the window's end
/// sends the next check to Redis, and the units given back do not count
/// in the new window.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fixed_window_batch_ends_with_its_window() {
    let server = RedisServer::start();
    let clock = FakeClock::new();
    let options = HybridOptions {
        batch: Some(50),
        batch_life: Some(Duration::from_secs(3600)),
        ..HybridOptions::default()
    };
    let store = HybridStore::with_clock(redis(&server).await, options, clock.clone());
    let rule = RuleSpec::new("fw", Algorithm::FixedWindow, 100, Duration::from_secs(2))
        .build()
        .unwrap();
    let period = rule.period_micros();
    // start early in a window, so the window cannot end during the first steps
    let now = redis_time(&server);
    if now % period > period / 4 {
        tokio::time::sleep(Duration::from_micros(period - now % period + 10_000)).await;
    }
    let before = redis_time(&server);
    assert!(store.check(&rule, b"k", 1, None).await.unwrap().allowed);
    let after = redis_time(&server);
    assert_eq!(store.redis_calls(), 1);
    // the batch ends at most (window end - Redis time of the batch) after it
    let left_at_most = (before / period + 1) * period - before;
    let left_at_least = (after / period + 1) * period - after;
    clock.advance(Duration::from_micros(left_at_least - 1_000));
    assert!(store.check(&rule, b"k", 1, None).await.unwrap().allowed);
    assert_eq!(store.redis_calls(), 1, "spent locally inside the window");
    clock.set(left_at_most);
    // wait for Redis's window to end too
    let now = redis_time(&server);
    tokio::time::sleep(Duration::from_micros(
        (now / period + 1) * period - now + 5_000,
    ))
    .await;
    let d = store.check(&rule, b"k", 1, None).await.unwrap();
    assert!(d.allowed);
    assert_eq!(store.redis_calls(), 2, "the lease ended with its window");
    // the new window counts only the new batch, not the 48 left unspent;
    // that batch is sized to what the expired one spent (2)
    let plain = redis(&server).await;
    let peek = plain.check(&rule, b"k", 0, None).await.unwrap();
    assert_eq!(peek.remaining, 98, "{peek:?}");
    assert_no_key_without_ttl(&server);
}

/// A multi-rule check denied by one rule consumes nothing from the
/// others' local batches.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multi_rule_checks_are_all_or_nothing() {
    let server = RedisServer::start();
    let options = HybridOptions {
        batch: Some(10),
        batch_life: Some(Duration::from_secs(60)),
        ..HybridOptions::default()
    };
    let store = HybridStore::new(redis(&server).await, options);
    // Per hour: a unit back every 36 s, so the count at the end is the
    // test's doing, not the time a loaded machine took (per minute, one
    // came back every 0.6 s).
    let wide = RuleSpec::new("wide", Algorithm::Gcra, 100, Duration::from_secs(3600))
        .build()
        .unwrap();
    let narrow = RuleSpec::new(
        "narrow",
        Algorithm::FixedWindow,
        3,
        Duration::from_secs(3600),
    )
    .build()
    .unwrap();
    let both = [
        KeyCheck {
            rule: &wide,
            key: b"a",
            cost: 1,
        },
        KeyCheck {
            rule: &narrow,
            key: b"b",
            cost: 1,
        },
    ];
    let mut outcomes = Vec::new();
    for _ in 0..6 {
        outcomes.push(store.check_all(&both, None).await.unwrap());
    }
    let allowed: Vec<bool> = outcomes.iter().map(|m| m.allowed).collect();
    assert_eq!(allowed, [true, true, true, false, false, false]);
    let denied = &outcomes[5];
    assert_eq!(denied.deciding, 1, "the narrow rule decides: {denied:?}");
    assert!(denied.decisions[0].allowed, "the wide rule reports a peek");
    assert!(denied.decision().retry_after.is_some());
    // wide took a batch of 10 and 3 were spent: 7 more are local, the 8th
    // takes a batch
    let calls = store.redis_calls();
    for i in 0..7 {
        assert!(store.check(&wide, b"a", 1, None).await.unwrap().allowed);
        assert_eq!(store.redis_calls(), calls, "check {i} was local");
    }
    assert!(store.check(&wide, b"a", 1, None).await.unwrap().allowed);
    assert_eq!(store.redis_calls(), calls + 1);
    // shutting down: the 9 units left of the second batch go back
    assert_eq!(store.give_back_all().await, 1);
    let plain = redis(&server).await;
    let remaining = plain.check(&wide, b"a", 0, None).await.unwrap().remaining;
    assert!(
        (89..=90).contains(&remaining),
        "11 spent, 9 given back: {remaining}"
    );
    assert_no_key_without_ttl(&server);
}

/// A check costing more than the batch takes its cost; one that cannot
/// be covered takes nothing from Redis; above capacity it is "never".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn costs_above_the_batch() {
    let server = RedisServer::start();
    let options = HybridOptions {
        batch: Some(5),
        batch_life: Some(Duration::from_secs(60)),
        ..HybridOptions::default()
    };
    let store = HybridStore::new(redis(&server).await, options);
    let plain = redis(&server).await;
    let rule = RuleSpec::new("big", Algorithm::Gcra, 100, Duration::from_secs(3600))
        .build()
        .unwrap();
    assert!(store.check(&rule, b"k", 30, None).await.unwrap().allowed);
    assert_eq!(
        plain.check(&rule, b"k", 0, None).await.unwrap().remaining,
        70
    );
    let d = store.check(&rule, b"k", 80, None).await.unwrap();
    assert!(!d.allowed, "{d:?}");
    assert!(d.retry_after.is_some());
    assert_eq!(
        plain.check(&rule, b"k", 0, None).await.unwrap().remaining,
        70,
        "a lease that cannot cover its cost takes nothing"
    );
    // another key: a small check takes a batch, then a big one tops it up
    assert!(store.check(&rule, b"j", 1, None).await.unwrap().allowed);
    assert_eq!(
        plain.check(&rule, b"j", 0, None).await.unwrap().remaining,
        95
    );
    assert!(store.check(&rule, b"j", 60, None).await.unwrap().allowed);
    let left = plain.check(&rule, b"j", 0, None).await.unwrap().remaining;
    assert!(
        (35..=39).contains(&left),
        "the 4 local units went back: {left}"
    );
    let never = store.check(&rule, b"k", 101, None).await.unwrap();
    assert!(!never.allowed && never.retry_after.is_none(), "{never:?}");
    assert_no_key_without_ttl(&server);
}

/// Fifty concurrent first checks of one key make one Redis call.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_callers_share_one_batch() {
    let server = RedisServer::start();
    let options = HybridOptions {
        batch: Some(100),
        ..HybridOptions::default()
    };
    let store = HybridStore::new(redis(&server).await, options);
    let rule = RuleSpec::new("sf", Algorithm::Gcra, 1000, Duration::from_secs(1))
        .build()
        .unwrap();
    let handles: Vec<_> = (0..50)
        .map(|_| {
            let (store, rule) = (store.clone(), rule.clone());
            tokio::spawn(async move { store.check(&rule, b"k", 1, None).await.unwrap().allowed })
        })
        .collect();
    for h in handles {
        assert!(h.await.unwrap());
    }
    assert_eq!(store.redis_calls(), 1, "one lease served all fifty");
    assert_eq!(store.checks(), 50);
    assert_no_key_without_ttl(&server);
}

/// A batch that expires unspent is given back with the key's next batch,
/// and the next batch is sized to what the replica spent: a trickle of
/// checks does not keep units away from the other replicas.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expired_batches_go_back_and_shrink_the_next() {
    let server = RedisServer::start();
    let clock = FakeClock::new();
    let options = HybridOptions {
        batch: Some(20),
        batch_life: Some(Duration::from_secs(1)),
        ..HybridOptions::default()
    };
    let store = HybridStore::with_clock(redis(&server).await, options, clock.clone());
    let plain = redis(&server).await;
    let rule = RuleSpec::new("trickle", Algorithm::Gcra, 100, Duration::from_secs(3600))
        .build()
        .unwrap();
    assert!(store.check(&rule, b"k", 1, None).await.unwrap().allowed);
    assert_eq!(
        plain.check(&rule, b"k", 0, None).await.unwrap().remaining,
        80
    );
    for round in 2..=4 {
        clock.advance(Duration::from_secs(2));
        assert!(store.check(&rule, b"k", 1, None).await.unwrap().allowed);
        // the unspent units went back; the new batch holds one unit
        let remaining = plain.check(&rule, b"k", 0, None).await.unwrap().remaining;
        assert_eq!(remaining, 100 - round, "round {round}");
    }
    assert_eq!(store.redis_calls(), 4);
    assert_no_key_without_ttl(&server);
}

/// A full local shard forgets first the entries whose loss costs least:
/// those holding no units of a batch (a denial remembered, a batch spent out)
/// before those holding unspent units, which would be lost until Redis
/// refills. Forgetting a remembered denial admits nothing: Redis, the
/// authority, still denies the key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_fresh_keys_forgets_entries_without_units_first() {
    let server = RedisServer::start();
    let clock = FakeClock::new();
    let options = HybridOptions {
        batch: Some(10),
        batch_life: Some(Duration::from_secs(3600)),
        // 16 local shards of 10 entries
        max_keys: 160,
        ..HybridOptions::default()
    };
    let store = HybridStore::with_clock(redis(&server).await, options, clock);
    let rule = RuleSpec::new("r", Algorithm::Gcra, 100, Duration::from_secs(3600))
        .build()
        .unwrap();
    let key = |name: &str, i: u32| format!("{name}-{i}").into_bytes();
    // Holders: a batch of 10 units, 9 unspent.
    for i in 0..16 {
        assert!(
            store
                .check(&rule, &key("holder", i), 1, None)
                .await
                .unwrap()
                .allowed
        );
    }
    // Exhausted keys, their denial remembered locally.
    for i in 0..4 {
        assert!(
            store
                .check(&rule, &key("abuser", i), 100, None)
                .await
                .unwrap()
                .allowed
        );
        assert!(
            !store
                .check(&rule, &key("abuser", i), 1, None)
                .await
                .unwrap()
                .allowed
        );
    }
    // The flood: fresh keys spending their whole capacity, no units left.
    for i in 0..1_000 {
        assert!(
            store
                .check(&rule, &key("fresh", i), 100, None)
                .await
                .unwrap()
                .allowed
        );
        assert!(store.local_keys() <= 160);
    }
    let calls = store.redis_calls();
    for i in 0..16 {
        let d = store
            .check(&rule, &key("holder", i), 1, None)
            .await
            .unwrap();
        assert!(d.allowed, "holder {i}");
    }
    assert_eq!(store.redis_calls(), calls, "every holder kept its lease");
    for i in 0..4 {
        let d = store
            .check(&rule, &key("abuser", i), 1, None)
            .await
            .unwrap();
        assert!(!d.allowed, "exhausted key {i} admitted");
    }
    assert_no_key_without_ttl(&server);
}
