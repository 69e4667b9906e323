//! The layer under a real `axum::serve` on 127.0.0.1:0, hit by many
//! concurrent HTTP/1.1 connections from raw TCP sockets: the setting in
//! which tower's own per-clone RateLimit let 1500 requests through a limit
//! of 5 (axum#2634).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::ConnectInfo;
use axum::routing::get;
use http::HeaderValue;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Barrier;
use tokio::task::JoinHandle;
use tollgate::{Algorithm, Limiter, MemoryStore};
use tollgate_tower::RateLimitLayer;

use crate::support::{member, members, rule};

const CONNECTIONS: usize = 60;
const LIMIT: u64 = 5;

async fn serve(app: Router) -> (SocketAddr, JoinHandle<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("local addr");
    let server = tokio::spawn(async move {
        axum::serve(
            listener,
            app.into_make_service_with_connect_info::<SocketAddr>(),
        )
        .await
        .expect("serve");
    });
    (addr, server)
}

/// A response read off the wire.
struct Raw {
    status: u16,
    headers: http::HeaderMap,
    body: String,
}

/// One HTTP/1.1 request on its own connection, after `barrier` (so every
/// connection is open before any request is sent).
async fn request(addr: SocketAddr, extra_headers: &str, barrier: Arc<Barrier>) -> Raw {
    let mut stream = TcpStream::connect(addr).await.expect("connect");
    barrier.wait().await;
    let req =
        format!("GET / HTTP/1.1\r\nHost: localhost\r\n{extra_headers}Connection: close\r\n\r\n");
    stream.write_all(req.as_bytes()).await.expect("write");
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).await.expect("read");
    let text = String::from_utf8(raw).expect("utf-8 response");
    let (head, body) = text.split_once("\r\n\r\n").expect("head and body");
    let mut lines = head.split("\r\n");
    let status_line = lines.next().expect("status line");
    let status = status_line
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("bad status line {status_line:?}"));
    let mut headers = http::HeaderMap::new();
    for line in lines {
        let (name, value) = line.split_once(':').expect("header line");
        headers.append(
            http::HeaderName::from_bytes(name.trim().as_bytes()).expect("name"),
            HeaderValue::from_str(value.trim()).expect("value"),
        );
    }
    Raw {
        status,
        headers,
        body: body.to_owned(),
    }
}

fn app(limit_rules: &[(&str, &str)], limiter: Arc<Limiter>) -> Router {
    let layer = RateLimitLayer::new(
        limiter,
        limit_rules
            .iter()
            .map(|(name, key)| (*name, key.parse().expect("key"))),
    )
    .expect("layer")
    .with_peer_addr(|ext| ext.get::<ConnectInfo<SocketAddr>>().map(|c| c.0));
    Router::new()
        .route("/", get(|| async { "hello" }))
        .layer(layer)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_concurrent_connections_share_one_limit_of_five() {
    let limiter = Arc::new(
        Limiter::new(
            MemoryStore::new(),
            [rule(
                "per_key_ip",
                Algorithm::Gcra,
                LIMIT,
                Duration::from_secs(3600),
            )],
        )
        .expect("limiter"),
    );
    let (addr, server) = serve(app(
        &[("per_key_ip", "header:x-api-key+client_ip")],
        limiter.clone(),
    ))
    .await;

    let barrier = Arc::new(Barrier::new(CONNECTIONS));
    let tasks: Vec<_> = (0..CONNECTIONS)
        .map(|_| tokio::spawn(request(addr, "x-api-key: alice\r\n", barrier.clone())))
        .collect();
    let mut responses = Vec::new();
    for task in tasks {
        responses.push(
            tokio::time::timeout(Duration::from_secs(30), task)
                .await
                .expect("answered in time")
                .expect("task"),
        );
    }

    let admitted: Vec<_> = responses.iter().filter(|r| r.status == 200).collect();
    let denied: Vec<_> = responses.iter().filter(|r| r.status == 429).collect();
    assert_eq!(admitted.len(), 5, "exactly the limit is admitted");
    assert_eq!(
        denied.len(),
        CONNECTIONS - 5,
        "every other request is a 429"
    );
    for r in &admitted {
        assert_eq!(r.body, "hello");
        assert_eq!(
            members(&r.headers["ratelimit-policy"]),
            [member("per_key_ip", &[("q", 5), ("w", 3600)])]
        );
    }
    // Each admission took one unit: the remainders 4..0 were each seen once.
    let mut remaining: Vec<i64> = admitted
        .iter()
        .map(|r| members(&r.headers["ratelimit"])[0].params["r"])
        .collect();
    remaining.sort_unstable();
    assert_eq!(remaining, [0, 1, 2, 3, 4]);
    for r in &denied {
        // GCRA 5/h: one unit back every 12 minutes.
        assert_eq!(r.headers["retry-after"], "720");
        assert_eq!(r.headers["content-type"], "application/problem+json");
        let body: serde_json::Value = serde_json::from_str(&r.body).expect("json");
        assert_eq!(body["status"], 429);
        assert_eq!(body["violated"], serde_json::json!(["per_key_ip"]));
    }
    // The bucket is the API key and the peer address axum recorded.
    let left = limiter
        .check("per_key_ip", "alice+127.0.0.1", 0)
        .await
        .expect("peek");
    assert_eq!(left.remaining, 0);

    server.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn separate_keys_are_separate_buckets_under_axum() {
    let limiter = Arc::new(
        Limiter::new(
            MemoryStore::new(),
            [
                rule("per_key", Algorithm::Gcra, 2, Duration::from_secs(3600)),
                rule("per_ip", Algorithm::Gcra, 100, Duration::from_secs(3600)),
            ],
        )
        .expect("limiter"),
    );
    let (addr, server) = serve(app(
        &[("per_key", "header:x-api-key"), ("per_ip", "client_ip")],
        limiter.clone(),
    ))
    .await;
    let barrier = Arc::new(Barrier::new(CONNECTIONS));
    let tasks: Vec<_> = (0..CONNECTIONS)
        .map(|i| {
            let headers = format!("x-api-key: k{}\r\n", i % 10);
            tokio::spawn({
                let barrier = barrier.clone();
                async move { request(addr, &headers, barrier).await }
            })
        })
        .collect();
    let mut admitted = 0;
    for task in tasks {
        let r = tokio::time::timeout(Duration::from_secs(30), task)
            .await
            .expect("answered in time")
            .expect("task");
        if r.status == 200 {
            admitted += 1;
        } else {
            assert_eq!(r.status, 429);
        }
    }
    // Ten keys, two each; per_ip (100) never denies, and denials by
    // per_key consumed nothing from it.
    assert_eq!(admitted, 20);
    let per_ip = limiter.check("per_ip", "127.0.0.1", 0).await.expect("peek");
    assert_eq!(per_ip.remaining, 80);
    server.abort();
}
