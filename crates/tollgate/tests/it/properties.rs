//! Property tests of the five algorithms against docs/semantics.md.
//!
//! Random rules (including `burst != limit` and `period / limit` that is not
//! a whole number of microseconds) and random non-decreasing traces of
//! checks. Each property names the sentence of docs/semantics.md it guards. The
//! reference models at the bottom are deliberately naive (they scan a `Vec`
//! of admitted checks, or search for a wait one microsecond at a time) so
//! that they are obviously right, and are compared field by field.

use std::collections::HashMap;
use std::future::Future;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use proptest::prelude::*;
use tollgate::algorithm::{KeyState, decide, evaluate};
use tollgate::{Algorithm, Check, Decision, Limiter, MemoryStore, MultiDecision, Rule, RuleSpec};

/// Cases per property: the whole file runs in a few seconds in debug. Set
/// `PROPTEST_CASES` for a deeper run.
const CASES: u32 = 128;

mod charge;
mod reference;

use reference::{BucketRef, FixedRef, GcraRef, LogRef, WindowRef};

/// A realistic "now": 2025-11-24 in microseconds since the Unix epoch.
const EPOCH_NOW: u64 = 1_764_000_000_000_000;

fn config() -> ProptestConfig {
    let mut config = ProptestConfig::default();
    if std::env::var_os("PROPTEST_CASES").is_none() {
        config.cases = CASES;
    }
    config
}

// ---------------------------------------------------------------- scenarios

fn build(algorithm: Algorithm, limit: u64, period_us: u64, burst: Option<u64>) -> Rule {
    let mut spec = RuleSpec::new(
        algorithm.as_str(),
        algorithm,
        limit,
        Duration::from_micros(period_us),
    );
    spec.burst = burst.filter(|_| algorithm.has_burst());
    spec.build().expect("generated rules are valid")
}

/// `(limit, period_us, burst)`. With `whole_t`, `period / limit` is a whole
/// number of microseconds; otherwise it mostly is not.
fn params(whole_t: bool) -> BoxedStrategy<(u64, u64, Option<u64>)> {
    let burst = prop::option::of(1u64..=20);
    if whole_t {
        (1u64..=12, 1_000u64..=300_000, burst)
            .prop_map(|(limit, t, burst)| (limit, limit * t, burst))
            .boxed()
    } else {
        let period = prop_oneof![
            3 => 1_000u64..=20_000,
            2 => 20_001u64..=3_000_000,
            1 => Just(1_000_000u64),
        ];
        (1u64..=12, period, burst).boxed()
    }
}

fn start_time() -> impl Strategy<Value = u64> {
    prop_oneof![
        Just(0u64),
        0u64..5_000_000,
        EPOCH_NOW..EPOCH_NOW + 100_000_000_000,
    ]
}

/// A step before it is fitted to a rule: how far to move time and what to
/// ask for, as raw numbers the rule turns into a time and a cost.
#[derive(Debug, Clone, Copy)]
struct RawStep {
    dt_kind: u8,
    dt_raw: u64,
    cost_kind: u8,
    cost_raw: u64,
}

fn raw_steps(max: usize) -> impl Strategy<Value = Vec<RawStep>> {
    prop::collection::vec(
        (0u8..100, any::<u64>(), 0u8..100, any::<u64>()).prop_map(
            |(dt_kind, dt_raw, cost_kind, cost_raw)| RawStep {
                dt_kind,
                dt_raw,
                cost_kind,
                cost_raw,
            },
        ),
        1..max,
    )
}

/// Fits raw steps to `rule`: time moves by 0, by up to one emission
/// interval, up to a period, up to a few periods, to a window boundary
/// (±1 µs), or by a long gap; costs are mostly 1, sometimes 0 (a peek),
/// up to the capacity, or above it.
fn trace(rule: &Rule, t0: u64, raw: &[RawStep]) -> Vec<(u64, u64)> {
    let p = rule.period_micros();
    let unit = (p / rule.limit()).max(1);
    let cap = rule.capacity();
    let mut t = t0;
    raw.iter()
        .map(|s| {
            let dt = match s.dt_kind {
                0..30 => 0,
                30..55 => s.dt_raw % (unit + 1),
                55..80 => s.dt_raw % (p + 1),
                80..90 => s.dt_raw % (4 * p + 1),
                90..97 => ((t / p + 1) * p - t) - 1 + s.dt_raw % 3,
                _ => s.dt_raw % (100 * p),
            };
            t += dt;
            let cost = match s.cost_kind {
                0..55 => 1,
                55..65 => 0,
                65..90 => 1 + s.cost_raw % cap,
                _ => cap + 1 + s.cost_raw % 3,
            };
            (t, cost)
        })
        .collect()
}

#[derive(Debug, Clone)]
struct Scenario {
    rule: Rule,
    steps: Vec<(u64, u64)>,
}

fn scenario(algorithms: &'static [Algorithm], whole_t: bool) -> impl Strategy<Value = Scenario> {
    (
        prop::sample::select(algorithms),
        params(whole_t),
        start_time(),
        raw_steps(60),
    )
        .prop_map(|(algorithm, (limit, period, burst), t0, raw)| {
            let rule = build(algorithm, limit, period, burst);
            let steps = trace(&rule, t0, &raw);
            Scenario { rule, steps }
        })
}

const ALL: &[Algorithm] = &Algorithm::RATES;
const BURSTY: &[Algorithm] = &[Algorithm::Gcra, Algorithm::TokenBucket];

fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).expect("durations in tests fit u64")
}

/// Runs the scenario through `decide`, handing each step's state before,
/// decision and state after to `f`.
fn run(
    s: &Scenario,
    mut f: impl FnMut(usize, u64, u64, &KeyState, &Decision, &KeyState) -> Result<(), TestCaseError>,
) -> Result<(), TestCaseError> {
    let mut state = KeyState::Empty;
    for (i, &(t, cost)) in s.steps.iter().enumerate() {
        let before = state.clone();
        let d = decide(&s.rule, &mut state, t, cost);
        f(i, t, cost, &before, &d, &state)?;
    }
    Ok(())
}

// --------------------------------------------------------------- properties

proptest! {
    #![proptest_config(config())]

    /// "retry_after is exact: a retry at t + retry_after is admitted and one
    /// 1 ms earlier is denied", and "Durations reported in whole milliseconds
    /// are rounded UP (a client that waits the reported time is never early)".
    ///
    /// `retry_after` is the EARLIEST wait that admits, so every instant in
    /// `[t, t + d)` is denied; the ms claim is the instance
    /// `t + ceil(d / 1000) * 1000 - 1000`, which is `>= t` and `< t + d`.
    /// Waiting the rounded-up ms is admitted because, with no other traffic,
    /// a check that is admitted stays admitted as time passes.
    #[test]
    fn retry_after_is_exact(s in scenario(ALL, false), probe in any::<u64>()) {
        let r = &s.rule;
        run(&s, |i, t, cost, before, d, _| {
            if cost > r.capacity() {
                prop_assert_eq!((d.allowed, d.retry_after), (false, None), "step {}", i);
                return Ok(());
            }
            if d.allowed {
                prop_assert_eq!(d.retry_after, None);
                return Ok(());
            }
            let wait = micros(d.retry_after.expect("denied within capacity has a retry"));
            prop_assert!(wait >= 1, "step {}: denied with a zero wait", i);
            prop_assert!(evaluate(r, before, t + wait, cost).allowed, "step {}: not admitted at t + {}", i, wait);
            prop_assert!(!evaluate(r, before, t + wait - 1, cost).allowed, "step {}: admitted at t + {} - 1", i, wait);
            let ms = d.retry_after_ms().expect("retry");
            prop_assert_eq!(ms, wait.div_ceil(1_000));
            let early = t + ms * 1_000 - 1_000;
            prop_assert!(early >= t && early < t + wait);
            prop_assert!(!evaluate(r, before, early, cost).allowed, "step {}: admitted 1 ms before the reported ms", i);
            prop_assert!(evaluate(r, before, t + ms * 1_000, cost).allowed, "step {}: denied after the reported ms", i);
            if wait >= 1_000 {
                prop_assert!(!evaluate(r, before, t + wait - 1_000, cost).allowed, "step {}: admitted 1 ms before the retry", i);
            }
            let inside = t + probe % wait;
            prop_assert!(!evaluate(r, before, inside, cost).allowed, "step {}: admitted at {} inside the wait", i, inside);
            Ok(())
        })?;
    }

    /// "remaining: how many cost-1 checks would be admitted right now, after
    /// this one", checked by making them.
    #[test]
    fn remaining_is_how_many_cost_1_checks_fit_now(s in scenario(ALL, false)) {
        let r = &s.rule;
        run(&s, |i, t, _, _, d, after| {
            let mut probe = after.clone();
            let mut fit = 0;
            while fit <= r.capacity() && decide(r, &mut probe, t, 1).allowed {
                fit += 1;
            }
            prop_assert_eq!(d.remaining, fit, "step {}", i);
            prop_assert_eq!(d.limit, r.capacity());
            Ok(())
        })?;
    }

    /// "reset_after: time until the key is back to its empty/full state",
    /// and `KeyState::expires_at`, which the memory store uses to forget
    /// keys: from then on the state decides like `Empty`; one µs earlier it
    /// does not (but for a fixed window with nothing counted, whose empty
    /// state also reports the window's end).
    #[test]
    fn reset_after_and_expires_at_are_exact(s in scenario(ALL, false)) {
        let r = &s.rule;
        let same_as_empty = |state: &KeyState, at: u64| {
            [0, 1, r.capacity()]
                .into_iter()
                .all(|c| evaluate(r, state, at, c) == evaluate(r, &KeyState::Empty, at, c))
        };
        run(&s, |i, t, _, _, d, after| {
            let reset = micros(d.reset_after);
            prop_assert!(same_as_empty(after, t + reset), "step {}: not empty after reset_after {}", i, reset);
            let fixed_and_empty = r.algorithm() == Algorithm::FixedWindow && d.remaining == d.limit;
            if reset > 0 && !fixed_and_empty {
                prop_assert!(!same_as_empty(after, t + reset - 1), "step {}: empty before reset_after {}", i, reset);
            }
            if let Some(e) = after.expires_at(r) {
                prop_assert!(same_as_empty(after, e.max(t)), "step {}: not empty at expires_at {}", i, e);
            }
            Ok(())
        })?;
    }

    /// "a denied check consumes NOTHING"; "Cost 0 is a peek: it reports the
    /// state and consumes nothing". The state is compared whole.
    #[test]
    fn denied_checks_and_peeks_change_no_state(s in scenario(ALL, false)) {
        run(&s, |i, t, cost, before, d, after| {
            prop_assert_eq!(evaluate(&s.rule, before, t, cost), *d);
            if !d.allowed || cost == 0 {
                prop_assert_eq!(before, after, "step {}", i);
            } else {
                prop_assert_ne!(before, after, "step {}: an admitted check changed nothing", i);
            }
            if cost == 0 {
                prop_assert!(d.allowed, "step {}: a peek was denied", i);
            }
            Ok(())
        })?;
    }

    /// "the two MUST give identical decisions": token bucket and GCRA, whole
    /// `Decision`, on the same rule and trace.
    #[test]
    fn token_bucket_decides_exactly_as_gcra(
        (limit, period, burst) in params(false),
        t0 in start_time(),
        raw in raw_steps(80),
    ) {
        let g = build(Algorithm::Gcra, limit, period, burst);
        let b = build(Algorithm::TokenBucket, limit, period, burst);
        let (mut sg, mut sb) = (KeyState::Empty, KeyState::Empty);
        for (i, (t, cost)) in trace(&g, t0, &raw).into_iter().enumerate() {
            prop_assert_eq!(decide(&g, &mut sg, t, cost), decide(&b, &mut sb, t, cost), "step {} t {} cost {}", i, t, cost);
        }
    }

    /// Fixed window: at most `limit` units admitted per aligned window.
    #[test]
    fn fixed_window_admits_at_most_limit_per_window(s in scenario(&[Algorithm::FixedWindow], false)) {
        let (p, limit) = (s.rule.period_micros(), s.rule.limit());
        let mut per_window: HashMap<u64, u64> = HashMap::new();
        run(&s, |_, t, cost, _, d, _| {
            if d.allowed {
                *per_window.entry(t / p).or_default() += cost;
            }
            Ok(())
        })?;
        for (w, n) in per_window {
            prop_assert!(n <= limit, "window {} admitted {} > {}", w, n, limit);
        }
    }

    /// Sliding log: at most `limit` units admitted in every trailing period
    /// `(x - period, x]`. The sum is largest when `x` is an admission time,
    /// so checking those is checking every `x`.
    #[test]
    fn sliding_log_admits_at_most_limit_per_trailing_period(s in scenario(&[Algorithm::SlidingLog], false)) {
        let admitted = admissions(&s);
        let (p, limit) = (s.rule.period_micros(), s.rule.limit());
        for &(x, _) in &admitted {
            let n: u64 = admitted.iter().filter(|&&(u, _)| u <= x && x < u + p).map(|e| e.1).sum();
            prop_assert!(n <= limit, "({} - P, {}] admitted {} > {}", x, x, n, limit);
        }
    }

    /// Sliding window: at most `limit` per aligned window, and in every
    /// trailing period `(x - P, x]` at most `limit + floor(prev * e / P)`
    /// where, at the last admission `x` in window `w` (elapsed `e`), `prev`
    /// is what window `w - 1` admitted. Proof: the units in `(x - P, x]` are
    /// at most `prev + curr`, and admitting at `x` needs
    /// `prev * (P - e) + curr * P <= limit * P`, i.e.
    /// `prev + curr <= limit + prev * e / P`. As `prev <= limit` and
    /// `e < P`, that is below `2 * limit`: at most `2 * limit - 1`.
    #[test]
    fn sliding_window_bounds(s in scenario(&[Algorithm::SlidingWindow], false)) {
        let admitted = admissions(&s);
        let (p, limit) = (s.rule.period_micros(), s.rule.limit());
        let in_window = |w: u64| -> u64 { admitted.iter().filter(|e| e.0 / p == w).map(|e| e.1).sum() };
        for &(x, _) in &admitted {
            let (w, e) = (x / p, x % p);
            prop_assert!(in_window(w) <= limit, "window {} over the limit", w);
            let prev = if w == 0 { 0 } else { in_window(w - 1) };
            let n: u64 = admitted.iter().filter(|&&(u, _)| u <= x && x < u + p).map(|e| e.1).sum();
            let bound = u128::from(limit) + u128::from(prev) * u128::from(e) / u128::from(p);
            prop_assert!(u128::from(n) <= bound, "({} - P, {}] admitted {} > {}", x, x, n, bound);
            prop_assert!(n < 2 * limit);
        }
    }

    /// GCRA and token bucket: for admitted checks in `[a, b]`,
    /// `sum of increment(cost) <= (b - a) + tau`. Proof: each admission moves
    /// `tat` to at least `max(tat, t) + increment`, so after the last one
    /// `tat >= a + sum`; and admission needs `tat - b <= tau`. With a whole
    /// `T`, `increment(c) = c * T` and `tau = burst * T`, so the units are at
    /// most `burst + floor((b - a) / T)`; with a fractional `period / limit`
    /// (where `T = floor(period / limit)`) at most `floor((b - a + tau) / T)`.
    #[test]
    fn gcra_and_token_bucket_admit_at_most_burst_plus_rate(
        s in prop_oneof![scenario(BURSTY, false), scenario(BURSTY, true)],
    ) {
        let r = &s.rule;
        let (tau, t_us) = (r.tau_micros(), r.interval_micros());
        let whole = r.period_micros() % r.limit() == 0;
        let admitted = admissions(&s);
        for (i, &(a, _)) in admitted.iter().enumerate() {
            let (mut units, mut advance) = (0u64, 0u64);
            for &(b, cost) in &admitted[i..] {
                units += cost;
                advance += r.increment_micros(cost);
                prop_assert!(advance <= b - a + tau, "[{}, {}]: advance {} > {} + tau", a, b, advance, b - a);
                prop_assert!(units <= (b - a + tau) / t_us, "[{}, {}]: {} units", a, b, units);
                if whole {
                    prop_assert!(units <= r.burst() + (b - a) / t_us, "[{}, {}]: {} units > burst + rate", a, b, units);
                }
            }
        }
    }

    /// GCRA, token bucket and fixed window against naive references
    /// (whole `T`, where SEMANTICS requires exact decisions).
    #[test]
    fn gcra_token_bucket_and_fixed_window_match_references(
        s in scenario(&[Algorithm::Gcra, Algorithm::TokenBucket, Algorithm::FixedWindow], true),
    ) {
        let r = &s.rule;
        let mut model: Box<dyn FnMut(u64, u64) -> Decision> = match r.algorithm() {
            Algorithm::Gcra => { let mut m = GcraRef::new(r); Box::new(move |t, c| m.check(t, c)) }
            Algorithm::TokenBucket => { let mut m = BucketRef::new(r); Box::new(move |t, c| m.check(t, c)) }
            _ => { let mut m = FixedRef::new(r); Box::new(move |t, c| m.check(t, c)) }
        };
        run(&s, |i, t, cost, _, d, _| {
            prop_assert_eq!(*d, model(t, cost), "step {} t {} cost {}", i, t, cost);
            Ok(())
        })?;
    }

    /// Sliding log against a scan of every admitted check, with the retry
    /// found by trying each moment an entry expires.
    #[test]
    fn sliding_log_matches_reference(s in scenario(&[Algorithm::SlidingLog], false)) {
        let mut model = LogRef::new(&s.rule);
        run(&s, |i, t, cost, _, d, _| {
            prop_assert_eq!(*d, model.check(t, cost), "step {} t {} cost {}", i, t, cost);
            Ok(())
        })?;
    }

    /// Sliding window against a count of every admitted check by window,
    /// with the retry found by trying every microsecond (small periods).
    #[test]
    fn sliding_window_matches_reference(
        (limit, period) in (1u64..=12, 1_000u64..=4_000),
        t0 in start_time(),
        raw in raw_steps(60),
    ) {
        let r = build(Algorithm::SlidingWindow, limit, period, None);
        let mut model = WindowRef::new(&r);
        let mut state = KeyState::Empty;
        for (i, (t, cost)) in trace(&r, t0, &raw).into_iter().enumerate() {
            prop_assert_eq!(decide(&r, &mut state, t, cost), model.check(t, cost), "step {} t {} cost {}", i, t, cost);
        }
    }
}

proptest! {
    #![proptest_config(config())]

    /// A rule changed under live state (same name, other limit, burst or
    /// period: a config reload, or Redis state that outlives a deploy) finds
    /// counts above its limit, credit above its burst, windows of another
    /// length. Decisions must stay sane: no overflow, `remaining` still
    /// means what it says, `retry_after` and `reset_after` stay exact.
    #[test]
    fn a_rule_changed_under_live_state_still_decides_exactly(
        algorithm in prop::sample::select(ALL),
        (old, new) in (params(false), params(false)),
        t0 in start_time(),
        (before, after) in (raw_steps(40), raw_steps(40)),
    ) {
        let a = build(algorithm, old.0, old.1, old.2);
        let b = build(algorithm, new.0, new.1, new.2);
        let mut state = KeyState::Empty;
        let steps_a = trace(&a, t0, &before);
        let t1 = steps_a.last().map_or(t0, |s| s.0);
        for &(t, cost) in &steps_a {
            let _ = decide(&a, &mut state, t, cost);
        }
        for (i, (t, cost)) in trace(&b, t1, &after).into_iter().enumerate() {
            let prior = state.clone();
            let d = decide(&b, &mut state, t, cost);
            if !d.allowed || cost == 0 {
                prop_assert_eq!(&prior, &state, "step {}", i);
            }
            let mut probe = state.clone();
            let mut fit = 0;
            while fit <= b.capacity() && decide(&b, &mut probe, t, 1).allowed {
                fit += 1;
            }
            prop_assert_eq!(d.remaining, fit, "step {}: remaining", i);
            let reset = micros(d.reset_after);
            prop_assert_eq!(
                evaluate(&b, &state, t + reset, 1),
                evaluate(&b, &KeyState::Empty, t + reset, 1),
                "step {}: not empty after reset_after", i
            );
            if let Some(e) = state.expires_at(&b) {
                prop_assert_eq!(
                    evaluate(&b, &state, e.max(t), 1),
                    evaluate(&b, &KeyState::Empty, e.max(t), 1),
                    "step {}: not empty at expires_at", i
                );
            }
            match (d.allowed, d.retry_after.map(micros)) {
                (false, Some(wait)) => {
                    prop_assert!(wait >= 1);
                    prop_assert!(evaluate(&b, &prior, t + wait, cost).allowed, "step {}", i);
                    prop_assert!(!evaluate(&b, &prior, t + wait - 1, cost).allowed, "step {}", i);
                }
                (false, None) => prop_assert!(cost > b.capacity(), "step {}", i),
                (true, retry) => prop_assert_eq!(retry, None),
            }
        }
    }
}

fn admissions(s: &Scenario) -> Vec<(u64, u64)> {
    let mut out = Vec::new();
    let mut state = KeyState::Empty;
    for &(t, cost) in &s.steps {
        if decide(&s.rule, &mut state, t, cost).allowed && cost > 0 {
            out.push((t, cost));
        }
    }
    out
}

// ------------------------------------------------ several rules, one check

/// Polls a future that the memory store answers at once.
fn block_on<F: Future>(f: F) -> F::Output {
    let mut f = std::pin::pin!(f);
    let mut cx = Context::from_waker(Waker::noop());
    loop {
        if let Poll::Ready(out) = f.as_mut().poll(&mut cx) {
            return out;
        }
        std::thread::yield_now();
    }
}

const KEYS: [&str; 2] = ["alice", "bob"];

#[derive(Debug, Clone)]
enum Op {
    Single(usize, usize, u64),
    Multi(Vec<(usize, usize, u64)>),
}

fn multi_rules() -> impl Strategy<Value = Vec<Rule>> {
    let one = |a: Algorithm| {
        (1u64..=5, 1_000u64..=40_000, prop::option::of(1u64..=6))
            .prop_map(move |(l, p, b)| build(a, l, p, b))
    };
    (
        one(Algorithm::Gcra),
        one(Algorithm::TokenBucket),
        one(Algorithm::FixedWindow),
        one(Algorithm::SlidingWindow),
        one(Algorithm::SlidingLog),
    )
        .prop_map(|(a, b, c, d, e)| vec![a, b, c, d, e])
}

fn ops() -> impl Strategy<Value = Vec<(u64, Op)>> {
    let cost = prop_oneof![6 => Just(1u64), 1 => Just(0u64), 2 => 2u64..=4, 1 => 5u64..=8];
    let pair = (0usize..5, 0usize..2, cost);
    let op = prop_oneof![
        1 => pair.clone().prop_map(|(r, k, c)| Op::Single(r, k, c)),
        2 => prop::collection::vec(pair, 1..=4).prop_map(|pairs| {
            // distinct (rule, key) pairs; the first of each wins
            let mut seen = Vec::new();
            Op::Multi(pairs.into_iter().filter(|p| {
                let fresh = !seen.contains(&(p.0, p.1));
                seen.push((p.0, p.1));
                fresh
            }).collect())
        }),
    ];
    let dt = prop_oneof![3 => Just(0u64), 4 => 0u64..5_000, 1 => 0u64..100_000];
    prop::collection::vec((dt, op), 1..50)
}

/// docs/semantics.md, "Several rules in one check": "The decision reported
/// is the denying pair with the
/// longest retry_after, or, when admitted, the pair with the fewest
/// remaining"; a pair that can never be admitted counts as longest; ties go
/// to the first pair.
fn model_deciding(ds: &[Decision]) -> usize {
    if ds.iter().all(|d| d.allowed) {
        let fewest = ds.iter().map(|d| d.remaining).min().expect("not empty");
        ds.iter()
            .position(|d| d.remaining == fewest)
            .expect("found")
    } else {
        let wait =
            |d: &Decision| (!d.allowed).then(|| d.retry_after.map_or(u128::MAX, |r| r.as_micros()));
        let longest = ds.iter().filter_map(wait).max();
        ds.iter().position(|d| wait(d) == longest).expect("found")
    }
}

proptest! {
    #![proptest_config(config())]

    /// "It is all-or-nothing: admitted only if every pair admits; if any
    /// pair denies, NO pair consumes", through `Limiter` over a
    /// `MemoryStore`, interleaved with single checks. After every step each
    /// key is peeked and compared with the model's state, and at the end
    /// every key is peeked at later times too.
    #[test]
    fn multi_rule_checks_are_all_or_nothing(rules in multi_rules(), ops in ops(), t0 in start_time()) {
        let store = MemoryStore::builder().build();
        let limiter = Limiter::new(store, rules.clone()).expect("distinct names");
        let mut model: HashMap<(usize, usize), KeyState> = HashMap::new();
        let mut t = t0;
        for (step, (dt, op)) in ops.iter().enumerate() {
            t += dt;
            match op {
                Op::Single(r, k, cost) => {
                    let want = decide(&rules[*r], model.entry((*r, *k)).or_default(), t, *cost);
                    let got = block_on(limiter.check_at(rules[*r].name(), KEYS[*k], *cost, Some(t)))
                        .expect("memory store never fails");
                    prop_assert_eq!(got, want, "step {}", step);
                }
                Op::Multi(pairs) => {
                    let evaluated: Vec<Decision> = pairs
                        .iter()
                        .map(|&(r, k, c)| evaluate(&rules[r], model.get(&(r, k)).unwrap_or(&KeyState::Empty), t, c))
                        .collect();
                    let decisions: Vec<Decision> = if evaluated.iter().all(|d| d.allowed) {
                        pairs.iter().map(|&(r, k, c)| decide(&rules[r], model.entry((r, k)).or_default(), t, c)).collect()
                    } else {
                        // nothing consumed; pairs that would admit report a peek
                        pairs.iter().zip(&evaluated).map(|(&(r, k, _), d)| {
                            if d.allowed {
                                evaluate(&rules[r], model.get(&(r, k)).unwrap_or(&KeyState::Empty), t, 0)
                            } else {
                                *d
                            }
                        }).collect()
                    };
                    let want = MultiDecision {
                        allowed: decisions.iter().all(|d| d.allowed),
                        deciding: model_deciding(&decisions),
                        decisions,
                    };
                    let checks: Vec<Check<'_>> = pairs
                        .iter()
                        .map(|&(r, k, c)| Check::new(rules[r].name(), KEYS[k]).cost(c))
                        .collect();
                    let got = block_on(limiter.check_all_at(&checks, Some(t))).expect("memory store never fails");
                    prop_assert_eq!(got, want, "step {} pairs {:?}", step, pairs);
                }
            }
            for (r, rule) in rules.iter().enumerate() {
                for (k, key) in KEYS.iter().enumerate() {
                    let want = evaluate(rule, model.get(&(r, k)).unwrap_or(&KeyState::Empty), t, 0);
                    let got = block_on(limiter.check_at(rule.name(), key, 0, Some(t))).expect("ok");
                    prop_assert_eq!(got, want, "step {}: state of ({}, {})", step, rule.name(), key);
                }
            }
        }
        for later in [1, 999, 1_000, 5_000, 20_000, 40_000, 100_000] {
            let at = t + later;
            for (r, rule) in rules.iter().enumerate() {
                for (k, key) in KEYS.iter().enumerate() {
                    let want = evaluate(rule, model.get(&(r, k)).unwrap_or(&KeyState::Empty), at, 0);
                    let got = block_on(limiter.check_at(rule.name(), key, 0, Some(at))).expect("ok");
                    prop_assert_eq!(got, want, "final state of ({}, {}) at t + {}", rule.name(), key, later);
                }
            }
        }
    }
}

/// The deciding index of docs/semantics.md on hand-made decisions, including
/// ties and a "never" pair.
#[test]
fn deciding_pair_follows_semantics() {
    let d = |allowed: bool, remaining: u64, retry: Option<u64>| Decision {
        allowed,
        limit: 10,
        remaining,
        reset_after: Duration::ZERO,
        retry_after: retry.map(Duration::from_micros),
    };
    let cases = [
        // admitted: fewest remaining, first on ties
        (
            vec![d(true, 3, None), d(true, 1, None), d(true, 1, None)],
            1,
        ),
        // denied: longest retry among denying pairs; admitting pairs ignored
        (
            vec![d(true, 0, None), d(false, 0, Some(5)), d(false, 0, Some(9))],
            2,
        ),
        // "never" counts as longest
        (
            vec![
                d(false, 0, Some(u64::MAX / 2)),
                d(false, 4, None),
                d(false, 0, Some(1)),
            ],
            1,
        ),
        // ties among denials: the first
        (vec![d(false, 0, Some(7)), d(false, 2, Some(7))], 0),
    ];
    for (ds, want) in cases {
        assert_eq!(model_deciding(&ds), want, "{ds:?}");
        assert_eq!(
            MultiDecision::from_decisions(ds.clone()).deciding,
            want,
            "{ds:?}"
        );
    }
}
