//! Opening a store: the URL's topology (standalone, Sentinel, Cluster, TLS)
//! picks the connection.

use std::sync::Arc;

use redis::cluster::ClusterClient;

use super::conn::{self, Conn, Tls};
use super::scripts::Scripts;
use super::{Backend, Inner, RedisOptions, RedisStore, protocol, store_error};
use crate::error::StoreError;
use crate::store::url::{Credentials, StoreUrl};

impl RedisStore {
    /// Connects to the Redis named by a store URL (docs/cli.md, "Store URLs").
    ///
    /// # Errors
    /// A bad URL or prefix, the `memory` URL, `rediss://` without the
    /// `redis-tls` feature, TLS settings that make no client or with a URL
    /// that is not `rediss://`, a certificate refused either way
    /// ([`StoreErrorKind::Protocol`](crate::StoreErrorKind::Protocol)); no server
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
                let tls = match (*tls, &options.tls) {
                    (true, settings) => Some(Tls::new(&settings.clone().unwrap_or_default())?),
                    (false, Some(_)) => {
                        return Err(protocol(
                            "TLS settings need a rediss:// URL (this one is redis://)",
                        ));
                    }
                    (false, None) => None,
                };
                let config = conn::Config {
                    target: conn::Target::Direct(node.clone()),
                    credentials: credentials.clone(),
                    db: *db,
                    timeout: t,
                    tls,
                };
                Backend::Lean(Conn::connect(config, checks.clone(), options.lazy).await?)
            }
            StoreUrl::Cluster { credentials, nodes } => {
                if options.tls.is_some() {
                    return Err(protocol(
                        "TLS settings need a rediss:// URL (a cluster URL has no TLS form)",
                    ));
                }
                // The credentials go to the builder, not into the nodes'
                // URLs: no string holding the password is made.
                let nodes = nodes
                    .iter()
                    .map(|n| n.client_url(false, &Credentials::default(), 0));
                let mut builder = ClusterClient::builder(nodes);
                if let Some(user) = &credentials.username {
                    builder = builder.username(user);
                }
                if let Some(password) = &credentials.password {
                    builder = builder.password(password);
                }
                let client = builder
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
                if options.tls.is_some() {
                    return Err(protocol(
                        "TLS settings need a rediss:// URL (a sentinel URL has no TLS form)",
                    ));
                }
                let config = conn::Config {
                    target: conn::Target::Sentinel {
                        sentinels: nodes.clone(),
                        master: master.clone(),
                    },
                    credentials: credentials.clone(),
                    db: 0,
                    timeout: t,
                    tls: None,
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
