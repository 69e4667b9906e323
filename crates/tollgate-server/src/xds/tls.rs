//! TLS to the ADS server ([`XdsTls`]), as the reference sets it up: the
//! system's roots plus `ca_file`, a client certificate for mTLS, the
//! server's name from `server_name` or the URL's host; rustls with ring,
//! as the store's TLS, offering ALPN `h2` (Envoy Gateway's server asks
//! for it). PEM keys may be PKCS#8, PKCS#1 or SEC1 (Envoy Gateway writes
//! PKCS#1). Files are read once, at start.
//!
//! The rustls settings come from [`crate::tls_client`], shared with the
//! OTLP exporter (`telemetry/export.rs`, which uses [`Connector`] too) and
//! the reverse proxy's `https://` upstreams.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use http::Uri;
use hyper_util::rt::TokioIo;
use rustls_pki_types::ServerName;
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;

use crate::config::{Roots, XdsTls};
use crate::tls_client::{ClientFiles, client_config};

impl<'a> ClientFiles<'a> {
    fn of_xds(tls: &'a XdsTls) -> Self {
        ClientFiles {
            ca_file: tls.ca_file.as_deref(),
            cert_file: tls.cert_file.as_deref(),
            key_file: tls.key_file.as_deref(),
            what: "[envoy.xds.tls] ca_file",
            roots: Roots::System,
            alpn: &[b"h2"],
        }
    }
}

/// Connects tonic's channel over TLS: TCP to the URI's host and port,
/// then the handshake verifying `name` (or the host).
#[derive(Clone)]
pub(crate) struct Connector {
    tls: TlsConnector,
    name: Option<ServerName<'static>>,
}

impl std::fmt::Debug for Connector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connector")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

impl Connector {
    /// A connector for `tls`.
    ///
    /// # Errors
    /// As [`client_config`]; a bad `server_name`.
    pub(crate) fn new(tls: &XdsTls) -> Result<Self, String> {
        let config = client_config(&ClientFiles::of_xds(tls))?;
        let name = tls
            .server_name
            .as_ref()
            .map(|n| {
                ServerName::try_from(n.clone())
                    .map_err(|_| format!("{n:?} is not a DNS name or an IP address"))
            })
            .transpose()?;
        Ok(Connector::with(config, name))
    }

    /// A connector with `config`, verifying `name` or else the host.
    pub(crate) fn with(
        config: Arc<rustls::ClientConfig>,
        name: Option<ServerName<'static>>,
    ) -> Self {
        Connector {
            tls: TlsConnector::from(config),
            name,
        }
    }
}

type Connecting =
    Pin<Box<dyn Future<Output = Result<TokioIo<TlsStream<TcpStream>>, BoxError>> + Send>>;
type BoxError = Box<dyn std::error::Error + Send + Sync>;

impl tonic::codegen::Service<Uri> for Connector {
    type Response = TokioIo<TlsStream<TcpStream>>;
    type Error = BoxError;
    type Future = Connecting;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, uri: Uri) -> Self::Future {
        let this = self.clone();
        Box::pin(async move {
            let host = uri
                .host()
                .ok_or("no host")?
                .trim_matches(['[', ']'])
                .to_owned();
            // A TLS connector: an https URL without a port means 443.
            let port = uri.port_u16().unwrap_or(443);
            let name = match this.name {
                Some(name) => name,
                None => ServerName::try_from(host.clone())
                    .map_err(|_| format!("host {host:?} is not a name a certificate can hold"))?,
            };
            let tcp = TcpStream::connect((host.as_str(), port)).await?;
            tcp.set_nodelay(true)?;
            let stream = this.tls.connect(name, tcp).await?;
            Ok(TokioIo::new(stream))
        })
    }
}
