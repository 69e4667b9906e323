//! `client_ip` through the layer: trusted and untrusted `X-Forwarded-For`,
//! IPv6 grouping, and the key text a bucket ends up under.

use std::sync::Arc;
use std::time::Duration;

use http::StatusCode;
use tollgate::Algorithm;
use tollgate_tower::RateLimitLayer;
use tollgate_tower::extract::ClientIpConfig;
use tower::Layer;

use crate::support::{self, get, limiter, ok_service, peek, rule, send};

const HOUR: Duration = Duration::from_secs(3600);

fn per_ip(
    config: ClientIpConfig,
) -> (
    impl tower::Service<
        http::Request<String>,
        Response = http::Response<tollgate_tower::usage::UsageBody<String>>,
        Error = std::convert::Infallible,
    > + Clone,
    Arc<support::TestLimiter>,
) {
    let (limiter, _clock) = limiter([rule("per_ip", Algorithm::Gcra, 1, HOUR)]);
    let svc = RateLimitLayer::new(
        limiter.clone(),
        [("per_ip", "client_ip".parse().expect("key"))],
    )
    .expect("layer")
    .with_client_ip(config)
    .layer(ok_service(Arc::default()));
    (svc, limiter)
}

fn trusting(blocks: &[&str]) -> ClientIpConfig {
    ClientIpConfig::new().with_trusted_proxies(blocks.iter().map(|b| b.parse().expect("block")))
}

fn req(peer: &str, xff: Option<&str>) -> http::Request<String> {
    let mut b = get("/", peer);
    if let Some(xff) = xff {
        b = b.header("x-forwarded-for", xff);
    }
    b.body(String::new()).expect("request")
}

#[tokio::test]
async fn a_spoofed_forwarded_for_from_an_untrusted_peer_gets_no_new_bucket() {
    // 10/8 is trusted; this client is not in it.
    let (svc, limiter) = per_ip(trusting(&["10.0.0.0/8"]));
    assert_eq!(
        send(&svc, req("203.0.113.7:1000", None)).await.status(),
        StatusCode::OK
    );
    for spoof in ["198.51.100.1", "10.0.0.9", "1.1.1.1, 2.2.2.2", "::1"] {
        let r = send(&svc, req("203.0.113.7:1001", Some(spoof))).await;
        assert_eq!(r.status(), StatusCode::TOO_MANY_REQUESTS, "{spoof}");
    }
    // Nothing was keyed by a forwarded address.
    assert_eq!(peek(&limiter, "per_ip", "198.51.100.1").await.remaining, 1);
    assert_eq!(peek(&limiter, "per_ip", "203.0.113.7").await.remaining, 0);
}

#[tokio::test]
async fn without_trusted_proxies_forwarded_for_is_never_read() {
    let (svc, _limiter) = per_ip(ClientIpConfig::new());
    assert_eq!(
        send(&svc, req("10.0.0.1:1", Some("198.51.100.1")))
            .await
            .status(),
        StatusCode::OK
    );
    assert_eq!(
        send(&svc, req("10.0.0.1:2", Some("198.51.100.2")))
            .await
            .status(),
        StatusCode::TOO_MANY_REQUESTS
    );
}

#[tokio::test]
async fn behind_a_trusted_proxy_each_client_has_its_own_bucket() {
    let (svc, limiter) = per_ip(trusting(&["10.0.0.0/8"]));
    let proxy = "10.0.0.1:40000";
    assert_eq!(
        send(&svc, req(proxy, Some("198.51.100.1"))).await.status(),
        StatusCode::OK
    );
    assert_eq!(
        send(&svc, req(proxy, Some("198.51.100.2"))).await.status(),
        StatusCode::OK
    );
    // A client that prepends its own entries is still read from the right:
    // the proxy appended the address it saw, 198.51.100.1.
    assert_eq!(
        send(&svc, req(proxy, Some("6.6.6.6, 198.51.100.1")))
            .await
            .status(),
        StatusCode::TOO_MANY_REQUESTS
    );
    // Two trusted hops are skipped.
    assert_eq!(
        send(&svc, req(proxy, Some("198.51.100.2, 10.1.1.1, 10.2.2.2")))
            .await
            .status(),
        StatusCode::TOO_MANY_REQUESTS
    );
    // Several header lines are one list, in order.
    let two_lines = get("/", proxy)
        .header("x-forwarded-for", "198.51.100.3")
        .header("x-forwarded-for", "10.9.9.9")
        .body(String::new())
        .expect("request");
    assert_eq!(send(&svc, two_lines).await.status(), StatusCode::OK);
    assert_eq!(peek(&limiter, "per_ip", "198.51.100.3").await.remaining, 0);
    // A malformed entry stops the walk at the last good address (here the
    // trusted hop to its right), so garbage cannot mint buckets.
    assert_eq!(
        send(&svc, req(proxy, Some("198.51.100.4, bogus, 10.3.3.3")))
            .await
            .status(),
        StatusCode::OK
    );
    assert_eq!(peek(&limiter, "per_ip", "10.3.3.3").await.remaining, 0);
    assert_eq!(peek(&limiter, "per_ip", "198.51.100.4").await.remaining, 1);
    assert_eq!(
        send(&svc, req(proxy, Some("198.51.100.5, junk, 10.3.3.3")))
            .await
            .status(),
        StatusCode::TOO_MANY_REQUESTS
    );
    // No header: the proxy itself.
    assert_eq!(send(&svc, req(proxy, None)).await.status(), StatusCode::OK);
    assert_eq!(peek(&limiter, "per_ip", "10.0.0.1").await.remaining, 0);
}

#[tokio::test]
async fn ipv6_clients_are_grouped_by_prefix() {
    let (svc, limiter) = per_ip(ClientIpConfig::new().with_ipv6_prefix(64).expect("prefix"));
    assert_eq!(
        send(&svc, req("[2001:db8:1:2::1]:1", None)).await.status(),
        StatusCode::OK
    );
    // Same /64, another address: same bucket.
    assert_eq!(
        send(&svc, req("[2001:db8:1:2:aaaa:bbbb:cccc:dddd]:1", None))
            .await
            .status(),
        StatusCode::TOO_MANY_REQUESTS
    );
    // Next /64: its own.
    assert_eq!(
        send(&svc, req("[2001:db8:1:3::1]:1", None)).await.status(),
        StatusCode::OK
    );
    assert_eq!(
        peek(&limiter, "per_ip", "2001:db8:1:2::/64")
            .await
            .remaining,
        0
    );
    // IPv4 clients of a dual-stack listener are not one ::ffff:0:0/64 group.
    assert_eq!(
        send(&svc, req("[::ffff:192.0.2.1]:1", None)).await.status(),
        StatusCode::OK
    );
    assert_eq!(
        send(&svc, req("[::ffff:192.0.2.2]:1", None)).await.status(),
        StatusCode::OK
    );
    assert_eq!(peek(&limiter, "per_ip", "192.0.2.1").await.remaining, 0);
}

#[tokio::test]
async fn without_grouping_every_ipv6_address_is_its_own_bucket() {
    let (svc, limiter) = per_ip(ClientIpConfig::new());
    for addr in ["[2001:db8::1]:1", "[2001:db8::2]:1"] {
        assert_eq!(send(&svc, req(addr, None)).await.status(), StatusCode::OK);
    }
    assert_eq!(peek(&limiter, "per_ip", "2001:db8::1").await.remaining, 0);
}

#[tokio::test]
async fn a_client_ip_and_header_key_reads_both() {
    let (limiter, _clock) = limiter([rule("per_key_ip", Algorithm::Gcra, 1, HOUR)]);
    let svc = RateLimitLayer::new(
        limiter.clone(),
        [(
            "per_key_ip",
            "header:x-api-key+client_ip".parse().expect("key"),
        )],
    )
    .expect("layer")
    .layer(ok_service(Arc::default()));
    let r = get("/", "192.0.2.1:1")
        .header("x-api-key", "a+b%")
        .body(String::new())
        .expect("request");
    assert_eq!(send(&svc, r).await.status(), StatusCode::OK);
    // `+` and `%` escaped inside a part, parts joined with `+`.
    assert_eq!(
        peek(&limiter, "per_key_ip", "a%2Bb%25+192.0.2.1")
            .await
            .remaining,
        0
    );
}
