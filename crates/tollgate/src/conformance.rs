//! The conformance kit: one set of cases that every [`Store`] must pass.
//! Built with the cargo feature `conformance` (for a store's tests, not for
//! production builds).
//!
//! docs/semantics.md defines every decision exactly. [`run`] replays scripted
//! and seeded-random traces of checks through a store's [`Store::check`]
//! and [`Store::check_all`] with explicit times (`at = Some(t)`) and compares
//! every field of every answer with the pure reference:
//! [`algorithm::decide`] on a local [`KeyState`] for a single check, and the
//! all-or-nothing model for several rules in one check (evaluate every pair;
//! commit all only if all admit; on a denial the pairs that would admit
//! report a peek; the deciding pair is the denying one with the longest
//! `retry_after`, "never" longest, or when admitted the one with the fewest
//! `remaining`; ties go to the first pair, as in
//! [`MultiDecision::from_decisions`]). The first difference is returned as
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

use std::collections::HashMap;
use std::fmt;
use std::time::Duration;

use crate::algorithm::{self, KeyState};
use crate::decision::{Decision, MultiDecision};
use crate::rule::{Algorithm, Rule, RuleSpec};
use crate::store::{KeyCheck, Store};
use crate::time::{Micros, duration_to_micros};

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
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} cases passed: {} checks and {} multi-rule checks ({} denied)",
            self.cases, self.checks, self.multi_checks, self.denied
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
    };
    for alg in Algorithm::ALL {
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
    for alg in Algorithm::ALL {
        for i in 0..config.random_traces {
            random_single(&mut d, &mut rng, alg, i, config.steps).await?;
        }
    }
    for i in 0..config.random_traces {
        random_multi(&mut d, &mut rng, i, config.steps).await?;
    }
    Ok(d.report)
}

// ------------------------------------------------------------------ driver

/// Sends checks to the store and to the reference, and compares.
struct Driver<'a, S> {
    store: &'a S,
    namespace: &'a str,
    report: Report,
    case: String,
    case_index: usize,
    step: usize,
    /// The kit's clock: only moves forward, across cases too.
    now: Micros,
    /// Reference state per (rule name, full key).
    states: HashMap<(String, Vec<u8>), KeyState>,
}

impl<S: Store> Driver<'_, S> {
    /// Starts a case at the next whole hour plus `offset` µs.
    fn begin(&mut self, name: String, offset: Micros) -> Micros {
        self.case = name;
        self.case_index += 1;
        self.step = 0;
        self.states.clear();
        self.report.cases += 1;
        self.now = (self.now / HOUR + 1) * HOUR + offset;
        self.now
    }

    /// `name@namespace/case`: the namespace goes last so that a store which
    /// runs rule names and keys together shows it (see [`isolation`]).
    fn full_key(&self, name: &[u8]) -> Vec<u8> {
        let mut key = name.to_vec();
        key.extend_from_slice(format!("@{}/{}", self.namespace, self.case_index).as_bytes());
        key
    }

    fn advance(&mut self, t: Micros) {
        debug_assert!(t >= self.now, "the kit's clock only moves forward");
        self.now = self.now.max(t);
    }

    fn failure(&self, check: String, expected: String, got: String) -> Failure {
        Failure {
            case: self.case.clone(),
            step: self.step,
            check,
            expected,
            got,
        }
    }

    /// One check of `key` under `rule` at `t`; returns the (matching) answer.
    async fn one(
        &mut self,
        rule: &Rule,
        key: &[u8],
        cost: u64,
        t: Micros,
    ) -> Result<Decision, Failure> {
        self.advance(t);
        let full = self.full_key(key);
        let state = self
            .states
            .entry((rule.name().to_owned(), full.clone()))
            .or_default();
        let want = algorithm::decide(rule, state, t, cost);
        let got = self.store.check(rule, &full, cost, Some(t)).await;
        let result = match got {
            Ok(got) if got == want => Ok(want),
            other => Err(self.failure(
                format!(
                    "check({}, key {}, cost {cost}, at {})",
                    describe(rule),
                    show_key(&full),
                    show_time(t)
                ),
                format!("{want:?}"),
                match other {
                    Ok(got) => format!("{got:?}"),
                    Err(e) => format!("store error: {e}"),
                },
            )),
        };
        self.step += 1;
        self.report.checks += 1;
        if !want.allowed {
            self.report.denied += 1;
        }
        result
    }

    /// One all-or-nothing check of several distinct (rule, key, cost) pairs.
    async fn all(
        &mut self,
        pairs: &[(&Rule, &[u8], u64)],
        t: Micros,
    ) -> Result<MultiDecision, Failure> {
        self.advance(t);
        let keys: Vec<Vec<u8>> = pairs.iter().map(|p| self.full_key(p.1)).collect();
        let empty = KeyState::Empty;
        let evaluated: Vec<Decision> = pairs
            .iter()
            .zip(&keys)
            .map(|(&(rule, _, cost), key)| {
                let state = self.states.get(&(rule.name().to_owned(), key.clone()));
                algorithm::evaluate(rule, state.unwrap_or(&empty), t, cost)
            })
            .collect();
        let decisions: Vec<Decision> = if evaluated.iter().all(|d| d.allowed) {
            pairs
                .iter()
                .zip(&keys)
                .map(|(&(rule, _, cost), key)| {
                    let state = self
                        .states
                        .entry((rule.name().to_owned(), key.clone()))
                        .or_default();
                    algorithm::decide(rule, state, t, cost)
                })
                .collect()
        } else {
            pairs
                .iter()
                .zip(&keys)
                .zip(evaluated)
                .map(|((&(rule, _, _), key), d)| {
                    if d.allowed {
                        let state = self.states.get(&(rule.name().to_owned(), key.clone()));
                        algorithm::evaluate(rule, state.unwrap_or(&empty), t, 0)
                    } else {
                        d
                    }
                })
                .collect()
        };
        let want = MultiDecision {
            allowed: decisions.iter().all(|d| d.allowed),
            deciding: deciding(&decisions),
            decisions,
        };
        let checks: Vec<KeyCheck<'_>> = pairs
            .iter()
            .zip(&keys)
            .map(|(&(rule, _, cost), key)| KeyCheck {
                rule,
                key: key.as_slice(),
                cost,
            })
            .collect();
        let got = self.store.check_all(&checks, Some(t)).await;
        let result = match got {
            Ok(got) if got == want => Ok(want.clone()),
            other => {
                let listed: Vec<String> = pairs
                    .iter()
                    .zip(&keys)
                    .map(|(&(rule, _, cost), key)| {
                        format!("({}, key {}, cost {cost})", describe(rule), show_key(key))
                    })
                    .collect();
                Err(self.failure(
                    format!("check_all([{}], at {})", listed.join(", "), show_time(t)),
                    format!("{want:?}"),
                    match other {
                        Ok(got) => format!("{got:?}"),
                        Err(e) => format!("store error: {e}"),
                    },
                ))
            }
        };
        self.step += 1;
        self.report.multi_checks += 1;
        if !want.allowed {
            self.report.denied += 1;
        }
        result
    }
}

/// docs/semantics.md, "Several rules in one check": the denying pair with
/// the longest `retry_after` ("never" longest), or when admitted the pair
/// with the fewest `remaining`; the first pair on ties.
fn deciding(decisions: &[Decision]) -> usize {
    if decisions.iter().all(|d| d.allowed) {
        let fewest = decisions.iter().map(|d| d.remaining).min();
        decisions
            .iter()
            .position(|d| Some(d.remaining) == fewest)
            .unwrap_or(0)
    } else {
        let wait = |d: &Decision| (!d.allowed).then(|| d.retry_after.unwrap_or(Duration::MAX));
        let longest = decisions.iter().filter_map(wait).max();
        decisions
            .iter()
            .position(|d| wait(d).is_some() && wait(d) == longest)
            .unwrap_or(0)
    }
}

fn describe(rule: &Rule) -> String {
    let burst = if rule.algorithm().has_burst() {
        format!(" burst {}", rule.burst())
    } else {
        String::new()
    };
    format!(
        "rule {} [{} {} per {}us{burst}]",
        rule.name(),
        rule.algorithm(),
        rule.limit(),
        rule.period_micros()
    )
}

fn show_key(key: &[u8]) -> String {
    if key.len() > 80 {
        format!(
            "{:?}...({} bytes)",
            String::from_utf8_lossy(&key[..40]),
            key.len()
        )
    } else {
        format!("{:?}", String::from_utf8_lossy(key))
    }
}

fn show_time(t: Micros) -> String {
    format!("START+{}us", t - START)
}

fn micros(d: Duration) -> Micros {
    duration_to_micros(d)
}

fn rule(name: &str, algorithm: Algorithm, limit: u64, period: Micros, burst: Option<u64>) -> Rule {
    let mut spec = RuleSpec::new(name, algorithm, limit, Duration::from_micros(period));
    spec.burst = burst.filter(|_| algorithm.has_burst());
    match spec.build() {
        Ok(rule) => rule,
        // The kit's own rules are all valid; a failure here is a kit bug.
        Err(e) => panic!("conformance kit rule {name}: {e}"),
    }
}

// ------------------------------------------------------------ scripted cases

/// A handful of rules per algorithm: small and large limits, whole-µs
/// units, bursts above and below the limit.
fn scripted_rules(alg: Algorithm) -> Vec<Rule> {
    let name = alg.as_str();
    let specs: &[(u64, Micros, Option<u64>)] = match alg {
        Algorithm::Gcra | Algorithm::TokenBucket => &[
            (2, 1_000_000, None),
            (1, 100_000, Some(3)),
            (10, 1_000_000, Some(1)),
            (1_000, 1_000_000, Some(5)),
        ],
        Algorithm::SlidingLog => &[
            (5, 1_000_000, None),
            (1, 1_000, None),
            (20, 60_000_000, None),
        ],
        _ => &[
            (3, 1_000_000, None),
            (1, 1_000, None),
            (10, 1_000_000, None),
            (100, HOUR, None),
        ],
    };
    specs
        .iter()
        .enumerate()
        .map(|(i, &(limit, period, burst))| rule(&format!("{name}.{i}"), alg, limit, period, burst))
        .collect()
}

fn label(kind: &str, r: &Rule) -> String {
    let burst = if r.algorithm().has_burst() {
        format!(" burst {}", r.burst())
    } else {
        String::new()
    };
    format!(
        "{}/{kind} {} per {}us{burst}",
        r.algorithm(),
        r.limit(),
        r.period_micros()
    )
}

/// Peek an empty key, drain it at one instant, then retry one microsecond
/// early and exactly on time, twice; a cost above capacity; wait for the
/// reset and take the whole capacity at once.
async fn drain_and_retry<S: Store>(d: &mut Driver<'_, S>, r: &Rule) -> Result<(), Failure> {
    let mut t = d.begin(label("drain-and-retry", r), 250_000);
    let cap = r.capacity();
    d.one(r, b"k", 0, t).await?;
    for _ in 0..2 {
        let mut denied = None;
        for _ in 0..=cap {
            let dec = d.one(r, b"k", 1, t).await?;
            if !dec.allowed {
                denied = dec.retry_after;
                break;
            }
        }
        if let Some(wait) = denied.map(micros) {
            d.one(r, b"k", 1, t + wait - 1).await?;
            d.one(r, b"k", 0, t + wait - 1).await?;
            d.one(r, b"k", 1, t + wait).await?;
            t += wait;
        }
    }
    d.one(r, b"k", cap + 1, t).await?;
    let peek = d.one(r, b"k", 0, t).await?;
    let reset = micros(peek.reset_after);
    d.one(r, b"k", cap, t + reset).await?;
    d.one(r, b"k", 1, t + reset).await?;
    Ok(())
}

/// Checks on both sides of a period boundary (aligned windows), with the
/// key full just before it.
async fn boundaries<S: Store>(d: &mut Driver<'_, S>, r: &Rule) -> Result<(), Failure> {
    let start = d.begin(label("boundaries", r), 0);
    let p = r.period_micros();
    let cap = r.capacity();
    let mut t = start + p - 1;
    for _ in 0..3 {
        d.one(r, b"k", cap, t).await?;
        d.one(r, b"k", 1, t).await?;
        d.one(r, b"k", 1, t + 1).await?;
        d.one(r, b"k", 0, t + 2).await?;
        d.one(r, b"k", 1, t + 2).await?;
        t = (t / p + 2) * p - 1;
    }
    // the middle and the last microsecond of the next windows
    for f in [p / 4, p / 2, 3 * p / 4, p - 1, p, p + 1] {
        d.one(r, b"k", 1, t + f).await?;
    }
    Ok(())
}

/// Costs above one: half the capacity, the whole capacity when partly
/// used, above the capacity, and their exact retries.
async fn costs<S: Store>(d: &mut Driver<'_, S>, r: &Rule) -> Result<(), Failure> {
    let mut t = d.begin(label("costs", r), 123_457);
    let cap = r.capacity();
    let half = cap.div_ceil(2);
    for _ in 0..3 {
        d.one(r, b"k", half, t).await?;
        d.one(r, b"k", 1, t).await?;
        let dec = d.one(r, b"k", cap, t).await?;
        d.one(r, b"k", cap + 1, t).await?;
        d.one(r, b"k", u64::MAX, t).await?;
        if let Some(wait) = dec.retry_after.map(micros) {
            d.one(r, b"k", cap, t + wait - 1).await?;
            d.one(r, b"k", cap, t + wait).await?;
            t += wait;
        }
        t += r.period_micros() / 3 + 1;
    }
    Ok(())
}

/// The sliding window's previous window weighs by its overlap: fill a
/// window at its end, then probe the next window at many elapsed times, and
/// retry in the same window, the next, and two windows later.
async fn sliding_window_weights<S: Store>(d: &mut Driver<'_, S>) -> Result<(), Failure> {
    let p = 1_000_000;
    let r = rule(
        "sliding_window.weights",
        Algorithm::SlidingWindow,
        10,
        p,
        None,
    );
    let start = d.begin("sliding_window/weights 10 per 1000000us".into(), 0);
    // previous window: 8 units at its very end
    d.one(&r, b"k", 8, start + p - 1).await?;
    let w = start + p;
    for e in [0, 1, 250_000] {
        d.one(&r, b"k", 0, w + e).await?;
    }
    // at 250_000: 8 * 750_000 + 4 * P fits 10 * P exactly; one more waits
    // until later in this window
    d.one(&r, b"k", 4, w + 250_000).await?;
    let dec = d.one(&r, b"k", 1, w + 250_000).await?;
    if let Some(wait) = dec.retry_after.map(micros) {
        d.one(&r, b"k", 1, w + 250_000 + wait - 1).await?;
        d.one(&r, b"k", 1, w + 250_000 + wait).await?;
    }
    for e in [500_000, 599_999] {
        d.one(&r, b"k", 0, w + e).await?;
    }
    // cost above what is left this window: retry in the next window
    let dec = d.one(&r, b"k", 6, w + 600_000).await?;
    for e in [666_667, 999_999] {
        d.one(&r, b"k", 0, w + e).await?;
    }
    if let Some(wait) = dec.retry_after.map(micros) {
        d.one(&r, b"k", 6, w + 600_000 + wait - 1).await?;
        d.one(&r, b"k", 6, w + 600_000 + wait).await?;
    }
    // cost = limit with units in the current window: two windows later
    let t = (d.now / p + 1) * p + 100;
    d.one(&r, b"j", 1, t).await?;
    let dec = d.one(&r, b"j", 10, t).await?;
    if let Some(wait) = dec.retry_after.map(micros) {
        d.one(&r, b"j", 10, t + wait - 1).await?;
        d.one(&r, b"j", 10, t + wait).await?;
    }
    Ok(())
}

/// Sliding-log entries at one microsecond merge; a retry waits for as many
/// entries to expire as its cost needs; entries expire exactly one period
/// after they were made.
async fn sliding_log_entries<S: Store>(d: &mut Driver<'_, S>) -> Result<(), Failure> {
    let p = 1_000_000;
    let r = rule("sliding_log.entries", Algorithm::SlidingLog, 5, p, None);
    let start = d.begin("sliding_log/entries 5 per 1000000us".into(), 777);
    d.one(&r, b"k", 2, start + 100).await?;
    d.one(&r, b"k", 1, start + 200).await?;
    d.one(&r, b"k", 1, start + 200).await?;
    d.one(&r, b"k", 1, start + 300).await?;
    for cost in [1, 3, 5, 6] {
        d.one(&r, b"k", cost, start + 400).await?;
    }
    for off in [99, 100] {
        d.one(&r, b"k", 0, start + p + off).await?;
    }
    // at P + 150, (200, 2) and (300, 1) count: cost 4 waits for (200, 2)
    let dec = d.one(&r, b"k", 4, start + p + 150).await?;
    if let Some(wait) = dec.retry_after.map(micros) {
        d.one(&r, b"k", 4, start + p + 150 + wait - 1).await?;
        d.one(&r, b"k", 4, start + p + 150 + wait).await?;
    }
    for off in [299, 300] {
        d.one(&r, b"k", 0, start + p + off).await?;
    }
    d.one(&r, b"k", 1, start + 5 * p).await?;
    Ok(())
}

/// Rules and keys are independent: binary keys, long keys that differ only
/// in their last byte, and (rule, key) pairs whose names run together the
/// same way (`"iso.a" + "bx"` and `"iso.ab" + "x"`).
async fn isolation<S: Store>(d: &mut Driver<'_, S>) -> Result<(), Failure> {
    let a = rule("iso.a", Algorithm::FixedWindow, 2, 1_000_000, None);
    let ab = rule("iso.ab", Algorithm::FixedWindow, 2, 1_000_000, None);
    let g = rule("iso.g", Algorithm::Gcra, 2, 1_000_000, None);
    let t = d.begin("isolation of rules and keys".into(), 5);
    let mut long_a = vec![b'L'; 1_000];
    long_a.push(b'a');
    let mut long_b = vec![b'L'; 1_000];
    long_b.push(b'b');
    let keys: [&[u8]; 5] = [b"bx", b"\xff\x00\xfe binary", b"", &long_a, &long_b];
    // drain (iso.a, "bx") and (iso.g, each key but the last) ...
    for _ in 0..3 {
        d.one(&a, b"bx", 1, t).await?;
    }
    for key in &keys[..4] {
        for _ in 0..3 {
            d.one(&g, key, 1, t).await?;
        }
    }
    // ... the others are untouched
    d.one(&ab, b"x", 1, t).await?;
    d.one(&a, b"x", 1, t).await?;
    d.one(&ab, b"bx", 1, t).await?;
    for key in keys {
        d.one(&g, key, 0, t).await?;
        d.one(&a, key, 0, t).await?;
    }
    d.one(&g, &long_b, 2, t).await?;
    Ok(())
}

/// Several rules in one check: admitted together, denied by one pair
/// (consuming nothing anywhere), a pair that can never be admitted, peeks
/// inside a multi-rule check, and ties for the deciding pair.
async fn multi_scripted<S: Store>(d: &mut Driver<'_, S>) -> Result<(), Failure> {
    let g = rule("multi.gcra", Algorithm::Gcra, 5, 1_000_000, None);
    let f = rule("multi.fixed", Algorithm::FixedWindow, 2, 1_000_000, None);
    let l = rule("multi.log", Algorithm::SlidingLog, 3, 1_000_000, None);
    let b = rule("multi.bucket", Algorithm::TokenBucket, 1, 500_000, Some(4));
    let s = rule("multi.window", Algorithm::SlidingWindow, 4, 1_000_000, None);
    let t = d.begin("multi-rule scripted".into(), 400_000);
    let trio: [(&Rule, &[u8], u64); 3] = [(&g, b"user", 1), (&f, b"ip", 1), (&l, b"route", 1)];
    // admitted twice (fixed window's remaining 1, then 0, decides) ...
    d.all(&trio, t).await?;
    d.all(&trio, t + 10).await?;
    // ... then the fixed window denies: nobody consumes
    for i in 0..3 {
        d.all(&trio, t + 20 + i).await?;
    }
    d.one(&g, b"user", 0, t + 30).await?;
    d.one(&l, b"route", 0, t + 30).await?;
    // a pair that can never be admitted decides over a waiting one
    d.all(
        &[(&f, b"ip", 1), (&b, b"user", 5), (&g, b"user", 1)],
        t + 40,
    )
    .await?;
    // peeks inside a multi-rule check; ties on remaining go to the first
    d.all(&[(&s, b"a", 0), (&s, b"b", 0), (&b, b"a", 0)], t + 50)
        .await?;
    d.all(&[(&s, b"a", 1), (&b, b"a", 1), (&g, b"other", 4)], t + 60)
        .await?;
    // two denials: the longer wait decides
    d.all(&[(&b, b"a", 4), (&f, b"ip", 1), (&s, b"a", 1)], t + 70)
        .await?;
    // 1 µs before the fixed window turns the trio is still denied; then admitted
    let next = (t / 1_000_000 + 1) * 1_000_000;
    d.all(&trio, next - 1).await?;
    d.all(&trio, next).await?;
    d.all(&[(&l, b"route", 1), (&g, b"user", 1)], next + 1)
        .await?;
    d.all(&[(&l, b"route", 3), (&g, b"user", 1)], next + 1)
        .await?;
    Ok(())
}

// ------------------------------------------------------------ random cases

/// splitmix64: tiny, good enough, and the same everywhere.
struct SplitMix(u64);

impl SplitMix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform-ish in `0..n` (`n > 0`).
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }

    fn pick<T: Copy>(&mut self, items: &[T]) -> T {
        let n = u64::try_from(items.len()).unwrap_or(u64::MAX);
        let i = usize::try_from(self.below(n)).unwrap_or(0);
        items[i]
    }
}

fn random_rule(rng: &mut SplitMix, alg: Algorithm, name: &str) -> Rule {
    let limit = 1 + rng.below(20);
    match alg {
        Algorithm::Gcra | Algorithm::TokenBucket => {
            let unit = rng.pick(&[1_000, 2_000, 5_000, 10_000, 100_000, 1_000_000]);
            let burst = (rng.below(3) == 0).then(|| 1 + rng.below(30));
            rule(name, alg, limit, limit * unit, burst)
        }
        _ => {
            let period = rng.pick(&[1_000, 10_000, 100_000, 1_000_000, 60_000_000, HOUR]);
            rule(name, alg, limit, period, None)
        }
    }
}

/// The next time: standing still, within one unit or one period, several
/// periods on, at a window edge (±1 µs), or exactly at / 1 µs before the
/// last denial's retry.
fn next_time(rng: &mut SplitMix, t: Micros, r: &Rule, retry: Option<Micros>) -> Micros {
    let p = r.period_micros();
    let unit = (p / r.limit()).max(1);
    let dt = match rng.below(100) {
        0..25 => 0,
        25..45 => rng.below(unit + 1),
        45..60 => rng.below(p + 1),
        60..65 => rng.below(4 * p),
        65..75 => (t / p + 1) * p - t - 1 + rng.below(3),
        75..95 => match retry {
            Some(w) => w - 1 + rng.below(2),
            None => rng.below(unit + 1),
        },
        _ => rng.below(50 * p),
    };
    t + dt
}

fn random_cost(rng: &mut SplitMix, cap: u64) -> u64 {
    match rng.below(100) {
        0..55 => 1,
        55..65 => 0,
        65..90 => 1 + rng.below(cap),
        _ => cap + 1 + rng.below(3),
    }
}

async fn random_single<S: Store>(
    d: &mut Driver<'_, S>,
    rng: &mut SplitMix,
    alg: Algorithm,
    index: usize,
    steps: usize,
) -> Result<(), Failure> {
    let r = random_rule(rng, alg, &format!("{}.random.{index}", alg.as_str()));
    let mut t = d.begin(label(&format!("random-{index}"), &r), rng.below(HOUR));
    let keys: [&[u8]; 2] = [b"k0", b"k1"];
    let mut retry = None;
    for _ in 0..steps {
        t = next_time(rng, t, &r, retry);
        let key = rng.pick(&keys);
        let cost = random_cost(rng, r.capacity());
        let dec = d.one(&r, key, cost, t).await?;
        retry = dec.retry_after.map(micros);
        if let Some(wait) = retry.filter(|_| rng.below(3) == 0) {
            // the same check 1 µs early, then exactly on time
            d.one(&r, key, cost, t + wait - 1).await?;
            t += wait;
            d.one(&r, key, cost, t).await?;
        }
    }
    Ok(())
}

async fn random_multi<S: Store>(
    d: &mut Driver<'_, S>,
    rng: &mut SplitMix,
    index: usize,
    steps: usize,
) -> Result<(), Failure> {
    let rules: Vec<Rule> = Algorithm::ALL
        .iter()
        .map(|&alg| random_rule(rng, alg, &format!("multi.random.{index}.{}", alg.as_str())))
        .collect();
    let mut t = d.begin(format!("multi-rule random-{index}"), rng.below(HOUR));
    let keys: [&[u8]; 3] = [b"user", b"ip", b"route"];
    let any_rule = |rng: &mut SplitMix| &rules[usize::try_from(rng.below(5)).unwrap_or(0)];
    let mut retry = None;
    for _ in 0..steps {
        let timing = any_rule(rng);
        t = next_time(rng, t, timing, retry);
        if rng.below(100) < 35 {
            let r = any_rule(rng);
            let dec = d
                .one(r, rng.pick(&keys), random_cost(rng, r.capacity()), t)
                .await?;
            retry = dec.retry_after.map(micros);
            continue;
        }
        let n = 2 + rng.below(3);
        let mut pairs: Vec<(&Rule, &[u8], u64)> = Vec::new();
        for _ in 0..n {
            let r = any_rule(rng);
            let key = rng.pick(&keys);
            let cost = random_cost(rng, r.capacity());
            if !pairs.iter().any(|p| p.0.name() == r.name() && p.1 == key) {
                pairs.push((r, key, cost));
            }
        }
        let dec = d.all(&pairs, t).await?;
        retry = dec.decision().retry_after.map(micros);
        if let Some(wait) = retry.filter(|_| rng.below(3) == 0) {
            // the deciding pair's wait also admits the others, which only
            // get closer to admitting as time passes
            d.all(&pairs, t + wait - 1).await?;
            t += wait;
            d.all(&pairs, t).await?;
        }
    }
    Ok(())
}
