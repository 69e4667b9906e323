//! The reverse proxy at the edges of HTTP: requests it must refuse before
//! any check (`CONNECT`, an ambiguous or missing `Host`), the host of an
//! absolute-form request, `OPTIONS *`, and upstreams that misbehave (a
//! body that stops half-way, `Content-Length` beside `Transfer-Encoding`,
//! an HTTP/1.0 status line, an unasked `101`); and request bodies and
//! pooled connections: an upload that outlasts the response timeout while
//! it moves, a `GET` with a chunked body, a malformed client body (the
//! client's fault, not the upstream's), a pooled connection the upstream
//! closes as a request arrives (a bodiless idempotent request goes once
//! more; a `POST` never does), and an upstream's own RateLimit fields. The
//! upstreams here are raw TCP, so they can send what a well-behaved server
//! would not and close exactly when a test says.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::support::{self, Resp, Tollgate, connect, half_closed, parse_response, start_upstream};

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
                    // `Connection: close` like every answer here that
                    // has no other way to say the connection ends: an
                    // answer that looks kept alive is pooled, and the
                    // next request may go out on it just as this thread
                    // closes it (a 502, under load).
                    "/clte" => b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n5\r\nhello\r\n0\r\n\r\n".to_vec(),
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

/// `tollgate serve --proxy` in front of the upstream at `upstream`, with
/// `more` flags.
fn proxy_to(upstream: SocketAddr, more: &[&str]) -> Tollgate {
    let upstream = format!("http://{upstream}");
    let mut args = vec!["--proxy", "127.0.0.1:0", "--upstream", upstream.as_str()];
    args.extend_from_slice(more);
    Tollgate::start(CONFIG, &args)
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
    let s = proxy_to(up.addr, &[]);
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
    let s = proxy_to(up.addr, &[]);
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
    let s = proxy_to(up.addr, &[]);

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

/// A keep-alive upstream: reads each request with its body (by
/// `Content-Length` or chunked) and answers `<method> <target> <body>`,
/// except `/close-second`, which on the second request of a connection is
/// read and then left unanswered (the connection closed), and `/rl`, which
/// answers with RateLimit fields of its own. Keeps `(connection number,
/// request line)` of every request read.
struct KeepAliveUpstream {
    addr: SocketAddr,
    seen: Arc<Mutex<Vec<(usize, String)>>>,
}

fn keepalive_upstream() -> KeepAliveUpstream {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr");
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = Arc::clone(&seen);
    std::thread::spawn(move || {
        for (n, conn) in listener.incoming().enumerate() {
            let Ok(conn) = conn else { continue };
            let log = Arc::clone(&log);
            std::thread::spawn(move || serve_keepalive(n, conn, &log));
        }
    });
    KeepAliveUpstream { addr, seen }
}

fn serve_keepalive(n: usize, mut conn: TcpStream, log: &Mutex<Vec<(usize, String)>>) {
    let mut reader = BufReader::new(conn.try_clone().expect("clone"));
    for nth in 1.. {
        let Some((line, headers)) = read_head(&mut reader) else {
            return;
        };
        let body = read_body(&mut reader, &headers);
        log.lock().expect("lock").push((n, line.clone()));
        let mut parts = line.split(' ');
        let (method, target) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
        if target == "/close-second" && nth == 2 {
            return;
        }
        let extra = if target == "/rl" {
            "RateLimit-Policy: \"up\";q=5;w=1\r\nRateLimit: \"up\";r=4;t=1\r\n"
        } else {
            ""
        };
        let text = format!("{method} {target} {}", String::from_utf8_lossy(&body));
        let answer = format!(
            "HTTP/1.1 200 OK\r\n{extra}Content-Length: {}\r\n\r\n{text}",
            text.len()
        );
        if conn.write_all(answer.as_bytes()).is_err() {
            return;
        }
    }
}

/// A request line and its header fields (names lowercase).
fn read_head(reader: &mut impl BufRead) -> Option<(String, Vec<(String, String)>)> {
    let mut line = String::new();
    if reader.read_line(&mut line).ok()? == 0 {
        return None;
    }
    let mut headers = Vec::new();
    loop {
        let mut h = String::new();
        if reader.read_line(&mut h).ok()? == 0 {
            return None;
        }
        if h == "\r\n" {
            break;
        }
        let (k, v) = h.split_once(':')?;
        headers.push((k.trim().to_ascii_lowercase(), v.trim().to_owned()));
    }
    Some((line.trim_end().to_owned(), headers))
}

fn read_body(reader: &mut impl BufRead, headers: &[(String, String)]) -> Vec<u8> {
    let field = |name: &str| headers.iter().find(|(k, _)| k == name).map(|(_, v)| v);
    let mut body = Vec::new();
    if field("transfer-encoding").is_some_and(|v| v.contains("chunked")) {
        loop {
            let mut size = String::new();
            reader.read_line(&mut size).expect("chunk size");
            let size = usize::from_str_radix(size.trim(), 16).expect("hex size");
            let mut chunk = vec![0; size + 2];
            reader.read_exact(&mut chunk).expect("chunk");
            body.extend_from_slice(&chunk[..size]);
            if size == 0 {
                return body;
            }
        }
    }
    if let Some(len) = field("content-length") {
        body.resize(len.parse().expect("length"), 0);
        reader.read_exact(&mut body).expect("body");
    }
    body
}

/// Reads one response (with a `Content-Length` body) from `c`.
fn read_response(c: &mut TcpStream) -> Resp {
    let mut raw = Vec::new();
    let mut byte = [0u8];
    while !raw.ends_with(b"\r\n\r\n") {
        c.read_exact(&mut byte).expect("head");
        raw.push(byte[0]);
    }
    let head = parse_response(&raw);
    let len: usize = head
        .header("content-length")
        .map_or(0, |v| v.parse().expect("length"));
    let mut body = vec![0; len];
    c.read_exact(&mut body).expect("body");
    raw.extend_from_slice(&body);
    parse_response(&raw)
}

#[test]
fn an_upload_that_moves_outlasts_the_response_timeout() {
    let up = keepalive_upstream();
    // A response timeout of 2 s: the upload's gaps of 150 ms stay far
    // under it even when a loaded machine stretches one by a second or
    // more (with 500 ms, a pause of 350 ms cut the upload).
    let config = CONFIG.replace("response_timeout = \"500ms\"", "response_timeout = \"2s\"");
    let upstream = format!("http://{}", up.addr);
    let s = Tollgate::start(
        &config,
        &["--proxy", "127.0.0.1:0", "--upstream", upstream.as_str()],
    );
    // Twenty bytes over at least 3 s, one and a half response timeouts.
    let mut c = connect(s.proxy());
    c.write_all(b"POST /up HTTP/1.1\r\nHost: h\r\nContent-Length: 20\r\n\r\n")
        .expect("head");
    for b in b"01234567890123456789" {
        std::thread::sleep(Duration::from_millis(150));
        c.write_all(&[*b]).expect("byte");
    }
    let r = read_response(&mut c);
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.text(), "POST /up 01234567890123456789");

    // A GET with a chunked body keeps its body.
    c.write_all(
        b"GET /g HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
    )
    .expect("chunked GET");
    let r = read_response(&mut c);
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.text(), "GET /g abc");
}

#[test]
fn a_malformed_client_body_is_the_clients_fault() {
    let up = keepalive_upstream();
    let s = proxy_to(up.addr, &["--http", "127.0.0.1:0"]);
    let mut c = connect(s.proxy());
    c.write_all(
        b"POST /c HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\nZZ\r\n",
    )
    .expect("write");
    let mut raw = Vec::new();
    let _ = c.read_to_end(&mut raw);
    let r = parse_response(&raw);
    assert_eq!(r.status, 400, "{}", r.text());
    assert!(r.text().contains("could not be read"), "{}", r.text());
    let metrics = support::get(s.api(), "/metrics").text();
    assert!(
        !metrics
            .lines()
            .any(|l| l.starts_with("tollgate_upstream_errors_total") && !l.ends_with(" 0")),
        "{metrics}"
    );
}

#[test]
fn a_pooled_connection_closed_under_a_request_is_retried_only_when_safe() {
    let up = keepalive_upstream();
    let s = proxy_to(up.addr, &[]);
    let mut c = connect(s.proxy());
    // The first request opens upstream connection 0; the second reuses it
    // after 150 ms idle (long enough for an upstream to close it as idle),
    // and the upstream closes it unanswered: a GET goes again, on a new one.
    for i in 0..2 {
        if i > 0 {
            std::thread::sleep(Duration::from_millis(150));
        }
        c.write_all(b"GET /close-second HTTP/1.1\r\nHost: h\r\n\r\n")
            .expect("write");
        let r = read_response(&mut c);
        assert_eq!(r.status, 200, "{}", r.text());
        assert_eq!(r.text(), "GET /close-second ");
    }
    let conns: Vec<usize> = up
        .seen
        .lock()
        .expect("lock")
        .iter()
        .map(|(n, _)| *n)
        .collect();
    assert_eq!(
        conns,
        [0, 0, 1],
        "the second GET was sent twice, the second time on a new connection"
    );

    // A POST in the same spot may have been acted on: a 502, not sent again.
    std::thread::sleep(Duration::from_millis(150));
    c.write_all(b"POST /close-second HTTP/1.1\r\nHost: h\r\nContent-Length: 1\r\n\r\nx")
        .expect("write");
    let r = read_response(&mut c);
    assert_eq!(r.status, 502, "{}", r.text());
    let posts = up
        .seen
        .lock()
        .expect("lock")
        .iter()
        .filter(|(_, line)| line.starts_with("POST"))
        .count();
    assert_eq!(posts, 1);
}

#[test]
fn an_upstreams_own_ratelimit_fields_are_kept_and_ours_added() {
    let up = keepalive_upstream();
    let s = proxy_to(up.addr, &[]);
    let mut c = connect(s.proxy());
    c.write_all(b"GET /rl HTTP/1.1\r\nHost: h\r\n\r\n")
        .expect("write");
    let r = read_response(&mut c);
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(
        r.headers_named("ratelimit-policy"),
        ["\"up\";q=5;w=1", "\"per_host\";q=100;w=3600"]
    );
    let rl = r.headers_named("ratelimit");
    assert_eq!(rl.len(), 2, "{rl:?}");
    assert_eq!(rl[0], "\"up\";r=4;t=1");
    // (A fixed window ends on the hour: `t` is what is left of it.)
    assert!(rl[1].starts_with("\"per_host\";r=99;t="), "{rl:?}");
}

#[test]
fn a_client_that_stops_sending_after_its_request_is_answered() {
    // HTTP/1.0 clients, `curl -T` and many load balancers' health checks
    // shut down their sending side once the request is out; the answer
    // must still come (it never did: hyper closed at the read side's end).
    let upstream = start_upstream();
    let s = proxy_to(upstream.addr, &[]);
    for version in ["HTTP/1.0", "HTTP/1.1"] {
        for i in 0..10 {
            let raw = format!("GET /n{i} {version}\r\nHost: a.test\r\n\r\n");
            let r = half_closed(s.proxy(), raw.as_bytes());
            assert_eq!((version, i, r.status), (version, i, 200), "{}", r.text());
            assert_eq!(r.header("x-upstream"), Some("yes"), "{version} #{i}");
        }
    }
    let body = b"twelve bytes";
    let raw = format!(
        "POST /echo HTTP/1.1\r\nHost: a.test\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    let mut raw = raw.into_bytes();
    raw.extend_from_slice(body);
    let r = half_closed(s.proxy(), &raw);
    assert_eq!(r.status, 200);
    assert_eq!(r.body, body);
}

#[test]
fn a_client_that_stops_reading_is_closed_after_the_send_timeout() {
    // An upstream that sends 100 MB as fast as the proxy takes it and says
    // when the proxy stops taking it (the proxy closed its side).
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let upstream = listener.local_addr().expect("addr");
    let (closed_tx, closed_rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let Ok((mut conn, _)) = listener.accept() else {
            return;
        };
        let mut reader = BufReader::new(conn.try_clone().expect("clone"));
        let _ = read_head(&mut reader);
        let _ = conn.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 100000000\r\n\r\n");
        let chunk = vec![b'x'; 64 * 1024];
        let mut sent = 0usize;
        while sent < 100_000_000 {
            match conn.write(&chunk) {
                Ok(n) => sent += n,
                Err(_) => break,
            }
        }
        let _ = closed_tx.send((Instant::now(), sent));
    });
    let config = CONFIG.replace(
        "response_timeout = \"500ms\"",
        "response_timeout = \"500ms\"\nsend_timeout = \"500ms\"",
    );
    let upstream = format!("http://{upstream}");
    let s = Tollgate::start(
        &config,
        &["--proxy", "127.0.0.1:0", "--upstream", upstream.as_str()],
    );
    let mut c = connect(s.proxy());
    c.write_all(b"GET /big HTTP/1.1\r\nHost: a.test\r\n\r\n")
        .expect("write");
    let mut first = [0u8; 4096];
    let n = c.read(&mut first).expect("read the head");
    assert!(first[..n].starts_with(b"HTTP/1.1 200"), "{:?}", &first[..n]);
    let stopped_reading = Instant::now();
    // The buffers between the two fill, then the proxy must close both
    // sides within one to two send timeouts.
    let (closed_at, sent) = closed_rx
        .recv_timeout(Duration::from_secs(10))
        .expect("the proxy still holds the upstream 10 s after its client stopped reading");
    assert!(sent < 100_000_000, "sent {sent}");
    assert!(
        closed_at - stopped_reading < Duration::from_secs(5),
        "closed {:?} after the client stopped reading",
        closed_at - stopped_reading
    );
    // The client's side is closed too: reading ends well short of 100 MB.
    let mut rest = Vec::new();
    let _ = c.read_to_end(&mut rest);
    assert!(n + rest.len() < 100_000_000, "got {}", n + rest.len());
}

#[test]
fn a_slow_steady_reader_is_not_cut_by_the_send_timeout() {
    let upstream = start_upstream();
    // A send timeout of 2 s, read past for 4 s: the reader's gaps of 20 ms
    // stay far under it even when a loaded machine stretches one by a
    // second or more.
    let config = CONFIG.replace(
        "response_timeout = \"500ms\"",
        "response_timeout = \"500ms\"\nsend_timeout = \"2s\"",
    );
    let addr = format!("http://{}", upstream.addr);
    let s = Tollgate::start(
        &config,
        &["--proxy", "127.0.0.1:0", "--upstream", addr.as_str()],
    );
    let mut c = connect(s.proxy());
    c.write_all(b"GET /big?n=20000000 HTTP/1.1\r\nHost: a.test\r\nConnection: close\r\n\r\n")
        .expect("write");
    // 64 KiB every 20 ms for 4 s: far slower than the proxy could send, so
    // its writes wait on the client again and again, but the client keeps
    // taking what it is sent and is never cut.
    let mut raw = Vec::new();
    let mut piece = vec![0u8; 64 * 1024];
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(4) {
        let n = c.read(&mut piece).expect("read while slow");
        assert!(n > 0, "closed after {:?}", start.elapsed());
        raw.extend_from_slice(&piece[..n]);
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        raw.len() < 20_000_000,
        "the reader was not slow: {}",
        raw.len()
    );
    c.read_to_end(&mut raw).expect("read the rest");
    let r = parse_response(&raw);
    assert_eq!(r.status, 200);
    assert_eq!(r.body.len(), 20_000_000);
}
