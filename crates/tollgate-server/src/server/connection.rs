//! One HTTP connection of a door, from accept to close ([`serve_conn`]):
//! TLS first when the door has it (ALPN picks `h2` or `http/1.1`), else,
//! on a door that takes HTTP/2 with prior knowledge (h2c), its protocol
//! told by the first bytes ([`sniff`]); then hyper's HTTP/1.1 or HTTP/2
//! server, driven beside the connection's watchdogs.
//!
//! Not hyper-util's `auto` builder: its HTTP/1.1 side cannot bound a
//! request head's size (`max_header_size`), which [`super::MAX_HEAD_BYTES`]
//! needs.

use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::{Buf as _, Bytes, BytesMut};
use http::{Request, Response};
use hyper::body::Incoming;
use hyper::server::conn::{http1, http2};
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::graceful::Watcher;
use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWrite, ReadBuf};
use tokio_rustls::TlsAcceptor;

use super::watchdog::{Activity, Conn, Watchdog, Watched};
use super::{HEAD_TIMEOUT, MAX_HEAD_BYTES};
use crate::inline::Inline;

/// What a door's connections may speak besides plain HTTP/1.1.
#[derive(Clone, Default)]
pub struct Protocols {
    /// HTTP/2 with prior knowledge on the plain listener (h2c), told from
    /// HTTP/1.1 by its preface.
    pub h2c: bool,
    /// TLS on the listener, offering what its config's ALPN says.
    pub tls: Option<TlsAcceptor>,
}

impl std::fmt::Debug for Protocols {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Protocols")
            .field("h2c", &self.h2c)
            .field("tls", &self.tls.is_some())
            .finish()
    }
}

/// The settings of a door's HTTP/1.1 and HTTP/2 connections.
#[derive(Clone)]
pub(super) struct Builders {
    pub(super) h1: http1::Builder,
    pub(super) h2: http2::Builder<TokioExecutor>,
}

impl Builders {
    pub(super) fn new() -> Self {
        let mut h1 = http1::Builder::new();
        h1
            // The watchdog below instead (no timer per request).
            .header_read_timeout(None)
            .max_header_size(MAX_HEAD_BYTES)
            // A client may shut down its sending side once its request is
            // sent (HTTP/1.0 clients and `curl -T` often do): answer it all
            // the same.
            .half_close(true);
        // MAX_HEADERS is hyper's own default: setting it (`max_headers`)
        // would make hyper parse every head into a heap buffer instead of
        // its stack array.
        let mut h2 = http2::Builder::new(TokioExecutor::new());
        h2.max_header_list_size(u32::try_from(MAX_HEAD_BYTES).unwrap_or(u32::MAX))
            .max_concurrent_streams(256);
        Self { h1, h2 }
    }
}

/// The client connection preface of HTTP/2 (RFC 9113 §3.4).
const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// Reads the first bytes of `io` until they are, or cannot be, HTTP/2's
/// preface: whether they are, and the bytes read (given back to the
/// server through [`Rewind`]). An `h2c` upgrade (RFC 7540 §3.2, removed
/// by RFC 9113) is not taken: prior knowledge only.
///
/// # Errors
/// As the read.
pub(super) async fn sniff<I: AsyncRead + Unpin>(io: &mut I) -> std::io::Result<(bool, Bytes)> {
    let mut buf = BytesMut::with_capacity(PREFACE.len());
    while buf.len() < PREFACE.len() && PREFACE.starts_with(&buf) {
        if io.read_buf(&mut buf).await? == 0 {
            break;
        }
    }
    Ok((buf.starts_with(PREFACE), buf.freeze()))
}

/// A stream whose first bytes, read already, are read again.
#[derive(Debug)]
pub(super) struct Rewind<I> {
    pre: Bytes,
    inner: I,
}

impl<I: AsyncRead + Unpin> AsyncRead for Rewind<I> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        if !self.pre.is_empty() {
            let n = self.pre.len().min(buf.remaining());
            buf.put_slice(&self.pre[..n]);
            self.pre.advance(n);
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<I: AsyncWrite + Unpin> AsyncWrite for Rewind<I> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// Where a connection comes from and what watches it.
pub(super) struct Accepted {
    pub(super) name: &'static str,
    pub(super) peer: SocketAddr,
    pub(super) activity: Arc<Activity>,
    pub(super) send_timeout: Duration,
}

/// Serves `stream` with `service` as `protocols` say, until it closes,
/// its watchdogs close it, or a graceful shutdown ends it.
pub(super) async fn serve_conn<S, B>(
    mut stream: Conn,
    protocols: Protocols,
    builders: Builders,
    service: Watched<S>,
    watcher: Watcher,
    accepted: Accepted,
) where
    S: hyper::service::Service<Request<Incoming>, Response = Response<B>> + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    B: http_body::Body + Send + Unpin + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let (name, peer) = (accepted.name, accepted.peer);
    if let Some(tls) = &protocols.tls {
        // Bounded as a request head is: a client that never completes its
        // handshake holds no connection for long.
        let stream = match tokio::time::timeout(HEAD_TIMEOUT, tls.accept(stream)).await {
            Ok(Ok(s)) => s,
            Ok(Err(e)) => {
                tracing::debug!("{name}: connection from {peer}: TLS handshake: {e}");
                return;
            }
            Err(_) => {
                tracing::debug!(
                    "{name}: connection from {peer}: no TLS handshake within {HEAD_TIMEOUT:?}"
                );
                return;
            }
        };
        let h2 = stream.get_ref().1.alpn_protocol() == Some(b"h2");
        let io = Rewind {
            pre: Bytes::new(),
            inner: stream,
        };
        return serve_io(io, h2, &builders, service, watcher, &accepted).await;
    }
    if !protocols.h2c {
        let io = Rewind {
            pre: Bytes::new(),
            inner: stream,
        };
        return serve_io(io, false, &builders, service, watcher, &accepted).await;
    }
    let (h2, pre) = match tokio::time::timeout(HEAD_TIMEOUT, sniff(&mut stream)).await {
        Ok(Ok(sniffed)) => sniffed,
        Ok(Err(e)) => {
            tracing::debug!("{name}: connection from {peer}: {e}");
            return;
        }
        Err(_) => {
            tracing::debug!(
                "{name}: connection from {peer}: nothing sent for {HEAD_TIMEOUT:?}; closing"
            );
            return;
        }
    };
    let io = Rewind { pre, inner: stream };
    serve_io(io, h2, &builders, service, watcher, &accepted).await;
}

async fn serve_io<I, S, B>(
    io: I,
    h2: bool,
    builders: &Builders,
    service: Watched<S>,
    watcher: Watcher,
    accepted: &Accepted,
) where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    S: hyper::service::Service<Request<Incoming>, Response = Response<B>> + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    B: http_body::Body + Send + Unpin + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    if h2 {
        let conn = builders.h2.serve_connection(TokioIo::new(io), service);
        drive(watcher.watch(conn), accepted).await;
    } else {
        let conn = builders.h1.serve_connection(TokioIo::new(io), service);
        drive(watcher.watch(conn), accepted).await;
    }
}

/// Polls `conn` until it ends, beside the connection's watchdogs: one
/// that completes no request head and has no answer in flight for a whole
/// [`HEAD_TIMEOUT`], or whose client takes nothing for a whole send
/// timeout, is closed (dropped).
async fn drive<C, E>(conn: C, accepted: &Accepted)
where
    C: std::future::Future<Output = Result<(), E>>,
    E: std::fmt::Display,
{
    let Accepted {
        name,
        peer,
        activity,
        send_timeout,
    } = accepted;
    let send_timeout = *send_timeout;
    // A request with a body makes hyper wake this task while it is being
    // polled; `Inline` polls again at once (see its module).
    let conn = std::pin::pin!(conn);
    let mut conn = Inline::new(conn);
    let mut watchdog = std::pin::pin!(Watchdog::new(HEAD_TIMEOUT));
    let mut seen = activity.events();
    // Looks four times per send timeout, so a client that takes nothing
    // goes within 1.25 of it.
    let mut send_watch = std::pin::pin!(Watchdog::new(send_timeout / 4));
    loop {
        tokio::select! {
            // The connection first: it is what every wake is for, and no
            // random start to draw.
            biased;
            done = &mut conn => {
                if let Err(e) = done {
                    tracing::debug!("{name}: connection from {peer}: {e}");
                }
                break;
            }
            () = watchdog.as_mut().fired() => {
                let now = activity.events();
                if now == seen && activity.in_flight.load(Ordering::Acquire) == 0 {
                    tracing::debug!(
                        "{name}: connection from {peer}: no request head for {HEAD_TIMEOUT:?}; closing"
                    );
                    break;
                }
                seen = now;
                watchdog.as_mut().rearm();
            }
            () = send_watch.as_mut().fired() => {
                if activity.blocked_for() >= send_timeout {
                    tracing::debug!(
                        "{name}: connection from {peer}: the client took nothing written to it for {send_timeout:?}; closing"
                    );
                    break;
                }
                send_watch.as_mut().rearm();
            }
        }
    }
}
