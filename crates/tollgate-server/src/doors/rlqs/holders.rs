//! What the streams of this server hold of each (rule, key): how many
//! hold it, and the units their outstanding leases hold. A bucket's share
//! is its limit split among its holders, and all its leases together stay
//! within half its limit (docs/rlqs.md, "Shares").

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};

/// A (rule, key): the rule's name and the key.
pub(super) type Target = (String, String);

#[derive(Debug, Default, Clone, Copy)]
struct Held {
    /// Streams holding it.
    streams: u64,
    /// Units of their outstanding leases.
    leased: u64,
}

/// Streams holding each (rule, key), and their leases, counted while they
/// hold them.
#[derive(Debug, Default)]
pub(super) struct Holders(Mutex<HashMap<Target, Held>>);

impl Holders {
    fn map(&self) -> MutexGuard<'_, HashMap<Target, Held>> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// One more stream holds `target`.
    pub(super) fn hold(&self, target: &Target) {
        self.map().entry(target.clone()).or_default().streams += 1;
    }

    /// One stream no longer holds `target`, nor the `leased` units it
    /// held of it.
    pub(super) fn release(&self, target: &Target, leased: u64) {
        let mut map = self.map();
        if let Some(h) = map.get_mut(target) {
            h.streams = h.streams.saturating_sub(1);
            h.leased = h.leased.saturating_sub(leased);
            if h.streams == 0 {
                map.remove(target);
            }
        }
    }

    /// A stream's lease of `units` of `target` starts (`true`) or ends.
    pub(super) fn lease(&self, target: &Target, units: u64, starts: bool) {
        if let Some(h) = self.map().get_mut(target) {
            h.leased = if starts {
                h.leased.saturating_add(units)
            } else {
                h.leased.saturating_sub(units)
            };
        }
    }

    /// Streams holding `target` (at least 1 counts the asker), and the
    /// units their leases hold.
    pub(super) fn count(&self, target: &Target) -> (u64, u64) {
        let h = self.map().get(target).copied().unwrap_or_default();
        (h.streams.max(1), h.leased)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn holders_and_their_leases_are_counted_while_they_hold() {
        let h = Holders::default();
        let t = ("r".to_owned(), "k".to_owned());
        assert_eq!(h.count(&t), (1, 0));
        h.hold(&t);
        h.hold(&t);
        h.lease(&t, 10, true);
        h.lease(&t, 5, true);
        assert_eq!(h.count(&t), (2, 15));
        h.lease(&t, 10, false);
        h.release(&t, 5);
        assert_eq!(h.count(&t), (1, 0));
        h.release(&t, 0);
        h.release(&t, 0);
        assert_eq!(h.count(&t), (1, 0));
        assert!(h.0.lock().unwrap().is_empty());
    }
}
