//! The Envoy loader and descriptor lookup, tested through the public
//! API ([`EnvoyLimits::parse`], [`EnvoyLimits::find`], [`store_key`]).

use std::collections::HashSet;
use std::time::Duration;

use tollgate::{Algorithm, MAX_NAME_LEN, Rule};

use super::*;
use crate::config_file::ConfigErrors;

fn parse(yaml: &str) -> Result<EnvoyLimits, ConfigErrors> {
    EnvoyLimits::parse(&[("test.yaml".to_owned(), yaml.to_owned())], &[])
}

fn ok(yaml: &str) -> EnvoyLimits {
    match parse(yaml) {
        Ok(limits) => limits,
        Err(e) => panic!("unexpected errors:\n{e}"),
    }
}

/// The errors as (line, field, message) triples.
fn errors(yaml: &str) -> Vec<(Option<usize>, Option<String>, String)> {
    parse(yaml)
        .expect_err("expected errors")
        .errors
        .into_iter()
        .map(|e| {
            assert_eq!(e.file, "test.yaml");
            (e.line, e.field, e.message)
        })
        .collect()
}

/// The single error, as (line, field, message).
fn error(yaml: &str) -> (usize, String, String) {
    let mut all = errors(yaml);
    assert_eq!(all.len(), 1, "{all:?}");
    let (line, field, message) = all.remove(0);
    (line.unwrap(), field.unwrap_or_default(), message)
}

fn path<'a>(limits: &'a EnvoyLimits, domain: &str, entries: &[(&str, &str)]) -> Option<&'a str> {
    limits.find(domain, entries).map(|l| l.path.as_str())
}

/// The reference service's README example, "Example 1" to "Example 4"
/// folded into one domain.
const MONGO: &str = "\
domain: mongo_cps
descriptors:
  - key: database
    value: users
    rate_limit:
      unit: second
      requests_per_unit: 500

  - key: database
    value: default
    rate_limit:
      unit: second
      requests_per_unit: 500

  - key: database
    rate_limit:
      unit: second
      requests_per_unit: 100

  - key: remote_address
    descriptors:
      - key: path
        value: /foo
        rate_limit:
          unit: minute
          requests_per_unit: 10
      - key: path
        rate_limit:
          unit: hour
          requests_per_unit: 1000

  - key: source_cluster
    value: proxy
    descriptors:
      - key: destination_cluster
        value: bar
        rate_limit:
          unit: MINUTE
          requests_per_unit: 20
        shadow_mode: true
      - key: destination_cluster
        rate_limit:
          unlimited: true

  - key: foo
    value: foo1*
    rate_limit:
      unit: day
      requests_per_unit: 3
  - key: foo
    value: foo*
    rate_limit:
      unit: week
      requests_per_unit: 4
  - key: foo
    rate_limit:
      unit: year
      requests_per_unit: 5
";

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

#[test]
fn domains_limits_and_fields_are_loaded() {
    let limits = ok(MONGO);
    assert_eq!(limits.domains(), ["mongo_cps"]);
    let all: Vec<&str> = limits.limits().map(|l| l.path.as_str()).collect();
    assert_eq!(
        all,
        [
            "mongo_cps.database_users",
            "mongo_cps.database_default",
            "mongo_cps.database",
            "mongo_cps.remote_address.path_/foo",
            "mongo_cps.remote_address.path",
            "mongo_cps.source_cluster_proxy.destination_cluster_bar",
            "mongo_cps.source_cluster_proxy.destination_cluster",
            "mongo_cps.foo_foo1*",
            "mongo_cps.foo_foo*",
            "mongo_cps.foo",
        ]
    );
    // Every limited node has its rule, in order; the unlimited one has none.
    let rules: Vec<Option<usize>> = limits.limits().map(|l| l.rule).collect();
    assert_eq!(
        rules,
        [
            Some(0),
            Some(1),
            Some(2),
            Some(3),
            Some(4),
            Some(5),
            None,
            Some(6),
            Some(7),
            Some(8)
        ]
    );
    for limit in limits.limits() {
        if let Some(r) = limit.rule {
            let rule = &limits.rules()[r];
            assert_eq!(rule.limit(), u64::from(limit.requests_per_unit));
            assert_eq!(
                rule.period(),
                Duration::from_secs(limit.unit.unwrap().seconds())
            );
        }
    }
    assert_eq!(limits.rules().len(), 9);
}

#[test]
fn a_file_with_only_a_domain_is_a_domain_without_limits() {
    let limits = ok("domain: empty\n");
    assert_eq!(limits.domains(), ["empty"]);
    assert_eq!(limits.rules().len(), 0);
    assert_eq!(path(&limits, "empty", &[("a", "b")]), None);
    let limits = ok("domain: empty\ndescriptors:\n");
    assert_eq!(limits.domains(), ["empty"]);
    let limits = ok("domain: empty\ndescriptors: []\n");
    assert_eq!(limits.domains(), ["empty"]);
}

#[test]
fn name_replaces_and_detailed_metric_are_kept() {
    let limits = ok("
domain: d
descriptors:
  - key: a
    detailed_metric: true
    rate_limit:
      name: big
      unit: second
      requests_per_unit: 10
      replaces:
        - name: small
        - name: other
");
    let limit = limits.find("d", &[("a", "x")]).unwrap();
    assert_eq!(limit.name, "big");
    assert_eq!(limit.replaces, ["small", "other"]);
    assert!(limit.detailed_metric);
    assert!(!limit.shadow_mode);
    assert!(!limit.unlimited);
}

#[test]
fn unlimited_and_zero_requests_have_no_rule() {
    let limits = ok("
domain: d
descriptors:
  - key: a
    rate_limit:
      unlimited: true
  - key: b
    rate_limit:
      unit: second
      requests_per_unit: 0
  - key: c
    rate_limit:
      unit: minute
");
    let a = limits.find("d", &[("a", "1")]).unwrap();
    assert_eq!((a.rule, a.unit, a.unlimited), (None, None, true));
    let b = limits.find("d", &[("b", "1")]).unwrap();
    assert_eq!(
        (b.rule, b.unit, b.requests_per_unit),
        (None, Some(Unit::Second), 0)
    );
    let c = limits.find("d", &[("c", "1")]).unwrap();
    assert_eq!(
        (c.rule, c.requests_per_unit),
        (None, 0),
        "requests_per_unit defaults to 0"
    );
    assert!(limits.rules().is_empty());
}

#[test]
fn algorithm_defaults_to_fixed_window_and_can_be_chosen() {
    let limits = ok("
domain: d
descriptors:
  - key: a
    rate_limit: {unit: second, requests_per_unit: 10}
  - key: b
    rate_limit: {unit: second, requests_per_unit: 10, algorithm: gcra, burst: 25}
  - key: c
    rate_limit: {unit: minute, requests_per_unit: 10, algorithm: sliding_window}
  - key: e
    rate_limit: {unit: hour, requests_per_unit: 10, algorithm: token_bucket}
  - key: f
    rate_limit: {unit: day, requests_per_unit: 10, algorithm: sliding_log}
");
    let algorithms: Vec<Algorithm> = limits.rules().iter().map(Rule::algorithm).collect();
    assert_eq!(
        algorithms,
        [
            Algorithm::FixedWindow,
            Algorithm::Gcra,
            Algorithm::SlidingWindow,
            Algorithm::TokenBucket,
            Algorithm::SlidingLog
        ]
    );
    assert_eq!(limits.rules()[1].capacity(), 25);
    assert_eq!(
        limits.rules()[3].capacity(),
        10,
        "burst defaults to the limit"
    );
}

#[test]
fn units_have_the_reference_lengths_and_proto_numbers() {
    let expected = [
        (Unit::Second, 1, 1, "second"),
        (Unit::Minute, 60, 2, "minute"),
        (Unit::Hour, 3600, 3, "hour"),
        (Unit::Day, 86_400, 4, "day"),
        (Unit::Month, 2_592_000, 5, "month"),
        (Unit::Year, 31_536_000, 6, "year"),
        (Unit::Week, 604_800, 7, "week"),
    ];
    for (unit, seconds, proto, name) in expected {
        assert_eq!(unit.seconds(), seconds);
        assert_eq!(unit.proto(), proto);
        assert_eq!(unit.as_str(), name);
        assert_eq!(Unit::parse(&name.to_uppercase()), Some(unit));
    }
    assert_eq!(Unit::parse("fortnight"), None);
    // Every unit gives a rule tollgate accepts.
    let yaml: String = std::iter::once("domain: d\ndescriptors:\n".to_owned())
        .chain(Unit::ALL.iter().map(|u| {
            format!(
                "  - key: {0}\n    rate_limit: {{unit: {0}, requests_per_unit: 1}}\n",
                u.as_str()
            )
        }))
        .collect();
    assert_eq!(ok(&yaml).rules().len(), 7);
}

#[test]
fn rule_names_are_sanitized_bounded_unique_and_avoid_taken_names() {
    let long = "v".repeat(200);
    let yaml = format!(
        "
domain: d
descriptors:
  - key: path
    value: /a b
    rate_limit: {{unit: second, requests_per_unit: 1}}
  - key: path
    value: /a_b
    rate_limit: {{unit: second, requests_per_unit: 1}}
  - key: taken
    rate_limit: {{unit: second, requests_per_unit: 1}}
  - key: k
    value: {long}1
    rate_limit: {{unit: second, requests_per_unit: 1}}
  - key: k
    value: {long}2
    rate_limit: {{unit: second, requests_per_unit: 1}}
  - key: ünï
    rate_limit: {{unit: second, requests_per_unit: 1}}
"
    );
    let limits = EnvoyLimits::parse(&[("t.yaml".into(), yaml)], &["envoy.d.taken"]).unwrap();
    let names: Vec<&str> = limits.rules().iter().map(Rule::name).collect();
    assert_eq!(names[0], "envoy.d.path__a_b");
    assert_eq!(names[1], "envoy.d.path__a_b.2");
    assert_eq!(names[2], "envoy.d.taken.2");
    let cut = format!("envoy.d.k_{long}");
    assert_eq!(names[3], &cut[..MAX_NAME_LEN]);
    assert_eq!(names[4], format!("{}.2", &cut[..MAX_NAME_LEN - 2]));
    assert_eq!(names[5], "envoy.d._n_");
    let unique: HashSet<&str> = names.iter().copied().collect();
    assert_eq!(unique.len(), names.len());
    assert!(names.iter().all(|n| n.len() <= MAX_NAME_LEN));
}

#[test]
fn rule_names_are_unique_across_files_and_past_nine() {
    // Domains "d/" and "d?" both sanitize to "d_".
    let source = |domain: &str| {
        format!(
            "domain: '{domain}'\ndescriptors:\n  - key: k\n    rate_limit: {{unit: second, requests_per_unit: 1}}\n"
        )
    };
    let limits = EnvoyLimits::parse(
        &[
            ("1.yaml".into(), source("d/")),
            ("2.yaml".into(), source("d?")),
        ],
        &[],
    )
    .unwrap();
    let names: Vec<&str> = limits.rules().iter().map(Rule::name).collect();
    assert_eq!(names, ["envoy.d_.k", "envoy.d_.k.2"]);

    let nested = ok("
domain: d
descriptors:
  - {key: a, rate_limit: {unit: second, requests_per_unit: 1}}
  - {key: b, descriptors: [{key: 'x', rate_limit: {unit: second, requests_per_unit: 1}}]}
");
    assert_eq!(nested.rules()[0].name(), "envoy.d.a");
    assert_eq!(nested.rules()[1].name(), "envoy.d.b.x");

    // Eleven nodes whose paths all sanitize to the same name.
    let yaml: String = std::iter::once("domain: d\ndescriptors:\n".to_owned())
            .chain(["!", "@", "#", "$", "%", "^", "&", "(", ")", "+", "~"].iter().map(|v| {
                format!(
                    "  - key: k\n    value: '{v}'\n    rate_limit: {{unit: second, requests_per_unit: 1}}\n"
                )
            }))
            .collect();
    let limits = ok(&yaml);
    let names: Vec<&str> = limits.rules().iter().map(Rule::name).collect();
    assert_eq!(names[0], "envoy.d.k__");
    assert_eq!(names[1], "envoy.d.k__.2");
    assert_eq!(names[10], "envoy.d.k__.11");
}

#[test]
fn duplicate_domains_across_files_name_both_files() {
    let one = "domain: shared\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1}\n";
    let two = "# comment\ndomain: shared\n";
    let err = EnvoyLimits::parse(
        &[
            ("one.yaml".into(), one.into()),
            ("two.yaml".into(), two.into()),
        ],
        &[],
    )
    .unwrap_err();
    assert_eq!(err.errors.len(), 1);
    let e = &err.errors[0];
    assert_eq!(e.file, "two.yaml");
    assert_eq!(e.line, Some(2));
    assert_eq!(e.field.as_deref(), Some("domain"));
    assert_eq!(e.message, "duplicate domain 'shared': also in one.yaml");
    assert_eq!(
        err.to_string(),
        "two.yaml:2: domain: duplicate domain 'shared': also in one.yaml"
    );
}

#[test]
fn errors_from_every_file_are_collected_in_file_order() {
    let err = EnvoyLimits::parse(
        &[
            ("a.yaml".into(), "domain: a\nbogus: 1\n".into()),
            ("b.yaml".into(), "domain: b\n".into()),
            ("c.yaml".into(), "domain: ''\n".into()),
        ],
        &[],
    )
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        "a.yaml:2: bogus: unknown field; expected one of domain, descriptors\n\
             c.yaml:1: domain: config file cannot have empty domain"
    );
}

#[test]
fn empty_and_missing_domains_are_errors() {
    assert_eq!(
        error("domain: ''\n"),
        (
            1,
            "domain".into(),
            "config file cannot have empty domain".into()
        )
    );
    assert_eq!(
        error("\n\ndomain:\n"),
        (
            3,
            "domain".into(),
            "config file cannot have empty domain".into()
        )
    );
    let (line, field, message) = error("");
    assert_eq!((line, field.as_str()), (1, "domain"));
    assert!(message.contains("missing required field"), "{message}");
    let (line, field, _) = error("# nothing\ndescriptors: []\n");
    assert_eq!((line, field.as_str()), (2, "domain"));
    let (line, field, message) = error("domain: [a]\n");
    assert_eq!((line, field.as_str()), (1, "domain"));
    assert_eq!(message, "expected a string, found a list");
    let (line, field, message) = error("- a\n- b\n");
    assert_eq!((line, field.as_str()), (1, ""));
    assert_eq!(
        message,
        "expected a mapping with domain and descriptors, found a list"
    );
}

#[test]
fn unknown_fields_are_errors_at_every_level() {
    let all = errors(
        "
domain: d
extra: 1
descriptors:
  - key: a
    rate_limits:
      unit: second
    descriptors:
      - key: b
        rate_limit:
          unit: second
          requests_per_unit: 1
          per: 2
          replaces:
            - name: x
              why: y
",
    );
    let got: Vec<(usize, &str)> = all
        .iter()
        .map(|(l, f, _)| (l.unwrap(), f.as_deref().unwrap()))
        .collect();
    assert_eq!(
        got,
        [
            (3, "extra"),
            (6, "descriptors[0].rate_limits"),
            (13, "descriptors[0].descriptors[0].rate_limit.per"),
            (
                16,
                "descriptors[0].descriptors[0].rate_limit.replaces[0].why"
            ),
        ]
    );
    assert_eq!(
        all[0].2,
        "unknown field; expected one of domain, descriptors"
    );
    assert_eq!(
        all[1].2,
        "unknown field; expected one of key, value, rate_limit, descriptors, shadow_mode, \
             detailed_metric"
    );
    assert_eq!(
        all[2].2,
        "unknown field; expected one of unit, requests_per_unit, unlimited, name, replaces, \
             algorithm, burst"
    );
    assert_eq!(all[3].2, "unknown field; expected one of name");
}

#[test]
fn wrong_types_are_errors() {
    let all = errors(
        "
domain: d
descriptors:
  - key: [a]
    shadow_mode: sometimes
    rate_limit:
      unit: second
      requests_per_unit: lots
      unlimited: 'true'
  - key: b
    descriptors: {key: c}
  - just a string
  - key: e
    rate_limit: [second]
  - key: f
    rate_limit:
      unit: {a: b}
      requests_per_unit: 1.5
      replaces: {name: x}
descriptors2: 1
",
    );
    let got: Vec<(usize, &str, &str)> = all
        .iter()
        .map(|(l, f, m)| (l.unwrap(), f.as_deref().unwrap(), m.as_str()))
        .collect();
    assert_eq!(
        got,
        [
            (4, "descriptors[0].key", "expected a string, found a list"),
            (
                5,
                "descriptors[0].shadow_mode",
                "expected a boolean (true or false), found \"sometimes\""
            ),
            (
                8,
                "descriptors[0].rate_limit.requests_per_unit",
                "expected an integer, found \"lots\" (not an integer)"
            ),
            (
                9,
                "descriptors[0].rate_limit.unlimited",
                "expected a boolean (true or false), found \"true\""
            ),
            (
                11,
                "descriptors[1].descriptors",
                "expected a list of descriptors, found a mapping"
            ),
            (
                12,
                "descriptors[2]",
                "expected a descriptor mapping, found \"just a string\""
            ),
            (
                14,
                "descriptors[3].rate_limit",
                "expected a rate_limit mapping, found a list"
            ),
            (
                17,
                "descriptors[4].rate_limit.unit",
                "expected a string, found a mapping"
            ),
            (
                18,
                "descriptors[4].rate_limit.requests_per_unit",
                "expected an integer, found \"1.5\" (not an integer)"
            ),
            (
                19,
                "descriptors[4].rate_limit.replaces",
                "expected a list of {name: ...}, found a mapping"
            ),
            (
                20,
                "descriptors2",
                "unknown field; expected one of domain, descriptors"
            ),
        ]
    );
}

#[test]
fn empty_keys_are_errors() {
    assert_eq!(
        error("domain: d\ndescriptors:\n  - key: ''\n"),
        (
            3,
            "descriptors[0].key".into(),
            "descriptor has empty key".into()
        )
    );
    let (line, field, message) = error("domain: d\ndescriptors:\n  - value: v\n");
    assert_eq!((line, field.as_str()), (3, "descriptors[0].key"));
    assert!(message.contains("descriptor has empty key"), "{message}");
    // Two nodes without keys are two errors, not a duplicate.
    let all = errors("domain: d\ndescriptors:\n  - key:\n  - key:\n");
    assert_eq!(all.len(), 2, "{all:?}");
}

#[test]
fn units_are_checked() {
    assert_eq!(
            error("domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: fortnight\n      requests_per_unit: 1\n"),
            (
                5,
                "descriptors[0].rate_limit.unit".into(),
                "invalid rate limit unit 'fortnight'; expected second, minute, hour, day, week, month or year".into()
            )
        );
    let (line, field, message) =
        error("domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      requests_per_unit: 1\n");
    // The missing field is named on the `rate_limit:` line.
    assert_eq!(
        (line, field.as_str()),
        (4, "descriptors[0].rate_limit.unit")
    );
    assert!(message.starts_with("missing required field"), "{message}");
    let (line, _, message) =
        error("domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: ''\n");
    assert_eq!(line, 5);
    assert!(
        message.starts_with("invalid rate limit unit ''"),
        "{message}"
    );
    assert_eq!(
        error(
            "domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unlimited: true\n      unit: second\n"
        ),
        (
            6,
            "descriptors[0].rate_limit.unit".into(),
            "should not specify rate limit unit when unlimited".into()
        )
    );
    assert!(
        ok("domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unlimited: true, unit: ''}\n")
            .find("d", &[("a", "")])
            .unwrap()
            .unlimited
    );
}

#[test]
fn requests_per_unit_must_fit_a_u32() {
    let rpu = |v: &str| {
        format!(
            "domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: hour\n      requests_per_unit: {v}\n"
        )
    };
    assert_eq!(
        error(&rpu("-1")),
        (
            6,
            "descriptors[0].rate_limit.requests_per_unit".into(),
            "-1 is out of range; expected 0 to 4294967295".into()
        )
    );
    let (line, _, message) = error(&rpu("4294967296"));
    assert_eq!(line, 6);
    assert!(message.contains("out of range"), "{message}");
    let (_, _, message) = error(&rpu("99999999999999999999999999999999999999999999"));
    assert!(message.contains("out of range"), "{message}");
    let (_, _, message) = error(&rpu("'5'"));
    assert_eq!(message, "expected an integer, found \"5\"");
    let (_, _, message) = error(&rpu("010"));
    assert!(message.contains("octal"), "{message}");
    let max = ok(&rpu("4294967295"));
    assert_eq!(max.limits().next().unwrap().requests_per_unit, u32::MAX);
    assert_eq!(max.rules()[0].limit(), u64::from(u32::MAX));
    let other = ok(&rpu("0x10"));
    assert_eq!(other.limits().next().unwrap().requests_per_unit, 16);
    let other = ok(&rpu("1_000"));
    assert_eq!(other.limits().next().unwrap().requests_per_unit, 1000);
}

#[test]
fn a_limit_tollgate_cannot_build_is_an_error_on_its_line() {
    // GCRA cannot count more than one request per microsecond.
    let (line, field, message) = error(
        "domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: second\n      algorithm: gcra\n      requests_per_unit: 2000000\n",
    );
    assert_eq!(
        (line, field.as_str()),
        (7, "descriptors[0].rate_limit.requests_per_unit")
    );
    assert!(
        message.contains("more than one per microsecond"),
        "{message}"
    );
    let (line, field, message) = error(
        "domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: second\n      algorithm: sliding_log\n      requests_per_unit: 200000\n",
    );
    assert_eq!(
        (line, field.as_str()),
        (7, "descriptors[0].rate_limit.requests_per_unit")
    );
    assert!(message.contains("sliding_log"), "{message}");
}

#[test]
fn algorithm_and_burst_are_checked() {
    let (line, field, message) = error(
        "domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: second\n      requests_per_unit: 1\n      algorithm: leaky\n",
    );
    assert_eq!(
        (line, field.as_str()),
        (7, "descriptors[0].rate_limit.algorithm")
    );
    assert!(
        message.starts_with("unknown algorithm \"leaky\""),
        "{message}"
    );
    assert_eq!(
        error(
            "domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: second\n      requests_per_unit: 1\n      burst: 5\n"
        ),
        (
            7,
            "descriptors[0].rate_limit.burst".into(),
            "burst applies to gcra and token_bucket only, not fixed_window".into()
        )
    );
    let (line, field, message) = error(
        "domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: second\n      requests_per_unit: 1\n      algorithm: gcra\n      burst: 0\n",
    );
    assert_eq!(
        (line, field.as_str()),
        (8, "descriptors[0].rate_limit.burst")
    );
    assert!(message.contains("out of range"), "{message}");
}

#[test]
fn replaces_are_checked() {
    let all = errors(
        "
domain: d
descriptors:
  - key: a
    rate_limit:
      name: mine
      unit: second
      requests_per_unit: 1
      replaces:
        - name: ''
        - name: mine
        - {}
        - name: fine
",
    );
    let got: Vec<(usize, &str, &str)> = all
        .iter()
        .map(|(l, f, m)| (l.unwrap(), f.as_deref().unwrap(), m.as_str()))
        .collect();
    assert_eq!(
        got,
        [
            (
                10,
                "descriptors[0].rate_limit.replaces[0].name",
                "should not have an empty replaces entry"
            ),
            (
                11,
                "descriptors[0].rate_limit.replaces[1].name",
                "replaces should not contain name of same descriptor ('mine')"
            ),
            (
                12,
                "descriptors[0].rate_limit.replaces[2].name",
                "should not have an empty replaces entry"
            ),
        ]
    );
}

#[test]
fn duplicate_composite_keys_name_the_full_path() {
    let all = errors(
        "
domain: mongo_cps
descriptors:
  - key: database
    value: users
  - key: database
    value: users
  - key: other
    descriptors:
      - key: a
      - key: a
",
    );
    let got: Vec<(usize, &str, &str)> = all
        .iter()
        .map(|(l, f, m)| (l.unwrap(), f.as_deref().unwrap(), m.as_str()))
        .collect();
    assert_eq!(
        got,
        [
            (
                6,
                "descriptors[1]",
                "duplicate descriptor composite key 'mongo_cps.database_users'"
            ),
            (
                11,
                "descriptors[2].descriptors[1]",
                "duplicate descriptor composite key 'mongo_cps.other.a'"
            ),
        ]
    );
    // The same key with and without a value are different nodes.
    ok("domain: d\ndescriptors:\n  - key: a\n  - key: a\n    value: b\n");
}

#[test]
fn every_problem_is_reported_in_line_order() {
    let all = errors(
        "
domain: d
descriptors:
  - key: a
    rate_limit:
      unit: parsec
      requests_per_unit: -5
  - key: ''
    descriptors:
      - key: b
        rate_limit: {unlimited: true, unit: day}
",
    );
    let lines: Vec<usize> = all.iter().map(|(l, _, _)| l.unwrap()).collect();
    assert_eq!(lines, [6, 7, 8, 11], "{all:?}");
}

#[test]
fn yaml_syntax_errors_have_a_line_and_no_field() {
    let all = errors("domain: d\ndescriptors:\n  - key: a\n   bad: [\n");
    assert_eq!(all.len(), 1);
    let (line, field, message) = &all[0];
    assert!(line.is_some_and(|l| (3..=5).contains(&l)), "{line:?}");
    assert_eq!(field, &None);
    assert!(message.starts_with("YAML syntax error"), "{message}");
    let (line, _, _) = &errors("domain: d\nkey: 'unterminated\n")[0];
    assert!(line.is_some_and(|l| l >= 2), "{line:?}");
}

#[test]
fn yaml_v2_conveniences_are_accepted() {
    // Numbers as strings, yes/no booleans, anchors, aliases and merge
    // keys: Go's yaml.v2 reads them all.
    let limits = ok("
domain: d
descriptors:
  - key: status
    value: 200
    shadow_mode: yes
    rate_limit: &base
      unit: second
      requests_per_unit: 5
  - key: other
    rate_limit: *base
  - key: third
    rate_limit:
      <<: *base
      requests_per_unit: 7
");
    let status = limits.find("d", &[("status", "200")]).unwrap();
    assert!(status.shadow_mode);
    assert_eq!(
        limits
            .find("d", &[("other", "x")])
            .unwrap()
            .requests_per_unit,
        5
    );
    let third = limits.find("d", &[("third", "x")]).unwrap();
    assert_eq!(
        (third.requests_per_unit, third.unit),
        (7, Some(Unit::Second))
    );
    // Only the first document counts.
    let limits = ok("domain: first\n---\ndomain: second\n");
    assert_eq!(limits.domains(), ["first"]);
}

#[test]
fn an_alias_bomb_is_an_error_not_an_allocation() {
    let mut yaml = String::from("a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n");
    for i in 1..12 {
        let p = i - 1;
        yaml.push_str(&format!(
            "a{i}: &a{i} [*a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}]\n"
        ));
    }
    let (_, _, message) = &errors(&yaml)[0];
    assert!(message.contains("YAML nodes"), "{message}");
}

#[test]
fn fields_given_twice_are_errors() {
    assert_eq!(
        error("domain: d\ndescriptors:\n  - key: a\n    key: b\n"),
        (4, "descriptors[0].key".into(), "field given twice".into())
    );
}

#[test]
fn load_reads_files_and_reports_unreadable_ones() {
    let dir = tempfile::tempdir().unwrap();
    let good = dir.path().join("good.yaml");
    std::fs::write(&good, MONGO).unwrap();
    let limits = EnvoyLimits::load(std::slice::from_ref(&good), &[]).unwrap();
    assert_eq!(limits.domains(), ["mongo_cps"]);

    let missing = dir.path().join("missing.yaml");
    let latin1 = dir.path().join("latin1.yaml");
    std::fs::write(&latin1, b"domain: d\n# caf\xe9\n").unwrap();
    let err = EnvoyLimits::load(&[good.clone(), missing.clone(), latin1.clone()], &[]).unwrap_err();
    assert_eq!(err.errors.len(), 2);
    assert_eq!(err.errors[0].file, missing.display().to_string());
    assert_eq!(err.errors[0].line, None);
    assert!(err.errors[0].message.starts_with("cannot read"));
    assert_eq!(err.errors[1].file, latin1.display().to_string());
    assert_eq!(err.errors[1].line, Some(2));

    let err = EnvoyLimits::load(&[good.clone(), good.clone()], &[]).unwrap_err();
    let file = good.display().to_string();
    assert_eq!(
        err.to_string(),
        format!("{file}:1: domain: duplicate domain 'mongo_cps': also in {file}")
    );
}

#[test]
fn limits_can_be_shared_between_threads() {
    fn shared<T: Send + Sync + 'static>(_: &T) {}
    shared(&ok(MONGO));
}

#[test]
fn a_long_store_key_is_its_digest_and_never_a_short_one() {
    let long = "v".repeat(tollgate::MAX_KEY_LEN);
    let other = format!("{long}w");
    let a = store_key(&[("user", long.as_str())]);
    let b = store_key(&[("user", other.as_str())]);
    assert!(a.starts_with(";sha256=") && a.len() == 8 + 64, "{a}");
    assert_ne!(a, b);
    assert_eq!(a, store_key(&[("user", long.as_str())]));
    // Escaping can push a key over the limit: 3,000 `;` escape to 6,000.
    let semis = ";".repeat(3000);
    assert!(store_key(&[("user", semis.as_str())]).starts_with(";sha256="));
    // No short key starts with a bare `;`, an empty key included.
    for entries in [&[("", "")][..], &[(";sha256", "x")], &[("", ";sha256=")]] {
        assert!(!store_key(entries).starts_with(';'), "{entries:?}");
    }
    // Just at the limit: kept as it is.
    let fits = "v".repeat(tollgate::MAX_KEY_LEN - "user=".len());
    assert_eq!(
        store_key(&[("user", fits.as_str())]).len(),
        tollgate::MAX_KEY_LEN
    );
}

#[test]
fn a_byte_order_mark_is_skipped() {
    let yaml = "\u{feff}domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n";
    let limits = EnvoyLimits::parse(&[("bom.yaml".into(), yaml.into())], &[]).expect("parses");
    assert_eq!(limits.domains(), vec!["d"]);
}

#[test]
fn only_regular_files_of_bounded_size_are_read() {
    let dir = tempfile::tempdir().expect("tempdir");
    let err = EnvoyLimits::load(&[dir.path().to_path_buf()], &[]).expect_err("a directory");
    assert!(err.to_string().contains("not a regular file"), "{err}");
    let big = dir.path().join("big.yaml");
    let f = std::fs::File::create(&big).expect("create");
    f.set_len(crate::config_file::MAX_FILE_BYTES + 1)
        .expect("grow");
    let err = EnvoyLimits::load(&[big], &[]).expect_err("too big");
    assert!(err.to_string().contains("larger than 16 MiB"), "{err}");
}

#[test]
fn store_key_is_readable_and_injective() {
    assert_eq!(store_key::<&str, &str>(&[]), "");
    assert_eq!(store_key(&[("database", "users")]), "database=users");
    assert_eq!(store_key(&[("a", "b"), ("c", "d")]), "a=b;c=d");
    let cases: &[&[(&str, &str)]] = &[
        &[],
        &[("", "")],
        &[("", ""), ("", "")],
        &[("a", "b;c")],
        &[("a", "b"), ("c", "")],
        &[("a", "b;c=")],
        &[("a", "b"), ("c=", "")],
        &[("a=b", "c")],
        &[("a", "b=c")],
        &[("a", "b\\"), ("c", "d")],
        &[("a", "b\\;c"), ("", "d")],
        &[("a", "b\\;c=d")],
        &[("a\\", "=b")],
        &[("a", "\\=b")],
    ];
    let keys: HashSet<String> = cases.iter().map(|c| store_key(c)).collect();
    assert_eq!(keys.len(), cases.len(), "{keys:?}");
}

/// Decodes a store key (the test's proof of injectivity).
fn decode(key: &str) -> Vec<(Vec<u8>, Vec<u8>)> {
    let mut entries = Vec::new();
    if key.is_empty() {
        return entries;
    }
    let (mut k, mut v, mut in_value) = (Vec::new(), Vec::new(), false);
    let mut chars = key.chars();
    while let Some(c) = chars.next() {
        let target = if in_value { &mut v } else { &mut k };
        match c {
            '\\' => match chars.next() {
                Some('x') => {
                    let hex: String = chars.by_ref().take(2).collect();
                    target.push(u8::from_str_radix(&hex, 16).expect("hex"));
                }
                Some(c @ ('\\' | ';' | '=')) => target.push(c as u8),
                other => panic!("bad escape {other:?} in {key}"),
            },
            '=' => in_value = true,
            ';' => {
                entries.push((std::mem::take(&mut k), std::mem::take(&mut v)));
                in_value = false;
            }
            _ => target.extend_from_slice(c.encode_utf8(&mut [0; 4]).as_bytes()),
        }
    }
    entries.push((k, v));
    entries
}

#[test]
fn bytes_that_are_not_utf8_are_escaped_apart_from_any_string() {
    let key = |v: &[u8]| store_key(&[(&b"user"[..], v)]);
    assert_eq!(key(b"\xff\xfe"), r"user=\xff\xfe");
    assert_eq!(key(b"a\xc3"), r"user=a\xc3");
    let values: [&[u8]; 6] = [
        b"\xff\xfe",
        b"\xff\xfd",
        "\u{fffd}\u{fffd}".as_bytes(),
        "\u{ff}\u{fe}".as_bytes(),
        br"\xff\xfe",
        b"\xff\xfe\xff",
    ];
    let keys: HashSet<String> = values.iter().map(|v| key(v)).collect();
    assert_eq!(keys.len(), values.len(), "{keys:?}");
    // Long ones are hashed like any other long key.
    let long = [b'\xff'; tollgate::MAX_KEY_LEN];
    assert!(key(&long).starts_with(";sha256="));
    // Matching compares bytes: a wildcard prefix or a key-only node
    // matches such a value, a value never does.
    let limits = ok(
        "domain: d\ndescriptors:\n  - key: a\n    value: x*\n    rate_limit: {unit: second, requests_per_unit: 1}\n  - key: b\n    rate_limit: {unit: second, requests_per_unit: 2}\n",
    );
    let rpu = |k: &[u8], v: &[u8]| limits.find("d", &[(k, v)]).map(|l| l.requests_per_unit);
    assert_eq!(rpu(b"a", b"x\xff"), Some(1));
    assert_eq!(rpu(b"a", b"\xff"), None);
    assert_eq!(rpu(b"b", b"\xff"), Some(2));
    assert_eq!(rpu(b"b\xff", b"v"), None);
}

proptest::proptest! {
    #[test]
    fn store_key_decodes_back(entries in proptest::collection::vec(("[a=;\\\\é]{0,4}", "[a=;\\\\é]{0,4}"), 0..4)) {
        let borrowed: Vec<(&str, &str)> = entries.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        let bytes: Vec<(Vec<u8>, Vec<u8>)> = entries.iter().map(|(k, v)| (k.clone().into_bytes(), v.clone().into_bytes())).collect();
        proptest::prop_assert_eq!(decode(&store_key(&borrowed)), bytes);
    }

    #[test]
    fn store_key_of_any_bytes_decodes_back(entries in proptest::collection::vec((
        proptest::collection::vec(proptest::sample::select(vec![b'a', b'x', b'=', b';', b'\\', 0xc3, 0xa9, 0xff]), 0..5),
        proptest::collection::vec(proptest::sample::select(vec![b'a', b'x', b'=', b';', b'\\', 0xc3, 0xa9, 0xff]), 0..5),
    ), 0..4)) {
        proptest::prop_assert_eq!(decode(&store_key(&entries)), entries);
    }

    #[test]
    fn parse_never_panics(text in "[a-z:\\- \\n\\[\\]{}&*'\"#|>!%@`0-9,.?]{0,200}") {
        let _ = parse(&text);
    }

    #[test]
    fn find_never_panics(entries in proptest::collection::vec(("[a-z_]{0,6}", "[a-z_*/0-9]{0,6}"), 0..5)) {
        let limits = ok(MONGO);
        let borrowed: Vec<(&str, &str)> = entries.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        let _ = limits.find("mongo_cps", &borrowed);
    }
}
