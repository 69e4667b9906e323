//! In-flight limits held fleet-wide: five `tollgate serve` processes on one
//! Redis, 200 concurrent clients acquiring and releasing a `concurrency`
//! rule of limit 20 through all of them. What is held is read from Redis
//! itself (its own clock, in one script), never from the clients: at no
//! sample more than 20 slots, every lease released at the end, and the
//! leases a client took through a replica that was then killed end after
//! the rule's lease, giving the slots back.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use redis_harness::RedisServer;

use crate::support::{self, Tollgate, post_json};

const LIMIT: u64 = 20;
const CLIENTS: usize = 200;
const REPLICAS: usize = 5;

fn config(url: &str, lease: &str) -> String {
    format!(
        r#"
[store]
url = "{url}"
timeout = "2s"
prefix = "fleet"

[[rules]]
name = "inflight"
algorithm = "concurrency"
limit = {LIMIT}
lease = "{lease}"
"#
    )
}

/// The slots held now by Redis's own clock: the live members of the
/// rule's sorted set (each lease here holds one slot).
fn held(redis: &RedisServer, key: &str) -> u64 {
    let script = "local t = redis.call('TIME'); \
                  local now = tonumber(t[1]) * 1000000 + tonumber(t[2]); \
                  return redis.call('ZCOUNT', KEYS[1], '(' .. now, '+inf')";
    redis
        .cli(&["EVAL", script, "1", key])
        .trim()
        .parse()
        .unwrap_or_else(|_| panic!("ZCOUNT of {key}"))
}

fn lease_of(r: &support::Resp) -> Option<String> {
    r.json()["lease"].as_str().map(str::to_owned)
}

#[test]
fn five_replicas_never_hold_more_than_the_limit_and_release_everything() {
    let redis = RedisServer::start();
    let config = config(&redis.url(), "30s");
    let replicas: Vec<Tollgate> = (0..REPLICAS)
        .map(|_| Tollgate::start(&config, &["--http", "127.0.0.1:0"]))
        .collect();
    let addrs: Vec<_> = replicas.iter().map(Tollgate::api).collect();
    let key = "fleet:{inflight:=team}:cc";

    let stop = Arc::new(AtomicBool::new(false));
    let (acquired, refused) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let clients: Vec<_> = (0..CLIENTS)
        .map(|i| {
            let addr = addrs[i % REPLICAS];
            let release_to = addrs[(i + 1) % REPLICAS];
            let (stop, acquired, refused) = (stop.clone(), acquired.clone(), refused.clone());
            thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    let r = post_json(addr, "/v1/acquire", r#"{"rule":"inflight","key":"team"}"#);
                    match (r.status, lease_of(&r)) {
                        (200, Some(lease)) => {
                            acquired.fetch_add(1, Ordering::Relaxed);
                            thread::sleep(Duration::from_millis(5));
                            // Released through another replica than the one
                            // that acquired it.
                            let body = format!(r#"{{"lease":"{lease}"}}"#);
                            let r = post_json(release_to, "/v1/release", &body);
                            assert_eq!(r.status, 200, "release: {}", r.text());
                        }
                        (429, None) => {
                            refused.fetch_add(1, Ordering::Relaxed);
                            thread::sleep(Duration::from_millis(2));
                        }
                        other => panic!("acquire answered {other:?}: {}", r.text()),
                    }
                }
            })
        })
        .collect();

    // Sampled until enough has happened, not for a fixed time: a loaded
    // machine gets through fewer requests a second, never fewer in all.
    // The deadline only turns a fleet that stopped answering into a
    // failure.
    let start = Instant::now();
    let (mut samples, mut peak) = (0u64, 0u64);
    let enough = |samples: u64, peak: u64| {
        samples > 50
            && acquired.load(Ordering::Relaxed) > 200
            && refused.load(Ordering::Relaxed) > 0
            && peak >= LIMIT / 2
    };
    while !enough(samples, peak) && start.elapsed() < Duration::from_secs(120) {
        let now = held(&redis, key);
        assert!(
            now <= LIMIT,
            "{now} slots held at once, past the limit of {LIMIT}"
        );
        peak = peak.max(now);
        samples += 1;
    }
    stop.store(true, Ordering::Relaxed);
    for c in clients {
        c.join().expect("a client panicked");
    }
    let (acquired, refused) = (
        acquired.load(Ordering::Relaxed),
        refused.load(Ordering::Relaxed),
    );
    assert!(samples > 50, "only {samples} samples of Redis");
    assert!(acquired > 200, "only {acquired} leases acquired");
    assert!(
        refused > 0,
        "the limit never refused anyone ({acquired} acquired)"
    );
    assert!(peak >= LIMIT / 2, "the slots were never busy: peak {peak}");
    // Every lease was released: none left behind, and the key itself gone
    // or empty.
    assert_eq!(held(&redis, key), 0, "leases left behind");
    assert_eq!(redis.cli(&["ZCARD", key]).trim(), "0");
    assert!(redis.keys_without_ttl().is_empty());
}

#[test]
fn a_killed_replica_s_leases_end_after_the_lease_and_the_slots_come_back() {
    let redis = RedisServer::start();
    let config = config(&redis.url(), "2s");
    let mut doomed = Tollgate::start(&config, &["--http", "127.0.0.1:0"]);
    let survivor = Tollgate::start(&config, &["--http", "127.0.0.1:0"]);
    let acquire =
        |s: &Tollgate| post_json(s.api(), "/v1/acquire", r#"{"rule":"inflight","key":"k"}"#);
    let leases: Vec<String> = (0..LIMIT)
        .map(|_| lease_of(&acquire(&doomed)).expect("admitted"))
        .collect();
    assert_eq!(leases.len(), 20);
    doomed.signal("KILL");
    doomed.wait_exit(Duration::from_secs(5)).expect("killed");
    let key = "fleet:{inflight:=k}:cc";
    assert_eq!(held(&redis, key), LIMIT);
    let r = acquire(&survivor);
    assert_eq!(r.status, 429, "{}", r.text());
    let retry: u64 = r
        .header("retry-after")
        .and_then(|v| v.parse().ok())
        .expect("Retry-After");
    assert!((1..=2).contains(&retry), "Retry-After {retry}");
    // After the lease (2 s) the slots are back, with nobody releasing them.
    let start = Instant::now();
    while held(&redis, key) > 0 {
        assert!(
            start.elapsed() < Duration::from_secs(4),
            "leases outlived their lease"
        );
        thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(acquire(&survivor).status, 200);
    // The dead replica's leases are unknown now: releasing one is a 404.
    let body = format!(r#"{{"lease":"{}"}}"#, leases[0]);
    assert_eq!(post_json(survivor.api(), "/v1/release", &body).status, 404);
}
