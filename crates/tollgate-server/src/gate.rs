//! The server's view of the limiter: the config's rules, key extractors and
//! failure policies over the library's [`ResilientLimiter`] (store timeout,
//! `on_error`, circuit breaker, the `local` fallback sized by the live
//! replicas, metrics, store trouble logged at most once a second). Both
//! front doors (HTTP API and reverse proxy) decide through a [`Gate`].
//!
//! [`crate::store::open_store`] opens the store a gate runs over; the
//! `check` and `replay` subcommands open theirs with it too.

use std::sync::Arc;
use std::time::Duration;

use tollgate::resilient::{self, ChargeVerdict, Refusal, ResilientLimiter, TicketVerdict, Verdict};
use tollgate::store::{Released, Settled};
use tollgate::ticket::Ticket;
use tollgate::{Check, Limiter, Rule, Store};

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

/// Rules over the configured store, with the failure policy applied.
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

    /// The rules: the config's in file order, then the Envoy configs'.
    #[must_use]
    pub fn rules(&self) -> &[Rule] {
        self.limiter.rules()
    }

    /// The rule (or `[[rules.overrides]]` entry) that decides `key` under
    /// rule `i`: what an answer's headers describe.
    /// A runtime override first, then a config one, then the rule.
    #[must_use]
    pub fn rule_for_key(&self, i: usize, key: &[u8]) -> std::borrow::Cow<'_, Rule> {
        self.limiter.rule_for_key(i, key)
    }

    /// The rule named `name`.
    #[must_use]
    pub fn rule(&self, name: &str) -> Option<&Rule> {
        self.limiter.rule(name)
    }

    /// The position of the rule named `name` in [`Gate::rules`].
    #[must_use]
    pub fn rule_index(&self, name: &str) -> Option<usize> {
        self.limiter.rule_index(name)
    }

    /// The failure policy of the rule named `name` (allow if unknown).
    #[must_use]
    pub fn policy(&self, name: &str) -> OnError {
        self.limiter.policy(name).unwrap_or_default()
    }

    /// The `key` extractor of the rule named `name`, when it has one.
    #[must_use]
    pub fn key_of(&self, name: &str) -> Option<&KeyExtractor> {
        self.keys.get(self.rule_index(name)?)?.as_ref()
    }

    /// The store.
    #[must_use]
    pub fn store(&self) -> &Arc<AnyStore> {
        self.limiter.store()
    }

    /// The `n` keys the rule named `rule` denied most on this replica
    /// lately, most denied first, with their error bounds (see
    /// [`ResilientLimiter::top_denied`]).
    ///
    /// # Errors
    /// [`tollgate::Error::UnknownRule`] when no rule is named `rule`.
    pub fn top_denied(
        &self,
        rule: &str,
        n: usize,
    ) -> Result<Vec<tollgate::top::DeniedKey>, tollgate::Error> {
        self.limiter.top_denied(rule, n)
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

    /// Checks every pair all-or-nothing (one pair for a single check).
    ///
    /// # Errors
    /// [`Refusal::Invalid`] for a bad request, [`Refusal::Unavailable`] when
    /// the store failed and a rule's policy is `deny`.
    pub async fn check_all(&self, checks: &[Check<'_>]) -> Result<Verdict, Refusal> {
        self.limiter.check_all(checks).await
    }

    /// Charges every pair unconditionally, each at its own cost
    /// (docs/semantics.md, "Charge"); the failure policy answers a store
    /// failure.
    ///
    /// # Errors
    /// As [`Gate::check_all`].
    pub async fn charge_all(&self, checks: &[Check<'_>]) -> Result<ChargeVerdict, Refusal> {
        self.limiter.charge_all(checks).await
    }

    /// Gives every pair its cost back now (docs/semantics.md, "Refund").
    ///
    /// # Errors
    /// As [`Gate::check_all`].
    pub async fn refund_all(&self, checks: &[Check<'_>]) -> Result<ChargeVerdict, Refusal> {
        self.limiter.refund_all(checks).await
    }

    /// Reserves every pair's cost for `ttl` (docs/semantics.md, "Reserve,
    /// then settle").
    ///
    /// # Errors
    /// As [`Gate::check_all`], and a `ttl` out of range.
    pub async fn reserve_all(
        &self,
        checks: &[Check<'_>],
        ttl: std::time::Duration,
    ) -> Result<TicketVerdict, Refusal> {
        self.limiter.reserve_all(checks, ttl).await
    }

    /// Settles (`actual`: one usage for every pair, or one per pair) or
    /// cancels (`None`) the reservation `ticket`.
    ///
    /// # Errors
    /// A ticket whose rules are gone, an `actual` of the wrong length, the
    /// store failed.
    pub async fn settle(
        &self,
        ticket: &Ticket,
        actual: Option<&[u64]>,
    ) -> Result<Settled, Refusal> {
        self.limiter.settle(ticket, actual).await
    }

    /// Acquires every pair's cost in slots of its concurrency rule.
    ///
    /// # Errors
    /// As [`Gate::check_all`], and a rule that is not `concurrency`.
    pub async fn acquire_all(&self, checks: &[Check<'_>]) -> Result<TicketVerdict, Refusal> {
        self.limiter.acquire_all(checks).await
    }

    /// Releases (or `renew`s) the lease `ticket`.
    ///
    /// # Errors
    /// A ticket whose rules are gone, the store failed.
    pub async fn release(&self, ticket: &Ticket, renew: bool) -> Result<Released, Refusal> {
        self.limiter.release(ticket, renew).await
    }

    /// Whether the store answers: always for the memory store; for Redis,
    /// not while the circuit breaker is open, else a `PING` within the
    /// store timeout.
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
