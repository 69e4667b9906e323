//! The shared live table on a real Redis, two replicas: a change made
//! on one is read by the other's refresh (the background task's call),
//! also after Redis lost the table (a restart without persistence, or
//! `FLUSHALL`) and a write started its version over.

use std::time::Duration;

use redis_harness::RedisServer;

use super::ResilientLimiter;
use crate::store::redis::{RedisOptions, RedisStore};
use crate::{Algorithm, Limiter, RuleSpec};

/// A replica on `server`, its own connection.
async fn replica(server: &RedisServer) -> ResilientLimiter<RedisStore> {
    let store = RedisStore::connect(&server.url(), RedisOptions::default())
        .await
        .expect("connect");
    let rule = RuleSpec::new("r", Algorithm::FixedWindow, 100, Duration::from_secs(60))
        .build()
        .expect("rule");
    let limiter = Limiter::new(store, [rule]).expect("limiter");
    ResilientLimiter::builder(limiter)
        .heartbeat(None)
        .build()
        .expect("build")
}

/// The keys `limiter` holds blocked now.
fn blocked(limiter: &ResilientLimiter<RedisStore>) -> Vec<Vec<u8>> {
    limiter.blocks().into_iter().map(|b| b.key).collect()
}

/// Blocks `key` through `a`, and has `b` refresh as its background task
/// does (reading the table only when its version moved).
async fn block_and_refresh(
    a: &ResilientLimiter<RedisStore>,
    b: &ResilientLimiter<RedisStore>,
    key: &[u8],
) {
    a.block("r", key, Duration::from_secs(600))
        .await
        .expect("block");
    b.inner.refresh_live(false).await.expect("refresh");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_sees_writes_after_redis_lost_the_table() {
    let server = RedisServer::start();
    let (a, b) = (replica(&server).await, replica(&server).await);
    block_and_refresh(&a, &b, b"before").await;
    assert_eq!(blocked(&b), [b"before".to_vec()]);

    // Redis restarts empty; the next write through `a` starts the
    // table (and, before the fix, its counter) over.
    server.restart();
    block_and_refresh(&a, &b, b"after-restart").await;
    assert_eq!(
        blocked(&b),
        [b"after-restart".to_vec()],
        "after a restart, the other replica kept its old table"
    );

    // The same through FLUSHALL, twice over so the counter would again
    // meet the value `b` holds.
    let _ = server.cli(&["FLUSHALL"]);
    block_and_refresh(&a, &b, b"after-flush").await;
    assert_eq!(
        blocked(&b),
        [b"after-flush".to_vec()],
        "after FLUSHALL, the other replica kept its old table"
    );
}
