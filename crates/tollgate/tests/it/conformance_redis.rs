//! The conformance kit, unchanged, against the Redis store: standalone,
//! a 3-master Cluster (multi-rule checks spanning nodes) and Sentinel.

use redis_harness::{RedisCluster, RedisServer, SentinelSetup};
use tollgate::conformance;
use tollgate::store::redis::{RedisOptions, RedisStore};

async fn conforms(url: &str) -> conformance::Report {
    let store = RedisStore::connect(url, RedisOptions::default())
        .await
        .expect("connect");
    match conformance::run(&store, "redis").await {
        Ok(report) => report,
        Err(failure) => panic!("{failure}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn standalone_redis_conforms() {
    let server = RedisServer::start();
    let report = conforms(&server.url()).await;
    assert_eq!(report.cases, 109, "{report}");
    assert!(report.leases > 300, "{report}");
    assert!(
        report.reservations > 200 && report.settles > 300,
        "{report}"
    );
    assert!(report.charges > 500, "{report}");
    assert!(report.refunds > 100, "{report}");
    assert!(report.denied > 1_000, "{report}");
    let bare = server.keys_without_ttl();
    assert!(bare.is_empty(), "keys without a TTL: {bare:?}");
}

/// The same kit by `EVALSHA` scripts: a user refused `FCALL` (or a server
/// without Functions) gets the fallback, which must decide the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn standalone_redis_conforms_by_scripts() {
    let server = RedisServer::start();
    let denied = server.cli(&["ACL", "SETUSER", "default", "-fcall"]);
    assert_eq!(denied.trim(), "OK");
    let report = conforms(&server.url()).await;
    assert_eq!(report.cases, 109, "{report}");
    assert!(report.denied > 1_000, "{report}");
    assert_eq!(server.command_calls("fcall"), 0, "scripts only");
    assert!(server.command_calls("evalsha") > 1_000, "by scripts");
    let bare = server.keys_without_ttl();
    assert!(bare.is_empty(), "keys without a TTL: {bare:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_cluster_conforms() {
    let cluster = RedisCluster::start(3, 0);
    let report = conforms(&cluster.store_url()).await;
    assert_eq!(report.cases, 109, "{report}");
    assert!(report.leases > 300, "{report}");
    assert!(
        report.reservations > 200 && report.settles > 300,
        "{report}"
    );
    assert!(report.charges > 500, "{report}");
    assert!(report.refunds > 100, "{report}");
    let bare = cluster.keys_without_ttl();
    assert!(bare.is_empty(), "keys without a TTL: {bare:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_behind_sentinel_conforms() {
    let setup = SentinelSetup::start();
    let report = conforms(&setup.store_url()).await;
    assert_eq!(report.cases, 109, "{report}");
    assert!(report.leases > 300, "{report}");
    assert!(
        report.reservations > 200 && report.settles > 300,
        "{report}"
    );
    assert!(report.charges > 500, "{report}");
    assert!(report.refunds > 100, "{report}");
    assert!(setup.keys_without_ttl().is_empty());
}
