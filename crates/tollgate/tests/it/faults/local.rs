//! Four replicas on `local` during an outage: each admits its share of
//! the limit, so the fleet admits about the limit, as a cap and over time.

use super::*;

/// Four replicas on `local` learn through Redis that they are four; during
/// an outage each admits a quarter of the limit, so the fleet admits about
/// the limit in total: not four times it, not zero.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_replicas_on_local_admit_about_the_limit_while_redis_is_frozen() {
    four_replicas_on_local(false).await;
}

/// The same with Redis killed: connections refused rather than silence.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_replicas_on_local_admit_about_the_limit_while_redis_is_dead() {
    four_replicas_on_local(true).await;
}

async fn four_replicas_on_local(kill: bool) {
    const LIMIT: u64 = 100;
    clear_of_the_hour();
    let redis = RedisServer::start();
    let mut fleet = Vec::new();
    for _ in 0..4 {
        let store = connect(&redis.url(), "fleet").await;
        let limiter = Limiter::new(store, [rule("shared", Algorithm::FixedWindow, LIMIT, HOUR)])
            .expect("limiter");
        fleet.push(Arc::new(
            ResilientLimiter::builder(limiter)
                .timeout(TIMEOUT)
                .on_error(OnError::Local)
                .heartbeat(HEARTBEAT)
                .build()
                .expect("resilient limiter"),
        ));
    }
    let refs: Vec<&ResilientLimiter<RedisStore>> = fleet.iter().map(|l| &**l).collect();
    until_live(&refs, 4).await;
    assert_eq!(redis.cli(&["ZCARD", "fleet:replicas"]), "4");

    if kill {
        redis.kill();
    } else {
        redis.pause();
    }
    let admitted = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let mut tasks = Vec::new();
    for limiter in &fleet {
        for _ in 0..4 {
            let (limiter, admitted) = (Arc::clone(limiter), Arc::clone(&admitted));
            tasks.push(tokio::spawn(async move {
                for _ in 0..60 {
                    let (r, _) = timed(&limiter, "shared", "everyone").await;
                    let v = r.expect("local decides");
                    assert_eq!(v.degraded, Some(OnError::Local));
                    if v.multi.allowed {
                        admitted.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }));
        }
    }
    for t in tasks {
        t.await.expect("task");
    }
    let admitted = admitted.load(Ordering::Relaxed);
    eprintln!(
        "four replicas on local, Redis {}: {admitted} admitted of 960 checks (limit {LIMIT}) in {:?}",
        if kill { "dead" } else { "frozen" },
        start.elapsed()
    );
    assert!(
        (75..=125).contains(&admitted),
        "{admitted} admitted; expected about {LIMIT}"
    );
    // Still four: the last known count holds while Redis is down.
    assert!(fleet.iter().all(|l| l.live_replicas() == 4));
    if kill {
        redis.restart();
    } else {
        redis.resume();
    }
    for l in &fleet {
        let _ = until_store_answers(l, "shared", "after", Duration::from_secs(10)).await;
    }
    assert_all_keys_expire(&redis.keys_without_ttl());
}

/// Over time, not only as a cap: four replicas on `local` keep the fleet
/// near the rule's rate (GCRA, 100 per second, burst 100) for two seconds
/// of outage — what one shared limiter would admit, burst + rate × time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_replicas_on_local_keep_about_the_rate_during_an_outage() {
    let redis = RedisServer::start();
    let mut fleet = Vec::new();
    for _ in 0..4 {
        let store = connect(&redis.url(), "rate").await;
        let rule = RuleSpec::new("rate", Algorithm::Gcra, 100, Duration::from_secs(1))
            .build()
            .expect("rule");
        let limiter = Limiter::new(store, [rule]).expect("limiter");
        fleet.push(Arc::new(
            ResilientLimiter::builder(limiter)
                .timeout(TIMEOUT)
                .on_error(OnError::Local)
                .heartbeat(HEARTBEAT)
                .build()
                .expect("resilient limiter"),
        ));
    }
    let refs: Vec<&ResilientLimiter<RedisStore>> = fleet.iter().map(|l| &**l).collect();
    until_live(&refs, 4).await;
    redis.pause();
    let admitted = Arc::new(AtomicU64::new(0));
    let first_local = Arc::new(FirstTime::default());
    let outage = Duration::from_secs(2);
    let start = Instant::now();
    let mut tasks = Vec::new();
    for limiter in &fleet {
        for _ in 0..2 {
            let (limiter, admitted, first_local) = (
                Arc::clone(limiter),
                Arc::clone(&admitted),
                Arc::clone(&first_local),
            );
            tasks.push(tokio::spawn(async move {
                while start.elapsed() < outage {
                    let (r, _) = timed(&limiter, "rate", "everyone").await;
                    let v = r.expect("local decides");
                    assert_eq!(v.degraded, Some(OnError::Local));
                    first_local.set(start.elapsed());
                    if v.multi.allowed {
                        admitted.fetch_add(1, Ordering::Relaxed);
                    }
                    tokio::time::sleep(Duration::from_millis(2)).await;
                }
            }));
        }
    }
    for t in tasks {
        t.await.expect("task");
    }
    let admitted = admitted.load(Ordering::Relaxed);
    // The local limiters start at the first local answer.
    let local_for = outage.saturating_sub(first_local.get());
    let expected = 100.0 + 100.0 * local_for.as_secs_f64();
    eprintln!(
        "four replicas on local at 100/s, Redis frozen: {admitted} admitted in {local_for:?} of local \
         answers; one shared limiter would admit {expected:.0}"
    );
    #[allow(clippy::cast_precision_loss)]
    let ratio = admitted as f64 / expected;
    assert!(
        (0.75..=1.25).contains(&ratio),
        "{admitted} admitted, expected about {expected:.0}"
    );
    redis.resume();
    for l in &fleet {
        let _ = until_store_answers(l, "rate", "after", Duration::from_secs(10)).await;
    }
    assert_all_keys_expire(&redis.keys_without_ttl());
}
