//! The ACL user docs/redis-store.md gives ("Passwords, ACL users and
//! TLS"), created with the very line the page shows: everything the store
//! sends runs as that user, standalone and on a Cluster, and Redis logs no
//! refusal (`ACL LOG` stays empty: a refused command the store recovers
//! from, such as `FUNCTION LOAD` falling back to scripts, shows there too).

use std::time::Duration;

use redis_harness::{RedisCluster, RedisServer};
use tollgate::conformance;
use tollgate::store::hybrid::{HybridOptions, HybridStore};
use tollgate::store::redis::{RedisOptions, RedisStore};
use tollgate::{Algorithm, RuleSpec, Store};

const PASSWORD: &str = "acl-test-password";

/// The `ACL SETUSER` line of docs/redis-store.md, its password filled in,
/// split into `redis-cli` arguments.
fn documented_acl_line() -> Vec<String> {
    let doc = include_str!("../../../../docs/redis-store.md");
    let line = doc
        .lines()
        .find(|l| l.starts_with("ACL SETUSER tollgate "))
        .expect("docs/redis-store.md shows an ACL SETUSER line");
    line.replace(">CHANGE-ME", &format!(">{PASSWORD}"))
        .split_whitespace()
        .map(str::to_owned)
        .collect()
}

fn create_user(node: &RedisServer) {
    let line = documented_acl_line();
    let args: Vec<&str> = line.iter().map(String::as_str).collect();
    assert_eq!(node.cli(&args).trim(), "OK", "{line:?}");
    assert_eq!(node.cli(&["ACL", "LOG", "RESET"]).trim(), "OK");
}

fn acl_log_is_empty(node: &RedisServer) {
    let log = node.cli(&["ACL", "LOG"]);
    assert!(log.trim().is_empty(), "refused on {}:\n{log}", node.addr());
}

async fn as_user(url: &str) -> RedisStore {
    RedisStore::connect(
        url,
        RedisOptions {
            timeout: Duration::from_secs(5),
            ..RedisOptions::default()
        },
    )
    .await
    .expect("connect as the ACL user")
}

/// What the store does besides the kit's checks: real-time checks (the
/// server's `TIME`), a reset, the shared runtime table, a heartbeat.
async fn operate(store: &RedisStore) {
    let rule = RuleSpec::new("acl", Algorithm::Gcra, 10, Duration::from_secs(60))
        .build()
        .expect("rule");
    for _ in 0..3 {
        assert!(
            store
                .check(&rule, b"k", 1, None)
                .await
                .expect("check")
                .allowed
        );
    }
    assert!(store.reset(&rule, b"k").await.expect("reset"));
    assert!(
        store
            .runtime_write(b"block:acl", Some(b"1"), &[])
            .await
            .expect("runtime write")
    );
    let table = store.runtime_read(None).await.expect("runtime read");
    assert!(table.is_some(), "the shared table is read");
    assert!(
        store
            .runtime_write(b"block:acl", None, &[])
            .await
            .expect("runtime delete")
    );
    let live = store
        .heartbeat("replica-1", Duration::from_secs(3))
        .await
        .expect("heartbeat");
    assert_eq!(live, Some(1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_documented_acl_user_runs_everything_standalone() {
    redis_harness::clear_of_window_edge(Duration::from_secs(3600), Duration::from_secs(60));
    let server = RedisServer::start();
    create_user(&server);
    let url = format!("redis://tollgate:{PASSWORD}@{}", server.addr());
    let store = as_user(&url).await;
    let report = conformance::run(&store, "acl")
        .await
        .unwrap_or_else(|f| panic!("{f}"));
    assert_eq!(report.cases, 109, "{report}");
    operate(&store).await;
    let hybrid = HybridStore::new(as_user(&url).await, HybridOptions::default());
    let rule = RuleSpec::new("hybrid", Algorithm::Gcra, 100, Duration::from_secs(60))
        .build()
        .expect("rule");
    for _ in 0..5 {
        assert!(
            hybrid
                .check(&rule, b"k", 1, None)
                .await
                .expect("hybrid")
                .allowed
        );
    }
    assert!(
        server.command_calls("fcall") > 100,
        "checks ran as functions"
    );
    acl_log_is_empty(&server);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_documented_acl_user_runs_everything_on_a_cluster() {
    let cluster = RedisCluster::start(3, 0);
    for node in cluster.nodes() {
        create_user(node);
    }
    let nodes = cluster.store_url();
    let url = nodes.replacen("://", &format!("://tollgate:{PASSWORD}@"), 1);
    let store = as_user(&url).await;
    let report = conformance::run(&store, "acl")
        .await
        .unwrap_or_else(|f| panic!("{f}"));
    assert_eq!(report.cases, 109, "{report}");
    operate(&store).await;
    for node in cluster.nodes() {
        acl_log_is_empty(node);
    }
}
