//! Reaching the upstream: TCP, then for an `https://` upstream the TLS
//! handshake ([`Dialer`]), whose ALPN answer says which protocol the
//! connection speaks ([`Proto`]). The rustls settings are built once, from
//! `[proxy.upstream_tls]`, by the builder every TLS client of tollgate
//! shares ([`crate::tls_client`]).

use std::sync::Arc;
use std::time::Duration;

use http::uri::Authority;
use rustls_pki_types::ServerName;
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;
use tokio_util::either::Either;

use crate::config::UpstreamTls;
use crate::config::upstream::Upstream;
use crate::tls_client::{ClientFiles, client_config};

/// An upstream connection's stream: plain TCP (`http://`, left) or TLS
/// over it (`https://`, right; boxed: rustls's state is large, the TCP
/// stream small). tokio-util's `Either` reads and writes through to
/// either side, vectored writes included.
pub type Io = Either<TcpStream, Box<TlsStream<TcpStream>>>;

/// What a connection speaks, as ALPN decided (HTTP/1.1 without TLS).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Proto {
    /// HTTP/1.1.
    Http1,
    /// HTTP/2: one connection carries every request.
    Http2,
}

/// Opens connections to one upstream.
#[derive(Clone)]
pub struct Dialer {
    /// `host:port`.
    address: String,
    /// The upstream URL's authority (the `:authority` of a request that
    /// came without a host).
    authority: Authority,
    /// The connector and the name sent and verified, for `https://`.
    tls: Option<(TlsConnector, ServerName<'static>)>,
    connect_timeout: Duration,
}

impl std::fmt::Debug for Dialer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Dialer")
            .field("address", &self.address)
            .field("tls", &self.tls.as_ref().map(|(_, name)| name))
            .finish_non_exhaustive()
    }
}

impl Dialer {
    /// A dialer for `upstream`; over TLS set up from `tls` when it is
    /// `https://`. A connection not open (handshake included) within
    /// `connect_timeout` fails.
    ///
    /// # Errors
    /// The TLS settings cannot be built (a file gone since the config was
    /// read, no root), or the name to verify is not one a certificate can
    /// hold.
    pub fn new(
        upstream: &Upstream,
        tls: &UpstreamTls,
        connect_timeout: Duration,
    ) -> Result<Self, String> {
        let address = upstream.address();
        if !upstream.is_tls() {
            return Ok(Self {
                address,
                authority: upstream.authority().clone(),
                tls: None,
                connect_timeout,
            });
        }
        let alpn: &[&[u8]] = if tls.http2 {
            &[b"h2", b"http/1.1"]
        } else {
            &[b"http/1.1"]
        };
        let files = ClientFiles {
            ca_file: tls.ca_file.as_deref(),
            cert_file: tls.cert_file.as_deref(),
            key_file: tls.key_file.as_deref(),
            what: "[proxy.upstream_tls] ca_file, or roots = \"bundled\"",
            roots: tls.roots,
            alpn,
        };
        let config = client_config(&files).map_err(|e| format!("[proxy.upstream_tls]: {e}"))?;
        let name = tls
            .server_name
            .clone()
            .unwrap_or_else(|| upstream.host().to_owned());
        let name = ServerName::try_from(name.clone()).map_err(|_| {
            format!("[proxy.upstream_tls]: {name:?} is not a DNS name or an IP address")
        })?;
        Ok(Self {
            address,
            authority: upstream.authority().clone(),
            tls: Some((TlsConnector::from(Arc::clone(&config)), name)),
            connect_timeout,
        })
    }

    /// The upstream's `host:port`.
    #[must_use]
    pub fn address(&self) -> &str {
        &self.address
    }

    /// The upstream URL's authority.
    #[must_use]
    pub fn authority(&self) -> &Authority {
        &self.authority
    }

    /// Whether a connection may come out HTTP/2 (TLS offering `h2`).
    #[must_use]
    pub fn may_speak_h2(&self) -> bool {
        self.tls.as_ref().is_some_and(|(connector, _)| {
            connector.config().alpn_protocols.iter().any(|p| p == b"h2")
        })
    }

    /// A new connection, and what it speaks.
    ///
    /// # Errors
    /// Refused, no such host, a failed handshake (the certificate not
    /// trusted, a client certificate refused), or not done within the
    /// connect timeout; the message says which.
    pub async fn dial(&self) -> Result<(Io, Proto), String> {
        let address = &self.address;
        let timeout = self.connect_timeout;
        match tokio::time::timeout(timeout, self.open()).await {
            Ok(Ok(open)) => Ok(open),
            Ok(Err(why)) => Err(format!("{address}: {why}")),
            Err(_) => Err(format!("{address}: not connected within {timeout:?}")),
        }
    }

    async fn open(&self) -> Result<(Io, Proto), String> {
        let tcp = TcpStream::connect(&self.address)
            .await
            .map_err(|e| e.to_string())?;
        let _ = tcp.set_nodelay(true);
        let Some((connector, name)) = &self.tls else {
            return Ok((Either::Left(tcp), Proto::Http1));
        };
        let tls = connector
            .connect(name.clone(), tcp)
            .await
            .map_err(|e| format!("TLS handshake: {e}"))?;
        let proto = if tls.get_ref().1.alpn_protocol() == Some(b"h2") {
            Proto::Http2
        } else {
            Proto::Http1
        };
        Ok((Either::Right(Box::new(tls)), proto))
    }
}
