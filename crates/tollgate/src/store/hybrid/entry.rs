//! One (rule, key)'s local state: its batch, what it reports, what
//! forgetting it costs; and the shard table holding the entries.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Notify;

use super::{Inner, Pair, Shard};
use crate::algorithm::Usage;
use crate::decision::Decision;
use crate::error::StoreError;
use crate::rule::Rule;
use crate::store::redis::hybrid_batch::GiveBack;
use crate::store::redis::keys;
use crate::time::Micros;

/// One (rule, key)'s local state on this replica.
#[derive(Debug)]
pub(super) struct Entry {
    pub(super) rule: Rule,
    pub(super) redis_key: Box<[u8]>,
    /// Units of the batch not spent yet (valid while `now < expires`).
    pub(super) units: u64,
    /// Local time the batch ends (a paced batch: `life` after the time its
    /// next unit was due, moved on as units are spent).
    pub(super) expires: Micros,
    /// A paced batch (GCRA, token bucket): the local time the next unit may
    /// be spent (each later one `interval` after it), `T`; 0 when not
    /// paced. Measured from when the reply was received: never early.
    /// Signed: units already there were due before the clock's origin may
    /// be (a [`crate::FakeClock`] starts at 0).
    pub(super) next: i64,
    pub(super) interval: Micros,
    /// A paced batch: when its call was sent, the call's round trip, and
    /// the batch's life (for `expires`).
    pub(super) sent: Micros,
    pub(super) lag: Micros,
    pub(super) life: Micros,
    /// Units the current batch took, the local time it was sent, and the
    /// size of the next (0: a first batch, see plan.rs).
    pub(super) batch_units: u64,
    pub(super) taken: Micros,
    pub(super) size: u64,
    /// The batch's Redis time and reset_after right after it.
    pub(super) t0: Micros,
    pub(super) reset_after: Micros,
    /// Redis's remaining right after the last batch, and the local time it
    /// was seen (for the reported remaining and reset_after).
    pub(super) remaining: u64,
    pub(super) seen: Micros,
    /// Local time before which asking Redis again is worthless.
    pub(super) not_before: Micros,
    /// Units of an expired batch to give back with the next batch.
    pub(super) give_back: Option<GiveBack>,
    /// A batch call in flight: callers wait for it instead of asking too.
    pub(super) inflight: Option<Arc<Notify>>,
    /// Bumped when a batch call completes; `failed` holds the error of the last
    /// one (and its generation) when it failed.
    pub(super) generation: u64,
    pub(super) failed: Option<(u64, StoreError)>,
    pub(super) last_used: Micros,
}

impl Entry {
    fn new(rule: Rule, redis_key: Box<[u8]>) -> Self {
        Self {
            rule,
            redis_key,
            units: 0,
            expires: 0,
            next: 0,
            interval: 0,
            sent: 0,
            lag: 0,
            life: 0,
            batch_units: 0,
            taken: 0,
            size: 0,
            t0: 0,
            reset_after: 0,
            remaining: 0,
            seen: 0,
            not_before: 0,
            give_back: None,
            inflight: None,
            generation: 0,
            failed: None,
            last_used: 0,
        }
    }

    /// Moves the units of an expired batch to `give_back`.
    #[inline] // called per check from check.rs and plan.rs, other codegen units
    pub(super) fn expire(&mut self, now: Micros) {
        if self.units > 0 && now >= self.expires {
            self.retire();
        }
    }

    /// The local time a check of `cost` (at least 1, at most `units`) may
    /// be spent: now for an unpaced batch, else when its last unit is due.
    #[inline] // called per check from check.rs and plan.rs, other codegen units
    pub(super) fn due(&self, cost: u64) -> i64 {
        self.next
            .saturating_add(signed((cost - 1).saturating_mul(self.interval)))
    }

    /// Whether a check of `cost` (at least 1, at most `units`) is due at
    /// `now`.
    #[inline] // called per check from check.rs and plan.rs, other codegen units
    pub(super) fn is_due(&self, now: Micros, cost: u64) -> bool {
        signed(now) >= self.due(cost)
    }

    /// Spends `cost` units at hand.
    #[inline] // called per check from check.rs and plan.rs, other codegen units
    pub(super) fn spend(&mut self, cost: u64) {
        self.units -= cost;
        if self.interval > 0 {
            self.next = self
                .next
                .saturating_add(signed(cost.saturating_mul(self.interval)));
            // The batch lives `life` past the time its next unit was due in
            // Redis (from the call's sending: never late), and at least
            // `life` past the batch call.
            self.expires = self.paced_end();
        }
    }

    /// A paced batch's end: `life` past the Redis time its next unit was
    /// due (from the call's sending: never late), at least `life` past the
    /// batch call.
    pub(super) fn paced_end(&self) -> Micros {
        let next_sent = u64::try_from(self.next.saturating_sub(signed(self.lag))).unwrap_or(0);
        self.sent.max(next_sent).saturating_add(self.life)
    }

    /// When a check of `cost` that this entry denies may ask again: when
    /// the units at hand are due, or `not_before` (now, with units of an
    /// expired batch to give back: see plan.rs).
    #[inline]
    pub(super) fn retry_at(&self, cost: u64) -> Micros {
        if self.units >= cost {
            u64::try_from(self.due(cost)).unwrap_or(0)
        } else if self.give_back.is_some() {
            0
        } else {
            self.not_before
        }
    }

    /// Stops spending the current batch; its units go back with the next.
    pub(super) fn retire(&mut self) {
        if self.units > 0 {
            self.give_back = Some(GiveBack {
                units: self.units,
                t0: self.t0,
                reset_after: self.reset_after,
            });
            self.units = 0;
        }
    }

    /// What this replica knows of the pair now: remaining (Redis's at the
    /// last batch plus the units held and due) and reset_after.
    #[inline] // called per check from check.rs and plan.rs, other codegen units
    pub(super) fn view(&self, now: Micros) -> (u64, Duration) {
        // interval 0: not paced, every unit held is due
        let due = match u64::try_from(signed(now).saturating_sub(self.next)) {
            Ok(ahead) => ahead
                .checked_div(self.interval)
                .map_or(self.units, |d| (d + 1).min(self.units)),
            Err(_) if self.interval == 0 => self.units,
            Err(_) => 0,
        };
        let remaining = self.remaining.saturating_add(due).min(self.rule.capacity());
        let elapsed = now.saturating_sub(self.seen);
        (
            remaining,
            Duration::from_micros(self.reset_after.saturating_sub(elapsed)),
        )
    }

    #[inline] // called per check from check.rs and plan.rs, other codegen units
    pub(super) fn admitted(&self, now: Micros) -> Decision {
        let (remaining, reset_after) = self.view(now);
        Decision {
            allowed: true,
            limit: self.rule.capacity(),
            remaining,
            reset_after,
            retry_after: None,
        }
    }

    /// A local denial of a check of `cost`.
    #[inline] // called per check from check.rs and plan.rs, other codegen units
    pub(super) fn denied(&self, now: Micros, cost: u64) -> Decision {
        let (_, reset_after) = self.view(now);
        let retry = Duration::from_micros(self.retry_at(cost).saturating_sub(now));
        Decision {
            allowed: false,
            limit: self.rule.capacity(),
            remaining: 0,
            reset_after: reset_after.max(retry),
            retry_after: Some(retry),
        }
    }

    /// What forgetting this entry loses, to order evictions: its batch's
    /// units not spent yet (current, or waiting to be given back) as a
    /// share of the rule's capacity (see [`Usage`]). A remembered denial
    /// holds none: Redis still has the key's state.
    fn stake(&self) -> u64 {
        let held = self
            .units
            .saturating_add(self.give_back.map_or(0, |g| g.units));
        Usage::of(u128::from(held), u128::from(self.rule.capacity()), false).stake()
    }

    /// Whether forgetting this entry changes nothing.
    fn is_dead(&self, now: Micros) -> bool {
        self.inflight.is_none()
            && (self.units == 0 || now >= self.expires)
            && self.give_back.is_none()
            && now >= self.not_before
    }
}

/// µs as a signed number (clocks stay far below 2^63 µs).
#[inline]
pub(super) fn signed(micros: u64) -> i64 {
    i64::try_from(micros).unwrap_or(i64::MAX)
}

/// Clears a batch call in flight when its leader finishes or is dropped
/// (cancelled), and wakes the callers waiting for it.
pub(super) struct Flight<'a> {
    pub(super) inner: &'a Inner,
    pub(super) shard: usize,
    pub(super) hash: u128,
    pub(super) notify: Arc<Notify>,
}

impl Drop for Flight<'_> {
    fn drop(&mut self) {
        let mut shard = self.inner.shards[self.shard].lock();
        if let Some(e) = shard.get_mut(&self.hash)
            && e.inflight
                .as_ref()
                .is_some_and(|n| Arc::ptr_eq(n, &self.notify))
        {
            e.inflight = None;
        }
        drop(shard);
        self.notify.notify_waiters();
    }
}

impl Inner {
    /// `p`'s entry in its locked shard, created when missing. A full shard
    /// first forgets dead entries, then an eighth of those without a batch
    /// call in flight, what costs least to forget first: the fewest units
    /// of batches at stake (as a share of the rule's capacity), then the least
    /// recently used. Forgetting an entry admits nothing Redis would deny
    /// (Redis holds every key's state); it loses the entry's unspent units
    /// until the Redis state refills, and a remembered denial costs one
    /// Redis call to learn again.
    #[inline] // called per pair from plan.rs, another codegen unit
    pub(super) fn entry<'s>(
        &self,
        shard: &'s mut Shard,
        p: &Pair<'_>,
        now: Micros,
    ) -> &'s mut Entry {
        if shard.len() >= self.shard_cap && !shard.contains_key(&p.hash) {
            shard.retain(|_, e| !e.is_dead(now));
            if shard.len() >= self.shard_cap {
                let mut ranks: Vec<(u64, Micros, u128)> = shard
                    .iter()
                    .filter(|(_, e)| e.inflight.is_none())
                    .map(|(&hash, e)| (e.stake(), e.last_used, hash))
                    .collect();
                let n = (self.shard_cap / 8).max(1).min(ranks.len());
                if n > 0 {
                    if n < ranks.len() {
                        ranks.select_nth_unstable(n - 1);
                    }
                    for &(_, _, hash) in &ranks[..n] {
                        shard.remove(&hash);
                    }
                }
            }
        }
        let e = shard.entry(p.hash).or_insert_with(|| {
            let key = keys::redis_key(
                self.redis.prefix(),
                p.rule.name(),
                p.rule.algorithm(),
                p.key,
            );
            Entry::new(p.rule.clone(), key.into())
        });
        e.last_used = now;
        e
    }
}
