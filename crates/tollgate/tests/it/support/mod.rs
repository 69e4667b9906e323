//! What the integration tests share, defined once.

use std::time::Duration;

use tollgate::{Algorithm, Rule, RuleSpec};

#[cfg(feature = "redis")]
pub(crate) mod fleet;
#[cfg(feature = "redis")]
pub(crate) mod redis;
#[cfg(feature = "redis")]
pub(crate) mod relay;

/// A second.
pub(crate) const SECOND: Duration = Duration::from_secs(1);

/// An hour: a period nothing refills in while a test runs.
pub(crate) const HOUR: Duration = Duration::from_secs(3600);

/// A rule of `limit` per `period`, which must be valid.
pub(crate) fn rule(name: &str, algorithm: Algorithm, limit: u64, period: Duration) -> Rule {
    RuleSpec::new(name, algorithm, limit, period)
        .build()
        .expect("valid rule")
}
