//! The `RateLimitConfig` message of xDS (package
//! `ratelimit.config.ratelimit.v3`), generated at build time from
//! `proto/ratelimit/config/ratelimit/v3/rls_conf.proto`: tollgate's own copy
//! of the reference's message, with its names and field numbers
//! (docs/xds.md). Its `google.protobuf.Struct` is envoy-types'.

#![allow(missing_docs, clippy::all, clippy::pedantic, unreachable_pub)]

include!(concat!(
    env!("OUT_DIR"),
    "/ratelimit.config.ratelimit.v3.rs"
));

/// The type URL of [`RateLimitConfig`] in an xDS `Any` and request.
pub const TYPE_URL: &str = "type.googleapis.com/ratelimit.config.ratelimit.v3.RateLimitConfig";
