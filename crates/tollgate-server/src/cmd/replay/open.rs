//! The reservations and leases a replay holds open, per (rule, key), oldest
//! first: what a `settle`, `cancel`, `release` or `renew` row acts on
//! (docs/replay.md, "Reservations and leases").
//!
//! Bounded: an entry is dropped once the store would no longer know it (a
//! reservation at its ttl + the store's memory after it, a lease at its
//! expiry), and at most [`MAX_OPEN`] are held at once. Each entry is 40
//! bytes, each (rule, key) holding any adds its key as stores name it (at
//! most 129 bytes: longer keys are named by their SHA-1) and the map's own
//! share: under 300 MB at worst.

use std::collections::{HashMap, VecDeque};

use tollgate::Micros;
use tollgate::ticket::key_name;

/// The most reservations and leases a replay holds open at once (the
/// memory store's default key count). When that many are open, those
/// already past are dropped; if that frees fewer than an eighth, the replay
/// stops (docs/replay.md).
pub const MAX_OPEN: usize = 1_000_000;

/// One open reservation or lease.
#[derive(Debug, Clone, Copy)]
pub(super) struct Open {
    /// The ticket's nonce.
    pub(super) nonce: [u8; 16],
    /// From when it is no longer open (µs): a reservation's ttl plus the
    /// store's memory after it, a lease's expiry.
    pub(super) until: Micros,
    /// A reservation's estimate, a lease's slots.
    pub(super) units: u64,
    /// The trace line that opened it.
    pub(super) line: u64,
}

/// No room for another open entry: [`MAX_OPEN`] are open and live.
#[derive(Debug)]
pub(super) struct Full;

/// The open entries by (rule index, key name), oldest first.
#[derive(Debug, Default)]
pub(super) struct Book {
    open: HashMap<(usize, Box<[u8]>), VecDeque<Open>>,
    len: usize,
}

impl Book {
    /// How many entries are held.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.len
    }

    /// Makes room for one more entry at `t`.
    ///
    /// # Errors
    /// [`Full`] when [`MAX_OPEN`] are held and dropping those past `t`
    /// frees fewer than an eighth of them.
    pub(super) fn make_room(&mut self, t: Micros) -> Result<(), Full> {
        self.make_room_within(t, MAX_OPEN)
    }

    fn make_room_within(&mut self, t: Micros, max: usize) -> Result<(), Full> {
        if self.len < max {
            return Ok(());
        }
        self.open.retain(|_, q| {
            q.retain(|o| o.until > t);
            !q.is_empty()
        });
        self.len = self.open.values().map(VecDeque::len).sum();
        // Leave at least an eighth free, so sweeps stay rare.
        if self.len > max - max.div_ceil(8) {
            return Err(Full);
        }
        Ok(())
    }

    /// Adds `entry` as the newest of (`rule`, `key`); call
    /// [`Book::make_room`] first.
    pub(super) fn push(&mut self, rule: usize, key: &[u8], entry: Open) {
        self.open
            .entry((rule, key_name(key).into_boxed_slice()))
            .or_default()
            .push_back(entry);
        self.len += 1;
    }

    /// The oldest entry of (`rule`, `key`) still open at `t`; those before
    /// it that are past are dropped.
    pub(super) fn oldest(&mut self, rule: usize, key: &[u8], t: Micros) -> Option<&mut Open> {
        let name = (rule, key_name(key).into_boxed_slice());
        let q = self.open.get_mut(&name)?;
        while q.front().is_some_and(|o| o.until <= t) {
            q.pop_front();
            self.len -= 1;
        }
        if q.is_empty() {
            self.open.remove(&name);
            return None;
        }
        self.open.get_mut(&name).and_then(VecDeque::front_mut)
    }

    /// Drops the oldest entry of (`rule`, `key`) (the one
    /// [`Book::oldest`] answered).
    pub(super) fn close_oldest(&mut self, rule: usize, key: &[u8]) {
        let name = (rule, key_name(key).into_boxed_slice());
        if let Some(q) = self.open.get_mut(&name) {
            if q.pop_front().is_some() {
                self.len -= 1;
            }
            if q.is_empty() {
                self.open.remove(&name);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(until: Micros, line: u64) -> Open {
        Open {
            nonce: [0; 16],
            until,
            units: 1,
            line,
        }
    }

    #[test]
    fn oldest_first_and_past_entries_dropped() {
        let mut book = Book::default();
        book.push(0, b"k", entry(10, 1));
        book.push(0, b"k", entry(30, 2));
        book.push(0, b"k", entry(20, 3));
        book.push(1, b"k", entry(99, 4));
        assert_eq!(book.oldest(0, b"k", 5).map(|o| o.line), Some(1));
        // At 10 the first is past: the second is the oldest open.
        assert_eq!(book.oldest(0, b"k", 10).map(|o| o.line), Some(2));
        assert_eq!(book.len(), 3);
        book.close_oldest(0, b"k");
        assert_eq!(book.oldest(0, b"k", 10).map(|o| o.line), Some(3));
        assert!(book.oldest(0, b"k", 20).is_none());
        assert_eq!(book.len(), 1, "only rule 1's entry is left");
        assert!(book.oldest(0, b"other", 0).is_none());
    }

    #[test]
    fn room_is_made_from_past_entries_else_full() {
        let mut book = Book::default();
        for i in 0..8 {
            book.make_room_within(0, 8).expect("room");
            book.push(0, b"k", entry(if i < 4 { 5 } else { 50 }, i));
        }
        assert!(book.make_room_within(1, 8).is_err(), "all 8 are live at 1");
        assert_eq!(book.len(), 8);
        book.make_room_within(5, 8).expect("4 are past at 5");
        assert_eq!(book.len(), 4);
        for i in 0..3 {
            book.push(0, b"k", entry(50, 10 + i));
        }
        // 7 held, under the cap: no sweep needed.
        book.make_room_within(6, 8).expect("room");
        book.push(0, b"k", entry(50, 20));
        assert!(
            book.make_room_within(6, 8).is_err(),
            "8 live entries and none past"
        );
    }
}
