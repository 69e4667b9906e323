//! [`EnvoyLimits::metric_key`]: the stats key of a matched descriptor, in
//! the cases of the reference service's `value_to_metric`,
//! `detailed_metric` and `share_threshold` stats tests (our configs, the
//! same shapes).

use super::*;

fn key(limits: &EnvoyLimits, domain: &str, entries: &[(&str, &str)]) -> Option<String> {
    limits.metric_key(domain, entries)
}

const VALUES: &str = "
domain: d
descriptors:
  - key: route
    value_to_metric: true
    descriptors:
      - key: method
        value_to_metric: true
        descriptors:
          - key: subject
            rate_limit: {unit: minute, requests_per_unit: 60}
      - key: verb
        value: GET
        value_to_metric: true
        descriptors:
          - key: subject
            rate_limit: {unit: minute, requests_per_unit: 30}
      - key: action
        value: read*
        value_to_metric: true
        descriptors:
          - key: resource
            rate_limit: {unit: minute, requests_per_unit: 10}
      - key: detail
        value_to_metric: true
        descriptors:
          - key: subject
            detailed_metric: true
            rate_limit: {unit: minute, requests_per_unit: 5}
  - key: k1
    descriptors:
      - key: k2
        value_to_metric: true
        descriptors:
          - key: k3
            rate_limit: {unit: second, requests_per_unit: 1}
      - key: plain
        rate_limit: {unit: second, requests_per_unit: 1}
";

#[test]
fn value_to_metric_names_runtime_values_where_set() {
    let l = ok(VALUES);
    let cases: &[(&[(&str, &str)], &str)] = &[
        (
            &[("route", "draw"), ("method", "GET"), ("subject", "123")],
            "d.route_draw.method_GET.subject",
        ),
        // only the levels that ask for it
        (&[("k1", "X"), ("k2", "Y"), ("k3", "Z")], "d.k1.k2_Y.k3"),
        // no flag: the config's key, as the per-rule metrics have it
        (&[("k1", "X"), ("plain", "Y")], "d.k1.plain"),
        // a configured value is the value
        (
            &[("route", "api"), ("verb", "GET"), ("subject", "u")],
            "d.route_api.verb_GET.subject",
        ),
        // a wildcard under value_to_metric names the request's value
        (
            &[("route", "a"), ("action", "readfile"), ("resource", "docs")],
            "d.route_a.action_readfile.resource",
        ),
        // an empty value adds nothing
        (
            &[("route", ""), ("method", "GET"), ("subject", "1")],
            "d.route.method_GET.subject",
        ),
        (
            &[("route", ""), ("method", ""), ("subject", "1")],
            "d.route.method.subject",
        ),
        // detailed_metric wins: every entry with its value
        (
            &[("route", "draw"), ("detail", "GET"), ("subject", "123")],
            "d.route_draw.detail_GET.subject_123",
        ),
    ];
    for (entries, want) in cases {
        assert_eq!(key(&l, "d", entries).as_deref(), Some(*want), "{entries:?}");
    }
    // no limit, no key
    assert_eq!(key(&l, "d", &[("route", "x")]), None);
    assert_eq!(key(&l, "nowhere", &[("route", "x")]), None);
}

#[test]
fn limits_know_whether_their_metrics_name_runtime_values() {
    let l = ok(VALUES);
    let runtime = |entries: &[(&str, &str)]| l.find("d", entries).map(|l| l.runtime_metric);
    assert_eq!(
        runtime(&[("route", "a"), ("method", "b"), ("subject", "c")]),
        Some(true)
    );
    assert_eq!(
        runtime(&[("k1", "a"), ("k2", "b"), ("k3", "c")]),
        Some(true)
    );
    assert_eq!(runtime(&[("k1", "a"), ("plain", "b")]), Some(false));
}

#[test]
fn detailed_metric_names_every_entry() {
    let l = ok("
domain: nested
descriptors:
  - key: key_2
    detailed_metric: true
    rate_limit: {unit: minute, requests_per_unit: 5000}
    descriptors:
      - key: key_3
        value: asked
        detailed_metric: true
        rate_limit: {unit: minute, requests_per_unit: 5}
  - key: key-1
    descriptors:
      - key: key-2
        detailed_metric: true
        rate_limit: {unit: minute, requests_per_unit: 5}
");
    assert_eq!(
        key(&l, "nested", &[("key_2", "v2")]).as_deref(),
        Some("nested.key_2_v2")
    );
    assert_eq!(
        key(&l, "nested", &[("key_2", "v2"), ("key_3", "asked")]).as_deref(),
        Some("nested.key_2_v2.key_3_asked")
    );
    assert_eq!(
        key(&l, "nested", &[("key-1", "value-1"), ("key-2", "value-2")]).as_deref(),
        Some("nested.key-1_value-1.key-2_value-2")
    );
}

#[test]
fn share_threshold_names_its_pattern_before_any_other_flag() {
    let l = ok("
domain: t
descriptors:
  - key: route
    value: api/*
    share_threshold: true
    value_to_metric: true
    descriptors:
      - key: method
        rate_limit: {unit: minute, requests_per_unit: 5}
  - key: service
    value: svc/*
    share_threshold: true
    descriptors:
      - key: endpoint
        detailed_metric: true
        rate_limit: {unit: minute, requests_per_unit: 5}
  - key: tenant
    value: t*prod
    share_threshold: true
    descriptors:
      - key: resource
        value: res*v2
        share_threshold: true
        rate_limit: {unit: minute, requests_per_unit: 5}
  - key: plain
    value: p*
    descriptors:
      - key: x
        rate_limit: {unit: minute, requests_per_unit: 5}
");
    for value in ["api/users", "api/orders"] {
        assert_eq!(
            key(&l, "t", &[("route", value), ("method", "GET")]).as_deref(),
            Some("t.route_api/*.method")
        );
    }
    assert_eq!(
        key(&l, "t", &[("service", "svc/a"), ("endpoint", "get")]).as_deref(),
        Some("t.service_svc/*.endpoint_get")
    );
    assert_eq!(
        key(&l, "t", &[("tenant", "t1prod"), ("resource", "res-a-v2")]).as_deref(),
        Some("t.tenant_t*prod.resource_res*v2")
    );
    // a wildcard without flags keeps its pattern
    assert_eq!(
        key(&l, "t", &[("plain", "pq"), ("x", "1")]).as_deref(),
        Some("t.plain_p*.x")
    );
}
