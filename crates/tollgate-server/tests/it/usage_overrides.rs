//! `/v1/reserve` then `/v1/settle` on a key with a per-key override
//! (docs/semantics.md, "Reserve, then settle"): the settle counts under
//! the override that admitted the reservation, not under the rule's own
//! limit, on the memory store and on a real Redis.

use redis_harness::RedisServer;
use serde_json::json;

use crate::support::{Tollgate, post};

/// 10 a day for most keys, 1000 a day for `vip`: a day-long period, so
/// the test's own time moves nothing by a unit.
const RULES: &str = r#"
[[rules]]
name = "tokens"
algorithm = "gcra"
limit = 10
period = "24h"

  [[rules.overrides]]
  key = "vip"
  limit = 1000
"#;

fn settles_under_the_override(s: &Tollgate) {
    let reserve = |cost: u64| {
        let r = post(
            s,
            "/v1/reserve",
            &json!({"rule": "tokens", "key": "vip", "cost": cost, "ttl_ms": 60000}),
        );
        assert_eq!(r.status, 200, "{}", r.text());
        r.json()["reservation"].as_str().expect("an id").to_owned()
    };
    let settle = |id: String, cost: u64| {
        let r = post(s, "/v1/settle", &json!({"reservation": id, "cost": cost}));
        assert_eq!(r.status, 200, "{}", r.text());
        r.json()
    };
    // 800 reserved, 300 used: 500 back at the override's rate (the rule's
    // own, a hundred times slower, gave everything back).
    let body = settle(reserve(800), 300);
    assert_eq!(
        (body["remaining"].clone(), body["limit"].clone()),
        (700.into(), 1000.into())
    );
    // 100 reserved, 250 used: 150 more at the override's rate (the rule's
    // own, a hundred times slower, put the key in debt).
    let body = settle(reserve(100), 250);
    assert_eq!(
        (body["remaining"].clone(), body["debt"].clone()),
        (450.into(), 0.into())
    );
}

#[test]
fn settles_under_the_override_on_the_memory_store() {
    let s = Tollgate::start(RULES, &["--http", "127.0.0.1:0"]);
    settles_under_the_override(&s);
}

#[test]
fn settles_under_the_override_on_redis() {
    let redis = RedisServer::start();
    let config = format!("[store]\nurl = \"{}\"\n{RULES}", redis.url());
    let s = Tollgate::start(&config, &["--http", "127.0.0.1:0"]);
    settles_under_the_override(&s);
}
