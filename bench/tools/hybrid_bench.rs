//! The hybrid store against the plain Redis store and the memory store, in
//! one run against one Redis (`bench/hybrid.sh` starts it):
//!
//! 1. latency of one check, one sequential caller, one key: memory, Redis,
//!    hybrid (p50 / p99), and the latency Redis adds over memory;
//! 2. checks/s with 64 concurrent tasks on a 1-worker runtime, and Redis
//!    calls per check, plain Redis vs hybrid, on two workloads: every check
//!    admitted (1,000 keys, a burst far above the demand), and over the
//!    limit (10 keys at 1,000/s each, the hybrid store sized for 5
//!    replicas);
//! 3. a fleet: 5 hybrid stores (each its own connection) sharing one key
//!    per algorithm (gcra, token bucket, fixed window; 1,000/s), each
//!    replica checking 2,000 times a second (10x the limit): Redis calls
//!    per check and admitted / allowance.
//!
//! Prints the figures, then `TOTAL redis_checks=… hybrid_calls=…` so the
//! script can compare with the server's own count of script calls.
//!
//! ```sh
//! cargo run --release --features redis --example hybrid_bench -- redis://127.0.0.1:6379 3
//! ```

// A benchmark's report is its output.
#![allow(clippy::print_stdout)]

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tollgate::store::hybrid::{HybridOptions, HybridStore};
use tollgate::store::redis::{RedisOptions, RedisStore};
use tollgate::{Algorithm, MemoryStore, Rule, RuleSpec, Store};

/// The `p`-th percentile (per mille) of sorted samples.
fn percentile(sorted: &[Duration], per_mille: usize) -> Duration {
    sorted[(sorted.len() - 1) * per_mille / 1000]
}

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

/// One caller, one key, `seconds`: each check's latency.
async fn latency<S: Store>(store: &S, rule: &Rule, seconds: u64) -> (Duration, Duration, usize) {
    let mut samples = Vec::with_capacity(1 << 20);
    let end = Instant::now() + Duration::from_secs(seconds);
    let mut now = Instant::now();
    while now < end {
        let d = store.check(rule, b"lat", 1, None).await.expect("check");
        assert!(d.allowed, "the latency rule admits everything");
        let after = Instant::now();
        samples.push(after - now);
        now = after;
    }
    samples.sort_unstable();
    (
        percentile(&samples, 500),
        percentile(&samples, 990),
        samples.len(),
    )
}

/// `tasks` concurrent tasks over `keys` keys for `seconds`: checks/s and
/// the admitted share.
async fn throughput<S: Store + Clone>(
    store: &S,
    rule: &Rule,
    keys: usize,
    tasks: usize,
    seconds: u64,
) -> (f64, u64, u64) {
    let keys: Arc<Vec<Vec<u8>>> =
        Arc::new((0..keys).map(|k| format!("k{k}").into_bytes()).collect());
    let checks = Arc::new(AtomicU64::new(0));
    let admitted = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let end = start + Duration::from_secs(seconds);
    let handles: Vec<_> = (0..tasks)
        .map(|task| {
            let (store, rule, keys) = (store.clone(), rule.clone(), keys.clone());
            let (checks, admitted) = (checks.clone(), admitted.clone());
            tokio::spawn(async move {
                let (mut n, mut ok, mut i) = (0u64, 0u64, task);
                while Instant::now() < end {
                    for _ in 0..16 {
                        let key = &keys[i % keys.len()];
                        i += tasks;
                        if store
                            .check(&rule, key, 1, None)
                            .await
                            .expect("check")
                            .allowed
                        {
                            ok += 1;
                        }
                        n += 1;
                    }
                }
                checks.fetch_add(n, Ordering::Relaxed);
                admitted.fetch_add(ok, Ordering::Relaxed);
            })
        })
        .collect();
    for h in handles {
        h.await.expect("task");
    }
    let elapsed = start.elapsed().as_secs_f64();
    let n = checks.load(Ordering::Relaxed);
    (n as f64 / elapsed, n, admitted.load(Ordering::Relaxed))
}

/// Each of `fleet` checks `rule` 2 times a millisecond for `seconds`
/// (fixed window: whole windows from one's start). Returns checks,
/// admitted, and the wall clock (µs; redis-server runs on this host, so
/// its `TIME`) around the run.
async fn drive_fleet(fleet: &[HybridStore], rule: &Rule, seconds: u64) -> (u64, u64, u64, u64) {
    let period = rule.period_micros();
    let mut start = wall_micros();
    if rule.algorithm() == Algorithm::FixedWindow {
        let from = (start / period + 1) * period + 10_000;
        tokio::time::sleep(Duration::from_micros(from - start)).await;
        start = from;
    }
    let run = if rule.algorithm() == Algorithm::FixedWindow {
        Duration::from_micros(seconds * period - 100_000)
    } else {
        Duration::from_secs(seconds)
    };
    let checks = Arc::new(AtomicU64::new(0));
    let admitted = Arc::new(AtomicU64::new(0));
    let handles: Vec<_> = fleet
        .iter()
        .map(|store| {
            let (store, rule) = (store.clone(), rule.clone());
            let (checks, admitted) = (checks.clone(), admitted.clone());
            tokio::spawn(async move {
                let deadline = tokio::time::Instant::now() + run;
                let mut tick = tokio::time::interval(Duration::from_millis(1));
                tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
                while tick.tick().await < deadline {
                    for _ in 0..2 {
                        let d = store.check(&rule, b"fleet", 1, None).await.expect("check");
                        checks.fetch_add(1, Ordering::Relaxed);
                        admitted.fetch_add(u64::from(d.allowed), Ordering::Relaxed);
                    }
                }
            })
        })
        .collect();
    for h in handles {
        h.await.expect("task");
    }
    let end = wall_micros();
    (
        checks.load(Ordering::Relaxed),
        admitted.load(Ordering::Relaxed),
        start,
        end,
    )
}

fn wall_micros() -> u64 {
    let since = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock after 1970");
    u64::try_from(since.as_micros()).expect("µs fit")
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let url = args
        .get(1)
        .cloned()
        .unwrap_or_else(|| "redis://127.0.0.1:6379".into());
    let seconds: u64 = args.get(2).and_then(|a| a.parse().ok()).unwrap_or(3);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async move {
        let options = RedisOptions {
            prefix: "hbench".into(),
            ..RedisOptions::default()
        };
        let connect = || RedisStore::connect(&url, options.clone());
        let redis = connect().await.expect("connect");
        let fleet_of_5 = HybridOptions {
            replicas: 5,
            ..HybridOptions::default()
        };
        let hybrid = HybridStore::new(connect().await.expect("connect"), fleet_of_5.clone());
        let memory = MemoryStore::new();
        let mut redis_checks = 0u64;

        // 1,000,000/s with a burst of 10^12: nothing is ever denied
        let open = RuleSpec::new("open", Algorithm::Gcra, 1_000_000, Duration::from_secs(1))
            .burst(1_000_000_000_000)
            .build()
            .expect("rule");
        println!("latency of one check, one sequential caller, one key (all admitted)");
        let (m50, m99, _) = latency(&memory, &open, seconds).await;
        println!("  memory  p50 {:>8.2} us   p99 {:>8.2} us", us(m50), us(m99));
        let (r50, r99, n) = latency(&redis, &open, seconds).await;
        redis_checks += n as u64;
        println!("  redis   p50 {:>8.2} us   p99 {:>8.2} us", us(r50), us(r99));
        let calls = hybrid.redis_calls();
        let (h50, h99, n) = latency(&hybrid, &open, seconds).await;
        println!(
            "  hybrid  p50 {:>8.2} us   p99 {:>8.2} us   ({} Redis calls for {n} checks)",
            us(h50),
            us(h99),
            hybrid.redis_calls() - calls
        );
        println!(
            "  added by Redis over memory: p50 +{:.2} us, p99 +{:.2} us; by hybrid: p50 +{:.2} us, p99 +{:.2} us",
            us(r50) - us(m50),
            us(r99) - us(m99),
            us(h50) - us(m50),
            us(h99) - us(m99)
        );
        println!(
            "  hybrid / memory: p50 {:.2}x, p99 {:.2}x",
            us(h50) / us(m50),
            us(h99) / us(m99)
        );

        let limited = RuleSpec::new("limited", Algorithm::Gcra, 1_000, Duration::from_secs(1))
            .build()
            .expect("rule");
        for (title, rule, keys) in [
            ("every check admitted: 1,000 keys", &open, 1000),
            ("over the limit: 10 keys, gcra 1,000/s each", &limited, 10),
        ] {
            println!("checks/s, 64 concurrent tasks, 1 worker thread; {title}");
            let (rps, n, ok) = throughput(&redis, rule, keys, 64, seconds).await;
            redis_checks += n;
            println!(
                "  redis   {rps:>10.0} checks/s   1.0000 Redis calls/check   admitted {:.1}%",
                ok as f64 * 100.0 / n as f64
            );
            let calls = hybrid.redis_calls();
            let (hrps, n, ok) = throughput(&hybrid, rule, keys, 64, seconds).await;
            let hcalls = hybrid.redis_calls() - calls;
            println!(
                "  hybrid  {hrps:>10.0} checks/s   {:.4} Redis calls/check   admitted {:.1}%   ({:.1}x the checks/s)",
                hcalls as f64 / n as f64,
                ok as f64 * 100.0 / n as f64,
                hrps / rps
            );
        }
        println!(
            "fleet: 5 hybrid stores, one key per algorithm at 1,000/s, each replica 2,000 checks/s (10x), {seconds} s"
        );
        let mut fleet_calls = 0;
        for algorithm in [Algorithm::Gcra, Algorithm::TokenBucket, Algorithm::FixedWindow] {
            let mut fleet = Vec::new();
            for _ in 0..5 {
                fleet.push(HybridStore::new(connect().await.expect("connect"), fleet_of_5.clone()));
            }
            let rule = RuleSpec::new(format!("fleet_{algorithm}"), algorithm, 1_000, Duration::from_secs(1))
                .build()
                .expect("rule");
            let (checks, admitted, start, end) = drive_fleet(&fleet, &rule, seconds).await;
            let calls: u64 = fleet.iter().map(HybridStore::redis_calls).sum();
            fleet_calls += calls;
            let period = rule.period_micros();
            let allowance = if algorithm == Algorithm::FixedWindow {
                rule.limit() * (end / period - start / period + 1)
            } else {
                rule.burst() + (end - start) / rule.interval_micros()
            };
            println!(
                "  {algorithm:<13} {checks:>7} checks ({:.1}x)   {:.4} Redis calls/check   admitted {admitted} of {allowance} ({:+.2}%)",
                checks as f64 / allowance as f64,
                calls as f64 / checks as f64,
                (admitted as f64 / allowance as f64 - 1.0) * 100.0
            );
        }
        println!(
            "TOTAL redis_checks={redis_checks} hybrid_calls={}",
            hybrid.redis_calls() + fleet_calls
        );
    });
}
