//! The harness itself, against real Redis: every piece the Redis store's
//! tests will lean on is proven here first.

use std::collections::BTreeMap;
use std::io::ErrorKind;
use std::path::Path;
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use redis_harness::{RedisCluster, RedisServer, Reply, SentinelSetup, redis_version, slot_of};

fn ok() -> Reply {
    Reply::Status("OK".to_owned())
}

/// Polls until `/proc/PID` is gone (the process was killed *and* reaped).
fn assert_gone(pid: u32) {
    let proc_dir = format!("/proc/{pid}");
    let start = Instant::now();
    while Path::new(&proc_dir).exists() {
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "process {pid} still exists (orphan or zombie)"
        );
        thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn version_is_readable() {
    let version = redis_version();
    assert!(
        version.split('.').count() == 3,
        "unexpected version {version:?}"
    );
}

#[test]
fn standalone_start_set_restart_pause_resume_kill() {
    let redis = RedisServer::start();
    let port = redis.port();
    assert_eq!(redis.url(), format!("redis://127.0.0.1:{port}"));
    assert_eq!(redis.command(&["PING"]), Reply::Status("PONG".to_owned()));
    assert_eq!(redis.cli(&["SET", "k", "v"]), "OK");
    assert_eq!(redis.cli(&["GET", "k"]), "v");
    assert_eq!(redis.cli(&["GET", "missing"]), "");
    assert!(redis.cli(&["NOSUCHCOMMAND"]).starts_with("ERR"));
    assert_eq!(redis.role(), "master");
    assert!(redis.log_tail(50).contains("Ready to accept connections"));

    // restart: same port, empty dataset, new process.
    let pid = redis.pid().expect("running");
    redis.restart();
    assert_eq!(redis.port(), port);
    assert_ne!(redis.pid(), Some(pid));
    assert_gone(pid);
    assert_eq!(redis.dbsize(), 0);
    assert_eq!(redis.cli(&["GET", "k"]), "");

    // pause: connections are accepted but nothing answers, until resume.
    redis.pause();
    assert!(redis.is_paused() && redis.is_running() && !redis.is_live());
    let err = redis
        .try_command(&["PING"], Duration::from_millis(300))
        .expect_err("a paused server must not answer");
    assert_eq!(err.kind(), ErrorKind::TimedOut, "{err}");
    redis.resume();
    assert_eq!(
        redis
            .try_command(&["PING"], Duration::from_secs(2))
            .expect("answers after resume"),
        Reply::Status("PONG".to_owned())
    );

    // kill while paused works (SIGKILL), and reaps.
    redis.pause();
    let pid = redis.pid().expect("running");
    redis.kill();
    assert!(!redis.is_running());
    assert_gone(pid);
    let refused = redis.try_command(&["PING"], Duration::from_secs(1));
    assert!(refused.is_err(), "a killed server answered: {refused:?}");

    // restart after kill, then a clean stop.
    redis.restart();
    assert_eq!(redis.command(&["SET", "k", "v"]), ok());
    let pid = redis.pid().expect("running");
    redis.stop();
    assert_eq!(redis.pid(), None);
    assert_gone(pid);
}

#[test]
fn drop_kills_and_reaps_even_when_the_test_panics() {
    let (tx, rx) = mpsc::channel();
    let outcome = thread::spawn(move || {
        let redis = RedisServer::start();
        redis.pause(); // even a stopped process must go
        tx.send((redis.pid().expect("running"), redis.dir().to_path_buf()))
            .expect("send");
        panic!("deliberate panic with a live server");
    })
    .join();
    assert!(outcome.is_err());
    let (pid, dir) = rx.recv().expect("pid");
    assert_gone(pid);
    // The dir of a panicking test is kept for its logs; tidy it here.
    assert!(dir.join("redis.log").exists());
    std::fs::remove_dir_all(dir).expect("remove kept dir");
}

#[test]
fn keys_without_ttl_finds_keys_set_without_ttl_only() {
    let redis = RedisServer::start_with(&["databases 4"]);
    assert_eq!(redis.command(&["SET", "forever", "1"]), ok());
    assert_eq!(
        redis.command(&["SET", "expiring", "1", "PX", "60000"]),
        ok()
    );
    assert_eq!(redis.command(&["HSET", "hash", "f", "1"]), Reply::Int(1));
    assert_eq!(redis.command(&["SET", "{tag}:x", "1", "EX", "60"]), ok());
    assert_eq!(redis.cli(&["-n", "2", "SET", "other-db", "1"]), "OK");
    assert_eq!(redis.dbsize(), 4);
    assert_eq!(
        redis.keys_without_ttl(),
        ["db2/other-db", "forever", "hash"]
    );

    redis.flushall();
    assert_eq!(redis.dbsize(), 0);
    assert!(redis.keys_without_ttl().is_empty());

    // script_flush makes EVALSHA fail with NOSCRIPT.
    let sha = redis.cli(&["SCRIPT", "LOAD", "return 1"]);
    assert_eq!(redis.cli(&["EVALSHA", &sha, "0"]), "1");
    redis.script_flush();
    assert!(redis.cli(&["EVALSHA", &sha, "0"]).starts_with("NOSCRIPT"));
}

#[test]
fn cluster_of_three_masters_serves_every_slot() {
    let cluster = RedisCluster::start(3, 0);
    assert_eq!(cluster.nodes().len(), 3);
    assert_eq!(cluster.masters().len(), 3);
    let seeds: Vec<String> = cluster.nodes().iter().map(RedisServer::addr).collect();
    assert_eq!(
        cluster.store_url(),
        format!("redis+cluster://{}", seeds.join(","))
    );
    assert_eq!(cluster.urls().len(), 3);

    // One key per master, found by slot; redis-cli -c follows MOVED.
    let mut by_master: BTreeMap<u16, String> = BTreeMap::new();
    for i in 0..1000 {
        let key = format!("key{i}");
        by_master
            .entry(cluster.master_of(&key).port())
            .or_insert(key);
        if by_master.len() == 3 {
            break;
        }
    }
    assert_eq!(by_master.len(), 3, "keys did not spread over 3 masters");
    for (port, key) in &by_master {
        assert_eq!(
            cluster.cli(&["CLUSTER", "KEYSLOT", key]),
            slot_of(key).to_string()
        );
        assert_eq!(cluster.cli(&["SET", key, "v", "EX", "60"]), "OK");
        assert_eq!(cluster.cli(&["GET", key]), "v");
        assert_eq!(cluster.node_by_port(*port).dbsize(), 1, "{key} on {port}");
    }
    assert_eq!(cluster.dbsize(), 3);
    assert!(cluster.keys_without_ttl().is_empty());

    assert_eq!(cluster.cli(&["SET", "no-ttl", "v"]), "OK");
    assert_eq!(cluster.keys_without_ttl(), ["no-ttl"]);
    cluster.flushall();
    assert_eq!(cluster.dbsize(), 0);
}

#[test]
fn cluster_with_replicas_fails_over_on_kill_and_on_request() {
    let cluster = RedisCluster::start(3, 1);
    assert_eq!(cluster.nodes().len(), 6);
    assert_eq!(cluster.masters().len(), 3);

    // Killed master: the replica takes over and keeps acknowledged writes.
    // WAIT counts acks of *this connection's* writes: same connection.
    let key = "{killed}:k";
    let master = cluster.master_of(key);
    let replies = master.pipeline(&[&["SET", key, "kept", "EX", "60"], &["WAIT", "1", "5000"]]);
    assert_eq!(replies, [ok(), Reply::Int(1)]);
    let report = cluster.kill_master_of(key);
    eprintln!("cluster kill failover: {report:?}");
    assert_ne!(report.new_master_port, report.old_master_port);
    assert!(!cluster.node_by_port(report.old_master_port).is_running());
    assert_eq!(cluster.master_of(key).port(), report.new_master_port);
    assert_eq!(cluster.cli(&["GET", key]), "kept");
    assert_eq!(cluster.cli(&["SET", key, "after", "EX", "60"]), "OK");

    // Graceful CLUSTER FAILOVER on another shard (one that still has a replica).
    let other = (0..1000)
        .map(|i| format!("other{i}"))
        .find(|k| {
            let port = cluster.master_of(k).port();
            port != report.new_master_port
        })
        .expect("a key on another shard");
    let graceful = cluster.failover_master_of(&other);
    eprintln!("cluster graceful failover: {graceful:?}");
    assert_ne!(graceful.new_master_port, graceful.old_master_port);
    assert_eq!(
        cluster.node_by_port(graceful.old_master_port).role(),
        "slave"
    );
    assert_eq!(
        cluster.node_by_port(graceful.new_master_port).role(),
        "master"
    );
    assert_eq!(cluster.cli(&["SET", &other, "v", "EX", "60"]), "OK");

    // The killed node comes back on its port (same nodes.conf) as a replica.
    let killed = cluster.node_by_port(report.old_master_port);
    killed.restart();
    cluster.wait_ok();
    assert_eq!(killed.role(), "slave");
    assert_eq!(cluster.masters().len(), 3);

    assert!(cluster.keys_without_ttl().is_empty());
}

#[test]
fn sentinel_promotes_the_replica_when_the_master_is_killed() {
    let setup = SentinelSetup::start();
    let sentinels: Vec<String> = setup.sentinels().iter().map(RedisServer::addr).collect();
    assert_eq!(
        setup.store_url(),
        format!("redis+sentinel://{}/mymaster", sentinels.join(","))
    );
    let first = setup.master_port();
    assert_eq!(first, setup.servers()[0].port());
    assert_eq!(setup.replicas().len(), 1);
    let replies = setup
        .master()
        .pipeline(&[&["SET", "k", "v", "EX", "60"], &["WAIT", "1", "5000"]]);
    assert_eq!(replies, [ok(), Reply::Int(1)]);

    let report = setup.kill_master();
    eprintln!("sentinel kill failover: {report:?}");
    assert_eq!(report.old_master_port, first);
    assert_eq!(setup.master_port(), report.new_master_port);
    assert_eq!(report.new_master_port, setup.servers()[1].port());
    let master = setup.master();
    assert_eq!(master.role(), "master");
    assert_eq!(
        master.cli(&["GET", "k"]),
        "v",
        "an acknowledged write was lost"
    );
    assert_eq!(master.command(&["SET", "after", "v", "EX", "60"]), ok());
    assert!(setup.keys_without_ttl().is_empty());
}

#[test]
fn sentinel_failover_on_request_promotes_the_replica() {
    let setup = SentinelSetup::start();
    let report = setup.failover();
    eprintln!("sentinel graceful failover: {report:?}");
    assert_ne!(report.new_master_port, report.old_master_port);
    assert_eq!(setup.master_port(), report.new_master_port);
    assert_eq!(setup.master().command(&["SET", "k", "v", "EX", "60"]), ok());
    assert_eq!(setup.dbsize(), 1);
    assert!(setup.keys_without_ttl().is_empty());
}

/// `TOLLGATE_REDIS_SERVER` picks the program: a Valkey run that silently
/// started Redis (or the reverse) would prove nothing about Valkey.
#[test]
fn the_server_is_the_flavour_asked_for() {
    let redis = RedisServer::start();
    let info = redis.info("server");
    let valkey = info.lines().any(|l| l.trim() == "server_name:valkey");
    assert_eq!(
        valkey,
        redis_harness::flavour() == redis_harness::Flavour::Valkey,
        "{info}"
    );
}
