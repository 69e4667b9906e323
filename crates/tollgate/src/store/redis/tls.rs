//! TLS settings of a `rediss://` store ([`RedisTls`]): the CA certificates
//! to trust, a client certificate and key, and the name the server's
//! certificate is verified against. PEM is parsed here (with the `redis`
//! feature alone, so a config can be checked without TLS built in); the
//! rustls client settings are built from it with `redis-tls`.
//!
//! No message here quotes a file's content: a key file's line could be a
//! piece of the key.

use std::fmt;

use rustls_pki_types::pem::{self, PemObject};
use rustls_pki_types::{CertificateDer, PrivateKeyDer, ServerName};

/// How a `rediss://` connection is secured (docs/redis-store.md, "TLS").
/// The default trusts the system's CA roots, sends no client certificate
/// and verifies the server's certificate against the URL's host.
///
/// ```
/// use tollgate::store::redis::RedisTls;
///
/// let tls = RedisTls::default().with_server_name("redis.internal").unwrap();
/// assert!(RedisTls::default().with_ca_pem(b"not PEM").is_err());
/// assert!(RedisTls::default().with_server_name("not a name!").is_err());
/// # let _ = tls;
/// ```
#[derive(Clone, Default, PartialEq, Eq)]
pub struct RedisTls {
    /// The CA certificates trusted instead of the system's.
    pub(super) ca: Option<Vec<CertificateDer<'static>>>,
    /// The client certificate chain, leaf first.
    pub(super) cert: Option<Vec<CertificateDer<'static>>>,
    /// The client certificate's key.
    pub(super) key: Option<Key>,
    /// The name verified instead of the URL's host.
    pub(super) server_name: Option<ServerName<'static>>,
}

/// A private key: cloned by copy (the DER type does not derive `Clone`),
/// never shown.
#[derive(PartialEq, Eq)]
pub(super) struct Key(pub(super) PrivateKeyDer<'static>);

impl Clone for Key {
    fn clone(&self) -> Self {
        Key(self.0.clone_key())
    }
}

impl fmt::Debug for RedisTls {
    /// Counts and the name: never a key's bytes.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisTls")
            .field("ca_certificates", &self.ca.as_ref().map(Vec::len))
            .field("client_certificates", &self.cert.as_ref().map(Vec::len))
            .field("client_key", &self.key.as_ref().map(|_| "<redacted>"))
            .field("server_name", &self.server_name)
            .finish()
    }
}

/// What a PEM parse failure was, without quoting the text.
fn pem_problem(e: &pem::Error, wanted: &str, expected: &str) -> String {
    match e {
        pem::Error::NoItemsFound => format!("no {wanted} found ({expected} expected)"),
        pem::Error::MissingSectionEnd { .. } => "a PEM block has no END line".to_owned(),
        pem::Error::IllegalSectionStart { .. } => "a malformed PEM BEGIN line".to_owned(),
        pem::Error::Base64Decode(_) => "bad base64 inside a PEM block".to_owned(),
        pem::Error::SectionTooLarge => "a PEM block is too large".to_owned(),
        _ => "not valid PEM".to_owned(),
    }
}

/// Every certificate in `pem`; at least one.
fn certificates(pem: &[u8]) -> Result<Vec<CertificateDer<'static>>, String> {
    let certs = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| pem_problem(&e, "certificate", "PEM"))?;
    if certs.is_empty() {
        return Err(pem_problem(&pem::Error::NoItemsFound, "certificate", "PEM"));
    }
    Ok(certs)
}

impl RedisTls {
    /// Trusts the CA certificates in `pem` (one or more `CERTIFICATE`
    /// blocks) instead of the system's roots.
    ///
    /// # Errors
    /// No certificate in `pem`, or a malformed block (the message never
    /// quotes the text).
    pub fn with_ca_pem(mut self, pem: &[u8]) -> Result<Self, String> {
        let certs = certificates(pem)?;
        #[cfg(feature = "redis-tls")]
        {
            let mut roots = rustls::RootCertStore::empty();
            for cert in &certs {
                roots
                    .add(cert.clone())
                    .map_err(|e| format!("a certificate is not a usable CA: {e}"))?;
            }
        }
        self.ca = Some(certs);
        Ok(self)
    }

    /// Sends the certificate chain in `pem` (leaf first) when the server
    /// asks for one (`tls-auth-clients`); needs
    /// [`with_client_key_pem`](Self::with_client_key_pem) too.
    ///
    /// # Errors
    /// No certificate in `pem`, or a malformed block.
    pub fn with_client_cert_pem(mut self, pem: &[u8]) -> Result<Self, String> {
        self.cert = Some(certificates(pem)?);
        Ok(self)
    }

    /// The private key of the client certificate: PKCS#8, PKCS#1 (RSA) or
    /// SEC1 (EC) PEM.
    ///
    /// # Errors
    /// No key in `pem`, or a malformed block (never quoted: it could be a
    /// piece of the key).
    pub fn with_client_key_pem(mut self, pem: &[u8]) -> Result<Self, String> {
        let key = PrivateKeyDer::from_pem_slice(pem)
            .map_err(|e| pem_problem(&e, "private key", "PKCS#8, PKCS#1 or SEC1 PEM"))?;
        self.key = Some(Key(key));
        Ok(self)
    }

    /// Verifies the server's certificate against `name` (a DNS name or an
    /// IP address) instead of the URL's host, which is still where the
    /// connection goes: a server reached by address, or through a tunnel,
    /// whose certificate names its service.
    ///
    /// # Errors
    /// `name` is neither a DNS name nor an IP address.
    pub fn with_server_name(mut self, name: &str) -> Result<Self, String> {
        let parsed = ServerName::try_from(name.to_owned())
            .map_err(|_| format!("{name:?} is not a DNS name or an IP address"))?;
        self.server_name = Some(parsed);
        Ok(self)
    }

    /// The name a connection to `host` verifies the certificate against.
    ///
    /// # Errors
    /// No server name is set and `host` is no valid name.
    pub(super) fn name_for(&self, host: &str) -> Result<ServerName<'static>, String> {
        match &self.server_name {
            Some(name) => Ok(name.clone()),
            None => ServerName::try_from(host.to_owned())
                .map_err(|_| format!("host {host:?} is not a name a certificate can hold")),
        }
    }

    /// Checks that these settings make a TLS client: a certificate with
    /// its key (and the key its certificate's), the CA usable. A store
    /// does the same when it connects; a config check can call it early.
    ///
    /// # Errors
    /// What is wrong; without the `redis-tls` feature, that it is missing.
    pub fn check(&self) -> Result<(), String> {
        self.client_config().map(|_| ())
    }

    /// The rustls client settings.
    #[cfg(feature = "redis-tls")]
    pub(super) fn client_config(&self) -> Result<std::sync::Arc<rustls::ClientConfig>, String> {
        use std::sync::Arc;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| format!("TLS: {e}"))?;
        let mut roots = rustls::RootCertStore::empty();
        match &self.ca {
            Some(ca) => {
                for cert in ca {
                    roots
                        .add(cert.clone())
                        .map_err(|e| format!("TLS CA: a certificate is not a usable CA: {e}"))?;
                }
            }
            None => {
                let found = rustls_native_certs::load_native_certs();
                let (added, _) = roots.add_parsable_certificates(found.certs);
                if added == 0 {
                    return Err(
                        "TLS: no CA certificates found on this system; name a CA file".to_owned(),
                    );
                }
            }
        }
        let builder = builder.with_root_certificates(roots);
        let config = match (&self.cert, &self.key) {
            (None, None) => builder.with_no_client_auth(),
            (Some(chain), Some(key)) => builder
                .with_client_auth_cert(chain.clone(), key.0.clone_key())
                .map_err(|e| format!("TLS client certificate and key: {e}"))?,
            (Some(_), None) => {
                return Err("TLS: a client certificate needs its key".to_owned());
            }
            (None, Some(_)) => {
                return Err("TLS: a client key needs its certificate".to_owned());
            }
        };
        Ok(Arc::new(config))
    }

    /// Without `redis-tls` there is no TLS client to build.
    #[cfg(not(feature = "redis-tls"))]
    pub(super) fn client_config(&self) -> Result<(), String> {
        Err("rediss:// needs tollgate built with the redis-tls feature".to_owned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pem_problems_never_quote_the_text() {
        let secretish = b"-----BEGIN PRIVATE KEY-----\nc2VjcmV0LWtleS1ieXRlcw==!!\n";
        let e = RedisTls::default()
            .with_client_key_pem(secretish)
            .expect_err("bad key");
        assert!(!e.contains("c2VjcmV0"), "{e}");
        let e = RedisTls::default()
            .with_ca_pem(b"hello")
            .expect_err("no cert");
        assert_eq!(e, "no certificate found (PEM expected)");
        let e = RedisTls::default()
            .with_client_key_pem(b"")
            .expect_err("no key");
        assert!(e.starts_with("no private key found"), "{e}");
    }

    #[test]
    fn server_names_are_checked_and_debug_hides_the_key() {
        assert!(RedisTls::default().with_server_name("redis.test").is_ok());
        assert!(RedisTls::default().with_server_name("10.0.0.7").is_ok());
        assert!(RedisTls::default().with_server_name("a b").is_err());
        let tls = RedisTls {
            key: Some(Key(PrivateKeyDer::Pkcs8(vec![7u8; 40].into()))),
            ..RedisTls::default()
        };
        let shown = format!("{tls:?}");
        assert!(shown.contains("<redacted>"), "{shown}");
        assert!(!shown.contains("7, 7"), "{shown}");
    }
}
