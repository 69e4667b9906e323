//! The index of a [`SpaceSaving`](super::space_saving::SpaceSaving)
//! summary: an open-addressing table (linear probing, deletion by
//! backward shift) from a key's hash to the counter holding it.
//!
//! Its own table rather than a `HashMap` so the memory is known by
//! construction: one `u32` per slot, `2 × capacity` slots rounded up to a
//! power of two, allocated once and never grown (at most half full, so a
//! probe ends quickly and never loops).

/// A free slot.
const EMPTY: u32 = u32::MAX;

/// Slots holding counter indices, at most half of them used.
#[derive(Debug)]
pub(super) struct Table {
    slots: Vec<u32>,
    mask: usize,
}

impl Table {
    /// A table for up to `capacity` counters (at most [`u32::MAX`] − 1).
    pub(super) fn new(capacity: usize) -> Self {
        let len = capacity.max(1).saturating_mul(2).next_power_of_two();
        Self {
            slots: vec![EMPTY; len],
            mask: len - 1,
        }
    }

    /// The slots a table for `capacity` counters holds.
    pub(super) fn slots_for(capacity: usize) -> usize {
        capacity.max(1).saturating_mul(2).next_power_of_two()
    }

    /// Heap bytes held.
    pub(super) fn heap_bytes(&self) -> usize {
        self.slots.capacity() * size_of::<u32>()
    }

    /// Forgets every entry (the slots stay allocated).
    pub(super) fn clear(&mut self) {
        self.slots.fill(EMPTY);
    }

    #[allow(clippy::cast_possible_truncation)] // masked to the table's length
    fn home(&self, hash: u64) -> usize {
        hash as usize & self.mask
    }

    /// The counter index of the entry with `hash` that `is` accepts, or
    /// `None`.
    pub(super) fn find(&self, hash: u64, is: impl Fn(u32) -> bool) -> Option<u32> {
        let mut at = self.home(hash);
        loop {
            let entry = self.slots[at];
            if entry == EMPTY {
                return None;
            }
            if is(entry) {
                return Some(entry);
            }
            at = (at + 1) & self.mask;
        }
    }

    /// Adds counter `index` under `hash` (not already in the table; the
    /// table has room by construction).
    pub(super) fn insert(&mut self, hash: u64, index: u32) {
        let mut at = self.home(hash);
        while self.slots[at] != EMPTY {
            at = (at + 1) & self.mask;
        }
        self.slots[at] = index;
    }

    /// Removes counter `index`, filed under `hash`; `hash_of` gives the
    /// hash of any counter (to move the entries after it back).
    pub(super) fn remove(&mut self, hash: u64, index: u32, hash_of: impl Fn(u32) -> u64) {
        let mut hole = self.home(hash);
        while self.slots[hole] != index {
            if self.slots[hole] == EMPTY {
                return; // not there: nothing to remove
            }
            hole = (hole + 1) & self.mask;
        }
        // Backward shift: an entry after the hole moves into it when the
        // hole lies on its probe path (between its home and where it is).
        let mut at = hole;
        loop {
            at = (at + 1) & self.mask;
            let entry = self.slots[at];
            if entry == EMPTY {
                break;
            }
            let home = self.home(hash_of(entry));
            let from_home = at.wrapping_sub(home) & self.mask;
            let from_hole = at.wrapping_sub(hole) & self.mask;
            if from_home >= from_hole {
                self.slots[hole] = entry;
                hole = at;
            }
        }
        self.slots[hole] = EMPTY;
    }
}
