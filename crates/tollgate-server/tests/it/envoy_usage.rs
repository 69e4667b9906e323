//! Usage through the Envoy rate limit service, against the real binary over
//! gRPC (docs/envoy.md, "Charging usage"): request-phase peeks (a
//! descriptor's own `hits_addend: 0`), response-phase charges on a
//! `charge: true` limit (Envoy's `apply_on_stream_done` call carrying the
//! real usage), debt paid back by time, `is_negative_hits` giving units
//! back, and the bad input around them. What
//! was recorded is read back through the HTTP API (`/v1/charge` of cost 0
//! reports a key's debt and changes nothing).

use std::time::Duration;

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::google::protobuf::UInt64Value;
use redis_harness::RedisServer;

use crate::support;
use crate::support::envoy::away_from_a_window_edge;
use crate::support::rls::{Rls, code, desc, toml, yaml_file};

const AI: &str = "\
domain: ai
descriptors:
  - key: tokens
    rate_limit:
      unit: minute
      requests_per_unit: 100
      charge: true
  - key: fast
    rate_limit:
      unit: second
      requests_per_unit: 100
      algorithm: gcra
      charge: true
  - key: slow
    rate_limit:
      unit: hour
      requests_per_unit: 100
      algorithm: gcra
      charge: true
  - key: rps
    rate_limit:
      unit: hour
      requests_per_unit: 2
  - key: audit
    shadow_mode: true
    rate_limit:
      unit: hour
      requests_per_unit: 10
      charge: true
";

/// The service with the HTTP API beside it.
fn start(store: &str) -> Rls {
    Rls::start_with(&toml(store), AI, &["--http", "127.0.0.1:0"])
}

/// A descriptor of one entry with its own `hits_addend`.
fn hits(key: &str, value: &str, n: u64) -> RateLimitDescriptor {
    let mut d = desc(&[(key, value)]);
    d.hits_addend = Some(UInt64Value { value: n });
    d
}

fn call(descriptors: Vec<RateLimitDescriptor>) -> RateLimitRequest {
    RateLimitRequest {
        domain: "ai".to_owned(),
        descriptors,
        hits_addend: 0,
    }
}

/// A descriptor giving `n` back (`is_negative_hits`).
fn give_back(key: &str, value: &str, n: u64) -> RateLimitDescriptor {
    let mut d = hits(key, value, n);
    d.is_negative_hits = true;
    d
}

/// (overall code, each status's (code, limit_remaining)).
fn answer(rls: &mut Rls, descriptors: Vec<RateLimitDescriptor>) -> (Code, Vec<(Code, u32)>) {
    let r = rls.ok(call(descriptors));
    let statuses = r
        .statuses
        .iter()
        .map(|s| (code(s.code), s.limit_remaining))
        .collect();
    (code(r.overall_code), statuses)
}

/// The debt of `rule`'s counter `key` and its remaining, as the HTTP API
/// reads them (a charge of 0 changes nothing).
fn debt(rls: &Rls, rule: &str, key: &str) -> (u64, u64) {
    let body = format!(r#"{{"rule":"{rule}","key":"{key}","cost":0}}"#);
    let r = support::post_json(rls.server.api(), "/v1/charge", &body);
    assert_eq!(r.status, 200, "{}", r.text());
    let j = r.json();
    (
        j["debt"].as_u64().expect("debt"),
        j["remaining"].as_u64().expect("remaining"),
    )
}

#[test]
fn a_response_phase_charge_past_the_limit_is_recorded_and_the_next_peek_is_over() {
    // The issue's case: 100 per minute, 80 charged, then the response of a
    // request admitted at 20 remaining reports 50: all 50 are recorded
    // (130 used, 30 in debt) and the next request-phase peek is OVER_LIMIT.
    let mut rls = start("memory");
    away_from_a_window_edge(60, Duration::from_secs(15));
    assert_eq!(
        answer(&mut rls, vec![hits("tokens", "team-a", 80)]),
        (Code::Ok, vec![(Code::Ok, 20)])
    );
    // The request phase peeks: admitted, nothing consumed.
    for _ in 0..3 {
        assert_eq!(
            answer(&mut rls, vec![hits("tokens", "team-a", 0)]),
            (Code::Ok, vec![(Code::Ok, 20)])
        );
    }
    // The response phase charges 50: recorded in full, answered OK.
    assert_eq!(
        answer(&mut rls, vec![hits("tokens", "team-a", 50)]),
        (Code::Ok, vec![(Code::Ok, 0)])
    );
    assert_eq!(debt(&rls, "envoy.ai.tokens", "tokens=team-a"), (30, 0));
    // Every later peek is over until the window ends; nothing is consumed
    // by them, and another team is untouched.
    for _ in 0..3 {
        assert_eq!(
            answer(&mut rls, vec![hits("tokens", "team-a", 0)]),
            (Code::OverLimit, vec![(Code::OverLimit, 0)])
        );
    }
    assert_eq!(debt(&rls, "envoy.ai.tokens", "tokens=team-a"), (30, 0));
    assert_eq!(
        answer(&mut rls, vec![hits("tokens", "team-b", 0)]),
        (Code::Ok, vec![(Code::Ok, 100)])
    );
    // The request-level hits_addend 0 still means 1: a descriptor without
    // its own hits_addend on a charged limit is a charge of 1.
    assert_eq!(
        answer(&mut rls, vec![desc(&[("tokens", "team-a")])]),
        (Code::Ok, vec![(Code::Ok, 0)])
    );
    assert_eq!(debt(&rls, "envoy.ai.tokens", "tokens=team-a"), (31, 0));
}

#[test]
fn a_peek_at_exactly_the_limit_is_ok_and_over_it_waits_for_time_to_pay_the_debt() {
    let mut rls = start("memory");
    // GCRA, 100 per hour: one unit comes back every 36 s, far beyond any
    // pause of a loaded machine between two calls, so the counts are
    // exact. Exactly at the limit is not over.
    assert_eq!(
        answer(&mut rls, vec![hits("slow", "a", 100)]),
        (Code::Ok, vec![(Code::Ok, 0)])
    );
    assert_eq!(
        answer(&mut rls, vec![hits("slow", "a", 0)]),
        (Code::Ok, vec![(Code::Ok, 0)])
    );
    // 150 more: 150 units of debt, and a peek is over while it lasts.
    assert_eq!(
        answer(&mut rls, vec![hits("slow", "a", 150)]),
        (Code::Ok, vec![(Code::Ok, 0)])
    );
    let (debt_now, _) = debt(&rls, "envoy.ai.slow", "slow=a");
    assert!(
        (140..=150).contains(&debt_now),
        "about 150 in debt: {debt_now}"
    );
    assert_eq!(
        answer(&mut rls, vec![hits("slow", "a", 0)]),
        (Code::OverLimit, vec![(Code::OverLimit, 0)])
    );
    // Time pays the debt: GCRA, 100 per second (T = 10 ms), the limit and
    // 150 more taken at once leave 1.5 s of payback. A sleep of 1.9 s is at
    // least that however the machine schedules, so only the wait, never
    // its lateness, is asserted.
    assert_eq!(
        answer(&mut rls, vec![hits("fast", "a", 250)]),
        (Code::Ok, vec![(Code::Ok, 0)])
    );
    std::thread::sleep(Duration::from_millis(1900));
    let (code_after, statuses) = answer(&mut rls, vec![hits("fast", "a", 0)]);
    assert_eq!(code_after, Code::Ok, "the debt is paid back by 1.5 s");
    assert_eq!(statuses[0].0, Code::Ok);
    assert_eq!(debt(&rls, "envoy.ai.fast", "fast=a").0, 0);
}

#[test]
fn checks_stay_all_or_nothing_and_charges_in_the_same_call_are_never_refused() {
    let mut rls = start("memory");
    away_from_a_window_edge(60, Duration::from_secs(15));
    // rps (2 per hour) is checked, tokens charged, audit (shadow) charged.
    let both = || {
        vec![
            desc(&[("rps", "team-a")]),
            hits("tokens", "team-a", 70),
            hits("audit", "team-a", 6),
        ]
    };
    assert_eq!(
        answer(&mut rls, both()),
        (Code::Ok, vec![(Code::Ok, 1), (Code::Ok, 30), (Code::Ok, 4)])
    );
    assert_eq!(
        answer(&mut rls, both()),
        (Code::Ok, vec![(Code::Ok, 0), (Code::Ok, 0), (Code::Ok, 0)])
    );
    // The check is now over: the request is OVER_LIMIT, the check consumes
    // nothing, and the charges are recorded all the same (usage already
    // spent cannot be refused); the shadow limit, in debt, still reads OK.
    assert_eq!(
        answer(&mut rls, both()),
        (
            Code::OverLimit,
            vec![(Code::OverLimit, 0), (Code::Ok, 0), (Code::Ok, 0)]
        )
    );
    assert_eq!(debt(&rls, "envoy.ai.tokens", "tokens=team-a"), (110, 0));
    assert_eq!(debt(&rls, "envoy.ai.audit", "audit=team-a"), (8, 0));
    assert_eq!(debt(&rls, "envoy.ai.rps", "rps=team-a"), (0, 0));
    // A peek of an over limit in the request denies its checks: the
    // request's checks and peeks are one all-or-nothing decision.
    assert_eq!(
        answer(
            &mut rls,
            vec![desc(&[("rps", "team-b")]), hits("tokens", "team-a", 0)]
        ),
        (Code::OverLimit, vec![(Code::Ok, 2), (Code::OverLimit, 0)])
    );
    assert_eq!(debt(&rls, "envoy.ai.rps", "rps=team-b"), (0, 2));
}

#[test]
fn huge_costs_clamp_at_the_debt_cap_and_are_counted() {
    let mut rls = start("memory");
    away_from_a_window_edge(60, Duration::from_secs(15));
    // A charge of 2^64 - 1: recorded up to the cap (100 x the limit over
    // it), the rest clamped and counted, no overflow, answered OK.
    assert_eq!(
        answer(&mut rls, vec![hits("tokens", "huge", u64::MAX)]),
        (Code::Ok, vec![(Code::Ok, 0)])
    );
    assert_eq!(debt(&rls, "envoy.ai.tokens", "tokens=huge"), (10_000, 0));
    let metrics = support::get(rls.server.api(), "/metrics").text();
    let clamped = metrics
        .lines()
        .find(|l| {
            l.starts_with("tollgate_charge_clamped_units_total{")
                && l.contains("rule=\"envoy.ai.tokens\"")
        })
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse::<f64>().ok())
        .unwrap_or_else(|| panic!("no clamped units counted:\n{metrics}"));
    #[allow(clippy::cast_precision_loss)]
    let expected = (u64::MAX - 10_100) as f64;
    assert!((clamped - expected).abs() / expected < 1e-9, "{clamped}");
    // A huge check of a checked limit is over and consumes nothing.
    assert_eq!(
        answer(&mut rls, vec![hits("rps", "huge", u64::MAX)]),
        (Code::OverLimit, vec![(Code::OverLimit, 2)])
    );
    assert_eq!(debt(&rls, "envoy.ai.rps", "rps=huge"), (0, 2));
}

#[test]
fn a_charge_on_one_replica_is_seen_by_a_peek_on_another() {
    let redis = RedisServer::start();
    let mut a = start(&redis.url());
    let mut b = start(&redis.url());
    away_from_a_window_edge(60, Duration::from_secs(15));
    assert_eq!(
        answer(&mut a, vec![hits("tokens", "fleet", 80)]),
        (Code::Ok, vec![(Code::Ok, 20)])
    );
    assert_eq!(
        answer(&mut b, vec![hits("tokens", "fleet", 0)]),
        (Code::Ok, vec![(Code::Ok, 20)])
    );
    assert_eq!(
        answer(&mut b, vec![hits("tokens", "fleet", 50)]),
        (Code::Ok, vec![(Code::Ok, 0)])
    );
    assert_eq!(
        answer(&mut a, vec![hits("tokens", "fleet", 0)]),
        (Code::OverLimit, vec![(Code::OverLimit, 0)])
    );
    assert_eq!(debt(&a, "envoy.ai.tokens", "tokens=fleet"), (30, 0));
    // A give-back on one replica is seen by the other too.
    assert_eq!(
        answer(&mut b, vec![give_back("tokens", "fleet", 50)]),
        (Code::Ok, vec![(Code::Ok, 20)])
    );
    assert_eq!(
        answer(&mut a, vec![hits("tokens", "fleet", 0)]),
        (Code::Ok, vec![(Code::Ok, 20)])
    );
}

#[test]
fn a_charge_the_store_cannot_take_follows_the_policy_and_is_counted() {
    for (policy, want) in [("allow", Code::Ok), ("deny", Code::OverLimit)] {
        let redis = RedisServer::start();
        let config = format!(
            "[store]\nurl = \"{}\"\ntimeout = \"200ms\"\non_error = \"{policy}\"\n\n\
             [[rules]]\nname = \"http_rule\"\nalgorithm = \"gcra\"\nlimit = 1\nperiod = \"1s\"\n",
            redis.url()
        );
        let mut rls = Rls::start_with(&config, AI, &["--http", "127.0.0.1:0"]);
        assert_eq!(
            answer(&mut rls, vec![hits("fast", "f", 10)]),
            (Code::Ok, vec![(Code::Ok, 90)])
        );
        redis.kill();
        let r = rls.ok(call(vec![hits("fast", "f", 25), hits("audit", "f", 5)]));
        assert_eq!(code(r.overall_code), want, "{policy}: {r:?}");
        assert_eq!(code(r.statuses[0].code), want, "{policy}: {r:?}");
        // Under allow nothing was decided: no limit, no numbers; under
        // deny the limit is named. The shadow limit never fails the call.
        assert_eq!(
            r.statuses[0].current_limit.is_some(),
            policy == "deny",
            "{policy}: {r:?}"
        );
        assert_eq!(code(r.statuses[1].code), Code::Ok, "{policy}: {r:?}");
        let metrics = support::get(rls.server.api(), "/metrics").text();
        let unrecorded = metrics.lines().find(|l| {
            l.starts_with("tollgate_charge_unrecorded_units_total{")
                && l.contains("rule=\"envoy.ai.fast\"")
        });
        assert!(
            unrecorded.is_some_and(|l| l.ends_with(" 25")),
            "{policy}: {unrecorded:?}\n{metrics}"
        );
    }
}

#[test]
fn one_call_charging_a_key_twice_records_both_and_gives_back_after_charging() {
    let mut rls = start("memory");
    away_from_a_window_edge(60, Duration::from_secs(15));
    let (overall, statuses) = answer(
        &mut rls,
        vec![hits("tokens", "twice", 60), hits("tokens", "twice", 70)],
    );
    assert_eq!(overall, Code::Ok);
    assert_eq!(statuses.len(), 2);
    assert!(statuses.iter().all(|s| s.0 == Code::Ok), "{statuses:?}");
    assert_eq!(debt(&rls, "envoy.ai.tokens", "tokens=twice"), (30, 0));
    // Charges are recorded before give-backs of the same call, so they net
    // out: on a fresh key, 10 charged and 40 given back leave nothing used
    // (the other order would give back from empty, then leave 10).
    assert_eq!(
        answer(
            &mut rls,
            vec![give_back("tokens", "net", 40), hits("tokens", "net", 10)]
        ),
        (Code::Ok, vec![(Code::Ok, 100), (Code::Ok, 90)])
    );
    assert_eq!(debt(&rls, "envoy.ai.tokens", "tokens=net"), (0, 100));
}

#[test]
fn serve_refuses_a_charge_it_cannot_apply_naming_the_field() {
    for (yaml, field, why) in [
        (
            "domain: ai\ndescriptors:\n  - key: slots\n    rate_limit:\n      unit: minute\n      requests_per_unit: 4\n      algorithm: concurrency\n      charge: true\n",
            "rls.yaml:7: descriptors[0].rate_limit.algorithm:",
            "concurrency is not a rate",
        ),
        (
            "domain: ai\ndescriptors:\n  - key: free\n    rate_limit:\n      unlimited: true\n      charge: true\n",
            "rls.yaml:6: descriptors[0].rate_limit.charge:",
            "charge needs a counted limit",
        ),
        (
            "domain: ai\ndescriptors:\n  - key: t\n    rate_limit:\n      unit: minute\n      requests_per_unit: 4\n      charge: always\n",
            "rls.yaml:7: descriptors[0].rate_limit.charge:",
            "expected a boolean",
        ),
    ] {
        let (_dir, path) = yaml_file(yaml);
        let path = path.to_str().expect("utf-8 path");
        let out = support::serve_output(
            &toml("memory"),
            &["--grpc", "127.0.0.1:0", "--envoy-config", path],
        );
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{stderr}");
        assert!(stderr.contains(field) && stderr.contains(why), "{stderr}");
    }
}

#[test]
fn negative_hits_give_units_back_never_past_empty() {
    let mut rls = start("memory");
    away_from_a_window_edge(60, Duration::from_secs(15));
    assert_eq!(
        answer(&mut rls, vec![hits("tokens", "back", 130)]),
        (Code::Ok, vec![(Code::Ok, 0)])
    );
    assert_eq!(
        answer(&mut rls, vec![hits("tokens", "back", 0)]),
        (Code::OverLimit, vec![(Code::OverLimit, 0)])
    );
    // 50 back: 80 used, the debt gone, the peek admitted again. A give-back
    // answers OK, with the state after it.
    assert_eq!(
        answer(&mut rls, vec![give_back("tokens", "back", 50)]),
        (Code::Ok, vec![(Code::Ok, 20)])
    );
    assert_eq!(debt(&rls, "envoy.ai.tokens", "tokens=back"), (0, 20));
    assert_eq!(
        answer(&mut rls, vec![hits("tokens", "back", 0)]),
        (Code::Ok, vec![(Code::Ok, 20)])
    );
    // 500 back: empty, not past it (no credit beyond the limit).
    assert_eq!(
        answer(&mut rls, vec![give_back("tokens", "back", 500)]),
        (Code::Ok, vec![(Code::Ok, 100)])
    );
    assert_eq!(
        answer(&mut rls, vec![hits("tokens", "back", 101)]),
        (Code::Ok, vec![(Code::Ok, 0)])
    );
    assert_eq!(debt(&rls, "envoy.ai.tokens", "tokens=back"), (1, 0));
    // Without its own hits_addend a give-back takes the request's, 0
    // meaning 1.
    let mut one_back = desc(&[("tokens", "back")]);
    one_back.is_negative_hits = true;
    assert_eq!(
        answer(&mut rls, vec![one_back]),
        (Code::Ok, vec![(Code::Ok, 0)])
    );
    assert_eq!(debt(&rls, "envoy.ai.tokens", "tokens=back"), (0, 0));
}

#[test]
fn negative_hits_give_back_on_checked_and_gcra_limits_too() {
    let mut rls = start("memory");
    // A checked limit (2 per hour): spent, one given back, one more
    // admitted, and no more.
    for want in [Code::Ok, Code::Ok, Code::OverLimit] {
        assert_eq!(answer(&mut rls, vec![desc(&[("rps", "g")])]).0, want);
    }
    assert_eq!(
        answer(&mut rls, vec![give_back("rps", "g", 1)]),
        (Code::Ok, vec![(Code::Ok, 1)])
    );
    assert_eq!(answer(&mut rls, vec![desc(&[("rps", "g")])]).0, Code::Ok);
    assert_eq!(
        answer(&mut rls, vec![desc(&[("rps", "g")])]).0,
        Code::OverLimit
    );
    // GCRA: a charge of 250 (150 in debt) and 250 back: full again; 1000
    // more back leaves it full.
    answer(&mut rls, vec![hits("fast", "g", 250)]);
    assert_eq!(
        answer(&mut rls, vec![give_back("fast", "g", 250)]).0,
        Code::Ok
    );
    assert_eq!(debt(&rls, "envoy.ai.fast", "fast=g"), (0, 100));
    assert_eq!(
        answer(&mut rls, vec![give_back("fast", "g", 1000)]),
        (Code::Ok, vec![(Code::Ok, 100)])
    );
    assert_eq!(debt(&rls, "envoy.ai.fast", "fast=g"), (0, 100));
    // A give-back never makes a call OVER_LIMIT, even in debt; one to a key
    // never seen creates nothing.
    answer(&mut rls, vec![hits("tokens", "g", 150)]);
    assert_eq!(
        answer(&mut rls, vec![give_back("tokens", "g", 10)]),
        (Code::Ok, vec![(Code::Ok, 0)])
    );
    assert_eq!(debt(&rls, "envoy.ai.tokens", "tokens=g"), (40, 0));
    assert_eq!(
        answer(&mut rls, vec![give_back("tokens", "never", 10)]),
        (Code::Ok, vec![(Code::Ok, 100)])
    );
}
