//! In-flight limits through the resilient limiter (docs/failure-modes.md,
//! "Leases"): an acquire is a check, so a store failure is answered by the
//! failure policy, without a lease (`deny` refuses; `allow` and `local`
//! admit: slots held fleet-wide cannot be counted in one process); a
//! release or renew needs the store that holds the lease, so its failure is
//! refused whatever the policy, and the slots stay held until the lease
//! ends.

use super::open::Held;
use super::{OnError, Refusal, ResilientLimiter, TicketVerdict, Verdict, metric};
use crate::limiter::{Check, Op, lease_ticket};
use crate::store::{Released, Store};
use crate::ticket::Ticket;

impl<S: Store> ResilientLimiter<S> {
    /// Acquires `checks` (concurrency rules; each cost the slots to hold)
    /// all-or-nothing (docs/semantics.md, "Concurrency").
    ///
    /// # Errors
    /// As [`ResilientLimiter::check_all`]; [`Refusal::Invalid`] also for a
    /// rule that is not `concurrency` or a pair named twice.
    pub async fn acquire_all(&self, checks: &[Check<'_>]) -> Result<TicketVerdict, Refusal> {
        let resolved = self
            .inner
            .limiter
            .resolve_all(checks, Op::Acquire)
            .map_err(Refusal::Invalid)?;
        let (pairs, index) = (resolved.pairs(), resolved.index());
        let ticket = lease_ticket(checks).map_err(Refusal::Invalid)?;
        self.start_heartbeat();
        let inner = &self.inner;
        let store = inner.limiter.store();
        match inner
            .guarded("acquire", store.acquire_all(pairs, &ticket, None))
            .await
        {
            Ok(multi) => {
                inner.count(pairs, index, &multi);
                let ticket = (multi.allowed && !ticket.pairs.is_empty()).then_some(ticket);
                if let Some(t) = &ticket {
                    let held: Vec<(usize, u64)> = pairs
                        .iter()
                        .zip(index)
                        .filter(|(p, _)| p.cost > 0)
                        .map(|(p, &i)| (i, p.rule.period_micros()))
                        .collect();
                    for p in pairs.iter().filter(|p| p.cost > 0) {
                        count(p.rule.name(), "acquired");
                    }
                    let now = inner.clock.now();
                    let lease = held.iter().map(|h| h.1).max().unwrap_or(0);
                    let rules = held.into_iter().map(|h| h.0).collect();
                    inner
                        .open
                        .opened(Held::Lease, t.nonce, rules, now.saturating_add(lease), now);
                }
                Ok(TicketVerdict {
                    verdict: Verdict {
                        multi,
                        degraded: None,
                    },
                    ticket,
                })
            }
            Err(e) => {
                let policy = inner.policy_for(index, None, &e);
                if policy == OnError::Deny {
                    return Err(Refusal::Unavailable(e));
                }
                // Admitted without a lease: nothing to release.
                Ok(TicketVerdict {
                    verdict: inner.admit_untouched(pairs, index),
                    ticket: None,
                })
            }
        }
    }

    /// Releases the lease `ticket`, or (`renew`) extends it to a whole
    /// lease from now.
    ///
    /// # Errors
    /// [`Refusal::Invalid`] for a ticket whose rules are gone or are not
    /// `concurrency`; [`Refusal::Unavailable`] when the store failed,
    /// whatever the policy (the lease lives there: its slots stay held
    /// until it ends).
    pub async fn release(&self, ticket: &Ticket, renew: bool) -> Result<Released, Refusal> {
        let limiter = &self.inner.limiter;
        let rules = limiter.lease_rules(ticket).map_err(Refusal::Invalid)?;
        self.start_heartbeat();
        let what = if renew { "renew" } else { "release" };
        let result = self
            .inner
            .guarded(what, limiter.store().release(ticket, &rules, renew, None))
            .await
            .map_err(Refusal::Unavailable)?;
        let outcome = match (&result, renew) {
            (Released::Unknown, _) => "unknown",
            (Released::Done(_), true) => "renewed",
            (Released::Done(_), false) => "released",
        };
        for rule in &rules {
            count(rule.name(), outcome);
        }
        let now = self.inner.clock.now();
        if renew && matches!(result, Released::Done(_)) {
            let lease = rules.iter().map(|r| r.period_micros()).max().unwrap_or(0);
            self.inner
                .open
                .renewed(&ticket.nonce, now.saturating_add(lease), now);
        } else {
            self.inner.open.ended(&ticket.nonce, now);
        }
        Ok(result)
    }
}

fn count(rule: &str, outcome: &'static str) {
    ::metrics::counter!(metric::LEASES, "rule" => rule.to_owned(), "outcome" => outcome)
        .increment(1);
}
