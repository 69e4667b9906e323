//! The `tollgate` binary as a library: config loading and validation, the
//! `serve`, `validate`, `replay` and `check` subcommands. `main.rs` only
//! parses flags, sets up logging, binds, calls in here and maps errors to
//! exit codes.
//!
//! * [`server::run`]: `tollgate serve` — the [`doors`]: the HTTP JSON API
//!   (`/metrics`, health), the reverse proxy, the Envoy rate limit service
//!   and the admin API, over one [`gate::Gate`] (limiter, failure policy,
//!   circuit breaker, metrics) on the [`store`] the config names.
//! * [`reload`]: reloading `serve`'s config on SIGHUP and changed files.
//! * [`xds`]: the Envoy limits from an ADS server (`[envoy.xds]`); [`rls_conf`]:
//!   its `RateLimitConfig` message, from our `.proto`.
//! * [`telemetry`]: OpenTelemetry spans of the doors and the store over
//!   OTLP (`[tracing]`, the `OTEL_*` variables).
//! * [`cmd`]: the subcommands: `serve` (the flags laid over the config
//!   file), `validate`, `replay`, `check` and `ratelimit`.
//! * [`compat`]: envoyproxy/ratelimit's environment read into the config
//!   (`tollgate ratelimit`, the binary run as `ratelimit`), and the
//!   answers of that service's own ports.
//!
//! * [`config`]: the TOML config file, validated field by field so
//!   `validate` reports every problem with its line; [`config::file`]
//!   reads it (and every Envoy file) only from a regular file of bounded
//!   size.
//! * [`store_url`], [`key`], [`cidr`]: the parsers the config uses for
//!   store URLs, proxy key extractors and `trusted_proxies`.
//! * [`cli`]: the command-line flags.

// Library code handles every failure; tests may unwrap.
#![cfg_attr(not(test), warn(clippy::unwrap_used))]

pub mod cli;
pub mod cmd;
pub mod compat;
pub mod config;
pub mod doors;
pub mod gate;
pub mod inline;
pub mod metrics;
pub mod reload;
pub mod rls_conf;
pub mod server;
pub mod store;
pub mod telemetry;
pub mod terminal;
mod tls_client;
mod utf8;
pub mod xds;

/// Store URLs; the parser lives in the library, beside the stores it opens.
pub use tollgate::store::url as store_url;
/// Key extractors and CIDR ranges; they live in the HTTP decision path
/// (`tollgate-http`), which applies them.
pub use tollgate_http::{cidr, key};
