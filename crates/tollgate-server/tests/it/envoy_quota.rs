//! `quota_mode` against the real binary over gRPC: per descriptor and
//! globally (`[envoy] quota_mode`). A quota descriptor over its limit fails
//! the request only when every quota descriptor of it is over; what a
//! denied request consumes (docs/envoy.md, "Quota mode"): nothing.

use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};

use crate::support::rls::{Rls, code, desc, toml};

const YAML: &str = "\
domain: quota
descriptors:
  - key: daily
    quota_mode: true
    rate_limit: {unit: day, requests_per_unit: 2}
  - key: monthly
    quota_mode: true
    rate_limit: {unit: month, requests_per_unit: 3}
  - key: rate
    rate_limit: {unit: hour, requests_per_unit: 5}
  - key: closed
    quota_mode: true
    rate_limit: {unit: hour, requests_per_unit: 0}
";

fn call(rls: &mut Rls, descriptors: &[&[(&str, &str)]]) -> RateLimitResponse {
    rls.ok(RateLimitRequest {
        domain: "quota".to_owned(),
        descriptors: descriptors.iter().map(|d| desc(d)).collect(),
        hits_addend: 0,
    })
}

fn codes(r: &RateLimitResponse) -> (Code, Vec<Code>) {
    (
        code(r.overall_code),
        r.statuses.iter().map(|s| code(s.code)).collect(),
    )
}

/// What the key of `entries` has left, read with a peek.
fn left(rls: &mut Rls, entries: &[(&str, &str)]) -> u32 {
    let mut d = desc(entries);
    d.hits_addend = Some(envoy_types::pb::google::protobuf::UInt64Value { value: 0 });
    let r = rls.ok(RateLimitRequest {
        domain: "quota".to_owned(),
        descriptors: vec![d],
        hits_addend: 0,
    });
    r.statuses[0].limit_remaining
}

#[test]
fn one_quota_descriptor_over_does_not_fail_the_request_all_over_does() {
    let mut rls = Rls::start("memory", YAML);
    let both: &[&[(&str, &str)]] = &[&[("daily", "u1")], &[("monthly", "u1")]];
    for _ in 0..2 {
        assert_eq!(
            codes(&call(&mut rls, both)),
            (Code::Ok, vec![Code::Ok, Code::Ok])
        );
    }
    // daily is over, monthly is not: admitted, daily's status over
    assert_eq!(
        codes(&call(&mut rls, both)),
        (Code::Ok, vec![Code::OverLimit, Code::Ok])
    );
    assert_eq!(left(&mut rls, &[("monthly", "u1")]), 0);
    // both over: denied
    assert_eq!(
        codes(&call(&mut rls, both)),
        (Code::OverLimit, vec![Code::OverLimit, Code::OverLimit])
    );
    // another user is untouched
    assert_eq!(
        codes(&call(&mut rls, &[&[("daily", "u2")]])),
        (Code::Ok, vec![Code::Ok])
    );
    // one quota descriptor alone, over: denied
    assert_eq!(
        codes(&call(&mut rls, &[&[("daily", "u1")]])),
        (Code::OverLimit, vec![Code::OverLimit])
    );
    // a zero limit in quota mode is a quota descriptor that is over
    assert_eq!(
        codes(&call(&mut rls, &[&[("closed", "x")], &[("daily", "u3")]])),
        (Code::Ok, vec![Code::OverLimit, Code::Ok])
    );
    assert_eq!(
        codes(&call(&mut rls, &[&[("closed", "x")]])).0,
        Code::OverLimit
    );
}

#[test]
fn a_denied_request_consumes_nothing_from_its_rate_limits() {
    let mut rls = Rls::start("memory", YAML);
    let q = &[("daily", "u9")];
    call(&mut rls, &[q]);
    call(&mut rls, &[q]);
    assert_eq!(left(&mut rls, &[("rate", "u9")]), 5);
    // The quota is used up: the request is denied, and the ordinary limit
    // beside it gives back what its check took.
    let r = call(&mut rls, &[q, &[("rate", "u9")]]);
    assert_eq!(
        codes(&r),
        (Code::OverLimit, vec![Code::OverLimit, Code::Ok])
    );
    // its status shows the key as the refund left it
    assert_eq!(r.statuses[1].limit_remaining, 5);
    assert_eq!(left(&mut rls, &[("rate", "u9")]), 5);
    // An ordinary limit over denies whatever the quota says, and the quota
    // is only read.
    let mut rls = Rls::start("memory", YAML);
    for _ in 0..5 {
        call(&mut rls, &[&[("rate", "u8")]]);
    }
    let r = call(&mut rls, &[&[("daily", "u8")], &[("rate", "u8")]]);
    assert_eq!(
        codes(&r),
        (Code::OverLimit, vec![Code::Ok, Code::OverLimit])
    );
    assert_eq!(left(&mut rls, &[("daily", "u8")]), 2);
    // a quota key at its limit, only read on a denied request, reads over
    // (its cost would not fit)
    call(&mut rls, &[&[("daily", "u8")]]);
    call(&mut rls, &[&[("daily", "u8")]]);
    let r = call(&mut rls, &[&[("daily", "u8")], &[("rate", "u8")]]);
    assert_eq!(
        codes(&r),
        (Code::OverLimit, vec![Code::OverLimit, Code::OverLimit])
    );
}

#[test]
fn global_quota_mode_makes_every_descriptor_a_quota_descriptor() {
    let config = format!("{}\n[envoy]\nquota_mode = true\n", toml("memory"));
    let mut rls = Rls::start_with(&config, YAML, &[]);
    for _ in 0..5 {
        call(&mut rls, &[&[("rate", "g")]]);
    }
    call(&mut rls, &[&[("daily", "g")]]);
    call(&mut rls, &[&[("daily", "g")]]);
    // rate is over, but daily (a quota descriptor now too) is not
    let r = call(&mut rls, &[&[("rate", "g")], &[("monthly", "g")]]);
    assert_eq!(codes(&r), (Code::Ok, vec![Code::OverLimit, Code::Ok]));
    // both over: denied
    let r = call(&mut rls, &[&[("rate", "g")], &[("daily", "g")]]);
    assert_eq!(
        codes(&r),
        (Code::OverLimit, vec![Code::OverLimit, Code::OverLimit])
    );
    // as the reference: a descriptor without a limit is a quota
    // descriptor that passed
    let r = call(&mut rls, &[&[("rate", "g")], &[("nothing", "g")]]);
    assert_eq!(code(r.overall_code), Code::Ok);
}
