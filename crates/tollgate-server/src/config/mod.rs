//! The TOML config file (docs/config.md).
//!
//! [`Config::parse`] reads the file into a spanned TOML document and checks
//! it field by field, so one pass reports **every** problem, each with its
//! line and field (`rules[1].limit`: rules are numbered from 0 in file
//! order). Rules are built with [`tollgate::RuleSpec::build`], so the
//! library's own bounds apply. Unknown fields are errors everywhere.
//!
//! ```
//! use tollgate_server::config::Config;
//!
//! let config = Config::parse(
//!     r#"
//!     [[rules]]
//!     name = "per_user"
//!     algorithm = "gcra"
//!     limit = 100
//!     period = "1s"
//!     burst = 200
//!     "#,
//!     "inline.toml",
//! )
//! .unwrap();
//! assert_eq!(config.rules[0].rule.capacity(), 200);
//!
//! let errors = Config::parse("[[rules]]\nname = \"x\"\nlimit = 0\n", "bad.toml").unwrap_err();
//! assert_eq!(
//!     errors.to_string(),
//!     "bad.toml:1: rules[0].algorithm: missing required field\n\
//!      bad.toml:1: rules[0].period: missing required field\n\
//!      bad.toml:3: rules[0].limit: limit must be at least 1",
//! );
//! ```
//!
//! The folder: `model.rs` (the sections' types and defaults), `store.rs`
//! (the `[store]` table, `[store.tls]` and the password file),
//! `secret.rs` (reading secret files; [`secret::Secret`]),
//! `checker.rs` (the field-by-field check, [`Config::load`] and
//! [`Config::parse`]), `chunked.rs` (the same check a `[[rules]]` table
//! at a time, so a large file's whole TOML tree is never held),
//! `rules.rs` (the `[[rules]]` entries), `envoy.rs`, `metrics.rs`,
//! `admin.rs`, `ops.rs`, `tracing.rs` and `rlqs.rs` (the `[envoy]`, `[metrics]`,
//! `[admin]`, `[ops]`, `[tracing]` and `[rlqs]` tables), `xds.rs` (`[envoy.xds]`,
//! docs/xds.md), `tls.rs` (the TLS tables: `[envoy.xds.tls]`,
//! `[proxy.upstream_tls]`, `[proxy.listen_tls]`), `syntax.rs` (TOML syntax errors placed on their
//! lines), `upstream.rs` (the reverse proxy's `upstream` URL, which the
//! config holds and the proxy forwards to); `file.rs` reads a config file
//! (TOML or Envoy YAML) and says what its problems are; `version.rs`
//! hashes the files into the config's version; `status.rs` is the serving
//! config's identity ([`ConfigInfo`]) and the last reload's problem
//! ([`ReloadStatus`]); the tests are in `tests.rs`.

mod admin;
mod checker;
mod chunked;
mod envoy;
pub mod file;
mod metrics;
mod model;
mod ops;
mod overrides;
mod rlqs;
mod rules;
pub mod secret;
mod status;
mod store;
mod syntax;
mod tls;
pub(crate) mod tracing;
pub mod upstream;
mod version;
mod xds;

pub use admin::token_problem;
pub use checker::parse_listen;
pub use model::*;

/// A config file's problems, as `validate` reports them; defined in
/// [`mod@file`], which the Envoy loader shares.
pub use file::{ConfigError, ConfigErrors};
pub(crate) use status::record_loaded;
pub use status::{
    CONFIG_INFO, CONFIG_INFO_HELP, ConfigInfo, LOADED_AT, RELOADS, ReloadError, ReloadStatus,
};
pub use version::{rfc3339, version_of_files, version_of_text};
pub use xds::{
    DEFAULT_INITIAL_BACKOFF, DEFAULT_MAX_BACKOFF, DEFAULT_MAX_MESSAGE_BYTES, DEFAULT_NODE_ID,
    FILES_AND_XDS, check_server as check_xds_server, server_authority as xds_server_authority,
};

#[cfg(test)]
mod body_tests;
#[cfg(test)]
mod tests;
