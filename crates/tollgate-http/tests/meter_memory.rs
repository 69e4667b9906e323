//! What the usage meter holds while a hostile upstream sends 10 MB of
//! body it must read (docs/proxy.md, "Hostile bodies"): a JSON answer
//! whose usage comes after 10 MB of text, an event stream of 10 MB in
//! one event and in many, and a stream that never ends (as far as the
//! meter can tell: it is fed and never finished). A counting global
//! allocator measures the most bytes held at once while the bytes pass.
//!
//! One test in its own binary: a global allocator is per binary, and
//! nothing else may allocate while it counts.

use std::alloc::System;

use cap::Cap;
use http::HeaderMap;
use tollgate_http::cost::{Reading, UsageSource};
use tollgate_http::usage::BodyMeter;

#[global_allocator]
static GLOBAL: Cap<System> = Cap::new(System, usize::MAX);

/// The most the meter may hold above what it held when made: its
/// scanners' stacks and the text of one value (4 KiB) are all it keeps.
const BOUND: usize = 64 * 1024;

const MB: usize = 1024 * 1024;

fn meter(content_type: &str) -> BodyMeter {
    let sources: Vec<UsageSource> = ["openai", "anthropic:output", "response_json:/x/y"]
        .iter()
        .map(|s| s.parse().expect("source"))
        .collect();
    let mut head = HeaderMap::new();
    head.insert("content-type", content_type.parse().expect("type"));
    BodyMeter::new(&sources, &head).expect("a meter")
}

/// Feeds the frames `frame` makes (one at a time, as a connection
/// delivers them) to `m`.
fn feed(m: &mut BodyMeter, mut frame: impl FnMut(usize) -> Option<Vec<u8>>) {
    let mut i = 0;
    while let Some(f) = frame(i) {
        m.push(&f);
        i += 1;
    }
}

/// The most bytes held at once since the process started, above `base`,
/// less one frame (the connection's, not the meter's).
fn peak_above(base: usize) -> usize {
    GLOBAL.max_allocated().saturating_sub(base + FRAME)
}

const FRAME: usize = 16 * 1024;

/// `len` bytes of `text` cut into 16 KiB frames after `prefix`, then
/// `suffix`.
fn frames(
    prefix: &str,
    fill: u8,
    len: usize,
    suffix: &str,
) -> impl FnMut(usize) -> Option<Vec<u8>> {
    let (prefix, suffix) = (prefix.as_bytes().to_vec(), suffix.as_bytes().to_vec());
    let chunk = FRAME;
    let n = len.div_ceil(chunk);
    move |i| match i {
        0 => Some(prefix.clone()),
        i if i <= n => Some(vec![fill; chunk.min(len - (i - 1) * chunk)]),
        i if i == n + 1 => Some(suffix.clone()),
        _ => None,
    }
}

#[test]
fn ten_megabytes_of_body_hold_the_meter_to_a_few_kilobytes() {
    let base = GLOBAL.allocated();
    // Nothing held before this test may make the peak look higher.
    assert!(
        GLOBAL.max_allocated() < base + BOUND / 2,
        "the harness peaked early"
    );

    // JSON: the usage after a 10 MB string.
    let mut m = meter("application/json");
    feed(
        &mut m,
        frames(
            r#"{"content":""#,
            b'a',
            10 * MB,
            r#"","usage":{"total_tokens":7}}"#,
        ),
    );
    let peak = peak_above(base);
    assert!(peak < BOUND, "the JSON meter held {peak} bytes");
    assert_eq!(m.end(true).0[0], Reading::Found(7));

    // One 10 MB event: skipped past 1 MiB, never held.
    let mut m = meter("text/event-stream");
    feed(
        &mut m,
        frames(
            "data: {\"pad\":\"",
            b'b',
            10 * MB,
            "\"}\n\ndata: {\"usage\":{\"total_tokens\":9}}\n\n",
        ),
    );
    let peak = peak_above(base);
    assert!(
        peak < BOUND,
        "the SSE meter held {peak} bytes over one big event"
    );
    assert_eq!(m.end(true).0[0], Reading::Found(9));

    // 10 MB of small events, and no end: what a stream that never ends
    // costs is what any stretch of it costs.
    let event = "data: {\"choices\":[{\"delta\":{\"content\":\"tok\"}}],\"usage\":null}\n\n";
    let mut m = meter("text/event-stream");
    let per_frame = FRAME / event.len();
    let frames = 10 * MB / (per_frame * event.len());
    feed(&mut m, |i| {
        (i < frames).then(|| event.repeat(per_frame).into_bytes())
    });
    let peak = peak_above(base);
    assert!(
        peak < BOUND,
        "the SSE meter held {peak} bytes over many events"
    );
}
