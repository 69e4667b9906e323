//! TLS to the ADS server ([`XdsTls`]), as the reference sets it up: the
//! system's roots plus `ca_file`, a client certificate for mTLS, the
//! server's name from `server_name` or the URL's host; rustls with ring,
//! as the store's TLS, offering ALPN `h2` (Envoy Gateway's server asks
//! for it). PEM keys may be PKCS#8, PKCS#1 or SEC1 (Envoy Gateway writes
//! PKCS#1). Files are read once, at start.
//!
//! The OTLP exporter (`telemetry/export.rs`) is a client of the same
//! shape, so it uses [`client_config`] and [`Connector`] too, through
//! [`ClientFiles`].

use std::future::Future;
use std::path::Path;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use http::Uri;
use hyper_util::rt::TokioIo;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;

use crate::config::XdsTls;
use crate::config::secret::read_pem_file;

/// The files of a TLS client, and where they were set (for messages).
#[derive(Debug, Clone, Copy)]
pub(crate) struct ClientFiles<'a> {
    /// PEM roots added to the system's.
    pub(crate) ca_file: Option<&'a Path>,
    /// The client certificate chain (mTLS), with `key_file`.
    pub(crate) cert_file: Option<&'a Path>,
    /// Its key.
    pub(crate) key_file: Option<&'a Path>,
    /// The table or variables that set them, named when no root is found.
    pub(crate) what: &'a str,
    /// The ALPN protocols offered (`h2` for gRPC, `http/1.1` for HTTP).
    pub(crate) alpn: &'a [&'a [u8]],
}

impl<'a> ClientFiles<'a> {
    fn of_xds(tls: &'a XdsTls) -> Self {
        ClientFiles {
            ca_file: tls.ca_file.as_deref(),
            cert_file: tls.cert_file.as_deref(),
            key_file: tls.key_file.as_deref(),
            what: "[envoy.xds.tls] ca_file",
            alpn: &[b"h2"],
        }
    }
}

/// The rustls client settings of `tls`.
///
/// # Errors
/// A file that cannot be read or parsed, a certificate without its key,
/// no root at all.
pub(crate) fn client_config(tls: &ClientFiles<'_>) -> Result<Arc<rustls::ClientConfig>, String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS: {e}"))?;
    let mut roots = rustls::RootCertStore::empty();
    // The system's roots, then the CA file (the reference appends it).
    let found = rustls_native_certs::load_native_certs();
    roots.add_parsable_certificates(found.certs);
    if let Some(ca) = tls.ca_file {
        let pem = read_pem_file(ca).map_err(|e| format!("{}: {e}", ca.display()))?;
        for cert in CertificateDer::pem_slice_iter(&pem) {
            let cert = cert.map_err(|e| format!("{}: {e}", ca.display()))?;
            roots
                .add(cert)
                .map_err(|e| format!("{}: not a usable CA: {e}", ca.display()))?;
        }
    }
    if roots.is_empty() {
        return Err(format!(
            "TLS: no CA certificates on this system; name {}",
            tls.what
        ));
    }
    let builder = builder.with_root_certificates(roots);
    let mut config = match (tls.cert_file, tls.key_file) {
        (Some(cert), Some(key)) => {
            let chain = read_pem_file(cert)
                .and_then(|pem| {
                    CertificateDer::pem_slice_iter(&pem)
                        .collect::<Result<Vec<_>, _>>()
                        .map_err(|e| e.to_string())
                })
                .map_err(|e| format!("{}: {e}", cert.display()))?;
            let key = read_pem_file(key)
                .and_then(|pem| PrivateKeyDer::from_pem_slice(&pem).map_err(|e| e.to_string()))
                .map_err(|e| format!("{}: {e}", key.display()))?;
            builder
                .with_client_auth_cert(chain, key)
                .map_err(|e| format!("TLS client certificate and key: {e}"))?
        }
        (None, None) => builder.with_no_client_auth(),
        _ => return Err("TLS: cert_file and key_file go together".into()),
    };
    config.alpn_protocols = tls.alpn.iter().map(|p| p.to_vec()).collect();
    Ok(Arc::new(config))
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
