//! `tollgate replay --store redis://…` runs the trace through the Redis
//! scripts with the trace's own time and prints output byte-identical to the
//! memory store's, on a standalone server and on a 3-master Cluster.

use std::fmt::Write as _;
use std::path::Path;
use std::process::Command;

use redis_harness::{RedisCluster, RedisServer};

const CONFIG: &str = r#"
[[rules]]
name = "gcra"
algorithm = "gcra"
limit = 5
period = "1s"
burst = 8

[[rules]]
name = "tb"
algorithm = "token_bucket"
limit = 3
period = "1s"

[[rules]]
name = "fw"
algorithm = "fixed_window"
limit = 4
period = "250ms"

[[rules]]
name = "sw"
algorithm = "sliding_window"
limit = 7
period = "1s"

[[rules]]
name = "sl"
algorithm = "sliding_log"
limit = 6
period = "2s"

[[rules]]
name = "day"
algorithm = "sliding_window"
limit = 100000
period = "1d"
"#;

/// A deterministic trace: every rule, several keys, costs 0..3, bursts of
/// rows at the same millisecond, epoch-sized times.
fn trace(rows: usize) -> String {
    let rules = ["gcra", "tb", "fw", "sw", "sl", "day"];
    let mut state: u64 = 0x5eed;
    let mut next = || {
        state = state
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        state >> 33
    };
    let mut out = String::from("t_ms,rule,key,cost\n");
    let mut t: u64 = 1_764_000_000_000;
    for _ in 0..rows {
        t += match next() % 4 {
            0 => 0,
            1 => next() % 20,
            2 => next() % 300,
            _ => next() % 1500,
        };
        let rule = rules[usize::try_from(next() % 6).expect("index")];
        let key = format!("user{}", next() % 3);
        let cost = match next() % 8 {
            0 => 0,
            1 => 2,
            2 => 3,
            3 => 100_001,
            _ => 1,
        };
        writeln!(out, "{t},{rule},{key},{cost}").expect("write");
    }
    out
}

fn replay(dir: &Path, store: &str) -> (String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_tollgate"))
        .arg("replay")
        .arg("--config")
        .arg(dir.join("tollgate.toml"))
        .arg("--trace")
        .arg(dir.join("trace.csv"))
        .arg("--store")
        .arg(store)
        .output()
        .expect("run tollgate");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "replay on {store} failed: {stderr}");
    (String::from_utf8(out.stdout).expect("utf-8 output"), stderr)
}

fn setup(rows: usize) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("temp dir");
    std::fs::write(dir.path().join("tollgate.toml"), CONFIG).expect("write config");
    std::fs::write(dir.path().join("trace.csv"), trace(rows)).expect("write trace");
    dir
}

#[test]
fn replay_on_standalone_redis_is_byte_identical_to_memory() {
    let redis = RedisServer::start();
    let dir = setup(1500);
    let (memory, memory_summary) = replay(dir.path(), "memory");
    assert!(memory.contains(",false,"), "the trace must produce denials");
    let (through_redis, redis_summary) = replay(dir.path(), &redis.url());
    assert_eq!(through_redis, memory);
    assert_eq!(redis_summary, memory_summary);
    // A second replay uses a fresh prefix: same output, not a continuation.
    let (again, _) = replay(dir.path(), &redis.url());
    assert_eq!(again, memory);
    let bare = redis.keys_without_ttl();
    assert!(bare.is_empty(), "keys without a TTL: {bare:?}");
    assert!(redis.dbsize() > 0, "the replay wrote its state to Redis");
}

#[test]
fn replay_on_a_cluster_is_byte_identical_to_memory() {
    let cluster = RedisCluster::start(3, 0);
    let dir = setup(600);
    let (memory, _) = replay(dir.path(), "memory");
    let (through_cluster, _) = replay(dir.path(), &cluster.store_url());
    assert_eq!(through_cluster, memory);
    let bare = cluster.keys_without_ttl();
    assert!(bare.is_empty(), "keys without a TTL: {bare:?}");
}
