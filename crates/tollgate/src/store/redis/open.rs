//! Opening a store: the URL's topology (standalone, Sentinel, Cluster, TLS)
//! picks the connection.

use std::sync::Arc;
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::cluster::ClusterClient;

use super::conn::{self, Conn};
use super::scripts::Scripts;
use super::{Backend, Inner, RedisOptions, RedisStore, protocol, store_error};
use crate::error::StoreError;
use crate::store::url::StoreUrl;

impl RedisStore {
    /// Connects to the Redis named by a store URL (docs/cli.md, "Store URLs").
    ///
    /// # Errors
    /// A bad URL or prefix, the `memory` URL, or `rediss://` without the
    /// `redis-tls` feature ([`StoreErrorKind::Protocol`](crate::StoreErrorKind::Protocol)); no server
    /// reachable ([`StoreErrorKind::Unavailable`](crate::StoreErrorKind::Unavailable) / `Timeout`).
    pub async fn connect(url: &str, options: RedisOptions) -> Result<Self, StoreError> {
        let url: StoreUrl = url.parse().map_err(protocol)?;
        Self::connect_to(&url, options).await
    }

    /// Connects to the Redis a parsed store URL names.
    ///
    /// # Errors
    /// As [`RedisStore::connect`].
    pub async fn connect_to(url: &StoreUrl, options: RedisOptions) -> Result<Self, StoreError> {
        if options.prefix.is_empty()
            || options
                .prefix
                .chars()
                .any(|c| matches!(c, '{' | '}') || c.is_whitespace())
        {
            return Err(protocol(format!(
                "prefix {:?} must be non-empty without braces or whitespace",
                options.prefix
            )));
        }
        let t = options.timeout;
        let scripts = Scripts::new();
        let margin_ms =
            u64::try_from(options.explicit_time_ttl_margin.as_millis()).unwrap_or(u64::MAX);
        let checks = conn::Checks {
            scripts: scripts.clone(),
            margin_ms,
        };
        let backend = match url {
            StoreUrl::Memory => {
                return Err(protocol("the memory URL names no Redis store"));
            }
            StoreUrl::Redis {
                tls,
                credentials,
                node,
                db,
            } => {
                if *tls && !cfg!(feature = "redis-tls") {
                    return Err(protocol(
                        "rediss:// needs tollgate built with the redis-tls feature",
                    ));
                }
                #[cfg(feature = "redis-tls")]
                if *tls {
                    // rustls needs a process-wide crypto provider; a second
                    // install (another store, or the application's) is fine.
                    let _ = rustls::crypto::ring::default_provider().install_default();
                }
                if !*tls {
                    let config = conn::Config {
                        target: conn::Target::Direct(node.clone()),
                        credentials: credentials.clone(),
                        db: *db,
                        timeout: t,
                    };
                    Backend::Lean(Conn::connect(config, checks.clone(), options.lazy).await?)
                } else {
                    let client = redis::Client::open(node.client_url(*tls, credentials, *db))
                        .map_err(|e| store_error(&e))?;
                    let config = ConnectionManagerConfig::new()
                        .set_connection_timeout(Some(t))
                        .set_response_timeout(Some(t))
                        .set_number_of_retries(2)
                        .set_max_delay(Duration::from_secs(1));
                    let manager = if options.lazy {
                        ConnectionManager::new_lazy_with_config(client, config)
                    } else {
                        ConnectionManager::new_with_config(client, config).await
                    };
                    Backend::Standalone(manager.map_err(|e| store_error(&e))?)
                }
            }
            StoreUrl::Cluster { credentials, nodes } => {
                let nodes = nodes.iter().map(|n| n.client_url(false, credentials, 0));
                let client = ClusterClient::builder(nodes)
                    .connection_timeout(t)
                    .response_timeout(t)
                    .retries(3)
                    .build()
                    .map_err(|e| store_error(&e))?;
                let conn = tokio::sync::OnceCell::new();
                if !options.lazy {
                    let first = client
                        .get_async_connection()
                        .await
                        .map_err(|e| store_error(&e))?;
                    let _ = conn.set(first);
                }
                Backend::Cluster {
                    client: Box::new(client),
                    conn,
                    slots: super::slots::Slots::new(),
                }
            }
            StoreUrl::Sentinel {
                credentials,
                nodes,
                master,
            } => {
                let config = conn::Config {
                    target: conn::Target::Sentinel {
                        sentinels: nodes.clone(),
                        master: master.clone(),
                    },
                    credentials: credentials.clone(),
                    db: 0,
                    timeout: t,
                };
                Backend::Lean(Conn::connect(config, checks.clone(), options.lazy).await?)
            }
        };
        let store = Self {
            inner: Arc::new(Inner {
                backend,
                scripts,
                prefix: options.prefix,
                margin_ms,
            }),
        };
        if !options.lazy {
            // Each master's breaker from the first check (a Cluster only).
            store.read_slots().await;
        }
        Ok(store)
    }
}
