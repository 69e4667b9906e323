//! The byte stream of a connection to a data node: plain TCP, or TLS over
//! it (`rediss://`, with the `redis-tls` feature). TLS is ours, not
//! redis-rs's, so that the name a certificate is verified against can
//! differ from the host dialled ([`RedisTls::with_server_name`]): rustls
//! takes that name apart from the socket, where redis-rs 1.8 verifies
//! against the host it connects to and takes no rustls settings of ours.

use std::fmt;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

use super::super::tls::RedisTls;
use super::protocol;
use crate::error::StoreError;
use crate::store::url::HostPort;

/// A connection's socket.
pub(super) enum Stream {
    /// `redis://`.
    Plain(TcpStream),
    /// `rediss://`. Boxed: a TLS session is over a kilobyte.
    #[cfg(feature = "redis-tls")]
    Tls(Box<tokio_rustls::client::TlsStream<TcpStream>>),
}

/// How connections to data nodes are secured: the settings, and the
/// rustls client made of them once.
#[derive(Clone)]
pub(in crate::store::redis) struct Tls {
    settings: RedisTls,
    #[cfg(feature = "redis-tls")]
    connector: tokio_rustls::TlsConnector,
}

impl fmt::Debug for Tls {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Tls").field(&self.settings).finish()
    }
}

impl Tls {
    /// The client `settings` make.
    ///
    /// # Errors
    /// The settings do not make a TLS client (see [`RedisTls::check`]),
    /// or TLS is not built in.
    pub(in crate::store::redis) fn new(settings: &RedisTls) -> Result<Self, StoreError> {
        #[cfg(feature = "redis-tls")]
        let connector =
            tokio_rustls::TlsConnector::from(settings.client_config().map_err(protocol)?);
        #[cfg(not(feature = "redis-tls"))]
        settings.client_config().map_err(protocol)?;
        Ok(Self {
            settings: settings.clone(),
            #[cfg(feature = "redis-tls")]
            connector,
        })
    }
}

/// `tcp`, secured with `tls` when given: the handshake bounded by
/// `timeout`, the certificate verified against the configured server name
/// or else `node`'s host.
pub(super) async fn secure(
    tcp: TcpStream,
    node: &HostPort,
    tls: Option<&Tls>,
    timeout: Duration,
) -> Result<Stream, StoreError> {
    let Some(tls) = tls else {
        return Ok(Stream::Plain(tcp));
    };
    let name = tls
        .settings
        .name_for(&node.host)
        .map_err(|e| protocol(format!("TLS with {node}: {e}")))?;
    #[cfg(feature = "redis-tls")]
    {
        let handshake = tls.connector.connect(name, tcp);
        match tokio::time::timeout(timeout, handshake).await {
            Ok(Ok(stream)) => Ok(Stream::Tls(Box::new(stream))),
            Ok(Err(e)) => Err(tls_refusal(node, &e)
                .unwrap_or_else(|| super::io_error(&format!("TLS handshake with {node}"), &e))),
            Err(_) => Err(StoreError::new(
                crate::error::StoreErrorKind::Timeout,
                format!("TLS handshake with {node}: no answer within {timeout:?}"),
            )),
        }
    }
    #[cfg(not(feature = "redis-tls"))]
    {
        let _ = (name, tcp, timeout);
        Err(protocol(
            "rediss:// needs tollgate built with the redis-tls feature",
        ))
    }
}

/// The error of a TLS refusal on a connection to `node`, when `e` is one:
/// a certificate not valid for the name, a client certificate the server
/// wants or rejects. A misconfiguration no retry mends: a
/// [`StoreErrorKind::Protocol`](crate::StoreErrorKind::Protocol) error, as
/// a wrong password is.
pub(super) fn tls_refusal(node: &HostPort, e: &io::Error) -> Option<StoreError> {
    #[cfg(feature = "redis-tls")]
    if let Some(tls) = e
        .get_ref()
        .and_then(|inner| inner.downcast_ref::<rustls::Error>())
    {
        return Some(protocol(format!("TLS with {node} refused: {tls}")));
    }
    let _ = (node, e);
    None
}

impl AsyncRead for Stream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_read(cx, buf),
            #[cfg(feature = "redis-tls")]
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Stream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_write(cx, buf),
            #[cfg(feature = "redis-tls")]
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_flush(cx),
            #[cfg(feature = "redis-tls")]
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_shutdown(cx),
            #[cfg(feature = "redis-tls")]
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }
}
