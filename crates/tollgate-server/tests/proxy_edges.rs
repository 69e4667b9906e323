//! The reverse proxy at the edges of HTTP: requests it must refuse before
//! any check (`CONNECT`, an ambiguous or missing `Host`), the host of an
//! absolute-form request, `OPTIONS *`, and upstreams that misbehave (a
//! body that stops half-way, `Content-Length` beside `Transfer-Encoding`,
//! an HTTP/1.0 status line, an unasked `101`). The upstream here is raw TCP,
//! so it can send what a well-behaved server would not.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{Resp, Tollgate, connect, parse_response};

const CONFIG: &str = r#"
[proxy]
response_timeout = "500ms"

[[rules]]
name = "per_host"
algorithm = "fixed_window"
limit = 100
period = "1h"
key = "host"
"#;

/// A raw upstream: answers by path with fixed bytes, and keeps every
/// request head it read.
struct RawUpstream {
    addr: SocketAddr,
    heads: Arc<Mutex<Vec<String>>>,
}

fn raw_upstream() -> RawUpstream {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr");
    let heads = Arc::new(Mutex::new(Vec::new()));
    let seen = Arc::clone(&heads);
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { continue };
            let seen = Arc::clone(&seen);
            std::thread::spawn(move || {
                let mut reader = BufReader::new(conn.try_clone().expect("clone"));
                let mut head = String::new();
                loop {
                    let mut line = String::new();
                    if reader.read_line(&mut line).unwrap_or(0) == 0 {
                        return;
                    }
                    head.push_str(&line);
                    if line == "\r\n" {
                        break;
                    }
                }
                let target = head.split(' ').nth(1).unwrap_or("").to_owned();
                seen.lock().expect("lock").push(head.clone());
                let answer: Vec<u8> = match target.as_str() {
                    "/hang" => {
                        let _ = conn.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nabc");
                        std::thread::sleep(Duration::from_secs(20));
                        return;
                    }
                    "/clte" => b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n".to_vec(),
                    "/v10" => b"HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok".to_vec(),
                    "/101" => b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: x\r\nConnection: upgrade\r\n\r\n".to_vec(),
                    _ => {
                        let body = head.as_bytes();
                        let mut a = format!(
                            "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                            body.len()
                        )
                        .into_bytes();
                        a.extend_from_slice(body);
                        a
                    }
                };
                let _ = conn.write_all(&answer);
                let _ = conn.shutdown(std::net::Shutdown::Write);
                std::thread::sleep(Duration::from_millis(200));
            });
        }
    });
    RawUpstream { addr, heads }
}

fn proxy_to(up: &RawUpstream) -> Tollgate {
    let upstream = format!("http://{}", up.addr);
    Tollgate::start(
        CONFIG,
        &["--proxy", "127.0.0.1:0", "--upstream", upstream.as_str()],
    )
}

/// Sends `raw` bytes as they are and reads the answer to the end.
fn send_raw(addr: SocketAddr, raw: &str) -> Resp {
    let mut s = connect(addr);
    s.write_all(raw.as_bytes()).expect("write");
    let mut out = Vec::new();
    s.read_to_end(&mut out).expect("read");
    parse_response(&out)
}

#[test]
fn ambiguous_hosts_and_connect_are_refused_before_any_check() {
    let up = raw_upstream();
    let s = proxy_to(&up);
    for (raw, status, says) in [
        (
            "GET /a HTTP/1.1\r\nHost: a.example\r\nHost: b.example\r\nConnection: close\r\n\r\n",
            400,
            "more than one Host",
        ),
        (
            "GET /a HTTP/1.1\r\nConnection: close\r\n\r\n",
            400,
            "no Host",
        ),
        (
            "GET /a HTTP/1.1\r\nHost: a b\r\nConnection: close\r\n\r\n",
            400,
            "not a host",
        ),
        // Userinfo and odd ports would each be a new bucket of a `host`
        // rule, and userinfo would reach the upstream's Host.
        (
            "GET /a HTTP/1.1\r\nHost: u@a.example\r\nConnection: close\r\n\r\n",
            400,
            "not a host",
        ),
        (
            "GET /a HTTP/1.1\r\nHost: a.example:-1\r\nConnection: close\r\n\r\n",
            400,
            "not a host",
        ),
        (
            "GET http://user:pw@a.example/p HTTP/1.1\r\nHost: a.example\r\nConnection: close\r\n\r\n",
            400,
            "not a host",
        ),
        (
            "GET ftp://a.example/p HTTP/1.1\r\nHost: a.example\r\nConnection: close\r\n\r\n",
            400,
            "not an http URL",
        ),
        (
            "GET a.example:80 HTTP/1.1\r\nHost: a.example\r\nConnection: close\r\n\r\n",
            400,
            "authority form",
        ),
        (
            "GET * HTTP/1.1\r\nHost: a.example\r\nConnection: close\r\n\r\n",
            400,
            "Only OPTIONS",
        ),
        (
            "CONNECT 127.0.0.1:1 HTTP/1.1\r\nHost: 127.0.0.1:1\r\nConnection: close\r\n\r\n",
            501,
            "CONNECT",
        ),
    ] {
        let r = send_raw(s.proxy(), raw);
        assert_eq!(r.status, status, "{raw:?}: {}", r.text());
        assert!(r.text().contains(says), "{raw:?}: {}", r.text());
        assert!(r.header("ratelimit").is_none(), "no quota taken: {raw:?}");
    }
    assert!(
        up.heads.lock().expect("lock").is_empty(),
        "nothing reached the upstream"
    );
    // `Connection` cannot name Host away: the upstream still gets it.
    let r = send_raw(
        s.proxy(),
        "GET /h HTTP/1.1\r\nHost: h.example\r\nConnection: Host, close\r\n\r\n",
    );
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(r.text().contains("host: h.example\r\n"), "{}", r.text());
    // HTTP/1.0 may come without a Host: forwarded, with the upstream's.
    let r = send_raw(s.proxy(), "GET /old HTTP/1.0\r\n\r\n");
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(
        r.text().contains(&format!("host: {}", up.addr)),
        "{}",
        r.text()
    );
}

#[test]
fn an_absolute_form_target_is_the_host_keyed_and_sent() {
    let up = raw_upstream();
    let s = proxy_to(&up);
    let r = send_raw(
        s.proxy(),
        "GET http://a1.example/p HTTP/1.1\r\nHost: victim.example\r\nConnection: close\r\n\r\n",
    );
    assert_eq!(r.status, 200, "{}", r.text());
    let seen = r.text();
    assert!(seen.starts_with("GET /p HTTP/1.1\r\n"), "{seen}");
    assert!(seen.contains("host: a1.example\r\n"), "{seen}");
    assert!(!seen.contains("victim"), "{seen}");
    // The key was that host's: its bucket has one check.
    let rl = r.header("ratelimit").expect("RateLimit");
    assert!(rl.contains("r=99"), "{rl}");

    // `OPTIONS *` goes on in asterisk form; `Proxy` (httpoxy) does not.
    let r = send_raw(
        s.proxy(),
        "OPTIONS * HTTP/1.1\r\nHost: a.example\r\nProxy: http://evil:1\r\nConnection: close\r\n\r\n",
    );
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(
        r.text().starts_with("OPTIONS * HTTP/1.1\r\n"),
        "{}",
        r.text()
    );
    assert!(
        !r.text().to_ascii_lowercase().contains("proxy:"),
        "{}",
        r.text()
    );
}

#[test]
fn misbehaving_upstreams_are_bounded_and_reframed() {
    let up = raw_upstream();
    let s = proxy_to(&up);

    // A body that stops half-way: the client's connection is closed once
    // nothing came for response_timeout (500 ms), not left hanging.
    let mut c = connect(s.proxy());
    c.write_all(b"GET /hang HTTP/1.1\r\nHost: h.example\r\n\r\n")
        .expect("write");
    let started = Instant::now();
    let mut got = Vec::new();
    let _ = c.read_to_end(&mut got);
    let waited = started.elapsed();
    assert!(waited < Duration::from_secs(5), "waited {waited:?}");
    let text = String::from_utf8_lossy(&got);
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    assert!(text.ends_with("abc"), "only what came: {text:?}");

    // Content-Length beside Transfer-Encoding: the coding frames the body,
    // the stale length is not passed on.
    let r = send_raw(
        s.proxy(),
        "GET /clte HTTP/1.1\r\nHost: h.example\r\nConnection: close\r\n\r\n",
    );
    assert_eq!(r.status, 200);
    assert_eq!(r.body, b"hello");
    assert_ne!(r.header("content-length"), Some("3"));

    // An HTTP/1.0 upstream: the client still hears HTTP/1.1.
    let mut c = connect(s.proxy());
    c.write_all(b"GET /v10 HTTP/1.1\r\nHost: h.example\r\nConnection: close\r\n\r\n")
        .expect("write");
    let mut got = Vec::new();
    c.read_to_end(&mut got).expect("read");
    assert!(
        got.starts_with(b"HTTP/1.1 200 OK\r\n"),
        "{}",
        String::from_utf8_lossy(&got)
    );
    assert!(got.ends_with(b"ok"));

    // A 101 nobody asked for (Upgrade is not passed on) is a 502, with the
    // check's headers.
    let r = send_raw(
        s.proxy(),
        "GET /101 HTTP/1.1\r\nHost: h.example\r\nConnection: close\r\n\r\n",
    );
    assert_eq!(r.status, 502, "{}", r.text());
    assert!(r.header("ratelimit").is_some());
}
