//! Cases of the reference service's `test/config/config_test.go` about the
//! fields and switches of its 2025–26 releases: the per-request `limit` override
//! (TestConfigLimitOverride), `metadata` (TestMetadata), `value_to_metric`
//! (TestShareThreshold cases 2 and 7, the matching of TestValueToMetric_*)
//! and `quota_mode`. Translated as `envoy_reference.rs` translates the
//! others: the real binary over gRPC, our config files in the reference's
//! shapes, what each status shows.

use std::process::Command;

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::RateLimitOverride;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::rate_limit::Unit;
use envoy_types::pb::envoy::r#type::v3::RateLimitUnit;
use envoy_types::pb::google::protobuf::value::Kind;
use envoy_types::pb::google::protobuf::{Struct, Value};

use crate::support;
use crate::support::reference::{
    away_from_an_hour_edge, call_one, data, hit, hour, no_limit, ok, over, start, unlimited,
};
use crate::support::rls::{Rls, code, desc, toml};

/// `tollgate validate --envoy-config FILE` accepts the data file `name`
/// (a clearer failure than a server that does not start).
fn loads(name: &str) {
    let out = Command::new(env!("CARGO_BIN_EXE_tollgate"))
        .args(["validate", "--envoy-config"])
        .arg(data(name))
        .output()
        .expect("run tollgate");
    assert_eq!(
        out.status.code(),
        Some(0),
        "{name} does not load: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A descriptor of `entries` carrying the override `requests_per_unit` per
/// `unit`.
fn with_override(
    entries: &[(&str, &str)],
    requests_per_unit: u32,
    unit: RateLimitUnit,
) -> RateLimitDescriptor {
    RateLimitDescriptor {
        limit: Some(RateLimitOverride {
            requests_per_unit,
            unit: unit as i32,
        }),
        ..desc(entries)
    }
}

// TestConfigLimitOverride: an override in an unknown domain is no limit;
// in a known one it is the limit, whatever the config says of the
// descriptor (key1=value1 + subkey1=something has 5/second in the config;
// with an override of 10/day it is 10/day, with 42/hour 42/hour), with no
// name; another value is another counter.
#[test]
fn config_limit_override_replaces_the_configs_limit() {
    let mut rls = start(&["basic.yaml"], &[]);
    away_from_an_hour_edge();
    let region = |v| [("tenant", "acme"), ("region", v)];
    assert_eq!(
        call_one(
            &mut rls,
            "foo_domain",
            with_override(&region("south"), 10, RateLimitUnit::Day)
        ),
        no_limit()
    );
    assert_eq!(
        call_one(
            &mut rls,
            "shop",
            with_override(&region("south"), 10, RateLimitUnit::Day)
        ),
        ok(10, Unit::Day, "", 9)
    );
    // "Change in override value": the new override answers. (Whether it
    // counts on the 10/day call's counter depends on the window: the
    // reference's cache key is the entries and the window's start.)
    let s = call_one(
        &mut rls,
        "shop",
        with_override(&region("south"), 42, RateLimitUnit::Hour),
    );
    assert_eq!(
        (s.code, s.limit.clone()),
        (Code::Ok, Some((42, Unit::Hour, String::new())))
    );
    assert!((40..=41).contains(&s.remaining), "{s:?}");
    // "Different value creates a different counter"
    assert_eq!(
        call_one(
            &mut rls,
            "shop",
            with_override(&region("elsewhere"), 42, RateLimitUnit::Hour)
        ),
        ok(42, Unit::Hour, "", 41)
    );
}

// TestConfigLimitOverride, the reference's GetLimit: the override is taken
// before the config is looked at, so it limits a descriptor the config
// does not list, one whose limit is `unlimited`, one without a limit, and
// a shadow_mode one (enforced: "we don't want to enable shadow_mode").
#[test]
fn config_limit_override_applies_to_any_descriptor_of_a_known_domain() {
    let mut rls = start(&["basic.yaml"], &[]);
    away_from_an_hour_edge();
    for entries in [
        &[("unlisted", "u1")][..],
        &[("staff", "s1")],
        &[("route", "/health")],
        &[("tenant", "acme")],
    ] {
        let d = || with_override(entries, 2, RateLimitUnit::Hour);
        assert_eq!(call_one(&mut rls, "shop", d()), ok(2, Unit::Hour, "", 1));
        assert_eq!(call_one(&mut rls, "shop", d()), ok(2, Unit::Hour, "", 0));
        assert_eq!(call_one(&mut rls, "shop", d()), over(2, Unit::Hour, ""));
    }
    // without the override, the config again
    assert_eq!(hit(&mut rls, "shop", &[("staff", "s1")]), unlimited());
    assert_eq!(hit(&mut rls, "shop", &[("unlisted", "u2")]), no_limit());

    let mut rls = start(&["shadow_mode.yaml"], &[]);
    let d = || with_override(&[("route", "/cart")], 1, RateLimitUnit::Hour);
    assert_eq!(call_one(&mut rls, "shop", d()), ok(1, Unit::Hour, "", 0));
    assert_eq!(call_one(&mut rls, "shop", d()), over(1, Unit::Hour, ""));
}

/// The string at `path` in `s`, through nested structs.
fn string_at(s: &Struct, path: &[&str]) -> Option<String> {
    let (last, inner) = path.split_last()?;
    let mut s = s;
    for key in inner {
        match s.fields.get(*key) {
            Some(Value {
                kind: Some(Kind::StructValue(next)),
            }) => s = next,
            _ => return None,
        }
    }
    match s.fields.get(*last) {
        Some(Value {
            kind: Some(Kind::StringValue(v)),
        }) => Some(v.clone()),
        _ => None,
    }
}

// TestMetadata: a file with `metadata` (a string on a nested key-only node,
// a nested mapping on a top node) loads, and its limits match as without
// it. With the reference's RESPONSE_DYNAMIC_METADATA (here `[envoy]
// response_dynamic_metadata`), the answer's dynamic_metadata carries the
// domain and, under "metadata", the matched limits' metadata.
#[test]
fn metadata_loads_matches_and_is_answered() {
    loads("metadata.yaml");
    let mut rls = start(&["metadata.yaml"], &[]);
    assert_eq!(
        hit(&mut rls, "shop", &[("tenant", "acme"), ("region", "south")]),
        ok(4, Unit::Second, "", 3)
    );
    assert_eq!(
        hit(&mut rls, "shop", &[("route", "/cart")]),
        ok(12, Unit::Minute, "", 11)
    );

    let config = "[store]\nurl = \"memory\"\n\n[envoy]\nresponse_dynamic_metadata = true\n";
    let mut rls = Rls::start_with(config, &support::reference::text("metadata.yaml"), &[]);
    let mut meta = |entries: &[(&str, &str)]| {
        let r = rls.ok(RateLimitRequest {
            domain: "shop".to_owned(),
            descriptors: vec![desc(entries)],
            hits_addend: 0,
        });
        assert_eq!(code(r.overall_code), Code::Ok);
        r.dynamic_metadata.expect("dynamic_metadata")
    };
    let m = meta(&[("tenant", "acme"), ("region", "south")]);
    assert_eq!(string_at(&m, &["domain"]).as_deref(), Some("shop"));
    assert_eq!(
        string_at(&m, &["metadata", "name"]).as_deref(),
        Some("service_a"),
        "{m:?}"
    );
    let m = meta(&[("route", "/cart")]);
    assert_eq!(
        string_at(&m, &["metadata", "service_with_quota", "name"]).as_deref(),
        Some("service_b"),
        "{m:?}"
    );
    // a limit without metadata adds none
    let m = meta(&[("tenant", "acme"), ("region", "north")]);
    assert!(!m.fields.contains_key("metadata"), "{m:?}");
}

// TestShareThreshold case 2 (its value_to_metric half) and case 7: with
// value_to_metric beside share_threshold, the wildcard's values still
// share one counter (value_to_metric changes stats names only).
#[test]
fn share_threshold_with_value_to_metric_still_shares() {
    loads("share_threshold_value_to_metric.yaml");
    let mut rls = start(&["share_threshold_value_to_metric.yaml"], &[]);
    away_from_an_hour_edge();
    let d = "storage";
    assert_eq!(
        hit(&mut rls, d, &[("path", "api/v1"), ("verb", "GET")]),
        hour(2, 1)
    );
    assert_eq!(
        hit(&mut rls, d, &[("path", "api/v2"), ("verb", "GET")]),
        hour(2, 0)
    );
    assert_eq!(
        hit(&mut rls, d, &[("path", "api/v3"), ("verb", "GET")]),
        over(2, Unit::Hour, "")
    );
    assert_eq!(
        hit(&mut rls, d, &[("path", "api/v1"), ("verb", "PUT")]),
        hour(2, 1)
    );
    assert_eq!(hit(&mut rls, d, &[("lane", "/v2/a/y")]), hour(2, 1));
    assert_eq!(hit(&mut rls, d, &[("lane", "/v2-beta-y")]), hour(2, 0));
    assert_eq!(hit(&mut rls, d, &[("lane", "/v2/a/z")]), no_limit());
}

// TestValueToMetric_*: each config loads and each request its tests send
// finds its limit (the Stats.Key they assert is metrics, not matching).
// value_to_metric does not make values share a counter.
#[test]
fn value_to_metric_configs_load_and_match() {
    loads("value_to_metric.yaml");
    let mut rls = start(&["value_to_metric.yaml"], &[]);
    away_from_an_hour_edge();
    let d = "vtm";
    let rms = |r, m, s| [("route", r), ("method", m), ("subject", s)];
    assert_eq!(hit(&mut rls, d, &rms("draw", "GET", "123")), hour(6, 5));
    assert_eq!(hit(&mut rls, d, &rms("draw", "GET", "123")), hour(6, 4));
    assert_eq!(hit(&mut rls, d, &rms("draw", "GET", "124")), hour(6, 5));
    assert_eq!(hit(&mut rls, d, &rms("other", "GET", "123")), hour(6, 5));
    // WithEmptyValue: empty values match the key-only nodes
    assert_eq!(hit(&mut rls, d, &rms("", "GET", "123")), hour(6, 5));
    assert_eq!(hit(&mut rls, d, &rms("draw", "", "123")), hour(6, 5));
    assert_eq!(hit(&mut rls, d, &rms("", "", "123")), hour(6, 5));
    // MidLevelOnly
    assert_eq!(
        hit(&mut rls, d, &[("l1", "X"), ("l2", "Y"), ("l3", "Z")]),
        hour(2, 1)
    );
    // WithConfiguredValues
    let pvw = |v| [("path", "api"), ("verb", v), ("who", "user123")];
    assert_eq!(hit(&mut rls, d, &pvw("GET")), hour(6, 5));
    assert_eq!(hit(&mut rls, d, &pvw("POST")), hour(3, 2));
    assert_eq!(hit(&mut rls, d, &pvw("PUT")), no_limit());
    // WithWildcard
    let uar = |u, a, r| [("user", u), ("action", a), ("resource", r)];
    assert_eq!(
        hit(&mut rls, d, &uar("alice", "readfile", "documents")),
        hour(10, 9)
    );
    assert_eq!(
        hit(&mut rls, d, &uar("bob", "readdata", "database")),
        hour(10, 9)
    );
    assert_eq!(
        hit(&mut rls, d, &uar("bob", "write", "database")),
        no_limit()
    );
}

// quota_mode (the reference's descriptor field; its service answers
// OVER_LIMIT overall when a rate limit descriptor is over, or when every
// quota descriptor of the request is, and OK when some quota descriptor
// still has quota).
#[test]
fn quota_mode_loads_and_a_request_fails_only_when_all_its_quotas_do() {
    loads("quota_mode.yaml");
    let config = toml("memory");
    let mut rls = Rls::start_with(&config, &support::reference::text("quota_mode.yaml"), &[]);
    away_from_an_hour_edge();
    let mut call = |keys: &[(&str, &str)]| {
        let r = rls.ok(RateLimitRequest {
            domain: "quota".to_owned(),
            descriptors: keys.iter().map(|e| desc(&[*e])).collect(),
            hits_addend: 0,
        });
        let codes: Vec<Code> = r.statuses.iter().map(|s| code(s.code)).collect();
        (code(r.overall_code), codes)
    };
    assert_eq!(call(&[("plan", "p1")]), (Code::Ok, vec![Code::Ok]));
    // the only quota descriptor is over: the request is
    assert_eq!(
        call(&[("plan", "p1")]),
        (Code::OverLimit, vec![Code::OverLimit])
    );
    // one quota over, another with quota left: admitted
    assert_eq!(
        call(&[("plan", "p1"), ("team", "t1")]),
        (Code::Ok, vec![Code::OverLimit, Code::Ok])
    );
    // a plain (rate limit) descriptor over fails the request, quota or not
    assert_eq!(call(&[("seat", "s1")]), (Code::Ok, vec![Code::Ok]));
    assert_eq!(
        call(&[("plan", "p2"), ("seat", "s1")]),
        (Code::OverLimit, vec![Code::Ok, Code::OverLimit])
    );
}
