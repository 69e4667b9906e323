//! A rule's cost taken from the response (`cost =
//! "response_header:x-usage-tokens"`, `"openai:output"`,
//! `"response_json:/usage/total"`, ...; `estimate = 1000`): the usage a
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
//!
//! // From the body: a named shape, or a JSON pointer.
//! for spelling in ["openai", "anthropic:input", "response_json:/usage/total"] {
//!     let source: UsageSource = spelling.parse().unwrap();
//!     assert!(source.reads_body());
//!     assert_eq!(source.to_string(), spelling);
//! }
//! assert!(ResponseCost::new("response_header:x".parse().unwrap(), 0).is_err());
//! ```

use std::fmt;
use std::str::FromStr;

use http::HeaderMap;
use http::header::HeaderName;

use crate::estimate::RequestEstimate;

/// Where a response reports its usage: a header field (read from the
/// response head or, when the head lacks it, from the trailers), or the
/// response body — a JSON answer, or the events of a `text/event-stream`
/// — at a JSON pointer or in a named provider's shape
/// (docs/proxy.md, "Usage from the response and in-flight limits").
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct UsageSource {
    kind: Kind,
}

/// The kinds of [`UsageSource`].
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) enum Kind {
    /// `response_header:NAME`.
    Header(HeaderName),
    /// `response_json:POINTER`: the pointer as written (validated).
    Json(String),
    /// `openai[:PART]`, `anthropic[:PART]`.
    Shape(Shape, Part),
}

/// A provider whose usage object a body source reads by name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Shape {
    /// OpenAI's chat completions, completions and responses APIs, and the
    /// servers that copy them (vLLM, llama.cpp, Ollama, TGI).
    OpenAi,
    /// Anthropic's messages API.
    Anthropic,
}

/// Which tokens of a shape's usage a source counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Part {
    /// Input and output.
    Total,
    /// The prompt's tokens.
    Input,
    /// The generated tokens.
    Output,
}

impl Shape {
    const fn name(self) -> &'static str {
        match self {
            Self::OpenAi => "openai",
            Self::Anthropic => "anthropic",
        }
    }
}

impl UsageSource {
    /// The header field read (lowercase); `None` for a body source.
    #[must_use]
    pub fn header(&self) -> Option<&HeaderName> {
        match &self.kind {
            Kind::Header(name) => Some(name),
            _ => None,
        }
    }

    /// Whether the usage is read from the response body (JSON or
    /// server-sent events) rather than a header field.
    #[must_use]
    pub fn reads_body(&self) -> bool {
        !matches!(self.kind, Kind::Header(_))
    }

    pub(crate) fn kind(&self) -> &Kind {
        &self.kind
    }

    /// What `fields` (a response head or its trailers) say of the usage;
    /// [`Reading::Absent`] for a body source.
    #[must_use]
    pub fn read(&self, fields: &HeaderMap) -> Reading {
        let Kind::Header(header) = &self.kind else {
            return Reading::Absent;
        };
        let mut values = fields.get_all(header).iter();
        let (Some(value), None) = (values.next(), values.next()) else {
            // None, or two values that may disagree: not a usage to trust.
            return if fields.contains_key(header) {
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
        match &self.kind {
            Kind::Header(name) => write!(f, "response_header:{name}"),
            Kind::Json(pointer) => write!(f, "response_json:{pointer}"),
            Kind::Shape(shape, Part::Total) => f.write_str(shape.name()),
            Kind::Shape(shape, Part::Input) => write!(f, "{}:input", shape.name()),
            Kind::Shape(shape, Part::Output) => write!(f, "{}:output", shape.name()),
        }
    }
}

/// Every spelling of the named shapes' sources (`openai[:PART]`,
/// `anthropic[:PART]`), for the tests and fuzz targets that try them
/// all: not an API.
#[doc(hidden)]
pub const SHAPE_SPELLINGS: &[&str] = &[
    "openai",
    "openai:input",
    "openai:output",
    "anthropic",
    "anthropic:input",
    "anthropic:output",
];

/// Every spelling a cost may take, for the error that names a bad one.
const SPELLINGS: &str = "\"response_header:NAME\", \"response_json:POINTER\", \"openai\", \
     \"openai:input\", \"openai:output\", \"anthropic\", \"anthropic:input\" or \
     \"anthropic:output\"";

impl FromStr for UsageSource {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let kind = if let Some(name) = s.strip_prefix("response_header:") {
            let header = HeaderName::from_bytes(name.as_bytes())
                .map_err(|_| format!("cost {s:?}: {name:?} is not a header field name"))?;
            Kind::Header(header)
        } else if let Some(pointer) = s.strip_prefix("response_json:") {
            let parsed: crate::json::Pointer = pointer.parse().map_err(|e| {
                format!("cost {s:?}: {e} (an RFC 6901 pointer, e.g. /usage/total_tokens)")
            })?;
            Kind::Json(parsed.to_string())
        } else {
            let (name, part) = s.split_once(':').unwrap_or((s, ""));
            let shape = match name {
                "openai" => Shape::OpenAi,
                "anthropic" => Shape::Anthropic,
                _ => {
                    return Err(format!(
                        "cost {s:?} is not a usage source; expected {SPELLINGS}"
                    ));
                }
            };
            let part = match (part, s.contains(':')) {
                (_, false) => Part::Total,
                ("input", true) => Part::Input,
                ("output", true) => Part::Output,
                _ => {
                    return Err(format!(
                        "cost {s:?}: {part:?} is not a part of {name}'s usage; expected \
                         \"{name}\" (the total), \"{name}:input\" or \"{name}:output\""
                    ));
                }
            };
            Kind::Shape(shape, part)
        };
        Ok(Self { kind })
    }
}

/// What a response said of its usage.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Reading {
    /// One field with a whole number of units.
    Found(u64),
    /// No such field.
    Absent,
    /// A value that is not a whole number of units (or two values), or a
    /// body that could not be read (malformed, encoded).
    Garbage,
    /// The part of a growing count (a streamed answer's output) seen
    /// before the stream was cut short: settled at the larger of it and
    /// the estimate.
    Partial(u64),
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

    #[test]
    fn body_sources_round_trip_and_bad_spellings_are_named() {
        let json = [
            "response_json:/usage/total_tokens",
            "response_json:/a~1b/c~0d",
        ];
        for spelling in SHAPE_SPELLINGS.iter().copied().chain(json) {
            let source: UsageSource = spelling.parse().expect(spelling);
            assert_eq!(source.to_string(), spelling);
            assert!(source.reads_body(), "{spelling}");
            assert!(source.header().is_none());
            assert_eq!(
                source.read(&fields(&["5"])),
                Reading::Absent,
                "a body source reads no header"
            );
        }
        let header: UsageSource = "response_header:x-usage-tokens".parse().expect("source");
        assert!(!header.reads_body());
        for (bad, says) in [
            (
                "openai:inputs",
                "\"inputs\" is not a part of openai's usage",
            ),
            ("anthropic:", "\"\" is not a part of anthropic's usage"),
            (
                "OpenAI",
                "expected \"response_header:NAME\", \"response_json:POINTER\"",
            ),
            ("gemini", "cost \"gemini\" is not a usage source"),
            ("response_json:usage/total", "must start with '/'"),
            ("response_json:", "must start with '/'"),
            ("response_json:/a~2", "'~' must be followed by 0 or 1"),
        ] {
            let e = bad.parse::<UsageSource>().expect_err(bad);
            assert!(e.contains(says), "{bad}: {e}");
            assert!(
                e.contains(&format!("{bad:?}")),
                "{bad}: names the spelling: {e}"
            );
        }
    }
}
