//! The server's view of the limiter: checks with the store timeout, the
//! failure policy (`on_error`), a circuit breaker, metrics, and store
//! trouble logged at most once a second. Both front doors (HTTP API and
//! reverse proxy) decide through a [`Gate`].

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tollgate::store::AnyStore;
use tollgate::{
    Check, Decision, Error, Limiter, MAX_KEY_LEN, MemoryStore, MultiDecision, Rule, StoreError,
    StoreErrorKind,
};

use crate::config::{Config, OnError};
use crate::key::KeyExtractor;
use crate::metrics;

/// Consecutive store failures that open the circuit breaker.
pub const BREAKER_THRESHOLD: u32 = 5;
/// How long an open breaker skips the store before letting one probe
/// check through.
pub const BREAKER_OPEN_FOR: Duration = Duration::from_secs(1);

/// A decided check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    /// The combined decision (one pair for a single check).
    pub multi: MultiDecision,
    /// `Some(policy)` when the store failed and the failure policy
    /// (`allow` or `local`) answered instead.
    pub degraded: Option<OnError>,
}

/// Why a check was not decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// The request is at fault: unknown rule, key too long, no pairs.
    Invalid(Error),
    /// The store failed and the failure policy is `deny`.
    Unavailable(String),
}

/// Rules over the configured store, with the failure policy applied.
#[derive(Debug)]
pub struct Gate {
    limiter: Limiter<AnyStore>,
    /// The in-process fallback for `on_error = "local"`, quotas divided by
    /// `[store] replicas`; `None` when no rule uses it.
    local: Option<Limiter<MemoryStore>>,
    policies: HashMap<String, OnError>,
    keys: HashMap<String, KeyExtractor>,
    timeout: Duration,
    breaker: Breaker,
    trouble: Throttle,
}

impl Gate {
    /// A gate over `store` with the config's rules and policies.
    ///
    /// # Errors
    /// A rule the library refuses (config validation already checked them).
    pub fn new(config: &Config, store: AnyStore) -> Result<Self, String> {
        let rules: Vec<Rule> = config.rules.iter().map(|r| r.rule.clone()).collect();
        let policies: HashMap<String, OnError> = config
            .rules
            .iter()
            .map(|r| (r.rule.name().to_owned(), config.on_error_for(r)))
            .collect();
        let keys: HashMap<String, KeyExtractor> = config
            .rules
            .iter()
            .filter_map(|r| Some((r.rule.name().to_owned(), r.key.clone()?)))
            .collect();
        let is_memory = matches!(store, AnyStore::Memory(_));
        let local = if !is_memory && policies.values().any(|p| *p == OnError::Local) {
            let scaled = rules
                .iter()
                .map(|r| local_share(r, config.store.replicas))
                .collect::<Result<Vec<_>, _>>()?;
            let store = MemoryStore::builder()
                .max_keys(config.store.max_keys)
                .build();
            Some(Limiter::new(store, scaled).map_err(|e| e.to_string())?)
        } else {
            None
        };
        // Zero series, so dashboards see them before the first failure.
        for kind in ["timeout", "unavailable", "protocol", "circuit_open"] {
            ::metrics::counter!(metrics::STORE_ERRORS, "kind" => kind).increment(0);
        }
        for policy in ["allow", "deny", "local"] {
            ::metrics::counter!(metrics::FAILURE_POLICY, "policy" => policy).increment(0);
        }
        Ok(Self {
            limiter: Limiter::new(store, rules).map_err(|e| e.to_string())?,
            local,
            policies,
            keys,
            timeout: config.store.timeout,
            breaker: Breaker::new(),
            trouble: Throttle::new(Duration::from_secs(1)),
        })
    }

    /// The rules, in config order.
    #[must_use]
    pub fn rules(&self) -> &[Rule] {
        self.limiter.rules()
    }

    /// The rule named `name`.
    #[must_use]
    pub fn rule(&self, name: &str) -> Option<&Rule> {
        self.limiter.rule(name)
    }

    /// The failure policy of the rule named `name` (allow if unknown).
    #[must_use]
    pub fn policy(&self, name: &str) -> OnError {
        self.policies.get(name).copied().unwrap_or_default()
    }

    /// The `key` extractor of the rule named `name`, when it has one.
    #[must_use]
    pub fn key_of(&self, name: &str) -> Option<&KeyExtractor> {
        self.keys.get(name)
    }

    /// The store.
    #[must_use]
    pub fn store(&self) -> &AnyStore {
        self.limiter.store()
    }

    /// Checks every pair all-or-nothing (one pair for a single check).
    ///
    /// # Errors
    /// [`Refusal::Invalid`] for a bad request, [`Refusal::Unavailable`] when
    /// the store failed and a rule's policy is `deny`.
    pub async fn check_all(&self, checks: &[Check<'_>]) -> Result<Verdict, Refusal> {
        if checks.is_empty() {
            return Err(Refusal::Invalid(Error::NoChecks));
        }
        for c in checks {
            if c.key.len() > MAX_KEY_LEN {
                return Err(Refusal::Invalid(Error::KeyTooLong { len: c.key.len() }));
            }
            if self.limiter.rule(c.rule).is_none() {
                return Err(Refusal::Invalid(Error::UnknownRule(c.rule.to_owned())));
            }
        }
        let result = match self.limiter.store() {
            // In process: nothing to time out, nothing to break.
            AnyStore::Memory(_) => {
                let started = Instant::now();
                let r = self.limiter.check_all(checks).await;
                metrics::store_latency().record(started.elapsed().as_secs_f64());
                r
            }
            _ => self.check_store(checks).await,
        };
        match result {
            Ok(multi) => {
                count(checks, &multi);
                Ok(Verdict {
                    multi,
                    degraded: None,
                })
            }
            Err(Error::Store(e)) => self.on_store_error(checks, &e).await,
            Err(e) => Err(Refusal::Invalid(e)),
        }
    }

    async fn check_store(&self, checks: &[Check<'_>]) -> Result<MultiDecision, Error> {
        if !self.breaker.allow() {
            ::metrics::counter!(metrics::STORE_ERRORS, "kind" => "circuit_open").increment(1);
            return Err(Error::Store(StoreError::new(
                StoreErrorKind::Unavailable,
                "circuit breaker open after repeated store failures",
            )));
        }
        let started = Instant::now();
        let result = match tokio::time::timeout(self.timeout, self.limiter.check_all(checks)).await
        {
            Ok(r) => r,
            Err(_) => Err(Error::Store(StoreError::new(
                StoreErrorKind::Timeout,
                format!("no answer within {:?}", self.timeout),
            ))),
        };
        metrics::store_latency().record(started.elapsed().as_secs_f64());
        match &result {
            Ok(_) => self.breaker.success(),
            Err(Error::Store(e)) => {
                let kind = match e.kind() {
                    StoreErrorKind::Timeout => "timeout",
                    StoreErrorKind::Unavailable => "unavailable",
                    _ => "protocol",
                };
                ::metrics::counter!(metrics::STORE_ERRORS, "kind" => kind).increment(1);
                self.breaker.failure();
            }
            Err(_) => {}
        }
        result
    }

    /// Applies the strictest policy among the rules checked:
    /// deny > local > allow.
    async fn on_store_error(
        &self,
        checks: &[Check<'_>],
        error: &StoreError,
    ) -> Result<Verdict, Refusal> {
        let policy = checks
            .iter()
            .map(|c| self.policy(c.rule))
            .max_by_key(|p| match p {
                OnError::Deny => 2,
                OnError::Local => 1,
                _ => 0,
            })
            .unwrap_or_default();
        ::metrics::counter!(metrics::FAILURE_POLICY, "policy" => policy.as_str()).increment(1);
        self.trouble.report(|suppressed| {
            let more = if suppressed > 0 {
                format!(" ({suppressed} more store failures since the last report)")
            } else {
                String::new()
            };
            tracing::warn!("store trouble: {error}; answering with on_error = {policy}{more}");
        });
        match policy {
            OnError::Deny => {
                for c in checks {
                    ::metrics::counter!(metrics::CHECKS, "rule" => c.rule.to_owned(), "outcome" => "error")
                        .increment(1);
                }
                Err(Refusal::Unavailable(error.to_string()))
            }
            OnError::Local => {
                let local = self
                    .local
                    .as_ref()
                    .ok_or_else(|| Refusal::Unavailable(error.to_string()))?;
                let multi = local.check_all(checks).await.map_err(Refusal::Invalid)?;
                count(checks, &multi);
                Ok(Verdict {
                    multi,
                    degraded: Some(OnError::Local),
                })
            }
            _ => {
                let decisions = checks
                    .iter()
                    .map(|c| {
                        let capacity = self.limiter.rule(c.rule).map_or(0, Rule::capacity);
                        Decision {
                            allowed: true,
                            limit: capacity,
                            remaining: capacity.saturating_sub(c.cost),
                            reset_after: Duration::ZERO,
                            retry_after: None,
                        }
                    })
                    .collect();
                let multi = MultiDecision::from_decisions(decisions);
                count(checks, &multi);
                Ok(Verdict {
                    multi,
                    degraded: Some(OnError::Allow),
                })
            }
        }
    }

    /// Whether the store answers: always for the memory store; a `PING`
    /// within the store timeout for Redis.
    ///
    /// # Errors
    /// Why the store is not ready.
    pub async fn ready(&self) -> Result<(), String> {
        match self.limiter.store() {
            AnyStore::Redis(redis) => {
                match tokio::time::timeout(self.timeout, redis.ping()).await {
                    Ok(Ok(())) => Ok(()),
                    Ok(Err(e)) => Err(e.to_string()),
                    Err(_) => Err(format!(
                        "store timed out: no PING answer within {:?}",
                        self.timeout
                    )),
                }
            }
            _ => Ok(()),
        }
    }

    /// Keys held by the memory store (`None` for other stores).
    #[must_use]
    pub fn memory_keys(&self) -> Option<usize> {
        match self.limiter.store() {
            AnyStore::Memory(m) => Some(m.len()),
            _ => None,
        }
    }
}

/// Counts each pair under its rule with its own answer.
fn count(checks: &[Check<'_>], multi: &MultiDecision) {
    for (c, d) in checks.iter().zip(&multi.decisions) {
        let outcome = if d.allowed {
            metrics::Outcome::Allowed
        } else {
            metrics::Outcome::Denied
        };
        metrics::count_check(c.rule, outcome);
    }
}

/// `rule` with its quota divided among `replicas` (at least 1 unit).
fn local_share(rule: &Rule, replicas: u64) -> Result<Rule, String> {
    let mut spec = rule.spec();
    let replicas = replicas.max(1);
    spec.limit = (spec.limit / replicas).max(1);
    spec.burst = spec.burst.map(|b| (b / replicas).max(1));
    spec.build().map_err(|e| e.to_string())
}

/// Stops hammering a dead store: after [`BREAKER_THRESHOLD`] consecutive
/// failures, checks skip the store for [`BREAKER_OPEN_FOR`]; then one probe
/// goes through, and its success closes the breaker.
#[derive(Debug)]
struct Breaker {
    start: Instant,
    failures: AtomicU32,
    /// Milliseconds since `start` until which the breaker is open; 0 when
    /// closed.
    open_until: AtomicU64,
    probing: AtomicBool,
}

impl Breaker {
    fn new() -> Self {
        Self {
            start: Instant::now(),
            failures: AtomicU32::new(0),
            open_until: AtomicU64::new(0),
            probing: AtomicBool::new(false),
        }
    }

    fn now_ms(&self) -> u64 {
        u64::try_from(self.start.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    fn allow(&self) -> bool {
        let until = self.open_until.load(Ordering::Acquire);
        if until == 0 {
            return true;
        }
        if self.now_ms() < until {
            return false;
        }
        // Half open: one probe at a time.
        self.probing
            .compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }

    fn success(&self) {
        self.failures.store(0, Ordering::Release);
        if self.open_until.swap(0, Ordering::AcqRel) != 0 {
            tracing::info!("store answering again; circuit breaker closed");
        }
        self.probing.store(false, Ordering::Release);
    }

    fn failure(&self) {
        let n = self
            .failures
            .fetch_add(1, Ordering::AcqRel)
            .saturating_add(1);
        if n >= BREAKER_THRESHOLD {
            let until = self.now_ms() + u64::try_from(BREAKER_OPEN_FOR.as_millis()).unwrap_or(1000);
            self.open_until.store(until.max(1), Ordering::Release);
            self.probing.store(false, Ordering::Release);
        }
    }
}

/// Lets an event through at most once per `every`, counting the rest.
#[derive(Debug)]
pub(crate) struct Throttle {
    start: Instant,
    every_ms: u64,
    /// Milliseconds since `start` before which reports are suppressed.
    next: AtomicU64,
    suppressed: AtomicU64,
}

impl Throttle {
    pub(crate) fn new(every: Duration) -> Self {
        Self {
            start: Instant::now(),
            every_ms: u64::try_from(every.as_millis()).unwrap_or(1000),
            next: AtomicU64::new(0),
            suppressed: AtomicU64::new(0),
        }
    }

    /// Calls `report` with the number of events suppressed since the last
    /// report, unless one was made less than `every` ago.
    pub(crate) fn report(&self, report: impl FnOnce(u64)) {
        let now = u64::try_from(self.start.elapsed().as_millis()).unwrap_or(u64::MAX);
        let next = self.next.load(Ordering::Acquire);
        if now >= next
            && self
                .next
                .compare_exchange(
                    next,
                    now + self.every_ms,
                    Ordering::AcqRel,
                    Ordering::Acquire,
                )
                .is_ok()
        {
            report(self.suppressed.swap(0, Ordering::AcqRel));
        } else {
            self.suppressed.fetch_add(1, Ordering::AcqRel);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn throttle_reports_once_per_period() {
        let t = Throttle::new(Duration::from_secs(3600));
        let mut reports = Vec::new();
        for _ in 0..5 {
            t.report(|n| reports.push(n));
        }
        assert_eq!(reports, [0]);
        assert_eq!(t.suppressed.load(Ordering::Acquire), 4);
    }

    #[test]
    fn breaker_opens_after_threshold_and_probes_once() {
        let b = Breaker::new();
        for _ in 0..BREAKER_THRESHOLD - 1 {
            b.failure();
            assert!(b.allow());
        }
        b.failure();
        assert!(!b.allow());
        // Pretend the open period is over.
        b.open_until.store(1, Ordering::Release);
        std::thread::sleep(Duration::from_millis(2));
        assert!(b.allow(), "one probe");
        assert!(!b.allow(), "only one probe at a time");
        b.success();
        assert!(b.allow());
        assert!(b.allow());
    }

    #[test]
    fn local_share_divides_quota() {
        let rule =
            tollgate::RuleSpec::new("r", tollgate::Algorithm::Gcra, 100, Duration::from_secs(1))
                .burst(30)
                .build()
                .expect("rule");
        let local = local_share(&rule, 3).expect("share");
        assert_eq!((local.limit(), local.burst()), (33, 10));
        let tiny = local_share(&rule, 1000).expect("share");
        assert_eq!((tiny.limit(), tiny.burst()), (1, 1));
    }
}
