//! TLS on the receiver's doors, as a collector's `tls` settings do: the
//! server's certificate, and with a client CA a client certificate
//! required and verified against it (mTLS). gRPC offers ALPN `h2`, HTTP
//! `http/1.1`.

use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tonic::transport::server::Connected;

/// TLS files of the receiver, PEM.
#[derive(Debug, Clone)]
pub struct ServerTls {
    /// The server's certificate chain.
    pub cert: PathBuf,
    /// Its key.
    pub key: PathBuf,
    /// With a CA: a client certificate signed by it is required (mTLS).
    pub client_ca: Option<PathBuf>,
    /// The DNS name the certificate holds: the endpoints' host (it must
    /// resolve to loopback, e.g. `localhost`).
    pub name: String,
}

fn read(path: &Path) -> Vec<u8> {
    std::fs::read(path).unwrap_or_else(|e| panic!("otlp-harness: {}: {e}", path.display()))
}

impl ServerTls {
    /// The rustls acceptor offering `alpn`. Panics on a bad file (a
    /// test's mistake).
    pub(crate) fn acceptor(&self, alpn: &[u8]) -> tokio_rustls::TlsAcceptor {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = rustls::ServerConfig::builder_with_provider(Arc::clone(&provider))
            .with_safe_default_protocol_versions()
            .expect("otlp-harness: TLS versions");
        let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&read(&self.cert))
            .collect::<Result<_, _>>()
            .expect("otlp-harness: server certificate");
        let key =
            PrivateKeyDer::from_pem_slice(&read(&self.key)).expect("otlp-harness: server key");
        let builder = match &self.client_ca {
            None => builder.with_no_client_auth(),
            Some(ca) => {
                let mut roots = rustls::RootCertStore::empty();
                for cert in CertificateDer::pem_slice_iter(&read(ca)) {
                    roots
                        .add(cert.expect("otlp-harness: client CA"))
                        .expect("otlp-harness: client CA");
                }
                let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
                    Arc::new(roots),
                    provider,
                )
                .build()
                .expect("otlp-harness: client verifier");
                builder.with_client_cert_verifier(verifier)
            }
        };
        let mut config = builder
            .with_single_cert(certs, key)
            .expect("otlp-harness: certificate and key");
        config.alpn_protocols = vec![alpn.to_vec()];
        tokio_rustls::TlsAcceptor::from(Arc::new(config))
    }
}

/// A connection of the gRPC door, plain or TLS.
pub(crate) enum Io {
    Plain(TcpStream),
    Tls(Box<tokio_rustls::server::TlsStream<TcpStream>>),
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
        match self.get_mut() {
            Io::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Io::Tls(s) => Pin::new(s).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Io {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        match self.get_mut() {
            Io::Plain(s) => Pin::new(s).poll_write(cx, buf),
            Io::Tls(s) => Pin::new(s).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Io::Plain(s) => Pin::new(s).poll_flush(cx),
            Io::Tls(s) => Pin::new(s).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Io::Plain(s) => Pin::new(s).poll_shutdown(cx),
            Io::Tls(s) => Pin::new(s).poll_shutdown(cx),
        }
    }
}
