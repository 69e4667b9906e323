//! A [`Limiter`] that survives its store: [`ResilientLimiter`].
//!
//! A shared store can be slow, down, failing over or flushed. The
//! [`ResilientLimiter`] wraps a [`Limiter`] and makes sure that
//!
//! * **no check waits longer than the store timeout** (connection setup and
//!   reconnection included: the whole call is bounded, whatever the store
//!   does inside it);
//! * past it, **the failure policy** of the rules checked answers
//!   ([`OnError`]): `allow` admits and marks the answer degraded, `deny`
//!   refuses ([`Refusal::Unavailable`]), `local` decides with an in-process
//!   limiter holding each rule's quota divided by the number of live
//!   replicas;
//! * **a circuit breaker** stops calling a store that failed several times in
//!   a row: for a cool-down every check goes straight to the policy, then
//!   one probe goes through, and the breaker closes by itself once the store
//!   answers;
//! * every store failure, policy answer and breaker opening is **counted**
//!   through the [`metrics`](https://docs.rs/metrics) facade (names in
//!   [`metric`]) and **logged** through `tracing`, at most once a second.
//!
//! **Live replicas.** Each `ResilientLimiter` has a random id and, when its
//! store is shared ([`Store::heartbeat`] answers a count: the Redis store),
//! a background task sends a heartbeat every interval (default 1 s) and
//! learns how many replicas beat within the last three intervals. Before the
//! first answer, and while the store is down, the last known count is used
//! (initially [`ResilientLimiterBuilder::replicas`]). The task stops when the
//! `ResilientLimiter` is dropped.
//!
//! ```
//! use std::time::Duration;
//! use tollgate::resilient::{OnError, ResilientLimiter};
//! use tollgate::{Algorithm, Limiter, MemoryStore, RuleSpec};
//!
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! let limiter = Limiter::new(MemoryStore::new(), [
//!     RuleSpec::new("per_user", Algorithm::Gcra, 2, Duration::from_secs(60)).build()?,
//! ])?;
//! let limiter = ResilientLimiter::builder(limiter)
//!     .timeout(Duration::from_millis(50))
//!     .on_error(OnError::Local)
//!     .replicas(4)
//!     .build()?;
//!
//! let verdict = limiter.check("per_user", "alice", 1).await?;
//! assert!(verdict.multi.allowed);
//! assert_eq!(verdict.degraded, None); // the store answered
//! assert_eq!(limiter.live_replicas(), 4); // a memory store has no fleet
//! assert!(limiter.ready().await.is_ok());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! # }).unwrap();
//! ```

use std::fmt;
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock, Weak};
use std::time::{Duration, Instant};

use parking_lot::{Mutex, RwLock};

use crate::decision::{Decision, MultiDecision};
use crate::error::{Error, StoreError, StoreErrorKind};
use crate::limiter::{Check, Limiter};
use crate::rule::{Rule, RuleError};
use crate::store::memory::{DEFAULT_MAX_KEYS, MemoryStore};
use crate::store::{KeyCheck, Store};

/// Default store timeout: the longest a check waits on the store.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_millis(50);
/// Default number of consecutive store failures that open the breaker.
pub const DEFAULT_BREAKER_THRESHOLD: u32 = 5;
/// Default time an open breaker skips the store before one probe.
pub const DEFAULT_BREAKER_OPEN_FOR: Duration = Duration::from_secs(1);
/// Default interval between two heartbeats of a replica.
pub const DEFAULT_HEARTBEAT: Duration = Duration::from_secs(1);
/// A heartbeat counts this many intervals.
pub const HEARTBEAT_INTERVALS: u32 = 3;

/// The metric names (recorded through the `metrics` facade; install any
/// recorder, e.g. `metrics-exporter-prometheus`, to see them).
pub mod metric {
    /// Counter, labels `rule`, `outcome` (`allowed`, `denied`, `error`,
    /// `denied_by_other`): one per (rule, key) pair checked, with that
    /// pair's own answer; `error` when the store failed and the policy
    /// refused; `denied_by_other` for a pair that would have admitted in a
    /// multi-rule check another pair denied (it consumed nothing).
    pub const CHECKS: &str = "tollgate_checks_total";
    /// Histogram, seconds: the time the store took per check (success or
    /// failure; not recorded for calls the open breaker skipped, nor for
    /// an in-process store, see [`crate::Store::in_process`]).
    pub const STORE_LATENCY: &str = "tollgate_store_latency_seconds";
    /// Counter, label `kind` (`timeout`, `unavailable`, `protocol`,
    /// `circuit_open`): failed store calls, and calls skipped while the
    /// circuit breaker is open.
    pub const STORE_ERRORS: &str = "tollgate_store_errors_total";
    /// Counter, label `policy` (`allow`, `deny`, `local`): checks the
    /// failure policy answered instead of the store.
    pub const FAILURE_POLICY: &str = "tollgate_failure_policy_total";
    /// Counter: times the circuit breaker opened.
    pub const BREAKER_OPENED: &str = "tollgate_circuit_breaker_opened_total";
    /// Gauge: 1 while the circuit breaker is open, else 0.
    pub const BREAKER_OPEN: &str = "tollgate_circuit_breaker_open";
    /// Gauge: the live replicas sharing the store, as last learned from
    /// the heartbeat (the configured count before the first one).
    pub const LIVE_REPLICAS: &str = "tollgate_live_replicas";
}

/// What a check answers when the store fails (`on_error`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum OnError {
    /// Admit the request (fail open) and mark the answer degraded. The
    /// default.
    #[default]
    Allow,
    /// Refuse the request (fail closed): [`Refusal::Unavailable`].
    Deny,
    /// Decide with an in-process limiter holding the rule's quota divided
    /// by the number of live replicas.
    Local,
}

impl OnError {
    /// The name used in config files.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            OnError::Allow => "allow",
            OnError::Deny => "deny",
            OnError::Local => "local",
        }
    }

    /// How strict the policy is: of several rules in one check, the
    /// strictest policy answers (deny, then local, then allow).
    fn strictness(self) -> u8 {
        match self {
            OnError::Allow => 0,
            OnError::Local => 1,
            OnError::Deny => 2,
        }
    }
}

impl fmt::Display for OnError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for OnError {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "allow" => Ok(OnError::Allow),
            "deny" => Ok(OnError::Deny),
            "local" => Ok(OnError::Local),
            _ => Err(format!(
                "unknown on_error {s:?}; expected allow, deny or local"
            )),
        }
    }
}

/// A decided check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    /// The combined decision (one pair for a single check).
    pub multi: MultiDecision,
    /// `Some(policy)` when the store failed and the failure policy
    /// (`allow` or `local`) answered instead. Under `allow` nothing was
    /// decided: every pair reads admitted with its full capacity.
    pub degraded: Option<OnError>,
}

impl Verdict {
    /// The deciding pair's decision.
    #[must_use]
    pub fn decision(&self) -> &Decision {
        self.multi.decision()
    }
}

/// Why a check was not decided.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Refusal {
    /// The request is at fault: unknown rule, key too long, no pairs.
    Invalid(Error),
    /// The store failed (or the breaker is open) and the failure policy is
    /// `deny`.
    Unavailable(StoreError),
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Refusal::Invalid(e) => e.fmt(f),
            Refusal::Unavailable(e) => write!(f, "{e} (on_error = deny)"),
        }
    }
}

impl std::error::Error for Refusal {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Refusal::Invalid(e) => Some(e),
            Refusal::Unavailable(e) => Some(e),
        }
    }
}

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
}

impl<S: Store> ResilientLimiterBuilder<S> {
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

    /// The limiter. Inside a tokio runtime the heartbeat task starts at
    /// once; outside one, at the first check.
    ///
    /// # Errors
    /// A policy given for a rule the limiter does not have (field
    /// `on_error`).
    pub fn build(self) -> Result<ResilientLimiter<S>, RuleError> {
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
        let limiter = ResilientLimiter {
            inner: Arc::new(Inner {
                limiter: self.limiter,
                policies,
                timeout: self.timeout,
                breaker: Breaker::new(self.breaker_threshold, self.breaker_open_for),
                trouble: Throttle::new(Duration::from_secs(1)),
                breaker_log: Throttle::new(Duration::from_secs(1)),
                live: AtomicU64::new(self.replicas),
                id: replica_id(),
                heartbeat: self.heartbeat,
                local: OnceLock::new(),
                local_max_keys: self.local_max_keys,
                refused: parking_lot::Mutex::new(None),
                refusing: std::sync::atomic::AtomicBool::new(false),
                meters: Meters::new(rule_count),
            }),
            task: Mutex::new(None),
            started: AtomicBool::new(false),
        };
        limiter.start_heartbeat();
        Ok(limiter)
    }
}

/// A [`Limiter`] with a store timeout, a failure policy per rule, a circuit
/// breaker, an in-process fallback sized by the live replicas, metrics and
/// rate-limited logs. See the [module](self) docs.
pub struct ResilientLimiter<S = MemoryStore> {
    inner: Arc<Inner<S>>,
    /// The heartbeat task, aborted on drop.
    task: Mutex<Option<tokio::task::AbortHandle>>,
    started: AtomicBool,
}

struct Inner<S> {
    limiter: Arc<Limiter<S>>,
    /// Per rule, in the limiter's order.
    policies: Vec<OnError>,
    timeout: Option<Duration>,
    breaker: Breaker,
    trouble: Throttle,
    breaker_log: Throttle,
    /// Live replicas, last known.
    live: AtomicU64,
    id: String,
    heartbeat: Option<Duration>,
    /// The `local` fallback, made at its first use.
    local: OnceLock<Local>,
    local_max_keys: usize,
    meters: Meters,
    /// The last heartbeat's refusal (not a timeout): a store that answers
    /// `PING` but refuses writes (a replica, out of memory) is not ready.
    refused: parking_lot::Mutex<Option<StoreError>>,
    /// Whether `refused` holds one (read on every check, without the lock).
    refusing: std::sync::atomic::AtomicBool,
}

/// Metric handles, registered at first use and kept: `counter!` with a
/// rule label builds its key (two allocations) and looks it up in the
/// recorder on every call, which is a tenth of a memory-store check.
/// Install the metrics recorder before the first check.
struct Meters {
    /// Per rule (the limiter's order): allowed, denied, error,
    /// denied_by_other.
    checks: Vec<[OnceLock<::metrics::Counter>; 4]>,
    latency: OnceLock<::metrics::Histogram>,
}

impl Meters {
    fn new(rules: usize) -> Self {
        Self {
            checks: (0..rules).map(|_| Default::default()).collect(),
            latency: OnceLock::new(),
        }
    }

    fn latency(&self) -> &::metrics::Histogram {
        self.latency
            .get_or_init(|| ::metrics::histogram!(metric::STORE_LATENCY))
    }

    /// Counts one pair of rule `i` (named `name`) under `outcome`
    /// (0 allowed, 1 denied, 2 error, 3 denied by another pair).
    fn count(&self, i: usize, name: &str, outcome: usize) {
        const LABELS: [&str; 4] = ["allowed", "denied", "error", "denied_by_other"];
        let Some(slot) = self.checks.get(i).and_then(|c| c.get(outcome)) else {
            return;
        };
        slot.get_or_init(|| {
            ::metrics::counter!(metric::CHECKS, "rule" => name.to_owned(), "outcome" => LABELS[outcome])
        })
        .increment(1);
    }
}

impl<S: Store> fmt::Debug for ResilientLimiter<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let i = &self.inner;
        f.debug_struct("ResilientLimiter")
            .field(
                "rules",
                &i.limiter.rules().iter().map(Rule::name).collect::<Vec<_>>(),
            )
            .field("policies", &i.policies)
            .field("timeout", &i.timeout)
            .field("replica", &i.id)
            .field("live_replicas", &i.live.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

impl<S> Drop for ResilientLimiter<S> {
    fn drop(&mut self) {
        if let Some(task) = self.task.lock().take() {
            task.abort();
        }
    }
}

impl<S> ResilientLimiter<S> {
    /// The wrapped limiter.
    #[must_use]
    pub fn limiter(&self) -> &Arc<Limiter<S>> {
        &self.inner.limiter
    }

    /// The failure policy of the rule named `name` (`None` if unknown).
    #[must_use]
    pub fn policy(&self, name: &str) -> Option<OnError> {
        self.inner
            .limiter
            .rule_index(name)
            .map(|i| self.inner.policies[i])
    }

    /// The store timeout.
    #[must_use]
    pub fn timeout(&self) -> Option<Duration> {
        self.inner.timeout
    }

    /// This replica's random id (its member in the heartbeat set).
    #[must_use]
    pub fn replica_id(&self) -> &str {
        &self.inner.id
    }

    /// The live replicas sharing the store, as last learned.
    #[must_use]
    pub fn live_replicas(&self) -> u64 {
        self.inner.live.load(Ordering::Acquire)
    }

    /// Whether the circuit breaker is open (checks skip the store).
    #[must_use]
    pub fn breaker_open(&self) -> bool {
        self.inner.breaker.is_open()
    }
}

impl<S: Store> ResilientLimiter<S> {
    /// A builder over `limiter` (a [`Limiter`] or an `Arc` of one) with the
    /// defaults: timeout [`DEFAULT_TIMEOUT`], every rule `allow`, breaker
    /// after [`DEFAULT_BREAKER_THRESHOLD`] failures for
    /// [`DEFAULT_BREAKER_OPEN_FOR`], 1 replica until a heartbeat (every
    /// [`DEFAULT_HEARTBEAT`]) says otherwise.
    pub fn builder(limiter: impl Into<Arc<Limiter<S>>>) -> ResilientLimiterBuilder<S> {
        ResilientLimiterBuilder {
            limiter: limiter.into(),
            timeout: Some(DEFAULT_TIMEOUT),
            on_error: OnError::Allow,
            rule_on_error: Vec::new(),
            breaker_threshold: DEFAULT_BREAKER_THRESHOLD,
            breaker_open_for: DEFAULT_BREAKER_OPEN_FOR,
            replicas: 1,
            heartbeat: Some(DEFAULT_HEARTBEAT),
            local_max_keys: DEFAULT_MAX_KEYS,
        }
    }

    /// The store.
    #[must_use]
    pub fn store(&self) -> &S {
        self.inner.limiter.store()
    }

    /// The rules, in order.
    #[must_use]
    pub fn rules(&self) -> &[Rule] {
        self.inner.limiter.rules()
    }

    /// The rule named `name`.
    #[must_use]
    pub fn rule(&self, name: &str) -> Option<&Rule> {
        self.inner.limiter.rule(name)
    }

    /// The position of the rule named `name` in [`ResilientLimiter::rules`].
    #[must_use]
    pub fn rule_index(&self, name: &str) -> Option<usize> {
        self.inner.limiter.rule_index(name)
    }

    /// Starts the heartbeat task if it is not running, there is one to run
    /// and a tokio runtime to run it on.
    fn start_heartbeat(&self) {
        let Some(every) = self.inner.heartbeat else {
            return;
        };
        if self.started.load(Ordering::Acquire) {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        if self.started.swap(true, Ordering::AcqRel) {
            return;
        }
        let weak = Arc::downgrade(&self.inner);
        let task = runtime.spawn(heartbeat(weak, every));
        *self.task.lock() = Some(task.abort_handle());
    }

    /// Checks `key` under `rule`, consuming `cost` units when admitted.
    ///
    /// # Errors
    /// As [`ResilientLimiter::check_all`].
    pub async fn check(
        &self,
        rule: &str,
        key: impl AsRef<[u8]>,
        cost: u64,
    ) -> Result<Verdict, Refusal> {
        self.check_all(&[Check::new(rule, key.as_ref()).cost(cost)])
            .await
    }

    /// Checks every pair all-or-nothing; on a store failure the strictest
    /// policy among the pairs' rules answers.
    ///
    /// # Errors
    /// [`Refusal::Invalid`] for a bad request (no pairs, unknown rule, key
    /// too long); [`Refusal::Unavailable`] when the store failed and the
    /// policy is `deny`.
    pub async fn check_all(&self, checks: &[Check<'_>]) -> Result<Verdict, Refusal> {
        self.check_all_as(checks, None).await
    }

    /// Like [`ResilientLimiter::check_all`], with `policy` (when given)
    /// answering a store failure instead of the rules' own: for a front
    /// door that sets one policy for everything it checks.
    ///
    /// # Errors
    /// As [`ResilientLimiter::check_all`].
    pub async fn check_all_as(
        &self,
        checks: &[Check<'_>],
        policy: Option<OnError>,
    ) -> Result<Verdict, Refusal> {
        // Each pair's rule is looked up once, here; one pair (the common
        // case) needs no vector.
        let rules = self.inner.limiter.rules();
        let invalid = Refusal::Invalid;
        match checks {
            [] => Err(invalid(Error::NoChecks)),
            [c] => {
                let i = self.inner.limiter.resolve_index(c).map_err(invalid)?;
                let resolved = [KeyCheck {
                    rule: &rules[i],
                    key: c.key,
                    cost: c.cost,
                }];
                self.decide(&resolved, &[i], policy).await
            }
            _ => {
                let mut index = Vec::with_capacity(checks.len());
                let mut resolved = Vec::with_capacity(checks.len());
                for c in checks {
                    let i = self.inner.limiter.resolve_index(c).map_err(invalid)?;
                    index.push(i);
                    resolved.push(KeyCheck {
                        rule: &rules[i],
                        key: c.key,
                        cost: c.cost,
                    });
                }
                self.decide(&resolved, &index, policy).await
            }
        }
    }

    /// Decides valid checks, resolved to `resolved` (rule `index[n]` for
    /// pair `n`).
    async fn decide(
        &self,
        resolved: &[KeyCheck<'_>],
        index: &[usize],
        policy: Option<OnError>,
    ) -> Result<Verdict, Refusal> {
        self.start_heartbeat();
        match self.inner.call_store(resolved).await {
            Ok(multi) => {
                self.inner.count(resolved, index, &multi);
                Ok(Verdict {
                    multi,
                    degraded: None,
                })
            }
            Err(e) => self.inner.on_store_error(resolved, index, &e, policy).await,
        }
    }

    /// Whether the store answers: not while the breaker is open, else a
    /// [`Store::ping`] within the timeout (which, once the cool-down is
    /// over, also serves as the breaker's probe); and, on a shared store,
    /// not while the last heartbeat's write was refused (a server that
    /// answers `PING` as a replica, or out of memory, fails every check).
    ///
    /// # Errors
    /// Why the store is not ready.
    pub async fn ready(&self) -> Result<(), StoreError> {
        self.start_heartbeat();
        let inner = &self.inner;
        if inner.breaker.is_open() {
            return Err(StoreError::new(
                StoreErrorKind::Unavailable,
                "circuit breaker open after repeated store failures",
            ));
        }
        let result = inner.within("PING", inner.limiter.store().ping()).await;
        if result.is_ok() {
            inner.store_answered();
            if inner.refusing.load(Ordering::Relaxed) {
                // The last heartbeat's write was refused: try one now, so a
                // store that takes writes again is ready at once, not at the
                // next heartbeat (an instance out of rotation gets no
                // checks to tell it).
                if let Some(every) = inner.heartbeat {
                    let beat = inner
                        .limiter
                        .store()
                        .heartbeat(&inner.id, every * HEARTBEAT_INTERVALS);
                    match inner.within("heartbeat", beat).await {
                        Ok(_) => inner.set_refused(None),
                        Err(e) if e.kind() != StoreErrorKind::Timeout => {
                            inner.set_refused(Some(e));
                        }
                        Err(_) => {}
                    }
                }
            }
            if let Some(e) = inner.refused.lock().clone() {
                return Err(StoreError::new(
                    e.kind(),
                    format!("PING answered, but the last heartbeat's write was refused ({e})"),
                ));
            }
        }
        result
    }
}

fn timed_out(t: Duration, what: &str) -> StoreError {
    StoreError::new(
        StoreErrorKind::Timeout,
        format!("no {what} answer within {t:?}"),
    )
}

/// Whether pair `n` repeats the (rule, key) of an earlier pair of the same
/// check (rules are told apart by name, as the stores merge them).
fn named_before(checks: &[KeyCheck<'_>], n: usize) -> bool {
    let (Some(this), Some(earlier)) = (checks.get(n), checks.get(..n)) else {
        return false;
    };
    earlier
        .iter()
        .any(|c| c.key == this.key && c.rule.name() == this.rule.name())
}

impl<S: Store> Inner<S> {
    /// `call`, failed as a timeout (naming `what`) past the store timeout,
    /// if there is one.
    async fn within<T>(
        &self,
        what: &str,
        call: impl Future<Output = Result<T, StoreError>>,
    ) -> Result<T, StoreError> {
        match self.timeout {
            Some(t) => tokio::time::timeout(t, call)
                .await
                .unwrap_or_else(|_| Err(timed_out(t, what))),
            None => call.await,
        }
    }

    /// Notes a heartbeat's refusal (`None`: writes go through): while one
    /// is noted, the store is not ready.
    fn set_refused(&self, refused: Option<StoreError>) {
        self.refusing.store(refused.is_some(), Ordering::Relaxed);
        *self.refused.lock() = refused;
    }

    /// Counts each pair (rule `index[n]` for pair `n`) under its rule with
    /// its own answer; a (rule, key) named again in the same check is one
    /// check (the store decides it once, with the costs added).
    fn count(&self, checks: &[KeyCheck<'_>], index: &[usize], multi: &MultiDecision) {
        let rules = self.limiter.rules();
        for (n, (&i, d)) in index.iter().zip(&multi.decisions).enumerate() {
            if named_before(checks, n) {
                continue;
            }
            // A pair that would have admitted, in a check another pair
            // denied, consumed nothing: not an admission.
            let outcome = match (d.allowed, multi.allowed) {
                (true, true) => 0,
                (false, _) => 1,
                (true, false) => 3,
            };
            self.meters.count(i, rules[i].name(), outcome);
        }
    }

    /// One call to the store, bounded by the timeout and gated by the
    /// breaker.
    async fn call_store(&self, checks: &[KeyCheck<'_>]) -> Result<MultiDecision, StoreError> {
        if !self.breaker.allow() {
            ::metrics::counter!(metric::STORE_ERRORS, "kind" => "circuit_open").increment(1);
            return Err(StoreError::new(
                StoreErrorKind::Unavailable,
                "circuit breaker open after repeated store failures",
            ));
        }
        // An in-process store is not timed (see `Store::in_process`).
        let started = (!self.limiter.store().in_process()).then(Instant::now);
        let result = self
            .within("check", self.limiter.store().check_all(checks, None))
            .await;
        if let Some(started) = started {
            self.meters
                .latency()
                .record(started.elapsed().as_secs_f64());
        }
        match &result {
            Ok(_) => {
                self.store_answered();
                // A check went through: whatever the last heartbeat met
                // is over.
                if self.refusing.load(Ordering::Relaxed) {
                    self.set_refused(None);
                }
            }
            Err(e) => {
                let kind = match e.kind() {
                    StoreErrorKind::Timeout => "timeout",
                    StoreErrorKind::Unavailable => "unavailable",
                    _ => "protocol",
                };
                ::metrics::counter!(metric::STORE_ERRORS, "kind" => kind).increment(1);
                if self.breaker.failure() {
                    ::metrics::counter!(metric::BREAKER_OPENED).increment(1);
                    ::metrics::gauge!(metric::BREAKER_OPEN).set(1.0);
                    let open_for = self.breaker.open_for;
                    // Since the last success: the threshold when it first
                    // opens, more when a probe fails and it opens again.
                    let failed = self.breaker.failures.load(Ordering::Acquire);
                    self.breaker_log.report(|suppressed| {
                        let more = if suppressed > 0 {
                            format!(" (opened {suppressed} more times since the last report)")
                        } else {
                            String::new()
                        };
                        tracing::warn!(
                            "circuit breaker open: the store failed {failed} times in a row \
                             ({e}); skipping it for {open_for:?}{more}"
                        );
                    });
                }
            }
        }
        result
    }

    /// The store answered (a check, a probe or a heartbeat).
    fn store_answered(&self) {
        if self.breaker.success() {
            ::metrics::gauge!(metric::BREAKER_OPEN).set(0.0);
            tracing::info!("store answering again; circuit breaker closed");
        }
    }

    /// The policy answers a check the store failed (`checks` resolved,
    /// rule `index[n]` for pair `n`).
    async fn on_store_error(
        &self,
        checks: &[KeyCheck<'_>],
        index: &[usize],
        error: &StoreError,
        policy: Option<OnError>,
    ) -> Result<Verdict, Refusal> {
        let policy = policy.unwrap_or_else(|| {
            index
                .iter()
                .map(|&i| self.policies[i])
                .max_by_key(|p| p.strictness())
                .unwrap_or_default()
        });
        ::metrics::counter!(metric::FAILURE_POLICY, "policy" => policy.as_str()).increment(1);
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
                for (n, (&i, c)) in index.iter().zip(checks).enumerate() {
                    if !named_before(checks, n) {
                        self.meters.count(i, c.rule.name(), 2);
                    }
                }
                Err(Refusal::Unavailable(error.clone()))
            }
            OnError::Local => {
                let multi = self.check_locally(checks, index).await?;
                self.count(checks, index, &multi);
                Ok(Verdict {
                    multi,
                    degraded: Some(OnError::Local),
                })
            }
            OnError::Allow => {
                let decisions = checks
                    .iter()
                    .map(|c| {
                        let capacity = c.rule.capacity();
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
                self.count(checks, index, &multi);
                Ok(Verdict {
                    multi,
                    degraded: Some(OnError::Allow),
                })
            }
        }
    }

    /// The in-process decision: every rule's quota divided by the live
    /// replicas.
    async fn check_locally(
        &self,
        checks: &[KeyCheck<'_>],
        index: &[usize],
    ) -> Result<MultiDecision, Refusal> {
        let local = self.local.get_or_init(|| Local {
            store: MemoryStore::builder().max_keys(self.local_max_keys).build(),
            shares: RwLock::new((0, Arc::new(Vec::new()))),
        });
        let replicas = self.live.load(Ordering::Acquire).max(1);
        let shares = local.shares(replicas, self.limiter.rules());
        let resolved: Vec<KeyCheck<'_>> = checks
            .iter()
            .zip(index)
            .map(|(c, &i)| KeyCheck {
                rule: &shares[i],
                key: c.key,
                cost: c.cost,
            })
            .collect();
        local
            .store
            .check_all(&resolved, None)
            .await
            .map_err(Refusal::Unavailable)
    }
}

/// The `local` fallback: an in-process store and the rules at the current
/// share. The store keeps its state by rule *name*, so when the live count
/// changes the same state is read against the new share (a GCRA key keeps
/// its debt, a window its count): nothing is forgotten.
struct Local {
    store: MemoryStore,
    /// (replicas, every rule with its quota divided by them).
    shares: RwLock<(u64, Arc<Vec<Rule>>)>,
}

impl Local {
    fn shares(&self, replicas: u64, rules: &[Rule]) -> Arc<Vec<Rule>> {
        {
            let current = self.shares.read();
            if current.0 == replicas {
                return Arc::clone(&current.1);
            }
        }
        let scaled: Arc<Vec<Rule>> =
            Arc::new(rules.iter().map(|r| local_share(r, replicas)).collect());
        *self.shares.write() = (replicas, Arc::clone(&scaled));
        scaled
    }
}

/// `rule` with its quota (limit and burst) divided among `replicas`, at
/// least 1 unit each. A share the library refuses (it cannot happen for a
/// valid rule: the emission interval only grows) keeps the rule whole.
#[must_use]
pub fn local_share(rule: &Rule, replicas: u64) -> Rule {
    let replicas = replicas.max(1);
    if replicas == 1 {
        return rule.clone();
    }
    let mut spec = rule.spec();
    spec.limit = (spec.limit / replicas).max(1);
    spec.burst = spec.burst.map(|b| (b / replicas).max(1));
    spec.build().unwrap_or_else(|_| rule.clone())
}

/// The heartbeat task: every `every`, tells the store this replica lives
/// and learns how many do. Ends when the limiter is gone, or at once when
/// the store is not shared.
async fn heartbeat<S: Store>(weak: Weak<Inner<S>>, every: Duration) {
    let ttl = every * HEARTBEAT_INTERVALS;
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let Some(inner) = weak.upgrade() else {
            return;
        };
        let bound = inner.timeout.unwrap_or(every).min(every);
        let beat = tokio::time::timeout(bound, inner.limiter.store().heartbeat(&inner.id, ttl));
        match beat.await {
            Ok(Ok(Some(n))) => {
                inner.set_refused(None);
                let old = inner.live.swap(n, Ordering::AcqRel);
                if old != n {
                    #[allow(clippy::cast_precision_loss)]
                    ::metrics::gauge!(metric::LIVE_REPLICAS).set(n as f64);
                    tracing::info!("{n} live replicas share the store (was {old})");
                }
                // After the cool-down, a heartbeat that got through is the
                // breaker's probe: it closes without any check traffic.
                if !inner.breaker.is_open() {
                    inner.store_answered();
                }
            }
            Ok(Ok(None)) => return,
            Ok(Err(e)) => {
                tracing::debug!("heartbeat failed: {e}");
                let refused = e.kind() != StoreErrorKind::Timeout;
                inner.set_refused(refused.then_some(e));
            }
            Err(_) => tracing::debug!("heartbeat timed out after {bound:?}"),
        }
    }
}

/// A random id for this replica: 64 bits from the standard library's
/// randomly keyed hasher, the process id and the time.
fn replica_id() -> String {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u32(std::process::id());
    if let Ok(t) = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH) {
        h.write_u128(t.as_nanos());
    }
    format!("{:016x}", h.finish())
}

/// Stops hammering a dead store: after `threshold` consecutive failures,
/// checks skip the store for `open_for`; then one probe goes through (or a
/// heartbeat or readiness check answers), and success closes the breaker.
#[derive(Debug)]
struct Breaker {
    threshold: u32,
    open_for: Duration,
    start: Instant,
    failures: AtomicU64,
    /// Milliseconds since `start` until which the breaker is open; 0 when
    /// closed.
    open_until: AtomicU64,
    /// When the current probe was let through (ms since `start`, +1); 0
    /// when none is.
    probe_at: AtomicU64,
}

impl Breaker {
    fn new(threshold: u32, open_for: Duration) -> Self {
        Self {
            threshold,
            open_for,
            start: Instant::now(),
            failures: AtomicU64::new(0),
            open_until: AtomicU64::new(0),
            probe_at: AtomicU64::new(0),
        }
    }

    fn now_ms(&self) -> u64 {
        u64::try_from(self.start.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    fn open_for_ms(&self) -> u64 {
        u64::try_from(self.open_for.as_millis())
            .unwrap_or(u64::MAX)
            .max(1)
    }

    /// Open and inside its cool-down.
    fn is_open(&self) -> bool {
        let until = self.open_until.load(Ordering::Acquire);
        until != 0 && self.now_ms() < until
    }

    /// Whether a check may call the store: always when closed; when open,
    /// one probe once the cool-down is over (another if a probe is still
    /// out after a further cool-down: its caller may have given up).
    fn allow(&self) -> bool {
        let until = self.open_until.load(Ordering::Acquire);
        if until == 0 {
            return true;
        }
        let now = self.now_ms();
        if now < until {
            return false;
        }
        let probe = self.probe_at.load(Ordering::Acquire);
        if probe != 0 && now < (probe - 1).saturating_add(self.open_for_ms()) {
            return false;
        }
        self.probe_at
            .compare_exchange(probe, now + 1, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }

    /// The store answered; returns whether this closed the breaker.
    fn success(&self) -> bool {
        // Written only when there is something to reset: a store on every
        // check would bounce this cache line between the cores that check.
        if self.failures.load(Ordering::Acquire) != 0 {
            self.failures.store(0, Ordering::Release);
        }
        let until = self.open_until.load(Ordering::Acquire);
        if until == 0 {
            return false;
        }
        let closed = self
            .open_until
            .compare_exchange(until, 0, Ordering::AcqRel, Ordering::Acquire)
            .is_ok();
        self.probe_at.store(0, Ordering::Release);
        closed
    }

    /// The store failed; returns whether this opened the breaker (closed
    /// after `threshold` failures in a row, or a failed probe).
    fn failure(&self) -> bool {
        if self.threshold == 0 {
            return false;
        }
        let n = self
            .failures
            .fetch_add(1, Ordering::AcqRel)
            .saturating_add(1);
        let until = self.open_until.load(Ordering::Acquire);
        let now = self.now_ms();
        let reopen = until != 0 && now >= until;
        if (until == 0 && n >= u64::from(self.threshold)) || reopen {
            let next = now.saturating_add(self.open_for_ms()).max(1);
            let opened = self
                .open_until
                .compare_exchange(until, next, Ordering::AcqRel, Ordering::Acquire)
                .is_ok();
            if opened {
                self.probe_at.store(0, Ordering::Release);
            }
            return opened;
        }
        false
    }
}

/// Lets an event through at most once per period, counting the rest: for
/// logs that must not flood.
///
/// ```
/// use std::time::Duration;
/// use tollgate::resilient::Throttle;
///
/// let throttle = Throttle::new(Duration::from_secs(1));
/// let mut reports = Vec::new();
/// for _ in 0..3 {
///     throttle.report(|suppressed| reports.push(suppressed));
/// }
/// assert_eq!(reports, [0]); // the other two wait for the next report
/// ```
#[derive(Debug)]
pub struct Throttle {
    start: Instant,
    every_ms: u64,
    /// Milliseconds since `start` before which reports are suppressed.
    next: AtomicU64,
    suppressed: AtomicU64,
}

impl Throttle {
    /// At most one report per `every`.
    #[must_use]
    pub fn new(every: Duration) -> Self {
        Self {
            start: Instant::now(),
            every_ms: u64::try_from(every.as_millis()).unwrap_or(1000),
            next: AtomicU64::new(0),
            suppressed: AtomicU64::new(0),
        }
    }

    /// Calls `report` with the number of events suppressed since the last
    /// report, unless one was made less than the period ago.
    pub fn report(&self, report: impl FnOnce(u64)) {
        let now = u64::try_from(self.start.elapsed().as_millis()).unwrap_or(u64::MAX);
        let next = self.next.load(Ordering::Acquire);
        if now >= next
            && self
                .next
                .compare_exchange(
                    next,
                    now.saturating_add(self.every_ms),
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
    use crate::rule::{Algorithm, RuleSpec};

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
    fn breaker_opens_after_threshold_probes_once_and_closes() {
        let b = Breaker::new(5, Duration::from_millis(30));
        for _ in 0..4 {
            assert!(!b.failure());
            assert!(b.allow());
        }
        assert!(b.failure(), "the fifth failure opens it");
        assert!(!b.failure(), "in-flight failures do not open it again");
        assert!(!b.allow());
        assert!(b.is_open());
        std::thread::sleep(Duration::from_millis(40));
        assert!(!b.is_open());
        assert!(b.allow(), "one probe");
        assert!(!b.allow(), "only one probe at a time");
        assert!(b.failure(), "a failed probe opens it again");
        assert!(!b.allow());
        std::thread::sleep(Duration::from_millis(40));
        assert!(b.allow(), "the next probe");
        assert!(b.success(), "its success closes the breaker");
        assert!(!b.success());
        assert!(b.allow());
        assert!(b.allow());
    }

    #[test]
    fn an_abandoned_probe_does_not_keep_the_breaker_open() {
        let b = Breaker::new(1, Duration::from_millis(20));
        assert!(b.failure());
        std::thread::sleep(Duration::from_millis(25));
        assert!(b.allow(), "probe, then its caller gives up");
        assert!(!b.allow());
        std::thread::sleep(Duration::from_millis(25));
        assert!(b.allow(), "another probe after a further cool-down");
    }

    #[test]
    fn a_zero_threshold_never_opens() {
        let b = Breaker::new(0, Duration::from_secs(1));
        for _ in 0..100 {
            assert!(!b.failure());
        }
        assert!(b.allow());
    }

    #[test]
    fn local_share_divides_quota() {
        let rule = RuleSpec::new("r", Algorithm::Gcra, 100, Duration::from_secs(1))
            .burst(30)
            .build()
            .expect("rule");
        let local = local_share(&rule, 3);
        assert_eq!((local.limit(), local.burst()), (33, 10));
        let tiny = local_share(&rule, 1000);
        assert_eq!((tiny.limit(), tiny.burst()), (1, 1));
        assert_eq!(local_share(&rule, 0).limit(), 100);
    }

    #[test]
    fn policies_parse_and_print() {
        for p in [OnError::Allow, OnError::Deny, OnError::Local] {
            assert_eq!(p.as_str().parse::<OnError>(), Ok(p));
        }
        assert!("open".parse::<OnError>().is_err());
    }

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
