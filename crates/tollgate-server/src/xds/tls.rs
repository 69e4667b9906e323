//! TLS to the ADS server ([`XdsTls`]), as the reference sets it up: the
//! system's roots plus `ca_file`, a client certificate for mTLS, the
//! server's name from `server_name` or the URL's host; rustls with ring,
//! as the store's TLS, offering ALPN `h2` (Envoy Gateway's server asks
//! for it). PEM keys may be PKCS#8, PKCS#1 or SEC1 (Envoy Gateway writes
//! PKCS#1). Files are read once, at start.

use std::future::Future;
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

/// The rustls client settings of `tls`.
///
/// # Errors
/// A file that cannot be read or parsed, a certificate without its key,
/// no root at all.
pub(crate) fn client_config(tls: &XdsTls) -> Result<Arc<rustls::ClientConfig>, String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS: {e}"))?;
    let mut roots = rustls::RootCertStore::empty();
    // The system's roots, then the CA file (the reference appends it).
    let found = rustls_native_certs::load_native_certs();
    roots.add_parsable_certificates(found.certs);
    if let Some(ca) = &tls.ca_file {
        let pem = read_pem_file(ca).map_err(|e| format!("{}: {e}", ca.display()))?;
        for cert in CertificateDer::pem_slice_iter(&pem) {
            let cert = cert.map_err(|e| format!("{}: {e}", ca.display()))?;
            roots
                .add(cert)
                .map_err(|e| format!("{}: not a usable CA: {e}", ca.display()))?;
        }
    }
    if roots.is_empty() {
        return Err("TLS: no CA certificates on this system; name [envoy.xds.tls] ca_file".into());
    }
    let builder = builder.with_root_certificates(roots);
    let mut config = match (&tls.cert_file, &tls.key_file) {
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
    config.alpn_protocols = vec![b"h2".to_vec()];
    Ok(Arc::new(config))
}

/// Connects tonic's channel over TLS: TCP to the URI's host and port,
/// then the handshake verifying `name` (or the host).
#[derive(Clone)]
pub(crate) struct Connector {
    pub(crate) tls: TlsConnector,
    pub(crate) name: Option<ServerName<'static>>,
}

impl Connector {
    /// A connector for `tls`.
    ///
    /// # Errors
    /// As [`client_config`]; a bad `server_name`.
    pub(crate) fn new(tls: &XdsTls) -> Result<Self, String> {
        let name = tls
            .server_name
            .as_ref()
            .map(|n| {
                ServerName::try_from(n.clone())
                    .map_err(|_| format!("{n:?} is not a DNS name or an IP address"))
            })
            .transpose()?;
        Ok(Connector {
            tls: TlsConnector::from(client_config(tls)?),
            name,
        })
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
            let port = uri.port_u16().ok_or("no port")?;
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
