//! The meter against the providers' shapes (JSON and streamed), the
//! settling of streams cut short, and hostile bodies.

use http::HeaderMap;
use proptest::prelude::*;

use super::BodyMeter;
use crate::cost::{Reading, UsageSource};

const JSON: &str = "application/json";
const SSE: &str = "text/event-stream";

fn head(content_type: &str) -> HeaderMap {
    let mut h = HeaderMap::new();
    h.insert("content-type", content_type.parse().expect("type"));
    h
}

fn meter(sources: &[&str], h: &HeaderMap) -> BodyMeter {
    let sources: Vec<UsageSource> = sources.iter().map(|s| s.parse().expect("source")).collect();
    BodyMeter::new(&sources, h).expect("a body source")
}

/// What `sources` read of `chunks` sent with `content_type`, the body
/// ending (`complete`) or dropped after them.
fn read(
    sources: &[&str],
    content_type: &str,
    chunks: &[&[u8]],
    complete: bool,
) -> (Vec<Reading>, bool) {
    let mut m = meter(sources, &head(content_type));
    for c in chunks {
        m.push(c);
    }
    m.end(complete)
}

fn whole(sources: &[&str], content_type: &str, body: &str) -> Vec<Reading> {
    read(sources, content_type, &[body.as_bytes()], true).0
}

const ALL_OPENAI: &[&str] = &["openai", "openai:input", "openai:output"];
const ALL_ANTHROPIC: &[&str] = &["anthropic", "anthropic:input", "anthropic:output"];

fn found(ns: &[u64]) -> Vec<Reading> {
    ns.iter().map(|&n| Reading::Found(n)).collect()
}

const CHAT: &str = r#"{"id":"chatcmpl-1","object":"chat.completion","created":1741569952,"model":"gpt-4.1-2025-04-14","choices":[{"index":0,"message":{"role":"assistant","content":"Hello! How can I assist you today?","refusal":null,"annotations":[]},"logprobs":null,"finish_reason":"stop"}],"usage":{"prompt_tokens":19,"completion_tokens":10,"total_tokens":29,"prompt_tokens_details":{"cached_tokens":0,"audio_tokens":0},"completion_tokens_details":{"reasoning_tokens":0,"audio_tokens":0,"accepted_prediction_tokens":0,"rejected_prediction_tokens":0}},"service_tier":"default"}"#;

const CHAT_STREAM: &str = "data: {\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"created\":1694268190,\"model\":\"gpt-4o-mini\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"},\"logprobs\":null,\"finish_reason\":null}],\"usage\":null}\n\n\
data: {\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"created\":1694268190,\"model\":\"gpt-4o-mini\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hello\"},\"logprobs\":null,\"finish_reason\":null}],\"usage\":null}\n\n\
data: {\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"created\":1694268190,\"model\":\"gpt-4o-mini\",\"choices\":[{\"index\":0,\"delta\":{},\"logprobs\":null,\"finish_reason\":\"stop\"}],\"usage\":null}\n\n\
data: {\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"created\":1694268190,\"model\":\"gpt-4o-mini\",\"choices\":[],\"usage\":{\"prompt_tokens\":8,\"completion_tokens\":2,\"total_tokens\":10}}\n\n\
data: [DONE]\n\n";

const RESPONSES: &str = r#"{"id":"resp_1","object":"response","created_at":1741476542,"status":"completed","model":"gpt-4.1","output":[{"type":"message","id":"msg_1","status":"completed","role":"assistant","content":[{"type":"output_text","text":"In a peaceful grove...","annotations":[]}]}],"usage":{"input_tokens":36,"input_tokens_details":{"cached_tokens":0},"output_tokens":87,"output_tokens_details":{"reasoning_tokens":0},"total_tokens":123}}"#;

const RESPONSES_STREAM: &str = "event: response.created\ndata: {\"type\":\"response.created\",\"sequence_number\":0,\"response\":{\"id\":\"resp_1\",\"object\":\"response\",\"status\":\"in_progress\",\"output\":[],\"usage\":null}}\n\n\
event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"sequence_number\":1,\"item_id\":\"msg_1\",\"output_index\":0,\"content_index\":0,\"delta\":\"Hi\"}\n\n\
event: response.completed\ndata: {\"type\":\"response.completed\",\"sequence_number\":2,\"response\":{\"id\":\"resp_1\",\"object\":\"response\",\"status\":\"completed\",\"output\":[],\"usage\":{\"input_tokens\":37,\"input_tokens_details\":{\"cached_tokens\":0},\"output_tokens\":11,\"output_tokens_details\":{\"reasoning_tokens\":0},\"total_tokens\":48}}}\n\n";

const MESSAGE: &str = r#"{"id":"msg_1","type":"message","role":"assistant","model":"claude-sonnet-4-5","content":[{"type":"text","text":"Hi! My name is Claude."}],"stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":2095,"cache_creation_input_tokens":10,"cache_read_input_tokens":200,"output_tokens":503}}"#;

const MESSAGE_START: &str = "event: message_start\ndata: {\"type\": \"message_start\", \"message\": {\"id\": \"msg_1\", \"type\": \"message\", \"role\": \"assistant\", \"content\": [], \"model\": \"claude-sonnet-4-5\", \"stop_reason\": null, \"stop_sequence\": null, \"usage\": {\"input_tokens\": 25, \"cache_creation_input_tokens\": 0, \"cache_read_input_tokens\": 5, \"output_tokens\": 1}}}\n\n\
event: content_block_start\ndata: {\"type\": \"content_block_start\", \"index\": 0, \"content_block\": {\"type\": \"text\", \"text\": \"\"}}\n\n\
event: ping\ndata: {\"type\": \"ping\"}\n\n\
event: content_block_delta\ndata: {\"type\": \"content_block_delta\", \"index\": 0, \"delta\": {\"type\": \"text_delta\", \"text\": \"Hello\"}}\n\n";
const MESSAGE_DELTA: &str = "event: content_block_stop\ndata: {\"type\": \"content_block_stop\", \"index\": 0}\n\n\
event: message_delta\ndata: {\"type\": \"message_delta\", \"delta\": {\"stop_reason\": \"end_turn\", \"stop_sequence\":null}, \"usage\": {\"output_tokens\": 15}}\n\n";
const MESSAGE_STOP: &str = "event: message_stop\ndata: {\"type\": \"message_stop\"}\n\n";

#[test]
fn openai_chat_completions_json_and_streamed() {
    assert_eq!(whole(ALL_OPENAI, JSON, CHAT), found(&[29, 19, 10]));
    assert_eq!(whole(ALL_OPENAI, SSE, CHAT_STREAM), found(&[10, 8, 2]));
    // With parameters and another case, still JSON and SSE.
    assert_eq!(
        whole(ALL_OPENAI, "Application/JSON; charset=utf-8", CHAT),
        found(&[29, 19, 10])
    );
    assert_eq!(
        whole(ALL_OPENAI, "text/event-stream;charset=UTF-8", CHAT_STREAM),
        found(&[10, 8, 2])
    );
}

#[test]
fn openai_responses_json_and_streamed() {
    assert_eq!(whole(ALL_OPENAI, JSON, RESPONSES), found(&[123, 36, 87]));
    assert_eq!(
        whole(ALL_OPENAI, SSE, RESPONSES_STREAM),
        found(&[48, 37, 11])
    );
    // `response.incomplete` carries it the same way.
    let incomplete = RESPONSES_STREAM.replace("response.completed", "response.incomplete");
    assert_eq!(whole(ALL_OPENAI, SSE, &incomplete), found(&[48, 37, 11]));
}

#[test]
fn openai_total_without_total_tokens_is_input_plus_output() {
    let body = r#"{"usage":{"prompt_tokens":7,"completion_tokens":5}}"#;
    assert_eq!(whole(ALL_OPENAI, JSON, body), found(&[12, 7, 5]));
}

#[test]
fn anthropic_messages_json_and_streamed() {
    // Input counts the cache writes and reads.
    assert_eq!(
        whole(ALL_ANTHROPIC, JSON, MESSAGE),
        found(&[2095 + 210 + 503, 2305, 503])
    );
    let stream = format!("{MESSAGE_START}{MESSAGE_DELTA}{MESSAGE_STOP}");
    assert_eq!(
        whole(ALL_ANTHROPIC, SSE, &stream),
        found(&[30 + 15, 30, 15])
    );
    // Cache fields given as null count 0.
    let body =
        r#"{"usage":{"input_tokens":4,"cache_creation_input_tokens":null,"output_tokens":3}}"#;
    assert_eq!(whole(ALL_ANTHROPIC, JSON, body), found(&[7, 4, 3]));
    // A message_delta that restates the cumulative input (newer API
    // versions) wins over message_start's.
    let restated = MESSAGE_DELTA.replace(
        "\"usage\": {\"output_tokens\": 15}",
        "\"usage\": {\"input_tokens\": 40, \"output_tokens\": 15}",
    );
    let stream = format!("{MESSAGE_START}{restated}{MESSAGE_STOP}");
    assert_eq!(whole(ALL_ANTHROPIC, SSE, &stream), found(&[60, 45, 15]));
}

#[test]
fn a_cut_anthropic_stream_keeps_its_input_exact_and_its_output_open() {
    // Cut after message_start: the input is known; the output so far is 1.
    let (r, cut) = read(ALL_ANTHROPIC, SSE, &[MESSAGE_START.as_bytes()], false);
    assert!(cut);
    assert_eq!(
        r,
        [
            Reading::Partial(31),
            Reading::Found(30),
            Reading::Partial(1)
        ]
    );
    // Cut after message_delta, before message_stop: still open.
    let stream = format!("{MESSAGE_START}{MESSAGE_DELTA}");
    let (r, _) = read(ALL_ANTHROPIC, SSE, &[stream.as_bytes()], false);
    assert_eq!(
        r,
        [
            Reading::Partial(45),
            Reading::Found(30),
            Reading::Partial(15)
        ]
    );
    // message_stop seen: everything is final, even if the body is then
    // dropped.
    let stream = format!("{MESSAGE_START}{MESSAGE_DELTA}{MESSAGE_STOP}");
    let (r, _) = read(ALL_ANTHROPIC, SSE, &[stream.as_bytes()], false);
    assert_eq!(r, found(&[45, 30, 15]));
    // An upstream that ends its body inside an event cut it short too.
    let stream = format!("{MESSAGE_START}{}", &MESSAGE_DELTA[..60]);
    let (r, cut) = read(ALL_ANTHROPIC, SSE, &[stream.as_bytes()], true);
    assert!(cut);
    assert_eq!(
        r,
        [
            Reading::Partial(31),
            Reading::Found(30),
            Reading::Partial(1)
        ]
    );
}

#[test]
fn an_anthropic_stream_ending_without_message_stop_is_cut_short() {
    // An overloaded upstream sends an `error` event and ends its body
    // cleanly: the output never stopped growing, so it is not final.
    let error = "event: error\ndata: {\"type\": \"error\", \"error\": {\"type\": \"overloaded_error\", \"message\": \"Overloaded\"}}\n\n";
    let stream = format!("{MESSAGE_START}{error}");
    let (r, _) = read(ALL_ANTHROPIC, SSE, &[stream.as_bytes()], true);
    assert_eq!(
        r,
        [
            Reading::Partial(31),
            Reading::Found(30),
            Reading::Partial(1)
        ]
    );
    let stream = format!("{MESSAGE_START}{MESSAGE_DELTA}");
    let (r, _) = read(ALL_ANTHROPIC, SSE, &[stream.as_bytes()], true);
    assert_eq!(r[2], Reading::Partial(15));
}

#[test]
fn an_openai_event_sets_its_usage_whole() {
    // The last usage chunk has a null total: the total is its own parts,
    // not an earlier chunk's total.
    let stream = "data: {\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":3,\"total_tokens\":8}}\n\n\
                  data: {\"usage\":{\"prompt_tokens\":12,\"completion_tokens\":9,\"total_tokens\":null}}\n\n";
    assert_eq!(whole(ALL_OPENAI, SSE, stream), found(&[21, 12, 9]));
    // A last chunk with its output alone: the input and total it does not
    // give are not an earlier chunk's either.
    let stream = "data: {\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":3,\"total_tokens\":8}}\n\n\
                  data: {\"usage\":{\"completion_tokens\":9}}\n\n";
    assert_eq!(
        whole(ALL_OPENAI, SSE, stream),
        [Reading::Absent, Reading::Absent, Reading::Found(9)]
    );
}

#[test]
fn a_cut_openai_stream_has_its_usage_or_none() {
    let cut_at = CHAT_STREAM.find("data: {\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"created\":1694268190,\"model\":\"gpt-4o-mini\",\"choices\":[]").expect("last chunk");
    let (r, cut) = read(
        ALL_OPENAI,
        SSE,
        &[&CHAT_STREAM.as_bytes()[..cut_at + 40]],
        false,
    );
    assert!(cut);
    assert_eq!(r, [Reading::Absent; 3]);
    // The usage chunk came, [DONE] did not: the usage is whole.
    let done = CHAT_STREAM.find("data: [DONE]").expect("done");
    let (r, _) = read(ALL_OPENAI, SSE, &[&CHAT_STREAM.as_bytes()[..done]], false);
    assert_eq!(r, found(&[10, 8, 2]));
}

#[test]
fn a_pointer_reads_the_last_event_that_holds_it() {
    let src = &["response_json:/meta/tokens"];
    let stream = "data: {\"meta\":{\"tokens\":3}}\n\ndata: {\"other\":1}\n\ndata: {\"meta\":{\"tokens\":9}}\n\ndata: {\"x\":2}\n\n";
    assert_eq!(whole(src, SSE, stream), found(&[9]));
    assert_eq!(whole(src, JSON, r#"{"meta":{"tokens":41}}"#), found(&[41]));
    // Cut short: what was seen is open (at least the estimate is charged).
    let (r, _) = read(src, SSE, &[stream.as_bytes()], false);
    assert_eq!(r, [Reading::Partial(9)]);
    // An escaped key.
    let src = &["response_json:/a~1b/c~0d"];
    assert_eq!(whole(src, JSON, r#"{"a/b":{"c~d":5}}"#), found(&[5]));
}

#[test]
fn header_sources_are_left_to_the_head() {
    let sources = &["response_header:x-usage", "openai"];
    assert_eq!(
        whole(sources, JSON, CHAT),
        [Reading::Absent, Reading::Found(29)]
    );
    let none: Vec<UsageSource> = vec!["response_header:x".parse().expect("source")];
    assert!(BodyMeter::new(&none, &head(JSON)).is_none());
}

#[test]
fn hostile_numbers_are_garbage_or_clamped_by_the_limiter() {
    let src = &["openai:input"];
    for bad in [
        "-5",
        "1.5",
        "1e3",
        "18446744073709551616",
        "99999999999999999999999",
        "\"12\"",
        "true",
        "{}",
        "[1]",
    ] {
        let body = format!(r#"{{"usage":{{"prompt_tokens":{bad}}}}}"#);
        assert_eq!(whole(src, JSON, &body), [Reading::Garbage], "{bad}");
        let stream = format!("data: {body}\n\n");
        assert_eq!(
            whole(src, SSE, &stream),
            [Reading::Garbage],
            "{bad} streamed"
        );
    }
    // The largest u64 is a usage: charged, the limiter clamps the debt.
    let body = r#"{"usage":{"prompt_tokens":18446744073709551615}}"#;
    assert_eq!(whole(src, JSON, body), found(&[u64::MAX]));
    // A total past u64 when summed is garbage.
    let body = r#"{"usage":{"prompt_tokens":18446744073709551615,"completion_tokens":1}}"#;
    assert_eq!(whole(&["openai"], JSON, body), [Reading::Garbage]);
    // null is no usage.
    assert_eq!(
        whole(src, JSON, r#"{"usage":{"prompt_tokens":null}}"#),
        [Reading::Absent]
    );
}

#[test]
fn repeated_or_malformed_json_is_garbage() {
    let src = &["openai"];
    let twice = r#"{"usage":{"total_tokens":5,"total_tokens":500}}"#;
    assert_eq!(whole(src, JSON, twice), [Reading::Garbage]);
    let twice = r#"{"usage":{"total_tokens":5},"usage":{"total_tokens":500}}"#;
    assert_eq!(whole(src, JSON, twice), [Reading::Garbage]);
    for malformed in [
        r#"{"usage":{"total_tokens":5}"#,
        r#"{"usage":{"total_tokens":5}}}"#,
        "{usage:5}",
        " ",
        "[DONE]",
    ] {
        assert_eq!(
            whole(src, JSON, malformed),
            [Reading::Garbage],
            "{malformed:?}"
        );
    }
    // In a stream, a malformed event is passed over: a later good one is
    // read; with none, the usage is garbage rather than missing.
    let stream = "data: {\"usage\":\n\ndata: {\"usage\":{\"total_tokens\":4}}\n\n";
    assert_eq!(whole(src, SSE, stream), found(&[4]));
    let stream = "data: {\"usage\":{\"total_tokens\":4}\n\n";
    assert_eq!(whole(src, SSE, stream), [Reading::Garbage]);
    // Repeated within one event: that event's value is garbage.
    let stream = "data: {\"usage\":{\"total_tokens\":4,\"total_tokens\":4}}\n\n";
    assert_eq!(whole(src, SSE, stream), [Reading::Garbage]);
}

#[test]
fn bodies_without_usage_are_missing() {
    let src = &["openai", "anthropic:output"];
    assert_eq!(
        whole(src, JSON, r#"{"error":{"message":"overloaded"}}"#),
        [Reading::Absent; 2]
    );
    assert_eq!(
        whole(src, SSE, "data: {\"a\":1}\n\ndata: [DONE]\n\n"),
        [Reading::Absent; 2]
    );
    // Another type holds none, whatever its bytes.
    assert_eq!(whole(src, "text/plain", CHAT), [Reading::Absent; 2]);
    let (r, _) = read(src, JSON, &[], false);
    assert_eq!(r, [Reading::Absent; 2]);
    // An empty body (a HEAD answer, a 204) is no malformed JSON.
    assert_eq!(whole(src, JSON, ""), [Reading::Absent; 2]);
}

#[test]
fn an_encoded_body_is_unreadable() {
    let mut h = head(JSON);
    h.insert("content-encoding", "gzip".parse().expect("value"));
    let mut m = meter(&["openai"], &h);
    m.push(CHAT.as_bytes());
    assert_eq!(m.end(true).0, [Reading::Garbage]);
    let mut h = head(JSON);
    h.insert("content-encoding", "identity".parse().expect("value"));
    let mut m = meter(&["openai"], &h);
    m.push(CHAT.as_bytes());
    assert_eq!(m.end(true).0, found(&[29]));
}

#[test]
fn a_structured_json_type_is_json() {
    assert_eq!(
        whole(&["openai"], "application/vnd.api+json", CHAT),
        found(&[29])
    );
}

#[test]
fn an_event_over_a_mebibyte_is_skipped_and_noted() {
    let big = "x".repeat(super::super::sse::MAX_EVENT + 1);
    let stream = format!("data: {{\"usage\":{{\"total_tokens\":4}},\"pad\":\"{big}\"}}\n\n");
    assert_eq!(whole(&["openai"], SSE, &stream), [Reading::Garbage]);
    let stream = format!("{stream}data: {{\"usage\":{{\"total_tokens\":6}}}}\n\n");
    assert_eq!(whole(&["openai"], SSE, &stream), found(&[6]));
}

#[test]
fn every_split_of_a_stream_reads_the_same() {
    let stream = format!("{MESSAGE_START}{MESSAGE_DELTA}{MESSAGE_STOP}").replace('\n', "\r\n");
    let bytes = stream.as_bytes();
    for at in 0..=bytes.len() {
        let (r, _) = read(ALL_ANTHROPIC, SSE, &[&bytes[..at], &bytes[at..]], true);
        assert_eq!(r, found(&[45, 30, 15]), "split at {at}");
    }
    for at in 0..=CHAT_STREAM.len() {
        let b = CHAT_STREAM.as_bytes();
        let (r, _) = read(ALL_OPENAI, SSE, &[&b[..at], &b[at..]], true);
        assert_eq!(r, found(&[10, 8, 2]), "split at {at}");
    }
}

proptest! {
    /// Any number of splits, anywhere, in every shape's stream.
    #[test]
    fn random_splits_read_the_same(cuts in proptest::collection::vec(any::<prop::sample::Index>(), 0..12)) {
        let cases = [
            (ALL_OPENAI, CHAT_STREAM.to_owned(), found(&[10, 8, 2])),
            (ALL_OPENAI, RESPONSES_STREAM.replace('\n', "\r"), found(&[48, 37, 11])),
            (ALL_ANTHROPIC, format!("{MESSAGE_START}{MESSAGE_DELTA}{MESSAGE_STOP}"), found(&[45, 30, 15])),
        ];
        for (sources, stream, want) in cases {
            let bytes = stream.as_bytes();
            let mut at: Vec<usize> = cuts.iter().map(|c| c.index(bytes.len() + 1)).collect();
            at.sort_unstable();
            let mut chunks = Vec::new();
            let mut last = 0;
            for a in at {
                chunks.push(&bytes[last..a]);
                last = a;
            }
            chunks.push(&bytes[last..]);
            let (r, _) = read(sources, SSE, &chunks, true);
            prop_assert_eq!(r, want);
        }
    }

    /// Whatever the bytes, the meter never panics.
    #[test]
    fn any_bytes_are_read_without_panic(bytes in proptest::collection::vec(any::<u8>(), 0..400), sse in any::<bool>()) {
        let (_r, _) = read(&["openai", "anthropic", "response_json:/a"], if sse { SSE } else { JSON }, &[&bytes], true);
    }
}
