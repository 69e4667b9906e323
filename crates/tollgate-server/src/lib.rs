//! The `tollgate` binary as a library: config loading and validation, the
//! `serve`, `validate`, `replay` and `check` subcommands. `main.rs` only
//! parses flags, sets up logging, binds, calls in here and maps errors to
//! exit codes.
//!
//! * [`server::run`]: `tollgate serve` — the [`api`] (HTTP JSON API,
//!   `/metrics`, health) and the [`proxy`] (reverse proxy) over one
//!   [`gate::Gate`] (limiter, failure policy, circuit breaker, metrics).
//! * [`reload`]: reloading `serve`'s config on SIGHUP and changed files.
//! * [`admin`]: the admin API (`--admin`), on its own listener.
//! * [`cmd`]: the subcommands: `serve` (the flags laid over the config
//!   file), `validate`, `replay` and `check`.
//!
//! * [`config`]: the TOML config file, validated field by field so
//!   `validate` reports every problem with its line; [`config_file`] reads
//!   it (and every Envoy file) only from a regular file of bounded size.
//! * [`store_url`], [`key`], [`cidr`]: the parsers the config uses for
//!   store URLs, proxy key extractors and `trusted_proxies`.
//! * [`cli`]: the command-line flags.

// Library code handles every failure; tests may unwrap.
#![cfg_attr(not(test), warn(clippy::unwrap_used))]

pub mod admin;
pub mod api;
pub mod cli;
pub mod cmd;
pub mod config;
pub mod config_file;
pub mod envoy;
pub mod gate;
pub mod inline;
pub mod metrics;
pub mod proxy;
pub mod reload;
pub mod server;
pub mod terminal;

/// Store URLs; the parser lives in the library, beside the stores it opens.
pub use tollgate::store::url as store_url;
/// Key extractors and CIDR ranges; they live in the HTTP decision path
/// (`tollgate-http`), which applies them.
pub use tollgate_http::{cidr, key};
