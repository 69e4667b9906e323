//! A test ADS server ([`AdsServer`]) that behaves, for a rate limit
//! service subscribing to `RateLimitConfig`, as Envoy Gateway's xDS server
//! does: go-control-plane's snapshot cache (keyed by node id, not ordered)
//! under its state-of-the-world server. The rules are in `cache.rs`; this
//! file serves them over gRPC (envoy-types' ADS stubs on tonic), plain or
//! with TLS 1.3 and mTLS (`tls.rs`).
//!
//! Every stream opened, request received (and whether it was ignored),
//! response sent and stream closed is recorded as an [`Event`]; tests
//! wait on events ([`AdsServer::wait_for`]), never on sleeps. A server can
//! be stopped (every stream ends `UNAVAILABLE`, the port closes) and a new
//! one started on the same port, with fresh state as after a restart of
//! Envoy Gateway.
//!
//! ```no_run
//! # async fn demo() {
//! use xds_harness::{AdsServer, Snapshot};
//! let server = AdsServer::start(None).await;
//! server.set("envoy-ratelimit", Snapshot::default());
//! let first = server
//!     .wait_for("a request", |events| events.iter().find_map(|e| e.request()).cloned())
//!     .await;
//! # let _ = first;
//! # }
//! ```

use std::collections::HashMap;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use envoy_types::pb::envoy::service::discovery::v3::aggregated_discovery_service_server::{
    AggregatedDiscoveryService, AggregatedDiscoveryServiceServer,
};
use envoy_types::pb::envoy::service::discovery::v3::{
    DeltaDiscoveryRequest, DeltaDiscoveryResponse, DiscoveryRequest, DiscoveryResponse,
};
use envoy_types::pb::google::protobuf::Any;
use tokio::net::TcpListener;
use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinHandle;
use tokio_stream::wrappers::UnboundedReceiverStream;
use tonic::{Request, Response, Status, Streaming};

mod cache;
mod tls;

pub use cache::Snapshot;
pub use tls::ServerTls;

use cache::{Action, Cache};
use tls::{Io, Stream};

/// The type URL of the reference's `RateLimitConfig`.
pub const RATE_LIMIT_CONFIG_TYPE: &str =
    "type.googleapis.com/ratelimit.config.ratelimit.v3.RateLimitConfig";

/// How long [`AdsServer::wait_for`] waits before failing the test:
/// generous, since a wait ends as soon as the event is there.
pub const WAIT: Duration = Duration::from_secs(60);

/// Something that happened on the server, in order.
#[derive(Debug, Clone)]
pub enum Event {
    /// A stream opened.
    Opened {
        /// The stream's number (1, 2, … per server).
        stream: u64,
    },
    /// A request arrived.
    Request {
        /// The stream.
        stream: u64,
        /// The request.
        request: Box<DiscoveryRequest>,
        /// Ignored for a stale nonce.
        ignored: bool,
    },
    /// A response was sent.
    Response {
        /// The stream.
        stream: u64,
        /// The response.
        response: Box<DiscoveryResponse>,
    },
    /// A stream ended (by the client, an error, or the server).
    Closed {
        /// The stream.
        stream: u64,
    },
    /// A TLS handshake failed (no or a bad client certificate, ...).
    HandshakeFailed {
        /// Why, as rustls said.
        error: String,
    },
}

impl Event {
    /// The request, if this is one.
    #[must_use]
    pub fn request(&self) -> Option<&DiscoveryRequest> {
        match self {
            Event::Request { request, .. } => Some(request),
            _ => None,
        }
    }

    /// The response, if this is one.
    #[must_use]
    pub fn response(&self) -> Option<&DiscoveryResponse> {
        match self {
            Event::Response { response, .. } => Some(response),
            _ => None,
        }
    }

    /// A NACK: a request with an `error_detail`.
    #[must_use]
    pub fn nack(&self) -> Option<&DiscoveryRequest> {
        self.request().filter(|r| r.error_detail.is_some())
    }

    /// An ACK: a request answering a response (a nonce) without an error.
    #[must_use]
    pub fn ack(&self) -> Option<&DiscoveryRequest> {
        self.request()
            .filter(|r| r.error_detail.is_none() && !r.response_nonce.is_empty())
    }
}

/// The state every stream's task shares.
#[derive(Default)]
struct State {
    cache: Cache,
    events: Vec<Event>,
    streams: HashMap<u64, mpsc::UnboundedSender<Result<DiscoveryResponse, Status>>>,
    next_stream: u64,
}

struct Shared {
    state: Mutex<State>,
    /// Bumped on each event, for waiters.
    changed: watch::Sender<u64>,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        // A panicking test thread cannot leave the state half-changed in a
        // way that matters here.
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn record(&self, state: &mut State, event: Event) {
        state.events.push(event);
        self.changed.send_modify(|n| *n += 1);
    }

    /// Sends `response` on `stream` and records it.
    fn send(&self, state: &mut State, stream: u64, response: DiscoveryResponse) {
        if let Some(tx) = state.streams.get(&stream) {
            let _ = tx.send(Ok(response.clone()));
        }
        let response = Box::new(response);
        self.record(state, Event::Response { stream, response });
    }
}

#[derive(Clone)]
struct Service(Arc<Shared>);

type Responses = UnboundedReceiverStream<Result<DiscoveryResponse, Status>>;
type DeltaResponses =
    Pin<Box<dyn tokio_stream::Stream<Item = Result<DeltaDiscoveryResponse, Status>> + Send>>;

#[tonic::async_trait]
impl AggregatedDiscoveryService for Service {
    type StreamAggregatedResourcesStream = Responses;
    type DeltaAggregatedResourcesStream = DeltaResponses;

    async fn stream_aggregated_resources(
        &self,
        request: Request<Streaming<DiscoveryRequest>>,
    ) -> Result<Response<Responses>, Status> {
        let mut inbound = request.into_inner();
        let (tx, rx) = mpsc::unbounded_channel();
        let shared = Arc::clone(&self.0);
        let id = {
            let mut state = shared.lock();
            state.next_stream += 1;
            let id = state.next_stream;
            state.cache.open(id);
            state.streams.insert(id, tx);
            shared.record(&mut state, Event::Opened { stream: id });
            id
        };
        tokio::spawn(async move {
            while let Ok(Some(request)) = inbound.message().await {
                let mut state = shared.lock();
                let action = state.cache.request(id, &request);
                let ignored = action == Action::Ignored;
                let request = Box::new(request);
                shared.record(
                    &mut state,
                    Event::Request {
                        stream: id,
                        request,
                        ignored,
                    },
                );
                match action {
                    Action::Send(response) => shared.send(&mut state, id, response),
                    Action::End(status) => {
                        if let Some(tx) = state.streams.remove(&id) {
                            let _ = tx.send(Err(status));
                        }
                        break;
                    }
                    Action::Wait | Action::Ignored => {}
                }
            }
            let mut state = shared.lock();
            state.cache.close(id);
            state.streams.remove(&id);
            shared.record(&mut state, Event::Closed { stream: id });
        });
        Ok(Response::new(UnboundedReceiverStream::new(rx)))
    }

    async fn delta_aggregated_resources(
        &self,
        _request: Request<Streaming<DeltaDiscoveryRequest>>,
    ) -> Result<Response<DeltaResponses>, Status> {
        Err(Status::unimplemented("delta xDS is not served"))
    }
}

/// A running ADS server on a loopback port.
pub struct AdsServer {
    addr: SocketAddr,
    shared: Arc<Shared>,
    stop: Option<oneshot::Sender<()>>,
    kill: watch::Sender<bool>,
    accept: JoinHandle<()>,
    serve: JoinHandle<()>,
}

impl std::fmt::Debug for AdsServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AdsServer")
            .field("addr", &self.addr)
            .finish_non_exhaustive()
    }
}

impl AdsServer {
    /// Starts a server on a free loopback port; TLS with `tls`.
    pub async fn start(tls: Option<ServerTls>) -> AdsServer {
        Self::start_at("127.0.0.1:0".parse().expect("address"), tls).await
    }

    /// Starts a server on `addr` (a stopped server's, to restart it), with
    /// no snapshot and no streams. Panics if the port cannot be bound.
    pub async fn start_at(addr: SocketAddr, tls: Option<ServerTls>) -> AdsServer {
        let listener = TcpListener::bind(addr)
            .await
            .unwrap_or_else(|e| panic!("xds-harness: bind {addr}: {e}"));
        let addr = listener.local_addr().expect("xds-harness: local address");
        let shared = Arc::new(Shared {
            state: Mutex::new(State::default()),
            changed: watch::channel(0).0,
        });
        let acceptor = tls.map(|t| t.acceptor());
        let (kill_tx, kill) = watch::channel(false);
        let (conns_tx, conns_rx) = mpsc::unbounded_channel::<Result<Io, std::io::Error>>();
        let accept_shared = Arc::clone(&shared);
        // The accept loop owns the listener: aborting it closes the port.
        let accept = tokio::spawn(async move {
            loop {
                let Ok((tcp, _)) = listener.accept().await else {
                    continue;
                };
                let Some(acceptor) = acceptor.clone() else {
                    let _ = conns_tx.send(Ok(Io::new(Stream::Plain(tcp), kill.clone())));
                    continue;
                };
                let tx = conns_tx.clone();
                let kill = kill.clone();
                let shared = Arc::clone(&accept_shared);
                tokio::spawn(async move {
                    match acceptor.accept(tcp).await {
                        Ok(tls) => {
                            let io = Io::new(Stream::Tls(Box::new(tls)), kill);
                            let _ = tx.send(Ok(io));
                        }
                        Err(e) => {
                            let mut state = shared.lock();
                            let error = e.to_string();
                            shared.record(&mut state, Event::HandshakeFailed { error });
                        }
                    }
                });
            }
        });
        let (stop_tx, stop_rx) = oneshot::channel::<()>();
        let service = AggregatedDiscoveryServiceServer::new(Service(Arc::clone(&shared)))
            // grpc-go's default, which Envoy Gateway's server keeps: a
            // larger request (a huge NACK) ends the stream there, so here.
            .max_decoding_message_size(4 << 20)
            .max_encoding_message_size(usize::MAX);
        let serve = tokio::spawn(async move {
            let incoming = UnboundedReceiverStream::new(conns_rx);
            let _ = tonic::transport::Server::builder()
                .add_service(service)
                .serve_with_incoming_shutdown(incoming, async {
                    let _ = stop_rx.await;
                })
                .await;
        });
        AdsServer {
            addr,
            shared,
            stop: Some(stop_tx),
            kill: kill_tx,
            accept,
            serve,
        }
    }

    /// The address served.
    #[must_use]
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Sets `node`'s snapshot; every stream of that node waiting with
    /// another version is answered at once.
    pub fn set(&self, node: &str, snapshot: Snapshot) {
        let mut state = self.shared.lock();
        for (stream, response) in state.cache.set(node, snapshot) {
            self.shared.send(&mut state, stream, response);
        }
    }

    /// Sets `node`'s snapshot from `(name, encoded RateLimitConfig)` pairs.
    pub fn set_configs(&self, node: &str, version: &str, configs: Vec<(String, Vec<u8>)>) {
        let resources = configs
            .into_iter()
            .map(|(name, value)| {
                let any = Any {
                    type_url: RATE_LIMIT_CONFIG_TYPE.to_owned(),
                    value,
                };
                (name, any)
            })
            .collect();
        let version = version.to_owned();
        self.set(node, Snapshot { version, resources });
    }

    /// `node`'s snapshot now.
    #[must_use]
    pub fn snapshot(&self, node: &str) -> Option<Snapshot> {
        self.shared.lock().cache.snapshot(node).cloned()
    }

    /// Every event so far.
    #[must_use]
    pub fn events(&self) -> Vec<Event> {
        self.shared.lock().events.clone()
    }

    /// Waits until `found` returns something for the events so far (it
    /// is called again after each new event); panics after [`WAIT`],
    /// naming `what` and listing the events.
    pub async fn wait_for<T>(&self, what: &str, mut found: impl FnMut(&[Event]) -> Option<T>) -> T {
        let mut changed = self.shared.changed.subscribe();
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            changed.borrow_and_update();
            if let Some(t) = found(&self.shared.lock().events) {
                return t;
            }
            if tokio::time::timeout_at(deadline, changed.changed())
                .await
                .is_err()
            {
                panic!(
                    "xds-harness: no {what} within {WAIT:?}; events: {:#?}",
                    self.events()
                );
            }
        }
    }

    /// Stops: every stream ends with `UNAVAILABLE`, the port closes, the
    /// connections go. Returns the address, for [`AdsServer::start_at`].
    pub async fn stop(mut self) -> SocketAddr {
        self.accept.abort();
        let _ = (&mut self.accept).await;
        {
            let mut state = self.shared.lock();
            for (_, tx) in state.streams.drain() {
                let _ = tx.send(Err(Status::unavailable("the ADS server is stopping")));
            }
        }
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        // Graceful first, so a client reads the status above; then every
        // connection still open (a client holding its side of a stream)
        // is cut, as a process exit would.
        if tokio::time::timeout(Duration::from_secs(1), &mut self.serve)
            .await
            .is_err()
        {
            let _ = self.kill.send(true);
            if tokio::time::timeout(Duration::from_secs(10), &mut self.serve)
                .await
                .is_err()
            {
                self.serve.abort();
            }
        }
        self.addr
    }
}

impl Drop for AdsServer {
    fn drop(&mut self) {
        let _ = self.kill.send(true);
        self.accept.abort();
        self.serve.abort();
    }
}
