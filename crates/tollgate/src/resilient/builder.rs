//! [`ResilientLimiterBuilder`]: the store timeout, failure policies,
//! breaker, replicas and heartbeat of a [`ResilientLimiter`].

use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use parking_lot::Mutex;

use super::{
    Breaker, Breakers, DEFAULT_BREAKER_OPEN_FOR, DEFAULT_BREAKER_THRESHOLD, DEFAULT_HEARTBEAT,
    DEFAULT_NEAR_LIMIT_RATIO, DEFAULT_TIMEOUT, Fleet, Guard, Inner, Meters, OnError,
    ResilientLimiter, metric, replica_id,
};
use crate::limiter::Limiter;
use crate::rule::RuleError;
use crate::store::Store;
use crate::store::memory::DEFAULT_MAX_KEYS;
use crate::time::{Clock, MonotonicClock};
use crate::top::{
    DEFAULT_TOP_DENIED_CAPACITY, DEFAULT_TOP_DENIED_EPOCH, MAX_TOP_DENIED_CAPACITY,
    MIN_TOP_DENIED_EPOCH, TopDenied,
};

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
    top_denied: usize,
    top_denied_epoch: Duration,
    /// What a successor takes over from its predecessor
    /// ([`Self::succeeding`]).
    predecessor: Option<Predecessor>,
}

/// A predecessor's replica id, live replica count, breaker and live
/// table.
#[derive(Debug)]
struct Predecessor {
    id: String,
    live: u64,
    breakers: Arc<Breakers>,
    /// Its live table's entries (blocks, runtime overrides), shared.
    table: Arc<super::live::Shared>,
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
            top_denied: DEFAULT_TOP_DENIED_CAPACITY,
            top_denied_epoch: DEFAULT_TOP_DENIED_EPOCH,
            predecessor: None,
        }
    }

    /// Makes the limiter built a successor of `previous` (a config reload
    /// over the same store): it takes over `previous`'s replica id (so the
    /// fleet does not count this replica twice while both beat), its last
    /// known live replica count (instead of [`Self::replicas`]) and its
    /// circuit breaker, shared (an open breaker stays open, and failures
    /// seen by either count for both); [`Self::breaker`] is then ignored.
    /// Its live table (blocks, runtime overrides) is shared too: a write
    /// through either, before or after the swap, holds in both.
    pub fn succeeding(mut self, previous: &ResilientLimiter<S>) -> Self {
        self.predecessor = Some(Predecessor {
            id: previous.inner.fleet.id.clone(),
            live: previous.live_replicas(),
            breakers: Arc::clone(&previous.inner.guard.breakers),
            table: previous.inner.live.shared(),
        });
        self
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
    /// [`DEFAULT_MAX_KEYS`]), and the most reservations and leases this
    /// replica follows for its gauges at once (and never more than
    /// [`super::MAX_FOLLOWED`]).
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

    /// Counters per rule and epoch of the most denied keys
    /// ([`ResilientLimiter::top_denied`]; default
    /// [`DEFAULT_TOP_DENIED_CAPACITY`]; 0 turns them off; at most
    /// [`MAX_TOP_DENIED_CAPACITY`], checked by [`Self::build`]). A rule's
    /// memory, [`TopDenied::bytes_per_rule`], is taken at its first denial
    /// and never grows; every key denied more than `1/capacity` of the
    /// rule's denials in an epoch is guaranteed a place.
    pub fn top_denied(mut self, capacity: usize) -> Self {
        self.top_denied = capacity;
        self
    }

    /// The epoch of the most denied keys: a report covers the current and
    /// the previous one (default [`DEFAULT_TOP_DENIED_EPOCH`]: the last one
    /// to two minutes; at least [`MIN_TOP_DENIED_EPOCH`], checked by
    /// [`Self::build`]).
    pub fn top_denied_epoch(mut self, epoch: Duration) -> Self {
        self.top_denied_epoch = epoch;
        self
    }

    /// The limiter. Inside a tokio runtime the heartbeat task starts at
    /// once; outside one, at the first check.
    ///
    /// # Errors
    /// A policy given for a rule the limiter does not have (field
    /// `on_error`); a near-limit ratio not above 0 and at most 1 (field
    /// `near_limit_ratio`); a top-denied capacity over
    /// [`MAX_TOP_DENIED_CAPACITY`] (field `top_denied`) or epoch under
    /// [`MIN_TOP_DENIED_EPOCH`] (field `top_denied_epoch`).
    pub fn build(self) -> Result<ResilientLimiter<S>, RuleError> {
        check_near_limit_ratio(self.near_limit_ratio).map_err(|message| RuleError {
            field: "near_limit_ratio",
            message,
        })?;
        check_top_denied(self.top_denied, self.top_denied_epoch)?;
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
        // The breaker's cool-down and the latency metric: real time.
        let clock: Arc<dyn Clock> = Arc::new(MonotonicClock::new());
        let mut shared_live = None;
        let (id, replicas, breakers) = match self.predecessor {
            Some(p) => {
                shared_live = Some(p.table);
                (p.id, p.live, p.breakers)
            }
            None => {
                ::metrics::gauge!(metric::BREAKER_OPEN).set(0.0);
                let breaker = Breaker::new(
                    self.breaker_threshold,
                    self.breaker_open_for,
                    Arc::clone(&clock),
                );
                (
                    replica_id(),
                    self.replicas,
                    Arc::new(Breakers::new(breaker)),
                )
            }
        };
        #[allow(clippy::cast_precision_loss)]
        ::metrics::gauge!(metric::LIVE_REPLICAS).set(replicas as f64);
        let open = super::open::Open::new(self.limiter.rules(), self.local_max_keys);
        let meters = Meters::new(
            self.limiter.rules().iter().map(crate::Rule::capacity),
            self.near_limit_ratio,
        );
        let self_timed = self.timeout.is_some_and(|t| {
            self.limiter
                .store()
                .bounds_calls()
                .is_some_and(|bound| bound <= t)
        });
        // Blocks and runtime overrides carry over, shared (on a store that
        // shares none they live only in this process), read against the
        // new rules.
        let live = super::live::Live::new(self.limiter.rules(), Arc::clone(&clock), shared_live);
        let limiter = ResilientLimiter {
            inner: Arc::new(Inner {
                limiter: self.limiter,
                policies,
                clock,
                guard: Guard::new(self.timeout, self_timed, breakers),
                fleet: Fleet::new(id, replicas, self.heartbeat, self.local_max_keys),
                meters,
                open,
                top: TopDenied::new(rule_count, self.top_denied, self.top_denied_epoch),
                live,
            }),
            task: Mutex::new(None),
            started: AtomicBool::new(false),
            live_task: Mutex::new(None),
            live_started: AtomicBool::new(false),
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

/// Whether `capacity` and `epoch` can size the most denied keys: a
/// capacity of at most [`MAX_TOP_DENIED_CAPACITY`], an epoch of at least
/// [`MIN_TOP_DENIED_EPOCH`].
///
/// # Errors
/// Why not, naming the field (`top_denied` or `top_denied_epoch`) and the
/// value.
pub fn check_top_denied(capacity: usize, epoch: Duration) -> Result<(), RuleError> {
    if capacity > MAX_TOP_DENIED_CAPACITY {
        return Err(RuleError {
            field: "top_denied",
            message: format!(
                "top_denied must be at most {MAX_TOP_DENIED_CAPACITY} counters, got {capacity}"
            ),
        });
    }
    if epoch < MIN_TOP_DENIED_EPOCH {
        return Err(RuleError {
            field: "top_denied_epoch",
            message: format!("top_denied_epoch must be at least 1ms, got {epoch:?}"),
        });
    }
    Ok(())
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

    #[test]
    fn top_denied_sizes_are_checked() {
        let limiter = || {
            Limiter::new(
                MemoryStore::new(),
                [
                    RuleSpec::new("a", Algorithm::Gcra, 1, Duration::from_secs(1))
                        .build()
                        .expect("rule"),
                ],
            )
            .expect("limiter")
        };
        let err = ResilientLimiter::builder(limiter())
            .top_denied(MAX_TOP_DENIED_CAPACITY + 1)
            .build()
            .expect_err("too many counters");
        assert_eq!(err.field, "top_denied");
        let err = ResilientLimiter::builder(limiter())
            .top_denied_epoch(Duration::from_micros(999))
            .build()
            .expect_err("too short an epoch");
        assert_eq!(err.field, "top_denied_epoch");
        let off = ResilientLimiter::builder(limiter())
            .top_denied(0)
            .build()
            .expect("off is fine");
        assert_eq!(off.top_denied_sketch().heap_bytes(), 0);
    }
}

#[cfg(test)]
mod successor_tests {
    use std::time::Duration;

    use crate::resilient::ResilientLimiter;
    use crate::{Algorithm, Limiter, MemoryStore, RuleSpec};

    fn limiter(limit: u64) -> Limiter<std::sync::Arc<MemoryStore>> {
        static STORE: std::sync::OnceLock<std::sync::Arc<MemoryStore>> = std::sync::OnceLock::new();
        let store = STORE.get_or_init(|| std::sync::Arc::new(MemoryStore::new()));
        let rule = RuleSpec::new("r", Algorithm::Gcra, limit, Duration::from_secs(60))
            .build()
            .expect("rule");
        Limiter::new(std::sync::Arc::clone(store), [rule]).expect("limiter")
    }

    #[test]
    fn a_successor_keeps_the_id_the_live_count_and_the_breaker() {
        let first = ResilientLimiter::builder(limiter(1))
            .replicas(3)
            .heartbeat(None)
            .build()
            .expect("first");
        let next = ResilientLimiter::builder(limiter(2))
            .replicas(7)
            .heartbeat(None)
            .succeeding(&first)
            .build()
            .expect("next");
        assert_eq!(next.replica_id(), first.replica_id());
        assert_eq!(next.live_replicas(), 3, "the predecessor's count, not 7");
        assert!(std::sync::Arc::ptr_eq(
            &next.inner.guard.breakers,
            &first.inner.guard.breakers
        ));
        let other = ResilientLimiter::builder(limiter(2))
            .heartbeat(None)
            .build()
            .expect("other");
        assert_ne!(other.replica_id(), first.replica_id());
    }
}

#[cfg(test)]
mod successor_runtime_tests {
    use std::time::Duration;

    use crate::resilient::ResilientLimiter;
    use crate::{Algorithm, Limiter, MemoryStore, RuleSpec, RuntimeOverride};

    fn limiter(limit: u64) -> Limiter<MemoryStore> {
        let rule = RuleSpec::new("r", Algorithm::FixedWindow, limit, Duration::from_secs(60))
            .build()
            .expect("rule");
        Limiter::new(MemoryStore::new(), [rule]).expect("limiter")
    }

    /// A reload builds the successor, then swaps it in: an operator's write
    /// answered by the predecessor in between (or by the successor while
    /// a request still holds the predecessor) must hold in both, on a store
    /// that keeps the live table in this process.
    #[tokio::test]
    async fn writes_between_build_and_swap_hold_in_predecessor_and_successor() {
        let first = ResilientLimiter::builder(limiter(5))
            .heartbeat(None)
            .build()
            .expect("first");
        let next = ResilientLimiter::builder(limiter(5))
            .heartbeat(None)
            .succeeding(&first)
            .build()
            .expect("next");
        // Built, not yet swapped in: the write lands on the predecessor.
        first
            .block("r", b"late", Duration::from_secs(600))
            .await
            .expect("block");
        assert_eq!(next.blocks().len(), 1, "the successor lost the block");
        let denied = next.check("r", "late", 1).await.expect("check");
        assert!(!denied.multi.allowed, "a blocked key admitted");
        // Swapped in, the predecessor still serving one request.
        next.set_override(RuntimeOverride {
            rule: "r".into(),
            key: b"vip".to_vec(),
            limit: 50,
            period: None,
            burst: None,
            ends_ms: None,
        })
        .await
        .expect("override");
        assert_eq!(first.overrides().len(), 1, "the predecessor misses it");
        assert!(first.unblock("r", b"late").await.expect("unblock"));
        assert!(next.blocks().is_empty(), "the unblock did not reach it");
    }
}
