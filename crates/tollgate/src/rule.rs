//! Rules: a name, an algorithm and its parameters. A rule that builds is a
//! rule that works; every bound is checked in [`RuleSpec::build`].

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use crate::time::{Micros, duration_to_micros};

/// The longest rule name accepted.
pub const MAX_NAME_LEN: usize = 128;
/// The largest `limit` or `burst` accepted (10^12).
pub const MAX_LIMIT: u64 = 1_000_000_000_000;
/// The shortest period accepted.
pub const MIN_PERIOD: Duration = Duration::from_millis(1);
/// The longest period accepted (366 days).
pub const MAX_PERIOD: Duration = Duration::from_secs(366 * 86_400);
/// The largest `limit` accepted for `sliding_log`, which keeps one entry per
/// admitted check (at most 16 bytes each) for every key.
pub const MAX_SLIDING_LOG_LIMIT: u64 = 100_000;
/// The largest `limit` accepted for `concurrency`, which keeps one lease
/// per acquire for every key.
pub const MAX_CONCURRENCY_LIMIT: u64 = 100_000;
/// A `concurrency` rule's lease when none is given.
pub const DEFAULT_LEASE: Duration = Duration::from_secs(30);
/// The longest time a full GCRA / token bucket burst may take to refill
/// (`burst * period / limit`): 3660 days.
pub const MAX_BURST_WINDOW: Duration = Duration::from_secs(3660 * 86_400);

/// How much debt a charge may leave on a key, in periods' worth of its
/// limit (docs/semantics.md, "Charge"): a charge past it is clamped.
pub const DEBT_PERIODS: u64 = 100;

/// The five algorithms of docs/semantics.md.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Algorithm {
    /// Generic cell rate algorithm: one timestamp per key.
    Gcra,
    /// Token bucket: the same policy as GCRA, stored as tokens + last refill.
    TokenBucket,
    /// Fixed window aligned to the epoch.
    FixedWindow,
    /// Two fixed windows, the previous one weighted by its overlap.
    SlidingWindow,
    /// A log of admitted checks.
    SlidingLog,
    /// In-flight limits: at most `limit` slots held at once, each lease
    /// ending when released or after the rule's lease duration
    /// (docs/semantics.md, "Concurrency").
    Concurrency,
}

impl Algorithm {
    /// Every algorithm, in documentation order.
    pub const ALL: [Algorithm; 6] = [
        Algorithm::Gcra,
        Algorithm::TokenBucket,
        Algorithm::FixedWindow,
        Algorithm::SlidingWindow,
        Algorithm::SlidingLog,
        Algorithm::Concurrency,
    ];

    /// The five that limit a rate: checked and charged (a `concurrency`
    /// rule is acquired and released instead).
    pub const RATES: [Algorithm; 5] = [
        Algorithm::Gcra,
        Algorithm::TokenBucket,
        Algorithm::FixedWindow,
        Algorithm::SlidingWindow,
        Algorithm::SlidingLog,
    ];

    /// The name used in config files and APIs (`gcra`, `token_bucket`, ...).
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Algorithm::Gcra => "gcra",
            Algorithm::TokenBucket => "token_bucket",
            Algorithm::FixedWindow => "fixed_window",
            Algorithm::SlidingWindow => "sliding_window",
            Algorithm::SlidingLog => "sliding_log",
            Algorithm::Concurrency => "concurrency",
        }
    }

    /// Whether the algorithm takes a `burst` (GCRA and token bucket).
    #[must_use]
    pub fn has_burst(self) -> bool {
        matches!(self, Algorithm::Gcra | Algorithm::TokenBucket)
    }
}

impl fmt::Display for Algorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Algorithm {
    type Err = RuleError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Algorithm::ALL
            .into_iter()
            .find(|a| a.as_str() == s)
            .ok_or_else(|| {
                RuleError::new(
                    "algorithm",
                    format!(
                        "unknown algorithm {s:?}; expected one of gcra, token_bucket, \
                         fixed_window, sliding_window, sliding_log, concurrency"
                    ),
                )
            })
    }
}

/// Why a rule could not be built: the offending field and the reason.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuleError {
    /// The field at fault: `name`, `algorithm`, `limit`, `period` or `burst`.
    pub field: &'static str,
    /// What is wrong with it.
    pub message: String,
}

impl RuleError {
    fn new(field: &'static str, message: impl Into<String>) -> Self {
        Self {
            field,
            message: message.into(),
        }
    }
}

impl fmt::Display for RuleError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.field, self.message)
    }
}

impl std::error::Error for RuleError {}

/// The unchecked parts of a rule. [`RuleSpec::build`] validates them.
///
/// ```
/// use std::time::Duration;
/// use tollgate::{Algorithm, RuleSpec};
///
/// let rule = RuleSpec::new("per_user", Algorithm::Gcra, 100, Duration::from_secs(1))
///     .burst(200)
///     .build()
///     .unwrap();
/// assert_eq!(rule.capacity(), 200);
///
/// let err = RuleSpec::new("per_ip", Algorithm::FixedWindow, 0, Duration::from_secs(1))
///     .build()
///     .unwrap_err();
/// assert_eq!(err.field, "limit");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuleSpec {
    /// `[A-Za-z0-9_.-]+`, at most [`MAX_NAME_LEN`] bytes.
    pub name: String,
    /// Which algorithm decides.
    pub algorithm: Algorithm,
    /// Units per period, 1 ..= [`MAX_LIMIT`].
    pub limit: u64,
    /// The period, [`MIN_PERIOD`] ..= [`MAX_PERIOD`], whole microseconds.
    pub period: Duration,
    /// GCRA and token bucket only; defaults to `limit`.
    pub burst: Option<u64>,
}

impl RuleSpec {
    /// A spec without a burst.
    pub fn new(
        name: impl Into<String>,
        algorithm: Algorithm,
        limit: u64,
        period: Duration,
    ) -> Self {
        Self {
            name: name.into(),
            algorithm,
            limit,
            period,
            burst: None,
        }
    }

    /// Sets the burst (GCRA and token bucket only).
    #[must_use]
    pub fn burst(mut self, burst: u64) -> Self {
        self.burst = Some(burst);
        self
    }

    /// Checks every field and builds the rule.
    ///
    /// # Errors
    /// The first field that is out of bounds, with the reason.
    pub fn build(&self) -> Result<Rule, RuleError> {
        validate_name(&self.name)?;
        if self.limit == 0 {
            return Err(RuleError::new("limit", "limit must be at least 1"));
        }
        if self.limit > MAX_LIMIT {
            return Err(RuleError::new(
                "limit",
                format!("limit {} exceeds the maximum {MAX_LIMIT}", self.limit),
            ));
        }
        if self.period < MIN_PERIOD {
            return Err(RuleError::new(
                "period",
                format!("period {:?} is shorter than the minimum 1ms", self.period),
            ));
        }
        if self.period > MAX_PERIOD {
            return Err(RuleError::new(
                "period",
                format!("period {:?} is longer than the maximum 366d", self.period),
            ));
        }
        if !self.period.subsec_nanos().is_multiple_of(1_000) {
            return Err(RuleError::new(
                "period",
                format!(
                    "period {:?} is not a whole number of microseconds",
                    self.period
                ),
            ));
        }
        let period = duration_to_micros(self.period);
        let burst = match (self.algorithm.has_burst(), self.burst) {
            (false, Some(_)) => {
                return Err(RuleError::new(
                    "burst",
                    format!(
                        "burst applies to gcra and token_bucket only, not {}",
                        self.algorithm
                    ),
                ));
            }
            (true, Some(0)) => return Err(RuleError::new("burst", "burst must be at least 1")),
            (true, Some(b)) if b > MAX_LIMIT => {
                return Err(RuleError::new(
                    "burst",
                    format!("burst {b} exceeds the maximum {MAX_LIMIT}"),
                ));
            }
            (_, Some(b)) => b,
            (_, None) => self.limit,
        };
        if self.algorithm.has_burst() && self.limit > period {
            return Err(RuleError::new(
                "limit",
                format!(
                    "limit {} per {period} microseconds is more than one per microsecond, \
                     the finest rate {} can represent",
                    self.limit, self.algorithm
                ),
            ));
        }
        if self.algorithm == Algorithm::Concurrency && self.limit > MAX_CONCURRENCY_LIMIT {
            return Err(RuleError::new(
                "limit",
                format!(
                    "concurrency keeps one lease per acquire; limit {} exceeds its maximum \
                     {MAX_CONCURRENCY_LIMIT}",
                    self.limit
                ),
            ));
        }
        if self.algorithm == Algorithm::SlidingLog && self.limit > MAX_SLIDING_LOG_LIMIT {
            return Err(RuleError::new(
                "limit",
                format!(
                    "sliding_log keeps one entry per admitted check; limit {} exceeds its \
                     maximum {MAX_SLIDING_LOG_LIMIT} (use sliding_window for large limits)",
                    self.limit
                ),
            ));
        }
        let interval = period / self.limit;
        let tau = burst.saturating_mul(interval);
        let periods = DEBT_PERIODS * self.limit;
        let max_debt = match self.algorithm {
            Algorithm::Gcra | Algorithm::TokenBucket => {
                periods.min(duration_to_micros(MAX_BURST_WINDOW) / interval)
            }
            Algorithm::FixedWindow | Algorithm::SlidingWindow => periods,
            Algorithm::SlidingLog => self.limit,
            // Slots are acquired, never charged.
            Algorithm::Concurrency => 0,
        };
        if self.algorithm.has_burst() && tau > duration_to_micros(MAX_BURST_WINDOW) {
            return Err(RuleError::new(
                "burst",
                format!(
                    "burst {burst} at {} per period takes longer than 3660d to refill",
                    self.limit
                ),
            ));
        }
        Ok(Rule(Arc::new(RuleInner {
            name: self.name.clone(),
            algorithm: self.algorithm,
            limit: self.limit,
            period,
            burst,
            interval,
            tau,
            max_debt,
        })))
    }
}

fn validate_name(name: &str) -> Result<(), RuleError> {
    if name.is_empty() {
        return Err(RuleError::new("name", "name must not be empty"));
    }
    if name.len() > MAX_NAME_LEN {
        return Err(RuleError::new(
            "name",
            format!("name is {} bytes, longer than {MAX_NAME_LEN}", name.len()),
        ));
    }
    if let Some(c) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-')))
    {
        return Err(RuleError::new(
            "name",
            format!("name {name:?} contains {c:?}; only A-Z a-z 0-9 _ . - are allowed"),
        ));
    }
    Ok(())
}

/// A validated rule. Cheap to clone (shared).
///
/// Besides the fields of its [`RuleSpec`], a rule precomputes what GCRA and
/// token bucket need: the emission interval `T = floor(period / limit)` and
/// the burst window `tau = burst * T`, both in microseconds; a check of cost
/// `c` advances the state by `c * T`. When `period / limit` is a whole
/// number of microseconds this is exactly docs/semantics.md. Otherwise the rule
/// emits one unit every `floor(period / limit)` µs: a burst is still exactly
/// `burst` units, and the sustained rate is faster than `limit` per `period`
/// by less than one part in `T` (3 per second: one per 333,333 µs, 0.0001%
/// fast) — docs/semantics.md, "Rounding and units".
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule(Arc<RuleInner>);

#[derive(Debug, PartialEq, Eq)]
struct RuleInner {
    name: String,
    algorithm: Algorithm,
    limit: u64,
    period: Micros,
    burst: u64,
    interval: Micros,
    tau: Micros,
    /// [`Rule::max_debt`], computed once.
    max_debt: u64,
}

impl Rule {
    /// The rule's name.
    #[must_use]
    pub fn name(&self) -> &str {
        &self.0.name
    }

    /// The rule's algorithm.
    #[must_use]
    pub fn algorithm(&self) -> Algorithm {
        self.0.algorithm
    }

    /// Units per period.
    #[must_use]
    pub fn limit(&self) -> u64 {
        self.0.limit
    }

    /// This rule's identity (its clones share it; a rule built apart, even
    /// equal, has its own), for a store to tell a limiter's rules from
    /// per-call ones ([`crate::Store::rules_in_use`]).
    #[cfg_attr(not(feature = "redis"), allow(dead_code))]
    pub(crate) fn identity(&self) -> usize {
        Arc::as_ptr(&self.0) as usize
    }

    /// The period in microseconds.
    #[must_use]
    pub fn period_micros(&self) -> Micros {
        self.0.period
    }

    /// The period.
    #[must_use]
    pub fn period(&self) -> Duration {
        Duration::from_micros(self.0.period)
    }

    /// The burst (equal to `limit` for window algorithms).
    #[must_use]
    pub fn burst(&self) -> u64 {
        self.0.burst
    }

    /// The most units a single check can ever take: `burst` for GCRA and
    /// token bucket, `limit` for the window algorithms. This is the `limit`
    /// reported in decisions.
    #[must_use]
    pub fn capacity(&self) -> u64 {
        if self.0.algorithm.has_burst() {
            self.0.burst
        } else {
            self.0.limit
        }
    }

    /// The most units a key of this rule may be over its limit after a
    /// charge (docs/semantics.md, "Charge"): [`DEBT_PERIODS`] × `limit`;
    /// for GCRA and token bucket no more than [`MAX_BURST_WINDOW`] of wait
    /// (so every time and TTL stays below 2^53 µs); for the sliding log
    /// `limit`, which keeps a key to at most `2 × limit` entries.
    #[must_use]
    pub fn max_debt(&self) -> u64 {
        self.0.max_debt
    }

    /// GCRA / token bucket emission interval `floor(period / limit)`, µs.
    #[must_use]
    pub fn interval_micros(&self) -> Micros {
        self.0.interval
    }

    /// GCRA / token bucket burst window `burst * T`, µs.
    #[must_use]
    pub fn tau_micros(&self) -> Micros {
        self.0.tau
    }

    /// How far a check of `cost` advances GCRA / token bucket state:
    /// `cost * T` µs (saturating).
    #[must_use]
    pub fn increment_micros(&self, cost: u64) -> Micros {
        cost.saturating_mul(self.0.interval)
    }

    /// Whether `other` is this very rule (a clone of it), not merely an
    /// equal one: a pointer comparison.
    pub(crate) fn same(&self, other: &Rule) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }

    /// The spec this rule was built from.
    #[must_use]
    pub fn spec(&self) -> RuleSpec {
        RuleSpec {
            name: self.0.name.clone(),
            algorithm: self.0.algorithm,
            limit: self.0.limit,
            period: self.period(),
            burst: self.0.algorithm.has_burst().then_some(self.0.burst),
        }
    }
}
