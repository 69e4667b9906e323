//! The server's view of the limiter: the config's rules, key extractors and
//! failure policies over the library's [`ResilientLimiter`] (store timeout,
//! `on_error`, circuit breaker, the `local` fallback sized by the live
//! replicas, metrics, store trouble logged at most once a second). Every
//! door decides through a [`Gate`].
//!
//! [`crate::store::open_store`] opens the store a gate runs over; the
//! `check` and `replay` subcommands open theirs with it too.

use std::ops::Deref;
use std::sync::Arc;
use std::time::Duration;

use tollgate::resilient::{self, ResilientLimiter};
use tollgate::{Limiter, Rule, Store};

use tollgate::OnError;

use crate::config::Config;
use crate::key::KeyExtractor;
use crate::store::AnyStore;

/// Lets an event through at most once per period (for logs).
pub(crate) use tollgate::resilient::Throttle;

/// Consecutive store failures that open the circuit breaker.
pub const BREAKER_THRESHOLD: u32 = resilient::DEFAULT_BREAKER_THRESHOLD;
/// How long an open breaker skips the store before letting one probe
/// check through.
pub const BREAKER_OPEN_FOR: Duration = resilient::DEFAULT_BREAKER_OPEN_FOR;

/// Rules over the configured store, with the failure policy applied: the
/// library's [`ResilientLimiter`] as the config builds it ([`Gate::over`]),
/// with what the library has no place for (each rule's `key` text, the
/// server's defaults). Checks, charges, reservations and leases are the
/// limiter's own calls, reached through [`Deref`].
#[derive(Debug)]
pub struct Gate {
    /// Shared with the tasks that settle and release what a proxied
    /// request holds when its response ends.
    limiter: Arc<ResilientLimiter<Arc<AnyStore>>>,
    /// The config's rules' `key`, by rule index (the config's rules come
    /// first): no copy of the names.
    keys: Box<[Option<KeyExtractor>]>,
}

impl Gate {
    /// A gate over `store` with the config's rules and policies, then
    /// `door_rules` (the Envoy configs'). Inside a tokio runtime, a shared
    /// store's heartbeat starts at once.
    ///
    /// # Errors
    /// A rule the library refuses (config validation already checked them).
    pub fn new(config: &Config, door_rules: &[Rule], store: AnyStore) -> Result<Self, String> {
        Self::over(config, door_rules, Arc::new(store), None)
    }

    /// A gate over the shared `store` with the config's rules and
    /// policies, then `door_rules` (the Envoy configs', which the Envoy
    /// service finds at the end). With `previous` (a config reload over
    /// the same store), it takes over `previous`'s replica id, live
    /// replica count and circuit breaker (docs/operations.md, "What a
    /// reload carries over"); the store's state is the store's, so every
    /// (rule, key) keeps it.
    ///
    /// # Errors
    /// A rule the library refuses (config validation already checked them).
    pub fn over(
        config: &Config,
        door_rules: &[Rule],
        store: Arc<AnyStore>,
        previous: Option<&Gate>,
    ) -> Result<Self, String> {
        let keys = config.rules.iter().map(|r| r.key.clone()).collect();
        // In process: nothing to time out.
        let timeout = (!store.in_process()).then_some(config.store.timeout);
        let rules = config
            .rules
            .iter()
            .map(|r| r.rule.clone())
            .chain(door_rules.iter().cloned());
        let overrides = config
            .rules
            .iter()
            .filter(|r| !r.overrides.is_empty())
            .map(|r| {
                let mut table = tollgate::Overrides::new();
                for (_, pattern, rule) in &r.overrides {
                    table
                        .insert(pattern.clone(), rule.clone())
                        .map_err(|e| e.to_string())?;
                }
                Ok((r.rule.name().to_owned(), table))
            })
            .collect::<Result<Vec<_>, String>>()?;
        let limiter =
            Limiter::with_overrides(store, rules, overrides).map_err(|e| e.to_string())?;
        let mut builder = ResilientLimiter::builder(limiter)
            .timeout(timeout)
            .on_error(config.store.on_error)
            .replicas(config.store.replicas)
            .heartbeat(config.store.heartbeat)
            .local_max_keys(config.store.max_keys)
            .near_limit_ratio(config.metrics.near_limit_ratio)
            .top_denied(config.metrics.top_denied_capacity)
            .top_denied_epoch(config.metrics.top_denied_epoch);
        if let Some(previous) = previous {
            builder = builder.succeeding(&previous.limiter);
        }
        for rule in &config.rules {
            if let Some(policy) = rule.on_error {
                builder = builder.rule_on_error(rule.rule.name(), policy);
            }
        }
        Ok(Self {
            limiter: Arc::new(builder.build().map_err(|e| e.to_string())?),
            keys,
        })
    }

    /// The failure policy of the rule named `name`: allow if unknown
    /// (the limiter's own answers `None` then).
    #[must_use]
    pub fn policy(&self, name: &str) -> OnError {
        self.limiter.policy(name).unwrap_or_default()
    }

    /// The `key` extractor of the rule named `name`, when it has one.
    #[must_use]
    pub fn key_of(&self, name: &str) -> Option<&KeyExtractor> {
        self.keys.get(self.rule_index(name)?)?.as_ref()
    }

    /// The limiter with its failure handling.
    #[must_use]
    pub fn limiter(&self) -> &ResilientLimiter<Arc<AnyStore>> {
        &self.limiter
    }

    /// The limiter, shared (for tasks that outlive a request's answer).
    #[must_use]
    pub fn shared_limiter(&self) -> &Arc<ResilientLimiter<Arc<AnyStore>>> {
        &self.limiter
    }

    /// Whether the store answers, as `/readyz` and `tollgate_store_up` say
    /// it (through [`crate::doors::ops::Health::probe`]): always for the
    /// memory store; for Redis, not while the circuit breaker is open,
    /// else a `PING` within the store timeout.
    ///
    /// # Errors
    /// Why the store is not ready.
    pub async fn ready(&self) -> Result<(), String> {
        self.limiter.ready().await.map_err(|e| e.to_string())
    }

    /// Keys held by the memory store (`None` for other stores).
    #[must_use]
    pub fn memory_keys(&self) -> Option<usize> {
        match &**self.limiter.store() {
            AnyStore::Memory(m) => Some(m.len()),
            _ => None,
        }
    }
}

/// A gate is its limiter, built from the config: the doors call the
/// limiter's checks on it, with nothing in between.
impl Deref for Gate {
    type Target = ResilientLimiter<Arc<AnyStore>>;

    fn deref(&self) -> &Self::Target {
        &self.limiter
    }
}
