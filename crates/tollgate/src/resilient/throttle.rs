//! [`Throttle`]: lets a log line through at most once per period.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::time::{Clock, Micros, MonotonicClock};

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
    clock: MonotonicClock,
    /// The clock's time when the throttle was made.
    start: Micros,
    every_ms: u64,
    /// Milliseconds since `start` before which reports are suppressed.
    next: AtomicU64,
    suppressed: AtomicU64,
}

impl Throttle {
    /// At most one report per `every`.
    #[must_use]
    pub fn new(every: Duration) -> Self {
        let clock = MonotonicClock::new();
        Self {
            clock,
            start: clock.now(),
            every_ms: u64::try_from(every.as_millis()).unwrap_or(1000),
            next: AtomicU64::new(0),
            suppressed: AtomicU64::new(0),
        }
    }

    /// Calls `report` with the number of events suppressed since the last
    /// report, unless one was made less than the period ago.
    pub fn report(&self, report: impl FnOnce(u64)) {
        let now = self.clock.now().saturating_sub(self.start) / 1_000;
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
}
