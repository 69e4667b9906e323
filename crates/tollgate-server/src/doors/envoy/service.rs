//! `envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit` over a
//! [`Gate`]: each request descriptor is matched to its limit in the
//! envoyproxy/ratelimit config ([`EnvoyLimits::find`], in `plan.rs`) and
//! the matched limits are decided together, all-or-nothing, with the same
//! store, failure policy and metrics as every other rule (docs/envoy.md).
//!
//! What a request gets, descriptor by descriptor, in order:
//!
//! * no limit matches (unknown domain, no node, or the limit was replaced
//!   by another matched limit's `replaces`): `OK`, no `current_limit`; an
//!   unknown domain is logged once and counted ([`crate::doors::envoy::unknown`]);
//! * an `unlimited` limit: `OK`, `limit_remaining` `u32::MAX`;
//! * a limit: its decision. The request's enforced checks are one
//!   all-or-nothing check: if any is over, none consumes (a denied request
//!   takes no quota, unlike the reference service, which counts every
//!   descriptor of a denied request). `requests_per_unit: 0` is always over.
//!   A cost of 0 peeks: it consumes nothing and is `OVER_LIMIT` while the
//!   key is over its limit (in debt after a charge), by the ordinary
//!   formulas (docs/semantics.md, "Cost 0").
//! * a `charge: true` limit with a cost above 0 (Envoy's
//!   `apply_on_stream_done` call carrying the real usage): charged in full,
//!   even past the limit, and `OK` whatever the key's state; it is recorded
//!   even when the request's checks deny, and after they decided (so the
//!   checks see the state before this call's charges);
//! * under `[envoy] count_own_cost`, a descriptor's own `hits_addend` above
//!   0 (no `charge: true`): charged in full before the checks, as the
//!   reference counts it, and `OVER_LIMIT` when the count after it passes
//!   the limit; an enforced one over denies the request, whose checks
//!   then only read (docs/envoy.md, "Counting own costs");
//! * `is_negative_hits`: its cost given back (a refund: the units counted
//!   last first, never past empty/full), after the charges; `OK`;
//! * a `quota_mode` limit (or every one under `[envoy] quota_mode`):
//!   decided on its own after that check; over, it reads `OVER_LIMIT` but
//!   fails the request only when every quota limit is over, and then the
//!   check's consumption is given back (docs/envoy.md, "Quota mode");
//! * a descriptor's own `limit` override: decided under that limit, on the
//!   counter `plan.rs` picks (docs/envoy.md, "Limit overrides");
//! * a `shadow_mode` limit: counted (and in the metrics as it decides) but
//!   always `OK`. A checked one consumes only when the request is admitted,
//!   each shadow limit on its own (all of them in one round of store calls,
//!   after the enforced check); on a denied request it is only read.
//!
//! `hits_addend` is the cost: the descriptor's own when set (0 peeks), else
//! the request's, where 0 means 1. A descriptor whose store key would pass
//! [`tollgate::limits::MAX_KEY_LEN`] is counted under its digest
//! ([`crate::doors::envoy::limits::store_key`]), never refused: a refusal would be
//! a gRPC error, which Envoy's default `failure_mode_deny: false` turns
//! into an admission, so one long header would switch every limit of the
//! request off. A value (or key) that is not UTF-8, as a header value may
//! be, is matched and counted like any other, by its bytes: such a value
//! never equals a configured value but can match a wildcard or key-only
//! node, and each distinct byte string has its own counter, apart from
//! every UTF-8 string's. A store that fails under `on_error = "deny"`
//! answers `OVER_LIMIT` for every enforced limit, charged ones included (as
//! the user chose), not such an error; under `allow` the statuses are `OK`
//! with no limit or numbers (nothing was decided). A bad request (empty
//! domain, no descriptors, a descriptor without entries, too many
//! descriptors or entries) is `INVALID_ARGUMENT` naming the problem, before
//! anything is counted; so is a domain that is not UTF-8 (domains come from
//! Envoy's config, never from a client, and name a config's `domain`, which
//! is UTF-8).

use std::sync::Arc;

use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitResponse;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::{Code, DescriptorStatus};
use futures_util::future::join_all;
use tollgate::resilient::Refusal;
use tollgate::{Check, DecidedBy, OnError, Op};

use crate::config::StoreFailure;
use crate::doors::envoy::detailed::{DetailedMetrics, Outcome};
use crate::doors::envoy::failure::CallError;
use crate::doors::envoy::headers::ResponseHeaders;
use crate::doors::envoy::limits::EnvoyLimits;
use crate::doors::envoy::metadata::dynamic_metadata;
use crate::doors::envoy::plan::{Plan, plan};
use crate::doors::envoy::reference::ReferenceSeries;
use crate::doors::envoy::statuses::{
    cost_of, failed, initial, note, seen_of, show_admin_overrides, status,
};
use crate::doors::envoy::unknown::UnknownDomains;
use crate::doors::envoy::wire::RateLimitRequest;
use crate::gate::Gate;
use crate::metrics::reference::{ErrorKind, ReferenceMetrics, Seen};

/// The message of the error every call gets under `[envoy.xds]` before
/// the first config (the reference's, word for word).
pub const NO_CONFIG: &str = "no rate limit configuration loaded";

pub use crate::doors::envoy::plan::{MAX_DESCRIPTORS, MAX_ENTRIES};

/// The Envoy rate limit service.
#[derive(Debug)]
pub struct EnvoyService {
    gate: Arc<Gate>,
    limits: Arc<EnvoyLimits>,
    /// Where the Envoy rules start in the gate's rule list.
    first_rule: usize,
    /// `[envoy] response_headers`: the headers Envoy adds to responses.
    headers: Option<ResponseHeaders>,
    /// `[envoy] quota_mode`: every descriptor is a quota descriptor.
    quota_mode: bool,
    /// `[envoy] count_own_cost`: a descriptor's own `hits_addend` above 0
    /// is counted in full and answered as the reference answers it.
    count_own_cost: bool,
    /// `[envoy] response_dynamic_metadata`: answers carry the request and
    /// its passed limits' `metadata` as dynamic metadata.
    dynamic_metadata: bool,
    /// `[envoy] store_failure = "error"`: a failed store call fails the
    /// call with gRPC `UNKNOWN` instead of the failure policy's answer.
    store_error: bool,
    /// `[envoy] shadow_mode`: every limit decided on its own and counted,
    /// statuses as they are, `overall_code` always `OK`.
    shadow_mode: bool,
    /// Metrics by runtime values (`detailed_metric`, `value_to_metric`);
    /// shared with the services of later reloads, so the key cap holds
    /// across them.
    detailed: Arc<DetailedMetrics>,
    /// The unknown domains asked for, logged once each.
    unknown: UnknownDomains,
    /// The reference service's series (`[metrics] reference_names`).
    reference: Option<ReferenceSeries>,
}

/// Statuses found for some descriptors (by position), each with what
/// decided it when the store (or the local fallback) did, and whether they
/// let the request through.
struct Recorded {
    statuses: Vec<(usize, DescriptorStatus, Option<DecidedBy>)>,
    admitted: bool,
    /// What the store said of each charged key, for the reference's stats.
    seen: Vec<(usize, Seen)>,
}

impl EnvoyService {
    /// The service over `gate`, whose rules end with `limits`' rules (in
    /// their order).
    ///
    /// # Errors
    /// When the gate does not hold `limits`' rules at its end.
    pub fn new(gate: Arc<Gate>, limits: Arc<EnvoyLimits>) -> Result<Self, String> {
        let rules = gate.rules();
        let envoy = limits.all_rules();
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
            headers: None,
            quota_mode: false,
            count_own_cost: false,
            dynamic_metadata: false,
            store_error: false,
            shadow_mode: false,
            detailed: Arc::default(),
            unknown: UnknownDomains::default(),
            reference: None,
        })
    }

    /// The same service counting its runtime-value metrics with
    /// `previous`'s (a config reload), so at most
    /// [`crate::doors::envoy::detailed::MAX_METRIC_KEYS`] keys are recorded over
    /// every reload together.
    #[must_use]
    pub fn keeping_metrics_of(mut self, previous: &EnvoyService) -> Self {
        self.detailed = Arc::clone(&previous.detailed);
        self
    }

    /// Adds `headers` (when given) to every answer, for the descriptor
    /// closest to its limit (`[envoy] response_headers`).
    #[must_use]
    pub fn with_response_headers(mut self, headers: Option<ResponseHeaders>) -> Self {
        self.headers = headers;
        self
    }

    /// With `on`, every descriptor is a quota descriptor (`[envoy]
    /// quota_mode`, the reference's `QUOTA_MODE`): the request is over only
    /// when all of them are.
    #[must_use]
    pub fn with_quota_mode(mut self, on: bool) -> Self {
        self.quota_mode = on;
        self
    }

    /// With `on`, a descriptor's own `hits_addend` above 0 is counted in
    /// full, even past the limit, and answers `OVER_LIMIT` when the count
    /// after it passes the limit (`[envoy] count_own_cost`, the reference's
    /// INCRBY-then-compare): docs/envoy.md, "Counting own costs".
    #[must_use]
    pub fn with_count_own_cost(mut self, on: bool) -> Self {
        self.count_own_cost = on;
        self
    }

    /// With `on`, answers carry dynamic metadata (`[envoy]
    /// response_dynamic_metadata`, the reference's
    /// `RESPONSE_DYNAMIC_METADATA`): docs/envoy.md, "Metadata".
    #[must_use]
    pub fn with_dynamic_metadata(mut self, on: bool) -> Self {
        self.dynamic_metadata = on;
        self
    }

    /// Counts each descriptor in `reference`'s series too (`[metrics]
    /// reference_names`), near the limit past `near_ratio` of it.
    #[must_use]
    pub fn with_reference_metrics(
        mut self,
        reference: Option<Arc<ReferenceMetrics>>,
        near_ratio: f64,
    ) -> Self {
        let rules = self.limits.all_rules().len();
        self.reference = reference.map(|r| ReferenceSeries::new(r, near_ratio, rules));
        self
    }

    /// The reference service's series this service counts in, if on.
    #[must_use]
    pub fn reference_metrics(&self) -> Option<&Arc<ReferenceMetrics>> {
        self.reference.as_ref().map(ReferenceSeries::metrics)
    }

    /// Answers a call whose store failed as `failure` says (`[envoy]
    /// store_failure`): the failure policy's answer, or gRPC `UNKNOWN`
    /// naming the failure, as the reference answers a Redis error.
    #[must_use]
    pub fn with_store_failure(mut self, failure: StoreFailure) -> Self {
        self.store_error = failure == StoreFailure::Error;
        self
    }

    /// With `on`, every limit is in shadow mode as the reference's
    /// `SHADOW_MODE` puts it (`[envoy] shadow_mode`): each decided on its
    /// own and counted, its status as it decides (`OVER_LIMIT` included),
    /// the answer's `overall_code` always `OK` (docs/envoy.md, "Shadow
    /// mode").
    #[must_use]
    pub fn with_shadow_mode(mut self, on: bool) -> Self {
        self.shadow_mode = on;
        self
    }

    /// Decides one request (the gRPC method without its transport).
    ///
    /// # Errors
    /// `INVALID_ARGUMENT` naming what is wrong with the request;
    /// `UNAVAILABLE` ([`NO_CONFIG`]) under xDS before the first config;
    /// `UNKNOWN` when a store call failed under `[envoy] store_failure =
    /// "error"`.
    pub async fn decide(&self, req: &RateLimitRequest) -> Result<RateLimitResponse, CallError> {
        if self.limits.awaiting() {
            // As the reference before its first xDS config: an error,
            // which Envoy turns into its failure mode (docs/xds.md).
            return Err(tonic::Status::unavailable(NO_CONFIG).into());
        }
        let plans = plan(&self.limits, self.first_rule, req, self.count_own_cost)?;
        let answer = self.decide_planned(req, &plans).await;
        if let (Err(e), Some(reference)) = (&answer, &self.reference)
            && e.kind == ErrorKind::Redis
        {
            // The reference counts each limit's hits before its Redis
            // call, and nothing else of a call that then fails.
            reference.record_failed((req, &self.limits, self.first_rule), &plans);
        }
        answer
    }

    /// Decides a request resolved into `plans`.
    async fn decide_planned(
        &self,
        req: &RateLimitRequest,
        plans: &[Plan<'_>],
    ) -> Result<RateLimitResponse, CallError> {
        // `plan` refused a domain that is not UTF-8.
        let domain = std::str::from_utf8(&req.domain).unwrap_or_default();
        if !self.limits.has_domain(domain) {
            self.unknown.note(domain);
        }
        // Quota descriptors: each decided on its own; the request is over
        // when all of them are (as the reference, under the global switch
        // every descriptor but an unlimited one is one).
        let quota: Vec<bool> = plans
            .iter()
            .map(|p| match p {
                Plan::Unlimited => false,
                _ if self.quota_mode => true,
                p => p.limit().is_some_and(|l| l.quota_mode),
            })
            .collect();

        let mut statuses: Vec<DescriptorStatus> = plans.iter().map(initial).collect();
        // What decided each descriptor's status, as its answer carries it.
        let mut decided: Vec<Option<DecidedBy>> = vec![None; plans.len()];
        // What the store said of each key, for the reference's stats
        // (empty when they are off: nothing is noted, nothing allocated).
        let mut seen: Vec<Option<Seen>> = match self.reference {
            Some(_) => vec![None; plans.len()],
            None => Vec::new(),
        };
        // Under `shadow_mode` nothing denies, so nothing makes the checks
        // read only.
        let zero_enforced = !self.shadow_mode
            && plans
                .iter()
                .zip(&quota)
                .any(|(p, &q)| !q && matches!(p, Plan::Zero(l) if !l.shadow_mode));

        // Own costs under `count_own_cost`, first: counted in full whatever
        // they answer (the reference's INCRBY), each OVER_LIMIT when it
        // took its key past the limit; an enforced one that did denies the
        // request, so the checks below only read.
        let own = self.record(plans, Op::Charge, true).await?;
        for (i, s, by) in own.statuses {
            statuses[i] = s;
            decided[i] = by;
        }
        let own_over = !self.shadow_mode
            && plans.iter().enumerate().any(|(i, p)| {
                p.counts_own() && !quota[i] && statuses[i].code == i32::from(Code::OverLimit)
            });

        // The enforced checks and peeks: one all-or-nothing check (read
        // only when a zero limit or an own cost already denies the
        // request).
        let read_only = zero_enforced || own_over;
        let (enforced, checks) = self.checks(
            plans,
            |i, p| !quota[i] && self.is(p, Op::Check, false),
            read_only,
        );
        let mut admitted = !read_only;
        if !enforced.is_empty() {
            match self.gate.check_all(&checks).await {
                Ok(verdict) if verdict.degraded.is_some() && self.store_error => {
                    return Err(CallError::store(None));
                }
                Err(e) if self.store_error && !matches!(e, Refusal::Invalid(_)) => {
                    return Err(CallError::store(Some(&e)));
                }
                Ok(verdict) => {
                    admitted &= verdict.multi.allowed;
                    let guessed = verdict.degraded == Some(OnError::Allow);
                    // Consumed only by an admitted check that was not read only.
                    let consumed = verdict.multi.allowed && !zero_enforced;
                    let by = verdict.decided_by.iter();
                    for ((&i, d), by) in enforced.iter().zip(&verdict.multi.decisions).zip(by) {
                        // Under `allow` nothing was decided: OK, and no
                        // numbers the store never gave. Read only, a
                        // check is over when its cost would not fit (as
                        // the reference, which counts it, answers).
                        if !guessed {
                            let fits =
                                d.allowed && (!read_only || d.remaining >= cost_of(&plans[i]));
                            statuses[i] = status(&plans[i], d, fits);
                            decided[i] = Some(*by);
                        }
                        if verdict.degraded.is_none() {
                            note(
                                &mut seen,
                                i,
                                seen_of(d, consumed.then(|| cost_of(&plans[i]))),
                            );
                        }
                    }
                }
                Err(Refusal::Invalid(e)) => {
                    return Err(tonic::Status::invalid_argument(e.to_string()).into());
                }
                // The store failed and the policy is `deny`: the user's
                // choice stands.
                Err(_) => {
                    admitted = false;
                    for &i in &enforced {
                        statuses[i] = failed(&plans[i]);
                    }
                }
            }
        }
        if quota.contains(&true) {
            let consumed = admitted;
            admitted &= self
                .quota(
                    plans,
                    &quota,
                    (&mut statuses, &mut decided, &mut seen),
                    admitted,
                )
                .await?;
            if consumed && !admitted && !checks.is_empty() {
                // Every quota descriptor is over: the request is denied,
                // so the enforced checks give back what they took.
                if let Ok(verdict) = self.gate.refund_all(&checks).await
                    && verdict.degraded != Some(OnError::Allow)
                {
                    // Their statuses show the keys as the refund left them.
                    let by = verdict.decided_by.iter();
                    for ((&i, c), by) in enforced.iter().zip(&verdict.charged).zip(by) {
                        statuses[i] = status(&plans[i], &c.decision, true);
                        decided[i] = Some(*by);
                    }
                }
            }
        }

        // Then, at once (one store round trip between them): the shadow
        // checks, each on its own, consuming only if the request goes
        // through, always OK (one the store cannot decide reads OK with no
        // numbers: it never fails the request); and the charges and
        // give-backs, recorded whatever the checks answered.
        let (shadows, checks) = self.checks(plans, |_, p| self.is(p, Op::Check, true), !admitted);
        // Charges before give-backs, so one call charging and giving back
        // the same key nets out rather than giving back from empty first.
        let (shadowed, (charged, given)) = tokio::join!(
            join_all(
                checks
                    .iter()
                    .map(|check| self.gate.check_all(std::slice::from_ref(check))),
            ),
            async {
                let charged = self.record(plans, Op::Charge, false).await;
                (charged, self.record(plans, Op::Refund, false).await)
            },
        );
        let mut shadow_over = Vec::new();
        for (&i, result) in shadows.iter().zip(shadowed) {
            if self.store_error {
                match &result {
                    Ok(verdict) if verdict.degraded.is_some() => {
                        return Err(CallError::store(None));
                    }
                    Err(e) if !matches!(e, Refusal::Invalid(_)) => {
                        return Err(CallError::store(Some(e)));
                    }
                    _ => {}
                }
            }
            if let Ok(verdict) = result
                && verdict.degraded != Some(OnError::Allow)
            {
                // A shadow limit reads OK; under `shadow_mode` a limit
                // reads as it decided, as the reference's statuses do.
                let ok = !self.shadow_mode || verdict.decision().allowed;
                statuses[i] = status(&plans[i], verdict.decision(), ok);
                decided[i] = verdict.decided_by.first().copied();
                let d = verdict.decision();
                if verdict.degraded.is_none() {
                    note(
                        &mut seen,
                        i,
                        seen_of(d, (admitted && d.allowed).then(|| cost_of(&plans[i]))),
                    );
                }
                if !verdict.decision().allowed {
                    shadow_over.push(i);
                }
            }
        }
        for recorded in [charged?, given?] {
            admitted &= recorded.admitted;
            for (i, s, by) in recorded.statuses {
                statuses[i] = s;
                decided[i] = by;
            }
            for (i, counted) in recorded.seen {
                note(&mut seen, i, counted);
            }
        }

        if self.shadow_mode {
            // The reference's SHADOW_MODE: an answer that would deny (its
            // rule on the statuses: one enforced descriptor over, or every
            // quota descriptor) is OK, and counted (its
            // `global_shadow_mode`).
            let over = |i: usize| statuses[i].code == i32::from(Code::OverLimit);
            let quotas: Vec<usize> = (0..plans.len()).filter(|&i| quota[i]).collect();
            let would_deny = (0..plans.len()).any(|i| !quota[i] && over(i))
                || (!quotas.is_empty() && quotas.iter().all(|&i| over(i)));
            if would_deny || !admitted {
                ::metrics::counter!(crate::metrics::ENVOY_SHADOW_MODE).increment(1);
                if let Some(reference) = &self.reference {
                    reference.metrics().shadow_answer();
                }
            }
            admitted = true;
        }

        let response_headers_to_add = self
            .headers
            .as_ref()
            .map(|h| h.for_statuses(plans, &statuses, &quota, self.gate.rules()))
            .unwrap_or_default();
        show_admin_overrides(&decided, &mut statuses);
        self.record_detailed(req, plans, &statuses, &shadow_over);
        if let Some(reference) = &self.reference {
            let over = |i: usize| {
                statuses[i].code == i32::from(Code::OverLimit) || shadow_over.contains(&i)
            };
            let request = (req, &*self.limits, self.first_rule);
            reference.record(request, plans, &seen, over);
        }
        let dynamic_metadata = self
            .dynamic_metadata
            .then(|| dynamic_metadata(req, &self.limits, plans, &statuses));
        Ok(RateLimitResponse {
            overall_code: if admitted { Code::Ok } else { Code::OverLimit }.into(),
            statuses,
            response_headers_to_add,
            dynamic_metadata,
            ..RateLimitResponse::default()
        })
    }

    /// Counts the descriptors whose limits name runtime values in their
    /// metrics (`detailed.rs`); `shadow_over` are the shadow limits that
    /// were over.
    fn record_detailed(
        &self,
        req: &RateLimitRequest,
        plans: &[Plan<'_>],
        statuses: &[DescriptorStatus],
        shadow_over: &[usize],
    ) {
        let domain = std::str::from_utf8(&req.domain).unwrap_or_default();
        for (i, plan) in plans.iter().enumerate() {
            if !plan.limit().is_some_and(|l| l.runtime_metric) {
                continue;
            }
            let outcome = if statuses[i].code == i32::from(Code::OverLimit) {
                Outcome::Over
            } else if shadow_over.contains(&i) {
                Outcome::Shadow
            } else {
                Outcome::Within
            };
            let entries = req.descriptors[i].pairs();
            self.detailed
                .record(&self.limits, domain, &entries, outcome);
        }
    }

    /// Decides the quota descriptors (`quota[i]`), each on its own,
    /// consuming only when `consume` (the other checks admitted the
    /// request) and the descriptor is within its limit; fills their
    /// statuses. Whether one of them passed (or there are none that count:
    /// true).
    async fn quota(
        &self,
        plans: &[Plan<'_>],
        quota: &[bool],
        (statuses, decided, seen): (
            &mut [DescriptorStatus],
            &mut [Option<DecidedBy>],
            &mut [Option<Seen>],
        ),
        consume: bool,
    ) -> Result<bool, CallError> {
        let (at, checks) = self.checks(
            plans,
            |i, p| quota[i] && self.is(p, Op::Check, false),
            !consume,
        );
        let answers = join_all(
            checks
                .iter()
                .map(|check| self.gate.check_all(std::slice::from_ref(check))),
        )
        .await;
        for (&i, result) in at.iter().zip(answers) {
            statuses[i] = match result {
                Ok(verdict) if verdict.degraded.is_some() && self.store_error => {
                    return Err(CallError::store(None));
                }
                Err(e) if self.store_error && !matches!(e, Refusal::Invalid(_)) => {
                    return Err(CallError::store(Some(&e)));
                }
                Ok(verdict) if verdict.degraded == Some(OnError::Allow) => initial(&plans[i]),
                Ok(verdict) => {
                    decided[i] = verdict.decided_by.first().copied();
                    let d = verdict.decision();
                    if verdict.degraded.is_none() {
                        let added = (consume && d.allowed).then(|| cost_of(&plans[i]));
                        note(seen, i, seen_of(d, added));
                    }
                    // Read only (the request is denied already): over when
                    // its cost would not fit, as the reference, which counts
                    // it, would answer.
                    let fits = d.allowed && (consume || d.remaining >= cost_of(&plans[i]));
                    status(&plans[i], d, fits)
                }
                Err(_) => failed(&plans[i]),
            };
        }
        // Charges, give-backs and shadow limits are always OK: they pass;
        // own costs (counted before) read as they answered.
        Ok(quota
            .iter()
            .zip(statuses.iter())
            .any(|(&q, s)| q && s.code != i32::from(Code::OverLimit)))
    }

    /// Records every counted descriptor doing `op` (a charge or a
    /// refund, a give-back) in one store call, the own costs of
    /// `count_own_cost` when `own`, the others when not: never refused, so
    /// each reads `OK` with the key's state after it (an own cost
    /// `OVER_LIMIT` when that state is past its limit); under a store
    /// failure the failure policy answers, as for a check.
    async fn record(&self, plans: &[Plan<'_>], op: Op, own: bool) -> Result<Recorded, CallError> {
        let (at, checks) = self.checks(
            plans,
            |_, p| matches!(p, Plan::Counted { op: o, .. } if *o == op) && p.counts_own() == own,
            false,
        );
        let mut recorded = Recorded {
            statuses: Vec::new(),
            admitted: true,
            seen: Vec::new(),
        };
        if at.is_empty() {
            return Ok(recorded);
        }
        let result = if op == Op::Refund {
            self.gate.refund_all(&checks).await
        } else {
            self.gate.charge_all(&checks).await
        };
        match result {
            Ok(verdict) if verdict.degraded.is_some() && self.store_error => {
                return Err(CallError::store(None));
            }
            Err(e) if self.store_error && !matches!(e, Refusal::Invalid(_)) => {
                return Err(CallError::store(Some(&e)));
            }
            // Under `allow` nothing was recorded: OK, with no numbers.
            Ok(verdict) if verdict.degraded == Some(OnError::Allow) => {}
            Ok(verdict) => {
                recorded.statuses = at
                    .iter()
                    .zip(&verdict.charged)
                    .zip(verdict.decided_by.iter())
                    .map(|((&i, c), by)| {
                        (
                            i,
                            status(&plans[i], &c.decision, !own || c.debt == 0),
                            Some(*by),
                        )
                    })
                    .collect();
                // A charge added its cost (less what the debt cap clamped);
                // a give-back has no reference stats, nor has what the
                // store did not decide.
                if op == Op::Charge && verdict.degraded.is_none() {
                    recorded.seen = at
                        .iter()
                        .zip(&verdict.charged)
                        .map(|(&i, c)| {
                            let d = &c.decision;
                            let added = cost_of(&plans[i]).saturating_sub(c.clamped);
                            (i, Seen::after_call(d.limit, d.remaining, c.debt, added))
                        })
                        .collect();
                }
            }
            // Not for a loaded config (its rules are rates, its keys
            // bounded), but never a panic.
            Err(Refusal::Invalid(e)) => {
                return Err(tonic::Status::invalid_argument(e.to_string()).into());
            }
            Err(_) => {
                recorded.admitted = at.iter().all(|&i| self.is(&plans[i], op, true));
                recorded.statuses = at.iter().map(|&i| (i, failed(&plans[i]), None)).collect();
            }
        }
        Ok(recorded)
    }

    /// Whether `p` is a counted limit doing `op`, in shadow mode (its own,
    /// or every limit's under `[envoy] shadow_mode`) or not.
    fn is(&self, p: &Plan<'_>, op: Op, shadow: bool) -> bool {
        matches!(p, Plan::Counted { op: o, .. } if *o == op)
            && (self.shadow_mode || p.limit().is_some_and(|l| l.shadow_mode)) == shadow
    }

    /// The counted plans `keep` selects, by position, with their checks;
    /// `read_only` checks read without consuming.
    fn checks<'a>(
        &'a self,
        plans: &'a [Plan<'a>],
        keep: impl Fn(usize, &Plan<'_>) -> bool,
        read_only: bool,
    ) -> (Vec<usize>, Vec<Check<'a>>) {
        plans
            .iter()
            .enumerate()
            .filter(|(i, p)| keep(*i, p))
            .filter_map(|(i, p)| match p {
                Plan::Counted {
                    rule,
                    key,
                    cost,
                    under,
                    ..
                } => {
                    // By the rule's position, which `plan` holds: the
                    // limiter takes it without looking the name up.
                    let name = self.gate.rules()[*rule].name();
                    let cost = if read_only { 0 } else { *cost };
                    let check = Check::new(name, key.as_bytes()).cost(cost).at_index(*rule);
                    Some((i, under.as_ref().map_or(check, |r| check.under(r))))
                }
                _ => None,
            })
            .unzip()
    }
}
