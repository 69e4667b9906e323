//! [`Hold`]: what an admitted request holds until its response ends — a
//! reservation to settle, a lease to renew and release — and the task
//! that does it.
//!
//! The task is spawned when the request is admitted, so nothing that ends
//! a request (its body ending, or being dropped) ever waits on the store
//! or needs a runtime: it sends one message on a oneshot channel, which
//! can be sent only once, so the settle and the release happen once,
//! never twice. Until the message comes the task renews the lease every
//! half lease. When the message never comes (the hold was dropped before
//! any response: the inner service failed, or the client went away before
//! the answer), the task settles at the estimate and releases.

use std::sync::Arc;
use std::time::Duration;

use http::HeaderMap;
use tokio::sync::oneshot;
use tollgate::resilient::ResilientLimiter;
use tollgate::store::Released;
use tollgate::ticket::Ticket;
use tollgate::{Check, Store};

use crate::cost::{Reading, ResponseCost, UsageSource};

/// Counter, labels `rule`, `reason`: responses whose usage could not be
/// read, settled at the estimate instead — `missing` (the response ended
/// without the field, in its head or trailers), `garbage` (not a whole
/// number, or given twice; a body source's body malformed or encoded),
/// `dropped` (the body was dropped, or failed, or its event stream
/// stopped inside an event, before its end and before the usage was
/// read whole; settled at the larger of the estimate and what was seen of
/// a growing count), `no_response` (no response
/// came: the upstream or inner service failed, or the client left first).
pub const USAGE_UNREAD: &str = "tollgate_usage_unread_total";

/// The tower layer's reservation ttl unless set
/// (`tollgate_tower::RateLimitLayer::with_reservation_ttl`):
/// an hour, longer than any response a service should stream. A response
/// that ends later still settles (late: what exceeds the estimate is
/// charged; unused estimate is not given back).
pub const DEFAULT_RESERVATION_TTL: Duration = Duration::from_secs(3600);

/// One rule (other than `concurrency`) checked for a request.
#[derive(Debug, Clone)]
pub(super) struct Pair {
    pub(super) rule: String,
    /// The rule's position in the limiter's rules ([`Check::at_index`]).
    pub(super) index: usize,
    pub(super) key: Vec<u8>,
    /// `None`: an ordinary rule, 1 unit per request.
    pub(super) cost: Option<ResponseCost>,
    /// The units reserved on arrival: 1 for an ordinary rule, else the
    /// cost's estimate, or the one read from the request.
    pub(super) estimate: u64,
}

impl Pair {
    /// The units reserved on arrival.
    pub(super) fn estimate(&self) -> u64 {
        self.estimate
    }
}

/// What an admitted request holds.
#[derive(Debug)]
pub(super) struct Plan {
    /// Every rule but the `concurrency` ones, in the reservation's order.
    pub(super) pairs: Vec<Pair>,
    pub(super) reservation: Option<Ticket>,
    /// The reservation was let through by the `allow` policy without a
    /// ticket: charge the usage at the end.
    pub(super) charge_at_end: bool,
    pub(super) lease: Option<Ticket>,
    pub(super) renew_every: Option<Duration>,
}

/// How a response ended, sent once to the task.
#[derive(Debug)]
pub(crate) struct Outcome {
    /// One reading per source, in [`Hold::sources`]' order.
    pub(crate) readings: Vec<Reading>,
    pub(crate) how: Ended,
}

/// How a response body ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ended {
    /// Its end was read.
    Complete,
    /// Dropped or failed before its end.
    Dropped,
    /// Nothing of the request reached the upstream: give it all back.
    Cancelled,
}

/// What an admitted request holds until its response ends: a reservation
/// to settle at the usage the response reports, a lease to release. Hand
/// it to the response with [`Hold::wrap`]; dropped without a response it
/// settles at the estimate and releases (docs/tower.md, "Usage and
/// in-flight limits").
#[derive(Debug)]
pub struct Hold {
    tx: oneshot::Sender<Outcome>,
    sources: Arc<[UsageSource]>,
}

impl Hold {
    /// Spawns the task that renews, settles and releases what `plan`
    /// holds; `None` when it holds nothing.
    pub(super) fn start<S: Store>(limiter: &Arc<ResilientLimiter<S>>, plan: Plan) -> Option<Self> {
        let usage = plan.pairs.iter().any(|p| p.cost.is_some());
        if plan.reservation.is_none() && plan.lease.is_none() && !(usage && plan.charge_at_end) {
            return None;
        }
        let mut sources: Vec<UsageSource> = Vec::new();
        for p in &plan.pairs {
            if let Some(cost) = &p.cost
                && !sources.contains(cost.source())
            {
                sources.push(cost.source().clone());
            }
        }
        let (tx, rx) = oneshot::channel();
        let sources: Arc<[UsageSource]> = sources.into();
        tokio::spawn(keep(Arc::clone(limiter), plan, Arc::clone(&sources), rx));
        Some(Self { tx, sources })
    }

    /// The usage fields read, each once.
    pub(crate) fn sources(&self) -> &[UsageSource] {
        &self.sources
    }

    /// Whether a usage is read from the response body: the upstream is
    /// then asked for it unencoded (`Accept-Encoding: identity`), which a
    /// meter can read as it passes.
    #[must_use]
    pub fn reads_body(&self) -> bool {
        self.sources.iter().any(UsageSource::reads_body)
    }

    /// Ends the hold with `outcome` (once: it is consumed).
    pub(crate) fn end(self, outcome: Outcome) {
        // The task is gone only if the runtime is shutting down.
        let _ = self.tx.send(outcome);
    }

    /// Ends the hold giving the whole estimate back (and the lease): the
    /// request never reached the service, so nothing was used (the
    /// reverse proxy's upstream refused the connection).
    pub fn cancel(self) {
        self.end(Outcome {
            readings: Vec::new(),
            how: Ended::Cancelled,
        });
    }

    /// Reads the usage the response head reports; the hold then ends
    /// with the response body.
    pub(crate) fn read_head(&self, head: &HeaderMap) -> Vec<Reading> {
        self.sources.iter().map(|s| s.read(head)).collect()
    }
}

/// The task of one hold: renews the lease until the response ends, then
/// settles and releases, once.
async fn keep<S: Store>(
    limiter: Arc<ResilientLimiter<S>>,
    plan: Plan,
    sources: Arc<[UsageSource]>,
    mut rx: oneshot::Receiver<Outcome>,
) {
    let outcome = match (&plan.lease, plan.renew_every) {
        (Some(lease), Some(every)) if !every.is_zero() => {
            let mut renewing = true;
            loop {
                if !renewing {
                    break (&mut rx).await.ok();
                }
                match tokio::time::timeout(every, &mut rx).await {
                    Ok(outcome) => break outcome.ok(),
                    // A lease that is gone (it ended before a renew got
                    // through) cannot be renewed again; a store failure
                    // may pass, so the next tick tries again.
                    Err(_) => {
                        if let Ok(Released::Unknown) = limiter.release(lease, true).await {
                            renewing = false;
                        }
                    }
                }
            }
        }
        _ => rx.await.ok(),
    };
    settle(&limiter, &plan, &sources, outcome.as_ref()).await;
    if let Some(lease) = &plan.lease {
        let _ = limiter.release(lease, false).await;
    }
}

/// How long a response's settle is tried again after store failures
/// (`ResilientLimiter::settle_within`): a store stalled for a moment
/// under load must not leave the reservation at its estimate, which is
/// too much or too little of what the response used.
pub(crate) const SETTLE_PATIENCE: Duration = Duration::from_secs(30);

/// Settles the reservation at the usage read (or its estimate, counted in
/// [`USAGE_UNREAD`]); cancels it when nothing was sent; charges the usage
/// when the reservation was let through unrecorded.
async fn settle<S: Store>(
    limiter: &ResilientLimiter<S>,
    plan: &Plan,
    sources: &[UsageSource],
    outcome: Option<&Outcome>,
) {
    if outcome.is_some_and(|o| o.how == Ended::Cancelled) {
        if let Some(ticket) = &plan.reservation {
            let _ = limiter.settle_within(ticket, None, SETTLE_PATIENCE).await;
        }
        return;
    }
    let actual: Vec<u64> = plan
        .pairs
        .iter()
        .map(|p| match &p.cost {
            None => 1,
            Some(cost) => usage(p, cost, sources, outcome),
        })
        .collect();
    if let Some(ticket) = &plan.reservation {
        // Tried again on a store failure (a settle is once per ticket, so
        // a retry never charges twice); the last failure is counted by the
        // limiter as unrecorded units.
        let _ = limiter
            .settle_within(ticket, Some(&actual), SETTLE_PATIENCE)
            .await;
    } else if plan.charge_at_end {
        let checks: Vec<Check<'_>> = plan
            .pairs
            .iter()
            .zip(&actual)
            .filter(|(p, _)| p.cost.is_some())
            .map(|(p, &n)| Check::new(&p.rule, &p.key).cost(n).at_index(p.index))
            .filter(|c| c.cost > 0)
            .collect();
        if !checks.is_empty() {
            let _ = limiter.charge_all(&checks).await;
        }
    }
}

/// The usage of one pair: what its source read, else its estimate (or,
/// for a count cut short, the larger of it and what was seen), counted
/// with the reason.
fn usage(
    pair: &Pair,
    cost: &ResponseCost,
    sources: &[UsageSource],
    outcome: Option<&Outcome>,
) -> u64 {
    // What was read, else what is charged instead and why.
    let (reason, units) = match outcome {
        None => ("no_response", pair.estimate()),
        Some(o) => {
            let at = sources.iter().position(|s| s == cost.source());
            match at.and_then(|i| o.readings.get(i)) {
                Some(Reading::Found(n)) => return *n,
                Some(Reading::Garbage) => ("garbage", pair.estimate()),
                // The answer was cut short while its count grew: what was
                // seen was used, and the estimate was agreed to.
                Some(Reading::Partial(n)) => ("dropped", (*n).max(pair.estimate())),
                _ if o.how == Ended::Dropped => ("dropped", pair.estimate()),
                _ => ("missing", pair.estimate()),
            }
        }
    };
    ::metrics::counter!(USAGE_UNREAD, "rule" => pair.rule.clone(), "reason" => reason).increment(1);
    units
}
