//! `tollgate serve` on a real Redis: decisions through the Lua scripts,
//! every key with a TTL, `/readyz` following the store, and the failure
//! policies (`deny`, `allow`, `local`) when the store stops answering.

use std::time::{Duration, Instant};

use redis_harness::RedisServer;

use crate::support::{
    self, Tollgate, get, half_closed, post_json, request, serve_output, start_upstream,
};

/// These tests hold `/readyz` to the store: `[ops] readiness = "store"`
/// (the default, `serving`, stays ready while the policy answers:
/// ops.rs).
fn config(url: &str) -> String {
    format!(
        r#"
[ops]
readiness = "store"

[store]
url = "{url}"
timeout = "100ms"
heartbeat = "100ms"

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

/// One check through the API. How long it took is not asserted: a loaded
/// machine may pause any thread for a second. While Redis is frozen an
/// answer at all is the store timeout's doing (Redis never answers), and
/// the client's read timeout (30 s) fails a check that never ends.
fn check(s: &Tollgate, rule: &str, key: &str) -> support::Resp {
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
fn a_client_that_stops_sending_after_its_request_is_answered() {
    // The check waits on Redis, so the client's end of stream arrives
    // while the answer is pending: it must not end the exchange.
    let redis = RedisServer::start();
    let s = Tollgate::start(&config(&redis.url()), &["--http", "127.0.0.1:0"]);
    let body = r#"{"rule":"strict","key":"half"}"#;
    let mut statuses = Vec::new();
    for version in ["HTTP/1.0", "HTTP/1.1"] {
        for _ in 0..3 {
            let raw = format!(
                "POST /v1/check {version}\r\nHost: t\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
                body.len()
            );
            statuses.push(half_closed(s.api(), raw.as_bytes()).status);
        }
    }
    assert_eq!(statuses, [200, 200, 200, 200, 429, 429]);
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
    // A second replica on the same Redis: the heartbeat tells both.
    let other = Tollgate::start(&config(&redis.url()), &["--http", "127.0.0.1:0"]);
    for replica in [&s, &other] {
        wait_for_metric(replica, "tollgate_live_replicas 2");
    }

    redis.pause();
    let started = Instant::now();
    // deny: 503 with the error named.
    let r = check(&s, "strict", "k");
    assert_eq!(r.status, 503, "{}", r.text());
    assert!(r.json()["error"].as_str().expect("error").contains("store"));
    assert_eq!(r.header("retry-after"), Some("1"));
    // allow: admitted, marked; the rule's policy but no `RateLimit`
    // (nothing was decided: what remains is unknown).
    let r = check(&s, "open", "k");
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["degraded"], true);
    assert_eq!(r.json()["allowed"], true);
    assert_eq!(r.header("tollgate-degraded"), Some("store-unavailable"));
    assert!(r.header("ratelimit").is_none());
    assert_eq!(
        r.header("ratelimit-policy"),
        Some(format!("\"open\";q={};w=3600", r.json()["limit"]).as_str())
    );
    // local: an in-process limiter with the quota divided by the live
    // replicas (4/2).
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
    assert_eq!(r.header("retry-after"), Some("1"));
    // Not ready: the breaker is open by now (or, past its cool-down, the
    // probe timed out): either way the store was not waited on.
    let r = get(s.api(), "/readyz");
    assert_eq!(r.status, 503);
    let why = r.json()["error"].as_str().expect("error").to_owned();
    assert!(
        why.contains("timed out") || why.contains("circuit breaker open"),
        "{why}"
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
    // The breaker opened, was counted, and stopped asking the silent store.
    for want in [
        "tollgate_circuit_breaker_opened_total",
        "tollgate_circuit_breaker_open ",
    ] {
        assert!(
            metrics
                .lines()
                .any(|l| l.starts_with(want) && !l.ends_with(" 0")),
            "no {want} in:\n{metrics}"
        );
    }
    assert!(
        s.logs("circuit breaker open"),
        "the opening is logged:\n{}",
        s.log()
    );
    // The last known count holds while Redis is down.
    assert!(
        metrics.lines().any(|l| l == "tollgate_live_replicas 2"),
        "{metrics}"
    );
    assert!(
        metrics.lines().any(|l| l
            .starts_with("tollgate_store_errors_total{kind=\"circuit_open\"}")
            && !l.ends_with(" 0")),
        "{metrics}"
    );
    // Redis calls are timed (the memory store's are not: http_api.rs).
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with("tollgate_store_latency_seconds_count ") && !l.ends_with(" 0")),
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
    drop(other);
}

/// Waits (at most 10 s) until `/metrics` has the line `line`.
fn wait_for_metric(s: &Tollgate, line: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let metrics = get(s.api(), "/metrics").text();
        if metrics.lines().any(|l| l == line) {
            return;
        }
        assert!(Instant::now() < deadline, "no {line:?} in:\n{metrics}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Checks `rule`/`key` until one is admitted (Redis is back), for at
/// most 10 s; that answer.
fn until_admitted(s: &Tollgate, rule: &str, key: &str) -> support::Resp {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let r = check(s, rule, key);
        if r.status == 200 {
            return r;
        }
        assert!(Instant::now() < deadline, "no recovery: {}", r.text());
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// `/readyz` until it is a 503, for at most 5 s; that answer.
fn until_not_ready(s: &Tollgate) -> support::Resp {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let r = get(s.api(), "/readyz");
        if r.status == 503 {
            return r;
        }
        assert!(Instant::now() < deadline, "still ready: {}", r.text());
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// `SCRIPT FLUSH`, then Redis killed and restarted empty: the running
/// server answers every check in time throughout (503 under `deny` while
/// Redis is gone), and decides through Redis again without a restart.
#[test]
fn the_server_recovers_from_a_script_flush_and_a_redis_restart() {
    let redis = RedisServer::start();
    let s = Tollgate::start(&config(&redis.url()), &["--http", "127.0.0.1:0"]);
    assert_eq!(check(&s, "strict", "k").json()["remaining"], 3);

    redis.script_flush();
    let r = check(&s, "strict", "k");
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(r.header("tollgate-degraded").is_none());
    assert_eq!(r.json()["remaining"], 2);

    redis.kill();
    for _ in 0..10 {
        let r = check(&s, "strict", "k");
        assert_eq!(r.status, 503, "{}", r.text());
        assert_eq!(r.header("retry-after"), Some("1"));
    }
    assert_eq!(get(s.api(), "/readyz").status, 503);

    redis.restart();
    let r = until_admitted(&s, "strict", "k");
    assert_eq!(r.json()["remaining"], 3, "the restarted Redis starts empty");
    assert_eq!(get(s.api(), "/readyz").status, 200);
    let metrics = get(s.api(), "/metrics").text();
    assert!(
        metrics.lines().any(
            |l| l.starts_with("tollgate_store_errors_total{kind=\"unavailable\"}")
                && !l.ends_with(" 0")
        ),
        "{metrics}"
    );
    assert!(redis.keys_without_ttl().is_empty());
}

/// Redis down when `tollgate serve` starts (a pod starting while Redis
/// restarts, or a checker pointing at a dead port): the server starts, says
/// so once, answers every check by its rule's policy within the timeout
/// (`deny` 503, `allow` degraded 200, `local` the in-process fallback),
/// `/readyz` is 503; once Redis is up, checks are decided by it, without a
/// restart of tollgate.
#[test]
fn a_redis_down_at_start_is_served_by_the_policies_until_it_comes_up() {
    let redis = RedisServer::start();
    redis.kill();
    let s = Tollgate::start(&config(&redis.url()), &["--http", "127.0.0.1:0"]);
    for _ in 0..3 {
        let r = check(&s, "strict", "k");
        assert_eq!(r.status, 503, "{}", r.text());
        let r = check(&s, "open", "k");
        assert_eq!(r.status, 200, "{}", r.text());
        assert_eq!(r.header("tollgate-degraded"), Some("store-unavailable"));
        let r = check(&s, "fallback", "k");
        assert_eq!(r.status, 200, "{}", r.text());
        assert_eq!(r.header("tollgate-degraded"), Some("local"));
    }
    assert_eq!(get(s.api(), "/readyz").status, 503);

    redis.restart();
    let r = until_admitted(&s, "strict", "k");
    assert!(r.header("tollgate-degraded").is_none(), "{}", r.text());
    assert_eq!(r.json()["remaining"], 3);
    assert_eq!(get(s.api(), "/readyz").status, 200);
    assert!(redis.keys_without_ttl().is_empty());
}

/// The proxy over a Redis that is down, every rule `allow`: requests go
/// upstream marked degraded, with each rule's `RateLimit-Policy` (the
/// quotas are known) and no `RateLimit` (what remains is not).
#[test]
fn the_proxy_passes_requests_on_with_the_policies_while_the_store_is_down() {
    let redis = RedisServer::start();
    redis.kill();
    let up = start_upstream();
    let upstream = format!("http://{}", up.addr);
    let config = format!(
        r#"
[store]
url = "{}"
timeout = "100ms"
on_error = "allow"

[[rules]]
name = "per_path"
algorithm = "gcra"
limit = 4
period = "1m"
key = "path"

[[rules]]
name = "per_ip"
algorithm = "fixed_window"
limit = 100
period = "1h"
key = "client_ip"
"#,
        redis.url()
    );
    let s = Tollgate::start(
        &config,
        &["--proxy", "127.0.0.1:0", "--upstream", upstream.as_str()],
    );
    for _ in 0..6 {
        let r = request(s.proxy(), "GET", "/a", &[], b"");
        assert_eq!(r.status, 200, "{}", r.text());
        assert_eq!(r.header("tollgate-degraded"), Some("store-unavailable"));
        assert_eq!(
            r.header("ratelimit-policy"),
            Some(r#""per_path";q=4;w=60, "per_ip";q=100;w=3600"#)
        );
        assert!(r.header("ratelimit").is_none());
    }
}

/// A Redis that answers and refuses (a wrong password) is a bad config,
/// not an outage: `tollgate serve` exits 1 naming it.
#[test]
fn a_refused_password_at_start_exits_one() {
    let redis = RedisServer::start();
    let ok = redis.command(&["ACL", "SETUSER", "tg", "on", ">right-one", "~*", "+@all"]);
    assert_eq!(ok.as_text().as_deref(), Some("OK"));
    let url = format!("redis://tg:wrong-one@127.0.0.1:{}", redis.port());
    let out = serve_output(&config(&url), &["--http", "127.0.0.1:0"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("WRONGPASS"), "{stderr}");
    assert!(
        !stderr.contains("wrong-one"),
        "the password is shown: {stderr}"
    );
}

/// A Redis that answers `PING` but refuses writes (here a replica: every
/// check and heartbeat gets `READONLY`) is not ready: `/readyz` is a 503
/// naming the refusal once a heartbeat has met it, not a 200 while every
/// check fails.
#[test]
fn a_store_that_refuses_writes_is_not_ready() {
    let master = RedisServer::start();
    let replica = RedisServer::start_with(&[&format!("replicaof 127.0.0.1 {}", master.port())]);
    let s = Tollgate::start(&config(&replica.url()), &["--http", "127.0.0.1:0"]);
    let r = check(&s, "strict", "k");
    assert_eq!(r.status, 503, "{}", r.text());
    let r = until_not_ready(&s);
    assert!(r.text().contains("READONLY"), "{}", r.text());
}

/// Once the store takes writes again, `/readyz` says so at once: it tries a
/// heartbeat itself instead of waiting for the next one (here an hour away)
/// or for a check (an instance out of rotation gets none).
#[test]
fn a_store_that_takes_writes_again_is_ready_at_once() {
    let master = RedisServer::start();
    let replica = RedisServer::start_with(&[&format!("replicaof 127.0.0.1 {}", master.port())]);
    let config = config(&replica.url()).replace("heartbeat = \"100ms\"", "heartbeat = \"1h\"");
    assert!(config.contains("heartbeat = \"1h\""));
    let s = Tollgate::start(&config, &["--http", "127.0.0.1:0"]);
    until_not_ready(&s);
    let ok = replica.command(&["REPLICAOF", "NO", "ONE"]);
    assert_eq!(ok.as_text().as_deref(), Some("OK"));
    let r = get(s.api(), "/readyz");
    assert_eq!(r.status, 200, "{}", r.text());
}
