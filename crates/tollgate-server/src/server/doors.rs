//! Opening each door ([`open`]), the ops listener ([`open_ops`]) and the
//! reference's HTTP and debug ports ([`open_reference`]): its
//! line in the log, and the future that serves it until shutdown, taking
//! for each request (each gRPC call) the [`Generation`] current when it
//! starts, so it decides on one config's rules alone while a reload swaps
//! the next one in.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use arc_swap::ArcSwap;
use http::{Request, Response};
use hyper::body::Incoming;
use hyper::service::service_fn;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tonic_health::server::{HealthReporter, HealthService};

use super::{
    GRPC_BODY_TIMEOUT, GrpcOptions, MAX_GRPC_MESSAGE, Protocols, ReferencePorts, SEND_TIMEOUT,
    grpc, serve_with, serve_with_protocols, stopped,
};
use crate::doors::envoy::grpc::{Current, RateLimitServer};
use crate::doors::ops::Health;
use crate::doors::proxy::ProxyBody;
use crate::doors::rlqs::RlqsService;
use crate::doors::{Door, Generation, admin, ops};

/// A door being served: it ends once drained after shutdown.
pub(super) type Serving = Pin<Box<dyn Future<Output = ()> + Send>>;

/// Opens `door` on `listener` with the `first` generation's settings
/// (addresses, store, Envoy domains, admin tokens: read once at start),
/// serving each request with the generation `live` holds, until `stop`.
///
/// The gRPC door is served with `grpc`'s TLS and health reporter when
/// given.
///
/// # Errors
/// The admin API refuses to open (beyond loopback without a token, a bad
/// token), a proxy door without a proxy, a listener without an address.
pub(super) async fn open(
    door: Door,
    listener: TcpListener,
    first: &Generation,
    live: &Arc<ArcSwap<Generation>>,
    stop: watch::Receiver<bool>,
    grpc: GrpcOptions,
) -> Result<Serving, String> {
    let live = Arc::clone(live);
    match door {
        Door::Admin => open_admin(listener, first, live, stop),
        Door::Api => open_api(listener, first, live, stop),
        Door::Proxy => open_proxy(listener, first, live, stop),
        Door::Envoy => open_envoy(listener, first, live, stop, grpc).await,
    }
}

fn open_admin(
    listener: TcpListener,
    first: &Generation,
    live: Arc<ArcSwap<Generation>>,
    stop: watch::Receiver<bool>,
) -> Result<Serving, String> {
    let current: admin::GateSource = Arc::new(move || Arc::clone(&live.load().gate));
    let (listener, admin) = admin::open(listener, &first.plan.config, current)?;
    Ok(Box::pin(serve_with(
        listener,
        Door::Admin.name(),
        SEND_TIMEOUT,
        stopped(stop),
        move |_peer| {
            let admin = Arc::clone(&admin);
            service_fn(move |req: Request<Incoming>| {
                let admin = Arc::clone(&admin);
                async move { Ok::<_, Infallible>(admin.handle(req).await) }
            })
        },
    )))
}

fn open_api(
    listener: TcpListener,
    first: &Generation,
    live: Arc<ArcSwap<Generation>>,
    stop: watch::Receiver<bool>,
) -> Result<Serving, String> {
    let addr = listener.local_addr().map_err(|e| e.to_string())?;
    tracing::info!(
        "HTTP API listening on http://{addr} (store {})",
        first.plan.config.store.url
    );
    Ok(Box::pin(serve_with(
        listener,
        Door::Api.name(),
        SEND_TIMEOUT,
        stopped(stop),
        move |_peer| {
            let live = Arc::clone(&live);
            service_fn(move |req: Request<Incoming>| {
                // Once per request: it decides on these rules alone.
                let api = Arc::clone(&live.load().api);
                async move { Ok::<_, Infallible>(api.handle(req).await) }
            })
        },
    )))
}

fn open_proxy(
    listener: TcpListener,
    first: &Generation,
    live: Arc<ArcSwap<Generation>>,
    stop: watch::Receiver<bool>,
) -> Result<Serving, String> {
    let addr = listener.local_addr().map_err(|e| e.to_string())?;
    let config = &first.plan.config;
    // Generation::build makes a proxy whenever this door is served.
    let Some(proxy) = &first.proxy else {
        return Err("the reverse proxy door has no proxy".to_owned());
    };
    // HTTP/1.1 and HTTP/2 either way: h2c told by its preface, or ALPN.
    let tls = config
        .proxy
        .listen_tls
        .as_ref()
        .map(crate::compat::tls::proxy_acceptor)
        .transpose()?;
    tracing::info!(
        "reverse proxy listening on {}://{addr}, forwarding to {} (store {})",
        if tls.is_some() { "https" } else { "http" },
        proxy.upstream(),
        config.store.url
    );
    let protocols = Protocols { h2c: true, tls };
    Ok(Box::pin(serve_with_protocols(
        listener,
        Door::Proxy.name(),
        config.proxy.send_timeout,
        protocols,
        stopped(stop),
        move |peer| {
            let live = Arc::clone(&live);
            service_fn(move |req: Request<Incoming>| {
                // Once per request: it decides on these rules alone.
                let proxy = live.load().proxy.clone();
                async move {
                    match proxy {
                        Some(proxy) => proxy.handle(req, peer).await,
                        // Never reached: see above.
                        None => Ok(no_proxy()),
                    }
                }
            })
        },
    )))
}

async fn open_envoy(
    listener: TcpListener,
    first: &Generation,
    live: Arc<ArcSwap<Generation>>,
    stop: watch::Receiver<bool>,
    grpc: GrpcOptions,
) -> Result<Serving, String> {
    let GrpcOptions { tls, health } = grpc;
    let addr = listener.local_addr().map_err(|e| e.to_string())?;
    let domains = first.plan.envoy.domains();
    if first.plan.envoy.awaiting() {
        // Under xDS with start_without_config: not "answered OK".
        tracing::info!(
            "Envoy rate limit service: no xDS config yet; ShouldRateLimit answers UNAVAILABLE until the first"
        );
    } else if domains.is_empty() {
        tracing::warn!(
            "Envoy rate limit service: no --envoy-config loaded; every descriptor is answered OK"
        );
    }
    tracing::info!(
        "Envoy rate limit service (gRPC{}) listening on {addr} (domains {}; store {})",
        if tls.is_some() { " over TLS" } else { "" },
        if domains.is_empty() {
            "none".to_owned()
        } else {
            domains.join(", ")
        },
        first.plan.config.store.url
    );
    if let Some(rlqs) = &first.plan.config.rlqs {
        tracing::info!(
            "Envoy rate limit quota service (RLQS) on the same port (at most {} streams)",
            rlqs.max_streams
        );
    }
    let rlqs_live = Arc::clone(&live);
    let rlqs = RlqsService::new(
        Arc::new(move || {
            let now = rlqs_live.load();
            (Arc::clone(&now.gate), now.plan.config.rlqs.clone())
        }),
        stop.clone(),
    );
    let current: Current = Arc::new(move || Arc::clone(&live.load().envoy));
    let health = health.unwrap_or_else(HealthReporter::new);
    health.set_serving::<RateLimitServer>().await;
    let server = RateLimitServer::new(
        current,
        HealthService::from_health_reporter(health.clone()),
        MAX_GRPC_MESSAGE,
        GRPC_BODY_TIMEOUT,
    )
    .with_rlqs(rlqs);
    Ok(Box::pin(grpc::serve_grpc(
        listener, server, health, stop, tls,
    )))
}

/// Opens the reference's HTTP port (`/healthcheck`, `/json`) and debug
/// port (`/rlconfig`) on `ports`, each request over the generation
/// current then, until `stop` (sent once the doors have drained, so a
/// probe meanwhile reads the drain, not a refused connection).
///
/// # Errors
/// A listener without an address.
pub(super) fn open_reference(
    ports: ReferencePorts,
    live: &Arc<ArcSwap<Generation>>,
    health: &Arc<Health>,
    stop: &watch::Receiver<bool>,
) -> Result<Vec<Serving>, String> {
    let ReferencePorts {
        http,
        debug: debug_port,
        state,
    } = ports;
    let at = |l: &TcpListener| l.local_addr().map_err(|e| e.to_string());
    tracing::info!(
        "reference HTTP listening on http://{} (/healthcheck, /json)",
        at(&http)?
    );
    tracing::info!(
        "reference debug listening on http://{} (/rlconfig)",
        at(&debug_port)?
    );
    tokio::spawn(mirror_health(
        Arc::clone(&state),
        Arc::clone(live),
        Arc::clone(health),
        stop.clone(),
    ));
    let (live_http, health) = (Arc::clone(live), Arc::clone(health));
    let http = serve_with(
        http,
        "reference HTTP",
        SEND_TIMEOUT,
        stopped(stop.clone()),
        move |_peer| {
            let (live, health, state) = (
                Arc::clone(&live_http),
                Arc::clone(&health),
                Arc::clone(&state),
            );
            service_fn(move |req: Request<Incoming>| {
                let generation = live.load_full();
                let (health, state) = (Arc::clone(&health), Arc::clone(&state));
                async move { Ok::<_, Infallible>(state.handle(&generation, &health, req).await) }
            })
        },
    );
    let live = Arc::clone(live);
    let debug = serve_with(
        debug_port,
        "reference debug",
        SEND_TIMEOUT,
        stopped(stop.clone()),
        move |_peer| {
            let live = Arc::clone(&live);
            service_fn(move |req: Request<Incoming>| {
                let res = crate::compat::http::debug(&live.load(), &req);
                async move { Ok::<_, Infallible>(res) }
            })
        },
    );
    Ok(vec![Box::pin(http), Box::pin(debug)])
}

/// Opens the ops listener on `listener`: `/healthz`, `/readyz` and
/// `/metrics` with the probes of the generation current at each request,
/// until `stop` (which `serve` sends once the doors have drained).
///
/// # Errors
/// A listener without an address.
pub(super) fn open_ops(
    listener: TcpListener,
    live: &Arc<ArcSwap<Generation>>,
    stop: watch::Receiver<bool>,
) -> Result<Serving, String> {
    let addr = listener.local_addr().map_err(|e| e.to_string())?;
    tracing::info!("ops listening on http://{addr} (/healthz, /readyz, /metrics)");
    let live = Arc::clone(live);
    Ok(Box::pin(serve_with(
        listener,
        "ops listener",
        SEND_TIMEOUT,
        stopped(stop),
        move |_peer| {
            let live = Arc::clone(&live);
            service_fn(move |req: Request<Incoming>| {
                // Once per request: its readiness setting and config.
                let api = Arc::clone(&live.load().api);
                async move { Ok::<_, Infallible>(ops::handle(api.probes(), req).await) }
            })
        },
    )))
}

/// Keeps the gRPC health of `ratelimit` what `/healthcheck` would answer,
/// as the reference's does: now, then every [`HEALTH_MIRROR_EVERY`],
/// until `stop`.
async fn mirror_health(
    state: Arc<crate::compat::http::ReferenceHttp>,
    live: Arc<ArcSwap<Generation>>,
    health: Arc<Health>,
    stop: watch::Receiver<bool>,
) {
    let mut every = tokio::time::interval(HEALTH_MIRROR_EVERY);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut stop = std::pin::pin!(stopped(stop));
    loop {
        tokio::select! {
            _ = every.tick() => {
                let generation = live.load_full();
                state.mirror(&generation, &health).await;
            }
            () = &mut stop => break,
        }
    }
}

/// How often the gRPC health of `ratelimit` follows `/healthcheck` (the
/// store probe's own period: what it reads changes no faster).
const HEALTH_MIRROR_EVERY: std::time::Duration = crate::doors::ops::STORE_PROBE_EVERY;

/// The answer of a proxy door without a proxy (never made: see its use).
fn no_proxy() -> Response<ProxyBody> {
    let mut res = Response::new(http_body_util::Either::Right(
        http_body_util::Full::default(),
    ));
    *res.status_mut() = http::StatusCode::SERVICE_UNAVAILABLE;
    res
}
