//! Reservations through the resilient limiter (docs/failure-modes.md,
//! "Reservations"): reserving is a check, so a store failure is answered by
//! the failure policy as for a check, without a ticket (nothing was
//! recorded to settle); a settle or cancel needs the store that holds the
//! reservation, so its failure is refused whatever the policy, and the
//! usage it carried is counted as unrecorded.

use std::time::Duration;

use super::open::Held;
use super::{Refusal, ResilientLimiter, Verdict, metric};
use crate::algorithm::Charged;
use crate::limiter::{Check, Resolved, reservation_ticket, reservation_ttl};
use crate::op::Op;
use crate::store::{SettlePair, Settled, Store};
use crate::ticket::Ticket;

/// What a reservation answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TicketVerdict {
    /// The decision, as a check of each pair's estimate.
    pub verdict: Verdict,
    /// The ticket that settles or cancels it: `Some` when admitted by the
    /// store; `None` when denied, or when the failure policy answered.
    pub ticket: Option<Ticket>,
}

impl TicketVerdict {
    /// The same answer carrying what decided it, as `resolved` says.
    pub(super) fn decided_by(mut self, resolved: &Resolved<'_>) -> Self {
        self.verdict.decided_by = resolved.deciders();
        self
    }
}

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
        let table = self.inner.live_table();
        let resolved = self
            .inner
            .limiter
            .resolve_all(checks, Op::Reserve, table.as_deref())
            .map_err(Refusal::Invalid)?;
        let (pairs, index) = (resolved.pairs(), resolved.index());
        let ticket = reservation_ticket(checks).map_err(Refusal::Invalid)?;
        self.start_heartbeat();
        let inner = &self.inner;
        if let Some(verdict) = inner.live_answer(table.as_deref(), pairs, index).await {
            return Ok(TicketVerdict {
                verdict,
                ticket: None,
            }
            .decided_by(&resolved));
        }
        let store = inner.limiter.store();
        let answer = match inner
            .guarded(
                "reserve",
                inner.gate(pairs),
                store.reserve_all(pairs, &ticket, ttl, None),
            )
            .await
        {
            Ok(multi) => {
                inner.count(pairs, index, &multi);
                if multi.allowed {
                    for p in pairs {
                        count(p.rule.name(), "opened");
                    }
                }
                let ticket = multi.allowed.then_some(ticket);
                if let Some(t) = &ticket {
                    let now = inner.clock.now();
                    let ends = now.saturating_add(ttl);
                    inner
                        .open
                        .opened(Held::Reservation, t.nonce, index.to_vec(), ends, now);
                }
                TicketVerdict {
                    verdict: Verdict::new(multi, None),
                    ticket,
                }
            }
            Err(e) => TicketVerdict {
                verdict: inner.on_store_error(pairs, index, &e, None).await?,
                ticket: None,
            },
        };
        Ok(answer.decided_by(&resolved))
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
        let limiter = &self.inner.limiter;
        let pairs = limiter
            .settle_pairs(ticket, actual)
            .map_err(Refusal::Invalid)?;
        self.start_heartbeat();
        let result = self
            .inner
            .guarded(
                "settle",
                self.inner.ticket_gate(ticket),
                limiter.store().settle(ticket, &pairs, None),
            )
            .await;
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
    /// (docs/http-api.md, "Metrics"). A settle at or below its estimate,
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
