//! How much a stream is leased for a bucket, and the assignment Envoy is
//! sent for it (docs/rlqs.md, "Shares"). Pure: numbers in, a
//! `BucketAction` out.

use std::time::Duration;

use envoy_types::pb::envoy::r#type::v3::rate_limit_strategy::{BlanketRule, Strategy};
use envoy_types::pb::envoy::r#type::v3::{RateLimitStrategy, TokenBucket};
use envoy_types::pb::envoy::service::rate_limit_quota::v3::BucketId;
use envoy_types::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_response::BucketAction;
use envoy_types::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_response::bucket_action::{
    AbandonAction, BucketAction as Action, QuotaAssignmentAction,
};
use envoy_types::pb::google::protobuf::Duration as ProtoDuration;

use super::bucket::BucketName;

/// Head room on the demand a stream reported, as a fraction (3/2): a
/// stream whose traffic grows still finds units at hand before its next
/// report.
const GROWTH: (u128, u128) = (3, 2);

/// What a bucket is assigned for the next report period.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Assignment {
    /// A lease of this many units (at least 1): a token bucket that holds
    /// them and never refills.
    Grant(u64),
    /// `ALLOW_ALL`: no rule, or the store failed under `on_error = "allow"`.
    AllowAll,
    /// `DENY_ALL`: nothing left, blocked, no rule under `unmatched =
    /// "deny"`, or the store failed under `on_error = "deny"`.
    DenyAll,
    /// Idle too long: Envoy forgets the bucket.
    Abandon,
}

impl Assignment {
    /// The `kind` label of `tollgate_rlqs_assignments_total`.
    #[must_use]
    pub fn kind(self) -> &'static str {
        match self {
            Assignment::Grant(_) => "token_bucket",
            Assignment::AllowAll => "allow_all",
            Assignment::DenyAll => "deny_all",
            Assignment::Abandon => "abandon",
        }
    }
}

/// The most one stream may hold of a bucket whose limit is `limit`, with
/// `holders` streams holding it across the fleet: together they hold at
/// most half the limit, so a share can never take a whole window, as the
/// hybrid store's batches cannot (docs/hybrid.md). At least 1.
#[must_use]
pub fn cap(limit: u64, holders: u64) -> u64 {
    (limit / holders.max(1).saturating_mul(2)).max(1)
}

/// Units to lease a stream for the next `period`: the demand it reported
/// (`allowed` + `denied` over `elapsed`, measured by tollgate) scaled to
/// the period with head room, plus one so an idle stream still admits its
/// next request; at most `cap`.
#[must_use]
pub fn wanted(allowed: u64, denied: u64, elapsed: Duration, period: Duration, cap: u64) -> u64 {
    let demand = u128::from(allowed) + u128::from(denied);
    // A report sooner than a period (a new bucket's first) is scaled as a
    // whole period's: no burst is multiplied by a tiny elapsed time.
    let elapsed = elapsed.max(period).as_micros().max(1);
    let scaled = (demand * GROWTH.0 * period.as_micros()).div_ceil(GROWTH.1 * elapsed);
    u64::try_from(scaled)
        .unwrap_or(u64::MAX)
        .saturating_add(1)
        .min(cap)
        .max(1)
}

/// The actions answering bucket `name` with `assignment`, alive for `ttl`
/// (whole seconds: Envoy reads no more). A grant is two: `DENY_ALL`, then
/// the token bucket. Envoy 1.40 carries a token bucket's tokens over into
/// the next one it is sent (its share of them when the size changes), so
/// a lease would come on top of what is left, or nothing after a spent
/// one; after a blanket rule the token bucket starts full, with exactly
/// the lease. Envoy applies a response whole, so no request sees the
/// `DENY_ALL` in between (pinned against Envoy 1.40 by the tests of
/// `rlqs_envoy_quirks`).
#[must_use]
pub fn actions(name: &BucketName, assignment: Assignment, ttl: Duration) -> Vec<BucketAction> {
    let id = || {
        Some(BucketId {
            bucket: name.to_map(),
        })
    };
    let assign = |strategy| BucketAction {
        bucket_id: id(),
        bucket_action: Some(Action::QuotaAssignmentAction(QuotaAssignmentAction {
            assignment_time_to_live: Some(ProtoDuration {
                seconds: i64::try_from(ttl.as_secs()).unwrap_or(i64::MAX).max(1),
                nanos: 0,
            }),
            rate_limit_strategy: Some(RateLimitStrategy {
                strategy: Some(strategy),
            }),
        })),
    };
    let blanket = |rule: BlanketRule| assign(Strategy::BlanketRule(rule.into()));
    match assignment {
        Assignment::Grant(units) => vec![
            blanket(BlanketRule::DenyAll),
            assign(Strategy::TokenBucket(TokenBucket {
                max_tokens: u32::try_from(units).unwrap_or(u32::MAX).max(1),
                // Unset: no refill (Envoy 1.40 reads it as 0). The lease is
                // all the stream spends until the next report.
                tokens_per_fill: None,
                // Whole seconds: a shorter interval means no limit in 1.40.
                fill_interval: Some(ProtoDuration {
                    seconds: 1,
                    nanos: 0,
                }),
            })),
        ],
        Assignment::AllowAll => vec![blanket(BlanketRule::AllowAll)],
        Assignment::DenyAll => vec![blanket(BlanketRule::DenyAll)],
        Assignment::Abandon => vec![BucketAction {
            bucket_id: id(),
            bucket_action: Some(Action::AbandonAction(AbandonAction {})),
        }],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const P: Duration = Duration::from_secs(5);

    #[test]
    fn the_fleets_shares_hold_at_most_half_the_limit() {
        assert_eq!(cap(100, 1), 50);
        assert_eq!(cap(100, 3), 16);
        assert!(3 * cap(100, 3) <= 50);
        assert_eq!(cap(1, 5), 1, "every stream may hold one unit");
        assert_eq!(cap(100, 0), 50, "no holder counts as one");
    }

    #[test]
    fn the_lease_follows_demand_with_head_room_and_stays_under_the_cap() {
        assert_eq!(wanted(0, 0, P, P, 50), 1, "idle: one for the next request");
        assert_eq!(wanted(10, 0, P, P, 50), 16);
        assert_eq!(wanted(6, 4, P, P, 50), 16, "denied requests are demand too");
        assert_eq!(
            wanted(10, 0, 2 * P, P, 50),
            9,
            "a longer gap is a lower rate"
        );
        assert_eq!(
            wanted(1, 0, Duration::ZERO, P, 50),
            3,
            "a first report is a period"
        );
        assert_eq!(wanted(1000, 0, P, P, 50), 50);
        assert_eq!(wanted(u64::MAX, u64::MAX, P, P, 7), 7);
    }

    fn strategy(a: &BucketAction) -> (i64, Strategy) {
        let Some(Action::QuotaAssignmentAction(qa)) = &a.bucket_action else {
            panic!("{a:?}")
        };
        (
            qa.assignment_time_to_live.unwrap().seconds,
            qa.rate_limit_strategy.unwrap().strategy.unwrap(),
        )
    }

    #[test]
    fn a_grant_is_deny_all_then_a_token_bucket_that_never_refills() {
        let name = BucketName::new(&[("name".to_owned(), "r".to_owned())].into());
        let a = actions(&name, Assignment::Grant(7), Duration::from_secs(15));
        assert_eq!(a.len(), 2);
        assert_eq!(
            strategy(&a[0]),
            (15, Strategy::BlanketRule(BlanketRule::DenyAll.into()))
        );
        let (ttl, Strategy::TokenBucket(tb)) = strategy(&a[1]) else {
            panic!("{a:?}")
        };
        assert_eq!((ttl, tb.max_tokens, tb.tokens_per_fill), (15, 7, None));
        assert_eq!(
            tb.fill_interval.unwrap(),
            ProtoDuration {
                seconds: 1,
                nanos: 0
            }
        );
        assert!(
            a.iter()
                .all(|x| x.bucket_id.as_ref().unwrap().bucket == name.to_map())
        );
    }

    #[test]
    fn blanket_rules_and_abandon_carry_what_envoy_needs() {
        let name = BucketName::new(&[("name".to_owned(), "r".to_owned())].into());
        let deny = actions(&name, Assignment::DenyAll, Duration::from_secs(15));
        assert_eq!(
            deny.iter().map(strategy).collect::<Vec<_>>(),
            [(15, Strategy::BlanketRule(BlanketRule::DenyAll.into()))]
        );
        let allow = actions(&name, Assignment::AllowAll, Duration::from_millis(300));
        assert_eq!(
            allow.iter().map(strategy).collect::<Vec<_>>(),
            [(1, Strategy::BlanketRule(BlanketRule::AllowAll.into()))],
            "a TTL is never 0 s, which Envoy expires at once"
        );
        let gone = actions(&name, Assignment::Abandon, Duration::from_secs(15));
        assert!(matches!(
            gone[..],
            [BucketAction {
                bucket_action: Some(Action::AbandonAction(_)),
                ..
            }]
        ));
    }
}
