//! Heap bytes per idle GCRA key, counted by a global allocator (its own
//! test binary: a global allocator is per binary, and nothing else must
//! allocate while it counts).
//!
//! The goal: at most 64 bytes per idle GCRA key plus the key's bytes. The
//! memory store keeps no key bytes, only a 16-byte fingerprint.

use std::alloc::System;
use std::time::Duration;

use stats_alloc::{INSTRUMENTED_SYSTEM, Region, StatsAlloc};
use tollgate::{Algorithm, FakeClock, MemoryStore, RuleSpec};

#[global_allocator]
static GLOBAL: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

const KEYS: u32 = 1_000_000;

#[test]
fn an_idle_gcra_key_costs_at_most_64_bytes() {
    let rule = RuleSpec::new("per_user", Algorithm::Gcra, 10, Duration::from_secs(1))
        .build()
        .expect("valid rule");
    let clock = FakeClock::new();
    let region = Region::new(GLOBAL);
    let store = MemoryStore::builder()
        .clock(clock.clone())
        .max_keys(2 * KEYS as usize)
        .build();
    // Keys of 40 bytes: the store's cost does not depend on them.
    let mut key = [b'k'; 40];
    for i in 0..KEYS {
        key[..4].copy_from_slice(&i.to_le_bytes());
        assert!(store.check_sync(&rule, &key, 1, None).allowed);
    }
    let change = region.change();
    assert_eq!(store.len(), KEYS as usize);
    let held = change.bytes_allocated as f64 - change.bytes_deallocated as f64
        + change.bytes_reallocated as f64;
    let per_key = held / f64::from(KEYS);
    eprintln!("{per_key:.1} heap bytes per idle GCRA key");
    assert!(per_key <= 64.0, "{per_key:.1} bytes per idle GCRA key");
    // Idle: the keys are back to full, their entries still held.
    clock.advance(Duration::from_secs(1));
    assert_eq!(store.len(), KEYS as usize);
}
