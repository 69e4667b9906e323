use std::sync::Arc;

use super::*;
use crate::request_body::{BodyFacts, BodyPlan};

fn plan(pointers: &[&str], prompt: bool) -> Arc<BodyPlan> {
    Arc::new(BodyPlan::new(pointers.iter().copied(), prompt).expect("plan"))
}

/// Scans all of `body` in pieces of `piece` bytes.
fn scan(plan: &Arc<BodyPlan>, body: &[u8], limit: usize, piece: usize) -> (BodyFacts, usize) {
    let mut s = plan.start(limit, Some(body.len() as u64));
    for chunk in body.chunks(piece.max(1)) {
        s.push(chunk);
    }
    s.finish();
    (s.facts(), body.len())
}

#[test]
fn estimates_read_the_request_and_are_clamped() {
    let p = plan(
        &[
            "/max_tokens",
            "/max_completion_tokens",
            "/max_output_tokens",
        ],
        true,
    );
    let facts = |body: &[u8]| scan(&p, body, 1 << 20, 5).0;
    let max = RequestEstimate::MaxTokens;
    assert_eq!(
        max.reserve(Some(&facts(br#"{"max_tokens":300}"#)), 50, 1000),
        300
    );
    assert_eq!(
        max.reserve(Some(&facts(br#"{"max_completion_tokens":301}"#)), 50, 1000),
        301
    );
    assert_eq!(
        max.reserve(Some(&facts(br#"{"max_output_tokens":302}"#)), 50, 1000),
        302
    );
    assert_eq!(
        max.reserve(Some(&facts(br#"{"max_tokens":"300"}"#)), 50, 1000),
        50,
        "a string is no number of tokens"
    );
    assert_eq!(
        max.reserve(Some(&facts(br#"{"max_tokens":-3}"#)), 50, 1000),
        50
    );
    assert_eq!(max.reserve(Some(&facts(b"{}")), 50, 1000), 50);
    assert_eq!(max.reserve(None, 50, 1000), 50, "no body read");
    assert_eq!(
        max.reserve(Some(&facts(br#"{"max_tokens":999999999}"#)), 50, 1000),
        1000,
        "clamped to the capacity"
    );
    assert_eq!(
        max.reserve(Some(&facts(br#"{"max_tokens":0}"#)), 50, 1000),
        1
    );

    let body = format!(r#"{{"prompt":"{}","max_tokens":10}}"#, "a".repeat(3000));
    let f = facts(body.as_bytes());
    let prompt = prompt_tokens(f.text());
    assert_eq!(prompt, (body.len() as u64).div_ceil(ASCII_PER_TOKEN));
    assert_eq!(
        RequestEstimate::Prompt.reserve(Some(&f), 50, 100_000),
        prompt
    );
    assert_eq!(
        RequestEstimate::PromptAndMaxTokens.reserve(Some(&f), 50, 100_000),
        prompt + 10
    );
    assert_eq!(
        RequestEstimate::Prompt.reserve(Some(&facts(b"")), 50, 1000),
        50
    );
    // A prefix scaled up to the declared length.
    let mut s = p.start(1000, Some(4000));
    s.push(&body.as_bytes()[..1000]);
    let f = s.facts();
    assert_eq!(
        RequestEstimate::Prompt.reserve(Some(&f), 50, 100_000),
        prompt_tokens(f.text()) * 4
    );
}
