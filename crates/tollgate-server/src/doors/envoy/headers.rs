//! The response headers the service adds for Envoy to put on the response
//! (`[envoy] response_headers`, docs/envoy.md "Settings"), for the
//! descriptor closest to its limit: the reference service's three fields
//! (its `LIMIT_RESPONSE_HEADERS_ENABLED`), or the IETF draft's
//! `RateLimit` and `RateLimit-Policy`, formatted by the same code as the
//! HTTP doors' (`tollgate_http::headers`).

use std::time::{SystemTime, UNIX_EPOCH};

use envoy_types::pb::envoy::config::core::v3::HeaderValue;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::{Code, DescriptorStatus};
use tollgate::Rule;
use tollgate_http::headers::{ceil_secs, policy_list, ratelimit_list};

use crate::doors::envoy::limits::Unit;
use crate::doors::envoy::plan::Plan;

/// Which headers, and under which names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ResponseHeaders {
    /// The reference's three fields, by these names.
    Reference {
        /// The limit's `requests_per_unit`.
        limit: String,
        /// Its `limit_remaining`.
        remaining: String,
        /// Seconds until its unit's window ends.
        reset: String,
    },
    /// `RateLimit-Policy: "NAME";q=QUOTA;w=WINDOW` and `RateLimit:
    /// "NAME";r=REMAINING;t=RESET` (docs/headers.md).
    Ietf,
}

impl ResponseHeaders {
    /// The headers for `statuses` (descriptor `n` resolved to `plans[n]`,
    /// its rule among `rules`, the gate's): those of the status with the
    /// fewest remaining among those with a limit, an over-limit one that is
    /// not a quota descriptor (`quota[n]`) taking the place whatever its
    /// remaining (the last one, as the reference picks it); none when no
    /// status has a limit.
    #[must_use]
    pub(crate) fn for_statuses(
        &self,
        plans: &[Plan<'_>],
        statuses: &[DescriptorStatus],
        quota: &[bool],
        rules: &[Rule],
    ) -> Vec<HeaderValue> {
        let Some(n) = closest(statuses, quota) else {
            return Vec::new();
        };
        let s = &statuses[n];
        let Some(limit) = &s.current_limit else {
            return Vec::new();
        };
        let unit_secs = Unit::from_proto(limit.unit).map_or(1, Unit::seconds);
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let window_end = unit_secs - now % unit_secs;
        let header = |key: &str, value: String| HeaderValue {
            key: key.to_owned(),
            value,
            ..HeaderValue::default()
        };
        let quota = u64::from(limit.requests_per_unit);
        let remaining = u64::from(s.limit_remaining);
        match self {
            Self::Reference {
                limit,
                remaining: left,
                reset,
            } => vec![
                header(limit, quota.to_string()),
                header(left, remaining.to_string()),
                header(reset, window_end.to_string()),
            ],
            Self::Ietf => {
                let name = member_name(plans.get(n), rules);
                // The decision's own reset when the store gave one, as
                // the HTTP doors write it; else the unit's window end.
                let reset = s
                    .duration_until_reset
                    .and_then(|d| {
                        let secs = u64::try_from(d.seconds).ok()?;
                        let nanos = u32::try_from(d.nanos).ok()?;
                        Some(ceil_secs(std::time::Duration::new(secs, nanos)))
                    })
                    .unwrap_or(window_end);
                vec![
                    header(
                        "RateLimit-Policy",
                        policy_list([(name.as_str(), quota, unit_secs)]),
                    ),
                    header(
                        "RateLimit",
                        ratelimit_list([(name.as_str(), remaining, reset)]),
                    ),
                ]
            }
        }
    }
}

/// The position of the status the headers speak for (see
/// [`ResponseHeaders::for_statuses`]).
fn closest(statuses: &[DescriptorStatus], quota: &[bool]) -> Option<usize> {
    let mut least = None;
    let mut fewest = u32::MAX;
    for (n, s) in statuses.iter().enumerate() {
        if s.current_limit.is_some() && s.limit_remaining < fewest {
            least = Some(n);
            fewest = s.limit_remaining;
        }
        // An over quota descriptor does not take the place (the reference
        // counts it apart).
        if s.code == i32::from(Code::OverLimit) && !quota.get(n).copied().unwrap_or(false) {
            least = Some(n);
            fewest = 0;
        }
    }
    least
}

/// The IETF member's name: the tollgate rule counting the limit (as in
/// `/metrics` and the HTTP doors' headers); a `requests_per_unit: 0`
/// limit, which no rule counts, by its full key (`domain.key_value`), in
/// the rule-name alphabet, so it needs no sf-string escaping.
fn member_name(plan: Option<&Plan<'_>>, rules: &[Rule]) -> String {
    match plan {
        Some(Plan::Counted { rule, .. }) => rules
            .get(*rule)
            .map_or_else(String::new, |r| r.name().to_owned()),
        Some(Plan::Zero(limit)) => limit
            .path
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-') {
                    c
                } else {
                    '_'
                }
            })
            .collect(),
        _ => String::new(),
    }
}
