//! A `ShouldRateLimit` request checked and resolved, descriptor by
//! descriptor, into what the service will do with it ([`Plan`]): the limit
//! each descriptor finds (`replaces` applied), its store key, its cost and
//! whether it is a check, a peek, a charge or a give-back
//! (docs/envoy.md, "Deciding" and "Charging usage").

use std::collections::HashSet;

use crate::envoy::limits::{EnvoyLimits, Limit, store_key};
use crate::envoy::wire::RateLimitRequest;
use crate::gate::Throttle;

/// The most descriptors one request may carry.
pub const MAX_DESCRIPTORS: usize = 64;
/// The most entries one descriptor may carry.
pub const MAX_ENTRIES: usize = 64;

/// What a counted descriptor asks of the store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Op {
    /// A check of its cost, all-or-nothing with the request's other checks;
    /// a cost of 0 peeks (denied while the key is over its limit).
    Check,
    /// A charge (`rate_limit.charge` and a cost above 0): recorded in full,
    /// even past the limit; never refused.
    Charge,
    /// `is_negative_hits`: the cost given back, the units counted last
    /// first, never past empty/full; never refused.
    GiveBack,
}

/// One descriptor's limit, as the request resolved it.
#[derive(Debug, Clone)]
pub(crate) enum Plan<'a> {
    /// No limit applies.
    None,
    /// `unlimited: true`.
    Unlimited,
    /// `requests_per_unit: 0`: always over.
    Zero(&'a Limit),
    /// A limit the store decides: gate rule `rule`, the descriptor's store
    /// key, the cost, and what to do with it.
    Counted {
        limit: &'a Limit,
        rule: usize,
        key: String,
        cost: u64,
        op: Op,
    },
}

impl Plan<'_> {
    /// Whether this is a counted limit doing `op`, in shadow mode or not.
    pub(crate) fn is(&self, op: Op, shadow: bool) -> bool {
        matches!(self, Plan::Counted { limit, op: o, .. } if *o == op && limit.shadow_mode == shadow)
    }
}

/// Each descriptor of `req` resolved against `limits`, whose rules start
/// at `first_rule` in the gate's list; a descriptor's limit override is
/// logged (through `overrides_log`) and ignored.
///
/// # Errors
/// `INVALID_ARGUMENT` naming what is wrong with the request, before
/// anything is counted.
pub(crate) fn plan<'a>(
    limits: &'a EnvoyLimits,
    first_rule: usize,
    overrides_log: &Throttle,
    req: &RateLimitRequest,
) -> Result<Vec<Plan<'a>>, tonic::Status> {
    if req.domain.is_empty() {
        return Err(tonic::Status::invalid_argument(
            "rate limit domain must not be empty",
        ));
    }
    let Ok(domain) = std::str::from_utf8(&req.domain) else {
        return Err(tonic::Status::invalid_argument(
            "rate limit domain is not valid UTF-8",
        ));
    };
    if req.descriptors.is_empty() {
        return Err(tonic::Status::invalid_argument(
            "rate limit descriptor list must not be empty",
        ));
    }
    if req.descriptors.len() > MAX_DESCRIPTORS {
        return Err(tonic::Status::invalid_argument(format!(
            "{} descriptors in one request; at most {MAX_DESCRIPTORS}",
            req.descriptors.len()
        )));
    }
    let mut found = Vec::with_capacity(req.descriptors.len());
    for (i, d) in req.descriptors.iter().enumerate() {
        if d.entries.is_empty() {
            return Err(tonic::Status::invalid_argument(format!(
                "descriptors[{i}] has no entries"
            )));
        }
        if d.entries.len() > MAX_ENTRIES {
            return Err(tonic::Status::invalid_argument(format!(
                "descriptors[{i}] has {} entries; at most {MAX_ENTRIES}",
                d.entries.len()
            )));
        }
        if d.limit.is_some() {
            overrides_log.report(|suppressed| {
                tracing::warn!(
                    "Envoy rate limit service: a descriptor carries a limit override; \
                     overrides are not supported, the config's limit applies \
                     ({suppressed} more since the last report)"
                );
            });
        }
        // The descriptor's own hits_addend, 0 included (a peek); else the
        // request's, where 0 means 1 (as in envoyproxy/ratelimit).
        let cost = match &d.hits_addend {
            Some(h) => h.value,
            None if req.hits_addend == 0 => 1,
            None => u64::from(req.hits_addend),
        };
        let mut entries: Vec<(&[u8], &[u8])> = d
            .entries
            .iter()
            .map(|e| (e.key.as_slice(), e.value.as_slice()))
            .collect();
        // The entries a share_threshold wildcard matched now carry its
        // pattern: the values it matches share one counter.
        let found_limit = limits.find_shared(domain, &mut entries);
        found.push((found_limit, cost, d.is_negative_hits, entries));
    }
    let replaced: HashSet<&str> = found
        .iter()
        .filter_map(|(l, ..)| *l)
        .flat_map(|l| l.replaces.iter().map(String::as_str))
        .collect();
    Ok(found
        .into_iter()
        .map(|(limit, cost, negative, entries)| match limit {
            None => Plan::None,
            // Unlimited first, as the reference service: a replaced
            // unlimited limit still reads unlimited.
            Some(l) if l.unlimited => Plan::Unlimited,
            Some(l) if !l.name.is_empty() && replaced.contains(l.name.as_str()) => Plan::None,
            Some(l) => match l.rule {
                // The key only for what the store counts (a long one
                // costs a SHA-256).
                Some(r) => Plan::Counted {
                    limit: l,
                    rule: first_rule + r,
                    key: store_key(&entries),
                    cost,
                    op: if negative {
                        Op::GiveBack
                    } else if l.charge && cost > 0 {
                        Op::Charge
                    } else {
                        Op::Check
                    },
                },
                // Nothing is counted, so nothing to give back.
                None if negative => Plan::None,
                None => Plan::Zero(l),
            },
        })
        .collect())
}
