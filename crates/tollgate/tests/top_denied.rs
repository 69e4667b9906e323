//! The most denied keys (docs/semantics.md, "Top denied keys"), the
//! issue's heavy-hitter case: among a million distinct denied keys, the ten
//! hot ones are reported, and the sketch's memory stays within its
//! configured bound whatever the cardinality.
//!
//! One test in its own binary: a global allocator counts the sketch's
//! memory, and nothing else may allocate while it counts (another test's
//! thread, or the harness reporting it, would). It runs the million twice:
//! through the sketch alone, where the allocator counts its memory exactly
//! (the memory store's own keys would blur it), then end to end through a
//! [`ResilientLimiter`] over the memory store: the denials the store
//! decides reach the sketch, and the report names the ten. About 5 s in a
//! debug build.

use std::alloc::System;
use std::time::Duration;

use stats_alloc::{INSTRUMENTED_SYSTEM, Region, StatsAlloc};
use tollgate::top::{DEFAULT_TOP_DENIED_CAPACITY, TopDenied};
use tollgate::{Algorithm, Check, Limiter, MemoryStore, ResilientLimiter, RuleSpec};

#[global_allocator]
static GLOBAL: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

const COLD: u32 = 1_000_000;
const HOT: u32 = 10;
/// Denials per hot key: above `N / capacity` (N ≈ 1.05 M, capacity 256:
/// about 4 100), so Space-Saving guarantees each a place, and above any
/// cold key's count (1 plus at most that bound).
const HOT_DENIALS: u32 = 5_000;
/// A hot denial after this many cold ones: the hot keys spread over the
/// whole stream, not bunched at its start or end.
const EVERY: u32 = COLD / (HOT * HOT_DENIALS);

/// The stream: yields `(hot, n)`, a cold key `n` or a hot key `n`.
fn stream() -> impl Iterator<Item = (bool, u32)> {
    (0..COLD).flat_map(|i| {
        let hot = (i % EVERY == 0).then_some((true, (i / EVERY) % HOT));
        std::iter::once((false, i)).chain(hot)
    })
}

/// The key of `(hot, n)`, written into `buf`: `cold:<n>` or `hot:<n>`.
fn key(buf: &mut [u8; 16], (hot, n): (bool, u32)) -> &[u8] {
    use std::io::Write;
    let mut w = &mut buf[..];
    let _ = write!(w, "{}:{n}", if hot { "hot" } else { "cold" });
    let left = w.len();
    &buf[..16 - left]
}

/// Asserts the report names the ten hot keys first, each with bounds
/// around its true count.
fn assert_hot_first(report: &[tollgate::top::DeniedKey], denials: u64) {
    assert_eq!(report.len(), HOT as usize, "{report:?}");
    let mut names: Vec<String> = report
        .iter()
        .map(|d| String::from_utf8_lossy(&d.key).into_owned())
        .collect();
    names.sort();
    let want: Vec<String> = (0..HOT).map(|n| format!("hot:{n}")).collect();
    assert_eq!(names, want, "{report:?}");
    for d in report {
        assert!(
            d.lower() <= u64::from(HOT_DENIALS) && u64::from(HOT_DENIALS) <= d.count,
            "{d:?}"
        );
        assert!(
            d.error <= denials / DEFAULT_TOP_DENIED_CAPACITY as u64,
            "{d:?}"
        );
    }
}

#[test]
fn ten_hot_keys_among_a_million_are_reported_within_the_bound() {
    // First the sketch alone, before any runtime exists.
    the_sketch_stays_within_its_bound();
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
        .block_on(end_to_end());
}

async fn end_to_end() {
    // Limit 1 per hour: every check at cost 2 is denied (nothing consumed).
    let rule = RuleSpec::new("login", Algorithm::Gcra, 1, Duration::from_secs(3600))
        .build()
        .expect("rule");
    let limiter = Limiter::new(MemoryStore::new(), [rule]).expect("limiter");
    let limiter = ResilientLimiter::builder(limiter)
        .heartbeat(None)
        // An epoch of an hour: the run stays within two, however slow.
        .top_denied_epoch(Duration::from_secs(3600))
        .build()
        .expect("resilient");
    let mut buf = [0u8; 16];
    let mut denials = 0u64;
    for item in stream() {
        let verdict = limiter
            .check_all(&[Check::new("login", key(&mut buf, item)).cost(2)])
            .await
            .expect("decided");
        assert!(!verdict.multi.allowed);
        denials += 1;
    }
    assert_eq!(
        denials,
        u64::from(COLD) + u64::from(HOT) * u64::from(HOT_DENIALS)
    );
    assert_eq!(limiter.denied_lately("login").expect("rule"), denials);
    assert_hot_first(
        &limiter.top_denied("login", HOT as usize).expect("rule"),
        denials,
    );
    let sketch = limiter.top_denied_sketch();
    assert!(sketch.heap_bytes() <= TopDenied::bytes_bound(1, DEFAULT_TOP_DENIED_CAPACITY));
    assert!(matches!(
        limiter.top_denied("nope", 1),
        Err(tollgate::Error::UnknownRule(_))
    ));
}

/// The million through the sketch alone, its memory counted.
fn the_sketch_stays_within_its_bound() {
    let capacity = DEFAULT_TOP_DENIED_CAPACITY;
    let bound = TopDenied::bytes_bound(1, capacity);
    let region = Region::new(GLOBAL);
    let top = TopDenied::new(1, capacity, Duration::from_secs(3600));
    let mut buf = [0u8; 16];
    let mut held_after_first = None;
    let mut denials = 0u64;
    for item in stream() {
        top.record(0, key(&mut buf, item), 1_000_000);
        denials += 1;
        if held_after_first.is_none() {
            held_after_first = Some(region.change());
        }
    }
    let change = region.change();
    let held = change.bytes_allocated - change.bytes_deallocated;
    eprintln!(
        "{held} heap bytes for {denials} denials of {} keys (bound {bound})",
        COLD + HOT
    );
    // Exactly what the sketch says it holds, all of it taken at the first
    // denial, and within the bound.
    assert_eq!(held, top.heap_bytes());
    assert_eq!(change.bytes_reallocated, 0);
    let first = held_after_first.expect("one denial at least");
    assert_eq!(first.bytes_allocated - first.bytes_deallocated, held);
    assert!(held <= bound, "{held} > {bound}");
    assert_hot_first(&top.top(0, HOT as usize, 1_000_000), denials);
}
