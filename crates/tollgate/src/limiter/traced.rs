//! One span per store call (target `tollgate::store`, level TRACE, so off
//! unless a subscriber asks for it, and then built only when asked): the
//! server turns them into OpenTelemetry spans (docs/tracing.md). A
//! disabled span costs the level check; its fields are not evaluated.

use tracing::Span;

use crate::decision::{Decision, MultiDecision};
use crate::store::KeyCheck;

/// The span of one store call named `$name` (`store.check`, ...), of the
/// store `$store` ([`crate::Store::kind`]), over `$pairs` pairs.
macro_rules! store_span {
    ($name:expr, $store:expr, $pairs:expr) => {
        tracing::trace_span!(
            target: "tollgate::store",
            "store",
            otel.name = $name,
            tollgate.store = $store,
            tollgate.pairs = $pairs,
            tollgate.rule = tracing::field::Empty,
            tollgate.allowed = tracing::field::Empty,
            otel.status_code = tracing::field::Empty,
            error.message = tracing::field::Empty,
        )
    };
}
pub(crate) use store_span;

/// Records on `span` what decided: the deciding pair's rule and whether
/// every pair was admitted.
pub(crate) fn decided(span: &Span, pairs: &[KeyCheck<'_>], multi: &MultiDecision) {
    if span.is_disabled() {
        return;
    }
    span.record("tollgate.allowed", multi.allowed);
    if let Some(p) = pairs.get(multi.deciding) {
        span.record("tollgate.rule", p.rule.name());
    }
}

/// The span name of a store call `what` (as [`crate::resilient`] names
/// its calls in timeout errors).
pub(crate) fn name_of(what: &str) -> &'static str {
    match what {
        "check" => "store.check",
        "charge" => "store.charge",
        "refund" => "store.refund",
        "reserve" => "store.reserve",
        "acquire" => "store.acquire",
        "settle" | "settle (cancel)" => "store.settle",
        "release" | "renew" => "store.release",
        _ => "store.call",
    }
}

/// As [`decided`], for one pair under `rule`.
pub(super) fn decided_one(span: &Span, rule: &str, d: &Decision) {
    if span.is_disabled() {
        return;
    }
    span.record("tollgate.allowed", d.allowed);
    span.record("tollgate.rule", rule);
}
