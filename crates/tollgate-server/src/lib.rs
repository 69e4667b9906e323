//! The `tollgate` binary as a library: config loading and validation, the
//! `validate` and `replay` subcommands. `main.rs` only parses flags, calls
//! in here and maps errors to exit codes.
//!
//! * [`config`]: the TOML config file, validated field by field so
//!   `validate` reports every problem with its line.
//! * [`store_url`], [`key`], [`cidr`]: the parsers the config uses for
//!   store URLs, proxy key extractors and `trusted_proxies`.
//! * [`validate`] and [`replay`]: the subcommands.
//! * [`cli`]: the command-line flags.

pub mod check;
pub mod cli;
pub mod config;
pub mod replay;
pub mod upstream;
pub mod validate;

/// Store URLs; the parser lives in the library, beside the stores it opens.
pub use tollgate::store::url as store_url;
/// Key extractors and CIDR ranges; they live in the tower crate, which
/// applies them.
pub use tollgate_tower::{cidr, key};
