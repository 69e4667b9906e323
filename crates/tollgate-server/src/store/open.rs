//! Opening the configured store: memory, Redis (Sentinel and Cluster
//! included) or the hybrid store over Redis, with the `[store]` settings.
//! `tollgate serve` opens it here for its [`Gate`](crate::gate::Gate);
//! `check` and `replay` open theirs the same way.

use super::AnyStore;
use tollgate::store::hybrid::HybridStore;
use tollgate::store::redis::{RedisOptions, RedisStore};
use tollgate::{MemoryStore, StoreErrorKind};

use super::credentials::{PASSWORD_ENV, with_credentials};
use crate::config::StoreConfig;
use crate::store_url::StoreUrl;

/// Opens the store a URL names, with the `[store]` settings. With
/// `start_unreachable` (`tollgate serve`), a Redis that cannot be reached
/// (refused, timed out, no master yet) is logged and the store starts
/// anyway, connecting on first use: until then the failure policy answers.
/// A server that answers and refuses (a wrong password or database) is an
/// error either way.
///
/// The password and user come from the URL, `[store] password_file`,
/// `[store] username` and [`PASSWORD_ENV`] (see
/// [`with_credentials`](super::credentials::with_credentials)); TLS from
/// `[store.tls]`.
///
/// # Errors
/// The credentials given twice or for no Redis; the store cannot be
/// reached (without `start_unreachable`) or refuses the connection (a
/// wrong password, a certificate refused); the message names the URL
/// (password hidden) and never a secret.
pub async fn open_store(
    url: &StoreUrl,
    store: &StoreConfig,
    start_unreachable: bool,
) -> Result<AnyStore, String> {
    let target = with_credentials(url, store, std::env::var_os(PASSWORD_ENV))?;
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
        tls: store.tls.as_ref().map(|t| t.settings.clone()),
        ..RedisOptions::default()
    };
    let redis = match RedisStore::connect_to(&target, options.clone()).await {
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
            RedisStore::connect_to(&target, lazy)
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
