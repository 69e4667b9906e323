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

/// Units a server may still lease of a key whose limit is `limit`, with
/// `replicas` servers sharing it and `leased` units leased already by
/// its streams: all leases together hold at most half the limit.
#[must_use]
pub fn room(limit: u64, replicas: u64, leased: u64) -> u64 {
    (limit / 2 / replicas.max(1)).saturating_sub(leased)
}

/// A bucket's demand on one stream: what it reported, per report period,
/// and a moving average of it (each period weighs half), in thousandths of
/// a unit. The estimate is the larger of the last period and the average
/// rounded up: a quiet period after busy ones does not shrink the next
/// lease to the quiet one's. A model of Poisson arrivals (a lease sized
/// from the last period alone) put the requests denied below the limit
/// at 13% for one request per period and 1.5% for five; with the
/// average, 0.04% and 0.05%.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Demand {
    average_milli: u64,
}

impl Demand {
    /// Adds a report of `allowed` + `denied` requests over `elapsed`
    /// (measured by tollgate), scaled to one `period`; returns the
    /// estimate of the next period's demand.
    pub fn update(
        &mut self,
        allowed: u64,
        denied: u64,
        elapsed: Duration,
        period: Duration,
    ) -> u64 {
        let demand = u128::from(allowed) + u128::from(denied);
        // A report sooner than a period (a new bucket's first) is scaled
        // as a whole period's: no burst is multiplied by a tiny elapsed time.
        let elapsed = elapsed.max(period).as_micros().max(1);
        let scaled =
            u64::try_from((demand * period.as_micros()).div_ceil(elapsed)).unwrap_or(u64::MAX);
        self.average_milli = self.average_milli / 2 + scaled.saturating_mul(1000) / 2;
        scaled.max(self.average_milli.div_ceil(1000))
    }
}

/// Units to lease a stream whose demand per period is estimated at `d`:
/// with head room for growth (half again) and for chance (two standard
/// deviations of a Poisson count, `2√d`), plus one so an idle stream
/// still admits its next request; at most `cap`. Without the chance term
/// and the average, a tenant at one request a second was denied about one
/// request in fifteen far below its limit (bench/rlqs.md).
#[must_use]
pub fn wanted(d: u64, cap: u64) -> u64 {
    let d = u128::from(d);
    let grown = (d * GROWTH.0).div_ceil(GROWTH.1);
    let chance = 2 * (d.isqrt() + u128::from(d.isqrt().pow(2) < d));
    u64::try_from(grown + chance + 1)
        .unwrap_or(u64::MAX)
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
    fn a_servers_leases_hold_at_most_its_part_of_half_the_limit() {
        assert_eq!(room(100, 1, 0), 50);
        assert_eq!(room(100, 1, 45), 5);
        assert_eq!(room(100, 1, 60), 0);
        assert_eq!(room(100, 2, 10), 15);
        assert_eq!(room(1, 1, 0), 0);
    }

    #[test]
    fn the_lease_follows_demand_with_head_room_and_stays_under_the_cap() {
        assert_eq!(wanted(0, 50), 1, "idle: one for the next request");
        // 10: 15 grown, 2 x ceil(sqrt 10) = 8 for chance, 1.
        assert_eq!(wanted(10, 50), 24);
        // 5: 8 + 2 x 3 + 1; 1: 2 + 2 + 1; 100: 150 + 20 + 1.
        assert_eq!(wanted(5, 50), 15);
        assert_eq!(wanted(1, 50), 5);
        assert_eq!(wanted(100, 1000), 171);
        assert_eq!(wanted(1000, 50), 50);
        assert_eq!(wanted(u64::MAX, 7), 7);
    }

    #[test]
    fn demand_is_scaled_to_a_period_and_decays_by_half_a_period() {
        let mut d = Demand::default();
        assert_eq!(d.update(6, 4, P, P), 10, "denied requests are demand too");
        assert_eq!(d.update(0, 0, P, P), 3, "after a quiet period: the average");
        assert_eq!(d.update(0, 0, P, P), 2);
        assert_eq!(d.update(0, 0, P, P), 1);
        // Halving, rounded up: a unit for a while, then nothing.
        let tail: Vec<u64> = (0..10).map(|_| d.update(0, 0, P, P)).collect();
        assert_eq!(tail, [1, 1, 1, 1, 1, 1, 1, 1, 1, 0]);
        assert_eq!(d.update(10, 0, 2 * P, P), 5, "a longer gap is a lower rate");
        let mut first = Demand::default();
        assert_eq!(
            first.update(1, 0, Duration::ZERO, P),
            1,
            "a first report is a period"
        );
        let mut huge = Demand::default();
        assert_eq!(huge.update(u64::MAX, u64::MAX, P, P), u64::MAX);
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
