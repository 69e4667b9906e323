//! A settle the store cannot answer (Redis stopped) on an `allow` rule:
//! 503 whatever the policy, and the error and the unrecorded units name
//! the rule's own policy, never `deny` (docs/failure-modes.md).

use redis_harness::RedisServer;
use serde_json::json;

use crate::support::{Tollgate, get, post_json};

#[test]
fn a_settle_refused_on_an_allow_rule_names_allow() {
    let redis = RedisServer::start();
    let config = format!(
        r#"
[store]
url = "{}"
timeout = "100ms"

[[rules]]
name = "open"
algorithm = "gcra"
limit = 100
period = "1h"
on_error = "allow"
"#,
        redis.url()
    );
    let s = Tollgate::start(&config, &["--http", "127.0.0.1:0"]);
    let body = json!({"rule": "open", "key": "k", "cost": 10}).to_string();
    let r = post_json(s.api(), "/v1/reserve", &body);
    assert_eq!(r.status, 200, "{}", r.text());
    let id = r.json()["reservation"].as_str().expect("an id").to_owned();
    redis.pause();
    let body = json!({"reservation": id, "cost": 30}).to_string();
    let r = post_json(s.api(), "/v1/settle", &body);
    let metrics = get(s.api(), "/metrics").text();
    redis.resume();
    assert_eq!(r.status, 503, "{}", r.text());
    assert_eq!(r.header("retry-after"), Some("1"));
    let error = r.json()["error"].as_str().unwrap_or_default().to_owned();
    assert!(
        error.contains("(here allow)") && !error.contains("deny"),
        "{error}"
    );
    let want = "tollgate_charge_unrecorded_units_total{rule=\"open\",policy=\"allow\"} 30";
    assert!(metrics.contains(want), "{want} not in\n{metrics}");
    let deny = "tollgate_charge_unrecorded_units_total{rule=\"open\",policy=\"deny\"}";
    assert!(!metrics.contains(deny), "{metrics}");
}
