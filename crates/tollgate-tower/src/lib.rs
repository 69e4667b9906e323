//! tower middleware for tollgate: a [`RateLimitLayer`] whose every clone
//! shares ONE [`Limiter`](tollgate::Limiter), so a limit holds however many
//! times axum or hyper clone the service (tower's own `RateLimit` keeps
//! state per clone, and under axum let 1500 requests through a limit of 5:
//! axum#2634).
//!
//! Each request is checked against every configured rule, each keyed by its
//! own [`KeyExtractor`](key::KeyExtractor) (`client_ip`, `header:NAME`,
//! `path`, `method`, `host`, joined with `+`), all-or-nothing in one
//! [`Limiter::check_all`](tollgate::Limiter::check_all) made in `call`
//! before the inner service is asked whether it is ready, so a denial never
//! waits for the inner service's capacity. Admitted: the inner service's
//! response gets `RateLimit-Policy` and `RateLimit`. Denied: `429` with those
//! headers, `Retry-After` and an `application/problem+json` body.
//!
//! ```
//! use std::convert::Infallible;
//! use std::sync::Arc;
//! use std::time::Duration;
//! use http::{Request, Response, StatusCode};
//! use tollgate::{Algorithm, Limiter, MemoryStore, RuleSpec};
//! use tollgate_tower::{PeerAddr, RateLimitLayer};
//! use tower::{Layer, ServiceExt, service_fn};
//!
//! # tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap().block_on(async {
//! let limiter = Arc::new(Limiter::new(MemoryStore::new(), [
//!     RuleSpec::new("per_key", Algorithm::Gcra, 2, Duration::from_secs(60)).build()?,
//!     RuleSpec::new("per_ip", Algorithm::Gcra, 100, Duration::from_secs(60)).build()?,
//! ])?);
//! let layer = RateLimitLayer::new(limiter, [
//!     ("per_key", "header:x-api-key".parse()?),
//!     ("per_ip", "client_ip".parse()?),
//! ])?;
//! let service = layer.layer(service_fn(|_req: Request<String>| async {
//!     Ok::<_, Infallible>(Response::new(String::from("hello")))
//! }));
//!
//! // The peer address comes from a request extension (see
//! // `RateLimitLayer::with_peer_addr` for axum's `ConnectInfo`).
//! let request = || Request::get("/")
//!     .header("x-api-key", "alice")
//!     .extension(PeerAddr("192.0.2.1:50000".parse().unwrap()))
//!     .body(String::new())
//!     .unwrap();
//!
//! // Clones share the limit: two requests per minute for alice.
//! let ok = service.clone().oneshot(request()).await?;
//! assert_eq!(ok.status(), StatusCode::OK);
//! assert_eq!(ok.headers()["ratelimit"], r#""per_key";r=1;t=30, "per_ip";r=99;t=1"#);
//! assert_eq!(service.clone().oneshot(request()).await?.status(), StatusCode::OK);
//!
//! let denied = service.clone().oneshot(request()).await?;
//! assert_eq!(denied.status(), StatusCode::TOO_MANY_REQUESTS);
//! assert_eq!(denied.headers()["retry-after"], "30");
//! assert_eq!(denied.headers()["content-type"], "application/problem+json");
//! assert!(denied.body().get_ref().contains(r#""violated":["per_key"]"#));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! # }).unwrap();
//! ```
//!
//! The layer is the tower face of the HTTP decision path in crate
//! [`tollgate_http`], which the `tollgate` server's doors (reverse proxy,
//! JSON API) share. The modules the layer's configuration and answers are
//! made of are re-exported here, so a layer user needs this crate alone:
//! [`key`] and [`cidr`] parse key extractors and trusted-proxy blocks;
//! [`extract`] turns a request into key bytes behind trusted proxies
//! ([`extract::ClientIpConfig`], [`extract::MissingKey`]); [`headers`]
//! renders the RateLimit header fields of the IETF httpapi draft
//! ([`headers::HeaderOptions`]); [`cost`] and [`usage`] are below.
//! [`RateLimitLayer::decide`] gives the layer's [`HttpVerdict`] for a
//! request head, for a front door that is not a tower service; a door
//! that keeps its own rules decides with [`tollgate_http::decide`] (its
//! [`RuleKeys`](tollgate_http::decide::RuleKeys)) and answers with
//! [`tollgate_http::response`].
//!
//! # Usage and in-flight limits
//!
//! A rule may take its cost from the response
//! ([`RateLimitLayer::with_response_cost`]: an estimate reserved when the
//! request arrives, settled at the usage the response head or trailers
//! report when the body ends), and a `concurrency` rule holds a lease for
//! the life of each request, renewed while the body streams. The
//! response body is then a [`usage::UsageBody`], whose end or drop settles
//! and releases, once, on a task of its own ([`usage`], [`cost`]).
//!
//! # Response body
//!
//! The layer answers some requests itself, so the inner service's response
//! body `B` must be `From<String>`: axum's `Body`,
//! `http_body_util::Full<Bytes>` and `String` are. The request body is
//! never read.
//!
//! # Store failures
//!
//! Build the layer with [`RateLimitLayer::resilient`] over a
//! [`tollgate::ResilientLimiter`] to bound every check by a store timeout,
//! stop calling a failing store for a while (circuit breaker) and answer
//! with each rule's own policy; [`RateLimitLayer::new`] over a plain
//! limiter applies one policy to every rule and no timeout of its own.
//!
//! `OnError::Allow` (the default of `new`) lets the request through
//! with `tollgate-degraded: store-unavailable` and `RateLimit-Policy` but no
//! `RateLimit` (the quota is known, what remains is not);
//! `OnError::Deny` answers `503` with `Retry-After: 1` and a
//! problem+json body; `OnError::Local` decides with the in-process
//! fallback (each rule's quota divided by the live replicas), with the
//! RateLimit headers and `tollgate-degraded: local`.

// Library code handles every failure; tests may unwrap.
#![cfg_attr(not(test), warn(clippy::unwrap_used))]

mod future;
mod layer;
mod service;

pub use future::ResponseFuture;
pub use layer::{PeerAddr, PeerAddrFn, RateLimitLayer, default_peer_addr};
pub use service::RateLimit;
// What the layer is configured with and answers, from the decision path.
pub use tollgate_http::decide::{BuildError, HttpVerdict, HttpVerdictFuture};
pub use tollgate_http::{cidr, cost, extract, headers, key, usage};

// The README (the crate's page on crates.io) runs as a doc test, so its
// example keeps compiling and its assertions keep holding.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
