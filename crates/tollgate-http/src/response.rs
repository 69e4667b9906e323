//! The answers the layer (and the reverse proxy) give by themselves: 429 on
//! a denial, 503 when the store fails under `OnError::Deny`, 400 for
//! a key that cannot be built. Every body is an RFC 9457
//! `application/problem+json` document.
//!
//! The builders are generic over the response body `B: From<String>`, which
//! axum's `Body`, `http_body_util::Full<Bytes>` and `String` all are.
//!

use std::fmt::Write as _;
use std::time::Duration;

use http::header::{CONTENT_TYPE, RETRY_AFTER};
use http::{HeaderName, HeaderValue, Response, StatusCode};
use tollgate::Decision;

use crate::headers::{HeaderOptions, Policy, ceil_secs, insert_headers};

/// The problem type of a 429.
pub const QUOTA_EXCEEDED: &str = "https://tollgate.dev/problems/quota-exceeded";
/// The problem type of a 503 when the store failed and the policy denies.
pub const STORE_UNAVAILABLE: &str = "https://tollgate.dev/problems/store-unavailable";
/// The problem type of a 400 for a missing (or empty) key header under
/// [`MissingKey::Reject`](crate::extract::MissingKey::Reject).
pub const MISSING_KEY: &str = "https://tollgate.dev/problems/missing-key";
/// The problem type of a 400 for a key longer than [`tollgate::limits::MAX_KEY_LEN`].
pub const KEY_TOO_LONG: &str = "https://tollgate.dev/problems/key-too-long";

/// `application/problem+json`.
pub const PROBLEM_JSON: HeaderValue = HeaderValue::from_static("application/problem+json");

/// `tollgate-degraded`: set on a response answered while the store failed:
/// let through without a decision (`store-unavailable`) or decided by the
/// in-process fallback (`local`).
pub const TOLLGATE_DEGRADED: HeaderName = HeaderName::from_static("tollgate-degraded");
/// The value of [`TOLLGATE_DEGRADED`] when the store did not answer.
pub const DEGRADED_STORE_UNAVAILABLE: HeaderValue = HeaderValue::from_static("store-unavailable");
/// The value of [`TOLLGATE_DEGRADED`] when the store did not answer and the
/// in-process fallback decided (`OnError::Local`).
pub const DEGRADED_LOCAL: HeaderValue = HeaderValue::from_static("local");

/// An RFC 9457 problem response: `status`, `Content-Type:
/// application/problem+json`, and a body with `type`, `title`, `status` and
/// `detail`.
///
/// ```
/// use http::StatusCode;
/// use tollgate_http::response::problem;
///
/// let r: http::Response<String> = problem(StatusCode::BAD_REQUEST, "about:blank", "Bad Request", "no key");
/// assert_eq!(r.headers()["content-type"], "application/problem+json");
/// assert_eq!(
///     r.body(),
///     r#"{"type":"about:blank","title":"Bad Request","status":400,"detail":"no key"}"#
/// );
/// ```
#[must_use]
pub fn problem<B: From<String>>(
    status: StatusCode,
    type_uri: &str,
    title: &str,
    detail: &str,
) -> Response<B> {
    problem_with(status, type_uri, title, detail, &[])
}

fn problem_with<B: From<String>>(
    status: StatusCode,
    type_uri: &str,
    title: &str,
    detail: &str,
    violated: &[&str],
) -> Response<B> {
    let mut body = String::with_capacity(160);
    body.push_str("{\"type\":");
    push_json_string(&mut body, type_uri);
    body.push_str(",\"title\":");
    push_json_string(&mut body, title);
    let _ = write!(body, ",\"status\":{}", status.as_u16());
    body.push_str(",\"detail\":");
    push_json_string(&mut body, detail);
    if !violated.is_empty() {
        body.push_str(",\"violated\":[");
        for (i, name) in violated.iter().enumerate() {
            if i > 0 {
                body.push(',');
            }
            push_json_string(&mut body, name);
        }
        body.push(']');
    }
    body.push('}');
    let mut response = Response::new(B::from(body));
    *response.status_mut() = status;
    response.headers_mut().insert(CONTENT_TYPE, PROBLEM_JSON);
    response
}

fn push_json_string(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if u32::from(c) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// The wait a denial reports: `None` when a denying pair can never be
/// admitted (its cost exceeds the rule's capacity), else the longest
/// `retry_after` among the denying pairs (the all-or-nothing check is
/// admitted only when every one of them would be).
#[must_use]
pub fn denial_retry_after<'a>(
    decisions: impl IntoIterator<Item = &'a Decision>,
) -> Option<Duration> {
    let mut longest = None;
    for d in decisions {
        if d.allowed {
            continue;
        }
        let wait = d.retry_after?;
        longest = Some(longest.map_or(wait, |l: Duration| l.max(wait)));
    }
    longest
}

/// The 429 for a denied check: `RateLimit-Policy` and `RateLimit` with one
/// member per pair, `Retry-After` (whole seconds, rounded up, at least 1;
/// absent when the check can never be admitted, see
/// [`denial_retry_after`]), legacy `X-RateLimit-*` when `options` asks, and
/// a problem+json body whose `violated` array names the denying rules.
///
/// `pairs` are every (rule, decision) of the check, in order, denying or
/// not.
///
/// ```
/// use std::time::Duration;
/// use tollgate::{Algorithm, Decision, RuleSpec};
/// use tollgate_http::headers::HeaderOptions;
/// use tollgate_http::response::too_many_requests;
///
/// let rule = RuleSpec::new("per_ip", Algorithm::Gcra, 5, Duration::from_secs(60)).build().unwrap();
/// let denied = Decision { allowed: false, limit: 5, remaining: 0,
///     reset_after: Duration::from_secs(60), retry_after: Some(Duration::from_millis(11_500)) };
/// let r: http::Response<String> = too_many_requests(&[(&rule, &denied)], HeaderOptions::default());
/// assert_eq!(r.status(), 429);
/// assert_eq!(r.headers()["retry-after"], "12");
/// assert_eq!(r.headers()["ratelimit"], "\"per_ip\";r=0;t=60");
/// assert!(r.body().contains(r#""violated":["per_ip"]"#));
/// ```
#[must_use]
pub fn too_many_requests<B: From<String>>(
    pairs: &[(&dyn Policy, &Decision)],
    options: HeaderOptions,
) -> Response<B> {
    let violated: Vec<&str> = pairs
        .iter()
        .filter(|(_, d)| !d.allowed)
        .map(|(r, _)| r.name())
        .collect();
    let retry_after = denial_retry_after(pairs.iter().map(|(_, d)| *d));
    let mut detail = String::from("Quota exceeded for ");
    for (i, name) in violated.iter().enumerate() {
        if i > 0 {
            detail.push_str(", ");
        }
        let _ = write!(detail, "rule \"{name}\"");
    }
    match retry_after {
        Some(wait) => {
            let secs = ceil_secs(wait).max(1);
            let _ = write!(
                detail,
                "; retry after {secs} second{}.",
                if secs == 1 { "" } else { "s" }
            );
        }
        None => detail.push_str("; the request costs more than the quota, so no wait admits it."),
    }
    let mut response = problem_with(
        StatusCode::TOO_MANY_REQUESTS,
        QUOTA_EXCEEDED,
        "Too Many Requests",
        &detail,
        &violated,
    );
    insert_headers(response.headers_mut(), pairs, retry_after, options);
    response
}

/// The 503 when the store failed and the policy denies: `Retry-After: 1`
/// and a problem+json body.
///
/// ```
/// let r: http::Response<String> = tollgate_http::response::store_unavailable();
/// assert_eq!(r.status(), 503);
/// assert_eq!(r.headers()["retry-after"], "1");
/// ```
#[must_use]
pub fn store_unavailable<B: From<String>>() -> Response<B> {
    let mut response = problem(
        StatusCode::SERVICE_UNAVAILABLE,
        STORE_UNAVAILABLE,
        "Service Unavailable",
        "The rate limit store did not answer, and the failure policy denies.",
    );
    response
        .headers_mut()
        .insert(RETRY_AFTER, HeaderValue::from_static("1"));
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(allowed: bool, retry_ms: Option<u64>) -> Decision {
        Decision {
            allowed,
            limit: 5,
            remaining: 0,
            reset_after: Duration::from_secs(1),
            retry_after: retry_ms.map(Duration::from_millis),
        }
    }

    #[test]
    fn retry_after_is_the_longest_denial_or_never() {
        let (ok, short, long, never) = (
            d(true, None),
            d(false, Some(100)),
            d(false, Some(2500)),
            d(false, None),
        );
        assert_eq!(
            denial_retry_after([&ok, &short, &long]),
            Some(Duration::from_millis(2500))
        );
        assert_eq!(denial_retry_after([&short, &never, &long]), None);
        assert_eq!(denial_retry_after([&ok]), None);
    }

    #[test]
    fn a_denial_no_wait_cures_has_no_retry_after() {
        let rule =
            tollgate::RuleSpec::new("big", tollgate::Algorithm::Gcra, 5, Duration::from_secs(1))
                .build()
                .expect("valid rule");
        let (short, never) = (d(false, Some(100)), d(false, None));
        let r: Response<String> = too_many_requests(
            &[(&rule, &short), (&rule, &never)],
            HeaderOptions::default(),
        );
        assert_eq!(r.status(), StatusCode::TOO_MANY_REQUESTS);
        assert!(!r.headers().contains_key(RETRY_AFTER));
        assert!(r.headers().contains_key("ratelimit"));
        assert!(r.body().contains("no wait admits it"), "{}", r.body());
        let r: Response<String> = too_many_requests(&[(&rule, &short)], HeaderOptions::default());
        assert_eq!(r.headers()[RETRY_AFTER], "1");
        assert!(r.body().contains("retry after 1 second."), "{}", r.body());
    }

    #[test]
    fn json_strings_are_escaped() {
        let r: Response<String> = problem(
            StatusCode::BAD_REQUEST,
            "about:blank",
            "t",
            "a \"b\"\\\n\u{1}é",
        );
        assert_eq!(
            r.body(),
            r#"{"type":"about:blank","title":"t","status":400,"detail":"a \"b\"\\\n\u0001é"}"#
        );
    }
}
