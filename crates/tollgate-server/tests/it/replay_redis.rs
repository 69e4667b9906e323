//! `tollgate replay --store redis://…` runs the trace through the Redis
//! scripts with the trace's own time and prints output byte-identical to the
//! memory store's, on a standalone server and on a 3-master Cluster: for
//! checks, and for traces of every op (charges, reservations settled and
//! cancelled, leases released and renewed).

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

[[rules]]
name = "conc"
algorithm = "concurrency"
limit = 3
lease = "2s"
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

/// A deterministic trace of every op over the rate rules and `conc`:
/// checks, charges past the limit, reservations with short and long ttls
/// settled (above and below their estimate, some late) or cancelled,
/// leases acquired, released and renewed, some run out. Settles, cancels,
/// releases and renews are written only where the writer's own count says
/// something may be open; [`valid_op_trace`] drops those that find nothing.
fn op_trace(rows: usize) -> Vec<String> {
    let rules = ["gcra", "tb", "fw", "sw", "sl"];
    let mut state: u64 = 0x0b5e_55ed;
    let mut next = || {
        state = state
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        state >> 33
    };
    let mut open = std::collections::HashMap::<(String, String), u64>::new();
    let mut out = Vec::with_capacity(rows);
    let mut t: u64 = 1_764_000_000_000;
    for _ in 0..rows {
        t += match next() % 5 {
            0 => 0,
            1 => next() % 20,
            2 | 3 => next() % 300,
            _ => next() % 2500,
        };
        let key = format!("user{}", next() % 3);
        let conc = next() % 4 == 0;
        let rule = if conc {
            "conc"
        } else {
            rules[usize::try_from(next() % 5).expect("index")]
        };
        let count = open.entry((rule.to_owned(), key.clone())).or_default();
        let pick = next() % 10;
        let row = if conc {
            match pick {
                0..=4 => {
                    *count += 1;
                    format!("acquire,{},", 1 + next() % 2)
                }
                5..=7 if *count > 0 => {
                    *count -= 1;
                    "release,,".to_owned()
                }
                8 if *count > 0 => "renew,,".to_owned(),
                _ => "check,0,".to_owned(),
            }
        } else {
            match pick {
                0 | 1 => format!("check,{},", next() % 4),
                2 | 3 => format!("charge,{},", next() % 12),
                4..=6 => {
                    *count += 1;
                    let ttl = ["", "50", "500", "5000"][usize::try_from(next() % 4).expect("i")];
                    format!("reserve,{},{ttl}", 1 + next() % 5)
                }
                7 | 8 if *count > 0 => {
                    *count -= 1;
                    format!("settle,{},", next() % 9)
                }
                9 if *count > 0 => {
                    *count -= 1;
                    "cancel,,".to_owned()
                }
                _ => format!("check,{},", 1 + next() % 2),
            }
        };
        let (op, rest) = row.split_once(',').expect("op,cost,ttl");
        let (cost, ttl) = rest.split_once(',').expect("cost,ttl");
        out.push(format!("{t},{rule},{key},{cost},{op},{ttl}"));
    }
    out
}

/// [`op_trace`] with the rows that find nothing open dropped: replayed
/// on the memory store until it runs through (each pass drops the row a
/// failure names; the rows before it are unchanged, so this ends).
fn valid_op_trace(dir: &Path, rows: usize) -> String {
    let mut rows = op_trace(rows);
    let text = |rows: &[String]| format!("t_ms,rule,key,cost,op,ttl_ms\n{}\n", rows.join("\n"));
    for _ in 0..=rows.len() {
        std::fs::write(dir.join("trace.csv"), text(&rows)).expect("write trace");
        let out = run_replay(dir, "memory");
        if out.status.success() {
            return text(&rows);
        }
        let stderr = String::from_utf8_lossy(&out.stderr);
        let line: usize = stderr
            .split_once("trace.csv:")
            .and_then(|(_, rest)| rest.split(':').next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("not a row error: {stderr}"));
        assert!(
            stderr.contains("has no open reservation") || stderr.contains("has no live lease"),
            "only rows that find nothing open are dropped: {stderr}"
        );
        rows.remove(line - 2);
    }
    panic!("the op trace never replayed through");
}

fn run_replay(dir: &Path, store: &str) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_tollgate"))
        .arg("replay")
        .arg("--config")
        .arg(dir.join("tollgate.toml"))
        .arg("--trace")
        .arg(dir.join("trace.csv"))
        .arg("--store")
        .arg(store)
        .output()
        .expect("run tollgate")
}

fn replay(dir: &Path, store: &str) -> (String, String) {
    let out = run_replay(dir, store);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "replay on {store} failed: {stderr}");
    (String::from_utf8(out.stdout).expect("utf-8 output"), stderr)
}

/// Every op shows in the memory replay's output, with denials, debt, late
/// settles (the ones of a 50 ms ttl settled later) and leases run out.
fn assert_every_op(output: &str) {
    for op in [
        ",check,",
        ",charge,",
        ",reserve,",
        ",settle,",
        ",cancel,",
        ",acquire,",
        ",release,",
        ",renew,",
    ] {
        assert!(output.contains(op), "no {op} row in the op trace's output");
    }
    assert!(
        output.contains(",false,"),
        "the op trace must produce denials"
    );
    assert!(
        output
            .lines()
            .any(|l| l.contains(",charge,") && !l.ends_with(",charge,0")),
        "some charge must leave debt"
    );
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
fn op_traces_on_standalone_redis_are_byte_identical_to_memory() {
    let redis = RedisServer::start();
    let dir = setup(0);
    let trace = valid_op_trace(dir.path(), 1200);
    assert!(trace.lines().count() > 900, "most rows are kept");
    let (memory, memory_summary) = replay(dir.path(), "memory");
    assert_every_op(&memory);
    let (through_redis, redis_summary) = replay(dir.path(), &redis.url());
    assert_eq!(through_redis, memory);
    assert_eq!(redis_summary, memory_summary);
    let bare = redis.keys_without_ttl();
    assert!(bare.is_empty(), "keys without a TTL: {bare:?}");
}

#[test]
fn replay_on_a_cluster_is_byte_identical_to_memory() {
    let cluster = RedisCluster::start(3, 0);
    let dir = setup(600);
    let (memory, _) = replay(dir.path(), "memory");
    let (through_cluster, _) = replay(dir.path(), &cluster.store_url());
    assert_eq!(through_cluster, memory);
    // And a trace of every op.
    valid_op_trace(dir.path(), 500);
    let (memory, _) = replay(dir.path(), "memory");
    let (through_cluster, _) = replay(dir.path(), &cluster.store_url());
    assert_eq!(through_cluster, memory);
    let bare = cluster.keys_without_ttl();
    assert!(bare.is_empty(), "keys without a TTL: {bare:?}");
}
