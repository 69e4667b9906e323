//! The server's TLS as Envoy Gateway's xDS server sets it up: TLS 1.3
//! only, ALPN `h2`, and with a client CA a client certificate required
//! and verified against it (no name check).

use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tonic::transport::server::Connected;

/// TLS files of the server, PEM.
#[derive(Debug, Clone)]
pub struct ServerTls {
    /// The server's certificate chain.
    pub cert: PathBuf,
    /// Its key.
    pub key: PathBuf,
    /// With a CA: a client certificate signed by it is required (mTLS).
    pub client_ca: Option<PathBuf>,
}

fn read(path: &Path) -> Vec<u8> {
    std::fs::read(path).unwrap_or_else(|e| panic!("xds-harness: {}: {e}", path.display()))
}

impl ServerTls {
    /// The rustls acceptor. Panics on a bad file (a test's mistake).
    pub(crate) fn acceptor(&self) -> tokio_rustls::TlsAcceptor {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = rustls::ServerConfig::builder_with_provider(Arc::clone(&provider))
            .with_protocol_versions(&[&rustls::version::TLS13])
            .expect("xds-harness: TLS 1.3");
        let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&read(&self.cert))
            .collect::<Result<_, _>>()
            .expect("xds-harness: server certificate");
        let key = PrivateKeyDer::from_pem_slice(&read(&self.key)).expect("xds-harness: server key");
        let builder = match &self.client_ca {
            None => builder.with_no_client_auth(),
            Some(ca) => {
                let mut roots = rustls::RootCertStore::empty();
                for cert in CertificateDer::pem_slice_iter(&read(ca)) {
                    roots
                        .add(cert.expect("xds-harness: client CA"))
                        .expect("xds-harness: client CA");
                }
                let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
                    Arc::new(roots),
                    provider,
                )
                .build()
                .expect("xds-harness: client verifier");
                builder.with_client_cert_verifier(verifier)
            }
        };
        let mut config = builder
            .with_single_cert(certs, key)
            .expect("xds-harness: certificate and key");
        config.alpn_protocols = vec![b"h2".to_vec()];
        tokio_rustls::TlsAcceptor::from(Arc::new(config))
    }
}

/// A connection, plain or TLS, that fails every read and write once the
/// server is stopped (so no client keeps a connection of a stopped
/// server open).
pub(crate) struct Io {
    pub(crate) stream: Stream,
    pub(crate) killed: Pin<Box<dyn Future<Output = ()> + Send>>,
}

/// The transport under an [`Io`].
pub(crate) enum Stream {
    Plain(TcpStream),
    Tls(Box<tokio_rustls::server::TlsStream<TcpStream>>),
}

impl Io {
    /// `stream`, cut when `kill` turns true.
    pub(crate) fn new(stream: Stream, mut kill: tokio::sync::watch::Receiver<bool>) -> Io {
        let killed = Box::pin(async move {
            let _ = kill.wait_for(|k| *k).await;
        });
        Io { stream, killed }
    }

    fn cut(&mut self, cx: &mut Context<'_>) -> Option<std::io::Error> {
        self.killed
            .as_mut()
            .poll(cx)
            .is_ready()
            .then(|| std::io::Error::new(std::io::ErrorKind::ConnectionAborted, "server stopped"))
    }
}

impl Connected for Io {
    type ConnectInfo = ();
    fn connect_info(&self) -> Self::ConnectInfo {}
}

impl AsyncRead for Io {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        if let Some(e) = this.cut(cx) {
            return Poll::Ready(Err(e));
        }
        match &mut this.stream {
            Stream::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Stream::Tls(s) => Pin::new(s).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Io {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let this = self.get_mut();
        if let Some(e) = this.cut(cx) {
            return Poll::Ready(Err(e));
        }
        match &mut this.stream {
            Stream::Plain(s) => Pin::new(s).poll_write(cx, buf),
            Stream::Tls(s) => Pin::new(s).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match &mut self.get_mut().stream {
            Stream::Plain(s) => Pin::new(s).poll_flush(cx),
            Stream::Tls(s) => Pin::new(s).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match &mut self.get_mut().stream {
            Stream::Plain(s) => Pin::new(s).poll_shutdown(cx),
            Stream::Tls(s) => Pin::new(s).poll_shutdown(cx),
        }
    }
}
