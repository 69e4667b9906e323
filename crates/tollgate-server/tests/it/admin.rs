//! The admin API (docs/admin.md) against the real binary: every operation
//! end to end on the memory store; 401 without a token and with a wrong
//! one (and nothing changed); no listener unless asked for, none beyond
//! loopback without a token; and on one Redis shared by three replicas, a
//! block and a runtime override set on one replica applying on all within
//! the stated bound (1 s), the fleet admitting exactly the override's
//! limit, and the override surviving a replica's restart.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use redis_harness::RedisServer;

use crate::support::{self, Resp, Tollgate, post_json, request, serve_output};

const TOKEN: &str = "oncall-0123456789abcdef";
/// How soon a change on one replica applies on every replica (docs/admin.md).
const BOUND: Duration = Duration::from_secs(1);
/// What the tests assert of [`BOUND`], the one wall-clock bound here (only
/// the real clock shows how soon replicas apply a change): the bound and
/// 4 s of room, since a loaded machine may pause any thread for a second
/// or more. A replica that never applies the change still fails.
const ASSERTED: Duration = Duration::from_secs(5);

fn config(store: &str) -> String {
    format!(
        "[store]\nurl = \"{store}\"\ntimeout = \"2s\"\n\n\
         [admin]\n[[admin.tokens]]\nname = \"oncall\"\ntoken = \"{TOKEN}\"\n\n\
         [[rules]]\nname = \"api\"\nalgorithm = \"fixed_window\"\nlimit = 3\nperiod = \"1h\"\n\n\
         [[rules]]\nname = \"burst\"\nalgorithm = \"gcra\"\nlimit = 10\nperiod = \"1h\"\n"
    )
}

fn start(store: &str) -> (Tollgate, SocketAddr) {
    let s = Tollgate::start(
        &config(store),
        &["--http", "127.0.0.1:0", "--admin", "127.0.0.1:0"],
    );
    let admin = s.admin();
    (s, admin)
}

/// An admin request with `token` (none when `None`).
fn call(admin: SocketAddr, token: Option<&str>, method: &str, path: &str, body: &str) -> Resp {
    let auth = token.map(|t| format!("Bearer {t}"));
    let mut headers = vec![("Content-Type", "application/json")];
    if let Some(a) = &auth {
        headers.push(("Authorization", a.as_str()));
    }
    request(admin, method, path, &headers, body.as_bytes())
}

fn ok(admin: SocketAddr, method: &str, path: &str, body: &str) -> serde_json::Value {
    let r = call(admin, Some(TOKEN), method, path, body);
    assert_eq!(r.status, 200, "{method} {path}: {}", r.text());
    r.json()
}

/// One check of `key` under `rule`: (allowed, limit, retry_after_ms).
fn check(api: SocketAddr, rule: &str, key: &str) -> (bool, u64, Option<u64>) {
    let r = post_json(
        api,
        "/v1/check",
        &format!("{{\"rule\":\"{rule}\",\"key\":\"{key}\"}}"),
    );
    let j = r.json();
    (
        j["allowed"].as_bool().expect("allowed"),
        j["limit"].as_u64().expect("limit"),
        j["retry_after_ms"].as_u64(),
    )
}

/// Whether a peek (cost 0: nothing consumed) of `key` under `rule` is
/// admitted: a blocked key's is not.
fn peek(api: SocketAddr, rule: &str, key: &str) -> bool {
    let r = post_json(
        api,
        "/v1/check",
        &format!("{{\"rule\":\"{rule}\",\"key\":\"{key}\",\"cost\":0}}"),
    );
    r.json()["allowed"].as_bool().expect("allowed")
}

#[test]
fn every_operation_on_the_memory_store() {
    let (s, admin) = start("memory");
    let api = s.api();
    // Without a token, and with a wrong one: 401, and nothing changes.
    let r = call(admin, None, "GET", "/admin/v1/overrides", "");
    assert_eq!(r.status, 401, "{}", r.text());
    assert_eq!(r.header("WWW-Authenticate"), Some("Bearer"));
    let block = r#"{"rule":"api","key":"k1","for_ms":60000}"#;
    for token in [None, Some("oncall-0123456789abcdeX"), Some("x")] {
        let r = call(admin, token, "POST", "/admin/v1/blocks", block);
        assert_eq!(r.status, 401, "{token:?}: {}", r.text());
    }
    assert!(check(api, "api", "k1").0, "a refused block blocked");

    // Inspect: nothing consumed.
    let j = ok(admin, "GET", "/admin/v1/keys/api/k1", "");
    assert_eq!(j["remaining"], 2);
    assert_eq!(j["limit"], 3);
    assert_eq!(j["source"], "rule");
    let j = ok(admin, "GET", "/admin/v1/keys/api/k1", "");
    assert_eq!(j["remaining"], 2, "inspecting consumed");

    // Reset: the key starts over.
    assert!(check(api, "api", "k1").0);
    assert!(check(api, "api", "k1").0);
    assert!(!check(api, "api", "k1").0);
    let j = ok(admin, "DELETE", "/admin/v1/keys/api/k1", "");
    assert_eq!(j["had_state"], serde_json::json!(["api"]));
    assert_eq!(
        ok(admin, "GET", "/admin/v1/keys/api/k1", "")["remaining"],
        3
    );

    // Refund and take units (a negative cost: a charge, into debt).
    assert!(check(api, "api", "k2").0);
    assert!(check(api, "api", "k2").0);
    let j = ok(
        admin,
        "POST",
        "/admin/v1/refunds",
        r#"{"rule":"api","key":"k2","cost":1}"#,
    );
    assert_eq!(j["remaining"], 2);
    let j = ok(
        admin,
        "POST",
        "/admin/v1/refunds",
        r#"{"rule":"api","key":"k2","cost":-5}"#,
    );
    assert_eq!(j["remaining"], 0);
    assert_eq!(ok(admin, "GET", "/admin/v1/keys/api/k2", "")["debt"], 3);

    // Block one rule, then every rule; unblock.
    let j = ok(admin, "POST", "/admin/v1/blocks", block);
    assert!(j["blocked_until_ms"].as_u64().expect("until") > 0);
    let (allowed, _, retry) = check(api, "api", "k1");
    assert!(!allowed);
    assert!(retry.expect("retry_after") > 59_000, "{retry:?}");
    assert!(check(api, "burst", "k1").0, "another rule was blocked");
    assert_eq!(
        ok(admin, "GET", "/admin/v1/keys/api/k1", "")["remaining"],
        3,
        "a blocked check consumed"
    );
    ok(
        admin,
        "POST",
        "/admin/v1/blocks",
        r#"{"rule":"*","key":"k3","for_ms":60000}"#,
    );
    assert!(!check(api, "burst", "k3").0);
    assert!(!check(api, "api", "k3").0);
    assert_eq!(
        ok(admin, "GET", "/admin/v1/blocks", "")["blocks"]
            .as_array()
            .map(Vec::len),
        Some(2)
    );
    assert_eq!(
        ok(admin, "DELETE", "/admin/v1/blocks/api/k1", "")["unblocked"],
        true
    );
    assert!(check(api, "api", "k1").0);
    assert_eq!(
        ok(admin, "DELETE", "/admin/v1/blocks/*/k3", "")["unblocked"],
        true
    );
    assert!(check(api, "api", "k3").0);

    // Runtime overrides: a percent-encoded key, a prefix, list, delete.
    let j = ok(
        admin,
        "PUT",
        "/admin/v1/overrides/api/tenant%3Aacme",
        r#"{"limit":5}"#,
    );
    assert_eq!(j["limit"], 5);
    ok(
        admin,
        "PUT",
        "/admin/v1/overrides/api/tenant%3Abig%3A*",
        r#"{"limit":7,"period":"2h","ttl_ms":600000}"#,
    );
    let admitted = (0..10)
        .filter(|_| check(api, "api", "tenant:acme").0)
        .count();
    assert_eq!(admitted, 5);
    assert_eq!(check(api, "api", "tenant:acme").1, 5);
    assert_eq!(check(api, "api", "tenant:big:x").1, 7);
    // The headers describe the limit that applied.
    let r = post_json(api, "/v1/check", r#"{"rule":"api","key":"tenant:big:y"}"#);
    assert_eq!(r.header("RateLimit-Policy"), Some("\"api\";q=7;w=7200"));
    assert_eq!(
        ok(admin, "GET", "/admin/v1/keys/api/tenant:acme", "")["source"],
        "runtime_override"
    );
    let list = ok(admin, "GET", "/admin/v1/overrides", "");
    assert_eq!(
        list["overrides"].as_array().map(Vec::len),
        Some(2),
        "{list}"
    );
    // The list shows what PUT answered: the values deciding the keys, a
    // period left out included (it showed null while PUT showed 1h).
    let listed = list["overrides"]
        .as_array()
        .and_then(|l| l.iter().find(|o| o["key"] == "tenant:acme"))
        .unwrap_or_else(|| panic!("tenant:acme not listed: {list}"));
    for field in [
        "rule",
        "key",
        "limit",
        "period_ms",
        "burst",
        "expires_at_ms",
    ] {
        assert_eq!(listed[field], j[field], "{field}: PUT {j}, GET {listed}");
    }
    // A GCRA rule's burst left out: the override's limit, in both.
    let g = ok(
        admin,
        "PUT",
        "/admin/v1/overrides/burst/g",
        r#"{"limit":4}"#,
    );
    assert_eq!(
        (g["burst"].as_u64(), g["period_ms"].as_u64()),
        (Some(4), Some(3_600_000))
    );
    let list = ok(admin, "GET", "/admin/v1/overrides", "");
    let listed = list["overrides"]
        .as_array()
        .and_then(|l| l.iter().find(|o| o["rule"] == "burst"))
        .unwrap_or_else(|| panic!("burst/g not listed: {list}"));
    assert_eq!(listed, &g, "PUT and GET of one override");
    ok(admin, "DELETE", "/admin/v1/overrides/burst/g", "");
    assert_eq!(
        ok(admin, "DELETE", "/admin/v1/overrides/api/tenant%3Aacme", "")["deleted"],
        true
    );
    assert_eq!(check(api, "api", "tenant:acme").1, 3);

    // Bad requests, unknown rules and the endpoint not built yet.
    for (method, path, body, status) in [
        ("PUT", "/admin/v1/overrides/api/k", r#"{"limit":0}"#, 400),
        (
            "PUT",
            "/admin/v1/overrides/api/k",
            r#"{"limit":1,"per":2}"#,
            400,
        ),
        ("PUT", "/admin/v1/overrides/nope/k", r#"{"limit":1}"#, 404),
        (
            "POST",
            "/admin/v1/blocks",
            r#"{"rule":"api","key":"k"}"#,
            400,
        ),
        ("GET", "/admin/v1/keys/api", "", 400),
        ("GET", "/admin/v1/top/nope", "", 404),
        (
            "POST",
            "/admin/v1/blocks",
            r#"{"rule":"api","key":"k","for_ms":18446744073709551615}"#,
            400,
        ),
        (
            "PUT",
            "/admin/v1/overrides/api/k",
            r#"{"limit":2,"ttl_ms":31622400001}"#,
            400,
        ),
        ("GET", "/admin/v1/top/api?n=0", "", 400),
        ("PATCH", "/admin/v1/overrides", "", 405),
        ("GET", "/admin/v2/x", "", 404),
        // a field named twice is refused, not the last one taken
        (
            "PUT",
            "/admin/v1/overrides/api/k",
            r#"{"limit":1,"limit":1000}"#,
            400,
        ),
        (
            "POST",
            "/admin/v1/blocks",
            r#"{"rule":"api","key":"k","for_ms":1000,"key":"j"}"#,
            400,
        ),
        ("PUT", "/admin/v1/overrides/api/k", r#"[{"limit":1}]"#, 400),
    ] {
        let r = call(admin, Some(TOKEN), method, path, body);
        assert_eq!(r.status, status, "{method} {path}: {}", r.text());
    }
    let r = call(
        admin,
        Some(TOKEN),
        "PUT",
        "/admin/v1/overrides/api/k",
        r#"{"limit":1,"limit":1000}"#,
    );
    assert!(
        r.text().contains(r#"duplicate field \"limit\""#),
        "{}",
        r.text()
    );
    let r = call(
        admin,
        Some(TOKEN),
        "PUT",
        "/admin/v1/overrides/api/k",
        "[1]",
    );
    assert!(r.text().contains("must be a JSON object"), "{}", r.text());

    // Every change logged with the token's name, and counted.
    let log = s.log();
    for op in [
        "reset",
        "block",
        "unblock",
        "refund",
        "charge",
        "set_override",
        "delete_override",
    ] {
        assert!(
            log.lines()
                .any(|l| l.contains("oncall") && l.contains(&format!("op=\"{op}\""))),
            "no audit line for {op} in:\n{log}"
        );
    }
    let metrics = support::get(api, "/metrics").text();
    assert!(
        metrics.contains("tollgate_admin_operations_total{op=\"block\"} 2"),
        "{metrics}"
    );
    assert!(metrics.contains("outcome=\"blocked\""), "{metrics}");
    assert!(
        metrics.contains("tollgate_overridden_checks_total{rule=\"api\"}"),
        "{metrics}"
    );
}

#[test]
fn no_listener_unless_asked_and_none_open_beyond_loopback() {
    let s = Tollgate::start(&config("memory"), &["--http", "127.0.0.1:0"]);
    assert!(!s.log().contains("admin API"), "{}", s.log());
    let open = "[[rules]]\nname = \"a\"\nalgorithm = \"gcra\"\nlimit = 1\nperiod = \"1s\"\n";
    let out = serve_output(open, &["--http", "127.0.0.1:0", "--admin", "0.0.0.0:0"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("not on loopback and has no token"), "{err}");
    // On loopback without a token: open, with a warning.
    let s = Tollgate::start(open, &["--http", "127.0.0.1:0", "--admin", "127.0.0.1:0"]);
    assert!(
        s.log().contains("has no token: open to every local caller"),
        "{}",
        s.log()
    );
    let r = call(s.admin(), None, "GET", "/admin/v1/overrides", "");
    assert_eq!(r.status, 200, "{}", r.text());
}

/// Waits up to [`ASSERTED`] for `pred`; how long it took.
fn within_bound(what: &str, mut pred: impl FnMut() -> bool) -> Duration {
    let started = Instant::now();
    while !pred() {
        assert!(
            started.elapsed() < ASSERTED,
            "{what}: not within {ASSERTED:?} ({BOUND:?} and room)"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    started.elapsed()
}

#[test]
fn blocks_and_overrides_are_fleet_wide_on_redis() {
    let redis = RedisServer::start();
    let mut fleet: Vec<(Tollgate, SocketAddr)> = (0..3).map(|_| start(&redis.url())).collect();
    let apis: Vec<SocketAddr> = fleet.iter().map(|(s, _)| s.api()).collect();
    let admin0 = fleet[0].1;

    // A block set on replica 0 denies on every replica.
    ok(
        admin0,
        "POST",
        "/admin/v1/blocks",
        r#"{"rule":"*","key":"evil","for_ms":60000}"#,
    );
    for &api in &apis {
        // Peeks: a check that got through before the block would spend
        // the key's units.
        within_bound("block", || !peek(api, "burst", "evil"));
    }
    // Unblocked on replica 1, lifted on all.
    ok(fleet[1].1, "DELETE", "/admin/v1/blocks/*/evil", "");
    for (n, &api) in apis.iter().enumerate() {
        within_bound(&format!("unblock on replica {n}"), || {
            peek(api, "burst", "evil")
        });
    }

    // A runtime override set on replica 2 applies on all within the bound,
    // and the fleet admits exactly its limit.
    ok(
        fleet[2].1,
        "PUT",
        "/admin/v1/overrides/api/tenant%3Aacme",
        r#"{"limit":8}"#,
    );
    for (n, &api) in apis.iter().enumerate() {
        within_bound(&format!("the override on replica {n}"), || {
            call(
                fleet[n].1,
                Some(TOKEN),
                "GET",
                "/admin/v1/keys/api/tenant:acme",
                "",
            )
            .json()["limit"]
                == 8
        });
        let _ = api;
    }
    let admitted = (0..30)
        .filter(|i| check(apis[i % 3], "api", "tenant:acme").0)
        .count();
    assert_eq!(admitted, 8);

    // It survives a replica's restart: the new one applies it at once.
    let (old, _) = fleet.remove(0);
    drop(old);
    let (s, admin) = start(&redis.url());
    assert_eq!(check(s.api(), "api", "tenant:acme").1, 8);
    assert_eq!(
        ok(admin, "GET", "/admin/v1/overrides", "")["overrides"][0]["limit"],
        8
    );
    // A reset on one replica is seen by all (the counter is shared).
    ok(admin, "DELETE", "/admin/v1/keys/*/tenant%3Aacme", "");
    assert!(check(apis[1], "api", "tenant:acme").0);
}

#[test]
fn top_denied_keys_are_listed_per_rule() {
    let (s, admin) = start("memory");
    let api = s.api();
    // "hot" is denied 5 times past its 3, "warm" twice, "cold" never.
    for _ in 0..8 {
        check(api, "api", "hot");
    }
    for _ in 0..5 {
        check(api, "api", "warm");
    }
    check(api, "api", "cold");
    let top = ok(admin, "GET", "/admin/v1/top/api?n=5", "");
    assert_eq!(top["rule"], "api");
    assert_eq!(top["denied_lately"], 7);
    let keys: Vec<(String, u64, u64)> = top["keys"]
        .as_array()
        .expect("keys")
        .iter()
        .map(|k| {
            (
                k["key"].as_str().expect("key").to_owned(),
                k["count"].as_u64().expect("count"),
                k["error"].as_u64().expect("error"),
            )
        })
        .collect();
    assert_eq!(
        keys,
        [("hot".to_owned(), 5, 0), ("warm".to_owned(), 2, 0)],
        "{top}"
    );
    // without a token: 401
    assert_eq!(
        call(admin, None, "GET", "/admin/v1/top/api", "").status,
        401
    );
}

/// A wrong method is a 405 that names the methods the path takes in
/// `Allow` (RFC 9110 requires it; the HTTP API's 405s have it too), for
/// every admin path, with and without a `{rule}/{key}` tail.
#[test]
fn a_wrong_method_is_a_405_naming_the_allowed_ones() {
    let (_s, admin) = start("memory");
    for (method, path, allow) in [
        ("TRACE", "/admin/v1/keys/api/k", "GET, DELETE"),
        ("POST", "/admin/v1/keys/api/k", "GET, DELETE"),
        ("PATCH", "/admin/v1/blocks", "GET, POST"),
        ("GET", "/admin/v1/blocks/api/k", "DELETE"),
        ("GET", "/admin/v1/refunds", "POST"),
        ("PATCH", "/admin/v1/overrides", "GET"),
        ("POST", "/admin/v1/overrides/api/k", "PUT, DELETE"),
        ("DELETE", "/admin/v1/top/api", "GET"),
    ] {
        let r = call(admin, Some(TOKEN), method, path, "");
        assert_eq!(r.status, 405, "{method} {path}: {}", r.text());
        assert_eq!(r.header("allow"), Some(allow), "{method} {path}");
        assert_eq!(
            r.header("content-type"),
            Some("application/json"),
            "{method} {path}"
        );
    }
}

/// Two `Authorization` fields are a 400, whichever carries the token:
/// the first used to be taken, so a valid token first let the request
/// through whatever the second said (and a proxy in front may have
/// checked the second).
#[test]
fn two_authorization_fields_are_a_400() {
    let (_s, admin) = start("memory");
    let good = format!("Bearer {TOKEN}");
    for pair in [
        [good.as_str(), "Bearer nope"],
        ["Bearer nope", good.as_str()],
    ] {
        let headers = [("Authorization", pair[0]), ("Authorization", pair[1])];
        let r = request(admin, "GET", "/admin/v1/blocks", &headers, b"");
        assert_eq!(r.status, 400, "{pair:?}: {}", r.text());
        assert!(r.text().contains("2 Authorization fields"), "{}", r.text());
    }
    assert_eq!(
        call(admin, Some(TOKEN), "GET", "/admin/v1/blocks", "").status,
        200
    );
}
