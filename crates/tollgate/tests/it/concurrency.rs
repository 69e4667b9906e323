//! The memory store under contention: many threads on one key, and
//! all-or-nothing multi-rule checks racing single checks, at a frozen clock.
//!
//! The oracle is the pure algorithm: every check in a round is the same
//! check at the same instant, so however the threads interleave, the store
//! must admit exactly as many as the algorithm admits run one after another,
//! and end in the same state.

use std::sync::Barrier;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tollgate::algorithm::{self, KeyState};
use tollgate::store::KeyCheck;
use tollgate::{Algorithm, Clock, FakeClock, MemoryStore, Rule, RuleSpec};

use crate::support::{SECOND, rule};

const THREADS: usize = 8;

fn store(clock: &FakeClock) -> MemoryStore<FakeClock> {
    MemoryStore::builder().clock(clock.clone()).build()
}

/// `THREADS` threads, started together by a barrier, each running `f` with
/// its index; returns the sum of what they return.
fn race(f: impl Fn(usize) -> u64 + Sync) -> u64 {
    let barrier = Barrier::new(THREADS);
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..THREADS)
            .map(|i| {
                let (barrier, f) = (&barrier, &f);
                s.spawn(move || {
                    barrier.wait();
                    f(i)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("thread panicked"))
            .sum()
    })
}

/// Many threads hammer one key of each algorithm at a frozen clock: the store
/// admits exactly `burst` / `limit` units per round (no more, no fewer),
/// with cost 1 and cost 2, round after round as the clock moves by whole and
/// partial periods, and ends each round in the state the serial run reaches.
#[test]
fn one_key_admits_exactly_the_capacity_under_contention() {
    // Moves of the clock before each round, in µs (period 1 s): from empty,
    // partial refills, and a full reset.
    let moves = [0, 250_000, 333_333, 1_000_000, 500_000, 2_000_000];
    for algorithm in Algorithm::RATES {
        for cost in [1, 2] {
            let clock = FakeClock::new();
            let store = store(&clock);
            let rule = rule("hammer", algorithm, 101, SECOND);
            let mut shadow = KeyState::Empty;
            for (round, &step) in moves.iter().enumerate() {
                clock.advance_micros(step);
                let t = clock.now();
                let attempts_per_thread = 40;
                let admitted = race(|_| {
                    (0..attempts_per_thread)
                        .map(|_| u64::from(store.check_sync(&rule, b"hot", cost, None).allowed))
                        .sum()
                });
                let expected: u64 = (0..THREADS * attempts_per_thread)
                    .map(|_| u64::from(algorithm::decide(&rule, &mut shadow, t, cost).allowed))
                    .sum();
                assert_eq!(
                    admitted, expected,
                    "{algorithm} cost {cost} round {round}: admitted {admitted} checks, \
                     the algorithm admits {expected}"
                );
                if round == 0 {
                    // From empty, exactly the capacity in whole checks.
                    assert_eq!(admitted, 101 / cost, "{algorithm} cost {cost}");
                }
                let peek = store.check_sync(&rule, b"hot", 0, None);
                assert_eq!(
                    peek,
                    algorithm::evaluate(&rule, &shadow, t, 0),
                    "{algorithm} cost {cost} round {round}: state after the race"
                );
                assert!(!store.check_sync(&rule, b"hot", cost, None).allowed);
            }
        }
    }
}

/// GCRA's compare-and-swap path alone, with many more attempts than the
/// burst and a cost that does not divide it: never a unit too many.
#[test]
fn gcra_never_over_admits_under_heavy_contention() {
    let clock = FakeClock::new();
    let store = store(&clock);
    let rule = RuleSpec::new("gcra", Algorithm::Gcra, 10, Duration::from_millis(10))
        .burst(1_000)
        .build()
        .expect("valid rule");
    for round in 0..5 {
        let units = race(|_| {
            (0..2_000)
                .map(|_| {
                    if store.check_sync(&rule, b"k", 3, None).allowed {
                        3
                    } else {
                        0
                    }
                })
                .sum()
        });
        // From full: 333 checks of 3 fit in a burst of 1000.
        assert_eq!(units, 999, "round {round}");
        // A full burst window: back to full.
        clock.advance(Duration::from_millis(1_000));
    }
}

/// Threads race all-or-nothing checks on overlapping pairs of (rule, key)
/// and single checks on the same keys, then every key is drained alone.
/// Counting what each admitted check took, every key gave exactly its
/// capacity: a denied multi-rule check consumed nothing (else a key would
/// run dry before its count reached the capacity), and no key gave more.
#[test]
fn multi_rule_checks_consume_exactly_the_limits_under_contention() {
    let clock = FakeClock::new();
    let store = store(&clock);
    let per_user = rule("per_user", Algorithm::Gcra, 60, SECOND);
    let per_ip = rule("per_ip", Algorithm::FixedWindow, 90, SECOND);
    let per_route = rule("per_route", Algorithm::SlidingLog, 75, SECOND);
    let per_tenant = rule("per_tenant", Algorithm::TokenBucket, 50, SECOND);
    let pairs: [(&Rule, &[u8]); 4] = [
        (&per_user, b"alice"),
        (&per_ip, b"10.0.0.1"),
        (&per_route, b"/search"),
        (&per_tenant, b"acme"),
    ];
    // What each check names, by index into `pairs`: overlapping pairs, a
    // triple, and singles.
    let shapes: [&[usize]; 7] = [&[0, 1], &[1, 2], &[2, 3], &[3, 0], &[0, 1, 2], &[1], &[3]];
    let taken: [AtomicU64; 4] = Default::default();
    race(|thread| {
        for i in 0..60 {
            let shape = shapes[(thread + i) % shapes.len()];
            let checks: Vec<KeyCheck<'_>> = shape
                .iter()
                .map(|&p| KeyCheck {
                    rule: pairs[p].0,
                    key: pairs[p].1,
                    cost: 1,
                })
                .collect();
            let admitted = if let [only] = checks[..] {
                store.check_sync(only.rule, only.key, 1, None).allowed
            } else {
                let d = store.check_all_sync(&checks, None);
                assert_eq!(d.decisions.len(), checks.len());
                assert_eq!(d.allowed, d.decisions.iter().all(|x| x.allowed));
                d.allowed
            };
            if admitted {
                for &p in shape {
                    taken[p].fetch_add(1, Ordering::Relaxed);
                }
            }
        }
        0
    });
    for (p, &(rule, key)) in pairs.iter().enumerate() {
        let mut drained = 0;
        while store.check_sync(rule, key, 1, None).allowed {
            drained += 1;
        }
        let total = taken[p].load(Ordering::Relaxed) + drained;
        assert_eq!(
            total,
            rule.capacity(),
            "{}: {} taken under contention + {drained} drained",
            rule.name(),
            taken[p].load(Ordering::Relaxed)
        );
    }
}

/// One rule of a pair is exhausted; threads hammer the pair (all denied)
/// while others hammer the exhausted key alone. The other key loses nothing.
#[test]
fn denied_multi_rule_checks_consume_nothing_under_contention() {
    for algorithm in Algorithm::RATES {
        let clock = FakeClock::new();
        let store = store(&clock);
        let open = rule("open", algorithm, 40, SECOND);
        let shut = rule("shut", Algorithm::Gcra, 5, SECOND);
        for _ in 0..5 {
            assert!(store.check_sync(&shut, b"ip", 1, None).allowed);
        }
        let checks = [
            KeyCheck {
                rule: &open,
                key: b"user",
                cost: 1,
            },
            KeyCheck {
                rule: &shut,
                key: b"ip",
                cost: 1,
            },
        ];
        let admitted = race(|thread| {
            (0..200)
                .map(|_| {
                    let allowed = if thread % 2 == 0 {
                        store.check_all_sync(&checks, None).allowed
                    } else {
                        store.check_sync(&shut, b"ip", 1, None).allowed
                    };
                    u64::from(allowed)
                })
                .sum()
        });
        assert_eq!(admitted, 0, "{algorithm}");
        let peek = store.check_sync(&open, b"user", 0, None);
        assert_eq!(peek.remaining, open.capacity(), "{algorithm}");
        let mut drained = 0;
        while store.check_sync(&open, b"user", 1, None).allowed {
            drained += 1;
        }
        assert_eq!(drained, open.capacity(), "{algorithm}");
    }
}

/// A clock that moves one µs at every reading: checks that race never
/// share a time, so any two of them that take effect in the other order
/// than their times would show it.
struct Ticking(AtomicU64);

impl Clock for Ticking {
    fn now(&self) -> u64 {
        self.0.fetch_add(1, Ordering::SeqCst)
    }
}

/// Concurrent checks of one key take effect in the order of their times
/// (the store reads the clock after the key's state, not before): each of
/// the `LIMIT` admissions of a GCRA key reports its own `remaining`,
/// `LIMIT - 1` down to 0, each exactly once. (Read before, a check stamped
/// earlier that lands after a later one reports one unit fewer than left,
/// and some remainder is seen twice.)
#[test]
fn racing_checks_of_one_key_take_effect_in_the_order_of_their_times() {
    const LIMIT: u64 = 4_000;
    for round in 0..50 {
        let store = MemoryStore::builder()
            .clock(Ticking(AtomicU64::new(1_764_000_000_000_000)))
            .build();
        // One unit back every 0.9 s: none during the round.
        let gcra = RuleSpec::new("linear", Algorithm::Gcra, LIMIT, Duration::from_secs(3_600))
            .build()
            .expect("valid rule");
        let seen: Vec<AtomicU64> = (0..LIMIT).map(|_| AtomicU64::new(0)).collect();
        let per_thread = LIMIT / THREADS as u64;
        let admitted = race(|_| {
            let mut admitted = 0;
            for _ in 0..per_thread {
                let d = store.check_sync(&gcra, b"k", 1, None);
                assert!(d.allowed, "round {round}: within the limit");
                seen[usize::try_from(d.remaining).expect("small")].fetch_add(1, Ordering::Relaxed);
                admitted += 1;
            }
            admitted
        });
        assert_eq!(admitted, LIMIT);
        let twice: Vec<usize> = (0..seen.len())
            .filter(|&r| seen[r].load(Ordering::Relaxed) != 1)
            .collect();
        assert!(
            twice.is_empty(),
            "round {round}: remainders not seen exactly once: {twice:?}"
        );
    }
}

/// Acquires and releases of one `concurrency` key racing on many threads
/// all finish, and leave no slot held: an acquire held the key's shard
/// and then took the lease index, a release the index and then the shard,
/// so two of them could wait on each other forever (every runtime thread
/// of a server stuck, `/healthz` too).
#[test]
fn racing_acquires_and_releases_never_deadlock() {
    use std::sync::Arc;
    use std::sync::mpsc;
    use tollgate::store::{Released, Store};
    use tollgate::ticket::{Ticket, TicketKind, TicketPair};

    let store = Arc::new(MemoryStore::new());
    let cc = Arc::new(rule("cc", Algorithm::Concurrency, THREADS as u64, SECOND));
    let (done, finished) = mpsc::channel();
    for _ in 0..THREADS {
        let (store, cc, done) = (Arc::clone(&store), Arc::clone(&cc), done.clone());
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .build()
                .expect("a runtime");
            let mut released = 0u64;
            for _ in 0..2_000 {
                let ticket = Ticket::new(TicketKind::Lease, vec![TicketPair::new("cc", b"k")]);
                let check = KeyCheck {
                    rule: &cc,
                    key: b"k",
                    cost: 1,
                };
                let got = rt.block_on(Store::acquire_all(&*store, &[check], &ticket, None));
                assert!(got.expect("memory never fails").allowed, "a slot each");
                let back = rt.block_on(Store::release(&*store, &ticket, &[&*cc], false, None));
                released += u64::from(matches!(back, Ok(Released::Done(_))));
            }
            let _ = done.send(released);
        });
    }
    let mut released = 0;
    for _ in 0..THREADS {
        released += finished
            .recv_timeout(Duration::from_secs(60))
            .expect("acquire and release deadlocked");
    }
    assert_eq!(released, 2_000 * THREADS as u64);
    let peek = store.check_sync(&cc, b"k", 0, None);
    assert_eq!(peek.remaining, THREADS as u64, "no slot left held");
}
