//! The reverse proxy with rules that hold something past the answer,
//! against the real binary: a rule charged by the usage the upstream
//! reports (in the head, in the trailers, missing, garbage, or a client
//! gone mid-stream) and a `concurrency` rule whose lease lives as long as
//! the response streams. What the store holds is read through the HTTP
//! API (a peek: cost 0), never from the client's side.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use crate::support;
use crate::support::proxy::{metric_appears, serve, settles_to};
use crate::support::usage_upstream::start_usage_upstream;
use crate::support::{connect, dead_addr, get, remaining, request};

const TPM: &str = r#"
[[rules]]
name = "tpm"
algorithm = "gcra"
limit = 1000
period = "1h"
key = "header:x-team"
cost = "response_header:x-usage-tokens"
estimate = 100
"#;

fn team(proxy: SocketAddr, path: &str, team: &str) -> support::Resp {
    request(proxy, "GET", path, &[("x-team", team)], b"")
}

/// Sends a GET and reads only the response head: the body keeps
/// streaming on the returned connection.
fn open(proxy: SocketAddr, path: &str, team: &str) -> (u16, TcpStream) {
    let mut s = connect(proxy);
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {proxy}\r\nx-team: {team}\r\nConnection: close\r\n\r\n"
    )
    .expect("write");
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        assert_eq!(s.read(&mut byte).expect("read head"), 1, "head cut short");
        head.push(byte[0]);
    }
    let status = String::from_utf8_lossy(&head[9..12])
        .parse()
        .expect("status");
    (status, s)
}

#[test]
fn usage_in_the_head_is_settled_when_the_response_ends() {
    let up = start_usage_upstream();
    let s = serve(TPM, up.addr);
    let r = team(s.proxy(), "/usage/250", "a");
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.text(), "hello");
    // The answer's headers count the estimate.
    let rl = r.header("ratelimit").expect("RateLimit");
    assert!(rl.contains("r=900"), "{rl}");
    settles_to(&s, "tpm", "a", 750);

    // Far over the estimate: charged in full, past the limit.
    let r = team(s.proxy(), "/usage/1500", "a");
    assert_eq!(r.status, 200);
    settles_to(&s, "tpm", "a", 0);
    let denied = team(s.proxy(), "/usage/1", "a");
    assert_eq!(denied.status, 429);
    assert!(denied.header("retry-after").is_some());
}

#[test]
fn usage_in_the_trailers_is_read_when_the_head_has_none() {
    let up = start_usage_upstream();
    let s = serve(TPM, up.addr);
    let r = team(s.proxy(), "/trailer/40", "a");
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.text(), "hello");
    // 40 of the 100 reserved were used: 60 come back.
    settles_to(&s, "tpm", "a", 960);
}

#[test]
fn missing_or_garbage_usage_settles_at_the_estimate_and_is_counted() {
    let up = start_usage_upstream();
    let s = serve(TPM, up.addr);
    assert_eq!(team(s.proxy(), "/none", "a").status, 200);
    settles_to(&s, "tpm", "a", 900);
    assert_eq!(team(s.proxy(), "/garbage", "a").status, 200);
    settles_to(&s, "tpm", "a", 800);
    // Settled once each: nothing moves later.
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(remaining(&s, "tpm", "a"), 800);
    let metrics = get(s.api(), "/metrics").text();
    for want in [
        r#"tollgate_usage_unread_total{rule="tpm",reason="missing"} 1"#,
        r#"tollgate_usage_unread_total{rule="tpm",reason="garbage"} 1"#,
    ] {
        assert!(metrics.contains(want), "{want} not in\n{metrics}");
    }
}

#[test]
fn a_client_gone_mid_stream_settles_at_the_estimate() {
    let up = start_usage_upstream();
    let s = serve(TPM, up.addr);
    let (status, mut stream) = open(s.proxy(), "/forever", "a");
    assert_eq!(status, 200);
    let mut some = [0u8; 16];
    assert!(stream.read(&mut some).expect("a chunk") > 0);
    // Reserved, not yet settled, while it streams.
    assert_eq!(remaining(&s, "tpm", "a"), 900);
    drop(stream);
    let metrics = metric_appears(
        &s,
        r#"tollgate_usage_unread_total{rule="tpm",reason="dropped"} 1"#,
    );
    assert!(!metrics.contains("reason=\"missing\""), "{metrics}");
    assert_eq!(remaining(&s, "tpm", "a"), 900);
}

#[test]
fn an_upstream_never_reached_gives_everything_back() {
    let config = format!("{TPM}{}", INFLIGHT.replace("LEASE", "30s"));
    let s = serve(&config, dead_addr());
    let r = team(s.proxy(), "/usage/250", "a");
    assert_eq!(r.status, 502, "{}", r.text());
    // The request was admitted (its headers count the estimate and the
    // slot), but no work was done: the reservation is cancelled and the
    // slot released.
    let rl = r.header("ratelimit").expect("RateLimit");
    assert!(rl.contains(r#""tpm";r=900"#), "{rl}");
    settles_to(&s, "tpm", "a", 1000);
    settles_to(&s, "inflight", "a", 1);
}

#[test]
fn an_upstream_that_does_not_answer_in_time_settles_at_the_estimate() {
    let up = start_usage_upstream();
    let config = format!("[proxy]\nresponse_timeout = \"200ms\"\n{TPM}");
    let s = serve(&config, up.addr);
    let r = team(s.proxy(), "/silent/1000", "a");
    assert_eq!(r.status, 504, "{}", r.text());
    // The upstream may have done the work: nothing is given back.
    metric_appears(
        &s,
        r#"tollgate_usage_unread_total{rule="tpm",reason="no_response"} 1"#,
    );
    assert_eq!(remaining(&s, "tpm", "a"), 900);
}

const INFLIGHT: &str = r#"
[[rules]]
name = "inflight"
algorithm = "concurrency"
limit = 1
lease = "LEASE"
key = "header:x-team"
"#;

#[test]
fn a_lease_is_held_while_the_response_streams_then_released() {
    let up = start_usage_upstream();
    let s = serve(&INFLIGHT.replace("LEASE", "30s"), up.addr);
    let (status, mut streaming) = open(s.proxy(), "/stream/1500", "a");
    assert_eq!(status, 200);
    assert_eq!(remaining(&s, "inflight", "a"), 0);
    // The one slot is held: another request of the team is refused; another
    // team is not.
    let denied = team(s.proxy(), "/none", "a");
    assert_eq!(denied.status, 429, "{}", denied.text());
    assert_eq!(team(s.proxy(), "/none", "b").status, 200);

    let mut rest = Vec::new();
    streaming.read_to_end(&mut rest).expect("the stream");
    assert!(String::from_utf8_lossy(&rest).contains("tok"));
    settles_to(&s, "inflight", "a", 1);
    assert_eq!(team(s.proxy(), "/none", "a").status, 200);
    settles_to(&s, "inflight", "a", 1);
}

#[test]
fn a_lease_is_renewed_while_a_stream_outlives_it() {
    let up = start_usage_upstream();
    // A 4 s lease, an 8 s stream: unrenewed, the slot would come back
    // after 4 s. Renewed every 2 s, and watched until 5.5 s: 2 s of room
    // for a loaded machine's pauses before a renewal is late, and 2.5 s
    // before the stream ends (then the slot comes back, as it should).
    let s = serve(&INFLIGHT.replace("LEASE", "4s"), up.addr);
    let started = Instant::now();
    let (status, mut streaming) = open(s.proxy(), "/stream/8000", "a");
    assert_eq!(status, 200);
    let reader = std::thread::spawn(move || {
        let mut rest = Vec::new();
        streaming.read_to_end(&mut rest).expect("the stream");
        rest
    });
    while started.elapsed() < Duration::from_millis(5500) {
        std::thread::sleep(Duration::from_millis(250));
        if reader.is_finished() {
            break;
        }
        assert_eq!(
            remaining(&s, "inflight", "a"),
            0,
            "the slot came back while the response streamed"
        );
    }
    let rest = reader.join().expect("reader");
    assert!(String::from_utf8_lossy(&rest).contains("tok"));
    settles_to(&s, "inflight", "a", 1);
    assert_eq!(team(s.proxy(), "/none", "a").status, 200);
}

/// A key under a config override is settled under the override that
/// admitted it, not the base rule: usage below the estimate gives back
/// the override's units, usage above it charges them (before the fix a
/// give-back moved the key by the base rule's far shorter interval, so
/// a client got far more than its budget).
#[test]
fn usage_is_settled_under_the_override_that_admitted_it() {
    let config = format!("{TPM}\n[[rules.overrides]]\nkey = \"small\"\nlimit = 200\n");
    let up = start_usage_upstream();
    let s = serve(&config, up.addr);
    assert_eq!(remaining(&s, "tpm", "small"), 200);
    let r = team(s.proxy(), "/usage/50", "small");
    assert_eq!(r.status, 200, "{}", r.text());
    let rl = r.header("ratelimit").expect("RateLimit");
    assert!(
        rl.contains("r=100"),
        "the estimate under the override: {rl}"
    );
    // 100 reserved, 50 used: 50 given back under the override.
    settles_to(&s, "tpm", "small", 150);
    // 100 reserved, 130 used: 30 more charged under the override.
    let r = team(s.proxy(), "/usage/130", "small");
    assert_eq!(r.status, 200, "{}", r.text());
    settles_to(&s, "tpm", "small", 20);
}
