//! The Envoy rate limit service's port as raw HTTP/2 sees it (the `h2`
//! client, hand-encoded protobuf): requests no generated client can build
//! (descriptor values that are not UTF-8), the per-connection limits the
//! server advertises, request bodies that never end, and what SIGTERM does
//! to streams still open.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use bytes::Bytes;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitResponse;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use h2::client::SendRequest;
use prost::Message as _;

use crate::support;
use crate::support::Tollgate;

const RLS: &str = "\
domain: rl
descriptors:
  - key: user
    rate_limit:
      unit: hour
      requests_per_unit: 1
  - key: path
    value: /admin
    rate_limit:
      unit: hour
      requests_per_unit: 1
  - key: path
    value: /api*
    rate_limit:
      unit: hour
      requests_per_unit: 1
";

/// The server's advertised stream limit, request size limit and request
/// body bound (`MAX_GRPC_STREAMS`, `MAX_GRPC_MESSAGE`, `GRPC_BODY_TIMEOUT`).
const STREAMS: usize = 256;
const MAX_MESSAGE: usize = 64 * 1024;
const BODY_TIMEOUT: Duration = Duration::from_secs(10);
/// How much later than [`BODY_TIMEOUT`] a body may be cut, the one
/// wall-clock bound of these tests (only the real clock shows a cut is not
/// late): room for a loaded machine's pauses, and still well short of the
/// 30 s drain time that would otherwise end a never-ending body.
const CUT_ROOM: Duration = Duration::from_secs(10);

const METHOD: &str = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit";

fn start() -> (Tollgate, tempfile::TempDir) {
    let dir = tempfile::tempdir().expect("tempdir");
    let yaml = dir.path().join("rls.yaml");
    std::fs::write(&yaml, RLS).expect("write yaml");
    let server = Tollgate::start(
        "[store]\nurl = \"memory\"\n\n[[rules]]\nname = \"http_rule\"\nalgorithm = \"gcra\"\nlimit = 1\nperiod = \"1s\"\n",
        &[
            "--http",
            "127.0.0.1:0",
            "--grpc",
            "127.0.0.1:0",
            "--envoy-config",
            yaml.to_str().expect("utf-8 path"),
        ],
    );
    (server, dir)
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
}

// --- protobuf by hand, so any bytes can go in any string field ------------

fn varint(mut n: usize, out: &mut Vec<u8>) {
    while n >= 0x80 {
        out.push(u8::try_from(n & 0x7f).unwrap_or(0) | 0x80);
        n >>= 7;
    }
    out.push(u8::try_from(n).unwrap_or(0));
}

/// A length-delimited field (wire type 2: strings, bytes and messages).
fn field(tag: u8, bytes: &[u8], out: &mut Vec<u8>) {
    out.push(tag << 3 | 2);
    varint(bytes.len(), out);
    out.extend_from_slice(bytes);
}

/// A `RateLimitRequest` of `domain` and descriptors of (key, value) bytes.
fn request(domain: &[u8], descriptors: &[&[(&[u8], &[u8])]]) -> Vec<u8> {
    let mut out = Vec::new();
    field(1, domain, &mut out);
    for entries in descriptors {
        let mut descriptor = Vec::new();
        for (key, value) in *entries {
            let mut entry = Vec::new();
            field(1, key, &mut entry);
            field(2, value, &mut entry);
            field(1, &entry, &mut descriptor);
        }
        field(2, &descriptor, &mut out);
    }
    out
}

/// A gRPC length-prefixed message.
fn grpc_frame(message: &[u8]) -> Bytes {
    let mut out = vec![0];
    out.extend_from_slice(&u32::try_from(message.len()).expect("small").to_be_bytes());
    out.extend_from_slice(message);
    Bytes::from(out)
}

// --- an HTTP/2 client ------------------------------------------------------

async fn h2_connect(addr: SocketAddr) -> SendRequest<Bytes> {
    let tcp = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let (client, conn) = h2::client::handshake(tcp).await.expect("handshake");
    tokio::spawn(async move {
        let _ = conn.await;
    });
    client
}

type Stream = (h2::client::ResponseFuture, h2::SendStream<Bytes>);

/// Opens a `ShouldRateLimit` stream: headers sent, the body left open.
async fn open(client: &mut SendRequest<Bytes>, addr: SocketAddr) -> Result<Stream, h2::Error> {
    open_with(client, addr, &[]).await
}

/// [`open`] with more request headers.
async fn open_with(
    client: &mut SendRequest<Bytes>,
    addr: SocketAddr,
    headers: &[(&str, &str)],
) -> Result<Stream, h2::Error> {
    let mut req = http::Request::builder()
        .method("POST")
        .uri(format!("http://{addr}{METHOD}"))
        .header("content-type", "application/grpc")
        .header("te", "trailers");
    for (name, value) in headers {
        req = req.header(*name, *value);
    }
    let req = req.body(()).expect("request");
    let mut ready = client.clone().ready().await?;
    let stream = ready.send_request(req, false)?;
    *client = ready;
    Ok(stream)
}

/// A call's outcome: the `grpc-status` and the decoded answer, if any.
#[derive(Debug)]
struct Answer {
    status: Option<String>,
    message: Option<String>,
    response: Option<RateLimitResponse>,
}

/// Reads a stream's answer to its end.
async fn answer(response: h2::client::ResponseFuture) -> Result<Answer, h2::Error> {
    let (parts, mut body) = response.await?.into_parts();
    let mut data = Vec::new();
    while let Some(chunk) = body.data().await {
        let chunk = chunk?;
        let _ = body.flow_control().release_capacity(chunk.len());
        data.extend_from_slice(&chunk);
    }
    let trailers = body.trailers().await?.unwrap_or_default();
    let header = |name: &str| {
        trailers
            .get(name)
            .or_else(|| parts.headers.get(name))
            .map(|v| v.to_str().unwrap_or("?").to_owned())
    };
    let response = (data.len() >= 5)
        .then(|| RateLimitResponse::decode(&data[5..]).expect("a RateLimitResponse"));
    Ok(Answer {
        status: header("grpc-status"),
        message: header("grpc-message"),
        response,
    })
}

/// One whole call with `message` as the request.
async fn call(client: &mut SendRequest<Bytes>, addr: SocketAddr, message: &[u8]) -> Answer {
    let (response, mut send) = open(client, addr).await.expect("open");
    send.send_data(grpc_frame(message), true).expect("send");
    answer(response).await.expect("answer")
}

/// The answer's overall code and each status's (code, remaining).
fn codes(a: &Answer) -> (Code, Vec<(Code, u32)>) {
    let r = a
        .response
        .as_ref()
        .unwrap_or_else(|| panic!("no answer: {a:?}"));
    let code = |c| Code::try_from(c).expect("a known code");
    (
        code(r.overall_code),
        r.statuses
            .iter()
            .map(|s| (code(s.code), s.limit_remaining))
            .collect(),
    )
}

#[test]
fn a_value_that_is_not_utf8_is_counted_and_the_other_limits_still_apply() {
    let (server, _dir) = start();
    let addr = server.grpc();
    runtime().block_on(async {
        let mut c = h2_connect(addr).await;
        let (ok, over) = (Code::Ok, Code::OverLimit);
        let user = |v: &'static [u8]| -> [(&'static [u8], &'static [u8]); 1] { [(b"user", v)] };

        // Counted under its own key: a limit of 1 admits it once.
        let a = call(&mut c, addr, &request(b"rl", &[&user(b"\xff\xfe")])).await;
        assert_eq!(codes(&a), (ok, vec![(ok, 0)]), "{a:?}");
        let a = call(&mut c, addr, &request(b"rl", &[&user(b"\xff\xfe")])).await;
        assert_eq!(codes(&a), (over, vec![(over, 0)]), "{a:?}");
        // The same counter on the HTTP API, under its escaped name.
        let r = support::post_json(
            server.api(),
            "/v1/check",
            r#"{"rule":"envoy.rl.user","key":"user=\\xff\\xfe","cost":0}"#,
        );
        assert!(r.text().contains("\"remaining\":0"), "{}", r.text());
        // Other bytes, and the valid strings it might be taken for (the
        // replacement characters, Latin-1, the escaped form), each count on
        // their own.
        for other in [
            &b"\xff\xfd"[..],
            "\u{fffd}\u{fffd}".as_bytes(),
            "\u{ff}\u{fe}".as_bytes(),
            br"\xff\xfe",
            b"\xff\xfe\xff",
        ] {
            let a = call(&mut c, addr, &request(b"rl", &[&[(b"user", other)]])).await;
            assert_eq!(codes(&a), (ok, vec![(ok, 0)]), "{other:?}: {a:?}");
        }

        // The other descriptors of the request still apply: /admin's one
        // call is used up, so a request with it and a fresh invalid value
        // is over, and (all-or-nothing) the fresh value is not consumed.
        let admin: [(&[u8], &[u8]); 1] = [(b"path", b"/admin")];
        let a = call(&mut c, addr, &request(b"rl", &[&admin])).await;
        assert_eq!(codes(&a), (ok, vec![(ok, 0)]), "{a:?}");
        let a = call(&mut c, addr, &request(b"rl", &[&user(b"\xc3"), &admin])).await;
        assert_eq!(codes(&a), (over, vec![(ok, 1), (over, 0)]), "{a:?}");
        let a = call(&mut c, addr, &request(b"rl", &[&user(b"\xc3")])).await;
        assert_eq!(codes(&a), (ok, vec![(ok, 0)]), "{a:?}");

        // A value can never equal a configured one, but a wildcard prefix
        // matches its bytes; a key that is not UTF-8 matches nothing.
        let api: [(&[u8], &[u8]); 1] = [(b"path", b"/api\xff")];
        let a = call(&mut c, addr, &request(b"rl", &[&api])).await;
        assert_eq!(codes(&a), (ok, vec![(ok, 0)]), "{a:?}");
        let a = call(&mut c, addr, &request(b"rl", &[&api])).await;
        assert_eq!(codes(&a), (over, vec![(over, 0)]), "{a:?}");
        let odd_key: [(&[u8], &[u8]); 1] = [(b"us\xffer", b"x")];
        let a = call(&mut c, addr, &request(b"rl", &[&odd_key, &user(b"\xfa")])).await;
        assert_eq!(codes(&a), (ok, vec![(ok, 0), (ok, 0)]), "{a:?}");

        // A domain that is not UTF-8 comes only from Envoy's own config:
        // refused, naming the problem.
        let a = call(&mut c, addr, &request(b"r\xffl", &[&user(b"x")])).await;
        assert_eq!(a.status.as_deref(), Some("3"), "{a:?}");
        assert!(
            a.message.as_deref().unwrap_or("").contains("domain"),
            "{a:?}"
        );
    });
}

/// A gRPC frame's first bytes: a length prefix claiming `len` bytes and
/// none of them.
fn prefix_only(len: usize) -> Bytes {
    let mut out = vec![0];
    out.extend_from_slice(&u32::try_from(len).expect("small").to_be_bytes());
    Bytes::from(out)
}

/// Waits up to `limit` for a stream's end, whatever it is: an answer, a
/// reset, a closed connection. `None` when it is still open.
async fn ended_within(
    response: h2::client::ResponseFuture,
    limit: Duration,
) -> Option<Result<Answer, h2::Error>> {
    tokio::time::timeout(limit, answer(response)).await.ok()
}

#[test]
fn the_grpc_port_advertises_a_stream_limit_and_denies_oversized_requests_unread() {
    let (server, _dir) = start();
    let addr = server.grpc();
    runtime().block_on(async {
        let mut c = h2_connect(addr).await;
        let user: [(&[u8], &[u8]); 1] = [(b"user", b"a")];
        let a = call(&mut c, addr, &request(b"rl", &[&user])).await;
        assert_eq!(a.status.as_deref(), Some("0"), "{a:?}");
        // The server's SETTINGS are in by the first answer.
        assert_eq!(c.current_max_send_streams(), STREAMS);

        // A request longer than the limit is answered on its length prefix,
        // without waiting for (or holding memory for) its bytes: OVER_LIMIT,
        // not an error (which Envoy would take as an admission).
        let (response, mut send) = open(&mut c, addr).await.expect("open");
        send.send_data(prefix_only(MAX_MESSAGE + 1), false)
            .expect("send");
        let a = ended_within(response, Duration::from_secs(2))
            .await
            .expect("answered at once")
            .expect("an answer");
        assert_eq!(a.status.as_deref(), Some("0"), "{a:?}");
        assert_eq!(codes(&a), (Code::OverLimit, vec![]), "{a:?}");
        // Sent whole, too.
        let long = vec![b'v'; MAX_MESSAGE];
        let a = call(&mut c, addr, &request(b"rl", &[&[(b"user", &long)]])).await;
        assert_eq!(codes(&a), (Code::OverLimit, vec![]), "{a:?}");

        // As many streams as advertised, each holding the most a stream
        // can make the server hold (a message one byte short of the
        // limit), and the connection still serves.
        let rss_before = server.peak_rss_kib();
        let mut held = Vec::new();
        let mut almost = prefix_only(MAX_MESSAGE).to_vec();
        almost.resize(5 + MAX_MESSAGE - 1, b'v');
        let almost = Bytes::from(almost);
        for _ in 0..STREAMS - 1 {
            let (response, mut send) = open(&mut c, addr).await.expect("open");
            send.send_data(almost.clone(), false).expect("send");
            held.push((response, send));
        }
        // A call behind all those bytes is still answered.
        let a = call(&mut c, addr, &request(b"rl", &[&user])).await;
        assert_eq!(a.status.as_deref(), Some("0"), "{a:?}");
        let grown = server.peak_rss_kib().saturating_sub(rss_before);
        // 255 streams x 64 KiB of message is about 16 MiB, plus HTTP/2's
        // own buffers.
        assert!(grown < 40 * 1024, "{grown} KiB for {STREAMS} streams");
        eprintln!("{STREAMS} streams of {MAX_MESSAGE} bytes less one: RSS +{grown} KiB");
        drop(held);
    });
}

#[test]
fn a_request_body_that_never_ends_is_cut_at_the_body_bound() {
    let (server, _dir) = start();
    let addr = server.grpc();
    runtime().block_on(async {
        let mut c = h2_connect(addr).await;
        let started = Instant::now();
        // Headers only; headers and part of a message.
        let (headers_only, _keep_a) = open(&mut c, addr).await.expect("open");
        let (partial, mut send) = open(&mut c, addr).await.expect("open");
        send.send_data(prefix_only(100), false).expect("send");
        let _keep_b = send;
        for response in [headers_only, partial] {
            let left = (BODY_TIMEOUT + CUT_ROOM).saturating_sub(started.elapsed());
            let end = ended_within(response, left).await;
            let took = started.elapsed();
            let end = end.unwrap_or_else(|| panic!("still open after {took:?}"));
            assert!(
                took >= BODY_TIMEOUT - Duration::from_millis(500),
                "{took:?}: {end:?}"
            );
            if let Ok(a) = &end {
                assert_eq!(a.status.as_deref(), Some("4"), "DEADLINE_EXCEEDED: {a:?}");
            }
        }
        // The connection still serves.
        let user: [(&[u8], &[u8]); 1] = [(b"user", b"b")];
        let a = call(&mut c, addr, &request(b"rl", &[&user])).await;
        assert_eq!(a.status.as_deref(), Some("0"), "{a:?}");
    });
}

/// SIGTERM: GOAWAY at once and no new connections; a request already on
/// its way is answered; a body that never ends is cut at its body bound,
/// not at the signal and not 30 s later; then the process exits 0.
#[test]
fn sigterm_answers_what_arrives_and_cuts_what_never_does_at_the_body_bound() {
    let (mut server, _dir) = start();
    let addr = server.grpc();
    let rt = runtime();
    let mut c = rt.block_on(h2_connect(addr));
    let started = Instant::now();
    let mut stuck = Vec::new();
    for _ in 0..20 {
        let (response, mut send) = rt.block_on(open(&mut c, addr)).expect("open");
        send.send_data(prefix_only(100), false).expect("send");
        stuck.push((response, send));
    }
    let user: [(&[u8], &[u8]); 1] = [(b"user", b"c")];
    let whole = grpc_frame(&request(b"rl", &[&user]));
    let (late, mut late_send) = rt.block_on(open(&mut c, addr)).expect("open");
    late_send.send_data(whole.slice(..4), false).expect("send");
    // Every stream above has reached the server before the signal: a call
    // on the same connection, opened after them, is answered (the server
    // reads a connection's frames in order). Made sure of, not slept on.
    let probe: [(&[u8], &[u8]); 1] = [(b"user", b"probe")];
    let a = rt.block_on(call(&mut c, addr, &request(b"rl", &[&probe])));
    assert_eq!(a.status.as_deref(), Some("0"), "{a:?}");

    server.signal("TERM");
    let signalled = Instant::now();
    // No new connection once the signal is taken: waited for, in
    // `block_on` (the client's connection task runs only there).
    rt.block_on(async {
        while std::net::TcpStream::connect(addr).is_ok() {
            assert!(
                signalled.elapsed() < Duration::from_secs(30),
                "a new connection 30 s after SIGTERM"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    });
    // No new stream on this one once its GOAWAY is in. HTTP/2 shuts down
    // in two steps (a GOAWAY, a PING, then the GOAWAY naming the last
    // stream): a stream opened before the second may still be answered,
    // and how soon it comes is the machine's pace, so it is waited for;
    // one opened after it is refused.
    let refused = rt.block_on(async {
        loop {
            let Ok((response, mut send)) = open(&mut c, addr).await else {
                return Ok(());
            };
            send.send_data(whole.clone(), true).expect("send");
            match ended_within(response, Duration::from_secs(30)).await {
                Some(Err(_)) => return Ok(()),
                Some(Ok(_)) if signalled.elapsed() < Duration::from_secs(30) => {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                other => return Err(format!("{other:?}")),
            }
        }
    });
    assert_eq!(
        refused,
        Ok(()),
        "a new stream after GOAWAY: {}",
        server.log()
    );
    // The rest of a request already on its way: answered.
    late_send.send_data(whole.slice(4..), true).expect("send");
    let a = rt
        .block_on(ended_within(late, Duration::from_secs(30)))
        .expect("answered while draining")
        .expect("an answer");
    assert_eq!(a.status.as_deref(), Some("0"), "{a:?}");
    assert!(
        server.wait_exit(Duration::ZERO).is_none(),
        "exited with streams open"
    );
    // The bodies that never end: cut at their bound.
    for (response, _send) in stuck {
        let left = (BODY_TIMEOUT + CUT_ROOM).saturating_sub(started.elapsed());
        let end = rt.block_on(ended_within(response, left));
        let took = started.elapsed();
        assert!(end.is_some(), "still open {took:?} after it started");
        assert!(
            took >= BODY_TIMEOUT - Duration::from_millis(500),
            "cut {:?} after SIGTERM: {end:?}",
            signalled.elapsed()
        );
    }
    // Exits once they are cut: within 10 s, room for a loaded machine,
    // where waiting out the 30 s drain time would not be.
    let status = server
        .wait_exit(Duration::from_secs(10))
        .unwrap_or_else(|| panic!("still running; log:\n{}", server.log()));
    assert!(status.success(), "{status:?}");
}

#[test]
fn a_call_carrying_a_clients_long_trace_headers_is_decided() {
    // Envoy propagates the client's tracing context into its call, and a
    // client may send up to 60 KiB of headers through a default Envoy: a
    // call that long must be decided, not refused by HTTP/2 (a 431, which
    // Envoy takes as a failure and, by default, as an admission).
    let (server, _dir) = start();
    let addr = server.grpc();
    runtime().block_on(async {
        let mut c = h2_connect(addr).await;
        let tracestate = format!("k={}", "v".repeat(59 * 1024));
        let traceparent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
        let headers = [
            ("traceparent", traceparent),
            ("tracestate", tracestate.as_str()),
        ];
        let user: [(&[u8], &[u8]); 1] = [(b"user", b"traced")];
        for want in [Code::Ok, Code::OverLimit] {
            let (response, mut send) = open_with(&mut c, addr, &headers).await.expect("open");
            send.send_data(grpc_frame(&request(b"rl", &[&user])), true)
                .expect("send");
            let a = answer(response).await.expect("an answer, not a refusal");
            assert_eq!(codes(&a), (want, vec![(want, 0)]), "{a:?}");
        }
    });
}
