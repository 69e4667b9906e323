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
//! the call once as a `redis_error`; so does every descriptor of a call
//! that failed on the store (`store_failure = "error"`), whose error the
//! door counts.

use std::sync::{Arc, OnceLock};

use tollgate::Op;

use crate::doors::envoy::limits::EnvoyLimits;
use crate::doors::envoy::plan::Plan;
use crate::doors::envoy::wire::RateLimitRequest;
use crate::metrics::reference::{
    ErrorKind, ReferenceMetrics, Seen, SeriesHandle, descriptor_key, tally,
};

/// One generation's side of the series: where they are counted, the
/// near-limit ratio, and the series of each Envoy rule whose stats key is
/// its config path, found at its first hit and kept, so a call counts
/// without building its key.
#[derive(Debug)]
pub(crate) struct ReferenceSeries {
    metrics: Arc<ReferenceMetrics>,
    near_ratio: f64,
    by_rule: Vec<OnceLock<Option<SeriesHandle>>>,
}

impl ReferenceSeries {
    /// Counting into `metrics` with `near_ratio`, for `rules` Envoy rules.
    pub(crate) fn new(metrics: Arc<ReferenceMetrics>, near_ratio: f64, rules: usize) -> Self {
        Self {
            metrics,
            near_ratio,
            by_rule: (0..rules).map(|_| OnceLock::new()).collect(),
        }
    }

    /// Where the series are counted.
    pub(crate) fn metrics(&self) -> &Arc<ReferenceMetrics> {
        &self.metrics
    }

    /// Counts the decided request `req` (under `limits`, whose rules start
    /// at `first_rule` in the gate): `plans` as resolved, `seen` what the
    /// store said of each key, `over(i)` whether descriptor `i` was
    /// answered over its limit (a shadow limit: was over).
    pub(crate) fn record(
        &self,
        request: (&RateLimitRequest, &EnvoyLimits, usize),
        plans: &[Plan<'_>],
        seen: &[Option<Seen>],
        over: impl Fn(usize) -> bool,
    ) {
        if self.count(request, plans, Some(seen), over) {
            self.metrics.error(ErrorKind::Redis);
        }
    }

    /// Counts the request `request` whose call failed on the store
    /// (`[envoy] store_failure = "error"`): each descriptor with a limit
    /// its hits in `total_hits` and nothing else, as the reference counts
    /// them before its Redis call. The error itself is the door's to count
    /// ([`crate::doors::envoy::failure::CallError`]).
    pub(crate) fn record_failed(
        &self,
        request: (&RateLimitRequest, &EnvoyLimits, usize),
        plans: &[Plan<'_>],
    ) {
        self.count(request, plans, None, |_| false);
    }

    /// Counts each descriptor with a limit; `seen` what the store said of
    /// each key (`None`: the call failed, nothing was decided). Whether a
    /// descriptor the store did not decide was counted.
    fn count(
        &self,
        (req, limits, first_rule): (&RateLimitRequest, &EnvoyLimits, usize),
        plans: &[Plan<'_>],
        seen: Option<&[Option<Seen>]>,
        over: impl Fn(usize) -> bool,
    ) -> bool {
        // `plan` refused a domain that is not UTF-8.
        let domain = std::str::from_utf8(&req.domain).unwrap_or_default();
        let mut store_failed = false;
        for (i, plan) in plans.iter().enumerate() {
            let (seen, rule) = match plan {
                Plan::Counted { op: Op::Refund, .. } | Plan::None | Plan::Unlimited => continue,
                Plan::Counted { rule, .. } => {
                    (seen.and_then(|s| s[i]), rule.checked_sub(first_rule))
                }
                // Never in the store: a count of 0 against a limit of 0
                // (a failed call decided nothing, this one included).
                Plan::Zero(_) => (
                    seen.map(|_| Seen {
                        before: 0,
                        limit: 0,
                    }),
                    None,
                ),
            };
            let Some(limit) = plan.limit() else { continue };
            store_failed |= seen.is_none();
            let d = &req.descriptors[i];
            let hits = match &d.hits_addend {
                Some(h) => h.value,
                None => u64::from(req.hits_addend.max(1)),
            };
            let counts = tally(hits, seen, self.near_ratio, over(i), limit.shadow_mode);
            if counts.iter().all(|&c| c == 0) {
                // A series appears with its first hit, as the reference's.
                continue;
            }
            let from_request = d.limit.is_some() || limit.runtime_metric;
            let key = || {
                let entries = d.pairs();
                if d.limit.is_some() {
                    Some(descriptor_key(domain, &entries))
                } else {
                    limits.metric_key(domain, &entries)
                }
            };
            match rule
                .and_then(|r| self.by_rule.get(r))
                .filter(|_| !from_request)
            {
                Some(slot) => {
                    let series =
                        slot.get_or_init(|| key().and_then(|k| self.metrics.series(&k, false)));
                    if let Some(series) = series {
                        series.add(counts);
                    }
                }
                None => {
                    if let Some(key) = key() {
                        self.metrics.add(&key, from_request, counts);
                    }
                }
            }
        }
        store_failed
    }
}
