//! `tollgate serve` as a library function: [`run`] takes listeners that are
//! already bound, a shutdown future and the config, and serves until the
//! future resolves, then drains (mini-redis's shape).
//!
//! Connections are HTTP/1.1 (hyper); the reverse proxy's also HTTP/2,
//! with prior knowledge (h2c) or by ALPN over TLS ([`Protocols`]). Limits on what a client can make the
//! server hold: request heads of at most [`MAX_HEAD_BYTES`] and
//! [`MAX_HEADERS`] fields, at most [`MAX_CONNECTIONS`] connections per front
//! door (past it, new connections wait in the kernel's backlog), and a
//! connection that completes no request head and has no answer in flight
//! for a whole [`HEAD_TIMEOUT`] period is closed: a slow-loris head, or an
//! idle keep-alive connection, goes after 10 to 20 seconds. A client that
//! takes nothing of an answer being sent for a whole send-timeout period
//! (a slow reader of a large proxied response) is closed likewise, which
//! also drops the upstream's side of the exchange.
//!
//! The gRPC port (the Envoy rate limit service) is HTTP/2 (`h2`), with
//! the same connection cap and acceptor, and per connection at most
//! [`MAX_GRPC_STREAMS`] streams, requests of at most [`MAX_GRPC_MESSAGE`]
//! bytes (a longer one is denied unread), header lists of at most [`MAX_GRPC_HEADER_LIST`] bytes, and a
//! request body that has not ended [`GRPC_BODY_TIMEOUT`] after the call
//! started reading it answered `DEADLINE_EXCEEDED` (its stream ends). On
//! shutdown it stops accepting and sends GOAWAY on every connection at
//! once; calls in flight are answered, or cut at their body bound; the
//! port is done when every connection has closed, or [`DRAIN_TIMEOUT`]
//! after shutdown began.
//!
//! The HTTP head and send bounds are per-connection watchdogs, not hyper's
//! `header_read_timeout`: hyper's arms (allocates, registers, cancels) a
//! timer for every request head, which cost about 4% of a check; the
//! watchdog's one timer per connection fires every [`HEAD_TIMEOUT`] and
//! compares two counters.
//!
//! The folder: this file serves ([`run`], [`run_reloading`]): it opens
//! the store, builds the first generation of doors ([`crate::doors`]),
//! spawns one task per door and the upkeep (the reload task of
//! [`crate::reload`], the metrics upkeep, the store probe), and serves an
//! HTTP/1.1 door's connections ([`serve_with`]); `doors.rs` opens each
//! door, the ops listener and the compatibility entry's reference ports
//! (its log line, its service over the generation current at each
//! request);
//! `acceptor.rs` accepts connections under the cap; `connection.rs` serves one
//! HTTP connection (TLS, h2c or HTTP/1.1, the watchdogs); `watchdog.rs` is the
//! per-connection watchdog and what it watches; `grpc.rs` serves the gRPC
//! door's connections (over TLS when [`Listeners::set_grpc_tls`] gave an
//! acceptor).

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use http::{Request, Response};
use hyper::body::Incoming;
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinSet;

use arc_swap::ArcSwap;

use crate::config::{Config, ConfigInfo, ReloadStatus, record_loaded, rfc3339, version_of_text};
use crate::doors::envoy::limits::EnvoyLimits;
use crate::doors::ops::{Health, STORE_PROBE_EVERY};
use crate::doors::{ByDoor, Door, Generation, Plan, Shared};
use crate::reload::{Reloader, Source};
use crate::store::open_store;

mod acceptor;
mod connection;
mod doors;
mod grpc;
mod watchdog;

use acceptor::Acceptor;
pub use connection::Protocols;
use connection::{Accepted, Builders, serve_conn};
use watchdog::{Activity, Conn, Watched};

/// The most bytes of a request head (request line and header fields).
pub const MAX_HEAD_BYTES: usize = 64 * 1024;
/// The most header fields in a request.
pub const MAX_HEADERS: usize = 100;
/// A connection that completes no request head and has no answer in flight
/// for a whole period of this length is closed (so a head must arrive, and
/// an idle keep-alive connection is closed, within 10 to 20 seconds).
pub const HEAD_TIMEOUT: Duration = Duration::from_secs(10);
/// The most connections one front door holds open at once.
pub const MAX_CONNECTIONS: usize = 10_000;
/// How long shutdown waits for in-flight requests before giving up.
pub const DRAIN_TIMEOUT: Duration = Duration::from_secs(30);
/// A connection of the HTTP API whose client takes nothing of an answer
/// being sent for a whole period of this length is closed (the proxy's is
/// `[proxy] send_timeout`, by default the same).
pub const SEND_TIMEOUT: Duration = crate::config::DEFAULT_SEND_TIMEOUT;
/// The most streams (calls) one gRPC connection may have open at once,
/// advertised as `SETTINGS_MAX_CONCURRENT_STREAMS` (past it the client
/// waits or opens another connection, as Envoy does). Envoy multiplexes a
/// worker's calls on one connection; at 20,000 calls/s and 3 ms each that
/// is about 60 in flight, so 256 leaves room while bounding what one
/// connection can make the server hold (see [`MAX_GRPC_MESSAGE`]).
pub const MAX_GRPC_STREAMS: u32 = 256;
/// The longest gRPC request message read; a longer `ShouldRateLimit` is
/// answered `OVER_LIMIT` on its length prefix, unread (an error would be
/// an admission to Envoy; see [`crate::doors::envoy::wire`]).
/// A call holds what has arrived of its message (at most this, the
/// stream's flow-control window), so this times [`MAX_GRPC_STREAMS`]
/// (16 MiB) is what one connection can make the server hold. A `ShouldRateLimit` request is a domain and a few descriptors,
/// well under 1 KiB; 64 KiB holds a descriptor carrying a header as long as
/// Envoy's default limit for all headers together (60 KiB).
pub const MAX_GRPC_MESSAGE: usize = 64 * 1024;
/// The most bytes of one gRPC request's header list. Envoy's calls carry a
/// handful of short headers of its own, plus the tracing context it
/// propagates from the client's request (`traceparent`, `tracestate`,
/// `x-b3-*`), which a client can make as long as Envoy lets client headers
/// be: 60 KiB by default. A longer list is refused by HTTP/2 itself with a
/// 431 that Envoy takes as a failed call, and so, with its default
/// `failure_mode_deny: false`, as an admission; 64 KiB keeps that out of a
/// client's reach under Envoy's default limits.
pub const MAX_GRPC_HEADER_LIST: u32 = 64 * 1024;
/// A gRPC request whose body has not ended this long after the call
/// started waiting for it is answered `DEADLINE_EXCEEDED` and its stream
/// ends (reset): as the HTTP ports' [`HEAD_TIMEOUT`], a client cannot hold
/// a stream open by never finishing its request. Deciding is not bounded
/// by it (the store's own timeout bounds that).
pub const GRPC_BODY_TIMEOUT: Duration = Duration::from_secs(10);

/// The listeners to serve, already bound: the doors', door by door (at
/// least one front door, [`Door::is_front`]), and the ops listener's, if
/// any (docs/operations.md, "Probes"):
/// `Listeners::default().with(Door::Api, listener)`.
#[derive(Debug, Default)]
pub struct Listeners {
    doors: ByDoor<TcpListener>,
    ops: Option<TcpListener>,
    reference: Option<ReferencePorts>,
    grpc: GrpcOptions,
}

/// What the gRPC door is served with besides its listener: a TLS
/// acceptor, and the `grpc.health.v1` reporter to serve (the reference
/// ports' own, which mirrors `/healthcheck` under the name `ratelimit`).
#[derive(Clone, Default)]
struct GrpcOptions {
    tls: Option<tokio_rustls::TlsAcceptor>,
    health: Option<tonic_health::server::HealthReporter>,
}

impl std::fmt::Debug for GrpcOptions {
    /// Whether each is set (the acceptor's keys are never shown).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GrpcOptions")
            .field("tls", &self.tls.is_some())
            .field("health", &self.health.is_some())
            .finish()
    }
}

/// The reference's own HTTP and debug ports (the compatibility entry,
/// docs/ratelimit-env.md), already bound: `/healthcheck` and `/json` on
/// `http`, `/rlconfig` on `debug`. Served until the doors have drained,
/// as the ops listener is.
#[derive(Debug)]
pub struct ReferencePorts {
    /// `HOST:PORT`.
    pub http: TcpListener,
    /// `DEBUG_HOST:DEBUG_PORT`.
    pub debug: TcpListener,
    /// What `/healthcheck` waits for, and what it has seen.
    pub state: Arc<crate::compat::http::ReferenceHttp>,
}

impl Listeners {
    /// `self` with `listener` for `door`.
    #[must_use]
    pub fn with(mut self, door: Door, listener: TcpListener) -> Self {
        self.set(door, Some(listener));
        self
    }

    /// Sets (or, with `None`, clears) `door`'s listener.
    pub fn set(&mut self, door: Door, listener: Option<TcpListener>) {
        self.doors.set(door, listener);
    }

    /// `self` with `listener` for the ops listener (`/healthz`, `/readyz`,
    /// `/metrics`).
    #[must_use]
    pub fn with_ops(mut self, listener: TcpListener) -> Self {
        self.ops = Some(listener);
        self
    }

    /// Sets (or, with `None`, clears) the ops listener.
    pub fn set_ops(&mut self, listener: Option<TcpListener>) {
        self.ops = listener;
    }

    /// Sets the reference's HTTP and debug ports; the gRPC door then
    /// serves their health under the name `ratelimit` too.
    pub fn set_reference(&mut self, ports: ReferencePorts) {
        self.grpc.health = Some(ports.state.grpc_health());
        self.reference = Some(ports);
    }

    /// Serves the gRPC door over TLS with `acceptor`.
    pub fn set_grpc_tls(&mut self, acceptor: tokio_rustls::TlsAcceptor) {
        self.grpc.tls = Some(acceptor);
    }
}

/// Serves the doors on `listeners` with `config` until `shutdown`
/// resolves; then stops accepting, lets in-flight requests finish (up to
/// [`DRAIN_TIMEOUT`]) and returns. Logs one line per door opened. The
/// config is never reloaded (see [`run_reloading`]); its version is a hash
/// of its text; the Envoy service, if served, has no limits.
///
/// # Errors
/// No front door, a proxy without an upstream, or a store that cannot be
/// opened.
pub async fn run(
    listeners: Listeners,
    shutdown: impl Future<Output = ()> + Send + 'static,
    config: Config,
) -> Result<(), String> {
    let info = ConfigInfo::now(version_of_text(&format!("{config:?}")));
    let mut listen = ByDoor::default();
    for (door, listener) in listeners.doors.iter() {
        listen.set(
            door,
            Some(listener.local_addr().map_err(|e| e.to_string())?),
        );
    }
    let ops = match &listeners.ops {
        Some(l) => Some(l.local_addr().map_err(|e| e.to_string())?),
        None => None,
    };
    let plan = Plan {
        config,
        envoy: Arc::default(),
        listen,
        ops,
    };
    serve(listeners, shutdown, plan, info, None).await
}

/// Serves as [`run`] does with `first` (loaded as version `version`), and
/// reloads the config from `source` on SIGHUP and when a file changes
/// (docs/operations.md): in-flight requests finish on the config they
/// started with, new ones see the new config, and a config that does not
/// load changes nothing.
///
/// # Errors
/// As [`run`].
pub async fn run_reloading(
    listeners: Listeners,
    shutdown: impl Future<Output = ()> + Send + 'static,
    first: Plan,
    version: String,
    source: Source,
) -> Result<(), String> {
    let info = ConfigInfo::now(version);
    serve(listeners, shutdown, first, info, Some(source)).await
}

/// Opens the store, builds the first generation of doors, opens each
/// door, then serves them, one task per door, beside the upkeep tasks,
/// until `shutdown`; the ops listener until every door has drained.
async fn serve(
    listeners: Listeners,
    shutdown: impl Future<Output = ()> + Send + 'static,
    mut plan: Plan,
    info: ConfigInfo,
    reload: Option<Source>,
) -> Result<(), String> {
    crate::doors::check(&plan.config, &listeners.doors)?;
    // Here, the one path every entry takes: the OTEL_* variables over
    // [tracing] (docs/tracing.md). Read at start only, as the listeners.
    crate::telemetry::env::apply(&mut plan.config.tracing)?;
    let telemetry = crate::telemetry::start(&plan.config.tracing)?;
    let served = serve_traced(listeners, shutdown, plan, info, reload).await;
    telemetry.shutdown().await;
    served
}

/// [`serve`] once tracing is set up.
async fn serve_traced(
    listeners: Listeners,
    shutdown: impl Future<Output = ()> + Send + 'static,
    mut plan: Plan,
    info: ConfigInfo,
    reload: Option<Source>,
) -> Result<(), String> {
    let Listeners {
        doors: listeners,
        ops,
        reference,
        grpc,
    } = listeners;
    // The recorder first, so the gate's zero series land in it.
    let metrics = crate::metrics::handle();
    let store = &plan.config.store;
    let store = Arc::new(open_store(&store.url, store, true).await?);
    let shared = Shared {
        store,
        served: listeners.map(|_, _| ()),
        metrics,
        status: Arc::new(ReloadStatus::new()),
        reference: Arc::default(),
        health: Arc::new(Health::new()),
        swap: Arc::default(),
    };
    // Under xDS the first load is the first snapshot, counted as it is
    // applied (the reference counts no load before it).
    if plan.config.envoy_settings.xds.is_none() {
        shared.status.first_load();
    }
    record_loaded(&info);
    tracing::info!(
        "config version {} loaded at {}",
        info.version,
        rfc3339(info.loaded_at)
    );
    // Under xDS the Envoy limits are its alone (docs/xds.md), none until
    // the first response: whatever entry filled `[envoy.xds]`.
    let xds = plan.config.envoy_settings.xds.clone();
    if xds.is_some() {
        plan.envoy = Arc::new(EnvoyLimits::awaiting_xds());
    }
    let first = Arc::new(Generation::build(plan, info, &shared, None)?);
    let files_version = first.info.version.clone();
    let live = Arc::new(ArcSwap::new(Arc::clone(&first)));
    // Blocks and runtime overrides a shared store holds apply from the
    // first check (docs/admin.md).
    if let Err(e) = first.gate.limiter().refresh_runtime().await {
        tracing::warn!(
            "runtime table (blocks, overrides) not read at start: {e}; retrying in the background"
        );
    }

    let (stop_tx, stop_rx) = watch::channel(false);
    // The ops listener stops only once the doors have drained: a probe
    // meanwhile reads `draining`, not a refused connection.
    let (ops_stop_tx, ops_stop_rx) = watch::channel(false);
    // The ops listener opens first, so its address is in the log before
    // the doors' (which tests and scripts wait for).
    let mut ops: Vec<doors::Serving> = ops
        .map(|listener| doors::open_ops(listener, &live, ops_stop_rx.clone()))
        .transpose()?
        .into_iter()
        .collect();
    let reference_state = reference.as_ref().map(|ports| Arc::clone(&ports.state));
    if let Some(ports) = reference {
        ops.extend(doors::open_reference(
            ports,
            &live,
            &shared.health,
            &ops_stop_rx,
        )?);
    }
    drop(ops_stop_rx);
    // Served from here: under xDS, while the first config is awaited.
    let ops: Vec<_> = ops.into_iter().map(tokio::spawn).collect();
    let mut shutdown = Box::pin(shutdown);
    if let Some(settings) = xds {
        let wait = !settings.start_without_config;
        let server = settings.server.clone();
        let mut loaded =
            crate::xds::spawn(settings, Arc::clone(&live), shared.clone(), stop_rx.clone())?;
        if let Some(state) = &reference_state {
            state.follow_xds(loaded.clone());
        }
        if wait {
            // As the reference: no door serves before the first config
            // (`start_without_config` serves at once, answering errors).
            tracing::info!("waiting for the first xDS config from {server} before serving");
            tokio::select! {
                () = async { let _ = loaded.wait_for(|l| *l).await; } => {}
                () = &mut shutdown => {
                    let _ = stop_tx.send(true);
                    let _ = ops_stop_tx.send(true);
                    for listener in ops {
                        let _ = listener.await;
                    }
                    return Ok(());
                }
            }
        }
    }
    // The generation the doors open with: the xDS config's, if waited for.
    let first = live.load_full();
    // Every door opens (and logs where) before any is served: one that
    // cannot open (the admin API without a token) stops the start.
    let mut opened = Vec::new();
    for (door, listener) in listeners.into_values() {
        let grpc = if door == Door::Envoy {
            grpc.clone()
        } else {
            GrpcOptions::default()
        };
        opened.push(doors::open(door, listener, &first, &live, stop_rx.clone(), grpc).await?);
    }
    let health = Arc::clone(&shared.health);
    tokio::spawn(async move {
        shutdown.await;
        // Before the doors stop accepting: from here `/readyz` is a 503.
        health.start_draining();
        let _ = stop_tx.send(true);
    });
    upkeep(reload, files_version, &live, &shared, &stop_rx);
    let mut serving = JoinSet::new();
    for door in opened {
        serving.spawn(door);
    }
    drop(stop_rx);
    drop(first);
    while let Some(done) = serving.join_next().await {
        if let Err(e) = done {
            tracing::error!("a front door failed: {e}");
        }
    }
    let _ = ops_stop_tx.send(true);
    for listener in ops {
        if let Err(e) = listener.await {
            tracing::error!("the ops listener failed: {e}");
        }
    }
    Ok(())
}

/// Spawns the tasks beside the doors, until `stop`: the reload task (with
/// a `source`), the metrics upkeep and the store probe.
fn upkeep(
    source: Option<Source>,
    files_version: String,
    live: &Arc<ArcSwap<Generation>>,
    shared: &Shared,
    stop: &watch::Receiver<bool>,
) {
    if let Some(source) = source {
        let reloader = Reloader {
            seen: files_version,
            source: Arc::new(source),
            live: Arc::clone(live),
            shared: shared.clone(),
        };
        tokio::spawn(reloader.run(stop.clone()));
    }
    // Histogram samples pile up in the recorder until upkeep drains them;
    // a scrape runs it, but a server nobody scrapes must not grow (measured:
    // ~20 bytes per check without this).
    let recorder = shared.metrics.clone();
    let mut until = stop.clone();
    tokio::spawn(async move {
        let mut every = tokio::time::interval(std::time::Duration::from_secs(5));
        loop {
            tokio::select! {
                _ = every.tick() => recorder.run_upkeep(),
                _ = until.changed() => break,
            }
        }
    });
    // `tollgate_store_up` stays current with nobody calling `/readyz`:
    // once for an in-process store (it always answers), else every
    // STORE_PROBE_EVERY.
    let health = Arc::clone(&shared.health);
    let once = tollgate::Store::in_process(&*shared.store);
    let live = Arc::clone(live);
    let mut stop = stop.clone();
    tokio::spawn(async move {
        let mut every = tokio::time::interval(STORE_PROBE_EVERY);
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = every.tick() => {
                    let gate = Arc::clone(&live.load().gate);
                    // Noted in `health`: `/readyz` reports it (under
                    // readiness `serving`) and the gauge shows it.
                    let _ = health.probe(&gate).await;
                    if once {
                        break;
                    }
                }
                _ = stop.changed() => break,
            }
        }
    });
}

/// Serves one front door on `listener` exactly as [`run`] serves its own
/// (the same HTTP/1.1 settings, connection limit, head watchdog and drain),
/// with the service `make` builds for each connection's peer, until
/// `shutdown` resolves; then drains. A client that takes nothing of an
/// answer for a whole `send_timeout` period is closed. For a service of your own behind
/// tollgate's connection handling; `bench/tools/http_ceiling.rs` uses it to
/// measure what the HTTP layer alone costs a check.
pub async fn serve_with<M, S, B>(
    listener: TcpListener,
    name: &'static str,
    send_timeout: Duration,
    shutdown: impl Future<Output = ()> + Send + 'static,
    make: M,
) where
    M: Fn(SocketAddr) -> S + Send + 'static,
    S: hyper::service::Service<Request<Incoming>, Response = Response<B>> + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    B: http_body::Body + Send + Unpin + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    serve_with_protocols(
        listener,
        name,
        send_timeout,
        Protocols::default(),
        shutdown,
        make,
    )
    .await;
}

/// [`serve_with`], the connections also speaking what `protocols` say:
/// HTTP/2 with prior knowledge (h2c) beside HTTP/1.1, told apart per
/// connection, and TLS (ALPN choosing `h2` or `http/1.1`). The watchdogs,
/// the connection limit and the drain are the same for both protocols (an
/// HTTP/2 connection's requests are its streams).
pub async fn serve_with_protocols<M, S, B>(
    listener: TcpListener,
    name: &'static str,
    send_timeout: Duration,
    protocols: Protocols,
    shutdown: impl Future<Output = ()> + Send + 'static,
    make: M,
) where
    M: Fn(SocketAddr) -> S + Send + 'static,
    S: hyper::service::Service<Request<Incoming>, Response = Response<B>> + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    B: http_body::Body + Send + Unpin + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let mut shutdown = std::pin::pin!(shutdown);
    let builders = Builders::new();
    let graceful = GracefulShutdown::new();
    let mut acceptor = Acceptor::new(&listener, name, MAX_CONNECTIONS);
    loop {
        let Some((stream, peer, permit)) = acceptor.next(&mut shutdown).await else {
            break;
        };
        let activity = Arc::new(Activity::new());
        let service = Watched {
            inner: make(peer),
            activity: Arc::clone(&activity),
        };
        let stream = Conn::new(stream, permit, Some(Arc::clone(&activity)));
        let accepted = Accepted {
            name,
            peer,
            activity,
            send_timeout,
        };
        tokio::spawn(serve_conn(
            stream,
            protocols.clone(),
            builders.clone(),
            service,
            graceful.watcher(),
            accepted,
        ));
    }
    drop(listener);
    tracing::info!("{name}: stopped accepting; draining in-flight requests");
    if tokio::time::timeout(DRAIN_TIMEOUT, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!("{name}: requests still in flight after {DRAIN_TIMEOUT:?}; closing them");
    } else {
        tracing::info!("{name}: drained");
    }
}

/// Resolves once `stop` is true (or its sender is gone).
pub(super) async fn stopped(mut stop: watch::Receiver<bool>) {
    let _ = stop.wait_for(|s| *s).await;
}
