//! The usage meter of a response body (docs/proxy.md, "Usage from the
//! body"): a JSON answer or a server-sent event stream, read for every
//! kind of body source at once, pushed whole and pushed in pieces.
//!
//! Input: the first byte picks the content type (even: JSON, odd: an
//! event stream) and, with the second, where the body is cut into
//! pieces; the rest is the body.
#![no_main]

use std::sync::LazyLock;

use http::HeaderMap;
use libfuzzer_sys::fuzz_target;
use tollgate_http::cost::{SHAPE_SPELLINGS, UsageSource};
use tollgate_http::usage::BodyMeter;

static SOURCES: LazyLock<Vec<UsageSource>> = LazyLock::new(|| {
    let others = [
        "response_json:/usage/total_tokens",
        "response_json:/a/0/~1",
        "response_header:x-usage",
    ];
    SHAPE_SPELLINGS
        .iter()
        .chain(&others)
        .map(|s| s.parse().expect("a source"))
        .collect()
});

fn meter(sse: bool) -> BodyMeter {
    let mut head = HeaderMap::new();
    let content_type = if sse { "text/event-stream" } else { "application/json" };
    head.insert("content-type", content_type.parse().expect("a type"));
    BodyMeter::new(&SOURCES, &head).expect("a meter")
}

fuzz_target!(|data: &[u8]| {
    let [kind, step, body @ ..] = data else {
        return;
    };
    let sse = kind % 2 == 1;
    let mut whole = meter(sse);
    whole.push(body);
    let complete = kind & 2 == 0;
    let read = whole.end(complete);
    assert_eq!(read.0.len(), SOURCES.len());

    // Pieces of a size the input picks: the same readings, however the
    // bytes arrive.
    let step = usize::from(*step).max(1);
    let mut pieces = meter(sse);
    for piece in body.chunks(step) {
        pieces.push(piece);
    }
    assert_eq!(pieces.end(complete), read, "pieces of {step}");
});
