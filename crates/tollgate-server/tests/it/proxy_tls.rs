//! The reverse proxy over TLS and HTTP/2: `https://` upstreams verified
//! against a test CA (`ca_file`, `server_name`), a client certificate for
//! an upstream that requires one, a wrong CA refused with a 502 saying
//! why, HTTP/2 to the upstream when its ALPN picks it and HTTP/1.1 when it
//! offers only that, one upstream connection reused, HTTP/2 clients (h2c
//! and over `[proxy.listen_tls]`), and a server-sent event stream passed on
//! event by event.

use std::io::{Read as _, Write as _};

use bytes::Bytes;
use http_body_util::{BodyExt as _, Empty};
use hyper_util::rt::{TokioExecutor, TokioIo};

use crate::support::eg_certs::EgCerts;
use crate::support::tls_upstream::{TlsUpstream, client_config, server_config, start_tls_upstream};
use crate::support::{Tollgate, connect, request};

const H2_AND_H1: &[&[u8]] = &[b"h2", b"http/1.1"];
const H1_ONLY: &[&[u8]] = &[b"http/1.1"];

/// The test CA's server certificate is for `envoy-gateway`; the upstream
/// listens on 127.0.0.1, so `server_name` names it.
fn upstream_tls(certs: &EgCerts, extra: &str) -> String {
    format!(
        "[proxy.upstream_tls]\nca_file = {:?}\nserver_name = \"envoy-gateway\"\nroots = \"none\"\n{extra}\n",
        certs.ca()
    )
}

const RULE: &str =
    "[[rules]]\nname = \"per_ip\"\nalgorithm = \"fixed_window\"\nlimit = 1000\nperiod = \"1h\"\n";

fn proxy(up: &TlsUpstream, tables: &str) -> Tollgate {
    let upstream = format!("https://{}", up.addr);
    Tollgate::start(
        &format!("{tables}\n{RULE}"),
        &["--proxy", "127.0.0.1:0", "--upstream", &upstream],
    )
}

fn upstream(certs: &EgCerts, alpn: &[&[u8]]) -> TlsUpstream {
    start_tls_upstream(server_config(
        &certs.cert("envoy-gateway"),
        &certs.key("envoy-gateway"),
        None,
        alpn,
    ))
}

#[test]
fn an_https_upstream_speaks_h2_when_alpn_picks_it_on_one_connection() {
    let certs = EgCerts::generate();
    let up = upstream(&certs, H2_AND_H1);
    let s = proxy(&up, &upstream_tls(&certs, ""));
    for _ in 0..3 {
        let r = request(s.proxy(), "GET", "/version", &[], b"");
        assert_eq!(r.status, 200, "{}", r.text());
        assert_eq!(r.text(), "HTTP/2.0", "the upstream saw HTTP/2");
    }
    assert_eq!(up.accepted(), 1, "one HTTP/2 connection serves them all");
    // The host goes as `:authority` alone: a `Host` field beside it is
    // refused by servers (nginx: "client sent duplicate host header").
    let r = request(s.proxy(), "GET", "/host", &[], b"");
    assert_eq!(r.text(), format!("host=- authority={}", up.addr));
}

#[test]
fn an_upstream_offering_only_http1_gets_http1_on_a_reused_connection() {
    let certs = EgCerts::generate();
    let up = upstream(&certs, H1_ONLY);
    let s = proxy(&up, &upstream_tls(&certs, ""));
    for _ in 0..3 {
        let r = request(s.proxy(), "GET", "/version", &[], b"");
        assert_eq!(r.status, 200, "{}", r.text());
        assert_eq!(r.text(), "HTTP/1.1");
    }
    assert_eq!(up.accepted(), 1, "the idle connection is reused");
    let r = request(s.proxy(), "GET", "/host", &[], b"");
    assert_eq!(r.text(), format!("host={} authority=-", up.addr));
    // `http2 = false` offers HTTP/1.1 alone, to an upstream that has h2.
    let up = upstream(&certs, H2_AND_H1);
    let s = proxy(&up, &upstream_tls(&certs, "http2 = false"));
    let r = request(s.proxy(), "GET", "/version", &[], b"");
    assert_eq!((r.status, r.text().as_str()), (200, "HTTP/1.1"));
}

#[test]
fn an_upstream_requiring_a_client_certificate_gets_cert_file() {
    let certs = EgCerts::generate();
    let up = start_tls_upstream(server_config(
        &certs.cert("envoy-gateway"),
        &certs.key("envoy-gateway"),
        Some(&certs.ca()),
        H2_AND_H1,
    ));
    let without = proxy(&up, &upstream_tls(&certs, ""));
    let r = request(without.proxy(), "GET", "/version", &[], b"");
    assert_eq!(r.status, 502, "no client certificate: {}", r.text());
    assert!(r.text().contains("could not be reached"), "{}", r.text());
    let client = format!(
        "cert_file = {:?}\nkey_file = {:?}",
        certs.cert("envoy"),
        certs.key("envoy")
    );
    let with = proxy(&up, &upstream_tls(&certs, &client));
    let r = request(with.proxy(), "GET", "/version", &[], b"");
    assert_eq!((r.status, r.text().as_str()), (200, "HTTP/2.0"));
}

#[test]
fn an_upstream_of_another_ca_is_a_502_that_says_why() {
    let certs = EgCerts::generate();
    let other = EgCerts::generate();
    let up = upstream(&certs, H2_AND_H1);
    let s = proxy(&up, &upstream_tls(&other, ""));
    let r = request(s.proxy(), "GET", "/version", &[], b"");
    assert_eq!(r.status, 502, "{}", r.text());
    let text = r.text();
    assert!(text.contains("could not be reached"), "{text}");
    assert!(text.contains("TLS handshake"), "{text}");
    assert!(text.contains("certificate"), "{text}");
    assert_eq!(up.accepted(), 1);
}

/// Reads from `s` until `want` has come; what came, for the next wait.
fn read_until(s: &mut std::net::TcpStream, seen: &mut Vec<u8>, want: &str) {
    let mut buf = [0u8; 4096];
    while !String::from_utf8_lossy(seen).contains(want) {
        let n = s.read(&mut buf).expect("read");
        assert!(
            n > 0,
            "ended before {want:?}: {}",
            String::from_utf8_lossy(seen)
        );
        seen.extend_from_slice(&buf[..n]);
    }
}

#[test]
fn server_sent_events_pass_one_by_one() {
    let certs = EgCerts::generate();
    let up = upstream(&certs, H2_AND_H1);
    let s = proxy(&up, &upstream_tls(&certs, ""));
    let mut c = connect(s.proxy());
    write!(
        c,
        "GET /sse HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    .expect("write");
    let mut seen = Vec::new();
    // The upstream sends `two` only once released, and is released only
    // once `one` has reached the client: `one` came through alone.
    read_until(&mut c, &mut seen, "data: one");
    assert!(!String::from_utf8_lossy(&seen).contains("data: two"));
    up.release();
    read_until(&mut c, &mut seen, "data: two");
    let text = String::from_utf8_lossy(&seen);
    assert!(text.contains("text/event-stream"), "{text}");
}

/// `GET path` over HTTP/2 on `io`: the response's version, and its body.
async fn h2_get<I>(io: I, authority: &str, path: &str) -> (http::Version, String)
where
    I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (mut send, conn) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(io))
            .await
            .expect("h2 handshake");
    tokio::spawn(conn);
    let req = http::Request::get(format!("http://{authority}{path}"))
        .body(Empty::<Bytes>::new())
        .expect("request");
    let res = send.send_request(req).await.expect("response");
    let version = res.version();
    let body = res.into_body().collect().await.expect("body").to_bytes();
    (version, String::from_utf8_lossy(&body).into_owned())
}

#[test]
fn clients_speak_http2_with_prior_knowledge_and_over_tls() {
    let certs = EgCerts::generate();
    let up = upstream(&certs, H1_ONLY);
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    // h2c on the plain listener; the upstream is spoken to in HTTP/1.1.
    let plain = proxy(&up, &upstream_tls(&certs, ""));
    let addr = plain.proxy();
    let (version, body) = rt.block_on(async {
        let tcp = tokio::net::TcpStream::connect(addr).await.expect("connect");
        h2_get(tcp, &addr.to_string(), "/version").await
    });
    assert_eq!(
        (version, body.as_str()),
        (http::Version::HTTP_2, "HTTP/1.1")
    );
    // HTTP/1.1 on the same listener still works.
    let r = request(addr, "GET", "/version", &[], b"");
    assert_eq!((r.status, r.text().as_str()), (200, "HTTP/1.1"));

    // Over TLS, ALPN h2.
    let listen = format!(
        "[proxy.listen_tls]\ncert_file = {:?}\nkey_file = {:?}\n",
        certs.cert("envoy-gateway"),
        certs.key("envoy-gateway")
    );
    let tls = proxy(&up, &format!("{listen}{}", upstream_tls(&certs, "")));
    let addr = tls.proxy();
    let ca = certs.ca();
    let (version, body) = rt.block_on(async {
        let tcp = tokio::net::TcpStream::connect(addr).await.expect("connect");
        let connector = tokio_rustls::TlsConnector::from(client_config(&ca, H2_AND_H1));
        let name = rustls_pki_types::ServerName::try_from("envoy-gateway").expect("name");
        let tls = connector
            .connect(name, tcp)
            .await
            .expect("TLS to the proxy");
        assert_eq!(tls.get_ref().1.alpn_protocol(), Some(&b"h2"[..]));
        h2_get(tls, "envoy-gateway", "/version").await
    });
    assert_eq!(
        (version, body.as_str()),
        (http::Version::HTTP_2, "HTTP/1.1")
    );
    // And HTTP/1.1 over TLS when the client offers only that.
    let body = rt.block_on(async {
        let tcp = tokio::net::TcpStream::connect(addr).await.expect("connect");
        let connector = tokio_rustls::TlsConnector::from(client_config(&ca, H1_ONLY));
        let name = rustls_pki_types::ServerName::try_from("envoy-gateway").expect("name");
        let mut tls = connector
            .connect(name, tcp)
            .await
            .expect("TLS to the proxy");
        use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
        tls.write_all(b"GET /version HTTP/1.1\r\nHost: envoy-gateway\r\nConnection: close\r\n\r\n")
            .await
            .expect("write");
        let mut out = Vec::new();
        let _ = tls.read_to_end(&mut out).await;
        String::from_utf8_lossy(&out).into_owned()
    });
    assert!(body.starts_with("HTTP/1.1 200"), "{body}");
}

#[test]
fn an_h2_upstream_that_stalls_is_a_504_or_a_cut_body() {
    let certs = EgCerts::generate();
    let up = upstream(&certs, H2_AND_H1);
    let tables = format!(
        "[proxy]\nresponse_timeout = \"300ms\"\n{}",
        upstream_tls(&certs, "")
    );
    let s = proxy(&up, &tables);
    let r = request(s.proxy(), "GET", "/hang", &[], b"");
    assert_eq!(r.status, 504, "{}", r.text());
    // A body that stops half-way is cut: the first event, then the end of
    // the connection without the last chunk.
    let mut c = connect(s.proxy());
    write!(
        c,
        "GET /sse HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    .expect("write");
    let mut seen = Vec::new();
    let _ = c.read_to_end(&mut seen);
    let text = String::from_utf8_lossy(&seen);
    assert!(text.contains("data: one"), "{text}");
    assert!(!text.contains("data: two"), "{text}");
    assert!(
        !text.ends_with("0\r\n\r\n"),
        "not ended as complete: {text}"
    );
    // The connection was kept for the next request all the same.
    let r = request(s.proxy(), "GET", "/version", &[], b"");
    assert_eq!((r.status, r.text().as_str()), (200, "HTTP/2.0"));
    assert_eq!(up.accepted(), 1);
}

#[test]
fn server_sent_events_pass_one_by_one_to_an_http2_client() {
    let certs = EgCerts::generate();
    let up = upstream(&certs, H2_AND_H1);
    let s = proxy(&up, &upstream_tls(&certs, ""));
    let addr = s.proxy();
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    rt.block_on(async {
        let tcp = tokio::net::TcpStream::connect(addr).await.expect("connect");
        let (mut send, conn) =
            hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(tcp))
                .await
                .expect("h2c handshake");
        tokio::spawn(conn);
        let req = http::Request::get(format!("http://{addr}/sse"))
            .body(Empty::<Bytes>::new())
            .expect("request");
        let res = send.send_request(req).await.expect("response");
        assert_eq!(res.version(), http::Version::HTTP_2);
        let mut body = res.into_body();
        let mut seen = String::new();
        // As over HTTP/1.1: `two` is released only once `one` is here.
        let mut released = false;
        while let Some(frame) = body.frame().await {
            let frame = frame.expect("frame");
            if let Some(data) = frame.data_ref() {
                seen.push_str(&String::from_utf8_lossy(data));
            }
            if seen.contains("data: one") && !released {
                assert!(!seen.contains("data: two"), "{seen}");
                up.release();
                released = true;
            }
        }
        assert!(released, "{seen}");
        assert!(seen.ends_with("data: two\n\n"), "{seen}");
    });
}
