//! `envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit` over a
//! [`Gate`]: each request descriptor is matched to its limit in the
//! envoyproxy/ratelimit config ([`EnvoyLimits::find`]) and the matched
//! limits are decided together, all-or-nothing, with the same store,
//! failure policy and metrics as every other rule.
//!
//! What a request gets, descriptor by descriptor, in order:
//!
//! * no limit matches (unknown domain, no node, or the limit was replaced
//!   by another matched limit's `replaces`): `OK`, no `current_limit`;
//! * an `unlimited` limit: `OK`, `limit_remaining` `u32::MAX`;
//! * a limit: its decision. The request's enforced limits are one
//!   all-or-nothing check: if any is over, none consumes (a denied request
//!   takes no quota, unlike the reference service, which counts every
//!   descriptor of a denied request). `requests_per_unit: 0` is always over.
//! * a `shadow_mode` limit: counted (and in the metrics as it decides) but
//!   always `OK`. It consumes only when the request is admitted, each shadow
//!   limit on its own (all of them in one round of store calls, after the
//!   enforced check); on a denied request it is only read.
//!
//! `hits_addend` is the cost: the descriptor's own when set (0 reads without
//! consuming), else the request's, where 0 means 1. A descriptor whose
//! store key would pass [`tollgate::MAX_KEY_LEN`] is counted under its
//! digest ([`store_key`]), never refused: a refusal would be a gRPC error,
//! which Envoy's default `failure_mode_deny: false` turns into an
//! admission, so one long header would switch every limit of the request
//! off. A value (or key) that is not UTF-8, as a header value may be, is
//! matched and counted like any other, by its bytes ([`EnvoyLimits::find`],
//! [`store_key`]): such a value never equals a configured value but can
//! match a wildcard or key-only node, and each distinct byte string has its
//! own counter, apart from every UTF-8 string's. A store that fails under
//! `on_error = "deny"` answers `OVER_LIMIT` for every enforced limit (as
//! the user chose), not such an error; under `allow` the statuses are `OK`
//! with no limit or numbers (nothing was decided). A bad request (empty domain, no descriptors, a descriptor
//! without entries, too many descriptors or entries, `is_negative_hits`) is
//! `INVALID_ARGUMENT` naming the problem, before anything is counted; so is
//! a domain that is not UTF-8 (domains come from Envoy's config, never from
//! a client, and name a config's `domain`, which is UTF-8).

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitResponse;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::{
    Code, DescriptorStatus, RateLimit as CurrentLimit,
};
use envoy_types::pb::google::protobuf::Duration as ProtoDuration;
use futures_util::future::join_all;
use tollgate::{Check, Decision, OnError};

use crate::envoy::limits::{EnvoyLimits, Limit, Unit, store_key};
use crate::envoy::wire::RateLimitRequest;
use tollgate::resilient::Refusal;

use crate::gate::{Gate, Throttle};

/// The most descriptors one request may carry.
pub const MAX_DESCRIPTORS: usize = 64;
/// The most entries one descriptor may carry.
pub const MAX_ENTRIES: usize = 64;

/// The Envoy rate limit service.
#[derive(Debug)]
pub struct EnvoyService {
    gate: Arc<Gate>,
    limits: Arc<EnvoyLimits>,
    /// Where the Envoy rules start in the gate's rule list.
    first_rule: usize,
    overrides_log: Throttle,
}

/// One descriptor's limit, as the request resolved it.
#[derive(Debug, Clone)]
enum Plan<'a> {
    /// No limit applies.
    None,
    /// `unlimited: true`.
    Unlimited,
    /// `requests_per_unit: 0`: always over.
    Zero(&'a Limit),
    /// A limit the store decides: gate rule `rule`, the descriptor's store
    /// key, and the cost.
    Counted {
        limit: &'a Limit,
        rule: usize,
        key: String,
        cost: u64,
    },
}

impl EnvoyService {
    /// The service over `gate`, whose rules end with `limits`' rules (in
    /// their order).
    ///
    /// # Errors
    /// When the gate does not hold `limits`' rules at its end.
    pub fn new(gate: Arc<Gate>, limits: Arc<EnvoyLimits>) -> Result<Self, String> {
        let rules = gate.rules();
        let envoy = limits.rules();
        let Some(first_rule) = rules.len().checked_sub(envoy.len()) else {
            return Err("the gate holds fewer rules than the Envoy config".to_owned());
        };
        if rules[first_rule..] != *envoy {
            return Err("the gate's rules do not end with the Envoy config's".to_owned());
        }
        Ok(Self {
            gate,
            limits,
            first_rule,
            overrides_log: Throttle::new(Duration::from_secs(1)),
        })
    }

    /// Decides one request (the gRPC method without its transport).
    ///
    /// # Errors
    /// `INVALID_ARGUMENT` naming what is wrong with the request.
    pub async fn decide(&self, req: &RateLimitRequest) -> Result<RateLimitResponse, tonic::Status> {
        let plans = self.plan(req)?;

        let mut statuses: Vec<DescriptorStatus> = plans
            .iter()
            .map(|p| match p {
                Plan::None | Plan::Counted { .. } => DescriptorStatus {
                    code: Code::Ok.into(),
                    ..DescriptorStatus::default()
                },
                Plan::Unlimited => DescriptorStatus {
                    code: Code::Ok.into(),
                    limit_remaining: u32::MAX,
                    ..DescriptorStatus::default()
                },
                Plan::Zero(limit) => DescriptorStatus {
                    code: if limit.shadow_mode {
                        Code::Ok
                    } else {
                        Code::OverLimit
                    }
                    .into(),
                    current_limit: Some(current(limit)),
                    limit_remaining: 0,
                    duration_until_reset: limit.unit.map(|u| to_window_end(u.seconds())),
                    ..DescriptorStatus::default()
                },
            })
            .collect();
        let zero_enforced = plans
            .iter()
            .any(|p| matches!(p, Plan::Zero(l) if !l.shadow_mode));

        // The enforced limits: one all-or-nothing check (read only when a
        // zero limit already denies the request).
        let (enforced, checks) = self.checks(&plans, false, zero_enforced);
        let mut admitted = !zero_enforced;
        if !enforced.is_empty() {
            match self.gate.check_all(&checks).await {
                Ok(verdict) => {
                    admitted &= verdict.multi.allowed;
                    let guessed = verdict.degraded == Some(OnError::Allow);
                    for (&i, d) in enforced.iter().zip(&verdict.multi.decisions) {
                        // Under `allow` nothing was decided: OK, and no
                        // numbers the store never gave.
                        if !guessed {
                            statuses[i] = status(&plans[i], d, d.allowed);
                        }
                    }
                }
                Err(Refusal::Invalid(e)) => {
                    return Err(tonic::Status::invalid_argument(e.to_string()));
                }
                // The store failed and the policy is `deny`.
                Err(_) => {
                    // `on_error = "deny"`: the user's choice stands.
                    admitted = false;
                    for &i in &enforced {
                        if let Plan::Counted { limit, .. } = &plans[i] {
                            statuses[i] = DescriptorStatus {
                                code: Code::OverLimit.into(),
                                current_limit: Some(current(limit)),
                                ..DescriptorStatus::default()
                            };
                        }
                    }
                }
            }
        }

        // Shadow limits: each on its own, all at once (one store round trip
        // between them, not one each), consuming only if the request goes
        // through; always OK. A shadow limit the store cannot decide reads
        // OK with no numbers: it never fails the request.
        let (shadows, checks) = self.checks(&plans, true, !admitted);
        let decided = join_all(
            checks
                .iter()
                .map(|check| self.gate.check_all(std::slice::from_ref(check))),
        )
        .await;
        for (&i, result) in shadows.iter().zip(decided) {
            if let Ok(verdict) = result
                && verdict.degraded != Some(OnError::Allow)
            {
                statuses[i] = status(&plans[i], verdict.decision(), true);
            }
        }

        Ok(RateLimitResponse {
            overall_code: if admitted { Code::Ok } else { Code::OverLimit }.into(),
            statuses,
            ..RateLimitResponse::default()
        })
    }

    /// Each descriptor's limit and cost, `replaces` applied.
    fn plan<'a>(&'a self, req: &RateLimitRequest) -> Result<Vec<Plan<'a>>, tonic::Status> {
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
            if d.is_negative_hits {
                return Err(tonic::Status::invalid_argument(format!(
                    "descriptors[{i}].is_negative_hits: giving quota back is not supported"
                )));
            }
            if d.limit.is_some() {
                self.overrides_log.report(|suppressed| {
                    tracing::warn!(
                        "Envoy rate limit service: a descriptor carries a limit override; \
                         overrides are not supported, the config's limit applies \
                         ({suppressed} more since the last report)"
                    );
                });
            }
            let cost = match &d.hits_addend {
                Some(h) => h.value,
                None if req.hits_addend == 0 => 1,
                None => u64::from(req.hits_addend),
            };
            let entries: Vec<(&[u8], &[u8])> = d
                .entries
                .iter()
                .map(|e| (e.key.as_slice(), e.value.as_slice()))
                .collect();
            found.push((self.limits.find(domain, &entries), cost, entries));
        }
        let replaced: HashSet<&str> = found
            .iter()
            .filter_map(|(l, ..)| *l)
            .flat_map(|l| l.replaces.iter().map(String::as_str))
            .collect();
        Ok(found
            .into_iter()
            .map(|(limit, cost, entries)| match limit {
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
                        rule: self.first_rule + r,
                        key: store_key(&entries),
                        cost,
                    },
                    None => Plan::Zero(l),
                },
            })
            .collect())
    }

    /// The counted plans in shadow mode (`shadow`) or not, by position,
    /// with their checks; `read_only` checks read without consuming.
    fn checks<'a>(
        &'a self,
        plans: &'a [Plan<'a>],
        shadow: bool,
        read_only: bool,
    ) -> (Vec<usize>, Vec<Check<'a>>) {
        plans
            .iter()
            .enumerate()
            .filter_map(|(i, p)| match p {
                Plan::Counted {
                    limit,
                    rule,
                    key,
                    cost,
                } if limit.shadow_mode == shadow => {
                    let name = self.gate.rules()[*rule].name();
                    let cost = if read_only { 0 } else { *cost };
                    Some((i, Check::new(name, key.as_bytes()).cost(cost)))
                }
                _ => None,
            })
            .unzip()
    }
}

/// The limit as a status's `current_limit`.
fn current(limit: &Limit) -> CurrentLimit {
    CurrentLimit {
        name: limit.name.clone(),
        requests_per_unit: limit.requests_per_unit,
        unit: limit.unit.map_or(0, Unit::proto),
    }
}

/// A counted limit's status from its decision; `ok` overrides the code
/// (shadow mode, and a pair that would have admitted in a denied check).
fn status(plan: &Plan<'_>, d: &Decision, ok: bool) -> DescriptorStatus {
    let Plan::Counted { limit, .. } = plan else {
        return DescriptorStatus::default();
    };
    let ok = ok || limit.shadow_mode;
    DescriptorStatus {
        code: if ok { Code::Ok } else { Code::OverLimit }.into(),
        current_limit: Some(current(limit)),
        limit_remaining: u32::try_from(d.remaining).unwrap_or(u32::MAX),
        duration_until_reset: Some(proto_duration(d.reset_after)),
        ..DescriptorStatus::default()
    }
}

/// A `google.protobuf.Duration`.
fn proto_duration(d: Duration) -> ProtoDuration {
    ProtoDuration {
        seconds: i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
        nanos: i32::try_from(d.subsec_nanos()).unwrap_or(0),
    }
}

/// Time to the end of the current `unit_secs` window on the wall clock (the
/// reference service's windows), for limits the store never sees.
fn to_window_end(unit_secs: u64) -> ProtoDuration {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    let unit = Duration::from_secs(unit_secs.max(1));
    let into =
        Duration::from_nanos(u64::try_from(now.as_nanos() % unit.as_nanos()).unwrap_or_default());
    proto_duration(unit.saturating_sub(into))
}
