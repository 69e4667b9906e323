//! The loading and matching cases of the reference service's
//! `test/config/config_test.go` (envoyproxy/ratelimit), translated into
//! calls of the real binary over gRPC. Its `GetLimit` checks become
//! `ShouldRateLimit` calls of one descriptor and assertions on what the
//! status shows: a nil limit is `OK` with no `current_limit`; a limit is its
//! `requests_per_unit`, unit, name and `limit_remaining`. Where the
//! reference says two descriptors share or do not share a counter, enough
//! hits are sent to show it. The config files in
//! `tests/data/envoy_reference/` are ours, in the shapes of the reference's
//! (other names and numbers, the same structure and point). Its assertions
//! on stats names are not translated: they are metrics, not matching.
//!
//! Wildcards and `share_threshold` (`TestWildcardConfig`,
//! `TestShareThreshold`) are in `envoy_reference_wildcards.rs`; the error
//! files in `envoy_reference_errors.rs`; the limit override, `metadata`,
//! `value_to_metric` and `quota_mode` in `envoy_reference_features.rs`.

use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::rate_limit::Unit;
use tonic::Code as GrpcCode;

use crate::support;
use crate::support::reference::{
    away_from_an_hour_edge, hit, no_limit, ok, over, start, unlimited,
};
use crate::support::rls::{Rls, desc};

const SHOP: &str = "shop";

// TestBasicConfig: `GetLimit(ctx, "foo_domain", ...)` is nil.
#[test]
fn basic_config_an_unknown_domain_limits_nothing() {
    let mut rls = start(&["basic.yaml"], &[]);
    for _ in 0..3 {
        assert_eq!(hit(&mut rls, "foo_domain", &[("route", "/x")]), no_limit());
        assert_eq!(hit(&mut rls, "foo_domain", &[("client", "c")]), no_limit());
    }
}

// TestBasicConfig: `GetLimit` of an empty descriptor (no entries) is nil, in
// a known domain and an unknown one. tollgate refuses a descriptor without
// entries as INVALID_ARGUMENT instead (docs/envoy.md, "Refused requests":
// only a misconfigured Envoy sends one): a deliberate difference.
#[test]
fn basic_config_a_descriptor_without_entries() {
    let mut rls = start(&["basic.yaml"], &[]);
    for domain in [SHOP, "foo_domain"] {
        let err = rls
            .call(RateLimitRequest {
                domain: domain.to_owned(),
                descriptors: vec![desc(&[])],
                hits_addend: 0,
            })
            .expect_err("a descriptor without entries is refused");
        assert_eq!(err.code(), GrpcCode::InvalidArgument, "{err:?}");
    }
}

// TestBasicConfig: the descriptors whose `GetLimit` is nil in a known
// domain: a value with no node and no key-only node (key1=something), a
// node without a limit of its own (key1=value1), a descriptor deeper than
// a limited node (key2=value2, subkey=...), a child value that is not
// configured (key5=value5, subkey5=subvalue), and a value configured
// without a limit (key2=value3, "whitelisted"). None of them counts.
#[test]
fn basic_config_descriptors_that_match_no_limit() {
    let mut rls = start(&["basic.yaml"], &[]);
    let cases: &[&[(&str, &str)]] = &[
        &[("tenant", "globex")],
        &[("tenant", "acme")],
        &[("route", "/checkout"), ("step", "pay")],
        &[("batch", "nightly"), ("job", "import")],
        &[("route", "/health")],
        &[("nobody", "x")],
    ];
    for entries in cases {
        for _ in 0..3 {
            assert_eq!(hit(&mut rls, SHOP, entries), no_limit(), "{entries:?}");
        }
    }
}

// TestBasicConfig: a key-only default and a key+value override, one level
// down (key1=value1 + subkey1=something: 5/second; subkey1=subvalue1:
// 10/second) and at the top (key2=something: 20/minute; key2=value2:
// 30/minute). Each call is the first of its counter, so it shows the full
// limit less one.
#[test]
fn basic_config_key_only_defaults_and_value_overrides() {
    let mut rls = start(&["basic.yaml"], &[]);
    assert_eq!(
        hit(&mut rls, SHOP, &[("tenant", "acme"), ("region", "south")]),
        ok(4, Unit::Second, "", 3)
    );
    assert_eq!(
        hit(&mut rls, SHOP, &[("tenant", "acme"), ("region", "north")]),
        ok(8, Unit::Second, "", 7)
    );
    assert_eq!(
        hit(&mut rls, SHOP, &[("route", "/cart")]),
        ok(12, Unit::Minute, "", 11)
    );
    assert_eq!(
        hit(&mut rls, SHOP, &[("route", "/checkout")]),
        ok(24, Unit::Minute, "", 23)
    );
    // An empty value is a value like any other: no node route_ exists, so
    // the key-only default answers (as the reference's lookup of "route_"
    // then "route" does; TestValueToMetric_WithEmptyValue sends one).
    assert_eq!(
        hit(&mut rls, SHOP, &[("route", "")]),
        ok(12, Unit::Minute, "", 11)
    );
}

// TestBasicConfig: key3=foo is 1/hour with no name, key4=foo 1/day named
// key4_rate_limit. Here counted to the end: a key-only node counts each
// value on its own counter (the reference's cache key is the request's
// values).
#[test]
fn basic_config_names_units_and_one_counter_per_value() {
    let mut rls = start(&["basic.yaml"], &[]);
    away_from_an_hour_edge();
    let client = |v| [("client", v)];
    assert_eq!(hit(&mut rls, SHOP, &client("c1")), ok(2, Unit::Hour, "", 1));
    assert_eq!(hit(&mut rls, SHOP, &client("c1")), ok(2, Unit::Hour, "", 0));
    assert_eq!(hit(&mut rls, SHOP, &client("c1")), over(2, Unit::Hour, ""));
    assert_eq!(hit(&mut rls, SHOP, &client("c2")), ok(2, Unit::Hour, "", 1));
    let partner = |v| [("partner", v)];
    let name = "partner_quota";
    for left in [2, 1, 0] {
        assert_eq!(
            hit(&mut rls, SHOP, &partner("p1")),
            ok(3, Unit::Day, name, left)
        );
    }
    assert_eq!(
        hit(&mut rls, SHOP, &partner("p1")),
        over(3, Unit::Day, name)
    );
    assert_eq!(
        hit(&mut rls, SHOP, &partner("p2")),
        ok(3, Unit::Day, name, 2)
    );
}

// TestBasicConfig's key5: a limited value (15/day) with a limited child
// value (25/day). The reference asserts only the unmatched child; here
// both limits and their counters, apart.
#[test]
fn basic_config_a_limited_node_and_its_limited_child_count_apart() {
    let mut rls = start(&["basic.yaml"], &[]);
    away_from_an_hour_edge();
    let parent = [("batch", "nightly")];
    let child = [("batch", "nightly"), ("job", "export")];
    for left in (0..6).rev() {
        assert_eq!(hit(&mut rls, SHOP, &parent), ok(6, Unit::Day, "", left));
    }
    assert_eq!(hit(&mut rls, SHOP, &parent), over(6, Unit::Day, ""));
    assert_eq!(hit(&mut rls, SHOP, &child), ok(9, Unit::Day, "", 8));
}

// TestBasicConfig: key6 is `unlimited: true`.
#[test]
fn basic_config_unlimited() {
    let mut rls = start(&["basic.yaml"], &[]);
    for _ in 0..5 {
        assert_eq!(hit(&mut rls, SHOP, &[("staff", "s1")]), unlimited());
    }
}

// TestBasicConfig: key7 (`detailed_metric: true`, 70/minute) matches any
// value; each value on its own counter.
#[test]
fn basic_config_detailed_metric_matches_every_value() {
    let mut rls = start(&["basic.yaml"], &[]);
    for value in ["unspecified", "another"] {
        assert_eq!(
            hit(&mut rls, SHOP, &[("session", value)]),
            ok(35, Unit::Minute, "", 34)
        );
    }
    assert_eq!(
        hit(&mut rls, SHOP, &[("session", "another")]),
        ok(35, Unit::Minute, "", 33)
    );
}

// TestDomainMerge: with merging on, two files of one domain answer from
// both; an unknown domain still limits nothing. (Merging off, and a key in
// two merged files: envoy_reference_errors.rs.)
#[test]
fn domain_merge_answers_from_both_files() {
    let mut rls = start(
        &["merge_one.yaml", "merge_two.yaml"],
        &["--envoy-merge-domains"],
    );
    away_from_an_hour_edge();
    assert_eq!(hit(&mut rls, "foo_domain", &[("truck", "t1")]), no_limit());
    assert_eq!(
        hit(&mut rls, "fleet", &[("truck", "t1")]),
        ok(2, Unit::Hour, "", 1)
    );
    assert_eq!(
        hit(&mut rls, "fleet", &[("van", "v2")]),
        ok(3, Unit::Hour, "", 2)
    );
    assert_eq!(
        hit(&mut rls, "fleet", &[("truck", "t1")]),
        ok(2, Unit::Hour, "", 0)
    );
    assert_eq!(
        hit(&mut rls, "fleet", &[("truck", "t1")]),
        over(2, Unit::Hour, "")
    );
    assert_eq!(
        hit(&mut rls, "fleet", &[("van", "v2")]),
        ok(3, Unit::Hour, "", 1)
    );
    // each file's values only
    assert_eq!(hit(&mut rls, "fleet", &[("truck", "t2")]), no_limit());
}

// TestDomainMerge with the `[envoy]` table's `merge_domains` instead of the
// flag.
#[test]
fn domain_merge_from_the_toml_table() {
    let two = support::reference::data("merge_two.yaml");
    let config = "[store]\nurl = \"memory\"\n\n[envoy]\nmerge_domains = true\n";
    let mut rls = Rls::start_with(
        config,
        &support::reference::text("merge_one.yaml"),
        &["--envoy-config", two.to_str().expect("utf-8 path")],
    );
    assert_eq!(
        hit(&mut rls, "fleet", &[("van", "v2")]),
        ok(3, Unit::Hour, "", 2)
    );
    assert_eq!(
        hit(&mut rls, "fleet", &[("truck", "t1")]),
        ok(2, Unit::Hour, "", 1)
    );
}

// TestShadowModeConfig: shadow_mode on a key+value child (subkey1=subvalue1)
// and a key-only top node (key2), not on their siblings. A shadow limit is
// counted and reported but answers OK past its limit; the others deny.
#[test]
fn shadow_mode_config_only_the_shadow_nodes_admit_past_their_limit() {
    let mut rls = start(&["shadow_mode.yaml"], &[]);
    away_from_an_hour_edge();
    let enforced: &[&[(&str, &str)]] = &[
        &[("tenant", "acme"), ("region", "south")],
        &[("route", "/checkout")],
    ];
    for entries in enforced {
        assert_eq!(hit(&mut rls, SHOP, entries), ok(1, Unit::Hour, "", 0));
        assert_eq!(hit(&mut rls, SHOP, entries), over(1, Unit::Hour, ""));
    }
    let shadow: &[&[(&str, &str)]] = &[
        &[("tenant", "acme"), ("region", "north")],
        &[("route", "/cart")],
    ];
    for entries in shadow {
        for _ in 0..3 {
            assert_eq!(hit(&mut rls, SHOP, entries), ok(1, Unit::Hour, "", 0));
        }
    }
}

// TestDetailedMetric: loading `detailed_metric` at every level of its two
// nested configs, and `GetLimit` not nil for each request. (Its stats keys
// are metrics, not translated.)
#[test]
fn detailed_metric_configs_load_and_match() {
    let mut rls = start(&["detailed_metric.yaml"], &[]);
    let d = "nested";
    // "nested with no values": a limited key-only node with a limited
    // key-only child; the request of the parent alone, and of both.
    assert_eq!(
        hit(&mut rls, d, &[("outer", "o1")]),
        ok(40, Unit::Minute, "", 39)
    );
    assert_eq!(
        hit(&mut rls, d, &[("outer", "o1"), ("inner", "i1")]),
        ok(4, Unit::Minute, "", 3)
    );
    assert_eq!(
        hit(&mut rls, d, &[("bare", "b1")]),
        ok(30, Unit::Minute, "", 29)
    );
    assert_eq!(
        hit(&mut rls, d, &[("bare", "b1"), ("leaf", "l1")]),
        ok(3, Unit::Minute, "", 2)
    );
    // the "realistic" config: key-only beside key+value, one level and two
    assert_eq!(
        hit(&mut rls, d, &[("acct", "any")]),
        ok(50, Unit::Minute, "", 49)
    );
    assert_eq!(
        hit(&mut rls, d, &[("acct", "fixed")]),
        ok(51, Unit::Minute, "", 50)
    );
    assert_eq!(
        hit(&mut rls, d, &[("org", "any")]),
        ok(500, Unit::Minute, "", 499)
    );
    assert_eq!(
        hit(&mut rls, d, &[("org", "special")]),
        ok(5000, Unit::Minute, "", 4999)
    );
    assert_eq!(
        hit(&mut rls, d, &[("org", "any"), ("team", "listed")]),
        ok(6, Unit::Minute, "", 5)
    );
    assert_eq!(
        hit(&mut rls, d, &[("org", "special"), ("team", "listed")]),
        ok(60, Unit::Minute, "", 59)
    );
    // the key-only `team` nodes have no limit
    assert_eq!(
        hit(&mut rls, d, &[("org", "any"), ("team", "other")]),
        no_limit()
    );
    assert_eq!(
        hit(&mut rls, d, &[("org", "special"), ("team", "other")]),
        no_limit()
    );
}
