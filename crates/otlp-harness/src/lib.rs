//! A real OTLP trace receiver for tests: the collector's
//! `opentelemetry.proto.collector.trace.v1.TraceService/Export` over gRPC
//! and `POST /v1/traces` (protobuf) over HTTP, on free loopback ports,
//! decoding with the published OTLP protos (`opentelemetry-proto`). It
//! keeps every span it is sent, flattened to [`ReceivedSpan`], and lets a
//! test wait for the spans it expects: woken by each export, never by a
//! timer (the deadline only bounds a failing test). Both doors can be
//! served over TLS, with client certificates required ([`ServerTls`]).
//!
//! ```no_run
//! let otlp = otlp_harness::Receiver::start();
//! // start the program under test with OTEL_EXPORTER_OTLP_ENDPOINT = otlp.grpc_endpoint()
//! let spans = otlp.wait_for(|s| s.iter().any(|s| s.name == "work"));
//! assert_eq!(spans[0].protocol, otlp_harness::Protocol::Grpc);
//! ```

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt as _, Full};
use hyper::{Request, Response, StatusCode};
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value};
use prost::Message as _;
use tokio::net::TcpListener;

mod tls;
use tls::Io;
pub use tls::ServerTls;

/// How long [`Receiver::wait_for`] waits before failing the test.
pub const WAIT: Duration = Duration::from_secs(30);

/// Which door a span came in by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    /// OTLP/gRPC.
    Grpc,
    /// OTLP/HTTP, protobuf.
    Http,
}

/// One span as received, ids in lowercase hex (the parent's empty for a
/// root), attribute values as text (strings bare, others as written).
#[derive(Debug, Clone, PartialEq)]
pub struct ReceivedSpan {
    /// The span's name.
    pub name: String,
    /// Its trace id (32 hex digits).
    pub trace_id: String,
    /// Its span id (16 hex digits).
    pub span_id: String,
    /// Its parent's span id, or empty.
    pub parent_span_id: String,
    /// Its kind (OTLP numbering: 1 internal, 2 server, 3 client).
    pub kind: i32,
    /// Its status code (OTLP numbering: 0 unset, 1 ok, 2 error).
    pub status: i32,
    /// Its attributes.
    pub attributes: BTreeMap<String, String>,
    /// Its resource's attributes.
    pub resource: BTreeMap<String, String>,
    /// The door it came in by.
    pub protocol: Protocol,
    /// The headers (gRPC metadata) of the export that carried it.
    pub headers: BTreeMap<String, String>,
}

impl ReceivedSpan {
    /// The attribute `key`, if set.
    #[must_use]
    pub fn attr(&self, key: &str) -> Option<&str> {
        self.attributes.get(key).map(String::as_str)
    }
}

/// The span kind `SERVER` in OTLP's numbering.
pub const KIND_SERVER: i32 = 2;

#[derive(Default)]
struct Store {
    spans: Mutex<Vec<ReceivedSpan>>,
    arrived: Condvar,
    /// Spans received, kept or not.
    count: std::sync::atomic::AtomicU64,
    /// Only count (a benchmark's sink: nothing grows).
    count_only: bool,
}

impl Store {
    fn lock(&self) -> MutexGuard<'_, Vec<ReceivedSpan>> {
        self.spans
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn add(
        &self,
        request: &ExportTraceServiceRequest,
        protocol: Protocol,
        headers: &http::HeaderMap,
    ) {
        if self.count_only {
            let n: usize = request
                .resource_spans
                .iter()
                .flat_map(|rs| &rs.scope_spans)
                .map(|ss| ss.spans.len())
                .sum();
            self.count
                .fetch_add(n as u64, std::sync::atomic::Ordering::Relaxed);
            return;
        }
        let headers: BTreeMap<String, String> = headers
            .iter()
            .filter_map(|(k, v)| Some((k.as_str().to_owned(), v.to_str().ok()?.to_owned())))
            .collect();
        let mut spans = self.lock();
        for rs in &request.resource_spans {
            let resource = rs
                .resource
                .as_ref()
                .map(|r| flatten(&r.attributes))
                .unwrap_or_default();
            for ss in &rs.scope_spans {
                for s in &ss.spans {
                    spans.push(ReceivedSpan {
                        name: s.name.clone(),
                        trace_id: hex(&s.trace_id),
                        span_id: hex(&s.span_id),
                        parent_span_id: hex(&s.parent_span_id),
                        kind: s.kind,
                        status: s.status.as_ref().map_or(0, |st| st.code),
                        attributes: flatten(&s.attributes),
                        resource: resource.clone(),
                        protocol,
                        headers: headers.clone(),
                    });
                }
            }
        }
        drop(spans);
        self.arrived.notify_all();
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn flatten(kvs: &[KeyValue]) -> BTreeMap<String, String> {
    kvs.iter()
        .map(|kv| (kv.key.clone(), text(kv.value.as_ref())))
        .collect()
}

fn text(v: Option<&AnyValue>) -> String {
    match v.and_then(|v| v.value.as_ref()) {
        Some(any_value::Value::StringValue(s)) => s.clone(),
        Some(any_value::Value::BoolValue(b)) => b.to_string(),
        Some(any_value::Value::IntValue(i)) => i.to_string(),
        Some(any_value::Value::DoubleValue(d)) => d.to_string(),
        Some(other) => format!("{other:?}"),
        None => String::new(),
    }
}

/// The receiver: both doors, served on a thread of their own until it
/// is dropped.
pub struct Receiver {
    grpc: SocketAddr,
    http: SocketAddr,
    /// With TLS: the name in the endpoints.
    tls_name: Option<String>,
    store: Arc<Store>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl std::fmt::Debug for Receiver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Receiver")
            .field("grpc", &self.grpc)
            .field("http", &self.http)
            .finish_non_exhaustive()
    }
}

struct Grpc(Arc<Store>);

#[tonic::async_trait]
impl TraceService for Grpc {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        let headers = request.metadata().clone().into_headers();
        self.0.add(request.get_ref(), Protocol::Grpc, &headers);
        Ok(tonic::Response::new(ExportTraceServiceResponse::default()))
    }
}

impl Receiver {
    /// Starts both doors on free loopback ports.
    ///
    /// # Panics
    /// When a port cannot be bound or the thread cannot start.
    #[must_use]
    pub fn start() -> Self {
        Self::start_with(false, None)
    }

    /// Starts both doors over TLS (mTLS with a client CA); the endpoints
    /// are then `https://NAME:PORT`, `NAME` the certificate's.
    ///
    /// # Panics
    /// As [`Receiver::start`], and on a bad TLS file.
    #[must_use]
    pub fn start_tls(tls: &ServerTls) -> Self {
        Self::start_with(false, Some(tls))
    }

    /// A receiver that only counts the spans it is sent
    /// ([`Receiver::count`]): a benchmark's sink, whose memory stays flat.
    ///
    /// # Panics
    /// As [`Receiver::start`].
    #[must_use]
    pub fn counting() -> Self {
        Self::start_with(true, None)
    }

    fn start_with(count_only: bool, tls: Option<&ServerTls>) -> Self {
        let acceptors = tls.map(|t| (t.acceptor(b"h2"), t.acceptor(b"http/1.1")));
        let (grpc_tls, http_tls) = acceptors.unzip();
        let store = Arc::new(Store {
            count_only,
            ..Store::default()
        });
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("a runtime for the OTLP receiver");
        let (grpc_listener, http_listener) = runtime.block_on(async {
            (
                TcpListener::bind("127.0.0.1:0").await.expect("bind gRPC"),
                TcpListener::bind("127.0.0.1:0").await.expect("bind HTTP"),
            )
        });
        let grpc = grpc_listener.local_addr().expect("address");
        let http = http_listener.local_addr().expect("address");
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let served = Arc::clone(&store);
        let thread = std::thread::Builder::new()
            .name("otlp-receiver".into())
            .spawn(move || {
                runtime.block_on(async move {
                    let incoming = tokio_stream_of(grpc_listener, grpc_tls);
                    let grpc = tonic::transport::Server::builder()
                        .add_service(TraceServiceServer::new(Grpc(Arc::clone(&served))))
                        .serve_with_incoming(incoming);
                    tokio::select! {
                        _ = grpc => {}
                        () = serve_http(http_listener, http_tls, served) => {}
                        _ = stopped => {}
                    }
                });
            })
            .expect("the OTLP receiver's thread");
        Self {
            grpc,
            http,
            tls_name: tls.map(|t| t.name.clone()),
            store,
            stop: Some(stop),
            thread: Some(thread),
        }
    }

    /// The gRPC endpoint, `http://127.0.0.1:PORT` (`https://NAME:PORT`
    /// over TLS).
    #[must_use]
    pub fn grpc_endpoint(&self) -> String {
        self.endpoint(self.grpc)
    }

    /// The HTTP endpoint's base, `http://127.0.0.1:PORT` (`https://NAME:PORT`
    /// over TLS; spans go to `/v1/traces` under it).
    #[must_use]
    pub fn http_endpoint(&self) -> String {
        self.endpoint(self.http)
    }

    fn endpoint(&self, addr: SocketAddr) -> String {
        match &self.tls_name {
            Some(name) => format!("https://{name}:{}", addr.port()),
            None => format!("http://{addr}"),
        }
    }

    /// How many spans a [`Receiver::counting`] receiver was sent.
    #[must_use]
    pub fn count(&self) -> u64 {
        self.store.count.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Every span received so far.
    #[must_use]
    pub fn spans(&self) -> Vec<ReceivedSpan> {
        self.store.lock().clone()
    }

    /// Waits until the spans received satisfy `done`, woken by each
    /// export, and returns them.
    ///
    /// # Panics
    /// When [`WAIT`] passes first (the test fails, listing what came).
    pub fn wait_for(&self, done: impl Fn(&[ReceivedSpan]) -> bool) -> Vec<ReceivedSpan> {
        let deadline = Instant::now() + WAIT;
        let mut spans = self.store.lock();
        while !done(&spans) {
            let left = deadline.saturating_duration_since(Instant::now());
            assert!(
                !left.is_zero(),
                "the spans expected did not arrive within {WAIT:?}; received: {:#?}",
                *spans
            );
            spans = self
                .store
                .arrived
                .wait_timeout(spans, left)
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .0;
        }
        spans.clone()
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// `listener`'s connections as the stream tonic serves; with `tls`,
/// those whose handshake succeeds (a refused one is dropped, as a
/// collector drops it).
fn tokio_stream_of(
    listener: TcpListener,
    tls: Option<tokio_rustls::TlsAcceptor>,
) -> impl futures_core::Stream<Item = std::io::Result<Io>> {
    futures_util::stream::unfold((listener, tls), |(listener, tls)| async move {
        loop {
            let tcp = match listener.accept().await {
                Ok((tcp, _)) => tcp,
                Err(e) => return Some((Err(e), (listener, tls))),
            };
            let io = match &tls {
                None => Io::Plain(tcp),
                Some(acceptor) => match acceptor.accept(tcp).await {
                    Ok(s) => Io::Tls(Box::new(s)),
                    Err(_) => continue,
                },
            };
            return Some((Ok(io), (listener, tls)));
        }
    })
}

/// `POST /v1/traces` with an `application/x-protobuf` body.
async fn serve_http(
    listener: TcpListener,
    tls: Option<tokio_rustls::TlsAcceptor>,
    store: Arc<Store>,
) {
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        let store = Arc::clone(&store);
        let tls = tls.clone();
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |req: Request<hyper::body::Incoming>| {
                let store = Arc::clone(&store);
                async move { Ok::<_, Infallible>(export_http(req, &store).await) }
            });
            let io = match tls {
                None => Io::Plain(stream),
                Some(acceptor) => match acceptor.accept(stream).await {
                    Ok(s) => Io::Tls(Box::new(s)),
                    Err(_) => return,
                },
            };
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(hyper_util::rt::TokioIo::new(io), service)
                .await;
        });
    }
}

async fn export_http(req: Request<hyper::body::Incoming>, store: &Store) -> Response<Full<Bytes>> {
    let answer = |status: StatusCode, body: Vec<u8>| {
        let mut res = Response::new(Full::new(Bytes::from(body)));
        *res.status_mut() = status;
        res.headers_mut().insert(
            http::header::CONTENT_TYPE,
            http::HeaderValue::from_static("application/x-protobuf"),
        );
        res
    };
    if req.uri().path() != "/v1/traces" || req.method() != http::Method::POST {
        return answer(StatusCode::NOT_FOUND, Vec::new());
    }
    let (parts, body) = req.into_parts();
    let Ok(body) = body
        .collect()
        .await
        .map(http_body_util::Collected::to_bytes)
    else {
        return answer(StatusCode::BAD_REQUEST, Vec::new());
    };
    match ExportTraceServiceRequest::decode(body) {
        Ok(request) => {
            store.add(&request, Protocol::Http, &parts.headers);
            answer(
                StatusCode::OK,
                ExportTraceServiceResponse::default().encode_to_vec(),
            )
        }
        Err(_) => answer(StatusCode::BAD_REQUEST, Vec::new()),
    }
}
