//! The rustls settings of tollgate's TLS clients: the xDS client
//! (`xds/tls.rs`), the OTLP exporter (`telemetry/tls.rs`) and the reverse
//! proxy's `https://` upstreams (`doors/proxy/pool/tls.rs`). One builder,
//! so the three read their files, roots and client certificates alike:
//! the system's roots (or Mozilla's bundled ones, or none) plus
//! `ca_file`, a client certificate for mTLS, ring as the store's TLS.
//! PEM keys may be PKCS#8, PKCS#1 or SEC1.

use std::path::Path;
use std::sync::Arc;

use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

use crate::config::Roots;
use crate::config::secret::read_pem_file;

/// The files of a TLS client, and where they were set (for messages).
#[derive(Debug, Clone, Copy)]
pub(crate) struct ClientFiles<'a> {
    /// PEM roots added to `roots`.
    pub(crate) ca_file: Option<&'a Path>,
    /// The client certificate chain (mTLS), with `key_file`.
    pub(crate) cert_file: Option<&'a Path>,
    /// Its key.
    pub(crate) key_file: Option<&'a Path>,
    /// The table or variables that set them, named when no root is found.
    pub(crate) what: &'a str,
    /// The roots besides `ca_file`.
    pub(crate) roots: Roots,
    /// The ALPN protocols offered (`h2` for gRPC, `http/1.1` for HTTP).
    pub(crate) alpn: &'a [&'a [u8]],
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
    // The roots, then the CA file (the reference appends it).
    match tls.roots {
        Roots::System => {
            let found = rustls_native_certs::load_native_certs();
            roots.add_parsable_certificates(found.certs);
        }
        Roots::Bundled => roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned()),
        Roots::None => {}
    }
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
