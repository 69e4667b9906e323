//! What a valid file becomes: domains, limits, fields, rule names, and
//! several files together.

use std::collections::HashSet;
use std::time::Duration;

use tollgate::limits::MAX_NAME_LEN;
use tollgate::{Algorithm, Rule};

use super::*;

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
fn charge_defaults_to_false_and_can_be_asked_for() {
    let limits = ok("
domain: d
descriptors:
  - key: a
    rate_limit: {unit: minute, requests_per_unit: 100}
  - key: b
    rate_limit: {unit: minute, requests_per_unit: 100, charge: true}
  - key: c
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 100, charge: on, algorithm: gcra}
");
    let charge: Vec<(&str, bool)> = limits
        .limits()
        .map(|l| (l.path.as_str(), l.charge))
        .collect();
    assert_eq!(charge, [("d.a", false), ("d.b", true), ("d.c", true)]);
    assert_eq!(
        limits.rules().len(),
        3,
        "a charged limit is a rule like any"
    );
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
    // Two paths sanitized alike: each takes a digest of its own raw path,
    // so neither name depends on which was loaded first.
    assert_eq!(names[0], tagged("envoy.d.path__a_b", "d.path_/a b"));
    assert_eq!(names[1], tagged("envoy.d.path__a_b", "d.path_/a_b"));
    assert_eq!(names[2], "envoy.d.taken.2");
    // Too long: the start and the end around a digest of the whole, so
    // two long paths differing only at their end keep distinct names
    // that do not depend on their order.
    for (name, end) in [(names[3], "1"), (names[4], "2")] {
        let full = format!("envoy.d.k_{long}{end}");
        assert_eq!(name.len(), MAX_NAME_LEN);
        assert!(name.starts_with(&full[..56]), "{name}");
        assert!(name.ends_with(&full[full.len() - 56..]), "{name}");
        let digest = tollgate_http::extract::digest_key("", full.as_bytes());
        assert_eq!(&name[56..72], format!("--{}--", &digest[..12]));
    }
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
    assert_eq!(
        names,
        [tagged("envoy.d_.k", "d/.k"), tagged("envoy.d_.k", "d?.k")]
    );

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
    assert_eq!(names[0], tagged("envoy.d.k__", "d.k_!"));
    assert_eq!(names[1], tagged("envoy.d.k__", "d.k_@"));
    assert_eq!(names[10], tagged("envoy.d.k__", "d.k_~"));
    assert_eq!(names.iter().collect::<HashSet<_>>().len(), 11);
}

/// `base` and the first 8 hex digits of the raw path's digest: the name
/// of each member of a group of paths that sanitize alike.
fn tagged(base: &str, raw_path: &str) -> String {
    let digest = tollgate_http::extract::digest_key("", raw_path.as_bytes());
    format!("{base}.{}", &digest[..8])
}

#[test]
fn rule_names_do_not_depend_on_load_order() {
    let domain = |d: &str| {
        format!(
            "domain: '{d}'\ndescriptors:\n  - key: k\n    rate_limit: {{unit: second, requests_per_unit: 1}}\n  - key: p\n    value: '/a b'\n    rate_limit: {{unit: second, requests_per_unit: 2}}\n  - key: p\n    value: '/a_b'\n    rate_limit: {{unit: second, requests_per_unit: 3}}\n"
        )
    };
    let named = |files: &[(&str, String)]| {
        let files: Vec<(String, String)> = files
            .iter()
            .map(|(n, t)| ((*n).to_owned(), t.clone()))
            .collect();
        let limits = EnvoyLimits::parse(&files, &[]).unwrap();
        let mut by_path: Vec<(String, String)> = limits
            .limits()
            .map(|l| {
                let rule = &limits.rules()[l.rule.expect("a rule")];
                (l.path.clone(), rule.name().to_owned())
            })
            .collect();
        by_path.sort();
        by_path
    };
    let one = named(&[("1.yaml", domain("d/")), ("2.yaml", domain("d?"))]);
    let two = named(&[("1.yaml", domain("d?")), ("2.yaml", domain("d/"))]);
    assert_eq!(one, two);
    assert_eq!(one.len(), 6);
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
    assert_eq!(
        e.message,
        "duplicate domain 'shared': also in one.yaml (--envoy-merge-domains, [envoy] \
         merge_domains or MERGE_DOMAIN_CONFIG=true merges one domain spread over several \
         files or xDS resources)"
    );
    assert_eq!(
        err.to_string(),
        "two.yaml:2: domain: duplicate domain 'shared': also in one.yaml \
         (--envoy-merge-domains, [envoy] merge_domains or MERGE_DOMAIN_CONFIG=true merges \
         one domain spread over several files or xDS resources)"
    );
}

#[test]
fn merged_domains_are_one_domain_and_a_key_in_two_files_names_both() {
    let one = "domain: shared\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1}\n";
    let two = "domain: shared\ndescriptors:\n  - key: b\n    rate_limit: {unit: minute, requests_per_unit: 2}\n";
    let sources = [
        ("one.yaml".to_owned(), one.to_owned()),
        ("two.yaml".to_owned(), two.to_owned()),
    ];
    let merged = EnvoyLimits::parse_with(&sources, &[], true).expect("merged");
    assert_eq!(merged.domains(), ["shared"]);
    let a = merged
        .find("shared", &[("a", "x")])
        .expect("a from one.yaml");
    let b = merged
        .find("shared", &[("b", "x")])
        .expect("b from two.yaml");
    assert_eq!((a.requests_per_unit, b.requests_per_unit), (1, 2));

    let again = "domain: shared\ndescriptors:\n  - key: c\n  - key: a\n    rate_limit: {unit: hour, requests_per_unit: 3}\n";
    let err = EnvoyLimits::parse_with(
        &[sources[0].clone(), ("three.yaml".into(), again.into())],
        &[],
        true,
    )
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        "three.yaml:4: descriptors[1]: duplicate descriptor composite key 'shared.a': also in \
         one.yaml"
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

/// Envoy Gateway's rendered configs and `egctl x config envoy-ratelimit`
/// put the xDS resource's `name` at the top; the reference ignores it, and
/// so does the loader once it has checked it is a string.
#[test]
fn a_top_level_name_is_accepted_and_ignored() {
    let named = ok(
        "name: first-listener\ndomain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 5}\n",
    );
    assert_eq!(named.domains(), ["d"]);
    let paths: Vec<&str> = named.limits().map(|l| l.path.as_str()).collect();
    assert_eq!(paths, ["d.k"]);
    assert_eq!(
        error("name: [a, b]\ndomain: d\n"),
        (
            1,
            "name".to_owned(),
            "expected a string, found a list".to_owned()
        )
    );
}
