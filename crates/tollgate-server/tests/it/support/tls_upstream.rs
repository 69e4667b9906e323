//! An HTTPS upstream for the proxy's TLS tests: rustls with a certificate
//! of a test CA ([`super::eg_certs::EgCerts`]), the ALPN protocols a test
//! offers (`h2` and/or `http/1.1`), client certificates required when a
//! CA for them is given. It counts the TCP connections it accepted.
//!
//! * `/version`: the body is the request's HTTP version as the upstream
//!   saw it (`HTTP/2.0`, `HTTP/1.1`).
//! * `/sse`: a `text/event-stream` answer: `data: one`, then nothing until
//!   the test calls [`TlsUpstream::release`], then `data: two`, then the
//!   end. A client that reads `one` before releasing proves the proxy
//!   passed it on alone (no buffering), with no clock involved.
//! * `/hang`: no answer until released (a stalled upstream).
//! * `/host`: the body says the request's `Host` field and its URI's
//!   authority (`:authority` in HTTP/2): `host=H authority=A`, `-` for
//!   none.

use std::convert::Infallible;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use bytes::Bytes;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt as _, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::{Request, Response};
use hyper_util::rt::{TokioExecutor, TokioIo};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tokio::sync::Semaphore;

/// The running upstream; its thread ends with the test process.
pub struct TlsUpstream {
    pub addr: std::net::SocketAddr,
    accepted: Arc<AtomicUsize>,
    gate: Arc<Semaphore>,
}

impl TlsUpstream {
    /// TCP connections accepted so far.
    pub fn accepted(&self) -> usize {
        self.accepted.load(Ordering::SeqCst)
    }

    /// Lets one `/sse` answer send its second event.
    pub fn release(&self) {
        self.gate.add_permits(1);
    }
}

/// The PEM certificates of `path`.
pub fn certs(path: &Path) -> Vec<CertificateDer<'static>> {
    CertificateDer::pem_file_iter(path)
        .expect("read certs")
        .collect::<Result<_, _>>()
        .expect("parse certs")
}

/// A rustls server config: `cert`/`key`, offering `alpn`, asking for a
/// client certificate from `client_ca` when given.
pub fn server_config(
    cert: &Path,
    key: &Path,
    client_ca: Option<&Path>,
    alpn: &[&[u8]],
) -> Arc<rustls::ServerConfig> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    // An upstream asking for a client certificate speaks TLS 1.2, where a
    // missing certificate fails the handshake itself. Under TLS 1.3 the
    // refusal comes after the client has finished its handshake, racing
    // the request: the proxy then sees either the alert or a reset, which
    // a test could not tell apart without luck.
    let versions: &[&rustls::SupportedProtocolVersion] = if client_ca.is_some() {
        &[&rustls::version::TLS12]
    } else {
        rustls::DEFAULT_VERSIONS
    };
    let builder = rustls::ServerConfig::builder_with_provider(Arc::clone(&provider))
        .with_protocol_versions(versions)
        .expect("versions");
    let builder = match client_ca {
        None => builder.with_no_client_auth(),
        Some(ca) => {
            let mut roots = rustls::RootCertStore::empty();
            for c in certs(ca) {
                roots.add(c).expect("ca");
            }
            let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
                Arc::new(roots),
                provider,
            )
            .build()
            .expect("verifier");
            builder.with_client_cert_verifier(verifier)
        }
    };
    let key = PrivateKeyDer::from_pem_file(key).expect("key");
    let mut config = builder
        .with_single_cert(certs(cert), key)
        .expect("cert and key");
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    Arc::new(config)
}

/// A rustls client config trusting `ca`, offering `alpn`.
pub fn client_config(ca: &Path, alpn: &[&[u8]]) -> Arc<rustls::ClientConfig> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    for c in certs(ca) {
        roots.add(c).expect("ca");
    }
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("versions")
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    Arc::new(config)
}

type Body = BoxBody<Bytes, Infallible>;

async fn answer(
    req: Request<Incoming>,
    gate: Arc<Semaphore>,
) -> Result<Response<Body>, Infallible> {
    let res = match req.uri().path() {
        "/sse" => {
            let (tx, rx) = tokio::sync::mpsc::channel::<Result<Frame<Bytes>, Infallible>>(4);
            tokio::spawn(async move {
                let _ = tx
                    .send(Ok(Frame::data(Bytes::from_static(b"data: one\n\n"))))
                    .await;
                if let Ok(permit) = gate.acquire().await {
                    permit.forget();
                }
                let _ = tx
                    .send(Ok(Frame::data(Bytes::from_static(b"data: two\n\n"))))
                    .await;
            });
            let body = StreamBody::new(tokio_stream::wrappers::ReceiverStream::new(rx));
            Response::builder()
                .header("content-type", "text/event-stream")
                .body(body.boxed())
        }
        "/hang" => {
            if let Ok(permit) = gate.acquire().await {
                permit.forget();
            }
            Response::builder().body(Full::new(Bytes::from_static(b"late")).boxed())
        }
        "/host" => {
            let host = req
                .headers()
                .get(http::header::HOST)
                .map_or("-".to_owned(), |h| {
                    String::from_utf8_lossy(h.as_bytes()).into_owned()
                });
            let authority = req.uri().authority().map_or("-", |a| a.as_str());
            Response::builder()
                .body(Full::new(Bytes::from(format!("host={host} authority={authority}"))).boxed())
        }
        _ => {
            Response::builder().body(Full::new(Bytes::from(format!("{:?}", req.version()))).boxed())
        }
    };
    Ok(res.expect("response"))
}

/// Starts the upstream on a free loopback port with `config`.
pub fn start_tls_upstream(config: Arc<rustls::ServerConfig>) -> TlsUpstream {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    listener.set_nonblocking(true).expect("nonblocking");
    let addr = listener.local_addr().expect("addr");
    let accepted = Arc::new(AtomicUsize::new(0));
    let gate = Arc::new(Semaphore::new(0));
    let (counter, gate_of) = (Arc::clone(&accepted), Arc::clone(&gate));
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("runtime");
        rt.block_on(async move {
            let listener = tokio::net::TcpListener::from_std(listener).expect("listener");
            let acceptor = tokio_rustls::TlsAcceptor::from(config);
            loop {
                let Ok((tcp, _)) = listener.accept().await else {
                    continue;
                };
                counter.fetch_add(1, Ordering::SeqCst);
                let (acceptor, gate) = (acceptor.clone(), Arc::clone(&gate_of));
                tokio::spawn(async move {
                    let Ok(tls) = acceptor.accept(tcp).await else {
                        return;
                    };
                    let h2 = tls.get_ref().1.alpn_protocol() == Some(b"h2");
                    let service =
                        hyper::service::service_fn(move |req| answer(req, Arc::clone(&gate)));
                    let io = TokioIo::new(tls);
                    if h2 {
                        let _ = hyper::server::conn::http2::Builder::new(TokioExecutor::new())
                            .serve_connection(io, service)
                            .await;
                    } else {
                        let _ = hyper::server::conn::http1::Builder::new()
                            .serve_connection(io, service)
                            .await;
                    }
                });
            }
        });
    });
    TlsUpstream {
        addr,
        accepted,
        gate,
    }
}
