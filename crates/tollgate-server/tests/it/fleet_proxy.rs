//! A fleet: three `tollgate serve --proxy` replicas behind a round-robin
//! client. On one Redis they hold ONE limit; on the memory store each
//! replica holds its own, so the fleet admits three times the limit — the
//! documented behaviour of the memory store, and the reason to use Redis.

use std::net::SocketAddr;

use redis_harness::RedisServer;

use crate::support::{Tollgate, request, start_upstream};

const LIMIT: usize = 30;

fn fleet(store: &str, upstream: SocketAddr) -> Vec<Tollgate> {
    let config = format!(
        "[store]\nurl = \"{store}\"\ntimeout = \"2s\"\n\n\
         [[rules]]\nname = \"per_ip\"\nalgorithm = \"fixed_window\"\nlimit = {LIMIT}\nperiod = \"1h\"\n\n\
         [[rules]]\nname = \"per_key\"\nalgorithm = \"gcra\"\nlimit = {LIMIT}\nperiod = \"1h\"\n\
         key = \"header:x-api-key\"\n"
    );
    let upstream = format!("http://{upstream}");
    (0..3)
        .map(|_| {
            Tollgate::start(
                &config,
                &["--proxy", "127.0.0.1:0", "--upstream", upstream.as_str()],
            )
        })
        .collect()
}

/// `total` requests from 3 client threads, each going round-robin over
/// the replicas; returns how many were admitted.
fn round_robin(replicas: &[Tollgate], total: usize) -> usize {
    let addrs: Vec<SocketAddr> = replicas.iter().map(Tollgate::proxy).collect();
    let threads: Vec<_> = (0..3)
        .map(|t| {
            let addrs = addrs.clone();
            std::thread::spawn(move || {
                let mut admitted = 0;
                for i in 0..total / 3 {
                    let addr = addrs[(i + t) % addrs.len()];
                    let r = request(addr, "GET", "/", &[("X-Api-Key", "fleet")], b"");
                    match r.status {
                        200 => admitted += 1,
                        429 => {}
                        other => panic!("unexpected {other}: {}", r.text()),
                    }
                }
                admitted
            })
        })
        .collect();
    threads
        .into_iter()
        .map(|t| t.join().expect("client thread"))
        .sum()
}

#[test]
fn three_replicas_on_one_redis_admit_exactly_the_limit() {
    let redis = RedisServer::start();
    let up = start_upstream();
    let replicas = fleet(&redis.url(), up.addr);
    assert_eq!(round_robin(&replicas, 4 * LIMIT), LIMIT);
    assert!(redis.keys_without_ttl().is_empty());
}

#[test]
fn three_replicas_on_the_memory_store_admit_three_times_the_limit() {
    // Documented behaviour, not a failure: each replica keeps its own
    // counters, so the fleet's quota is replicas x limit.
    let up = start_upstream();
    let replicas = fleet("memory", up.addr);
    assert_eq!(round_robin(&replicas, 4 * LIMIT), 3 * LIMIT);
}
