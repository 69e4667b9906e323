//! The Envoy door's side of the reference service's series (`[metrics]
//! reference_names`, [`crate::metrics::reference`]): each descriptor that
//! found a limit counted under its stats key with the reference's
//! arithmetic, once the request is decided.
//!
//! The stats key is the config path ([`EnvoyLimits::metric_key`]), the
//! request's values only under `detailed_metric` / `value_to_metric` and
//! for a descriptor carrying its own `limit` (then the reference's
//! `descriptorKey`). Unlimited and replaced descriptors have no stats, as
//! there; nor has a give-back (`is_negative_hits`), which the reference
//! does not know. A descriptor the store did not decide (it failed, and
//! the failure policy answered) counts its hits in `total_hits` only, and
//! the call once as a `redis_error`.

use tollgate::Op;

use crate::doors::envoy::limits::EnvoyLimits;
use crate::doors::envoy::plan::Plan;
use crate::doors::envoy::wire::RateLimitRequest;
use crate::metrics::reference::{ErrorKind, ReferenceMetrics, Seen, descriptor_key, tally};

/// Counts the decided request `req` (under `limits`) in `metrics`: `plans`
/// as resolved, `seen` what the store said of each key, `over(i)` whether
/// descriptor `i` was answered over its limit (a shadow limit: was over).
pub(crate) fn record(
    metrics: &ReferenceMetrics,
    near_ratio: f64,
    (req, limits): (&RateLimitRequest, &EnvoyLimits),
    plans: &[Plan<'_>],
    seen: &[Option<Seen>],
    over: impl Fn(usize) -> bool,
) {
    // `plan` refused a domain that is not UTF-8.
    let domain = std::str::from_utf8(&req.domain).unwrap_or_default();
    let mut store_failed = false;
    for (i, plan) in plans.iter().enumerate() {
        let seen = match plan {
            Plan::Counted { op: Op::Refund, .. } | Plan::None | Plan::Unlimited => continue,
            Plan::Counted { .. } => seen[i],
            // Never in the store: a count of 0 against a limit of 0.
            Plan::Zero(_) => Some(Seen {
                before: 0,
                limit: 0,
            }),
        };
        let Some(limit) = plan.limit() else { continue };
        store_failed |= seen.is_none();
        let d = &req.descriptors[i];
        let entries = d.pairs();
        let (key, from_request) = if d.limit.is_some() {
            (Some(descriptor_key(domain, &entries)), true)
        } else {
            (limits.metric_key(domain, &entries), limit.runtime_metric)
        };
        let Some(key) = key else { continue };
        let hits = match &d.hits_addend {
            Some(h) => h.value,
            None => u64::from(req.hits_addend.max(1)),
        };
        let counts = tally(hits, seen, near_ratio, over(i), limit.shadow_mode);
        metrics.add(&key, from_request, counts);
    }
    if store_failed {
        metrics.error(ErrorKind::Redis);
    }
}
