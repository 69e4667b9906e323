//! Which limit a request's descriptor finds: exact values, wildcards,
//! nesting, defaults, unknown domains.

use super::*;

#[test]
fn key_value_beats_the_default_for_the_key() {
    let limits = ok(MONGO);
    assert_eq!(
        path(&limits, "mongo_cps", &[("database", "users")]),
        Some("mongo_cps.database_users")
    );
    let default = limits.find("mongo_cps", &[("database", "orders")]).unwrap();
    assert_eq!(default.path, "mongo_cps.database");
    assert_eq!(default.requests_per_unit, 100);
    assert_eq!(
        path(&limits, "mongo_cps", &[("database", "")]),
        Some("mongo_cps.database")
    );
    assert_eq!(path(&limits, "mongo_cps", &[("nothing", "users")]), None);
}

#[test]
fn nested_descriptors_match_by_key_then_value() {
    let limits = ok(MONGO);
    let foo = limits
        .find(
            "mongo_cps",
            &[("remote_address", "10.0.0.1"), ("path", "/foo")],
        )
        .unwrap();
    assert_eq!(foo.path, "mongo_cps.remote_address.path_/foo");
    assert_eq!((foo.requests_per_unit, foo.unit), (10, Some(Unit::Minute)));
    let other = limits
        .find(
            "mongo_cps",
            &[("remote_address", "10.0.0.1"), ("path", "/bar")],
        )
        .unwrap();
    assert_eq!(other.path, "mongo_cps.remote_address.path");
    assert_eq!(other.unit, Some(Unit::Hour));

    let bar = limits
        .find(
            "mongo_cps",
            &[("source_cluster", "proxy"), ("destination_cluster", "bar")],
        )
        .unwrap();
    assert!(bar.shadow_mode);
    assert_eq!(bar.unit, Some(Unit::Minute), "units are case-insensitive");
    let any = limits
        .find(
            "mongo_cps",
            &[("source_cluster", "proxy"), ("destination_cluster", "baz")],
        )
        .unwrap();
    assert!(any.unlimited);
    assert_eq!((any.unit, any.rule), (None, None));
    // Only source_cluster=proxy has children.
    assert_eq!(
        path(
            &limits,
            "mongo_cps",
            &[("source_cluster", "other"), ("destination_cluster", "bar")]
        ),
        None
    );
}

#[test]
fn wildcards_match_by_prefix_in_config_order_before_the_default() {
    let limits = ok(MONGO);
    // foo1* comes first in the config, so it wins over foo* for foo1x.
    assert_eq!(
        path(&limits, "mongo_cps", &[("foo", "foo1x")]),
        Some("mongo_cps.foo_foo1*")
    );
    assert_eq!(
        path(&limits, "mongo_cps", &[("foo", "foo1")]),
        Some("mongo_cps.foo_foo1*")
    );
    assert_eq!(
        path(&limits, "mongo_cps", &[("foo", "foo2")]),
        Some("mongo_cps.foo_foo*")
    );
    assert_eq!(
        path(&limits, "mongo_cps", &[("foo", "foo")]),
        Some("mongo_cps.foo_foo*")
    );
    assert_eq!(
        path(&limits, "mongo_cps", &[("foo", "fo")]),
        Some("mongo_cps.foo")
    );
    assert_eq!(
        path(&limits, "mongo_cps", &[("foo", "bar")]),
        Some("mongo_cps.foo")
    );
}

#[test]
fn an_exact_value_beats_a_wildcard() {
    let limits = ok("
domain: d
descriptors:
  - key: k
    value: '*'
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: k
    value: exact
    rate_limit: {unit: second, requests_per_unit: 2}
");
    assert_eq!(path(&limits, "d", &[("k", "exact")]), Some("d.k_exact"));
    assert_eq!(path(&limits, "d", &[("k", "other")]), Some("d.k_*"));
    assert_eq!(path(&limits, "d", &[("k", "")]), Some("d.k_*"));
}

#[test]
fn wildcards_apply_only_at_their_own_level() {
    let limits = ok("
domain: d
descriptors:
  - key: a
    descriptors:
      - key: b
        value: x*
        rate_limit: {unit: second, requests_per_unit: 1}
  - key: b
    rate_limit: {unit: second, requests_per_unit: 2}
");
    assert_eq!(path(&limits, "d", &[("b", "xy")]), Some("d.b"));
    assert_eq!(
        path(&limits, "d", &[("a", "1"), ("b", "xy")]),
        Some("d.a.b_x*")
    );
    assert_eq!(path(&limits, "d", &[("a", "1"), ("b", "y")]), None);
}

#[test]
fn a_request_deeper_than_the_config_gets_no_limit() {
    let limits = ok(MONGO);
    assert_eq!(
        path(
            &limits,
            "mongo_cps",
            &[("database", "users"), ("collection", "x")]
        ),
        None
    );
    assert_eq!(
        path(
            &limits,
            "mongo_cps",
            &[("remote_address", "1"), ("path", "/foo"), ("x", "y")]
        ),
        None
    );
}

#[test]
fn a_request_that_stops_above_a_limited_leaf_gets_no_limit() {
    let limits = ok(MONGO);
    assert_eq!(
        path(&limits, "mongo_cps", &[("remote_address", "10.0.0.1")]),
        None
    );
    assert_eq!(
        path(&limits, "mongo_cps", &[("source_cluster", "proxy")]),
        None
    );
    assert_eq!(path(&limits, "mongo_cps", &[]), None);
}

#[test]
fn a_limited_parent_applies_only_to_requests_ending_there() {
    let limits = ok("
domain: d
descriptors:
  - key: a
    rate_limit: {unit: second, requests_per_unit: 1}
    descriptors:
      - key: b
        rate_limit: {unit: second, requests_per_unit: 2}
");
    assert_eq!(path(&limits, "d", &[("a", "1")]), Some("d.a"));
    assert_eq!(path(&limits, "d", &[("a", "1"), ("b", "2")]), Some("d.a.b"));
    assert_eq!(path(&limits, "d", &[("a", "1"), ("c", "2")]), None);
}

#[test]
fn an_unknown_domain_gets_no_limit() {
    let limits = ok(MONGO);
    assert_eq!(path(&limits, "other", &[("database", "users")]), None);
    assert_eq!(
        path(
            &EnvoyLimits::default(),
            "mongo_cps",
            &[("database", "users")]
        ),
        None
    );
}

#[test]
fn composite_keys_collide_as_in_the_reference() {
    // The reference keys nodes by "key_value": key "a_b" (no value)
    // is the same node as key "a" with value "b".
    let limits = ok("
domain: d
descriptors:
  - key: a_b
    rate_limit: {unit: second, requests_per_unit: 1}
");
    assert_eq!(path(&limits, "d", &[("a", "b")]), Some("d.a_b"));
    let (line, field, message) = error(
        "
domain: d
descriptors:
  - key: a_b
  - key: a
    value: b
",
    );
    assert_eq!((line, field.as_str()), (5, "descriptors[1]"));
    assert_eq!(message, "duplicate descriptor composite key 'd.a_b'");
}
