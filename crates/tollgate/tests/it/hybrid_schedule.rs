//! The hybrid store against the memory store on the same schedule: a fleet
//! of `HybridStore`s sharing one fake clock (Redis decides at that clock's
//! time too, `HybridStore::with_clock_time`) and a `MemoryStore` on a clone
//! of it see the same cost-1 checks at the same instants, one after the
//! other: no timer, no scheduling luck. The fleet must admit within the
//! bound docs/hybrid.md states ("Against the memory store") for every rate
//! algorithm, with batches below, at and above the limit, short- and
//! long-lived batches, on two and three replicas.

use std::time::Duration;

use redis_harness::RedisServer;
use tollgate::store::hybrid::{HybridOptions, HybridStore};
use tollgate::store::memory::MemoryStore;
use tollgate::store::redis::{RedisOptions, RedisStore};
use tollgate::{Algorithm, FakeClock, Rule, Store};

use crate::support::rule;

type Micros = u64;

/// A minute: the period of every rule here.
const PERIOD: Micros = 60_000_000;
/// The same minute, as the rules take it.
const MINUTE: Duration = Duration::from_micros(PERIOD);
/// Where every fake clock starts: a window boundary (as the algorithms
/// count windows from 0).
const START: Micros = 1_000 * PERIOD;

/// xorshift64*: reproducible schedules without a dependency.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) % n
    }
}

fn idx(n: u64) -> usize {
    usize::try_from(n).expect("a small index")
}

/// One check: the time (µs after `START`) and the replica it reaches.
type Step = (Micros, usize);

struct Outcome {
    /// Admitted per period of the run (fixed window: per window).
    hybrid: Vec<u64>,
    memory: Vec<u64>,
    calls: u64,
}

impl Outcome {
    fn total(v: &[u64]) -> u64 {
        v.iter().sum()
    }
}

/// Runs `schedule` (sorted by time) on a fleet of `replicas` hybrid stores
/// and on a memory store, all on one fake clock; counts admissions per
/// period.
async fn run(
    redis: &RedisStore,
    rule: &Rule,
    key: &[u8],
    options: &HybridOptions,
    schedule: &[Step],
) -> Outcome {
    let clock = FakeClock::at(START);
    let fleet: Vec<HybridStore> = (0..options.replicas)
        .map(|_| HybridStore::with_clock_time(redis.clone(), options.clone(), clock.clone()))
        .collect();
    let memory = MemoryStore::builder().clock(clock.clone()).build();
    let periods = idx(schedule.last().map_or(0, |s| s.0 / PERIOD)) + 1;
    let mut out = Outcome {
        hybrid: vec![0; periods],
        memory: vec![0; periods],
        calls: 0,
    };
    for &(t, replica) in schedule {
        clock.set(START + t);
        let p = idx(t / PERIOD);
        let h = fleet[replica].check(rule, key, 1, None).await.unwrap();
        out.hybrid[p] += u64::from(h.allowed);
        let m = memory.check(rule, key, 1, None).await.unwrap();
        out.memory[p] += u64::from(m.allowed);
    }
    out.calls = fleet.iter().map(HybridStore::redis_calls).sum();
    out
}

fn options(replicas: u32, batch: u64, life: Duration) -> HybridOptions {
    HybridOptions {
        replicas,
        batch: Some(batch),
        batch_life: Some(life),
        ..HybridOptions::default()
    }
}

/// `n` checks evenly over `periods` periods, round robin over the replicas.
fn spread(n: u64, periods: u64, replicas: u64) -> Vec<Step> {
    (0..n)
        .map(|i| (i * periods * PERIOD / n, idx(i % replicas)))
        .collect()
}

/// Bursts of up to 12 checks at one instant on one replica, random gaps
/// (mean about `gap`), over `periods` periods.
fn bursty(rng: &mut Rng, gap: Micros, periods: u64, replicas: u64) -> Vec<Step> {
    let mut out = Vec::new();
    let mut t = rng.below(gap);
    while t < periods * PERIOD {
        let replica = idx(rng.below(replicas));
        for _ in 0..=rng.below(12) {
            out.push((t, replica));
        }
        t += 1 + rng.below(2 * gap);
    }
    out
}

/// Single checks at random times (gaps uniform in [0, 2·gap)), random
/// replicas, over `periods` periods.
fn scattered(rng: &mut Rng, gap: Micros, periods: u64, replicas: u64) -> Vec<Step> {
    let mut out = Vec::new();
    let mut t = rng.below(gap);
    while t < periods * PERIOD {
        out.push((t, idx(rng.below(replicas))));
        t += 1 + rng.below(2 * gap);
    }
    out
}

/// The reproduction of issue 36 with docs/hybrid.md's own settings
/// (`hybrid_batch = 100`, `hybrid_lease = "100ms"`): 50 a minute, fixed
/// window, two replicas, 80 checks spread over one window. The memory
/// store admits 50; so must the fleet (it admitted 3: the first batch took
/// the whole window, expired unspent and was kept from Redis until the
/// window rolled). The window algorithms: GCRA and token bucket refill
/// within the minute (the memory store admits 80), in the next test.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_above_the_limit_does_not_strand_the_window() {
    let server = RedisServer::start();
    let redis = RedisStore::connect(&server.url(), RedisOptions::default())
        .await
        .unwrap();
    for algorithm in [
        Algorithm::FixedWindow,
        Algorithm::SlidingWindow,
        Algorithm::SlidingLog,
    ] {
        let rule = rule(&format!("sched_{algorithm}"), algorithm, 50, MINUTE);
        let options = options(2, 100, Duration::from_millis(100));
        let out = run(&redis, &rule, b"repro", &options, &spread(80, 1, 2)).await;
        let (h, m) = (Outcome::total(&out.hybrid), Outcome::total(&out.memory));
        eprintln!(
            "{algorithm}: hybrid {h} memory {m}, {} Redis calls",
            out.calls
        );
        assert_eq!(m, 50, "{algorithm}");
        assert_eq!(
            h, m,
            "{algorithm}: the fleet admitted {h} of 80, the memory store {m}"
        );
    }
    assert!(server.keys_without_ttl().is_empty());
}

/// One client, one check every 150 ms through one replica of two, against
/// 50 a minute with batches living 100 ms: each batch expires before the
/// next check, unspent. Every check is admitted (the memory store admits
/// all 30); it admitted 1 (the first batch held the window; its units came
/// back only with a batch that `not_before` forbade).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_batch_goes_back_when_its_replica_next_checks() {
    let server = RedisServer::start();
    let redis = RedisStore::connect(&server.url(), RedisOptions::default())
        .await
        .unwrap();
    for algorithm in Algorithm::RATES {
        let rule = rule(&format!("sched_{algorithm}"), algorithm, 50, MINUTE);
        let options = options(2, 100, Duration::from_millis(100));
        let schedule: Vec<Step> = (0..30).map(|i| (i * 150_000, 0)).collect();
        let out = run(&redis, &rule, b"trickle", &options, &schedule).await;
        let (h, m) = (Outcome::total(&out.hybrid), Outcome::total(&out.memory));
        eprintln!(
            "{algorithm}: hybrid {h} memory {m}, {} Redis calls",
            out.calls
        );
        assert_eq!((h, m), (30, 30), "{algorithm}");
    }
    assert!(server.keys_without_ttl().is_empty());
}

/// Every rate algorithm, batches below, at and above the limit, batches
/// living 100 ms and 10 s, two and three replicas, three kinds of schedule (even,
/// bursty, scattered) at 1.6 times the limit and at half of it: the fleet
/// admits within the bound of docs/hybrid.md of what the memory store
/// admits, per period.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_fleet_admits_within_the_bound_of_the_memory_store() {
    let server = RedisServer::start();
    let redis = RedisStore::connect(&server.url(), RedisOptions::default())
        .await
        .unwrap();
    let limit = 50;
    let periods = 3;
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let mut case = 0;
    let mut worst: Vec<String> = Vec::new();
    let mut broken: Vec<String> = Vec::new();
    for algorithm in Algorithm::RATES {
        let rule = rule(&format!("sched_{algorithm}"), algorithm, limit, MINUTE);
        for replicas in [2_u32, 3] {
            let r = u64::from(replicas);
            for batch in [5, 50, 100] {
                for life in [Duration::from_millis(100), Duration::from_secs(10)] {
                    let options = options(replicas, batch, life);
                    for demand in [8, 2] {
                        // `demand / 5` times the limit per period
                        let n = limit * demand / 5;
                        let gap = PERIOD / n;
                        let schedules = [
                            ("spread", spread(n * periods, periods, r)),
                            ("bursty", bursty(&mut rng, gap * 6, periods, r)),
                            ("scattered", scattered(&mut rng, gap, periods, r)),
                        ];
                        for (kind, schedule) in schedules {
                            case += 1;
                            let key = format!("case{case}");
                            let out = run(&redis, &rule, key.as_bytes(), &options, &schedule).await;
                            let what = format!(
                                "{algorithm} R={replicas} batch={batch} life={life:?} \
                                 {kind} x{demand}/5: hybrid {:?} memory {:?}",
                                out.hybrid, out.memory
                            );
                            if let Err(why) = check_bound(&rule, &options, &out) {
                                broken.push(format!("{what}: {why}"));
                            }
                            let (h, m) = (Outcome::total(&out.hybrid), Outcome::total(&out.memory));
                            if h != m {
                                worst.push(format!("{what} ({} calls)", out.calls));
                            }
                        }
                    }
                }
            }
        }
    }
    eprintln!(
        "{case} cases, {} differ from the memory store:",
        worst.len()
    );
    for w in &worst {
        eprintln!("  {w}");
    }
    assert!(
        broken.is_empty(),
        "{} of {case} cases outside the bound:\n{}",
        broken.len(),
        broken.join("\n")
    );
    assert!(server.keys_without_ttl().is_empty());
}

/// docs/hybrid.md, "Against the memory store": with `B` the batch in use
/// (`batch_for`, at most `C / (2R)`), per period `p` of the run the fleet
/// admits no more than the memory store (fixed window) or than it plus
/// `R·B` (the others), and no fewer than it less `R·B`.
fn check_bound(rule: &Rule, options: &HybridOptions, out: &Outcome) -> Result<(), String> {
    let b = options.batch_for(rule);
    let r = u64::from(options.replicas);
    if 2 * r * b > rule.capacity().max(2 * r) {
        return Err(format!("batch {b} above C / 2R"));
    }
    let held = r * b;
    let over = if rule.algorithm() == Algorithm::FixedWindow {
        0
    } else {
        held
    };
    for (p, (&h, &m)) in out.hybrid.iter().zip(&out.memory).enumerate() {
        if h > m + over {
            return Err(format!("period {p} over-admitted ({h} > {m} + {over})"));
        }
        if h + held < m {
            return Err(format!("period {p} under-admitted ({h} < {m} - {held})"));
        }
    }
    Ok(())
}
