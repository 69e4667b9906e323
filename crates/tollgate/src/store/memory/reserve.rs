//! Reservations on the memory store (docs/semantics.md, "Reserve, then
//! settle"): a record per reservation, by its ticket's nonce, holding each
//! pair's key (its fingerprint) and estimate. Bounded like the keys: past
//! the store's key capacity, records past their memory go first, then the
//! oldest (a settle of a forgotten reservation is told it is unknown).

use super::check::{Core, When};
use super::fingerprint::Fp;
use super::records::{Record, make_room};
use crate::algorithm::Charged;
use crate::decision::MultiDecision;
use crate::store::{KeyCheck, SettlePair, Settled};
use crate::ticket::{REMEMBERED_AFTER_TTL, Ticket};
use crate::time::{Micros, duration_to_micros};

impl Core {
    /// Decides `checks` all-or-nothing at one time and, when admitted,
    /// records the reservation.
    pub(super) fn reserve_all(
        &self,
        checks: &[KeyCheck<'_>],
        ticket: &Ticket,
        ttl: Micros,
        when: When<'_>,
    ) -> MultiDecision {
        let t = when.now();
        let multi = self.check_all(checks, When::At(t));
        if multi.allowed {
            let record = Record {
                named: self.named(ticket),
                pairs: checks
                    .iter()
                    .map(|c| (self.fingerprint(c.rule, c.key), c.cost, c.rule.clone()))
                    .collect(),
                made: t,
                due: t.saturating_add(ttl),
                forget: t
                    .saturating_add(ttl)
                    .saturating_add(duration_to_micros(REMEMBERED_AFTER_TTL)),
                closed: false,
            };
            let mut records = self.reservations.records.lock();
            if records.len() >= self.capacity() {
                make_room(&mut records, t, |r| r.forget);
            }
            records.insert(ticket.nonce, record);
        }
        multi
    }

    /// Settles or cancels the reservation of `ticket`, `when`, once.
    pub(super) fn settle(
        &self,
        ticket: &Ticket,
        pairs: &[SettlePair<'_>],
        when: When<'_>,
    ) -> Settled {
        // Held throughout: a second settle of the same ticket waits, then
        // finds it closed.
        let mut records = self.reservations.records.lock();
        let t = when.now();
        let Some(record) = records.get_mut(&ticket.nonce).filter(|r| {
            r.forget > t && r.pairs.len() == pairs.len() && r.named == self.named(ticket)
        }) else {
            return Settled::Unknown;
        };
        if record.closed {
            return Settled::Finished;
        }
        record.closed = true;
        let late = t > record.due;
        let charged: Vec<Charged> = record
            .pairs
            .iter()
            .zip(pairs)
            .map(|((fp, estimate, admitted), p)| {
                let (fp, estimate) = (*fp, *estimate);
                let at = When::At(t);
                // The rule that admitted it; the pair's own (the rule by
                // name now) only when a reload changed its algorithm.
                let rule = if admitted.algorithm() == p.rule.algorithm() {
                    admitted
                } else {
                    p.rule
                };
                match p.actual {
                    Some(actual) if actual >= estimate => {
                        self.charge_fp(rule, fp, actual - estimate, at)
                    }
                    back => {
                        if !late {
                            let units = estimate - back.unwrap_or(0);
                            self.give_back_fp(rule, fp, t, record.made, units);
                        }
                        // A charge of nothing: the state after, with its debt.
                        self.charge_fp(rule, fp, 0, at)
                    }
                }
            })
            .collect();
        let estimates = record.pairs.iter().map(|p| p.1).collect();
        Settled::Done {
            late,
            charged,
            estimates,
        }
    }
}

impl Core {
    /// A ticket's pairs as its text names them (rules, and keys as stores
    /// name them), in one fingerprint: the nonce alone does not say which
    /// rules a record belongs to, and the rules a ticket names decide how
    /// its keys are read (docs/http-api.md, "Usage and in-flight limits").
    /// One 128-bit number, kept inline, so a record costs no allocation
    /// more; each name is written after its length, so the bytes fed are
    /// one ticket's pairs and no other's.
    pub(super) fn named(&self, ticket: &Ticket) -> Fp {
        let mut names = Vec::with_capacity(
            ticket
                .pairs
                .iter()
                .map(|p| 4 + p.rule.len() + p.key.len())
                .sum(),
        );
        for p in &ticket.pairs {
            for part in [p.rule.as_bytes(), &p.key] {
                names.extend_from_slice(
                    &u16::try_from(part.len()).unwrap_or(u16::MAX).to_le_bytes(),
                );
                names.extend_from_slice(part);
            }
        }
        self.sip.fingerprint(b"", &names)
    }
}
