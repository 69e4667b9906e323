//! One RLQS stream's buckets and what each holds, and one report answered
//! (docs/rlqs.md, "What tollgate answers"): for every bucket, the last
//! lease settled at the usage Envoy reported, the next one leased through
//! the gate, and the assignment built from it.

use std::collections::HashMap;
use std::time::Instant;

use envoy_types::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_response::BucketAction;
use envoy_types::pb::envoy::service::rate_limit_quota::v3::{
    RateLimitQuotaResponse, RateLimitQuotaUsageReports,
};
use futures_util::StreamExt as _;
use tollgate::Algorithm;
use tollgate::resilient::Refusal;
use tollgate::ticket::Ticket;
use tollgate::{Check, OnError};
use tonic::Status;

use super::bucket::{BucketName, Target, target};
use super::grant::{Assignment, Demand, actions, cap, room, wanted};
use super::holders::Holders;
use crate::config::{RlqsConfig, Unmatched};
use crate::gate::Gate;
use crate::metrics::rlqs as metric;

/// The most bytes a bucket id's entries may hold for a stream to hold
/// it: a stream's memory is at most `max_buckets_per_stream` of these. A
/// longer id (a long header value in it) is denied, never counted under
/// some other key, as the rate limit service answers a long request
/// `OVER_LIMIT`.
pub(super) const MAX_BUCKET_ID_BYTES: usize = 1024;

/// Buckets of one report decided at once (each makes up to two store
/// calls).
const CONCURRENT_BUCKETS: usize = 32;

/// The most requests one bucket's report adds to
/// `tollgate_rlqs_requests_total`: a report may say anything up to 2^64−1,
/// and a counter must not wrap.
const MAX_COUNTED: u64 = 1 << 32;

/// What one stream holds of one bucket.
#[derive(Debug)]
struct Held {
    /// The rule and key it counts on (kept while the rule is the same).
    target: Option<(String, String)>,
    /// The lease to settle at the next report.
    ticket: Option<Ticket>,
    /// When it was last reported (tollgate's clock: Envoy's
    /// `time_elapsed` is whole seconds, and 0 on a first report).
    reported: Instant,
    /// Since when every report said idle.
    idle_since: Option<Instant>,
    /// Reports of it answered on this stream.
    reports: u64,
    /// Units of its outstanding lease (counted in [`Holders`] too).
    leased: u64,
    /// When Envoy stops spending that lease (its assignment's TTL): a
    /// closed stream's lease counts in [`Holders`] until then.
    lease_until: Option<Instant>,
    /// What it reported, per period.
    demand: Demand,
    /// What Envoy admitted since the last report is not charged at the
    /// next: the last assignment was the failure policy's (`allow` or
    /// `local` with the store down; no door records what its policy
    /// admitted), or this is the first report on this stream of a bucket
    /// Envoy had before (a reconnect: spent from the earlier stream's
    /// lease, which stays counted, or under Envoy's fallback while no
    /// stream was up).
    uncharged: bool,
}

/// One stream: its domain (fixed by its first message) and buckets.
#[derive(Debug, Default)]
pub(super) struct StreamState {
    domain: Option<String>,
    reports: u64,
    buckets: HashMap<BucketName, Held>,
}

/// What one report needs from the server.
pub(super) struct Env<'a> {
    /// The gate of the config serving now.
    pub(super) gate: &'a Gate,
    /// Its `[rlqs]` table.
    pub(super) config: &'a RlqsConfig,
    /// Streams holding each (rule, key) on this server.
    pub(super) holders: &'a Holders,
}

impl StreamState {
    /// Buckets held.
    pub(super) fn len(&self) -> usize {
        self.buckets.len()
    }

    /// Reports answered.
    pub(super) fn reports(&self) -> u64 {
        self.reports
    }

    /// Answers `report`: one action per bucket, in its order.
    ///
    /// # Errors
    /// A report the stream must end on, with the status that says why: no
    /// domain, a domain other than the stream's, no bucket, a bucket id
    /// without entries, more buckets than `max_buckets_per_stream`.
    pub(super) async fn answer(
        &mut self,
        report: RateLimitQuotaUsageReports,
        env: &Env<'_>,
    ) -> Result<RateLimitQuotaResponse, Status> {
        self.reports += 1;
        if report.domain.is_empty() {
            return Err(Status::invalid_argument("the report names no domain"));
        }
        match &self.domain {
            Some(d) if *d != report.domain => {
                return Err(Status::invalid_argument(format!(
                    "the report's domain {:?} is not the stream's, {d:?}: one stream per domain",
                    report.domain
                )));
            }
            Some(_) => {}
            None => self.domain = Some(report.domain.clone()),
        }
        if report.bucket_quota_usages.is_empty() {
            return Err(Status::invalid_argument("the report has no bucket"));
        }
        let now = Instant::now();
        let mut work: Vec<(BucketName, Held, u64, u64)> =
            Vec::with_capacity(report.bucket_quota_usages.len());
        // Where each bucket of this report is in `work`: a bucket named
        // twice (Envoy never does) is one bucket with the usage summed.
        let mut seen: HashMap<BucketName, usize> = HashMap::new();
        // The answers to buckets this stream may not hold.
        let mut refused_actions = Vec::new();
        for usage in report.bucket_quota_usages {
            let Some(id) = usage.bucket_id.filter(|id| !id.bucket.is_empty()) else {
                self.put_back(work);
                return Err(Status::invalid_argument("a bucket id without entries"));
            };
            let name = BucketName::new(&id.bucket);
            if let Some(&i) = seen.get(&name) {
                let w = &mut work[i];
                w.2 = w.2.saturating_add(usage.num_requests_allowed);
                w.3 = w.3.saturating_add(usage.num_requests_denied);
                continue;
            }
            let held = match self.buckets.remove(&name) {
                Some(h) => h,
                None => {
                    let refused = if name.bytes() > MAX_BUCKET_ID_BYTES {
                        Some("too_long")
                    } else if (self.buckets.len() + work.len()) as u64
                        >= env.config.max_buckets_per_stream
                    {
                        Some("too_many")
                    } else {
                        None
                    };
                    if let Some(reason) = refused {
                        // Not held, so it costs no memory: denied while
                        // it has traffic, forgotten by Envoy once idle.
                        // Cutting the stream instead would leave Envoy on
                        // its fallback, for good: it never drops a bucket.
                        ::metrics::counter!(metric::BUCKETS_REFUSED, "reason" => reason)
                            .increment(1);
                        let idle =
                            usage.num_requests_allowed == 0 && usage.num_requests_denied == 0;
                        let assignment = if idle {
                            Assignment::Abandon
                        } else {
                            Assignment::DenyAll
                        };
                        ::metrics::counter!(metric::ASSIGNMENTS, "kind" => assignment.kind())
                            .increment(1);
                        refused_actions.extend(actions(
                            &name,
                            assignment,
                            env.config.assignment_ttl,
                        ));
                        continue;
                    }
                    Held {
                        target: None,
                        ticket: None,
                        // A first sighting counts as a period's report.
                        reported: now.checked_sub(env.config.report_period).unwrap_or(now),
                        idle_since: None,
                        reports: 0,
                        leased: 0,
                        lease_until: None,
                        demand: Demand::default(),
                        // Envoy's first report of a new bucket has
                        // `time_elapsed` 0; a periodic one follows a
                        // reconnect.
                        uncharged: usage
                            .time_elapsed
                            .is_some_and(|d| d.seconds > 0 || d.nanos > 0),
                    }
                }
            };
            seen.insert(name.clone(), work.len());
            work.push((
                name,
                held,
                usage.num_requests_allowed,
                usage.num_requests_denied,
            ));
        }
        let domain = self.domain.clone().unwrap_or_default();
        let answered: Vec<(BucketName, Option<Held>, Vec<BucketAction>)> =
            futures_util::stream::iter(work.into_iter().map(|(name, held, allowed, denied)| {
                let domain = &domain;
                async move {
                    let (held, assignment) =
                        one_bucket(env, domain, &name, held, allowed, denied, now).await;
                    let act = actions(&name, assignment, env.config.assignment_ttl);
                    ::metrics::counter!(metric::ASSIGNMENTS, "kind" => assignment.kind())
                        .increment(1);
                    (name, held, act)
                }
            }))
            .buffered(CONCURRENT_BUCKETS)
            .collect()
            .await;
        let mut response = RateLimitQuotaResponse {
            bucket_action: refused_actions,
        };
        for (name, held, act) in answered {
            if let Some(held) = held {
                self.buckets.insert(name, held);
            }
            response.bucket_action.extend(act);
        }
        Ok(response)
    }

    /// Returns the buckets a refused report took out, so that `close`
    /// still releases what they hold (else their holders would count
    /// forever, shrinking every later stream's share).
    fn put_back(&mut self, work: Vec<(BucketName, Held, u64, u64)>) {
        for (name, held, _, _) in work {
            self.buckets.insert(name, held);
        }
    }

    /// The stream ended: its buckets stop counting as held. What they
    /// hold stays spent: Envoy keeps spending its last assignment until
    /// the TTL, unreported.
    pub(super) fn close(&mut self, holders: &Holders) {
        let now = Instant::now();
        for (_, held) in self.buckets.drain() {
            if let Some(t) = &held.target {
                holders.release(t, held.leased, held.lease_until, now);
            }
        }
    }
}

/// One bucket of a report: settles what it held, then leases and assigns
/// anew. `None` as the held state: the bucket is abandoned.
async fn one_bucket(
    env: &Env<'_>,
    domain: &str,
    name: &BucketName,
    mut held: Held,
    allowed: u64,
    denied: u64,
    now: Instant,
) -> (Option<Held>, Assignment) {
    let elapsed = now.saturating_duration_since(held.reported);
    let first = held.reports == 0;
    held.reports = held.reports.saturating_add(1);
    held.reported = now;
    let target = match target(env.config, domain, name) {
        Target::Rule { rule, key } => match env.gate.rule(&rule) {
            Some(r) if r.algorithm() != Algorithm::Concurrency => Some((rule, key)),
            Some(_) => unmatched_log(format!("rule {rule:?} is a concurrency rule")),
            None => unmatched_log(format!("no rule {rule:?}")),
        },
        Target::Unmatched(why) => unmatched_log(why),
    };
    let rule_label = target.as_ref().map_or("", |(r, _)| r.as_str()).to_owned();
    for (outcome, n) in [("allowed", allowed), ("denied", denied)] {
        ::metrics::counter!(metric::REQUESTS, "rule" => rule_label.clone(), "outcome" => outcome)
            .increment(n.min(MAX_COUNTED));
    }
    if held.target != target {
        // A new bucket, or a reload moved it to another rule or key.
        if let Some(old) = held.target.take() {
            // Its lease is settled below, at this report: it ends now.
            env.holders.release(&old, held.leased, None, now);
            held.leased = 0;
        }
        if let Some(t) = &target {
            env.holders.hold(t, now);
        }
        held.target.clone_from(&target);
    }
    // After the target is known: a first report's requests (admitted by
    // Envoy before any assignment) are charged to it.
    settle(env.gate, &mut held, allowed).await;
    if let Some(t) = &held.target {
        env.holders.lease(t, held.leased, false, now);
    }
    held.leased = 0;
    held.lease_until = None;
    if allowed == 0 && denied == 0 {
        let since = *held.idle_since.get_or_insert(now);
        if now.saturating_duration_since(since) >= env.config.abandon_after {
            if let Some(t) = held.target.take() {
                env.holders.release(&t, 0, None, now);
            }
            return (None, Assignment::Abandon);
        }
    } else {
        held.idle_since = None;
    }
    let Some((rule, key)) = held.target.clone() else {
        let assignment = match env.config.unmatched {
            Unmatched::Allow => Assignment::AllowAll,
            Unmatched::Deny => Assignment::DenyAll,
        };
        return (Some(held), assignment);
    };
    // The limit deciding the key now: an override set since the last
    // report sizes this lease.
    let limit = env.gate.deciding_limit(&rule, key.as_bytes()).unwrap_or(1);
    let replicas = env.gate.live_replicas().max(1);
    let shared = (rule, key);
    let (streams, leased) = env.holders.count(&shared, now);
    let cap = cap(limit, streams.saturating_mul(replicas));
    // A bucket's first report says nothing of its demand (Envoy sends it
    // at its first request): its fair share, given back at the next
    // report if unspent. Then its demand.
    let estimate = held
        .demand
        .update(allowed, denied, elapsed, env.config.report_period);
    let n = if first { cap } else { wanted(estimate, cap) };
    // All this server's leases of the key stay within its part of half
    // the limit, whatever order streams came in (each one's cap alone
    // would let a run of first reports add up to the whole limit); one
    // unit at least, so every stream can admit.
    let n = n.min(room(limit, replicas, leased).max(1));
    let assignment = lease(env, &mut held, &shared.0, &shared.1, n).await;
    if let Assignment::Grant(k) = assignment {
        held.leased = k;
        held.lease_until = Some(now + env.config.assignment_ttl);
        env.holders.lease(&shared, k, true, now);
    }
    (Some(held), assignment)
}

fn unmatched_log(why: String) -> Option<(String, String)> {
    tracing::debug!("RLQS: a bucket gets [rlqs] unmatched: {why}");
    None
}

/// Settles the bucket's lease at the `allowed` requests Envoy admitted
/// since its last report (unspent units go back, more is charged); with
/// no lease (Envoy's own fallback admitted them), charges them.
async fn settle(gate: &Gate, held: &mut Held, allowed: u64) {
    match held.ticket.take() {
        Some(ticket) => {
            if let Err(e) = gate.settle(&ticket, Some(&[allowed])).await {
                tracing::debug!("RLQS: a lease could not be settled: {e}");
            }
        }
        None if allowed > 0 && !held.uncharged => {
            if let Some((rule, key)) = &held.target
                && let Err(e) = gate
                    .charge_all(&[Check::new(rule, key).cost(allowed)])
                    .await
            {
                tracing::debug!("RLQS: requests admitted without a lease not charged: {e}");
            }
        }
        None => {}
    }
}

/// Leases `n` units of (`rule`, `key`) for the next period, or what is
/// left when fewer; the answer of the failure policy when the store
/// fails.
async fn lease(env: &Env<'_>, held: &mut Held, rule: &str, key: &str, n: u64) -> Assignment {
    // The lease outlives the assignment by a period: a stream that
    // reports again settles it; one that never does leaves it spent.
    let ttl = env.config.assignment_ttl + env.config.report_period;
    let mut cost = n;
    for _ in 0..2 {
        match env
            .gate
            .reserve_all(&[Check::new(rule, key).cost(cost)], ttl)
            .await
        {
            Ok(reserved) => {
                let verdict = &reserved.verdict;
                let decision = verdict.decision();
                held.uncharged = verdict.degraded.is_some();
                if verdict.degraded == Some(OnError::Allow) {
                    return Assignment::AllowAll;
                }
                if decision.allowed {
                    // Under `local`, the fallback decided: no ticket.
                    held.ticket = reserved.ticket;
                    return Assignment::Grant(cost);
                }
                if decision.remaining == 0 || decision.remaining >= cost {
                    return Assignment::DenyAll;
                }
                cost = decision.remaining;
            }
            Err(Refusal::Unavailable(_)) => {
                held.uncharged = true;
                return Assignment::DenyAll;
            }
            Err(e) => {
                tracing::debug!("RLQS: lease of rule {rule:?} refused: {e}");
                return match env.config.unmatched {
                    Unmatched::Allow => Assignment::AllowAll,
                    Unmatched::Deny => Assignment::DenyAll,
                };
            }
        }
    }
    Assignment::DenyAll
}
