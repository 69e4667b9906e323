//! Envoy Gateway's costs, answered as the reference answers them under
//! `[envoy] count_own_cost` (the compatibility entry's setting): EG puts
//! `requestCost` in the request-phase descriptor's own `hits_addend`
//! (0 = a peek) and `responseCost` in a second descriptor sent with
//! `apply_on_stream_done`, and `limit.fromMetadata` in the descriptor's
//! `limit` (notes §3.3; EG `testdata/out/xds-ir/ratelimit.routes.yaml`,
//! routes `req-cost`, `res-cost`, `req-and-resp-cost`). The reference
//! `INCRBY`s every cost and compares after (its `base_limiter.go`), so a
//! usage is counted even past the limit; each call here is held against
//! that arithmetic at a fake Unix second ([`Parity`]). Cases from the
//! reference's own tests are marked with their names.

use std::time::Duration;

use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::rate_limit::Unit;

use redis_harness::RedisServer;

use crate::support::envoy::away_from_a_window_edge;
use crate::support::gateway::{
    Lim, Parity, T0, costing, entries, lim, overridden, quota, request, seen, shadow,
};
use crate::support::rls::{Rls, toml};

const LISTENER: &str = "first-listener";
const COUNT_OWN: &str = "\n[envoy]\ncount_own_cost = true\n";

/// An EG-rendered config (the translator's shape, its
/// `quota_mode`/`detailed_metric`/… `false` lines left out) for the cost
/// routes: one rule each, with no match (`rule-0-match--1`) or one header
/// match.
const COSTS: &str = r#"
name: first-listener
domain: first-listener
descriptors:
  - key: req-cost
    value: req-cost
    rate_limit: null
    descriptors:
      - key: rule-0-match--1
        value: rule-0-match--1
        rate_limit: {requests_per_unit: 10, unit: MINUTE, unlimited: false, name: "", replaces: []}
        descriptors: []
        shadow_mode: false
    shadow_mode: false
  - key: res-cost
    value: res-cost
    rate_limit: null
    descriptors:
      - key: rule-0-match-0
        value: rule-0-match-0
        rate_limit: {requests_per_unit: 10, unit: MINUTE, unlimited: false, name: "", replaces: []}
        descriptors: []
        shadow_mode: false
    shadow_mode: false
  - key: req-and-resp-cost
    value: req-and-resp-cost
    rate_limit: null
    descriptors:
      - key: rule-0-match-0
        value: rule-0-match-0
        rate_limit: {requests_per_unit: 10, unit: MINUTE, unlimited: false, name: "", replaces: []}
        descriptors: []
        shadow_mode: false
    shadow_mode: false
  - key: shadow-cost
    value: shadow-cost
    rate_limit: null
    descriptors:
      - key: rule-0-match--1
        value: rule-0-match--1
        rate_limit: {requests_per_unit: 4, unit: HOUR, unlimited: false, name: "", replaces: []}
        descriptors: []
        shadow_mode: true
    shadow_mode: false
  - key: per-second
    value: per-second
    rate_limit: null
    descriptors:
      - key: rule-0-match--1
        value: rule-0-match--1
        rate_limit: {requests_per_unit: 8, unit: SECOND, unlimited: false, name: "", replaces: []}
        descriptors: []
        shadow_mode: false
    shadow_mode: false
"#;

/// The descriptor of route `route`'s rule with no match.
fn no_match(
    route: &str,
) -> envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor {
    entries(&[(route, route), ("rule-0-match--1", "rule-0-match--1")])
}

/// The descriptor of route `route`'s rule with one header match.
fn matched(
    route: &str,
) -> envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor {
    entries(&[(route, route), ("rule-0-match-0", "rule-0-match-0")])
}

const TEN: Option<Lim> = Some(Lim {
    rpu: 10,
    unit: Unit::Minute,
    shadow: false,
    quota: false,
});

#[test]
fn a_peek_then_a_stream_done_usage_is_counted_past_the_limit() {
    // EG `requestCost: {number: 0}` + `responseCost` from a header: the
    // token limit of an AI gateway.
    let mut p = Parity::start(COUNT_OWN, &[COSTS]);
    let peek = || request(LISTENER, vec![costing(no_match("req-cost"), 0)]);
    let done = |n| request(LISTENER, vec![costing(no_match("req-cost"), n)]);
    p.call(peek(), &[TEN]);
    p.call(done(4), &[TEN]);
    p.call(peek(), &[TEN]);
    // 11 used of 10: counted, and OVER_LIMIT, as the reference answers.
    let (code, _) = p.call(done(7), &[TEN]);
    assert_eq!(code, Code::OverLimit);
    // The next request's peek finds the overdraft.
    let (code, _) = p.call(peek(), &[TEN]);
    assert_eq!(code, Code::OverLimit);
    p.call(done(1), &[TEN]);
    // A new minute, a new count.
    p.at(T0 + 30);
    let (code, s) = p.call(peek(), &[TEN]);
    assert_eq!((code, s[0].remaining), (Code::Ok, 10));
}

#[test]
fn without_count_own_cost_a_usage_that_does_not_fit_is_dropped() {
    // Why the switch exists: a limit loaded over xDS has no `charge`
    // flag, and a cost that is a check consumes only if it fits.
    let mut p = Parity::start("", &[COSTS]);
    let peek = || request(LISTENER, vec![costing(no_match("req-cost"), 0)]);
    let done = |n| request(LISTENER, vec![costing(no_match("req-cost"), n)]);
    p.call(peek(), &[TEN]);
    p.call(done(4), &[TEN]);
    let over = seen(&p.rls.ok(done(7)));
    assert_eq!(over.0, Code::OverLimit);
    // The reference counted 11; here nothing was recorded.
    let after = seen(&p.rls.ok(peek()));
    assert_eq!((after.0, after.1[0].remaining), (Code::Ok, 6));
}

#[test]
fn a_request_cost_is_counted_even_when_it_does_not_fit() {
    // EG `requestCost: {number: 3}`.
    let mut p = Parity::start(COUNT_OWN, &[COSTS]);
    let call = || request(LISTENER, vec![costing(no_match("req-cost"), 3)]);
    for _ in 0..3 {
        p.call(call(), &[TEN]);
    }
    for _ in 0..2 {
        let (code, _) = p.call(call(), &[TEN]);
        assert_eq!(code, Code::OverLimit);
    }
    // Used 15 of 10: a peek still sees it over.
    p.call(
        request(LISTENER, vec![costing(no_match("req-cost"), 0)]),
        &[TEN],
    );
}

#[test]
fn a_response_cost_alone_follows_a_request_phase_check() {
    // EG with only `responseCost`: the request-phase descriptor has no
    // hits_addend (a check of 1), the stream-done one the usage.
    let mut p = Parity::start(COUNT_OWN, &[COSTS]);
    let check = || request(LISTENER, vec![matched("res-cost")]);
    let done = |n| request(LISTENER, vec![costing(matched("res-cost"), n)]);
    p.call(check(), &[TEN]);
    p.call(done(5), &[TEN]);
    p.call(check(), &[TEN]);
    let (code, _) = p.call(done(5), &[TEN]);
    assert_eq!(code, Code::OverLimit);
    // Over: the check is refused (the reference counts it too; a refused
    // check counts nothing here, docs/envoy.md "Deciding": the answers are
    // the same until the window ends).
    let (code, _) = p.call(check(), &[TEN]);
    assert_eq!(code, Code::OverLimit);
    p.at(T0 + 30);
    p.call(check(), &[TEN]);
}

#[test]
fn a_limit_from_metadata_counts_on_the_configured_counter_of_its_unit() {
    // EG `limit.fromMetadata` on `req-and-resp-cost`: both phases carry
    // the override; the reference keys the counter by domain, entries and
    // window, not by the limit, so a call without the override shares it.
    let mut p = Parity::start(COUNT_OWN, &[COSTS]);
    let five = |n| {
        request(
            LISTENER,
            vec![overridden(
                costing(matched("req-and-resp-cost"), n),
                5,
                Unit::Minute,
            )],
        )
    };
    p.call(five(1), &[TEN]);
    p.call(five(3), &[TEN]);
    p.call(five(1), &[TEN]);
    let (code, s) = p.call(five(2), &[TEN]);
    assert_eq!(
        (code, s[0].limit),
        (Code::OverLimit, Some((5, Unit::Minute)))
    );
    // The configured 10 a minute, on the same counter: 8 used.
    let (code, s) = p.call(
        request(LISTENER, vec![matched("req-and-resp-cost")]),
        &[TEN],
    );
    assert_eq!((code, s[0].remaining), (Code::Ok, 2));
}

#[test]
fn a_shadow_rule_counts_every_cost_and_never_limits() {
    let mut p = Parity::start(COUNT_OWN, &[COSTS]);
    let four = shadow(4, Unit::Hour);
    for n in [1, 2, 3, 0, 5] {
        let (code, _) = p.call(
            request(LISTENER, vec![costing(no_match("shadow-cost"), n)]),
            &[four],
        );
        assert_eq!(code, Code::Ok);
    }
}

// TestRedis (test/redis/fixed_cache_impl_test.go): per-descriptor
// hits_addend {0, 1} in one call: the 0 reads, the 1 counts, each
// descriptor answered on its own count.
#[test]
fn per_descriptor_hits_addends_in_one_call() {
    let mut p = Parity::start(COUNT_OWN, &[COSTS]);
    for _ in 0..11 {
        p.call(
            request(
                LISTENER,
                vec![
                    costing(no_match("req-cost"), 0),
                    costing(matched("res-cost"), 1),
                ],
            ),
            &[TEN, TEN],
        );
    }
    // Both counted past their limits in one call.
    for _ in 0..2 {
        p.call(
            request(
                LISTENER,
                vec![
                    costing(no_match("req-cost"), 6),
                    costing(matched("res-cost"), 1),
                ],
            ),
            &[TEN, TEN],
        );
    }
}

// TestNearLimit (test/redis/fixed_cache_impl_test.go), "hitsAddend that
// is greater than 1": the request's hits_addend, counted while it fits.
#[test]
fn a_request_level_hits_addend_counts_while_it_fits() {
    let mut p = Parity::start(COUNT_OWN, &[COSTS]);
    let eight = lim(8, Unit::Second);
    for _ in 0..5 {
        let mut r = request(LISTENER, vec![no_match("per-second")]);
        r.hits_addend = 2;
        p.call(r, &[eight]);
    }
}

#[test]
fn a_call_mixing_an_own_cost_over_its_limit_and_a_check_counts_only_the_cost() {
    // docs/envoy.md "Counting own costs": the reference counts the check
    // of a request it denies; tollgate's checks of a denied request only
    // read (its listed difference), so here the answers part.
    let mut p = Parity::start(COUNT_OWN, &[COSTS]);
    let r = request(
        LISTENER,
        vec![costing(no_match("req-cost"), 11), matched("res-cost")],
    );
    let (code, s) = seen(&p.rls.ok(r));
    assert_eq!(code, Code::OverLimit);
    assert_eq!((s[0].code, s[0].remaining), (Code::OverLimit, 0));
    // The check read, not counted: all 10 left (the reference: 9).
    assert_eq!((s[1].code, s[1].remaining), (Code::Ok, 10));
    let again = seen(&p.rls.ok(request(LISTENER, vec![matched("res-cost")])));
    assert_eq!(again.1[0].remaining, 9);
}

/// Envoy AI Gateway's token limits: the same shapes with `quota_mode:
/// true` on the rule's node (the second producer of these configs).
const AI_QUOTAS: &str = r#"
name: default/aigw/http
domain: default/aigw/http
descriptors:
  - key: backend-a
    value: backend-a
    descriptors:
      - key: rule-0-match--1
        value: rule-0-match--1
        rate_limit: {requests_per_unit: 10, unit: HOUR}
        quota_mode: true
  - key: backend-b
    value: backend-b
    descriptors:
      - key: rule-0-match--1
        value: rule-0-match--1
        rate_limit: {requests_per_unit: 20, unit: HOUR}
        quota_mode: true
"#;

// TestServiceQuotaModeOnlySomeOverTheLimit / ...AllOverTheLimit
// (test/service/ratelimit_test.go): a request is over only when every
// quota descriptor is; each is counted as its cost says.
#[test]
fn quota_descriptors_with_own_costs_fail_the_request_only_all_together() {
    let mut p = Parity::start(COUNT_OWN, &[AI_QUOTAS]);
    let domain = "default/aigw/http";
    let (a, b) = (quota(10, Unit::Hour), quota(20, Unit::Hour));
    let call = |x, y| {
        request(
            domain,
            vec![
                costing(no_match("backend-a"), x),
                costing(no_match("backend-b"), y),
            ],
        )
    };
    p.call(call(0, 0), &[a, b]);
    // backend-a's usage passes its limit: OVER_LIMIT in its status, but
    // backend-b passes, so the request does.
    let (code, s) = p.call(call(12, 5), &[a, b]);
    assert_eq!((code, s[0].code), (Code::Ok, Code::OverLimit));
    p.call(call(0, 0), &[a, b]);
    // Both over: the request is.
    let (code, _) = p.call(call(1, 16), &[a, b]);
    assert_eq!(code, Code::OverLimit);
    p.call(call(0, 0), &[a, b]);
}

#[test]
fn own_costs_are_counted_past_the_limit_in_redis_too() {
    // The Redis store counts an own cost through the same charge script
    // (its clock is the Redis server's, so this one runs on real time,
    // kept inside one minute, and leaves resets to the tests above).
    away_from_a_window_edge(60, Duration::from_secs(20));
    let redis = RedisServer::start();
    let config = format!("{}{COUNT_OWN}", toml(&redis.url()));
    let mut rls = Rls::start_with(&config, COSTS, &[]);
    let mut call = |n| {
        let (code, s) = seen(&rls.ok(request(LISTENER, vec![costing(no_match("req-cost"), n)])));
        assert_eq!(code, s[0].code);
        (code, s[0].remaining)
    };
    assert_eq!(call(0), (Code::Ok, 10));
    assert_eq!(call(4), (Code::Ok, 6));
    assert_eq!(call(7), (Code::OverLimit, 0));
    assert_eq!(call(0), (Code::OverLimit, 0));
    assert_eq!(call(3), (Code::OverLimit, 0));
}
