//! The probes (docs/operations.md, "Probes"): `/readyz` stays ready while
//! the store is down and the failure policy answers (the store's state in
//! the body and in `tollgate_store_up`), `[ops] readiness = "store"` makes
//! it a 503 (applied by a reload), SIGTERM makes it `draining`, a frozen
//! store never makes it wait; the ops listener answers `/healthz`,
//! `/readyz` and `/metrics` on a gRPC-only serve without `--config` and on
//! a proxy-only serve, and 404 elsewhere.

use std::io::Write;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use redis_harness::RedisServer;
use serde_json::json;

use crate::support::{
    self, Resp, Tollgate, connect, get, post_json, request, serve_output, start_upstream,
};

fn config(url: &str, readiness: &str) -> String {
    format!(
        r#"
[ops]
readiness = "{readiness}"

[store]
url = "{url}"
timeout = "100ms"
heartbeat = "100ms"

[[rules]]
name = "open"
algorithm = "gcra"
limit = 4
period = "1h"
on_error = "allow"

[[rules]]
name = "fallback"
algorithm = "sliding_window"
limit = 4
period = "1h"
on_error = "local"
"#
    )
}

/// `/readyz` on `addr` until `done` says its answer is the awaited one,
/// for at most 10 s; every answer meanwhile must pass `each`. That answer.
fn readyz_until(addr: SocketAddr, done: impl Fn(&Resp) -> bool, each: impl Fn(&Resp)) -> Resp {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let r = get(addr, "/readyz");
        each(&r);
        if done(&r) {
            return r;
        }
        assert!(Instant::now() < deadline, "never came: {}", r.text());
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Waits (at most 10 s) until `/metrics` on `addr` has the line `line`.
fn metric_until(addr: SocketAddr, line: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let metrics = get(addr, "/metrics").text();
        if metrics.lines().any(|l| l == line) {
            return;
        }
        assert!(Instant::now() < deadline, "no {line:?} in:\n{metrics}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Redis stops and every rule answers by its policy: the replica stays
/// ready (on the ops listener and the HTTP API alike), saying the store is
/// down in the body and in `tollgate_store_up`. A reload to
/// `readiness = "store"` makes it a 503 from the next probe; Redis back,
/// ready again with the store up.
#[test]
fn a_store_outage_leaves_a_replica_ready_that_answers_by_its_policy() {
    let redis = RedisServer::start();
    let s = Tollgate::start(
        &config(&redis.url(), "serving"),
        &[
            "--http",
            "127.0.0.1:0",
            "--ops",
            "127.0.0.1:0",
            "--reload-poll",
            "50ms",
        ],
    );
    let (ops, api) = (s.ops(), s.api());
    let r = get(ops, "/readyz");
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(
        (&r.json()["status"], &r.json()["store"]),
        (&json!("ready"), &json!("up"))
    );
    metric_until(ops, "tollgate_store_up 1");

    redis.kill();
    let ready_throughout = |r: &Resp| {
        assert_eq!(
            r.status,
            200,
            "not ready while the policy answers: {}",
            r.text()
        );
        assert_eq!(r.json()["status"], "ready", "{}", r.text());
    };
    let down = |r: &Resp| r.json()["store"] == "down";
    for addr in [ops, api] {
        let r = readyz_until(addr, down, ready_throughout);
        let why = r.json()["store_error"]
            .as_str()
            .expect("store_error")
            .to_owned();
        assert!(!why.is_empty(), "{}", r.text());
        assert!(r.json().get("error").is_none(), "{}", r.text());
    }
    metric_until(ops, "tollgate_store_up 0");
    metric_until(api, "tollgate_store_up 0");
    // The policies answer meanwhile: that is why the replica is ready.
    let r = post_json(api, "/v1/check", r#"{"rule":"open","key":"k"}"#);
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.header("tollgate-degraded"), Some("store-unavailable"));
    let r = post_json(api, "/v1/check", r#"{"rule":"fallback","key":"k"}"#);
    assert_eq!(r.header("tollgate-degraded"), Some("local"));

    // The opt-in, by a reload: 503 while the store does not answer.
    std::fs::write(s.config_path(), config(&redis.url(), "store")).expect("rewrite");
    assert!(s.logs("config reloaded"), "{}", s.log());
    for addr in [ops, api] {
        let r = get(addr, "/readyz");
        assert_eq!(r.status, 503, "{}", r.text());
        let body = r.json();
        assert_eq!(
            (&body["status"], &body["store"]),
            (&json!("unready"), &json!("down"))
        );
        assert!(
            body["error"].as_str().is_some_and(|e| !e.is_empty()),
            "{body}"
        );
        assert!(body["store_error"].as_str().is_some(), "{body}");
        assert!(body["config_version"].as_str().is_some(), "{body}");
    }

    redis.restart();
    let up = |r: &Resp| r.status == 200 && r.json()["store"] == "up";
    readyz_until(ops, up, |_| {});
    metric_until(ops, "tollgate_store_up 1");
}

/// A frozen Redis and a store timeout longer than any probe's: `/readyz`
/// answers at once from the last probe (`serving` never waits on the
/// store); asking the store itself would hold it for a minute, past the
/// test client's 30 s read timeout.
#[test]
fn readyz_never_waits_on_a_frozen_store() {
    let redis = RedisServer::start();
    let config =
        config(&redis.url(), "serving").replace("timeout = \"100ms\"", "timeout = \"60s\"");
    assert!(config.contains("timeout = \"60s\""));
    let s = Tollgate::start(&config, &["--http", "127.0.0.1:0", "--ops", "127.0.0.1:0"]);
    metric_until(s.ops(), "tollgate_store_up 1");
    redis.pause();
    for addr in [s.ops(), s.api()] {
        let r = get(addr, "/readyz");
        assert_eq!(r.status, 200, "{}", r.text());
    }
    redis.resume();
}

const YAML: &str = "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: minute\n      requests_per_unit: 5\n";

/// The three probes and nothing else on `ops`.
fn assert_ops_listener(ops: SocketAddr) {
    let r = get(ops, "/healthz");
    assert_eq!((r.status, r.json()), (200, json!({ "status": "ok" })));
    let r = get(ops, "/readyz");
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(
        (&r.json()["status"], &r.json()["store"]),
        (&json!("ready"), &json!("up"))
    );
    let r = get(ops, "/metrics");
    assert_eq!(r.status, 200);
    assert_eq!(
        r.header("content-type"),
        Some("text/plain; version=0.0.4; charset=utf-8")
    );
    let text = r.text();
    assert!(text.lines().any(|l| l == "tollgate_store_up 1"), "{text}");
    assert!(text.contains("tollgate_config_info{version="), "{text}");
    let head = request(ops, "HEAD", "/readyz", &[], b"");
    assert_eq!(head.status, 200);
    assert!(head.body.is_empty());
    for path in [
        "/",
        "/v1/check",
        "/v1/rules",
        "/admin/v1/keys",
        "/healthz/x",
    ] {
        let r = get(ops, path);
        assert_eq!(r.status, 404, "{path}: {}", r.text());
        let why = r.json()["error"].as_str().expect("error").to_owned();
        assert!(
            why.contains("/healthz, /readyz and /metrics"),
            "{path}: {why}"
        );
    }
    let r = post_json(ops, "/readyz", "{}");
    assert_eq!((r.status, r.header("allow")), (405, Some("GET, HEAD")));
}

/// `serve --grpc ADDR --envoy-config F.yaml` with no `--config`: no HTTP
/// API, and the ops listener answers for it.
#[test]
fn the_ops_listener_serves_a_grpc_only_replica_without_a_config() {
    let (_dir, yaml) = support::rls::yaml_file(YAML);
    let yaml = yaml.to_str().expect("utf-8 path");
    let s = Tollgate::start_with_env(
        None,
        &[
            "--grpc",
            "127.0.0.1:0",
            "--envoy-config",
            yaml,
            "--ops",
            "127.0.0.1:0",
        ],
        &[],
    );
    assert!(!s.log().contains("HTTP API listening"), "{}", s.log());
    assert_ops_listener(s.ops());
}

/// A proxy-only replica, its ops listener named by `[ops] listen`.
#[test]
fn the_ops_listener_serves_a_proxy_only_replica() {
    let up = start_upstream();
    let upstream = format!("http://{}", up.addr);
    let config = "[ops]\nlisten = \"127.0.0.1:0\"\n\n\
         [[rules]]\nname = \"r\"\nalgorithm = \"gcra\"\nlimit = 100\nperiod = \"1s\"\nkey = \"client_ip\"\n";
    let s = Tollgate::start(config, &["--proxy", "127.0.0.1:0", "--upstream", &upstream]);
    assert!(!s.log().contains("HTTP API listening"), "{}", s.log());
    assert_eq!(request(s.proxy(), "GET", "/", &[], b"").status, 200);
    assert_ops_listener(s.ops());
}

/// SIGTERM: while a proxied request holds the drain open (its upstream
/// answers in a minute, past the 30 s drain bound), the ops listener still
/// answers: `/readyz` 503 `draining`, `/healthz` 200.
#[test]
fn readyz_says_draining_after_sigterm_while_the_doors_drain() {
    let up = start_upstream();
    let upstream = format!("http://{}", up.addr);
    let config = "[[rules]]\nname = \"r\"\nalgorithm = \"gcra\"\nlimit = 100\nperiod = \"1s\"\n";
    let s = Tollgate::start(
        config,
        &[
            "--proxy",
            "127.0.0.1:0",
            "--upstream",
            &upstream,
            "--ops",
            "127.0.0.1:0",
        ],
    );
    let ops = s.ops();
    assert_eq!(get(ops, "/readyz").status, 200);
    let mut slow = connect(s.proxy());
    write!(slow, "GET /slow?ms=60000 HTTP/1.1\r\nHost: t\r\n\r\n").expect("slow request");
    let deadline = Instant::now() + Duration::from_secs(30);
    while up.connections() == 0 {
        assert!(Instant::now() < deadline, "the slow request never left");
        std::thread::sleep(Duration::from_millis(10));
    }

    s.signal("TERM");
    assert!(s.logs("SIGTERM: shutting down"), "{}", s.log());
    let r = readyz_until(ops, |r| r.status == 503, |_| {});
    assert_eq!(r.json()["status"], "draining", "{}", r.text());
    assert_eq!(get(ops, "/healthz").status, 200);
    assert!(s.logs("reverse proxy: stopped accepting"), "{}", s.log());
    drop(slow);
}

/// A bad `[ops]` table stops `serve` with the file's line and field.
#[test]
fn a_bad_ops_table_is_refused_with_its_line() {
    let out = serve_output(
        "[[rules]]\nname = \"r\"\nalgorithm = \"gcra\"\nlimit = 1\nperiod = \"1s\"\n\n\
         [ops]\nreadiness = \"always\"\nport = 9090\n",
        &["--http", "127.0.0.1:0"],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("tollgate.toml:8: ops.readiness: unknown readiness \"always\""),
        "{stderr}"
    );
    assert!(
        stderr.contains("tollgate.toml:9: ops.port: unknown field"),
        "{stderr}"
    );
}
