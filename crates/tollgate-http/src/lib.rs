//! tollgate's HTTP decision path: how a request becomes keys, the keys one
//! all-or-nothing check, and the check's outcome an HTTP answer. Every
//! HTTP door decides through here — the tower layer (crate
//! `tollgate-tower`), the server's reverse proxy and its JSON API — so a
//! change to an answer (a header, a degraded marker, a 400 body) is made
//! once, for all of them. Nothing here is a tower service: a door hands
//! in a request head and gets back what to answer.
//!
//! ```
//! use std::time::Duration;
//! use tollgate::resilient::ResilientLimiter;
//! use tollgate::{Algorithm, Limiter, MemoryStore, RuleSpec};
//! use tollgate_http::decide::{HttpVerdict, RuleKeys};
//! use tollgate_http::headers::{HeaderOptions, merge_into};
//!
//! # tokio::runtime::Builder::new_current_thread().enable_all().build()?.block_on(async {
//! let limiter = Limiter::new(MemoryStore::new(), [
//!     RuleSpec::new("per_ip", Algorithm::Gcra, 1, Duration::from_secs(60)).build()?,
//! ])?;
//! let limiter = ResilientLimiter::builder(limiter).build()?;
//! let rules = RuleKeys::new(limiter.rules(), [("per_ip", "client_ip".parse()?)])?;
//!
//! // A door's request head and the address it was accepted from.
//! let req = http::Request::get("/").body(())?;
//! let peer = Some("192.0.2.1".parse()?);
//! let keys = rules
//!     .keys(req.method(), req.uri(), req.headers(), peer)
//!     .map_err(|refused| format!("answer {} instead", refused.status()))?;
//!
//! let verdict: HttpVerdict = rules.check(&limiter, &keys, None, HeaderOptions::default()).await;
//! match verdict.into_headers() {
//!     Ok(headers) => {
//!         // Pass the request on; its response gets the RateLimit fields.
//!         let mut response = http::Response::new("hello");
//!         merge_into(response.headers_mut(), headers);
//!         assert_eq!(response.headers()["ratelimit"], r#""per_ip";r=0;t=60"#);
//!     }
//!     // 429 with Retry-After and a problem+json body.
//!     Err(response) => panic!("denied: {}", response.status()),
//! }
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! # })?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! * [`decide`]: [`RuleKeys`](decide::RuleKeys), the rules a door checks
//!   with their key extractors, and [`HttpVerdict`](decide::HttpVerdict),
//!   the answer: admit with headers, or respond (429, 503, 400, 500).
//! * [`key`]: key extractors (`client_ip`, `header:NAME`, `path`, `method`,
//!   `host`, joined with `+`) parsed from their config spelling.
//! * [`extract`]: a request head into key bytes — the client address
//!   behind trusted proxies ([`cidr`]), normalized paths, digests of long
//!   keys — and the [`MissingKey`](extract::MissingKey) policy.
//! * [`headers`]: the `RateLimit-Policy` and `RateLimit` fields of the
//!   IETF httpapi draft, and the legacy `X-RateLimit-*` ones.
//! * [`response`]: the 429, 503 and problem+json answers.
//! * [`json`]: a push-based JSON scanner picking the values at a few
//!   pointers out of a body as it passes, in bounded memory.
//! * [`cost`] and [`usage`]: a rule charged by the usage its response
//!   reports (reserved on arrival, settled when the body ends) and
//!   `concurrency` leases held for the life of a request, ended by the
//!   [`UsageBody`](usage::UsageBody) around the response.
//!
//! The narrative guide is docs/tower.md ("Other doors").

// Library code handles every failure; tests may unwrap.
#![cfg_attr(not(test), warn(clippy::unwrap_used))]

pub mod cidr;
pub mod cost;
pub mod decide;
pub mod extract;
pub mod headers;
pub mod json;
pub mod key;
pub mod response;
pub mod usage;

// The README (the crate's page on crates.io) runs as a doc test, so its
// example keeps compiling and its assertions keep holding.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
