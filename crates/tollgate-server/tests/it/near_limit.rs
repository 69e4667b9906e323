//! `tollgate_near_limit_total{rule}` in `/metrics` against the real
//! binary (docs/metrics.md, "Near limit"): the units admitted past
//! `floor(capacity × [metrics] near_limit_ratio)`, exactly, through the
//! HTTP API and the Envoy service alike.

use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use serde_json::json;

use crate::support::rls::{Rls, desc};
use crate::support::{Tollgate, get, post_json, series};

const RULES: &str = r#"
[[rules]]
name = "window"
algorithm = "fixed_window"
limit = 10
period = "1h"

[[rules]]
name = "bucket"
algorithm = "gcra"
limit = 10
period = "1h"
"#;

/// Checks `rule`/`key` at each cost in turn; answers the statuses.
fn checks(s: &Tollgate, rule: &str, costs: &[u64]) -> Vec<u16> {
    costs
        .iter()
        .map(|cost| {
            let body = json!({"rule": rule, "key": "k", "cost": cost}).to_string();
            post_json(s.api(), "/v1/check", &body).status
        })
        .collect()
}

fn near(s: &Tollgate, rule: &str) -> f64 {
    let m = get(s.api(), "/metrics").text();
    series(&m, "tollgate_near_limit_total", &format!("rule=\"{rule}\""))
}

#[test]
fn the_default_ratio_counts_the_units_past_eighty_percent() {
    let s = Tollgate::start(RULES, &["--http", "127.0.0.1:0"]);
    // Threshold 8 of 10: the 9th and 10th units; the 11th is denied.
    let statuses = checks(&s, "window", &[1; 11]);
    assert_eq!(statuses[..10], [200; 10]);
    assert_eq!(statuses[10], 429);
    assert_eq!(near(&s, "window"), 2.0);
    // From 0 to 9 in one check of 9: 1 past; then 1 more: 1.
    assert_eq!(checks(&s, "bucket", &[9, 1, 1]), [200, 200, 429]);
    assert_eq!(near(&s, "bucket"), 2.0);
    let m = get(s.api(), "/metrics").text();
    assert_eq!(
        series(
            &m,
            "tollgate_checks_total",
            r#"rule="window",outcome="allowed""#
        ),
        10.0,
        "{m}"
    );
}

#[test]
fn the_configured_ratio_moves_the_threshold() {
    let config = format!("[metrics]\nnear_limit_ratio = 0.5\n{RULES}");
    let s = Tollgate::start(&config, &["--http", "127.0.0.1:0"]);
    // Threshold 5: used 3 (none), 6 (1), 9 (3), then 12 denied (none).
    assert_eq!(checks(&s, "window", &[3, 3, 3, 3]), [200, 200, 200, 429]);
    assert_eq!(near(&s, "window"), 4.0);
    assert_eq!(near(&s, "bucket"), 0.0, "no check, no series");
}

#[test]
fn envoy_limits_count_as_every_rule_does() {
    let yaml = "domain: h\ndescriptors:\n  - key: user\n    rate_limit: {unit: hour, requests_per_unit: 5}\n";
    let config = "[store]\nurl = \"memory\"\n\n[metrics]\nnear_limit_ratio = 0.6\n";
    let mut rls = Rls::start_with(config, yaml, &["--http", "127.0.0.1:0"]);
    for _ in 0..6 {
        rls.ok(RateLimitRequest {
            domain: "h".to_owned(),
            descriptors: vec![desc(&[("user", "alice")])],
            hits_addend: 1,
        });
    }
    // Threshold floor(5 × 0.6) = 3: the 4th and 5th hits; the 6th is over.
    let m = get(rls.server.api(), "/metrics").text();
    let line = m
        .lines()
        .find(|l| l.starts_with("tollgate_near_limit_total{rule=\"envoy."))
        .unwrap_or_else(|| panic!("no Envoy near-limit series in\n{m}"));
    assert!(line.ends_with(" 2"), "{line}");
}

#[test]
fn utilization_is_the_busiest_keys_share_between_scrapes() {
    let s = Tollgate::start(RULES, &["--http", "127.0.0.1:0"]);
    let util = |rule: &str| {
        let m = get(s.api(), "/metrics").text();
        series(
            &m,
            "tollgate_utilization_ratio",
            &format!("rule=\"{rule}\""),
        )
    };
    // Key "k" at 7 of 10, another key at 2: the busiest one shows.
    checks(&s, "window", &[3, 4]);
    let other = json!({"rule": "window", "key": "other", "cost": 2}).to_string();
    assert_eq!(post_json(s.api(), "/v1/check", &other).status, 200);
    assert!((util("window") - 0.7).abs() < 1e-9, "{}", util("window"));
    assert_eq!(util("bucket"), 0.0);
    // Nothing decided since the last scrape: 0 again.
    assert_eq!(util("window"), 0.0);
    // A denial reads the key as it is (7 used: 4 do not fit); filling it
    // is a key at its limit.
    assert_eq!(checks(&s, "window", &[4]), [429]);
    assert!((util("window") - 0.7).abs() < 1e-9);
    assert_eq!(checks(&s, "window", &[3]), [200]);
    assert_eq!(util("window"), 1.0);
}
