//! Properties of charge, reserve/settle and give-back against
//! docs/semantics.md, "Charge": the pure steps (`tollgate::algorithm`)
//! against the reference models of `reference.rs`, step by step, on random
//! traces of checks, charges and reservations settled above, at or below
//! their estimate, or cancelled.

use std::time::Duration;

use proptest::prelude::*;
use tollgate::algorithm::{self, KeyState};
use tollgate::{Algorithm, Decision, Rule, RuleSpec};

use super::reference::{BucketRef, FixedRef, GcraRef, LogRef, WindowRef};

/// One of the five reference models.
enum Model {
    Gcra(GcraRef),
    Bucket(BucketRef),
    Fixed(FixedRef),
    Log(LogRef),
    Window(WindowRef),
}

impl Model {
    fn new(rule: &Rule) -> Self {
        match rule.algorithm() {
            Algorithm::Gcra => Model::Gcra(GcraRef::new(rule)),
            Algorithm::TokenBucket => Model::Bucket(BucketRef::new(rule)),
            Algorithm::FixedWindow => Model::Fixed(FixedRef::new(rule)),
            Algorithm::SlidingLog => Model::Log(LogRef::new(rule)),
            _ => Model::Window(WindowRef::new(rule)),
        }
    }

    fn check(&mut self, t: u64, cost: u64) -> Decision {
        match self {
            Model::Gcra(m) => m.check(t, cost),
            Model::Bucket(m) => m.check(t, cost),
            Model::Fixed(m) => m.check(t, cost),
            Model::Log(m) => m.check(t, cost),
            Model::Window(m) => m.check(t, cost),
        }
    }

    fn charge(&mut self, t: u64, cost: u64, max_debt: u64) -> (Decision, u64, u64) {
        match self {
            Model::Gcra(m) => m.charge(t, cost, max_debt),
            Model::Bucket(m) => m.charge(t, cost, max_debt),
            Model::Fixed(m) => m.charge(t, cost, max_debt),
            Model::Log(m) => m.charge(t, cost, max_debt),
            Model::Window(m) => m.charge(t, cost, max_debt),
        }
    }

    fn give_back(&mut self, t: u64, at: u64, units: u64) {
        match self {
            Model::Gcra(m) => m.give_back(t, units),
            Model::Bucket(m) => m.give_back(t, units),
            Model::Fixed(m) => m.give_back(t, at, units),
            Model::Log(m) => m.give_back(at, units),
            Model::Window(m) => m.give_back(t, at, units),
        }
    }
}

#[derive(Debug, Clone, Copy)]
enum Op {
    Check(u64),
    Charge(u64),
    /// Reserve an estimate; the reservation is settled by a later `Settle`.
    Reserve(u64),
    /// Settle the oldest open reservation at this actual usage.
    Settle(u64),
    /// Cancel the oldest open reservation.
    Cancel,
}

/// A rule whose `T` is a whole number of microseconds (the reference
/// models' condition), small enough that traces cross the limit and the
/// debt cap.
fn rule() -> impl Strategy<Value = Rule> {
    (0..5usize, 1u64..=6, 1u64..=5, prop::option::of(1u64..=8)).prop_map(|(a, limit, t, burst)| {
        let algorithm = Algorithm::RATES[a];
        let mut spec = RuleSpec::new(
            "r",
            algorithm,
            limit,
            Duration::from_micros(limit * t * 1000),
        );
        if algorithm.has_burst() {
            spec.burst = burst;
        }
        spec.build().expect("valid rule")
    })
}

fn ops() -> impl Strategy<Value = Vec<(u64, Op)>> {
    let op = prop_oneof![
        3 => (0u64..=8).prop_map(Op::Check),
        3 => (0u64..=20).prop_map(Op::Charge),
        1 => (0u64..=700).prop_map(Op::Charge),
        2 => (0u64..=6).prop_map(Op::Reserve),
        2 => (0u64..=20).prop_map(Op::Settle),
        1 => Just(Op::Cancel),
    ];
    let gap = prop_oneof![3 => Just(0u64), 4 => 0u64..400, 2 => 0u64..5_000, 1 => 0u64..60_000];
    prop::collection::vec((gap, op), 1..60)
}

/// The state `ops`' checks and charges leave from `t0`, and the time of
/// the last.
fn played(rule: &Rule, ops: &[(u64, Op)], t0: u64) -> (KeyState, u64) {
    let mut state = KeyState::Empty;
    let mut t = t0;
    for &(gap, op) in ops {
        t += gap;
        match op {
            Op::Charge(c) => {
                algorithm::charge(rule, &mut state, t, c);
            }
            Op::Check(c) | Op::Reserve(c) => {
                algorithm::decide(rule, &mut state, t, c);
            }
            _ => {}
        }
    }
    (state, t)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// A charge is never denied, records what fits under the cap (the rest
    /// clamped), reports the debt, and later checks decide by the ordinary
    /// formulas; a reservation settled at `a >= e` is a charge of `a - e`,
    /// below `e` a give-back of `e - a`; a cancel gives all of `e` back —
    /// each step as the reference models take it.
    #[test]
    fn charges_and_settles_match_the_reference(rule in rule(), ops in ops(), t0 in 0u64..1_000_000) {
        let mut state = KeyState::Empty;
        let mut model = Model::new(&rule);
        let mut open: Vec<(u64, u64)> = Vec::new();
        let mut t = t0;
        for (i, (gap, op)) in ops.into_iter().enumerate() {
            t += gap;
            let at = format!("step {i} at t {t}: {op:?} on {rule:?}");
            match op {
                Op::Check(cost) => {
                    let ours = algorithm::decide(&rule, &mut state, t, cost);
                    prop_assert_eq!(ours, model.check(t, cost), "{}", at);
                }
                Op::Reserve(cost) => {
                    let ours = algorithm::decide(&rule, &mut state, t, cost);
                    prop_assert_eq!(ours, model.check(t, cost), "{}", at);
                    if ours.allowed {
                        open.push((t, cost));
                    }
                }
                Op::Charge(cost) => {
                    let ours = algorithm::charge(&rule, &mut state, t, cost);
                    let (decision, debt, units) = model.charge(t, cost, rule.max_debt());
                    prop_assert_eq!(ours.decision, decision, "{}", at);
                    prop_assert_eq!(ours.debt, debt, "{}", at);
                    prop_assert_eq!(ours.clamped, cost - units, "{}", at);
                    prop_assert!(ours.debt <= rule.max_debt(), "{}", at);
                }
                Op::Settle(actual) => {
                    if open.is_empty() { continue; }
                    let (made, estimate) = open.remove(0);
                    if actual >= estimate {
                        let ours = algorithm::charge(&rule, &mut state, t, actual - estimate);
                        let (decision, debt, _) = model.charge(t, actual - estimate, rule.max_debt());
                        prop_assert_eq!((ours.decision, ours.debt), (decision, debt), "{}", at);
                    } else {
                        algorithm::give_back(&rule, &mut state, t, made, estimate - actual);
                        model.give_back(t, made, estimate - actual);
                    }
                }
                Op::Cancel => {
                    if open.is_empty() { continue; }
                    let (made, estimate) = open.remove(0);
                    algorithm::give_back(&rule, &mut state, t, made, estimate);
                    model.give_back(t, made, estimate);
                }
            }
            // After every step the key reads the same in both (a peek).
            let peek = algorithm::evaluate(&rule, &state, t, 0);
            prop_assert_eq!(peek, model.check(t, 0), "peek after {}", at);
        }
    }

    /// A reservation cancelled at once leaves the key as it found it, and
    /// no give-back, however large, takes a key past empty/full: it then
    /// reads as a key never seen.
    #[test]
    fn give_backs_restore_and_never_pass_empty(
        rule in rule(), ops in ops(), e in 0u64..=6, extra in 0u64..1000, t0 in 0u64..1_000_000,
    ) {
        let (mut state, t) = played(&rule, &ops, t0);
        let before = state.clone();
        let reserved = algorithm::decide(&rule, &mut state, t, e);
        if reserved.allowed {
            algorithm::give_back(&rule, &mut state, t, t, e);
            for probe in [0, 1, e, rule.capacity()] {
                prop_assert_eq!(
                    algorithm::evaluate(&rule, &state, t, probe),
                    algorithm::evaluate(&rule, &before, t, probe),
                    "cost {} after cancelling {} at {}", probe, e, t
                );
            }
        }
        algorithm::give_back(&rule, &mut state, t, t, rule.capacity() + extra);
        let fresh = algorithm::evaluate(&rule, &KeyState::Empty, t, 0);
        let after = algorithm::evaluate(&rule, &state, t, 0);
        prop_assert!(after.remaining <= fresh.remaining, "{:?} > {:?}", after, fresh);
        if let KeyState::TokenBucket(s) = &state {
            prop_assert!(s.credit <= i64::try_from(rule.tau_micros()).expect("tau"));
        }
    }

    /// A refund of `k` right after a charge of `a >= k` leaves the key as a
    /// charge of `a - k` would (the units counted last come off first), and
    /// a refund of more than the key holds leaves it as a key never seen,
    /// at once and later.
    #[test]
    fn refunds_undo_charges_and_never_pass_empty(
        rule in rule(), ops in ops(), a in 0u64..=12, k in 0u64..=12, extra in 0u64..1000,
        later in 0u64..200_000, t0 in 0u64..1_000_000,
    ) {
        let k = k.min(a);
        let (mut state, t) = played(&rule, &ops, t0);
        let mut net = state.clone();
        let direct = algorithm::charge(&rule, &mut net, t, a - k);
        let charged = algorithm::charge(&rule, &mut state, t, a);
        let refunded = algorithm::refund(&rule, &mut state, t, k);
        if charged.clamped == 0 && direct.clamped == 0 {
            prop_assert_eq!((refunded.decision, refunded.debt), (direct.decision, direct.debt));
            for probe in [0, 1, rule.capacity()] {
                for at in [t, t + later] {
                    prop_assert_eq!(
                        algorithm::evaluate(&rule, &state, at, probe),
                        algorithm::evaluate(&rule, &net, at, probe),
                        "cost {} at {} after charging {} and refunding {} at {}", probe, at, a, k, t
                    );
                }
            }
        }
        // The most any state holds: the sliding window's two counts, each up to
        // capacity + max_debt.
        let most = 2 * (rule.capacity() + rule.max_debt());
        let all = algorithm::refund(&rule, &mut state, t, most + extra);
        prop_assert_eq!(all.debt, 0);
        prop_assert_eq!(all.clamped, 0);
        for probe in [0, 1, rule.capacity(), rule.capacity() + 1] {
            for at in [t, t + later] {
                prop_assert_eq!(
                    algorithm::evaluate(&rule, &state, at, probe),
                    algorithm::evaluate(&rule, &KeyState::Empty, at, probe),
                    "cost {} at {} after refunding everything at {}", probe, at, t
                );
            }
        }
    }
}
