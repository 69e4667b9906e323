//! `StreamState::answer` over a memory-store gate: what each report is
//! answered, the leases it takes and gives back, and the reports a stream
//! is ended on.

use std::collections::HashMap;
use std::time::Duration;

use envoy_types::pb::envoy::r#type::v3::rate_limit_strategy::{BlanketRule, Strategy};
use envoy_types::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_response::bucket_action::BucketAction as Action;
use envoy_types::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_usage_reports::BucketQuotaUsage;
use envoy_types::pb::envoy::service::rate_limit_quota::v3::{
    BucketId, RateLimitQuotaResponse, RateLimitQuotaUsageReports,
};
use tollgate::store::memory::MemoryStore;

use super::holders::Holders;
use super::stream::{Env, StreamState};
use crate::config::{Config, RlqsConfig};
use crate::gate::Gate;

const LIMIT: u64 = 100;

fn gate() -> Gate {
    let config = Config::parse(
        &format!(
            "[[rules]]\nname = \"api\"\nalgorithm = \"fixed_window\"\nlimit = {LIMIT}\nperiod = \"1h\"\n\
             [[rules]]\nname = \"slots\"\nalgorithm = \"concurrency\"\nlimit = 5\nlease = \"1m\"\n"
        ),
        "t.toml",
    )
    .expect("config");
    Gate::new(&config, &[], MemoryStore::new().into()).expect("gate")
}

/// A bucket id's entries, its allowed and denied requests.
type Usage<'a> = (&'a [(&'a str, &'a str)], u64, u64);

fn report(domain: &str, buckets: &[Usage<'_>]) -> RateLimitQuotaUsageReports {
    RateLimitQuotaUsageReports {
        domain: domain.to_owned(),
        bucket_quota_usages: buckets
            .iter()
            .map(|(id, allowed, denied)| BucketQuotaUsage {
                bucket_id: Some(BucketId {
                    bucket: id
                        .iter()
                        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                        .collect::<HashMap<_, _>>(),
                }),
                time_elapsed: None,
                num_requests_allowed: *allowed,
                num_requests_denied: *denied,
            })
            .collect(),
    }
}

/// Each action of `response` as (its bucket's tenant, what it assigns):
/// `Ok(tokens)` for a token bucket, `Err(name)` otherwise.
fn assigned(response: &RateLimitQuotaResponse) -> Vec<Result<u32, &'static str>> {
    response
        .bucket_action
        .iter()
        .map(|a| match a.bucket_action.as_ref().expect("an action") {
            Action::AbandonAction(_) => Err("abandon"),
            Action::QuotaAssignmentAction(q) => {
                assert!(q.assignment_time_to_live.expect("ttl").seconds >= 1);
                match q.rate_limit_strategy.expect("strategy").strategy {
                    Some(Strategy::TokenBucket(tb)) => Ok(tb.max_tokens),
                    Some(Strategy::BlanketRule(r)) if r == BlanketRule::DenyAll as i32 => {
                        Err("deny")
                    }
                    Some(Strategy::BlanketRule(_)) => Err("allow"),
                    _ => Err("other"),
                }
            }
        })
        .collect()
}

/// What a report needs, over the test's gate, table and holders.
fn env_of<'a>(gate: &'a Gate, config: &'a RlqsConfig, holders: &'a Holders) -> Env<'a> {
    Env {
        gate,
        config,
        holders,
    }
}

const ACME: &[(&str, &str)] = &[("name", "api"), ("tenant", "acme")];

#[tokio::test]
async fn a_first_report_leases_the_fair_share_and_the_store_counts_it() {
    let (gate, config, holders) = (gate(), RlqsConfig::default(), Holders::default());
    let env = env_of(&gate, &config, &holders);
    let mut s = StreamState::default();
    let r = s
        .answer(report("d", &[(ACME, 1, 0)]), &env)
        .await
        .expect("answered");
    assert_eq!(assigned(&r), [Err("deny"), Ok(50)]);
    // 50 leased + the 1 Envoy admitted before the first assignment.
    let seen = gate.inspect("api", b"tenant=acme").await.expect("inspect");
    assert_eq!(seen.decision.remaining, LIMIT - 51, "{seen:?}");
}

#[tokio::test]
async fn the_leases_of_a_window_never_exceed_the_limit_and_unspent_units_come_back() {
    let (gate, config, holders) = (gate(), RlqsConfig::default(), Holders::default());
    let env = env_of(&gate, &config, &holders);
    let mut s = StreamState::default();
    let first = s
        .answer(report("d", &[(ACME, 0, 0)]), &env)
        .await
        .expect("answered");
    assert_eq!(assigned(&first), [Err("deny"), Ok(50)]);
    // Spent it all, and 500 more were denied: the cap again.
    let mut granted = 50;
    let mut answers = Vec::new();
    for _ in 0..4 {
        let r = s
            .answer(report("d", &[(ACME, 50, 500)]), &env)
            .await
            .expect("answered");
        let a = assigned(&r);
        if let Some(Ok(n)) = a.last() {
            granted += u64::from(*n);
        }
        answers.push(a);
    }
    assert!(granted <= LIMIT, "{granted}: {answers:?}");
    assert_eq!(answers[0], [Err("deny"), Ok(50)]);
    assert_eq!(
        answers[1],
        [Err("deny")],
        "the window is spent: {answers:?}"
    );
    // Nothing spent of a lease: it all comes back at the next report.
    let mut idle = StreamState::default();
    let t: &[(&str, &str)] = &[("name", "api"), ("tenant", "idle")];
    idle.answer(report("d", &[(t, 0, 0)]), &env)
        .await
        .expect("answered");
    idle.answer(report("d", &[(t, 0, 0)]), &env)
        .await
        .expect("answered");
    let seen = gate.inspect("api", b"tenant=idle").await.expect("inspect");
    assert_eq!(
        seen.decision.remaining,
        LIMIT - 1,
        "only the idle unit is held: {seen:?}"
    );
}

#[tokio::test]
async fn a_bucket_named_twice_in_a_report_is_one_bucket() {
    let (gate, config, holders) = (gate(), RlqsConfig::default(), Holders::default());
    let env = env_of(&gate, &config, &holders);
    let mut s = StreamState::default();
    let r = s
        .answer(report("d", &[(ACME, 1, 0), (ACME, 2, 0)]), &env)
        .await
        .expect("answered");
    assert_eq!(assigned(&r), [Err("deny"), Ok(50)]);
    assert_eq!(s.len(), 1);
    let target = ("api".to_owned(), "tenant=acme".to_owned());
    assert_eq!(holders.count(&target, std::time::Instant::now()).0, 1);
    s.close(&holders);
    let now = std::time::Instant::now();
    // Envoy may spend the lease until its TTL: it counts until then.
    assert_eq!(holders.count(&target, now), (1, 50), "no holder, the lease");
    assert_eq!(
        holders.count(&target, now + config.assignment_ttl),
        (1, 0),
        "none left: counts as the asker"
    );
}

#[tokio::test]
async fn buckets_of_no_rule_get_unmatched_and_concurrency_rules_are_no_rule() {
    let (gate, holders) = (gate(), Holders::default());
    let mut config = RlqsConfig::default();
    let env = env_of(&gate, &config, &holders);
    let mut s = StreamState::default();
    let r = s
        .answer(
            report(
                "d",
                &[
                    (&[("name", "nope")], 1, 0),
                    (&[("name", "slots")], 1, 0),
                    (&[("x", "y")], 1, 0),
                ],
            ),
            &env,
        )
        .await
        .expect("answered");
    assert_eq!(assigned(&r), [Err("allow"), Err("allow"), Err("allow")]);
    config.unmatched = crate::config::Unmatched::Deny;
    let env = env_of(&gate, &config, &holders);
    let r = s
        .answer(report("d", &[(&[("name", "nope")], 0, 0)]), &env)
        .await
        .expect("answered");
    assert_eq!(assigned(&r), [Err("deny")]);
}

#[tokio::test]
async fn a_report_the_stream_cannot_take_ends_it_with_a_status_naming_why() {
    let (gate, holders) = (gate(), Holders::default());
    let config = RlqsConfig {
        max_buckets_per_stream: 2,
        ..RlqsConfig::default()
    };
    let env = env_of(&gate, &config, &holders);
    let mut s = StreamState::default();
    let e = s
        .answer(report("", &[(ACME, 0, 0)]), &env)
        .await
        .expect_err("no domain");
    assert_eq!(e.code(), tonic::Code::InvalidArgument);
    s.answer(report("d", &[(ACME, 0, 0)]), &env)
        .await
        .expect("answered");
    let e = s
        .answer(report("other", &[(ACME, 0, 0)]), &env)
        .await
        .expect_err("domain");
    assert!(e.message().contains("\"other\""), "{e:?}");
    let e = s
        .answer(report("d", &[]), &env)
        .await
        .expect_err("no bucket");
    assert_eq!(e.code(), tonic::Code::InvalidArgument);
    let e = s
        .answer(report("d", &[(&[], 0, 0)]), &env)
        .await
        .expect_err("empty id");
    assert!(e.message().contains("without entries"), "{e:?}");
}

/// Buckets a stream may not hold (past `max_buckets_per_stream`, or an id
/// over 1 KiB) are not held and do not end the stream, which would leave
/// Envoy on its fallback for good: denied while they have traffic,
/// abandoned once idle.
#[tokio::test]
async fn buckets_past_the_cap_or_too_long_are_denied_or_abandoned_not_held() {
    let (gate, holders) = (gate(), Holders::default());
    let config = RlqsConfig {
        max_buckets_per_stream: 2,
        ..RlqsConfig::default()
    };
    let env = env_of(&gate, &config, &holders);
    let mut s = StreamState::default();
    let long = "x".repeat(2000);
    let huge: &[(&str, &str)] = &[("name", "api"), ("tenant", &long)];
    let r = s
        .answer(report("d", &[(huge, 1, 0)]), &env)
        .await
        .expect("answered");
    assert_eq!(assigned(&r), [Err("deny")]);
    assert_eq!(s.len(), 0);
    let three: [Usage<'_>; 3] = [
        (&[("name", "api"), ("t", "1")], 0, 0),
        (&[("name", "api"), ("t", "2")], 0, 0),
        (&[("name", "api"), ("t", "3")], 4, 0),
    ];
    let r = s.answer(report("d", &three), &env).await.expect("answered");
    assert_eq!(s.len(), 2);
    assert_eq!(
        assigned(&r),
        [Err("deny"), Err("deny"), Ok(50), Err("deny"), Ok(50)],
        "the third is refused first in the answer, then the two held"
    );
    let idle: [Usage<'_>; 1] = [(&[("name", "api"), ("t", "9")], 0, 0)];
    let r = s.answer(report("d", &idle), &env).await.expect("answered");
    assert_eq!(assigned(&r), [Err("abandon")]);
    let seen = gate.inspect("api", b"t=3").await.expect("inspect");
    assert_eq!(
        seen.decision.remaining, LIMIT,
        "a refused bucket is not counted: {seen:?}"
    );
}

#[tokio::test]
async fn an_idle_bucket_is_abandoned_after_abandon_after_and_its_lease_returned() {
    let (gate, holders) = (gate(), Holders::default());
    let config = RlqsConfig {
        report_period: Duration::from_secs(1),
        abandon_after: Duration::from_secs(1),
        assignment_ttl: Duration::from_secs(2),
        ..RlqsConfig::default()
    };
    let env = env_of(&gate, &config, &holders);
    let mut s = StreamState::default();
    let r = s
        .answer(report("d", &[(ACME, 0, 0)]), &env)
        .await
        .expect("answered");
    assert_eq!(assigned(&r), [Err("deny"), Ok(50)]);
    // Idle from here: not yet abandoned at the first idle report.
    let r = s
        .answer(report("d", &[(ACME, 0, 0)]), &env)
        .await
        .expect("answered");
    assert_eq!(assigned(&r), [Err("deny"), Ok(1)]);
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let r = s
        .answer(report("d", &[(ACME, 0, 0)]), &env)
        .await
        .expect("answered");
    assert_eq!(assigned(&r), [Err("abandon")]);
    assert_eq!(s.len(), 0);
    let seen = gate.inspect("api", b"tenant=acme").await.expect("inspect");
    assert_eq!(
        seen.decision.remaining, LIMIT,
        "every lease settled at 0: {seen:?}"
    );
}

#[tokio::test]
async fn a_reconnects_first_report_is_not_charged_again() {
    let (gate, config, holders) = (gate(), RlqsConfig::default(), Holders::default());
    let env = env_of(&gate, &config, &holders);
    let mut old = StreamState::default();
    let r = old
        .answer(report("d", &[(ACME, 0, 0)]), &env)
        .await
        .expect("answered");
    assert_eq!(assigned(&r), [Err("deny"), Ok(50)]);
    old.close(&holders);
    // Envoy reconnects: its first message is periodic (`time_elapsed`
    // 5 s) and reports 30 requests spent from the old stream's lease,
    // which stays counted.
    let mut periodic = report("d", &[(ACME, 30, 0)]);
    periodic.bucket_quota_usages[0].time_elapsed =
        Some(envoy_types::pb::google::protobuf::Duration {
            seconds: 5,
            nanos: 0,
        });
    let mut new = StreamState::default();
    let r = new.answer(periodic, &env).await.expect("answered");
    // The old lease (50) and this one's fair share (25 left of half): no
    // second charge of the 30.
    let seen = gate.inspect("api", b"tenant=acme").await.expect("inspect");
    let Some(Ok(leased)) = assigned(&r).last().copied() else {
        panic!("{r:?}")
    };
    assert_eq!(
        seen.decision.remaining,
        LIMIT - 50 - u64::from(leased),
        "{seen:?}"
    );
}

#[tokio::test]
async fn a_refused_report_still_lets_close_release_its_buckets_holders() {
    let (gate, holders) = (gate(), Holders::default());
    let config = RlqsConfig {
        max_buckets_per_stream: 2,
        ..RlqsConfig::default()
    };
    let env = env_of(&gate, &config, &holders);
    let target = ("api".to_owned(), "tenant=acme".to_owned());
    let other: &[(&str, &str)] = &[("name", "api"), ("tenant", "b")];
    let third: &[(&str, &str)] = &[("name", "api"), ("tenant", "c")];
    let _ = (other, third);
    // A bucket id without entries after a held bucket.
    for bad in [report("d", &[(ACME, 0, 0), (&[], 0, 0)])] {
        let mut s = StreamState::default();
        s.answer(report("d", &[(ACME, 0, 0)]), &env)
            .await
            .expect("answered");
        assert_eq!(holders.count(&target, std::time::Instant::now()).0, 1);
        s.answer(bad, &env).await.expect_err("refused");
        s.close(&holders);
        let mut fresh = StreamState::default();
        fresh
            .answer(report("d", &[(ACME, 0, 0)]), &env)
            .await
            .expect("answered");
        assert_eq!(
            holders.count(&target, std::time::Instant::now()).0,
            1,
            "a holder leaked"
        );
        fresh.close(&holders);
    }
}

/// Streams subscribing one after another each get their fair share at
/// the time, but together never more than half the limit (the reviewer's
/// run of four first reports leased 60 + 30 + 20 + 10 of 120 before).
#[tokio::test]
async fn first_reports_in_a_row_lease_at_most_half_the_limit_together() {
    let (gate, config, holders) = (gate(), RlqsConfig::default(), Holders::default());
    let env = env_of(&gate, &config, &holders);
    let mut streams: Vec<StreamState> = (0..4).map(|_| StreamState::default()).collect();
    let mut leased = 0;
    for s in &mut streams {
        let r = s
            .answer(report("d", &[(ACME, 1, 0)]), &env)
            .await
            .expect("answered");
        if let Some(Ok(n)) = assigned(&r).last() {
            leased += u64::from(*n);
        }
    }
    // One unit at least each, so every stream can admit.
    assert!(leased <= LIMIT / 2 + 3, "{leased} of {LIMIT}");
    let target = ("api".to_owned(), "tenant=acme".to_owned());
    assert_eq!(
        holders.count(&target, std::time::Instant::now()),
        (4, leased)
    );
    for s in &mut streams {
        s.close(&holders);
    }
    let now = std::time::Instant::now();
    assert_eq!(holders.count(&target, now), (1, leased), "until their TTL");
    assert_eq!(holders.count(&target, now + config.assignment_ttl), (1, 0));
}

/// A stream that ends leaves its lease counted until the TTL: Envoy
/// keeps spending it, so a stream opened meanwhile does not get that room
/// again (before, one window could admit twice the limit).
#[tokio::test]
async fn a_closed_streams_lease_keeps_its_room_until_its_ttl() {
    let (gate, config, holders) = (gate(), RlqsConfig::default(), Holders::default());
    let env = env_of(&gate, &config, &holders);
    let mut first = StreamState::default();
    let r = first
        .answer(report("d", &[(ACME, 0, 0)]), &env)
        .await
        .expect("answered");
    let Some(Ok(a)) = assigned(&r).last().copied() else {
        panic!("{r:?}")
    };
    first.close(&holders);
    let mut second = StreamState::default();
    let r = second
        .answer(report("d", &[(ACME, 0, 0)]), &env)
        .await
        .expect("answered");
    let Some(Ok(b)) = assigned(&r).last().copied() else {
        panic!("{r:?}")
    };
    // Half the limit is the most leased at once, the closed stream's lease
    // included (one unit at least for the asker).
    assert!(
        u64::from(a) + u64::from(b) <= LIMIT / 2 + 1,
        "{a} + {b} of {LIMIT}"
    );
}
