//! Reservations through the resilient limiter (docs/failure-modes.md,
//! "Reservations"): reserving is a check, so a store failure is answered by
//! the failure policy as for a check, without a ticket (nothing was
//! recorded to settle); a settle or cancel needs the store that holds the
//! reservation, so its failure is refused whatever the policy, and the
//! usage it carried is counted as unrecorded.

use std::time::Duration;

use super::ticketed::{Hold, TicketVerdict};
use super::{Refusal, ResilientLimiter, metric};
use crate::algorithm::Charged;
use crate::limiter::{Check, reservation_ttl};
use crate::store::{SettlePair, Settled, Store};
use crate::ticket::Ticket;

/// The first wait before a failed settle is tried again
/// ([`ResilientLimiter::settle_within`]).
pub const SETTLE_RETRY_FIRST: Duration = Duration::from_millis(50);
/// The longest wait between two tries of a settle.
pub const SETTLE_RETRY_MAX: Duration = Duration::from_secs(2);

impl<S: Store> ResilientLimiter<S> {
    /// Reserves `checks` (each pair's cost its estimate) for `ttl`
    /// (docs/semantics.md, "Reserve, then settle").
    ///
    /// # Errors
    /// As [`ResilientLimiter::check_all`], and [`Refusal::Invalid`] for a
    /// `ttl` out of range or a (rule, key) named twice.
    pub async fn reserve_all(
        &self,
        checks: &[Check<'_>],
        ttl: Duration,
    ) -> Result<TicketVerdict, Refusal> {
        let ttl = reservation_ttl(ttl).map_err(Refusal::Invalid)?;
        self.hold_all(checks, Hold::Reservation(ttl)).await
    }

    /// Settles the reservation `ticket` at `actual` (one number for every
    /// pair, or one per pair), or cancels it (`None`).
    ///
    /// # Errors
    /// [`Refusal::Invalid`] for a ticket whose rules are gone or an
    /// `actual` of the wrong length; [`Refusal::Stranded`] when the
    /// store failed, whatever the policy (the reservation lives there).
    pub async fn settle(
        &self,
        ticket: &Ticket,
        actual: Option<&[u64]>,
    ) -> Result<Settled, Refusal> {
        self.settle_within(ticket, actual, Duration::ZERO).await
    }

    /// As [`ResilientLimiter::settle`], but a store failure (a timeout, a
    /// lost connection, an open circuit) is tried again, after waits that
    /// double from [`SETTLE_RETRY_FIRST`] to [`SETTLE_RETRY_MAX`], while
    /// the waits add up to at most `within` (each try itself is bounded
    /// by the store timeout). Safe because a settle is once per ticket:
    /// one that timed out here but ran in the store makes the next one
    /// `Finished`, not a second charge. For a caller with time to spare (a
    /// response that has ended), so a loaded store's brief stall does not
    /// leave the reservation at its estimate. Only the last failure
    /// counts the usage as unrecorded.
    ///
    /// # Errors
    /// As [`ResilientLimiter::settle`], once `within` has passed.
    pub async fn settle_within(
        &self,
        ticket: &Ticket,
        actual: Option<&[u64]>,
        within: Duration,
    ) -> Result<Settled, Refusal> {
        let limiter = &self.inner.limiter;
        let pairs = limiter
            .settle_pairs(ticket, actual)
            .map_err(Refusal::Invalid)?;
        self.start_heartbeat();
        // The waits are counted, not the clock read: each try's own time
        // is bounded by the store timeout.
        let mut waited = Duration::ZERO;
        let mut wait = SETTLE_RETRY_FIRST;
        let result = loop {
            let result = self
                .inner
                .guarded(
                    "settle",
                    self.inner.ticket_gate(ticket),
                    limiter.store().settle(ticket, &pairs, None),
                )
                .await;
            if result.is_ok() || waited + wait > within {
                break result;
            }
            tokio::time::sleep(wait).await;
            waited += wait;
            wait = (wait * 2).min(SETTLE_RETRY_MAX);
        };
        match result {
            Ok(settled) => {
                let outcome = match &settled {
                    Settled::Unknown => "unknown",
                    Settled::Finished => "finished",
                    Settled::Done { late: true, .. } => "late",
                    Settled::Done { .. } if actual.is_none() => "cancelled",
                    Settled::Done { .. } => "settled",
                };
                for p in &pairs {
                    count(p.rule.name(), outcome);
                }
                if let Settled::Done {
                    charged, estimates, ..
                } = &settled
                {
                    self.count_settled(&pairs, charged, estimates);
                }
                // Settled, cancelled, settled before or forgotten: over.
                self.inner.open.ended(&ticket.nonce, self.inner.clock.now());
                Ok(settled)
            }
            Err(e) => {
                // Labelled with each pair's own policy: refused whatever
                // it is, never answered by it.
                for p in &pairs {
                    if let Some(units) = p.actual {
                        ::metrics::counter!(
                            metric::CHARGE_UNRECORDED,
                            "rule" => p.rule.name().to_owned(),
                            "policy" => self.inner.policy_of(p.rule).as_str()
                        )
                        .increment(units);
                    }
                }
                Err(self.inner.stranded(pairs.iter().map(|p| p.rule), e))
            }
        }
    }
}

impl<S: Store> ResilientLimiter<S> {
    /// A settle's usage above its estimate is a charge: its units recorded
    /// and clamped, and the debt it left, counted as a charge's are
    /// (docs/metrics.md). A settle at or below its estimate,
    /// or a cancel, charges nothing and is not counted.
    fn count_settled(&self, pairs: &[SettlePair<'_>], charged: &[Charged], estimates: &[u64]) {
        for ((p, c), &e) in pairs.iter().zip(charged).zip(estimates) {
            let Some(i) = self.inner.limiter.rule_index(p.rule.name()) else {
                continue;
            };
            let asked = p.actual.map_or(0, |a| a.saturating_sub(e));
            if asked == 0 {
                continue;
            }
            self.inner.meters.charge(
                i,
                p.rule.name(),
                asked.saturating_sub(c.clamped),
                c.clamped,
                c.debt,
            );
        }
    }
}

fn count(rule: &str, outcome: &'static str) {
    ::metrics::counter!(metric::RESERVATIONS, "rule" => rule.to_owned(), "outcome" => outcome)
        .increment(1);
}
