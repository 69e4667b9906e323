//! What an invalid file reports: every problem at its line and field.

use super::*;

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
             detailed_metric, share_threshold, quota_mode, value_to_metric, metadata"
    );
    assert_eq!(
        all[2].2,
        "unknown field; expected one of unit, requests_per_unit, unlimited, name, replaces, \
             algorithm, burst, charge"
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
fn charge_is_checked() {
    // Only a limit the store counts can be charged.
    assert_eq!(
        error(
            "domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unlimited: true\n      charge: true\n"
        ),
        (
            6,
            "descriptors[0].rate_limit.charge".into(),
            "charge needs a counted limit: an unlimited limit counts nothing".into()
        )
    );
    assert_eq!(
        error(
            "domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: second\n      charge: yes\n"
        ),
        (
            6,
            "descriptors[0].rate_limit.charge".into(),
            "charge needs a counted limit: requests_per_unit 0 denies every request and counts \
             nothing"
                .into()
        )
    );
    assert_eq!(
        error(
            "domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: second\n      requests_per_unit: 5\n      charge: 1\n"
        ),
        (
            7,
            "descriptors[0].rate_limit.charge".into(),
            "expected a boolean (true or false), found \"1\"".into()
        )
    );
    // A concurrency rule cannot be charged (nor checked) through Envoy.
    let (line, field, message) = error(
        "domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: second\n      requests_per_unit: 5\n      algorithm: concurrency\n      charge: true\n",
    );
    assert_eq!(
        (line, field.as_str()),
        (7, "descriptors[0].rate_limit.algorithm")
    );
    assert!(
        message.starts_with("concurrency is not a rate"),
        "{message}"
    );
    // `charge: false` on an unlimited limit asks for nothing: no error.
    let limits = ok(
        "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unlimited: true, charge: false}\n",
    );
    assert!(!limits.limits().next().expect("a limit").charge);
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
        format!(
            "{file}:1: domain: duplicate domain 'mongo_cps': also in {file} \
             (--envoy-merge-domains, [envoy] merge_domains or MERGE_DOMAIN_CONFIG=true merges \
             one domain spread over several files or xDS resources)"
        )
    );
}

#[test]
fn limits_can_be_shared_between_threads() {
    fn shared<T: Send + Sync + 'static>(_: &T) {}
    shared(&ok(MONGO));
}

/// `metadata` nested deeper than 32 levels would make every answer
/// unreadable to Envoy's protobuf reader (and thousands of levels
/// overflowed the stack): an error at its line.
#[test]
fn metadata_nested_too_deep_is_an_error() {
    let nested = |levels: usize, list: bool| {
        let mut yaml = String::from(
            "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: hour, requests_per_unit: 1}\n    metadata:\n",
        );
        for i in 0..levels - 1 {
            yaml.push_str(&" ".repeat(6 + i));
            yaml.push_str(if list && i == levels - 2 {
                "a: [1]\n"
            } else {
                "a:\n"
            });
        }
        if !list {
            yaml.push_str(&" ".repeat(5 + levels));
            yaml.push_str("x: 1\n");
        }
        yaml
    };
    ok(&nested(32, false));
    ok(&nested(32, true));
    for (yaml, line) in [
        (nested(33, false), 38),
        (nested(33, true), 37),
        (nested(5000, false), 38),
    ] {
        let (l, field, message) = error(&yaml);
        assert_eq!(l, line);
        assert!(field.starts_with("descriptors[0].metadata.a.a"), "{field}");
        assert_eq!(
            message,
            "metadata nests more than 32 levels of mappings and lists \
             (a deeper answer is refused by Envoy's protobuf reader)"
        );
    }
}
