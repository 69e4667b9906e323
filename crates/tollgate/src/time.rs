//! Time as the limiter sees it: integer microseconds from a [`Clock`].
//!
//! Algorithms never read a clock; they take `t` as an argument. Stores that
//! keep state in process read `t` from a [`Clock`], which tests replace with
//! a [`FakeClock`]. Redis-backed stores read `t` from the Redis server.

// The one place the library reads the real clock (clippy.toml disallows it
// everywhere else in the crate): every other reader goes through a `Clock`.
#![allow(
    clippy::disallowed_methods,
    reason = "the clock module is where the real clock is read"
)]

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// A point in time, in whole microseconds since an origin the clock chooses.
pub type Micros = u64;

/// The latest explicit time a check accepts: 2^53 µs minus the longest
/// burst window, so every time a store computes (`t + tau`, window ends)
/// stays exact in an IEEE double, as the Redis scripts require. About the
/// year 2255 on the Unix epoch.
pub const MAX_TIME: Micros = (1 << 53) - 2 * 3660 * 86_400 * 1_000_000;

/// Converts a [`Duration`] to whole microseconds, saturating at `u64::MAX`.
#[must_use]
pub fn duration_to_micros(d: Duration) -> Micros {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

/// Rounds a number of microseconds UP to whole milliseconds, so a client that
/// waits the reported time is never early.
#[must_use]
pub fn micros_to_millis_ceil(us: Micros) -> u64 {
    us.div_ceil(1_000)
}

/// A source of time for in-process stores.
///
/// `now` must never go backwards, across threads too. Implementations must
/// be cheap: the memory store calls `now` once per check (once more when a
/// contended compare-and-swap is retried, or a new key created), while it
/// holds the key.
pub trait Clock: Send + Sync + 'static {
    /// The current time in microseconds since this clock's origin.
    fn now(&self) -> Micros;
}

/// The real clock: microseconds since the Unix epoch, read from the wall
/// clock once, when the clock is created, and advanced from then on by the
/// monotonic clock. So fixed windows (`floor(t / period)`) line up with the
/// wall clock's minutes, hours and days, as docs/semantics.md ("Time")
/// has them, and time
/// still never goes backwards when the wall clock is stepped (NTP, an
/// operator) while the process runs.
#[derive(Debug, Clone, Copy)]
pub struct MonotonicClock {
    origin: Instant,
    /// The wall clock at `origin`, in microseconds since the Unix epoch.
    base: Micros,
}

impl MonotonicClock {
    /// A clock reading the wall clock's time now (0 if the wall clock is
    /// set before 1970) and advancing monotonically from it.
    #[must_use]
    pub fn new() -> Self {
        let base = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, duration_to_micros);
        Self {
            origin: Instant::now(),
            base,
        }
    }
}

impl Default for MonotonicClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for MonotonicClock {
    fn now(&self) -> Micros {
        self.base
            .saturating_add(duration_to_micros(self.origin.elapsed()))
    }
}

/// A clock that only moves when told to. Clones share one time.
///
/// ```
/// use std::time::Duration;
/// use tollgate::{Clock, FakeClock};
///
/// let clock = FakeClock::new();
/// let other = clock.clone();
/// clock.advance(Duration::from_millis(5));
/// assert_eq!(other.now(), 5_000);
/// ```
#[derive(Debug, Clone, Default)]
pub struct FakeClock {
    now: Arc<AtomicU64>,
}

impl FakeClock {
    /// A fake clock at time zero.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// A fake clock starting at `t` microseconds.
    #[must_use]
    pub fn at(t: Micros) -> Self {
        Self {
            now: Arc::new(AtomicU64::new(t)),
        }
    }

    /// Moves every clone of this clock forward by `d`.
    pub fn advance(&self, d: Duration) {
        self.now.fetch_add(duration_to_micros(d), Ordering::SeqCst);
    }

    /// Moves every clone of this clock forward by `us` microseconds.
    pub fn advance_micros(&self, us: Micros) {
        self.now.fetch_add(us, Ordering::SeqCst);
    }

    /// Sets the time; it must not go backwards (callers' responsibility).
    pub fn set(&self, t: Micros) {
        self.now.store(t, Ordering::SeqCst);
    }
}

impl Clock for FakeClock {
    fn now(&self) -> Micros {
        self.now.load(Ordering::SeqCst)
    }
}

/// A clock driven by tokio's timer, so tests that pause tokio time
/// (`#[tokio::test(start_paused = true)]`) see waits advance it.
#[derive(Debug, Clone, Copy)]
pub struct TokioClock {
    origin: tokio::time::Instant,
}

impl TokioClock {
    /// A tokio clock whose origin is tokio's now.
    #[must_use]
    pub fn new() -> Self {
        Self {
            origin: tokio::time::Instant::now(),
        }
    }
}

impl Default for TokioClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for TokioClock {
    fn now(&self) -> Micros {
        duration_to_micros(self.origin.elapsed())
    }
}

impl<C: Clock> Clock for Arc<C> {
    fn now(&self) -> Micros {
        (**self).now()
    }
}

/// Parses a duration written as an integer and a unit: `250ms`, `1s`, `90s`,
/// `1m`, `1h`, `1d`. The error says what is wrong with the text.
///
/// ```
/// use std::time::Duration;
/// assert_eq!(tollgate::time::parse_duration("250ms"), Ok(Duration::from_millis(250)));
/// assert!(tollgate::time::parse_duration("1.5s").is_err());
/// ```
///
/// # Errors
/// A message naming the problem when the text is not `<integer><unit>`.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let s = text.trim();
    let split = s
        .find(|c: char| !c.is_ascii_digit())
        .ok_or_else(|| format!("duration {text:?} has no unit (use ms, s, m, h or d)"))?;
    let (digits, unit) = s.split_at(split);
    if digits.is_empty() {
        return Err(format!(
            "duration {text:?} must start with a whole number, e.g. \"250ms\" or \"1s\""
        ));
    }
    let n: u64 = digits
        .parse()
        .map_err(|_| format!("duration {text:?} is too large"))?;
    let unit_ms: u64 = match unit {
        "ms" => 1,
        "s" => 1_000,
        "m" => 60_000,
        "h" => 3_600_000,
        "d" => 86_400_000,
        _ => {
            return Err(format!(
                "duration {text:?} has unknown unit {unit:?} (use ms, s, m, h or d)"
            ));
        }
    };
    let ms = n
        .checked_mul(unit_ms)
        .ok_or_else(|| format!("duration {text:?} is too large"))?;
    Ok(Duration::from_millis(ms))
}
