//! The reverse proxy reading usage from the upstream's body (docs/proxy.md,
//! "Usage from the body"), against the real binary: OpenAI- and
//! Anthropic-shaped answers, JSON and streamed, written in small pieces;
//! input, output and total rules of one request settled from one pass;
//! streams cut short; hostile bodies. What the store holds (Redis for the
//! exactness test) is read through the HTTP API (a peek: cost 0) and
//! compared with what the upstream reported.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use redis_harness::RedisServer;

use crate::support::piece_upstream::{Answer, start_piece_upstream};
use crate::support::proxy::{metric_appears, serve};
use crate::support::{Tollgate, get, remaining, request};

const JSON: &str = "application/json";
const SSE: &str = "text/event-stream";

const CHAT: &str = r#"{"id":"chatcmpl-1","object":"chat.completion","model":"gpt-4o-mini","choices":[{"index":0,"message":{"role":"assistant","content":"Hello!"},"finish_reason":"stop"}],"usage":{"prompt_tokens":19,"completion_tokens":10,"total_tokens":29,"prompt_tokens_details":{"cached_tokens":0}}}"#;

const CHAT_STREAM: &str = "data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"},\"finish_reason\":null}],\"usage\":null}\n\n\
data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hi\"},\"finish_reason\":\"stop\"}],\"usage\":null}\n\n\
data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"choices\":[],\"usage\":{\"prompt_tokens\":8,\"completion_tokens\":2,\"total_tokens\":10}}\n\n\
data: [DONE]\n\n";

const RESPONSES_STREAM: &str = "event: response.created\r\ndata: {\"type\":\"response.created\",\"response\":{\"id\":\"r\",\"status\":\"in_progress\",\"usage\":null}}\r\n\r\n\
event: response.output_text.delta\r\ndata: {\"type\":\"response.output_text.delta\",\"delta\":\"Hi\"}\r\n\r\n\
event: response.completed\r\ndata: {\"type\":\"response.completed\",\"response\":{\"id\":\"r\",\"status\":\"completed\",\"usage\":{\"input_tokens\":37,\"input_tokens_details\":{\"cached_tokens\":0},\"output_tokens\":11,\"output_tokens_details\":{\"reasoning_tokens\":0},\"total_tokens\":48}}}\r\n\r\n";

const MESSAGE_START: &str = "event: message_start\ndata: {\"type\": \"message_start\", \"message\": {\"id\": \"msg_1\", \"type\": \"message\", \"role\": \"assistant\", \"content\": [], \"model\": \"claude-sonnet-4-5\", \"usage\": {\"input_tokens\": 25, \"cache_read_input_tokens\": 5, \"output_tokens\": 1}}}\n\n\
event: content_block_start\ndata: {\"type\": \"content_block_start\", \"index\": 0, \"content_block\": {\"type\": \"text\", \"text\": \"\"}}\n\n\
event: content_block_delta\ndata: {\"type\": \"content_block_delta\", \"index\": 0, \"delta\": {\"type\": \"text_delta\", \"text\": \"Hello\"}}\n\n";
const MESSAGE_END: &str = "event: message_delta\ndata: {\"type\": \"message_delta\", \"delta\": {\"stop_reason\": \"end_turn\"}, \"usage\": {\"output_tokens\": 15}}\n\n\
event: message_stop\ndata: {\"type\": \"message_stop\"}\n\n";

/// Three rules of one shape: input, output and total tokens per team,
/// each counted in a window that never fills (`LIMIT`).
fn rules(shape: &str) -> String {
    let mut out = String::new();
    for (name, part, estimate) in [
        ("in", ":input", 50),
        ("out", ":output", 100),
        ("total", "", 150),
    ] {
        out.push_str(&format!(
            "\n[[rules]]\nname = \"{name}\"\nalgorithm = \"fixed_window\"\nlimit = {LIMIT}\n\
             period = \"1h\"\nkey = \"header:x-team\"\ncost = \"{shape}{part}\"\nestimate = {estimate}\n"
        ));
    }
    out
}

const LIMIT: u64 = 100_000;

/// Waits (up to 5 s) for team `key` to have been charged `want` input,
/// output and total tokens: the proxy settles on its own task.
fn charged(s: &Tollgate, key: &str, want: [u64; 3]) {
    let start = Instant::now();
    loop {
        let now = ["in", "out", "total"].map(|rule| LIMIT - remaining(s, rule, key));
        if now == want {
            return;
        }
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "{key}: charged {now:?} (in, out, total), the upstream reported {want:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn post(proxy: SocketAddr, path: &str, team: &str) -> crate::support::Resp {
    request(
        proxy,
        "POST",
        path,
        &[
            ("x-team", team),
            ("content-type", "application/json"),
            ("accept-encoding", "gzip, br"),
        ],
        br#"{"model":"m","messages":[{"role":"user","content":"hi"}]}"#,
    )
}

#[test]
fn openai_usage_settles_input_output_and_total_exactly_in_redis() {
    let redis = RedisServer::start();
    let up = start_piece_upstream(HashMap::from([
        ("/chat", Answer::new(JSON, CHAT)),
        ("/chat/stream", Answer::new(SSE, CHAT_STREAM)),
        ("/responses/stream", Answer::new(SSE, RESPONSES_STREAM)),
    ]));
    let config = format!("[store]\nurl = \"{}\"\n{}", redis.url(), rules("openai"));
    let s = serve(&config, up.addr);
    let mut want = [0, 0, 0];
    for (path, body, used) in [
        ("/chat", CHAT, [19, 10, 29]),
        ("/chat/stream", CHAT_STREAM, [8, 2, 10]),
        ("/responses/stream", RESPONSES_STREAM, [37, 11, 48]),
        ("/chat/stream", CHAT_STREAM, [8, 2, 10]),
    ] {
        let r = post(s.proxy(), path, "acme");
        assert_eq!(r.status, 200, "{path}: {}", r.text());
        // Not a byte changed, and the upstream was asked for no encoding.
        assert_eq!(r.text(), body, "{path}");
        assert_eq!(r.header("x-seen-accept-encoding"), Some("identity"));
        for (w, u) in want.iter_mut().zip(used) {
            *w += u;
        }
        charged(&s, "acme", want);
    }
    let metrics = get(s.api(), "/metrics").text();
    assert!(
        !metrics.contains("tollgate_usage_unread_total{rule=\"in\""),
        "{metrics}"
    );
}

#[test]
fn anthropic_usage_complete_and_cut_short() {
    let whole = format!("{MESSAGE_START}{MESSAGE_END}");
    let up = start_piece_upstream(HashMap::from([
        ("/messages", Answer::new(SSE, whole.clone())),
        ("/messages/cut", Answer::new(SSE, MESSAGE_START).cut()),
    ]));
    let s = serve(&rules("anthropic"), up.addr);
    let r = post(s.proxy(), "/messages", "a");
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.text(), whole);
    // Input 25 + 5 read from the cache; output 15.
    charged(&s, "a", [30, 15, 45]);

    // Cut after message_start: the input is exact; the output (1 so far)
    // and the total settle at their estimates, the larger.
    let r = post(s.proxy(), "/messages/cut", "b");
    assert_eq!(r.status, 200);
    charged(&s, "b", [30, 100, 150]);
    metric_appears(
        &s,
        r#"tollgate_usage_unread_total{rule="out",reason="dropped"} 1"#,
    );
    metric_appears(
        &s,
        r#"tollgate_usage_unread_total{rule="total",reason="dropped"} 1"#,
    );
    let metrics = get(s.api(), "/metrics").text();
    assert!(
        !metrics.contains(r#"{rule="in",reason="dropped"}"#),
        "{metrics}"
    );
}

/// A stream that stops sending (and never ends) is cut by the body stall
/// timeout; it settles as a stream cut short.
#[test]
fn a_stalled_stream_is_cut_and_settles_as_dropped() {
    let up = start_piece_upstream(HashMap::from([(
        "/messages/stall",
        Answer::new(SSE, MESSAGE_START).stall(),
    )]));
    let config = format!(
        "[proxy]\nresponse_timeout = \"300ms\"\n{}",
        rules("anthropic")
    );
    let s = serve(&config, up.addr);
    let r = post(s.proxy(), "/messages/stall", "s");
    assert_eq!(r.status, 200);
    assert_eq!(r.text(), MESSAGE_START, "what came before the stall");
    charged(&s, "s", [30, 100, 150]);
    metric_appears(
        &s,
        r#"tollgate_usage_unread_total{rule="out",reason="dropped"} 1"#,
    );
}

#[test]
fn hostile_bodies_settle_at_the_estimate_and_are_counted() {
    let negative = r#"{"usage":{"prompt_tokens":-5,"completion_tokens":1.5,"total_tokens":99999999999999999999999}}"#;
    let repeated = r#"{"usage":{"prompt_tokens":1,"prompt_tokens":2,"completion_tokens":3,"completion_tokens":3,"total_tokens":4,"total_tokens":4}}"#;
    let up = start_piece_upstream(HashMap::from([
        ("/negative", Answer::new(JSON, negative)),
        ("/repeated", Answer::new(JSON, repeated)),
        ("/malformed", Answer::new(JSON, &CHAT[..CHAT.len() - 1])),
        (
            "/gzip",
            Answer::new(JSON, CHAT).field("content-encoding", "gzip"),
        ),
        (
            "/none",
            Answer::new(JSON, r#"{"error":{"message":"overloaded"}}"#),
        ),
        ("/text", Answer::new("text/plain", CHAT)),
    ]));
    let s = serve(&rules("openai"), up.addr);
    let mut n = 0;
    // Four unreadable (garbage), two without usage (missing).
    for path in [
        "/negative",
        "/repeated",
        "/malformed",
        "/gzip",
        "/none",
        "/text",
    ] {
        let r = post(s.proxy(), path, "t");
        assert_eq!(r.status, 200, "{path}: {}", r.text());
        n += 1;
        // The estimates: 50 in, 100 out, 150 total, each time.
        charged(&s, "t", [50 * n, 100 * n, 150 * n]);
    }
    for rule in ["in", "out", "total"] {
        metric_appears(
            &s,
            &format!(r#"tollgate_usage_unread_total{{rule="{rule}",reason="garbage"}} 4"#),
        );
        metric_appears(
            &s,
            &format!(r#"tollgate_usage_unread_total{{rule="{rule}",reason="missing"}} 2"#),
        );
    }
}

#[test]
fn a_pointer_reads_any_json_and_stream() {
    let config = "[[rules]]\nname = \"units\"\nalgorithm = \"fixed_window\"\nlimit = 1000\n\
                  period = \"1h\"\nkey = \"header:x-team\"\ncost = \"response_json:/meta/billed_units\"\n\
                  estimate = 10\n";
    let up = start_piece_upstream(HashMap::from([
        (
            "/one",
            Answer::new(
                "application/vnd.example+json",
                r#"{"meta":{"billed_units":42}}"#,
            ),
        ),
        (
            "/stream",
            Answer::new(
                SSE,
                "data: {\"meta\":{\"billed_units\":3}}\n\ndata: {\"meta\":{\"billed_units\":7}}\n\n",
            ),
        ),
    ]));
    let s = serve(config, up.addr);
    assert_eq!(post(s.proxy(), "/one", "p").status, 200);
    assert_eq!(post(s.proxy(), "/stream", "p").status, 200);
    let start = Instant::now();
    while remaining(&s, "units", "p") != 1000 - 42 - 7 {
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "{}",
            remaining(&s, "units", "p")
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}
