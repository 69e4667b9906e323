//! Metrics by the request's own values, for limits under `detailed_metric`
//! or `value_to_metric` (docs/envoy.md, "Metrics"):
//! `tollgate_envoy_descriptors_total{key, outcome}`, `key` the reference's
//! stats key ([`EnvoyLimits::metric_key`]). Runtime values are a client's,
//! so the keys are capped: past [`MAX_METRIC_KEYS`] a new key is counted
//! under `key="_other"`, and each such fold in
//! `tollgate_envoy_metric_keys_folded_total`.

use std::collections::HashMap;

use metrics::Counter;
use std::sync::Mutex;

use crate::doors::envoy::limits::EnvoyLimits;

/// Counter, labels `key`, `outcome` (`within_limit`, `over_limit`,
/// `shadow_mode`): one per descriptor whose limit names runtime values.
pub const DESCRIPTORS: &str = crate::metrics::ENVOY_DESCRIPTORS;
/// Counter: descriptors counted under `key="_other"` because
/// [`MAX_METRIC_KEYS`] keys were already in use.
pub const FOLDED: &str = crate::metrics::ENVOY_FOLDED;
/// The most distinct `key` labels one server records.
pub const MAX_METRIC_KEYS: usize = 1_000;
/// The label keys past the cap are counted under.
const OTHER: &str = "_other";
/// The longest `key` label: a longer key (a client's value may be as long
/// as a request) is cut and ends with the SHA-256 of the whole key, so the
/// capped keys hold and serve at most this much each.
pub const MAX_METRIC_KEY_LEN: usize = 256;

/// What a descriptor's limit answered, for its metric.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// Within the limit.
    Within,
    /// Over it, and enforced.
    Over,
    /// Over it, in shadow mode (answered OK).
    Shadow,
}

impl Outcome {
    fn label(self) -> &'static str {
        match self {
            Outcome::Within => "within_limit",
            Outcome::Over => "over_limit",
            Outcome::Shadow => "shadow_mode",
        }
    }
}

/// The counters, by key, at most [`MAX_METRIC_KEYS`] of them.
#[derive(Debug, Default)]
pub(crate) struct DetailedMetrics {
    keys: Mutex<HashMap<String, [Option<Counter>; 3]>>,
}

impl DetailedMetrics {
    /// Counts one descriptor of `domain` with `entries` whose limit ended
    /// in `outcome`.
    pub(crate) fn record<K: AsRef<[u8]>, V: AsRef<[u8]>>(
        &self,
        limits: &EnvoyLimits,
        domain: &str,
        entries: &[(K, V)],
        outcome: Outcome,
    ) {
        let Some(key) = limits.metric_key(domain, entries).map(bounded) else {
            return;
        };
        let mut keys = self
            .keys
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let key = if keys.contains_key(&key) || keys.len() < MAX_METRIC_KEYS {
            key
        } else {
            metrics::counter!(FOLDED).increment(1);
            OTHER.to_owned()
        };
        let label = key.clone();
        let slots = keys.entry(key).or_default();
        let counter = slots[outcome as usize].get_or_insert_with(
            || metrics::counter!(DESCRIPTORS, "key" => label, "outcome" => outcome.label()),
        );
        counter.increment(1);
    }
}

/// `key` as a label of at most [`MAX_METRIC_KEY_LEN`] bytes: a longer one
/// is its start and `;sha256=` with the digest of all of it.
fn bounded(key: String) -> String {
    if key.len() <= MAX_METRIC_KEY_LEN {
        return key;
    }
    const DIGEST: usize = ";sha256=".len() + 64;
    let start = crate::utf8::prefix(&key, MAX_METRIC_KEY_LEN - DIGEST);
    tollgate_http::extract::digest_key(&format!("{start};sha256="), key.as_bytes())
}
