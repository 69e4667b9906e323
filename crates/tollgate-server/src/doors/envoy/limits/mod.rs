//! envoyproxy/ratelimit YAML config files, loaded unchanged, and the lookup
//! of a request descriptor in them (README, "The Envoy rate limit service").
//!
//! Each file names one `domain` and a tree of `descriptors`; a node may
//! carry a `rate_limit`. [`EnvoyLimits::parse`] checks every file field by
//! field, so one pass reports **every** problem with its file, line and
//! field (`descriptors[0].descriptors[1].rate_limit.unit`: descriptors are
//! numbered from 0 in file order). Unknown fields are errors everywhere, as
//! in the reference service.
//!
//! Every node with a unit and `requests_per_unit >= 1` becomes one tollgate
//! rule ([`EnvoyLimits::rules`]), enforced with the same store and semantics
//! as every other rule. Three fields are tollgate's own extension of the
//! format, all optional inside `rate_limit`:
//!
//! * `algorithm`: `gcra`, `token_bucket`, `fixed_window`, `sliding_window`
//!   or `sliding_log`; `fixed_window` by default, as Envoy's users expect.
//! * `burst`: for `gcra` and `token_bucket` only; defaults to
//!   `requests_per_unit`.
//! * `charge`: `true` makes a call with a cost above 0 a charge (usage
//!   recorded in full, even past the limit) instead of a check
//!   ([`Limit::charge`]); only on a limit the store counts.
//!
//! [`EnvoyLimits::find`] is the reference service's `GetLimit`: exact
//! `key_value`, then a wildcard value (`value: use*`) at the same level, then
//! the key alone.
//!
//! ```
//! use tollgate_server::doors::envoy::limits::{EnvoyLimits, Unit};
//!
//! let yaml = "
//! domain: mongo_cps
//! descriptors:
//!   - key: database
//!     value: users
//!     rate_limit:
//!       unit: second
//!       requests_per_unit: 500
//! ";
//! let limits = EnvoyLimits::parse(&[("mongo.yaml".into(), yaml.into())], &[]).unwrap();
//! let limit = limits.find("mongo_cps", &[("database", "users")]).unwrap();
//! assert_eq!((limit.requests_per_unit, limit.unit), (500, Some(Unit::Second)));
//! assert_eq!(limits.rules()[0].name(), "envoy.mongo_cps.database_users");
//! assert!(limits.find("mongo_cps", &[("database", "orders")]).is_none());
//!
//! let bad = "domain: x\ndescriptors:\n  - key: k\n    rate_limit: {unit: fortnight}\n";
//! let errors = EnvoyLimits::parse(&[("bad.yaml".into(), bad.into())], &[]).unwrap_err();
//! assert_eq!(
//!     errors.to_string(),
//!     "bad.yaml:4: descriptors[0].rate_limit.unit: invalid rate limit unit 'fortnight'; \
//!      expected second, minute, hour, day, week, month or year",
//! );
//! ```
//!
//! The folder: `tree.rs` (the descriptor trees and
//! [`EnvoyLimits::find`]), `yaml.rs` (a YAML reader that keeps every
//! node's line), `scalars.rs` (YAML 1.1 booleans and integers), the schema
//! check that builds the trees: `loader.rs` (its state, error reporting and
//! typed field readers), `files.rs` (each file's domain, and
//! [`EnvoyLimits::load`]/[`EnvoyLimits::parse`]), `descriptors.rs` (the
//! descriptor trees), `rate_limit.rs` (each limit and its rule);
//! `naming.rs` ([`store_key`] and the generated rule names); `xds.rs`
//! ([`EnvoyLimits::from_xds`]: the same limits from xDS `RateLimitConfig`
//! resources, through the same checks); `rlconfig.rs` ([`EnvoyLimits::dump`]:
//! the reference's `/rlconfig` text); the tests are in `tests/`.

mod descriptors;
mod files;
mod loader;
mod metadata;
mod metric_key;
mod naming;
mod overrides;
mod rate_limit;
mod rlconfig;
mod scalars;
mod tree;
mod xds;
mod yaml;

pub use naming::store_key;
pub use overrides::override_limit;
pub use tree::{EnvoyLimits, Limit, Unit};

#[cfg(test)]
mod tests;
