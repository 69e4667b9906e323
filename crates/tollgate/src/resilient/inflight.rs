//! In-flight limits through the resilient limiter (docs/failure-modes.md,
//! "Charges, reservations and leases"): an acquire is a check, so a store
//! failure is answered by the failure policy — `deny` refuses, `allow`
//! admits without a lease, `local` acquires a lease of the in-process
//! fallback at the rule's limit ÷ live replicas; a release or renew goes to
//! the store, and to the fallback when the store does not hold the lease
//! (or failed): a lease the store holds stays held until it ends when the
//! store cannot be reached.

use super::open::Held;
use super::ticketed::{Hold, TicketVerdict};
use super::{Inner, Refusal, ResilientLimiter, metric};
use crate::limiter::Check;
use crate::rule::Rule;
use crate::store::{KeyCheck, Released, Store};
use crate::ticket::Ticket;

impl<S: Store> ResilientLimiter<S> {
    /// Acquires `checks` (concurrency rules; each cost the slots to hold)
    /// all-or-nothing (docs/semantics.md, "Concurrency").
    ///
    /// # Errors
    /// As [`ResilientLimiter::check_all`]; [`Refusal::Invalid`] also for a
    /// rule that is not `concurrency` or a pair named twice.
    pub async fn acquire_all(&self, checks: &[Check<'_>]) -> Result<TicketVerdict, Refusal> {
        self.hold_all(checks, Hold::Lease).await
    }

    /// Releases the lease `ticket`, or (`renew`) extends it to a whole
    /// lease from now.
    ///
    /// # Errors
    /// [`Refusal::Invalid`] for a ticket whose rules are gone or are not
    /// `concurrency`; [`Refusal::Stranded`] when the store failed,
    /// whatever the policy (the lease lives there: its slots stay held
    /// until it ends).
    pub async fn release(&self, ticket: &Ticket, renew: bool) -> Result<Released, Refusal> {
        let limiter = &self.inner.limiter;
        let rules = limiter.lease_rules(ticket).map_err(Refusal::Invalid)?;
        self.start_heartbeat();
        let what = if renew { "renew" } else { "release" };
        let stored = self
            .inner
            .guarded(
                what,
                self.inner.ticket_gate(ticket),
                limiter.store().release(ticket, &rules, renew, None),
            )
            .await;
        // A lease the store does not hold (or cannot say) may be one the
        // `local` policy took in the fallback.
        let result = match stored {
            Ok(Released::Done(d)) => Released::Done(d),
            Ok(Released::Unknown) => self
                .inner
                .release_local(ticket, renew)
                .unwrap_or(Released::Unknown),
            Err(e) => match self.inner.release_local(ticket, renew) {
                Some(released) => released,
                None => return Err(self.inner.stranded(rules.iter().copied(), e)),
            },
        };
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

impl<S: Store> Inner<S> {
    /// Counts an acquired lease and follows it for `/metrics` until its
    /// lease ends.
    pub(super) fn follow_lease(&self, ticket: &Ticket, pairs: &[KeyCheck<'_>], index: &[usize]) {
        let held: Vec<(usize, u64)> = pairs
            .iter()
            .zip(index)
            .filter(|(p, _)| p.cost > 0)
            .map(|(p, &i)| (i, p.rule.period_micros()))
            .collect();
        for p in pairs.iter().filter(|p| p.cost > 0) {
            count(p.rule.name(), "acquired");
        }
        let now = self.clock.now();
        let lease = held.iter().map(|h| h.1).max().unwrap_or(0);
        let rules = held.into_iter().map(|h| h.0).collect();
        self.open.opened(
            Held::Lease,
            ticket.nonce,
            rules,
            now.saturating_add(lease),
            now,
        );
    }

    /// Releases (`renew`s) `ticket` in the `local` fallback, at its rules'
    /// current shares; `None` when the fallback does not hold it (or was
    /// never used).
    fn release_local(&self, ticket: &Ticket, renew: bool) -> Option<Released> {
        let local = self.fleet.local_if_used()?;
        let replicas = self.fleet.replicas();
        let shares = local.shares(replicas, self.limiter.rules());
        let rules: Vec<&Rule> = ticket
            .pairs
            .iter()
            .map(|p| self.limiter.rule_index(&p.rule).map(|i| &shares[i]))
            .collect::<Option<_>>()?;
        match local.store.release_sync(ticket, &rules, renew, None) {
            Released::Unknown => None,
            done => Some(done),
        }
    }
}

fn count(rule: &str, outcome: &'static str) {
    ::metrics::counter!(metric::LEASES, "rule" => rule.to_owned(), "outcome" => outcome)
        .increment(1);
}
