//! tower middleware for tollgate.
//!
//! [`headers`] renders decisions as the RateLimit header fields of the IETF
//! httpapi draft (`RateLimit-Policy`, `RateLimit`) plus `Retry-After`, the
//! same way for the tower layer, the HTTP API and the reverse proxy.
//! [`key`] parses key extractors (`client_ip+header:x-api-key`) and [`cidr`]
//! the trusted-proxy ranges that decide whose `X-Forwarded-For` is read.
//!
//! ```
//! use std::time::Duration;
//! use tollgate::{Algorithm, Decision, RuleSpec};
//! use tollgate_tower::headers::{HeaderOptions, insert_headers};
//!
//! let rule = RuleSpec::new("per_user", Algorithm::Gcra, 100, Duration::from_secs(1)).build().unwrap();
//! let d = Decision { allowed: true, limit: 100, remaining: 99,
//!     reset_after: Duration::from_millis(10), retry_after: None };
//! let mut headers = http::HeaderMap::new();
//! insert_headers(&mut headers, &[(&rule, &d)], None, HeaderOptions::default());
//! assert_eq!(headers["ratelimit-policy"], "\"per_user\";q=100;w=1");
//! assert_eq!(headers["ratelimit"], "\"per_user\";r=99;t=1");
//! ```

pub mod cidr;
pub mod extract;
mod future;
pub mod headers;
pub mod key;
mod layer;
pub mod response;
mod service;

pub use future::ResponseFuture;
pub use layer::{
    ConfigError, OnStoreError, PeerAddr, PeerAddrFn, RateLimitLayer, Verdict, VerdictFuture,
    default_peer_addr,
};
pub use service::RateLimit;
