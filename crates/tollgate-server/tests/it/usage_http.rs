//! The usage endpoints of the HTTP API end to end (docs/http-api.md,
//! "Usage"): the real `tollgate serve` binary, on the memory store and on
//! a real Redis. `POST /v1/charge` records usage known after the fact, past
//! the limit as debt that later checks wait out; multi-rule checks give
//! each pair its own cost; bad input is a 4xx that names the problem and
//! charges nothing.

use redis_harness::RedisServer;

use crate::support::{self, Tollgate, get, post, post_json, ratelimit_members};

const RULES: &str = r#"
[[rules]]
name = "tpm"
algorithm = "sliding_window"
limit = 100
period = "1h"

[[rules]]
name = "rpm"
algorithm = "fixed_window"
limit = 10
period = "1h"

[[rules]]
name = "tokens_gcra"
algorithm = "gcra"
limit = 100
period = "1h"

[[rules]]
name = "inflight"
algorithm = "concurrency"
limit = 2
lease = "30s"
"#;

fn charge(s: &Tollgate, rule: &str, key: &str, cost: u64) -> support::Resp {
    post_json(
        s.api(),
        "/v1/charge",
        &format!(r#"{{"rule":"{rule}","key":"{key}","cost":{cost}}}"#),
    )
}

fn check(s: &Tollgate, rule: &str, key: &str, cost: u64) -> support::Resp {
    post_json(
        s.api(),
        "/v1/check",
        &format!(r#"{{"rule":"{rule}","key":"{key}","cost":{cost}}}"#),
    )
}

/// Today's failure of the AI-gateway flow, on tollgate: 80 checked, then a
/// usage of 50 reported after the response. The charge is recorded in
/// full (debt 30), and the next check is refused instead of admitted with
/// 20 "remaining".
fn usage_past_the_limit_is_debt(s: &Tollgate) {
    assert_eq!(check(s, "tpm", "team-a", 80).status, 200);
    let r = charge(s, "tpm", "team-a", 50);
    assert_eq!(r.status, 200, "{}", r.text());
    let body = r.json();
    assert_eq!(body["allowed"], true);
    assert_eq!(body["remaining"], 0);
    assert_eq!(body["debt"], 30);
    assert_eq!(body["retry_after_ms"], serde_json::Value::Null);
    assert!(r.header("retry-after").is_none());
    let rl = ratelimit_members(r.header("ratelimit").expect("RateLimit"));
    assert_eq!(rl[0].0, "tpm");
    assert_eq!(rl[0].1[0], ("r".to_owned(), 0));
    let next = check(s, "tpm", "team-a", 1);
    assert_eq!(next.status, 429, "{}", next.text());
    assert!(next.json()["retry_after_ms"].as_u64().expect("retry") > 0);
    let peek = check(s, "tpm", "team-a", 0);
    assert_eq!(peek.json()["remaining"], 0);
    // Another key is untouched.
    assert_eq!(check(s, "tpm", "team-b", 1).json()["remaining"], 99);
    // A GCRA charge: 250 units into a bucket of 100 leave 150 of debt.
    let r = charge(s, "tokens_gcra", "team-a", 250);
    assert_eq!((r.status, r.json()["debt"].clone()), (200, 150.into()));
}

#[test]
fn a_charge_past_the_limit_is_debt_on_the_memory_store() {
    let s = Tollgate::start(RULES, &["--http", "127.0.0.1:0"]);
    usage_past_the_limit_is_debt(&s);
}

#[test]
fn a_charge_past_the_limit_is_debt_on_redis() {
    let redis = RedisServer::start();
    let config = format!("[store]\nurl = \"{}\"\n{RULES}", redis.url());
    let s = Tollgate::start(&config, &["--http", "127.0.0.1:0"]);
    usage_past_the_limit_is_debt(&s);
    assert!(redis.keys_without_ttl().is_empty());
}

#[test]
fn multi_rule_checks_and_charges_take_each_pairs_cost() {
    let s = Tollgate::start(RULES, &["--http", "127.0.0.1:0"]);
    // 90 tokens and one request, all-or-nothing.
    let body = r#"{"checks":[{"rule":"tpm","key":"t","cost":90},{"rule":"rpm","key":"t"}]}"#;
    let r = post_json(s.api(), "/v1/check", body);
    assert_eq!(r.status, 200, "{}", r.text());
    let checks = r.json()["checks"].clone();
    assert_eq!(checks[0]["remaining"], 10);
    assert_eq!(checks[1]["remaining"], 9);
    // 20 more tokens do not fit: neither pair consumes.
    let body = r#"{"checks":[{"rule":"tpm","key":"t","cost":20},{"rule":"rpm","key":"t"}]}"#;
    let r = post_json(s.api(), "/v1/check", body);
    assert_eq!(r.status, 429);
    assert_eq!(r.json()["rule"], "tpm");
    assert_eq!(check(&s, "rpm", "t", 0).json()["remaining"], 9);
    // The top-level cost is the default of pairs without their own.
    let body =
        r#"{"cost":2,"checks":[{"rule":"tpm","key":"u","cost":30},{"rule":"rpm","key":"u"}]}"#;
    let r = post_json(s.api(), "/v1/check", body);
    let checks = r.json()["checks"].clone();
    assert_eq!(
        (
            checks[0]["remaining"].clone(),
            checks[1]["remaining"].clone()
        ),
        (70.into(), 8.into())
    );
    // A multi-pair charge: each pair its own cost and debt.
    let body =
        r#"{"checks":[{"rule":"tpm","key":"t","cost":25},{"rule":"rpm","key":"t","cost":1}]}"#;
    let r = post_json(s.api(), "/v1/charge", body);
    assert_eq!(r.status, 200, "{}", r.text());
    let checks = r.json()["checks"].clone();
    assert_eq!(checks[0]["debt"], 15);
    assert_eq!(checks[1]["debt"], 0);
    assert_eq!(checks[1]["remaining"], 8);
    assert_eq!(
        r.json()["rule"],
        "tpm",
        "the pair with the fewest remaining decides"
    );
}

#[test]
fn bad_charges_name_the_problem_and_charge_nothing() {
    let s = Tollgate::start(RULES, &["--http", "127.0.0.1:0"]);
    for (body, status, want) in [
        (
            r#"{"rule":"tpm","key":"k","cost":-5}"#,
            400,
            "cost: must not be negative",
        ),
        (
            r#"{"rule":"tpm","key":"k","cost":1.5}"#,
            400,
            "cost: expected a whole number",
        ),
        (
            r#"{"rule":"tpm","key":"k","cost":"9"}"#,
            400,
            "cost: expected a non-negative integer",
        ),
        (
            r#"{"rule":"tpm","key":"k","cost":18446744073709551616}"#,
            400,
            "cost: too large",
        ),
        (
            r#"{"rule":"nope","key":"k","cost":5}"#,
            404,
            "unknown rule \"nope\"",
        ),
        (r#"{"rule":"tpm","cost":5}"#, 400, "key: missing"),
        (
            r#"{"checks":[{"rule":"tpm","key":"k","cost":-1}]}"#,
            400,
            "checks[0].cost: must not be negative",
        ),
        (
            r#"{"checks":[{"rule":"tpm","key":"k","cost":5},{"rule":"nope","key":"k"}]}"#,
            404,
            "unknown rule",
        ),
    ] {
        let r = post_json(s.api(), "/v1/charge", body);
        assert_eq!(r.status, status, "{body}: {}", r.text());
        let error = r.json()["error"].as_str().unwrap_or_default().to_owned();
        assert!(error.contains(want), "{body}: {error}");
    }
    // Nothing above was charged.
    assert_eq!(check(&s, "tpm", "k", 0).json()["remaining"], 100);
    let r = get(s.api(), "/v1/charge");
    assert_eq!((r.status, r.header("allow")), (405, Some("POST")));
    // A charge of the largest cost is clamped at the debt cap, not an
    // overflow: 100 periods' worth of the limit.
    let r = charge(&s, "rpm", "huge", u64::MAX);
    assert_eq!((r.status, r.json()["debt"].clone()), (200, 1000.into()));
    let metrics = get(s.api(), "/metrics").text();
    let clamped = metrics
        .lines()
        .find(|l| l.starts_with("tollgate_charge_clamped_units_total{rule=\"rpm\"}"))
        .unwrap_or_else(|| panic!("no clamped metric in {metrics}"));
    // 1010 units recorded (a window of 10 and a debt of 1000); the
    // counter is a float in Prometheus text.
    let value: f64 = clamped
        .rsplit(' ')
        .next()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("{clamped}"));
    #[allow(clippy::cast_precision_loss)]
    let want = (u64::MAX - 1010) as f64;
    assert!((value - want).abs() <= want * 1e-12, "{clamped}");
}

#[test]
fn charges_to_a_failed_store_follow_the_policy_and_are_counted() {
    let redis = RedisServer::start();
    let config = format!(
        r#"
[store]
url = "{}"
timeout = "100ms"

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
"#,
        redis.url()
    );
    let s = Tollgate::start(&config, &["--http", "127.0.0.1:0"]);
    assert_eq!(charge(&s, "strict", "k", 1).status, 200);
    redis.pause();
    let r = charge(&s, "strict", "k", 7);
    assert_eq!(r.status, 503, "{}", r.text());
    assert_eq!(r.header("retry-after"), Some("1"));
    let r = charge(&s, "open", "k", 9);
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["degraded"], true);
    assert_eq!(r.header("tollgate-degraded"), Some("store-unavailable"));
    let metrics = get(s.api(), "/metrics").text();
    for want in [
        "tollgate_charge_unrecorded_units_total{rule=\"strict\",policy=\"deny\"} 7",
        "tollgate_charge_unrecorded_units_total{rule=\"open\",policy=\"allow\"} 9",
        "tollgate_charge_units_total{rule=\"strict\"} 1",
    ] {
        assert!(metrics.contains(want), "{want} not in\n{metrics}");
    }
    redis.resume();
}

/// Reserve, settle above and below the estimate, cancel, twice; each
/// answer as docs/http-api.md gives it, and the key's state after.
fn reservations_settle_once(s: &Tollgate) {
    use serde_json::json;
    let r = post(
        s,
        "/v1/reserve",
        &json!({"rule": "tpm", "key": "a", "cost": 60, "ttl_ms": 60000}),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["remaining"], 40);
    let id = r.json()["reservation"].as_str().expect("an id").to_owned();
    assert!(id.starts_with("r1~"), "{id}");
    // Above the estimate: the excess is charged (80 in all).
    let r = post(s, "/v1/settle", &json!({"reservation": id, "cost": 80}));
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(
        (r.json()["late"].clone(), r.json()["debt"].clone()),
        (false.into(), 0.into())
    );
    assert_eq!(r.json()["remaining"], 20);
    // Twice: 409, nothing changes.
    let r = post(s, "/v1/settle", &json!({"reservation": id, "cost": 5}));
    assert_eq!(r.status, 409, "{}", r.text());
    assert_eq!(check(s, "tpm", "a", 0).json()["remaining"], 20);
    // Below the estimate: the rest is given back.
    let r = post(
        s,
        "/v1/reserve",
        &json!({"rule": "tpm", "key": "b", "cost": 50}),
    );
    let id = r.json()["reservation"].as_str().expect("an id").to_owned();
    let r = post(
        s,
        "/v1/settle",
        &json!({"reservation": id, "rule": "tpm", "key": "b", "cost": 10}),
    );
    assert_eq!(
        (r.status, r.json()["remaining"].clone()),
        (200, 90.into()),
        "{}",
        r.text()
    );
    // Cancelled: all of it given back.
    let r = post(
        s,
        "/v1/reserve",
        &json!({"rule": "tpm", "key": "c", "cost": 70}),
    );
    let id = r.json()["reservation"].as_str().expect("an id").to_owned();
    let r = post(s, "/v1/cancel", &json!({"reservation": id}));
    assert_eq!(
        (r.status, r.json()["remaining"].clone()),
        (200, 100.into()),
        "{}",
        r.text()
    );
    assert_eq!(
        post(s, "/v1/cancel", &json!({"reservation": id})).status,
        409
    );
    // A reservation that does not fit is a 429 without an id.
    let r = post(
        s,
        "/v1/reserve",
        &json!({"rule": "tpm", "key": "a", "cost": 21}),
    );
    assert_eq!(r.status, 429, "{}", r.text());
    assert_eq!(r.json()["reservation"], serde_json::Value::Null);
    assert!(r.header("retry-after").is_some());
    // All-or-nothing over two rules, settled per pair.
    let r = post(
        s,
        "/v1/reserve",
        &json!({"checks": [
        {"rule": "tpm", "key": "m", "cost": 30}, {"rule": "rpm", "key": "m", "cost": 1}]}),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    let id = r.json()["reservation"].as_str().expect("an id").to_owned();
    let r = post(
        s,
        "/v1/settle",
        &json!({"reservation": id, "checks": [
        {"rule": "tpm", "key": "m", "cost": 130}, {"rule": "rpm", "key": "m", "cost": 1}]}),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["checks"][0]["debt"], 30);
    assert_eq!(r.json()["checks"][1]["remaining"], 9);
}

#[test]
fn reservations_settle_once_on_the_memory_store() {
    let s = Tollgate::start(RULES, &["--http", "127.0.0.1:0"]);
    reservations_settle_once(&s);
}

#[test]
fn reservations_settle_once_on_redis() {
    let redis = RedisServer::start();
    let config = format!("[store]\nurl = \"{}\"\n{RULES}", redis.url());
    let s = Tollgate::start(&config, &["--http", "127.0.0.1:0"]);
    reservations_settle_once(&s);
    assert!(redis.keys_without_ttl().is_empty());
    // Any replica settles what another reserved.
    let other = Tollgate::start(&config, &["--http", "127.0.0.1:0"]);
    let r = post(
        &s,
        "/v1/reserve",
        &serde_json::json!({"rule": "rpm", "key": "x", "cost": 4}),
    );
    let id = r.json()["reservation"].as_str().expect("an id").to_owned();
    let r = post(
        &other,
        "/v1/settle",
        &serde_json::json!({"reservation": id, "cost": 2}),
    );
    assert_eq!(
        (r.status, r.json()["remaining"].clone()),
        (200, 8.into()),
        "{}",
        r.text()
    );
}

#[test]
fn bad_settles_name_the_problem_and_change_nothing() {
    use serde_json::json;
    let s = Tollgate::start(RULES, &["--http", "127.0.0.1:0"]);
    let r = post(
        &s,
        "/v1/reserve",
        &json!({"rule": "tpm", "key": "k", "cost": 40}),
    );
    let id = r.json()["reservation"].as_str().expect("an id").to_owned();
    // Another id of the same shape, never made: guessed ids are unknown.
    let mut forged: Vec<char> = id.chars().collect();
    forged[5] = if forged[5] == 'A' { 'B' } else { 'A' };
    let forged: String = forged.into_iter().collect();
    let long = format!("r1~{}", "A".repeat(40_000));
    for (path, body, status, want) in [
        (
            "/v1/settle",
            json!({"reservation": id, "cost": -1}),
            400,
            "cost: must not be negative",
        ),
        (
            "/v1/settle",
            json!({"reservation": id}),
            400,
            "cost: missing",
        ),
        (
            "/v1/settle",
            json!({"reservation": id, "cost": 1.5}),
            400,
            "cost: expected a whole number",
        ),
        (
            "/v1/settle",
            json!({"cost": 3}),
            400,
            "reservation: missing",
        ),
        (
            "/v1/settle",
            json!({"reservation": 7, "cost": 3}),
            400,
            "reservation: expected a string",
        ),
        (
            "/v1/settle",
            json!({"reservation": "garbage", "cost": 3}),
            400,
            "not a tollgate reservation id",
        ),
        (
            "/v1/settle",
            json!({"reservation": long, "cost": 3}),
            400,
            "longer than the limit",
        ),
        (
            "/v1/settle",
            json!({"reservation": id, "rule": "tpm", "key": "other", "cost": 3}),
            400,
            "is not the reservation's",
        ),
        (
            "/v1/settle",
            json!({"reservation": id, "rule": "rpm", "key": "k", "cost": 3}),
            400,
            "is not the reservation's",
        ),
        (
            "/v1/settle",
            json!({"reservation": id, "lease": id, "cost": 3}),
            400,
            "lease: unknown field",
        ),
        (
            "/v1/settle",
            json!({"reservation": forged, "cost": 3}),
            404,
            "unknown reservation",
        ),
        (
            "/v1/cancel",
            json!({"reservation": id, "cost": 3}),
            400,
            "cost: unknown field",
        ),
        (
            "/v1/reserve",
            json!({"rule": "tpm", "key": "k", "cost": 1, "ttl_ms": 0}),
            400,
            "ttl_ms: must be at least 1",
        ),
        (
            "/v1/reserve",
            json!({"rule": "tpm", "key": "k", "cost": 1, "ttl_ms": 90_000_000_u64}),
            400,
            "ttl_ms 90000000 is outside",
        ),
        (
            "/v1/reserve",
            json!({"rule": "tpm", "key": "k", "cost": 1, "ttl_ms": -4}),
            400,
            "ttl_ms: must not be negative",
        ),
        (
            "/v1/check",
            json!({"rule": "tpm", "key": "k", "ttl_ms": 5}),
            400,
            "ttl_ms: unknown field; expected rule, key, cost",
        ),
    ] {
        let r = post(&s, path, &body);
        assert_eq!(r.status, status, "{path} {body}: {}", r.text());
        let e = r.json()["error"].as_str().unwrap_or_default().to_owned();
        assert!(e.contains(want), "{path} {body}: {e}");
    }
    // Nothing above settled it or charged anything.
    assert_eq!(check(&s, "tpm", "k", 0).json()["remaining"], 60);
    let r = post(&s, "/v1/settle", &json!({"reservation": id, "cost": 40}));
    assert_eq!(
        (r.status, r.json()["remaining"].clone()),
        (200, 60.into()),
        "{}",
        r.text()
    );
}

/// Acquire, renew, release: slots held, given back, never more than the
/// limit; every misuse a 4xx that names it.
fn leases_hold_slots(s: &Tollgate) {
    use serde_json::json;
    let acquire = |key: &str| post(s, "/v1/acquire", &json!({"rule": "inflight", "key": key}));
    let r = acquire("t");
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["remaining"], 1);
    let policy = ratelimit_members(r.header("ratelimit-policy").expect("policy"));
    assert_eq!(policy[0].1, [("q".to_owned(), 2), ("w".to_owned(), 30)]);
    let first = r.json()["lease"].as_str().expect("a lease").to_owned();
    assert!(first.starts_with("l1~"), "{first}");
    let second = acquire("t").json()["lease"]
        .as_str()
        .expect("a lease")
        .to_owned();
    let full = acquire("t");
    assert_eq!(full.status, 429, "{}", full.text());
    assert_eq!(full.json()["lease"], serde_json::Value::Null);
    assert!(full.header("retry-after").is_some());
    let r = post(s, "/v1/renew", &json!({"lease": first}));
    assert_eq!(
        (r.status, r.json()["remaining"].clone()),
        (200, 0.into()),
        "{}",
        r.text()
    );
    let r = post(
        s,
        "/v1/release",
        &json!({"lease": first, "rule": "inflight", "key": "t"}),
    );
    assert_eq!(
        (r.status, r.json()["remaining"].clone()),
        (200, 1.into()),
        "{}",
        r.text()
    );
    assert_eq!(post(s, "/v1/release", &json!({"lease": first})).status, 404);
    assert_eq!(post(s, "/v1/renew", &json!({"lease": first})).status, 404);
    assert_eq!(acquire("t").status, 200);
    assert_eq!(
        post(s, "/v1/release", &json!({"lease": second})).status,
        200
    );
    // A peek of a concurrency rule is a check of cost 0.
    assert_eq!(check(s, "inflight", "t", 0).json()["remaining"], 1);
}

#[test]
fn leases_hold_slots_on_the_memory_store() {
    let s = Tollgate::start(RULES, &["--http", "127.0.0.1:0"]);
    leases_hold_slots(&s);
}

#[test]
fn leases_hold_slots_on_redis() {
    let redis = RedisServer::start();
    let config = format!("[store]\nurl = \"{}\"\n{RULES}", redis.url());
    let s = Tollgate::start(&config, &["--http", "127.0.0.1:0"]);
    leases_hold_slots(&s);
    assert!(redis.keys_without_ttl().is_empty());
}

#[test]
fn operations_on_the_wrong_kind_of_rule_are_refused() {
    use serde_json::json;
    let s = Tollgate::start(RULES, &["--http", "127.0.0.1:0"]);
    let r = post(
        &s,
        "/v1/reserve",
        &json!({"rule": "tpm", "key": "k", "cost": 5}),
    );
    let reservation = r.json()["reservation"].as_str().expect("an id").to_owned();
    for (path, body, status, want) in [
        (
            "/v1/acquire",
            json!({"rule": "tpm", "key": "k"}),
            400,
            "is not a concurrency rule",
        ),
        (
            "/v1/check",
            json!({"rule": "inflight", "key": "k"}),
            400,
            "is a concurrency rule",
        ),
        (
            "/v1/charge",
            json!({"rule": "inflight", "key": "k", "cost": 3}),
            400,
            "not charged",
        ),
        (
            "/v1/reserve",
            json!({"rule": "inflight", "key": "k", "cost": 1}),
            400,
            "not reserved",
        ),
        (
            "/v1/release",
            json!({"lease": reservation}),
            400,
            "not a tollgate lease id",
        ),
        (
            "/v1/release",
            json!({"lease": "l1~nope"}),
            400,
            "not a tollgate lease id",
        ),
        (
            "/v1/release",
            json!({"reservation": reservation}),
            400,
            "reservation: unknown field",
        ),
        (
            "/v1/settle",
            json!({"reservation": "l1~x", "cost": 1}),
            400,
            "not a tollgate reservation id",
        ),
        (
            "/v1/acquire",
            json!({"checks": [{"rule": "inflight", "key": "k"}, {"rule": "inflight", "key": "k"}]}),
            400,
            "named twice",
        ),
    ] {
        let r = post(&s, path, &body);
        assert_eq!(r.status, status, "{path} {body}: {}", r.text());
        let e = r.json()["error"].as_str().unwrap_or_default().to_owned();
        assert!(e.contains(want), "{path} {body}: {e}");
    }
    assert_eq!(
        check(&s, "inflight", "k", 0).json()["remaining"],
        2,
        "nothing held"
    );
}

/// The value of metric line `series` (its full name and labels).
fn metric(s: &Tollgate, series: &str) -> Option<f64> {
    get(s.api(), "/metrics")
        .text()
        .lines()
        .find(|l| l.starts_with(series) && l[series.len()..].starts_with(' '))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
}

/// A settle's usage above its estimate is a charge: its recorded units,
/// the units clamped at the debt cap and the debt it leaves are counted
/// as a charge's are (docs/metrics.md), never silently.
fn settle_excess_is_counted_as_a_charge(s: &Tollgate) {
    use serde_json::json;
    let r = post(
        s,
        "/v1/reserve",
        &json!({"rule": "rpm", "key": "s", "cost": 4}),
    );
    let id = r.json()["reservation"].as_str().expect("an id").to_owned();
    let r = post(
        s,
        "/v1/settle",
        &json!({"reservation": id, "cost": u64::MAX}),
    );
    assert_eq!((r.status, r.json()["debt"].clone()), (200, 1000.into()));
    // 4 counted by the reserve, 1006 more recorded (a window of 10 and a
    // debt of 1000), the rest clamped.
    assert_eq!(
        metric(s, "tollgate_charge_units_total{rule=\"rpm\"}"),
        Some(1006.0)
    );
    #[allow(clippy::cast_precision_loss)]
    let want = (u64::MAX - 1010) as f64;
    let clamped = metric(s, "tollgate_charge_clamped_units_total{rule=\"rpm\"}");
    assert!(
        clamped.is_some_and(|v| (v - want).abs() <= want * 1e-12),
        "{clamped:?}"
    );
    assert_eq!(
        metric(s, "tollgate_charges_in_debt_total{rule=\"rpm\"}"),
        Some(1.0)
    );
    // Below the estimate nothing is charged.
    let r = post(
        s,
        "/v1/reserve",
        &json!({"rule": "tpm", "key": "s", "cost": 9}),
    );
    let id = r.json()["reservation"].as_str().expect("an id").to_owned();
    let r = post(s, "/v1/settle", &json!({"reservation": id, "cost": 3}));
    assert_eq!(r.status, 200, "{}", r.text());
    let tpm = metric(s, "tollgate_charge_units_total{rule=\"tpm\"}");
    assert_eq!(tpm.unwrap_or(0.0), 0.0);
}

#[test]
fn settle_excess_is_counted_as_a_charge_on_the_memory_store() {
    let s = Tollgate::start(RULES, &["--http", "127.0.0.1:0"]);
    settle_excess_is_counted_as_a_charge(&s);
}

#[test]
fn settle_excess_is_counted_as_a_charge_on_redis() {
    let redis = RedisServer::start();
    let config = format!("[store]\nurl = \"{}\"\n{RULES}", redis.url());
    let s = Tollgate::start(&config, &["--http", "127.0.0.1:0"]);
    settle_excess_is_counted_as_a_charge(&s);
}
