//! Under the shard locks: what a check does next (decide, wait for another
//! caller's batch, or take one), recording a batch in its entry, and the
//! answer when Redis itself denies.

use std::sync::Arc;
use std::time::Duration;

use parking_lot::MutexGuard;
use tokio::sync::Notify;
use tokio::sync::futures::OwnedNotified;

use super::entry::{Entry, Flight, signed};
use super::{Inner, Pair, Shard};
use crate::decision::MultiDecision;
use crate::error::StoreError;
use crate::store::redis::hybrid_batch::{Batch, GiveBack};
use crate::time::Micros;

/// What a check does next.
pub(super) enum Plan<'a> {
    /// Decided.
    Done(Result<MultiDecision, StoreError>),
    /// Look again.
    Retry,
    /// Wait for another caller's batch of pair `.1 .0` (generation `.1 .1`).
    Wait(OwnedNotified, (usize, u64)),
    /// Take batches for these pairs (this caller leads their flights).
    TakeBatches(Vec<Flight<'a>>, Vec<BatchCall>),
}

/// One batch call to run.
pub(super) struct BatchCall {
    pub(super) pair: usize,
    pub(super) redis_key: Box<[u8]>,
    pub(super) give_back: Option<GiveBack>,
    pub(super) need: u64,
    pub(super) n: u64,
    /// Paced batches (GCRA, token bucket): the most debt, in units, the
    /// batch may leave (0: not paced).
    pub(super) horizon: u64,
}

impl Inner {
    /// Under the locks of every shard `pairs` touch (in index order, so a
    /// multi-rule check is atomic against every other check): decide, or
    /// say what to wait for or which batches to take.
    pub(super) fn plan<'a>(
        &'a self,
        pairs: &[Pair<'_>],
        shard_ids: &[usize],
        waited: Option<(usize, u64)>,
    ) -> Plan<'a> {
        let now = self.clock.now();
        let mut guards: Vec<(usize, MutexGuard<'_, Shard>)> = shard_ids
            .iter()
            .map(|&s| (s, self.shards[s].lock()))
            .collect();
        let mut blocked = false;
        let mut all_ready = true;
        let mut wait_for: Option<(usize, Arc<Notify>, u64)> = None;
        let mut to_take: Vec<usize> = Vec::new();
        for (i, p) in pairs.iter().enumerate() {
            let e = self.entry(shard_mut(&mut guards, p.shard), p, now);
            e.expire(now);
            if let (Some((w, generation)), Some((g, err))) = (waited, &e.failed)
                && w == i
                && *g == generation + 1
            {
                return Plan::Done(Err(err.clone()));
            }
            if e.units >= p.cost {
                if !e.is_due(now, p.cost) {
                    // in the batch already, due later
                    all_ready = false;
                    blocked = true;
                }
                continue;
            }
            all_ready = false;
            // Units of an expired batch to give back: Redis may have them to
            // give again whatever it said before (this replica may have
            // held the last of them), so `not_before` does not hold.
            if now < e.not_before && e.give_back.is_none() {
                blocked = true;
            } else if let Some(n) = &e.inflight {
                if wait_for.is_none() {
                    wait_for = Some((i, n.clone(), e.generation));
                }
            } else {
                to_take.push(i);
            }
        }
        if all_ready || blocked {
            let mut out = Vec::with_capacity(pairs.len());
            for p in pairs {
                let e = self.entry(shard_mut(&mut guards, p.shard), p, now);
                if all_ready {
                    e.spend(p.cost);
                    out.push(e.admitted(now));
                } else if now < e.retry_at(p.cost) && (e.units < p.cost || !e.is_due(now, p.cost)) {
                    out.push(e.denied(now, p.cost));
                } else {
                    // would have admitted: what this replica knows, unchanged
                    out.push(e.admitted(now));
                }
            }
            return Plan::Done(Ok(MultiDecision::from_decisions(out)));
        }
        if to_take.is_empty() {
            return match wait_for {
                Some((i, notify, generation)) => {
                    Plan::Wait(notify.notified_owned(), (i, generation))
                }
                None => Plan::Retry,
            };
        }
        let mut flights = Vec::with_capacity(to_take.len());
        let mut calls = Vec::with_capacity(to_take.len());
        for i in to_take {
            let p = &pairs[i];
            let e = self.entry(shard_mut(&mut guards, p.shard), p, now);
            // Size batches to this replica's demand for the key: the first
            // is the batch size set, or by default a small one (see
            // `HybridOptions::life_for`); a batch spent
            // out before it expired doubles the next (up to the batch size),
            // but past the small size (where batches live a tenth as long)
            // only when it was spent within that shorter life; one that
            // expired with units unspent makes the next what was spent.
            let largest = self.options.batch_for(p.rule);
            let small = self.options.small_for(p.rule);
            let first = match self.options.batch {
                Some(_) => largest,
                None => largest.min(small),
            };
            let current = if e.size == 0 { first } else { e.size };
            e.size = match e.give_back {
                Some(g) => e.batch_units.saturating_sub(g.units),
                None if e.units == 0 && e.batch_units > 0 && now < e.expires => {
                    let grown = current.saturating_mul(2);
                    let quick = now.saturating_sub(e.taken) < self.options.batch_life_for(p.rule);
                    if current <= small && grown > small && !quick {
                        small
                    } else {
                        grown
                    }
                }
                None => current,
            }
            .clamp(1, largest);
            // Units too few for this cost go back with the new batch.
            e.retire();
            let notify = Arc::new(Notify::new());
            e.inflight = Some(notify.clone());
            flights.push(Flight {
                inner: self,
                shard: p.shard,
                hash: p.hash,
                notify,
            });
            calls.push(BatchCall {
                pair: i,
                redis_key: e.redis_key.clone(),
                give_back: e.give_back.take(),
                need: p.cost,
                n: e.size.max(p.cost),
                // Paced only within the batch size: a bigger cost is one check's,
                // taken now or not at all (no units held for a retry that
                // may never come).
                horizon: if super::paced(p.rule) && p.cost <= largest {
                    p.rule.capacity()
                } else {
                    0
                },
            });
        }
        Plan::TakeBatches(flights, calls)
    }
}

impl Inner {
    /// Records a batch in its entry.
    pub(super) fn apply(
        &self,
        e: &mut Entry,
        batch: &Batch,
        paced: bool,
        sent: Micros,
        received: Micros,
    ) {
        if batch.units > 0 {
            let mut life = self.options.life_for(&e.rule, batch.units);
            if let Some(end) = batch.window_end {
                life = life.min(end.saturating_sub(batch.t));
            }
            e.units = batch.units;
            e.batch_units = batch.units;
            e.taken = sent;
            e.t0 = batch.t;
            if paced {
                // Unit j is due `first + (j − 1) × T` after the batch's
                // Redis time, which lies between `sent` and `received`:
                // due from `received + first` (never early), and the
                // batch ends `life` after that from `sent` (never late).
                e.interval = e.rule.interval_micros().max(1);
                e.next = signed(received).saturating_add(batch.first);
                e.sent = sent;
                e.lag = received.saturating_sub(sent);
                e.life = life;
                e.expires = e.paced_end();
            } else {
                e.interval = 0;
                e.next = 0;
                // From the time the call was sent: the batch was taken
                // after it, so the local expiry is never later than the
                // real one.
                e.expires = sent.saturating_add(life);
            }
        }
        e.reset_after = batch.reset_after;
        e.remaining = batch.remaining;
        e.seen = received;
        e.not_before = if paced {
            // A paced batch is refused only when the units would be due
            // past the horizon: ask again once they would fit.
            match batch.wait_need {
                _ if batch.units > 0 => 0,
                Some(w) => received.saturating_add(
                    w.saturating_sub(
                        e.rule
                            .capacity()
                            .min(e.rule.max_debt())
                            .saturating_mul(e.rule.interval_micros()),
                    ),
                ),
                None => received.saturating_add(e.rule.period_micros()),
            }
        } else {
            // Units left in Redis: worth asking as soon as the local ones
            // run out. None: not before `n` units are back (asking for
            // fewer would mostly be answered with fewer, at the cost of
            // more calls).
            match batch.wait {
                _ if batch.remaining > 0 => 0,
                Some(0) => 0,
                Some(w) => received.saturating_add(w),
                None => received.saturating_add(e.rule.period_micros()),
            }
        };
    }

    /// The answer to a check one of whose batches (`short`: pair, wait in
    /// µs from `now`) could not cover its cost: denied, nothing consumed.
    pub(super) fn refused(
        &self,
        pairs: &[Pair<'_>],
        shard_ids: &[usize],
        short: &[(usize, Option<Micros>)],
        now: Micros,
    ) -> MultiDecision {
        let mut guards: Vec<(usize, MutexGuard<'_, Shard>)> = shard_ids
            .iter()
            .map(|&s| (s, self.shards[s].lock()))
            .collect();
        let out = pairs
            .iter()
            .enumerate()
            .map(|(i, p)| {
                let e = self.entry(shard_mut(&mut guards, p.shard), p, now);
                match short.iter().find(|s| s.0 == i) {
                    Some(&(_, wait)) => {
                        let mut d = e.denied(now, p.cost);
                        d.remaining = e.view(now).0;
                        d.retry_after = wait.map(Duration::from_micros);
                        d.reset_after = d.reset_after.max(d.retry_after.unwrap_or_default());
                        d
                    }
                    None => e.admitted(now),
                }
            })
            .collect();
        MultiDecision::from_decisions(out)
    }
}

fn shard_mut<'a>(guards: &'a mut [(usize, MutexGuard<'_, Shard>)], shard: usize) -> &'a mut Shard {
    let i = guards.iter().position(|g| g.0 == shard).unwrap_or(0);
    &mut guards[i].1
}
