//! What stands between a check and a failing store: the timeout, the
//! circuit breakers, the heartbeat's last refusal and the rate-limited
//! logs of trouble (docs/failure-modes.md).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use parking_lot::Mutex;

use super::breaker::{Breaker, Breakers};
use super::metric;
use super::throttle::Throttle;
use crate::error::{StoreError, StoreErrorKind};

/// The store timeout, the breakers and the heartbeat's last refusal.
pub(super) struct Guard {
    pub(super) timeout: Option<Duration>,
    /// The store fails its own calls within `timeout` (see
    /// [`crate::Store::bounds_calls`]): no timer of ours.
    pub(super) self_timed: bool,
    /// The store's, and on a Redis Cluster each master's; shared with a
    /// successor built by [`super::ResilientLimiterBuilder::succeeding`].
    pub(super) breakers: Arc<Breakers>,
    /// Store failures answered by the policy, logged at most once a second.
    pub(super) trouble: Throttle,
    /// Breaker openings, logged at most once a second.
    breaker_log: Throttle,
    /// The last heartbeat's refusal (not a timeout): a store that answers
    /// `PING` but refuses writes (a replica, out of memory) is not ready.
    refused: Mutex<Option<StoreError>>,
    /// Whether `refused` holds one (read on every check, without the lock).
    refusing: AtomicBool,
}

impl Guard {
    pub(super) fn new(
        timeout: Option<Duration>,
        self_timed: bool,
        breakers: Arc<Breakers>,
    ) -> Self {
        Self {
            timeout,
            self_timed,
            breakers,
            trouble: Throttle::new(Duration::from_secs(1)),
            breaker_log: Throttle::new(Duration::from_secs(1)),
            refused: Mutex::new(None),
            refusing: AtomicBool::new(false),
        }
    }

    /// `call`, failed as a timeout (naming `what`) past the store timeout,
    /// if there is one.
    pub(super) async fn within<T>(
        &self,
        what: &str,
        call: impl Future<Output = Result<T, StoreError>>,
    ) -> Result<T, StoreError> {
        match self.timeout {
            Some(t) if !self.self_timed => tokio::time::timeout(t, call)
                .await
                .unwrap_or_else(|_| Err(timed_out(t, what))),
            _ => call.await,
        }
    }

    /// Whether the last heartbeat's write was refused.
    pub(super) fn refusing(&self) -> bool {
        self.refusing.load(Ordering::Relaxed)
    }

    /// The last heartbeat's refusal, if any.
    pub(super) fn refused(&self) -> Option<StoreError> {
        self.refused.lock().clone()
    }

    /// Notes a heartbeat's refusal (`None`: writes go through): while one
    /// is noted, the store is not ready.
    pub(super) fn set_refused(&self, refused: Option<StoreError>) {
        self.refusing.store(refused.is_some(), Ordering::Relaxed);
        *self.refused.lock() = refused;
    }

    /// The store answered (a check, a probe or a heartbeat).
    pub(super) fn store_answered(&self) {
        if self.breakers.whole.success() {
            ::metrics::gauge!(metric::BREAKER_OPEN).set(0.0);
            tracing::info!("store answering again; circuit breaker closed");
        }
    }

    /// Counts a failure on breaker `b` (of store node `node`, when one),
    /// and reports its opening.
    pub(super) fn failed(&self, b: &Breaker, node: Option<&str>, e: &StoreError) {
        if !b.failure() {
            return;
        }
        match node {
            None => {
                ::metrics::counter!(metric::BREAKER_OPENED).increment(1);
                ::metrics::gauge!(metric::BREAKER_OPEN).set(1.0);
            }
            Some(n) => {
                ::metrics::counter!(metric::BREAKER_OPENED, "node" => n.to_owned()).increment(1);
                ::metrics::gauge!(metric::BREAKER_OPEN, "node" => n.to_owned()).set(1.0);
            }
        }
        let open_for = b.open_for;
        // Since the last success: the threshold when it first opens, more
        // when a probe fails and it opens again.
        let failed = b.failures.load(Ordering::Acquire);
        let which = node.map_or_else(String::new, |n| format!(" of store node {n}"));
        self.breaker_log.report(|suppressed| {
            let more = if suppressed > 0 {
                format!(" (opened {suppressed} more times since the last report)")
            } else {
                String::new()
            };
            tracing::warn!(
                "circuit breaker{which} open: the store failed {failed} times in a row \
                 ({e}); skipping it for {open_for:?}{more}"
            );
        });
    }

    /// A call through the breakers of `parts` succeeded: each closes.
    pub(super) fn parts_answered(&self, parts: &[(Arc<str>, Arc<Breaker>)]) {
        for (node, b) in parts {
            if b.success() {
                ::metrics::gauge!(metric::BREAKER_OPEN, "node" => node.to_string()).set(0.0);
                tracing::info!("store node {node} answering again; its circuit breaker closed");
            }
        }
    }
}

fn timed_out(t: Duration, what: &str) -> StoreError {
    StoreError::new(
        StoreErrorKind::Timeout,
        format!("no {what} answer within {t:?}"),
    )
}
