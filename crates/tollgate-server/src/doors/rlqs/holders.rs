//! What the streams of this server hold of each (rule, key): how many
//! hold it, and the units their outstanding leases hold. A bucket's share
//! is its limit split among its holders, and all its leases together stay
//! within half its limit (docs/rlqs.md, "Shares").
//!
//! A stream that ends does not end its leases: Envoy keeps spending its
//! last assignment, unreported, until the assignment's TTL. So the units
//! of a closed stream's lease stay counted until then (they *linger*):
//! released at once, a stream opened meanwhile would get that room again,
//! and one window could admit twice the limit.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::sync::{Mutex, MutexGuard};
use std::time::Instant;

/// A (rule, key): the rule's name and the key.
pub(super) type Target = (String, String);

#[derive(Debug, Default, Clone, Copy)]
struct Held {
    /// Streams holding it.
    streams: u64,
    /// Units of their outstanding leases, and of closed streams' leases
    /// until they expire.
    leased: u64,
}

#[derive(Debug, Default)]
struct State {
    held: HashMap<Target, Held>,
    /// Closed streams' lease units, by when they expire.
    lingering: BinaryHeap<Reverse<(Instant, Target, u64)>>,
}

impl State {
    /// Ends the lingering leases expired by `now`.
    fn expire(&mut self, now: Instant) {
        while let Some(Reverse((until, _, _))) = self.lingering.peek() {
            if *until > now {
                break;
            }
            let Some(Reverse((_, target, units))) = self.lingering.pop() else {
                break;
            };
            self.take(&target, units);
        }
    }

    /// `units` of `target`'s leases end; a target nobody holds any more
    /// goes.
    fn take(&mut self, target: &Target, units: u64) {
        if let Some(h) = self.held.get_mut(target) {
            h.leased = h.leased.saturating_sub(units);
            if h.streams == 0 && h.leased == 0 {
                self.held.remove(target);
            }
        }
    }
}

/// Streams holding each (rule, key), and their leases, counted while they
/// hold them (and a closed stream's, until it expires).
#[derive(Debug, Default)]
pub(super) struct Holders(Mutex<State>);

impl Holders {
    fn state(&self, now: Instant) -> MutexGuard<'_, State> {
        let mut state = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        state.expire(now);
        state
    }

    /// One more stream holds `target`.
    pub(super) fn hold(&self, target: &Target, now: Instant) {
        self.state(now)
            .held
            .entry(target.clone())
            .or_default()
            .streams += 1;
    }

    /// One stream no longer holds `target`. The `leased` units it held of
    /// it end at once (`until` `None`: settled, or never spendable) or
    /// linger until `until`, the lease's expiry.
    pub(super) fn release(
        &self,
        target: &Target,
        leased: u64,
        until: Option<Instant>,
        now: Instant,
    ) {
        let mut state = self.state(now);
        let Some(h) = state.held.get_mut(target) else {
            return;
        };
        h.streams = h.streams.saturating_sub(1);
        match until {
            Some(until) if until > now && leased > 0 => {
                state
                    .lingering
                    .push(Reverse((until, target.clone(), leased)));
            }
            // Goes when it has neither holders nor leases left.
            _ => state.take(target, leased),
        }
    }

    /// A stream's lease of `units` of `target` starts (`true`) or ends.
    pub(super) fn lease(&self, target: &Target, units: u64, starts: bool, now: Instant) {
        let mut state = self.state(now);
        if let Some(h) = state.held.get_mut(target) {
            h.leased = if starts {
                h.leased.saturating_add(units)
            } else {
                h.leased.saturating_sub(units)
            };
        }
    }

    /// Streams holding `target` (at least 1 counts the asker), and the
    /// units their leases hold.
    pub(super) fn count(&self, target: &Target, now: Instant) -> (u64, u64) {
        let h = self
            .state(now)
            .held
            .get(target)
            .copied()
            .unwrap_or_default();
        (h.streams.max(1), h.leased)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn holders_and_their_leases_are_counted_while_they_hold() {
        let h = Holders::default();
        let t = ("r".to_owned(), "k".to_owned());
        let now = Instant::now();
        assert_eq!(h.count(&t, now), (1, 0));
        h.hold(&t, now);
        h.hold(&t, now);
        h.lease(&t, 10, true, now);
        h.lease(&t, 5, true, now);
        assert_eq!(h.count(&t, now), (2, 15));
        h.lease(&t, 10, false, now);
        h.release(&t, 5, None, now);
        assert_eq!(h.count(&t, now), (1, 0));
        h.release(&t, 0, None, now);
        h.release(&t, 0, None, now);
        assert_eq!(h.count(&t, now), (1, 0));
        assert!(h.0.lock().unwrap().held.is_empty());
    }

    #[test]
    fn a_closed_streams_lease_counts_until_it_expires() {
        let h = Holders::default();
        let t = ("r".to_owned(), "k".to_owned());
        let now = Instant::now();
        let ttl = Duration::from_secs(15);
        h.hold(&t, now);
        h.lease(&t, 50, true, now);
        h.release(&t, 50, Some(now + ttl), now);
        // No holder, but Envoy may still spend the 50.
        assert_eq!(h.count(&t, now + ttl - Duration::from_millis(1)), (1, 50));
        h.hold(&t, now);
        h.lease(&t, 7, true, now);
        assert_eq!(h.count(&t, now), (1, 57));
        // Expired: only the new stream's lease.
        assert_eq!(h.count(&t, now + ttl), (1, 7));
        h.lease(&t, 7, false, now + ttl);
        h.release(&t, 0, None, now + ttl);
        assert!(h.0.lock().unwrap().held.is_empty(), "nothing left held");
    }

    #[test]
    fn an_expired_lease_of_a_target_nobody_holds_is_forgotten() {
        let h = Holders::default();
        let now = Instant::now();
        for i in 0..100 {
            let t = ("r".to_owned(), format!("k{i}"));
            h.hold(&t, now);
            h.lease(&t, 10, true, now);
            h.release(&t, 10, Some(now + Duration::from_secs(1)), now);
        }
        assert_eq!(h.0.lock().unwrap().held.len(), 100);
        let later = now + Duration::from_secs(1);
        let other = ("r".to_owned(), "other".to_owned());
        assert_eq!(h.count(&other, later), (1, 0));
        let state = h.0.lock().unwrap();
        assert!(state.held.is_empty() && state.lingering.is_empty());
    }
}
