//! The sketch's guarantees (docs/semantics.md, "Top denied keys"):
//! exact under capacity, the error bounds over a skewed stream, the
//! horizon, long keys, and memory known by construction.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use super::space_saving::SpaceSaving;
use super::table::Table;
use super::{DeniedKey, KEPT_KEY_BYTES, TopDenied};

const SECOND: u64 = 1_000_000;

/// A small deterministic generator (xorshift64*), so a failure replays.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// Skewed: half the draws among keys 0 to 7, the other half among
    /// all `keys`.
    fn skewed(&mut self, keys: u64) -> u64 {
        let hot = self.next().is_multiple_of(2);
        self.next() % if hot { keys.min(8) } else { keys }
    }
}

fn key(i: u64) -> Vec<u8> {
    format!("key:{i}").into_bytes()
}

/// The true counts of a stream, and the sketch that saw it, rule 0.
fn feed(top: &TopDenied, stream: &[u64], now: u64) -> HashMap<Vec<u8>, u64> {
    let mut truth = HashMap::new();
    for &i in stream {
        top.record(0, &key(i), now);
        *truth.entry(key(i)).or_insert(0) += 1;
    }
    truth
}

#[test]
fn under_capacity_the_counts_are_exact() {
    let top = TopDenied::new(1, 50, Duration::from_secs(60));
    let mut rng = Rng(7);
    let stream: Vec<u64> = (0..10_000).map(|_| rng.next() % 50).collect();
    let truth = feed(&top, &stream, 5 * SECOND);
    let report = top.top(0, 100, 5 * SECOND);
    assert_eq!(report.len(), truth.len());
    for d in &report {
        assert_eq!(d.error, 0, "{d:?}");
        assert_eq!(Some(&d.count), truth.get(&d.key), "{d:?}");
        assert!(!d.truncated());
    }
    // Highest first.
    assert!(report.windows(2).all(|w| w[0].count >= w[1].count));
    assert_eq!(top.denials(0, 5 * SECOND), 10_000);
}

#[test]
fn over_capacity_the_bounds_hold() {
    const K: usize = 32;
    let top = TopDenied::new(1, K, Duration::from_secs(60));
    let mut rng = Rng(42);
    let stream: Vec<u64> = (0..200_000).map(|_| rng.skewed(5_000)).collect();
    let truth = feed(&top, &stream, 0);
    let n = stream.len() as u64;
    let report = top.top(0, 2 * K, 0);
    assert_eq!(report.len(), K, "one epoch: at most k keys");
    // Space-Saving's counts add up to N exactly.
    assert_eq!(report.iter().map(|d| d.count).sum::<u64>(), n);
    for d in &report {
        let t = truth[&d.key];
        assert!(d.lower() <= t && t <= d.count, "{d:?}, true {t}");
        assert!(d.error <= n / K as u64, "{d:?}");
    }
    let listed: HashSet<&[u8]> = report.iter().map(|d| d.key.as_slice()).collect();
    let frequent: Vec<_> = truth.iter().filter(|&(_, &t)| t > n / K as u64).collect();
    assert!(!frequent.is_empty(), "the stream is skewed enough to test");
    for (k, t) in frequent {
        assert!(listed.contains(k.as_slice()), "{k:?} denied {t} times");
    }
}

#[test]
fn a_report_covers_the_current_and_the_previous_epoch() {
    let top = TopDenied::new(1, 8, Duration::from_secs(10));
    for _ in 0..3 {
        top.record(0, b"old", 5 * SECOND); // epoch 0
    }
    top.record(0, b"new", 15 * SECOND); // epoch 1
    let report = top.top(0, 10, 19 * SECOND);
    let counts: Vec<(&[u8], u64)> = report.iter().map(|d| (&d.key[..], d.count)).collect();
    assert_eq!(counts, [(&b"old"[..], 3), (&b"new"[..], 1)]);
    // Epoch 2: epoch 0 is over, epoch 1 is the previous one.
    let report = top.top(0, 10, 20 * SECOND);
    assert_eq!(report.len(), 1);
    assert_eq!(report[0].key, b"new");
    assert_eq!(top.denials(0, 20 * SECOND), 1);
    // Two epochs on with nothing: all forgotten.
    assert!(top.top(0, 10, 40 * SECOND).is_empty());
    assert_eq!(top.denials(0, 40 * SECOND), 0);
}

#[test]
fn a_jump_over_an_epoch_forgets_both() {
    let top = TopDenied::new(1, 8, Duration::from_secs(10));
    top.record(0, b"a", 0);
    top.record(0, b"a", 10 * SECOND);
    top.record(0, b"b", 30 * SECOND); // epoch 3: 1 and 0 both over
    let report = top.top(0, 10, 30 * SECOND);
    assert_eq!(report.len(), 1);
    assert_eq!((report[0].key.as_slice(), report[0].count), (&b"b"[..], 1));
}

#[test]
fn merged_epochs_keep_the_bounds() {
    // A key the full current summary lacks gets its floor, in count and
    // error: the truth stays between count − error and count.
    const K: usize = 4;
    let top = TopDenied::new(1, K, Duration::from_secs(10));
    let mut truth: HashMap<Vec<u8>, u64> = HashMap::new();
    let mut rng = Rng(3);
    for (epoch, keys) in [(0, 3), (1, 40)] {
        for _ in 0..2_000 {
            let k = key(rng.skewed(keys) + epoch * 100);
            top.record(0, &k, epoch * 10 * SECOND);
            *truth.entry(k).or_insert(0) += 1;
        }
    }
    let report = top.top(0, 2 * K, 15 * SECOND);
    assert!(report.len() > K, "keys of both epochs");
    for d in &report {
        let t = truth[&d.key];
        assert!(d.lower() <= t && t <= d.count, "{d:?}, true {t}");
        assert!(d.error <= 2_000 / K as u64 + 2_000 / K as u64, "{d:?}");
    }
    // Epoch 0 had three keys: exact there, so its top key is counted
    // exactly in the previous summary, plus at most the current floor.
    let first = report
        .iter()
        .find(|d| d.key == key(0))
        .expect("key 0 listed");
    assert!(first.count >= truth[&key(0)]);
}

#[test]
fn long_keys_keep_their_first_bytes_and_stay_apart() {
    let top = TopDenied::new(1, 8, Duration::from_secs(60));
    let a = [vec![b'x'; 100], b"a".to_vec()].concat();
    let b = [vec![b'x'; 100], b"b".to_vec()].concat();
    top.record(0, &a, 0);
    top.record(0, &a, 0);
    top.record(0, &b, 0);
    let report = top.top(0, 10, 0);
    assert_eq!(report.len(), 2, "two keys, one prefix");
    assert_eq!(
        report[0],
        DeniedKey {
            key: vec![b'x'; KEPT_KEY_BYTES],
            key_len: 101,
            count: 2,
            error: 0,
        }
    );
    assert!(report[0].truncated());
    // A key exactly as long as what is kept is whole.
    top.record(0, &[b'y'; KEPT_KEY_BYTES], 0);
    let y = top.top(0, 10, 0);
    assert!(
        y.iter()
            .any(|d| d.key == [b'y'; KEPT_KEY_BYTES] && !d.truncated())
    );
}

#[test]
fn ties_rank_by_key_and_n_cuts() {
    let top = TopDenied::new(1, 8, Duration::from_secs(60));
    for k in [b"c", b"a", b"b"] {
        top.record(0, k, 0);
    }
    let report = top.top(0, 2, 0);
    let keys: Vec<&[u8]> = report.iter().map(|d| d.key.as_slice()).collect();
    assert_eq!(keys, [b"a", b"b"]);
    assert!(top.top(0, 0, 0).is_empty());
}

#[test]
fn rules_are_apart_and_out_of_range_is_ignored() {
    let top = TopDenied::new(2, 8, Duration::from_secs(60));
    top.record(1, b"k", 0);
    top.record(7, b"k", 0); // no rule 7: ignored
    assert!(top.top(0, 10, 0).is_empty());
    assert_eq!(top.top(1, 10, 0).len(), 1);
    assert!(top.top(7, 10, 0).is_empty());
}

#[test]
fn memory_is_allocated_at_the_first_denial_and_never_grows() {
    let top = TopDenied::new(3, 100, Duration::from_secs(60));
    let slots = top.heap_bytes();
    assert!(slots > 0);
    top.record(1, b"first", 0);
    let one = top.heap_bytes();
    assert_eq!(one - slots, TopDenied::bytes_per_rule(100));
    let mut rng = Rng(9);
    for t in 0..50_000u64 {
        // 50 000 distinct keys over 500 s: eight epochs of 60 s.
        top.record(1, &key(rng.next()), t * 10_000);
    }
    assert_eq!(top.heap_bytes(), one);
    assert!(top.heap_bytes() <= TopDenied::bytes_bound(3, 100));
    // Capacity 0: nothing at all.
    let off = TopDenied::new(3, 0, Duration::from_secs(60));
    off.record(0, b"k", 0);
    assert_eq!(off.heap_bytes(), 0);
    assert!(off.top(0, 10, 0).is_empty());
}

#[test]
fn the_table_finds_what_remains_after_removals() {
    // Backward-shift deletion: whatever is removed, every other entry is
    // still found. Hashes share their low bits to force long probe runs.
    let hashes: Vec<u64> = (0..64u64).map(|i| (i % 5) | (i << 32)).collect();
    let mut table = Table::new(64);
    for i in 0..64u32 {
        table.insert(hashes[i as usize], i);
    }
    let hash_of = |i: u32| hashes[i as usize];
    let mut live: Vec<bool> = vec![true; 64];
    let mut rng = Rng(11);
    for _ in 0..48 {
        let i = u32::try_from(rng.next() % 64).expect("below 64");
        if live[i as usize] {
            table.remove(hash_of(i), i, hash_of);
            live[i as usize] = false;
        }
        for j in 0..64u32 {
            let found = table.find(hash_of(j), |e| e == j);
            assert_eq!(found.is_some(), live[j as usize], "entry {j}");
        }
    }
}

#[test]
fn a_summary_of_one_counter_holds_the_latest_key() {
    let mut s = SpaceSaving::new(1);
    s.add(1, b"a", 1);
    s.add(2, b"b", 1);
    assert_eq!(s.counters().len(), 1);
    let c = &s.counters()[0];
    assert_eq!((c.key(), c.count, c.error), (&b"b"[..], 2, 1));
    assert_eq!(s.floor(), 2);
    assert_eq!(s.total(), 2);
}
