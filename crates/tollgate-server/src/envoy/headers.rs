//! The response headers the reference service adds when its
//! `LIMIT_RESPONSE_HEADERS_ENABLED` is on (`[envoy] response_headers`,
//! docs/envoy.md "Settings"): the limit, remaining and reset of the
//! descriptor closest to its limit, for Envoy to add to the response.

use std::time::{SystemTime, UNIX_EPOCH};

use envoy_types::pb::envoy::config::core::v3::HeaderValue;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::{Code, DescriptorStatus};

use crate::envoy::limits::Unit;

/// The three header names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResponseHeaders {
    /// The limit's `requests_per_unit`.
    pub limit: String,
    /// Its `limit_remaining`.
    pub remaining: String,
    /// Seconds until its unit's window ends.
    pub reset: String,
}

impl ResponseHeaders {
    /// The headers for `statuses`: those of the status with the fewest
    /// remaining among those with a limit, an over-limit one taking the
    /// place whatever its remaining (the last one, as the reference picks
    /// it); none when no status has a limit.
    #[must_use]
    pub fn for_statuses(&self, statuses: &[DescriptorStatus]) -> Vec<HeaderValue> {
        let mut least: Option<&DescriptorStatus> = None;
        let mut fewest = u32::MAX;
        for s in statuses {
            if s.current_limit.is_some() && s.limit_remaining < fewest {
                least = Some(s);
                fewest = s.limit_remaining;
            }
            if s.code == i32::from(Code::OverLimit) {
                least = Some(s);
                fewest = 0;
            }
        }
        let Some(s) = least else {
            return Vec::new();
        };
        let Some(limit) = &s.current_limit else {
            return Vec::new();
        };
        let unit_secs = Unit::from_proto(limit.unit).map_or(1, Unit::seconds);
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let header = |key: &str, value: u64| HeaderValue {
            key: key.to_owned(),
            value: value.to_string(),
            ..HeaderValue::default()
        };
        vec![
            header(&self.limit, u64::from(limit.requests_per_unit)),
            header(&self.remaining, u64::from(s.limit_remaining)),
            header(&self.reset, unit_secs - now % unit_secs),
        ]
    }
}
