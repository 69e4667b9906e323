//! Opening the configured store: memory, Redis (Sentinel and Cluster
//! included) or the hybrid store over Redis, with the `[store]` settings.
//! `tollgate serve` opens it here for its [`Gate`](crate::gate::Gate);
//! `check` and `replay` open theirs the same way.

use super::AnyStore;
use tollgate::store::hybrid::HybridStore;
use tollgate::store::redis::{RedisOptions, RedisStore};
use tollgate::{MemoryStore, StoreErrorKind};

use crate::config::StoreConfig;
use crate::store_url::StoreUrl;

/// Opens the store a URL names, with the `[store]` settings. With
/// `start_unreachable` (`tollgate serve`), a Redis that cannot be reached
/// (refused, timed out, no master yet) is logged and the store starts
/// anyway, connecting on first use: until then the failure policy answers.
/// A server that answers and refuses (a wrong password or database) is an
/// error either way.
///
/// # Errors
/// The store cannot be reached (without `start_unreachable`) or refuses the
/// connection; the message names the URL (password hidden).
pub async fn open_store(
    url: &StoreUrl,
    store: &StoreConfig,
    start_unreachable: bool,
) -> Result<AnyStore, String> {
    if url.is_memory() && store.hybrid.is_some() {
        return Err("store.hybrid needs a Redis store URL, not memory".to_owned());
    }
    if url.is_memory() {
        return Ok(MemoryStore::builder()
            .max_keys(store.max_keys)
            .build()
            .into());
    }
    let options = RedisOptions {
        prefix: store.prefix.clone(),
        timeout: store.timeout,
        ..RedisOptions::default()
    };
    let redis = match RedisStore::connect_to(url, options.clone()).await {
        Ok(redis) => redis,
        Err(e)
            if start_unreachable
                && matches!(
                    e.kind(),
                    StoreErrorKind::Unavailable | StoreErrorKind::Timeout
                ) =>
        {
            tracing::warn!(
                "store {url} unreachable at start ({e}); serving anyway: checks get the \
                 failure policy until it answers (/readyz and tollgate_store_up say it is down)"
            );
            let lazy = RedisOptions {
                lazy: true,
                ..options
            };
            RedisStore::connect_to(url, lazy)
                .await
                .map_err(|e| format!("store {url}: {e}"))?
        }
        Err(e) => return Err(format!("store {url}: {e}")),
    };
    Ok(match &store.hybrid {
        Some(options) => HybridStore::new(redis, options.clone()).into(),
        None => redis.into(),
    })
}
