//! Load generator for the Redis store: `concurrency` tasks in one process
//! doing GCRA checks through one `RedisStore` (one pipelined connection)
//! for `seconds` (on a current-thread runtime, or with `multi` a 1-worker
//! multi-thread one), then prints checks/s, latency p50/p99 and the client CPU
//! time per check. Used by `bench/redis.sh`.
//!
//! The generator itself must stay cheap next to what it measures: keys are
//! formatted once up front (a service has its key bytes already), each
//! iteration reads the clock once (the end of one check starts the next),
//! and latencies go to a preallocated `Vec`. Every iteration is still one
//! real, awaited check whose latency is recorded.
//!
//! ```sh
//! cargo run --release --features redis --example redis_load -- redis://127.0.0.1:6379 64 5 10000 [current|multi]
//! ```

use std::sync::Arc;
use std::time::{Duration, Instant};

use tollgate::store::redis::{RedisOptions, RedisStore};
use tollgate::{Algorithm, RuleSpec, Store};

/// User and system CPU time of this process (every thread), from
/// /proc/self/stat. Their sum is exact; the split between them is sampled
/// at each clock tick, so only roughly right.
fn cpu_time() -> (Duration, Duration) {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // Fields after the command name (which is in parentheses).
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<u64>().ok())
            .unwrap_or(0)
    };
    // utime and stime are fields 14 and 15 of the full line: 11 and 12 here.
    let clk = 100; // sysconf(_SC_CLK_TCK) on Linux
    let time = |t: u64| Duration::from_millis(t * 1000 / clk);
    (time(ticks(11)), time(ticks(12)))
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let url = args
        .get(1)
        .cloned()
        .unwrap_or_else(|| "redis://127.0.0.1:6379".into());
    let concurrency: usize = args.get(2).and_then(|a| a.parse().ok()).unwrap_or(64);
    let seconds: u64 = args.get(3).and_then(|a| a.parse().ok()).unwrap_or(5);
    let keys: u64 = args.get(4).and_then(|a| a.parse().ok()).unwrap_or(10_000);
    // "current" (default): every task and the connection on this thread;
    // "multi": a 1-worker multi-thread runtime.
    let flavor = args.get(5).map_or("current", String::as_str);
    let runtime = match flavor {
        "multi" => tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build(),
        _ => tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build(),
    }
    .expect("runtime");
    runtime.block_on(async move {
        let store = RedisStore::connect(
            &url,
            RedisOptions {
                prefix: "bench".into(),
                ..RedisOptions::default()
            },
        )
        .await
        .expect("connect");
        // Admitting: a limit far above what the run can reach per key.
        let rule = RuleSpec::new("load", Algorithm::Gcra, 1_000_000, Duration::from_secs(1))
            .build()
            .expect("rule");
        // Warm up: load the script, open the connection.
        store
            .check(&rule, b"warm", 1, None)
            .await
            .expect("warm-up check");
        let names: Arc<Vec<Vec<u8>>> =
            Arc::new((0..keys).map(|k| k.to_string().into_bytes()).collect());
        let deadline = Instant::now() + Duration::from_secs(seconds);
        let cpu0 = cpu_time();
        let start = Instant::now();
        let rule = Arc::new(rule);
        let tasks: Vec<_> = (0..concurrency)
            .map(|task| {
                let (store, rule, names) = (store.clone(), rule.clone(), names.clone());
                tokio::spawn(async move {
                    let mut latencies = Vec::with_capacity(1 << 17);
                    let mut n = task as u64;
                    let mut t0 = Instant::now();
                    while t0 < deadline {
                        n = n.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
                        let key = &names[((n >> 33) % keys) as usize];
                        store.check(&rule, key, 1, None).await.expect("check");
                        let t1 = Instant::now();
                        latencies.push(u32::try_from((t1 - t0).as_micros()).unwrap_or(u32::MAX));
                        t0 = t1;
                    }
                    latencies
                })
            })
            .collect();
        let mut all = Vec::new();
        for t in tasks {
            all.extend(t.await.expect("task"));
        }
        let wall = start.elapsed();
        let (user1, sys1) = cpu_time();
        let (user, sys) = (user1.saturating_sub(cpu0.0), sys1.saturating_sub(cpu0.1));
        all.sort_unstable();
        let per_mille = |p: usize| all[(all.len() * p / 1000).min(all.len() - 1)];
        let n = all.len() as f64;
        // The one line bench/redis.sh reads.
        #[allow(clippy::print_stdout)]
        {
            let per_check = |d: Duration| d.as_secs_f64() * 1e6 / n;
            println!(
                "tollgate_redis checks={} rps={:.0} p50_us={} p99_us={} \
                 client_cpu_us_per_check={:.2} (user {:.2} + sys {:.2})",
                all.len(),
                n / wall.as_secs_f64(),
                per_mille(500),
                per_mille(990),
                per_check(user + sys),
                per_check(user),
                per_check(sys),
            );
        }
    });
}
