//! A descriptor's own `limit` override against the real binary over gRPC,
//! counted as the reference service counts it (docs/envoy.md, "Limit
//! overrides"): the override's limit applies; with the unit of the
//! configured limit it shares that limit's counter, with another unit (or
//! on a descriptor the config does not list) it has a counter per unit; an
//! unknown domain has no limit.

use std::time::Duration;

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::RateLimitOverride;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use redis_harness::RedisServer;

use crate::support;
use crate::support::envoy::away_from_a_window_edge;
use crate::support::rls::{Rls, code, desc};

const MINUTE: i32 = 2;
const HOUR: i32 = 3;

const YAML: &str = "\
domain: over
descriptors:
  - key: api
    rate_limit: {unit: minute, requests_per_unit: 100, name: api_limit}
";

fn with_override(entries: &[(&str, &str)], per_unit: u32, unit: i32) -> RateLimitDescriptor {
    RateLimitDescriptor {
        limit: Some(RateLimitOverride {
            requests_per_unit: per_unit,
            unit,
        }),
        ..desc(entries)
    }
}

fn call(rls: &mut Rls, domain: &str, d: RateLimitDescriptor) -> RateLimitResponse {
    rls.ok(RateLimitRequest {
        domain: domain.to_owned(),
        descriptors: vec![d],
        hits_addend: 0,
    })
}

/// Code, remaining, and the limit as (requests_per_unit, unit, name).
fn seen(r: &RateLimitResponse) -> (Code, u32, Option<(u32, i32, String)>) {
    let s = &r.statuses[0];
    (
        code(s.code),
        s.limit_remaining,
        s.current_limit
            .as_ref()
            .map(|l| (l.requests_per_unit, l.unit, l.name.clone())),
    )
}

fn overrides_apply_and_count_as_the_reference(store: &str) {
    // Counts in per-minute windows: not across a minute's end.
    away_from_a_window_edge(60, Duration::from_secs(15));
    let mut rls = Rls::start(store, YAML);
    let api = &[("api", "k1")];
    // 3 a minute instead of 100, on the configured counter
    for left in [2, 1, 0] {
        assert_eq!(
            seen(&call(&mut rls, "over", with_override(api, 3, MINUTE))),
            (Code::Ok, left, Some((3, MINUTE, String::new())))
        );
    }
    assert_eq!(
        seen(&call(&mut rls, "over", with_override(api, 3, MINUTE))).0,
        Code::OverLimit
    );
    // the configured limit (100 a minute) saw the 3 admitted
    assert_eq!(
        seen(&call(&mut rls, "over", desc(api))),
        (Code::Ok, 96, Some((100, MINUTE, "api_limit".to_owned())))
    );
    // another unit: its own counter
    assert_eq!(
        seen(&call(&mut rls, "over", with_override(api, 2, HOUR))),
        (Code::Ok, 1, Some((2, HOUR, String::new())))
    );
    // a descriptor the config does not list: counted under the override
    let other = &[("unlisted", "x")];
    assert_eq!(
        seen(&call(&mut rls, "over", with_override(other, 1, MINUTE))).0,
        Code::Ok
    );
    assert_eq!(
        seen(&call(&mut rls, "over", with_override(other, 1, MINUTE))).0,
        Code::OverLimit
    );
    // ... and without it, no limit
    assert_eq!(
        seen(&call(&mut rls, "over", desc(other))),
        (Code::Ok, 0, None)
    );
    // a higher override on the same counter admits again
    assert_eq!(
        seen(&call(&mut rls, "over", with_override(other, 5, MINUTE))),
        (Code::Ok, 3, Some((5, MINUTE, String::new())))
    );
    // requests_per_unit 0: always over
    assert_eq!(
        seen(&call(
            &mut rls,
            "over",
            with_override(&[("api", "z")], 0, MINUTE)
        ))
        .0,
        Code::OverLimit
    );
    // an unknown domain has no limit, override or not
    assert_eq!(
        seen(&call(&mut rls, "nowhere", with_override(api, 1, MINUTE))),
        (Code::Ok, 0, None)
    );
    // a unit that is none of the seven is a clear error
    let err = rls
        .call(RateLimitRequest {
            domain: "over".to_owned(),
            descriptors: vec![with_override(api, 1, 42)],
            hits_addend: 0,
        })
        .expect_err("unit 42");
    assert_eq!(err.code(), tonic::Code::InvalidArgument);
    assert!(
        err.message().contains("descriptors[0].limit.unit is 42"),
        "{err:?}"
    );
}

#[test]
fn overrides_on_the_memory_store() {
    overrides_apply_and_count_as_the_reference("memory");
}

#[test]
fn overrides_on_redis() {
    let redis = RedisServer::start();
    overrides_apply_and_count_as_the_reference(&redis.url());
}

#[test]
fn distinct_overrides_keep_no_state_of_their_own() {
    // Thousands of distinct override values: each call's limit is built
    // for that call; the counter they share stays one key. Per hour: two
    // thousand calls on a loaded machine may outlast a minute's window.
    let mut rls = Rls::start_with(
        &support::rls::toml("memory"),
        YAML,
        &["--http", "127.0.0.1:0"],
    );
    for n in 1..=2000 {
        let r = call(
            &mut rls,
            "over",
            with_override(&[("api", "many")], 10_000 + n, HOUR),
        );
        assert_eq!(code(r.overall_code), Code::Ok);
    }
    assert_eq!(
        seen(&call(
            &mut rls,
            "over",
            with_override(&[("api", "many")], 2000, HOUR)
        ))
        .0,
        Code::OverLimit
    );
    let metrics = support::get(rls.server.api(), "/metrics").text();
    let keys: f64 = metrics
        .lines()
        .find_map(|l| l.strip_prefix("tollgate_memory_store_keys "))
        .and_then(|v| v.trim().parse().ok())
        .expect("tollgate_memory_store_keys");
    assert!(keys <= 2.0, "{keys} keys");
}

#[test]
fn an_admin_override_shows_in_current_limit() {
    let config = format!(
        "{}\n[admin]\n[[admin.tokens]]\nname = \"t\"\ntoken = \"0123456789abcdef0123\"\n",
        support::rls::toml("memory")
    );
    let mut rls = Rls::start_with(&config, YAML, &["--admin", "127.0.0.1:0"]);
    let admin = rls.server.admin();
    // The descriptor api=k9 is counted under rule envoy.over.api, key "api=k9".
    let r = support::request(
        admin,
        "PUT",
        "/admin/v1/overrides/envoy.over.api/api%3Dk9",
        &[("authorization", "Bearer 0123456789abcdef0123")],
        br#"{"limit":2,"period":"1h"}"#,
    );
    assert_eq!(r.status, 200, "{}", r.text());
    let seen_now = seen(&call(&mut rls, "over", desc(&[("api", "k9")])));
    assert_eq!(
        seen_now,
        (Code::Ok, 1, Some((2, HOUR, "api_limit".to_owned())))
    );
    assert_eq!(
        seen(&call(&mut rls, "over", desc(&[("api", "k9")]))).0,
        Code::Ok
    );
    assert_eq!(
        seen(&call(&mut rls, "over", desc(&[("api", "k9")]))).0,
        Code::OverLimit
    );
}
