//! One rule's denials lately: two Space-Saving summaries, the current
//! epoch's and the previous one's, merged when read (docs/semantics.md,
//! "Top denied keys").

use super::DeniedKey;
use super::space_saving::{Counter, SpaceSaving};
use crate::time::Micros;

/// The current and the previous epoch of one rule.
#[derive(Debug)]
pub(super) struct Recent {
    /// The current epoch's number: `floor(now / epoch)`.
    epoch: u64,
    current: SpaceSaving,
    previous: SpaceSaving,
}

impl Recent {
    /// Empty summaries of `capacity` counters each, the current epoch
    /// `epoch`.
    pub(super) fn new(capacity: usize, epoch: u64) -> Self {
        Self {
            epoch,
            current: SpaceSaving::new(capacity),
            previous: SpaceSaving::new(capacity),
        }
    }

    /// The heap bytes `Recent::new(capacity, _)` holds.
    pub(super) fn bytes_for(capacity: usize) -> usize {
        2 * SpaceSaving::bytes_for(capacity)
    }

    /// Heap bytes held.
    pub(super) fn heap_bytes(&self) -> usize {
        self.current.heap_bytes() + self.previous.heap_bytes()
    }

    /// Moves on to epoch `epoch`: one epoch on, the current summary
    /// becomes the previous one; more, both are forgotten. An earlier
    /// epoch (a clock that went back) changes nothing.
    pub(super) fn rotate(&mut self, epoch: u64) {
        if epoch <= self.epoch {
            return;
        }
        if epoch == self.epoch + 1 {
            std::mem::swap(&mut self.current, &mut self.previous);
        } else {
            self.previous.clear();
        }
        self.current.clear();
        self.epoch = epoch;
    }

    /// Records one denial of `key` (hash `hash`) in epoch `epoch`.
    pub(super) fn record(&mut self, epoch: u64, hash: u64, key: &[u8]) {
        self.rotate(epoch);
        self.current.add(hash, key, 1);
    }

    /// Denials recorded in the current and the previous epoch.
    pub(super) fn total(&self) -> u64 {
        self.current.total().saturating_add(self.previous.total())
    }

    /// The `n` keys with the highest counts over both epochs, highest
    /// first. A key one summary lacks gets that summary's floor (the most
    /// it can have been denied there) in both its count and its error, so
    /// `count − error ≤ true ≤ count` holds for the sum.
    pub(super) fn top(&self, n: usize) -> Vec<DeniedKey> {
        let (current, previous) = (&self.current, &self.previous);
        let (floor_current, floor_previous) = (current.floor(), previous.floor());
        let merged = current
            .counters()
            .iter()
            .map(|c| {
                let (count, error) = previous
                    .get_like(c)
                    .map_or((floor_previous, floor_previous), |p| (p.count, p.error));
                denied(
                    c,
                    c.count.saturating_add(count),
                    c.error.saturating_add(error),
                )
            })
            .chain(
                previous
                    .counters()
                    .iter()
                    .filter(|p| current.get_like(p).is_none())
                    .map(|p| {
                        denied(
                            p,
                            p.count.saturating_add(floor_current),
                            p.error.saturating_add(floor_current),
                        )
                    }),
            );
        let mut all: Vec<DeniedKey> = merged.collect();
        all.sort_unstable_by(|a, b| {
            b.count
                .cmp(&a.count)
                .then_with(|| b.lower().cmp(&a.lower()))
                .then_with(|| a.key.cmp(&b.key))
                .then_with(|| a.key_len.cmp(&b.key_len))
        });
        all.truncate(n);
        all
    }
}

fn denied(c: &Counter, count: u64, error: u64) -> DeniedKey {
    DeniedKey {
        key: c.key().to_vec(),
        key_len: c.len as usize,
        count,
        error,
    }
}

/// The epoch `now` falls in, epochs `epoch` µs long (at least 1).
pub(super) fn epoch_of(now: Micros, epoch: Micros) -> u64 {
    now / epoch.max(1)
}
