//! The Redis store against real `redis-server` processes: decisions equal
//! the memory store's, a fleet of instances holds one limit, every key has a
//! TTL, and lost scripts or a restarted server are survived.

use std::time::{Duration, Instant};

use redis_harness::RedisServer;
use tollgate::store::KeyCheck;
use tollgate::store::redis::{RedisOptions, RedisStore};
use tollgate::{
    Algorithm, Decision, MemoryStore, Rule, RuleSpec, Store, StoreError, StoreErrorKind,
};

use crate::support::fleet;
use crate::support::redis::{
    EPOCH, Rng, assert_no_key_without_ttl, connect, random_rule, script_runs,
};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn decisions_equal_the_memory_store_on_random_traces() {
    let server = RedisServer::start();
    let redis = connect(&server, "conf").await;
    let mut rng = Rng(0x7011_6a7e);
    let mut compared = 0;
    for round in 0..40 {
        for algorithm in Algorithm::RATES {
            let rule = random_rule(&mut rng, &format!("r{round}"), algorithm);
            let memory = MemoryStore::new();
            let period = rule.period_micros();
            let mut t = EPOCH + rng.below(period * 3);
            for step in 0..40 {
                let key = [b'k', u8::try_from(rng.below(3)).unwrap()];
                let cost = match rng.below(10) {
                    0 => 0,
                    1 => rule.capacity() + 1,
                    2..=4 => 1 + rng.below(rule.capacity()),
                    _ => 1,
                };
                let expected = memory.check_sync(&rule, &key, cost, Some(t));
                let got = redis.check(&rule, &key, cost, Some(t)).await.unwrap();
                assert_eq!(
                    got, expected,
                    "{algorithm} rule {rule:?} step {step} t {t} cost {cost}"
                );
                compared += 1;
                t += match rng.below(4) {
                    0 => 0,
                    1 => rng.below(period / 10 + 1),
                    2 => rng.below(period),
                    _ => rng.below(period * 2),
                };
            }
        }
    }
    assert_eq!(compared, 40 * 5 * 40);
    assert_no_key_without_ttl(&server);
}

/// Checks of `rule`, one per (key, cost), sent at once at time `t`: they
/// are queued in this order (on a current-thread runtime, all before the
/// connection's task runs: one batch). Their results, in order.
async fn check_together(
    redis: &RedisStore,
    rule: &Rule,
    checks: &[(&[u8], u64)],
    t: u64,
) -> Vec<Result<Decision, StoreError>> {
    futures_util::future::join_all(
        checks
            .iter()
            .map(|&(key, cost)| redis.check(rule, key, cost, Some(t))),
    )
    .await
}

/// Many concurrent single checks, batched into shared script runs (`b`
/// mode), decide exactly as the memory store does when it sees each key's
/// checks in the same order: 24 tasks, each owning a key under every rule
/// (random rules of every algorithm), each round sending three checks per
/// key at once (queued in that order: a later one in the same batch must
/// see the earlier one's write), every round at one explicit time so that
/// the order can be replayed.
// One thread: every check sent together is queued before the
// connection's driver runs, so the batches are the ones sent,
// not what a busy machine's scheduler cut them into (with two
// workers the driver took checks as they came: "hardly batched").
#[tokio::test]
async fn batched_concurrent_checks_equal_the_memory_store() {
    let server = RedisServer::start();
    let redis = connect(&server, "batch").await;
    let mut rng = Rng(0xba7c4);
    let rules: Vec<Rule> = (0..3)
        .flat_map(|i| Algorithm::RATES.map(|a| (i, a)))
        .map(|(i, a)| random_rule(&mut rng, &format!("b{i}_{a}"), a))
        .collect();
    let rules = std::sync::Arc::new(rules);
    let (tasks, rounds) = (24u64, 8u64);
    // Scripts loaded first: a batch answered NOSCRIPT is sent again in the
    // order its callers wake up, not necessarily the order they were sent.
    for rule in rules.iter() {
        redis
            .check(rule, b"warm", 0, Some(EPOCH))
            .await
            .expect("warm-up");
    }
    // The script holding all five (batches mixing algorithms run it).
    let mixed: Vec<KeyCheck<'_>> = rules[..2]
        .iter()
        .map(|rule| KeyCheck {
            rule,
            key: b"warm",
            cost: 0,
        })
        .collect();
    redis.check_all(&mixed, Some(EPOCH)).await.expect("warm-up");
    assert_eq!(server.cli(&["CONFIG", "RESETSTAT"]).trim(), "OK");
    // (rule, key, t, cost, decision), each key's in the order sent.
    let mut seen: Vec<(usize, String, u64, u64, Decision)> = Vec::new();
    let mut t = EPOCH;
    for round in 0..rounds {
        let runs: Vec<_> = (0..tasks)
            .map(|task| {
                let (redis, rules) = (redis.clone(), rules.clone());
                let mut rng = Rng(task * 1000 + round);
                tokio::spawn(async move {
                    let key = format!("t{task}");
                    let mut out = Vec::new();
                    for (r, rule) in rules.iter().enumerate() {
                        let costs: Vec<u64> = (0..3)
                            .map(|_| match rng.below(6) {
                                0 => 0,
                                1 => rule.capacity() + 1,
                                2 => 1 + rng.below(rule.capacity()),
                                _ => 1,
                            })
                            .collect();
                        // join_all of so few polls them in order: they are
                        // queued in this order.
                        let sent = costs
                            .iter()
                            .map(|&cost| redis.check(rule, key.as_bytes(), cost, Some(t)));
                        let decided = futures_util::future::join_all(sent).await;
                        for (cost, d) in costs.into_iter().zip(decided) {
                            out.push((r, key.clone(), t, cost, d.expect("check")));
                        }
                    }
                    out
                })
            })
            .collect();
        for run in runs {
            seen.extend(run.await.expect("task"));
        }
        t += rng.below(2_000_000);
    }
    let checks = seen.len() as u64;
    assert_eq!(checks, tasks * rounds * 15 * 3);
    let runs = script_runs(&server);
    assert!(
        runs * 4 <= checks,
        "{checks} checks in {runs} script runs: hardly batched"
    );
    let memory = MemoryStore::new();
    for (r, key, t, cost, got) in seen {
        let expected = memory.check_sync(&rules[r], key.as_bytes(), cost, Some(t));
        assert_eq!(
            got, expected,
            "rule {:?} key {key} t {t} cost {cost}",
            rules[r]
        );
    }
    assert_no_key_without_ttl(&server);
}

/// A server, a store on it under `prefix`, and a GCRA rule of `limit` per
/// minute whose script is loaded (so that a batch is not answered
/// `NOSCRIPT` and sent again check by check).
async fn warmed_gcra(prefix: &str, limit: u64) -> (RedisServer, RedisStore, Rule) {
    let server = RedisServer::start();
    let redis = connect(&server, prefix).await;
    let rule = RuleSpec::new("r", Algorithm::Gcra, limit, Duration::from_secs(60))
        .build()
        .expect("rule");
    redis
        .check(&rule, b"warm", 0, Some(EPOCH))
        .await
        .expect("warm-up");
    (server, redis, rule)
}

/// As [`warmed_gcra`], the store's user refused `FCALL`: checks go as
/// scripts (`EVALSHA`), as on a Redis without functions.
async fn warmed_gcra_scripts(prefix: &str, limit: u64) -> (RedisServer, RedisStore, Rule) {
    let server = RedisServer::start();
    assert_eq!(
        server.cli(&["ACL", "SETUSER", "default", "-fcall"]).trim(),
        "OK"
    );
    let redis = connect(&server, prefix).await;
    let rule = RuleSpec::new("r", Algorithm::Gcra, limit, Duration::from_secs(60))
        .build()
        .expect("rule");
    redis
        .check(&rule, b"warm", 0, Some(EPOCH))
        .await
        .expect("warm-up by script");
    assert!(server.command_calls("evalsha") + server.command_calls("eval") >= 1);
    (server, redis, rule)
}

/// A check that fails inside a batch (its key holds a hash: `WRONGTYPE`)
/// reports its own error; the checks before and after it in the same
/// script run are decided (and written) as if it were not there. On a
/// current-thread runtime: all seven are queued before the connection's
/// task runs, so they go as one batch.
#[tokio::test]
async fn a_failing_check_in_a_batch_fails_alone() {
    let (server, redis, rule) = warmed_gcra("bad", 2).await;
    let bad = redis.redis_key(&rule, b"bad");
    let bad = String::from_utf8(bad).expect("ascii key");
    assert_eq!(server.cli(&["HSET", &bad, "f", "v"]).trim(), "1");
    assert_eq!(server.cli(&["EXPIRE", &bad, "600"]).trim(), "1");
    assert_eq!(server.cli(&["CONFIG", "RESETSTAT"]).trim(), "OK");
    let keys: [&[u8]; 7] = [b"a", b"bad", b"a", b"b", b"bad", b"a", b"b"];
    let got = futures_util::future::join_all(
        keys.iter()
            .map(|key| redis.check(&rule, key, 1, Some(EPOCH))),
    )
    .await;
    assert_eq!(script_runs(&server), 1, "one batch");
    let memory = MemoryStore::new();
    for (key, got) in keys.iter().zip(got) {
        if *key == b"bad" {
            let e = got.expect_err("a hash is no GCRA state");
            assert!(e.to_string().contains("WRONGTYPE"), "{e}");
        } else {
            let expected = memory.check_sync(&rule, key, 1, Some(EPOCH));
            assert_eq!(got.expect("decided"), expected, "key {key:?}");
        }
    }
    assert_no_key_without_ttl(&server);
}

/// A GCRA key checked several times in one batch is read once and written
/// once (its last state; on Redis 7 a missing key is created by the read), and every check is decided as if each had been
/// written at once: the decisions, and those of the checks after the batch,
/// equal the memory store's.
#[tokio::test]
async fn a_hot_gcra_key_is_read_and_written_once_a_batch() {
    let (server, redis, rule) = warmed_gcra("hot", 5).await;
    assert_eq!(server.cli(&["CONFIG", "RESETSTAT"]).trim(), "OK");
    // costs above the burst (6) and the capacity (9): never admitted
    let checks: [(&[u8], u64); 12] = [
        (b"h", 1),
        (b"h", 2),
        (b"o", 1),
        (b"h", 0),
        (b"h", 6),
        (b"h", 1),
        (b"h", 3),
        (b"o", 9),
        (b"o", 1),
        (b"h", 1),
        (b"h", 1),
        (b"h", 0),
    ];
    let got = check_together(&redis, &rule, &checks, EPOCH).await;
    assert_eq!(script_runs(&server), 1, "one batch");
    // a read (GET, or on Redis 7 the SET NX GET that creates a missing
    // key) and a write of the last state, a key
    assert_eq!(
        server.command_calls("get") + server.command_calls("set"),
        4,
        "two commands a key"
    );
    let memory = MemoryStore::new();
    let mut denied = 0;
    for (&(key, cost), got) in checks.iter().zip(got) {
        let expected = memory.check_sync(&rule, key, cost, Some(EPOCH));
        let got = got.expect("decided");
        denied += usize::from(!got.allowed);
        assert_eq!(got, expected, "key {key:?} cost {cost}");
    }
    assert!(denied > 0, "the batch reached the limit");
    // What the batch left in Redis is what the memory store holds.
    for (step, key) in [b"h", b"o", b"h"].into_iter().enumerate() {
        let t = EPOCH + 12_000_000 * (step as u64 + 1);
        let expected = memory.check_sync(&rule, key, 1, Some(t));
        let got = redis.check(&rule, key, 1, Some(t)).await.expect("decided");
        assert_eq!(got, expected, "after the batch: key {key:?} t {t}");
    }
    assert_no_key_without_ttl(&server);
}

/// When a batch's write of a GCRA key fails (here: `maxmemory` reached, so
/// Redis refuses the script's first write), every check of that key from
/// the first one that consumed on reports the error, since nothing it
/// consumed was kept; checks before it, and of other keys that wrote
/// nothing, keep their decisions; and nothing was written. Scripts only:
/// the user may not `FCALL` here (a function that writes is refused whole
/// under `maxmemory`: the next test).
#[tokio::test]
async fn a_failed_write_fails_the_checks_that_depend_on_it() {
    let (server, redis, rule) = warmed_gcra_scripts("oom", 2).await;
    assert_eq!(
        server.cli(&["CONFIG", "SET", "maxmemory", "1"]).trim(),
        "OK"
    );
    assert_eq!(server.cli(&["CONFIG", "RESETSTAT"]).trim(), "OK");
    let checks: [(&[u8], u64, bool); 5] = [
        (b"a", 0, true),
        (b"a", 1, false),
        (b"b", 0, true),
        (b"a", 0, false),
        (b"a", 1, false),
    ];
    let got = futures_util::future::join_all(
        checks
            .iter()
            .map(|&(key, cost, _)| redis.check(&rule, key, cost, Some(EPOCH))),
    )
    .await;
    assert_eq!(script_runs(&server), 1, "one batch");
    let fresh = MemoryStore::new();
    for (&(key, cost, decided), got) in checks.iter().zip(got) {
        if decided {
            let expected = fresh.check_sync(&rule, key, cost, Some(EPOCH));
            assert_eq!(got.expect("decided"), expected, "key {key:?} cost {cost}");
        } else {
            let e = got.expect_err("its write was refused");
            assert!(e.to_string().contains("OOM"), "{e}");
        }
    }
    assert_eq!(
        server.cli(&["CONFIG", "SET", "maxmemory", "0"]).trim(),
        "OK"
    );
    // Nothing was consumed: `a` starts full.
    let memory = MemoryStore::new();
    for cost in [2, 1] {
        let expected = memory.check_sync(&rule, b"a", cost, Some(EPOCH));
        let got = redis.check(&rule, b"a", cost, Some(EPOCH)).await;
        assert_eq!(got.expect("decided"), expected, "cost {cost}");
    }
    assert_no_key_without_ttl(&server);
}

/// The same in a batch whose keys do not repeat (it carries no key
/// indices, and each admission is written at once): a check whose write is
/// refused reports the error, the others are decided, and nothing was
/// consumed.
#[tokio::test]
async fn a_refused_write_in_a_batch_of_distinct_keys_fails_its_own_check() {
    let (server, redis, rule) = warmed_gcra_scripts("oom1", 2).await;
    // `a` exists, so its check reads it and then writes
    redis.check(&rule, b"a", 1, Some(EPOCH)).await.expect("a");
    assert_eq!(
        server.cli(&["CONFIG", "SET", "maxmemory", "1"]).trim(),
        "OK"
    );
    assert_eq!(server.cli(&["CONFIG", "RESETSTAT"]).trim(), "OK");
    let checks: [(&[u8], u64); 4] = [(b"a", 1), (b"b", 0), (b"c", 1), (b"d", 0)];
    let got = check_together(&redis, &rule, &checks, EPOCH).await;
    assert_eq!(script_runs(&server), 1, "one batch");
    let memory = MemoryStore::new();
    memory.check_sync(&rule, b"a", 1, Some(EPOCH));
    for (&(key, cost), got) in checks.iter().zip(got) {
        if cost > 0 {
            let e = got.expect_err("its write was refused");
            assert!(e.to_string().contains("OOM"), "{e}");
        } else {
            let expected = memory.check_sync(&rule, key, cost, Some(EPOCH));
            assert_eq!(got.expect("decided"), expected, "key {key:?}");
        }
    }
    assert_eq!(
        server.cli(&["CONFIG", "SET", "maxmemory", "0"]).trim(),
        "OK"
    );
    // Nothing was consumed: `a` has one left, `c` starts full.
    for (key, cost) in [(&b"a"[..], 1), (b"a", 1), (b"c", 2)] {
        let expected = memory.check_sync(&rule, key, cost, Some(EPOCH));
        let got = redis.check(&rule, key, cost, Some(EPOCH)).await;
        assert_eq!(got.expect("decided"), expected, "key {key:?} cost {cost}");
    }
    assert_no_key_without_ttl(&server);
}

/// Under `maxmemory`, Redis refuses a function that may write before it
/// runs: a batch run as one fails whole, with the server's OOM error, and
/// consumes nothing.
#[tokio::test]
async fn a_function_refused_for_memory_fails_its_batch_and_writes_nothing() {
    let (server, redis, rule) = warmed_gcra("oomf", 2).await;
    assert!(
        server.command_calls("fcall") >= 1,
        "checks run as a function"
    );
    assert_eq!(
        server.cli(&["CONFIG", "SET", "maxmemory", "1"]).trim(),
        "OK"
    );
    let checks: [(&[u8], u64); 4] = [(b"a", 0), (b"a", 1), (b"b", 0), (b"a", 1)];
    let got = check_together(&redis, &rule, &checks, EPOCH).await;
    for ((key, cost), got) in checks.iter().zip(got) {
        let e = got.expect_err("refused whole");
        assert!(
            e.to_string().contains("OOM"),
            "key {key:?} cost {cost}: {e}"
        );
    }
    assert_eq!(
        server.cli(&["CONFIG", "SET", "maxmemory", "0"]).trim(),
        "OK"
    );
    let memory = MemoryStore::new();
    for cost in [2, 1] {
        let expected = memory.check_sync(&rule, b"a", cost, Some(EPOCH));
        let got = redis.check(&rule, b"a", cost, Some(EPOCH)).await;
        assert_eq!(got.expect("decided"), expected, "cost {cost}");
    }
    assert_no_key_without_ttl(&server);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multi_rule_checks_equal_the_memory_store() {
    let server = RedisServer::start();
    let redis = connect(&server, "multi").await;
    let mut rng = Rng(42);
    for round in 0..30 {
        let rules: Vec<Rule> = Algorithm::RATES
            .iter()
            .enumerate()
            .map(|(i, &a)| random_rule(&mut rng, &format!("m{round}_{i}"), a))
            .collect();
        let memory = MemoryStore::new();
        let mut t = EPOCH;
        for step in 0..40 {
            let n = 1 + rng.below(4);
            let keys: Vec<[u8; 1]> = (0..n)
                .map(|_| [u8::try_from(rng.below(2)).unwrap()])
                .collect();
            let checks: Vec<KeyCheck<'_>> = keys
                .iter()
                .map(|k| KeyCheck {
                    rule: &rules[usize::try_from(rng.below(5)).unwrap()],
                    key: k,
                    cost: rng.below(3),
                })
                .collect();
            let expected = memory.check_all_sync(&checks, Some(t));
            let got = redis.check_all(&checks, Some(t)).await.unwrap();
            assert_eq!(got, expected, "round {round} step {step} t {t}");
            t += rng.below(400_000);
        }
    }
    assert_no_key_without_ttl(&server);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fleet_of_instances_admits_exactly_the_limit() {
    let server = RedisServer::start();
    // Four independent instances, each with its own connection.
    let mut fleet = Vec::new();
    for _ in 0..4 {
        fleet.push(connect(&server, "fleet").await);
    }
    for algorithm in Algorithm::RATES {
        // A long period: no unit is refilled while the test runs.
        let rule = RuleSpec::new(
            format!("fleet_{algorithm}"),
            algorithm,
            37,
            Duration::from_secs(3600),
        )
        .build()
        .unwrap();
        let admitted = fleet::admitted(&fleet, &rule, b"shared", 8, 20).await;
        assert_eq!(admitted, 37, "{algorithm}");
    }
    assert_no_key_without_ttl(&server);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn script_flush_mid_run_changes_no_decision() {
    let server = RedisServer::start();
    let redis = connect(&server, "flush").await;
    for algorithm in Algorithm::RATES {
        let rule = RuleSpec::new(
            format!("f_{algorithm}"),
            algorithm,
            5,
            Duration::from_secs(10),
        )
        .build()
        .unwrap();
        let memory = MemoryStore::new();
        for i in 0..12u64 {
            if i % 3 == 1 {
                server.script_flush();
            }
            let t = EPOCH + i * 700_000;
            let expected = memory.check_sync(&rule, b"k", 1, Some(t));
            let got = redis.check(&rule, b"k", 1, Some(t)).await.unwrap();
            assert_eq!(got, expected, "{algorithm} step {i}");
        }
    }
    assert_no_key_without_ttl(&server);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_server_is_reconnected_to() {
    let server = RedisServer::start();
    let redis = connect(&server, "restart").await;
    let rule = RuleSpec::new("r", Algorithm::Gcra, 2, Duration::from_secs(60))
        .build()
        .unwrap();
    assert!(redis.check(&rule, b"k", 1, None).await.unwrap().allowed);
    server.kill();
    let err = redis.check(&rule, b"k", 1, None).await.unwrap_err();
    assert!(err.is_transient(), "{err}");
    server.restart();
    // The store reconnects by itself; the restarted server is empty.
    let start = Instant::now();
    let decision: Decision = loop {
        match redis.check(&rule, b"k", 1, None).await {
            Ok(d) => break d,
            Err(e) => {
                assert!(e.is_transient(), "{e}");
                assert!(
                    start.elapsed() < Duration::from_secs(10),
                    "no reconnection: {e}"
                );
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    };
    assert!(decision.allowed);
    assert_eq!(
        decision.remaining, 1,
        "a fresh server starts from an empty key"
    );
    assert_no_key_without_ttl(&server);
}

#[tokio::test]
async fn bad_urls_and_prefixes_are_rejected_with_the_reason() {
    for (url, needle) in [
        ("redis+sentinel://127.0.0.1:1", "master"),
        ("http://x:1", "expected \"memory\""),
        ("redis://h:0", "port"),
        ("memory", "no Redis store"),
    ] {
        let err = RedisStore::connect(url, RedisOptions::default())
            .await
            .unwrap_err();
        assert_eq!(err.kind(), StoreErrorKind::Protocol, "{url}");
        assert!(err.to_string().contains(needle), "{url}: {err}");
    }
    let err = RedisStore::connect(
        "redis://127.0.0.1:1",
        RedisOptions {
            prefix: "a{b".into(),
            ..RedisOptions::default()
        },
    )
    .await
    .unwrap_err();
    assert!(err.to_string().contains("prefix"), "{err}");
}

/// Products past 2^53 (`prev * elapsed` with a huge limit and a year-long
/// window) take the scripts' exact `muldiv` path; decisions still equal the
/// memory store's 128-bit arithmetic.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sliding_window_stays_exact_past_two_to_the_53() {
    let server = RedisServer::start();
    let redis = connect(&server, "big").await;
    let day = 86_400_000_000u64;
    let rule = RuleSpec::new(
        "huge",
        Algorithm::SlidingWindow,
        999_999_937,
        Duration::from_micros(366 * day),
    )
    .build()
    .unwrap();
    let memory = MemoryStore::new();
    let mut rng = Rng(2_u64.pow(53) + 1);
    let period = rule.period_micros();
    let mut t = EPOCH;
    let mut big_products = 0;
    for step in 0..400 {
        let cost = match rng.below(4) {
            0 => rng.below(400_000_000),
            1 => rng.below(1000),
            2 => 0,
            _ => 1 + rng.below(50_000_000),
        };
        let expected = memory.check_sync(&rule, b"k", cost, Some(t));
        let got = redis.check(&rule, b"k", cost, Some(t)).await.unwrap();
        assert_eq!(got, expected, "step {step} t {t} cost {cost}");
        // count the checks whose prev * elapsed exceeds 2^53
        let elapsed = t % period;
        if expected.limit - expected.remaining > 0
            && u128::from(expected.limit) * u128::from(elapsed) > 1 << 53
        {
            big_products += 1;
        }
        t += rng.below(period / 7);
    }
    assert!(big_products > 100, "only {big_products} checks past 2^53");
    assert_no_key_without_ttl(&server);
}

/// Batches from one task (queued in order, so the memory store can replay
/// them) of 2, 63, 64, 65 and 130 checks over three keys (a key named again
/// and again in a batch), or each on a key of its own (a batch without key
/// indices, whose admissions are written at once), mixing a random
/// GCRA rule with a rule of another algorithm (so batches mix reply
/// widths), costs 0, 1, the burst, the capacity, past it and `u64::MAX`,
/// keys in debt after charges between batches, time standing still, going
/// on or jumping past every TAT: each decision equals the memory store's.
// One thread: every check sent together is queued before the
// connection's driver runs, so the batches are the ones sent,
// not what a busy machine's scheduler cut them into (with two
// workers the driver took checks as they came: "hardly batched").
#[tokio::test]
async fn odd_batches_of_gcra_and_others_equal_the_memory_store() {
    let server = RedisServer::start();
    let redis = connect(&server, "odd").await;
    let memory = MemoryStore::new();
    let mut rng = Rng(0x0dd_ba7c);
    let mut t = EPOCH;
    let mut total = 0u64;
    for round in 0..40u64 {
        let other = Algorithm::RATES[1 + usize::try_from(rng.below(4)).unwrap()];
        let rules = [
            random_rule(&mut rng, &format!("g{round}"), Algorithm::Gcra),
            random_rule(&mut rng, &format!("o{round}"), other),
        ];
        // Scripts and the library loaded: a batch answered NOSCRIPT goes
        // again in the order its callers wake, not the order sent.
        for rule in &rules {
            redis.check(rule, b"warm", 0, Some(t)).await.expect("warm");
        }
        for step in 0..6u64 {
            let n = [2usize, 63, 64, 65, 130][usize::try_from(rng.below(5)).unwrap()];
            let own_keys = rng.below(2) == 0;
            let checks: Vec<(usize, String, u64)> = (0..n)
                .map(|i| {
                    let r = usize::try_from(rng.below(4)).unwrap().min(1) ^ 1;
                    let rule = &rules[r];
                    let cost = match rng.below(8) {
                        0 => 0,
                        1 => rule.burst(),
                        2 => rule.capacity(),
                        3 => rule.capacity() + 1,
                        4 => u64::MAX,
                        5 => 1 + rng.below(rule.capacity()),
                        _ => 1,
                    };
                    // (a key of its own: the same index in every batch,
                    // so it has state from earlier ones)
                    let key = if own_keys {
                        format!("u{i}")
                    } else {
                        format!("k{}", rng.below(3))
                    };
                    (r, key, cost)
                })
                .collect();
            let sent = checks
                .iter()
                .map(|(r, key, cost)| redis.check(&rules[*r], key.as_bytes(), *cost, Some(t)));
            let decided = futures_util::future::join_all(sent).await;
            total += n as u64;
            for ((r, key, cost), got) in checks.iter().zip(decided) {
                let got = got.expect("check");
                let expected = memory.check_sync(&rules[*r], key.as_bytes(), *cost, Some(t));
                assert_eq!(
                    got, expected,
                    "round {round} step {step} ({n} checks): rule {:?} key {key} t {t} cost {cost}",
                    rules[*r]
                );
            }
            if rng.below(3) == 0 {
                // Debt: a charge of up to twice the capacity.
                let rule = &rules[0];
                let cost = rng.below(2 * rule.capacity() + 1);
                let key = if rng.below(2) == 0 {
                    format!("k{}", rng.below(3))
                } else {
                    format!("u{}", rng.below(65))
                };
                let charge = [KeyCheck {
                    rule,
                    key: key.as_bytes(),
                    cost,
                }];
                let got = redis.charge_all(&charge, Some(t)).await.expect("charge");
                assert_eq!(got, memory.charge_all_sync(&charge, Some(t)), "charge");
            }
            let period = u64::try_from(rules[0].period().as_micros()).expect("period");
            t += match rng.below(4) {
                0 => 0,
                1 => rng.below(1_000),
                2 => rng.below(period + 1),
                _ => 2 * period,
            };
        }
    }
    let runs = script_runs(&server);
    assert!(
        runs * 8 <= total,
        "{total} checks in {runs} runs: hardly batched"
    );
    assert_no_key_without_ttl(&server);
}

/// Under `maxmemory`, a script's check that consumes nothing needs no
/// write, so it is decided (docs/redis-store.md, "Memory": only the checks
/// that consumed from a key whose write was refused fail): a check of an
/// exhausted key is denied, whether it runs alone, first in a batch (where
/// the first read of a key may be the `SET … NX … GET` that would create
/// it) or after many reads of existing keys (where it is a `GET`).
#[tokio::test]
async fn a_denied_check_under_maxmemory_is_decided_wherever_it_is_in_a_batch() {
    let (server, redis, rule) = warmed_gcra_scripts("oomd", 2).await;
    let memory = MemoryStore::new();
    // `a` exhausted; `k0`..`k11` exist with room left
    let mut setup: Vec<(Vec<u8>, u64)> = vec![(b"a".to_vec(), 2)];
    setup.extend((0..12).map(|i| (format!("k{i}").into_bytes(), 1)));
    for (key, cost) in &setup {
        let expected = memory.check_sync(&rule, key, *cost, Some(EPOCH));
        let got = redis.check(&rule, key, *cost, Some(EPOCH)).await;
        assert_eq!(got.expect("setup"), expected, "setup {key:?}");
    }
    assert_eq!(
        server.cli(&["CONFIG", "SET", "maxmemory", "1"]).trim(),
        "OK"
    );
    // Alone.
    let expected = memory.check_sync(&rule, b"a", 1, Some(EPOCH));
    assert!(!expected.allowed);
    let got = redis.check(&rule, b"a", 1, Some(EPOCH)).await;
    assert_eq!(got.expect("alone: decided"), expected, "alone");
    // After twelve peeks of existing keys (each read by GET), and first in
    // a batch (with and without a repeated key).
    let peeks: Vec<(Vec<u8>, u64)> = (0..12).map(|i| (format!("k{i}").into_bytes(), 0)).collect();
    let mut after_peeks = peeks.clone();
    after_peeks.push((b"a".to_vec(), 1));
    let mut first = vec![(b"a".to_vec(), 1)];
    first.extend(peeks.iter().cloned());
    let mut first_repeated = first.clone();
    first_repeated.push((b"a".to_vec(), 1));
    for (what, checks) in [
        ("after peeks", after_peeks),
        ("first", first),
        ("first, key repeated", first_repeated),
    ] {
        assert_eq!(server.cli(&["CONFIG", "RESETSTAT"]).trim(), "OK");
        let got = futures_util::future::join_all(
            checks
                .iter()
                .map(|(key, cost)| redis.check(&rule, key, *cost, Some(EPOCH))),
        )
        .await;
        assert_eq!(script_runs(&server), 1, "{what}: one batch");
        for ((key, cost), got) in checks.iter().zip(got) {
            let expected = memory.check_sync(&rule, key, *cost, Some(EPOCH));
            assert!(!expected.allowed || *cost == 0, "nothing consumes");
            let got = got.unwrap_or_else(|e| {
                panic!("{what}: key {key:?} cost {cost} consumes nothing, yet: {e}")
            });
            assert_eq!(got, expected, "{what}: key {key:?} cost {cost}");
        }
    }
    assert_eq!(
        server.cli(&["CONFIG", "SET", "maxmemory", "0"]).trim(),
        "OK"
    );
    assert_no_key_without_ttl(&server);
}
