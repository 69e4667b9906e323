//! The one path of the calls that answer with a ticket: a reservation
//! (`reserve.rs`) and an acquire of in-flight slots (`inflight.rs`). Both
//! resolve, make the ticket, answer a block or override from the live
//! table, call the store behind the breaker and within the timeout, count,
//! and follow what they opened; [`Hold`] says what differs.

use super::open::Held;
use super::{Inner, OnError, Refusal, ResilientLimiter, Verdict, metric};
use crate::error::Error;
use crate::limiter::{Check, Resolved, lease_ticket, reservation_ticket};
use crate::op::Op;
use crate::store::{KeyCheck, Store};
use crate::ticket::Ticket;
use crate::time::Micros;

/// What a reservation or an acquire answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TicketVerdict {
    /// The decision, as a check of each pair's estimate (or slots).
    pub verdict: Verdict,
    /// The ticket that settles, cancels or releases it: `Some` when
    /// admitted by the store (or, for an acquire, by the `local`
    /// fallback); `None` when denied, or when the failure policy answered.
    pub ticket: Option<Ticket>,
}

impl TicketVerdict {
    /// The same answer carrying what decided it, as `resolved` says.
    fn decided_by(mut self, resolved: &Resolved<'_>) -> Self {
        self.verdict.decided_by = resolved.deciders();
        self
    }
}

/// What a ticketed call holds once admitted.
#[derive(Debug, Clone, Copy)]
pub(super) enum Hold {
    /// A reservation of each pair's estimate, for this long (µs).
    Reservation(Micros),
    /// A lease of in-flight slots (concurrency rules).
    Lease,
}

impl Hold {
    fn op(self) -> Op {
        match self {
            Self::Reservation(_) => Op::Reserve,
            Self::Lease => Op::Acquire,
        }
    }

    fn ticket(self, checks: &[Check<'_>]) -> Result<Ticket, Error> {
        match self {
            Self::Reservation(_) => reservation_ticket(checks),
            Self::Lease => lease_ticket(checks),
        }
    }
}

impl<S: Store> ResilientLimiter<S> {
    /// Reserves or acquires (`hold`) `checks` all-or-nothing.
    pub(super) async fn hold_all(
        &self,
        checks: &[Check<'_>],
        hold: Hold,
    ) -> Result<TicketVerdict, Refusal> {
        let table = self.inner.live_table();
        let resolved = self
            .inner
            .limiter
            .resolve_all(checks, hold.op(), table.as_deref())
            .map_err(Refusal::Invalid)?;
        let (pairs, index) = (resolved.pairs(), resolved.index());
        let ticket = hold.ticket(checks).map_err(Refusal::Invalid)?;
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
        let gate = inner.gate(pairs);
        let stored = match hold {
            Hold::Reservation(ttl) => {
                let call = store.reserve_all(pairs, &ticket, ttl, None);
                inner.guarded("reserve", gate, call).await
            }
            Hold::Lease => {
                let call = store.acquire_all(pairs, &ticket, None);
                inner.guarded("acquire", gate, call).await
            }
        };
        let answer = match stored {
            Ok(multi) => {
                inner.count(pairs, index, &multi);
                let ticket = inner.follow(hold, multi.allowed, ticket, pairs, index);
                TicketVerdict {
                    verdict: Verdict::new(multi, None),
                    ticket,
                }
            }
            Err(e) => inner.hold_failed(hold, ticket, pairs, index, e)?,
        };
        Ok(answer.decided_by(&resolved))
    }
}

impl<S: Store> Inner<S> {
    /// The ticket of an admitted call (`allowed`), counted and followed
    /// for `/metrics` until it ends; `None` when denied (or, for an
    /// acquire, holding no slot).
    fn follow(
        &self,
        hold: Hold,
        allowed: bool,
        ticket: Ticket,
        pairs: &[KeyCheck<'_>],
        index: &[usize],
    ) -> Option<Ticket> {
        match hold {
            Hold::Reservation(ttl) => {
                if !allowed {
                    return None;
                }
                for p in pairs {
                    ::metrics::counter!(
                        metric::RESERVATIONS,
                        "rule" => p.rule.name().to_owned(),
                        "outcome" => "opened"
                    )
                    .increment(1);
                }
                let now = self.clock.now();
                let ends = now.saturating_add(ttl);
                self.open
                    .opened(Held::Reservation, ticket.nonce, index.to_vec(), ends, now);
                Some(ticket)
            }
            Hold::Lease => {
                if !allowed || ticket.pairs.is_empty() {
                    return None;
                }
                self.follow_lease(&ticket, pairs, index);
                Some(ticket)
            }
        }
    }

    /// The policy answers a reservation or acquire the store failed:
    /// `deny` refuses, `allow` admits without a ticket (nothing to settle
    /// or release), `local` decides in the fallback: a reservation as a
    /// check, without a ticket (the fallback keeps no reservation); an
    /// acquire as a lease of the fallback, with its ticket.
    fn hold_failed(
        &self,
        hold: Hold,
        ticket: Ticket,
        pairs: &[KeyCheck<'_>],
        index: &[usize],
        error: crate::error::StoreError,
    ) -> Result<TicketVerdict, Refusal> {
        match self.policy_for(index, None, &error) {
            OnError::Deny => {
                // As before the paths were one: a refused reservation is
                // counted per pair, a refused acquire is not.
                if let Hold::Reservation(_) = hold {
                    self.count_refused(pairs, index);
                }
                Err(Refusal::Unavailable(error))
            }
            OnError::Allow => Ok(TicketVerdict {
                verdict: self.admit_untouched(pairs, index),
                ticket: None,
            }),
            OnError::Local => {
                let multi = match hold {
                    Hold::Reservation(_) => self.check_locally(pairs, index),
                    // This replica's share of the slots, in its fallback.
                    Hold::Lease => self.on_local(pairs, index, |local, shared| {
                        local.acquire_all_sync(shared, &ticket, None)
                    }),
                };
                self.count(pairs, index, &multi);
                let ticket = match hold {
                    Hold::Reservation(_) => None,
                    Hold::Lease => self.follow(hold, multi.allowed, ticket, pairs, index),
                };
                Ok(TicketVerdict {
                    verdict: Verdict::new(multi, Some(OnError::Local)),
                    ticket,
                })
            }
        }
    }
}
