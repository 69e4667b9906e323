//! How many streams of this server hold each (rule, key): a bucket's
//! share is its limit split among its holders (docs/rlqs.md, "Shares").

use std::collections::HashMap;
use std::sync::Mutex;

/// Streams holding each (rule, key), counted while they hold it.
#[derive(Debug, Default)]
pub(super) struct Holders(Mutex<HashMap<(String, String), u64>>);

impl Holders {
    /// One more stream holds `target`.
    pub(super) fn hold(&self, target: &(String, String)) {
        let mut map = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        *map.entry(target.clone()).or_insert(0) += 1;
    }

    /// One stream no longer holds `target`.
    pub(super) fn release(&self, target: &(String, String)) {
        let mut map = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(n) = map.get_mut(target) {
            *n -= 1;
            if *n == 0 {
                map.remove(target);
            }
        }
    }

    /// Streams holding `target` (at least 1 counts the asker).
    pub(super) fn count(&self, target: &(String, String)) -> u64 {
        let map = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        map.get(target).copied().unwrap_or(0).max(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn holders_are_counted_while_they_hold() {
        let h = Holders::default();
        let t = ("r".to_owned(), "k".to_owned());
        assert_eq!(h.count(&t), 1);
        h.hold(&t);
        h.hold(&t);
        assert_eq!(h.count(&t), 2);
        h.release(&t);
        h.release(&t);
        h.release(&t);
        assert_eq!(h.count(&t), 1);
        assert!(h.0.lock().unwrap().is_empty());
    }
}
