//! A descriptor's status in a `ShouldRateLimit` answer, as the service
//! (`service.rs`) fills it: before the store answers, from a decision,
//! when the store failed, under an admin's override; and what a decision
//! says of its key for the reference's stats.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::{
    Code, DescriptorStatus, RateLimit as CurrentLimit,
};
use envoy_types::pb::google::protobuf::Duration as ProtoDuration;
use tollgate::{DecidedBy, Decision, LimitSource};

use crate::doors::envoy::limits::{Limit, Unit};
use crate::doors::envoy::plan::Plan;
use crate::metrics::reference::Seen;

/// A descriptor decided under an admin's runtime override (docs/admin.md)
/// shows that limit in its `current_limit`: its `requests_per_unit`, and
/// its unit when the override's period is one. `decided` is what decided
/// each status, as its answer carried it: never looked up again, so a
/// status never names an override written after its decision.
pub(super) fn show_admin_overrides(
    decided: &[Option<DecidedBy>],
    statuses: &mut [DescriptorStatus],
) {
    for (by, s) in decided.iter().zip(statuses.iter_mut()) {
        let Some(by) = by.filter(|by| by.source == LimitSource::RuntimeOverride) else {
            continue;
        };
        if let Some(current) = &mut s.current_limit {
            current.requests_per_unit = u32::try_from(by.limit).unwrap_or(u32::MAX);
            if let Some(unit) = Unit::ALL
                .iter()
                .find(|u| Duration::from_secs(u.seconds()) == by.period())
            {
                current.unit = unit.proto();
            }
        }
    }
}

/// Notes what the store said of descriptor `i`'s key (`seen` is empty
/// when the reference's stats are off).
pub(super) fn note(seen: &mut [Option<Seen>], i: usize, what: Seen) {
    if let Some(slot) = seen.get_mut(i) {
        *slot = Some(what);
    }
}

/// What a decision says of its key for the reference's stats: `added`
/// the units the call consumed (`None`: it consumed nothing).
pub(super) fn seen_of(d: &Decision, added: Option<u64>) -> Seen {
    Seen::after_call(d.limit, d.remaining, 0, added.unwrap_or(0))
}

/// A counted plan's cost (0 for any other).
pub(super) fn cost_of(plan: &Plan<'_>) -> u64 {
    match plan {
        Plan::Counted { cost, .. } => *cost,
        _ => 0,
    }
}

/// A descriptor's status before the store answers.
pub(super) fn initial(plan: &Plan<'_>) -> DescriptorStatus {
    match plan {
        Plan::None | Plan::Counted { .. } => DescriptorStatus {
            code: Code::Ok.into(),
            ..DescriptorStatus::default()
        },
        Plan::Unlimited => DescriptorStatus {
            code: Code::Ok.into(),
            limit_remaining: u32::MAX,
            ..DescriptorStatus::default()
        },
        Plan::Zero(limit) => DescriptorStatus {
            code: if limit.shadow_mode {
                Code::Ok
            } else {
                Code::OverLimit
            }
            .into(),
            current_limit: Some(current(limit)),
            limit_remaining: 0,
            duration_until_reset: limit.unit.map(|u| to_window_end(u.seconds())),
            ..DescriptorStatus::default()
        },
    }
}

/// A counted limit's status when the store failed under `deny`:
/// `OVER_LIMIT` (`OK` in shadow mode), no numbers.
pub(super) fn failed(plan: &Plan<'_>) -> DescriptorStatus {
    let Plan::Counted { limit, .. } = plan else {
        return initial(plan);
    };
    DescriptorStatus {
        code: if limit.shadow_mode {
            Code::Ok
        } else {
            Code::OverLimit
        }
        .into(),
        current_limit: Some(current(limit)),
        ..DescriptorStatus::default()
    }
}

/// The limit as a status's `current_limit`.
fn current(limit: &Limit) -> CurrentLimit {
    CurrentLimit {
        name: limit.name.clone(),
        requests_per_unit: limit.requests_per_unit,
        unit: limit.unit.map_or(0, Unit::proto),
    }
}

/// A counted limit's status from its decision; `ok` overrides the code
/// (shadow mode, and a pair that would have admitted in a denied check).
pub(super) fn status(plan: &Plan<'_>, d: &Decision, ok: bool) -> DescriptorStatus {
    let Plan::Counted { limit, .. } = plan else {
        return DescriptorStatus::default();
    };
    let ok = ok || limit.shadow_mode;
    DescriptorStatus {
        code: if ok { Code::Ok } else { Code::OverLimit }.into(),
        current_limit: Some(current(limit)),
        limit_remaining: u32::try_from(d.remaining).unwrap_or(u32::MAX),
        duration_until_reset: Some(proto_duration(d.reset_after)),
        ..DescriptorStatus::default()
    }
}

/// A `google.protobuf.Duration` of whole seconds, `d` rounded up: the
/// reference service's times are whole Unix seconds (a fixed window, aligned
/// to them, ends where it says), and Envoy's `X-RateLimit-Reset` reads only
/// the seconds, so a part of one left would read as none.
fn proto_duration(d: Duration) -> ProtoDuration {
    let secs = d.as_secs() + u64::from(d.subsec_nanos() > 0);
    ProtoDuration {
        seconds: i64::try_from(secs).unwrap_or(i64::MAX),
        nanos: 0,
    }
}

/// Time to the end of the current `unit_secs` window on the wall clock (the
/// reference service's windows), for limits the store never sees.
fn to_window_end(unit_secs: u64) -> ProtoDuration {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    let unit = Duration::from_secs(unit_secs.max(1));
    let into =
        Duration::from_nanos(u64::try_from(now.as_nanos() % unit.as_nanos()).unwrap_or_default());
    proto_duration(unit.saturating_sub(into))
}
