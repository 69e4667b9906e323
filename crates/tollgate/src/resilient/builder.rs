//! [`ResilientLimiterBuilder`]: the store timeout, failure policies,
//! breaker, replicas and heartbeat of a [`ResilientLimiter`].

use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use parking_lot::Mutex;

use super::{
    Breaker, DEFAULT_BREAKER_OPEN_FOR, DEFAULT_BREAKER_THRESHOLD, DEFAULT_HEARTBEAT,
    DEFAULT_NEAR_LIMIT_RATIO, DEFAULT_TIMEOUT, Inner, Meters, OnError, ResilientLimiter, Throttle,
    metric, replica_id,
};
use crate::limiter::Limiter;
use crate::rule::RuleError;
use crate::store::Store;
use crate::store::memory::DEFAULT_MAX_KEYS;
use crate::time::{Clock, MonotonicClock};

/// Builds a [`ResilientLimiter`]; see [`ResilientLimiter::builder`].
#[derive(Debug)]
#[must_use]
pub struct ResilientLimiterBuilder<S> {
    limiter: Arc<Limiter<S>>,
    timeout: Option<Duration>,
    on_error: OnError,
    rule_on_error: Vec<(String, OnError)>,
    breaker_threshold: u32,
    breaker_open_for: Duration,
    replicas: u64,
    heartbeat: Option<Duration>,
    local_max_keys: usize,
    near_limit_ratio: f64,
}

impl<S: Store> ResilientLimiterBuilder<S> {
    /// The builder [`ResilientLimiter::builder`] returns: the defaults.
    pub(super) fn new(limiter: Arc<Limiter<S>>) -> Self {
        Self {
            limiter,
            timeout: Some(DEFAULT_TIMEOUT),
            on_error: OnError::Allow,
            rule_on_error: Vec::new(),
            breaker_threshold: DEFAULT_BREAKER_THRESHOLD,
            breaker_open_for: DEFAULT_BREAKER_OPEN_FOR,
            replicas: 1,
            heartbeat: Some(DEFAULT_HEARTBEAT),
            local_max_keys: DEFAULT_MAX_KEYS,
            near_limit_ratio: DEFAULT_NEAR_LIMIT_RATIO,
        }
    }

    /// The longest a check waits on the store, connection setup and
    /// reconnection included (default [`DEFAULT_TIMEOUT`]); `None` waits as
    /// long as the store takes (an in-process store never needs one).
    pub fn timeout(mut self, timeout: impl Into<Option<Duration>>) -> Self {
        self.timeout = timeout.into();
        self
    }

    /// The failure policy of rules that set none (default
    /// [`OnError::Allow`]).
    pub fn on_error(mut self, policy: OnError) -> Self {
        self.on_error = policy;
        self
    }

    /// The failure policy of the rule named `rule`.
    pub fn rule_on_error(mut self, rule: impl Into<String>, policy: OnError) -> Self {
        self.rule_on_error.push((rule.into(), policy));
        self
    }

    /// Open the circuit breaker after `threshold` consecutive store failures
    /// (0: never), for `open_for` before one probe (defaults
    /// [`DEFAULT_BREAKER_THRESHOLD`], [`DEFAULT_BREAKER_OPEN_FOR`]).
    pub fn breaker(mut self, threshold: u32, open_for: Duration) -> Self {
        self.breaker_threshold = threshold;
        self.breaker_open_for = open_for;
        self
    }

    /// The replicas assumed to share the store until the first heartbeat
    /// answers (default 1; at least 1).
    pub fn replicas(mut self, replicas: u64) -> Self {
        self.replicas = replicas.max(1);
        self
    }

    /// The heartbeat interval (default [`DEFAULT_HEARTBEAT`]; at least
    /// 10 ms); `None` sends none and keeps [`Self::replicas`] for good.
    pub fn heartbeat(mut self, every: impl Into<Option<Duration>>) -> Self {
        self.heartbeat = every.into().map(|d| d.max(Duration::from_millis(10)));
        self
    }

    /// The most keys the `local` fallback holds (default
    /// [`DEFAULT_MAX_KEYS`]).
    pub fn local_max_keys(mut self, n: usize) -> Self {
        self.local_max_keys = n;
        self
    }

    /// The share of each rule's capacity past which admitted units count
    /// as near the limit ([`metric::NEAR_LIMIT`]; default
    /// [`DEFAULT_NEAR_LIMIT_RATIO`]): above 0, at most 1 (1 counts
    /// nothing). Checked by [`Self::build`].
    pub fn near_limit_ratio(mut self, ratio: f64) -> Self {
        self.near_limit_ratio = ratio;
        self
    }

    /// The limiter. Inside a tokio runtime the heartbeat task starts at
    /// once; outside one, at the first check.
    ///
    /// # Errors
    /// A policy given for a rule the limiter does not have (field
    /// `on_error`); a near-limit ratio not above 0 and at most 1 (field
    /// `near_limit_ratio`).
    pub fn build(self) -> Result<ResilientLimiter<S>, RuleError> {
        check_near_limit_ratio(self.near_limit_ratio).map_err(|message| RuleError {
            field: "near_limit_ratio",
            message,
        })?;
        let rule_count = self.limiter.rules().len();
        let mut policies = vec![self.on_error; rule_count];
        for (name, policy) in &self.rule_on_error {
            let Some(i) = self.limiter.rule_index(name) else {
                return Err(RuleError {
                    field: "on_error",
                    message: format!("on_error given for {name:?}, which is not a rule"),
                });
            };
            policies[i] = *policy;
        }
        // Zero series, so dashboards see them before the first failure.
        for kind in ["timeout", "unavailable", "protocol", "circuit_open"] {
            ::metrics::counter!(metric::STORE_ERRORS, "kind" => kind).increment(0);
        }
        for policy in ["allow", "deny", "local"] {
            ::metrics::counter!(metric::FAILURE_POLICY, "policy" => policy).increment(0);
        }
        ::metrics::counter!(metric::BREAKER_OPENED).increment(0);
        // Registered up front: with the memory store nothing is recorded.
        let _ = ::metrics::histogram!(metric::STORE_LATENCY);
        ::metrics::gauge!(metric::BREAKER_OPEN).set(0.0);
        #[allow(clippy::cast_precision_loss)]
        ::metrics::gauge!(metric::LIVE_REPLICAS).set(self.replicas as f64);
        // The breaker's cool-down and the latency metric: real time.
        let clock: Arc<dyn Clock> = Arc::new(MonotonicClock::new());
        let open = super::open::Open::new(self.limiter.rules());
        let meters = Meters::new(
            self.limiter.rules().iter().map(crate::Rule::capacity),
            self.near_limit_ratio,
        );
        let limiter = ResilientLimiter {
            inner: Arc::new(Inner {
                open,
                limiter: self.limiter,
                policies,
                timeout: self.timeout,
                breaker: Breaker::new(
                    self.breaker_threshold,
                    self.breaker_open_for,
                    Arc::clone(&clock),
                ),
                clock,
                trouble: Throttle::new(Duration::from_secs(1)),
                breaker_log: Throttle::new(Duration::from_secs(1)),
                live: AtomicU64::new(self.replicas),
                id: replica_id(),
                heartbeat: self.heartbeat,
                local: OnceLock::new(),
                local_max_keys: self.local_max_keys,
                refused: parking_lot::Mutex::new(None),
                refusing: std::sync::atomic::AtomicBool::new(false),
                meters,
                runtime: super::runtime::Runtime::new(),
            }),
            task: Mutex::new(None),
            started: AtomicBool::new(false),
            runtime_task: Mutex::new(None),
            runtime_started: AtomicBool::new(false),
        };
        limiter.start_heartbeat();
        Ok(limiter)
    }
}

/// Whether `ratio` can be a near-limit ratio: above 0 and at most 1.
///
/// # Errors
/// Why not, naming the value.
pub fn check_near_limit_ratio(ratio: f64) -> Result<(), String> {
    if ratio > 0.0 && ratio <= 1.0 {
        Ok(())
    } else {
        Err(format!(
            "near_limit_ratio must be above 0 and at most 1, got {ratio}"
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rule::{Algorithm, RuleSpec};
    use crate::store::memory::MemoryStore;
    #[test]
    fn unknown_rules_in_policies_are_refused() {
        let limiter = Limiter::new(
            MemoryStore::new(),
            [
                RuleSpec::new("a", Algorithm::Gcra, 1, Duration::from_secs(1))
                    .build()
                    .expect("rule"),
            ],
        )
        .expect("limiter");
        let err = ResilientLimiter::builder(limiter)
            .rule_on_error("b", OnError::Deny)
            .build()
            .expect_err("unknown rule");
        assert_eq!(err.field, "on_error");
    }
}
