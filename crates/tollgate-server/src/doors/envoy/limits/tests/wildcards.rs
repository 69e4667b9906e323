//! Wildcards anywhere in a value (several per value, `*` matching the
//! empty string too) and `share_threshold`, as the reference's
//! `wildcardMatch` and cache key treat them.

use super::*;

const WILD: &str = "
domain: d
descriptors:
  - key: path
    value: foo*bar*baz
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: path
    value: bar*b
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: path
    value: '*-end'
    rate_limit: {unit: minute, requests_per_unit: 3}
  - key: path
    value: exact*
    rate_limit: {unit: minute, requests_per_unit: 4}
  - key: path
    value: exactly
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: files
    value: tmp*
    share_threshold: true
    rate_limit: {unit: minute, requests_per_unit: 6}
  - key: team
    value: a*
    share_threshold: true
    descriptors:
      - key: user
        rate_limit: {unit: minute, requests_per_unit: 7}
";

#[test]
fn a_star_anywhere_matches_any_run_the_empty_one_included() {
    let limits = ok(WILD);
    let at = |value: &str| path(&limits, "d", &[("path", value)]);
    for value in ["foobarbaz", "foo-bar-baz", "foo1bar22baz", "foobarbarbaz"] {
        assert_eq!(at(value), Some("d.path_foo*bar*baz"), "{value}");
    }
    for value in ["foobaz", "foo-baz-bar", "xfoobarbaz", "foobarbazx"] {
        assert_eq!(at(value), None, "{value}");
    }
    for value in ["barb", "bar-b", "barbb"] {
        assert_eq!(at(value), Some("d.path_bar*b"), "{value}");
    }
    assert_eq!(at("bar"), None, "the fixed parts may not overlap");
    assert_eq!(at("x-end"), Some("d.path_*-end"));
    assert_eq!(at("-end"), Some("d.path_*-end"));
    // an exact value wins over a wildcard that also matches it
    assert_eq!(at("exactly"), Some("d.path_exactly"));
    assert_eq!(at("exact"), Some("d.path_exact*"));
    assert_eq!(at("exactness"), Some("d.path_exact*"));
}

#[test]
fn share_threshold_puts_every_matching_value_in_one_counter() {
    let limits = ok(WILD);
    let key = |entries: &[(&str, &str)]| {
        let mut e: Vec<(&[u8], &[u8])> = entries
            .iter()
            .map(|(k, v)| (k.as_bytes(), v.as_bytes()))
            .collect();
        let limit = limits.find_shared("d", &mut e).map(|l| l.path.clone());
        (limit, store_key(&e))
    };
    assert_eq!(
        key(&[("files", "tmp1")]),
        (Some("d.files_tmp*".to_owned()), "files=tmp*".to_owned())
    );
    assert_eq!(key(&[("files", "tmp2")]).1, "files=tmp*");
    // without share_threshold each value counts apart
    assert_eq!(key(&[("path", "barxb")]).1, "path=barxb");
    // shared at a wildcard level above the limit too
    assert_eq!(
        key(&[("team", "alpha"), ("user", "u1")]),
        (
            Some("d.team_a*.user".to_owned()),
            "team=a*;user=u1".to_owned()
        )
    );
    assert_eq!(
        key(&[("team", "amber"), ("user", "u1")]).1,
        "team=a*;user=u1"
    );
}

#[test]
fn share_threshold_needs_a_wildcard_value() {
    let (line, field, message) = error(
        "
domain: d
descriptors:
  - key: files
    value: tmp
    share_threshold: true
    rate_limit: {unit: minute, requests_per_unit: 6}
",
    );
    assert_eq!(
        (line, field.as_str()),
        (6, "descriptors[0].share_threshold")
    );
    assert!(
        message.contains("share_threshold can only be used with wildcard values")
            && message.contains("files_tmp"),
        "{message}"
    );
    let (_, field, message) = error(
        "
domain: d
descriptors:
  - key: files
    value: tmp*
    share_threshold: maybe
",
    );
    assert_eq!(field, "descriptors[0].share_threshold");
    assert!(message.contains("boolean"), "{message}");
}
