//! `tollgate serve` on a real Redis: decisions through the Lua scripts,
//! every key with a TTL, `/readyz` following the store, and the failure
//! policies (`deny`, `allow`, `local`) when the store stops answering.

mod common;

use std::time::{Duration, Instant};

use common::{Tollgate, get, post_json, request, start_upstream};
use redis_harness::RedisServer;

fn config(url: &str) -> String {
    format!(
        r#"
[store]
url = "{url}"
timeout = "100ms"
replicas = 2

[[rules]]
name = "strict"
algorithm = "fixed_window"
limit = 4
period = "1h"
on_error = "deny"

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

fn check(s: &Tollgate, rule: &str, key: &str) -> common::Resp {
    post_json(
        s.api(),
        "/v1/check",
        &format!(r#"{{"rule":"{rule}","key":"{key}"}}"#),
    )
}

#[test]
fn the_api_on_redis_decides_through_the_scripts() {
    let redis = RedisServer::start();
    let s = Tollgate::start(&config(&redis.url()), &["--http", "127.0.0.1:0"]);
    assert_eq!(get(s.api(), "/readyz").status, 200);
    for rule in ["strict", "open", "fallback"] {
        let statuses: Vec<u16> = (0..6).map(|_| check(&s, rule, "k").status).collect();
        assert_eq!(statuses, [200, 200, 200, 200, 429, 429], "{rule}");
    }
    let r = post_json(
        s.api(),
        "/v1/check",
        r#"{"checks":[{"rule":"strict","key":"m"},{"rule":"open","key":"k"}]}"#,
    );
    assert_eq!(r.status, 429);
    assert_eq!(r.json()["rule"], "open");
    assert_eq!(
        check(&s, "strict", "m").json()["remaining"],
        3,
        "the denied pair consumed nothing"
    );
    assert!(redis.dbsize() > 0);
    assert!(redis.keys_without_ttl().is_empty());
}

#[test]
fn a_silent_store_is_answered_by_each_rules_policy() {
    let redis = RedisServer::start();
    let up = start_upstream();
    let upstream = format!("http://{}", up.addr);
    let s = Tollgate::start(
        &config(&redis.url()),
        &[
            "--http",
            "127.0.0.1:0",
            "--proxy",
            "127.0.0.1:0",
            "--upstream",
            upstream.as_str(),
        ],
    );
    assert_eq!(check(&s, "open", "warm").status, 200);

    redis.pause();
    let started = Instant::now();
    // deny: 503 with the error named.
    let r = check(&s, "strict", "k");
    assert_eq!(r.status, 503, "{}", r.text());
    assert!(r.json()["error"].as_str().expect("error").contains("store"));
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "waited past the store timeout"
    );
    // allow: admitted, marked, no RateLimit headers (nothing was decided).
    let r = check(&s, "open", "k");
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["degraded"], true);
    assert_eq!(r.json()["allowed"], true);
    assert_eq!(r.header("tollgate-degraded"), Some("store-unavailable"));
    assert!(r.header("ratelimit").is_none());
    // local: an in-process limiter with the quota divided by replicas (4/2).
    let statuses: Vec<u16> = (0..3).map(|_| check(&s, "fallback", "k").status).collect();
    assert_eq!(statuses, [200, 200, 429]);
    let r = check(&s, "fallback", "k");
    assert_eq!(r.header("tollgate-degraded"), Some("local"));
    assert_eq!(r.json()["limit"], 2);
    assert!(r.header("ratelimit").is_some());
    // A multi-rule check takes the strictest policy of its rules.
    let r = post_json(
        s.api(),
        "/v1/check",
        r#"{"checks":[{"rule":"open","key":"k"},{"rule":"strict","key":"k"}]}"#,
    );
    assert_eq!(r.status, 503);
    // The proxy: every rule applies, one of them denies on failure: 503.
    let r = request(s.proxy(), "GET", "/", &[], b"");
    assert_eq!(r.status, 503, "{}", r.text());
    assert_eq!(r.header("content-type"), Some("application/problem+json"));
    // Not ready.
    let r = get(s.api(), "/readyz");
    assert_eq!(r.status, 503);
    assert!(
        r.json()["error"]
            .as_str()
            .expect("error")
            .contains("timed out")
    );
    // A burst of failures is logged once, not per request.
    for _ in 0..30 {
        check(&s, "open", "burst");
    }
    let burst_took = started.elapsed();
    let metrics = get(s.api(), "/metrics").text();
    redis.resume();

    let trouble = s.log().matches("store trouble").count();
    let allowed = 1 + burst_took.as_secs();
    assert!(
        (1..=usize::try_from(allowed).expect("small")).contains(&trouble),
        "{trouble} store trouble lines in {burst_took:?}:\n{}",
        s.log()
    );
    for want in [
        "tollgate_failure_policy_total{policy=\"deny\"}",
        "tollgate_failure_policy_total{policy=\"allow\"}",
        "tollgate_failure_policy_total{policy=\"local\"}",
        "tollgate_checks_total{rule=\"strict\",outcome=\"error\"}",
    ] {
        let line = metrics
            .lines()
            .find(|l| l.starts_with(want))
            .unwrap_or_else(|| panic!("no {want} in:\n{metrics}"));
        assert!(!line.ends_with(" 0"), "{line}");
    }
    // The breaker stopped asking the silent store.
    assert!(
        metrics.lines().any(|l| l
            .starts_with("tollgate_store_errors_total{kind=\"circuit_open\"}")
            && !l.ends_with(" 0")),
        "{metrics}"
    );

    // Back: ready again, and decisions come from the store once more.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let r = check(&s, "strict", "after");
        if r.status == 200 && r.header("tollgate-degraded").is_none() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "store never came back: {}",
            r.text()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(get(s.api(), "/readyz").status, 200);
    assert!(redis.keys_without_ttl().is_empty());
}
