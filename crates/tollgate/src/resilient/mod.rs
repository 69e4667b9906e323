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
//!   answers (on a Redis Cluster, one breaker per master as well: a dead
//!   master's keys go to the policy, the others' to Redis);
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
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use parking_lot::Mutex;
use tracing::Instrument as _;

use crate::decision::{Decision, MultiDecision};
use crate::error::{StoreError, StoreErrorKind};
use crate::limiter::traced::{self, store_span};
use crate::limiter::{Check, Limiter};
use crate::op::Op;
use crate::rule::Rule;
use crate::store::memory::MemoryStore;
use crate::store::{KeyCheck, Store};
use crate::time::Clock;

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
/// Default near-limit ratio: admitted units past 80 % of a rule's capacity
/// count as near the limit ([`metric::NEAR_LIMIT`]), the reference's
/// `NEAR_LIMIT_RATIO` default.
pub const DEFAULT_NEAR_LIMIT_RATIO: f64 = 0.8;

mod admin;
mod breaker;
mod builder;
mod charge;
mod denied;
#[cfg(test)]
mod denied_tests;
mod fleet;
mod gate;
mod guard;
mod heartbeat;
mod inflight;
mod live;
#[cfg(all(test, feature = "redis"))]
mod live_tests;
mod local;
pub mod metric;
#[cfg(test)]
mod near_tests;
mod open;
mod policy;
mod reserve;
#[cfg(all(test, feature = "redis"))]
mod stranded_tests;
mod throttle;
mod ticketed;

use breaker::{Breaker, Breakers, Gate};
pub use builder::{ResilientLimiterBuilder, check_near_limit_ratio, check_top_denied};
pub use charge::ChargeVerdict;
use fleet::Fleet;
use guard::Guard;
use heartbeat::{heartbeat, replica_id};
pub use local::local_share;
use metric::Meters;
pub use open::MAX_FOLLOWED;
pub use policy::{OnError, Refusal, Verdict};
pub use reserve::{SETTLE_RETRY_FIRST, SETTLE_RETRY_MAX};

pub use admin::Inspection;
pub use live::RUNTIME_REFRESH;
pub use throttle::Throttle;
pub use ticketed::TicketVerdict;

/// A [`Limiter`] with a store timeout, a failure policy per rule, a circuit
/// breaker, an in-process fallback sized by the live replicas, metrics and
/// rate-limited logs. See the [module](self) docs.
pub struct ResilientLimiter<S = MemoryStore> {
    inner: Arc<Inner<S>>,
    /// The heartbeat task, aborted on drop.
    task: Mutex<Option<tokio::task::AbortHandle>>,
    started: AtomicBool,
    /// The live table's refresh task, aborted on drop.
    live_task: Mutex<Option<tokio::task::AbortHandle>>,
    live_started: AtomicBool,
}

struct Inner<S> {
    limiter: Arc<Limiter<S>>,
    /// Per rule, in the limiter's order.
    policies: Vec<OnError>,
    /// The breaker's clock, also timing store calls for the latency metric.
    clock: Arc<dyn Clock>,
    /// Timeout, breakers, the heartbeat's last refusal (`guard.rs`).
    guard: Guard,
    /// This replica, the live count, the `local` fallback (`fleet.rs`).
    fleet: Fleet,
    meters: Meters,
    /// The reservations and leases this replica follows for `/metrics`.
    open: open::Open,
    /// The most denied keys per rule lately (`denied.rs`).
    top: crate::top::TopDenied,
    /// Blocks and runtime overrides (docs/admin.md).
    live: live::Live,
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
            .field("timeout", &i.guard.timeout)
            .field("replica", &i.fleet.id)
            .field("live_replicas", &i.fleet.live.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

impl<S> Drop for ResilientLimiter<S> {
    fn drop(&mut self) {
        if let Some(task) = self.task.lock().take() {
            task.abort();
        }
        if let Some(task) = self.live_task.lock().take() {
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
        self.inner.guard.timeout
    }

    /// This replica's random id (its member in the heartbeat set).
    #[must_use]
    pub fn replica_id(&self) -> &str {
        &self.inner.fleet.id
    }

    /// The live replicas sharing the store, as last learned.
    #[must_use]
    pub fn live_replicas(&self) -> u64 {
        self.inner.fleet.live.load(Ordering::Acquire)
    }

    /// Sets the `tollgate_utilization_ratio{rule}` gauges to each rule's
    /// peak since the last call ([`metric::UTILIZATION`]): call it once per
    /// metrics scrape. A rule's series appears at the first call after its
    /// first decision. A gauge of the `metrics` facade cannot be removed,
    /// so a rule gone with a reload keeps its last series; a renderer that
    /// drops those uses [`Self::take_utilization`] instead, as the server's
    /// `/metrics` does.
    pub fn publish_utilization(&self)
    where
        S: Store,
    {
        for (name, share) in self.take_utilization() {
            ::metrics::gauge!(metric::UTILIZATION, "rule" => name).set(share);
        }
    }

    /// The peak share of its capacity since the last call (the value of
    /// [`metric::UTILIZATION`]) of each rule decided since, or shown
    /// before, by rule name in config order; starts the next interval.
    #[must_use]
    pub fn take_utilization(&self) -> Vec<(String, f64)>
    where
        S: Store,
    {
        self.inner
            .meters
            .take_utilization(self.inner.limiter.rules())
    }

    /// Counts as expired the reservations and leases of this replica
    /// whose time ran out (`tollgate_reservations_total{outcome="expired"}`,
    /// `tollgate_leases_total{outcome="expired"}`) and brings the gauges
    /// `tollgate_reservations_open` and `tollgate_leases_held` up to date;
    /// every usage call does it too. Call it before reading the metrics.
    pub fn sweep_open(&self) {
        self.inner.open.sweep(self.inner.clock.now());
    }

    /// Whether a circuit breaker is open (checks skip the store): the
    /// store's, or, on a Redis Cluster, any master's (its keys' checks
    /// skip it).
    #[must_use]
    pub fn breaker_open(&self) -> bool {
        self.inner.guard.breakers.any_open()
    }
}

impl<S: Store> ResilientLimiter<S> {
    /// A builder over `limiter` (a [`Limiter`] or an `Arc` of one) with the
    /// defaults: timeout [`DEFAULT_TIMEOUT`], every rule `allow`, breaker
    /// after [`DEFAULT_BREAKER_THRESHOLD`] failures for
    /// [`DEFAULT_BREAKER_OPEN_FOR`], 1 replica until a heartbeat (every
    /// [`DEFAULT_HEARTBEAT`]) says otherwise.
    pub fn builder(limiter: impl Into<Arc<Limiter<S>>>) -> ResilientLimiterBuilder<S> {
        ResilientLimiterBuilder::new(limiter.into())
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
        self.start_live();
        let Some(every) = self.inner.fleet.heartbeat else {
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
        let table = self.inner.live_table();
        let resolved = self
            .inner
            .limiter
            .resolve_all(checks, Op::Check, table.as_deref())
            .map_err(Refusal::Invalid)?;
        let verdict = match self
            .inner
            .live_answer(table.as_deref(), resolved.pairs(), resolved.index())
            .await
        {
            Some(verdict) => {
                self.start_heartbeat();
                verdict
            }
            None => {
                self.decide(resolved.pairs(), resolved.index(), policy)
                    .await?
            }
        };
        // What decided, as resolved above: not looked up again.
        Ok(Verdict {
            decided_by: resolved.deciders(),
            ..verdict
        })
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
                Ok(Verdict::new(multi, None))
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
        if inner.guard.breakers.whole.is_open() {
            return Err(StoreError::new(
                StoreErrorKind::Unavailable,
                "circuit breaker open after repeated store failures",
            ));
        }
        let result = inner
            .guard
            .within("PING", inner.limiter.store().ping())
            .await;
        if result.is_ok() {
            inner.guard.store_answered();
            if inner.guard.refusing() {
                // The last heartbeat's write was refused: try one now, so a
                // store that takes writes again is ready at once, not at the
                // next heartbeat (an instance out of rotation gets no
                // checks to tell it).
                if let Some(every) = inner.fleet.heartbeat {
                    let beat = inner
                        .limiter
                        .store()
                        .heartbeat(&inner.fleet.id, every * HEARTBEAT_INTERVALS);
                    match inner.guard.within("heartbeat", beat).await {
                        Ok(_) => inner.guard.set_refused(None),
                        Err(e) if e.kind() != StoreErrorKind::Timeout => {
                            inner.guard.set_refused(Some(e));
                        }
                        Err(_) => {}
                    }
                }
            }
            if let Some(e) = inner.guard.refused() {
                return Err(StoreError::new(
                    e.kind(),
                    format!("PING answered, but the last heartbeat's write was refused ({e})"),
                ));
            }
        }
        result
    }
}

/// What a pair reads as when the `allow` policy answered for it: an
/// untouched key that took `cost` (nothing was decided).
fn untouched(c: &KeyCheck<'_>) -> Decision {
    let capacity = c.rule.capacity();
    Decision {
        allowed: true,
        limit: capacity,
        remaining: capacity.saturating_sub(c.cost),
        reset_after: Duration::ZERO,
        retry_after: None,
    }
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

/// The cost pair `n` took: its own, plus that of later pairs naming the
/// same (rule, key) (the store decides them once, the costs added).
fn cost_of(checks: &[KeyCheck<'_>], n: usize) -> u64 {
    let Some(this) = checks.get(n) else {
        return 0;
    };
    checks[n + 1..]
        .iter()
        .filter(|c| c.key == this.key && c.rule.name() == this.rule.name())
        .fold(this.cost, |sum, c| sum.saturating_add(c.cost))
}

impl<S: Store> Inner<S> {
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
            if outcome != 3 {
                self.meters.utilization(i, d);
            }
            if outcome == 1 {
                // Denied pairs only: an admission pays no lock, no clock.
                if let Some(c) = checks.get(n) {
                    self.top.record(i, c.key, self.clock.now());
                }
            }
            if outcome == 0 {
                let past = self.meters.past_near(i, d);
                if past > 0 {
                    let units = past.min(cost_of(checks, n));
                    if units > 0 {
                        self.meters.near(i, rules[i].name(), units);
                    }
                }
            }
        }
    }

    /// One check of the store, bounded by the timeout and gated by the
    /// breaker.
    async fn call_store(&self, checks: &[KeyCheck<'_>]) -> Result<MultiDecision, StoreError> {
        let span = store_span!("store.check", self.limiter.store().kind(), checks.len());
        let multi = self
            .guarded_in(
                &span,
                "check",
                self.gate(checks),
                self.limiter.store().check_all(checks, None),
            )
            .await?;
        traced::decided(&span, checks, &multi);
        Ok(multi)
    }

    /// One call to the store (`what` names it in a timeout's error),
    /// bounded by the timeout and gated by the breakers of `gate`; its
    /// latency, errors and the breakers' state recorded. A call whose keys
    /// span parts is skipped while any of theirs is open, and its failure
    /// opens none (it cannot tell which part failed).
    async fn guarded<T>(
        &self,
        what: &str,
        gate: Gate<'_>,
        call: impl Future<Output = Result<T, StoreError>>,
    ) -> Result<T, StoreError> {
        let span = store_span!(
            traced::name_of(what),
            self.limiter.store().kind(),
            tracing::field::Empty
        );
        self.guarded_in(&span, what, gate, call).await
    }

    /// As [`Inner::guarded`], the call inside `span` (its store span),
    /// which says how it failed.
    async fn guarded_in<T>(
        &self,
        span: &tracing::Span,
        what: &str,
        gate: Gate<'_>,
        call: impl Future<Output = Result<T, StoreError>>,
    ) -> Result<T, StoreError> {
        let result = self
            .guarded_call(what, gate, call.instrument(span.clone()))
            .await;
        if let Err(e) = &result
            && !span.is_disabled()
        {
            span.record("otel.status_code", "error");
            span.record("error.message", tracing::field::display(e));
        }
        result
    }

    async fn guarded_call<T>(
        &self,
        what: &str,
        gate: Gate<'_>,
        call: impl Future<Output = Result<T, StoreError>>,
    ) -> Result<T, StoreError> {
        let allowed = match &gate {
            Gate::Whole(b) => b.allow(),
            Gate::Parts(parts) => parts.iter().all(|(_, b)| b.allow()),
        };
        if !allowed {
            ::metrics::counter!(metric::STORE_ERRORS, "kind" => "circuit_open").increment(1);
            return Err(StoreError::new(
                StoreErrorKind::Unavailable,
                "circuit breaker open after repeated store failures",
            ));
        }
        // An in-process store is not timed (see `Store::in_process`).
        let started = (!self.limiter.store().in_process()).then(|| self.clock.now());
        let result = self.guard.within(what, call).await;
        if let Some(started) = started {
            let took = Duration::from_micros(self.clock.now().saturating_sub(started));
            self.meters.latency().record(took.as_secs_f64());
        }
        match &result {
            Ok(_) => {
                match &gate {
                    Gate::Whole(_) => self.guard.store_answered(),
                    Gate::Parts(parts) => self.guard.parts_answered(parts),
                }
                // A check went through: whatever the last heartbeat met
                // is over.
                if self.guard.refusing() {
                    self.guard.set_refused(None);
                }
            }
            Err(e) => {
                let kind = match e.kind() {
                    StoreErrorKind::Timeout => "timeout",
                    StoreErrorKind::Unavailable => "unavailable",
                    _ => "protocol",
                };
                ::metrics::counter!(metric::STORE_ERRORS, "kind" => kind).increment(1);
                match &gate {
                    Gate::Whole(b) => self.guard.failed(b, None, e),
                    Gate::Parts(parts) => {
                        if let [(node, b)] = parts.as_slice() {
                            self.guard.failed(b, Some(node), e);
                        }
                    }
                }
            }
        }
        result
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
        let policy = self.policy_for(index, policy, error);
        match policy {
            OnError::Deny => {
                self.count_refused(checks, index);
                Err(Refusal::Unavailable(error.clone()))
            }
            OnError::Local => {
                let multi = self.check_locally(checks, index);
                self.count(checks, index, &multi);
                Ok(Verdict::new(multi, Some(OnError::Local)))
            }
            OnError::Allow => Ok(self.admit_untouched(checks, index)),
        }
    }

    /// Counts each pair (rule `index[n]` for pair `n`) as refused because
    /// the store failed under `deny`.
    fn count_refused(&self, checks: &[KeyCheck<'_>], index: &[usize]) {
        for (n, (&i, c)) in index.iter().zip(checks).enumerate() {
            if !named_before(checks, n) {
                self.meters.count(i, c.rule.name(), 2);
            }
        }
    }

    /// The policy answering a store failure for rules `index`: `policy`
    /// when given, else the strictest of the rules' own; counted, and the
    /// failure logged (rate-limited).
    fn policy_for(&self, index: &[usize], policy: Option<OnError>, error: &StoreError) -> OnError {
        let policy = policy.unwrap_or_else(|| self.strictest(index));
        ::metrics::counter!(metric::FAILURE_POLICY, "policy" => policy.as_str()).increment(1);
        self.guard.trouble.report(|suppressed| {
            let more = if suppressed > 0 {
                format!(" ({suppressed} more store failures since the last report)")
            } else {
                String::new()
            };
            tracing::warn!("store trouble: {error}; answering with on_error = {policy}{more}");
        });
        policy
    }

    /// The strictest failure policy of the rules at `index`.
    fn strictest(&self, index: &[usize]) -> OnError {
        index
            .iter()
            .map(|&i| self.policies[i])
            .max_by_key(|p| p.strictness())
            .unwrap_or_default()
    }

    /// The failure policy of the configured rule named as `rule` is.
    fn policy_of(&self, rule: &Rule) -> OnError {
        self.limiter
            .rule_index(rule.name())
            .map(|i| self.policies[i])
            .unwrap_or_default()
    }

    /// The refusal of a call on what the store holds (a settle, cancel,
    /// release or renew under `rules`) when it failed: whatever the
    /// policy, which it names (the strictest of the rules').
    fn stranded<'r>(&self, rules: impl Iterator<Item = &'r Rule>, error: StoreError) -> Refusal {
        let policy = rules
            .map(|r| self.policy_of(r))
            .max_by_key(|p| p.strictness())
            .unwrap_or_default();
        Refusal::Stranded { error, policy }
    }

    /// Runs `f` on the in-process fallback's store with `checks` (rule
    /// `index[n]` for pair `n`) under every rule's quota divided by the
    /// live replicas.
    fn on_local<R>(
        &self,
        checks: &[KeyCheck<'_>],
        index: &[usize],
        f: impl FnOnce(&MemoryStore, &[KeyCheck<'_>]) -> R,
    ) -> R {
        let local = self.fleet.local();
        let replicas = self.fleet.replicas();
        let rules = self.limiter.rules();
        let shares = local.shares(replicas, rules);
        // A per-call limit (`Check::under`) gets its own share.
        let own: Vec<Option<Rule>> = checks
            .iter()
            .zip(index)
            .map(|(c, &i)| {
                (!std::ptr::eq(c.rule, &rules[i])).then(|| local_share(c.rule, replicas))
            })
            .collect();
        let resolved: Vec<KeyCheck<'_>> = checks
            .iter()
            .zip(index)
            .zip(&own)
            .map(|((c, &i), own)| KeyCheck {
                rule: own.as_ref().unwrap_or(&shares[i]),
                key: c.key,
                cost: c.cost,
            })
            .collect();
        f(&local.store, &resolved)
    }

    /// The answer of the `allow` policy: every pair admitted and read as
    /// an untouched key (nothing was decided), counted, marked degraded.
    fn admit_untouched(&self, checks: &[KeyCheck<'_>], index: &[usize]) -> Verdict {
        let multi = MultiDecision::from_decisions(checks.iter().map(untouched).collect());
        self.count(checks, index, &multi);
        Verdict::new(multi, Some(OnError::Allow))
    }

    /// The in-process decision: every rule's quota divided by the live
    /// replicas.
    fn check_locally(&self, checks: &[KeyCheck<'_>], index: &[usize]) -> MultiDecision {
        self.on_local(checks, index, |store, pairs| {
            store.check_all_sync(pairs, None)
        })
    }
}
