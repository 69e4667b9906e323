//! An upstream that answers as OpenAI's and Anthropic's APIs do, with
//! their documented example responses replayed byte for byte
//! (`tests/data/llm/`, whose README names each one's source page):
//!
//! * `POST /v1/chat/completions`, `/v1/responses`, `/v1/messages`: the
//!   example JSON (`application/json`), or with `"stream": true` in the
//!   request body the example stream (`text/event-stream`), one SSE event
//!   per body frame, a pause of a millisecond between two, so that many
//!   streams are in flight at once;
//! * anything else: 404.
//!
//! Every answer also carries the example's total usage in
//! [`USAGE_HEADER`], so that a `response_header:` cost can charge it
//! today; the providers send no such field. Served over plain HTTP
//! (HTTP/1.1, or HTTP/2 with prior knowledge), or over TLS
//! ([`Replay::start_tls`]) with a certificate of a test CA ([`TestCa`]),
//! offering `h2` and `http/1.1` by ALPN as the providers do; it counts the
//! answers it sent over HTTP/2 ([`Replay::served_h2`]).

use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::{Request, Response};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

use super::eg_certs::openssl;
use super::loopback::LoopbackServer;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The response field that carries an example's total usage.
pub const USAGE_HEADER: &str = "x-replay-usage-total";

/// One documented example: where it is served, and what it reports.
#[derive(Debug, Clone, Copy)]
pub struct Shape {
    /// The request path that gets it.
    pub path: &'static str,
    /// Whether it answers a request with `"stream": true`.
    pub stream: bool,
    /// Its file in `tests/data/llm/`.
    pub file: &'static str,
    /// Input tokens it reports (Anthropic: with the cache fields).
    pub input: u64,
    /// Output tokens it reports.
    pub output: u64,
    /// Its total (OpenAI: `total_tokens`; Anthropic: input + output).
    pub total: u64,
    /// The text an SDK assembles from it.
    pub text: &'static str,
}

/// The six examples: chat completions, the responses API and Anthropic's
/// messages, each as JSON and as a stream.
pub const SHAPES: [Shape; 6] = [
    Shape {
        path: "/v1/chat/completions",
        stream: false,
        file: "openai-chat.json",
        input: 19,
        output: 10,
        total: 29,
        text: "Hello! How can I assist you today?",
    },
    Shape {
        path: "/v1/chat/completions",
        stream: true,
        file: "openai-chat-stream.sse",
        input: 9,
        output: 12,
        total: 21,
        text: "Hello",
    },
    Shape {
        path: "/v1/responses",
        stream: false,
        file: "openai-responses.json",
        input: 36,
        output: 87,
        total: 123,
        text: "In a peaceful grove beneath a silver moon, a unicorn named Lumina discovered a hidden pool that reflected the stars. As she dipped her horn into the water, the pool began to shimmer, revealing a pathway to a magical realm of endless night skies. Filled with wonder, Lumina whispered a wish for all who dream to find their own hidden magic, and as she glanced back, her hoofprints sparkled like stardust.",
    },
    Shape {
        path: "/v1/responses",
        stream: true,
        file: "openai-responses-stream.sse",
        input: 37,
        output: 11,
        total: 48,
        text: "Hi there! How can I assist you today?",
    },
    Shape {
        path: "/v1/messages",
        stream: false,
        file: "anthropic-messages.json",
        input: 2095,
        output: 503,
        total: 2598,
        text: "Hi! My name is Claude.",
    },
    Shape {
        path: "/v1/messages",
        stream: true,
        file: "anthropic-messages-stream.sse",
        input: 25,
        output: 15,
        total: 40,
        text: "Hello!",
    },
];

/// The example served for `path` and `stream`.
pub fn shape(path: &str, stream: bool) -> Option<&'static Shape> {
    SHAPES.iter().find(|s| s.path == path && s.stream == stream)
}

/// The example an SDK case of `llm_clients.py` (`openai-chat-stream`,
/// `anthropic`, ...) gets.
pub fn shape_of_api(api: &str) -> &'static Shape {
    let (base, stream) = match api.strip_suffix("-stream") {
        Some(base) => (base, true),
        None => (api, false),
    };
    let path = match base {
        "openai-chat" => "/v1/chat/completions",
        "openai-responses" => "/v1/responses",
        "anthropic" => "/v1/messages",
        other => panic!("no example for {other}"),
    };
    shape(path, stream).expect("every API has both examples")
}

/// The bytes of an example file.
pub fn fixture(file: &str) -> Vec<u8> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/llm")
        .join(file);
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// A test CA and a server certificate it signed for `localhost` and
/// `127.0.0.1` (P-256 keys, PKCS#8), made with the `openssl` program;
/// the files live in a temp dir removed on drop.
pub struct TestCa {
    dir: tempfile::TempDir,
}

impl TestCa {
    /// Makes the CA and the server certificate.
    pub fn generate() -> TestCa {
        let dir = tempfile::tempdir().expect("tempdir");
        let d = dir.path();
        let ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1"];
        let mut ca = vec!["req", "-x509", "-nodes"];
        ca.extend(ec);
        ca.extend([
            "-keyout",
            "ca.key",
            "-out",
            "ca.pem",
            "-subj",
            "/CN=tollgate test CA",
            "-days",
            "2",
            "-addext",
            "basicConstraints=critical,CA:TRUE",
            "-addext",
            "keyUsage=critical,keyCertSign,cRLSign",
        ]);
        openssl(d, &ca);
        let mut csr = vec!["req", "-new", "-nodes"];
        csr.extend(ec);
        csr.extend([
            "-keyout",
            "server.key",
            "-out",
            "server.csr",
            "-subj",
            "/CN=localhost",
        ]);
        openssl(d, &csr);
        std::fs::write(
            d.join("server.ext"),
            "subjectAltName=DNS:localhost,IP:127.0.0.1\nbasicConstraints=CA:FALSE\n\
             keyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth\n\
             subjectKeyIdentifier=hash\nauthorityKeyIdentifier=keyid\n",
        )
        .expect("write server.ext");
        openssl(
            d,
            &[
                "x509",
                "-req",
                "-in",
                "server.csr",
                "-CA",
                "ca.pem",
                "-CAkey",
                "ca.key",
                "-CAcreateserial",
                "-out",
                "server.pem",
                "-days",
                "2",
                "-extfile",
                "server.ext",
            ],
        );
        TestCa { dir }
    }

    /// The CA certificate (PEM), for the clients to trust.
    pub fn ca(&self) -> PathBuf {
        self.dir.path().join("ca.pem")
    }

    /// The server certificate (PEM).
    pub fn cert(&self) -> PathBuf {
        self.dir.path().join("server.pem")
    }

    /// The server key (PEM, PKCS#8).
    pub fn key(&self) -> PathBuf {
        self.dir.path().join("server.key")
    }

    fn acceptor(&self) -> tokio_rustls::TlsAcceptor {
        let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(self.cert())
            .expect("server certificate")
            .collect::<Result<_, _>>()
            .expect("server certificate");
        let key = PrivateKeyDer::from_pem_file(self.key()).expect("server key");
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .expect("TLS versions")
            .with_no_client_auth()
            .with_single_cert(certs, key)
            .expect("certificate and key");
        config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        tokio_rustls::TlsAcceptor::from(Arc::new(config))
    }
}

/// A running replay upstream, stopped on drop.
pub struct Replay {
    /// Its address.
    pub addr: SocketAddr,
    tls: bool,
    served: Arc<Counts>,
    /// Stops it when dropped.
    _server: LoopbackServer,
}

impl Replay {
    /// Starts it over plain HTTP on a free loopback port.
    pub fn start() -> Replay {
        Self::spawn(None)
    }

    /// Starts it over TLS with `ca`'s server certificate.
    pub fn start_tls(ca: &TestCa) -> Replay {
        Self::spawn(Some(ca.acceptor()))
    }

    /// Its URL: `http://127.0.0.1:PORT`, or `https://localhost:PORT` (the
    /// name its certificate holds).
    pub fn url(&self) -> String {
        if self.tls {
            format!("https://localhost:{}", self.addr.port())
        } else {
            format!("http://{}", self.addr)
        }
    }

    /// Answers it has sent (each counted before its first byte).
    pub fn served(&self) -> u64 {
        self.served.all.load(Ordering::SeqCst)
    }

    /// Holds every stream after its first event until `n` streams have
    /// begun: then `n` answers are in flight through the proxy at once,
    /// whatever the timing. Later streams are not held.
    pub fn hold_streams(&self, n: u64) {
        self.served.hold.store(n, Ordering::SeqCst);
    }

    /// Whether the streams held by [`Replay::hold_streams`] all met (a
    /// proxy that let fewer through at once leaves them waiting until a
    /// 30 s deadline lets them go).
    pub fn streams_met(&self) -> bool {
        self.served.met.load(Ordering::SeqCst) && !self.served.gave_up.load(Ordering::SeqCst)
    }

    /// Those of [`Replay::served`] sent over HTTP/2.
    pub fn served_h2(&self) -> u64 {
        self.served.h2.load(Ordering::SeqCst)
    }

    fn spawn(tls: Option<tokio_rustls::TlsAcceptor>) -> Replay {
        let served = Arc::new(Counts::default());
        let counter = Arc::clone(&served);
        let is_tls = tls.is_some();
        let server = LoopbackServer::start(move |stream| {
            tokio::spawn(connection(stream, tls.clone(), Arc::clone(&counter)));
        });
        Replay {
            addr: server.addr,
            tls: is_tls,
            served,
            _server: server,
        }
    }
}

/// Answers sent, in all and over HTTP/2, and the streams' meeting point.
#[derive(Default)]
struct Counts {
    all: AtomicU64,
    h2: AtomicU64,
    /// Streams to hold after their first event until this many have
    /// begun (0: none held).
    hold: AtomicU64,
    begun: AtomicU64,
    met: std::sync::atomic::AtomicBool,
    gave_up: std::sync::atomic::AtomicBool,
    meet: tokio::sync::Notify,
}

impl Counts {
    /// Called by a stream after its first event: waits until
    /// [`Replay::hold_streams`]'s number of streams have begun (at most
    /// 30 s, so that a proxy that serializes fails the test instead of
    /// hanging it).
    async fn meet(&self) {
        let n = self.begun.fetch_add(1, Ordering::SeqCst) + 1;
        let hold = self.hold.load(Ordering::SeqCst);
        if hold == 0 || self.met.load(Ordering::SeqCst) {
            return;
        }
        if n >= hold {
            self.met.store(true, Ordering::SeqCst);
            self.meet.notify_waiters();
            return;
        }
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        loop {
            let notified = self.meet.notified();
            if self.met.load(Ordering::SeqCst) {
                return;
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                self.gave_up.store(true, Ordering::SeqCst);
                return;
            }
        }
    }
}

async fn connection(
    stream: tokio::net::TcpStream,
    tls: Option<tokio_rustls::TlsAcceptor>,
    served: Arc<Counts>,
) {
    let service = hyper::service::service_fn(move |req| answer(req, Arc::clone(&served)));
    // HTTP/1.1 or HTTP/2, told apart by the connection's first bytes
    // (after TLS, they follow what ALPN chose).
    let http = hyper_util::server::conn::auto::Builder::new(hyper_util::rt::TokioExecutor::new());
    match tls {
        None => {
            let _ = http
                .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                .await;
        }
        Some(acceptor) => {
            let Ok(stream) = acceptor.accept(stream).await else {
                return;
            };
            let _ = http
                .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                .await;
        }
    }
}

async fn answer(
    req: Request<Incoming>,
    served: Arc<Counts>,
) -> Result<Response<BoxBody<Bytes, BoxError>>, Infallible> {
    let path = req.uri().path().to_owned();
    let h2 = req.version() == hyper::Version::HTTP_2;
    let body = req
        .into_body()
        .collect()
        .await
        .map(http_body_util::Collected::to_bytes)
        .unwrap_or_default();
    let stream = serde_json::from_slice::<serde_json::Value>(&body)
        .ok()
        .and_then(|v| v.get("stream").and_then(serde_json::Value::as_bool))
        .unwrap_or(false);
    let Some(shape) = shape(&path, stream) else {
        let mut res = Response::new(full(Bytes::from_static(b"not found")));
        *res.status_mut() = hyper::StatusCode::NOT_FOUND;
        return Ok(res);
    };
    served.all.fetch_add(1, Ordering::SeqCst);
    if h2 {
        served.h2.fetch_add(1, Ordering::SeqCst);
    }
    let bytes = fixture(shape.file);
    let (content_type, body) = if shape.stream {
        ("text/event-stream; charset=utf-8", sse_body(bytes, served))
    } else {
        ("application/json", full(Bytes::from(bytes)))
    };
    let res = Response::builder()
        .header("content-type", content_type)
        .header(USAGE_HEADER, shape.total.to_string())
        .body(body)
        .expect("response");
    Ok(res)
}

fn full(bytes: Bytes) -> BoxBody<Bytes, BoxError> {
    Full::new(bytes)
        .map_err(|never: Infallible| match never {})
        .boxed()
}

/// The stream's events, one a frame (each with its blank line), a
/// millisecond apart; after the first, the stream meets the others
/// ([`Replay::hold_streams`]).
fn sse_body(bytes: Vec<u8>, served: Arc<Counts>) -> BoxBody<Bytes, BoxError> {
    let text = String::from_utf8(bytes).expect("an SSE example is UTF-8");
    let events: Vec<Bytes> = text
        .split_inclusive("\n\n")
        .map(|e| Bytes::from(e.to_owned()))
        .collect();
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<Frame<Bytes>, BoxError>>(1);
    tokio::spawn(async move {
        for (i, event) in events.into_iter().enumerate() {
            if tx.send(Ok(Frame::data(event))).await.is_err() {
                return;
            }
            if i == 0 {
                served.meet().await;
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    });
    StreamBody::new(tokio_stream::wrappers::ReceiverStream::new(rx)).boxed()
}
