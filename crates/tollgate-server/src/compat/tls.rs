//! The gRPC port's TLS ([`acceptor`]): the server certificate read from
//! `GRPC_SERVER_TLS_CERT`/`_KEY` and read again when either file changes
//! (a cert-manager renewal swaps the Secret's files; the old certificate
//! stays in use if the new pair does not load, as the reference's
//! `CertProvider` keeps it), and client certificates required and verified
//! against `GRPC_CLIENT_TLS_CACERT` when it is set, carrying the DNS name
//! `GRPC_CLIENT_TLS_SAN` when that is set too. The reverse proxy's TLS
//! listener (`[proxy.listen_tls]`) handles its certificate the same way
//! ([`proxy_acceptor`]).

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::SystemTime;

use rustls::client::danger::HandshakeSignatureValid;
use rustls::crypto::CryptoProvider;
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::server::{ClientHello, ResolvesServerCert, WebPkiClientVerifier};
use rustls::sign::CertifiedKey;
use rustls::{DigitallySignedStruct, DistinguishedName, SignatureScheme};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use tokio_rustls::TlsAcceptor;

use super::listen::GrpcTls;
use crate::config::ListenTls;

/// The gRPC port's TLS acceptor (ALPN `h2`).
///
/// # Errors
/// A file that cannot be read or parsed, a key that is not the
/// certificate's, a SAN that is not a DNS name; each names its variable.
pub fn acceptor(tls: &GrpcTls) -> Result<TlsAcceptor, String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let resolver = Arc::new(ReloadingCert::load(&tls.cert, &tls.key, &provider, GRPC)?);
    let builder = rustls::ServerConfig::builder_with_provider(Arc::clone(&provider))
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?;
    let builder = match &tls.client_ca {
        None => builder.with_no_client_auth(),
        Some(ca) => {
            let mut roots = rustls::RootCertStore::empty();
            for cert in certificates(ca).map_err(|e| format!("GRPC_CLIENT_TLS_CACERT: {e}"))? {
                roots.add(cert).map_err(|e| {
                    format!(
                        "GRPC_CLIENT_TLS_CACERT: {}: not a usable CA: {e}",
                        ca.display()
                    )
                })?;
            }
            let verifier =
                WebPkiClientVerifier::builder_with_provider(Arc::new(roots), Arc::clone(&provider))
                    .build()
                    .map_err(|e| format!("GRPC_CLIENT_TLS_CACERT: {}: {e}", ca.display()))?;
            match &tls.client_san {
                None => builder.with_client_cert_verifier(verifier),
                Some(san) => {
                    let name = ServerName::try_from(san.clone())
                        .map_err(|_| format!("GRPC_CLIENT_TLS_SAN: {san:?} is not a DNS name"))?;
                    builder.with_client_cert_verifier(Arc::new(WithSan {
                        inner: verifier,
                        name,
                    }))
                }
            }
        }
    };
    let mut config = builder.with_cert_resolver(resolver);
    config.alpn_protocols = vec![b"h2".to_vec()];
    Ok(TlsAcceptor::from(Arc::new(config)))
}

/// The reverse proxy's listener TLS (`[proxy.listen_tls]`): the same
/// certificate handling (re-read when its files change), no client
/// certificates, ALPN `h2` and `http/1.1`.
///
/// # Errors
/// As [`acceptor`], naming the table's fields.
pub fn proxy_acceptor(tls: &ListenTls) -> Result<TlsAcceptor, String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let resolver = Arc::new(ReloadingCert::load(
        &tls.cert_file,
        &tls.key_file,
        &provider,
        PROXY,
    )?);
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_no_client_auth()
        .with_cert_resolver(resolver);
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(TlsAcceptor::from(Arc::new(config)))
}

/// How messages name a certificate pair: its two settings and the
/// listener.
#[derive(Debug, Clone, Copy)]
struct Labels {
    cert: &'static str,
    key: &'static str,
    listener: &'static str,
}

const GRPC: Labels = Labels {
    cert: "GRPC_SERVER_TLS_CERT",
    key: "GRPC_SERVER_TLS_KEY",
    listener: "gRPC TLS",
};

const PROXY: Labels = Labels {
    cert: "proxy.listen_tls.cert_file",
    key: "proxy.listen_tls.key_file",
    listener: "reverse proxy TLS",
};

/// The PEM certificates of `path`.
fn certificates(path: &Path) -> Result<Vec<CertificateDer<'static>>, String> {
    let pem = crate::config::file::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let certs: Vec<_> = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<_, _>>()
        .map_err(|_| format!("{}: malformed PEM", path.display()))?;
    if certs.is_empty() {
        return Err(format!("{}: no CERTIFICATE in it", path.display()));
    }
    Ok(certs)
}

/// When a file was last changed, as far as a re-read needs to know.
type Stamp = Option<(SystemTime, u64)>;

fn stamp(path: &Path) -> Stamp {
    let meta = std::fs::metadata(path).ok()?;
    Some((meta.modified().ok()?, meta.len()))
}

/// The server certificate, re-read when its files change (looked at on
/// each handshake: a `stat` of two files, against a handshake's
/// public-key operations).
#[derive(Debug)]
struct ReloadingCert {
    cert: PathBuf,
    key: PathBuf,
    provider: Arc<CryptoProvider>,
    labels: Labels,
    current: Mutex<(Stamp, Stamp, Arc<CertifiedKey>)>,
}

impl ReloadingCert {
    fn load(
        cert: &Path,
        key: &Path,
        provider: &Arc<CryptoProvider>,
        labels: Labels,
    ) -> Result<Self, String> {
        let (stamps, loaded) = (
            (stamp(cert), stamp(key)),
            certified_key(cert, key, provider, labels)?,
        );
        Ok(Self {
            cert: cert.to_path_buf(),
            key: key.to_path_buf(),
            provider: Arc::clone(provider),
            labels,
            current: Mutex::new((stamps.0, stamps.1, Arc::new(loaded))),
        })
    }
}

/// The pair read and checked (the key must be the certificate's).
fn certified_key(
    cert: &Path,
    key: &Path,
    provider: &CryptoProvider,
    labels: Labels,
) -> Result<CertifiedKey, String> {
    let key_label = labels.key;
    let chain = certificates(cert).map_err(|e| format!("{}: {e}", labels.cert))?;
    let pem = crate::config::file::read(key)
        .map_err(|e| format!("{key_label}: {}: {e}", key.display()))?;
    // Never quoted: a line of it could be a piece of the key.
    let der = PrivateKeyDer::from_pem_slice(&pem).map_err(|_| {
        format!(
            "{key_label}: {}: no PKCS#8, PKCS#1 or SEC1 private key",
            key.display()
        )
    })?;
    let signing = provider
        .key_provider
        .load_private_key(der)
        .map_err(|e| format!("{key_label}: {}: {e}", key.display()))?;
    let certified = CertifiedKey::new(chain, signing);
    certified.keys_match().map_err(|e| {
        format!(
            "{key_label}: {} is not the key of {}: {e}",
            key.display(),
            cert.display()
        )
    })?;
    Ok(certified)
}

impl ResolvesServerCert for ReloadingCert {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        let mut current = self.current.lock().unwrap_or_else(PoisonError::into_inner);
        let now = (stamp(&self.cert), stamp(&self.key));
        if (now.0, now.1) != (current.0, current.1) {
            let listener = self.labels.listener;
            match certified_key(&self.cert, &self.key, &self.provider, self.labels) {
                Ok(loaded) => {
                    tracing::info!("{listener}: {} re-read after a change", self.cert.display());
                    *current = (now.0, now.1, Arc::new(loaded));
                }
                Err(e) => {
                    // Noted as seen: one warning per change, not per
                    // handshake; a later change is tried again.
                    tracing::warn!("{listener}: keeping the certificate in use: {e}");
                    current.0 = now.0;
                    current.1 = now.1;
                }
            }
        }
        Some(Arc::clone(&current.2))
    }
}

/// A client verifier that also wants a DNS SAN on the client's
/// certificate (the reference's `GRPC_CLIENT_TLS_SAN`).
#[derive(Debug)]
struct WithSan {
    inner: Arc<dyn ClientCertVerifier>,
    name: ServerName<'static>,
}

impl ClientCertVerifier for WithSan {
    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        self.inner.root_hint_subjects()
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        let verified = self
            .inner
            .verify_client_cert(end_entity, intermediates, now)?;
        let cert = webpki::EndEntityCert::try_from(end_entity)
            .map_err(|e| rustls::Error::General(format!("client certificate: {e}")))?;
        cert.verify_is_valid_for_subject_name(&self.name)
            .map_err(|_| {
                rustls::Error::General(format!(
                    "the client certificate does not name {}",
                    self.name.to_str()
                ))
            })?;
        Ok(verified)
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_files_name_their_variable() {
        let tls = GrpcTls {
            cert: "/nonexistent/tls.crt".into(),
            key: "/nonexistent/tls.key".into(),
            client_ca: None,
            client_san: None,
        };
        let err = acceptor(&tls).err().expect("refused");
        assert!(
            err.starts_with("GRPC_SERVER_TLS_CERT: /nonexistent/tls.crt"),
            "{err}"
        );
    }

    /// Envoy Gateway's certificates: an RSA key in PKCS#1 (`BEGIN RSA
    /// PRIVATE KEY`), a leaf without extended key usage.
    #[test]
    fn pkcs1_rsa_keys_load_and_a_wrong_key_is_named() {
        let dir = tempfile::tempdir().expect("tempdir");
        let openssl = |args: &[&str]| {
            let out = std::process::Command::new("openssl")
                .args(args)
                .current_dir(dir.path())
                .output()
                .expect("openssl (apt-get install -y openssl)");
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
        };
        for name in ["a", "b"] {
            openssl(&[
                "genrsa",
                "-traditional",
                "-out",
                &format!("{name}.key"),
                "2048",
            ]);
            openssl(&[
                "req",
                "-x509",
                "-new",
                "-key",
                &format!("{name}.key"),
                "-subj",
                "/CN=ratelimit",
                "-days",
                "2",
                "-out",
                &format!("{name}.crt"),
            ]);
        }
        let key = std::fs::read_to_string(dir.path().join("a.key")).expect("key");
        assert!(
            key.starts_with("-----BEGIN RSA PRIVATE KEY-----"),
            "{key:.40}"
        );
        let tls = |key: &str| GrpcTls {
            cert: dir.path().join("a.crt"),
            key: dir.path().join(key),
            client_ca: Some(dir.path().join("b.crt")),
            client_san: Some("envoy".to_owned()),
        };
        assert!(acceptor(&tls("a.key")).is_ok());
        let err = acceptor(&tls("b.key")).err().expect("not a's key");
        assert!(err.starts_with("GRPC_SERVER_TLS_KEY: "), "{err}");
        assert!(err.contains("is not the key of"), "{err}");
    }
}
