//! TLS to the collector: the shared rustls setup (`tls_client.rs`:
//! the system's roots plus `ca_file`, a client certificate for mTLS)
//! with the ALPN of each protocol, and for OTLP/HTTP a hyper connector
//! over it ([`HttpsConnector`]).

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use http::Uri;
use hyper_util::client::legacy::connect::{Connected, Connection};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;

use crate::config::{OtlpProtocol, Roots, TracingConfig};
use crate::tls_client::{ClientFiles, client_config};
use crate::xds::tls::Connector;

/// The rustls settings for `config`'s collector: ALPN `h2` for gRPC,
/// `http/1.1` for HTTP (the exporter's hyper client speaks HTTP/1.1).
///
/// # Errors
/// A file that cannot be read or parsed, no root at all.
pub(super) fn connector(config: &TracingConfig) -> Result<Connector, String> {
    let alpn: &[&[u8]] = match config.protocol {
        OtlpProtocol::Grpc => &[b"h2"],
        OtlpProtocol::HttpProtobuf => &[b"http/1.1"],
    };
    let files = ClientFiles {
        ca_file: config.ca_file.as_deref(),
        cert_file: config.cert_file.as_deref(),
        key_file: config.key_file.as_deref(),
        what: "[tracing] ca_file (OTEL_EXPORTER_OTLP_CERTIFICATE)",
        roots: Roots::System,
        alpn,
    };
    let tls = client_config(&files).map_err(|e| format!("tracing: {e}"))?;
    Ok(Connector::with(tls, None))
}

/// hyper's connector for `https://` collectors: TCP, then the handshake.
#[derive(Debug, Clone)]
pub(super) struct HttpsConnector(pub(super) Connector);

/// A TLS connection, as hyper's client pool wants it.
#[derive(Debug)]
pub(super) struct TlsIo(TokioIo<TlsStream<TcpStream>>);

type BoxError = Box<dyn std::error::Error + Send + Sync>;

impl tonic::codegen::Service<Uri> for HttpsConnector {
    type Response = TlsIo;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<TlsIo, BoxError>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, uri: Uri) -> Self::Future {
        let connecting = tonic::codegen::Service::call(&mut self.0, uri);
        Box::pin(async move { Ok(TlsIo(connecting.await?)) })
    }
}

impl Connection for TlsIo {
    fn connected(&self) -> Connected {
        Connected::new()
    }
}

impl hyper::rt::Read for TlsIo {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: hyper::rt::ReadBufCursor<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().0).poll_read(cx, buf)
    }
}

impl hyper::rt::Write for TlsIo {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.get_mut().0).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().0).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().0).poll_shutdown(cx)
    }
}
