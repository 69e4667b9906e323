//! The compatibility entry under xDS without
//! `FORCE_START_WITHOUT_INITIAL_CONFIG`: `/healthcheck` waits for the first
//! response applied, whatever its version text. Envoy Gateway sends
//! version `""` with no resource once every Gateway is deleted (notes39
//! §3.2); the reference stays healthy then, and so must tollgate.

use std::time::{Duration, Instant};

use redis_harness::RedisServer;

use crate::support::compat::Ratelimit;
use crate::support::get;
use crate::support::xds::{NODE, acked, ads, eg_domain, runtime, set};
use tollgate_server::rls_conf::RateLimitUnit::Hour;

#[test]
fn an_empty_snapshot_with_version_empty_keeps_the_healthcheck_healthy() {
    let rt = runtime();
    let ads = rt.block_on(ads(None));
    set(&ads, "1", &[eg_domain("d", "route", &[(2, Hour)])]);
    let redis = RedisServer::start();
    let server = ads.addr().to_string();
    let redis_url = redis.addr();
    let rl = Ratelimit::start(&[
        ("CONFIG_TYPE", "GRPC_XDS_SOTW"),
        ("CONFIG_GRPC_XDS_SERVER_URL", &server),
        ("CONFIG_GRPC_XDS_NODE_ID", NODE),
        ("XDS_CLIENT_BACKOFF_INITIAL_INTERVAL", "50ms"),
        ("XDS_CLIENT_BACKOFF_MAX_INTERVAL", "200ms"),
        ("USE_STATSD", "false"),
        ("LOG_LEVEL", "info"),
        ("REDIS_SOCKET_TYPE", "tcp"),
        ("REDIS_URL", &redis_url),
        ("HOST", "127.0.0.1"),
        ("PORT", "0"),
        ("GRPC_HOST", "127.0.0.1"),
        ("GRPC_PORT", "0"),
        ("DEBUG_HOST", "127.0.0.1"),
        ("DEBUG_PORT", "0"),
    ]);
    rt.block_on(acked(&ads, "1"));
    wait_healthy(&rl);
    // Every Gateway deleted: no config, version "".
    set(&ads, "", &[]);
    rt.block_on(acked(&ads, ""));
    assert_eq!(get(rl.debug, "/rlconfig").text(), "");
    let health = get(rl.http, "/healthcheck");
    assert_eq!(
        (health.status, health.text()),
        (200, "OK".to_owned()),
        "{}",
        rl.log()
    );
}

/// Polls `/healthcheck` until 200 (Redis is probed once a second).
fn wait_healthy(rl: &Ratelimit) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while get(rl.http, "/healthcheck").status != 200 {
        assert!(Instant::now() < deadline, "never healthy: {}", rl.log());
        std::thread::sleep(Duration::from_millis(50));
    }
}
