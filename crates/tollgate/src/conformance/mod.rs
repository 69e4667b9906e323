//! The conformance kit: one set of cases that every [`Store`] must pass.
//! Built with the cargo feature `conformance` (for a store's tests, not for
//! production builds).
//!
//! docs/semantics.md defines every decision exactly. [`run`] replays scripted
//! and seeded-random traces of checks through a store's [`Store::check`]
//! and [`Store::check_all`] with explicit times (`at = Some(t)`) and compares
//! every field of every answer with the pure reference:
//! [`algorithm::decide`](crate::algorithm::decide) on a local [`KeyState`](crate::algorithm::KeyState) for a single check, and the
//! all-or-nothing model for several rules in one check (evaluate every pair;
//! commit all only if all admit; on a denial the pairs that would admit
//! report a peek; the deciding pair is the denying one with the longest
//! `retry_after`, "never" longest, or when admitted the one with the fewest
//! `remaining`; ties go to the first pair, as in
//! [`MultiDecision::from_decisions`](crate::MultiDecision::from_decisions)). The first difference is returned as
//! a [`Failure`] naming the case, the step, the check, and what was
//! expected and got.
//!
//! The cases cover all five algorithms: draining and retrying at exactly
//! `t + retry_after` and one microsecond before, peeks, costs above the
//! capacity, window boundaries, the sliding window's weighted previous
//! window, sliding-log retries that wait for several entries, GCRA and token
//! bucket bursts above the limit, costs from 0 up to `u64::MAX`, isolation
//! of rules and keys (binary and empty keys, 1 000-byte keys that differ in
//! one byte, rule/key pairs whose concatenations are equal), multi-rule
//! checks, and random traces that aim at retry instants and window edges.
//!
//! What the kit assumes of a store:
//!
//! * The check happens at the `at` it is given. Times start at [`START`]
//!   (late 2025, in microseconds since the Unix epoch), so a store that
//!   reads times as Unix time sees realistic values; they only move forward,
//!   but they are not the wall clock: they jump hours ahead within
//!   milliseconds and stand still for many checks. A store that expires
//!   keys by a wall-clock TTL must derive it from the check's time
//!   (`expires - t`) with a margin, not treat `t` as a wall-clock deadline.
//! * Keys are `"{name}@{namespace}/{case}"`: run each namespace once per
//!   store (a second run in the same namespace finds the first run's state).
//! * GCRA and token bucket rules have a whole number of microseconds per
//!   unit (`period / limit`), where docs/semantics.md requires exact decisions;
//!   every rule keeps `limit * period` below 2^53 (the Lua bound for the
//!   sliding window); sliding-log limits are at most 20.
//! * No (rule, key) pair appears twice in one multi-rule check.
//!
//! ```
//! use tollgate::MemoryStore;
//! use tollgate::conformance;
//!
//! # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
//! let store = MemoryStore::new();
//! let report = conformance::run(&store, "doc-example").await?;
//! assert!(report.checks > 1_000);
//! # Ok::<(), conformance::Failure>(())
//! # }).unwrap();
//! ```

mod driver;
mod random;
mod scripted;

use std::collections::HashMap;
use std::fmt;

use self::driver::Driver;
use self::random::{
    SplitMix, random_charges, random_leases, random_multi, random_reservations, random_single,
};
use self::scripted::{
    boundaries, costs, drain_and_retry, isolation, multi_scripted, scripted_rules,
    sliding_log_entries, sliding_window_weights,
};
use crate::rule::Algorithm;
use crate::store::Store;
use crate::time::Micros;

/// The time of the kit's first check: 2025-11-24T16:00:00Z in microseconds
/// since the Unix epoch (a whole hour, so windows of up to an hour are
/// aligned to it).
pub const START: Micros = 1_764_000_000_000_000;

const HOUR: Micros = 3_600_000_000;

/// How much random traffic [`run_with`] adds to the scripted cases.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Config {
    /// Seed of the kit's own PRNG (splitmix64): the same seed replays the
    /// same traces.
    pub seed: u64,
    /// Random single-rule traces per algorithm, and random multi-rule traces.
    pub random_traces: usize,
    /// Checks per random trace.
    pub steps: usize,
}

impl Default for Config {
    /// Seed `0x746f_6c6c_6761_7465`, 4 traces of 150 steps: a few thousand
    /// checks in all.
    fn default() -> Self {
        Self {
            seed: 0x746f_6c6c_6761_7465,
            random_traces: 4,
            steps: 150,
        }
    }
}

/// What a passing run did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Report {
    /// Cases run.
    pub cases: usize,
    /// Single checks made (peeks included).
    pub checks: usize,
    /// Multi-rule checks made.
    pub multi_checks: usize,
    /// Checks (single or multi) that were denied, as expected.
    pub denied: usize,
    /// Charges made (each of one or several pairs).
    pub charges: usize,
    /// Refunds made (each of one or several pairs).
    pub refunds: usize,
    /// Reservations asked for (admitted or not).
    pub reservations: usize,
    /// Settles and cancels (of open, closed and unknown reservations).
    pub settles: usize,
    /// Acquires, releases and renewals.
    pub leases: usize,
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} cases passed: {} checks and {} multi-rule checks ({} denied), {} charges, \
             {} refunds, {} reservations, {} settles, {} lease operations",
            self.cases,
            self.checks,
            self.multi_checks,
            self.denied,
            self.charges,
            self.refunds,
            self.reservations,
            self.settles,
            self.leases
        )
    }
}

/// The first answer of the store that differs from docs/semantics.md.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    /// The case, e.g. `gcra/drain-and-retry 2 per 1000000us burst 2`.
    pub case: String,
    /// The check's index within the case, from 0.
    pub step: usize,
    /// The check: rules, keys, costs, and its time as `START+offset` µs.
    pub check: String,
    /// The reference's answer.
    pub expected: String,
    /// The store's answer (or its error).
    pub got: String,
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "conformance case {:?}, step {}: {}\n  expected {}\n  got      {}",
            self.case, self.step, self.check, self.expected, self.got
        )
    }
}

impl std::error::Error for Failure {}

/// Mixed into the seed of the charge traces.
const CHARGE_SEED: u64 = 0x6368_6172_6765_7321;

/// Runs every case against `store` with the default [`Config`], keys
/// under `namespace`.
///
/// # Errors
/// The first check whose answer differs from the reference, or that the
/// store failed to answer.
pub async fn run<S: Store>(store: &S, namespace: &str) -> Result<Report, Failure> {
    run_with(store, namespace, &Config::default()).await
}

/// Runs every case against `store` with `config`, keys under `namespace`.
///
/// # Errors
/// The first check whose answer differs from the reference, or that the
/// store failed to answer.
pub async fn run_with<S: Store>(
    store: &S,
    namespace: &str,
    config: &Config,
) -> Result<Report, Failure> {
    let mut d = Driver {
        store,
        namespace,
        report: Report::default(),
        case: String::new(),
        case_index: 0,
        step: 0,
        now: START,
        states: HashMap::new(),
        reservations: HashMap::new(),
        rules: HashMap::new(),
    };
    for alg in Algorithm::RATES {
        for rule in scripted_rules(alg) {
            drain_and_retry(&mut d, &rule).await?;
            boundaries(&mut d, &rule).await?;
            costs(&mut d, &rule).await?;
        }
    }
    sliding_window_weights(&mut d).await?;
    sliding_log_entries(&mut d).await?;
    isolation(&mut d).await?;
    multi_scripted(&mut d).await?;
    let mut rng = SplitMix(config.seed);
    for alg in Algorithm::RATES {
        for i in 0..config.random_traces {
            random_single(&mut d, &mut rng, alg, i, config.steps).await?;
        }
    }
    for i in 0..config.random_traces {
        random_multi(&mut d, &mut rng, i, config.steps).await?;
    }
    // Charges on a stream of their own, so the traces above stay as they were.
    let mut rng = SplitMix(config.seed ^ CHARGE_SEED);
    for alg in Algorithm::RATES {
        for i in 0..config.random_traces.div_ceil(2) {
            random_charges(&mut d, &mut rng, alg, i, config.steps).await?;
            random_reservations(&mut d, &mut rng, alg, i, config.steps).await?;
        }
    }
    for i in 0..config.random_traces {
        random_leases(&mut d, &mut rng, i, config.steps).await?;
    }
    Ok(d.report)
}
