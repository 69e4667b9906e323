//! The doors' spans: one per decision, SERVER kind, joined to the
//! caller's trace (docs/tracing.md, "Spans"). Each is a TRACE span of a
//! `tollgate::` target, so while tracing is off it is `Span::none()` after
//! the level check and the caller's headers are not read; on, a call the
//! sampler drops gets `Span::none()` too, before any span is made.

use http::{HeaderMap, Method, StatusCode};
use opentelemetry::Context;
use tracing::Span;
use tracing::field::Empty;
use tracing_opentelemetry::OpenTelemetrySpanExt as _;

use super::propagate;

/// The span of one `ShouldRateLimit` call, named as the reference's
/// gRPC interceptor (otelgrpc) names it, its caller's context read from
/// the call's metadata (`headers`).
pub(crate) fn should_rate_limit(headers: &HeaderMap) -> Span {
    let Some(parent) = sampled(headers) else {
        return Span::none();
    };
    let span = tracing::trace_span!(
        target: "tollgate::envoy",
        "envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit",
        otel.kind = "server",
        rpc.system = "grpc",
        rpc.service = "envoy.service.ratelimit.v3.RateLimitService",
        rpc.method = "ShouldRateLimit",
        rpc.grpc.status_code = Empty,
        domain = Empty,
        tollgate.door = "envoy",
        tollgate.code = Empty,
        otel.status_code = Empty,
        otel.status_description = Empty,
    );
    adopt(&span, parent);
    span
}

/// Records a `ShouldRateLimit` answer on its span: the gRPC status, and
/// for an answer its overall code (`OK`, `OVER_LIMIT`).
pub(crate) fn grpc_answer(span: &Span, answer: Result<&str, (i32, &str)>) {
    if span.is_disabled() {
        return;
    }
    match answer {
        Ok(code) => {
            span.record("rpc.grpc.status_code", 0);
            span.record("tollgate.code", code);
        }
        Err((status, message)) => {
            span.record("rpc.grpc.status_code", status);
            span.record("otel.status_code", "error");
            span.record("otel.status_description", message);
        }
    }
}

/// The span of one HTTP request that decides, on `door` (`api`,
/// `proxy`, `admin`), named `{method} {route}` as the HTTP semantic
/// conventions name server spans (`route` is the door's template, never
/// the client's path: bounded names).
pub(crate) fn http(door: &'static str, method: &Method, route: &str, headers: &HeaderMap) -> Span {
    let Some(parent) = sampled(headers) else {
        return Span::none();
    };
    let span = tracing::trace_span!(
        target: "tollgate::http",
        "http",
        otel.name = Empty,
        otel.kind = "server",
        http.request.method = method.as_str(),
        http.route = route,
        http.response.status_code = Empty,
        tollgate.door = door,
        otel.status_code = Empty,
    );
    if !span.is_disabled() {
        span.record("otel.name", format!("{method} {route}"));
        adopt(&span, parent);
    }
    span
}

/// Records an HTTP answer's status on its span (a 5xx is an error, as
/// the semantic conventions have it for servers).
pub(crate) fn http_answer(span: &Span, status: StatusCode) {
    if span.is_disabled() {
        return;
    }
    span.record("http.response.status_code", status.as_u16());
    if status.is_server_error() {
        span.record("otel.status_code", "error");
    }
}

/// Records the request's domain on the current `ShouldRateLimit` span.
pub(crate) fn domain(domain: &[u8]) {
    if super::on() {
        Span::current().record("domain", &*String::from_utf8_lossy(domain));
    }
}

/// `None` when the call is not traced (tracing off, or the sampler
/// drops it); else the caller's context in `headers`, if any.
fn sampled(headers: &HeaderMap) -> Option<Option<Context>> {
    if !super::on() {
        return None;
    }
    let parent = propagate::extract(headers);
    super::keeps(parent.as_ref()).then_some(parent)
}

/// Makes the caller's context, if any, the parent of `span`.
fn adopt(span: &Span, parent: Option<Context>) {
    let Some(cx) = parent else { return };
    if span.is_disabled() {
        return;
    }
    // Fails only for a span already started or not exported: then it
    // stays a root.
    let _ = span.set_parent(cx);
}
