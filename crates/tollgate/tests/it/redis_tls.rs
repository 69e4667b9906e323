//! `rediss://` against a real `redis-server` serving TLS with a throwaway
//! CA ([`TestPki`]): a certificate made for `redis.test` only, reached at
//! `127.0.0.1`, so the name to verify must be given; a server that wants
//! client certificates; checks and multi-rule checks over TLS, many at
//! once (batched, as over TCP).

use std::time::Duration;

use redis_harness::{RedisServer, TestPki};
use tollgate::store::redis::{RedisOptions, RedisStore, RedisTls};
use tollgate::{Algorithm, Rule, RuleSpec, Store, StoreErrorKind};

const NAME: &str = "redis.test";

fn pem(path: &std::path::Path) -> Vec<u8> {
    std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn options(tls: RedisTls) -> RedisOptions {
    RedisOptions {
        prefix: "tls".to_owned(),
        timeout: Duration::from_secs(5),
        tls: Some(tls),
        ..RedisOptions::default()
    }
}

/// Trusts the test CA only.
fn trusting(pki: &TestPki) -> RedisTls {
    RedisTls::default()
        .with_ca_pem(&pem(&pki.ca_cert()))
        .expect("CA PEM")
}

fn window(name: &str, limit: u64) -> Rule {
    RuleSpec::new(
        name,
        Algorithm::FixedWindow,
        limit,
        Duration::from_secs(3600),
    )
    .build()
    .expect("valid rule")
}

/// With the CA and the certificate's name, checks run over TLS: single
/// ones, forty at once (batched into shared script runs), and the counts
/// land on the server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_with_the_ca_and_the_server_name_connects() {
    redis_harness::clear_of_window_edge(Duration::from_secs(3600), Duration::from_secs(60));
    let pki = TestPki::generate(NAME);
    let server = RedisServer::start_tls(&pki, false);
    let tls = trusting(&pki).with_server_name(NAME).expect("name");
    let store = RedisStore::connect(&server.tls_url(), options(tls))
        .await
        .expect("TLS connection");
    store.ping().await.expect("ping over TLS");
    let rule = window("tls", 100);
    let checks = (0..40).map(|_| store.check(&rule, b"k", 1, None));
    for d in futures_util::future::join_all(checks).await {
        assert!(d.expect("decided over TLS").allowed);
    }
    let key = String::from_utf8(store.redis_key(&rule, b"k")).expect("utf-8 key");
    let count = server.command(&["HGET", &key, "n"]);
    assert_eq!(count.as_text().as_deref(), Some("40"), "each check once");
}

/// Without the name, the certificate is verified against `127.0.0.1`,
/// which it does not hold: the connection fails with rustls's name error,
/// as a misconfiguration (a protocol error: serving does not wait for it
/// to heal). Trusting another CA fails as an unknown issuer.
#[tokio::test]
async fn without_the_server_name_the_certificate_name_is_refused() {
    let pki = TestPki::generate(NAME);
    let server = RedisServer::start_tls(&pki, false);
    let err = RedisStore::connect(&server.tls_url(), options(trusting(&pki)))
        .await
        .expect_err("the certificate is for redis.test");
    assert_eq!(err.kind(), StoreErrorKind::Protocol, "{err}");
    let text = err.to_string();
    assert!(
        text.contains("certificate not valid for name \"127.0.0.1\""),
        "{text}"
    );
    assert!(text.contains(NAME), "the name it holds: {text}");

    let other = RedisTls::default()
        .with_ca_pem(&pem(&pki.other_ca_cert()))
        .expect("CA PEM")
        .with_server_name(NAME)
        .expect("name");
    let err = RedisStore::connect(&server.tls_url(), options(other))
        .await
        .expect_err("signed by another CA");
    assert_eq!(err.kind(), StoreErrorKind::Protocol, "{err}");
    assert!(err.to_string().contains("UnknownIssuer"), "{err}");
}

/// A server with `tls-auth-clients yes` takes a client that shows the
/// certificate its CA signed, and refuses one that shows none, with an
/// error saying TLS refused it.
#[tokio::test]
async fn a_server_that_wants_a_client_certificate_takes_ours() {
    let pki = TestPki::generate(NAME);
    let server = RedisServer::start_tls(&pki, true);
    let with_cert = trusting(&pki)
        .with_server_name(NAME)
        .and_then(|t| t.with_client_cert_pem(&pem(&pki.client_cert())))
        .and_then(|t| t.with_client_key_pem(&pem(&pki.client_key())))
        .expect("client certificate");
    let store = RedisStore::connect(&server.tls_url(), options(with_cert))
        .await
        .expect("with a client certificate");
    store.ping().await.expect("ping");

    let without = trusting(&pki).with_server_name(NAME).expect("name");
    let err = RedisStore::connect(&server.tls_url(), options(without))
        .await
        .expect_err("no client certificate");
    assert_eq!(err.kind(), StoreErrorKind::Protocol, "{err}");
    assert!(
        err.to_string().contains("TLS with") && err.to_string().contains("refused"),
        "{err}"
    );
}

/// A client certificate without its key (or the other way round), a key
/// that is not the certificate's, TLS settings on a `redis://` URL: each
/// refused before any connection, saying which.
#[tokio::test]
async fn tls_settings_that_make_no_client_are_refused() {
    let pki = TestPki::generate(NAME);
    let cert = pem(&pki.client_cert());
    let no_key = trusting(&pki).with_client_cert_pem(&cert).expect("cert");
    let e = no_key.check().expect_err("no key");
    assert!(e.contains("needs its key"), "{e}");
    let no_cert = trusting(&pki)
        .with_client_key_pem(&pem(&pki.client_key()))
        .expect("key");
    let e = no_cert.check().expect_err("no cert");
    assert!(e.contains("needs its certificate"), "{e}");
    let wrong = no_key
        .with_client_key_pem(&pem(&pki.server_key()))
        .expect("a key");
    let e = wrong.check().expect_err("another certificate's key");
    assert!(e.contains("client certificate and key"), "{e}");

    let server = RedisServer::start_tls(&pki, false);
    let err = RedisStore::connect(&server.url(), options(trusting(&pki)))
        .await
        .expect_err("TLS settings on redis://");
    assert!(err.to_string().contains("need a rediss:// URL"), "{err}");
}
