//! An axum service behind tollgate's tower layer: ONE limiter shared by
//! every clone of the service (what a per-request `withRateLimit` wrapper,
//! or tower's own per-clone `RateLimit`, gets wrong), keyed by the API key
//! header and by the client address.
//!
//! ```text
//! cargo run -p tollgate-tower --example axum_service
//! curl -i -H 'x-api-key: alice' http://127.0.0.1:3000/
//!
//! # counters in Redis, shared by every replica of the service:
//! TOLLGATE_REDIS_URL=redis://127.0.0.1:6379 \
//!     cargo run -p tollgate-tower --features redis --example axum_service
//! ```
//!
//! `TOLLGATE_ADDR` sets the listen address (default `127.0.0.1:3000`),
//! `TOLLGATE_TRUSTED_PROXIES` a comma-separated CIDR list of proxies whose
//! `X-Forwarded-For` is believed (default none: the peer is the client).

use std::error::Error;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::ConnectInfo;
use axum::routing::get;
use tollgate::OnError;
use tollgate::{Algorithm, Limiter, MemoryStore, RuleSpec, Store};
use tollgate_tower::RateLimitLayer;
use tollgate_tower::extract::ClientIpConfig;

#[tokio::main]
async fn main() -> Result<(), Box<dyn Error>> {
    // The store: Redis when `TOLLGATE_REDIS_URL` is set, else in process.
    // Each is its own type; the service is generic over the store.
    let Ok(url) = std::env::var("TOLLGATE_REDIS_URL") else {
        return serve(MemoryStore::new()).await;
    };
    #[cfg(feature = "redis")]
    {
        use tollgate::store::redis::{RedisOptions, RedisStore};
        let options = RedisOptions {
            timeout: Duration::from_millis(50),
            ..RedisOptions::default()
        };
        serve(RedisStore::connect(&url, options).await?).await
    }
    #[cfg(not(feature = "redis"))]
    {
        Err(format!("TOLLGATE_REDIS_URL={url} needs the redis feature: --features redis").into())
    }
}

fn trusted_proxies() -> Result<ClientIpConfig, Box<dyn Error>> {
    let list = std::env::var("TOLLGATE_TRUSTED_PROXIES").unwrap_or_default();
    let blocks = list
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::parse)
        .collect::<Result<Vec<_>, _>>()?;
    Ok(ClientIpConfig::new()
        .with_trusted_proxies(blocks)
        .with_ipv6_prefix(64)?)
}

async fn hello() -> &'static str {
    "hello\n"
}

/// Serves the app with its limits kept in `store`.
async fn serve<S: Store>(store: S) -> Result<(), Box<dyn Error>> {
    // Built once, shared by every clone the router makes.
    let limiter = Arc::new(Limiter::new(
        store,
        [
            RuleSpec::new("per_key", Algorithm::Gcra, 10, Duration::from_secs(1))
                .burst(20)
                .build()?,
            RuleSpec::new(
                "per_ip",
                Algorithm::SlidingWindow,
                300,
                Duration::from_secs(60),
            )
            .build()?,
        ],
    )?);
    let layer = RateLimitLayer::new(
        limiter,
        [
            ("per_key", "header:x-api-key".parse()?),
            ("per_ip", "client_ip".parse()?),
        ],
    )?
    .with_client_ip(trusted_proxies()?)
    .with_on_error(OnError::Allow)
    .with_peer_addr(|ext| ext.get::<ConnectInfo<SocketAddr>>().map(|c| c.0));

    let app = Router::new().route("/", get(hello)).layer(layer);

    let addr = std::env::var("TOLLGATE_ADDR").unwrap_or_else(|_| "127.0.0.1:3000".to_owned());
    let listener = tokio::net::TcpListener::bind(&addr).await?;
    eprintln!("listening on http://{}", listener.local_addr()?);
    axum::serve(
        listener,
        app.into_make_service_with_connect_info::<SocketAddr>(),
    )
    .with_graceful_shutdown(async {
        let _ = tokio::signal::ctrl_c().await;
    })
    .await?;
    Ok(())
}
