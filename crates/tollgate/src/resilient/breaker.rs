//! The circuit breaker: stops calling a store that failed several times
//! in a row.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use parking_lot::RwLock;

use crate::time::{Clock, Micros};

/// Stops hammering a dead store: after `threshold` consecutive failures,
/// checks skip the store for `open_for`; then one probe goes through (or a
/// heartbeat or readiness check answers), and success closes the breaker.
/// Its time comes from a [`Clock`] (the real one in a limiter, a fake one
/// in tests).
pub(super) struct Breaker {
    threshold: u32,
    pub(super) open_for: Duration,
    clock: Arc<dyn Clock>,
    /// The clock's time when the breaker was made.
    start: Micros,
    pub(super) failures: AtomicU64,
    /// Milliseconds since `start` until which the breaker is open; 0 when
    /// closed.
    open_until: AtomicU64,
    /// When the current probe was let through (ms since `start`, +1); 0
    /// when none is.
    probe_at: AtomicU64,
}

impl fmt::Debug for Breaker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Breaker")
            .field("threshold", &self.threshold)
            .field("open_for", &self.open_for)
            .field("start", &self.start)
            .field("failures", &self.failures)
            .field("open_until", &self.open_until)
            .field("probe_at", &self.probe_at)
            .finish_non_exhaustive()
    }
}

impl Breaker {
    pub(super) fn new(threshold: u32, open_for: Duration, clock: Arc<dyn Clock>) -> Self {
        Self {
            threshold,
            open_for,
            start: clock.now(),
            clock,
            failures: AtomicU64::new(0),
            open_until: AtomicU64::new(0),
            probe_at: AtomicU64::new(0),
        }
    }

    /// Whole milliseconds since `start`.
    fn now_ms(&self) -> u64 {
        self.clock.now().saturating_sub(self.start) / 1_000
    }

    fn open_for_ms(&self) -> u64 {
        u64::try_from(self.open_for.as_millis())
            .unwrap_or(u64::MAX)
            .max(1)
    }

    /// Open and inside its cool-down.
    pub(super) fn is_open(&self) -> bool {
        let until = self.open_until.load(Ordering::Acquire);
        until != 0 && self.now_ms() < until
    }

    /// Whether a check may call the store: always when closed; when open,
    /// one probe once the cool-down is over (another if a probe is still
    /// out after a further cool-down: its caller may have given up).
    pub(super) fn allow(&self) -> bool {
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
    pub(super) fn success(&self) -> bool {
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
    pub(super) fn failure(&self) -> bool {
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

/// The breakers of a store: one for the store as a whole, and, for a
/// store whose parts fail apart ([`crate::Store::failure_domain`]: a Redis
/// Cluster's masters), one per part, made at its first call, so a dead
/// master sends only its own keys to the failure policy.
pub(super) struct Breakers {
    /// The store's (or, on a store of parts, calls no part was named for).
    pub(super) whole: Breaker,
    parts: RwLock<HashMap<Arc<str>, Arc<Breaker>>>,
}

impl fmt::Debug for Breakers {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Breakers")
            .field("whole", &self.whole)
            .field("parts", &self.parts.read().len())
            .finish()
    }
}

/// The breakers one store call goes through.
pub(super) enum Gate<'a> {
    /// The store-wide one: a store of one part, a call naming no part.
    Whole(&'a Breaker),
    /// Each part's the call's keys live on (more than one when its keys
    /// span parts), with its name.
    Parts(Vec<(Arc<str>, Arc<Breaker>)>),
}

impl Breakers {
    pub(super) fn new(whole: Breaker) -> Self {
        Self {
            whole,
            parts: RwLock::new(HashMap::new()),
        }
    }

    /// The breaker of part `name`, made (closed) at its first call.
    pub(super) fn part(&self, name: &Arc<str>) -> Arc<Breaker> {
        if let Some(b) = self.parts.read().get(name) {
            return Arc::clone(b);
        }
        let mut parts = self.parts.write();
        let b = parts.entry(Arc::clone(name)).or_insert_with(|| {
            Arc::new(Breaker::new(
                self.whole.threshold,
                self.whole.open_for,
                Arc::clone(&self.whole.clock),
            ))
        });
        Arc::clone(b)
    }

    /// The breakers a call over the keys of `domains` goes through: the
    /// parts named (each once), or the store-wide one if any key has none.
    pub(super) fn gate<'a>(
        &'a self,
        domains: impl IntoIterator<Item = Option<Arc<str>>>,
    ) -> Gate<'a> {
        let mut parts: Vec<(Arc<str>, Arc<Breaker>)> = Vec::new();
        for d in domains {
            let Some(name) = d else {
                return Gate::Whole(&self.whole);
            };
            if !parts.iter().any(|(n, _)| *n == name) {
                let b = self.part(&name);
                parts.push((name, b));
            }
        }
        if parts.is_empty() {
            Gate::Whole(&self.whole)
        } else {
            Gate::Parts(parts)
        }
    }

    /// Whether any breaker, the store's or a part's, is open.
    pub(super) fn any_open(&self) -> bool {
        self.whole.is_open() || self.parts.read().values().any(|b| b.is_open())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::time::FakeClock;

    /// A breaker on a fake clock, and the clock.
    fn breaker(threshold: u32, open_for: Duration) -> (Breaker, FakeClock) {
        let clock = FakeClock::at(1_000_000);
        (
            Breaker::new(threshold, open_for, Arc::new(clock.clone())),
            clock,
        )
    }
    #[test]
    fn breaker_opens_after_threshold_probes_once_and_closes() {
        let (b, clock) = breaker(5, Duration::from_millis(30));
        for _ in 0..4 {
            assert!(!b.failure());
            assert!(b.allow());
        }
        assert!(b.failure(), "the fifth failure opens it");
        assert!(!b.failure(), "in-flight failures do not open it again");
        assert!(!b.allow());
        assert!(b.is_open());
        clock.advance(Duration::from_millis(40));
        assert!(!b.is_open());
        assert!(b.allow(), "one probe");
        assert!(!b.allow(), "only one probe at a time");
        assert!(b.failure(), "a failed probe opens it again");
        assert!(!b.allow());
        clock.advance(Duration::from_millis(40));
        assert!(b.allow(), "the next probe");
        assert!(b.success(), "its success closes the breaker");
        assert!(!b.success());
        assert!(b.allow());
        assert!(b.allow());
    }

    #[test]
    fn an_abandoned_probe_does_not_keep_the_breaker_open() {
        let (b, clock) = breaker(1, Duration::from_millis(20));
        assert!(b.failure());
        clock.advance(Duration::from_millis(25));
        assert!(b.allow(), "probe, then its caller gives up");
        assert!(!b.allow());
        clock.advance(Duration::from_millis(25));
        assert!(b.allow(), "another probe after a further cool-down");
    }

    #[test]
    fn a_zero_threshold_never_opens() {
        let (b, _clock) = breaker(0, Duration::from_secs(1));
        for _ in 0..100 {
            assert!(!b.failure());
        }
        assert!(b.allow());
    }
}
