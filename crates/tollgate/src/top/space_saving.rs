//! One Space-Saving summary (Metwally, Agrawal and El Abbadi, "Efficient
//! computation of frequent and top-k elements in data streams", 2005):
//! `capacity` counters; a key already counted adds to its counter, a new
//! key takes a free counter or, when none is free, the smallest one, whose
//! count it inherits as its error. So, over the `N` units recorded:
//!
//! * a key's count never falls short: `true ≤ count`, and
//!   `count − error ≤ true`;
//! * `error ≤ min ≤ N / capacity`, `min` the smallest count when every
//!   counter is taken (a summary never full has no error at all: every key
//!   it saw is in it, counted exactly);
//! * a key not in the summary was recorded at most `min` times, so every
//!   key recorded more than `N / capacity` times is in it.
//!
//! The counters sit in a fixed array; a binary min-heap of their indices
//! finds the smallest, and a [`Table`] finds a key's counter: a record is
//! one hash, one probe and `O(log capacity)` swaps of `u32`s.

use super::KEPT_KEY_BYTES;
use super::table::Table;

/// One key's counter.
#[derive(Debug, Clone)]
pub(super) struct Counter {
    /// The hash of the whole key.
    pub(super) hash: u64,
    /// Units recorded for the key (an upper bound, see the module docs).
    pub(super) count: u64,
    /// How much of `count` another key may have put there.
    pub(super) error: u64,
    /// Where the counter is in the heap.
    at: u32,
    /// The key's whole length (keys are at most [`crate::limits::MAX_KEY_LEN`]).
    pub(super) len: u32,
    /// The key's first bytes (all of them up to [`KEPT_KEY_BYTES`]).
    pub(super) kept: [u8; KEPT_KEY_BYTES],
}

impl Counter {
    /// The key's bytes kept (all of it when not longer than
    /// [`KEPT_KEY_BYTES`]).
    pub(super) fn key(&self) -> &[u8] {
        &self.kept[..(self.len as usize).min(KEPT_KEY_BYTES)]
    }

    /// Whether the counter holds the key with `hash`, `len` and kept bytes
    /// `kept`: exact for keys up to [`KEPT_KEY_BYTES`], and longer keys
    /// told apart by their length, first bytes and 64-bit hash.
    fn holds(&self, hash: u64, len: u32, kept: &[u8]) -> bool {
        self.hash == hash && self.len == len && self.key() == kept
    }
}

/// A Space-Saving summary of at most `capacity` keys.
#[derive(Debug)]
pub(super) struct SpaceSaving {
    counters: Vec<Counter>,
    /// Counter indices, a min-heap on their counts.
    heap: Vec<u32>,
    table: Table,
    capacity: usize,
    /// Units recorded since the last clear.
    total: u64,
}

/// The length of a key as kept (keys are at most [`crate::limits::MAX_KEY_LEN`]).
fn len_of(key: &[u8]) -> u32 {
    u32::try_from(key.len()).unwrap_or(u32::MAX)
}

impl SpaceSaving {
    /// An empty summary of `capacity` counters (at least 1), its memory
    /// allocated now and never grown.
    pub(super) fn new(capacity: usize) -> Self {
        let capacity = capacity.max(1);
        Self {
            counters: Vec::with_capacity(capacity),
            heap: Vec::with_capacity(capacity),
            table: Table::new(capacity),
            capacity,
            total: 0,
        }
    }

    /// The heap bytes a summary of `capacity` counters holds.
    pub(super) fn bytes_for(capacity: usize) -> usize {
        let capacity = capacity.max(1);
        capacity * (size_of::<Counter>() + size_of::<u32>())
            + Table::slots_for(capacity) * size_of::<u32>()
    }

    /// Heap bytes held, from the allocations themselves.
    pub(super) fn heap_bytes(&self) -> usize {
        self.counters.capacity() * size_of::<Counter>()
            + self.heap.capacity() * size_of::<u32>()
            + self.table.heap_bytes()
    }

    /// Units recorded since the last clear.
    pub(super) fn total(&self) -> u64 {
        self.total
    }

    /// The most any key not in the summary was recorded: the smallest
    /// count once every counter is taken, else 0 (nothing was dropped).
    pub(super) fn floor(&self) -> u64 {
        if self.counters.len() < self.capacity {
            return 0;
        }
        self.heap
            .first()
            .map_or(0, |&i| self.counters[i as usize].count)
    }

    /// The counters, in no order.
    pub(super) fn counters(&self) -> &[Counter] {
        &self.counters
    }

    /// The counter of the key `other` counts, if this summary holds it.
    pub(super) fn get_like(&self, other: &Counter) -> Option<&Counter> {
        self.get(other.hash, other.len, other.key())
    }

    fn get(&self, hash: u64, len: u32, kept: &[u8]) -> Option<&Counter> {
        let counters = &self.counters;
        self.table
            .find(hash, |i| counters[i as usize].holds(hash, len, kept))
            .map(|i| &counters[i as usize])
    }

    /// Forgets every key (the memory stays allocated).
    pub(super) fn clear(&mut self) {
        self.counters.clear();
        self.heap.clear();
        self.table.clear();
        self.total = 0;
    }

    /// Records `by` units for `key`, whose hash is `hash`.
    pub(super) fn add(&mut self, hash: u64, key: &[u8], by: u64) {
        self.total = self.total.saturating_add(by);
        let len = len_of(key);
        let kept = &key[..key.len().min(KEPT_KEY_BYTES)];
        let counters = &self.counters;
        if let Some(i) = self
            .table
            .find(hash, |i| counters[i as usize].holds(hash, len, kept))
        {
            let c = &mut self.counters[i as usize];
            c.count = c.count.saturating_add(by);
            let at = c.at as usize;
            self.sift_down(at);
            return;
        }
        let mut counter = Counter {
            hash,
            count: by,
            error: 0,
            at: 0,
            len,
            kept: [0; KEPT_KEY_BYTES],
        };
        counter.kept[..kept.len()].copy_from_slice(kept);
        if self.counters.len() < self.capacity {
            #[allow(clippy::cast_possible_truncation)] // capacity < u32::MAX
            let i = self.counters.len() as u32;
            #[allow(clippy::cast_possible_truncation)]
            let at = self.heap.len() as u32;
            counter.at = at;
            self.counters.push(counter);
            self.heap.push(i);
            self.table.insert(hash, i);
            self.sift_up(at as usize);
            return;
        }
        // Full: the smallest counter goes to the new key, which inherits
        // its count as the error.
        let i = self.heap[0];
        let old = &self.counters[i as usize];
        let (old_hash, min) = (old.hash, old.count);
        let counters = &self.counters;
        self.table
            .remove(old_hash, i, |j| counters[j as usize].hash);
        counter.count = min.saturating_add(by);
        counter.error = min;
        counter.at = 0;
        self.counters[i as usize] = counter;
        self.table.insert(hash, i);
        self.sift_down(0);
    }

    fn count_at(&self, at: usize) -> u64 {
        self.counters[self.heap[at] as usize].count
    }

    /// Swaps heap positions `a` and `b`, keeping the counters' `at`.
    #[allow(clippy::cast_possible_truncation)] // heap positions < capacity < u32::MAX
    fn swap(&mut self, a: usize, b: usize) {
        self.heap.swap(a, b);
        self.counters[self.heap[a] as usize].at = a as u32;
        self.counters[self.heap[b] as usize].at = b as u32;
    }

    fn sift_up(&mut self, mut at: usize) {
        while at > 0 {
            let parent = (at - 1) / 2;
            if self.count_at(parent) <= self.count_at(at) {
                break;
            }
            self.swap(parent, at);
            at = parent;
        }
    }

    fn sift_down(&mut self, mut at: usize) {
        let len = self.heap.len();
        loop {
            let (left, right) = (2 * at + 1, 2 * at + 2);
            let mut least = at;
            if left < len && self.count_at(left) < self.count_at(least) {
                least = left;
            }
            if right < len && self.count_at(right) < self.count_at(least) {
                least = right;
            }
            if least == at {
                break;
            }
            self.swap(at, least);
            at = least;
        }
    }
}
