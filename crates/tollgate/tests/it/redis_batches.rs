//! Batches of single checks on the Redis store (one script run deciding
//! many checks: docs/redis-store.md) against the memory store: keys the
//! batch's encoding could confuse, keys of the wrong type, and more argument
//! numbers than the function library keeps, by function and by script.

use std::time::Duration;

use redis_harness::RedisServer;
use tollgate::store::KeyCheck;
use tollgate::{Algorithm, MemoryStore, RuleSpec, Store};

use crate::support::redis::{
    EPOCH, Rng, assert_no_key_without_ttl, connect, random_rule, script_runs,
};

/// Keys a batch's encoding could confuse: empty, `\r\n` and RESP-looking
/// bytes, binary, keys that are prefixes of each other (at the hash's
/// eight-byte steps too), long keys (stored by their SHA-1) differing in
/// one byte.
fn edge_keys() -> Vec<Vec<u8>> {
    let mut keys: Vec<Vec<u8>> = [
        &b""[..],
        b"\r\n",
        b"\r",
        b"\n",
        b"\0",
        b"\xff\xfe",
        b"a",
        b"a\r\n",
        b"$1\r\na",
        b"*2\r\n$1\r\na\r\n",
        b"{",
        b"}",
        b"}:gcra",
        b"=a",
    ]
    .iter()
    .map(|k| k.to_vec())
    .collect();
    for len in [7, 8, 9, 15, 16, 17] {
        keys.push(vec![b'p'; len]);
    }
    let long = vec![b'L'; tollgate::ticket::MAX_RAW_KEY + 40];
    let mut other = long.clone();
    *other.last_mut().expect("long") = b'M';
    keys.push(vec![b'L'; tollgate::ticket::MAX_RAW_KEY]);
    keys.push(vec![b'L'; tollgate::ticket::MAX_RAW_KEY + 1]);
    keys.extend([long, other]);
    keys
}

/// Batches of 2, 33 and 64 (a whole batch) single checks, by the function
/// library and by scripts (the user refused `FCALL`), on the keys of
/// [`edge_keys`] and plain ones: all distinct (no key indices), a few keys
/// repeated, one hot key, or keys never seen before (so that the library's
/// choice of first read, `SET … NX … GET` or `GET`, goes both ways), mixing
/// GCRA with each other algorithm, with debt charged between batches:
/// every decision equals the memory store's, and every key has a TTL.
// One thread: every check sent together is queued before the
// connection's driver runs, so the batches are the ones sent,
// not what a busy machine's scheduler cut them into (with two
// workers the driver took checks as they came: "hardly batched").
#[tokio::test]
async fn batches_of_edge_keys_equal_the_memory_store_by_function_and_by_script() {
    let edge = edge_keys();
    for scripts in [false, true] {
        let server = RedisServer::start();
        if scripts {
            let denied = server.cli(&["ACL", "SETUSER", "default", "-fcall"]);
            assert_eq!(denied.trim(), "OK");
        }
        let redis = connect(&server, "edge").await;
        let memory = MemoryStore::new();
        let mut rng = Rng(0xed6e + u64::from(scripts));
        let mut t = EPOCH;
        let mut fresh = 0u64;
        let (mut total, mut runs) = (0u64, 0u64);
        for round in 0..16u64 {
            let other = Algorithm::RATES[1 + usize::try_from(round % 4).unwrap()];
            let rules = [
                random_rule(&mut rng, &format!("g{round}"), Algorithm::Gcra),
                random_rule(&mut rng, &format!("o{round}"), other),
            ];
            // Scripts loaded first (a batch answered NOSCRIPT goes again in
            // the order its callers wake, not the order sent), the mixed
            // one too.
            for rule in &rules {
                redis.check(rule, b"warm", 0, Some(t)).await.expect("warm");
            }
            let both: Vec<KeyCheck<'_>> = rules
                .iter()
                .map(|rule| KeyCheck {
                    rule,
                    key: b"warm",
                    cost: 0,
                })
                .collect();
            redis.check_all(&both, Some(t)).await.expect("warm");
            memory.check_all_sync(&both, Some(t));
            for step in 0..8u64 {
                let n = [2usize, 33, 64, 64][usize::try_from(rng.below(4)).unwrap()];
                let how = rng.below(4);
                let keys: Vec<Vec<u8>> = match how {
                    // all distinct: edge keys first, then plain ones
                    0 => (0..n)
                        .map(|i| {
                            edge.get(i)
                                .cloned()
                                .unwrap_or_else(|| format!("d{i}").into_bytes())
                        })
                        .collect(),
                    // a few, repeated
                    1 => (0..n)
                        .map(|_| edge[usize::try_from(rng.below(5)).unwrap() * 5].clone())
                        .collect(),
                    // one hot key
                    2 => {
                        let hot =
                            edge[usize::try_from(rng.below(edge.len() as u64)).unwrap()].clone();
                        vec![hot; n]
                    }
                    // never seen before
                    _ => (0..n)
                        .map(|_| {
                            fresh += 1;
                            format!("f{fresh}").into_bytes()
                        })
                        .collect(),
                };
                let checks: Vec<(usize, Vec<u8>, u64)> = keys
                    .into_iter()
                    .map(|key| {
                        let r = usize::from(rng.below(4) == 0);
                        let rule = &rules[r];
                        let cost = match rng.below(8) {
                            0 => 0,
                            1 => rule.burst(),
                            2 => rule.capacity() + 1,
                            3 => 1 + rng.below(rule.capacity()),
                            _ => 1,
                        };
                        (r, key, cost)
                    })
                    .collect();
                assert_eq!(server.cli(&["CONFIG", "RESETSTAT"]).trim(), "OK");
                let sent = checks
                    .iter()
                    .map(|(r, key, cost)| redis.check(&rules[*r], key, *cost, Some(t)));
                let decided = futures_util::future::join_all(sent).await;
                runs += script_runs(&server);
                total += n as u64;
                for ((r, key, cost), got) in checks.iter().zip(decided) {
                    let expected = memory.check_sync(&rules[*r], key, *cost, Some(t));
                    let got = got.unwrap_or_else(|e| {
                        panic!("scripts {scripts} round {round} step {step} key {key:?}: {e}")
                    });
                    assert_eq!(
                        got, expected,
                        "scripts {scripts} round {round} step {step} (how {how}, {n} checks): \
                         rule {:?} key {key:?} t {t} cost {cost}",
                        rules[*r]
                    );
                }
                if rng.below(3) == 0 {
                    // Debt on a key of the pool.
                    let rule = &rules[0];
                    let key = &edge[usize::try_from(rng.below(edge.len() as u64)).unwrap()];
                    let charge = [KeyCheck {
                        rule,
                        key,
                        cost: rng.below(2 * rule.capacity() + 1),
                    }];
                    let got = redis.charge_all(&charge, Some(t)).await.expect("charge");
                    assert_eq!(got, memory.charge_all_sync(&charge, Some(t)), "charge");
                }
                let period = rules[0].period_micros();
                t += match rng.below(4) {
                    0 => 0,
                    1 => rng.below(1_000),
                    2 => rng.below(period + 1),
                    _ => 2 * period,
                };
            }
        }
        assert!(
            runs * 4 <= total,
            "{total} checks in {runs} runs: hardly batched"
        );
        if scripts {
            assert_eq!(server.command_calls("fcall"), 0, "scripts only");
        }
        assert_no_key_without_ttl(&server);
    }
}

/// A key of the wrong type (a list) fails its own checks, and only those,
/// in a batch whose keys repeat and in one whose keys do not (no key
/// indices: GCRA admissions written at once), mixing GCRA with a token
/// bucket, by the function library and by scripts, whichever first read
/// (`SET … NX … GET` or `GET`) the batch makes: before a batch of keys
/// never seen (the library reads by `SET … NX … GET`) and after one of keys
/// that exist (by `GET`). The other checks equal the memory store's, the
/// list is left as it was, and every other key has a TTL.
#[tokio::test]
async fn a_key_of_the_wrong_type_fails_alone_in_every_kind_of_batch() {
    for scripts in [false, true] {
        let server = RedisServer::start();
        if scripts {
            let denied = server.cli(&["ACL", "SETUSER", "default", "-fcall"]);
            assert_eq!(denied.trim(), "OK");
        }
        let redis = connect(&server, "wrong").await;
        let gcra = RuleSpec::new("g", Algorithm::Gcra, 3, Duration::from_secs(60))
            .build()
            .expect("rule");
        let bucket = RuleSpec::new("b", Algorithm::TokenBucket, 3, Duration::from_secs(60))
            .build()
            .expect("rule");
        let rules = [&gcra, &bucket];
        let both: Vec<KeyCheck<'_>> = rules
            .iter()
            .map(|&rule| KeyCheck {
                rule,
                key: b"warm",
                cost: 0,
            })
            .collect();
        for rule in rules {
            redis
                .check(rule, b"warm", 0, Some(EPOCH))
                .await
                .expect("warm");
        }
        redis.check_all(&both, Some(EPOCH)).await.expect("warm");
        let memory = MemoryStore::new();
        memory.check_all_sync(&both, Some(EPOCH));
        for rule in rules {
            let bad = String::from_utf8(redis.redis_key(rule, b"bad")).expect("ascii");
            assert_eq!(server.cli(&["RPUSH", &bad, "x"]).trim(), "1");
            assert_eq!(server.cli(&["EXPIRE", &bad, "600"]).trim(), "1");
        }
        let mut t = EPOCH;
        let kinds = [(false, false), (false, true), (true, false), (true, true)];
        for (batch, (existing, repeated)) in kinds.into_iter().enumerate() {
            t += 1_000_000;
            // Twelve keys read first: never seen, or made to exist.
            let lead: Vec<Vec<u8>> = (0..12)
                .map(|i| format!("lead{batch}_{i}").into_bytes())
                .collect();
            if existing {
                for key in &lead {
                    let got = redis.check(&gcra, key, 1, Some(t)).await.expect("exists");
                    assert_eq!(got, memory.check_sync(&gcra, key, 1, Some(t)));
                }
            }
            let mut checks: Vec<(usize, Vec<u8>, u64)> =
                lead.into_iter().map(|key| (0, key, 1)).collect();
            let tail: &[(usize, &[u8], u64)] = if repeated {
                &[
                    (0, b"bad", 1),
                    (0, b"a", 1),
                    (1, b"bad", 1),
                    (0, b"bad", 0),
                    (0, b"a", 2),
                    (1, b"a", 1),
                    (1, b"bad", 0),
                    (0, b"a", 1),
                ]
            } else {
                &[(0, b"bad", 1), (0, b"a", 1), (1, b"bad", 1), (1, b"a", 1)]
            };
            let tail_keys = tail.iter().map(|&(r, key, cost)| (r, key.to_vec(), cost));
            checks.extend(tail_keys);
            let prefix = format!("scripts {scripts} existing {existing} repeated {repeated}");
            assert_eq!(server.cli(&["CONFIG", "RESETSTAT"]).trim(), "OK");
            let got = futures_util::future::join_all(
                checks
                    .iter()
                    .map(|(r, key, cost)| redis.check(rules[*r], key, *cost, Some(t))),
            )
            .await;
            assert_eq!(script_runs(&server), 1, "{prefix}: one batch");
            for ((r, key, cost), got) in checks.iter().zip(got) {
                if key == b"bad" {
                    let e = got.expect_err("a list is no rate state");
                    assert!(e.to_string().contains("WRONGTYPE"), "{prefix}: {e}");
                } else {
                    let expected = memory.check_sync(rules[*r], key, *cost, Some(t));
                    let got = got.unwrap_or_else(|e| panic!("{prefix}: key {key:?}: {e}"));
                    assert_eq!(got, expected, "{prefix}: key {key:?} cost {cost}");
                }
            }
            // what the batch left: `a` as the memory store holds it
            for (r, rule) in rules.iter().enumerate() {
                let expected = memory.check_sync(rule, b"a", 0, Some(t));
                let got = redis.check(rule, b"a", 0, Some(t)).await.expect("peek");
                assert_eq!(got, expected, "{prefix}: rule {r} after the batch");
            }
        }
        for rule in rules {
            let bad = String::from_utf8(redis.redis_key(rule, b"bad")).expect("ascii");
            assert_eq!(server.cli(&["TYPE", &bad]).trim(), "list", "left alone");
            assert_eq!(server.cli(&["DEL", &bad]).trim(), "1");
        }
        assert_no_key_without_ttl(&server);
    }
}

/// Batches of 64 checks each of its own cost (so 64 argument tuples a
/// batch, every one with numbers never sent before), on a few keys or each
/// on its own, by the function library, whose cache of argument numbers
/// fills (4,096) and starts afresh several times on the way: every decision
/// equals the memory store's.
// One thread: every check sent together is queued before the
// connection's driver runs, so the batches are the ones sent,
// not what a busy machine's scheduler cut them into (with two
// workers the driver took checks as they came: "hardly batched").
#[tokio::test]
async fn batches_of_many_tuples_past_the_number_cache_equal_the_memory_store() {
    let server = RedisServer::start();
    let redis = connect(&server, "nums").await;
    let memory = MemoryStore::new();
    let mut rng = Rng(0x4096);
    let rules = [
        RuleSpec::new("g", Algorithm::Gcra, 999_983, Duration::from_secs(3600))
            .burst(2_000_000)
            .build()
            .expect("rule"),
        RuleSpec::new(
            "s",
            Algorithm::SlidingWindow,
            999_983,
            Duration::from_secs(3600),
        )
        .build()
        .expect("rule"),
    ];
    let mut t = EPOCH;
    for rule in &rules {
        redis.check(rule, b"warm", 0, Some(t)).await.expect("warm");
    }
    assert!(
        server.command_calls("fcall") >= 1,
        "by the function library"
    );
    assert_eq!(server.cli(&["CONFIG", "RESETSTAT"]).trim(), "OK");
    let mut sent_numbers = 0u64;
    for batch in 0..80u64 {
        let r = usize::try_from(batch % 2).unwrap();
        let rule = &rules[r];
        let checks: Vec<(Vec<u8>, u64)> = (0..64u64)
            .map(|i| {
                let key = if batch % 4 < 2 {
                    format!("k{}", rng.below(3))
                } else {
                    format!("u{i}")
                };
                (key.into_bytes(), 1 + rng.below(40_000))
            })
            .collect();
        // (the cost and, for GCRA, its increment: new strings a check)
        sent_numbers += 64 * 2;
        let got = futures_util::future::join_all(
            checks
                .iter()
                .map(|(key, cost)| redis.check(rule, key, *cost, Some(t))),
        )
        .await;
        for ((key, cost), got) in checks.iter().zip(got) {
            let expected = memory.check_sync(rule, key, *cost, Some(t));
            let got = got.unwrap_or_else(|e| panic!("batch {batch} key {key:?}: {e}"));
            assert_eq!(got, expected, "batch {batch} key {key:?} cost {cost}");
        }
        t += rng.below(40_000_000);
    }
    assert!(sent_numbers > 2 * 4096);
    let runs = server.command_calls("fcall");
    assert!(runs * 8 <= 80 * 64, "{runs} runs: hardly batched");
    assert_no_key_without_ttl(&server);
}
