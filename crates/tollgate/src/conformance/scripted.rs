//! The scripted cases: draining and retrying, window boundaries, costs,
//! the sliding window's weights, sliding-log entries, isolation of rules
//! and keys, and multi-rule checks.

use super::driver::{Driver, label, micros, rule};
use super::{Failure, HOUR};
use crate::rule::{Algorithm, Rule};
use crate::store::Store;
use crate::time::Micros;

/// A handful of rules per algorithm: small and large limits, whole-µs
/// units, bursts above and below the limit.
pub(super) fn scripted_rules(alg: Algorithm) -> Vec<Rule> {
    let name = alg.as_str();
    let specs: &[(u64, Micros, Option<u64>)] = match alg {
        Algorithm::Gcra | Algorithm::TokenBucket => &[
            (2, 1_000_000, None),
            (1, 100_000, Some(3)),
            (10, 1_000_000, Some(1)),
            (1_000, 1_000_000, Some(5)),
        ],
        Algorithm::SlidingLog => &[
            (5, 1_000_000, None),
            (1, 1_000, None),
            (20, 60_000_000, None),
        ],
        _ => &[
            (3, 1_000_000, None),
            (1, 1_000, None),
            (10, 1_000_000, None),
            (100, HOUR, None),
        ],
    };
    specs
        .iter()
        .enumerate()
        .map(|(i, &(limit, period, burst))| rule(&format!("{name}.{i}"), alg, limit, period, burst))
        .collect()
}

/// Peek an empty key, drain it at one instant, then retry one microsecond
/// early and exactly on time, twice; a cost above capacity; wait for the
/// reset and take the whole capacity at once.
pub(super) async fn drain_and_retry<S: Store>(
    d: &mut Driver<'_, S>,
    r: &Rule,
) -> Result<(), Failure> {
    let mut t = d.begin(label("drain-and-retry", r), 250_000);
    let cap = r.capacity();
    d.one(r, b"k", 0, t).await?;
    for _ in 0..2 {
        let mut denied = None;
        for _ in 0..=cap {
            let dec = d.one(r, b"k", 1, t).await?;
            if !dec.allowed {
                denied = dec.retry_after;
                break;
            }
        }
        if let Some(wait) = denied.map(micros) {
            d.one(r, b"k", 1, t + wait - 1).await?;
            d.one(r, b"k", 0, t + wait - 1).await?;
            d.one(r, b"k", 1, t + wait).await?;
            t += wait;
        }
    }
    d.one(r, b"k", cap + 1, t).await?;
    let peek = d.one(r, b"k", 0, t).await?;
    let reset = micros(peek.reset_after);
    d.one(r, b"k", cap, t + reset).await?;
    d.one(r, b"k", 1, t + reset).await?;
    Ok(())
}

/// Checks on both sides of a period boundary (aligned windows), with the
/// key full just before it.
pub(super) async fn boundaries<S: Store>(d: &mut Driver<'_, S>, r: &Rule) -> Result<(), Failure> {
    let start = d.begin(label("boundaries", r), 0);
    let p = r.period_micros();
    let cap = r.capacity();
    let mut t = start + p - 1;
    for _ in 0..3 {
        d.one(r, b"k", cap, t).await?;
        d.one(r, b"k", 1, t).await?;
        d.one(r, b"k", 1, t + 1).await?;
        d.one(r, b"k", 0, t + 2).await?;
        d.one(r, b"k", 1, t + 2).await?;
        t = (t / p + 2) * p - 1;
    }
    // the middle and the last microsecond of the next windows
    for f in [p / 4, p / 2, 3 * p / 4, p - 1, p, p + 1] {
        d.one(r, b"k", 1, t + f).await?;
    }
    Ok(())
}

/// Costs above one: half the capacity, the whole capacity when partly
/// used, above the capacity, and their exact retries.
pub(super) async fn costs<S: Store>(d: &mut Driver<'_, S>, r: &Rule) -> Result<(), Failure> {
    let mut t = d.begin(label("costs", r), 123_457);
    let cap = r.capacity();
    let half = cap.div_ceil(2);
    for _ in 0..3 {
        d.one(r, b"k", half, t).await?;
        d.one(r, b"k", 1, t).await?;
        let dec = d.one(r, b"k", cap, t).await?;
        d.one(r, b"k", cap + 1, t).await?;
        d.one(r, b"k", u64::MAX, t).await?;
        if let Some(wait) = dec.retry_after.map(micros) {
            d.one(r, b"k", cap, t + wait - 1).await?;
            d.one(r, b"k", cap, t + wait).await?;
            t += wait;
        }
        t += r.period_micros() / 3 + 1;
    }
    Ok(())
}

/// The sliding window's previous window weighs by its overlap: fill a
/// window at its end, then probe the next window at many elapsed times, and
/// retry in the same window, the next, and two windows later.
pub(super) async fn sliding_window_weights<S: Store>(d: &mut Driver<'_, S>) -> Result<(), Failure> {
    let p = 1_000_000;
    let r = rule(
        "sliding_window.weights",
        Algorithm::SlidingWindow,
        10,
        p,
        None,
    );
    let start = d.begin("sliding_window/weights 10 per 1000000us".into(), 0);
    // previous window: 8 units at its very end
    d.one(&r, b"k", 8, start + p - 1).await?;
    let w = start + p;
    for e in [0, 1, 250_000] {
        d.one(&r, b"k", 0, w + e).await?;
    }
    // at 250_000: 8 * 750_000 + 4 * P fits 10 * P exactly; one more waits
    // until later in this window
    d.one(&r, b"k", 4, w + 250_000).await?;
    let dec = d.one(&r, b"k", 1, w + 250_000).await?;
    if let Some(wait) = dec.retry_after.map(micros) {
        d.one(&r, b"k", 1, w + 250_000 + wait - 1).await?;
        d.one(&r, b"k", 1, w + 250_000 + wait).await?;
    }
    for e in [500_000, 599_999] {
        d.one(&r, b"k", 0, w + e).await?;
    }
    // cost above what is left this window: retry in the next window
    let dec = d.one(&r, b"k", 6, w + 600_000).await?;
    for e in [666_667, 999_999] {
        d.one(&r, b"k", 0, w + e).await?;
    }
    if let Some(wait) = dec.retry_after.map(micros) {
        d.one(&r, b"k", 6, w + 600_000 + wait - 1).await?;
        d.one(&r, b"k", 6, w + 600_000 + wait).await?;
    }
    // cost = limit with units in the current window: two windows later
    let t = (d.now / p + 1) * p + 100;
    d.one(&r, b"j", 1, t).await?;
    let dec = d.one(&r, b"j", 10, t).await?;
    if let Some(wait) = dec.retry_after.map(micros) {
        d.one(&r, b"j", 10, t + wait - 1).await?;
        d.one(&r, b"j", 10, t + wait).await?;
    }
    Ok(())
}

/// Sliding-log entries at one microsecond merge; a retry waits for as many
/// entries to expire as its cost needs; entries expire exactly one period
/// after they were made.
pub(super) async fn sliding_log_entries<S: Store>(d: &mut Driver<'_, S>) -> Result<(), Failure> {
    let p = 1_000_000;
    let r = rule("sliding_log.entries", Algorithm::SlidingLog, 5, p, None);
    let start = d.begin("sliding_log/entries 5 per 1000000us".into(), 777);
    d.one(&r, b"k", 2, start + 100).await?;
    d.one(&r, b"k", 1, start + 200).await?;
    d.one(&r, b"k", 1, start + 200).await?;
    d.one(&r, b"k", 1, start + 300).await?;
    for cost in [1, 3, 5, 6] {
        d.one(&r, b"k", cost, start + 400).await?;
    }
    for off in [99, 100] {
        d.one(&r, b"k", 0, start + p + off).await?;
    }
    // at P + 150, (200, 2) and (300, 1) count: cost 4 waits for (200, 2)
    let dec = d.one(&r, b"k", 4, start + p + 150).await?;
    if let Some(wait) = dec.retry_after.map(micros) {
        d.one(&r, b"k", 4, start + p + 150 + wait - 1).await?;
        d.one(&r, b"k", 4, start + p + 150 + wait).await?;
    }
    for off in [299, 300] {
        d.one(&r, b"k", 0, start + p + off).await?;
    }
    d.one(&r, b"k", 1, start + 5 * p).await?;
    Ok(())
}

/// Rules and keys are independent: binary keys, long keys that differ only
/// in their last byte, and (rule, key) pairs whose names run together the
/// same way (`"iso.a" + "bx"` and `"iso.ab" + "x"`).
pub(super) async fn isolation<S: Store>(d: &mut Driver<'_, S>) -> Result<(), Failure> {
    let a = rule("iso.a", Algorithm::FixedWindow, 2, 1_000_000, None);
    let ab = rule("iso.ab", Algorithm::FixedWindow, 2, 1_000_000, None);
    let g = rule("iso.g", Algorithm::Gcra, 2, 1_000_000, None);
    let t = d.begin("isolation of rules and keys".into(), 5);
    let mut long_a = vec![b'L'; 1_000];
    long_a.push(b'a');
    let mut long_b = vec![b'L'; 1_000];
    long_b.push(b'b');
    let keys: [&[u8]; 5] = [b"bx", b"\xff\x00\xfe binary", b"", &long_a, &long_b];
    // drain (iso.a, "bx") and (iso.g, each key but the last) ...
    for _ in 0..3 {
        d.one(&a, b"bx", 1, t).await?;
    }
    for key in &keys[..4] {
        for _ in 0..3 {
            d.one(&g, key, 1, t).await?;
        }
    }
    // ... the others are untouched
    d.one(&ab, b"x", 1, t).await?;
    d.one(&a, b"x", 1, t).await?;
    d.one(&ab, b"bx", 1, t).await?;
    for key in keys {
        d.one(&g, key, 0, t).await?;
        d.one(&a, key, 0, t).await?;
    }
    d.one(&g, &long_b, 2, t).await?;
    Ok(())
}

/// Several rules in one check: admitted together, denied by one pair
/// (consuming nothing anywhere), a pair that can never be admitted, peeks
/// inside a multi-rule check, and ties for the deciding pair.
pub(super) async fn multi_scripted<S: Store>(d: &mut Driver<'_, S>) -> Result<(), Failure> {
    let g = rule("multi.gcra", Algorithm::Gcra, 5, 1_000_000, None);
    let f = rule("multi.fixed", Algorithm::FixedWindow, 2, 1_000_000, None);
    let l = rule("multi.log", Algorithm::SlidingLog, 3, 1_000_000, None);
    let b = rule("multi.bucket", Algorithm::TokenBucket, 1, 500_000, Some(4));
    let s = rule("multi.window", Algorithm::SlidingWindow, 4, 1_000_000, None);
    let t = d.begin("multi-rule scripted".into(), 400_000);
    let trio: [(&Rule, &[u8], u64); 3] = [(&g, b"user", 1), (&f, b"ip", 1), (&l, b"route", 1)];
    // admitted twice (fixed window's remaining 1, then 0, decides) ...
    d.all(&trio, t).await?;
    d.all(&trio, t + 10).await?;
    // ... then the fixed window denies: nobody consumes
    for i in 0..3 {
        d.all(&trio, t + 20 + i).await?;
    }
    d.one(&g, b"user", 0, t + 30).await?;
    d.one(&l, b"route", 0, t + 30).await?;
    // a pair that can never be admitted decides over a waiting one
    d.all(
        &[(&f, b"ip", 1), (&b, b"user", 5), (&g, b"user", 1)],
        t + 40,
    )
    .await?;
    // peeks inside a multi-rule check; ties on remaining go to the first
    d.all(&[(&s, b"a", 0), (&s, b"b", 0), (&b, b"a", 0)], t + 50)
        .await?;
    d.all(&[(&s, b"a", 1), (&b, b"a", 1), (&g, b"other", 4)], t + 60)
        .await?;
    // two denials: the longer wait decides
    d.all(&[(&b, b"a", 4), (&f, b"ip", 1), (&s, b"a", 1)], t + 70)
        .await?;
    // 1 µs before the fixed window turns the trio is still denied; then admitted
    let next = (t / 1_000_000 + 1) * 1_000_000;
    d.all(&trio, next - 1).await?;
    d.all(&trio, next).await?;
    d.all(&[(&l, b"route", 1), (&g, b"user", 1)], next + 1)
        .await?;
    d.all(&[(&l, b"route", 3), (&g, b"user", 1)], next + 1)
        .await?;
    Ok(())
}
