//! Shared by the Redis tests: a fleet of independent store instances
//! hammering one key concurrently.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use tollgate::store::redis::RedisStore;
use tollgate::{Rule, Store};

/// Runs `tasks` tasks per instance, each making `checks` cost-1 checks of
/// `key` under `rule` at the store's own time; returns how many were
/// admitted in total.
pub(crate) async fn admitted(
    fleet: &[RedisStore],
    rule: &Rule,
    key: &'static [u8],
    tasks: usize,
    checks: usize,
) -> u64 {
    let admitted = Arc::new(AtomicU64::new(0));
    let mut handles = Vec::new();
    for store in fleet {
        for _ in 0..tasks {
            let (store, rule, admitted) = (store.clone(), rule.clone(), admitted.clone());
            handles.push(tokio::spawn(async move {
                for _ in 0..checks {
                    if store.check(&rule, key, 1, None).await.unwrap().allowed {
                        admitted.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }));
        }
    }
    for h in handles {
        h.await.unwrap();
    }
    admitted.load(Ordering::Relaxed)
}
