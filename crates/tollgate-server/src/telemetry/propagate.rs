//! The caller's trace context, read from request headers (HTTP) or gRPC
//! metadata (an `http::HeaderMap` on the Envoy door too): W3C
//! `traceparent` / `tracestate`, then B3, single `b3` header or the
//! `x-b3-*` ones. When both are valid, B3's wins, as in the reference,
//! whose composite propagator runs TraceContext then B3, each valid one
//! overwriting the last.
//!
//! B3 is written here (extraction only: tollgate calls out to nobody who
//! would read it), about a page, rather than taken from
//! opentelemetry-zipkin, which would bring a whole exporter and its HTTP
//! client for it.

use http::HeaderMap;
use opentelemetry::Context;
use opentelemetry::propagation::{Extractor, TextMapPropagator};
use opentelemetry::trace::{SpanContext, SpanId, TraceContextExt, TraceFlags, TraceId, TraceState};
use opentelemetry_sdk::propagation::TraceContextPropagator;

/// The caller's context in `headers`, or `None` when neither form is
/// there and valid.
pub(crate) fn extract(headers: &HeaderMap) -> Option<Context> {
    if let Some(sc) = b3(headers) {
        return Some(Context::new().with_remote_span_context(sc));
    }
    // Most calls carry no context: skip the propagator's work then.
    headers.get("traceparent")?;
    let cx = TraceContextPropagator::new().extract(&Headers(headers));
    cx.span().span_context().is_valid().then_some(cx)
}

/// `headers` as the propagators read them.
struct Headers<'a>(&'a HeaderMap);

impl Extractor for Headers<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(|v| v.to_str().ok())
    }

    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(http::HeaderName::as_str).collect()
    }
}

/// A B3 context: the single `b3` header first, then `x-b3-traceid`,
/// `x-b3-spanid`, `x-b3-sampled` and `x-b3-flags` (debug, which implies
/// sampled). A missing sampling state ("deferred") reads as not sampled,
/// as the Go propagator the reference uses reads it.
fn b3(headers: &HeaderMap) -> Option<SpanContext> {
    let text = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    if let Some(single) = text("b3") {
        // `{trace}-{span}[-{sampling}[-{parent}]]`; a bare `0`, `1` or `d`
        // carries no ids, so no context.
        let mut parts = single.trim().split('-');
        let (trace, span) = (parts.next()?, parts.next());
        let sampled = match parts.next() {
            None => false,
            Some(s) => sampled(Some(s), None)?,
        };
        return span_context(trace, span?, sampled);
    }
    let trace = text("x-b3-traceid")?;
    let span = text("x-b3-spanid")?;
    let sampled = sampled(text("x-b3-sampled"), text("x-b3-flags"))?;
    span_context(trace, span, sampled)
}

/// The sampling state: `None` when malformed (the context is dropped).
fn sampled(sampled: Option<&str>, flags: Option<&str>) -> Option<bool> {
    if flags.map(str::trim) == Some("1") {
        return Some(true);
    }
    match sampled.map(str::trim) {
        None => Some(false),
        Some("1" | "d" | "true") => Some(true),
        Some("0" | "false") => Some(false),
        Some(_) => None,
    }
}

fn span_context(trace: &str, span: &str, sampled: bool) -> Option<SpanContext> {
    let (trace, span) = (trace.trim(), span.trim());
    let hex = |s: &str| s.bytes().all(|b| b.is_ascii_hexdigit());
    // A 64-bit trace id is the low half of a 128-bit one.
    if !(trace.len() == 16 || trace.len() == 32) || span.len() != 16 || !hex(trace) || !hex(span) {
        return None;
    }
    let trace_id = TraceId::from(u128::from_str_radix(trace, 16).ok()?);
    let span_id = SpanId::from(u64::from_str_radix(span, 16).ok()?);
    let flags = if sampled {
        TraceFlags::SAMPLED
    } else {
        TraceFlags::default()
    };
    let sc = SpanContext::new(trace_id, span_id, flags, true, TraceState::default());
    sc.is_valid().then_some(sc)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, v.parse().expect("value"));
        }
        h
    }

    fn read(pairs: &[(&'static str, &str)]) -> Option<(String, String, bool)> {
        let cx = extract(&headers(pairs))?;
        let span = cx.span();
        let sc = span.span_context();
        assert!(sc.is_remote());
        Some((
            sc.trace_id().to_string(),
            sc.span_id().to_string(),
            sc.is_sampled(),
        ))
    }

    const T: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
    const S: &str = "00f067aa0ba902b7";

    #[test]
    fn w3c_traceparent() {
        let tp = format!("00-{T}-{S}-01");
        assert_eq!(
            read(&[("traceparent", &tp)]),
            Some((T.into(), S.into(), true))
        );
        let tp = format!("00-{T}-{S}-00");
        assert_eq!(
            read(&[("traceparent", &tp)]),
            Some((T.into(), S.into(), false))
        );
        assert_eq!(read(&[("traceparent", "00-zz-00-01")]), None);
        assert_eq!(read(&[]), None);
    }

    #[test]
    fn b3_single_and_multi() {
        let single = format!("{T}-{S}-1-05e3ac9a4f6e3b90");
        assert_eq!(read(&[("b3", &single)]), Some((T.into(), S.into(), true)));
        let single = format!("{T}-{S}");
        assert_eq!(read(&[("b3", &single)]), Some((T.into(), S.into(), false)));
        assert_eq!(read(&[("b3", "1")]), None);
        assert_eq!(
            read(&[
                ("x-b3-traceid", "a3ce929d0e0e4736"),
                ("x-b3-spanid", S),
                ("x-b3-sampled", "1")
            ]),
            Some(("0000000000000000a3ce929d0e0e4736".into(), S.into(), true))
        );
        assert_eq!(
            read(&[("x-b3-traceid", T), ("x-b3-spanid", S), ("x-b3-flags", "1")]),
            Some((T.into(), S.into(), true))
        );
        assert_eq!(
            read(&[
                ("x-b3-traceid", T),
                ("x-b3-spanid", S),
                ("x-b3-sampled", "x")
            ]),
            None
        );
        assert_eq!(read(&[("x-b3-traceid", T), ("x-b3-spanid", "12")]), None);
    }

    #[test]
    fn b3_wins_over_traceparent_as_in_the_reference() {
        let other = "11111111111111111111111111111111";
        let tp = format!("00-{other}-{S}-01");
        let single = format!("{T}-{S}-0");
        assert_eq!(
            read(&[("traceparent", &tp), ("b3", &single)]),
            Some((T.into(), S.into(), false))
        );
    }
}
