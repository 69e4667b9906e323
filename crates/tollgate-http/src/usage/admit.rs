//! Admitting a request whose rules hold something past the answer.
//!
//! The order, so that a denial takes nothing (docs/tower.md, "Usage and
//! in-flight limits"): first the `concurrency` rules' leases, in one
//! all-or-nothing [`ResilientLimiter::acquire_all`]; then every other rule
//! in one all-or-nothing call — [`ResilientLimiter::reserve_all`] when a
//! rule's cost comes from the response (the other rules reserved at 1 and
//! settled at 1, so they stay all-or-nothing with it), else the ordinary
//! check. When that second call denies (or the store refuses it), the
//! leases just taken are released before the answer goes out: a release
//! gives a slot back exactly, where a check cannot be undone. A lease
//! taken for an admission dropped before its answer (the client went away,
//! an outer timeout gave up while the second call ran) is released too, on
//! a task ([`Taken`]).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use tollgate::resilient::{OnError, ResilientLimiter, Verdict};
use tollgate::ticket::Ticket;
use tollgate::{Check, DecidedBy, Deciders, Decision, MultiDecision, Store};

use super::hold::{Hold, Pair, Plan};
use crate::cost::ResponseCost;
use crate::decide::{HttpVerdict, Keys, RuleKeys, answer, refusal};
use crate::headers::HeaderOptions;

/// What [`RuleKeys::admit`] decided: the answer, and, for an admitted
/// request that holds a reservation or a lease, the [`Hold`] that ends
/// with its response.
#[derive(Debug)]
#[non_exhaustive]
pub struct Admission {
    /// The answer, as [`RuleKeys::check`] gives it.
    pub verdict: HttpVerdict,
    /// What the admitted request holds; `None` when it holds nothing
    /// (denied, or nothing to settle or release).
    pub hold: Option<Hold>,
}

impl Admission {
    /// An answer that holds nothing.
    #[must_use]
    pub fn bare(verdict: HttpVerdict) -> Self {
        Self {
            verdict,
            hold: None,
        }
    }
}

/// The boxed future of `tollgate_tower::RateLimitLayer::admit`.
pub type AdmissionFuture = Pin<Box<dyn Future<Output = Admission> + Send + 'static>>;

impl RuleKeys {
    /// Decides `keys` as [`RuleKeys::check`] does, for rules that may hold
    /// something past the answer (see [`RuleKeys::holds`]): acquires the
    /// `concurrency` rules' leases, then reserves (or checks) the others,
    /// all-or-nothing as the module docs say; an admitted request gets a
    /// [`Hold`] to end when its response ends ([`Hold::wrap`]).
    /// Reservations live for `ttl`. `policy` answers a store failure of
    /// the ordinary check (acquires and reservations follow each rule's
    /// own). `keys` must not be empty.
    pub async fn admit<S: Store>(
        &self,
        limiter: &Arc<ResilientLimiter<S>>,
        keys: &Keys,
        policy: Option<OnError>,
        options: HeaderOptions,
        ttl: Duration,
    ) -> Admission {
        if !self.holds() {
            return Admission::bare(self.check(limiter, keys, policy, options).await);
        }
        let entries = self.entries();
        let leased = keys.only(|i| entries[i].lease.is_some());
        let rated = keys.only(|i| entries[i].lease.is_none());

        // A lease admitted by the failure policy has no ticket: nothing to
        // hold, but its decision still goes into the answer.
        let mut lease = Taken {
            limiter: Arc::clone(limiter),
            ticket: None,
        };
        let mut lease_verdict = None;
        if !leased.is_empty() {
            match limiter.acquire_all(&self.checks(&leased)).await {
                Err(refused) => return Admission::bare(refusal(&refused)),
                Ok(taken) if !taken.verdict.multi.allowed => {
                    let rules = self.rules_of(limiter.rules(), &leased);
                    return Admission::bare(answer(&rules, taken.verdict, options));
                }
                Ok(taken) => {
                    lease.ticket = taken.ticket;
                    lease_verdict = Some(taken.verdict);
                }
            }
        }

        let pairs: Vec<Pair> = rated
            .iter()
            .map(|(i, key)| {
                let name = entries[i].name();
                let estimate = keys
                    .estimate(i)
                    .or_else(|| entries[i].cost.as_ref().map(ResponseCost::estimate))
                    .unwrap_or(1);
                // At most what the limit deciding this key (an override's
                // when one applies) admits at once: more could never pass,
                // and the rule's own capacity under a larger override would
                // reserve too little.
                let capacity = limiter.deciding_capacity(name, key).unwrap_or(u64::MAX);
                Pair {
                    rule: name.to_owned(),
                    index: entries[i].index,
                    key: key.to_vec(),
                    estimate: estimate.clamp(1, capacity.max(1)),
                    cost: entries[i].cost.clone(),
                }
            })
            .collect();
        let reserving = pairs.iter().any(|p| p.cost.is_some());
        let mut reservation = None;
        let rate = if rated.is_empty() {
            None
        } else if reserving {
            let checks: Vec<Check<'_>> = pairs
                .iter()
                .map(|p| {
                    let check = Check::new(&p.rule, &p.key).cost(p.estimate());
                    check.at_index(p.index)
                })
                .collect();
            Some(limiter.reserve_all(&checks, ttl).await.map(|r| {
                reservation = r.ticket;
                r.verdict
            }))
        } else {
            Some(limiter.check_all_as(&self.checks(&rated), policy).await)
        };
        let rate = match rate {
            None => None,
            Some(Err(refused)) => {
                lease.give_back().await;
                return Admission::bare(refusal(&refused));
            }
            Some(Ok(verdict)) => {
                let rules = self.rules_of(limiter.rules(), &rated);
                match answer(&rules, verdict.clone(), options) {
                    refused @ HttpVerdict::Respond { .. } => {
                        lease.give_back().await;
                        return Admission::bare(refused);
                    }
                    HttpVerdict::Admit { .. } => Some(verdict),
                }
            }
        };

        // Nothing recorded to settle when the failure policy let the
        // reservation through: under `allow` the usage is charged at the
        // end instead (the store may be back), so none is lost.
        let charge_at_end = reserving
            && reservation.is_none()
            && rate
                .as_ref()
                .is_some_and(|v| v.degraded == Some(OnError::Allow));
        let verdict = merge(keys, &leased, lease_verdict, rate);
        let verdict = answer(&self.rules_of(limiter.rules(), keys), verdict, options);
        let renew_every = leased
            .iter()
            .filter_map(|(i, _)| entries[i].lease)
            .min()
            .map(|lease| lease / 2);
        let plan = Plan {
            pairs,
            reservation,
            charge_at_end,
            lease: lease.ticket.take(),
            renew_every,
        };
        Admission {
            verdict,
            hold: Hold::start(limiter, plan),
        }
    }
}

/// The lease an admission took, until it is handed to the [`Hold`]:
/// released by [`Taken::give_back`] when a later rule denies, and on a
/// task when the admission is dropped half-way (nothing in a drop waits on
/// the store). A release the store refuses leaves the slots held until the
/// lease ends (counted by the limiter).
struct Taken<S: Store> {
    limiter: Arc<ResilientLimiter<S>>,
    ticket: Option<Ticket>,
}

impl<S: Store> Taken<S> {
    /// Releases the lease before a denial goes out. Dropped while it runs,
    /// the ticket is still held, and the drop releases it again: at worst
    /// a second release, told the lease is unknown.
    async fn give_back(&mut self) {
        if let Some(ticket) = &self.ticket {
            let _ = self.limiter.release(ticket, false).await;
        }
        self.ticket = None;
    }
}

impl<S: Store> Drop for Taken<S> {
    fn drop(&mut self) {
        let Some(ticket) = self.ticket.take() else {
            return;
        };
        // An admission runs on a runtime; without one there is nothing to
        // run the release on, and the lease ends by itself.
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let limiter = Arc::clone(&self.limiter);
            runtime.spawn(async move {
                let _ = limiter.release(&ticket, false).await;
            });
        }
    }
}

/// The admitted answers of the leased and the other rules as one, each
/// decision (with what decided it) in `keys`' order; degraded when either
/// was (an `allow` one first: nothing was decided there).
fn merge(keys: &Keys, leased: &Keys, lease: Option<Verdict>, rate: Option<Verdict>) -> Verdict {
    let degraded = match (
        lease.as_ref().and_then(|v| v.degraded),
        rate.as_ref().and_then(|v| v.degraded),
    ) {
        (Some(OnError::Allow), _) | (_, Some(OnError::Allow)) => Some(OnError::Allow),
        (a, b) => a.or(b),
    };
    let parts = |v: Option<Verdict>| {
        let (decisions, by) = v.map_or_else(Default::default, |v| {
            (v.multi.decisions, v.decided_by.to_vec())
        });
        decisions.into_iter().zip(by)
    };
    let (mut from_lease, mut from_rate) = (parts(lease), parts(rate));
    let leased: Vec<usize> = leased.iter().map(|(i, _)| i).collect();
    let (decisions, decided_by): (Vec<Decision>, Vec<DecidedBy>) = keys
        .iter()
        .filter_map(|(i, _)| {
            if leased.contains(&i) {
                from_lease.next()
            } else {
                from_rate.next()
            }
        })
        .unzip();
    Verdict {
        multi: MultiDecision::from_decisions(decisions),
        degraded,
        decided_by: Deciders::from(decided_by),
    }
}
