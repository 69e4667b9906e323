//! `/readyz` on the ops listener under xDS: without
//! `start_without_config` the server opens no door before the first
//! config, and its readiness says so (503) until the config comes; with
//! it, the replica is ready at once (its Envoy door answers errors).

use std::net::{SocketAddr, TcpListener};

use tollgate_server::rls_conf::RateLimitUnit::Hour;

use crate::support::xds::{acked, ads, eg_domain, runtime, set, toml};
use crate::support::{Tollgate, get};

/// A port free a moment ago, for a listener that must be known before
/// the server logs it (its start blocks until the first config).
fn free_addr() -> SocketAddr {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("free port")
}

#[test]
fn readyz_is_503_until_the_first_xds_config_then_200() {
    let rt = runtime();
    let ads = std::sync::Arc::new(rt.block_on(ads(None)));
    let ops = free_addr();
    // Once /readyz has said "not ready", and only then, the snapshot is set.
    let setter = std::sync::Arc::clone(&ads);
    let before = std::thread::spawn(move || {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        loop {
            if let Some(r) = std::net::TcpStream::connect(ops)
                .ok()
                .map(|_| get(ops, "/readyz"))
            {
                set(&setter, "1", &[eg_domain("d", "route", &[(1, Hour)])]);
                return (r.status, r.json());
            }
            assert!(std::time::Instant::now() < deadline, "no ops listener");
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    });
    let ops_arg = ops.to_string();
    let server = Tollgate::start(
        &toml(&ads.addr().to_string(), ""),
        &["--grpc", "127.0.0.1:0", "--ops", &ops_arg],
    );
    let (status, body) = before.join().expect("readyz before");
    assert_eq!(status, 503, "{body}");
    assert_eq!(body["status"], "unready", "{body}");
    assert_eq!(body["config"], "awaiting xDS", "{body}");
    rt.block_on(acked(&ads, "1"));
    let after = get(server.ops(), "/readyz");
    assert_eq!(after.status, 200, "{}", after.text());
    assert_eq!(after.json()["status"], "ready");
}

#[test]
fn readyz_is_200_before_the_first_config_with_start_without_config() {
    let rt = runtime();
    let ads = rt.block_on(ads(None));
    let server = Tollgate::start(
        &toml(&ads.addr().to_string(), "start_without_config = true\n"),
        &["--grpc", "127.0.0.1:0", "--ops", "127.0.0.1:0"],
    );
    let r = get(server.ops(), "/readyz");
    assert_eq!(r.status, 200, "{}", r.text());
}
