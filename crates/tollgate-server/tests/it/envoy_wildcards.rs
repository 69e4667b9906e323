//! Wildcards anywhere in a value and `share_threshold`, against the real
//! binary over gRPC, in the shapes of the reference service's own wildcard
//! tests (our files, not copies): `foo*bar*baz`, `bar*b`, a `*` matching
//! the empty string, an exact value beating a wildcard; every value a
//! `share_threshold` wildcard matches counting against one counter, and
//! without it each value against its own.

use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use redis_harness::RedisServer;

use crate::support::rls::{Rls, code, desc};

const YAML: &str = "\
domain: wild
descriptors:
  - key: path
    value: foo*bar*baz
    rate_limit: {unit: hour, requests_per_unit: 2}
  - key: path
    value: bar*b
    rate_limit: {unit: hour, requests_per_unit: 1}
  - key: path
    value: exact*
    rate_limit: {unit: hour, requests_per_unit: 1}
  - key: path
    value: exactly
    rate_limit: {unit: hour, requests_per_unit: 3}
  - key: files
    value: tmp*
    share_threshold: true
    rate_limit: {unit: hour, requests_per_unit: 2}
  - key: team
    value: a*
    share_threshold: true
    descriptors:
      - key: user
        rate_limit: {unit: hour, requests_per_unit: 1}
";

/// One call of one descriptor: its code and `limit_remaining`, and the
/// name of the limit that answered.
fn one(rls: &mut Rls, entries: &[(&str, &str)]) -> (Code, u32, String) {
    let r = rls.ok(RateLimitRequest {
        domain: "wild".to_owned(),
        descriptors: vec![desc(entries)],
        hits_addend: 0,
    });
    let s = &r.statuses[0];
    let limit = s
        .current_limit
        .as_ref()
        .map(|l| l.requests_per_unit.to_string())
        .unwrap_or_default();
    (code(s.code), s.limit_remaining, limit)
}

#[test]
fn wildcards_anywhere_match_and_each_value_counts_apart() {
    let mut rls = Rls::start("memory", YAML);
    // foo*bar*baz (2 an hour): each matching value has its own counter
    for value in ["foobarbaz", "foo-bar-baz"] {
        assert_eq!(one(&mut rls, &[("path", value)]), (Code::Ok, 1, "2".into()));
        assert_eq!(one(&mut rls, &[("path", value)]), (Code::Ok, 0, "2".into()));
        assert_eq!(one(&mut rls, &[("path", value)]).0, Code::OverLimit);
    }
    // bar*b: the * matches the empty string
    assert_eq!(
        one(&mut rls, &[("path", "barb")]),
        (Code::Ok, 0, "1".into())
    );
    assert_eq!(one(&mut rls, &[("path", "barb")]).0, Code::OverLimit);
    // no limit: nothing counted, OK without a limit
    assert_eq!(
        one(&mut rls, &[("path", "foobaz")]),
        (Code::Ok, 0, String::new())
    );
    // the exact value wins over exact*
    assert_eq!(
        one(&mut rls, &[("path", "exactly")]),
        (Code::Ok, 2, "3".into())
    );
    assert_eq!(
        one(&mut rls, &[("path", "exactness")]),
        (Code::Ok, 0, "1".into())
    );
}

fn share_threshold_counts_every_matching_value_against_one_counter(store: &str) {
    let mut rls = Rls::start(store, YAML);
    assert_eq!(
        one(&mut rls, &[("files", "tmp1")]),
        (Code::Ok, 1, "2".into())
    );
    assert_eq!(
        one(&mut rls, &[("files", "tmp2")]),
        (Code::Ok, 0, "2".into())
    );
    assert_eq!(one(&mut rls, &[("files", "tmp3")]).0, Code::OverLimit);
    assert_eq!(one(&mut rls, &[("files", "tmp")]).0, Code::OverLimit);
    // shared at the wildcard level above the limit
    assert_eq!(
        one(&mut rls, &[("team", "alpha"), ("user", "u1")]),
        (Code::Ok, 0, "1".into())
    );
    assert_eq!(
        one(&mut rls, &[("team", "amber"), ("user", "u1")]).0,
        Code::OverLimit
    );
    // another user is another counter
    assert_eq!(
        one(&mut rls, &[("team", "amber"), ("user", "u2")]).0,
        Code::Ok
    );
}

#[test]
fn share_threshold_shares_one_counter_on_the_memory_store() {
    share_threshold_counts_every_matching_value_against_one_counter("memory");
}

#[test]
fn share_threshold_shares_one_counter_on_redis() {
    let redis = RedisServer::start();
    share_threshold_counts_every_matching_value_against_one_counter(&redis.url());
    assert!(redis.keys_without_ttl().is_empty());
}
