//! The HTTP API end to end: the real `tollgate serve` binary on a free
//! port, every status code and error of docs/http-api.md, RateLimit headers
//! parsed as structured fields, multi-rule all-or-nothing.

use serde_json::{Value, json};

use crate::support::{self, Tollgate, get, post_json, ratelimit_members, request};

const CONFIG: &str = r#"
[[rules]]
name = "per_user"
algorithm = "gcra"
limit = 3
period = "1m"

[[rules]]
name = "per_ip"
algorithm = "fixed_window"
limit = 1
period = "1h"
key = "client_ip"

[[rules]]
name = "wide"
algorithm = "token_bucket"
limit = 5
period = "1h"
burst = 5
"#;

fn serve() -> Tollgate {
    Tollgate::start(CONFIG, &["--http", "127.0.0.1:0"])
}

fn params(members: &[(String, Vec<(String, i64)>)], i: usize) -> Vec<(&str, i64)> {
    members[i].1.iter().map(|(k, v)| (k.as_str(), *v)).collect()
}

#[test]
fn admitted_then_denied_with_contract_body_and_headers() {
    let s = serve();
    for n in 0..3 {
        let r = post_json(s.api(), "/v1/check", r#"{"rule":"per_user","key":"alice"}"#);
        assert_eq!(r.status, 200, "{}", r.text());
        assert_eq!(r.header("content-type"), Some("application/json"));
        let body = r.json();
        assert_eq!(body["allowed"], true);
        assert_eq!(body["rule"], "per_user");
        assert_eq!(body["limit"], 3);
        assert_eq!(body["remaining"], 2 - n);
        assert_eq!(body["retry_after_ms"], Value::Null);
        assert!(body["reset_after_ms"].as_u64().expect("reset") > 0);
        assert!(r.header("retry-after").is_none());
        let policy = ratelimit_members(r.header("ratelimit-policy").expect("policy"));
        assert_eq!(policy.len(), 1);
        assert_eq!(policy[0].0, "per_user");
        assert_eq!(params(&policy, 0), [("q", 3), ("w", 60)]);
        let rl = ratelimit_members(r.header("ratelimit").expect("ratelimit"));
        assert_eq!(rl[0].0, "per_user");
        assert_eq!(params(&rl, 0)[0], ("r", 2 - n));
        assert_eq!(params(&rl, 0)[1].0, "t");
    }
    let r = post_json(s.api(), "/v1/check", r#"{"rule":"per_user","key":"alice"}"#);
    assert_eq!(r.status, 429, "{}", r.text());
    let body = r.json();
    // Exactly the CONTRACT fields, in its order.
    let keys: Vec<&str> = body
        .as_object()
        .expect("object")
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(
        keys,
        [
            "allowed",
            "rule",
            "limit",
            "remaining",
            "reset_after_ms",
            "retry_after_ms"
        ]
    );
    assert_eq!(body["allowed"], false);
    assert_eq!(body["remaining"], 0);
    let retry_ms = body["retry_after_ms"].as_u64().expect("retry_after_ms");
    assert!((19_000..=20_000).contains(&retry_ms), "{retry_ms}");
    let retry_after: u64 = r
        .header("retry-after")
        .expect("Retry-After on 429")
        .parse()
        .expect("whole seconds");
    assert_eq!(retry_after, retry_ms.div_ceil(1000));
    let rl = ratelimit_members(r.header("ratelimit").expect("ratelimit"));
    assert_eq!(params(&rl, 0)[0], ("r", 0));
    // Another key has its own bucket.
    let r = post_json(s.api(), "/v1/check", r#"{"rule":"per_user","key":"bob"}"#);
    assert_eq!(r.status, 200);
}

#[test]
fn cost_default_peek_and_never() {
    let s = serve();
    let check = |body: Value| post_json(s.api(), "/v1/check", &body.to_string());
    // Peek: reports, consumes nothing.
    let r = check(json!({"rule": "wide", "key": "k", "cost": 0}));
    assert_eq!((r.status, r.json()["remaining"].clone()), (200, json!(5)));
    let r = check(json!({"rule": "wide", "key": "k", "cost": 0}));
    assert_eq!(r.json()["remaining"], 5);
    let r = check(json!({"rule": "wide", "key": "k"}));
    assert_eq!(r.json()["remaining"], 4, "default cost 1");
    let r = check(json!({"rule": "wide", "key": "k", "cost": 4}));
    assert_eq!((r.status, r.json()["remaining"].clone()), (200, json!(0)));
    // A cost above capacity can never be admitted: 429, retry null, no Retry-After.
    let r = check(json!({"rule": "wide", "key": "other", "cost": 6}));
    assert_eq!(r.status, 429);
    assert_eq!(r.json()["retry_after_ms"], Value::Null);
    assert!(r.header("retry-after").is_none());
    assert!(r.header("ratelimit").is_some());
}

#[test]
fn multi_rule_checks_are_all_or_nothing() {
    let s = serve();
    let multi =
        r#"{"checks":[{"rule":"per_user","key":"carol"},{"rule":"per_ip","key":"10.1.2.3"}]}"#;
    let r = post_json(s.api(), "/v1/check", multi);
    assert_eq!(r.status, 200, "{}", r.text());
    let body = r.json();
    assert_eq!(body["allowed"], true);
    // The deciding pair is the one with the fewest remaining.
    assert_eq!(body["rule"], "per_ip");
    let checks = body["checks"].as_array().expect("checks");
    assert_eq!(checks.len(), 2);
    assert_eq!(checks[0]["rule"], "per_user");
    assert_eq!(checks[0]["remaining"], 2);
    assert_eq!(checks[1]["rule"], "per_ip");
    assert_eq!(checks[1]["remaining"], 0);
    let policy = ratelimit_members(r.header("ratelimit-policy").expect("policy"));
    let names: Vec<&str> = policy.iter().map(|m| m.0.as_str()).collect();
    assert_eq!(names, ["per_user", "per_ip"]);
    assert_eq!(params(&policy, 1), [("q", 1), ("w", 3600)]);

    // per_ip is spent: the pair is denied and per_user consumes NOTHING.
    for _ in 0..3 {
        let r = post_json(s.api(), "/v1/check", multi);
        assert_eq!(r.status, 429, "{}", r.text());
        let body = r.json();
        assert_eq!(body["rule"], "per_ip");
        assert_eq!(body["checks"][0]["allowed"], true);
        assert_eq!(body["checks"][0]["remaining"], 2);
        assert_eq!(body["checks"][1]["allowed"], false);
        assert!(r.header("retry-after").is_some());
        let rl = ratelimit_members(r.header("ratelimit").expect("ratelimit"));
        assert_eq!(rl.len(), 2);
    }
    let r = post_json(
        s.api(),
        "/v1/check",
        r#"{"rule":"per_user","key":"carol","cost":0}"#,
    );
    assert_eq!(
        r.json()["remaining"],
        2,
        "denied multi checks consumed per_user"
    );
}

#[test]
fn bad_requests_name_the_problem() {
    let s = serve();
    let long_key = "k".repeat(4097);
    let long = format!(r#"{{"rule":"per_user","key":"{long_key}"}}"#);
    let nested = format!("{}{}", "[".repeat(10_000), "]".repeat(10_000));
    for (body, status, want) in [
        ("{", 400, "malformed JSON"),
        ("", 400, "malformed JSON"),
        ("[1,2]", 400, "expected a JSON object"),
        (r#"{"rule":"per_user"}"#, 400, "key: missing"),
        (
            r#"{"rule":"per_user","key":""}"#,
            400,
            "key: must not be empty",
        ),
        (
            r#"{"rule":"per_user","key":5}"#,
            400,
            "key: expected a string",
        ),
        (r#"{"rule":7,"key":"k"}"#, 400, "rule: expected a string"),
        (
            r#"{"rule":"per_user","key":"k","cost":-1}"#,
            400,
            "cost: must not be negative",
        ),
        (
            r#"{"rule":"per_user","key":"k","cost":1.5}"#,
            400,
            "cost: expected a whole number",
        ),
        (
            r#"{"rule":"per_user","key":"k","cost":"2"}"#,
            400,
            "cost: expected a non-negative integer",
        ),
        (
            r#"{"rule":"per_user","key":"k","cost":1e400}"#,
            400,
            "malformed JSON",
        ),
        (
            r#"{"rule":"per_user","key":"k","cost":99999999999999999999}"#,
            400,
            "cost: too large",
        ),
        (
            r#"{"rule":"per_user","key":"k","colour":"red"}"#,
            400,
            "colour: unknown field",
        ),
        (r#"{"checks":[]}"#, 400, "checks: must not be empty"),
        (
            r#"{"checks":[{"rule":"per_user"}]}"#,
            400,
            "checks[0].key: missing",
        ),
        (r#"{"checks":"x"}"#, 400, "checks: expected an array"),
        (long.as_str(), 400, "longer than the limit of 4096 bytes"),
        (nested.as_str(), 400, "malformed JSON"),
        (r#"{"rule":"nope","key":"k"}"#, 404, "unknown rule \"nope\""),
        (
            r#"{"checks":[{"rule":"per_user","key":"k"},{"rule":"nope","key":"k"}]}"#,
            404,
            "unknown rule \"nope\"",
        ),
    ] {
        let r = post_json(s.api(), "/v1/check", body);
        let shown = &body[..body.len().min(60)];
        assert_eq!(r.status, status, "{shown}: {}", r.text());
        assert_eq!(
            r.header("content-type"),
            Some("application/json"),
            "{shown}"
        );
        let error = r.json()["error"].as_str().expect("error string").to_owned();
        assert!(error.contains(want), "{shown}: {error}");
    }
    // The server survived all of that.
    assert_eq!(get(s.api(), "/healthz").status, 200);
}

#[test]
fn body_size_media_type_method_and_path() {
    let s = serve();
    // 413: over 64 KiB, declared or not.
    let big = format!(r#"{{"rule":"per_user","key":"{}"}}"#, "k".repeat(70_000));
    let r = post_json(s.api(), "/v1/check", &big);
    assert_eq!(r.status, 413, "{}", r.text());
    assert!(r.json()["error"].as_str().expect("error").contains("65536"));
    // The rest of the body is not read: the connection closes.
    assert_eq!(r.header("connection"), Some("close"));
    // The Content-Type does not matter (`curl -d` says form): a JSON body
    // is decided; one that is not JSON is a 400 naming the type it came as.
    let r = request(
        s.api(),
        "POST",
        "/v1/check",
        &[("Content-Type", "application/x-www-form-urlencoded")],
        br#"{"rule":"per_user","key":"form-labelled"}"#,
    );
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["allowed"], true);
    let r = request(
        s.api(),
        "POST",
        "/v1/check",
        &[("Content-Type", "application/x-www-form-urlencoded")],
        b"rule=per_user&key=k",
    );
    assert_eq!(r.status, 400, "{}", r.text());
    let e = r.json()["error"].as_str().expect("error").to_owned();
    assert!(
        e.contains("application/x-www-form-urlencoded") && e.contains("JSON"),
        "{e}"
    );
    // No Content-Type at all is read as JSON.
    let r = request(
        s.api(),
        "POST",
        "/v1/check",
        &[],
        br#"{"rule":"per_user","key":"ct"}"#,
    );
    assert_eq!(r.status, 200, "{}", r.text());
    // 405 with Allow.
    let r = get(s.api(), "/v1/check");
    assert_eq!(r.status, 405);
    assert_eq!(r.header("allow"), Some("POST"));
    assert!(
        r.json()["error"]
            .as_str()
            .expect("error")
            .contains("use POST")
    );
    let r = request(s.api(), "DELETE", "/v1/rules", &[], b"");
    assert_eq!(r.status, 405);
    assert_eq!(r.header("allow"), Some("GET, HEAD"));
    // 404 for unknown paths, as JSON.
    let r = get(s.api(), "/v2/check");
    assert_eq!(r.status, 404);
    assert!(
        r.json()["error"]
            .as_str()
            .expect("error")
            .contains("no such endpoint")
    );
}

#[test]
fn rules_health_ready_and_metrics() {
    let s = serve();
    let r = get(s.api(), "/v1/rules");
    assert_eq!(r.status, 200);
    let rules = r.json();
    assert_eq!(
        rules["rules"][0],
        json!({"name": "per_user", "algorithm": "gcra", "limit": 3, "period_ms": 60000,
               "burst": 3, "key": null, "on_error": "allow"})
    );
    assert_eq!(rules["rules"][1]["key"], "client_ip");
    assert_eq!(rules["rules"][1]["burst"], Value::Null);
    assert_eq!(rules["rules"][2]["burst"], 5);

    assert_eq!(get(s.api(), "/healthz").status, 200);
    let r = get(s.api(), "/readyz");
    assert_eq!(
        (r.status, r.json()["status"].clone()),
        (200, json!("ready"))
    );

    post_json(s.api(), "/v1/check", r#"{"rule":"per_ip","key":"m"}"#);
    post_json(s.api(), "/v1/check", r#"{"rule":"per_ip","key":"m"}"#);
    // per_ip denies, so per_user's pair consumes nothing: not "allowed".
    let r = post_json(
        s.api(),
        "/v1/check",
        r#"{"checks":[{"rule":"per_user","key":"mm"},{"rule":"per_ip","key":"m"}]}"#,
    );
    assert_eq!(r.status, 429, "{}", r.text());
    // One (rule, key) named three times is one check, of cost 3.
    let r = post_json(
        s.api(),
        "/v1/check",
        r#"{"checks":[{"rule":"wide","key":"dup"},{"rule":"wide","key":"dup"},{"rule":"wide","key":"dup"}]}"#,
    );
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["remaining"], 2, "{}", r.text());
    let r = get(s.api(), "/metrics");
    assert_eq!(r.status, 200);
    assert!(
        r.header("content-type")
            .expect("type")
            .starts_with("text/plain")
    );
    let text = r.text();
    assert!(
        !text.contains("tollgate_checks_total{rule=\"per_user\",outcome=\"allowed\"} 1"),
        "{text}"
    );
    for want in [
        "tollgate_checks_total{rule=\"per_ip\",outcome=\"allowed\"} 1",
        "tollgate_checks_total{rule=\"per_ip\",outcome=\"denied\"} 2",
        "tollgate_checks_total{rule=\"per_user\",outcome=\"denied_by_other\"} 1",
        "tollgate_checks_total{rule=\"wide\",outcome=\"allowed\"} 1\n",
        "# TYPE tollgate_store_latency_seconds histogram",
        // Registered, and empty: in-process checks are not timed.
        "tollgate_store_latency_seconds_bucket{le=\"0.001\"} 0",
        "tollgate_store_latency_seconds_count 0",
        "tollgate_store_errors_total{kind=\"timeout\"} 0",
        "tollgate_failure_policy_total{policy=\"deny\"} 0",
        "tollgate_memory_store_keys 2",
    ] {
        assert!(text.contains(want), "missing {want:?} in:\n{text}");
    }
}

#[test]
fn legacy_headers_by_config() {
    let config = format!("[http]\nlegacy_headers = true\n{CONFIG}");
    let s = Tollgate::start(&config, &["--http", "127.0.0.1:0"]);
    let r = post_json(s.api(), "/v1/check", r#"{"rule":"per_user","key":"x"}"#);
    assert_eq!(r.header("x-ratelimit-limit"), Some("3"));
    assert_eq!(r.header("x-ratelimit-remaining"), Some("2"));
    assert!(r.header("x-ratelimit-reset").is_some());
    // Off by default.
    let s = serve();
    let r = post_json(s.api(), "/v1/check", r#"{"rule":"per_user","key":"x"}"#);
    assert!(r.header("x-ratelimit-limit").is_none());
}

#[test]
fn hostile_requests_do_not_hurt() {
    let s = serve();
    // A head over the limit: 431, and the server lives on.
    let huge = "v".repeat(70_000);
    let r = request(s.api(), "GET", "/healthz", &[("X-Big", &huge)], b"");
    assert_eq!(r.status, 431);
    // Too many header fields.
    let many: Vec<(String, String)> = (0..150).map(|i| (format!("x-h{i}"), "1".into())).collect();
    let refs: Vec<(&str, &str)> = many.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let r = request(s.api(), "GET", "/healthz", &refs, b"");
    assert_eq!(r.status, 431);
    // Garbage instead of HTTP.
    {
        use std::io::{Read, Write};
        let mut c = support::connect(s.api());
        c.write_all(b"\x00\x01\x02 not http at all\r\n\r\n")
            .expect("write");
        let mut buf = Vec::new();
        let _ = c.read_to_end(&mut buf);
    }
    // A client that starts a body and stalls does not block others.
    let mut stalled = support::connect(s.api());
    {
        use std::io::Write;
        stalled
            .write_all(b"POST /v1/check HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"ru")
            .expect("write");
    }
    let r = post_json(s.api(), "/v1/check", r#"{"rule":"per_user","key":"live"}"#);
    assert_eq!(r.status, 200);
    // Answered while the stalled one still waits (open, unanswered): the
    // live request did not wait for it, however long either took.
    {
        use std::io::Read;
        stalled.set_nonblocking(true).expect("nonblocking");
        let mut byte = [0u8; 1];
        let still = stalled.read(&mut byte);
        assert!(
            still
                .as_ref()
                .is_err_and(|e| e.kind() == std::io::ErrorKind::WouldBlock),
            "the stalled request was already answered or closed: {still:?}"
        );
    }
    drop(stalled);
    assert_eq!(get(s.api(), "/healthz").status, 200);
}

#[test]
fn silent_and_slow_loris_connections_are_closed() {
    use std::io::{Read, Write};
    use std::time::{Duration, Instant};
    let s = serve();
    // One connection sends half a head and stops; one sends nothing; one
    // answers a request and then idles on keep-alive. All three are closed
    // within two watchdog periods (10 to 20 s), while a connection that
    // keeps sending requests stays served.
    let mut loris = support::connect(s.api());
    loris
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: ")
        .expect("write");
    let mut silent = support::connect(s.api());
    let mut idle = support::connect(s.api());
    idle.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        .expect("write");
    assert_eq!(read_one(&mut idle), 200);
    let started = Instant::now();
    // Eight requests 3 s apart: at least 21 s, past two watchdog periods,
    // counted rather than timed, so a loaded machine cannot make them
    // fewer.
    let busy = {
        let addr = s.api();
        std::thread::spawn(move || {
            let mut c = support::connect(addr);
            let mut statuses = Vec::new();
            for _ in 0..8 {
                c.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
                    .expect("write");
                statuses.push(read_one(&mut c));
                std::thread::sleep(Duration::from_secs(3));
            }
            statuses
        })
    };
    let closed = |c: &mut std::net::TcpStream, what: &str| {
        let mut buf = Vec::new();
        // The server closes without an answer: end of stream, no bytes.
        let read = c.read_to_end(&mut buf);
        assert!(read.is_ok(), "{what}: {read:?}");
        assert!(
            buf.is_empty(),
            "{what}: got {:?}",
            String::from_utf8_lossy(&buf)
        );
        // The one wall-clock bound here: that the watchdog closes within
        // its two periods only the real clock can show; 5 s past them is
        // beyond a loaded machine's pauses (a watchdog that never closed
        // would leave the read to the client's 30 s timeout, an error).
        let after = started.elapsed();
        assert!(
            after < Duration::from_secs(25),
            "{what}: closed after {after:?}"
        );
        after
    };
    let a = closed(&mut loris, "half a head");
    let b = closed(&mut silent, "nothing sent");
    let c = closed(&mut idle, "idle keep-alive");
    // Not closed at once either: a whole period passes first.
    for (what, after) in [("half a head", a), ("nothing sent", b), ("idle", c)] {
        assert!(
            after >= Duration::from_secs(9),
            "{what}: closed after {after:?}"
        );
    }
    let statuses = busy.join().expect("busy connection");
    assert!(
        statuses.len() >= 7 && statuses.iter().all(|s| *s == 200),
        "{statuses:?}"
    );
    assert_eq!(get(s.api(), "/healthz").status, 200);
}

/// Reads one response from a keep-alive connection; its status.
fn read_one(c: &mut std::net::TcpStream) -> u16 {
    use std::io::Read;
    let mut raw = Vec::new();
    let mut byte = [0u8; 1];
    while !raw.ends_with(b"\r\n\r\n") {
        let n = c.read(&mut byte).expect("read head");
        assert_eq!(n, 1, "closed mid-head: {:?}", String::from_utf8_lossy(&raw));
        raw.push(byte[0]);
    }
    let head = String::from_utf8_lossy(&raw).to_ascii_lowercase();
    let length: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .map_or(0, |v| v.trim().parse().expect("content-length"));
    let mut body = vec![0u8; length];
    c.read_exact(&mut body).expect("read body");
    head[9..12].parse().expect("status")
}
