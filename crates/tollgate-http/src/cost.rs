//! A rule's cost taken from the response (`cost =
//! "response_header:x-usage-tokens"`, `estimate = 1000`): the usage a
//! request made is known only when its response ends, so the door
//! reserves an estimate when the request arrives and settles at the
//! usage the response reports (docs/proxy.md, "Usage from the response and
//! in-flight limits").
//!
//! ```
//! use tollgate_http::cost::{ResponseCost, UsageSource};
//!
//! let source: UsageSource = "response_header:X-Usage-Tokens".parse().unwrap();
//! assert_eq!(source.to_string(), "response_header:x-usage-tokens");
//! let cost = ResponseCost::new(source, 1000).unwrap();
//! assert_eq!(cost.estimate(), 1000);
//! assert!("header:x-usage-tokens".parse::<UsageSource>().is_err());
//! assert!(ResponseCost::new("response_header:x".parse().unwrap(), 0).is_err());
//! ```

use std::fmt;
use std::str::FromStr;

use http::HeaderMap;
use http::header::HeaderName;

use crate::estimate::RequestEstimate;

/// Where a response reports its usage: a header field, read from the
/// response head or, when the head lacks it, from the trailers.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct UsageSource {
    header: HeaderName,
}

impl UsageSource {
    /// The field read (lowercase).
    #[must_use]
    pub fn header(&self) -> &HeaderName {
        &self.header
    }

    /// What `fields` (a response head or its trailers) say of the usage.
    #[must_use]
    pub fn read(&self, fields: &HeaderMap) -> Reading {
        let mut values = fields.get_all(&self.header).iter();
        let (Some(value), None) = (values.next(), values.next()) else {
            // None, or two values that may disagree: not a usage to trust.
            return if fields.contains_key(&self.header) {
                Reading::Garbage
            } else {
                Reading::Absent
            };
        };
        // Digits only: `str::parse` also takes a leading `+`, which no
        // usage field writes and the HTTP API's JSON refuses.
        match value.to_str().map(str::trim) {
            Ok(s) if !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) => {
                s.parse().map_or(Reading::Garbage, Reading::Found)
            }
            _ => Reading::Garbage,
        }
    }
}

impl fmt::Display for UsageSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "response_header:{}", self.header)
    }
}

impl FromStr for UsageSource {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let Some(name) = s.strip_prefix("response_header:") else {
            return Err(format!(
                "cost {s:?} is not a usage source; expected \"response_header:NAME\" \
                 (the response field, or trailer, that reports the usage)"
            ));
        };
        let header = HeaderName::from_bytes(name.as_bytes())
            .map_err(|_| format!("cost {s:?}: {name:?} is not a header field name"))?;
        Ok(Self { header })
    }
}

/// What a response said of its usage.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Reading {
    /// One field with a whole number of units.
    Found(u64),
    /// No such field.
    Absent,
    /// A value that is not a whole number of units (or two values).
    Garbage,
}

/// A rule's cost read from the response: `estimate` units reserved when
/// the request arrives, settled at what [`UsageSource`] reads when the
/// response ends.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ResponseCost {
    source: UsageSource,
    estimate: u64,
    /// Read from the request instead, `estimate` its default.
    from_request: Option<RequestEstimate>,
}

impl ResponseCost {
    /// `estimate` units reserved per request, settled at what `source`
    /// reads.
    ///
    /// # Errors
    /// An estimate of 0 (a reservation of nothing admits everything).
    pub fn new(source: UsageSource, estimate: u64) -> Result<Self, String> {
        if estimate == 0 {
            return Err("estimate must be at least 1".to_owned());
        }
        Ok(Self {
            source,
            estimate,
            from_request: None,
        })
    }

    /// The reservation read from the request (`estimate = "max_tokens"`
    /// and the like), [`ResponseCost::estimate`] standing in for a part
    /// the request does not give (`estimate_default`).
    #[must_use]
    pub fn with_request_estimate(mut self, from: RequestEstimate) -> Self {
        self.from_request = Some(from);
        self
    }

    /// Where the reservation is read from the request, if it is.
    #[must_use]
    pub fn request_estimate(&self) -> Option<RequestEstimate> {
        self.from_request
    }

    /// Where the usage is read.
    #[must_use]
    pub fn source(&self) -> &UsageSource {
        &self.source
    }

    /// The units reserved when a request arrives; with a
    /// [`ResponseCost::request_estimate`], its default.
    #[must_use]
    pub fn estimate(&self) -> u64 {
        self.estimate
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fields(values: &[&str]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for v in values {
            h.append("x-usage-tokens", v.parse().expect("value"));
        }
        h
    }

    #[test]
    fn a_usage_is_one_whole_number() {
        let source: UsageSource = "response_header:x-usage-tokens".parse().expect("source");
        assert_eq!(source.read(&fields(&["1340"])), Reading::Found(1340));
        assert_eq!(source.read(&fields(&[" 7 "])), Reading::Found(7));
        assert_eq!(source.read(&fields(&["0"])), Reading::Found(0));
        assert_eq!(source.read(&fields(&[])), Reading::Absent);
        for bad in [
            &["-5"][..],
            &["+5"],
            &["1.5"],
            &["lots"],
            &[""],
            &["99999999999999999999999"],
            &["3", "4"],
        ] {
            assert_eq!(source.read(&fields(bad)), Reading::Garbage, "{bad:?}");
        }
    }
}
