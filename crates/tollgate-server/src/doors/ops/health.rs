//! What the probes know beyond one config ([`Health`]): whether the
//! server is draining after SIGTERM, and the store's state as the last
//! probe found it, kept in `tollgate_store_up`.

use std::sync::Mutex;
use std::sync::PoisonError;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crate::gate::Gate;

/// How often `serve` probes a shared store (Redis, hybrid) to keep
/// `tollgate_store_up` current while nobody asks `/readyz` and no check
/// fails. One `PING` a second per replica; none while the circuit breaker
/// is open (the probe then answers from the breaker), and after its
/// cool-down the probe is the breaker's trial call, so a store that comes
/// back is seen without check traffic.
pub const STORE_PROBE_EVERY: Duration = Duration::from_secs(1);

/// Shared by every generation of a `serve` (and by its ops listener and
/// HTTP API): draining, and the store probe.
#[derive(Debug, Default)]
pub struct Health {
    /// Set once shutdown began: `/readyz` answers 503 from then on.
    draining: AtomicBool,
    /// What the last probe found: `None` before the first, else why the
    /// store did not answer, if it did not.
    store: Mutex<Option<Result<(), String>>>,
}

impl Health {
    /// Not draining.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// Shutdown began (SIGTERM, SIGINT): `/readyz` answers 503
    /// `draining` while the doors drain.
    pub fn start_draining(&self) {
        self.draining.store(true, Ordering::Release);
    }

    /// Whether shutdown began.
    #[must_use]
    pub fn draining(&self) -> bool {
        self.draining.load(Ordering::Acquire)
    }

    /// Asks whether `gate`'s store answers ([`Gate::ready`]: at once from
    /// an open breaker, else a `PING` within the store timeout), and
    /// notes what it found, in `tollgate_store_up` too. `/readyz` and the
    /// periodic probe both come here, so the gauge and the bodies agree.
    ///
    /// # Errors
    /// Why the store does not answer.
    pub async fn probe(&self, gate: &Gate) -> Result<(), String> {
        let result = gate.ready().await;
        let up = if result.is_ok() { 1.0 } else { 0.0 };
        // Under the lock: the gauge and the state change together.
        let mut last = self.store.lock().unwrap_or_else(PoisonError::into_inner);
        ::metrics::gauge!(crate::metrics::STORE_UP).set(up);
        *last = Some(result.clone());
        result
    }

    /// What the last probe found, without asking the store again (`None`
    /// before the first probe).
    #[must_use]
    pub fn last(&self) -> Option<Result<(), String>> {
        self.store
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}
