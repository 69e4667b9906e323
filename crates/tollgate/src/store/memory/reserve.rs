//! Reservations on the memory store (docs/semantics.md, "Reserve, then
//! settle"): a record per reservation, by its ticket's nonce, holding each
//! pair's key (its fingerprint) and estimate. Bounded like the keys: past
//! the store's key capacity, records past their memory go first, then the
//! oldest (a settle of a forgotten reservation is told it is unknown).

use std::collections::HashMap;

use super::check::{Core, When};
use super::records::Record;
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
                    .map(|c| (self.fingerprint(c.rule, c.key), c.cost))
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
                make_room(&mut records, t);
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
            .map(|(&(fp, estimate), p)| {
                let at = When::At(t);
                match p.actual {
                    Some(actual) if actual >= estimate => {
                        self.charge_fp(p.rule, fp, actual - estimate, at)
                    }
                    back => {
                        if !late {
                            let units = estimate - back.unwrap_or(0);
                            self.give_back_fp(p.rule, fp, t, record.made, units);
                        }
                        // A charge of nothing: the state after, with its debt.
                        self.charge_fp(p.rule, fp, 0, at)
                    }
                }
            })
            .collect();
        Settled::Done { late, charged }
    }
}

/// Drops the records past their memory; if fewer than an eighth of them
/// go, also the ones forgotten soonest, down to seven eighths.
fn make_room(records: &mut HashMap<[u8; 16], Record>, t: Micros) {
    let before = records.len();
    records.retain(|_, r| r.forget > t);
    let low = before - before / 8;
    if records.len() > low {
        let mut by_forget: Vec<([u8; 16], Micros)> =
            records.iter().map(|(k, r)| (*k, r.forget)).collect();
        by_forget.sort_unstable_by_key(|e| e.1);
        for (k, _) in by_forget.into_iter().take(records.len() - low) {
            records.remove(&k);
        }
    }
}
