//! A `ShouldRateLimit` request checked and resolved, descriptor by
//! descriptor, into what the service will do with it ([`Plan`]): the limit
//! each descriptor finds (`replaces` applied), its store key, its cost and
//! whether it is a check, a peek, a charge or a refund (a give-back)
//! (docs/envoy.md, "Deciding" and "Charging usage").

use std::borrow::Cow;
use std::collections::HashSet;

use tollgate::{Algorithm, Op, Rule};

use crate::doors::envoy::limits::{EnvoyLimits, Limit, Unit, override_limit, store_key};
use crate::doors::envoy::wire::{RateLimitDescriptor, RateLimitRequest};

/// The most descriptors one request may carry.
pub const MAX_DESCRIPTORS: usize = 64;
/// The most entries one descriptor may carry.
pub const MAX_ENTRIES: usize = 64;

/// One descriptor's limit, as the request resolved it.
#[derive(Debug, Clone)]
pub(crate) enum Plan<'a> {
    /// No limit applies.
    None,
    /// `unlimited: true`.
    Unlimited,
    /// `requests_per_unit: 0`: always over.
    Zero(Cow<'a, Limit>),
    /// A limit the store decides: gate rule `rule`, the descriptor's store
    /// key, the cost, and what to do with it ([`Op::Check`], a peek at cost
    /// 0; [`Op::Charge`] for `rate_limit.charge` and a cost above 0,
    /// recorded in full and never refused; [`Op::Refund`] for
    /// `is_negative_hits`, never refused); for a request's own `limit`
    /// override, the per-call rule it is decided under. `own`: an own
    /// `hits_addend` above 0 under `[envoy] count_own_cost`, an
    /// [`Op::Charge`] answered as the reference answers it (`OVER_LIMIT`
    /// when the count after it passes the limit).
    Counted {
        limit: Cow<'a, Limit>,
        rule: usize,
        key: String,
        cost: u64,
        op: Op,
        under: Option<Rule>,
        own: bool,
    },
}

impl Plan<'_> {
    /// Whether this is an own cost counted under `count_own_cost`.
    pub(crate) fn counts_own(&self) -> bool {
        matches!(self, Plan::Counted { own: true, .. })
    }

    /// Its limit, when it has one.
    pub(crate) fn limit(&self) -> Option<&Limit> {
        match self {
            Plan::Zero(limit) | Plan::Counted { limit, .. } => Some(limit),
            Plan::None | Plan::Unlimited => None,
        }
    }
}

/// Each descriptor of `req` resolved against `limits`, whose rules start
/// at `first_rule` in the gate's list; with `count_own_cost`, a
/// descriptor's own `hits_addend` above 0 is counted in full (`[envoy]
/// count_own_cost`).
///
/// # Errors
/// `INVALID_ARGUMENT` naming what is wrong with the request, before
/// anything is counted.
pub(crate) fn plan<'a>(
    limits: &'a EnvoyLimits,
    first_rule: usize,
    req: &RateLimitRequest,
    count_own_cost: bool,
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
        // The descriptor's own hits_addend, 0 included (a peek); else the
        // request's, where 0 means 1 (as in envoyproxy/ratelimit).
        let cost = match &d.hits_addend {
            Some(h) => h.value,
            None if req.hits_addend == 0 => 1,
            None => u64::from(req.hits_addend),
        };
        // Counted whatever it answers (not a give-back, not a peek).
        let own = count_own_cost && d.hits_addend.is_some() && cost > 0 && !d.is_negative_hits;
        if d.limit.is_some() {
            found.push(Found::Override(overridden(
                limits,
                domain,
                (first_rule, i),
                d,
                (cost, own),
            )?));
            continue;
        }
        let mut entries = d.pairs();
        // The entries a share_threshold wildcard matched now carry its
        // pattern: the values it matches share one counter.
        let found_limit = limits.find_shared(domain, &mut entries);
        found.push(Found::Config(
            found_limit,
            Cost {
                cost,
                negative: d.is_negative_hits,
                own,
            },
            entries,
        ));
    }
    let replaced: HashSet<&str> = found
        .iter()
        .filter_map(|f| match f {
            Found::Config(l, ..) => *l,
            Found::Override(_) => None,
        })
        .flat_map(|l| l.replaces.iter().map(String::as_str))
        .collect();
    Ok(found
        .into_iter()
        .map(|f| {
            let (limit, cost, entries) = match f {
                Found::Config(limit, cost, entries) => (limit, cost, entries),
                Found::Override(plan) => return plan,
            };
            configured(limit, cost, &entries, &replaced, first_rule)
        })
        .collect())
}

/// What a descriptor found: a limit of the config (with its cost and its
/// entries as counted), or its own override.
enum Found<'a, 'e> {
    Config(Option<&'a Limit>, Cost, Vec<(&'e [u8], &'e [u8])>),
    Override(Plan<'a>),
}

/// A descriptor's cost and what kind it is.
#[derive(Clone, Copy)]
struct Cost {
    cost: u64,
    /// `is_negative_hits`: a give-back.
    negative: bool,
    /// An own cost counted in full (`count_own_cost`).
    own: bool,
}

/// The plan of a descriptor that found `limit` in the config.
fn configured<'a>(
    limit: Option<&'a Limit>,
    Cost {
        cost,
        negative,
        own,
    }: Cost,
    entries: &[(&[u8], &[u8])],
    replaced: &HashSet<&str>,
    first_rule: usize,
) -> Plan<'a> {
    match limit {
        None => Plan::None,
        // Unlimited first, as the reference service: a replaced
        // unlimited limit still reads unlimited.
        Some(l) if l.unlimited => Plan::Unlimited,
        Some(l) if !l.name.is_empty() && replaced.contains(l.name.as_str()) => Plan::None,
        Some(l) => match l.rule {
            // The key only for what the store counts (a long one
            // costs a SHA-256).
            Some(r) => Plan::Counted {
                limit: Cow::Borrowed(l),
                rule: first_rule + r,
                key: store_key(entries),
                cost,
                op: if negative {
                    Op::Refund
                } else if (l.charge || own) && cost > 0 {
                    Op::Charge
                } else {
                    Op::Check
                },
                under: None,
                // `charge: true` keeps its meaning (always OK): the more
                // specific setting wins.
                own: own && !l.charge,
            },
            // Nothing is counted, so nothing to give back.
            None if negative => Plan::None,
            None => Plan::Zero(Cow::Borrowed(l)),
        },
    }
}

/// The plan of descriptor `i`, `d`, which carries its own `limit`: as the
/// reference service, that limit applies whatever the config says of the
/// descriptor (no shadow or quota mode, no name, nothing replaced), on any
/// domain the config has; its counter is the configured limit's when that
/// one is a fixed window of the same unit, else the domain's for the unit
/// (`limits/overrides.rs`, docs/envoy.md "Limit overrides").
///
/// # Errors
/// `INVALID_ARGUMENT` for a unit that is none of the seven.
fn overridden<'a>(
    limits: &'a EnvoyLimits,
    domain: &str,
    (first_rule, i): (usize, usize),
    d: &RateLimitDescriptor,
    (cost, own): (u64, bool),
) -> Result<Plan<'a>, tonic::Status> {
    let Some(o) = &d.limit else {
        return Ok(Plan::None);
    };
    if !limits.has_domain(domain) {
        return Ok(Plan::None);
    }
    let Some(unit) = Unit::from_proto(o.unit) else {
        return Err(tonic::Status::invalid_argument(format!(
            "descriptors[{i}].limit.unit is {}: not a rate limit unit (1 SECOND, 2 MINUTE, \
             3 HOUR, 4 DAY, 5 MONTH, 6 YEAR, 7 WEEK)",
            o.unit
        )));
    };
    let entries = d.pairs();
    // Only a fixed window (the reference's only kind) is a count the two
    // limits can share.
    let configured = limits
        .find(domain, &entries)
        .filter(|l| l.unit == Some(unit))
        .and_then(|l| l.rule)
        .filter(|&r| limits.all_rules()[r].algorithm() == Algorithm::FixedWindow);
    let mut limit = Limit {
        rule: None,
        name: String::new(),
        path: String::new(),
        requests_per_unit: o.requests_per_unit,
        unit: Some(unit),
        unlimited: false,
        shadow_mode: false,
        quota_mode: false,
        detailed_metric: false,
        runtime_metric: false,
        replaces: Vec::new(),
        charge: false,
        metadata: None,
    };
    let Some(r) = configured.or_else(|| limits.override_rule(domain, unit)) else {
        return Ok(Plan::None);
    };
    if o.requests_per_unit == 0 {
        return Ok(if d.is_negative_hits {
            Plan::None
        } else {
            Plan::Zero(Cow::Owned(limit))
        });
    }
    let under = override_limit(&limits.all_rules()[r], o.requests_per_unit)
        .map_err(|e| tonic::Status::invalid_argument(format!("descriptors[{i}].limit: {e}")))?;
    limit.rule = Some(r);
    Ok(Plan::Counted {
        limit: Cow::Owned(limit),
        rule: first_rule + r,
        key: store_key(&entries),
        cost,
        op: if d.is_negative_hits {
            Op::Refund
        } else if own {
            Op::Charge
        } else {
            Op::Check
        },
        under: Some(under),
        own,
    })
}
