//! The heartbeat task that learns how many replicas share the store, and
//! this replica's random id.

use std::sync::Weak;
use std::sync::atomic::Ordering;
use std::time::Duration;

use super::{HEARTBEAT_INTERVALS, Inner, metric};
use crate::error::StoreErrorKind;
use crate::store::Store;
use crate::time::{Clock, MonotonicClock};

/// The heartbeat task: every `every`, tells the store this replica lives
/// and learns how many do. Ends when the limiter is gone, or at once when
/// the store is not shared.
pub(super) async fn heartbeat<S: Store>(weak: Weak<Inner<S>>, every: Duration) {
    let ttl = every * HEARTBEAT_INTERVALS;
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let Some(inner) = weak.upgrade() else {
            return;
        };
        let bound = inner.guard.timeout.unwrap_or(every).min(every);
        let beat =
            tokio::time::timeout(bound, inner.limiter.store().heartbeat(&inner.fleet.id, ttl));
        match beat.await {
            Ok(Ok(Some(n))) => {
                inner.guard.set_refused(None);
                let old = inner.fleet.live.swap(n, Ordering::AcqRel);
                if old != n {
                    #[allow(clippy::cast_precision_loss)]
                    ::metrics::gauge!(metric::LIVE_REPLICAS).set(n as f64);
                    tracing::info!("{n} live replicas share the store (was {old})");
                }
                // After the cool-down, a heartbeat that got through is the
                // breaker's probe: it closes without any check traffic.
                if !inner.guard.breakers.whole.is_open() {
                    inner.guard.store_answered();
                }
            }
            Ok(Ok(None)) => return,
            Ok(Err(e)) => {
                tracing::debug!("heartbeat failed: {e}");
                let refused = e.kind() != StoreErrorKind::Timeout;
                inner.guard.set_refused(refused.then_some(e));
            }
            Err(_) => tracing::debug!("heartbeat timed out after {bound:?}"),
        }
    }
}

/// A random id for this replica: 64 bits from the standard library's
/// randomly keyed hasher, the process id and the time.
pub(super) fn replica_id() -> String {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u32(std::process::id());
    // Microseconds since the Unix epoch (0 if the wall clock is before it).
    h.write_u64(MonotonicClock::new().now());
    format!("{:016x}", h.finish())
}
