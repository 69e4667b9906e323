//! The reverse proxy reading the request body before its check, against
//! the real binary: rules keyed by a JSON field (`request_json:/model`),
//! estimates read from the request (`max_tokens`, `prompt`), what is past
//! `request_body_limit` or not JSON, and the body reaching the upstream
//! unchanged in its framing (hashed there: `support::body_upstream`).

use std::io::Write;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use crate::support::body_upstream::{FNV_START, fnv, start_body_upstream};
use crate::support::proxy::{serve, settles_to};
use crate::support::{Resp, connect, ratelimit_members, read_response, remaining};

/// How a body is sent.
#[derive(Clone, Copy, Debug)]
enum Framing {
    Length,
    /// Chunks of this many bytes.
    Chunked(usize),
}

/// POSTs `body` to `path` through the proxy, framed as asked.
fn post(proxy: SocketAddr, path: &str, headers: &[(&str, &str)], body: &[u8], f: Framing) -> Resp {
    let mut s = connect(proxy);
    let mut head = format!("POST {path} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n");
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    match f {
        Framing::Length => head.push_str(&format!("Content-Length: {}\r\n\r\n", body.len())),
        Framing::Chunked(_) => head.push_str("Transfer-Encoding: chunked\r\n\r\n"),
    }
    s.write_all(head.as_bytes()).expect("head");
    match f {
        Framing::Length => s.write_all(body).expect("body"),
        Framing::Chunked(n) => {
            for chunk in body.chunks(n) {
                s.write_all(format!("{:x}\r\n", chunk.len()).as_bytes())
                    .expect("size");
                s.write_all(chunk).expect("chunk");
                s.write_all(b"\r\n").expect("end");
            }
            s.write_all(b"0\r\n\r\n").expect("last");
        }
    }
    read_response(&mut s)
}

/// The upstream got exactly `body`, framed as it was sent.
fn arrived_unchanged(r: &Resp, body: &[u8], f: Framing) {
    assert_eq!(r.status, 200, "{f:?}: {}", r.text());
    assert_eq!(
        r.header("x-body-len"),
        Some(body.len().to_string().as_str())
    );
    assert_eq!(
        r.header("x-body-hash"),
        Some(format!("{:016x}", fnv(FNV_START, body)).as_str()),
        "{f:?}: the bytes differ"
    );
    let want = match f {
        Framing::Length => "length",
        Framing::Chunked(_) => "chunked",
    };
    assert_eq!(r.header("x-framing"), Some(want), "{f:?}");
}

/// `r=` of `rule` in the answer's RateLimit field.
fn left(r: &Resp, rule: &str) -> i64 {
    let field = r.header("ratelimit").expect("RateLimit");
    ratelimit_members(field)
        .into_iter()
        .find(|(name, _)| name == rule)
        .and_then(|(_, params)| params.into_iter().find(|(k, _)| k == "r"))
        .unwrap_or_else(|| panic!("no {rule} in {field}"))
        .1
}

const KEYED: &str = r#"
[proxy]
request_body_limit = 1024
on_missing_key = "reject"

[[rules]]
name = "per_model"
algorithm = "fixed_window"
limit = 100
period = "1h"
key = "request_json:/model"

[[rules]]
name = "per_user"
algorithm = "fixed_window"
limit = 100
period = "1h"
key = "request_json:/user"

[[rules]]
name = "per_tenant"
algorithm = "fixed_window"
limit = 100
period = "1h"
key = "request_json:/metadata/tenant+header:x-team"
"#;

fn chat(model: &str, user: &str, tenant: &str) -> String {
    format!(
        r#"{{"model":"{model}","messages":[{{"role":"user","content":"Grüß dich — 你好"}}],"user":"{user}","metadata":{{"tenant":"{tenant}"}}}}"#
    )
}

#[test]
fn rules_are_keyed_per_model_user_and_tenant() {
    let up = start_body_upstream();
    let s = serve(KEYED, up.addr);
    for (model, user, tenant) in [
        ("gpt-4o", "alice", "acme"),
        ("gpt-4o", "bob", "acme"),
        ("o3", "alice", "initech"),
    ] {
        let body = chat(model, user, tenant);
        let r = post(
            s.proxy(),
            "/v1/chat/completions",
            &[("x-team", "t1")],
            body.as_bytes(),
            Framing::Length,
        );
        arrived_unchanged(&r, body.as_bytes(), Framing::Length);
    }
    assert_eq!(remaining(&s, "per_model", "gpt-4o"), 98);
    assert_eq!(remaining(&s, "per_model", "o3"), 99);
    assert_eq!(remaining(&s, "per_user", "alice"), 98);
    assert_eq!(remaining(&s, "per_user", "bob"), 99);
    assert_eq!(remaining(&s, "per_tenant", "acme+t1"), 98);
    assert_eq!(remaining(&s, "per_tenant", "initech+t1"), 99);
}

#[test]
fn the_body_reaches_the_upstream_unchanged_in_its_framing() {
    let up = start_body_upstream();
    let s = serve(KEYED, up.addr);
    let small = chat("m", "u", "t");
    // Longer than the limit (1024): read in part, the rest streamed.
    let long = format!(
        r#"{{"model":"m","user":"u","metadata":{{"tenant":"t"}},"prompt":"{}"}}"#,
        "ünïcödé ".repeat(4000)
    );
    for body in [small.as_bytes(), long.as_bytes()] {
        for f in [
            Framing::Length,
            Framing::Chunked(1),
            Framing::Chunked(100),
            Framing::Chunked(5000),
        ] {
            if matches!(f, Framing::Chunked(1)) && body.len() > 2000 {
                continue;
            }
            let r = post(s.proxy(), "/", &[("x-team", "t1")], body, f);
            arrived_unchanged(&r, body, f);
        }
    }
}

/// A body just past `request_body_limit` keeps the fields of its first
/// bytes, however its last read falls: before, a body one byte over the
/// limit whose end came in the read that crossed it named nothing (with
/// `on_missing_key = "skip"`, a per-user limit bypassed).
#[test]
fn a_body_just_past_the_limit_keeps_the_fields_of_its_prefix() {
    let up = start_body_upstream();
    let s = serve(KEYED, up.addr);
    let head = chat("m", "carol", "t");
    // Padding inside the document, after the fields: 1,025 to 1,200 bytes.
    let mut sent = 0;
    for total in [1025, 1026, 1100, 1200] {
        let pad = total - head.len() - r#","pad":"""#.len();
        let body = format!(
            r#"{},"pad":"{}"}}"#,
            &head[..head.len() - 1],
            "x".repeat(pad)
        );
        assert_eq!(body.len(), total);
        for f in [Framing::Length, Framing::Chunked(total)] {
            let r = post(s.proxy(), "/", &[("x-team", "t1")], body.as_bytes(), f);
            arrived_unchanged(&r, body.as_bytes(), f);
            sent += 1;
        }
    }
    assert_eq!(remaining(&s, "per_user", "carol"), 100 - sent);
}

#[test]
fn a_field_past_the_limit_or_in_a_body_that_is_not_json_is_a_missing_key() {
    let up = start_body_upstream();
    let s = serve(KEYED, up.addr);
    let late = format!(
        r#"{{"user":"u","metadata":{{"tenant":"t"}},"prompt":"{}","model":"m"}}"#,
        "x".repeat(2000)
    );
    for body in [
        late.as_str(),
        r#"{"model":"m","user":"u","metadata":{"tenant":"t"}"#, // cut short
        r#"{"model":"m","user":"u","metadata":{"tenant":"t"}]"#, // malformed
        r#"{"model":"m","model":"n","user":"u","metadata":{"tenant":"t"}}"#, // twice
        r#"{"model":["m"],"user":"u","metadata":{"tenant":"t"}}"#, // not a scalar
        "model=m&user=u",
    ] {
        let r = post(
            s.proxy(),
            "/",
            &[("x-team", "t1")],
            body.as_bytes(),
            Framing::Length,
        );
        assert_eq!(r.status, 400, "{body}: {}", r.text());
        assert!(
            r.text().contains("/model") || r.text().contains("/user"),
            "{}",
            r.text()
        );
    }
    // Nothing was counted for the refused requests.
    assert_eq!(remaining(&s, "per_user", "u"), 100);
    let ok = chat("m", "u", "t");
    let r = post(
        s.proxy(),
        "/",
        &[("x-team", "t1")],
        ok.as_bytes(),
        Framing::Chunked(7),
    );
    arrived_unchanged(&r, ok.as_bytes(), Framing::Chunked(7));
    assert_eq!(remaining(&s, "per_user", "u"), 99);
}

const ESTIMATES: &str = r#"
[[rules]]
name = "otpm"
algorithm = "fixed_window"
limit = 1000
period = "1h"
key = "header:x-team"
cost = "response_header:x-output"
estimate = "max_tokens"
estimate_default = 100

[[rules]]
name = "itpm"
algorithm = "fixed_window"
limit = 100000
period = "1h"
key = "header:x-team"
cost = "response_header:x-input"
estimate = "prompt"
estimate_default = 7
"#;

#[test]
fn estimates_are_read_from_the_request_and_clamped_to_the_capacity() {
    let up = start_body_upstream();
    let s = serve(ESTIMATES, up.addr);
    let team = |t| [("x-team", t)];
    // max_tokens, max_completion_tokens, max_output_tokens; used 0 each.
    for (team_name, body, reserved) in [
        ("a", r#"{"max_tokens":300}"#, 300),
        ("b", r#"{"max_completion_tokens":250}"#, 250),
        ("c", r#"{"max_output_tokens":200}"#, 200),
        ("d", r#"{"messages":[]}"#, 100),
        ("e", r#"{"max_tokens":50000000}"#, 1000),
    ] {
        let r = post(
            s.proxy(),
            "/?out=0&in=0",
            &team(team_name),
            body.as_bytes(),
            Framing::Length,
        );
        assert_eq!(r.status, 200, "{body}: {}", r.text());
        assert_eq!(left(&r, "otpm"), 1000 - reserved, "{body}");
        // The prompt: every byte ASCII, 3 to a token.
        let prompt = i64::try_from(body.len().div_ceil(3)).expect("small");
        assert_eq!(left(&r, "itpm"), 100_000 - prompt, "{body}");
        // Settled at what the upstream reported: nothing.
        settles_to(&s, "otpm", team_name, 1000);
        settles_to(&s, "itpm", team_name, 100_000);
    }
    // A prompt is sized to the end of the body: a chunked one read whole
    // before the check still goes on chunked.
    let body = br#"{"max_tokens":1,"prompt":"hello"}"#;
    for f in [Framing::Chunked(4), Framing::Length] {
        let r = post(s.proxy(), "/?out=0&in=0", &team("g"), body, f);
        arrived_unchanged(&r, body, f);
        assert_eq!(left(&r, "itpm"), 100_000 - 11, "{f:?}");
        settles_to(&s, "itpm", "g", 100_000);
    }
    // A bodiless request reserves the defaults.
    let r = crate::support::request(s.proxy(), "GET", "/?out=0&in=0", &team("f"), b"");
    assert_eq!((left(&r, "otpm"), left(&r, "itpm")), (900, 100_000 - 7));
}

/// A reservation is capped by the capacity of the limit deciding the key:
/// an override larger than the rule reserves all the request asks (before,
/// the rule's 1,000 under a 100,000 override: 40 concurrent requests of
/// 50,000 each were admitted), one smaller reserves at most its own (before,
/// a tenant limited to 10 was refused for ever).
#[test]
fn estimates_are_capped_by_the_override_deciding_the_key() {
    let config = r#"
[[rules]]
name = "otpm"
algorithm = "fixed_window"
limit = 1000
period = "1h"
key = "header:x-team"
cost = "response_header:x-output"
estimate = "max_tokens"
estimate_default = 100

[[rules.overrides]]
key = "big"
limit = 100000

[[rules.overrides]]
key = "tiny"
limit = 10
"#;
    let up = start_body_upstream();
    let s = serve(config, up.addr);
    for (team, max_tokens, left_after) in [
        ("big", 50_000, 50_000),
        ("big", 80_000, 20_000),
        ("tiny", 50, 0),
        ("base", 50_000, 0),
    ] {
        let body = format!(r#"{{"max_tokens":{max_tokens}}}"#);
        let r = post(
            s.proxy(),
            "/?out=0&in=0",
            &[("x-team", team)],
            body.as_bytes(),
            Framing::Length,
        );
        assert_eq!(r.status, 200, "{team} {body}: {}", r.text());
        assert_eq!(left(&r, "otpm"), left_after, "{team} {body}");
        // Used nothing: all of it comes back.
        let whole = match team {
            "big" => 100_000,
            "tiny" => 10,
            _ => 1000,
        };
        settles_to(&s, "otpm", team, whole);
    }
}

#[test]
fn an_encoded_request_body_is_not_read_and_reserves_the_defaults() {
    let up = start_body_upstream();
    let s = serve(ESTIMATES, up.addr);
    // Whatever its bytes, a body with a content coding is not the JSON
    // the rules read: its size says nothing of its prompt either.
    let body = br#"{"max_tokens":300,"prompt":"counted as if it were text"}"#;
    let h = [("x-team", "z"), ("content-encoding", "gzip")];
    let r = post(s.proxy(), "/?out=0&in=0", &h, body, Framing::Length);
    arrived_unchanged(&r, body, Framing::Length);
    assert_eq!((left(&r, "otpm"), left(&r, "itpm")), (900, 100_000 - 7));
}

const SPLIT: &str = r#"
[[rules]]
name = "input"
algorithm = "fixed_window"
limit = 100000
period = "1h"
key = "header:x-team"
cost = "response_header:x-input"
estimate = "prompt"
estimate_default = 10

[[rules]]
name = "output"
algorithm = "fixed_window"
limit = 1000
period = "1h"
key = "header:x-team"
cost = "response_header:x-output"
estimate = "max_tokens"
estimate_default = 100

[[rules]]
name = "total"
algorithm = "fixed_window"
limit = 200000
period = "1h"
key = "header:x-team"
cost = "response_header:x-usage-tokens"
estimate = "prompt+max_tokens"
estimate_default = 100
"#;

/// Input, output and total rules of one request are admitted together or
/// not at all. The usage comes in response headers here (`x-input`,
/// `x-output`, `x-usage-tokens`); the `openai:input` kind of source
/// reads it from the body instead, and is admitted the same way.
#[test]
fn input_output_and_total_rules_admit_all_or_nothing() {
    let up = start_body_upstream();
    let s = serve(SPLIT, up.addr);
    let h = [("x-team", "a")];
    let r = post(
        s.proxy(),
        "/?in=40&out=900&total=940",
        &h,
        br#"{"max_tokens":900}"#,
        Framing::Length,
    );
    assert_eq!(r.status, 200, "{}", r.text());
    settles_to(&s, "output", "a", 100);
    settles_to(&s, "input", "a", 100_000 - 40);
    settles_to(&s, "total", "a", 200_000 - 940);
    // The output rule cannot take 500 more: nothing is taken from the
    // others either.
    let r = post(
        s.proxy(),
        "/?in=1&out=1&total=2",
        &h,
        br#"{"max_tokens":500}"#,
        Framing::Length,
    );
    assert_eq!(r.status, 429, "{}", r.text());
    assert_eq!(remaining(&s, "input", "a"), 100_000 - 40);
    assert_eq!(remaining(&s, "total", "a"), 200_000 - 940);
    assert_eq!(remaining(&s, "output", "a"), 100);
    // One that fits takes from all three.
    let r = post(
        s.proxy(),
        "/?in=5&out=50&total=55",
        &h,
        br#"{"max_tokens":60}"#,
        Framing::Length,
    );
    assert_eq!(r.status, 200, "{}", r.text());
    settles_to(&s, "output", "a", 50);
    settles_to(&s, "input", "a", 100_000 - 45);
    settles_to(&s, "total", "a", 200_000 - 995);
}

#[test]
fn a_huge_body_streams_on_past_the_limit_in_bounded_memory() {
    const PAD: usize = 64 * 1024 * 1024;
    let up = start_body_upstream();
    let s = serve(
        "[proxy]\nrequest_body_limit = 65536\n\n[[rules]]\nname = \"per_model\"\n\
         algorithm = \"fixed_window\"\nlimit = 10\nperiod = \"1h\"\nkey = \"request_json:/model\"\n",
        up.addr,
    );
    let rss_before = s.peak_rss_kib();
    let mut conn = connect(s.proxy());
    conn.write_all(
        b"POST / HTTP/1.1\r\nHost: t\r\nConnection: close\r\nTransfer-Encoding: chunked\r\n\r\n",
    )
    .expect("head");
    let mut hash = FNV_START;
    // An empty piece is the last chunk.
    let mut send = |bytes: &[u8]| {
        hash = fnv(hash, bytes);
        conn.write_all(format!("{:x}\r\n", bytes.len()).as_bytes())
            .expect("size");
        conn.write_all(bytes).expect("chunk");
        conn.write_all(b"\r\n").expect("end");
    };
    send(br#"{"model":"m","pad":""#);
    let block = vec![b'x'; 256 * 1024];
    // A first MiB, then the upstream must be receiving before the rest is
    // sent: the proxy forwards, it does not gather the body.
    for _ in 0..4 {
        send(&block);
    }
    let start = Instant::now();
    while up.received.load(Ordering::SeqCst) < 512 * 1024 {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "the upstream got {} bytes of a body still being sent",
            up.received.load(Ordering::SeqCst)
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    for _ in 4..PAD / block.len() {
        send(&block);
    }
    send(br#""}"#);
    send(b"");
    let r = read_response(&mut conn);
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(
        r.header("x-body-hash"),
        Some(format!("{hash:016x}").as_str())
    );
    assert_eq!(r.header("x-framing"), Some("chunked"));
    assert_eq!(remaining(&s, "per_model", "m"), 9);
    let grown = s.peak_rss_kib().saturating_sub(rss_before);
    assert!(grown < 16 * 1024, "peak RSS grew by {grown} KiB");
}

#[test]
fn a_body_that_stalls_or_fails_before_the_check_takes_nothing() {
    let up = start_body_upstream();
    let s = serve(
        &format!(
            "[proxy]\nresponse_timeout = \"500ms\"\n{}",
            KEYED.replace("[proxy]\n", "")
        ),
        up.addr,
    );
    // Stalls half-way through its Content-Length: 408.
    let mut conn = connect(s.proxy());
    conn.write_all(b"POST / HTTP/1.1\r\nHost: t\r\nConnection: close\r\nContent-Length: 100\r\n\r\n{\"model\":\"m\"")
        .expect("write");
    let r = read_response(&mut conn);
    assert_eq!(r.status, 408, "{}", r.text());
    // Malformed chunks: 400.
    let mut conn = connect(s.proxy());
    conn.write_all(
        b"POST / HTTP/1.1\r\nHost: t\r\nConnection: close\r\nTransfer-Encoding: chunked\r\n\r\n5\r\n{\"mod\r\nzz\r\n",
    )
    .expect("write");
    let r = read_response(&mut conn);
    assert_eq!(r.status, 400, "{}", r.text());
    assert_eq!(remaining(&s, "per_model", "m"), 100);
    assert_eq!(
        up.received.load(Ordering::SeqCst),
        0,
        "nothing went upstream"
    );
}
